"""Builders of DeepSeek Harness (dsh) session logs for the reader's tests.

The real logs (``$LOOPBREAK_DSH``, default ``../shared/dsh``, ``sessions/``) were
written by dsh 0.1.0-rc.8 in format v0. Every other form is built from them here,
independently of the reader under test (rows are loaded with ``json`` and
``zstandard`` directly):

- :func:`unpack` / :func:`pack`: the same v0 log with every packed run expanded
  into ``assistant/chunk`` rows, or with runs of delta chunks packed the way dsh
  packs them (``text-chunks`` / ``reasoning-chunks`` / ``tool-call-chunks``).
- :func:`to_v1`: format v1. dsh's v0-to-v1 edge is an identity on these logs
  (it only renames legacy rows none of them has), so only the header changes.
- :func:`to_v2` / :func:`to_v3`: formats v2 and v3, which the installed dsh
  (rc.8) cannot write; built faithfully from the format: dsh's v1-to-v2
  migration (``@deepseek-ai/dsh-session-format-v1-to-v2``) ported, which groups
  the chunks of a turn and step into one attempt, embeds them as compact
  ``data.stream`` records (``AssistantStreamRecord``: packed runs merged across
  row boundaries plus ``{"type": "chunk"}`` records) in the ``assistant/message``
  that settles them or in a new ``assistant/attempt``, drops the chunk rows and
  renumbers ``seq``. v3 differs from v2 only by the system prompt moving out of
  ``request/header`` into a ``system/message`` row, which is done here too.
- :func:`write_zstd` and :func:`torn_tail`: the compressed form as dsh writes it
  (one zstd frame per write batch) and a last frame torn by a crash.
- :func:`reasoning_log`: a v0 log whose one call streams a given reasoning text
  as packed ``reasoning-chunks`` rows.
- :func:`synthetic_log`: a small v0 log exercising what the real ones lack (a
  retried attempt, a failing tool with ``error: {name, code}``, unpacked text
  chunks, a row of unknown type); ``python tests/transcripts/dsh_fixtures.py``
  writes its forms to ``tests/transcripts/data/``.
"""

from __future__ import annotations

import copy
import io
import json
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

Row = dict[str, Any]
Log = tuple[Row, list[Row]]

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"
DSH_ENV = "LOOPBREAK_DSH"
PACKED = {"text-chunks": "text-delta", "reasoning-chunks": "reasoning-delta",
          "tool-call-chunks": "tool-call-delta"}
DELTA_TO_RUN = {v: k for k, v in PACKED.items()}


# --- the real logs -----------------------------------------------------------------------


def dsh_dir() -> Path:
    """The shared dsh folder: ``$LOOPBREAK_DSH``, default ``../shared/dsh`` from the repo."""
    root = Path(os.environ.get(DSH_ENV) or Path("..") / "shared" / "dsh")
    return root if root.is_absolute() else REPO / root


def real_logs() -> list[Path]:
    """The real session logs dsh wrote, in name order (empty where absent)."""
    folder = dsh_dir() / "sessions"
    return sorted(folder.glob("*.session.jsonl*")) if folder.is_dir() else []


def decompress(data: bytes) -> bytes:
    """Every frame of a concatenated zstd stream (the builders' own reading)."""
    import zstandard

    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True)
    return reader.read()


def load(path: Path) -> Log:
    """A log's header and rows."""
    data = path.read_bytes()
    if path.name.endswith(".zstd"):
        data = decompress(data)
    lines = [json.loads(line) for line in data.splitlines() if line.strip()]
    return lines[0], lines[1:]


def dumps(header: Row, rows: Iterable[Row]) -> bytes:
    """JSON lines as dsh writes them: compact, UTF-8, one row a line."""
    return b"".join(_line(row) for row in [header, *rows])


def _line(row: Row) -> bytes:
    return (json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n").encode()


def write_plain(path: Path, log: Log) -> Path:
    path.write_bytes(dumps(*log))
    return path


def frame_list(log: Log, batch: int = 4) -> list[bytes]:
    """One frame for the header, then one frame per ``batch`` rows, like dsh's writer."""
    import zstandard

    header, rows = log
    compressor = zstandard.ZstdCompressor(level=3, write_checksum=True)
    out = [compressor.compress(_line(header))]
    for i in range(0, len(rows), batch):
        out.append(compressor.compress(b"".join(_line(r) for r in rows[i : i + batch])))
    return out


def zstd_frames(log: Log, batch: int = 4) -> bytes:
    return b"".join(frame_list(log, batch))


def frame_ends(data: bytes) -> list[int]:
    """Where each whole frame of ``data`` ends, found by zstandard itself."""
    import zstandard

    ends: list[int] = []
    pos = 0
    while pos < len(data):
        decoder = zstandard.ZstdDecompressor().decompressobj()
        try:
            decoder.decompress(data[pos:])
        except zstandard.ZstdError:
            break
        if not decoder.eof:
            break
        pos = len(data) - len(decoder.unused_data)
        ends.append(pos)
    return ends


def write_zstd(path: Path, log: Log, batch: int = 4) -> Path:
    path.write_bytes(zstd_frames(log, batch))
    return path


def torn_tail(log: Log) -> bytes:
    """The first half of a frame that would have continued ``log`` (a crash mid-write).

    It opens a new turn and streams into it, so a reader that used any of it
    would show an extra turn or call.
    """
    import zstandard

    _, rows = log
    seq = 1 + max(int(r["seq"] if "seq" in r else r["seq0"]) + len(_members(r)) for r in rows)
    turn = 1 + max((r["data"]["turn"] for r in rows if r["type"] == "turn/start"), default=0)
    time = 1_800_000_000_000
    extra = [
        {"type": "turn/start", "seq": seq, "time": time, "data": {"turn": turn}},
        {"type": "step/start", "seq": seq + 1, "time": time, "data": {"turn": turn, "step": 1}},
        {"type": "reasoning-chunks", "seq0": seq + 2, "time0": time,
         "data": {"turn": turn, "step": 1, "index": 0, "dt": [1] * 39,
                  "texts": [f"lost piece {i} " for i in range(40)]}},
    ]
    frame = zstandard.ZstdCompressor(level=3, write_checksum=True).compress(
        b"".join(_line(r) for r in extra))
    return frame[: len(frame) // 2]


def _members(row: Row) -> list[Any]:
    data = row.get("data") or {}
    return list(data.get("texts") or data.get("args") or [None]) if "seq0" in row else [None]


# --- v0 forms ----------------------------------------------------------------------------


def unpack(rows: Sequence[Row]) -> list[Row]:
    """Every packed run expanded into its ``assistant/chunk`` rows (dsh's own expansion)."""
    out: list[Row] = []
    for row in rows:
        if row["type"] not in PACKED:
            out.append(copy.deepcopy(row))
            continue
        data = row["data"]
        members = data["args"] if row["type"] == "tool-call-chunks" else data["texts"]
        time = row["time0"]
        for i, member in enumerate(members):
            if i:
                time += data["dt"][i - 1]
            chunk: Row = {"type": PACKED[row["type"]], "index": data["index"]}
            if row["type"] == "tool-call-chunks":
                chunk["id"] = data["id"]
                if "name" in data:
                    chunk["name"] = data["name"]
                chunk["argumentsDelta"] = member
            else:
                chunk["text"] = member
            out.append({"type": "assistant/chunk", "seq": row["seq0"] + i, "time": time,
                        "data": {"turn": data["turn"], "step": data["step"], "chunk": chunk}})
    return out


def pack(rows: Sequence[Row]) -> list[Row]:
    """Runs of adjacent delta chunks of one block packed into one row each.

    A run continues while the next row is a delta of the same kind, turn, step
    and block index with the next ``seq`` (and, for tool calls, the same id and
    name); a tool delta without an id stays a chunk row, as in dsh.
    """
    out: list[Row] = []
    for row in unpack(rows):
        chunk = row["data"].get("chunk", {}) if row["type"] == "assistant/chunk" else {}
        kind = chunk.get("type")
        if kind not in DELTA_TO_RUN or (kind == "tool-call-delta" and not chunk.get("id")):
            out.append(row)
            continue
        prev = out[-1] if out else None
        turn, step = row["data"]["turn"], row["data"]["step"]
        if (prev is not None and prev["type"] == DELTA_TO_RUN[kind]
                and (prev["data"]["turn"], prev["data"]["step"]) == (turn, step)
                and prev["data"]["index"] == chunk["index"]
                and prev["seq0"] + len(_members(prev)) == row["seq"]
                and (kind != "tool-call-delta"
                     or (prev["data"]["id"], prev["data"].get("name"))
                     == (chunk["id"], chunk.get("name")))):
            data = prev["data"]
            data["dt"].append(row["time"] - prev["_last"])
            data["args" if kind == "tool-call-delta" else "texts"].append(
                chunk["argumentsDelta"] if kind == "tool-call-delta" else chunk["text"])
            prev["_last"] = row["time"]
            continue
        data = {"turn": turn, "step": step, "index": chunk["index"], "dt": []}
        if kind == "tool-call-delta":
            data["id"] = chunk["id"]
            if "name" in chunk:
                data["name"] = chunk["name"]
            data["args"] = [chunk["argumentsDelta"]]
        else:
            data["texts"] = [chunk["text"]]
        out.append({"type": DELTA_TO_RUN[kind], "seq0": row["seq"], "time0": row["time"],
                    "data": data, "_last": row["time"]})
    for row in out:
        row.pop("_last", None)
    return out


def to_v1(log: Log) -> Log:
    header, rows = log
    return {**header, "version": 1}, copy.deepcopy(list(rows))


# --- v2 and v3 ---------------------------------------------------------------------------


class _Stream:
    """dsh's ``AssistantStreamAccumulator`` plus the migration's run merging."""

    def __init__(self) -> None:
        self.records: list[tuple[Row, int]] = []  # (record, time of its last member)

    def push_chunk(self, time: int, chunk: Row) -> None:
        kind = chunk["type"]
        if kind in ("text-delta", "reasoning-delta"):
            self._append({"type": DELTA_TO_RUN[kind], "time0": time, "index": chunk["index"],
                          "dt": [], "texts": [chunk["text"]]}, time)
        elif kind == "tool-call-delta" and chunk.get("id") and chunk.get("name") != "":
            run: Row = {"type": "tool-call-chunks", "time0": time, "index": chunk["index"],
                        "dt": [], "id": chunk["id"]}
            if "name" in chunk:
                run["name"] = chunk["name"]
            run["args"] = [chunk["argumentsDelta"]]
            self._append(run, time)
        else:
            self.records.append(({"type": "chunk", "time": time, "chunk": chunk}, time))

    def push_run(self, row: Row) -> None:
        data = row["data"]
        run: Row = {"type": row["type"], "time0": row["time0"], "index": data["index"],
                    "dt": list(data["dt"])}
        if row["type"] == "tool-call-chunks":
            run["id"] = data["id"]
            if "name" in data:
                run["name"] = data["name"]
            run["args"] = list(data["args"])
        else:
            run["texts"] = list(data["texts"])
        self._append(run, row["time0"] + sum(data["dt"]))

    def _append(self, run: Row, last: int) -> None:
        if self.records:
            prev, prev_last = self.records[-1]
            same = (prev["type"] == run["type"] and prev.get("index") == run["index"]
                    and (run["type"] != "tool-call-chunks"
                         or (prev["id"], prev.get("name")) == (run["id"], run.get("name"))))
            if same:
                members = "args" if run["type"] == "tool-call-chunks" else "texts"
                prev["dt"] += [run["time0"] - prev_last, *run["dt"]]
                prev[members] += run[members]
                self.records[-1] = (prev, last)
                return
        self.records.append((run, last))

    def dump(self) -> list[Row]:
        return [record for record, _ in self.records]


class _Group:
    def __init__(self, turn: int, step: int) -> None:
        self.turn, self.step = turn, step
        self.stream = _Stream()
        self.terminal = False
        self.last_seq = 0
        self.last_time = 0
        self.after: list[Row] = []


_CLOSERS = {"turn/end", "step/end", "llm/retry", "llm/retry-started"}


def to_v2(log: Log, version: int = 2) -> Log:
    """The log as format v2 (or later): streams embedded in messages and attempts."""
    header, rows = log
    emitted: list[tuple[int | None, Row]] = []  # (source seq, row)
    pending: _Group | None = None

    def finish_attempt() -> None:
        nonlocal pending
        if pending is None:
            return
        emitted.append((None, {"type": "assistant/attempt", "seq": pending.last_seq,
                               "time": pending.last_time,
                               "data": {"turn": pending.turn, "step": pending.step,
                                        "stream": pending.stream.dump()}}))
        emitted.extend((r["seq"], r) for r in pending.after)
        pending = None

    def group(turn: int, step: int) -> _Group:
        nonlocal pending
        if pending is not None and (pending.terminal or (pending.turn, pending.step)
                                    != (turn, step)):
            finish_attempt()
        elif pending is not None:
            emitted.extend((r["seq"], r) for r in pending.after)
            pending.after = []
        if pending is None:
            pending = _Group(turn, step)
        return pending

    for row in copy.deepcopy(list(rows)):
        kind = row["type"]
        if kind == "assistant/chunk":
            data = row["data"]
            g = group(data["turn"], data["step"])
            g.stream.push_chunk(row["time"], data["chunk"])
            g.last_seq, g.last_time = row["seq"], row["time"]
            g.terminal = g.terminal or data["chunk"]["type"] == "finish"
        elif kind in PACKED:
            data = row["data"]
            g = group(data["turn"], data["step"])
            g.stream.push_run(row)
            g.last_seq = row["seq0"] + len(_members(row)) - 1
            g.last_time = row["time0"] + sum(data["dt"])
        elif kind == "assistant/message":
            data = row["data"]
            sources = row.pop("sourceEventSeqs", None)
            stream: list[Row] = []
            settles = pending is not None and sources != [] and (
                (pending.turn, pending.step) == (data["turn"], data["step"]))
            if pending is not None and settles:
                emitted.extend((r["seq"], r) for r in pending.after)
                stream = pending.stream.dump()
                pending = None
            else:
                finish_attempt()
            row["data"] = {**data, "stream": stream}
            emitted.append((row["seq"], row))
        elif kind in _CLOSERS:
            finish_attempt()
            emitted.append((row["seq"], row))
        elif pending is not None:
            pending.after.append(row)
        else:
            emitted.append((row.get("seq"), row))
    finish_attempt()

    mapping: dict[int, int] = {}
    for new, (old, _row) in enumerate(emitted):
        if old is not None:
            mapping[old] = new
    out: list[Row] = []
    for new, (_old, row) in enumerate(emitted):
        row["seq"] = new
        if "sourceEventSeqs" in row:
            row["sourceEventSeqs"] = [mapping[s] for s in _seqs(row["sourceEventSeqs"])
                                      if s in mapping]
        if row["type"] in ("session/title", "session/title-llm-request"):
            seqs = row["data"].get("messageSeqs", [])
            row["data"]["messageSeqs"] = [mapping[s] for s in seqs if s in mapping]
        out.append(row)
    if version >= 3:
        out = _system_rows(out)
    return {**header, "version": version}, out


def _seqs(values: Iterable[Any]) -> list[int]:
    out: list[int] = []
    for value in values:
        out.extend(range(value[0], value[1] + 1) if isinstance(value, list) else [value])
    return out


def _system_rows(rows: list[Row]) -> list[Row]:
    """v3: the system prompt leaves ``request/header`` for a ``system/message`` row."""
    out: list[Row] = []
    turn = step = 0
    for row in rows:
        data = row.get("data") or {}
        if row["type"] == "step/start":
            turn, step = data["turn"], data["step"]
        if row["type"] == "request/header" and "system" in data.get("header", {}):
            system = data["header"].pop("system")
            out.append({"type": "system/message", "seq": 0, "time": row["time"],
                        "data": {"turn": turn, "step": step,
                                 "message": {"role": "system",
                                             "content": [{"type": "text", "text": system}]}},
                        "surfaceOp": "append"})
        out.append(row)
    for seq, row in enumerate(out):
        row["seq"] = seq
    return out


def to_v3(log: Log) -> Log:
    return to_v2(log, version=3)


# --- made-up logs ------------------------------------------------------------------------


def _header(session: str, version: int = 0) -> Row:
    return {"type": "session", "version": version, "id": session,
            "createdAt": 1_796_000_000_000, "cwd": "/home/dev/project", "delegationDepth": 0}


class _Rows:
    """Rows with running ``seq`` and ``time``."""

    def __init__(self) -> None:
        self.rows: list[Row] = []
        self.seq = 0
        self.time = 1_796_000_000_100

    def add(self, kind: str, data: Row, **extra: Any) -> int:
        self.rows.append({"type": kind, "seq": self.seq, "time": self.time, "data": data, **extra})
        self.seq += 1
        self.time += 1
        return self.seq - 1

    def chunk(self, turn: int, step: int, chunk: Row) -> int:
        return self.add("assistant/chunk", {"turn": turn, "step": step, "chunk": chunk})

    def run(self, kind: str, turn: int, step: int, index: int, members: list[str],
            **ids: str) -> list[int]:
        data: Row = {"turn": turn, "step": step, "index": index, "dt": [0] * (len(members) - 1),
                     **ids, ("args" if kind == "tool-call-chunks" else "texts"): members}
        self.rows.append({"type": kind, "seq0": self.seq, "time0": self.time, "data": data})
        first = self.seq
        self.seq += len(members)
        self.time += 1
        return list(range(first, self.seq))


def split(text: str, piece: int) -> list[str]:
    return [text[i : i + piece] for i in range(0, len(text), piece)] or [""]


def reasoning_log(text: str, pieces: Sequence[str] | None = None, per_row: int = 64,
                  session: str = "session-reasoning") -> Log:
    """A v0 log of one call that streams ``text`` as reasoning in packed rows.

    ``pieces`` are the deltas (default: 20-character pieces, as dsh's mock
    upstream streams); ``per_row`` members go into each ``reasoning-chunks`` row.
    """
    pieces = list(pieces) if pieces is not None else split(text, 20)
    assert "".join(pieces) == text
    r = _Rows()
    r.add("turn/start", {"turn": 1})
    r.add("step/start", {"turn": 1, "step": 1})
    seqs = [r.chunk(1, 1, {"type": "block-start", "index": 0, "blockType": "reasoning"})]
    for i in range(0, len(pieces), per_row):
        seqs += r.run("reasoning-chunks", 1, 1, 0, pieces[i : i + per_row])
    block = {"type": "reasoning", "text": text}
    seqs.append(r.chunk(1, 1, {"type": "block-end", "index": 0, "block": block}))
    usage = {"inputTokens": 100, "outputTokens": len(pieces), "cacheReadTokens": 0,
             "reasoningTokens": len(pieces)}
    seqs.append(r.chunk(1, 1, {"type": "usage", "usage": usage}))
    seqs.append(r.chunk(1, 1, {"type": "finish", "reason": {"kind": "stop"}}))
    r.add("assistant/message", {"turn": 1, "step": 1, "message": {
        "role": "assistant", "content": [block], "source": {"kind": "model"}}, "usage": usage},
        sourceEventSeqs=seqs, surfaceOp="append")
    r.add("step/end", {"turn": 1, "step": 1})
    r.add("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    return _header(session), r.rows


SYNTHETIC_ARGS = '{"command": "grep -n \\"déjà vu 🔁\\" notes.txt"}'


def synthetic_log() -> Log:
    """A v0 log with a retried attempt, a failing tool call and unpacked text chunks.

    Turn 1, step 1: an attempt streams reasoning and is cut by ``llm/retry``;
    the retry streams reasoning and a ``grep`` tool call (packed), finishes with
    ``tool-calls`` and is settled; the tool fails (``isError`` and ``error``).
    Step 2 streams reasoning and text as interleaved unpacked chunks (text with
    characters outside the BMP) and stops. A plugin row of unknown type sits
    between the steps.
    """
    r = _Rows()
    r.add("turn/start", {"turn": 1})
    r.add("step/start", {"turn": 1, "step": 1})
    r.add("request/header", {"header": {
        "config": {"provider": "deepseek-official", "model": "deepseek-v4-flash"},
        "system": "You are a coding agent."}, "reason": "initial"})
    r.chunk(1, 1, {"type": "block-start", "index": 0, "blockType": "reasoning"})
    r.run("reasoning-chunks", 1, 1, 0, ["First try: ", "search the ", "notes"])
    r.add("llm/retry", {"turn": 1, "step": 1, "provider": "deepseek-official",
                        "policyKey": "stream-idle", "retryId": "retry-1", "attempt": 1})
    seqs = [r.chunk(1, 1, {"type": "block-start", "index": 0, "blockType": "reasoning"})]
    seqs += r.run("reasoning-chunks", 1, 1, 0, ["Search the ", "notes for ", "the phrase."])
    seqs.append(r.chunk(1, 1, {"type": "block-start", "index": 1, "blockType": "tool-call"}))
    call_id = "call_00_synthetic"
    args = [SYNTHETIC_ARGS[:12], SYNTHETIC_ARGS[12:30], SYNTHETIC_ARGS[30:]]
    seqs += r.run("tool-call-chunks", 1, 1, 1, ["", *args], id=call_id, name="bash")
    thought = "Search the notes for the phrase."
    seqs.append(r.chunk(1, 1, {"type": "block-end", "index": 0,
                               "block": {"type": "reasoning", "text": thought}}))
    tool_block = {"type": "tool-call", "id": call_id, "name": "bash", "arguments": SYNTHETIC_ARGS}
    seqs.append(r.chunk(1, 1, {"type": "block-end", "index": 1, "block": tool_block}))
    usage = {"inputTokens": 120, "outputTokens": 30, "cacheReadTokens": 0, "reasoningTokens": 9}
    seqs.append(r.chunk(1, 1, {"type": "usage", "usage": usage}))
    seqs.append(r.chunk(1, 1, {"type": "finish", "reason": {"kind": "tool-calls"}}))
    r.add("assistant/message", {"turn": 1, "step": 1, "message": {
        "role": "assistant", "content": [{"type": "reasoning", "text": thought}, tool_block],
        "source": {"kind": "model"}}, "usage": usage}, sourceEventSeqs=seqs, surfaceOp="append")
    call_seq = r.add("tool/call", {"turn": 1, "step": 1, "callId": call_id, "name": "bash",
                                   "arguments": SYNTHETIC_ARGS})
    result = "grep: notes.txt: No such file or directory\n[exit code 2]"
    r.add("tool/result", {"turn": 1, "step": 1, "message": {
        "source": {"kind": "tool", "callId": call_id},
        "content": [{"type": "tool-result", "toolCallId": call_id,
                     "content": [{"type": "text", "text": result}], "isError": True}],
        "role": "user"}, "error": {"name": "ToolExecutionError", "code": "EXIT_NONZERO"}},
        sourceEventSeqs=[call_seq], surfaceOp="append")
    r.add("step/end", {"turn": 1, "step": 1})
    r.add("x-plugin/note", {"note": "a row this reader does not know"}, ignorable=True)
    r.add("step/start", {"turn": 1, "step": 2})
    seqs = [r.chunk(1, 2, {"type": "block-start", "index": 0, "blockType": "reasoning"}),
            r.chunk(1, 2, {"type": "reasoning-delta", "index": 0, "text": "No file; "}),
            r.chunk(1, 2, {"type": "block-start", "index": 1, "blockType": "text"}),
            r.chunk(1, 2, {"type": "text-delta", "index": 1, "text": "notes.txt is "}),
            r.chunk(1, 2, {"type": "reasoning-delta", "index": 0, "text": "say so."}),
            r.chunk(1, 2, {"type": "text-delta", "index": 1, "text": "missing 🙈"})]
    answer = "notes.txt is missing 🙈"
    seqs.append(r.chunk(1, 2, {"type": "block-end", "index": 0,
                               "block": {"type": "reasoning", "text": "No file; say so."}}))
    seqs.append(r.chunk(1, 2, {"type": "block-end", "index": 1,
                               "block": {"type": "text", "text": answer}}))
    seqs.append(r.chunk(1, 2, {"type": "finish", "reason": {"kind": "stop"}}))
    r.add("assistant/message", {"turn": 1, "step": 2, "message": {
        "role": "assistant", "content": [{"type": "reasoning", "text": "No file; say so."},
                                         {"type": "text", "text": answer}],
        "source": {"kind": "model"}}}, sourceEventSeqs=seqs, surfaceOp="append")
    r.add("step/end", {"turn": 1, "step": 2})
    r.add("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    return _header("session-synthetic"), r.rows


SYNTHETIC_FILES: dict[str, Callable[[], bytes]] = {
    "synthetic.session.jsonl": lambda: dumps(*synthetic_log()),
    "synthetic.session.v2.jsonl": lambda: dumps(*to_v2(synthetic_log())),
}


def write_data(folder: Path = DATA) -> list[Path]:
    """Write the committed fixture files (run this module to refresh them)."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, build in SYNTHETIC_FILES.items():
        (folder / name).write_bytes(build())
        written.append(folder / name)
    torn = folder / "synthetic-torn.session.jsonl.zstd"
    torn.write_bytes(zstd_frames(synthetic_log()) + torn_tail(synthetic_log()))
    written.append(torn)
    return written


if __name__ == "__main__":
    for path in write_data():
        print(path.relative_to(REPO))
