"""Plain text and the ``loopbreak scan`` JSONL format, as recorded sessions.

A text file is one session with one call whose reasoning is the file's text.
A scan JSONL file is one session whose calls are its streams, in order, each
on its channel (``reasoning`` by default), fed as its ``pieces`` or in deltas
of 32 characters.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from loopbreak._engine.scan import DEFAULT_DELTA_CHARS, iter_deltas
from loopbreak._engine.trip import CHANNELS
from loopbreak._errors import InputError
from loopbreak.transcripts._files import open_binary, open_text_lines
from loopbreak.transcripts._model import (
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
            obj = json.loads(line)
        except ValueError as exc:
            report.note_bad(f"line {number}: invalid JSON: {exc}")
            continue
        if not isinstance(obj, dict):
            report.note_bad(f"line {number}: a stream must be a JSON object")
            continue
        channel = obj.get("channel", "reasoning")
        pieces = obj.get("pieces")
        text = obj.get("text")
        if channel not in CHANNELS:
            report.note_bad(f"line {number}: unknown channel {channel!r}")
            continue
        if isinstance(pieces, list) and all(isinstance(p, str) for p in pieces):
            chunks = list(pieces)
        elif isinstance(text, str):
            chunks = list(iter_deltas(text, delta_chars))
        else:
            report.note_bad(f"line {number}: a stream needs 'text' or 'pieces'")
            continue
        step += 1
        yield RecordedCall(1, step, tuple(Delta(channel, c) for c in chunks), finish="stop")
    yield TurnEnd(1)
    yield report
