"""identical-chunks (text): the same visible delta, over and over.

Catches an answer stream stuck on one token or one line (``好。`` x 1000,
``\\n`` floods). This rule counts deltas by definition, so it is the one rule
whose decision depends on how the stream is split. Empty deltas (role or usage
chunks carry ``""``) are not deltas of the answer and are skipped.
"""

from __future__ import annotations

from collections.abc import Iterable
from operator import eq

from loopbreak._config import IdenticalChunksConfig
from loopbreak._engine.trip import Channel, Trip

IDENTICAL_CHUNKS = "identical-chunks"


class IdenticalChunksDetector:
    """Consecutive deltas equal after stripping."""

    def __init__(self, config: IdenticalChunksConfig | None = None,
                 channel: Channel = "text") -> None:
        self._limit = (config or IdenticalChunksConfig()).max_repeats
        self._channel: Channel = channel
        self._consumed = 0
        self._last: str | None = None
        self._run = 0

    @property
    def consumed(self) -> int:
        return self._consumed

    def reset(self) -> None:
        self._consumed = 0
        self._last = None
        self._run = 0

    def feed(self, delta: str) -> Trip | None:
        return self.feed_pieces((delta,))

    def feed_pieces(self, deltas: Iterable[str], chars: int | None = None, *,
                    joined: str | None = None) -> Trip | None:
        """Several deltas in stream order, as they came (a guard hands over a batch at
        once); the trip, on the delta that trips, with ``offset`` at the last one. ``chars``:
        their length together, ``joined``: the deltas joined, where the caller has them (a
        guard joins them)."""
        consumed, last, run, limit = self._consumed, self._last, self._run, self._limit
        if joined is not None:
            chars = len(joined)
        if limit > 1 and isinstance(deltas, list) and deltas and "" not in deltas:
            count = len(deltas)
            if run + count < limit:
                # Too few deltas to trip even were they all equal and the run going on (a
                # batch of token-sized deltas holds a dozen): only the run the batch ends in
                # is read, from its end.
                tail = deltas[-1].strip()
                ending = 1
                while ending < count and deltas[-1 - ending].strip() == tail:
                    ending += 1
                going_on = run if tail == last else 0
            else:
                # Deltas without whitespace (CJK or emoji a character a delta) are their own
                # stripped form; two C scans of the batch tell (every whitespace character
                # but the space is unprintable).
                plain = joined is not None and joined.isprintable() and " " not in joined
                kept = deltas if plain else list(map(str.strip, deltas))
                # Deltas equal to the one before them, counted in C: with too few no run can
                # reach the limit (most batches have none; a counting run's digits, a few),
                # and only the run the batch ends in is kept, not walked a delta at a time.
                repeats = sum(map(eq, kept, kept[1:]))
                going_on = run if kept[0] == last else 0
                if going_on + repeats + 1 >= limit:
                    going_on = -1  # a run may reach the limit: judged a delta at a time
                else:
                    tail = kept[-1]
                    ending = 1
                    while ending < count and kept[-1 - ending] == tail:
                        ending += 1
            if going_on >= 0:
                self._consumed = consumed + (sum(map(len, deltas)) if chars is None else chars)
                self._last = tail
                # All of the batch one run: it goes on with the last batch's.
                self._run = going_on + ending if ending == count else ending
                return None
        trip = None
        for delta in deltas:
            if not delta:
                continue
            consumed += len(delta)
            if trip is not None:
                continue
            stripped = delta.strip()
            if stripped == last:
                run += 1
            else:
                last, run = stripped, 1
            if limit and run >= limit:
                trip = (consumed, run, stripped)
        self._consumed, self._last, self._run = consumed, last, run
        if trip is None:
            return None
        at, repeats, chunk = trip
        return Trip(IDENTICAL_CHUNKS, self._channel, consumed, at,
                    {"repeats": repeats, "chunk": chunk[:80]})
