"""The rules across tool calls beyond the failing call: no-progress, alternation,
repeated-error and monologue, as the session guard applies them; and the failure reading
for hosts that cannot flag one. Synthetic shapes, one behaviour each; the real runs are in
tests/corpus/test_agent_corpus.py."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopbreak import Config, SessionGuard
from loopbreak._engine.call_guard import CallSummary
from loopbreak._engine.monologue import similarity, word_grams
from loopbreak._engine.no_progress import reads_as_waiting
from loopbreak._engine.notices import is_denial, render
from loopbreak._engine.tool_failure import looks_like_failure


def _call(session: SessionGuard, name: str, args: dict[str, object], result: str,
          failed: bool = False) -> tuple[bool, str | None]:
    """Ask, then (if allowed) report ``result``: whether it ran and the guidance's rule."""
    if not session.before_tool(name, args).allowed:
        return False, None
    guidance = session.after_tool(name, args, result, failed=failed)
    return True, guidance.rule if guidance else None


def _session(**changes: object) -> SessionGuard:
    session = SessionGuard(Config().replace(**changes) if changes else Config(), language="en")
    session.start_turn("task")
    return session


# --- no-progress -------------------------------------------------------------------------


def test_the_same_result_three_times_steers_then_the_fourth_call_is_denied() -> None:
    session = _session()
    got = [_call(session, "search", {"q": "x"}, "No results.") for _ in range(4)]
    assert got == [(True, None), (True, None), (True, "no-progress"), (False, None)]
    decision = session.before_tool("search", {"q": "x"})
    assert decision.rule == "no-progress" and decision.reason == render(
        "no_progress.denied", tool="search", calls=3)


def test_a_changed_result_or_changed_arguments_are_progress() -> None:
    session = _session()
    for page in range(6):  # pagination: the same call, a new page each time
        assert _call(session, "list", {"dir": "."}, f"page {page}: a.py b.py") == (True, None)
    for n in range(6):  # lookups: new arguments each time, the same answer
        assert _call(session, "lookup", {"term": f"t{n}"}, "not here") == (True, None)


def test_repeats_between_other_old_calls_count_a_new_call_starts_over() -> None:
    session = _session()
    _call(session, "search", {"q": "x"}, "same spans")
    _call(session, "identify", {}, "nothing relevant: the first look")  # new: counts restart
    for look in ("second", "third"):
        assert _call(session, "search", {"q": "x"}, "same spans") == (True, None)
        _call(session, "identify", {}, f"nothing relevant: the {look} look")
    assert _call(session, "search", {"q": "x"}, "same spans") == (True, "no-progress")
    assert not session.before_tool("search", {"q": "x"}).allowed
    fresh = _session()
    for item in range(3):  # a note between each new item it opens is not a loop
        _call(fresh, "think", {"note": "not what I want"}, "OK.")
        _call(fresh, "click", {"item": item}, f"item {item}")
    assert fresh.before_tool("think", {"note": "not what I want"}).allowed


def test_polling_a_state_in_progress_gets_a_longer_leash() -> None:
    session = _session()
    for _ in range(7):
        assert _call(session, "status", {"job": 7}, "status: running")[0]
    assert _call(session, "status", {"job": 7}, "status: running")[0]  # the 8th still runs
    assert not session.before_tool("status", {"job": 7}).allowed
    assert reads_as_waiting("The job is still running.")
    assert not reads_as_waiting("An error occurred while running the tool.")


# --- alternation ---------------------------------------------------------------------------


def test_two_calls_taking_turns_unchanged_steer_then_the_next_round_is_denied() -> None:
    session = _session()
    rules = []
    for _ in range(3):
        rules.append(_call(session, "open", {"p": "a"}, "page A")[1])
        rules.append(_call(session, "back", {}, "list")[1])
    assert rules[-1] == "alternation" and "alternation" not in rules[:-1]
    decision = session.before_tool("open", {"p": "a"})
    assert not decision.allowed and decision.rule == "alternation"
    assert session.before_tool("search", {"q": "other"}).allowed


def test_a_three_call_cycle_is_watched_and_a_changing_result_breaks_it() -> None:
    session = _session()
    for _ in range(3):
        for name in ("a", "b", "c"):
            _call(session, name, {}, name.upper())
    assert not session.before_tool("a", {}).allowed
    moving = _session()
    for seen in ("first", "second", "third", "fourth"):  # numbers alone would not do
        _call(moving, "open", {"p": "a"}, f"page A, the {seen} visit")
        _call(moving, "back", {}, "list")
    assert moving.before_tool("open", {"p": "a"}).allowed
    short = _session(**{"alternation.max_period": 2})
    for _ in range(3):
        for name in ("a", "b", "c"):
            _call(short, name, {}, name.upper())
    assert short.before_tool("a", {}).allowed


def test_a_result_s_shape_is_read_only_when_a_cycle_could_close(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Alternation compares results with their numbers masked; working that out for every
    # result made a session's first request mask all of its results for nothing.
    from loopbreak._engine import tool_steps

    shaped: list[str] = []
    compute = tool_steps._kept_shapes._compute
    monkeypatch.setattr(tool_steps._kept_shapes, "_compute",
                        lambda text: shaped.append(text) or compute(text))
    tool_steps.clear_caches()
    session = _session()
    for page in range(12):  # every call new: no step repeats the one a cycle back
        _call(session, "open", {"p": page}, f"page {page}: 17 lines")
    assert shaped == []
    # Numbers alone moving between rounds do not break a cycle: the shapes are read.
    for visit in range(3):
        _call(session, "open", {"p": "a"}, f"page A, {visit + 3} visits")
        _call(session, "back", {}, f"list of {visit + 10}")
    assert shaped and not session.before_tool("open", {"p": "a"}).allowed
    tool_steps.clear_caches()


# --- repeated-error ------------------------------------------------------------------------


def test_the_same_error_from_different_calls_steers_then_the_tool_is_denied() -> None:
    session = _session()
    got = [_call(session, "recipe", {"id": n}, "Error: status_code=500", failed=True)
           for n in range(3)]
    assert [rule for _, rule in got] == [None, None, "repeated-error"]
    decision = session.before_tool("recipe", {"id": 9})
    assert not decision.allowed and decision.rule == "repeated-error"


def test_a_success_of_the_tool_forgets_its_error_and_one_call_is_tool_failures() -> None:
    session = _session()
    for n in range(2):
        _call(session, "recipe", {"id": n}, "Error: status_code=500", failed=True)
    _call(session, "recipe", {"id": 5}, "Sangria: wine, fruit")
    assert _call(session, "recipe", {"id": 6}, "Error: status_code=500", failed=True) == (
        True, None)
    same = _session()
    for _ in range(3):
        _call(same, "read", {"p": "a"}, "Error: missing", failed=True)
    assert same.before_tool("read", {"p": "a"}).rule == "tool-failure"
    assert same.before_tool("read", {"p": "b"}).allowed


def test_an_error_from_two_tools_or_in_a_row_blocks_every_tool() -> None:
    shared = _session()
    for name, at in (("click", "a"), ("search", "b"), ("click", "c")):
        _call(shared, name, {"at": at}, "Invalid action!", failed=True)
    assert not shared.before_tool("buy", {}).allowed
    in_a_row = _session()
    for at in "abc":
        _call(in_a_row, "click", {"at": at}, "Invalid action!", failed=True)
    assert not in_a_row.before_tool("search", {"q": "x"}).allowed
    broken = _session()
    for at in "ab":
        _call(broken, "click", {"at": at}, "Invalid action!", failed=True)
    _call(broken, "read", {"page": 1}, "the page")  # something worked in between
    _call(broken, "click", {"at": "c"}, "Invalid action!", failed=True)
    assert broken.before_tool("search", {"q": "x"}).allowed
    assert not broken.before_tool("click", {"at": "d"}).allowed


# --- scope and the user's one more try -----------------------------------------------------


def test_a_user_message_gives_each_call_one_more_try() -> None:
    session = _session()
    for _ in range(3):
        _call(session, "search", {"q": "x"}, "No results.")
    assert not session.before_tool("search", {"q": "x"}).allowed
    session.start_turn("I added the record, try again.")
    assert _call(session, "search", {"q": "x"}, "No results.") == (True, "no-progress")
    assert not session.before_tool("search", {"q": "x"}).allowed
    per_turn = _session(**{"no_progress.scope": "turn"})
    for _ in range(3):
        _call(per_turn, "search", {"q": "x"}, "No results.")
    per_turn.start_turn("again")
    assert _call(per_turn, "search", {"q": "x"}, "No results.") == (True, None)


def test_tool_failure_counts_start_clean_each_turn_as_the_spec_says() -> None:
    session = _session(**{"no_progress.enabled": False})
    for _ in range(3):
        _call(session, "read", {"p": "a"}, "Error: missing", failed=True)
    session.start_turn("again")
    assert session.before_tool("read", {"p": "a"}).failures == 0


def test_a_stored_denial_is_not_a_result_of_the_tool() -> None:
    session = _session()
    for _ in range(3):
        _call(session, "search", {"q": "x"}, "No results.")
    denial = session.before_tool("search", {"q": "x"}).reason or ""
    assert is_denial(denial) and session.after_tool("search", {"q": "x"}, denial) is None
    assert not session.before_tool("search", {"q": "x"}).allowed
    assert is_denial(render("tool.denied", "zh", tool="x", failures=3))
    assert not is_denial(render("no_progress.guidance", tool="x", calls=3) + "\n\nresult")


def test_a_denial_is_read_however_much_whitespace_leads_it_and_only_at_the_start() -> None:
    denial = render("alternation.denied", tool="x", period=2, tools="`a`, `b`", cycles=3)
    for lead in ("", " ", "\n\t ", " " * 500, "\u3000"):
        assert is_denial(lead + denial), repr(lead)
    for text in ("", " ", "[", "[loopbreak]", "ok " + denial, "     1\t" + denial,
                 " [loopbreak] something else " + denial):
        assert not is_denial(text), repr(text)


def test_may_deny_names_the_tools_some_rule_would_deny() -> None:
    session = _session()
    assert not session.may_deny("search")
    for _ in range(3):
        _call(session, "search", {"q": "x"}, "No results.")
    assert session.may_deny("search") and not session.may_deny("read")


# --- monologue -----------------------------------------------------------------------------


def _answer(session: SessionGuard, text: str, tools: tuple[str, ...] = ()) -> str | None:
    session.count_call()
    reaction = session.finish_call(CallSummary(0, len(text), tools, None, None, text)).reaction
    return reaction.kind if reaction else None


def test_the_same_answer_again_steers_then_ends_the_turn() -> None:
    session = _session()
    same = "I have checked everything and the configuration looks correct."
    assert [_answer(session, same) for _ in range(3)] == [None, "steer", "cancel"]
    assert session.finish_call(CallSummary(0, 1, (), None, None, same)).monologue is not None


def test_a_tool_call_a_different_answer_or_a_new_user_message_starts_over() -> None:
    same = "I have checked everything and the configuration looks correct."
    acting = _session()
    assert [_answer(acting, same, ("read",)) for _ in range(3)] == [None, None, None]
    varied = _session()
    assert [_answer(varied, f"Step {n}: reading module {n} of the parser now.")
            for n in range(3)] == [None, None, None]
    spoken = _session()
    _answer(spoken, same)
    spoken.start_turn("Look at the CI log instead.")
    assert _answer(spoken, same) is None
    canned = _session()
    _answer(canned, same)
    canned.start_turn("continue")
    _answer(canned, same)
    canned.start_turn("continue")  # the same reminder again is not a new message
    assert _answer(canned, same) == "steer"


def test_word_gram_similarity_reads_through_punctuation_and_case() -> None:
    a = word_grams("All tests pass. The fix is done.")
    assert similarity(a, word_grams("all tests pass, the fix is DONE")) == 1.0
    assert similarity(a, word_grams("The build fails on Windows only.")) == 0.0
    assert word_grams("OK") == frozenset({"ok"}) and word_grams("") == frozenset()


# --- the failure reading -------------------------------------------------------------------

# Shapes read in real tool output (see agent-corpus/): each a failure a host did not flag.
FAILURES = [
    "Error: flight HAT030 not available on date 2024-05-13",
    '{"error": "request invalid, data error. status_code=500", "response": ""}',
    "Invalid action!",
    "Nothing happens.",
    "No more results.",
    "No results found.",
    "No code found matching the search parameters.",
    "Could not find [Foo Bar]. Similar: ['Foo', 'Bar'].",
    "Span not found: Model.save",
    "Result of search_class(\"X\"):\nCould not find class X in the codebase.",
    "String 'def f():' not found in src/app.py",
    "Your edit could not be applied to the program.",
    "The old_str and new_str are the same. No changes were made.",
    "bash: foo: command not found",
    "Traceback (most recent call last):\n  File \"x.py\"",
    "Process exited with code 2",
]
SUCCESSES = [
    "OK.",
    "You have clicked red.",
    "Transfer successful",
    '{"error": "", "response": "[{\\"id\\": \\"1\\"}]"}',
    "On the shelf 1, you see nothing.",
    "The drawer 1 is closed.",
    "Found 3 code sections.",
    "[]",
    "def error_handler(exc):\n    return None",
    "Result of search_class(\"X\"):\nFound 1 class X in src/x.py.",
]


@pytest.mark.parametrize("text", FAILURES)
def test_failures_hosts_do_not_flag_are_read(text: str) -> None:
    assert looks_like_failure(text)


@pytest.mark.parametrize("text", SUCCESSES)
def test_results_that_are_not_failures_are_left(text: str) -> None:
    assert not looks_like_failure(text)


_BLANKS = st.text(st.sampled_from(" \t\n\r\x0b\x0c\xa0\u2003\u3000"), max_size=6)


@settings(max_examples=400, deadline=None)
@given(_BLANKS, st.sampled_from(FAILURES + SUCCESSES + ["error", "E", "no", "{", ""]),
       st.sampled_from(["", "Result of x:\n", "Output: \t\n"]), _BLANKS,
       st.text(st.sampled_from("ab :{\"\n\t"), max_size=8))
def test_a_failures_start_is_read_past_any_leading_whitespace(
        blank: str, text: str, header: str, after_header: str, tail: str) -> None:
    # The start is matched where the leading whitespace ends (no form starts with a
    # blank), not with a leading \s* that tries every form again for each blank: the same
    # reading as the pattern with \s* in front, whatever the whitespace.
    import re

    from loopbreak._engine import tool_failure

    reference = re.compile(r"\s*" + tool_failure._FAILURE_START.pattern, re.IGNORECASE)
    for head in (blank + text + tail, header + after_header + text + tail):
        expected = bool(reference.match(head))
        found = tool_failure._HEADER_LINE.match(head)
        expected = expected or (found is not None and bool(reference.match(head, found.end())))
        starts = tool_failure._starts_like_failure(head, 0) or (
            found is not None and tool_failure._starts_like_failure(head, found.end()))
        assert starts == expected, head
