"""The session guard: stall rule, tool-failure breaker, retry budget, notices."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopbreak import CallGuard, Config, SessionGuard
from loopbreak._engine.notices import TEXTS
from loopbreak._samples import data_text

REASONING = data_text("clean_reasoning.txt")  # 2,776 characters: enough to be judged


def _call(session: SessionGuard, reasoning: str, text: str = "", tool: str | None = None):  # type: ignore[no-untyped-def]
    call = session.start_call()
    call.feed_reasoning(reasoning)
    if text:
        call.feed_text(text)
    if tool:
        call.tool_call_delta(0, name=tool, arguments="{}")
        call.close_tool_call()
    return session.finish_call(call)


def _distinct(i: int) -> str:
    # Reasoning that is new every time: no restatement.
    return "".join(f"Thought {i}.{j}: consider option {i * 97 + j} for the parser. "
                   for j in range(60))


def test_short_calls_are_not_judged() -> None:
    session = SessionGuard()
    outcome = _call(session, "brief thought")
    assert not outcome.stall.judged and outcome.turn == 1 and outcome.step == 1


def test_three_reasoning_only_calls_fire_a_steer() -> None:
    session = SessionGuard()
    verdicts = [_call(session, _distinct(i)).stall for i in range(3)]
    assert [v.reason for v in verdicts] == ["reasoning-only"] * 3
    assert [v.reaction is not None for v in verdicts] == [False, False, True]
    reaction = verdicts[2].reaction
    assert reaction is not None and reaction.kind == "steer" and reaction.fires == 1
    assert "3" in reaction.notice


def test_a_productive_call_resets_the_run() -> None:
    session = SessionGuard()
    _call(session, _distinct(0))
    _call(session, _distinct(1))
    assert _call(session, _distinct(2), text="Done: the fix is in.").stall.run == 0
    assert _call(session, _distinct(3)).stall.reaction is None


def test_restated_call_is_stalled_even_with_output() -> None:
    session = SessionGuard()
    first = _call(session, REASONING, tool="read")
    assert first.stall.judged and not first.stall.stalled
    again = _call(session, REASONING, tool="read")
    assert again.stall.reason == "restated" and again.stall.containment == 1.0


def test_fires_reset_the_count_and_are_capped() -> None:
    config = Config().replace(**{"stall.max_fires": 2})
    session = SessionGuard(config)
    fires = [_call(session, _distinct(i)).stall.reaction for i in range(12)]
    fired = [r for r in fires if r is not None]
    assert [r.fires for r in fired] == [1, 2]
    assert [i for i, r in enumerate(fires) if r] == [2, 5]


def test_cancel_reaction_carries_its_cause() -> None:
    config = Config().replace(**{"stall.reaction": "cancel", "stall.max_stalled_calls": 1})
    reaction = _call(SessionGuard(config), _distinct(0)).stall.reaction
    assert reaction is not None and reaction.kind == "cancel" and reaction.cause == "thinking-loop"


def test_tool_failures_steer_then_deny_then_success_lifts() -> None:
    session = SessionGuard()
    session.start_turn()
    args = {"path": "src/app.py", "line": 12}
    error = "Error: file not found: src/app.py (errno 2) at 0x7f3a9c"
    assert session.before_tool("read", args).allowed
    assert session.after_tool("read", args, error, failed=True, error_code="ENOENT") is None
    second = session.after_tool("read", args, error.replace("0x7f3a9c", "0x7f3a9d"),
                                failed=True, error_code="ENOENT")
    assert second is not None and second.failures == 2 and "file not found" in second.text
    assert second.apply("raw error").endswith("raw error")
    session.after_tool("read", args, error, failed=True, error_code="ENOENT")
    denied = session.before_tool("read", args)
    assert not denied.allowed and denied.reason and denied.failures == 3
    # A changed line number is a new call.
    assert session.before_tool("read", {"path": "src/app.py", "line": 13}).allowed
    # Keys are canonical: the same arguments in another order or as a JSON string match.
    assert not session.before_tool("read", '{"line": 12, "path": "src/app.py"}').allowed
    assert session.after_tool("read", args, "ok") is None
    assert session.before_tool("read", args).allowed


def test_a_new_turn_starts_clean() -> None:
    session = SessionGuard()
    session.start_turn()
    for _ in range(3):
        session.after_tool("bash", {"cmd": "make"}, "exit 2", failed=True)
    assert not session.before_tool("bash", {"cmd": "make"}).allowed
    session.start_turn()
    assert session.before_tool("bash", {"cmd": "make"}).allowed


def test_guidance_can_replace_the_result() -> None:
    session = SessionGuard(Config().replace(**{"tool_failure.guidance": "replace"}))
    session.start_turn()
    session.after_tool("bash", "ls /x", "No such file", failed=True)
    guidance = session.after_tool("bash", "ls /x", "No such file", failed=True)
    assert guidance is not None and guidance.apply("No such file") == guidance.text
    assert "No such file" in guidance.text


def test_retry_budget_is_per_turn() -> None:
    session = SessionGuard()
    session.start_turn()
    assert session.claim_retry() and not session.claim_retry()
    session.start_turn()
    assert session.retries_left == 1 and session.claim_retry()
    stop = SessionGuard(Config().replace(**{"recovery.on_trip": "stop"}))
    assert not stop.claim_retry()


def test_post_trip_hint_goes_with_the_next_tool_result_once() -> None:
    session = SessionGuard()
    call = session.start_call()
    call.feed_reasoning("Go. OK. Now. Writing. " * 100)
    assert call.trip is not None
    session.finish_call(call)
    hint = session.after_tool("read", {"path": "a"}, "contents")
    assert hint is not None and hint.mode == "prefix" and "cut" in hint.text
    assert session.after_tool("read", {"path": "b"}, "contents") is None


def test_notice_counts_cut_characters_and_follows_the_language() -> None:
    session = SessionGuard()
    call: CallGuard = session.start_call()
    trip = call.feed_reasoning("Go. OK. Now. Writing. " * 100)
    assert trip is not None
    english = session.notice(trip, cut_chars=2200)
    assert "2,200" in english and "repeat" in english
    session.observe(data_text("clean_reasoning_zh.txt"))
    chinese = session.notice(trip, cut_chars=2200)
    assert "2,200" in chinese and "重复" in chinese


def test_the_rules_write_in_the_language_of_the_moment_they_speak() -> None:
    # The rules are handed where to ask for the language, not a language: asked when one
    # writes, the answer is what the sample says then, however it moved since the last ask.
    session = SessionGuard()
    session.start_turn()
    chinese = data_text("clean_reasoning_zh.txt") * 6  # past the 4,000 the sample holds
    english = "Let me check the file again and then run the tests. " * 100
    written = []
    for said in (chinese, english, chinese):
        session.observe(said)
        guidance = None
        while guidance is None:
            guidance = session.after_tool("make", {"target": "all"}, "Error: build failed",
                                          failed=True)
        written.append(guidance.text)
        session.start_turn()  # the failure counts start over
    assert [any("\u4e00" <= c <= "\u9fff" for c in text) for text in written] == \
        [True, False, True]


def test_a_language_no_rule_asks_for_is_not_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    # Counting the sample is work only a notice needs: replaying a history held in Chinese
    # whose calls and results no rule speaks of counts the sample once, when the view asks
    # for its language at the end, not at every call and result.
    import json

    import loopbreak._engine.session_guard as module
    from loopbreak._engine.notices import detect_language
    from loopbreak._recovery.history import replay
    from loopbreak.bench.adversarial import history_body

    counted: list[str] = []
    real = module.letter_counts

    def counting(text: str) -> tuple[int, int]:
        counted.append(text)
        return real(text)

    monkeypatch.setattr(module, "letter_counts", counting)
    body = history_body(60, chinese=True)
    view = replay(json.loads(json.dumps(body)), "openai", Config())
    assert not view.guidance and view.reaction is None
    shown = "".join(counted)
    assert 0 < len(shown) <= 4000
    assert view.language == "zh" == detect_language(shown)


def test_notices_never_tell_the_model_to_conclude() -> None:
    forbidden = ["conclude", "final answer", "wrap up", "finish the task", "stop working",
                 "总结", "结束任务", "最终答案"]
    for language in TEXTS.values():
        for text in language.values():
            assert not any(word in text.lower() for word in forbidden), text


def test_language_follows_the_last_characters_shown_however_they_were_shown() -> None:
    # The guard keeps pieces, not one sample string: its language must be the one the
    # last 4,000 characters shown say, at every step, whatever the pieces' sizes.
    import random

    from loopbreak._engine.notices import detect_language

    rng = random.Random(3)
    english = "Let me check the file again and then run the tests. "
    chinese = "让我再检查一下这个文件，然后运行测试。"
    for _ in range(200):
        session = SessionGuard()
        shown = ""
        for _ in range(rng.randint(1, 30)):
            text = "".join(rng.choice((english, chinese)) if rng.random() < 0.5 else english
                           for _ in range(rng.randint(0, 120)))[: rng.choice((0, 5, 900, 5000))]
            session.observe(text)
            shown += text
            assert session.language == detect_language(shown[-4000:])
    assert {SessionGuard(language="zh").language, SessionGuard(language="en").language} == \
        {"zh", "en"}


_SHOWN = st.lists(st.tuples(
    st.text(st.sampled_from("ab .\n7²Ⅷ〇兆々你好世界，。：これはカナ한국어Яé\u4dc0\ufa6e_"),
            max_size=4200) | st.sampled_from(["", "x" * 4100, "你" * 4001]),
    st.booleans()), max_size=40)


@settings(max_examples=300, deadline=None)
@given(_SHOWN)
def test_language_kept_as_the_sample_moves_is_the_whole_samples(
        pieces: list[tuple[str, bool]]) -> None:
    # The guard counts the sample's letters only when its language is asked for, and keeps
    # the answer until it is shown more; asked or not after each piece, its language is
    # what the last 4,000 characters say, whatever was asked when.
    from loopbreak._engine.notices import detect_language

    session = SessionGuard()
    shown = ""
    for text, ask in pieces:
        session.observe(text)
        shown += text
        if ask:
            assert session.language == detect_language(shown[-4000:])
    assert session.language == detect_language(shown[-4000:])


def test_language_at_the_edge_counts_only_what_is_in_the_sample() -> None:
    # A sample exactly at the edge (CJK letters a fifth of the letters, or one letter off),
    # its oldest piece partly out of it, asked before the piece came that moved it or after,
    # and pieces leaving whole: a letter counted that is out of the sample, one missed, or
    # an answer kept after the sample moved, flips the language.
    from itertools import product

    from loopbreak._engine.notices import detect_language

    checked = 0
    for cjk, off, cut, split, asks in product((1, 37, 799), (-1, 0, 1), (0, 1, 250, 2000),
                                              (False, True), product((False, True), repeat=3)):
        ascii_letters = 4 * cjk + off  # zh while 4 * cjk >= the other letters
        head = "a" * (ascii_letters + cut)
        filler = "." * (4000 - ascii_letters - cjk)  # not letters
        pieces = [head[:len(head) // 2], head[len(head) // 2:]] if split else [head]
        pieces += [filler + "你" * cjk] if filler else ["你" * cjk]
        pieces = ["早" * 300] + pieces  # a CJK piece that leaves whole, counted
        session, shown = SessionGuard(), ""
        for i, text in enumerate(pieces):
            session.observe(text)
            shown += text
            if asks[min(i, 2)]:
                assert session.language == detect_language(shown[-4000:])
        expected = detect_language(shown[-4000:])
        assert session.language == expected
        assert expected == ("zh" if off <= 0 else "en")
        checked += 1
    assert checked == 3 * 3 * 4 * 2 * 8
    # A piece partly out of the sample after one piece and gone with the next (asked after
    # each piece, or only at the end).
    for first, cut, cjk, off, ask in product((300, 1999), (1, 100), (1, 200), (-1, 0, 1),
                                             (False, True)):
        pieces = ["早" * first, "." * (4000 - first + cut),
                  "a" * (4 * cjk + off) + "你" * cjk + "." * (first - cut)]
        session, shown = SessionGuard(), ""
        for text in pieces:
            session.observe(text)
            shown += text
            if ask:
                assert session.language == detect_language(shown[-4000:])
        assert session.language == detect_language(shown[-4000:]) == (
            "zh" if off <= 0 else "en")


def test_the_sample_keeps_its_oldest_piece_while_a_character_of_it_is_in() -> None:
    # One CJK letter and non-letters after it: the letter is in the sample until 4,000
    # characters follow it, and the guard keeps what it holds, no more, however long it runs.
    import pickle

    for after in (3998, 3999, 4000, 4001):
        session = SessionGuard()
        session.observe("你")
        session.observe("." * after)
        assert session.language == ("zh" if after < 4000 else "en"), after
    session = SessionGuard()
    sizes = []
    for i in range(2000):
        session.observe("你好。" * (1 + i % 700))
        sizes.append(len(pickle.dumps(session)))
    assert max(sizes[1000:]) <= max(sizes[:1000])


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_letters_are_counted_as_isalpha_counts_them(text: str) -> None:
    import re

    from loopbreak._engine.notices import letter_counts

    cjk = sum(map(str.isalpha, re.findall("[\u3400-\u9fff\uf900-\ufaff]", text)))
    assert letter_counts(text) == (cjk, sum(map(str.isalpha, text)))
    halves = letter_counts(text[:len(text) // 2]), letter_counts(text[len(text) // 2:])
    assert letter_counts(text) == (halves[0][0] + halves[1][0], halves[0][1] + halves[1][1])
