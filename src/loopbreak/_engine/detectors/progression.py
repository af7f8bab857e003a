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

from loopbreak._config import ProgressionConfig
from loopbreak._engine.masking import split_digit_runs
from loopbreak._engine.trip import Channel, Trip

PROGRESSION = "progression"

# Digits beyond this make a number no counter (and keep the arithmetic cheap).
_MAX_DIGITS = 18


def _counter(digits: str) -> int | None:
    """A number's value, ``None`` when it is too long to be a counter."""
    return int(digits) if len(digits) <= _MAX_DIGITS else None


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
        self._settle_quiet()

    def feed(self, delta: str) -> Trip | None:
        start = self._consumed
        self._consumed += len(delta)
        if not self._min_terms or not delta:
            return None
        digits = self._digits
        # The split alternates text between numbers (maybe empty) and numbers; the number
        # being read goes in front, so it is read whole.
        parts = split_digit_runs(digits + delta if digits else delta)
        if len(parts) == 1 and not digits and len(self._sep) > self._max_sep:
            self._settle_quiet()
            return None  # prose far from any number: nothing to read
        if max(self._terms, 1) + len(parts) // 2 < self._min_terms and \
                self._take_without_trip(parts):
            self._settle_quiet()
            return None
        trip = self._feed_stepwise(parts, start - len(digits))
        if trip is None:
            self._settle_quiet()
        return trip

    def _settle_quiet(self) -> None:
        # The run grows by one term a number, and a number is complete only at the
        # character after it: each term missing needs a digit and that character (the
        # number being read, only the character).
        missing = self._min_terms - self._terms
        self.quiet_through = self._consumed + 2 * missing - (2 if self._digits else 1)

    def _take_without_trip(self, parts: list[str]) -> bool:
        """Read a delta that cannot trip (its numbers, counted on from the run so far, stay
        short of ``min_terms``) straight to the state the number-by-number reading ends in:
        the count after the last number is the length of the run of equal steps that ends
        there, read backwards, and most numeric text breaks it within a step or two
        (numeric CSV, one number per line: no Python step per number). ``False``, with
        nothing changed, when the last complete number is too long to be a counter (the
        stepwise reading handles it)."""
        max_sep = self._max_sep
        # The text before the first number: the number being read began after the last
        # separator; otherwise the delta's first text goes on from it.
        before = self._sep if self._digits else (self._sep + parts[0])[: max_sep + 1]
        numbers = parts[1::2]
        if not numbers:
            self._sep = before
            return True
        after = parts[2::2]
        done = len(numbers) if after[-1] else len(numbers) - 1
        if done and not self._settle(numbers, done, before, after):
            return False
        if done == len(numbers):
            self._digits, self._sep = "", after[-1][: max_sep + 1]
        else:
            self._digits = numbers[-1][: _MAX_DIGITS + 1]
            self._sep = before if done == 0 else after[done - 1][: max_sep + 1]
        return True

    def _settle(self, numbers: list[str], done: int, before: str, after: list[str]) -> bool:
        """The count, step and separator after the ``done`` complete ``numbers``: the first
        came after ``before``, each later one ``j`` after ``after[j - 1]``. Only the numbers
        the run reaches back over are read as integers; one too long to count breaks the
        run (a count after it starts over), and ``False`` (nothing changed) when it is the
        last."""
        last = done - 1
        value = _counter(numbers[last])
        if value is None:
            return False
        first_prev = self._prev
        prev = _counter(numbers[last - 1]) if last else first_prev
        sep = after[last - 1] if last else before
        self._prev = value
        if len(sep) > self._max_sep or prev is None or value == prev:
            self._terms = 1  # a new start (the step and separator are read only from 2 on)
            return True
        step = value - prev
        # Back over the numbers whose step and separator are the last ones: j is the first
        # number of the run (its step from the number before it is the run's).
        j = last - 1
        while j > 0 and after[j - 1] == sep:
            earlier = _counter(numbers[j - 1])
            if earlier is None or prev - earlier != step:
                break
            prev = earlier
            j -= 1
        if j > 0 or (last and not (first_prev is not None and prev - first_prev == step
                                    and before == sep)):
            self._terms = last - j + 1
        elif self._terms >= 2 and (self._step, self._template) == (step, sep):
            self._terms += last + 1  # the run goes on from before this delta
        else:
            self._terms = last + 2
        self._step, self._template = step, sep
        return True

    def _feed_stepwise(self, parts: list[str], start: int) -> Trip | None:
        """Read ``parts`` number by number (``start``: the stream position of their first
        character), with the state in locals: numeric text ends a number every few
        characters, and a method call per number was most of the rule's cost."""
        digits, sep, max_sep = "", self._sep, self._max_sep
        prev, step, template, terms = self._prev, self._step, self._template, self._terms
        min_terms = self._min_terms
        trip: Trip | None = None
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
