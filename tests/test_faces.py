"""The same scripted situations through every face that cuts a model's answer: the proxy's
streamed route and its whole (non-streamed) route (the openai SDK through ``ProxyServer``, with
``stream=True`` and without), the openai wrapper, the LiteLLM hook (``litellm.acompletion``'s
real stream) and the LangChain middleware (a real agent over ``ChatOpenAI``). Each must end the
same way: the same finish reason, the notice shown, the tool calls the client got, the same
number of model requests, thinking off on the retry, an error where the configuration asks for
one. They all carry out one plan (``loopbreak._recovery``); this table is what keeps them from
drifting apart again. Where a face cannot do what the others do (LangChain's agent runs the
tool before anyone sees the loop; a whole answer that holds an answer or tool calls is already
made and paid for), the cell says so and why. The faces that read the request's own history
(the proxy's two routes, the LiteLLM hook) also deny a call that failed three times alike: not
relayed, the model re-asked with the reason, and a model that insists ends with the reason.
The tool hooks of the agent frameworks are tests/test_tool_faces.py's table."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import openai
import pytest

from loopbreak import Config
from loopbreak._recovery import LoopCutError
from loopbreak._samples import verbatim_loop
from loopbreak.integrations.openai import create_guarded
from loopbreak.proxy.server import ProxyServer
from loopbreak.testing import Script, ScriptedUpstream, ToolCall

litellm = pytest.importorskip("litellm", reason="the LiteLLM face needs litellm")
pytest.importorskip("langchain.agents.middleware", reason="the LangChain face needs langchain>=1")
pytest.importorskip("langchain_openai", reason="the LangChain face needs langchain-openai")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

LOOP = verbatim_loop().text
ANSWER = "Bound the retry to three attempts."
MESSAGES = [{"role": "user", "content": "Fix the retry in put_chunk."}]
THINKING = {"thinking": {"type": "enabled"}}


@dataclass(frozen=True)
class Outcome:
    finish: str | None
    notice: bool
    answered: bool
    tools: tuple[str, ...]
    requests: int
    retry_thinking: Any
    error: bool


@dataclass(frozen=True)
class Seen:
    """What a face's client saw."""

    text: str = ""
    finish: str | None = None
    error: bool = False
    tools: tuple[str, ...] = ()
    """The names of the tool calls the client got."""


def _outcome(seen: Seen, upstream: ScriptedUpstream) -> Outcome:
    chats = [r for r in upstream.requests if r.path.endswith("/chat/completions")]
    return Outcome(seen.finish, "[loopbreak]" in seen.text, seen.text.endswith(ANSWER),
                   seen.tools, len(chats),
                   chats[1].body.get("thinking") if len(chats) > 1 else None, seen.error)


def _stream_seen(chunks: list[Any]) -> Seen:
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finishes = [c.choices[0].finish_reason for c in chunks
                if c.choices and c.choices[0].finish_reason]
    tools = tuple(call.function.name for c in chunks if c.choices
                  for call in (c.choices[0].delta.tool_calls or [])
                  if call.function and call.function.name)
    return Seen(text, finishes[-1] if finishes else None, tools=tools)


def _whole_seen(answer: Any) -> Seen:
    """What the client of a whole answer got: the message and its finish reason."""
    choice = answer.choices[0]
    return Seen(choice.message.content or "", choice.finish_reason,
                tools=tuple(call.function.name for call in choice.message.tool_calls or []))


def through_proxy(upstream: ScriptedUpstream, config: Config) -> Seen:
    with ProxyServer(upstream.url, config=config) as proxy:
        client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="k", max_retries=0)
        chunks: list[Any] = []
        try:
            for chunk in client.chat.completions.create(
                    model="m", messages=MESSAGES, stream=True, extra_body=THINKING):  # type: ignore[arg-type]
                chunks.append(chunk)
        except openai.APIError:
            return Seen(error=True)
    return _stream_seen(chunks)


def through_proxy_whole(upstream: ScriptedUpstream, config: Config) -> Seen:
    with ProxyServer(upstream.url, config=config) as proxy:
        client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="k", max_retries=0)
        try:
            answer = client.chat.completions.create(
                model="m", messages=MESSAGES, extra_body=THINKING)  # type: ignore[arg-type]
        except openai.APIError:
            return Seen(error=True)
    return _whole_seen(answer)


def through_openai_wrapper(upstream: ScriptedUpstream, config: Config) -> Seen:
    client = openai.OpenAI(base_url=upstream.base_url, api_key="k", max_retries=0)
    try:
        chunks = list(create_guarded(client, config=config, model="m", messages=MESSAGES,
                                     extra_body=THINKING))
    except LoopCutError:
        return Seen(error=True)
    return _stream_seen(chunks)


def through_litellm(upstream: ScriptedUpstream, config: Config) -> Seen:
    from loopbreak.integrations.litellm import LoopbreakGuard

    hook = LoopbreakGuard(config)
    request = {"model": "openai/deepseek-reasoner", "messages": MESSAGES, "stream": True,
               "api_base": upstream.base_url, "api_key": "k", "max_retries": 0,
               "extra_body": THINKING}

    async def main() -> Seen:
        stream = await litellm.acompletion(**request)
        chunks: list[Any] = []
        try:
            async for chunk in hook.async_post_call_streaming_iterator_hook(
                    user_api_key_dict=None, response=stream, request_data=request):
                chunks.append(chunk)
        except LoopCutError:
            return Seen(error=True)
        return _stream_seen(chunks)

    return asyncio.run(main())


def through_langchain(upstream: ScriptedUpstream, config: Config) -> Seen:
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    from loopbreak.integrations.langchain import LoopbreakMiddleware

    @tool
    def write(path: str, content: str) -> str:
        """Write a file."""
        return "written"

    model = ChatOpenAI(model="deepseek-reasoner", base_url=upstream.base_url, api_key="k",
                       max_retries=0, extra_body=THINKING)
    agent = create_agent(model, tools=[write], middleware=[LoopbreakMiddleware(config)])
    try:
        result = agent.invoke({"messages": MESSAGES})
    except LoopCutError:
        return Seen(error=True)
    first = next(m for m in result["messages"] if isinstance(m, AIMessage))
    text = first.content if isinstance(first.content, str) else str(first.content)
    return Seen(text, first.response_metadata.get("finish_reason"),
                tools=tuple(call["name"] for call in first.tool_calls))


FACES: dict[str, Callable[[ScriptedUpstream, Config], Seen]] = {
    "proxy": through_proxy,
    "proxy-whole": through_proxy_whole,
    "openai-wrapper": through_openai_wrapper,
    "litellm-hook": through_litellm,
    "langchain": through_langchain,
}


def _reasoning_loop() -> Script:
    return Script.openai(reasoning=LOOP, piece_chars=16, flavour="deepseek")


def _text_loop() -> Script:
    return Script.openai(text=LOOP, piece_chars=16)


def _tool_then_loop() -> Script:
    pieces: list[Any] = [ToolCall.of("write", {"path": "a.py", "content": "x = 1"},
                                     id="call_w")]
    pieces += [("reasoning", LOOP[i : i + 16]) for i in range(0, 4000, 16)]
    return Script.from_pieces(pieces, finish_reason="tool_calls", dialect="openai")


# situation: (scripts, configuration, the outcome every face must give)
SITUATIONS: dict[str, tuple[Callable[[], list[Script]], Config, Outcome]] = {
    "reasoning loop, retry": (
        lambda: [_reasoning_loop(), Script.openai(text=ANSWER)], Config(),
        Outcome("stop", True, True, (), 2, {"type": "disabled"}, False)),
    "reasoning loop, retry, no notice": (
        lambda: [_reasoning_loop(), Script.openai(text=ANSWER)],
        Config().replace(**{"recovery.notice": False}),
        Outcome("stop", False, True, (), 2, {"type": "disabled"}, False)),
    "reasoning loop, stop": (
        lambda: [_reasoning_loop()], Config().replace(**{"recovery.on_trip": "stop"}),
        Outcome("stop", True, False, (), 1, None, False)),
    "text loop": (
        lambda: [_text_loop()], Config(),
        Outcome("stop", True, False, (), 1, None, False)),
    "reasoning loop, error": (
        lambda: [_reasoning_loop()], Config().replace(**{"recovery.on_trip": "error"}),
        Outcome(None, False, False, (), 1, None, True)),
    "no notice": (
        lambda: [_reasoning_loop()], Config().replace(**{"recovery.on_trip": "stop",
                                                         "recovery.notice": False}),
        Outcome("stop", False, False, (), 1, None, False)),
    "tool call sent, then a loop": (
        lambda: [_tool_then_loop(), Script.openai(text=ANSWER)], Config(),
        Outcome("tool_calls", True, False, ("write",), 1, None, False)),
}

# Where a face cannot do what the others do: (face, situation) -> the outcome it gives.
DIFFERS: dict[tuple[str, str], Outcome] = {
    # The agent runs the tool and asks the model again, thinking still on: no retry.
    ("langchain", "tool call sent, then a loop"):
        Outcome("tool_calls", True, False, ("write",), 2, {"type": "enabled"}, False),
    # A whole answer is already made and paid for: one whose reasoning looped but that holds
    # tool calls (or an answer) has nothing left to cut, and its calls are what the client
    # asked for, so it passes as it came (an x-loopbreak-trip header marks it). A looping
    # text is cut and ends with the notice, as streamed; a whole answer that holds nothing
    # but reasoning is recovered as the plan says (retried, ended with the notice, an error).
    ("proxy-whole", "tool call sent, then a loop"):
        Outcome("tool_calls", False, False, ("write",), 1, None, False),
}


@pytest.mark.parametrize("face", FACES)
@pytest.mark.parametrize("situation", SITUATIONS)
def test_every_face_ends_a_situation_the_same_way(face: str, situation: str) -> None:
    scripts, config, expected = SITUATIONS[situation]
    expected = DIFFERS.get((face, situation), expected)
    with ScriptedUpstream(scripts(), default=Script.openai(text="done")) as upstream:
        seen = FACES[face](upstream, config)
        outcome = _outcome(seen, upstream)
    assert outcome == expected, f"{face}: {seen}"


# --- denials: the faces that read the request's own history (the tool breaker's decisions
# in the agent frameworks and the plain tool hooks are tests/test_tool_faces.py's table) -----

DENIED = ToolCall.of("read", '{"path": "conf.toml"}')


REASON = "[loopbreak] This call to `read` was not run"


@dataclass(frozen=True)
class Denial:
    tools_seen: tuple[str, ...]
    finish: str | None
    ended_with: str
    """``answer`` (the model's re-planned answer), ``reason`` (the denial's text) or ``other``."""
    requests: int
    denial_in_reask: bool


def _history() -> list[dict[str, Any]]:
    from support import failing_tool_history

    return failing_tool_history(3)


def _denial(seen: Seen, upstream: ScriptedUpstream) -> Denial:
    chats = [r for r in upstream.requests if r.path.endswith("/chat/completions")]
    reask = chats[1].body["messages"][-1].get("content", "") if len(chats) > 1 else ""
    ended = "answer" if seen.text.endswith(ANSWER) else (
        "reason" if seen.text.startswith(REASON) else "other")
    return Denial(seen.tools, seen.finish, ended, len(chats), str(reask).startswith(REASON))


def deny_through_proxy(upstream: ScriptedUpstream) -> Denial:
    with ProxyServer(upstream.url) as proxy:
        client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="k", max_retries=0)
        chunks = list(client.chat.completions.create(
            model="m", messages=_history(), stream=True, extra_body=THINKING))  # type: ignore[arg-type]
    return _denial(_stream_seen(chunks), upstream)


def deny_through_proxy_whole(upstream: ScriptedUpstream) -> Denial:
    with ProxyServer(upstream.url) as proxy:
        client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="k", max_retries=0)
        answer = client.chat.completions.create(
            model="m", messages=_history(), extra_body=THINKING)  # type: ignore[arg-type]
    return _denial(_whole_seen(answer), upstream)


def deny_through_litellm(upstream: ScriptedUpstream) -> Denial:
    from loopbreak.integrations.litellm import LoopbreakGuard

    hook = LoopbreakGuard(Config())
    request = {"model": "openai/deepseek-reasoner", "messages": _history(), "stream": True,
               "api_base": upstream.base_url, "api_key": "k", "max_retries": 0,
               "extra_body": THINKING}

    async def main() -> list[Any]:
        stream = await litellm.acompletion(**request)
        return [chunk async for chunk in hook.async_post_call_streaming_iterator_hook(
            user_api_key_dict=None, response=stream, request_data=request)]

    return _denial(_stream_seen(asyncio.run(main())), upstream)


DENYING_FACES: dict[str, Callable[[ScriptedUpstream], Denial]] = {
    "proxy": deny_through_proxy,
    "proxy-whole": deny_through_proxy_whole,
    "litellm-hook": deny_through_litellm,
}

DENIALS: dict[str, tuple[Callable[[], list[Script]], Denial]] = {
    "the model re-plans": (
        lambda: [Script.openai(reasoning="Read it again.", tool_calls=[DENIED]),
                 Script.openai(text=ANSWER)],
        Denial((), "stop", "answer", 2, True)),
    "the model insists": (
        lambda: [Script.openai(tool_calls=[DENIED]), Script.openai(tool_calls=[DENIED])],
        Denial((), "stop", "reason", 2, True)),
}


@pytest.mark.parametrize("face", DENYING_FACES)
@pytest.mark.parametrize("situation", DENIALS)
def test_every_history_reading_face_denies_the_same_way(face: str, situation: str) -> None:
    scripts, expected = DENIALS[situation]
    with ScriptedUpstream(scripts()) as upstream:
        outcome = DENYING_FACES[face](upstream)
    assert outcome == expected, face
