"""Session logs the real DeepSeek Harness CLI (dsh 0.1.0-rc.8) wrote against loopbreak's
scripted upstream, read back: the reader, the analyzer and ``loopbreak analyze``'s bundled
demo on real bytes, not hand-made rows.

The logs were recorded by ``scripts/record_dsh_sessions.py`` (how: the README beside them)
and are committed, so these tests need no dsh. What each log must hold is taken from the
recorder's own scripts, so re-recording keeps them true.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import loopbreak
from loopbreak.cli import main
from loopbreak.cli.analyze import demo_log
from loopbreak.offline.analyze import SessionReport, analyze_events
from loopbreak.offline.transcripts import (
    Event,
    ReadReport,
    RecordedCall,
    SessionStart,
    ToolResult,
    TurnEnd,
    TurnStart,
)
from loopbreak.offline.transcripts.dsh import read_dsh
from loopbreak.testing import split_chars
from transcripts import dsh_fixtures as fx

REPO = Path(__file__).resolve().parents[2]
RECORDED = Path(__file__).resolve().parent / "data" / "recorded"


def _load_recorder() -> ModuleType:
    path = REPO / "scripts" / "record_dsh_sessions.py"
    spec = importlib.util.spec_from_file_location("record_dsh_sessions", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Dataclasses look their module up while the class is built.
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


rec = _load_recorder()

LOGS = {
    "loop": RECORDED / "loop.session.jsonl.zstd",
    "failing-tools": RECORDED / "failing-tools.session.jsonl.zstd",
    "retried": RECORDED / "retried.session.jsonl.zstd",
    "two-turns": RECORDED / "two-turns.session.jsonl.zstd",
    "demo": demo_log(),
}


def read(name: str) -> tuple[list[Event], ReadReport]:
    events = list(read_dsh(LOGS[name]))
    assert isinstance(events[0], SessionStart) and isinstance(events[-1], ReadReport)
    return events, events[-1]


def calls_of(events: list[Event]) -> list[RecordedCall]:
    return [e for e in events if isinstance(e, RecordedCall)]


def rows_of(name: str) -> list[dict[str, Any]]:
    """The raw rows (header excluded), read without the reader under test."""
    rows: list[dict[str, Any]] = fx.load(LOGS[name])[1]
    return rows


def analyze(name: str) -> SessionReport:
    (report,) = analyze_events(read_dsh(LOGS[name]), str(LOGS[name]))
    return report


# --- every log ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(LOGS))
def test_every_recorded_log_reads_whole(name: str) -> None:
    events, report = read(name)
    start = events[0]
    assert isinstance(start, SessionStart)
    assert start.version == 0 and start.session.startswith("session-")
    assert report.bad_rows == 0, report.first_error
    assert not report.unknown_rows and not report.warnings
    assert not report.torn and report.lost_bytes == 0
    assert report.rows == len(rows_of(name)) + 1
    # dsh wrote it: the request header it logs names dsh's own client and model.
    header = next(r for r in rows_of(name) if r["type"] == "request/header")
    assert header["data"]["header"]["config"]["model"] == "deepseek-v4-flash"
    # Every turn dsh started, it ended, and it completed.
    starts = [e.turn for e in events if isinstance(e, TurnStart)]
    ends = [(e.turn, e.reason) for e in events if isinstance(e, TurnEnd)]
    assert ends == [(turn, "completed") for turn in starts]


@pytest.mark.parametrize("name", [n for n in LOGS if n != "demo"])
def test_test_logs_are_small_and_compressed(name: str) -> None:
    data = LOGS[name].read_bytes()
    assert len(data) < 64_000
    assert data[:4] == b"\x28\xb5\x2f\xfd"  # a zstd frame, as dsh writes by default
    if name == "loop":
        # Runs of deltas are packed into one row each; short replies stay chunk rows.
        kinds = {r["type"] for r in rows_of(name)}
        assert {"reasoning-chunks", "text-chunks"} <= kinds


def test_demo_is_small_plain_and_unpacked() -> None:
    data = demo_log().read_bytes()
    assert len(data) < 200_000
    assert data.startswith(b'{"type":"session","version":0,')
    kinds = {r["type"] for r in rows_of("demo")}
    assert "assistant/chunk" in kinds
    assert not kinds & {"reasoning-chunks", "text-chunks", "tool-call-chunks"}


# --- loop -----------------------------------------------------------------------------------


def test_loop_call_streams_what_the_script_sent() -> None:
    events, _ = read("loop")
    (call,) = calls_of(events)
    (script,) = rec.loop_scripts()
    assert (call.turn, call.step, call.kind, call.finish) == (1, 1, "message", "stop")
    assert call.joined("reasoning") == script.reasoning == rec.loop_reasoning()
    assert call.joined("text") == rec.LOOP_ANSWER
    # dsh keeps every streamed delta as it came: one row piece per wire delta.
    reasoning = [d.text for d in call.deltas if d.channel == "reasoning"]
    assert reasoning == split_chars(script.reasoning, rec.LOOP_PIECE_CHARS)
    assert call.usage["outputTokens"] == script.usage.output_tokens


@pytest.mark.parametrize("name", ["loop", "demo"])
def test_analyzer_cuts_the_looping_call_where_scan_cuts_its_deltas(name: str) -> None:
    events, _ = read(name)
    report = analyze(name)
    looping = [(c, r) for c, r in zip(calls_of(events), report.calls, strict=True)
               if c.chars("reasoning") > 1000]
    ((call, result),) = looping
    trip = loopbreak.scan([d.text for d in call.deltas if d.channel == "reasoning"])
    assert trip is not None and result.cut is not None
    assert (result.cut.rule, result.cut.channel, result.cut.offset, result.cut.at) == (
        trip.rule, "reasoning", trip.offset, trip.at)
    assert 0 < result.cut.offset < call.chars("reasoning")
    # Saved from where the rule fired (the reasoning comes first in the call).
    assert result.saved_chars == call.chars("reasoning") + call.chars("text") - result.cut.at
    # The other calls of the session are left alone.
    assert [r for r in report.calls if r.cut is not None] == [result]


# --- failing tools --------------------------------------------------------------------------


def test_failing_tools_are_real_failed_results() -> None:
    events, _ = read("failing-tools")
    calls = calls_of(events)
    assert [(c.step, c.finish) for c in calls] == [
        (1, "tool-calls"), (2, "tool-calls"), (3, "tool-calls"), (4, "tool-calls"), (5, "stop")]
    assert [c.joined("reasoning") for c in calls[:4]] == list(rec.FAILING_THOUGHTS)
    assert calls[-1].joined("text") == rec.FAILING_ANSWER
    results = [e for e in events if isinstance(e, ToolResult)]
    assert len(results) == 4
    for call, result in zip(calls, results):
        (tool,) = call.tool_calls
        assert (tool.name, json.loads(tool.arguments)) == ("read", {"file_path": rec.MISSING_FILE})
        assert result.key == tool.key and result.name == "read"
        assert result.arguments == tool.arguments
        # dsh ran the read for real: the file is missing from its workspace.
        assert result.failed and result.error_code == "FS_NOT_FOUND"
        assert result.error_name == "FsError"
        assert result.text.startswith('Error: cannot read "/')
        assert result.text.endswith(f'/workspace/{rec.MISSING_FILE}": not found')
    # Each result follows its call: call, result, call, result...
    order = [type(e).__name__ for e in events if isinstance(e, (RecordedCall, ToolResult))]
    assert order == ["RecordedCall", "ToolResult"] * 4 + ["RecordedCall"]


def test_failing_tools_steer_from_the_second_failure_and_deny_after_the_third() -> None:
    report = analyze("failing-tools")
    actions = [(a.step, a.tool, a.action, a.failures) for a in report.tool_actions]
    assert actions == [
        (2, "read", "steer", 2),
        (3, "read", "steer", 3),
        (4, "read", "deny", 3),  # the 4th identical call, before it runs
        (4, "read", "steer", 4),
    ]


def test_dsh_reminds_on_its_own_after_the_third_identical_call() -> None:
    """dsh's repeat-tool-reminder (no loopbreak involved) splices a notice into the next
    step once the same call was made three times; the reader skips it as a user message."""
    rows = rows_of("failing-tools")
    notices = [r for r in rows if r["type"] == "user/message"
               and r["data"]["source"].get("plugin") == "repeat-tool-reminder"]
    (notice,) = notices
    assert notice["data"]["source"]["summary"] == "read × 3"
    assert "repeating the exact same tool call" in notice["data"]["content"][0]["text"]
    results = [r["seq"] for r in rows if r["type"] == "tool/result"]
    assert results[2] < notice["seq"] < results[3]


# --- retried --------------------------------------------------------------------------------


def test_retried_request_is_two_failed_attempts_and_a_message() -> None:
    """What dsh records when it retries (format v0): no ``assistant/attempt`` row; each
    failed response ends with an ``assistant/chunk`` ``finish`` of kind ``error`` (carrying
    the failure: ``SERVER`` with the status for the HTTP 500, ``TRANSPORT`` for the dropped
    stream), followed by ``llm/retry`` (retry n of maxRetries, the delay, the failure) and
    ``llm/retry-started``; the next response's chunks follow at the same turn and step, and
    only the last one is settled by ``assistant/message``. The reader yields each failed
    response as an attempt with finish ``error``: the 500 with no deltas, the dropped stream
    with the three reasoning deltas that arrived before the drop."""
    events, _ = read("retried")
    calls = calls_of(events)
    assert [(c.turn, c.step, c.kind, c.finish) for c in calls] == [
        (1, 1, "attempt", "error"), (1, 1, "attempt", "error"), (1, 1, "message", "stop")]
    refused, dropped, settled = calls
    assert refused.deltas == () and refused.usage == {}
    sent = split_chars(rec.RETRY_REASONING, 8)[: rec.RETRY_BROKEN_AFTER - 1]
    assert [d.text for d in dropped.deltas] == sent
    assert {d.channel for d in dropped.deltas} == {"reasoning"}
    assert settled.joined("reasoning") == rec.RETRY_REASONING
    assert settled.joined("text") == rec.RETRY_ANSWER
    # The analyzer skips the request that streamed nothing: two model calls, none cut.
    assert [(c.kind, c.cut) for c in analyze("retried").calls] == [("attempt", None),
                                                                    ("message", None)]

    rows = rows_of("retried")
    finishes = [r["data"]["chunk"]["reason"] for r in rows if r["type"] == "assistant/chunk"
                and r["data"]["chunk"]["type"] == "finish"]
    assert [f["kind"] for f in finishes] == ["error", "error", "stop"]
    assert (finishes[0]["failure"]["code"], finishes[0]["failure"]["status"]) == ("SERVER", 500)
    assert finishes[1]["failure"]["code"] == "TRANSPORT"
    retries = [r["data"] for r in rows if r["type"] == "llm/retry"]
    assert [(d["retry"], d["maxRetries"], d["failure"]["code"]) for d in retries] == [
        (1, 2, "SERVER"), (2, 2, "TRANSPORT")]
    started = [r["data"]["retry"] for r in rows if r["type"] == "llm/retry-started"]
    assert started == [1, 2]
    assert not any(r["type"] == "assistant/attempt" for r in rows)
    assert sum(r["type"] == "assistant/message" for r in rows) == 1


# --- two turns ------------------------------------------------------------------------------


def test_two_prompts_make_two_turns_of_one_session() -> None:
    events, _ = read("two-turns")
    assert sum(isinstance(e, SessionStart) for e in events) == 1
    turns = [e for e in events if isinstance(e, (TurnStart, TurnEnd))]
    assert turns == [TurnStart(1), TurnEnd(1, "completed"), TurnStart(2), TurnEnd(2, "completed")]
    calls = calls_of(events)
    assert [(c.turn, c.step, c.kind, c.finish) for c in calls] == [
        (1, 1, "message", "stop"), (2, 1, "message", "stop")]
    scripts = rec.two_turn_scripts()
    assert [c.joined("text") for c in calls] == [s.text for s in scripts]
    prompts = [r["data"]["content"][0]["text"] for r in rows_of("two-turns")
               if r["type"] == "user/message" and r["data"]["source"]["kind"] == "user"]
    assert tuple(prompts) == rec.TWO_TURN_PROMPTS


# --- the bundled demo -----------------------------------------------------------------------


def test_demo_shows_each_thing_the_tool_does() -> None:
    events, _ = read("demo")
    calls = calls_of(events)
    assert len({c.turn for c in calls}) == 2
    results = [e for e in events if isinstance(e, ToolResult)]
    assert [r.failed for r in results] == [False, True, True, True, True]
    assert "return a - b" in results[0].text  # the productive read
    assert calls[-1].joined("text") == rec.FAILING_ANSWER


def test_analyze_without_a_path_reads_the_bundled_demo(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.dsh/sessions there
    monkeypatch.delenv("DSH_HOME", raising=False)
    assert main(["analyze", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["errors"] == []
    (session,) = out["sessions"]
    assert Path(session["path"]).name == "demo.session.jsonl"
    assert session["read"]["bad_rows"] == 0
    summary = out["summary"]
    assert summary["cut_calls"] >= 1
    assert summary["tool_steers"] + summary["tool_denials"] >= 1
    assert summary["tool_denials"] >= 1
