"""The per-call guard: every single-call rule of every channel of one model call.

Feed it the deltas of one call as they arrive; it answers with the first trip.
It knows when a tool-call block is open, because a cut must never land inside
one (truncated arguments would be executed): a trip that happens then is held
and handed out when the block closes. At the end it summarises the call for the
rules that judge across calls.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

from loopbreak._config import Config
from loopbreak._engine.detectors import (
    BlockRepeatDetector,
    CharCapDetector,
    CharRunDetector,
    ControlTokensDetector,
    CounterCycleDetector,
    CycleDetector,
    DegeneracyDetector,
    IdenticalChunksDetector,
    LinesDetector,
    ProgressionDetector,
    StaleWordsDetector,
)
from loopbreak._engine.grams import GramSet
from loopbreak._engine.trip import CHANNELS, Channel, Detector, Trip


def build_detectors(channel: Channel, config: Config) -> list[Detector]:
    """Every single-call rule that watches ``channel`` under ``config``, in tie-break order."""
    if channel not in CHANNELS:
        raise ValueError(f"channel must be one of {', '.join(CHANNELS)}, not {channel!r}")
    detectors: list[Detector] = []
    if channel == "reasoning":
        if config.degeneracy.enabled:
            detectors.append(DegeneracyDetector(config.degeneracy, channel))
        if config.block_repeat.enabled:
            detectors.append(BlockRepeatDetector(config.block_repeat, channel))
    elif config.degeneracy.enabled and config.degeneracy.on_text:
        detectors.append(DegeneracyDetector(config.degeneracy, channel))
    if config.cycle.max_period:
        detectors.append(CycleDetector(config.cycle, channel))
        if config.counter_cycle.enabled:
            detectors.append(CounterCycleDetector(config.counter_cycle, config.cycle, channel))
    if config.char_run.max_run:
        detectors.append(CharRunDetector(config.char_run, channel))
    if config.progression.min_terms:
        detectors.append(ProgressionDetector(config.progression, channel))
    if config.control_tokens.min_tokens:
        detectors.append(ControlTokensDetector(config.control_tokens, channel))
    if config.lines.min_mass:
        detectors.append(LinesDetector(config.lines, channel))
    stale = config.stale_words
    if stale.enabled and (channel == "text" or stale.on_reasoning):
        detectors.append(StaleWordsDetector(stale, channel))
    if channel == "text" and config.identical_chunks.max_repeats:
        detectors.append(IdenticalChunksDetector(config.identical_chunks, channel))
    if channel == "reasoning" and config.limits.max_reasoning_chars:
        detectors.append(CharCapDetector(config.limits.max_reasoning_chars, channel))
    return detectors


class ChannelGuard:
    """The rules of one channel: feeds each delta to all of them, keeps the earliest trip."""

    __slots__ = ("_consumed", "_detectors", "channel", "trip")

    def __init__(self, channel: Channel, config: Config | None = None) -> None:
        self.channel: Channel = channel
        self._detectors = build_detectors(channel, config or Config())
        self._consumed = 0
        self.trip: Trip | None = None

    @property
    def consumed(self) -> int:
        """Characters of this channel fed so far."""
        return self._consumed

    def feed(self, delta: str) -> Trip | None:
        """Judge one delta; the first trip is returned once and kept in ``trip``."""
        self._consumed += len(delta)
        if self.trip is not None or not delta:
            return None
        first: Trip | None = None
        for detector in self._detectors:
            trip = detector.feed(delta)
            # The earliest character wins; among equals, the earlier rule in the list.
            if trip is not None and (first is None or trip.at < first.at):
                first = trip
        self.trip = first
        return first


@dataclass
class ToolCallRecord:
    """One tool call a model made in a call, as the guard saw it stream."""

    key: Hashable
    name: str = ""
    arguments: str = ""
    open: bool = True


@dataclass(frozen=True)
class CallSummary:
    """What the cross-call rules need to know about a finished call."""

    reasoning_chars: int
    text_chars: int
    tool_calls: tuple[str, ...]
    trip: Trip | None
    grams: GramSet | None = field(default=None, compare=False, repr=False)

    @property
    def productive(self) -> bool:
        """Whether the call produced anything besides reasoning."""
        return self.text_chars > 0 or bool(self.tool_calls)


class CallGuard:
    """All single-call rules for one model call, across its channels.

    ``track_grams`` keeps the 4-gram set of the reasoning that the cross-call
    stall rule compares (the session guard turns it on; ``scan`` does not pay for it).
    """

    def __init__(self, config: Config | None = None, *, track_grams: bool = False) -> None:
        self._config = config or Config()
        self._channels = {ch: ChannelGuard(ch, self._config) for ch in CHANNELS}
        self._grams = GramSet() if track_grams else None
        self._tools: dict[Hashable, ToolCallRecord] = {}
        self._trip: Trip | None = None
        self._held: Trip | None = None

    @property
    def config(self) -> Config:
        return self._config

    @property
    def trip(self) -> Trip | None:
        """The first trip of this call, held or handed out; ``None`` while clean."""
        return self._trip

    @property
    def held(self) -> Trip | None:
        """A trip waiting for an open tool-call block to close."""
        return self._held

    @property
    def tool_call_open(self) -> bool:
        """Whether a tool-call block is streaming now (a cut must wait)."""
        return any(record.open for record in self._tools.values())

    def consumed(self, channel: Channel) -> int:
        """Characters of ``channel`` fed so far."""
        return self._channels[channel].consumed

    def feed(self, channel: Channel, delta: str) -> Trip | None:
        """Judge a delta of ``reasoning`` or ``text``; return the trip to act on now."""
        guard = self._channels.get(channel)
        if guard is None:
            raise ValueError(f"channel must be one of {', '.join(CHANNELS)}, not {channel!r}")
        if channel == "reasoning" and self._grams is not None and delta:
            self._grams.feed(delta)
        trip = guard.feed(delta)
        if trip is None or self._trip is not None:
            return None
        self._trip = trip
        if self.tool_call_open:
            self._held = trip
            return None
        return trip

    def feed_reasoning(self, delta: str) -> Trip | None:
        """``feed("reasoning", delta)``."""
        return self.feed("reasoning", delta)

    def feed_text(self, delta: str) -> Trip | None:
        """``feed("text", delta)``."""
        return self.feed("text", delta)

    def tool_call_delta(self, key: Hashable, name: str = "", arguments: str = "") -> None:
        """A piece of tool call ``key`` streamed (its name and/or a piece of its arguments).

        The first delta of a key opens its block. In streams that never say a
        block ended (OpenAI's), a new key closes the ones before it.
        """
        record = self._tools.get(key)
        if record is None:
            for other in self._tools.values():
                other.open = False
            record = self._tools[key] = ToolCallRecord(key)
        record.name += name
        record.arguments += arguments
        record.open = True

    def close_tool_call(self, key: Hashable | None = None) -> Trip | None:
        """Tool call ``key`` (every one when ``None``) is complete; a held trip comes out
        here once no block is open."""
        for k, record in self._tools.items():
            if key is None or k == key:
                record.open = False
        if self._held is not None and not self.tool_call_open:
            held, self._held = self._held, None
            return held
        return None

    @property
    def tool_calls(self) -> list[ToolCallRecord]:
        """Tool calls seen so far, in order."""
        return list(self._tools.values())

    def summary(self) -> CallSummary:
        """The call as the cross-call rules see it."""
        return CallSummary(
            reasoning_chars=self._channels["reasoning"].consumed,
            text_chars=self._channels["text"].consumed,
            tool_calls=tuple(r.name for r in self._tools.values()),
            trip=self._trip,
            grams=self._grams,
        )
