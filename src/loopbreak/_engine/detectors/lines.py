"""lines: a phrase pool, the loop with no period.

Catches ~10 short sentences reshuffled on every pass (``Let me read the section.
/ Go. / Now. / Writing. / OK.``): no period exists, so the cycle rule is blind
to it at any cap, but its line vocabulary is tiny. Over the last
``window_chars`` counted characters:

* repeated mass: total length of every sighting of a line seen at least twice;
* coverage: repeated mass / mass of all counted lines;
* concentration: sightings / distinct lines.

It trips when mass >= ``min_mass``, coverage >= ``min_coverage`` and
concentration >= ``min_concentration``. Lines are stripped; lines shorter than
``min_line_chars`` count on neither side (generated code repeats ``}`` and ``);``
by the hundred), and so do markdown table rows (a solver re-prints its grid with
one cell changed: a real AlpacaEval answer) and indented lines unless
``count_indented``: code
repeats its lines legitimately (CPython's ``test_exception_variations.py``
reaches coverage 0.78 at concentration 4), and no real pool line is indented.
A list item is read without its number (``12. ``, ``(12) ``): a pool said as a
numbered list repeats its items under new numbers (measured 2026-12-03: 3 more
real loops cut, 5 earlier, nothing clean at any mass and window swept).

The concentration term spares real reasoning that quotes the same code before
and after an edit (a real call was once cut at 3,712 of 3,713 characters by a
rule without it: coverage 0.64, but 1.78 sightings per line). The window makes
a bleed that starts after long productive reasoning trip without waiting for
the loop to outweigh the whole call, and bounds memory. Judged at each newline,
so the decision does not depend on how the stream is split.

Measured 2026-12-01 (``loopbreak calibrate --only lines``; 21 loops, 3,412
clean streams per channel): every mass from 512 to 2,048 at window 8,192 trips
no clean stream; a window of 4,096 trips a real productive call; concentration
2 trips clean text; coverage 0.8 misses a real loop.
"""

from __future__ import annotations

import itertools
import re
from collections import deque
from collections.abc import Hashable

from loopbreak._config import LinesConfig
from loopbreak._engine.shape import is_indented, is_table_row
from loopbreak._engine.trip import Channel, Trip

LINES = "lines"
# A list item's number (``12. ``, ``(12) ``, ``3) ``): a pool said as a numbered list
# repeats its items under new numbers.
_ENUMERATOR = re.compile(r"\(?\d{1,4}[.):] +")
_ITEM_START = frozenset("0123456789(")
# Lines this short or shorter are not read as items: a number alone on a line (a count,
# one per line) stays as cheap as before, and ``1. Go.`` is kept whole.
_ITEM_MIN = 7


def _item(stripped: str) -> str:
    """A stripped line without its list number, if it starts with one."""
    # The space after the number comes by the 7th character (``(1234) ``): a line with
    # none there (a number alone, one per line) is not searched.
    if len(stripped) > _ITEM_MIN and stripped[0] in _ITEM_START and \
            stripped.find(" ", 2, 7) > 0:
        m = _ENUMERATOR.match(stripped)
        if m is not None:
            return stripped[m.end():]
    return stripped


class _Overlong:
    """Stands for one line too long to store: unique by identity."""

    __slots__ = ()


class LinesDetector:
    """Repeated-line mass, coverage and concentration over a window of lines."""

    def __init__(self, config: LinesConfig | None = None, channel: Channel = "reasoning") -> None:
        self._config = config or LinesConfig()
        self._channel: Channel = channel
        self._consumed = 0
        self._partial = ""
        self._partial_len = 0
        self._overlong = False
        self._window: deque[tuple[Hashable, int]] = deque()
        self._counts: dict[Hashable, int] = {}
        self._mass = 0
        self._repeated = 0
        self._settle_quiet()

    @property
    def consumed(self) -> int:
        return self._consumed

    def reset(self) -> None:
        self._consumed = self._partial_len = self._mass = self._repeated = 0
        self._settle_quiet()
        self._partial = ""
        self._overlong = False
        self._window.clear()
        self._counts.clear()

    def feed(self, delta: str) -> Trip | None:
        start = self._consumed
        self._consumed += len(delta)
        if not self._config.min_mass:
            return None
        if "\n" not in delta:
            self._extend(delta)
            self._settle_quiet()
            return None
        pieces = delta.split("\n")
        last = pieces.pop()
        # The first piece ends the line the last deltas began; every other one is a whole
        # line of this delta and needs no joining.
        self._extend(pieces[0])
        pos = start + len(pieces[0]) + 1
        trip = self._close_line(pos)
        if trip is not None:
            return trip
        if len(pieces) > 1:
            # An indented line or a table row in it shows in the delta: one C search each
            # spares every line its own test (a number per line is a line every few
            # characters).
            trip = self._judge_lines(pieces, pos, "\n  " in delta or "\n\t" in delta,
                                     "|" in delta)
            if trip is not None:
                return trip
        self._extend(last)
        self._settle_quiet()
        return None

    def _settle_quiet(self) -> None:
        # A line adds at most twice its length to the repeated mass (its own and, seen the
        # second time, its first sighting's): a trip needs that many more characters, less
        # the line begun.
        self.quiet_through = self._consumed + max(
            0, -(-(self._config.min_mass - self._repeated) // 2) - self._partial_len)

    def _extend(self, piece: str) -> None:
        if not piece:
            return
        self._partial_len += len(piece)
        if self._overlong:
            return
        self._partial += piece
        if len(self._partial) > 4 * self._config.max_line_chars:
            # Too long to be a pool line even after stripping: stop storing it.
            self._overlong = True
            self._partial = ""

    def _close_line(self, at: int) -> Trip | None:
        line, length = ("" if self._overlong else self._partial), self._partial_len
        self._partial = ""
        self._partial_len = 0
        self._overlong = False
        return self._judge_line(line, length, at)

    def _judge_line(self, line: str, raw_length: int, at: int) -> Trip | None:
        """A complete line ends at stream position ``at``; ``line`` is empty when it was
        too long to store (``raw_length`` says how long it was)."""
        cfg = self._config
        key: Hashable
        if raw_length > 4 * cfg.max_line_chars:
            length = raw_length
            key = _Overlong()
        elif (not cfg.count_indented and is_indented(line)) or is_table_row(line):
            return None
        else:
            line = line.strip()
            length = len(line)
            if length < cfg.min_line_chars:
                return None
            key = _Overlong() if length > cfg.max_line_chars else _item(line)
        self._add(key, length)
        while self._mass > cfg.window_chars and len(self._window) > 1:
            self._remove(*self._window.popleft())
        return self._verdict(at)

    def _judge_lines(self, pieces: list[str], pos: int, indented: bool, rows: bool
                     ) -> Trip | None:
        """``pieces[1:]`` are whole lines, the first starting at stream position ``pos``:
        ``_judge_line`` for each, inlined with its state in locals (a number per line
        is a line every few characters). Without ``indented`` no line starts with two
        spaces or a tab, without ``rows`` none holds a ``|``."""
        cfg = self._config
        longest, max_line, min_line = 4 * cfg.max_line_chars, cfg.max_line_chars, \
            cfg.min_line_chars
        skip_indented = indented and not cfg.count_indented
        window_chars, min_mass = cfg.window_chars, cfg.min_mass
        counts, window = self._counts, self._window
        mass, repeated = self._mass, self._repeated
        key: Hashable
        try:
            for line in itertools.islice(pieces, 1, None):
                raw = len(line)
                pos += raw + 1
                if raw > longest:
                    length = raw
                    key = _Overlong()
                else:
                    if skip_indented and line.startswith(("  ", "\t")) and not line.isspace():
                        continue
                    stripped = line.strip()
                    length = len(stripped)
                    if length < min_line:
                        continue
                    if rows and length > 1 and stripped[0] == "|" and stripped[-1] == "|":
                        continue  # a table row
                    if length > max_line:
                        key = _Overlong()
                    elif length > _ITEM_MIN and stripped[0] in _ITEM_START:
                        # Most lines start with a letter: only these pay for the call.
                        key = _item(stripped)
                    else:
                        key = stripped
                count = counts.get(key, 0) + 1
                counts[key] = count
                window.append((key, length))
                mass += length
                if count == 2:
                    repeated += 2 * length
                elif count > 2:
                    repeated += length
                while mass > window_chars and len(window) > 1:
                    old, old_length = window.popleft()
                    left = counts[old] - 1
                    mass -= old_length
                    if left == 0:
                        del counts[old]
                    else:
                        counts[old] = left
                    if left == 1:
                        repeated -= 2 * old_length
                    elif left > 1:
                        repeated -= old_length
                if repeated >= min_mass:
                    self._mass, self._repeated = mass, repeated
                    trip = self._verdict(pos)
                    if trip is not None:
                        return trip
            return None
        finally:
            self._mass, self._repeated = mass, repeated

    def _verdict(self, at: int) -> Trip | None:
        """The trip at stream position ``at``, when the window now holds a pool."""
        cfg = self._config
        if self._repeated < cfg.min_mass:
            return None
        coverage = self._repeated / self._mass
        concentration = len(self._window) / len(self._counts)
        if coverage >= cfg.min_coverage and concentration >= cfg.min_concentration:
            return Trip(LINES, self._channel, self._consumed, at, {
                "repeated_mass": self._repeated,
                "coverage": round(coverage, 3),
                "concentration": round(concentration, 2),
                "distinct_lines": len(self._counts),
                "lines": len(self._window),
            })
        return None

    def _add(self, key: Hashable, length: int) -> None:
        count = self._counts.get(key, 0) + 1
        self._counts[key] = count
        self._window.append((key, length))
        self._mass += length
        if count == 2:
            self._repeated += 2 * length
        elif count > 2:
            self._repeated += length

    def _remove(self, key: Hashable, length: int) -> None:
        count = self._counts[key] - 1
        self._mass -= length
        if count == 0:
            del self._counts[key]
        else:
            self._counts[key] = count
        if count == 1:
            self._repeated -= 2 * length
        elif count > 1:
            self._repeated -= length
