"""The DeepSeek Harness session-log reader, on the real logs dsh wrote and on every
form of them the format allows (v0 packed and unpacked, v1, v2, v3, plain and
zstd, a torn last frame), built by ``dsh_fixtures`` independently of the reader."""

from __future__ import annotations

import io
import json
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import loopbreak
from loopbreak import InputError
from loopbreak.offline.transcripts import dsh
from loopbreak.offline.transcripts._model import (
    Event,
    ReadReport,
    RecordedCall,
    SessionStart,
    ToolResult,
    TurnEnd,
    TurnStart,
)
from loopbreak.offline.transcripts.dsh import find_dsh_logs, read_dsh
from support import load_fixture
from transcripts import dsh_fixtures as fx

Log = fx.Log
Replayed = RecordedCall | ToolResult | TurnStart | TurnEnd

# What each real log holds: rows (header included), and per call its kind,
# finish reason and characters of reasoning, text and tool arguments.
REAL: dict[str, tuple[int, list[tuple[str, str | None, int, int, int]], int]] = {
    "loop3000": (29, [("message", "stop", 60000, 37, 0)], 0),
    "normal1": (26, [("message", "stop", 57, 29, 0)], 0),
    "plainlog": (31, [("message", "stop", 57, 29, 0)], 0),
    "reasoning_only": (22, [("message", "stop", 57, 0, 0)], 0),
    "sigterm": (34, [("attempt", None, 14760, 0, 0)], 0),
    "tool_bash": (38, [("message", "tool-calls", 48, 0, 65), ("message", "stop", 57, 24, 0)], 1),
}


def read(path: Path) -> tuple[list[Event], ReadReport]:
    events = list(read_dsh(path))
    assert isinstance(events[0], SessionStart)
    assert isinstance(events[-1], ReadReport)
    assert not any(isinstance(e, (SessionStart, ReadReport)) for e in events[1:-1])
    return events, events[-1]


def replayed(events: list[Event]) -> list[Replayed]:
    return [e for e in events if isinstance(e, (RecordedCall, ToolResult, TurnStart, TurnEnd))]


def calls(events: list[Event]) -> list[RecordedCall]:
    return [e for e in events if isinstance(e, RecordedCall)]


def real_log(name: str) -> Path:
    found = [p for p in fx.real_logs() if p.name.split(".")[0] == name]
    if not found:
        pytest.skip(f"real dsh log {name!r} not found under {fx.dsh_dir() / 'sessions'}: "
                    f"set {fx.DSH_ENV} to the shared dsh folder to run this test")
    return found[0]


def seq_ordered_deltas(rows: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Every delta of the raw rows in stream order (seq, seq0 + i): the test's oracle."""
    found: list[tuple[int, str, str]] = []
    channels = {"reasoning-delta": "reasoning", "text-delta": "text", "tool-call-delta": "tool"}
    for row in rows:
        if row["type"] in fx.PACKED:
            data = row["data"]
            members = data.get("texts") or data.get("args")
            channel = channels[fx.PACKED[row["type"]]]
            found += [(row["seq0"] + i, channel, m) for i, m in enumerate(members)]
        elif row["type"] == "assistant/chunk" and row["data"]["chunk"]["type"] in channels:
            chunk = row["data"]["chunk"]
            text = chunk.get("text", chunk.get("argumentsDelta"))
            found.append((row["seq"], channels[chunk["type"]], text))
    return [(channel, text) for _, channel, text in sorted(found)]


# --- the real logs -----------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_log_is_read_whole_and_clean(name: str) -> None:
    path = real_log(name)
    header, rows = fx.load(path)
    events, report = read(path)
    start = events[0]
    assert isinstance(start, SessionStart)
    assert (start.session, start.version, start.source) == (header["id"], 0, str(path))
    expected_rows, expected_calls, tool_results = REAL[name]
    assert report.rows == expected_rows == len(rows) + 1
    assert (report.bad_rows, report.first_error, report.unknown_rows) == (0, None, {})
    assert (report.torn, report.lost_bytes, report.warnings) == (False, 0, [])
    if path.name.endswith(".zstd"):
        assert report.frames == len(fx.frame_ends(path.read_bytes())) > 1
    else:
        assert report.frames == 0
    got = [(c.kind, c.finish, c.chars("reasoning"), c.chars("text"), c.chars("tool"))
           for c in calls(events)]
    assert got == expected_calls
    assert sum(isinstance(e, ToolResult) for e in events) == tool_results


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_log_deltas_are_the_stream_in_seq_order(name: str) -> None:
    _, rows = fx.load(real_log(name))
    events, _ = read(real_log(name))
    got = [(d.channel, d.text) for call in calls(events) for d in call.deltas]
    assert got == seq_ordered_deltas(rows)


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_log_calls_join_to_what_dsh_settled(name: str) -> None:
    """Each settled call's deltas join to the blocks of its ``assistant/message``."""
    _, rows = fx.load(real_log(name))
    messages = [r["data"] for r in rows if r["type"] == "assistant/message"]
    settled = [c for c in calls(read(real_log(name))[0]) if c.kind == "message"]
    assert len(settled) == len(messages)
    for call, data in zip(settled, messages):
        blocks = data["message"]["content"]
        for channel in ("reasoning", "text"):
            assert call.joined(channel) == "".join(b["text"] for b in blocks
                                                   if b["type"] == channel)
        assert [(t.key, t.name, t.arguments) for t in call.tool_calls] == [
            (b["id"], b["name"], b["arguments"]) for b in blocks if b["type"] == "tool-call"]
        assert call.usage == data["usage"]
        assert (call.turn, call.step) == (data["turn"], data["step"])


def test_killed_stream_is_yielded_unfinished_at_the_end() -> None:
    path = real_log("sigterm")
    _, rows = fx.load(path)
    events, _ = read(path)
    assert isinstance(events[-2], RecordedCall)
    call = events[-2]
    assert (call.kind, call.finish, call.usage) == ("attempt", None, {})
    streamed = "".join(t for r in rows if r["type"] == "reasoning-chunks"
                       for t in r["data"]["texts"])
    assert call.joined("reasoning") == streamed
    assert not any(isinstance(e, TurnEnd) for e in events)


def test_tool_call_and_its_result() -> None:
    events, _ = read(real_log("tool_bash"))
    first, result = calls(events)[0], next(e for e in events if isinstance(e, ToolResult))
    call_id = "call_00_mock97174bd273604f56"
    tool = [d for d in first.deltas if d.channel == "tool"]
    assert tool[0].name == "bash" and all(d.name == "" for d in tool[1:])
    assert {d.key for d in tool} == {call_id}
    assert result == ToolResult(1, call_id, "bash", first.tool_calls[0].arguments,
                                "mock-tool-ok\n", False, None, None)
    assert events.index(result) > events.index(first)


def test_every_real_log_in_the_shared_folder_reads_clean() -> None:
    logs = fx.real_logs()
    if not logs:
        pytest.skip(f"no real dsh logs under {fx.dsh_dir() / 'sessions'}: set {fx.DSH_ENV}")
    assert find_dsh_logs(fx.dsh_dir() / "sessions") == logs
    for path in logs:
        _, report = read(path)
        assert report.bad_rows == 0 and not report.torn, path


# --- every form reads to the same events -------------------------------------------------


def _forms(log: Log, tmp: Path) -> dict[str, tuple[Path, int, int]]:
    """Every form of ``log``: its file, the bytes a reader must report lost, its version."""
    header, rows = log
    tail = fx.torn_tail(log)
    v2 = fx.to_v2(log)
    v0 = header["version"]
    forms = {
        "v0-plain": (fx.write_plain(tmp / "session.jsonl", log), 0, v0),
        "v0-zstd": (fx.write_zstd(tmp / "a.session.jsonl.zstd", log), 0, v0),
        "v0-unpacked": (fx.write_plain(tmp / "b.session.jsonl", (header, fx.unpack(rows))), 0,
                        v0),
        "v0-packed": (fx.write_zstd(tmp / "c.session.jsonl.zstd", (header, fx.pack(rows))), 0,
                      v0),
        "v1-zstd": (fx.write_zstd(tmp / "session.v1.jsonl.zstd", fx.to_v1(log)), 0, 1),
        "v1-packed": (fx.write_plain(tmp / "session.v1.jsonl",
                                     fx.to_v1((header, fx.pack(rows)))), 0, 1),
        "v2-plain": (fx.write_plain(tmp / "session.v2.jsonl", v2), 0, 2),
        "v2-from-unpacked": (fx.write_plain(tmp / "d.session.v2.jsonl",
                                            fx.to_v2((header, fx.unpack(rows)))), 0, 2),
        "v2-zstd": (fx.write_zstd(tmp / "session.v2.jsonl.zstd", v2, batch=3), 0, 2),
        "v3-zstd": (fx.write_zstd(tmp / "session.v3.jsonl.zstd", fx.to_v3(log)), 0, 3),
    }
    torn = tmp / "torn.session.jsonl.zstd"
    torn.write_bytes(fx.zstd_frames(log) + tail)
    forms["v0-zstd-torn"] = (torn, len(tail), v0)
    torn2 = tmp / "torn.session.v2.jsonl.zstd"
    torn2.write_bytes(fx.zstd_frames(v2, batch=2) + tail)
    forms["v2-zstd-torn"] = (torn2, len(tail), 2)
    return forms


@pytest.mark.parametrize("name", sorted(REAL))
def test_every_form_of_a_real_log_reads_to_the_same_events(name: str, tmp_path: Path) -> None:
    path = real_log(name)
    original, _ = read(path)
    for form, (built, lost, version) in _forms(fx.load(path), tmp_path).items():
        events, report = read(built)
        assert replayed(events) == replayed(original), form
        assert (report.bad_rows, report.first_error, report.warnings) == (0, None, []), form
        assert (report.torn, report.lost_bytes) == (lost > 0, lost), form
        if built.name.endswith(".zstd"):
            intact = len(fx.frame_ends(built.read_bytes()))
            assert report.frames == intact > 1, form
        start = events[0]
        assert isinstance(start, SessionStart) and start.version == version, form


def test_every_form_of_the_synthetic_log_reads_to_the_same_events(tmp_path: Path) -> None:
    original, report = read(fx.write_plain(tmp_path / "orig.session.jsonl", fx.synthetic_log()))
    assert report.unknown_rows == {"x-plugin/note": 1}
    (tmp_path / "forms").mkdir()
    for built, lost, _ in _forms(fx.synthetic_log(), tmp_path / "forms").values():
        events, report = read(built)
        assert replayed(events) == replayed(original), built.name
        assert report.unknown_rows == {"x-plugin/note": 1}
        assert report.torn == (lost > 0) and report.lost_bytes == lost


def test_the_builders_make_the_forms_they_claim() -> None:
    header, rows = fx.synthetic_log()
    kinds = {r["type"] for r in rows}
    assert {"assistant/chunk", "reasoning-chunks", "tool-call-chunks"} <= kinds
    assert not {r["type"] for r in fx.unpack(rows)} & set(fx.PACKED)
    assert "text-chunks" in {r["type"] for r in fx.pack(rows)}
    assert fx.unpack(fx.pack(rows)) == fx.unpack(rows)
    v2_header, v2 = fx.to_v2((header, rows))
    assert v2_header["version"] == 2 and fx.to_v1((header, rows))[0]["version"] == 1
    assert not {r["type"] for r in v2} & {"assistant/chunk", *fx.PACKED}
    assert [r["seq"] for r in v2] == list(range(len(v2)))
    embedded = [r for r in v2 if r["type"] in ("assistant/message", "assistant/attempt")]
    assert [r["type"] for r in embedded] == ["assistant/attempt", "assistant/message",
                                             "assistant/message"]
    assert all(r["data"]["stream"] and "sourceEventSeqs" not in r for r in embedded)
    record_types = {rec["type"] for r in embedded for rec in r["data"]["stream"]}
    assert record_types == {"chunk", "reasoning-chunks", "text-chunks", "tool-call-chunks"}
    v3 = fx.to_v3((header, rows))[1]
    assert "system/message" in {r["type"] for r in v3}
    assert all("system" not in r["data"]["header"] for r in v3 if r["type"] == "request/header")


def test_committed_fixture_files_are_what_the_builders_make() -> None:
    for name, build in fx.SYNTHETIC_FILES.items():
        assert (fx.DATA / name).read_bytes() == build(), f"rerun {fx.__file__}"
    torn = fx.DATA / "synthetic-torn.session.jsonl.zstd"
    events, report = read(torn)
    plain, _ = read(fx.DATA / "synthetic.session.jsonl")
    assert replayed(events) == replayed(plain)
    assert report.torn and report.lost_bytes == len(fx.torn_tail(fx.synthetic_log()))


# --- what the synthetic log shows --------------------------------------------------------


def test_attempt_and_message_at_one_step_are_two_calls() -> None:
    for name in ("synthetic.session.jsonl", "synthetic.session.v2.jsonl"):
        events, _ = read(fx.DATA / name)
        attempt, settled, answer = calls(events)
        assert (attempt.turn, attempt.step, attempt.kind, attempt.finish) == (1, 1, "attempt", None)
        assert attempt.joined("reasoning") == "First try: search the notes"
        assert (settled.turn, settled.step, settled.kind, settled.finish) == (
            1, 1, "message", "tool-calls")
        assert settled.tool_calls[0].arguments == fx.SYNTHETIC_ARGS
        assert answer.kind == "message" and answer.finish == "stop"


def test_failing_tool_result_carries_its_error() -> None:
    for name in ("synthetic.session.jsonl", "synthetic.session.v2.jsonl"):
        result = next(e for e in read(fx.DATA / name)[0] if isinstance(e, ToolResult))
        assert result.failed and result.error_code == "EXIT_NONZERO"
        assert result.error_name == "ToolExecutionError"
        assert (result.name, result.arguments) == ("bash", fx.SYNTHETIC_ARGS)
        assert result.text.startswith("grep: notes.txt: No such file")


def test_channels_interleave_in_stream_order() -> None:
    answer = calls(read(fx.DATA / "synthetic.session.v2.jsonl")[0])[2]
    assert [(d.channel, d.text) for d in answer.deltas] == [
        ("reasoning", "No file; "), ("text", "notes.txt is "),
        ("reasoning", "say so."), ("text", "missing 🙈")]


def test_packed_rows_written_out_of_order_are_read_in_seq_order(tmp_path: Path) -> None:
    r = fx._Rows()
    r.add("turn/start", {"turn": 1})
    r.seq = 10
    r.run("text-chunks", 1, 1, 1, ["b", "d"])  # seq 10, 11
    r.seq = 5
    r.run("reasoning-chunks", 1, 1, 0, ["a"])  # seq 5
    r.seq = 12
    r.chunk(1, 1, {"type": "reasoning-delta", "index": 0, "text": "e"})
    r.seq = 8
    r.chunk(1, 1, {"type": "text-delta", "index": 1, "text": "c"})
    r.seq = 20
    r.chunk(1, 1, {"type": "finish", "reason": "stop"})
    r.add("assistant/message", {"turn": 1, "step": 1, "message": {}})
    events, report = read(fx.write_plain(tmp_path / "session.jsonl",
                                         (fx._header("s"), r.rows)))
    (call,) = calls(events)
    assert "".join(d.text for d in call.deltas) == "acbde" and call.finish == "stop"
    assert report.bad_rows == 0


def test_message_without_stream_falls_back_to_its_content(tmp_path: Path) -> None:
    content = [{"type": "reasoning", "text": "think"}, {"type": "text", "text": "say"},
               {"type": "tool-call", "id": "t1", "name": "read", "arguments": "{}"}]
    v0_row: dict[str, Any] = {"type": "assistant/message", "seq": 0, "time": 0,
              "data": {"turn": 1, "step": 1, "message": {"content": content}}}
    v2_row = {**v0_row, "data": {**v0_row["data"], "stream": []}}
    for version, row in ((0, v0_row), (2, v2_row)):
        events, _ = read(fx.write_plain(tmp_path / f"v{version}.session.jsonl",
                                        (fx._header("s", version), [row])))
        (call,) = calls(events)
        assert [(d.channel, d.text, d.key) for d in call.deltas] == [
            ("reasoning", "think", None), ("text", "say", None), ("tool", "{}", "t1")]
        assert call.tool_calls[0].name == "read"


# --- reasoning texts read back exactly ---------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(text=st.text(min_size=1, max_size=400), cuts=st.lists(st.integers(1, 30), max_size=40),
       per_row=st.integers(1, 9), zstd=st.booleans())
def test_embedded_reasoning_reads_back_exactly(text: str, cuts: list[int], per_row: int,
                                               zstd: bool, tmp_path_factory: Any) -> None:
    pieces, i = [], 0
    for n in [*cuts, len(text)]:
        if i < len(text):
            pieces.append(text[i : i + n])
            i += n
    log = fx.reasoning_log(text, pieces, per_row=per_row)
    folder = tmp_path_factory.mktemp("embed")
    path = (fx.write_zstd(folder / "session.jsonl.zstd", log) if zstd
            else fx.write_plain(folder / "session.jsonl", log))
    (call,) = calls(read(path)[0])
    assert [d.text for d in call.deltas] == pieces
    assert call.joined("reasoning") == text


def test_real_bleed_texts_read_back_exactly(corpus: Path, tmp_path: Path) -> None:
    """The dsh-loop-guard bleed and control tails, as packed rows: same text, same cut."""
    lines = load_fixture(corpus, "fixtures-reasoning-lines.json")
    texts = [item["head"] for item in lines["bleeds"] + lines["controls"]]
    assert len(lines["bleeds"]) >= 2
    for n, text in enumerate(texts):
        pieces = fx.split(text, 17 + n)
        path = fx.write_zstd(tmp_path / f"{n}.session.jsonl.zstd",
                             fx.reasoning_log(text, pieces, per_row=97))
        (call,) = calls(read(path)[0])
        read_pieces = [d.text for d in call.deltas]
        assert read_pieces == pieces and call.joined("reasoning") == text
        assert loopbreak.scan(read_pieces) == loopbreak.scan(pieces)


# --- damage is counted, never raised -----------------------------------------------------


def _synthetic_lines() -> list[bytes]:
    return fx.dumps(*fx.synthetic_log()).splitlines(keepends=True)


def _with_row(tmp: Path, index: int, change: Callable[[dict[str, Any]], object]) -> Path:
    lines = _synthetic_lines()
    row = json.loads(lines[index])
    changed = change(row)
    lines[index] = (json.dumps(row if changed is None else changed) + "\n").encode()
    path = tmp / "session.jsonl"
    path.write_bytes(b"".join(lines))
    return path


def _row_index(kind: str, nth: int = 0) -> int:
    """Line index of the ``nth`` row of ``kind`` (``assistant/chunk:TYPE`` for a chunk type)."""
    kind, _, chunk = kind.partition(":")
    found = [i for i, line in enumerate(_synthetic_lines())
             if (row := json.loads(line))["type"] == kind
             and (not chunk or row["data"]["chunk"]["type"] == chunk)]
    return found[nth]


def _set(path: tuple[str | int, ...], value: object) -> Callable[[dict[str, Any]], None]:
    def change(row: dict[str, Any]) -> None:
        target: Any = row
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return change


BAD_ROWS: list[tuple[str, int, tuple[str, ...], object, str]] = [
    ("reasoning-chunks", 1, ("data", "texts"), 5, "data.texts must be a list of strings"),
    ("reasoning-chunks", 0, ("data",), None, "data must be an object, not null"),
    ("reasoning-chunks", 0, ("seq0",), "14", "seq0 must be an integer, not str"),
    ("tool-call-chunks", 0, ("data", "id"), None, "data.id must be a string, not null"),
    ("assistant/chunk:text-delta", 1, ("data", "chunk", "text"), 3,
     "data.chunk.text must be a string, not int"),
    ("assistant/chunk", 0, ("data", "turn"), "1", "data.turn must be an integer, not str"),
    ("tool/result", 0, ("data", "message"), [], "data.message must be an object, not list"),
    ("tool/result", 0, ("data", "error"), "boom", "data.error must be an object, not str"),
    ("turn/end", 0, ("data", "reason"), 7, "data.reason must be an object with a string kind"),
    ("tool/call", 0, ("data", "callId"), 1, "data.callId must be a string, not int"),
]


@pytest.mark.parametrize(("kind", "nth", "field", "value", "message"), BAD_ROWS)
def test_wrong_type_in_a_field_is_one_bad_row(tmp_path: Path, kind: str, nth: int,
                                              field: tuple[str, ...], value: object,
                                              message: str) -> None:
    index = _row_index(kind, nth)
    events, report = read(_with_row(tmp_path, index, _set(field, value)))
    assert report.bad_rows == 1
    assert report.first_error == f"line {index + 1}: {kind.partition(':')[0]}: {message}"
    assert len(calls(events)) == 3 and any(isinstance(e, TurnEnd) for e in events) == (
        kind != "turn/end")


def test_bad_stream_record_skips_the_record_not_the_call(tmp_path: Path) -> None:
    header, rows = fx.to_v2(fx.synthetic_log())
    message = next(r for r in rows if r["type"] == "assistant/message")
    message["data"]["stream"].insert(1, {"type": "reasoning-chunks", "index": 0, "texts": 9})
    message["data"]["stream"].insert(1, "not a record")
    events, report = read(fx.write_plain(tmp_path / "session.v2.jsonl", (header, rows)))
    assert report.bad_rows == 1
    assert "data.stream[1] must be an object" in (report.first_error or "")
    assert calls(events)[1].tool_calls[0].arguments == fx.SYNTHETIC_ARGS


def test_broken_lines_are_bad_rows(tmp_path: Path) -> None:
    lines = _synthetic_lines()
    lines[3] = b'{"type": "assistant/chunk", "seq": \n'
    lines[5] = b"[1, 2]\n"
    lines[6] = b"\xff\xfe not utf-8\n"
    lines.insert(7, b"\n")
    lines[-1] = lines[-1][:20]  # the last line cut off, no newline
    path = tmp_path / "session.jsonl"
    path.write_bytes(b"".join(lines))
    events, report = read(path)
    assert report.bad_rows == 4
    assert report.first_error is not None and report.first_error.startswith(
        "line 4: invalid JSON (Expecting value)")
    assert report.rows == len(lines) - 1  # the blank line is not a row
    assert not any(isinstance(e, TurnEnd) for e in events)


def test_header_trouble_is_reported(tmp_path: Path) -> None:
    empty = tmp_path / "session.jsonl"
    empty.write_bytes(b"")
    events, report = read(empty)
    assert events[0] == SessionStart("session.jsonl", str(empty), None)
    assert report.warnings == ["the log does not start with a session header"]
    lines = _synthetic_lines()
    headless = tmp_path / "headless.session.jsonl"
    headless.write_bytes(b"".join(lines[1:]))
    events, report = read(headless)
    assert len(calls(events)) == 3 and report.warnings and report.bad_rows == 0
    bad_version = tmp_path / "v.session.jsonl"
    bad_version.write_bytes(b'{"type": "session", "version": "2", "id": "x"}\n' +
                            b"".join(lines[1:]))
    events, report = read(bad_version)
    assert events[0] == SessionStart("x", str(bad_version), None) and report.bad_rows == 1


@pytest.mark.parametrize(("version", "ignorable", "warns"), [
    (0, None, False), (3, False, False), (4, True, False), (4, None, True), (4, False, True)])
def test_unknown_rows_are_counted_and_warned_once_when_required_and_newer(
        tmp_path: Path, version: int, ignorable: bool | None, warns: bool) -> None:
    header, rows = fx.synthetic_log()
    extra: dict[str, Any] = {"type": "future/thing", "seq": 99, "time": 0, "data": {}}
    if ignorable is not None:
        extra["ignorable"] = ignorable
    rows = [*rows[:3], extra, {**extra, "type": "future/other"}, *rows[3:]]
    events, report = read(fx.write_plain(tmp_path / "session.jsonl",
                                         ({**header, "version": version}, rows)))
    assert report.unknown_rows == {"x-plugin/note": 1, "future/thing": 1, "future/other": 1}
    assert len(report.warnings) == (1 if warns else 0)
    if warns:
        assert f"format v{version} is newer" in report.warnings[0]
        assert "future/thing" in report.warnings[0]
    assert len(calls(events)) == 3


def test_damaged_middle_frame_loses_only_that_frame(tmp_path: Path) -> None:
    frames = fx.frame_list(fx.synthetic_log(), batch=3)
    damaged = bytearray(frames[3])
    damaged[len(damaged) // 2 :] = b"\x00" * (len(damaged) - len(damaged) // 2)
    path = tmp_path / "session.jsonl.zstd"
    path.write_bytes(b"".join([*frames[:3], bytes(damaged), *frames[4:]]))
    events, report = read(path)
    assert report.frames == len(frames) - 1 and not report.torn
    assert report.lost_bytes == len(damaged)
    assert report.warnings == [f"1 damaged zstd region(s), {len(damaged)} bytes skipped"]
    assert len(calls(events)) >= 2


def test_compression_is_told_by_content_not_name(tmp_path: Path) -> None:
    log = fx.synthetic_log()
    plain_named_zstd = fx.write_plain(tmp_path / "a.session.jsonl.zstd", log)
    zstd_named_plain = fx.write_zstd(tmp_path / "b.session.jsonl", log)
    expected = replayed(read(fx.DATA / "synthetic.session.jsonl")[0])
    for path in (plain_named_zstd, zstd_named_plain):
        events, report = read(path)
        assert replayed(events) == expected and report.bad_rows == 0


# --- calls come as soon as they are complete ---------------------------------------------


def _many_calls(path: Path, calls_: int, chars: int) -> Path:
    r = fx._Rows()
    for turn in range(1, calls_ + 1):
        r.add("turn/start", {"turn": turn})
        text = (f"call {turn} thinks about step {turn} of the task. " * chars)[:chars]
        r.run("reasoning-chunks", turn, 1, 0, fx.split(text, 40))
        r.chunk(turn, 1, {"type": "finish", "reason": {"kind": "stop"}})
        r.add("assistant/message", {"turn": turn, "step": 1, "message": {}})
        r.add("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
    return fx.write_plain(path, (fx._header("big"), r.rows))


def test_first_call_comes_before_the_file_is_read(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    path = _many_calls(tmp_path / "session.jsonl", 40, 20_000)
    furthest = [0]

    class Spy(io.FileIO):
        def read(self, size: int = -1) -> bytes:  # type: ignore[override]
            data = super().read(size)
            furthest[0] = max(furthest[0], self.tell())
            return data

    monkeypatch.setattr(dsh, "_READ", 1 << 14)
    monkeypatch.setattr(dsh, "open", lambda p, mode="rb": Spy(p, "r"), raising=False)
    events = read_dsh(path)
    while not isinstance(next(events), RecordedCall):
        pass
    assert furthest[0] < path.stat().st_size // 10


def test_memory_is_bounded_by_one_call(tmp_path: Path) -> None:
    path = _many_calls(tmp_path / "session.jsonl", 120, 50_000)
    assert path.stat().st_size > 6_000_000
    tracemalloc.start()
    try:
        count = sum(isinstance(e, RecordedCall) for e in read_dsh(path))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 120
    assert peak < 3_000_000, peak


# --- unreadable paths --------------------------------------------------------------------


def _one_line_input_error(call: Callable[[], object]) -> str:
    with pytest.raises(InputError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message
    return message


def test_missing_file_directory_and_bad_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope\nsession.jsonl"
    assert _one_line_input_error(lambda: read_dsh(missing)).endswith(
        "no such file or directory")
    assert "is a directory" in _one_line_input_error(lambda: read_dsh(tmp_path))
    assert "not a usable path" in _one_line_input_error(lambda: read_dsh("a\0b"))
    assert _one_line_input_error(lambda: find_dsh_logs(missing)).endswith(
        "no such file or directory")


def test_permission_denied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = fx.write_plain(tmp_path / "session.jsonl", fx.synthetic_log())

    def refuse(*args: object, **kwargs: object) -> object:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(dsh, "open", refuse, raising=False)
    assert _one_line_input_error(lambda: read_dsh(path)) == f"{path}: permission denied"
    assert _one_line_input_error(lambda: find_dsh_logs(path)) == f"{path}: permission denied"


def test_compressed_log_without_zstandard_names_the_extra(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    compressed = fx.write_zstd(tmp_path / "session.jsonl.zstd", fx.synthetic_log())
    monkeypatch.setitem(sys.modules, "zstandard", None)
    message = _one_line_input_error(lambda: read_dsh(compressed))
    assert message.endswith("pip install zstandard")
    assert len(calls(read(fx.DATA / "synthetic.session.jsonl")[0])) == 3


# --- discovery ---------------------------------------------------------------------------


def _touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return path


def test_find_picks_the_newest_generation_of_each_log(tmp_path: Path) -> None:
    a = tmp_path / "proj-a" / "session-1"
    _touch(a / "session.jsonl.zstd")
    newest = _touch(a / "session.v3.jsonl.zstd")
    _touch(a / "session.v2.jsonl")
    _touch(a / "session.migration.x1.tmp")
    b = _touch(tmp_path / "proj-b" / "session-2" / "session.jsonl")
    c = _touch(tmp_path / "proj-b" / "session-3" / "sub" / "session-4" / "session.jsonl.zstd")
    _touch(tmp_path / "proj-b" / "session-3" / "session.jsonl")
    plain_and_zstd = _touch(tmp_path / "proj-b" / "session-3" / "session.jsonl.zstd")
    named = [_touch(tmp_path / "copies" / f"{n}.session.jsonl.zstd") for n in ("x", "y")]
    _touch(tmp_path / "copies" / "notes.jsonl")
    _touch(tmp_path / "copies" / "mysession.jsonl")
    assert find_dsh_logs(tmp_path) == sorted([newest, b, c, plain_and_zstd, *named])
    assert find_dsh_logs(tmp_path / "copies" / "notes.jsonl") == [
        tmp_path / "copies" / "notes.jsonl"]
    assert find_dsh_logs(str(tmp_path / "proj-b" / "session-2")) == [b]


def test_find_defaults_to_the_dsh_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = _touch(tmp_path / "home" / ".dsh" / "sessions" / "p" / "s" / "session.jsonl.zstd")
    monkeypatch.delenv("DSH_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert find_dsh_logs() == [log]
    other = _touch(tmp_path / "dshhome" / "sessions" / "p" / "s" / "session.v2.jsonl")
    monkeypatch.setenv("DSH_HOME", str(tmp_path / "dshhome"))
    assert find_dsh_logs() == [other]
    monkeypatch.setenv("DSH_HOME", str(tmp_path / "absent"))
    assert "absent" in _one_line_input_error(find_dsh_logs)

