"""``loopbreak.integrations.pydantic_ai``: real pydantic-ai agents, scripted upstream."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic_ai", reason="needs pydantic-ai-slim[openai] (extra 'pydantic-ai')")

from pydantic_ai import Agent, ModelRetry, ToolFailed
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from loopbreak import Config, SessionGuard, ToolFailureConfig
from loopbreak._engine.notices import render
from loopbreak.integrations.pydantic_ai import ToolBreakerCapability
from loopbreak.testing import Script, ScriptedUpstream, ToolCall
from support import point_openai_at, run_doc_example

DOC = Path(__file__).parents[2] / "docs" / "integrations" / "pydantic_ai.md"
MISSING = "/srv/app/settings.toml"
ERROR = f"No such file or directory: '{MISSING}'"
ANSWER = "The settings file does not exist, so nothing sets the timeout."
DENIAL = render("tool.denied", tool="read_file", failures=3)


def read_call(path: str = MISSING, id: str | None = None) -> Script:
    return Script.openai(tool_calls=[ToolCall.of("read_file", {"path": path}, id=id)])


def make_agent(up: ScriptedUpstream, calls: list[str], how: str = "failed",
               **kwargs: Any) -> Agent[None, str]:
    """An agent whose real ``read_file`` tool fails the same way for the same path
    (``how``: raise ``ToolFailed``, raise ``ModelRetry``, return an error text, raise
    ``FileNotFoundError``, or succeed), counting its runs."""
    provider = OpenAIProvider(base_url=up.base_url, api_key="sk-test")
    agent = Agent(OpenAIChatModel("m", provider=provider),
                  instructions="Answer from the files you read.", **kwargs)

    @agent.tool_plain
    def read_file(path: str) -> str:
        """Read a text file."""
        calls.append(path)
        message = f"No such file or directory: '{path}'"
        if how == "failed":
            raise ToolFailed(message)
        if how == "retry":
            raise ModelRetry(message)
        if how == "text":
            return f"Error: {message}"
        if how == "raise":
            raise FileNotFoundError(message)
        return "timeout = 30"

    return agent


def tool_messages(up: ScriptedUpstream) -> list[str]:
    """What the model read of the last tool result of each request, in order: a failed
    result arrives as ``{"error": ...}``, which is unwrapped here."""
    out = []
    for record in up.requests:
        message = record.body["messages"][-1]
        if message["role"] == "tool":
            content = message["content"]
            with contextlib.suppress(ValueError, TypeError, KeyError):
                content = json.loads(content)["error"]
            out.append(content)
    return out


def guidance(failures: int, error: str = ERROR) -> str:
    text = render("tool.guidance", tool="read_file", failures=failures, error=error)
    return f"{text}\n\n{error}"


@pytest.mark.parametrize(("how", "error"), [("failed", ERROR), ("retry", ERROR),
                                            ("text", f"Error: {ERROR}")])
def test_repeated_failing_call_gets_guidance_then_is_denied_before_dispatch(
        upstream: ScriptedUpstream, how: str, error: str) -> None:
    upstream.enqueue(*[read_call()] * 4, Script.openai(text=ANSWER))
    calls: list[str] = []
    agent = make_agent(upstream, calls, how, retries=5)  # ModelRetry spends the tool's retries
    result = agent.run_sync("Which timeout does the settings file set?",
                            capabilities=[ToolBreakerCapability()])
    assert result.output == ANSWER
    assert calls == [MISSING] * 3  # the 4th identical call never ran
    assert tool_messages(upstream) == [error, guidance(2, error), guidance(3, error), DENIAL]
    raw = upstream.requests[4].body["messages"][-1]["content"]
    assert json.loads(raw) == {"error": DENIAL}  # the denial reads as a failed result


def test_a_clean_run_passes_through_unchanged(upstream: ScriptedUpstream) -> None:
    script = [read_call("app.toml", id="call_a"), read_call("app.toml", id="call_b"),
              Script.openai(text="30 seconds.")]
    upstream.enqueue(*script, *script)
    calls: list[str] = []
    agent = make_agent(upstream, calls, "ok")
    plain = agent.run_sync("Timeout?")
    guarded = agent.run_sync("Timeout?", capabilities=[ToolBreakerCapability()])
    assert plain.output == guarded.output == "30 seconds."
    bodies = [r.body for r in upstream.requests]
    assert bodies[3:] == bodies[:3]  # the model saw exactly the same conversation
    assert tool_messages(upstream) == ["timeout = 30"] * 4 and len(calls) == 4


def test_each_run_is_a_new_turn_and_agent_wide_capability_works(
        upstream: ScriptedUpstream) -> None:
    upstream.enqueue(*[read_call()] * 3, Script.openai(text="Missing."),
                     read_call(), Script.openai(text="Still missing."))
    calls: list[str] = []
    breaker = ToolBreakerCapability()
    agent = make_agent(upstream, calls, capabilities=[breaker])

    async def conversation() -> list[str]:
        first = await agent.run("Timeout?")
        second = await agent.run("Try again.", message_history=first.all_messages())
        return [first.output, second.output]

    assert asyncio.run(conversation()) == ["Missing.", "Still missing."]
    assert len(calls) == 4 and breaker.session.turn == 2
    # The failure count started clean (SPEC); the same result a fourth time carries the
    # no-progress rule's guidance.
    no_progress = render("no_progress.guidance", tool="read_file", calls=4)
    assert tool_messages(upstream) == [ERROR, guidance(2), guidance(3),
                                       f"{no_progress}\n\n{ERROR}"]


def test_other_exceptions_are_counted_and_propagate(upstream: ScriptedUpstream) -> None:
    upstream.enqueue(read_call(), Script.openai(text="never"))
    config = Config(tool_failure=ToolFailureConfig(deny_after=1))
    breaker = ToolBreakerCapability(SessionGuard(config))
    calls: list[str] = []
    agent = make_agent(upstream, calls, "raise", capabilities=[breaker])
    with pytest.raises(FileNotFoundError):
        agent.run_sync("Timeout?")
    decision = breaker.session.before_tool("read_file", {"path": MISSING})
    assert not decision.allowed and decision.failures == 1 and len(calls) == 1


def test_the_readme_example_runs(upstream: ScriptedUpstream,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    upstream.enqueue(*[read_call()] * 4, Script.openai(text=ANSWER))
    point_openai_at(monkeypatch, upstream)
    assert run_doc_example("pydantic_ai") == ANSWER + "\n"
    error = f"[Errno 2] {ERROR}"
    assert tool_messages(upstream) == [error, guidance(2, error), guidance(3, error), DENIAL]
