"""identical-chunks (text): the same visible delta, over and over.

Catches an answer stream stuck on one token or one line (``好。`` x 1000,
``\\n`` floods). This rule counts deltas by definition, so it is the one rule
whose decision depends on how the stream is split. Empty deltas (role or usage
chunks carry ``""``) are not deltas of the answer and are skipped.
"""

from __future__ import annotations

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
        if not delta:
            return None
        self._consumed += len(delta)
        stripped = delta.strip()
        if stripped == self._last:
            self._run += 1
        else:
            self._last = stripped
            self._run = 1
        if self._limit and self._run >= self._limit:
            return Trip(IDENTICAL_CHUNKS, self._channel, self._consumed, self._consumed,
                        {"repeats": self._run, "chunk": stripped[:80]})
        return None
