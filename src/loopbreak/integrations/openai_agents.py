"""The tool-failure rule in the OpenAI Agents SDK, through its tool guardrails.

The SDK runs a function tool's *input guardrails* before the tool and its
*output guardrails* after it. :class:`ToolBreakerGuardrails` supplies one of
each, sharing one :class:`~loopbreak.SessionGuard` (one per conversation):

- the input guardrail asks ``before_tool``; a denied call is answered with
  ``ToolGuardrailFunctionOutput.reject_content(reason)``: the tool does not run,
  the model reads the reason as the call's result, and the run carries on;
- the output guardrail reports the result with ``after_tool`` and, when
  guidance is due, replaces the output the model reads (``reject_content``
  again, the SDK's only way for a guardrail to change an output) with the
  guidance and the original result.

A result counts as a failure when it is the SDK's own message for a tool that
raised (``default_tool_error_function``: "An error occurred while running the
tool..."; the exception itself never reaches the model, nor the guardrail) or
when ``is_failure`` says so (default :func:`looks_like_failure`, which reads a
custom ``failure_error_function``'s ``"Error: ..."`` as one).

A turn is one ``Runner.run``: use :meth:`ToolBreakerGuardrails.run` (``run_sync``,
``run_streamed``), or call :meth:`~ToolBreakerGuardrails.start_turn` before your
own ``Runner.run``.

Needs the ``agents`` extra (``pip install '.[agents]'`` from a checkout).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from loopbreak._extras import missing

try:
    from agents import (
        Agent,
        FunctionTool,
        Runner,
        RunResult,
        RunResultStreaming,
        Tool,
        ToolGuardrailFunctionOutput,
        ToolInputGuardrail,
        ToolInputGuardrailData,
        ToolOutputGuardrail,
        ToolOutputGuardrailData,
        default_tool_error_function,
    )
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise missing(__name__, "openai-agents", "agents", exc) from exc

from loopbreak._engine.session_guard import SessionGuard
from loopbreak._engine.tool_failure import looks_like_failure
from loopbreak.integrations.tools import FailureTest, as_text

__all__ = ["ToolBreakerGuardrails"]


def _is_sdk_error(context: Any, text: str) -> bool:
    """Whether ``text`` is the SDK's default message for a tool that raised (older releases
    append the exception's text to it)."""
    message = default_tool_error_function(context, Exception("")).rstrip()
    return bool(message) and text.startswith(message)


class ToolBreakerGuardrails:
    """A tool input and output guardrail pair holding one conversation's tool-failure counts.

    ``protect(tools)`` returns copies of the function tools with both guardrails
    added (other tools pass through); ``input_guardrail`` and
    ``output_guardrail`` can also be listed on a tool by hand.
    """

    def __init__(self, session: SessionGuard | None = None, *,
                 is_failure: FailureTest = looks_like_failure) -> None:
        self.session = session if session is not None else SessionGuard()
        self.is_failure = is_failure
        self.input_guardrail: ToolInputGuardrail[Any] = ToolInputGuardrail(
            self._before, name="loopbreak_tool_failure")
        self.output_guardrail: ToolOutputGuardrail[Any] = ToolOutputGuardrail(
            self._after, name="loopbreak_tool_failure")

    def protect(self, tools: Iterable[Tool]) -> list[Tool]:
        """``tools`` with both guardrails on each function tool (copies; the originals are
        left as they are, so another agent may use them unguarded or with its own guard)."""
        out: list[Tool] = []
        for tool in tools:
            if isinstance(tool, FunctionTool):
                tool = copy.copy(tool)
                tool.tool_input_guardrails = [*(tool.tool_input_guardrails or []),
                                              self.input_guardrail]
                tool.tool_output_guardrails = [*(tool.tool_output_guardrails or []),
                                               self.output_guardrail]
            out.append(tool)
        return out

    # turns

    def start_turn(self) -> None:
        """A new user turn: failure counts and denials start over."""
        self.session.start_turn()

    async def run(self, starting_agent: Agent[Any], input: Any, **kwargs: Any) -> RunResult:
        """``Runner.run`` as a new turn."""
        self.start_turn()
        return await Runner.run(starting_agent, input, **kwargs)

    def run_sync(self, starting_agent: Agent[Any], input: Any, **kwargs: Any) -> RunResult:
        """``Runner.run_sync`` as a new turn."""
        self.start_turn()
        return Runner.run_sync(starting_agent, input, **kwargs)

    def run_streamed(self, starting_agent: Agent[Any], input: Any,
                     **kwargs: Any) -> RunResultStreaming:
        """``Runner.run_streamed`` as a new turn."""
        self.start_turn()
        return Runner.run_streamed(starting_agent, input, **kwargs)

    # the guardrails

    def _before(self, data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        context = data.context
        decision = self.session.before_tool(context.tool_name, context.tool_arguments)
        if decision.allowed:
            return ToolGuardrailFunctionOutput.allow()
        return ToolGuardrailFunctionOutput.reject_content(
            decision.reason or "", output_info={"loopbreak": "denied",
                                                "failures": decision.failures})

    def _after(self, data: ToolOutputGuardrailData) -> ToolGuardrailFunctionOutput:
        context = data.context
        text = as_text(data.output)
        failed = _is_sdk_error(context, text) or self.is_failure(text)
        guidance = self.session.after_tool(context.tool_name, context.tool_arguments, text,
                                           failed=failed)
        if guidance is None:
            return ToolGuardrailFunctionOutput.allow()
        return ToolGuardrailFunctionOutput.reject_content(
            guidance.apply(text), output_info={"loopbreak": "guidance",
                                               "failures": guidance.failures})
