"""progression: a number run that counts on and on (``1156, 1157, 1158, ...``).

A model can fall into counting: ``1156, 1157, 1158, …`` or ``478000, 478500,
479000, …`` until its budget ends. Nothing repeats (every number is new), the
unit holds no word, so ``counter-cycle`` (which wants words around its counter)
and every other rule stay silent, and legitimate number lists must stay
silent too. What marks a runaway count is that it is an arithmetic
progression with the same text between its terms for far longer than a list a
person asks for: ``min_terms`` terms with one constant, non-zero step and one
separator.

Clean text counts too: a real reasoning trace lists the ages 30, 31, ..., 62
(33 terms, the longest run in 25,000 clean texts), a user may ask for the
numbers 1 to 100. Numbers are runs of ASCII digits; a separator longer than
``max_separator`` characters (words in between) ends a run, so counted prose
lists are left to ``counter-cycle``.

A number is judged on the character after its last digit, the first that shows
it complete; the trip lands there however the stream is split.
"""

from __future__ import annotations

import re

from loopbreak._config import ProgressionConfig
from loopbreak._engine.trip import Channel, Trip

PROGRESSION = "progression"

_NUMBER = re.compile(r"\d+")
_DIGIT = re.compile(r"\d")
# Digits beyond this make a number no counter (and keep the arithmetic cheap).
_MAX_DIGITS = 18


class ProgressionDetector:
    """The current arithmetic progression of numbers with one separator."""

    def __init__(self, config: ProgressionConfig | None = None,
                 channel: Channel = "reasoning") -> None:
        cfg = config or ProgressionConfig()
        self._channel: Channel = channel
        self._min_terms = cfg.min_terms
        self._max_sep = cfg.max_separator
        self.reset()

    @property
    def consumed(self) -> int:
        return self._consumed

    def reset(self) -> None:
        self._consumed = 0
        self._digits = ""       # a number still being read
        self._sep = ""          # text since the last number (up to max_sep + 1 characters)
        self._prev: int | None = None
        self._step = 0
        self._template = ""
        self._terms = 0

    def feed(self, delta: str) -> Trip | None:
        start = self._consumed
        self._consumed += len(delta)
        if not self._min_terms or not delta:
            return None
        if not self._digits and len(self._sep) > self._max_sep and not _DIGIT.search(delta):
            return None  # prose far from any number: nothing to read
        pos = 0
        for m in _NUMBER.finditer(delta):
            if m.start() > pos:
                trip = self._end_number(start + pos + 1)
                if trip is not None:
                    return trip
                self._add_sep(delta[pos : m.start()])
            # A number may go on from the last delta; a prefix stands for a long one.
            self._digits = (self._digits + m.group())[: _MAX_DIGITS + 1]
            pos = m.end()
        if pos < len(delta):
            trip = self._end_number(start + pos + 1)
            if trip is not None:
                return trip
            self._add_sep(delta[pos:])
        return None

    def _add_sep(self, text: str) -> None:
        if len(self._sep) <= self._max_sep:
            self._sep = (self._sep + text)[: self._max_sep + 1]

    def _end_number(self, end: int) -> Trip | None:
        """The number being read (if any) is complete at stream position ``end``: the
        character after its last digit."""
        digits = self._digits
        if not digits:
            return None
        self._digits = ""
        sep, self._sep = self._sep, ""
        if len(digits) > _MAX_DIGITS or len(sep) > self._max_sep:
            self._prev, self._terms = None, 0
            if len(digits) <= _MAX_DIGITS:
                self._prev, self._terms = int(digits), 1
            return None
        value = int(digits)
        prev = self._prev
        self._prev = value
        if prev is None:
            self._terms = 1
            return None
        step = value - prev
        if self._terms >= 2 and step == self._step and sep == self._template:
            self._terms += 1
        elif step:
            self._step, self._template, self._terms = step, sep, 2
        else:
            self._terms = 1
        if self._terms >= self._min_terms:
            return Trip(PROGRESSION, self._channel, self._consumed, end, {
                "terms": self._terms, "step": self._step, "separator": self._template,
                "last": value,
            })
        return None
