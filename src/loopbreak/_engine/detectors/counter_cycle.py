"""counter-cycle: the tail repeats once every digit reads as 0.

A small model asked for a list can fall into ``14. Pluto`` / ``15. Pluto`` /
``16. Pluto`` ... until its token budget runs out. No two lines are equal, so
``lines`` sees nothing, and the ticking number breaks every period ``cycle``
could find. Read with every digit as ``0`` (a map that keeps every character
in place, so offsets stay exact), the tail is periodic again: this rule is
``cycle`` over that reading, with cycle's period cap and spans, the longer code
span included. Its evidence shows the unit as read (``00. Pluto``).

Data repeats with only its numbers changing for good reasons (a base64 image
attached twice, ``KEY_F1`` ... ``KEY_F63`` tables, number lists a user asked
for), so a unit counts only if it holds a digit and at least
``min_word_share`` of its characters lie in words of letters, taken around the
cycle so that every rotation of a unit scores the same. The counted loops
SmolLM2-135M wrote here, and Qwen1.5-1.8B and falcon-7b wrote in AlpacaEval,
score 0.27-0.98; the base64 stretch in CPython's ``test_email`` 0.01.

Measured 2026-12-01 (``loopbreak calibrate --only counter``; 27 loops, 3,412
clean streams per channel): a share of 0 trips 4 clean stdlib files, 0.1-0.5
trip none and cut the same loops, 0.75 misses 2 more. Of the 6 runaway lists
SmolLM2-135M wrote (``_data/smollm2_lists.jsonl``), which every other rule
misses, it cuts the 4 with prose-shaped units at 318-916 characters; the 2
whose units look like code (``41. Calcium (Ca)``, ``Le décembre 41: 42``) need
the 1,536-character code span, longer than those answers.
"""

from __future__ import annotations

import re

from loopbreak._config import CounterCycleConfig, CycleConfig
from loopbreak._engine.detectors.cycle import CycleDetector
from loopbreak._engine.trip import Channel

COUNTER_CYCLE = "counter-cycle"

DIGITS_AS_ZERO: dict[int, str] = {
    **{ord(c): "0" for c in "123456789"},
    **{cp: "0" for cp in range(0xFF10, 0xFF1A)},  # full-width digits
}
"""The reading this rule judges: ASCII and full-width digits as ``0``."""

_TOKEN = re.compile(r"\S+")
# A word of letters, with the quotes, apostrophes, hyphens and closing punctuation prose
# puts around and inside one.
_WORD = re.compile(r"[(\"'\u2018\u201c]?[^\W\d_]+(?:[-'\u2019][^\W\d_]+)*[.,;:!?)\"'\u2019\u201d]*")


def word_share(unit: str) -> float:
    """The share of ``unit``'s non-space characters that lie in words of letters, with the
    unit read as a cycle (a word cut by the unit's edge counts whole), so every rotation of
    a unit scores the same. A unit without whitespace is one endless token: 0."""
    first_space = next((i for i, c in enumerate(unit) if c.isspace()), -1)
    if first_space < 0:
        return 0.0
    cyclic = unit[first_space:] + unit[:first_space]
    tokens = _TOKEN.findall(cyclic)
    total = sum(len(t) for t in tokens)
    words = sum(len(t) for t in tokens if _WORD.fullmatch(t))
    return words / total if total else 0.0


class CounterCycleDetector(CycleDetector):
    """``cycle`` over the stream with every digit read as ``0``, for prose-shaped units
    that hold a number."""

    rule = COUNTER_CYCLE

    def __init__(self, config: CounterCycleConfig | None = None,
                 cycle: CycleConfig | None = None, channel: Channel = "reasoning") -> None:
        super().__init__(cycle, channel)
        self._min_word_share = (config or CounterCycleConfig()).min_word_share
        self._read = DIGITS_AS_ZERO
        self._accepts = self._counted_prose

    def _may_end_here(self, n0: int, n1: int) -> bool:
        # A unit that counts holds a digit and ends in (n0, n1], so it lies within
        # [n0 + 1 - max_period, n1): without a digit there, the step cannot trip (prose
        # without numbers costs one search less).
        low = max(0, n0 + 1 - self._max_period - self._base)
        return self._buf.find("0", low, n1 - self._base) >= 0

    def _counted_prose(self, unit: str) -> bool:
        return ("0" in unit and self._distinct_enough(unit)
                and word_share(unit) >= self._min_word_share)
