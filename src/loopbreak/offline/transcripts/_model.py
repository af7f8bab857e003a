"""What every reader yields: the events of recorded sessions, in order.

A reader turns one recorded source (a DeepSeek Harness session log, an
OpenAI-style JSONL log, plain text...) into a flat iterator of events:
``SessionStart``, ``TurnStart``, ``RecordedCall``, ``ToolResult``, ``TurnEnd``,
and last a ``ReadReport`` that says what could not be read. Events carry plain
values only, so the analyzer replays them through the engine without knowing
where they came from, and a call's memory is bounded by the call itself.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

DeltaChannel = Literal["reasoning", "text", "tool"]


@dataclass(frozen=True)
class Delta:
    """One streamed piece of a call: reasoning, visible text, or tool-call arguments.

    ``key`` names the tool call a ``tool`` delta belongs to (its id, or its index in
    the response); ``name`` is set on the first delta of a tool call when known.
    """

    channel: DeltaChannel
    text: str
    key: str | int | None = None
    name: str = ""


@dataclass(frozen=True)
class ToolCallRecord:
    """A tool call as the call finally made it (arguments joined)."""

    key: str | int
    name: str
    arguments: str


@dataclass(frozen=True)
class SessionStart:
    """A new session begins; ``session`` names it (an id or a path)."""

    session: str
    source: str
    version: int | None = None


@dataclass(frozen=True)
class TurnStart:
    turn: int


@dataclass(frozen=True)
class TurnEnd:
    turn: int
    reason: str | None = None


@dataclass(frozen=True)
class RecordedCall:
    """One model call: its deltas in stream order and how it ended.

    ``kind`` is ``message`` for a call that settled, ``attempt`` for one that failed,
    was retried or was cancelled (a DSH ``assistant/attempt``); an attempt and a
    later message at the same turn and step are two calls. ``finish`` is the finish
    reason as recorded (``stop``, ``tool-calls``, ``length``...), ``None`` when the
    stream never finished (a crash, a cut).
    """

    turn: int
    step: int
    deltas: tuple[Delta, ...]
    kind: Literal["message", "attempt"] = "message"
    finish: str | None = None
    tool_calls: tuple[ToolCallRecord, ...] = ()
    usage: dict[str, int] = field(default_factory=dict)

    def chars(self, channel: DeltaChannel) -> int:
        """Characters of ``channel`` in this call."""
        return sum(len(d.text) for d in self.deltas if d.channel == channel)

    def joined(self, channel: DeltaChannel) -> str:
        """The whole text of ``channel``."""
        return "".join(d.text for d in self.deltas if d.channel == channel)


@dataclass(frozen=True)
class ToolResult:
    """What a tool call returned, as the model will read it."""

    turn: int
    key: str | int | None
    name: str
    arguments: str
    text: str
    failed: bool = False
    error_code: str | None = None
    error_name: str | None = None


@dataclass
class ReadReport:
    """What a reader could not use, said once at the end of a source."""

    source: str
    rows: int = 0
    unknown_rows: Counter[str] = field(default_factory=Counter)
    bad_rows: int = 0
    first_error: str | None = None
    lost_bytes: int = 0
    frames: int = 0
    torn: bool = False
    warnings: list[str] = field(default_factory=list)

    def note_bad(self, message: str) -> None:
        self.bad_rows += 1
        if self.first_error is None:
            self.first_error = message

    def warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)


Event = SessionStart | TurnStart | RecordedCall | ToolResult | TurnEnd | ReadReport
