"""``loopbreak analyze``: recorded sessions replayed through the same engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import loopbreak
from loopbreak._samples import clean_reasoning, phrase_pool, verbatim_loop
from loopbreak.cli import main
from loopbreak.offline.analyze import analyze_events, report_dict
from loopbreak.offline.transcripts import (
    Delta,
    ReadReport,
    RecordedCall,
    SessionStart,
    ToolResult,
    TurnEnd,
    TurnStart,
    read_path,
)
from support import load_fixture
from transcripts import dsh_fixtures


def _reasoning_call(turn: int, step: int, text: str, size: int = 20) -> RecordedCall:
    return RecordedCall(turn, step, tuple(Delta("reasoning", text[i : i + size])
                                          for i in range(0, len(text), size)), finish="stop")


def test_real_bleeds_in_a_session_log_are_cut_where_scan_cuts_them(
        corpus: Path, tmp_path: Path) -> None:
    bleeds = load_fixture(corpus, "fixtures-reasoning-lines.json")["bleeds"]
    for item in bleeds:
        text = item["head"]
        pieces = dsh_fixtures.split(text, 20)
        log = dsh_fixtures.reasoning_log(text, pieces, session=f"bleed-{item['seq']}")
        path = dsh_fixtures.write_zstd(tmp_path / f"bleed{item['seq']}.session.jsonl.zstd", log)
        (report,) = analyze_events(read_path(path), str(path))
        (call,) = report.calls
        trip = loopbreak.scan(pieces)
        assert trip is not None and call.cut is not None
        assert (call.cut.rule, call.cut.offset, call.cut.at) == (trip.rule, trip.offset, trip.at)
        assert call.saved_chars == len(text) - trip.at


def test_a_whole_message_in_one_piece_saves_from_where_the_rule_fired(tmp_path: Path) -> None:
    """A non-streamed log keeps a message as one piece: the cut is where the rule fired,
    not the end of the piece (which would save nothing)."""
    text = verbatim_loop().text[:7400]
    log = dsh_fixtures.reasoning_log(text, [text], session="whole")
    path = dsh_fixtures.write_zstd(tmp_path / "whole.session.jsonl.zstd", log)
    (report,) = analyze_events(read_path(path), str(path))
    (call,) = report.calls
    trip = loopbreak.scan(text, delta_chars=1)
    assert trip is not None and call.cut is not None and call.cut.at == trip.at
    assert call.cut.position == trip.at < 1500
    assert call.saved_chars == len(text) - trip.at > 5000


def _session_events() -> list[object]:
    failing = ToolResult(1, "c1", "read", '{"path": "missing.py"}',
                         "Error: no such file: missing.py", failed=True, error_code="ENOENT")
    return [
        SessionStart("s1", "test"), TurnStart(1),
        _reasoning_call(1, 1, verbatim_loop().text),
        failing, failing, failing, failing,
        _reasoning_call(1, 2, clean_reasoning().text),
        TurnEnd(1), TurnStart(2),
        _reasoning_call(2, 1, phrase_pool().text[:12000]),
        TurnEnd(2), ReadReport("x", rows=9),
    ]


def test_report_has_cuts_tool_actions_and_stalls() -> None:
    (report,) = analyze_events(_session_events(), "mem")  # type: ignore[arg-type]
    cuts = [(c.turn, c.step, c.cut.rule if c.cut else None) for c in report.calls]
    assert cuts == [(1, 1, "cycle"), (1, 2, None), (2, 1, "lines")]
    actions = [(a.action, a.failures) for a in report.tool_actions]
    # Guidance from the 2nd identical failure; denial once the key failed 3 times.
    assert actions == [("steer", 2), ("steer", 3), ("deny", 3), ("steer", 4)]
    assert report.calls[0].stall is not None and report.calls[0].stall["reason"] == \
        "reasoning-only"
    totals = report.totals()
    assert totals["cut_calls"] == 2 and totals["tool_denials"] == 1
    assert totals["saved_chars"] == sum(c.saved_chars for c in report.calls) > 10_000


def test_json_shape_is_stable() -> None:
    out = report_dict(list(analyze_events(_session_events(), "mem")))  # type: ignore[arg-type]
    assert set(out) == {"sessions", "summary"}
    (session,) = out["sessions"]
    assert {"path", "calls", "stalls", "tool_actions"} <= set(session)
    assert {"turn", "step", "channel", "rule", "offset", "chars", "saved_chars"} <= \
        set(session["calls"][0])
    assert out["summary"]["sessions"] == 1 and out["summary"]["cut_calls"] == 2
    json.dumps(out)


def test_cli_reads_real_logs_in_parallel_and_reports_unreadable_files(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "b").mkdir()
    logs = [dsh_fixtures.write_plain(tmp_path / "a.session.jsonl", dsh_fixtures.synthetic_log()),
            dsh_fixtures.write_zstd(tmp_path / "b" / "session.jsonl.zstd",
                                    dsh_fixtures.reasoning_log(verbatim_loop().text))]
    assert all(p.exists() for p in logs)
    assert main(["analyze", str(tmp_path), "--json", "--jobs", "2"]) == 0
    parallel = json.loads(capsys.readouterr().out)
    assert main(["analyze", str(tmp_path), "--json"]) == 0
    serial = json.loads(capsys.readouterr().out)
    assert parallel == serial and parallel["summary"]["sessions"] == 2
    assert parallel["summary"]["cut_calls"] == 1
    (tmp_path / "broken.session.jsonl.zstd").write_bytes(b"not zstd at all")
    bad = tmp_path / "binary.txt"
    bad.write_bytes(b"\xff\xfe\x00")
    code = main(["analyze", str(tmp_path), "--json"])
    captured = capsys.readouterr()
    assert code == 2
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "could not be read" in lines[0]
    assert json.loads(captured.out)["summary"]["sessions"] >= 2


def test_cli_missing_path_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", "/nonexistent/sessions"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "loopbreak: error: /nonexistent/sessions: no such file or directory"


def test_a_scan_file_with_a_long_first_line_is_read(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Its first row (100 kB of looping reasoning) once left the file read as nothing."""
    path = tmp_path / "streams.jsonl"
    loop = (verbatim_loop().text * 8)[:100_000]
    path.write_text(json.dumps({"id": "long", "text": loop}) + "\n"
                    + json.dumps({"id": "short", "text": clean_reasoning().text}) + "\n",
                    encoding="utf-8")
    assert main(["analyze", str(path), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)["summary"]
    assert summary["calls"] == 2 and summary["cut_calls"] == 1


@pytest.mark.parametrize(("head", "kind"), [
    (b'{"type": "session", "version": 3, "id": "', "dsh"),
    (b'{"id": "row-1", "channel": "reasoning", "text": "', "scan-jsonl"),
    (b'{"pieces": ["', "scan-jsonl"),
    (b'{"object": "chat.completion", "choices": [', "chat-log"),
])
def test_a_first_line_longer_than_any_read_is_judged_by_its_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, head: bytes, kind: str) -> None:
    import loopbreak.offline.transcripts as transcripts

    monkeypatch.setattr(transcripts, "_FIRST_LINE_LIMIT", 4096)
    path = tmp_path / "big.jsonl"
    path.write_bytes(head + b"x" * 10_000 + b'"}\n')
    assert transcripts.sniff(path) == kind


def test_the_table_says_why_rows_were_not_read(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "capture.jsonl"
    path.write_bytes(b"{oops\n{\"type\": \"mystery\"}\n{\"type\": \"mystery\"}\n")
    assert main(["analyze", str(path)]) == 0
    (line,) = [line for line in capsys.readouterr().out.splitlines()
               if line.startswith("not read:")]
    assert line.startswith("not read: capture.jsonl: 1 invalid row (first: line 1: invalid JSON")
    assert line.endswith("; 2 rows of unknown type 'mystery'")


def test_scan_and_analyze_read_a_scan_file_alike(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """One reader of the scan format for both commands: analyze once read its own way and
    judged a row scan refuses (pieces that are not strings, beside a text)."""
    loop = verbatim_loop().text
    rows = [{"id": "loop", "text": loop}, {"id": "bad-pieces", "pieces": [1, 2], "text": loop},
            {"id": "bad-channel", "channel": "tools", "text": loop}]
    path = tmp_path / "streams.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    main(["scan", str(path)])
    scanned = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert main(["analyze", str(path), "--json"]) == 0
    analyzed = json.loads(capsys.readouterr().out)
    judged = [row["id"] for row in scanned if "error" not in row]
    assert judged == ["loop"]
    assert analyzed["summary"]["calls"] == len(judged) and analyzed["summary"]["cut_calls"] == 1
    read = analyzed["sessions"][0]["read"]
    assert read["bad_rows"] == len(rows) - len(judged)
    assert read["first_error"] == "line 2: 'pieces' must be a list of strings"
    assert scanned[1]["error"].endswith(":2: 'pieces' must be a list of strings")


def test_recorded_agent_runs_report_the_rules_across_tool_calls(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Real stuck runs of the agent corpus, written as the request/response log a proxy or
    an SDK records: analyze names the rule that steered and denied each."""
    from loopbreak.offline.agent_corpus import load_trajectories
    from support import openai_history

    corpus = Path(__file__).resolve().parents[2] / "agent-corpus"
    runs = sorted(load_trajectories([corpus]), key=lambda t: t.id)
    wanted = {"no-progress", "alternation", "repeated-error"}
    picked = {}
    for run in runs:
        # A result reaches the log in the next request's history: the fourth round's result
        # must be followed by another request.
        later = [i for i, s in enumerate(run.steps) if s["role"] == "assistant"
                 and len(run.repeats) >= 4 and i > run.repeats[3]]
        if run.pattern in wanted and run.pattern not in picked and later:
            picked[run.pattern] = run
    assert set(picked) == wanted
    for pattern, run in picked.items():
        lines = []
        for i, step in enumerate(run.steps):
            if step["role"] != "assistant":
                continue
            message = openai_history(run, i + 1)[-1]
            lines.append({"request": {"model": "m", "messages": openai_history(run, i)},
                          "response": {"id": f"r{i}", "object": "chat.completion",
                                       "choices": [{"index": 0, "message": message,
                                                    "finish_reason": "tool_calls"
                                                    if message.get("tool_calls") else "stop"}]}})
        (tmp_path / f"{pattern}.jsonl").write_text(
            "".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    assert main(["analyze", "--json", str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out)
    rules = {Path(s["path"]).stem: {(a["rule"], a["action"]) for a in s["tool_actions"]}
             for s in out["sessions"]}
    known = {"tool-failure", "no-progress", "alternation", "repeated-error"}
    for pattern in wanted:  # each stuck run is denied, by whichever rule saw it first
        assert any(action == "deny" for _, action in rules[pattern]), (pattern, rules[pattern])
        assert {rule for rule, _ in rules[pattern]} <= known
    assert ("repeated-error", "deny") in rules["repeated-error"]
    assert out["summary"]["tool_denials"] >= 3


def test_a_recorded_monologue_is_reported() -> None:
    same = "I have checked the configuration and everything looks correct to me."
    events = [SessionStart("mem", "test"), TurnStart(1),
              *[RecordedCall(1, step, (Delta("text", same),), finish="stop")
                for step in (1, 2, 3)]]
    (report,) = analyze_events(events, "mem")  # type: ignore[arg-type]
    fires = [(s.rule, s.reaction) for s in report.stalls]
    assert fires == [("monologue", "steer"), ("monologue", "cancel")]
    assert report.totals()["monologue_fires"] == 2
