"""What a detector answers with: a :class:`Trip` is data, never an exception."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

Channel = Literal["reasoning", "text"]
"""The streamed channels the single-call rules watch.

Tool-call arguments are a third stream a call guard tracks (to know when a cut
must wait), but no single-call rule judges them.
"""

CHANNELS: tuple[Channel, ...] = ("reasoning", "text")


@dataclass(frozen=True)
class Trip:
    """A rule decided that a stream is looping.

    ``offset`` is the contract's number: characters of the channel consumed up to
    and including the delta that tripped. ``at`` is the exact character count at
    which the rule's condition first held (``at <= offset``); it does not depend
    on how the stream was split into deltas, so tests and reports can use it.
    """

    rule: str
    channel: Channel
    offset: int
    at: int
    evidence: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of this trip."""
        return {
            "rule": self.rule,
            "channel": self.channel,
            "offset": self.offset,
            "at": self.at,
            "evidence": dict(self.evidence),
        }


class Detector(Protocol):
    """One rule watching one channel of one call.

    ``feed`` takes the next delta and answers with a trip on the delta that trips
    it; after a trip the detector's answer for later deltas is unspecified (the
    call guard stops feeding it). ``consumed`` is the number of characters fed so
    far. There is no base class to extend.
    """

    @property
    def consumed(self) -> int: ...

    def feed(self, delta: str) -> Trip | None: ...

    def reset(self) -> None: ...


@runtime_checkable
class QuietDetector(Detector, Protocol):
    """A rule that also says how far it cannot trip.

    After each ``feed`` (and at the start), ``quiet_through`` is a count of characters up
    to which no trip's ``at`` can fall, whatever is fed next. A guard may hold the text
    back until it passes that point and hand it over in one delta: the rule decides at the
    same character however the stream is split, so the trip is the same.
    """

    quiet_through: int
