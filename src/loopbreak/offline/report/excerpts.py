"""The excerpt of a cut call: the repeating part marked, the cut point shown."""

from __future__ import annotations

import bisect
import math
from collections import Counter
from dataclasses import dataclass, field
from itertools import pairwise

from loopbreak._config import Config
from loopbreak._engine.detectors.counter_cycle import (
    COUNTER_CYCLE,
    kept_positions,
    read_counters,
)
from loopbreak.offline.analyze import Cut
from loopbreak.offline.report.settings import BLOCK_RULES, DEGENERACY_RULES
from loopbreak.offline.report.text import _esc, _n, _plural

# --- the repeating part of an excerpt -------------------------------------------------------

@dataclass
class _Marks:
    """Ranges of an excerpt to highlight (start, end, tint) and what they mean."""

    ranges: list[tuple[int, int, int]] = field(default_factory=list)
    caption: str = ""


def _cycle_marks(text: str, cut: int, period: int, *, counted: bool = False) -> _Marks:
    if not counted:
        return _periodic_marks(text, cut, period, "")
    # counter-cycle's loop is periodic once every number reads as one 0: find the
    # repetitions in that reading, then map them back onto the text.
    kept = kept_positions(text)
    marks = _periodic_marks(read_counters(text), bisect.bisect_left(kept, cut), period,
                            ", its numbers aside")
    ends = kept[1:] + [len(text)]
    marks.ranges = [(kept[lo], ends[hi - 1], tint) for lo, hi, tint in marks.ranges]
    return marks


def _periodic_marks(text: str, cut: int, period: int, aside: str) -> _Marks:
    if period <= 0 or cut < period:
        return _Marks()
    # The periodic stretch around the cut: every character equal to the one a period away.
    start = cut - period
    while start > 0 and text[start - 1] == text[start - 1 + period]:
        start -= 1
    end = cut
    while end < len(text) and text[end] == text[end - period]:
        end += 1
    marks = _Marks()
    # Any rotation of the unit is the same loop: count repetitions from where the loop
    # began (at its first line or word start), so the shades split it where a reader would.
    phase = _phase(text, start, period)
    if start > 0:
        # The loop began inside the excerpt: the characters before its first line start
        # match by accident (a full stop, a line break), so they are left plain.
        start = phase
    k = -math.ceil((phase - start) / period)
    while phase + k * period < end:
        lo, hi = max(start, phase + k * period), min(end, phase + (k + 1) * period)
        if lo < hi:
            marks.ranges.append((lo, hi, k % 2))
        k += 1
    before = (cut - start) // period
    unit = f"{_n(period)}-character unit{aside}"
    marks.caption = (f"Highlighted: each repetition of the {unit} "
                     f"(alternating shades); {_plural(before, 'whole repetition')} before the cut "
                     f"in this excerpt.")
    return marks


def _phase(text: str, first: int, period: int) -> int:
    """Where in ``text[first:first + period]`` (one whole unit) a repetition best starts:
    after a line break, else after a space, else at ``first``."""
    for wanted in ("\n", " "):
        for i in range(first, first + period):
            if i > 0 and text[i - 1] == wanted and not text[i].isspace():
                return i
    return first


def _lines_marks(text: str) -> _Marks:
    spans: list[tuple[int, int, str]] = []
    pos = 0
    for line in text.split("\n"):
        stripped = line.strip()
        if len(stripped) >= 2:
            lead = len(line) - len(line.lstrip())
            spans.append((pos + lead, pos + lead + len(stripped), stripped))
        pos += len(line) + 1
    counts = Counter(key for _, _, key in spans)
    # One shade per distinct line, alternating in order of first appearance, so two
    # different repeated lines side by side stay apart.
    shade: dict[str, int] = {}
    marks = _Marks()
    for lo, hi, key in spans:
        if counts[key] >= 2:
            tint = shade.setdefault(key, len(shade) % 2)
            marks.ranges.append((lo, hi, tint))
    marks.caption = (f"Highlighted: the lines that occur more than once in this excerpt "
                     f"({_plural(len(shade), 'distinct line')}, shaded by line).")
    return marks


def _block_marks(text: str, cut: int, block: int, streak: int, what: str) -> _Marks:
    if block <= 0 or streak <= 0:
        return _Marks()
    marks = _Marks()
    for k in range(streak):
        lo, hi = max(0, cut - (k + 1) * block), cut - k * block
        if hi <= 0:
            break
        marks.ranges.append((lo, hi, k % 2))
    marks.ranges.reverse()
    shown = len(marks.ranges)
    more = "" if shown == streak else f" ({_n(shown)} of them fit in this excerpt)"
    marks.caption = (f"Highlighted: the last {_plural(streak, 'block')} of {_n(block)} "
                     f"characters before the cut, {what}{more}.")
    return marks


def _chunk_marks(text: str, chunk: str, repeats: int) -> _Marks:
    if not chunk:
        return _Marks()
    marks = _Marks()
    pos = text.find(chunk)
    k = 0
    while pos >= 0:
        marks.ranges.append((pos, pos + len(chunk), k % 2))
        k += 1
        pos = text.find(chunk, pos + len(chunk))
    marks.caption = (f"Highlighted: each arrival of the repeated chunk "
                     f"({_n(repeats)} identical chunks in a row tripped the rule).")
    return marks


def _marks(cut: Cut, text: str, at: int) -> _Marks:
    ev = cut.evidence
    if cut.rule in ("cycle", COUNTER_CYCLE):
        return _cycle_marks(text, at, _int(ev.get("period")), counted=cut.rule == COUNTER_CYCLE)
    if cut.rule == "lines":
        return _lines_marks(text)
    if cut.rule in BLOCK_RULES:
        block = _int(ev.get("block_chars")) or Config().block_repeat.block_chars
        what = ("each identical to a block before it" if cut.rule == "exact-repeat"
                else "each close to a block before it")
        return _block_marks(text, at, block, _int(ev.get("streak")) or 1, what)
    if cut.rule in DEGENERACY_RULES:
        # Degeneracy evidence does not carry its block size: the default one is shown.
        block = _int(ev.get("block_chars")) or Config().degeneracy.block_chars
        return _block_marks(text, at, block, _int(ev.get("streak")) or 1,
                            "each judged degenerate")
    if cut.rule == "char-flood":
        block = _int(ev.get("block_chars")) or Config().char_flood.block_chars
        return _block_marks(text, at, block, _int(ev.get("blocks")) or 1,
                            f"each filled with {ev.get('char')!r}")
    if cut.rule == "identical-chunks":
        return _chunk_marks(text, str(ev.get("chunk") or ""), _int(ev.get("repeats")))
    if cut.rule == "max-reasoning-chars":
        return _Marks(caption="A hard cap, not a repetition: nothing to highlight.")
    return _Marks(caption="This rule names no repeating unit: nothing to highlight.")


def _head_lines(text: str, lines: int) -> str:
    """``text`` up to its ``lines``-th line break: enough of what follows the cut to show the
    loop running on, short enough that the cut stays in view above it."""
    end = -1
    for _ in range(lines):
        end = text.find("\n", end + 1)
        if end < 0:
            return text
    return text[:end]


def _int(value: object) -> int:
    if isinstance(value, bool):
        return 0
    if isinstance(value, (int, float)) and math.isfinite(value):
        return int(value)
    return 0


def _render_excerpt(before: str, after: str, marks: _Marks) -> str:
    text = before + after
    cut = len(before)
    points = {0, cut, len(text)}
    for lo, hi, _ in marks.ranges:
        points.update((max(0, min(lo, len(text))), max(0, min(hi, len(text)))))
    # The ranges never overlap: one sweep finds the range (if any) each piece falls in.
    ranges = sorted(marks.ranges)
    j = 0
    out: list[str] = []
    for lo, hi in pairwise(sorted(points)):
        while j < len(ranges) and ranges[j][1] <= lo:
            j += 1
        tint = ranges[j][2] if j < len(ranges) and ranges[j][0] <= lo else None
        if lo == cut:
            out.append(_CUT_MARK + '<span class="after">')
        piece = _esc(text[lo:hi])
        out.append(f'<mark class="h{tint}">{piece}</mark>' if tint is not None else piece)
    if cut == len(text):
        out.append(_CUT_MARK + '<span class="after">')
    out.append("</span>")
    return "".join(out)


_CUT_MARK = '<span class="cutpt" role="img" aria-label="the cut point">cut</span>'


