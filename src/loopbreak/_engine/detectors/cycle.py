"""cycle: the tail of a channel repeats with a period.

Catches verbatim loops of any unit up to ``max_period`` characters, however the
unit is worded (``好。执行。好。``, ``Go. / OK. / Let me write.`` in a fixed order,
a 409-character paragraph). The condition, at every character ``m`` of the
stream: there is a period ``p <= max_period`` such that the last
``max(min_span, 2p + past_two_copies)`` characters repeat with period ``p`` (two
whole copies and the start of a third: an answer prints a heading or an item
twice and moves on; in reasoning a unit up to ``two_copies_reasoning`` needs
only its two copies, as the seed's DeepSeek loops were cut, and so does a unit up to
``two_copies_pool_reasoning`` that is a pool of its own lines; a reasoning unit of
prose whose three copies fit in ``min_span`` needs only them and
``three_copies_reasoning`` characters), and the unit has at least
``min_distinct`` distinct characters (so ``====`` and ``────`` rules do not
count). The evidence names the smallest such period. A unit shaped like code
or data (``shape.unit_looks_like_code``) must repeat over ``min_span_code`` instead:
code repeats verbatim for good reasons (CPython's stdlib holds periodic
stretches up to 1,030 characters). Blank table rows (``|   |   |``, no letter or
digit) are cut after ``blank_table_copies`` copies when that comes sooner: a
template leaves a few rows blank, a looping small model draws hundreds; any other
code-shaped unit after ``code_copies`` copies when that comes sooner (``<td></td>``
or ``r+:9`` drawn until the budget ends; code repeats a short unit a few dozen times).

The period cap must sit above every period ever measured: a cap below the real
period fails silently, which is how the seed plugin once missed a 409-character
loop. Real loops of reasoning and chat models re-derive whole paragraphs
verbatim with periods up to 1,396 characters (the development corpus), so the
cap is 4,096. Reasoning needs a longer span (384) than text (256) because
reasoning restates plans; 384 caught 40 of 56 real reasoning-only stalls in the
seed's corpus where 512 caught none.

Cost: instead of testing every period at every character, the stream is cut into
batches of at most ``_step`` characters; a short anchor that lies inside every
window ending in a batch is looked up once per batch where it recurred
(``str.rfind``, in C), and only those shifts are verified, delta by delta. Clean
text yields almost no candidates, so the cost per character stays flat however
long the stream grows and however small the deltas are, and the memory is the
last ``max(min_span, 2 * max_period)`` characters plus one step. Text that does
repeat without counting (numeric CSV or a counting run once digits read as 0, a
``====`` rule) once offered hundreds of candidates at every step, each judged
again: a unit judged not to count now stands for its rotations while its run
lasts, and the nearest repeating period for its multiples, whose windows are
repetitions of it (3,000 to 900,000 chars/s on numeric CSV, the same decisions:
the brute-force tests check them at every split). A period above a cap (626 in
reasoning) needs two copies, so a run at least that long: those periods are looked
up once per longer step with an anchor that far back, and each step keeps only those
its own anchor recurs at too (a step reads ~660 characters instead of 4,096). An
anchor inside a flood (a run of spaces, of stars) recurs at every shift of every
older flood: those shifts are taken a flood at a time and kept only where a window
of the batch could repeat the character that broke the current flood, and a run is
measured by galloping out from its end (indented lines were judged at 0.3 M chars/s
when each shift was judged and measured by halving 4,096-character comparisons). A shift
is listed only if the windows of its batch repeat what its least run reaches; a unit of
numeric data is held to the full span before its shape is judged; and a unit that counts but
qualifies later vouches for the multiples whose least span is its own or more (a staircase
of digit lines, each line a flood of ten digits recurring in every older line, was judged
at 0.6 M chars/s on reasoning).

Measured 2026-12-01 (``loopbreak calibrate``; 1,344 real loops, 25,800 clean
streams): raising the cap from 512 to 4,096 cuts 40 more loops and trips no
clean stream; a code span of 1,024 trips CPython's ``test_email``, 1,280 is the
first clean (1,536 keeps a margin).

Measured 2026-12-02 (1,355 loops, 25,818 clean streams): a reasoning span of 384
put most short-unit Qwen3 loops past their budget (two copies and 128 characters):
cutting after three copies once 256 characters repeat brings 37 of the 194 Qwen3
GSM8K loops within it to 172, every DeepSeek cut of the seed earlier or the same,
and trips nothing clean (256 for every unit trips Qwen3 answers that state a
line twice). Two copies of any unit up to 512 cut a Qwen3 answer that restated
two 104-character lines once (period 208) and a trace that restated a
212-character option; up to 192, or 512 for a pool of lines (the seed's
235-character ``OK.`` / ``Output.`` round), spares both and keeps every DeepSeek
cut; one Qwen3 paraphrase loop that cycle once caught 5,400 characters late
is left to the other rules.

Measured 2026-12-02 (``calibrate --only "cycle code copies"``): a short code-shaped unit
cut after 64 copies instead of the 1,536-character code span cuts 7 more loops on the
text channel (AlpacaEval and ja-vicuna answers drawing markup or symbol strings) and
trips nothing clean; 32 copies trip a stdlib codec table, 48 is the first clean.

Measured 2026-12-03 (``calibrate --only "one-line code copies"``): code repeats whole
lines, so a code-shaped unit of 16 or more characters with no line break (and no
repetition of a shorter unit) is a snippet flattened and said over (ja-vicuna's
``return sorted(arr)[1:] # ...``). Cut after ``one_line_code_copies`` (4) copies, it
cuts 10 more loops than the code span (9 ja-vicuna answers and an AlpacaEval one) and 7
others earlier (``calibrate --cases``); even reading such units as prose trips nothing
clean (the standard library's longest such run is 6 copies of a 29-character calendar
cell, under the 256-character span), and 8 copies lose 3 of the loops.

Measured 2026-12-03 (``calibrate --only "cycle three copies"``): the three-copy span in
reasoning stopped at 256 because 160 cut CPython's ``test_csv`` sample (three rows of
``05/05/03?``) and, with the one-line copies above, ``test_calendar``'s cells. A row of
numbers and marks with no letter, and code, are data: they now wait for the full span.
Then 160 is the first clean setting (128 trips two reasoning traces and ``test_email``),
and 192, one step behind it, cuts 9 more shaberi loops (bursts of 3 to 7 copies of a
short sentence, 150 to 250 characters) and 15 others earlier; no loop is cut later.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING

from loopbreak._config import CycleConfig
from loopbreak._engine import accelerator
from loopbreak._engine.shape import (
    POOL_LINES,
    is_blank_table,
    repeats_its_lines,
    unit_looks_like_code,
)
from loopbreak._engine.trip import Channel, Trip

if TYPE_CHECKING:
    from loopbreak._engine.compiled import CodePoints, CycleTables

CYCLE = "cycle"
ONE_LINE_MIN_PERIOD = 16
"""Shortest unit that ``one_line_code_copies`` applies to: a shorter one (``0, 0, ``,
``\\x00``) fills a line of data many times over."""
_ANCHOR_CHARS = 32
# Nearest periods whose unit may have too few distinct characters to count (checked).
_FLAT_MOST = 8
# Long periods a batch filters in Python: calling the kernel costs about as much as
# filtering a few.
_LONG_IN_PYTHON = 4
_ASCII_LETTER = re.compile(r"[A-Za-z]")
_ASCII_DIGIT = re.compile(r"[0-9]")
# The settings a detector derives from its arguments, by class and arguments (a handful per
# process: the channels, the counter variant). They include _earliest's spans by period, which
# every detector of a setting shares: the first step of a flood asks for dozens of periods.
_DERIVED: dict[tuple[object, ...], dict[str, object]] = {}


def is_numeric_data(unit: str) -> bool:
    """Whether ``unit`` holds a digit and no letter of any script (``05/05/03?``): a row
    of data. Marks alone (a run of dots and line breaks) are a flood, not data."""
    if unit.isascii():
        # The same test in C (an ASCII letter or digit is exactly one of these): a flood of
        # numbered lines judges hundreds of units a step.
        return _ASCII_LETTER.search(unit) is None and _ASCII_DIGIT.search(unit) is not None
    return not any(c.isalpha() for c in unit) and any(c.isdigit() for c in unit)


def _match_run_back(buf: str, end: int, period: int, cap: int) -> int:
    """How many characters before ``end`` equal the character ``period`` before them (at
    most ``cap``)."""
    high = min(cap, end - period)
    if high <= 0:
        return 0
    # Galloping from ``end``: a run is mostly far shorter than the cap (a chance
    # recurrence, a flood of spaces in indented text), and comparing cap-long slices at
    # every halving read ~4,000 characters twelve times for a run of twenty (indented
    # text at 0.3 M chars/s). Sizes that match bound the run from below, the first that
    # misses from above; a match of ``size`` implies every shorter one.
    low = 0
    size = 16
    while size < high:
        if buf[end - size : end] != buf[end - size - period : end - period]:
            high = size - 1
            break
        low = size
        size *= 4
    else:
        if buf[end - high : end] == buf[end - high - period : end - period]:
            return high
        high -= 1
    while low < high:
        mid = (low + high + 1) // 2
        if buf[end - mid : end] == buf[end - mid - period : end - period]:
            low = mid
        else:
            high = mid - 1
    return low


class _RunStarts:
    """Where the match runs of each period measured so far start, in stream positions: a
    run that ended short of its cap met a character unequal to the one a period before it,
    a fact of the text that no later character changes. A later measure that ends inside
    such a run, or just past it with the characters since repeating too, is answered from
    the start without measuring again (each batch in a staircase of digit lines measured
    every older line's run anew: a quarter of the rule's cost there)."""

    __slots__ = ("_by_period",)

    # How far past a known run's end a measure may lie and still be answered by comparing
    # what lies between (a few steps; a comparison that fails costs a copy of that much,
    # and the run is then measured as usual).
    _REACH = 1024
    # Runs a period keeps before the oldest half is forgotten (a buffer holds a few dozen
    # floods of one period).
    _KEEP = 64

    def __init__(self) -> None:
        self._by_period: dict[int, tuple[list[int], list[int]]] = {}

    def clear(self) -> None:
        self._by_period.clear()

    def run_back(self, buf: str, base: int, end: int, period: int, cap: int) -> int:
        """``_match_run_back(buf, end, period, cap)`` for ``buf`` starting at stream position
        ``base``."""
        high = min(cap, end - period)
        if high <= 0:
            return 0
        at = end + base
        known = self._by_period.get(period)
        if known is not None:
            starts, ends = known
            i = bisect_right(starts, at) - 1
            if i >= 0:
                start, known_end = starts[i], ends[i]
                if at <= known_end:
                    return at - start if at - start < high else high
                past = known_end - base
                if at - known_end <= self._REACH and past >= period and \
                        buf[past] == buf[past - period] and \
                        buf[past:end] == buf[past - period : end - period]:
                    ends[i] = at
                    return at - start if at - start < high else high
        run = _match_run_back(buf, end, period, cap)
        if run < high:
            self._learn(period, at - run, at, base)
        return run

    def _learn(self, period: int, start: int, end: int, base: int) -> None:
        known = self._by_period.get(period)
        if known is None:
            self._by_period[period] = ([start], [end])
            return
        starts, ends = known
        i = bisect_right(starts, start)
        if i and starts[i - 1] == start:
            if end > ends[i - 1]:
                ends[i - 1] = end
            return
        starts.insert(i, start)
        ends.insert(i, end)
        if len(starts) > self._KEEP:
            # A run ending before the buffer starts is never measured again, and the oldest
            # are the next to fall behind it: forgetting one costs a measure, never a result.
            drop = max(bisect_right(ends, base), len(starts) - self._KEEP // 2)
            del starts[:drop], ends[:drop]


class CycleDetector:
    """Periodic tail of one channel, judged exactly at every character."""

    rule = CYCLE
    search_chars = 800
    """What one anchor search costs besides the characters it reads, in characters
    (``str.rfind`` and the Python around it, ~0.35 us: as much as reading 800 characters of
    text). It only weighs how the periods are split for searching, never a decision."""

    def __init__(self, config: CycleConfig | None = None, channel: Channel = "reasoning",
                 min_span: int | None = None, max_period: int | None = None,
                 three_copies_span: int | None = None, *, compiled: bool = False) -> None:
        cfg = config or CycleConfig()
        key = (type(self), cfg, channel, min_span, max_period, three_copies_span,
               self._variant_key())
        derived = _DERIVED.get(key)
        if derived is None:
            before = set(self.__dict__)
            self._derive(cfg, channel, min_span, max_period, three_copies_span)
            derived = {k: v for k, v in self.__dict__.items() if k not in before}
            if len(_DERIVED) >= 64:
                # A sweep over many settings: start over, so the ones in use now are kept.
                _DERIVED.clear()
            _DERIVED[key] = derived
        else:
            self.__dict__.update(derived)
        # Which units count (a variant asks more); must not depend on where a unit is rotated.
        self._accepts: Callable[[str], bool] = self._distinct_enough
        # With ``compiled`` and the kernels loaded, a flood's shifts and the long periods
        # are listed by kernels that list the same (a rule made before they load stays in
        # Python).
        self._compiled = compiled and accelerator.loaded() is not None
        self._points: CodePoints | None = None  # made when first listed compiled
        self._buf = ""
        self._base = 0
        self._done = 0
        self._consumed = 0
        # Match runs measured at the end of the last step, by period: a loop offers the
        # same candidate periods step after step, and their runs only grow.
        self._runs: dict[int, int] = {}
        self._next_runs: dict[int, int] = {}
        # Where older floods' runs start, so each batch does not measure them again.
        self._run_starts = _RunStarts()
        # Where a unit of each period was last judged not to count: later windows are
        # rotations of it while the run reaches back there, and every rule that accepts a
        # unit gives all its rotations (and repetitions) the same verdict.
        self._rejected: dict[int, int] = {}
        # The same for a unit judged to count: where, and the span it needs (less its
        # period), so a loop in full swing is not judged again every step.
        self._accepted: dict[int, tuple[int, int]] = {}
        # Candidates up to this shift are exactly the multiples of the nearest one.
        self._multiples_upto = 0
        # No unit that ends at or before this position of the reading counts (a variant
        # that skips steps knows it further ahead than the current one).
        self._blocked_to = 0
        # The current batch (deltas up to one step that share an anchor) and the periods
        # its anchor recurs at; None until looked up.
        self._batch_end = 0
        self._candidates: list[int] | None = None
        # Candidates of the batch found unable to qualify in the rest of it.
        self._dead: list[int] = []
        # How far the nearest period has vouched for its multiples in this batch so far.
        self._batch_reach = 0
        # The same for the periods above _short_cap, over longer steps (see _derive).
        self._long_end = 0
        self._long: tuple[list[int], int] | None = None
        # No unit counts before the least span (the reading gains at most a character a
        # character of the stream).
        self.quiet_through = self._min_span - 1

    def _variant_key(self) -> tuple[object, ...]:
        """What a variant's settings depend on besides the arguments (set before this
        class's ``__init__`` runs)."""
        return ()

    def _derive(self, cfg: CycleConfig, channel: Channel, min_span: int | None,
                max_period: int | None, three_copies_span: int | None) -> None:
        """Work out the settings every detector built with these arguments shares (its
        ``__init__`` copies them from the first one: a guard is built for every call, and
        this was a fifth of building one)."""
        self._channel: Channel = channel
        self._max_period = cfg.max_period if max_period is None else min(cfg.max_period,
                                                                           max_period)
        self._min_distinct = cfg.min_distinct
        if min_span is None:
            min_span = cfg.min_span_reasoning if channel == "reasoning" else cfg.min_span_text
        if three_copies_span is None:
            three_copies_span = cfg.three_copies_reasoning if channel == "reasoning" else 0
        # A unit whose three copies fit in min_span needs only them (and three_copies_span).
        self._three_copies = min(three_copies_span, min_span) if three_copies_span else 0
        self._span_cap = min_span
        self._min_span_code = max(min_span, cfg.min_span_code)
        self._blank_table_copies = cfg.blank_table_copies
        self._code_copies = cfg.code_copies
        self._one_line_copies = cfg.one_line_code_copies
        # The least any unit needs: the anchor search below is sized for it.
        min_span = self._three_copies or min_span
        self._min_span = min_span
        self._past_two = cfg.past_two_copies
        self._two_only = cfg.two_copies_reasoning if channel == "reasoning" else 0
        self._two_only_pool = (max(self._two_only, cfg.two_copies_pool_reasoning)
                               if channel == "reasoning" else 0)
        # The least run a window of each period itself needs (the windows of a batch all
        # repeat the characters from that far before its end to just after its start), and
        # the same for a unit of numeric data (a row of digits and marks, no word).
        periods = range(1, self._max_period + 1)
        self._least_needs = [self._span(p) - p for p in periods]
        # ... and of a unit that is not a pool of lines (it needs the third copy too).
        self._lineless_needs = [self._span(p, pool=False) - p for p in periods]
        self._numeric_needs = [max(self._span_cap, self._two_copies(p)) - p for p in periods]
        least_from = self._least_runs(self._least_needs)
        self._least_from = least_from
        self._lineless_from = self._least_runs(self._lineless_needs)
        # Every qualifying window ends in a run of matches at least this long.
        least = least_from[0] if least_from else (self._min_span + 1) // 2
        self._least_run = least
        self._half = max(1, min(least, self._min_span))
        self._anchor = max(1, min(_ANCHOR_CHARS, self._half // 2))
        # A step this short keeps the anchor inside every window ending in it.
        self._step = self._half - self._anchor + 1
        self._tier_long_periods(least_from)
        # The least run a unit of each period needs and the most any run is measured to,
        # worked out when the period first comes up.
        self._needs: dict[int, tuple[int, int]] = {}
        # The least multiple a unit's span vouches for (see _multiples_needing).
        self._vouched_from: dict[tuple[int, int, bool], int] = {}
        self._keep = (max(self._min_span_code, self._two_copies(self._max_period, pool=False),
                          self._long_half + self._max_period if self._long_step else 0)
                      + self._step + self._anchor + 1)

    def _tier_long_periods(self, least_from: list[int]) -> None:
        """Split the periods in two when that searches less: up to ``_short_cap`` each step
        looks its anchor up, as above; a longer period needs a longer run (two copies), so
        the periods above it are looked up once per ``_long_step``, a multiple of the step,
        with an anchor that far back. Searching 4,096 characters back every 97 characters
        was most of the rule's cost on clean text."""
        self._short_cap = self._max_period
        self._long_half = self._long_anchor = self._long_step = 0
        best = self._search_cost(self._max_period, 0, 0, 0)
        for cap in range(2 * self._step, self._max_period, max(1, self._step // 2)):
            half = max(1, least_from[cap])  # the periods above cap
            anchor = max(1, min(_ANCHOR_CHARS, half // 2))
            step = (half - anchor + 1) // self._step * self._step
            if step < 2 * self._step:
                continue
            cost = self._search_cost(cap, half, anchor, step)
            if cost < best:
                best = cost
                self._short_cap, self._long_half, self._long_anchor, self._long_step = (
                    cap, half, anchor, step)

    def _search_cost(self, cap: int, long_half: int, long_anchor: int, long_step: int) -> float:
        """Characters searched per character of the stream with this split, a search
        counted as ``search_chars`` more."""
        cost = (cap + self._anchor + self.search_chars) / self._step
        if long_step:
            cost += (self._max_period - cap + long_anchor + self.search_chars) / long_step
        return cost

    @property
    def consumed(self) -> int:
        return self._consumed

    def _least_runs(self, least_needs: list[int]) -> list[int]:
        """For each period ``p`` (at index ``p - 1``), the shortest run of matches a
        qualifying window of ``p`` or any longer period ends in: its span less its period, at
        least. The longer it is, the longer a batch that one anchor serves (three copies of
        a short unit hold a run of two: more than half the span). One pass over the periods,
        not one per cap weighed."""
        least_from = list(least_needs)
        for i in range(len(least_from) - 2, -1, -1):
            least_from[i] = min(least_from[i], least_from[i + 1])
        return least_from

    def _two_copies(self, period: int, pool: bool = True) -> int:
        """The span a unit of ``period`` needs besides ``min_span``: two whole copies and
        the start of a third (in reasoning, two copies of a unit up to ``_two_only``, or up
        to ``_two_only_pool`` when the unit is a pool of its own lines)."""
        two = period <= self._two_only or (pool and period <= self._two_only_pool)
        return 2 * period + (0 if two else self._past_two)

    def _code_span(self, period: int, pool: bool = False) -> int:
        """The tail that must repeat with ``period`` for a unit shaped like code (``pool``:
        a pool of its own lines); without ``pool``, the most any unit of that period needs."""
        return max(self._min_span_code, self._two_copies(period, pool))

    def _span(self, period: int, pool: bool = True) -> int:
        """The tail that must repeat with ``period`` (a unit not shaped like code); with
        ``pool``, the least any unit of that period needs."""
        least = self._span_cap
        if self._three_copies:
            least = max(self._three_copies, min(least, 3 * period))
        return max(least, self._two_copies(period, pool))

    def _multiples_needing(self, period: int, span: int, numeric: bool) -> int:
        """The least multiple of ``period`` every unit of which needs ``span`` or more
        (``numeric``: the unit of ``period`` is numeric data, and so is any repetition of it,
        whose three copies never suffice)."""
        key = (period, span, numeric)
        least = self._vouched_from.get(key)
        if least is None:
            least = 2 * period
            needs = self._numeric_needs if numeric else self._least_needs
            while least <= self._max_period and needs[least - 1] + least < span:
                least += period
            if len(self._vouched_from) >= 4096:
                self._vouched_from.clear()  # shared by every detector of the setting
            self._vouched_from[key] = least
        return least

    def _unit_span(self, unit: str, code: bool | None = None) -> int:
        """The tail that must repeat for this unit, by its shape (the same for every
        rotation of it); ``code`` is ``unit_looks_like_code(unit)`` when already known."""
        period = len(unit)
        if code is None:
            code = unit_looks_like_code(unit)
        pool = self._two_only < period <= self._two_only_pool and repeats_its_lines(unit)
        # Three copies of a unit of numbers and marks, no word (a CSV sample row), or of
        # code are data, not a thought said over: they are not cut on three copies alone.
        full_span = max(self._span_cap, self._two_copies(period, pool))
        if not code:
            if self._three_copies and is_numeric_data(unit):
                return full_span
            return self._span(period, pool)
        code_span = self._code_span(period, pool)
        # Blank table rows: a template leaves a few, a loop draws them on and on.
        copies = (self._blank_table_copies if self._blank_table_copies and is_blank_table(unit)
                  else self._code_copies)
        if (self._one_line_copies and period >= ONE_LINE_MIN_PERIOD and "\n" not in unit
                and not (copies and copies <= self._one_line_copies)
                and (unit + unit).find(unit, 1) == period):
            # Code repeats whole lines; a unit that repeats within one line is a snippet
            # flattened and said over and over. Not a repetition of a shorter unit
            # (`<td></td><td></td>`): that is the shorter unit's to judge.
            copies = self._one_line_copies
        if copies:
            return max(full_span, min(code_span, copies * period))
        return code_span

    def _reading(self, delta: str) -> str:
        """The text the periods are found in (a variant reads the stream through a map)."""
        return delta

    def _original(self, at: int) -> int:
        """The stream position of position ``at`` of the reading."""
        return at

    def _distinct_enough(self, unit: str) -> bool:
        return len(set(unit)) >= self._min_distinct

    def _may_end_here(self, n0: int, n1: int) -> bool:
        """Whether a unit ending in (n0, n1] can count; a variant whose units need some
        character skips steps without one, exactly."""
        return True

    def reset(self) -> None:
        self._buf = ""
        self._base = self._done = self._consumed = self._batch_end = self._long_end = 0
        self._candidates = None
        self._dead.clear()
        self._batch_reach = 0
        self._long = None
        self._runs.clear()
        self._next_runs.clear()
        self._run_starts.clear()
        if self._points is not None:
            self._points.reset()
        self._rejected.clear()
        self._accepted.clear()
        self._multiples_upto = 0
        self._blocked_to = 0
        self.quiet_through = self._min_span - 1

    def feed(self, delta: str) -> Trip | None:
        self._consumed += len(delta)
        if not self._max_period:
            return None
        delta = self._reading(delta)
        # The buffer takes the whole delta at once: a step reads only what lies before its
        # own end, so the text after it changes nothing (and a delta spanning two steps,
        # the common case, costs one concatenation, not two).
        self._extend(delta)
        # The loop keeps the step's state in locals (one delta spans a step or two; an
        # attribute read costs as much as the rest of a skipped step).
        done = self._done
        end = done + len(delta)
        batch_end = self._batch_end
        candidates = self._candidates
        while done < end:
            if done >= batch_end:
                # A new batch of at most one step: every window ending in it holds the same
                # anchor, so its candidate periods are looked up once for all its deltas.
                batch_end = self._batch_end = done + self._step
                candidates = self._candidates = None
                self._batch_reach = 0
                if done >= self._long_end and self._long_step:
                    self._long_end = done + self._long_step
                    self._long = None
            n1 = batch_end if batch_end < end else end
            if candidates is None and n1 >= self._min_span and self._may_end_here(done, n1):
                # The batch's candidates looked up here, not in _advance: most batches of
                # clean text have none, and then measured nothing to keep.
                candidates = self._candidates = self._candidate_periods()
                if not candidates:
                    self._runs.clear()
            if candidates is not None and not candidates:
                # The batch's anchor recurs nowhere (most batches of clean text): no window
                # ending in it can qualify, and nothing was measured to keep.
                done = n1
                continue
            self._done = done
            hit = self._advance(n1)
            done = n1
            candidates = self._candidates
            if hit is not None:
                at, period = hit
                unit = self._buf[at - self._base - period : at - self._base]
                at = self._original(at)
                code = unit_looks_like_code(unit)
                span = self._unit_span(unit, code)
                return Trip(self.rule, self._channel, self._consumed, at, {
                    "period": period,
                    "span": span,
                    "code": code,
                    "unit": unit[:120],
                })
        self._done = done
        if len(self._buf) > 2 * self._keep:
            self._extend("")  # a long delta is not kept whole until the next one comes
        # No window ending in this step qualifies when its anchor recurs nowhere, none
        # before the least span or where a variant knows none can end (``_blocked_to``),
        # and the reading gains at most a character a character.
        ahead = batch_end - done if candidates is not None and not candidates else 0
        least = (self._min_span - 1 if self._min_span - 1 > self._blocked_to
                 else self._blocked_to) - done
        self.quiet_through = self._consumed + (ahead if ahead > least else least)
        return None

    def _extend(self, delta: str) -> None:
        """Take ``delta`` into the buffer, first forgetting what no step from the current
        position on can reach (``_done`` stays: the steps move it)."""
        # Drop the attribute's reference first: with the local as the only one, CPython
        # extends the string in place instead of copying the whole buffer each time.
        buf = self._buf
        self._buf = ""
        if len(buf) > 2 * self._keep:
            cut = len(buf) - self._keep
            buf = buf[cut:]
            self._base += cut
        buf += delta
        self._buf = buf

    def _advance(self, n1: int) -> tuple[int, int] | None:
        """Judge the windows ending in (``_done``, ``n1``]; the buffer holds them."""
        n0 = self._done
        self._done = n1
        if n1 < self._min_span:
            return None
        if not self._may_end_here(n0, n1):
            # No unit ending in this step can count: what was measured is stale after it.
            self._runs.clear()
            return None
        if self._candidates is None:
            self._candidates = self._candidate_periods()
        candidates = self._candidates
        best: tuple[int, int] | None = None
        if candidates:
            nearest = candidates[0]
            at, reach, least = self._earliest(n0, n1, nearest)
            if at is not None:
                best = (at, nearest)
            elif not least:
                # An earlier part of this batch may have vouched further, for all multiples
                # up to there: had the nearest period repeated since, its run (longer now)
                # would vouch as far; it broke since, so a multiple it vouched for mismatches
                # the breaking character, and a run started after the break is shorter than
                # the batch, shorter than any unit needs. Without this, every shift of the
                # flood an anchor lay in was judged on its own once the flood ended before
                # the batch did (padded table cells: ~150 shifts a delta).
                if self._batch_reach > reach:
                    reach = self._batch_reach
                else:
                    self._batch_reach = reach
            if best is None or best[0] > n0 + 1:
                others = candidates[1:]
                if reach:
                    # The nearest period vouches for its multiples up to its reach: a window
                    # of such a multiple is repetitions of the nearest unit, so it qualifies
                    # only where the nearest does, and counts only if the nearest unit counts.
                    # The candidates up to _multiples_upto are all multiples of it.
                    upto = self._multiples_upto
                    skipped_to = bisect_right(candidates, max(nearest, min(reach, upto)))
                    kept_to = bisect_left(candidates, least, 1, skipped_to) if least else 1
                    others = candidates[1:kept_to] + candidates[skipped_to:]
                    if reach > upto:
                        others = [q for q in others if q > reach or q % nearest or q < least]
                    if least and others:
                        others = self._unjudged_multiples(others, nearest, n0, reach, least)
                if others and nearest < _FLAT_MOST:
                    others = self._crossing_flat(others, nearest, n0, n1)
                for period in others:
                    # Periods come in increasing order: a later one must trip sooner to win.
                    at, _, _ = self._earliest(n0, n1, period, n1 + 1 if best is None else best[0])
                    if at is not None and (best is None or (at, period) < best):
                        best = (at, period)
                if self._dead:
                    dead = set(self._dead)
                    self._dead.clear()
                    self._candidates = [p for p in candidates if p not in dead]
        self._runs, self._next_runs = self._next_runs, self._runs
        self._next_runs.clear()
        return best

    def _unjudged_multiples(self, periods: list[int], nearest: int, n0: int, reach: int,
                            least: int) -> list[int]:
        """Leave out of ``periods`` the multiples of ``nearest`` up to its ``reach`` and below
        ``least`` whose unit, judged in the stretch that repeats with ``nearest``, does not
        count or needs the nearest unit's span or more: no window of theirs can qualify
        before the nearest one does.

        The nearest unit counts, and its verdict (the span it needs) is kept. In the stretch
        a multiple's run is the nearest's shortened by the difference of the two periods, and
        its unit is a repetition of the nearest one: it qualifies where the nearest's run
        reaches the multiple's own span less the nearest period, so no sooner than the nearest
        when that span is no shorter. ``least`` is as far as the least span of a period
        vouches alone; this uses the span the multiple's unit was found to need (rows of data
        read as ``0`` are shaped like code: each multiple below ``least`` was judged again at
        every step, two fifths of counter-cycle's cost on SQL inserts)."""
        rejected, accepted = self._rejected, self._accepted
        span = accepted[nearest][1] + nearest
        # Where a multiple's run starts at the step's start: a period later per period more.
        start = n0 - reach
        kept = []
        for period in periods:
            if period < least and period <= reach and not period % nearest:
                # A verdict kept from this stretch stands for every window of the period in
                # it (a rotation of the unit judged), as in _unit_need.
                since = start + period
                no = rejected.get(period)
                if no is not None and since <= no:
                    continue
                yes = accepted.get(period)
                if yes is not None and since <= yes[0] and yes[1] + period >= span:
                    continue
            kept.append(period)
        return kept

    def _crossing_flat(self, periods: list[int], nearest: int, n0: int, n1: int) -> list[int]:
        """Leave out of ``periods`` those no window ending in (``n0``, ``n1``] can qualify for when
        the step lies in a stretch that repeats the nearest period's unit and that unit has
        too few distinct characters to count (a flood of spaces): a unit inside the stretch
        has the same few, so one that counts reaches back over the character that broke the
        stretch, and its window's run (never shorter than the unit) repeats that character.

        Each shift at which the anchor of a batch in a cell of spaces recurs in an older
        row's cell was judged at every delta (~150 a step in padded table rows: 0.2-0.5 M
        chars/s); a window that counts reaches back to the cell's text, which those shifts
        do not repeat."""
        run = self._next_runs.get(nearest)
        # The run kept at the step's end: every window ending in the step ends in the
        # stretch when it is no shorter than the step. A run cut at its cap measures the
        # stretch short: the character before the part measured is then the stretch's own,
        # but still inside every qualifying window's run.
        if run is None or run < n1 - n0:
            return periods
        hi = n1 - self._base
        broken = hi - run - nearest - 1
        buf = self._buf
        if broken < 0 or len(set(buf[hi - nearest : hi])) >= self._min_distinct:
            return periods
        mark = buf[broken]
        return [p for p in periods if p <= broken and buf[broken - p] == mark]

    def _unit_need(self, end: int, period: int, reach: int) -> int | None:
        """The span less ``period`` that the unit ending at stream position ``end`` needs,
        ``None`` when it does not count. The stream repeats with ``period`` from ``reach``
        on: a unit judged there or later stands for this one, a rotation of it."""
        rejected = self._rejected.get(period)
        if rejected is not None and reach <= rejected:
            return None
        accepted = self._accepted.get(period)
        if accepted is not None and reach <= accepted[0]:
            return accepted[1]
        unit = self._buf[end - self._base - period : end - self._base]
        if not self._accepts(unit):
            self._rejected[period] = end
            return None
        need = self._unit_span(unit) - period
        self._accepted[period] = (end, need)
        return need

    def _candidate_periods(self) -> list[int]:
        """The shifts, nearest first, at which the anchors of the current batch recur: the
        step's for periods up to ``_short_cap``, the long step's above."""
        periods, upto = self._recurrences(self._batch_end, self._step, self._half,
                                          self._anchor, 1, self._short_cap)
        self._multiples_upto = upto
        if not self._long_step:
            return periods
        if self._long is None:
            self._long = self._recurrences(self._long_end, self._long_step, self._long_half,
                                           self._long_anchor, self._short_cap + 1,
                                           self._max_period)
        longer, long_upto = self._long
        if longer and not long_upto:
            # A window of a long period ending in this step holds this step's anchor too:
            # a long period it does not recur at is left out for the step (most of them).
            buf, rel = self._buf, self._batch_end - self._half - self._base
            anchor = buf[rel : rel + self._anchor]
            # And, as for the step's own, each window ending in the step holds the least run
            # of its period (checked on the long step's shorter stretch: a cell of spaces
            # recurs in every older row, ~40 long shifts a step in padded table rows).
            batch_end = rel + self._half
            batch_start = batch_end - self._step + 1
            if self._compiled and len(longer) > _LONG_IN_PYTHON:
                longer = self._kernels().cycle_long_periods(
                    self._code_points(), longer, rel, self._anchor, batch_start, batch_end,
                    self._tables(), POOL_LINES)
            else:
                repeats_back = self._repeats_back
                longer = [p for p in longer if buf.startswith(anchor, rel - p)
                          and repeats_back(buf, p, batch_start, batch_end)]
        # A flood's long multiples are judged one by one (a flood is cut within a few
        # steps: listing them as one run of multiples measured no faster).
        return periods + longer if longer else periods

    def _recurrences(self, batch_end: int, step: int, half: int, g: int, shortest: int,
                     longest: int) -> tuple[list[int], int]:
        """The shifts from ``shortest`` to ``longest``, nearest first, at which the anchor of
        the batch of ``step`` characters ending at ``batch_end`` (``g`` characters, ``half``
        before its end) recurs; and how far they are all the multiples of the nearest one
        (0: no such run)."""
        buf = self._buf
        rel = batch_end - half - self._base
        anchor = buf[rel : rel + g]
        low = max(0, rel - longest)
        end = rel - shortest + g
        periods: list[int] = []
        upto = 0
        if shortest == 1:
            q = buf.rfind(anchor, low, end) if end - low >= g else -1
            if q < 0:
                # Recurs nowhere (most steps of clean text): searching again finds no more.
                return periods, upto
            flood = 2 * (rel - q) <= g
        else:
            # Only the recurrences within the anchor itself are looked for here.
            q = buf.rfind(anchor, max(low, rel - g // 2), rel - 1 + g) if rel - 1 >= low else -1
            flood = q >= 0
        if flood:
            if self._compiled:
                listed: tuple[list[int], int] | None = self._kernels().cycle_flood_periods(
                    self._code_points(), rel, g, half, step, shortest, longest, q,
                    self._tables(), POOL_LINES)
                if listed is not None:
                    return listed
            # The anchor repeats within itself (digits read as 0, a flood): in the stretch
            # before it that repeats with the nearest shift, the anchor recurs exactly at
            # that shift's multiples (an anchor two shifts long can match at no other shift
            # there), so they are listed without searching for each.
            nearest = rel - q
            run = self._run_starts.run_back(buf, self._base, rel + g, nearest, rel + g - low)
            start = max(low, rel + g - run - nearest)
            upto = (rel - start) // nearest * nearest
            first = -(-shortest // nearest) * nearest
            periods.extend(range(first, upto + 1, nearest))
            if not periods:
                upto = 0
            end = min(end, start - 1 + g)
            if end - low >= g:
                self._older_floods(periods, buf, anchor, rel, half, step, low, end, nearest,
                                   start - 1)
            return periods, upto
        if q >= 0:
            periods.append(rel - q)
            end = q - 1 + g
        while end - low >= g:
            q = buf.rfind(anchor, low, end)
            if q < 0:
                break
            periods.append(rel - q)
            end = q - 1 + g
        if shortest == 1 and periods:
            # Every window of the batch holds its period's least run, so each repeats the
            # characters from that far before the batch's end to just after its start: a
            # shift that does not is left out here with one comparison (an anchor at the
            # start of a line of digits recurs in every older line ending in step with it).
            batch_end = rel + half
            batch_start = batch_end - step + 1
            repeats_back = self._repeats_back
            periods = [p for p in periods if repeats_back(buf, p, batch_start, batch_end)]
        return periods, upto

    @staticmethod
    def _kernels() -> ModuleType:
        kernels = accelerator.loaded()
        assert kernels is not None  # loaded before the rule was made, never unloaded
        return kernels

    def _code_points(self) -> object:
        """The buffer's code points as the kernels read them."""
        points = self._points
        if points is None:
            points = self._points = self._kernels().CodePoints()
        return points.of(self._buf, self._base)

    def _tables(self) -> CycleTables:
        """The least runs by period as the kernels read them (one copy per setting)."""
        return self._kernels().cycle_tables(  # type: ignore[no-any-return]
            self._least_needs, self._lineless_needs, self._least_from, self._lineless_from)

    def _repeats_back(self, buf: str, period: int, batch_start: int, batch_end: int,
                      lineless: bool = False) -> bool:
        """Whether the text from the least run a window of ``period`` ending in the batch
        needs (``_batch_need``; ``lineless``: known to be a unit's that is no pool) before the
        batch's end to just after its start repeats with ``period``: every window ending in
        the batch holds that much of its run (buffer positions)."""
        need = self._least_needs[period - 1]
        c = batch_end - need
        if c < period:
            return False
        lineless_need = self._lineless_needs[period - 1]
        if need != lineless_need:
            # A unit's own least is never shorter than the pool's: where the stretch the
            # pool's reaches (up to the batch's start) does not repeat, the longer one's
            # cannot either, and the line breaks need not be counted (most long shifts of a
            # batch in a padded table's cell of spaces, each counting a few thousand
            # characters).
            if c < batch_start and (buf[c] != buf[c - period] or buf[c:batch_start] != buf[
                    c - period : batch_start - period]):
                return False
            need = (lineless_need if lineless
                    else self._batch_need(buf, period, batch_start, batch_end))
            c = batch_end - need
        return c >= period and buf[c] == buf[c - period] and buf[c:batch_start] == buf[
            c - period : batch_start - period]

    def _batch_need(self, buf: str, period: int, batch_start: int, batch_end: int) -> int:
        """The least run a window of ``period`` ending in the batch (``batch_start`` to
        ``batch_end``, buffer positions) needs: the pool's least when a unit there could be a
        pool of lines, else a unit's without it. A qualifying unit repeats the one before it,
        so its line breaks are counted there, in text already read (a period shorter than the
        batch could find that stretch unread: the pool's least then).

        A unit of a padded table row (a cell of 250 spaces) is no pool: at the pool's least
        (two copies) the windows of a batch reach back only into the cell's spaces, and every
        shift that lands in an older row's cell was kept as a candidate and judged by each
        delta (0.3 M chars/s); with the third copy they reach the cell's text."""
        if self._no_pool(buf, period, period, batch_start, batch_end):
            return self._lineless_needs[period - 1]
        return self._least_needs[period - 1]

    @staticmethod
    def _no_pool(buf: str, shortest: int, longest: int, batch_start: int,
                 batch_end: int) -> bool:
        """Whether no unit of a period from ``shortest`` to ``longest`` qualifying in the
        batch can be a pool of lines: the text its earlier copy lies in, all received, holds
        too few line breaks for one."""
        if batch_end - shortest > len(buf):
            return False
        return buf.count("\n", max(0, batch_start - 2 * longest),
                         max(0, batch_end - shortest)) < POOL_LINES

    def _older_floods(self, periods: list[int], buf: str, anchor: str, rel: int, half: int,
                      step: int, low: int, end: int, nearest: int, broken: int) -> None:
        """Add to ``periods`` the shifts at which a flood's anchor (at ``rel``, repeating with
        ``nearest``) recurs in the older text before ``end``, leaving out those that cannot
        count in the batch (``broken``: the character just before the flood it is in).

        The anchor recurs at every ``nearest``-th shift of an older flood of the same
        characters and nowhere else in it (its least period is ``nearest``), so a flood is
        measured once, not searched shift by shift; and a window of a period whose least
        run reaches from the batch's end back over ``broken`` must repeat that character
        there (lines of ``a`` growing by one, indented lines: ~170 shifts a step, each
        judged, at 0.3 M chars/s)."""
        g = len(anchor)
        least_from, lineless_from = self._least_from, self._lineless_from
        repeats_back = self._repeats_back
        run_back, base = self._run_starts.run_back, self._base
        # Windows of this batch end within a step of its end (``half`` after the anchor
        # starts) and need at least their period's least run, longer than a step: every one
        # compares the characters from that run's length before the batch's end to just
        # after its start (in a staircase of digit lines each older line long enough offers
        # a shift a step whose run ends at the line's start).
        batch_end = rel + half
        batch_start = batch_end - step + 1
        must_repeat = batch_end - broken
        mark = buf[broken]
        # The least runs grow with the period: from this one on, every window reaches back
        # over ``broken``, and only a shift that puts the breaking character there can count.
        # A unit that is no pool of lines needs more: from an earlier period on.
        reaching_pool = bisect_left(least_from, must_repeat) + 1
        reaching_lineless = bisect_left(lineless_from, must_repeat) + 1
        while end - low >= g:
            q = buf.rfind(anchor, low, end)
            if q < 0:
                return
            older = run_back(buf, base, q + g, nearest, q + g - low)
            first = q - (q - max(low, q + g - older - nearest)) // nearest * nearest
            shortest, longest = rel - q, rel - first
            # No unit of this flood's shifts is a pool when their text holds too few line
            # breaks for one (asked once for them all; a padded table cell's shifts).
            lineless = reaching_lineless < reaching_pool and self._no_pool(
                buf, shortest, longest, batch_start, batch_end)
            reaching = reaching_lineless if lineless else reaching_pool
            for period in range(shortest, min(longest + 1, reaching), nearest):
                if repeats_back(buf, period, batch_start, batch_end, lineless):
                    periods.append(period)
            # The rest, nearest first: where the breaking character recurs before it, found
            # by searching for it rather than testing each shift (one a line of a triangle).
            lowest = max(shortest, reaching)
            x = broken - lowest + 1
            while longest >= lowest and x > 0:
                x = buf.rfind(mark, max(0, broken - longest), x)
                if x < 0:
                    break
                period = broken - x
                if (period - shortest) % nearest == 0 and repeats_back(
                        buf, period, batch_start, batch_end, lineless):
                    periods.append(period)
            end = first - 1 + g

    def _earliest(self, n0: int, n1: int, period: int,
                  before: int | None = None) -> tuple[int | None, int, int]:
        """The first ``m`` in (n0, n1] where the window of ``period`` qualifies, and how far
        the period vouches for its multiples in this step: they cannot qualify in it before
        it does up to that length (0: no such promise), from the multiple given third on (0:
        all of them). With ``before``, an ``m`` there or later
        is not looked for (``None`` instead): a shorter period already trips there, and
        judging a unit's shape is the dear part (a flood of ``好。`` offers dozens of
        multiples, each once judged as code or prose)."""
        needs = self._needs.get(period)
        if needs is None:
            # Runs are measured up to the longest period too, so a rejected unit can vouch
            # for its multiples.
            needs = self._needs[period] = (
                self._span(period) - period,
                max(self._code_span(period) - period,
                    self._span(period, pool=False) - period, self._max_period))
        need, cap = needs
        last = n1 if before is None else min(n1, before - 1)
        buf, base = self._buf, self._base
        lo, hi = n0 - base, n1 - base
        run = self._runs.get(period)
        if run is None:
            # No window of this step can qualify unless the run before it reaches this far;
            # one character tells most chance recurrences of the anchor apart.
            reach = lo - (need - (n1 - n0))
            if reach < lo:
                if reach - period < 0 or buf[reach] != buf[reach - period]:
                    return None, 0, 0
                if before is not None and buf[reach:lo] != buf[reach - period : lo - period]:
                    # Shorter than that: only the nearest period's run is read whatever it
                    # is (it vouches for the multiples); another's is measured again by the
                    # next step that needs it. One comparison, not the run's measuring (a
                    # flood's anchor recurs at every shift of an older flood: ~170 periods
                    # a step in lines of a's growing by one, each measured).
                    dead_from = self._batch_end - base - need
                    if dead_from < lo and buf[dead_from:lo] != buf[
                            dead_from - period : lo - period]:
                        # A mismatch this late leaves every later window of the batch a run
                        # too short: the period is done with for the batch (counter-cycle's
                        # batches span eight deltas of 64 characters, each judged it again).
                        self._dead.append(period)
                    return None, 0, 0
            run = _match_run_back(buf, lo, period, cap)
        repeats = lo >= period and buf[lo:hi] == buf[lo - period : hi - period]
        # Each window of this step up to where the step breaks the period (all of them when
        # it repeats) holds at least this much of a repeating stretch; a multiple's window
        # ending after the break does not repeat the breaking character (the one it is
        # compared with is the one this period's was), and a run started after the break is
        # shorter than any unit needs. Nothing of this period qualifying, its multiples up to
        # this far cannot: a flood's are not judged one by one each time a line ends.
        vouched = run + period
        if repeats:
            self._next_runs[period] = min(cap, run + (n1 - n0))
        if run + (n1 - n0) < need:
            return None, vouched, 0
        numeric = False
        if self._three_copies and lo >= period:
            # A step is no longer than any unit needs, so only the run going on from before it
            # can qualify and the unit is a rotation of the one just before it: three copies
            # of numeric data never suffice, nor for any repetition of it, so such a unit is
            # held to the full span before its shape is judged (each older line of a
            # staircase of digit lines offers a shift of its own, each unit once judged as
            # code or prose).
            numeric_need = self._numeric_needs[period - 1]
            if numeric_need > need and is_numeric_data(buf[lo - period : lo]):
                numeric = True
                need = numeric_need
                if run + (n1 - n0) < need:
                    return None, vouched, 0
        if repeats:
            # The whole step repeats (a loop in full swing): the run grows by one per character.
            # The least span any unit of the period needs: its own is no shorter.
            at = max(n0 + 1, n0 + need - run, need + period)
            if at > last:
                return None, vouched, 0
            unit_need = self._unit_need(at, period, n0 - run)
            if unit_need is None:
                return None, vouched, 0
            if unit_need != need:
                at = max(n0 + 1, n0 + unit_need - run, unit_need + period)
            # Its multiples need no less than the least span of any unit of theirs, and a
            # window of one within ``vouched`` holds a shorter run than this period's: those
            # whose least span is this unit's or more cannot qualify before it (a staircase
            # of digit lines, each line a flood of one unit: ~30 multiples a step otherwise).
            least = self._multiples_needing(period, unit_need + period, numeric)
            return (at if at <= last else None), vouched, least
        stop = min(hi, last - base)
        if need > n1 - n0 and lo >= period:
            # The step breaks the run somewhere, and a run started after that is shorter
            # than any unit needs: only the run going on from before can qualify, up to the
            # break. Where it would first qualify is worked out and checked with a
            # comparison, not walked to a character at a time (a flood's older shifts, lines
            # growing by one: ~100 characters a period a step).
            m = max(lo + 1, lo + need - run, need + period - base)
            least = 0
            if m <= stop and buf[lo:m] == buf[lo - period : m - period]:
                shape_need = self._unit_need(m + base, period, m + base - (run + m - lo))
                if shape_need is None:
                    return None, vouched, 0
                m = max(m, lo + shape_need - run, shape_need + period - base)
                if m <= stop and buf[lo:m] == buf[lo - period : m - period]:
                    return m + base, 0, 0
                # The unit counts, and may need more than its period's least span: it vouches
                # only for the multiples that need as much (a repetition of it can be a pool
                # of lines, cut after two copies: one was skipped here, and missed, when the
                # step ended just past where it qualified).
                least = self._multiples_needing(period, shape_need + period, numeric)
            if stop == hi:
                self._next_runs[period] = min(cap, _match_run_back(buf, hi, period, hi - lo))
            return None, vouched, least
        # Every qualifying unit is a rotation of the same cycle: judge its shape once.
        shape_need = None
        # Past ``last`` nothing is looked for; the run then is not kept for the next step.
        for i in range(lo, stop):
            if i >= period and buf[i] == buf[i - period]:
                run += 1
            else:
                run = 0
            m = i + 1
            if m == hi:
                self._next_runs[period] = min(cap, run)
            if run >= need and m + base >= need + period:
                if shape_need is None:
                    shape_need = self._unit_need(m + base, period, m + base - run)
                    if shape_need is None:
                        return None, 0, 0
                if run >= shape_need and m + base >= shape_need + period:
                    return m + base, 0, 0
        return None, 0, 0
