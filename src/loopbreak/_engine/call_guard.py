"""The per-call guard: every single-call rule of every channel of one model call.

Feed it the deltas of one call as they arrive; it answers with the first trip.
It knows when a tool-call block is open, because a cut must never land inside
one (truncated arguments would be executed): a trip that happens then is held
and handed out when the block closes. At the end it summarises the call for the
rules that judge across calls.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from functools import partial
from typing import TypeGuard, cast

from loopbreak._config import Config
from loopbreak._engine.detectors import (
    BlockRepeatDetector,
    CharCapDetector,
    CharFloodDetector,
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
from loopbreak._engine.trip import CHANNELS, Channel, Detector, QuietDetector, Trip


def _check_channel(channel: str) -> None:
    if channel not in CHANNELS:
        raise ValueError(f"channel must be one of {', '.join(CHANNELS)}, not {channel!r}")


def build_detectors(channel: Channel, config: Config) -> list[Detector]:
    """Every single-call rule that watches ``channel`` under ``config``, in tie-break order."""
    return [make() for make in _detector_makers(channel, config)]


def _detector_makers(channel: Channel, config: Config) -> list[Callable[[], Detector]]:
    """How to build each of ``build_detectors``' rules, in the same order."""
    _check_channel(channel)
    makers: list[Callable[[], Detector]] = []
    compiled = config.judging.compiled != "off"  # the rules with kernels run them
    if channel == "reasoning":
        if config.degeneracy.enabled:
            makers.append(partial(DegeneracyDetector, config.degeneracy, channel))
        if config.block_repeat.enabled:
            makers.append(partial(BlockRepeatDetector, config.block_repeat, channel,
                                  compiled=compiled))
    elif config.degeneracy.enabled and config.degeneracy.on_text:
        makers.append(partial(DegeneracyDetector, config.degeneracy, channel))
    if config.cycle.max_period:
        makers.append(partial(CycleDetector, config.cycle, channel, compiled=compiled))
        if config.counter_cycle.enabled:
            makers.append(partial(CounterCycleDetector, config.counter_cycle, config.cycle,
                                  channel, compiled=compiled))
    if config.char_run.max_run:
        makers.append(partial(CharRunDetector, config.char_run, channel))
    if config.char_flood.enabled:
        makers.append(partial(CharFloodDetector, config.char_flood, channel))
    if config.progression.min_terms:
        makers.append(partial(ProgressionDetector, config.progression, channel))
    if config.control_tokens.min_tokens:
        makers.append(partial(ControlTokensDetector, config.control_tokens, channel))
    if config.lines.min_mass:
        makers.append(partial(LinesDetector, config.lines, channel))
    stale = config.stale_words
    if stale.enabled and (channel == "text" or stale.on_reasoning):
        makers.append(partial(StaleWordsDetector, stale, channel))
    if channel == "text" and config.identical_chunks.max_repeats:
        makers.append(partial(IdenticalChunksDetector, config.identical_chunks, channel))
    if channel == "reasoning" and config.limits.max_reasoning_chars:
        makers.append(partial(CharCapDetector, config.limits.max_reasoning_chars, channel))
    return makers


DEFAULT_CONFIG = Config()
"""The config of a guard given none: one object, so every such guard finds its rules' plan."""

_PER_DELTA = -2  # a rule that sees a batch's deltas one by one
_ALWAYS = -1  # a rule judged on every batch
# By channel and config (by identity: hashing a whole config costs more than building a
# guard): how to build each rule, and how far a new one cannot trip (or one of the above).
# A few entries per process; a sweep over many configs starts it over.
_PLANS: dict[tuple[Channel, int], tuple[Config, list[tuple[Callable[[], Detector], int]]]] = {}


def _plan(channel: Channel, config: Config) -> list[tuple[Callable[[], Detector], int]]:
    kept = _PLANS.get((channel, id(config)))
    if kept is not None and kept[0] is config:
        return kept[1]
    plan = []
    for make in _detector_makers(channel, config):
        detector = make()
        if isinstance(detector, IdenticalChunksDetector):
            plan.append((make, _PER_DELTA))
        elif _says_quiet(detector):
            plan.append((make, max(0, detector.quiet_through)))
        else:
            plan.append((make, _ALWAYS))
    if len(_PLANS) >= 64:
        _PLANS.clear()
    _PLANS[(channel, id(config))] = (config, plan)
    return plan


class ChannelGuard:
    """The rules of one channel: feeds each delta to all of them, keeps the earliest trip.

    Deltas are judged in batches of at least ``judging.batch_chars`` characters: every
    rule but identical-chunks decides at the same character however the stream is split,
    so joining deltas changes no decision, only when it is found: a trip's ``at`` is
    exact, its ``offset`` is where the batch holding it ended (at most
    ``batch_chars - 1`` characters later than judging every delta). The per-delta cost
    of token-sized deltas then falls to an append. ``flush()`` judges what waits (the
    call guard does so when the channel changes, a tool call starts or the call ends).
    A rule that says how far it cannot trip (``QuietDetector``) is handed the batches that
    end before that point together, with the first that ends past it: the trip, and the
    batch it is found at the end of, are the same.
    """

    __slots__ = ("_batch", "_batches", "_detectors", "_grams", "_held", "_held_from",
                 "_judged", "_left", "_oldest", "_pending", "_per_delta", "_quiet", "_sample",
                 "_sample_left", "_wake", "channel", "trip")

    def __init__(self, channel: Channel, config: Config | None = None,
                 grams: GramSet | None = None, sample: list[str] | None = None,
                 sample_chars: int = 0) -> None:
        cfg = config or DEFAULT_CONFIG
        self.channel: Channel = channel
        # Every character fed is added to ``grams`` a batch at a time (trip or not): a
        # gram set fed each token-sized delta costs more than every rule together.
        self._grams = grams
        # The channel's first ``sample_chars`` characters go to ``sample`` a batch at a
        # time too (the answer the monologue rule reads), not a delta at a time.
        self._sample = sample
        self._sample_left = sample_chars if sample is not None else 0
        # (tie-break index, detector): the rule whose decision depends on the split sees
        # the batch's deltas one by one; the others see them joined.
        self._per_delta: list[tuple[int, IdenticalChunksDetector]] = []
        self._detectors: list[tuple[int, Detector]] = []
        # The rules that say how far they cannot trip: each is handed the text that comes
        # meanwhile at once, when a batch ends past that point (a block rule judges blocks
        # of 128 characters and trips after a streak of them: judged every 64 characters,
        # it mostly only waited). Each is built when first handed text: a short call, or
        # one cut early, never builds most of them.
        self._quiet: list[_QuietRule] = []
        # The batches judged since the earliest one a quiet rule still waits for (the
        # first is batch number ``_held_from``); each rule keeps where its own begin. While
        # every rule is quiet through the batch and none holds too many, a batch costs an
        # append, not one per rule.
        self._held: list[str] = []
        self._held_from = 0
        self._batches = 0
        self._wake = -1
        self._oldest = 0
        for i, (make, quiet_through) in enumerate(_plan(channel, cfg)):
            if quiet_through >= 0:
                # The type as a string: ``Callable[...]`` made at run time was 6 of the 9.5
                # us building a channel's guard took (a flood starts one every 384 chars).
                self._quiet.append(_QuietRule(i, cast("Callable[[], QuietDetector]", make),
                                              quiet_through))
            elif quiet_through == _PER_DELTA:
                self._per_delta.append((i, make()))  # type: ignore[arg-type]
            else:
                self._detectors.append((i, make()))
        self._wake = min((rule.quiet_through for rule in self._quiet), default=_NEVER)
        self._batch = cfg.judging.batch_chars
        self._pending: list[str] = []
        # Characters still to come before the batch is judged: feed() keeps one counter,
        # the rest is derived (a token-sized delta costs an append and a subtraction).
        self._left = self._batch
        self._judged = 0
        self.trip: Trip | None = None

    @property
    def consumed(self) -> int:
        """Characters of this channel fed so far."""
        return self._judged + self._batch - self._left

    @property
    def pending(self) -> int:
        """Characters fed but not judged yet."""
        return self._batch - self._left

    @property
    def batch_chars(self) -> int:
        """Characters that wait before they are judged together."""
        return self._batch

    def feed(self, delta: str) -> Trip | None:
        """Take one delta; a trip is returned once, on the delta that completes the batch
        holding it, and kept in ``trip``."""
        size = len(delta)
        left = self._left - size
        if left > 0:
            if size:
                self._pending.append(delta)
                self._left = left
            return None
        self._pending.append(delta)
        self._left = left
        return self._judge()

    def flush(self) -> Trip | None:
        """Judge the deltas that wait; return the trip they hold (once), if any."""
        if self._left == self._batch:
            return None
        return self._judge()

    def _judge(self) -> Trip | None:
        pending = self._pending
        self._judged += self._batch - self._left
        self._left = self._batch
        text = pending[0] if len(pending) == 1 else "".join(pending)
        if self._grams is not None:
            self._grams.feed(text)
        if self._sample_left > 0 and self._sample is not None:
            self._sample.append(text[: self._sample_left])
            self._sample_left -= len(text)
        if self.trip is not None:
            # After the trip nothing is judged: what came is only counted.
            pending.clear()
            return None
        first: tuple[int, Trip] | None = None
        for index, per_delta in self._per_delta:
            trip = per_delta.feed_pieces(pending, joined=text)
            if trip is not None and (first is None or trip.at < first[1].at):
                first = (index, trip)
        pending.clear()
        for index, detector in self._detectors:
            trip = detector.feed(text)
            # The earliest character wins; among equals, the earlier rule in the list.
            if trip is not None and (first is None or (trip.at, index) < (first[1].at, first[0])):
                first = (index, trip)
        judged = self._judged
        held = self._held
        held.append(text)
        number = self._batches
        self._batches = number + 1
        if judged <= self._wake and number - self._oldest < _MOST_WAITING:
            return None if first is None else self._first(first)
        # Rules fed at once from the same batch on are handed the same joined text.
        joined: dict[int, str] = {number: text}
        wake = _NEVER
        oldest = number + 1
        for rule in self._quiet:
            start = rule.start
            if judged <= rule.quiet_through and number - start < _MOST_WAITING:
                if rule.quiet_through < wake:
                    wake = rule.quiet_through
                if start < oldest:
                    oldest = start
                continue
            quiet = rule.detector
            if quiet is None:
                quiet = rule.detector = rule.make()
            piece = joined.get(start)
            if piece is None:
                piece = joined[start] = "".join(held[start - self._held_from :])
            trip = quiet.feed(piece)
            rule.start = number + 1
            rule.quiet_through = quiet.quiet_through
            if rule.quiet_through < wake:
                wake = rule.quiet_through
            if trip is not None and (first is None or (trip.at, rule.index)
                                     < (first[1].at, first[0])):
                first = (rule.index, trip)
        self._wake = wake
        self._oldest = oldest
        del held[: oldest - self._held_from]
        self._held_from = oldest
        return self._first(first)

    def _first(self, first: tuple[int, Trip] | None) -> Trip | None:
        """Keep and hand out the batch's earliest trip, if any."""
        if first is None:
            return None
        self.trip = first[1]
        return self.trip


_MOST_WAITING = 64  # batches held back from a rule at most (one that cannot trip holds none)
_NEVER = 1 << 62  # quiet through every batch: no quiet rule at all


def _says_quiet(detector: Detector) -> TypeGuard[QuietDetector]:
    return hasattr(detector, "quiet_through")


class _QuietRule:
    """A rule that says how far it cannot trip, and from which batch on it waits; built
    when first handed text."""

    __slots__ = ("detector", "index", "make", "quiet_through", "start")

    def __init__(self, index: int, make: Callable[[], QuietDetector],
                 quiet_through: int) -> None:
        self.index = index
        self.make = make
        self.detector: QuietDetector | None = None
        self.quiet_through = quiet_through
        self.start = 0  # the number of the first batch it has not been handed


class ToolCallRecord:
    """One tool call a model made in a call, as the guard saw it stream.

    Its arguments arrive in many pieces (a 1 MB ``write`` in thousands): they are kept as
    a list and joined when read, so the cost stays linear in their size.
    """

    __slots__ = ("_parts", "key", "name", "open")

    def __init__(self, key: Hashable, name: str = "", arguments: str = "",
                 open: bool = True) -> None:
        self.key = key
        self.name = name
        self._parts = [arguments] if arguments else []
        self.open = open

    @property
    def arguments(self) -> str:
        """The arguments streamed so far."""
        parts = self._parts
        if len(parts) > 1:
            parts[:] = ["".join(parts)]
        return parts[0] if parts else ""

    def add(self, name: str, arguments: str) -> None:
        """A piece of the call streamed."""
        if name:
            self.name += name
        if arguments:
            self._parts.append(arguments)

    def __repr__(self) -> str:
        return (f"ToolCallRecord(key={self.key!r}, name={self.name!r}, "
                f"arguments={self.arguments[:40]!r}, open={self.open!r})")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ToolCallRecord):
            return NotImplemented
        return (self.key, self.name, self.arguments, self.open) == (
            other.key, other.name, other.arguments, other.open)

    __hash__ = None  # type: ignore[assignment]


ANSWER_SAMPLE_CHARS = 20_000


@dataclass(frozen=True, init=False)
class CallSummary:
    """What the cross-call rules need to know about a finished call."""

    reasoning_chars: int
    text_chars: int
    tool_calls: tuple[str, ...]
    trip: Trip | None
    grams: GramSet | None = field(default=None, compare=False, repr=False)
    text: str = field(default="", compare=False, repr=False)
    """The visible answer's first ``ANSWER_SAMPLE_CHARS`` characters (the monologue rule's)."""

    def __init__(self, reasoning_chars: int, text_chars: int, tool_calls: tuple[str, ...],
                 trip: Trip | None, grams: GramSet | None = None, text: str = "") -> None:
        # Frozen, yet one is made for every message of a replayed history: the fields go
        # straight into the instance, not through the frozen __setattr__ (a quarter of the cost).
        fields = self.__dict__
        fields["reasoning_chars"] = reasoning_chars
        fields["text_chars"] = text_chars
        fields["tool_calls"] = tool_calls
        fields["trip"] = trip
        fields["grams"] = grams
        fields["text"] = text

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
        self._config = config or DEFAULT_CONFIG
        self._grams = (GramSet(compiled=self._config.judging.compiled != "off")
                       if track_grams else None)
        # Each channel's rules are built when the channel first streams: most calls stream
        # one, and building a channel's rules costs ~25 µs.
        self._channels: dict[Channel, ChannelGuard] = {}
        self._answer: list[str] = []
        self._tools: dict[Hashable, ToolCallRecord] = {}
        self._trip: Trip | None = None
        self._held: Trip | None = None
        # The channel of the last delta and its rules: a delta of the same channel goes
        # straight to them.
        self._channel_now: Channel | None = None
        self._guard_now: ChannelGuard | None = None

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
        guard = self._channels.get(channel)
        if guard is not None:
            return guard.consumed
        _check_channel(channel)
        return 0

    def _open(self, channel: Channel) -> ChannelGuard:
        """The rules of ``channel``, built on its first delta."""
        _check_channel(channel)
        if channel == "reasoning":
            guard = ChannelGuard(channel, self._config, self._grams)
        else:
            guard = ChannelGuard(channel, self._config, sample=self._answer,
                                 sample_chars=ANSWER_SAMPLE_CHARS)
        self._channels[channel] = guard
        return guard

    def feed(self, channel: Channel, delta: str) -> Trip | None:
        """Judge a delta of ``reasoning`` or ``text``; return the trip to act on now."""
        guard = self._guard_now
        if guard is None or channel != self._channel_now:
            return self._feed_other(channel, delta)
        # ChannelGuard.feed's common case inlined (a call costs as much as the append):
        # most deltas complete no batch, and so have no trip to record.
        size = len(delta)
        left = guard._left - size
        if left > 0:
            if size:
                guard._pending.append(delta)
                guard._left = left
            return None
        trip = guard.feed(delta)
        return None if trip is None else self._act(trip)

    def _feed_other(self, channel: Channel, delta: str) -> Trip | None:
        """``feed`` of a delta of a channel other than the last one's (or the first)."""
        guard = self._channels.get(channel)
        if guard is None:
            guard = self._open(channel)
        if not delta:
            return None
        # The other channel's last batch is judged before this one's first: the stream's
        # order is the order of decisions.
        earlier = self._flush_others(channel)
        self._channel_now = channel
        self._guard_now = guard
        return self._act(earlier or guard.feed(delta))

    def _flush_others(self, channel: Channel | None) -> Trip | None:
        trip = None
        for name, guard in self._channels.items():
            if name != channel and guard.pending:
                trip = trip or guard.flush()
        return trip

    def _act(self, trip: Trip | None) -> Trip | None:
        """Record the call's first trip; hand it out unless a tool-call block is open."""
        if trip is None or self._trip is not None:
            return None
        self._trip = trip
        if self.tool_call_open:
            self._held = trip
            return None
        return trip

    def flush(self) -> Trip | None:
        """Judge what waits in every channel (at the end of a call, or before acting on
        something outside the stream); return the trip to act on now, if any."""
        return self._act(self._flush_others(None))

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
            # What the model wrote before the call is judged before its block opens; a trip
            # found now waits for the block to close, as one found inside it would.
            opening = self._flush_others(None)
            for other in self._tools.values():
                other.open = False
            record = self._tools[key] = ToolCallRecord(key)  # open: a trip now is held
            self._act(opening)
        # record.add(), inlined: a 1 MB argument arrives in some 250,000 pieces.
        if name:
            record.name += name
        if arguments:
            record._parts.append(arguments)
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
        """The call as the cross-call rules see it (what waits is judged first)."""
        self.flush()
        return CallSummary(
            reasoning_chars=self.consumed("reasoning"),
            text_chars=self.consumed("text"),
            tool_calls=tuple(r.name for r in self._tools.values()),
            trip=self._trip,
            grams=self._grams,
            text="".join(self._answer)[:ANSWER_SAMPLE_CHARS],
        )
