"""The same scripted tool situations through every face that judges tool calls, each a real
agent loop against the scripted upstream: the plain tool hooks (``ToolBreaker`` in a
hand-written loop over the openai SDK), the OpenAI Agents SDK (``ToolBreakerGuardrails``),
pydantic-ai (``ToolBreakerCapability``), LangChain (``LoopbreakMiddleware``'s ``wrap_tool_call`` in
``create_agent`` over ``ChatOpenAI``), and the faces that read the request's own history: the
proxy's streamed and whole routes and the LiteLLM hook, under a hand-written loop that runs
its tool unguarded. Each must take the same decisions for the same conversation: how often
the tool really ran, what each request the model got says of the last tool result (plain,
guidance, denial: at which request, by which rule, after how many failures), and the answers
the loop ended with. They all defer to one ``SessionGuard`` (the history faces replay it from
the request); this table is what keeps them from drifting apart.

What differs by the host's nature is chosen, not hidden: a tool that raises is shown to the
model the host's way (the Agents SDK's own error message, pydantic-ai's ``{"error": ...}``, a
hand-written loop's ``Error: ...``), so plain results are compared by kind, not text;
pydantic-ai's tool reports its failure with ``ToolFailed`` (``ModelRetry`` would spend the
tool's retry budget, 1 by default, and pydantic-ai ends the run past it, before the denial);
LangChain's middleware turns a tool's exception into the model's result only with
``handle_tool_errors=True`` (otherwise it records it and re-raises, as LangGraph would)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import openai
import pytest

from loopbreak import Config
from loopbreak._engine.notices import TEXTS
from loopbreak.integrations.tools import ToolBreaker
from loopbreak.proxy.server import ProxyServer
from loopbreak.testing import Script, ScriptedUpstream, ToolCall

pytest.importorskip("agents", reason="the Agents SDK face needs openai-agents")
pytest.importorskip("pydantic_ai", reason="the pydantic-ai face needs pydantic-ai-slim[openai]")
pytest.importorskip("langchain.agents.middleware", reason="the LangChain face needs langchain>=1")
pytest.importorskip("langchain_openai", reason="the LangChain face needs langchain-openai")
litellm = pytest.importorskip("litellm", reason="the LiteLLM face needs litellm")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

MISSING = "/srv/app/settings.toml"
FOUND = "/srv/app/app.toml"
CONTENTS = "timeout = 30"
QUESTION = "Which timeout does the settings file set?"
SCHEMAS = [{"type": "function", "function": {
    "name": "read_file", "description": "Read a text file.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                   "required": ["path"]}}}]
MAX_STEPS = 12  # a loop that runs away fails the cell instead of hanging it


class ReadFile:
    """The one tool of every face: reads ``FOUND``, fails alike for ``MISSING``; counts its
    real runs."""

    def __init__(self) -> None:
        self.runs = 0

    def __call__(self, path: str) -> str:
        self.runs += 1
        if path != FOUND:
            raise FileNotFoundError(f"No such file or directory: '{path}'")
        return CONTENTS


@dataclass(frozen=True)
class Ran:
    """What a face's loop did."""

    runs: int
    answers: tuple[str, ...]


@dataclass(frozen=True)
class Outcome:
    runs: int
    """How many times the tool really ran."""
    reads: tuple[str, ...]
    """Per model request, in order: ``user`` (it ends with the user's message), ``plain`` (a
    tool result as the tool gave it), or the loopbreak notice its last tool result carries,
    as ``<notice> <count>`` (``tool.guidance 2``, ``tool.denied 3``, ``no_progress.guidance 4``)."""
    answers: tuple[str, ...]
    """The answer each turn ended with."""


# --- what the model read ----------------------------------------------------------------------

def _first_line(name: str) -> re.Pattern[str]:
    template = TEXTS["en"][name].split("\n", 1)[0]
    return re.compile(re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>.+?)", re.escape(template)))


NOTICES = {name: _first_line(name) for name in TEXTS["en"]
           if name.split(".")[0] in ("tool", "no_progress", "alternation", "repeated_error")}


def _text(content: Any) -> str:
    if isinstance(content, list):
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    text = str(content or "")
    with contextlib.suppress(ValueError, TypeError, KeyError):
        text = str(json.loads(text)["error"])  # pydantic-ai's failed result: {"error": ...}
    return text


def _read(message: dict[str, Any]) -> str:
    if message.get("role") == "user":
        return "user"
    if message.get("role") != "tool":
        return f"other:{message.get('role')}"
    text = _text(message.get("content")).lstrip()
    if not text.startswith("[loopbreak]"):
        return "plain"
    for name, pattern in NOTICES.items():
        match = pattern.match(text)
        if match is not None:
            count = match.groupdict().get("failures") or match.groupdict().get("calls") or ""
            return f"{name} {count}".strip()
    return "unknown notice"


def _outcome(ran: Ran, upstream: ScriptedUpstream) -> Outcome:
    chats = [r for r in upstream.requests if r.path.endswith("/chat/completions")]
    return Outcome(ran.runs, tuple(_read(r.body["messages"][-1]) for r in chats), ran.answers)


# --- the faces: each runs the user's turns as one conversation ---------------------------

Face = Callable[[ScriptedUpstream, list[str]], Ran]


def through_tool_hooks(upstream: ScriptedUpstream, turns: list[str]) -> Ran:
    client = openai.OpenAI(base_url=upstream.base_url, api_key="k", max_retries=0)
    tool, breaker = ReadFile(), ToolBreaker()
    messages: list[dict[str, Any]] = []
    answers = []
    for text in turns:
        breaker.start_turn()
        messages.append({"role": "user", "content": text})
        for _ in range(MAX_STEPS):
            reply = client.chat.completions.create(
                model="m", messages=messages, tools=SCHEMAS).choices[0].message  # type: ignore[arg-type]
            messages.append(reply.model_dump(exclude_none=True))
            if not reply.tool_calls:
                break
            for call in reply.tool_calls:
                run = breaker.run(call.function.name, call.function.arguments, tool)  # type: ignore[union-attr]
                messages.append({"role": "tool", "tool_call_id": call.id, "content": run.text})
        answers.append(reply.content or "")
    return Ran(tool.runs, tuple(answers))


def through_openai_agents(upstream: ScriptedUpstream, turns: list[str]) -> Ran:
    from agents import Agent, OpenAIChatCompletionsModel, RunConfig, function_tool

    from loopbreak.integrations.openai_agents import ToolBreakerGuardrails

    tool = ReadFile()

    @function_tool
    def read_file(path: str) -> str:
        """Read a text file."""
        return tool(path)

    client = openai.AsyncOpenAI(base_url=upstream.base_url, api_key="k", max_retries=0)
    guard = ToolBreakerGuardrails()
    agent: Agent[Any] = Agent(
        name="assistant", instructions="Answer from the files you read.",
        model=OpenAIChatCompletionsModel(model="m", openai_client=client),
        tools=guard.protect([read_file]))
    history: list[Any] = []
    answers = []

    async def conversation() -> None:
        nonlocal history
        for text in turns:
            result = await guard.run(agent, [*history, {"role": "user", "content": text}],
                                     run_config=RunConfig(tracing_disabled=True),
                                     max_turns=MAX_STEPS)
            history = result.to_input_list()
            answers.append(str(result.final_output))

    asyncio.run(conversation())
    return Ran(tool.runs, tuple(answers))


def through_pydantic_ai(upstream: ScriptedUpstream, turns: list[str]) -> Ran:
    from pydantic_ai import Agent, ToolFailed
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from loopbreak.integrations.pydantic_ai import ToolBreakerCapability

    tool = ReadFile()
    provider = OpenAIProvider(base_url=upstream.base_url, api_key="k")
    agent = Agent(OpenAIChatModel("m", provider=provider),
                  instructions="Answer from the files you read.",
                  capabilities=[ToolBreakerCapability()])

    @agent.tool_plain
    def read_file(path: str) -> str:
        """Read a text file."""
        try:
            return tool(path)
        except FileNotFoundError as exc:
            raise ToolFailed(str(exc)) from exc

    history: list[Any] = []
    answers = []
    for text in turns:
        result = agent.run_sync(text, message_history=history)
        history = result.all_messages()
        answers.append(result.output)
    return Ran(tool.runs, tuple(answers))


def through_langchain(upstream: ScriptedUpstream, turns: list[str]) -> Ran:
    from langchain.agents import create_agent
    from langchain_core.tools import tool as as_tool
    from langchain_openai import ChatOpenAI
    from langgraph.checkpoint.memory import InMemorySaver

    from loopbreak.integrations.langchain import LoopbreakMiddleware

    tool = ReadFile()

    @as_tool
    def read_file(path: str) -> str:
        """Read a text file."""
        return tool(path)

    model = ChatOpenAI(model="m", base_url=upstream.base_url, api_key="k",  # type: ignore[arg-type]
                       max_retries=0)
    agent = create_agent(model, tools=[read_file], checkpointer=InMemorySaver(),
                         middleware=[LoopbreakMiddleware(handle_tool_errors=True)])
    thread = {"configurable": {"thread_id": "t1"}, "recursion_limit": 3 * MAX_STEPS}
    answers = []
    for text in turns:
        result = agent.invoke({"messages": [{"role": "user", "content": text}]}, thread)  # type: ignore[arg-type]
        answers.append(str(result["messages"][-1].content))
    return Ran(tool.runs, tuple(answers))


def _assembled(chunks: list[Any]) -> dict[str, Any]:
    """The assistant message a streamed answer's chunks make (openai's or LiteLLM's)."""
    content, calls = "", {}
    for chunk in chunks:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for piece in delta.tool_calls or []:
            call = calls.setdefault(piece.index, {"id": "", "type": "function",
                                                  "function": {"name": "", "arguments": ""}})
            call["id"] = piece.id or call["id"]
            if piece.function is not None:
                call["function"]["name"] += piece.function.name or ""
                call["function"]["arguments"] += piece.function.arguments or ""
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message


def _unguarded(tool: ReadFile, call: dict[str, Any]) -> str:
    """A hand-written loop's tool step with no breaker: an error is the result's text."""
    try:
        return tool(**json.loads(call["function"]["arguments"]))
    except FileNotFoundError as exc:
        return f"Error: {exc}"


def _history_loop(turns: list[str], answer: Callable[[list[dict[str, Any]]], dict[str, Any]]
                  ) -> Ran:
    """A loop that runs its tool unguarded: what the model is asked, and whether its calls
    reach the loop, is the history-reading face's doing (``answer``)."""
    tool = ReadFile()
    messages: list[dict[str, Any]] = []
    answers = []
    for text in turns:
        messages.append({"role": "user", "content": text})
        for _ in range(MAX_STEPS):
            reply = answer(messages)
            messages.append(reply)
            if not reply.get("tool_calls"):
                break
            for call in reply["tool_calls"]:
                messages.append({"role": "tool", "tool_call_id": call["id"],
                                 "content": _unguarded(tool, call)})
        answers.append(str(reply.get("content") or ""))
    return Ran(tool.runs, tuple(answers))


def through_proxy(upstream: ScriptedUpstream, turns: list[str]) -> Ran:
    with ProxyServer(upstream.url) as proxy:
        client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="k", max_retries=0)
        return _history_loop(turns, lambda messages: _assembled(list(
            client.chat.completions.create(model="m", messages=messages, tools=SCHEMAS,  # type: ignore[arg-type]
                                           stream=True))))


def through_proxy_whole(upstream: ScriptedUpstream, turns: list[str]) -> Ran:
    with ProxyServer(upstream.url) as proxy:
        client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="k", max_retries=0)
        return _history_loop(turns, lambda messages: client.chat.completions.create(
            model="m", messages=messages, tools=SCHEMAS,  # type: ignore[arg-type]
        ).choices[0].message.model_dump(exclude_none=True))


def through_litellm(upstream: ScriptedUpstream, turns: list[str]) -> Ran:
    from loopbreak.integrations.litellm import LoopbreakGuard

    hook = LoopbreakGuard(Config())

    async def ask(messages: list[dict[str, Any]]) -> dict[str, Any]:
        # As LiteLLM's proxy runs it: the pre-call hook, the call, the stream through the hook.
        request = {"model": "openai/m", "messages": messages, "tools": SCHEMAS, "stream": True,
                   "api_base": upstream.base_url, "api_key": "k", "max_retries": 0,
                   "litellm_call_id": str(uuid.uuid4())}
        data = await hook.async_pre_call_hook(None, None, request, "acompletion")
        assert isinstance(data, dict), data
        stream = await litellm.acompletion(**data)
        return _assembled([chunk async for chunk in hook.async_post_call_streaming_iterator_hook(
            user_api_key_dict=None, response=stream, request_data=data)])

    return _history_loop(turns, lambda messages: asyncio.run(ask(messages)))


FACES: dict[str, Face] = {
    "tool-hooks": through_tool_hooks,
    "openai-agents": through_openai_agents,
    "pydantic-ai": through_pydantic_ai,
    "langchain": through_langchain,
    "proxy": through_proxy,
    "proxy-whole": through_proxy_whole,
    "litellm-hook": through_litellm,
}


# --- the situations ---------------------------------------------------------------------------

def _call(path: str, n: int) -> Script:
    return Script.openai(tool_calls=[ToolCall.of("read_file", {"path": path}, id=f"call_{n}")])


def _answer(text: str) -> Script:
    return Script.openai(text=text)


GAVE_UP = "The settings file does not exist, so nothing sets the timeout."
FIXED = "app.toml sets a timeout of 30 seconds."

# situation: (the model's answers, the user's turns, the outcome every face must give)
SITUATIONS: dict[str, tuple[Callable[[], list[Script]], list[str], Outcome]] = {
    "the same failing call until denied": (
        lambda: [*(_call(MISSING, n) for n in range(4)), _answer(GAVE_UP)], [QUESTION],
        Outcome(3, ("user", "plain", "tool.guidance 2", "tool.guidance 3", "tool.denied 3"),
                (GAVE_UP,))),
    "a failing call, then a fixed one": (
        lambda: [_call(MISSING, 0), _call(MISSING, 1), _call(FOUND, 2), _answer(FIXED)],
        [QUESTION],
        Outcome(3, ("user", "plain", "tool.guidance 2", "plain"), (FIXED,))),
    "a clean run": (
        lambda: [_call(FOUND, 0), _call(FOUND, 1), _answer(FIXED)], [QUESTION],
        Outcome(2, ("user", "plain", "plain"), (FIXED,))),
    # Not a failure, but no progress: the same result a third time carries guidance, and the
    # identical call after it is denied.
    "the same result again and again": (
        lambda: [*(_call(FOUND, n) for n in range(4)), _answer(FIXED)], [QUESTION],
        Outcome(3, ("user", "plain", "plain", "no_progress.guidance 3", "no_progress.denied 3"),
                (FIXED,))),
    # The new turn runs the call again (its failure count starts clean), and the same
    # result a fourth time carries the no-progress rule's guidance (that count outlives it).
    "a new turn after a denial": (
        lambda: [*(_call(MISSING, n) for n in range(4)), _answer(GAVE_UP),
                 _call(MISSING, 4), _answer("Still missing.")],
        [QUESTION, "Try again."],
        Outcome(4, ("user", "plain", "tool.guidance 2", "tool.guidance 3", "tool.denied 3",
                    "user", "no_progress.guidance 4"), (GAVE_UP, "Still missing."))),
}


@pytest.mark.parametrize("face", FACES)
@pytest.mark.parametrize("situation", SITUATIONS)
def test_every_tool_face_decides_a_situation_the_same_way(face: str, situation: str) -> None:
    scripts, turns, expected = SITUATIONS[situation]
    with ScriptedUpstream(scripts()) as upstream:
        ran = FACES[face](upstream, turns)
        outcome = _outcome(ran, upstream)
    assert outcome == expected, face
