"""stall: calls that think without doing, judged across the calls of a session.

A reasoning loop that ends on its own (the model stops, emits nothing, the turn
settles) escapes every in-stream rule; so does a call that thinks the same
thoughts as the call before it. Calls with fewer than ``min_reasoning_chars``
of reasoning are not judged. A judged call is stalled when it produced no text
and no tool call (reasoning-only), or when its 4-gram set is at least
``similarity`` contained in the previous judged call's (restated). After
``max_stalled_calls`` stalled calls in a row the reaction fires (warn, steer
or cancel); a productive call resets the run; each fire resets the count, so a
strong loop can be steered again, at most ``max_fires`` times per session.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from loopbreak._config import StallConfig
from loopbreak._engine.call_guard import CallSummary
from loopbreak._engine.grams import GramSet
from loopbreak._engine.notices import LanguageSource, render
from loopbreak._engine.state_copy import CopiedByFields

REASONING_ONLY = "reasoning-only"
RESTATED = "restated"


@dataclass(frozen=True)
class Reaction:
    """What the host should do now that a rule across calls (stall, monologue) fired."""

    kind: Literal["warn", "steer", "cancel"]
    notice: str
    fires: int
    cause: str | None = None
    rule: str = "stall"


@dataclass(frozen=True, init=False)
class StallVerdict:
    """The stall rule's judgement of one finished call."""

    judged: bool
    stalled: bool = False
    reason: str | None = None
    containment: float | None = None
    run: int = 0
    reaction: Reaction | None = None

    def __init__(self, judged: bool, stalled: bool = False, reason: str | None = None,
                 containment: float | None = None, run: int = 0,
                 reaction: Reaction | None = None) -> None:
        # Frozen, yet one is made for every message of a replayed history: the fields go
        # straight into the instance, not through the frozen __setattr__ (a quarter of the cost).
        fields = self.__dict__
        fields["judged"] = judged
        fields["stalled"] = stalled
        fields["reason"] = reason
        fields["containment"] = containment
        fields["run"] = run
        fields["reaction"] = reaction


_JUDGED = StallVerdict(judged=True)
"""A call judged and not stalled, with no previous call's reasoning to compare (frozen:
one shared verdict)."""


class StallRule(CopiedByFields):
    """The run of stalled calls and the fires of one session."""

    def __init__(self, config: StallConfig | None = None) -> None:
        self._config = config or StallConfig()
        self._previous: GramSet | None = None
        self._run = 0
        self._fires = 0

    @property
    def fires(self) -> int:
        return self._fires

    @property
    def run(self) -> int:
        return self._run

    def forget_grams(self) -> None:
        """Drop the last call's 4-gram set (up to megabytes for a long reasoning): the next
        call is then judged for restatement against nothing, as a first one would be."""
        self._previous = None

    def judge(self, call: CallSummary, language: LanguageSource = "en") -> StallVerdict:
        """Judge a finished call; the verdict carries a reaction when the rule fires."""
        cfg = self._config
        if call.reasoning_chars < cfg.min_reasoning_chars:
            return StallVerdict(judged=False, run=self._run)
        containment = None
        if cfg.similarity and call.grams is not None and self._previous is not None:
            containment = round(call.grams.containment(self._previous), 3)
        self._previous = call.grams
        reason = None
        if not call.productive:
            reason = REASONING_ONLY
        elif containment is not None and containment >= cfg.similarity:
            reason = RESTATED
        if reason is None:
            self._run = 0
            if containment is None:
                return _JUDGED  # every productive call of a replayed history
            return StallVerdict(judged=True, containment=containment)
        self._run += 1
        run = self._run
        reaction = None
        if run >= cfg.max_stalled_calls and self._fires < cfg.max_fires:
            self._fires += 1
            self._run = 0
            kind = cfg.reaction
            reaction = Reaction(
                kind=kind,  # type: ignore[arg-type]
                notice=render("stall", language, calls=run),
                fires=self._fires,
                cause=cfg.cancel_cause if kind == "cancel" else None,
            )
        return StallVerdict(judged=True, stalled=True, reason=reason, containment=containment,
                            run=run, reaction=reaction)
