"""The tool-failure rule in pydantic-ai, as a capability.

:class:`ToolBreakerCapability` holds one :class:`~loopbreak.SessionGuard` (one
per conversation) and hooks three points of a run:

- ``before_run``: each ``agent.run`` (``run_sync``, ``run_stream``, ``iter``)
  is a new turn;
- ``before_tool_execute``, the hook pydantic-ai runs after a call's arguments
  were validated and before the tool runs: a denied call raises
  ``ToolFailed(reason)``, so the tool does not run and the model reads the
  reason as the call's failed result (no retry budget spent);
- ``wrap_tool_execute``, around the tool's execution, to see every outcome:
  ``after_tool_execute`` only sees results the tool returned, while failures
  arrive as exceptions (a tool's ``ToolFailed`` and ``ModelRetry``). The
  outcome is reported with ``after_tool`` and, when guidance is due, put in
  front of the failure's message (or of a returned result that reads as a
  failure). Any other exception is counted and goes on as it came.

A call's key is the tool name and the arguments the model sent (``call.args``),
so hooks that rewrite arguments do not change it.

A tool that raises ``ModelRetry`` spends its retry budget (``retries``, 1 by
default) and pydantic-ai ends the run past it, which may come before the
denial; ``ToolFailed`` spends none, and the denial bounds it.

The counts live in the capability object, in this process: give each
conversation its own (``agent.run(..., capabilities=[ToolBreakerCapability()])``),
and do not use it under durable execution, where tools run elsewhere.

Needs the ``pydantic-ai`` extra (``pip install '.[pydantic-ai]'`` from a checkout).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loopbreak._extras import missing

try:
    from pydantic_ai import RunContext
    from pydantic_ai.capabilities import (
        AbstractCapability,
        ValidatedToolArgs,
        WrapToolExecuteHandler,
    )
    from pydantic_ai.exceptions import (
        ModelRetry,
        ToolFailed,
        ToolFailedError,
        ToolRetryError,
    )
    from pydantic_ai.messages import ToolCallPart, ToolReturnPart
    from pydantic_ai.tools import ToolDefinition
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise missing(__name__, "pydantic-ai", "pydantic-ai", exc) from exc

from loopbreak._engine.session_guard import SessionGuard
from loopbreak._engine.tool_failure import looks_like_failure
from loopbreak.integrations.tools import FailureTest, as_text, error_text

__all__ = ["ToolBreakerCapability"]


class _Denied(ToolFailed):
    """A denial raised by this capability, told apart from the tool's own failures."""


@dataclass
class ToolBreakerCapability(AbstractCapability[Any]):
    """Guidance for repeated failing tool calls, and a denial of the identical call past them.

    >>> capability = ToolBreakerCapability()  # Agent(model, capabilities=[capability])
    """

    session: SessionGuard = field(default_factory=SessionGuard)
    """The conversation's guard: pass one to share it with the stream guards of the run."""
    is_failure: FailureTest = looks_like_failure
    """Whether the text of a returned result reports a failure."""

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # holds live state: not built from agent specs

    async def before_run(self, ctx: RunContext[Any]) -> None:
        self.session.start_turn()

    async def before_tool_execute(self, ctx: RunContext[Any], *, call: ToolCallPart,
                                  tool_def: ToolDefinition,
                                  args: ValidatedToolArgs) -> ValidatedToolArgs:
        decision = self.session.before_tool(call.tool_name, call.args)
        if not decision.allowed:
            raise _Denied(decision.reason or "")
        return args

    async def wrap_tool_execute(self, ctx: RunContext[Any], *, call: ToolCallPart,
                                tool_def: ToolDefinition, args: ValidatedToolArgs,
                                handler: WrapToolExecuteHandler) -> Any:
        name, key = call.tool_name, call.args
        try:
            result = await handler(args)
        except _Denied:
            raise
        except (ToolFailedError, ToolRetryError) as exc:
            part = exc.tool_failed if isinstance(exc, ToolFailedError) else exc.tool_retry
            text = as_text(part.content)
            guidance = self.session.after_tool(name, key, text, failed=True)
            if guidance is not None and isinstance(part, ToolReturnPart):
                part.content = guidance.apply(text)
            raise
        except (ToolFailed, ModelRetry) as exc:  # a run that asked for raw errors
            guidance = self.session.after_tool(name, key, exc.message, failed=True)
            if guidance is not None:
                exc.message = guidance.apply(exc.message)
            raise
        except Exception as exc:
            self.session.after_tool(name, key, error_text(exc), failed=True,
                                    error_code=type(exc).__name__)
            raise
        text = as_text(result)
        guidance = self.session.after_tool(name, key, text, failed=self.is_failure(text))
        return result if guidance is None else guidance.apply(text)
