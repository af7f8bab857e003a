"""alternation: a few calls taking turns (A-B-A-B, A-B-C-A-B-C), none changing its result.

Each step is a call's key with its result's fingerprint, numbers masked (a
search that reports 10 spans, then 25, none of them relevant, has not changed its
answer). When the last ``cycles`` × ``period`` steps repeat one cycle of
``period`` distinct calls (2 to ``max_period``), every call returning what it
returned a cycle before, the last result carries guidance; the call that would
start the next cycle is then denied before dispatch. Any other call breaks the
cycle. With ``scope = "turn"`` a new turn starts clean; by default the steps carry
over and the session guard gives each call one more try after a user message.
"""

from __future__ import annotations

from collections import deque

from loopbreak._config import AlternationConfig
from loopbreak._engine.notices import LanguageSource, render
from loopbreak._engine.state_copy import CopiedByFields
from loopbreak._engine.tool_steps import ToolDecision, ToolGuidance, ToolStep

RULE = "alternation"


class AlternationRule(CopiedByFields):
    """The last steps of one turn and the cycle they close, if any."""

    def __init__(self, config: AlternationConfig | None = None) -> None:
        self._config = config or AlternationConfig()
        self._steps: deque[ToolStep] = deque(maxlen=self._config.max_period * self._config.cycles)
        self._cycle: tuple[ToolStep, ...] | None = None

    def start_turn(self) -> None:
        self._steps.clear()
        self._cycle = None

    def _closed_cycle(self) -> tuple[ToolStep, ...] | None:
        cfg = self._config
        steps = self._steps
        last = steps[-1]
        for period in range(2, cfg.max_period + 1):
            span = period * cfg.cycles
            if len(steps) < span:
                break
            back = steps[-1 - period]
            # The key first: a step's shape is worked out only when it is asked for.
            if back.key != last.key or back.shape != last.shape:
                continue  # the newest step does not repeat this period's: no cycle closes
            tail = list(steps)[-span:]
            unit = tail[:period]
            if len({(s.key, s.shape) for s in unit}) < period:
                continue  # a shorter cycle (or one call) is another rule's
            if all((tail[i].key, tail[i].shape) == (unit[i % period].key, unit[i % period].shape)
                   for i in range(period, span)):
                return tuple(unit)
        return None

    def may_deny(self, name: str) -> bool:
        """Whether some call of tool ``name`` would be denied now."""
        return self._config.enabled and self._cycle is not None and self._cycle[0].name == name

    def before(self, name: str, key: str, language: LanguageSource = "en") -> ToolDecision | None:
        """A denial when ``key`` would start another round of a closed cycle."""
        cycle = self._cycle
        if not self._config.enabled or cycle is None or cycle[0].key != key:
            return None
        return ToolDecision(False, render("alternation.denied", language, tool=name,
                                          period=len(cycle), tools=_names(cycle),
                                          cycles=self._config.cycles), self._config.cycles, RULE)

    def after(self, step: ToolStep, language: LanguageSource = "en") -> ToolGuidance | None:
        """Record a step; guidance when it closes the last cycle the rule watches for."""
        if not self._config.enabled:
            return None
        self._steps.append(step)
        self._cycle = self._closed_cycle()
        if self._cycle is None:
            return None
        period = len(self._cycle)
        return ToolGuidance(render("alternation.guidance", language,
                                   steps=period * self._config.cycles, period=period,
                                   tools=_names(self._cycle)), "prefix", self._config.cycles, RULE)


def _names(cycle: tuple[ToolStep, ...]) -> str:
    return ", ".join(f"`{s.name}`" for s in cycle)
