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

_NUMBER_SPLIT = re.compile(r"(\d+)")
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
        digits, sep, max_sep = self._digits, self._sep, self._max_sep
        if not digits and len(sep) > max_sep and not _DIGIT.search(delta):
            return None  # prose far from any number: nothing to read
        # One pass with the state in locals: numeric text ends a number every few
        # characters, and a method call per number was most of the rule's cost. The
        # split alternates text between numbers (maybe empty) and numbers.
        prev, step, template, terms = self._prev, self._step, self._template, self._terms
        min_terms = self._min_terms
        trip: Trip | None = None
        parts = _NUMBER_SPLIT.split(delta)
        pos = 0
        for i in range(0, len(parts), 2):
            text = parts[i]
            if text:
                if digits:
                    # The number read so far is complete at the character after it.
                    if len(digits) > _MAX_DIGITS or len(sep) > max_sep:
                        prev, terms = None, 0
                        if len(digits) <= _MAX_DIGITS:
                            prev, terms = int(digits), 1
                    else:
                        value = int(digits)
                        if prev is None:
                            terms = 1
                        elif terms >= 2 and value - prev == step and sep == template:
                            terms += 1
                        elif value != prev:
                            step, template, terms = value - prev, sep, 2
                        else:
                            terms = 1
                        prev = value
                        if terms >= min_terms:
                            trip = self._trip(start + pos + 1, terms, step, template, value)
                    digits = sep = ""
                    if trip is not None:
                        break
                if len(sep) <= max_sep:
                    sep = (sep + text)[: max_sep + 1]
                pos += len(text)
            if i + 1 < len(parts):
                # A number may go on from the last delta; a prefix stands for a long one.
                number = parts[i + 1]
                digits = (digits + number)[: _MAX_DIGITS + 1]
                pos += len(number)
        self._digits, self._sep = digits, sep
        self._prev, self._step, self._template, self._terms = prev, step, template, terms
        return trip

    def _trip(self, end: int, terms: int, step: int, separator: str, last: int) -> Trip:
        return Trip(PROGRESSION, self._channel, self._consumed, end, {
            "terms": terms, "step": step, "separator": separator, "last": last,
        })
