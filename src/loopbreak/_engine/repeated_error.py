"""repeated-error: different tool calls failing with the same error.

The tool-failure rule counts one call failing again; this one counts one error
coming back whatever the call: a missing dependency, a broken environment, a
compile error no edit touches, an exhausted quota. A failure's error is its
normalised text (the tool-failure rule's signature without the call). From the
``steer_from``-th failure with the same error, coming from at least two
different calls, the result carries guidance; after ``deny_after`` of them the
tools that gave it are denied until one of them succeeds, which forgets the error;
every tool is, when the error came from two tools or was the last ``deny_after``
results in a row (nothing the agent tried since has worked: a broken environment,
an action the world rejects). With ``scope = "turn"`` a new turn starts clean; by
default the errors carry over and the session guard gives each call one more try
after a user message.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from loopbreak._config import RepeatedErrorConfig
from loopbreak._engine.notices import LanguageSource, render
from loopbreak._engine.state_copy import CopiedByFields
from loopbreak._engine.tool_steps import ToolDecision, ToolGuidance, ToolStep

RULE = "repeated-error"


@dataclass
class _Error(CopiedByFields):
    failures: int = 0
    keys: set[str] = field(default_factory=set)
    tools: set[str] = field(default_factory=set)


class RepeatedErrorRule(CopiedByFields):
    """Failures of one turn, by error."""

    def __init__(self, config: RepeatedErrorConfig | None = None) -> None:
        self._config = config or RepeatedErrorConfig()
        self._errors: dict[str, _Error] = {}
        self._by_tool: dict[str, set[str]] = {}  # the errors each tool gave
        self._grave: set[str] = set()  # errors past deny_after, from two calls or more
        self._streak = ("", 0)  # the error of the latest results in a row, and how many

    def start_turn(self) -> None:
        self._errors.clear()
        self._by_tool.clear()
        self._grave.clear()
        self._streak = ("", 0)

    def _blocking(self, name: str) -> _Error | None:
        streak, run = self._streak
        for signature in self._grave:
            error = self._errors[signature]
            if name in error.tools or len(error.tools) > 1 or (
                    signature == streak and run >= self._config.deny_after):
                return error
        return None

    def may_deny(self, name: str) -> bool:
        """Whether some call of tool ``name`` would be denied now."""
        return self._config.enabled and self._blocking(name) is not None

    def before(self, name: str, key: str, language: LanguageSource = "en") -> ToolDecision | None:
        """A denial when tool ``name`` gave an error that came back too often."""
        if not self._config.enabled:
            return None
        error = self._blocking(name)
        if error is None:
            return None
        return ToolDecision(False, render("repeated_error.denied", language, tool=name,
                                          failures=error.failures), error.failures, RULE)

    def after(self, step: ToolStep, result: str, language: LanguageSource = "en"
              ) -> ToolGuidance | None:
        """Record a result; guidance once its error came back often enough."""
        cfg = self._config
        if not cfg.enabled:
            return None
        if not step.failed:
            self._streak = ("", 0)
            # The tool works: what failed before was the calls, not the tool.
            for signature in self._by_tool.pop(step.name, ()):
                error = self._errors.pop(signature, None)
                self._grave.discard(signature)
                for tool in error.tools if error is not None else ():
                    self._by_tool.get(tool, set()).discard(signature)
            return None
        signature = step.error[: cfg.error_chars]
        streak, run = self._streak
        self._streak = (signature, run + 1 if signature == streak else 1)
        if not signature:
            return None  # no text to tell one error from another
        error = self._errors.setdefault(signature, _Error())
        error.failures += 1
        error.keys.add(step.key)
        error.tools.add(step.name)
        self._by_tool.setdefault(step.name, set()).add(signature)
        if error.failures >= cfg.deny_after and len(error.keys) > 1:
            self._grave.add(signature)
        if error.failures < cfg.steer_from or len(error.keys) < 2:
            return None
        return ToolGuidance(render("repeated_error.guidance", language, failures=error.failures,
                                   error=result.strip()[:2000] or "(no error text)"),
                            "prefix", error.failures, RULE)
