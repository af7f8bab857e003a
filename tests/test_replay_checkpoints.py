"""A replay resumed from a checkpoint must give the view a replay from the first message
gives: the proxy keeps where each session's last replay left off, so that an agent's next
request (its history and the messages since) replays only what is new. Checked on the real
agent runs of ``agent-corpus/`` request by request, on generated histories that make every
cross-call rule fire (stalls on restated reasoning, failing tools, cut notices, new turns)
in both wire formats, with edited, shortened and interleaved histories."""

from __future__ import annotations

import json
from collections import deque
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from loopbreak import Config
from loopbreak._engine.notices import cut_notice
from loopbreak._engine.trip import Trip
from loopbreak._recovery.history import HistoryView, Kind, ReplayCheckpoints, replay
from loopbreak.offline.agent_corpus import load_trajectories
from support import openai_history

CORPUS = Path(__file__).resolve().parents[1] / "agent-corpus"


def state_of(value: Any) -> Any:
    """Everything an object holds, as plain values that compare by content."""
    if value is None or isinstance(value, (bool, int, float, str, bytes, Config)):
        return value
    if isinstance(value, dict):
        return {key: state_of(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, deque)):
        return (type(value).__name__, [state_of(item) for item in value])
    if isinstance(value, (set, frozenset)):
        return frozenset(value)
    fields: dict[str, Any] = {}
    for cls in type(value).__mro__:
        for name in getattr(cls, "__slots__", ()):
            if hasattr(value, name):
                fields[name] = getattr(value, name)
    fields.update(getattr(value, "__dict__", {}))
    return (type(value).__name__, {name: state_of(item) for name, item in fields.items()})


def view_state(view: HistoryView) -> Any:
    return (view.kind, view.reaction, view.cuts_this_turn, view.guidance,
            view.language, state_of(view.session))


def as_sent(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """A request body as the proxy has it: parsed from the bytes of each request anew."""
    result: dict[str, Any] = json.loads(json.dumps({"messages": messages}))
    return result


def check_requests(requests: list[list[dict[str, Any]]], kind: Kind,
                   config: Config | None = None, copy_messages: bool = True
                   ) -> ReplayCheckpoints:
    """Replay each request with and without checkpoints; the views must be equal."""
    cfg = config or Config()
    kept = ReplayCheckpoints(copy_messages=copy_messages)
    for n, messages in enumerate(requests):
        fresh = replay(as_sent(messages), kind, cfg)
        resumed = replay(as_sent(messages), kind, cfg, kept)
        assert view_state(resumed) == view_state(fresh), f"request {n}"
    return kept


def test_every_request_of_the_real_agent_runs_is_judged_the_same() -> None:
    runs = sorted(load_trajectories([CORPUS]), key=lambda t: t.id)
    resumed = requests = 0
    for run in runs:
        # Every request the agent made: the history up to each of its steps.
        history = [openai_history(run, upto) for upto in range(1, len(run.steps) + 1)]
        kept = check_requests(history, "openai")
        resumed += kept.resumed
        requests += len(history)
    assert len(runs) > 500
    # Most requests resume (a run's first few calls cannot: every call is compared then).
    assert resumed > requests // 2


REASONING = (
    "I need to find where the configuration is read. The loader opens the file, parses the "
    "sections and validates each key against its schema; if a key is unknown it raises. ",
    "Let me think about the failing test again. It expects the parser to accept an empty "
    "section, but the validator rejects sections with no keys before the loader runs. ",
    "The output format must match the fixture exactly: two spaces of indent, keys sorted, "
    "and a trailing newline. The writer currently emits tabs, which is why the diff fails. ",
)
RESULTS = ("Error: no such file or directory: src/conf.py (errno 2)",
           "Error: command exited with status 1 after 0.42s",
           "     1\timport json\n     2\tdef load(path):\n     3\t    return json.load(path)",
           "ok")


@st.composite
def histories(draw: st.DrawFn) -> list[tuple[str, Any]]:
    """A session as abstract steps: user texts, model calls (reasoning, answer, tool calls)
    and tool results. Reasoning drawn from a few long paragraphs restates itself (stall),
    results from a few failures repeat (tool failures), answers may carry a cut notice."""
    steps: list[tuple[str, Any]] = [("user", draw(st.sampled_from(["Fix the bug.",
                                                                   "Write the tests."])))]
    for call in range(draw(st.integers(1, 22))):
        if draw(st.integers(0, 9)) == 0:
            steps.append(("user", draw(st.sampled_from(["Go on.", "Try another way.",
                                                        "[loopbreak] steer"]))))
        reasoning = "".join(draw(st.lists(st.sampled_from(REASONING), min_size=0,
                                          max_size=30)))
        answer = draw(st.sampled_from(["", "", "Working on it.",
                                       cut_notice(Trip("cycle", "reasoning", 900, 900))]))
        # Calls without a tool are half of them: a run of those is what stalls.
        tools = draw(st.one_of(st.just([]), st.lists(st.tuples(
            st.sampled_from(["read_file", "run_tests"]),
            st.sampled_from(['{"path": "a.py"}', "{}"]), st.sampled_from(RESULTS)),
            min_size=1, max_size=2)))
        steps.append(("assistant", (call, reasoning, answer, tools)))
    return steps


def openai_messages(steps: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."}]
    for role, value in steps:
        if role == "user":
            out.append({"role": "user", "content": value})
            continue
        call, reasoning, answer, tools = value
        message: dict[str, Any] = {"role": "assistant", "content": answer,
                                   "reasoning_content": reasoning}
        if tools:
            message["tool_calls"] = [{"id": f"c{call}_{j}", "type": "function", "function": {
                "name": name, "arguments": args}} for j, (name, args, _) in enumerate(tools)]
        out.append(message)
        out += [{"role": "tool", "tool_call_id": f"c{call}_{j}", "content": result}
                for j, (_, _, result) in enumerate(tools)]
    return out


def anthropic_messages(steps: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for role, value in steps:
        if role == "user":
            out.append({"role": "user", "content": value})
            continue
        call, reasoning, answer, tools = value
        blocks: list[dict[str, Any]] = []
        if reasoning:
            blocks.append({"type": "thinking", "thinking": reasoning, "signature": "s"})
        if answer:
            blocks.append({"type": "text", "text": answer})
        blocks += [{"type": "tool_use", "id": f"c{call}_{j}", "name": name,
                    "input": json.loads(args)} for j, (name, args, _) in enumerate(tools)]
        out.append({"role": "assistant", "content": blocks})
        if tools:
            out.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": f"c{call}_{j}", "content": result,
                 "is_error": result.startswith("Error")}
                for j, (_, _, result) in enumerate(tools)]})
    return out


# Calls judged from 512 characters of reasoning on: the drawn ones stall often.
STALL_PRONE = Config().replace(**{"stall.min_reasoning_chars": 512})


def requests_of(messages: list[dict[str, Any]], cuts: list[int]) -> list[list[dict[str, Any]]]:
    """The requests a client sends as the history grows, each ending at a message."""
    ends = sorted({max(1, min(len(messages), c)) for c in cuts} | {len(messages)})
    return [messages[:end] for end in ends]


@settings(max_examples=60, deadline=None)
@given(steps=histories(), cuts=st.lists(st.integers(1, 80), max_size=12),
       kind=st.sampled_from(["openai", "anthropic"]), copy_messages=st.booleans())
def test_a_growing_history_is_judged_the_same(steps: list[tuple[str, Any]], cuts: list[int],
                                             kind: Kind, copy_messages: bool) -> None:
    # Kept as copies (a host's objects) or as the requests' own (the proxy's, each request
    # parsed anew): the same views.
    messages = openai_messages(steps) if kind == "openai" else anthropic_messages(steps)
    check_requests(requests_of(messages, cuts), kind, STALL_PRONE, copy_messages)


@settings(max_examples=40, deadline=None)
@given(steps=histories(), other=histories(), data=st.data(),
       kind=st.sampled_from(["openai", "anthropic"]), copy_messages=st.booleans())
def test_edited_shortened_and_interleaved_histories_are_judged_the_same(
        steps: list[tuple[str, Any]], other: list[tuple[str, Any]], data: st.DataObject,
        kind: Kind, copy_messages: bool) -> None:
    render = openai_messages if kind == "openai" else anthropic_messages
    messages = render(steps)
    # Another session that starts the same way: the same checkpoint slot, other messages.
    rival = render(steps[:1] + other[1:])
    requests = [messages, rival, messages]
    # A client that edits an earlier message (drops a result, rewrites an answer) ...
    index = data.draw(st.integers(0, len(messages) - 1))
    edited = json.loads(json.dumps(messages))
    edited[index]["content"] = "edited"
    requests += [edited, edited + messages[len(edited):], messages]
    # ... or sends a shorter history (a retry of an earlier request).
    requests.append(messages[: data.draw(st.integers(1, len(messages)))])
    requests.append(messages)
    check_requests(requests, kind, STALL_PRONE, copy_messages)


def test_a_kept_state_holds_nothing_a_later_replay_works_out() -> None:
    # One call failing the same way, again and again: alternation works out the steps'
    # shapes (a cache each step keeps) after the checkpoint is taken. A kept state that
    # shared those steps with the replay that went on would hold shapes a fresh replay has
    # not worked out yet (found by the test above).
    steps: list[tuple[str, Any]] = [("user", "Fix the bug.")]
    for call in range(5):
        if call >= 2:
            steps.append(("user", "Go on."))
        steps.append(("assistant", (call, "", "", [("read_file", '{"path": "a.py"}',
                                                     RESULTS[0])] * (2 if call == 4 else 1))))
    kinds: list[Kind] = ["anthropic", "openai"]
    for kind in kinds:
        render = anthropic_messages if kind == "anthropic" else openai_messages
        messages = render(steps)
        rival = render(steps[:1] + [("assistant", (0, "", "", []))])
        edited = json.loads(json.dumps(messages))
        edited[3]["content"] = "edited"
        check_requests([messages, rival, messages, edited], kind, STALL_PRONE,
                       copy_messages=False)


def test_a_growing_session_resumes_and_an_edited_one_does_not() -> None:
    steps: list[tuple[str, Any]] = [("user", "Fix the bug.")]
    for call in range(12):
        steps.append(("assistant", (call, REASONING[call % 3] * 20, "",
                                    [("read_file", "{}", RESULTS[0])])))
    messages = openai_messages(steps)
    kept = ReplayCheckpoints()
    replay(as_sent(messages[:-4]), "openai", Config(), kept)
    assert (len(kept), kept.resumed) == (1, 0)
    replay(as_sent(messages), "openai", Config(), kept)
    assert kept.resumed == 1
    edited = as_sent(messages)
    edited["messages"][3]["content"] = "edited"
    replay(edited, "openai", Config(), kept)
    assert kept.resumed == 1
    # A history with fewer calls after the checkpoint than the stall rule compares does not
    # resume either: one of its calls before the checkpoint has its 4-grams compared now.
    replay(as_sent(messages), "openai", Config(), kept)
    replay(as_sent(messages[:-6]), "openai", Config(), kept)
    assert kept.resumed == 1


def test_a_request_changed_after_its_replay_does_not_change_the_checkpoint() -> None:
    # A host may change a request's objects once replayed (LiteLLM adapts messages to the
    # provider in place): the checkpoint keeps copies, so the next request that looks like
    # the changed one is judged as a replay from the start judges it.
    steps: list[tuple[str, Any]] = [("user", "Fix the bug.")]
    for call in range(10):
        steps.append(("assistant", (call, REASONING[call % 3] * 20, "",
                                    [("read_file", "{}", RESULTS[call % 2])])))
    body = as_sent(openai_messages(steps))
    kept = ReplayCheckpoints()
    replay(body, "openai", STALL_PRONE, kept)
    for message in body["messages"][:8]:
        if message["role"] == "tool":
            message["content"] = "ok"
    later = as_sent([*body["messages"], {"role": "user", "content": "Go on."}])
    assert view_state(replay(later, "openai", STALL_PRONE, kept)) == view_state(
        replay(as_sent(later["messages"]), "openai", STALL_PRONE))
    assert kept.resumed == 0


def test_checkpoints_keep_within_their_character_budget() -> None:
    steps: list[tuple[str, Any]] = []
    for call in range(10):
        steps.append(("assistant", (call, REASONING[call % 3] * 10, "", [])))
    budget = 60_000
    kept = ReplayCheckpoints(max_chars=budget)
    sizes = []
    for session in range(12):
        messages = openai_messages([("user", f"Task {session}.")] + steps)
        replay(as_sent(messages), "openai", Config(), kept)
        sizes.append(kept.chars)
        assert kept.chars <= budget
    assert 1 < len(kept) < 12  # the oldest sessions made room for the newest
    # A session larger than half the budget is not kept at all.
    small = ReplayCheckpoints(max_chars=2 * max(sizes[0], 1) - 2)
    replay(as_sent(openai_messages([("user", "Big.")] + steps * 3)), "openai", Config(), small)
    assert len(small) == 0


# --- the requests the proxy forwards instead ------------------------------------------


def _rewrites(kind: Kind) -> list[tuple[str, Any]]:
    from loopbreak._recovery.history import (
        thinking_off_retry,
        with_denial,
        with_guidance,
        with_note,
        without_unsigned_thinking,
    )
    from loopbreak._recovery.requests import thinking_off

    calls = [("d1", "read_file", '{"path": "a.py"}')]
    return [
        ("guidance", lambda body: with_guidance(body, replay(body, kind, Config()))),
        ("note", lambda body: with_note(body, kind, "[loopbreak] steer")),
        ("denial", lambda body: with_denial(body, kind, calls, {"d1": "denied"})),
        *([("unsigned thinking", without_unsigned_thinking)] if kind == "anthropic" else []),
        ("thinking off", lambda body: thinking_off(body, kind, "vllm")),
        ("retry", lambda body: thinking_off_retry(body, kind, "deepseek", "low", "cut")[0]),
    ]


def _failing_session(kind: Kind) -> dict[str, Any]:
    steps: list[tuple[str, Any]] = [("user", "Fix the bug.")]
    for call in range(4):
        steps.append(("assistant", (call, REASONING[0], "", [("read_file", "{}", RESULTS[0])])))
    steps.append(("user", "Go on."))
    messages = openai_messages(steps) if kind == "openai" else anthropic_messages(steps)
    if kind == "anthropic":
        messages[1]["content"][0].pop("signature")  # a thinking block the proxy cut
    body: dict[str, Any] = {"model": "m", "messages": messages, "stream": True,
                            "chat_template_kwargs": {"enable_thinking": True},
                            "metadata": {"user": "u"}}
    return body


def test_rewritten_requests_leave_the_request_as_it_came_and_copy_only_what_changes() -> None:
    import copy

    for kind in ("openai", "anthropic"):
        for name, rewrite in _rewrites(kind):  # type: ignore[arg-type]
            body = _failing_session(kind)  # type: ignore[arg-type]
            before = copy.deepcopy(body)
            out = rewrite(body)
            # What a rewrite on a deep copy gives, and the caller's request unchanged.
            assert out == rewrite(copy.deepcopy(body)), (kind, name)
            assert body == before, (kind, name)
            assert out != before, (kind, name)
            # A message the rewrite did not change is the caller's own object, not a copy.
            shared = [m for m in out["messages"] if any(m is o for o in body["messages"])]
            changed = [m for m in out["messages"] if m not in before["messages"]]
            assert len(shared) + len(changed) == len(out["messages"]), (kind, name)
            assert len(shared) >= len(body["messages"]) - 4, (kind, name)


def test_the_proxys_checkpoints_keep_the_requests_own_messages() -> None:
    # The proxy parses every request anew and never changes one once replayed: its
    # checkpoints keep the request's message objects (a session's first request copies no
    # history); by default (a host's objects, which it may change) they keep copies.
    from loopbreak.proxy.app import proxy_checkpoints

    steps: list[tuple[str, Any]] = [("user", "Fix the bug.")]
    for call in range(12):
        steps.append(("assistant", (call, REASONING[call % 3] * 20, "",
                                    [("read_file", "{}", RESULTS[0])])))
    for kept, copies in ((ReplayCheckpoints(), True), (proxy_checkpoints(), False)):
        body = as_sent(openai_messages(steps))
        replay(body, "openai", Config(), kept)
        (checkpoint,) = kept._kept.values()
        own = [m for m in checkpoint.messages if any(m is o for o in body["messages"])]
        assert checkpoint.messages == body["messages"][: len(checkpoint.messages)]
        assert len(checkpoint.messages) > 2
        assert len(own) == (0 if copies else len(checkpoint.messages))


def test_kept_messages_share_no_container_with_the_request() -> None:
    from loopbreak._recovery.history import _copied

    class HostObject:  # what a host may leave in a message (an SDK object)
        def __init__(self) -> None:
            self.parts = ["a"]

    request = [{"role": "assistant", "content": [{"type": "text", "text": "hi"}],
                "tool_calls": [{"function": {"name": "read", "arguments": "{}"}}],
                "n": 1, "x": 0.5, "ok": True, "none": None, "host": HostObject()}]
    kept = _copied(request)
    assert kept[0]["content"] == request[0]["content"] and kept[0]["n"] == 1

    def containers(value: Any) -> list[int]:
        if isinstance(value, dict):
            return [id(value)] + [i for item in value.values() for i in containers(item)]
        if isinstance(value, list):
            return [id(value)] + [i for item in value for i in containers(item)]
        if isinstance(value, HostObject):
            return [id(value), id(value.parts)]
        return []

    assert not set(containers(kept)) & set(containers(request))
