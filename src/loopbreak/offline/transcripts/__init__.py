"""Readers of recorded sessions: each turns one source into the engine's events.

``read_path(path)`` picks the reader from the file: DeepSeek Harness session logs
(``session.jsonl``, ``session.vN.jsonl``, their ``.zstd`` forms), OpenAI- and
Anthropic-style JSONL logs, ``loopbreak scan`` JSONL, or plain text.
``find_sources(paths)`` expands folders (DSH session stores are searched
recursively).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

from loopbreak._errors import InputError
from loopbreak.offline.transcripts._model import (
    Delta,
    Event,
    ReadReport,
    RecordedCall,
    SessionStart,
    ToolCallRecord,
    ToolResult,
    TurnEnd,
    TurnStart,
)
from loopbreak.offline.transcripts.chat_log import read_chat_log
from loopbreak.offline.transcripts.plain import read_scan_jsonl, read_text

__all__ = [
    "Delta",
    "Event",
    "ReadReport",
    "RecordedCall",
    "SessionStart",
    "ToolCallRecord",
    "ToolResult",
    "TurnEnd",
    "TurnStart",
    "find_sources",
    "read_chat_log",
    "read_path",
    "read_scan_jsonl",
    "read_text",
    "sniff",
]

_LOG_SUFFIXES = (".jsonl", ".jsonl.zstd", ".jsonl.zst", ".jsonl.gz", ".json", ".zstd", ".txt",
                 ".log", ".sse")


def _is_dsh_name(path: Path) -> bool:
    name = path.name
    return name.endswith((".jsonl.zstd", ".jsonl.zst")) or (
        "session" in name and name.endswith(".jsonl"))


_FIRST_LINE_LIMIT = 16 << 20
_SESSION_HEAD = re.compile(rb'^\{\s*"type"\s*:\s*"session"')
_SCAN_KEY = re.compile(rb'^\{\s*(?:"[a-z_]+"\s*:\s*(?:"(?:[^"\\]|\\.)*"|[-\w.]+)\s*,\s*)*'
                       rb'"(?:text|pieces)"\s*:')


def _sniff_prefix(head: bytes, path: Path) -> str:
    if _SESSION_HEAD.match(head):
        return "dsh"
    if _SCAN_KEY.match(head):
        return "scan-jsonl"
    return "dsh" if _is_dsh_name(path) else "chat-log"


def sniff(path: Path) -> str:
    """The format of a file: ``dsh``, ``chat-log``, ``scan-jsonl`` or ``text``."""
    name = path.name
    if name.endswith((".zstd", ".zst")):
        return "dsh"
    if name.endswith(".txt"):
        return "text"
    if not name.endswith((".jsonl", ".json", ".gz", ".log", ".sse")):
        return "text"
    try:
        with path.open("rb") as handle:
            # The whole first line: one scan row or chat record can hold megabytes of text.
            first = handle.readline(_FIRST_LINE_LIMIT)
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from None
    whole = first.endswith(b"\n") or len(first) < _FIRST_LINE_LIMIT
    first = first.strip()
    if first.startswith(b"data:"):
        return "chat-log"
    if not whole:
        # Longer still: judged by how it starts, as a JSON object's first keys show.
        return _sniff_prefix(first, path)
    try:
        obj = json.loads(first.decode("utf-8", "replace")) if first else None
    except ValueError:
        return "dsh" if _is_dsh_name(path) else "chat-log"
    if isinstance(obj, dict):
        if obj.get("type") == "session" and "version" in obj:
            return "dsh"
        if "text" in obj or "pieces" in obj:
            return "scan-jsonl"
    return "chat-log"


def read_path(path: str | Path) -> Iterator[Event]:
    """The events of one recorded file, whatever its format."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such file or directory")
    if path.is_dir():
        raise InputError(f"{path}: is a directory (use find_sources)")
    kind = sniff(path)
    if kind == "dsh":
        from loopbreak.offline.transcripts.dsh import read_dsh

        return read_dsh(path)
    if kind == "scan-jsonl":
        return read_scan_jsonl(path)
    if kind == "text":
        return read_text(path)
    return read_chat_log(path)


def find_sources(paths: Sequence[str | Path]) -> list[Path]:
    """Every readable recorded file under ``paths``, in a stable order. A folder is searched
    recursively: DSH session logs the way DSH keeps them (the newest generation of each
    log only), and other JSONL and text recordings beside them."""
    from loopbreak.offline.transcripts.dsh import find_dsh_logs, is_dsh_log_name

    found: list[Path] = []
    for raw in paths:
        path = Path(raw).expanduser()
        if not path.exists():
            raise InputError(f"{path}: no such file or directory")
        if path.is_file():
            found.append(path)
            continue
        found.extend(find_dsh_logs(path))
        for child in sorted(path.rglob("*")):
            if child.is_file() and child.name.endswith(_LOG_SUFFIXES) \
                    and not is_dsh_log_name(child.name):
                found.append(child)
    return sorted(set(found))
