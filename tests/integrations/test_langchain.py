"""``loopbreak.integrations.langchain`` with real LangChain agents (``create_agent``) and
``langchain-openai``'s ``ChatOpenAI`` against the scripted upstream."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("langchain.agents.middleware", reason="needs langchain>=1.0 (agent middleware)")
pytest.importorskip("langchain_openai", reason="needs langchain-openai")

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from loopbreak import Config, RecoveryConfig
from loopbreak._samples import clean_reasoning, verbatim_loop
from loopbreak.integrations import langchain as lb_langchain
from loopbreak.integrations.langchain import LoopbreakMiddleware, LoopCutError
from loopbreak.testing import Script, ScriptedUpstream, Text, ToolCall
from support import point_openai_at, run_doc_example

LOOP = verbatim_loop().text
NOTICE = "[loopbreak] Your reasoning was cut"
QUESTION = {"messages": [{"role": "user", "content": "Fix the retry in put_chunk."}]}


def _model(up: ScriptedUpstream, **kwargs: Any) -> ChatOpenAI:
    return ChatOpenAI(model="deepseek-reasoner", base_url=up.base_url, api_key="sk-test",
                      max_retries=0, **kwargs)


def _endless(**fields: Any) -> Script:
    """A reasoning loop that never ends on its own, dripped like a real upstream."""
    return Script.openai(reasoning=LOOP, piece_chars=16, **fields).repeated(0) \
        .delivered(delay=0.0005)


def _disconnected(up: ScriptedUpstream, index: int) -> Any:
    record = up.wait_for_requests(index + 1)[index]
    assert record.wait(5) and record.outcome == "client-disconnected"
    return record


def _ai(messages: list[Any]) -> list[AIMessage]:
    return [m for m in messages if isinstance(m, AIMessage)]


# -- model calls: cut lawfully, recover --------------------------------------------------


@pytest.mark.parametrize(("reasoning_field", "flavour"),
                         [("reasoning_content", "deepseek"), ("reasoning", "openai")])
def test_a_reasoning_loop_is_cut_and_the_agent_carries_on(
        upstream: ScriptedUpstream, reasoning_field: str, flavour: Any) -> None:
    # ChatOpenAI drops reasoning deltas (DeepSeek's reasoning_content, vLLM's reasoning);
    # the guard reads them from the SDK chunks underneath.
    upstream.enqueue(_endless(reasoning_field=reasoning_field, flavour=flavour),
                     Script.openai(text="Bound the loop to 5 attempts."))
    middleware = LoopbreakMiddleware()
    model = _model(upstream, extra_body={"thinking": {"type": "enabled"}})
    result = create_agent(model, tools=[], middleware=[middleware]).invoke(QUESTION)

    (answer,) = _ai(result["messages"])
    assert isinstance(answer.content, str)
    assert answer.content.startswith(NOTICE)
    assert answer.content.endswith("\n\nBound the loop to 5 attempts.")
    assert answer.tool_calls == [] and answer.response_metadata["finish_reason"] == "stop"
    assert answer.response_metadata["loopbreak"]["rule"] == "cycle"
    # The looping stream was closed: the upstream saw the client go, after a few thousand
    # characters of a loop that would never have ended.
    record = _disconnected(upstream, 0)
    (trip,) = middleware.trips
    assert trip.channel == "reasoning" and trip.offset < 2_000
    assert record.events_sent * 16 < 10 * trip.offset
    # The retry: thinking off, the notice as the newest user message.
    retry = upstream.requests[1].body
    assert retry["thinking"] == {"type": "disabled"} and retry["stream"] is True
    assert retry["messages"][-1] == {"role": "user", "content": answer.content.split("\n\n")[0]}
    assert len(upstream.requests) == 2


def test_stop_keeps_the_cut_text_and_never_a_truncated_tool_call(
        upstream: ScriptedUpstream) -> None:
    # A visible-text loop that would have ended in a tool call: the cut lands in the text.
    upstream.enqueue(Script.openai(text=LOOP, piece_chars=16,
                                   tool_calls=[ToolCall.of("read", {"path": "a.py"})])
                     .delivered(delay=0.0005))
    config = Config(recovery=RecoveryConfig(on_trip="stop"))
    agent = create_agent(_model(upstream), tools=[_noop_read()],
                         middleware=[LoopbreakMiddleware(config)])
    result = agent.invoke(QUESTION)

    (answer,) = _ai(result["messages"])
    text, notice = str(answer.content).rsplit("\n\n", 1)
    assert LOOP.startswith(text) and 256 <= len(text) < 2_000
    assert notice.startswith("[loopbreak] Your output was cut after")
    assert answer.tool_calls == [] and answer.invalid_tool_calls == []
    assert _disconnected(upstream, 0).events_sent < len(LOOP) // 16
    assert len(upstream.requests) == 1  # a text loop is not re-asked


def test_a_trip_inside_a_tool_call_waits_for_it_to_close(upstream: ScriptedUpstream) -> None:
    # Text that loops after a tool call opened (OpenAI streams never close one before the
    # finish): the cut waits, and the call reaches the agent whole.
    pieces = [ToolCall.of("read", {"path": "a.py"}, id="call_a"),
              *(Text(LOOP[i:i + 16]) for i in range(0, 4_000, 16))]
    upstream.enqueue(Script.from_pieces(pieces, dialect="openai"), Script.openai(text="Done."))
    config = Config(recovery=RecoveryConfig(on_trip="stop"))
    agent = create_agent(_model(upstream), tools=[_noop_read()],
                         middleware=[LoopbreakMiddleware(config)])
    result = agent.invoke(QUESTION)

    first, last = _ai(result["messages"])
    assert first.tool_calls == [{"name": "read", "args": {"path": "a.py"}, "id": "call_a",
                                 "type": "tool_call"}]
    assert first.response_metadata["finish_reason"] == "tool_calls"
    assert first.response_metadata["loopbreak"]["channel"] == "text"
    assert str(first.content).endswith("Do not repeat that output. Carry on with the task "
                                       "from where it stands.")
    assert last.content == "Done."


def test_error_mode_raises(upstream: ScriptedUpstream) -> None:
    upstream.enqueue(_endless())
    config = Config(recovery=RecoveryConfig(on_trip="error"))
    agent = create_agent(_model(upstream), tools=[], middleware=[LoopbreakMiddleware(config)])
    with pytest.raises(LoopCutError) as caught:
        agent.invoke(QUESTION)
    assert caught.value.trip.rule == "cycle" and caught.value.notice.startswith(NOTICE)
    _disconnected(upstream, 0)


def test_async_agent(upstream: ScriptedUpstream) -> None:
    upstream.enqueue(_endless(), Script.openai(text="Bounded."))
    agent = create_agent(_model(upstream), tools=[], middleware=[LoopbreakMiddleware()])

    async def main() -> Any:
        return await agent.ainvoke(QUESTION)

    (answer,) = _ai(asyncio.run(main())["messages"])
    assert str(answer.content).startswith(NOTICE) and str(answer.content).endswith("Bounded.")
    _disconnected(upstream, 0)


@pytest.mark.parametrize("run", ["sync", "async"])
def test_the_callback_path_cuts_other_chat_models(upstream: ScriptedUpstream,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  run: str) -> None:
    # Chat models not built on langchain-openai are judged on their message chunks; a
    # trip raises out of the token callback, which ends the HTTP stream. ChatOpenAI stands
    # in for one here (with the SDK-client hook off it is judged like any other model).
    monkeypatch.setattr(lb_langchain, "_is_openai", lambda model: False)
    upstream.enqueue(Script.openai(text=LOOP, piece_chars=16).repeated(0)
                     .delivered(delay=0.0005))
    middleware = LoopbreakMiddleware(Config(recovery=RecoveryConfig(on_trip="stop")))
    agent = create_agent(_model(upstream), tools=[], middleware=[middleware])
    result = agent.invoke(QUESTION) if run == "sync" else asyncio.run(agent.ainvoke(QUESTION))

    (answer,) = _ai(result["messages"])
    text, notice = str(answer.content).rsplit("\n\n", 1)
    assert LOOP.startswith(text) and len(text) == middleware.trips[0].offset - 16
    assert notice.startswith("[loopbreak] Your output was cut after")
    assert answer.response_metadata["loopbreak"]["rule"] == "cycle"
    _disconnected(upstream, 0)


def test_a_clean_stream_is_unchanged(upstream: ScriptedUpstream) -> None:
    """Same messages, same tool calls, same requests, with and without the middleware."""
    first = Script.openai(reasoning=clean_reasoning().text, text="Reading it first.",
                          piece_chars=9,
                          tool_calls=[ToolCall.of("read", {"path": "a.py"}, id="call_a")])
    second = Script.openai(text="The loop has no bound; cap it at 5 attempts.", piece_chars=5)
    runs = []
    for middleware in ([], [LoopbreakMiddleware()]):
        upstream.reset([first, second])
        agent = create_agent(_model(upstream, streaming=True), tools=[_noop_read()],
                             middleware=middleware)
        messages = agent.invoke(QUESTION)["messages"]
        runs.append(([(m.type, m.content, getattr(m, "tool_calls", None),
                       getattr(m, "tool_call_id", None), m.response_metadata)
                      for m in messages],
                     [r.body for r in upstream.wait_for_requests(2)]))
    (plain, plain_bodies), (guarded, guarded_bodies) = runs
    assert guarded == plain and guarded_bodies == plain_bodies
    # The upstream settles an exchange's outcome just after its last byte: wait for it.
    assert all(r.wait(2) for r in upstream.requests)
    assert [r.outcome for r in upstream.requests] == ["completed", "completed"]


def test_the_stall_rule_steers_the_next_call(upstream: ScriptedUpstream) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    # Three calls in a row that only think (no text, no tool call): the 4th call is steered.
    thinking = Script.openai(reasoning=clean_reasoning().text, piece_chars=64)
    upstream.enqueue(thinking, thinking, thinking, Script.openai(text="Doing it."))
    agent = create_agent(_model(upstream), tools=[], checkpointer=InMemorySaver(),
                         middleware=[LoopbreakMiddleware()])
    thread = {"configurable": {"thread_id": "stalled"}}
    for _ in range(4):
        result = agent.invoke({"messages": [{"role": "user", "content": "Go on."}]}, thread)
    bodies = [r.body for r in upstream.wait_for_requests(4)]
    assert all(b["messages"][-1] == {"role": "user", "content": "Go on."} for b in bodies[:3])
    assert bodies[3]["messages"][-1]["content"].startswith(
        "[loopbreak] Your last 3 model calls only thought")
    assert result["messages"][-1].content == "Doing it."
    # The note steered that call only: it is not in the conversation.
    assert not any("model calls only thought" in str(m.content) for m in result["messages"])


# -- tool calls: the tool-failure breaker -------------------------------------------------


def _noop_read() -> Any:
    @tool
    def read(path: str) -> str:
        """Read a file."""
        return f"contents of {path}"

    return read


def _repeated_calls(times: int, final: str) -> list[Script]:
    call = {"path": "/srv/app/settings.toml"}
    return [Script.openai(tool_calls=[ToolCall.of("read_file", call, id=f"call_{i}")])
            for i in range(times)] + [Script.openai(text=final)]


@pytest.mark.parametrize("failing", ["raises", "returns-error"])
def test_a_repeated_failing_tool_call_gets_guidance_then_is_denied(
        upstream: ScriptedUpstream, failing: str) -> None:
    runs: list[str] = []

    @tool
    def read_file(path: str) -> str:
        """Read a text file."""
        runs.append(path)
        if failing == "raises":
            raise FileNotFoundError(f"[Errno 2] No such file or directory: '{path}'")
        return f"Error: no such file: {path}"

    upstream.enqueue(*_repeated_calls(4, "The file is not there; which path did you mean?"))
    agent = create_agent(_model(upstream), tools=[read_file],
                         middleware=[LoopbreakMiddleware(handle_tool_errors=True)])
    result = agent.invoke(QUESTION)

    results = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert len(runs) == 3  # the 4th identical call never ran
    # A returned error keeps the status the tool gave it; the denial is an error.
    ran = "error" if failing == "raises" else "success"
    assert [m.status for m in results] == [ran] * 3 + ["error"]
    assert [m.tool_call_id for m in results] == ["call_0", "call_1", "call_2", "call_3"]
    assert not str(results[0].content).startswith("[loopbreak]")
    for failures, message in ((2, results[1]), (3, results[2])):
        guidance, error = str(message.content).split("\n\n", 1)
        assert guidance.startswith("[loopbreak] This exact call to `read_file` has now failed "
                                   f"{failures} times")
        assert "No such file" in error or "no such file" in error
    assert str(results[3].content).startswith(
        "[loopbreak] This call to `read_file` was not run: the identical call already failed "
        "3 times")
    assert result["messages"][-1].content == "The file is not there; which path did you mean?"
    # The model read the denial.
    last_request = upstream.wait_for_requests(5)[4].body["messages"]
    assert last_request[-1]["role"] == "tool" and "was not run" in last_request[-1]["content"]


def test_the_same_result_again_is_denied_without_reading_it_as_a_failure(
        upstream: ScriptedUpstream) -> None:
    runs: list[str] = []

    @tool
    def read_file(path: str) -> str:
        """Read a text file."""
        runs.append(path)
        return "(the file is empty)"  # not a failure: the same non-answer each time

    upstream.enqueue(*_repeated_calls(4, "The settings file is empty."))
    agent = create_agent(_model(upstream), tools=[read_file],
                         middleware=[LoopbreakMiddleware()])
    result = agent.invoke(QUESTION)
    results = [str(m.content) for m in result["messages"] if isinstance(m, ToolMessage)]
    assert len(runs) == 3
    assert results[2].startswith("[loopbreak] This exact call to `read_file` has now returned "
                                 "the same result 3 times")
    assert results[3].startswith("[loopbreak] This call to `read_file` was not run: the "
                                 "identical call already returned the same result 3 times")
    assert result["messages"][-1].content == "The settings file is empty."


def test_a_raising_tool_still_raises_unless_asked(upstream: ScriptedUpstream) -> None:
    @tool
    def read_file(path: str) -> str:
        """Read a text file."""
        raise FileNotFoundError(path)

    upstream.enqueue(*_repeated_calls(1, "unused"))
    agent = create_agent(_model(upstream), tools=[read_file],
                         middleware=[LoopbreakMiddleware()])
    with pytest.raises(FileNotFoundError):
        agent.invoke(QUESTION)


def test_a_new_user_message_starts_a_new_turn(upstream: ScriptedUpstream) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    runs: list[str] = []

    @tool
    def read_file(path: str) -> str:
        """Read a text file."""
        runs.append(path)
        return "Error: no such file"

    upstream.enqueue(*_repeated_calls(4, "Not there."), *_repeated_calls(1, "Still not."))
    agent = create_agent(_model(upstream), tools=[read_file], checkpointer=InMemorySaver(),
                         middleware=[LoopbreakMiddleware()])
    thread = {"configurable": {"thread_id": "t1"}}
    agent.invoke(QUESTION, thread)
    assert len(runs) == 3
    result = agent.invoke({"messages": [{"role": "user", "content": "Try once more."}]}, thread)
    assert len(runs) == 4  # the denial does not outlive its turn
    assert result["messages"][-1].content == "Still not."


async def _arun(agent: Any) -> Any:
    return await agent.ainvoke(QUESTION)


def test_async_tool_breaker(upstream: ScriptedUpstream) -> None:
    runs: list[str] = []

    @tool
    async def read_file(path: str) -> str:
        """Read a text file."""
        runs.append(path)
        return "Error: no such file"

    upstream.enqueue(*_repeated_calls(4, "Not there."))
    agent = create_agent(_model(upstream), tools=[read_file],
                         middleware=[LoopbreakMiddleware()])
    result = asyncio.run(_arun(agent))
    assert len(runs) == 3
    assert "was not run" in str(result["messages"][-2].content)


# -- the README section ---------------------------------------------------------------------


def test_the_readme_example_runs(upstream: ScriptedUpstream,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    point_openai_at(monkeypatch, upstream)
    upstream.enqueue(_endless(), *_repeated_calls(4, "settings.toml is not at that path."))
    printed = run_doc_example("langchain")
    assert f"ai: {NOTICE}" in printed
    assert printed.count("[loopbreak] This exact call to `read_file` has now failed") == 2
    assert "[loopbreak] This call to `read_file` was not run" in printed
    assert printed.rstrip().endswith("ai: settings.toml is not at that path.")
    assert upstream.requests[1].body["thinking"] == {"type": "disabled"}
    _disconnected(upstream, 0)
