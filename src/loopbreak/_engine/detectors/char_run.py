"""char-run: one character over and over.

Catches the floods that no other rule sees because their unit is a single
character: ``るるるる…``, ``！！！！…``, ``0000…``, ``1111…``, backspaces,
tens of thousands of spaces or line breaks. ``cycle`` leaves one-character units
alone on purpose (``====`` rules under a heading) and ``degeneracy`` lets any
block with letters or digits through, so a run of a letter or a digit reaches
neither.

Layout characters run long in clean text: a markdown table padded to a wide
column holds runs of 367 spaces and 379 dashes (a real AlpacaEval answer), so
spaces, tabs and the characters rules are drawn with may run to
``max_layout_run``; every other character to ``max_run``. Clean runs of other
characters top out at 200 (``'a' * 200`` spelled out in CPython's tests).

The run is counted across deltas, and the trip lands on the character that
makes the run reach its limit, however the stream is split.
"""

from __future__ import annotations

import re
from functools import lru_cache

from loopbreak._config import CharRunConfig
from loopbreak._engine.charclass import LAYOUT_CHARS
from loopbreak._engine.trip import Channel, Trip

CHAR_RUN = "char-run"


@lru_cache(maxsize=16)
def _run_of(chars: int) -> re.Pattern[str]:
    # One pattern per limit, not compiled per detector: a flood restarts a guard every few
    # hundred characters, and re.compile's own cache costs a microsecond a lookup.
    return re.compile(f"(.)\\1{{{chars - 1},}}", re.S)


class CharRunDetector:
    """The longest run of one character, counted across deltas."""

    def __init__(self, config: CharRunConfig | None = None,
                 channel: Channel = "reasoning") -> None:
        cfg = config or CharRunConfig()
        self._channel: Channel = channel
        self._max_run = cfg.max_run
        self._max_layout_run = max(cfg.max_run, cfg.max_layout_run)
        # A run shorter than the lower limit cannot trip inside one delta.
        self._long_run = _run_of(max(1, cfg.max_run))
        self._consumed = 0
        self._char = ""
        self._run = 0
        # A run must reach the lower limit.
        self.quiet_through = self._max_run - 1

    @property
    def consumed(self) -> int:
        return self._consumed

    def reset(self) -> None:
        self._consumed = self._run = 0
        self._char = ""
        self.quiet_through = self._max_run - 1

    def _limit(self, char: str) -> int:
        return self._max_layout_run if char in LAYOUT_CHARS else self._max_run

    def feed(self, delta: str) -> Trip | None:
        start = self._consumed
        self._consumed += len(delta)
        if not delta or not self._max_run:
            return None
        lead = len(delta) - len(delta.lstrip(self._char)) if self._char else 0
        if lead:
            limit = self._limit(self._char)
            if self._run + lead >= limit:
                return self._trip(start + limit - self._run, self._char, limit)
            if lead == len(delta):
                self._run += lead
                self._settle_quiet(limit)
                return None
        for m in self._long_run.finditer(delta, lead):
            char = m.group(1)
            limit = self._limit(char)
            if m.end() - m.start() >= limit:
                return self._trip(start + m.start() + limit, char, limit)
        last = delta[-1]
        self._char = last
        self._run = len(delta) - len(delta.rstrip(last))
        self._settle_quiet(self._limit(last))
        return None

    def _settle_quiet(self, limit: int) -> None:
        # A trip needs the run to reach its ``limit``, or a new run the lower one.
        self.quiet_through = self._consumed - 1 + min(limit - self._run, self._max_run)

    def _trip(self, at: int, char: str, limit: int) -> Trip:
        return Trip(CHAR_RUN, self._channel, self._consumed, at,
                    {"char": char, "run": limit})
