"""max-reasoning-chars: a hard cap on what one call may think.

The backstop for anything the shape rules miss: a call that is still reasoning
after ``max_reasoning_chars`` characters is cut. 120,000 by default, far above
the longest productive call in the corpora (35,441 characters) and a third of the
330,188-character bleed that ran until a person aborted it.
"""

from __future__ import annotations

from loopbreak._engine.trip import Channel, Trip

MAX_REASONING_CHARS = "max-reasoning-chars"


class CharCapDetector:
    """Trips on the first character beyond ``limit``."""

    def __init__(self, limit: int, channel: Channel = "reasoning",
                 rule: str = MAX_REASONING_CHARS) -> None:
        self._limit = limit
        self._channel: Channel = channel
        self._rule = rule
        self._consumed = 0

    @property
    def consumed(self) -> int:
        return self._consumed

    def reset(self) -> None:
        self._consumed = 0

    def feed(self, delta: str) -> Trip | None:
        self._consumed += len(delta)
        if self._limit and self._consumed > self._limit:
            return Trip(self._rule, self._channel, self._consumed, self._limit + 1,
                        {"limit": self._limit})
        return None
