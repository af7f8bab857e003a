"""no-progress: the same tool call returning the same result, again and again.

Whether the result is a failure does not matter and is not decided: a search that
finds nothing, a page that says "Invalid action", a file read that returns the
same text are all the same non-answer, and calling again will not change it.
Each call (its key) keeps the run of identical results it returned while the
agent only repeats calls it already made: one that asks a question whose answer
it already has, between other old steps, is as stuck as one that asks it twice
in a row; a call never made before in the turn is new ground and starts every
run over. From
the ``steer_from``-th identical result the result carries guidance; after
``deny_after`` of them the identical call is denied before dispatch. A different
result starts that call's run over. With ``scope = "turn"`` a new turn starts
clean; by default the runs carry over and the session guard gives each call one
more try after a user message.

Polling is how a state in progress is watched, and its result stays the same
until the state changes: a result that reports one (running, pending, queued,
...) lifts the limit to ``waiting_deny_after``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from loopbreak._config import NoProgressConfig
from loopbreak._engine.notices import LanguageSource, render
from loopbreak._engine.state_copy import CopiedByFields
from loopbreak._engine.tool_steps import ToolDecision, ToolGuidance, ToolStep

RULE = "no-progress"

# A state reported, not a word used: "status: pending", "the job is still running",
# "not ready yet"; never "an error occurred while running the tool".
_STATE = r"(?:running|pending|in[ _-]progress|queued|processing|starting|waiting)"
_WAITING = re.compile(
    rf"^\W*{_STATE}\b|\b(?:status|state|phase)\W{{1,4}}{_STATE}\b"
    rf"|\b(?:is|are|still)\s+(?:still\s+)?{_STATE}\b"
    r"|\bnot (?:yet )?(?:ready|finished|complete|completed|done)(?: yet)?\b",
    re.IGNORECASE | re.MULTILINE,
)
# Calls remembered per turn at most: a turn of more distinct calls forgets its oldest.
_MAX_KEYS = 4096


_WAITING_WORDS = ("running", "pending", "progress", "queued", "processing", "starting",
                  "waiting", "not ")


def reads_as_waiting(result: str) -> bool:
    """Whether a result reports a state still in progress (in its first 2,000 characters)."""
    head = result[:2000]
    folded = head.casefold()
    # The words first (a scan in C); the pattern only where one of them occurs.
    return any(word in folded for word in _WAITING_WORDS) and bool(_WAITING.search(head))


@dataclass
class _Run:
    result: str
    count: int
    waiting: bool = False  # read only once the run is long enough to matter

    def __deepcopy__(self, memo: dict[int, Any]) -> _Run:
        # A proxy keeps a copy of a long history's replay: tens of runs, copied field by
        # field (three values that need no copy) at a tenth of what deepcopy's walk costs.
        return _Run(self.result, self.count, self.waiting)


class NoProgressRule(CopiedByFields):
    """Each call's run of identical results."""

    def __init__(self, config: NoProgressConfig | None = None) -> None:
        self._config = config or NoProgressConfig()
        self._runs: dict[str, _Run] = {}
        self._seen: set[str] = set()

    def start_turn(self) -> None:
        self._runs.clear()
        self._seen.clear()

    def _deny_after(self, run: _Run) -> int:
        cfg = self._config
        return max(cfg.deny_after, cfg.waiting_deny_after) if run.waiting else cfg.deny_after

    def may_deny(self, name: str) -> bool:
        """Whether some call of tool ``name`` would be denied now."""
        prefix = f"{name}\x00"
        return self._config.enabled and any(
            key.startswith(prefix) and run.count >= self._deny_after(run)
            for key, run in self._runs.items())

    def before(self, name: str, key: str, language: LanguageSource = "en") -> ToolDecision | None:
        """A denial when ``key`` returned the same result too often."""
        run = self._runs.get(key)
        if not self._config.enabled or run is None or run.count < self._deny_after(run):
            return None
        return ToolDecision(False, render("no_progress.denied", language, tool=name,
                                          calls=run.count), run.count, RULE)

    def after(self, step: ToolStep, result: str, language: LanguageSource = "en"
              ) -> ToolGuidance | None:
        """Record a result; guidance once the same result came back often enough."""
        cfg = self._config
        if not cfg.enabled:
            return None
        if step.key not in self._seen:
            self._runs.clear()
            if len(self._seen) >= _MAX_KEYS:
                self._seen.clear()
            self._seen.add(step.key)
        run = self._runs.pop(step.key, None)
        if run is None or run.result != step.result:
            run = _Run(step.result, 0)
        run.count += 1
        if run.count >= min(cfg.steer_from, cfg.deny_after):
            run.waiting = reads_as_waiting(result)
        self._runs[step.key] = run  # the newest last: the oldest go first
        if len(self._runs) > _MAX_KEYS:
            del self._runs[next(iter(self._runs))]
        # A waiting run is steered later, never sooner (its deny_after is the larger).
        if run.count < cfg.steer_from or \
                run.count < cfg.steer_from + self._deny_after(run) - cfg.deny_after:
            return None
        return ToolGuidance(render("no_progress.guidance", language, tool=step.name,
                                   calls=run.count), "prefix", run.count, RULE)
