"""One set of real agent runs (from ``agent-corpus/``), every face that judges tool calls:
the engine's session guard, the history the proxy and the LiteLLM hook replay on every
request, and the tool hooks an agent loop wraps its tools in. Each must take the same
decisions: the same calls denied before dispatch, the same results given guidance by the
same rule. The proxy and the LiteLLM hook then carry out a denial found in a real run over
real HTTP, and both end a monologue the same way."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import openai
import pytest

from loopbreak import Config, SessionGuard
from loopbreak._engine.notices import render
from loopbreak._engine.tool_failure import looks_like_failure
from loopbreak._recovery.history import replay as replay_history
from loopbreak.integrations.tools import ToolBreaker
from loopbreak.offline.agent_corpus import Trajectory, load_trajectories
from loopbreak.proxy.server import ProxyServer
from loopbreak.testing import Script, ScriptedUpstream, ToolCall
from support import action_arguments, openai_history

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network fetch on import
CORPUS = Path(__file__).resolve().parents[1] / "agent-corpus"
PER_PATTERN = 3
HARD_NEGATIVES = ("fix-then-success", "lookup", "two-retries")


def _selection() -> list[Trajectory]:
    runs = sorted(load_trajectories([CORPUS]), key=lambda t: t.id)
    chosen: list[Trajectory] = []
    for pattern in ("failing-call", "no-progress", "alternation", "repeated-error"):
        chosen += [t for t in runs if t.pattern == pattern][:PER_PATTERN]
    for negative in HARD_NEGATIVES:
        chosen += [t for t in runs if t.hard_negative == negative][:2]
    return chosen


RUNS = _selection()


Decision = tuple[int, str, str]
"""(assistant step, what happened, the rule): ``denied``, or ``guidance`` on its result."""


def _steps(run: Trajectory) -> list[tuple[int, dict[str, Any]]]:
    return list(enumerate(run.steps))


def engine_decisions(run: Trajectory) -> list[Decision]:
    session = SessionGuard(Config(), language="en")
    out: list[Decision] = []
    working, step, pending = False, -1, []
    for i, s in _steps(run):
        if s["role"] == "user":
            if not working:
                session.start_turn(s.get("text") or "")
        elif s["role"] == "assistant":
            step, working = i, bool(s.get("tool_calls"))
            pending = [(c["name"], action_arguments(c.get("arguments")))
                       for c in s.get("tool_calls") or []]
            for name, args in pending:
                decision = session.before_tool(name, json.dumps(args))
                if not decision.allowed:
                    return [*out, (i, "denied", decision.rule or "")]
        elif pending:
            name, args = pending.pop(0)
            result = s.get("result") or ""
            guidance = session.after_tool(name, json.dumps(args), result,
                                          failed=looks_like_failure(result))
            if guidance is not None:
                out.append((step, "guidance", guidance.rule))
    return out


def history_decisions(run: Trajectory) -> list[Decision]:
    """What the proxy and the LiteLLM hook decide: each assistant step's calls judged from
    the history before it, each result's guidance from the history that holds it."""
    out: list[Decision] = []
    config = Config()
    for i, s in _steps(run):
        if s["role"] != "assistant" or not s.get("tool_calls"):
            continue
        view = replay_history({"messages": openai_history(run, i)}, "openai", config)
        for c in s["tool_calls"]:
            if view.denied(c["name"], json.dumps(action_arguments(c.get("arguments")))):
                decision = view.session.before_tool(
                    c["name"], json.dumps(action_arguments(c.get("arguments"))))
                return [*out, (i, "denied", decision.rule or "")]
        # The results of this step, read back from the history that ends with them.
        end = i + 1
        while end < len(run.steps) and run.steps[end]["role"] == "tool":
            end += 1
        after = replay_history({"messages": openai_history(run, end)}, "openai", config)
        tail = len(openai_history(run, i + 1))
        out += [(i, "guidance", g.rule) for (index, _), g in sorted(after.guidance.items())
                if index >= tail]
    return out


def hook_decisions(run: Trajectory) -> list[Decision]:
    """The tool hooks: each call run through a ``ToolBreaker`` whose tool returns what the
    logged tool returned."""
    breaker = ToolBreaker(SessionGuard(Config(), language="en"))
    out: list[Decision] = []
    working = False
    steps = run.steps
    for i, s in _steps(run):
        if s["role"] == "user" and not working:
            breaker.start_turn()
        elif s["role"] == "assistant":
            calls = s.get("tool_calls") or []
            working = bool(calls)
            results = [r.get("result") or "" for r in steps[i + 1:i + 1 + len(calls)]
                       if r["role"] == "tool"]
            for c, result in zip(calls, results, strict=False):
                ran = breaker.run(c["name"], json.dumps(action_arguments(c.get("arguments"))),
                                  lambda result=result, **_: result)
                if not ran.ran:
                    decision = breaker.session.before_tool(
                        c["name"], json.dumps(action_arguments(c.get("arguments"))))
                    return [*out, (i, "denied", decision.rule or "")]
                if ran.guidance is not None:
                    out.append((i, "guidance", ran.guidance.rule))
    return out


def test_the_selection_holds_every_pattern_and_hard_negative() -> None:
    assert {t.pattern for t in RUNS if t.label == "stuck"} == {
        "failing-call", "no-progress", "alternation", "repeated-error"}
    assert {t.hard_negative for t in RUNS if t.label == "healthy"} == set(HARD_NEGATIVES)


@pytest.mark.parametrize("run", RUNS, ids=lambda t: t.id.split(":")[0] + ":" + (
    t.pattern or t.hard_negative or ""))
def test_every_face_takes_the_same_decisions(run: Trajectory) -> None:
    engine = engine_decisions(run)
    assert history_decisions(run) == engine
    assert hook_decisions(run) == engine
    denied = [d for d in engine if d[1] == "denied"]
    if run.label == "stuck":  # acted on within the loop (a loop the log ends after three
        # rounds has no fourth call to deny: the corpus test asks for the next one)
        assert [d for d in engine if run.repeats[0] <= d[0]], run.id
    else:
        assert not denied, run.id


# --- over HTTP: a denial found in a real run, carried out by the proxy and the LiteLLM hook --

ANSWER = "The cocktail API is down; here is what I have so far."


def _first_denial() -> tuple[Trajectory, int, dict[str, Any]]:
    for run in RUNS:
        denials = [d for d in engine_decisions(run) if d[1] == "denied"]
        if run.label == "stuck" and denials:
            step = denials[0][0]
            return run, step, run.steps[step]["tool_calls"][0]
    raise AssertionError("no run of the selection is denied")


def _denied_scripts(call: dict[str, Any]) -> list[Script]:
    repeated = ToolCall.of(call["name"], json.dumps(action_arguments(call.get("arguments"))))
    return [Script.openai(tool_calls=[repeated]), Script.openai(text=ANSWER)]


def _reasked_with_denial(upstream: ScriptedUpstream) -> bool:
    chats = [r for r in upstream.requests if r.path.endswith("/chat/completions")]
    last = chats[-1].body["messages"][-1]
    return len(chats) == 2 and last["role"] == "tool" and \
        str(last["content"]).startswith("[loopbreak] This call to")


def test_the_proxy_carries_out_a_real_runs_denial() -> None:
    run, step, call = _first_denial()
    with ScriptedUpstream(_denied_scripts(call)) as upstream, \
            ProxyServer(upstream.url) as proxy:
        client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="k", max_retries=0)
        chunks = list(client.chat.completions.create(
            model="m", messages=openai_history(run, step), stream=True))  # type: ignore[arg-type]
    tools = [t for c in chunks if c.choices for t in (c.choices[0].delta.tool_calls or [])]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert tools == [] and text == ANSWER  # the denied call never reached the client
    assert _reasked_with_denial(upstream)


def test_the_litellm_hook_carries_out_a_real_runs_denial() -> None:
    litellm = pytest.importorskip("litellm", reason="the LiteLLM face needs litellm")
    from loopbreak.integrations.litellm import LoopbreakGuard

    run, step, call = _first_denial()
    hook = LoopbreakGuard(Config())
    with ScriptedUpstream(_denied_scripts(call)) as upstream:
        request = {"model": "openai/m", "messages": openai_history(run, step), "stream": True,
                   "api_base": upstream.base_url, "api_key": "k", "max_retries": 0}

        async def main() -> list[Any]:
            stream = await litellm.acompletion(**request)
            return [chunk async for chunk in hook.async_post_call_streaming_iterator_hook(
                user_api_key_dict=None, response=stream, request_data=request)]

        chunks = asyncio.run(main())
    tools = [t for c in chunks if c.choices for t in (c.choices[0].delta.tool_calls or [])]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert tools == [] and text == ANSWER
    assert _reasked_with_denial(upstream)


# --- monologue: the same answer again, with only a canned reminder between --------------

SAME = "I have checked the configuration and everything looks correct to me."
NUDGE = {"role": "user", "content": "Please continue."}  # a host's canned reminder
# The first reminder is a new message; from the second on the same words are not: the
# second and third answers make a run of two, which steers the next call.
MONOLOGUE = [{"role": "user", "content": "Why does the deploy fail?"},
             {"role": "assistant", "content": SAME}, NUDGE,
             {"role": "assistant", "content": SAME + " "}, NUDGE,
             {"role": "assistant", "content": "I have checked the configuration, and "
                                              "everything looks correct to me."}, NUDGE]


def test_the_proxy_steers_then_ends_a_monologue() -> None:
    third = [*MONOLOGUE, {"role": "assistant", "content": SAME}, NUDGE]
    with ScriptedUpstream([Script.openai(text="Let me look at the logs.")]) as upstream, \
            ProxyServer(upstream.url) as proxy:
        client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="k", max_retries=0)
        steered = client.chat.completions.create(model="m", messages=MONOLOGUE)  # type: ignore[arg-type]
        ended = client.chat.completions.create(model="m", messages=third)  # type: ignore[arg-type]
        assert len(upstream.requests) == 1  # the third repeat never reached the model
    note = upstream.requests[0].body["messages"][-1]["content"]
    assert note == render("monologue.steer", replies=2)
    assert steered.choices[0].message.content == "Let me look at the logs."
    assert ended.choices[0].message.content == render("monologue.stop", replies=3)


def test_a_new_user_message_ends_the_monologue_run() -> None:
    messages = [*MONOLOGUE[:-1], {"role": "user", "content": "Look at the CI log instead."}]
    view = replay_history({"messages": messages}, "openai", Config())
    assert view.reaction is None
    assert replay_history({"messages": MONOLOGUE}, "openai", Config()).reaction is not None


def test_the_litellm_hook_ends_a_monologue_like_the_proxy() -> None:
    pytest.importorskip("litellm", reason="the LiteLLM face needs litellm")
    from loopbreak.integrations.litellm import LoopbreakGuard

    hook = LoopbreakGuard(Config())
    third = [*MONOLOGUE, {"role": "assistant", "content": SAME}, NUDGE]
    steered = asyncio.run(hook.async_pre_call_hook(None, None, {"messages": MONOLOGUE},
                                                   "acompletion"))
    ended = asyncio.run(hook.async_pre_call_hook(None, None, {"messages": third},
                                                 "acompletion"))
    assert isinstance(steered, dict)
    assert steered["messages"][-1]["content"] == render("monologue.steer", replies=2)
    assert ended == render("monologue.stop", replies=3)


def test_a_replayed_calls_reasoning_grams_are_kept_between_requests() -> None:
    # The proxy replays the history on every request: the last calls' 4-grams are made once.
    from loopbreak._recovery import history

    def body(reasoning: str) -> dict[str, Any]:
        return {"messages": [
            {"role": "user", "content": "Fix the bug."},
            {"role": "assistant", "content": "", "reasoning_content": reasoning,
             "tool_calls": [{"id": "c1", "type": "function",
                             "function": {"name": "read_file", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        ]}

    history.clear_caches()
    # The replay keys its kept sets by whether they may run compiled (judging.compiled).
    compiled = Config().judging.compiled != "off"
    short = "let me read the module and check the failing test first. " * 20
    first = history._reasoning_grams(short, compiled)
    assert len(first) > 40
    hits = history._cached_grams.cache_info().hits
    replay_history(body(short), "openai", Config())
    replay_history(body(short), "openai", Config())
    assert history._cached_grams.cache_info().hits == hits + 2
    assert history._reasoning_grams(short, compiled) is first
    long = "".join(f"step {i}: read file m{i}.py and compare. " for i in range(400))
    assert len(long) > history._CACHED_REASONING_CHARS
    assert history._reasoning_grams(long, compiled) is not history._reasoning_grams(long, compiled)
    history.clear_caches()
    again = history._reasoning_grams(short, compiled)
    assert again is not first and again.sample(0) == first.sample(0)
    # A kept set is read by many requests: nothing waits in it to be taken in by one of them.
    text = "check the test. " * 10
    tiny = history._reasoning_grams(text, compiled)
    assert (tiny._pending, tiny._fresh) == ([], set())
    assert tiny.sample(0) == {text[i : i + 4] for i in range(len(text) - 3)}


@pytest.mark.parametrize("language", ["en", "zh"])
@pytest.mark.parametrize("channel", ["reasoning", "text"])
def test_a_replayed_history_counts_the_cuts_its_answers_carry(language: str,
                                                              channel: str) -> None:
    # The replay looks for the tag before the markers: every cut notice must carry it, and
    # another notice of loopbreak's (a denial) or a mention of the tag is not a cut.
    from loopbreak._engine.notices import cut_notice
    from loopbreak._engine.trip import Trip
    from loopbreak._recovery.history import CUT_MARKERS

    assert all(marker.startswith("[loopbreak]") for marker in CUT_MARKERS)
    notice = cut_notice(Trip("cycle", channel, 900, 900), language)  # type: ignore[arg-type]
    denial = render("tool.denied", language, tool="read_file", failures=3)  # type: ignore[arg-type]
    answers = ["Reading the file first. " + notice, denial, "Done: [loopbreak] is mentioned.",
               notice]
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the bug."}]
    counts = []
    for answer in answers:
        messages.append({"role": "assistant", "content": answer})
        counts.append(replay_history({"messages": messages}, "openai", Config()).cuts_this_turn)
    assert counts == [1, 1, 1, 2]


def test_many_long_sessions_replayed_in_turn_keep_their_tool_results_readings() -> None:
    # A proxy serving thirty agents replays each one's history on every request: 4,500
    # tool results in turn, more than an entry-bounded cache of 4,096 held (every request
    # was replayed cold). Bounded by characters, the second round reads nothing again.
    from loopbreak._engine import tool_failure, tool_steps
    from loopbreak._recovery import history
    from loopbreak.bench.adversarial import history_body

    sessions = [history_body(150, seed=200 + k) for k in range(30)]
    results = {m["content"] for body in sessions for m in body["messages"]
               if m["role"] == "tool"}
    assert len(results) > 4096
    computed: list[str] = []
    caches = (tool_steps._kept_fingerprints, tool_steps._kept_shapes,
              tool_failure._kept_failure_readings)
    originals = [cache._compute for cache in caches]
    try:
        for cache, original in zip(caches, originals):
            def counted(text: str, *extra: Any, _original: Any = original) -> Any:
                computed.append(text)
                return _original(text, *extra)
            cache._compute = counted
        history.clear_caches()
        views = [replay_history(body, "openai", Config()) for body in sessions]
        assert len(computed) >= 2 * len(results)
        computed.clear()
        again = [replay_history(body, "openai", Config()) for body in sessions]
        assert computed == []
        # The same readings: the same guidance on the same results.
        assert [v.guidance.keys() for v in again] == [v.guidance.keys() for v in views]
    finally:
        for cache, original in zip(caches, originals):
            cache._compute = original
        history.clear_caches()
