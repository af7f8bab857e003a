"""``loopbreak.integrations.openai_agents``: real Agents SDK agents, scripted upstream."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents", reason="needs openai-agents (the 'agents' extra)")

from agents import (
    Agent,
    FunctionTool,
    OpenAIChatCompletionsModel,
    RunConfig,
    RunContextWrapper,
    Runner,
    WebSearchTool,
    default_tool_error_function,
    function_tool,
)
from openai import AsyncOpenAI

from loopbreak._engine.notices import render
from loopbreak.integrations.openai_agents import ToolBreakerGuardrails
from loopbreak.testing import Script, ScriptedUpstream, ToolCall
from support import point_openai_at, run_doc_example

DOC = Path(__file__).parents[2] / "docs" / "integrations" / "openai_agents.md"
# What the SDK itself tells the model when a tool raises (its wording changed between
# releases: "... Please try again." until 0.24, without it from 0.25).
SDK_ERROR = default_tool_error_function(RunContextWrapper(context=None),
                                        FileNotFoundError("no such file")).rstrip()
MISSING = "/srv/app/settings.toml"
ANSWER = "The settings file does not exist, so nothing sets the timeout."
NO_TRACING = RunConfig(tracing_disabled=True)


def read_call(path: str = MISSING, id: str | None = None) -> Script:
    return Script.openai(tool_calls=[ToolCall.of("read_file", {"path": path}, id=id)])


def make_tool(calls: list[str], *, fail: bool = True) -> FunctionTool:
    """A real function tool that fails the same way for the same path, counting its runs."""

    @function_tool
    def read_file(path: str) -> str:
        """Read a text file."""
        calls.append(path)
        if fail:
            raise FileNotFoundError(f"No such file or directory: '{path}'")
        return "timeout = 30"

    return read_file


def make_agent(up: ScriptedUpstream, tools: list[Any]) -> Agent[Any]:
    client = AsyncOpenAI(base_url=up.base_url, api_key="sk-test", max_retries=0)
    return Agent(name="assistant", instructions="Answer from the files you read.",
                 model=OpenAIChatCompletionsModel(model="m", openai_client=client), tools=tools)


def tool_messages(up: ScriptedUpstream) -> list[str]:
    """The content of the last tool message of each request, in order."""
    return [r.body["messages"][-1]["content"] for r in up.requests
            if r.body["messages"][-1]["role"] == "tool"]


def guidance(failures: int, error: str = SDK_ERROR) -> str:
    text = render("tool.guidance", tool="read_file", failures=failures, error=error)
    return f"{text}\n\n{error}"


def no_progress(calls: int, result: str = SDK_ERROR) -> str:
    return f"{render('no_progress.guidance', tool='read_file', calls=calls)}\n\n{result}"


DENIAL = render("tool.denied", tool="read_file", failures=3)


def test_repeated_failing_call_gets_guidance_then_is_denied_before_dispatch(
        upstream: ScriptedUpstream) -> None:
    upstream.enqueue(*[read_call()] * 4, Script.openai(text=ANSWER))
    calls: list[str] = []
    guard = ToolBreakerGuardrails()
    agent = make_agent(upstream, guard.protect([make_tool(calls)]))
    result = guard.run_sync(agent, "Which timeout does the settings file set?",
                            run_config=NO_TRACING)
    assert result.final_output == ANSWER
    assert calls == [MISSING] * 3  # the 4th identical call never ran
    assert tool_messages(upstream) == [SDK_ERROR, guidance(2), guidance(3), DENIAL]
    behaviours = [r.output.behavior["type"] for r in result.tool_input_guardrail_results]
    assert behaviours == ["allow", "allow", "allow", "reject_content"]
    assert [r.output.output_info for r in result.tool_output_guardrail_results] == [
        None, {"loopbreak": "guidance", "failures": 2}, {"loopbreak": "guidance", "failures": 3}]


def test_a_clean_run_passes_through_unchanged(upstream: ScriptedUpstream) -> None:
    script = [read_call("app.toml", id="call_a"), read_call("app.toml", id="call_b"),
              Script.openai(text="30 seconds.")]
    upstream.enqueue(*script, *script)
    calls: list[str] = []
    tool = make_tool(calls, fail=False)
    plain = Runner.run_sync(make_agent(upstream, [tool]), "Timeout?", run_config=NO_TRACING)
    guard = ToolBreakerGuardrails()
    guarded = guard.run_sync(make_agent(upstream, guard.protect([tool])), "Timeout?",
                             run_config=NO_TRACING)
    assert plain.final_output == guarded.final_output == "30 seconds."
    bodies = [r.body for r in upstream.requests]
    assert bodies[3:] == bodies[:3]  # the model saw exactly the same conversation
    assert tool_messages(upstream) == ["timeout = 30"] * 4 and len(calls) == 4


def test_each_run_is_a_new_turn(upstream: ScriptedUpstream) -> None:
    upstream.enqueue(*[read_call()] * 3, Script.openai(text="Missing."),
                     read_call(), Script.openai(text="Still missing."))
    calls: list[str] = []
    guard = ToolBreakerGuardrails()
    agent = make_agent(upstream, guard.protect([make_tool(calls)]))

    async def conversation() -> list[str]:
        first = await guard.run(agent, "Timeout?", run_config=NO_TRACING)
        second = await guard.run(agent, first.to_input_list() + [
            {"role": "user", "content": "Try again."}], run_config=NO_TRACING)
        return [first.final_output, second.final_output]

    assert asyncio.run(conversation()) == ["Missing.", "Still missing."]
    # The new turn ran the call again: its failure count started clean (SPEC), and the same
    # result a fourth time carries the no-progress rule's guidance instead.
    assert len(calls) == 4
    assert tool_messages(upstream) == [SDK_ERROR, guidance(2), guidance(3),
                                       no_progress(4)]


def test_runner_run_with_start_turn_and_a_custom_error_function(
        upstream: ScriptedUpstream) -> None:
    upstream.enqueue(*[read_call()] * 4, Script.openai(text=ANSWER))
    calls: list[str] = []

    def read_file(path: str) -> str:
        """Read a text file."""
        calls.append(path)
        raise FileNotFoundError(f"No such file or directory: '{path}'")

    tool = function_tool(read_file, failure_error_function=lambda ctx, exc: f"Error: {exc}")
    guard = ToolBreakerGuardrails()
    guard.start_turn()
    result = Runner.run_sync(make_agent(upstream, guard.protect([tool])), "Timeout?",
                             run_config=NO_TRACING)
    error = f"Error: No such file or directory: '{MISSING}'"
    assert result.final_output == ANSWER and len(calls) == 3
    assert tool_messages(upstream) == [error, guidance(2, error), guidance(3, error), DENIAL]


def test_protect_copies_function_tools_and_passes_others_through() -> None:
    calls: list[str] = []
    tool = make_tool(calls)
    search = WebSearchTool()
    guard = ToolBreakerGuardrails()
    protected, same = guard.protect([tool, search])
    assert isinstance(protected, FunctionTool) and protected is not tool and same is search
    assert protected.tool_input_guardrails == [guard.input_guardrail]
    assert protected.tool_output_guardrails == [guard.output_guardrail]
    assert not tool.tool_input_guardrails and not tool.tool_output_guardrails
    assert protected.name == tool.name and protected.params_json_schema == tool.params_json_schema


def test_the_readme_example_runs(upstream: ScriptedUpstream,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    upstream.enqueue(*[read_call()] * 4, Script.openai(text=ANSWER))
    point_openai_at(monkeypatch, upstream)
    assert run_doc_example("openai_agents") == ANSWER + "\n"
    assert tool_messages(upstream) == [SDK_ERROR, guidance(2), guidance(3), DENIAL]
