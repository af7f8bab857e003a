"""counter-cycle: the tail repeats once every number reads as 0.

A small model asked for a list can fall into ``14. Pluto`` / ``15. Pluto`` /
``16. Pluto`` ... until its token budget runs out. No two lines are equal, so
``lines`` sees nothing, and the ticking number breaks every period ``cycle``
could find. Read with every run of digits as one ``0`` (so ``9.`` and ``10.``
read alike), the tail is periodic again: this rule is ``cycle`` over that
reading, with a position map back to the stream so ``at`` stays exact. Its
evidence shows the unit as read (``0. Pluto``).

Data repeats with only its numbers changing for good reasons (a base64 image
attached twice, ``KEY_F1`` ... ``KEY_F63`` tables, a training log, an
enumeration of candidates), so a unit counts only if

* at least ``min_word_share`` of its characters lie in words of letters (a CJK
  character is a word), taken around the cycle so that every rotation scores
  the same: the base64 stretch in CPython's ``test_email`` scores 0.01;
* it holds at most ``max(2, words / words_per_number)`` numbers: a counted
  template changes one number, a log line (``Epoch 3/30 - loss: 0.52 - acc:
  0.81``) five;
* the tail holds ``min_copies`` whole copies of it, not cycle's two: an honest
  enumeration (the dice totals 3 to 6, each in the same sentence) repeats its
  template three or four times and stops.

Measured 2026-12-01 on the development corpus (``loopbreak calibrate``: 1,344
real loops from five public sources and the shared corpus, 25,800 clean
streams): ``words_per_number`` 0.5 cuts 2 more loops and trips nothing, 1 keeps a
step of margin, 4 and 8 miss 19 and 26 more; a text span of 192 trips two real
answers, a reasoning span of 384 a real enumeration of multiples of 30 (512 is
the first clean, 768 keeps a margin). Of the 6 runaway lists SmolLM2-135M wrote
(``_data/smollm2_lists.jsonl``), which every other rule misses, it cuts all 6.
"""

from __future__ import annotations

import re
import types
from bisect import bisect_left
from typing import TypeVar

from loopbreak._config import CounterCycleConfig, CycleConfig
from loopbreak._engine.charclass import CJK_RANGES
from loopbreak._engine.detectors.cycle import CycleDetector
from loopbreak._engine.masking import ascii_digits_as_zero
from loopbreak._engine.rotations import RotationVerdicts
from loopbreak._engine.trip import Channel

COUNTER_CYCLE = "counter-cycle"

DIGITS_AS_ZERO: dict[int, str] = {
    **{ord(c): "0" for c in "123456789"},
    **{cp: "0" for cp in range(0xFF10, 0xFF1A)},  # full-width digits
}
"""ASCII and full-width digits as ``0``; a run of them is then read as one ``0``."""

_ZERO_RUN = re.compile("0{2,}")
# A character a word of letters is made of (``_WORD``'s letters, CJK included).
_LETTER = re.compile(r"[^\W\d_]")
# How far back from a step's end a letter is looked for first.
_LETTER_TAIL = 64
_NONZERO_DIGIT = re.compile("[1-9\uff10-\uff19]")
# Every CJK character is a word of its own (CJK prose has no spaces); anything else
# between spaces or CJK characters is a token.
_TOKEN = re.compile(f"[{CJK_RANGES}]|[^\\s{CJK_RANGES}]+")
_CJK_CHAR = re.compile(f"[{CJK_RANGES}]")
_LETTER_RUN = re.compile(f"[{CJK_RANGES}]|[^\\W\\d_{CJK_RANGES}]+")
# A character no letter run (outside CJK) passes through: a unit rotated to start at one
# cuts no word in two.
_NOT_IN_WORD = re.compile(f"[{CJK_RANGES}]|[\\W\\d_]")
# A word of letters, with the quotes, apostrophes, hyphens and closing punctuation prose
# puts around and inside one.
_WORD = re.compile(r"[(\"'\u2018\u201c]?[^\W\d_]+(?:[-'\u2019][^\W\d_]+)*[.,;:!?)\"'\u2019\u201d]*")


def digits_as_zero(text: str) -> str:
    """``text`` with every digit read as ``0``."""
    if text.isascii():
        return ascii_digits_as_zero(text)
    # str.translate looks every character up in a dict: CJK prose, which seldom holds a
    # digit, is searched for one first.
    if _NONZERO_DIGIT.search(text) is None:
        return text
    return text.translate(DIGITS_AS_ZERO)


def read_counters(text: str) -> str:
    """``text`` as this rule reads it: every run of digits as a single ``0``."""
    return _one_zero_a_run(digits_as_zero(text))


def _one_zero_a_run(mapped: str) -> str:
    """``mapped`` (digits read as ``0``) with each run of zeros as one."""
    # Each pass halves every run, in C: a pass per doubling of the longest run costs less
    # than a regex match per number (a counting run, numeric CSV: half the reading's cost).
    while "00" in mapped:
        mapped = mapped.replace("00", "0")
    return mapped


def kept_positions(text: str) -> list[int]:
    """Where each character of ``read_counters(text)`` stands in ``text``: every
    character but a digit that follows a digit."""
    folded = digits_as_zero(text)
    return [i for i, c in enumerate(folded) if not (c == "0" and i and folded[i - 1] == "0")]


def word_share(unit: str) -> float:
    """The share of ``unit``'s non-space characters that lie in words of letters, with the
    unit read as a cycle (a word cut by the unit's edge counts whole), so every rotation of
    a unit scores the same. A unit with neither whitespace nor a CJK character is one
    endless token: 0."""
    first_break = next((i for i, c in enumerate(unit) if c.isspace() or _CJK_CHAR.match(c)),
                       -1)
    if first_break < 0:
        return 0.0
    cyclic = unit[first_break:] + unit[:first_break]
    tokens = _TOKEN.findall(cyclic)
    total = sum(len(t) for t in tokens)
    words = sum(len(t) for t in tokens if _WORD.fullmatch(t))
    return words / total if total else 0.0


_Variant = TypeVar("_Variant", bound=type[CycleDetector])


def _with_own_code(cls: _Variant) -> _Variant:
    """Give ``cls`` its own copy of each function it inherits from ``CycleDetector``.

    CPython (3.11 on) specializes a function's bytecode for the types it meets, in the
    function's code object. A guard runs cycle and counter-cycle one after the other on
    every batch: sharing one code, each undid the other's specializations (attribute reads
    keyed by the instance's type), and the two rules cost 8 ns a character more of the
    guard's ~220 at 32-character deltas (measured, both channels). The copies are the same
    functions; ``super()`` in one still means what it meant (the closure is the same)."""
    for name, value in vars(CycleDetector).items():
        if isinstance(value, types.FunctionType) and name not in vars(cls):
            copy = types.FunctionType(value.__code__.replace(), value.__globals__, name,
                                      value.__defaults__, value.__closure__)
            copy.__kwdefaults__ = value.__kwdefaults__
            copy.__qualname__ = f"{cls.__name__}.{name}"
            copy.__doc__ = value.__doc__
            copy.__annotations__ = dict(value.__annotations__)
            copy.__dict__.update(value.__dict__)
            setattr(cls, name, copy)
    return cls


@_with_own_code
class CounterCycleDetector(CycleDetector):
    """``cycle`` over the stream with every number read as ``0``, for prose-shaped units
    that hold a number."""

    rule = COUNTER_CYCLE

    def __init__(self, config: CounterCycleConfig | None = None,
                 cycle: CycleConfig | None = None, channel: Channel = "reasoning", *,
                 compiled: bool = False) -> None:
        cfg = config or CounterCycleConfig()
        span = cfg.min_span_reasoning if channel == "reasoning" else cfg.min_span_text
        self._copies = cfg.min_copies  # read by the span the base class sizes its buffer for
        super().__init__(cycle, channel, min_span=span, max_period=cfg.max_period,
                         three_copies_span=0, compiled=compiled)
        self._min_word_share = cfg.min_word_share
        self._words_per_number = cfg.words_per_number
        self._accepts = self._counted_prose
        # The verdicts are looked up by setting when asked, not held: a guard is copied and
        # pickled whole, and what its rules share stays the process's.
        self._prose_setting = (self._min_distinct, self._words_per_number, self._min_word_share)
        self._after_digit = False
        # The deltas whose reading dropped digits: (reading position where the delta's
        # reading starts and ends, the delta with digits read as 0, whether its leading
        # digits went on from the last delta's, digits dropped after it by deltas that only
        # went on with its last number, digits dropped before it since the stream began).
        # A reading position is mapped back to the stream only when a trip is found, so a
        # delta costs no more than its reading; the last field makes that a search, not a
        # walk over every entry kept (4,096 of them in numeric text).
        self._drops: list[tuple[int, int, str, bool, int, int]] = []
        # Digits dropped by the deltas no longer kept.
        self._forgotten = 0
        # A unit that counts holds a word of letters (when words are asked for at all): the
        # reading position just past the last letter found (0: none yet), and how far the
        # reading has been searched for one (only when a step asks: prose answers at once).
        self._letters_needed = cfg.min_word_share > 0
        self._letter_end = 0
        self._letters_read = 0
        # The same for a number (read as ``0``): a unit that counts holds one.
        self._number_end = 0
        self._numbers_read = 0

    def reset(self) -> None:
        super().reset()
        self._after_digit = False
        self._drops.clear()
        self._forgotten = 0
        self._letter_end = self._letters_read = 0
        self._number_end = self._numbers_read = 0

    def _variant_key(self) -> tuple[object, ...]:
        return (self._copies,)

    def _two_copies(self, period: int, pool: bool = True) -> int:
        # A counted template must show more copies than cycle asks of a verbatim unit.
        return self._copies * period + self._past_two

    def _reading(self, delta: str) -> str:
        return self._read_delta(delta)

    def _read_delta(self, delta: str) -> str:
        """``delta`` as ``read_counters`` reads it, a number begun in the last delta going
        on here; the digits dropped are recorded for ``_original``."""
        mapped = digits_as_zero(delta)
        goes_on = self._after_digit and mapped[:1] == "0"
        if mapped:
            self._after_digit = mapped[-1] == "0"
        if "00" not in mapped and not goes_on:
            # No digit follows a digit: the reading keeps every character.
            return mapped
        # Each run of n digits keeps its first; a run that went on from the last delta
        # keeps none here.
        reading = _one_zero_a_run(mapped)
        if goes_on:
            reading = reading[1:]
        done = self._done
        drops = self._drops
        if not reading:
            # Only more digits of the last number (an endless one, a digit a delta): they
            # drop where the reading stands, counted on the entry that ends there.
            if drops and drops[-1][1] == done:
                start, end, last, last_goes_on, after, before = drops[-1]
                drops[-1] = (start, end, last, last_goes_on, after + len(mapped), before)
            else:
                self._add_drop(done, done, "", False, len(mapped))
            return reading
        self._add_drop(done, done + len(reading), mapped, goes_on, 0)
        if len(drops) > 4096:
            self._forget()
        return reading

    def _add_drop(self, start: int, end: int, mapped: str, goes_on: bool, after: int) -> None:
        drops = self._drops
        before = self._forgotten
        if drops:
            # The last entry is complete now: its digits after it can no longer grow.
            last_start, last_end, last, _, last_after, last_before = drops[-1]
            before = last_before + _all_dropped(last_start, last_end, last, last_after)
        drops.append((start, end, mapped, goes_on, after, before))

    def _forget(self) -> None:
        # Deltas that end before the buffer can no longer be asked for.
        drops = self._drops
        keep_from = 0
        while keep_from < len(drops) and drops[keep_from][1] < self._base:
            start, end, mapped, _, after, _ = drops[keep_from]
            self._forgotten += _all_dropped(start, end, mapped, after)
            keep_from += 1
        del drops[:keep_from]

    def _original(self, at: int) -> int:
        # A dropped digit counts once ``at`` passes the reading position just after the
        # digit its run kept (for a run that went on from the last delta: where this
        # delta's reading starts). Every entry before the last that starts before ``at``
        # ends before it (entries follow one another), so only that one is read.
        last = bisect_left(self._drops, at, key=_entry_start) - 1
        if last < 0:
            return at + self._forgotten
        start, end, mapped, goes_on, after, dropped = self._drops[last]
        if end < at:
            dropped += after
        body = 0
        if goes_on:
            body = len(mapped) - len(mapped.lstrip("0"))
            dropped += body
        before = 0  # digits of this delta dropped after the leading run, so far
        for run in _ZERO_RUN.finditer(mapped, body):
            if start + run.start() - body - before + 1 >= at:
                break
            lost = run.end() - run.start() - 1
            dropped += lost
            before += lost
        return at + dropped

    def _may_end_here(self, n0: int, n1: int) -> bool:
        # A unit that counts holds a digit and a letter and ends in (n0, n1], so it lies
        # within [n0 + 1 - max_period, n1): without both there, the step cannot trip (prose
        # without numbers costs one search less, numbers without words, a CSV or a counting
        # run, cost none: they once cost this rule more than any other).
        low = n0 + 1 - self._max_period
        if self._letter_end <= low and self._letters_needed and not self._letter_since(low, n1):
            return self._blocked_after(n1)
        if self._number_end > low:
            return True
        # The last number read serves the steps until ``low`` passes it; no ``0`` lies
        # between it and where the search reached.
        base = self._base
        at = self._buf.rfind("0", max(0, max(low, self._numbers_read) - base), n1 - base)
        self._numbers_read = n1
        if at < 0:
            return self._blocked_after(n1)
        self._number_end = at + base + 1
        return True

    def _blocked_after(self, n1: int) -> bool:
        """No unit that counts ends at or before ``n1`` + the least run any unit needs:
        ``False`` (this step cannot trip), and the rule quiet that far.

        [n0 + 1 - max_period, n1) holds no number (or no letter), and every period-long
        stretch of a repeating window holds what its unit holds. A window that took in
        that range whole would hold a stretch inside it, so it starts after its start, and
        its first stretch reaches past ``n1``: the window ends more than its span less its
        period, at least ``_least_run``, after ``n1``."""
        blocked = n1 + self._least_run
        if blocked > self._blocked_to:
            self._blocked_to = blocked
        return False

    def _letter_since(self, low: int, n1: int) -> bool:
        """Whether a letter lies in the reading's [low, n1), ``_letter_end`` past
        ``low``. No letter lies in [_letter_end, _letters_read): what is searched once is
        not searched again (``low`` only grows)."""
        base = self._base
        start = max(0, max(low, self._letters_read) - base)
        # The last characters first: a letter found there serves the steps of about a
        # period to come, one found near ``low`` only this one (prose asked every step).
        tail = max(start, n1 - base - _LETTER_TAIL)
        found = _LETTER.search(self._buf, tail, n1 - base)
        if found is None and tail > start:
            found = _LETTER.search(self._buf, start, tail)
        if found is None:
            self._letters_read = n1
            return False
        self._letter_end = self._letters_read = found.end() + base
        return True

    def _counted_prose(self, unit: str) -> bool:
        return _prose_verdicts(self._prose_setting).verdict(unit, self._judge_counted_prose)

    def _judge_counted_prose(self, unit: str) -> bool:
        """Whether a unit counts: a number, enough distinct characters, and words (each
        read round the cycle, so every rotation of the unit gets the same answer)."""
        numbers = unit.count("0")
        return (numbers > 0 and self._distinct_enough(unit)
                and numbers <= max(2, _words(unit) / self._words_per_number)
                and word_share(unit) >= self._min_word_share)


_PROSE_VERDICTS: dict[tuple[int, float, float], RotationVerdicts] = {}


def _prose_verdicts(setting: tuple[int, float, float]) -> RotationVerdicts:
    """The units judged lately under one setting (distinct characters, words per number,
    word share), and whether each counts: shared by the rules of that setting (a guard starts
    its rules afresh after every trip, and rows of data that trip it every few dozen rows
    bring the same few cycles back)."""
    verdicts = _PROSE_VERDICTS.get(setting)
    if verdicts is None:
        if len(_PROSE_VERDICTS) >= 4:  # a process runs a setting or two
            _PROSE_VERDICTS.clear()
        verdicts = _PROSE_VERDICTS[setting] = RotationVerdicts(64)
    return verdicts


def _entry_start(entry: tuple[int, int, str, bool, int, int]) -> int:
    return entry[0]


def _all_dropped(start: int, end: int, mapped: str, after: int) -> int:
    """The digits an entry of ``_drops`` dropped, all of them: its own and those after it."""
    return len(mapped) - (end - start) + after


def _words(unit: str) -> int:
    """Words of letters in ``unit`` read as a cycle (a CJK character is one; a word cut by
    the unit's edge counts once), so every rotation and repetition of a unit counts alike."""
    edge = _NOT_IN_WORD.search(unit)
    if edge is None:
        return len(_LETTER_RUN.findall(unit))
    cut = edge.start()
    return len(_LETTER_RUN.findall(unit[cut:] + unit[:cut]))
