"""monologue: the model answering the same thing again, call after call, without acting.

An answer with no tool call ends the model's part of a turn; a host that asks
again ("continue", a canned reminder) without the user saying anything new gets
the same answer back, and so on until someone stops it. Each answer's visible
text becomes a set of word 3-grams; an answer whose Jaccard similarity to the
previous one is at least ``similarity`` extends the run, anything else (a tool
call, a different answer, a new user message) starts it over. At
``steer_from`` answers in the run the host adds a note the model reads; from
``stop_after`` the host ends the turn instead of asking the model again.
A user message equal to the previous one (a canned reminder from the second time
on) is not new.
"""

from __future__ import annotations

import re
from typing import Literal

from loopbreak._config import MonologueConfig
from loopbreak._engine.notices import LanguageSource, render
from loopbreak._engine.stall import Reaction
from loopbreak._engine.state_copy import CopiedByFields

RULE = "monologue"

_WORD = re.compile(r"\w+")
_MAX_WORDS = 2000


def word_grams(text: str) -> frozenset[str]:
    """The word 3-grams of ``text`` (lower case; its first 2,000 words); short texts give
    their whole word sequence as one gram."""
    words = _WORD.findall(text[:20_000].lower())[:_MAX_WORDS]
    if len(words) < 3:
        return frozenset((" ".join(words),)) if words else frozenset()
    return frozenset(" ".join(words[i:i + 3]) for i in range(len(words) - 2))


def similarity(a: frozenset[str], b: frozenset[str]) -> float:
    """Jaccard similarity of two gram sets (0 when either is empty)."""
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


class MonologueRule(CopiedByFields):
    """The run of near-identical answers without a tool call in one session."""

    def __init__(self, config: MonologueConfig | None = None) -> None:
        self._config = config or MonologueConfig()
        self._previous: frozenset[str] | None = None
        self._run = 0
        self._last_user: str | None = None

    @property
    def run(self) -> int:
        return self._run

    def user_message(self, text: str) -> None:
        """The user (or the host on their behalf) spoke; only a new message ends the run."""
        said = " ".join(text.split())
        if said != self._last_user:
            self._previous = None
            self._run = 0
        self._last_user = said

    def judge(self, text: str, acted: bool, language: LanguageSource = "en") -> Reaction | None:
        """A finished call's visible answer; ``acted``: it called a tool. The reaction when
        the run reaches the steer or the stop."""
        cfg = self._config
        if not cfg.enabled or acted or len(text.strip()) < cfg.min_chars:
            self._previous = None
            self._run = 0
            return None
        grams = word_grams(text)
        if self._previous is not None and similarity(grams, self._previous) >= cfg.similarity:
            self._run += 1
        else:
            self._run = 1
        self._previous = grams
        kind: Literal["steer", "cancel"]
        if self._run >= cfg.stop_after:
            kind, name = "cancel", "monologue.stop"
        elif self._run >= cfg.steer_from:
            kind, name = "steer", "monologue.steer"
        else:
            return None
        return Reaction(kind, render(name, language, replies=self._run), self._run,
                        RULE if kind == "cancel" else None, RULE)
