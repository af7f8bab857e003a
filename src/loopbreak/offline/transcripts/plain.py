"""Plain text and the ``loopbreak scan`` JSONL format, as recorded sessions.

A text file is one session with one call whose reasoning is the file's text.
A scan JSONL file is one session whose calls are its streams, in order, each
on its channel (``reasoning`` by default), fed as its ``pieces`` or in deltas
of 32 characters.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loopbreak._engine.scan import DEFAULT_DELTA_CHARS, iter_deltas
from loopbreak._engine.trip import CHANNELS, Channel
from loopbreak._errors import InputError
from loopbreak.offline.transcripts._files import open_binary, open_text_lines
from loopbreak.offline.transcripts._model import (
    Delta,
    Event,
    ReadReport,
    RecordedCall,
    SessionStart,
    TurnEnd,
    TurnStart,
)


def read_text(path: str | Path, channel: str = "reasoning",
              delta_chars: int = DEFAULT_DELTA_CHARS) -> Iterator[Event]:
    """One text file as one call on ``channel``."""
    path = Path(path)
    report = ReadReport(str(path))
    with open_binary(path) as handle:
        data = handle.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: invalid UTF-8 at byte {exc.start}") from None
    yield SessionStart(str(path), "text")
    yield TurnStart(1)
    deltas = tuple(Delta(channel, piece) for piece in iter_deltas(text, delta_chars))  # type: ignore[arg-type]
    yield RecordedCall(1, 1, deltas, finish="stop")
    yield TurnEnd(1)
    report.rows = 1
    yield report


@dataclass(frozen=True)
class ScanRow:
    """One stream of a ``loopbreak scan`` JSONL file."""

    id: Any
    channel: Channel
    stream: str | list[str]
    """Its ``text``, or its ``pieces`` exactly as given."""


class ScanRowError(ValueError):
    """A line that is not a stream, with what is wrong in one phrase (and its ``id`` when it
    names one)."""

    def __init__(self, message: str, id: Any = None) -> None:
        super().__init__(message)
        self.id = id


def parse_scan_row(line: str, default_channel: str = "reasoning") -> ScanRow:
    """One line of the scan JSONL format: ``{"id": ..., "text": str}`` or ``{"id": ...,
    "pieces": [str, ...]}``, with an optional ``channel``. The one reader of the format,
    for ``loopbreak scan`` and ``loopbreak analyze``."""
    try:
        obj = json.loads(line)
    except ValueError as exc:
        raise ScanRowError(f"invalid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ScanRowError(f"a stream must be a JSON object, not {type(obj).__name__}")
    name = obj.get("id")
    channel = obj.get("channel", default_channel)
    if channel not in CHANNELS:
        raise ScanRowError(f"unknown channel {channel!r} (use 'reasoning' or 'text')", name)
    if "pieces" in obj:
        pieces = obj["pieces"]
        if not isinstance(pieces, list) or not all(isinstance(p, str) for p in pieces):
            raise ScanRowError("'pieces' must be a list of strings", name)
        return ScanRow(name, channel, pieces)
    if "text" in obj:
        if not isinstance(obj["text"], str):
            raise ScanRowError(f"'text' must be a string, not {type(obj['text']).__name__}",
                               name)
        return ScanRow(name, channel, obj["text"])
    raise ScanRowError("a stream needs 'text' or 'pieces'", name)


def read_scan_jsonl(path: str | Path, delta_chars: int = DEFAULT_DELTA_CHARS) -> Iterator[Event]:
    """A ``loopbreak scan`` input file: each stream is one call of one turn."""
    path = Path(path)
    report = ReadReport(str(path))
    yield SessionStart(str(path), "scan-jsonl")
    yield TurnStart(1)
    step = 0
    for number, line in open_text_lines(path, report):
        if not line.strip():
            continue
        report.rows += 1
        try:
            row = parse_scan_row(line)
        except ScanRowError as exc:
            report.note_bad(f"line {number}: {exc}")
            continue
        chunks = row.stream if isinstance(row.stream, list) \
            else list(iter_deltas(row.stream, delta_chars))
        step += 1
        yield RecordedCall(1, step, tuple(Delta(row.channel, c) for c in chunks), finish="stop")
    yield TurnEnd(1)
    yield report
