"""DeepSeek Harness (dsh) session logs, read into events.

A dsh session log is JSON lines: a header ``{"type": "session", "version": N,
"id": ...}``, then one row per session event ``{type, seq, time, data}``. It is
written plain (``session.jsonl``) or as concatenated zstd frames, one per write
batch (``session.jsonl.zstd``); a log migrated to format N >= 1 is written
beside the old one as ``session.vN.jsonl[.zstd]`` and the old file is frozen.

How model output is kept depends on the format version:

- **v0 and v1** (one layout; v1 only normalises legacy rows): every streamed
  piece is a top-level ``assistant/chunk`` row ``{turn, step, chunk}``, or runs
  of them are packed into one ``text-chunks`` / ``reasoning-chunks`` /
  ``tool-call-chunks`` row whose ``seq0`` numbers its first member
  (``seq0 + i`` the i-th). The chunks of one turn and step belong to one call
  until a ``finish`` chunk; an ``assistant/message`` at that turn and step
  settles it. Chunks that no message settles (a retry, a cancel, a crash) are
  an attempt: a new chunk after a finish or at another step, a ``turn/end``,
  ``step/end``, ``llm/retry`` or ``llm/retry-started`` row, or the end of the
  file closes them. This is the grouping dsh's own v1-to-v2 migration applies.
- **v2 and later**: no chunk rows; each ``assistant/message`` (settled) and
  ``assistant/attempt`` (failed, retried or cancelled) carries its whole stream
  in ``data.stream``: the same packed runs (``{type, time0, index, dt, texts}``,
  tool runs with ``id``, ``name``, ``args``) plus ``{"type": "chunk", "chunk"}``
  for every other chunk. v3 moved the system prompt into a ``system/message``
  row; the assistant stream is unchanged.

A call is yielded as soon as it is complete, so memory is bounded by one call;
rows between a call's chunks keep their place the way dsh's migration keeps it.
Nothing in the log's contents raises: bad lines and rows are counted in the
closing :class:`~loopbreak.offline.transcripts._model.ReadReport`, with the first error.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Final

from loopbreak._engine.tool_failure import looks_like_failure
from loopbreak._errors import InputError
from loopbreak.offline.transcripts import _frames
from loopbreak.offline.transcripts._model import (
    Delta,
    DeltaChannel,
    Event,
    ReadReport,
    RecordedCall,
    SessionStart,
    ToolCallRecord,
    ToolResult,
    TurnEnd,
    TurnStart,
)

__all__ = ["DEFAULT_SESSIONS", "KNOWN_VERSION", "find_dsh_logs", "read_dsh"]

KNOWN_VERSION: Final = 3
"""The newest session format this reader was written against."""

DEFAULT_SESSIONS: Final = Path("~") / ".dsh" / "sessions"
"""Where dsh keeps sessions; ``$DSH_HOME/sessions`` when ``DSH_HOME`` is set."""

# The session folder holds one log per format generation; the prefix allows the
# ``NAME.session.jsonl.zstd`` copies people keep side by side.
_LOG_NAME: Final = re.compile(
    r"(?P<prefix>(?:.*\.)?)session(?:\.v(?P<version>[1-9][0-9]*))?\.jsonl(?P<zstd>\.zstd)?"
)

_PACKED: Final = {
    "text-chunks": "text", "reasoning-chunks": "reasoning", "tool-call-chunks": "tool",
}
_CLOSES_ATTEMPT: Final = frozenset({"turn/end", "step/end", "llm/retry", "llm/retry-started"})

# dsh's event vocabulary (its ``KNOWN_SESSION_EVENT_TYPES``) plus the v0-only
# rows; these carry nothing a replay needs, so they are skipped without being
# reported as unknown.
_SKIPPED: Final = frozenset({
    "agent-preset/selected", "agent/inbox/spliced", "approval/asked", "approval/decided",
    "approval/policy", "command/done", "command/run", "compaction/end", "compaction/prune",
    "compaction/start", "compaction/summary", "deliverables/presented",
    "feedback/message-delete", "feedback/message-put", "feedback/record", "goal/change",
    "hook/invoked", "hook/result", "llm/retry", "llm/retry-started", "model/selection",
    "permission/preset", "plan/mode", "request/context", "request/header", "sandbox/mode",
    "schedule/change", "session-log-deepseek/delivery-accepted", "session/end-seed",
    "session/title", "session/title-llm-request", "step/end", "step/start", "subagent/catalog",
    "subagent/descriptor", "subagent/model-selection-policy", "system/message", "team/member",
    "team/message/delivered", "team/message/queued", "team/task", "todo/write",
    "tool-workflow/agent-end", "tool-workflow/agent-start", "tool-workflow/run-end",
    "tool-workflow/run-start", "tool/ptc-dispatch", "tool/ptc-dispatch-start", "user/message",
    "web/deepseek-search-llm-request",
    # v0 names that v1 renamed or folded into others
    "session", "steering/message", "compact/start", "compact/summary", "compact/end",
    "compact/prune",
})

_READ: Final = 1 << 20


# --- discovery ---------------------------------------------------------------------------


def default_sessions_dir() -> Path:
    """``$DSH_HOME/sessions`` when ``DSH_HOME`` is set, else ``~/.dsh/sessions``."""
    home = os.environ.get("DSH_HOME")
    if home:
        return Path(home).expanduser() / "sessions"
    return DEFAULT_SESSIONS.expanduser()


def is_dsh_log_name(name: str) -> bool:
    """Whether a file name is one DSH gives its session logs."""
    return _LOG_NAME.fullmatch(name) is not None


def find_dsh_logs(path: str | os.PathLike[str] | None = None) -> list[Path]:
    """The session logs under ``path`` (default: :func:`default_sessions_dir`), sorted.

    A file is returned as it is, whatever its name. A folder is searched
    recursively for ``[NAME.]session[.vN].jsonl[.zstd]``; where one folder holds
    several generations of the same log, only the newest is returned (dsh
    freezes the older file when it migrates a session), and of a plain and a
    compressed log of the same generation, the compressed one (dsh's default).
    Raises a one-line InputError when ``path`` is missing or unreadable.
    """
    root = default_sessions_dir() if path is None else Path(path)
    try:
        if not root.is_dir():
            _open_checked(root).close()
            return [root]
        with os.scandir(root):
            pass
    except (OSError, ValueError) as exc:
        raise _input_error(root, exc) from None
    best: dict[tuple[str, str], tuple[int, bool, Path]] = {}
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in files:
            match = _LOG_NAME.fullmatch(name)
            if match is None:
                continue
            rank = (int(match["version"] or 0), match["zstd"] is not None)
            key = (folder, match["prefix"])
            if key not in best or rank > best[key][:2]:
                best[key] = (*rank, Path(folder) / name)
    return sorted(entry[2] for entry in best.values())


# --- reading -----------------------------------------------------------------------------


def read_dsh(path: str | os.PathLike[str]) -> Iterator[Event]:
    """The events of one dsh session log: SessionStart first, ReadReport last.

    The file is checked at once: a missing, unreadable or directory ``path``, or
    a compressed log without ``zstandard`` installed, raises a one-line
    InputError here. Its contents never raise: damage is counted in the report.
    """
    source = Path(path)
    try:
        with _open_checked(source) as f:
            head = f.read(4)
    except (OSError, ValueError) as exc:
        raise _input_error(source, exc) from None
    compressed = _frames.is_zstd_start(head) or (
        source.name.endswith((".zstd", ".zst")) and not head.lstrip().startswith(b"{")
    )
    if compressed:
        _frames.require_zstandard(_show(source))
    return _read(source, compressed)


def _open_checked(path: Path) -> BinaryIO:
    if path.is_dir():
        raise IsADirectoryError(21, "is a directory")
    return open(path, "rb")


def _input_error(path: Path, exc: OSError | ValueError) -> InputError:
    if isinstance(exc, ValueError):
        why = "not a usable path"
    elif isinstance(exc, FileNotFoundError):
        why = "no such file or directory"
    elif isinstance(exc, PermissionError):
        why = "permission denied"
    elif isinstance(exc, IsADirectoryError):
        why = "is a directory (find_dsh_logs lists the session logs in it)"
    else:
        why = exc.strerror or type(exc).__name__
    return InputError(f"{_show(path)}: {why}")


def _show(path: Path | str) -> str:
    # Keep the message on one line whatever the path holds.
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(path))


def _read(source: Path, compressed: bool) -> Iterator[Event]:
    report = ReadReport(source=str(source))
    try:
        with open(source, "rb") as f:
            chunks: Iterable[bytes | None] = (
                _frames.iter_frames(f, _show(source), report) if compressed else _plain(f)
            )
            yield from _Session(source, report).run(_lines(chunks, report))
    except OSError as exc:
        raise _input_error(source, exc) from None
    yield report


def _plain(f: BinaryIO) -> Iterator[bytes]:
    while chunk := f.read(_READ):
        yield chunk


def _lines(chunks: Iterable[bytes | None], report: ReadReport) -> Iterator[tuple[int, bytes]]:
    """Numbered lines; a line cut short by lost bytes is a bad row, not a line."""
    lineno = 0
    pending: list[bytes] = []
    for chunk in chunks:
        if chunk is None:
            if any(pending):
                lineno += 1
                report.rows += 1
                report.note_bad(f"line {lineno}: cut short by lost bytes")
            pending = []
            continue
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            lineno += 1
            if pending:
                pending.append(chunk[start:end])
                yield lineno, b"".join(pending)
                pending = []
            else:
                yield lineno, chunk[start:end]
            start = end + 1
        if start < len(chunk):
            pending.append(chunk[start:])
    if pending:
        yield lineno + 1, b"".join(pending)


# --- validation --------------------------------------------------------------------------


class _Bad(Exception):
    """A row field is missing or of the wrong type (the message names it)."""


def _kind_of(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _get(obj: dict[str, Any], key: str, where: str) -> Any:
    if key not in obj:
        raise _Bad(f"{where}{key} is missing")
    return obj[key]


def _obj(obj: dict[str, Any], key: str, where: str = "") -> dict[str, Any]:
    value = _get(obj, key, where)
    if not isinstance(value, dict):
        raise _Bad(f"{where}{key} must be an object, not {_kind_of(value)}")
    return value


def _int(obj: dict[str, Any], key: str, where: str = "") -> int:
    value = _get(obj, key, where)
    if type(value) is not int:
        raise _Bad(f"{where}{key} must be an integer, not {_kind_of(value)}")
    return value


def _str(obj: dict[str, Any], key: str, where: str = "") -> str:
    value = _get(obj, key, where)
    if not isinstance(value, str):
        raise _Bad(f"{where}{key} must be a string, not {_kind_of(value)}")
    return value


def _opt_str(obj: dict[str, Any], key: str, where: str = "") -> str | None:
    if obj.get(key) is None:
        return None
    return _str(obj, key, where)


def _strs(obj: dict[str, Any], key: str, where: str = "") -> list[str]:
    value = _get(obj, key, where)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _Bad(f"{where}{key} must be a list of strings")
    return value


def _list(obj: dict[str, Any], key: str, where: str = "") -> list[Any]:
    value = _get(obj, key, where)
    if not isinstance(value, list):
        raise _Bad(f"{where}{key} must be a list, not {_kind_of(value)}")
    return value


# --- stream chunks -----------------------------------------------------------------------


@dataclass(frozen=True)
class _Piece:
    """One streamed delta; ``tool_id`` and ``name`` only for tool-call arguments."""

    channel: DeltaChannel
    index: int
    text: str
    tool_id: str = ""
    name: str = ""


@dataclass(frozen=True)
class _BlockEnd:
    """A closed block: its whole text stands in for deltas the log lacks."""

    piece: _Piece | None


@dataclass(frozen=True)
class _Usage:
    values: dict[str, int]


@dataclass(frozen=True)
class _Finish:
    reason: str


@dataclass(frozen=True)
class _Unknown:
    kind: str


_Op = _Piece | _BlockEnd | _Usage | _Finish | _Unknown | None


def _parse_chunk(chunk: dict[str, Any], where: str) -> _Op:
    kind = _str(chunk, "type", where)
    if kind in ("reasoning-delta", "text-delta"):
        channel: DeltaChannel = "reasoning" if kind == "reasoning-delta" else "text"
        return _Piece(channel, _int(chunk, "index", where), _str(chunk, "text", where))
    if kind == "tool-call-delta":
        return _Piece("tool", _int(chunk, "index", where), _str(chunk, "argumentsDelta", where),
                      _opt_str(chunk, "id", where) or "", _opt_str(chunk, "name", where) or "")
    if kind == "block-start":
        _int(chunk, "index", where)
        return None
    if kind == "block-end":
        index = _int(chunk, "index", where)
        block = _obj(chunk, "block", where)
        block_kind = block.get("type")
        inner = f"{where}block."
        if block_kind in ("reasoning", "text"):
            return _BlockEnd(_Piece(block_kind, index, _str(block, "text", inner)))
        if block_kind == "tool-call":
            return _BlockEnd(_Piece("tool", index, _str(block, "arguments", inner),
                                    _str(block, "id", inner), _str(block, "name", inner)))
        return _BlockEnd(None)
    if kind == "usage":
        return _Usage(_usage(_obj(chunk, "usage", where)))
    if kind == "finish":
        reason = _get(chunk, "reason", where)
        if isinstance(reason, dict) and isinstance(reason.get("kind"), str):
            return _Finish(reason["kind"])
        if isinstance(reason, str):
            return _Finish(reason)
        raise _Bad(f"{where}reason must be an object with a string kind")
    return _Unknown(f"chunk:{kind}")


def _usage(values: dict[str, Any]) -> dict[str, int]:
    return {k: v for k, v in values.items() if type(v) is int}


def _parse_run(kind: str, run: dict[str, Any], where: str) -> list[_Piece]:
    """The members of a packed run, one delta each."""
    channel = _PACKED[kind]
    index = _int(run, "index", where)
    if channel == "tool":
        tool_id = _str(run, "id", where)
        name = _opt_str(run, "name", where) or ""
        return [_Piece("tool", index, text, tool_id, name) for text in _strs(run, "args", where)]
    texts = _strs(run, "texts", where)
    return [_Piece("reasoning" if channel == "reasoning" else "text", index, t) for t in texts]


def _parse_record(record: object, where: str) -> list[_Op]:
    """One ``data.stream`` record of a v2+ message or attempt."""
    if not isinstance(record, dict):
        raise _Bad(f"{where} must be an object, not {_kind_of(record)}")
    kind = _str(record, "type", f"{where}.")
    # Records are flat in dsh; a record that nests its fields under ``data``
    # like a v0 packed row is read the same way.
    fields = record["data"] if isinstance(record.get("data"), dict) else record
    if kind in _PACKED:
        return list(_parse_run(kind, fields, f"{where}."))
    if kind == "chunk":
        return [_parse_chunk(_obj(fields, "chunk", f"{where}."), f"{where}.chunk.")]
    return [_Unknown(f"stream:{kind}")]


# --- calls -------------------------------------------------------------------------------


class _Call:
    """The chunks of one model call, gathered until it is complete."""

    def __init__(self, turn: int, step: int) -> None:
        self.turn = turn
        self.step = step
        self.items: list[tuple[int, int, DeltaChannel, str, str | int | None]] = []
        self.finish: str | None = None
        self.usage: dict[str, int] = {}
        self.terminal = False
        self.names: dict[str | int, str] = {}
        self.arguments: dict[str | int, list[str]] = {}
        self.tool_keys: dict[int, str | int] = {}
        self.fed: set[int] = set()
        self.after: list[Event] = []
        self.unknown: list[str] = []

    def apply(self, seq: int, op: _Op) -> None:
        if isinstance(op, _Piece):
            self._add(seq, op)
            self.fed.add(op.index)
        elif isinstance(op, _BlockEnd):
            # Deltas are the stream; a block's final text is used only where
            # the log kept no delta of it.
            if op.piece is not None and op.piece.index not in self.fed:
                self._add(seq, op.piece)
                self.fed.add(op.piece.index)
        elif isinstance(op, _Usage):
            self.usage = op.values
        elif isinstance(op, _Finish):
            self.finish = op.reason
            self.terminal = True
        elif isinstance(op, _Unknown):
            self.unknown.append(op.kind)

    def _add(self, seq: int, piece: _Piece) -> None:
        key: str | int | None = None
        if piece.channel == "tool":
            if piece.tool_id:
                key = piece.tool_id
                self.tool_keys[piece.index] = key
            else:
                key = self.tool_keys.get(piece.index, piece.index)
            if piece.name and key not in self.names:
                self.names[key] = piece.name
            self.arguments.setdefault(key, []).append(piece.text)
        self.items.append((seq, len(self.items), piece.channel, piece.text, key))

    def use_content(self, message: object) -> None:
        """Stand in a settled message's blocks for a stream the log did not keep."""
        if self.items or not isinstance(message, dict):
            return
        content = message.get("content")
        if not isinstance(content, list):
            return
        for index, block in enumerate(content):
            if not isinstance(block, dict):
                continue
            try:
                op = _parse_chunk({"type": "block-end", "index": index, "block": block}, "")
            except _Bad:
                continue
            self.apply(index, op)

    def build(self, kind: str) -> RecordedCall:
        named: set[str | int] = set()
        deltas: list[Delta] = []
        for _seq, _order, channel, text, key in sorted(self.items, key=lambda i: i[:2]):
            name = ""
            if key is not None and key not in named:
                named.add(key)
                name = self.names.get(key, "")
            deltas.append(Delta(channel, text, key, name))
        tools = tuple(ToolCallRecord(key, self.names.get(key, ""), "".join(parts))
                      for key, parts in self.arguments.items())
        return RecordedCall(self.turn, self.step, tuple(deltas),
                            "attempt" if kind == "attempt" else "message",
                            self.finish, tools, dict(self.usage))


# --- the session -------------------------------------------------------------------------


class _Session:
    """Rows in, events out: the state of one log while it is read."""

    def __init__(self, source: Path, report: ReadReport) -> None:
        self.source = source
        self.report = report
        self.version: int | None = None
        self.pending: _Call | None = None
        self.tool_calls: dict[str, tuple[str, str]] = {}
        self.warned_required = False

    def run(self, lines: Iterator[tuple[int, bytes]]) -> Iterator[Event]:
        header: dict[str, Any] | None = None
        first: tuple[int, object] | None = None
        for lineno, line in lines:
            if not line.strip():
                continue
            self.report.rows += 1
            row = self._parse(lineno, line)
            if isinstance(row, dict) and row.get("type") == "session":
                header = row
            elif row is not _INVALID:
                first = (lineno, row)
            break
        if header is None:
            self.report.warn("the log does not start with a session header")
        session = self.source.name
        if header is not None:
            if isinstance(header.get("id"), str) and header["id"]:
                session = header["id"]
            version = header.get("version")
            if type(version) is int and version >= 0:
                self.version = version
            else:
                shown = version if type(version) is int else _kind_of(version)
                self.report.note_bad(f"line 1: session header version must be a "
                                     f"non-negative integer, not {shown}")
        yield SessionStart(session, str(self.source), self.version)
        if first is not None:
            yield from self._row(*first)
        for lineno, line in lines:
            if not line.strip():
                continue
            self.report.rows += 1
            row = self._parse(lineno, line)
            if row is not _INVALID:
                yield from self._row(lineno, row)
        yield from self._close()

    def _parse(self, lineno: int, line: bytes) -> object:
        try:
            return json.loads(line)
        except UnicodeDecodeError:
            why = "not UTF-8"
        except ValueError as exc:
            why = f"invalid JSON ({getattr(exc, 'msg', exc)})"
        except RecursionError:
            why = "JSON nested too deeply"
        self.report.note_bad(f"line {lineno}: {why}")
        return _INVALID

    def _row(self, lineno: int, row: object) -> Iterator[Event]:
        if not isinstance(row, dict):
            self.report.note_bad(f"line {lineno}: a row must be an object, not {_kind_of(row)}")
            return
        kind = row.get("type")
        if not isinstance(kind, str):
            self.report.note_bad(f"line {lineno}: type must be a string, not {_kind_of(kind)}")
            return
        if kind in _CLOSES_ATTEMPT:
            yield from self._close()
        handler = _HANDLERS.get(kind)
        if handler is None:
            if kind not in _SKIPPED:
                self._unknown(kind, row)
            return
        try:
            events = handler(self, row, kind)
        except _Bad as bad:
            self.report.note_bad(f"line {lineno}: {kind}: {bad}")
            return
        damaged = False
        for event in events:
            if isinstance(event, str):
                # A stream record that failed inside an otherwise good row: the
                # row counts once, however many of its records failed.
                if not damaged:
                    self.report.note_bad(f"line {lineno}: {kind}: {event}")
                damaged = True
            else:
                yield event

    def _unknown(self, kind: str, row: dict[str, Any]) -> None:
        self.report.unknown_rows[kind] += 1
        newer = self.version is not None and self.version > KNOWN_VERSION
        if newer and row.get("ignorable") is not True and not self.warned_required:
            self.warned_required = True
            self.report.warn(
                f"format v{self.version} is newer than this reader (v0-v{KNOWN_VERSION}) and "
                f"has rows it must not skip, first '{_show(kind[:60])}': calls may be incomplete"
            )

    def _close(self) -> list[Event]:
        """The open call as an attempt (nothing settled it), then what followed it."""
        call = self.pending
        if call is None:
            return []
        self.pending = None
        return [self._built(call, "attempt"), *call.after]

    def _built(self, call: _Call, kind: str) -> RecordedCall:
        for unknown in call.unknown:
            self.report.unknown_rows[unknown] += 1
        return call.build(kind)

    def _group(self, turn: int, step: int) -> tuple[list[Event], _Call]:
        """The call a chunk of ``turn``/``step`` belongs to, and events to yield first."""
        call = self.pending
        if call is not None and (call.terminal or (call.turn, call.step) != (turn, step)):
            out = self._close()
        elif call is not None:
            # Rows between two chunks of a call keep their place before it.
            out, call.after = call.after, []
        else:
            out = []
        if self.pending is None:
            self.pending = _Call(turn, step)
        return out, self.pending

    def _now(self, event: Event) -> list[Event | str]:
        """``event`` to yield now, or kept until the open call is yielded.

        dsh's migration moves rows that follow a call's last chunk behind the
        settled call, so holding them keeps every format in the same order.
        """
        if self.pending is None:
            return [event]
        self.pending.after.append(event)
        return []

    # Row handlers return the events to yield; a str in the list is a damaged
    # part of the row that was skipped. They raise _Bad before changing state.

    def _chunk(self, row: dict[str, Any], kind: str) -> list[Event | str]:
        seq = _int(row, "seq")
        data = _obj(row, "data")
        turn, step = _int(data, "turn", "data."), _int(data, "step", "data.")
        op = _parse_chunk(_obj(data, "chunk", "data."), "data.chunk.")
        out, call = self._group(turn, step)
        call.apply(seq, op)
        return list(out)

    def _packed(self, row: dict[str, Any], kind: str) -> list[Event | str]:
        seq0 = _int(row, "seq0")
        data = _obj(row, "data")
        turn, step = _int(data, "turn", "data."), _int(data, "step", "data.")
        pieces = _parse_run(kind, data, "data.")
        out, call = self._group(turn, step)
        for i, piece in enumerate(pieces):
            call.apply(seq0 + i, piece)
        return list(out)

    def _message(self, row: dict[str, Any], kind: str) -> list[Event | str]:
        data = _obj(row, "data")
        turn, step = _int(data, "turn", "data."), _int(data, "step", "data.")
        if kind == "assistant/attempt" or "stream" in data:
            stream = _list(data, "stream", "data.")
            out: list[Event | str] = list(self._close())
            call = _Call(turn, step)
            for i, record in enumerate(stream):
                try:
                    ops = _parse_record(record, f"data.stream[{i}]")
                except _Bad as bad:
                    out.append(str(bad))
                    continue
                for op in ops:
                    call.apply(len(call.items), op)
        else:
            # v0/v1: the message settles the open call of its turn and step,
            # unless it says it came from no chunk at all.
            sources = row.get("sourceEventSeqs")
            pending = self.pending
            if (pending is not None and (pending.turn, pending.step) == (turn, step)
                    and sources != []):
                self.pending = None
                out, call = list(pending.after), pending
            else:
                out, call = list(self._close()), _Call(turn, step)
        if kind == "assistant/attempt":
            out.append(self._built(call, "attempt"))
            return out
        call.use_content(data.get("message"))
        if not call.usage and isinstance(data.get("usage"), dict):
            call.usage = _usage(data["usage"])
        out.append(self._built(call, "message"))
        return out

    def _tool_call(self, row: dict[str, Any], kind: str) -> list[Event | str]:
        data = _obj(row, "data")
        _int(data, "turn", "data.")
        call_id = _str(data, "callId", "data.")
        self.tool_calls[call_id] = (_str(data, "name", "data."), _str(data, "arguments", "data."))
        return []

    def _tool_result(self, row: dict[str, Any], kind: str) -> list[Event | str]:
        data = _obj(row, "data")
        turn = _int(data, "turn", "data.")
        message = _obj(data, "message", "data.")
        content = _list(message, "content", "data.message.")
        wrapper = next((b for b in content if isinstance(b, dict)
                        and b.get("type") == "tool-result"), None)
        inner = content
        call_id: str | None = None
        is_error = False
        if wrapper is not None:
            where = "data.message.content[tool-result]."
            inner = _list(wrapper, "content", where)
            call_id = _opt_str(wrapper, "toolCallId", where)
            flag = wrapper.get("isError")
            if flag is not None and not isinstance(flag, bool):
                raise _Bad(f"{where}isError must be a boolean, not {_kind_of(flag)}")
            is_error = flag is True
        source = message.get("source")
        if isinstance(source, dict) and isinstance(source.get("callId"), str):
            call_id = source["callId"]
        text = "".join(b["text"] for b in inner if isinstance(b, dict)
                       and b.get("type") == "text" and isinstance(b.get("text"), str))
        code = name = None
        error = data.get("error")
        if error is not None:
            if not isinstance(error, dict):
                raise _Bad(f"data.error must be an object, not {_kind_of(error)}")
            code = _opt_str(error, "code", "data.error.")
            name = _opt_str(error, "name", "data.error.")
        tool_name, arguments = self.tool_calls.pop(call_id, ("", "")) if call_id else ("", "")
        # dsh flags a tool that raised, not a command that exited non-zero ("[exit code: 2]").
        failed = is_error or error is not None or looks_like_failure(text)
        return self._now(ToolResult(turn, call_id, tool_name, arguments, text, failed, code, name))

    def _turn_start(self, row: dict[str, Any], kind: str) -> list[Event | str]:
        return self._now(TurnStart(_int(_obj(row, "data"), "turn", "data.")))

    def _turn_end(self, row: dict[str, Any], kind: str) -> list[Event | str]:
        data = _obj(row, "data")
        turn = _int(data, "turn", "data.")
        reason = data.get("reason")
        if isinstance(reason, dict) and isinstance(reason.get("kind"), str):
            reason = reason["kind"]
        elif reason is not None and not isinstance(reason, str):
            raise _Bad("data.reason must be an object with a string kind")
        return self._now(TurnEnd(turn, reason))


_INVALID: Final = object()

_HANDLERS: Final = {
    "assistant/chunk": _Session._chunk,
    "text-chunks": _Session._packed,
    "reasoning-chunks": _Session._packed,
    "tool-call-chunks": _Session._packed,
    "assistant/message": _Session._message,
    "assistant/attempt": _Session._message,
    "tool/call": _Session._tool_call,
    "tool/result": _Session._tool_result,
    "turn/start": _Session._turn_start,
    "turn/end": _Session._turn_end,
}
