"""``loopbreak bench --proxy``: the arithmetic on made-up streams, the script the upstream
serves, the options, and one quick run end to end. No test times anything: the quick run
is checked for completeness (every stream held, every chunk there, in order), never for
how fast it was."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterator
from dataclasses import replace

import httpx
import pytest

from loopbreak._config import Config
from loopbreak._engine.call_guard import CallGuard
from loopbreak._engine.trip import Channel
from loopbreak._errors import InputError
from loopbreak.bench.proxy import (
    CPU,
    MARK,
    PLACEHOLDER,
    QUICK,
    REPORT_KEYS,
    STAMP_FIELD,
    TARGET_P99_ADDED_NS,
    TARGET_STREAMS,
    Latency,
    Memory,
    ProxyBenchReport,
    ProxyBenchSettings,
    ProxyTargets,
    StreamResult,
    added_latency,
    check_sequence,
    clean_text,
    proxy_report_dict,
    quantile,
    scan_events,
    stamp_text,
    stream_script,
    summarise,
)
from loopbreak.bench.throughput import MachineWatch
from loopbreak.cli import main
from loopbreak.cli.bench import PROXY_HELP_DEFAULTS, render_proxy
from loopbreak.testing import ScriptedUpstream

MS = 1_000_000

# --- order and loss -----------------------------------------------------------------


def test_an_intact_stream() -> None:
    result = check_sequence([0, 1, 2, 3], 4)
    assert (result.received, result.lost, result.reordered, result.duplicated) == (4, 0, 0, 0)
    assert result.intact


def test_lost_reordered_and_duplicated_chunks_are_counted() -> None:
    assert check_sequence([0, 2, 3], 4).lost == 1
    assert check_sequence([0, 2, 1, 3], 4).reordered == 1
    assert check_sequence([0, 1, 1, 2, 3], 4).duplicated == 1
    assert check_sequence([], 3).lost == 3
    assert not check_sequence([1, 0], 2).intact


def test_integrity_adds_up_across_streams() -> None:
    total = check_sequence([0, 1], 2) + check_sequence([1], 2)
    assert (total.expected, total.received, total.lost) == (4, 3, 1)


# --- latency arithmetic -------------------------------------------------------------


def test_quantile_is_nearest_rank() -> None:
    values = list(range(1, 101))
    assert quantile(values, 0.5) == 50
    assert quantile(values, 0.99) == 99
    assert quantile(values, 1.0) == 100
    assert quantile([7], 0.0) == 7
    with pytest.raises(ValueError):
        quantile([], 0.5)
    with pytest.raises(ValueError):
        quantile([1], 1.5)


def test_latency_summary_and_added_latency() -> None:
    direct = Latency.of([100, 200, 300, 400])
    proxied = Latency.of([400, 600, 900, 1000])
    assert (direct.count, direct.p50, direct.max, direct.mean) == (4, 200, 400, 250)
    added = added_latency(direct, proxied)
    assert (added.p50, added.p99, added.max) == (400, 600, 600)
    assert Latency.of([]).count == 0


def test_scan_events_reads_sequence_and_stamp_with_the_given_receive_time() -> None:
    first = stamp_text(7, stamp="1" * 19)
    second = stamp_text(8, stamp="1" * 18 + "5")
    data = (f'data: {{"choices":[{{"delta":{{"reasoning_content":"def f():"}}}}],'
            f'"{STAMP_FIELD}":"{first}"}}\n\n'
            f'data: {{"choices":[{{"delta":{{"content":"pass"}}}}],"{STAMP_FIELD}":"{second}"}}\n\n'
            "data: [DONE]\n\n").encode()
    now = int("1" * 19) + 1000
    seqs, latencies, done = scan_events(data, now)
    assert seqs == [7, 8]
    assert latencies == [1000, 996]
    assert done


def fake_stream(seqs: list[int], latency: int, start: int) -> StreamResult:
    return StreamResult(200, tuple(seqs), tuple(latency for _ in seqs),
                        tuple(start + i * 10 for i in range(len(seqs))), True)


def test_summarise_counts_streams_chunks_and_the_all_open_window() -> None:
    results = [fake_stream([0, 1, 2], 1 * MS, 0), fake_stream([0, 2, 1], 2 * MS, 0),
               StreamResult(502, (), (), (), False, "HTTP 502")]
    phase = summarise("p", results, 3, held_peak=2, wall_seconds=2.0,
                      cpu={"proxy": CPU(0.5, 2.0)}, steady=(5, 15))
    assert (phase.streams, phase.completed, phase.failed) == (3, 2, 1)
    assert (phase.integrity.expected, phase.integrity.received) == (9, 6)
    assert (phase.integrity.lost, phase.integrity.reordered) == (3, 1)
    assert phase.latency.count == 6
    assert phase.steady.count == 2  # the chunks received at 10 in each good stream
    assert phase.errors == ("1 × HTTP 502",)
    assert phase.cpu["proxy"].cores == 0.25
    assert phase.cpu_per_chunk("proxy") == pytest.approx(0.5 / 6 * 1e6)
    assert phase.chunks_per_s == 3.0


def test_memory_per_stream_is_growth_over_streams() -> None:
    assert Memory(100, 1100, 900, 10).per_stream == 100


def test_targets_need_the_scale_the_latency_and_every_chunk() -> None:
    good = ProxyTargets(TARGET_STREAMS, TARGET_STREAMS, TARGET_P99_ADDED_NS - 1, 0, 0)
    assert good.all_met
    assert not replace(good, streams=100, streams_held=100).streams_met
    assert not replace(good, p99_added_ns=TARGET_P99_ADDED_NS).latency_met
    assert not replace(good, lost=1).intact
    assert not replace(good, reordered=1).all_met


# --- settings and the script ----------------------------------------------------------


def test_settings_are_checked() -> None:
    for bad in ({"streams": 0}, {"chunks": 0}, {"chunks_per_s": 0.0}, {"ramp_seconds": -1.0},
                {"proxy_loop": "tokio"}, {"chunks": 1_000_000}, {"workers": 0}):
        with pytest.raises(InputError):
            ProxyBenchSettings(**bad)
    assert ProxyBenchSettings().streams == TARGET_STREAMS
    assert QUICK.stream_seconds > QUICK.ramp_seconds


def test_help_shows_the_real_defaults() -> None:
    default = ProxyBenchSettings()
    for name, (shown, quick) in PROXY_HELP_DEFAULTS.items():
        assert getattr(default, name) == shown, name
        assert getattr(QUICK, name) == quick, name


def test_the_script_stamps_each_chunk_beside_its_clean_delta() -> None:
    settings = replace(QUICK, chunks=6, piece_chars=8)
    text = "abcdefgh" * 6
    script = stream_script(settings, text)
    assert [type(e).__name__ for e in script.events] == ["Reasoning"] * 3 + ["Text"] * 3
    # The delta is the clean text alone: the guard never judges the stamp.
    assert "".join(event.text for event in script.events) == text
    assert [event.fields for event in script.events] == [
        ((STAMP_FIELD, f"{i:06d}:{PLACEHOLDER}|"),) for i in range(6)]
    assert script.delivery.delay == pytest.approx(1 / settings.chunks_per_s)
    stamped = f'"{stamp_text(3, stamp="1" * 19)}'.encode()
    assert MARK.search(stamped) is not None


def test_the_upstream_sends_each_stamp_in_its_chunk_and_the_client_reads_it() -> None:
    # The real scripted upstream, a real client: every content chunk arrives with its
    # stamp in its own field, and the deltas put together are the clean text.
    settings = replace(QUICK, chunks=6, piece_chars=8, chunks_per_s=1000.0)
    text = "abcdefgh" * 6
    with ScriptedUpstream(default=stream_script(settings, text)) as upstream:
        response = httpx.post(upstream.url + "/v1/chat/completions",
                              json={"model": "m", "messages": [], "stream": True}, timeout=30)
    data = response.content.replace(PLACEHOLDER.encode(), b"1" * 19)
    seqs, _, done = scan_events(data, int("1" * 19))
    assert seqs == list(range(6)) and done
    chunks = [json.loads(line[6:]) for line in data.decode().split("\n")
              if line.startswith("data: {")]
    deltas = [c["choices"][0]["delta"] for c in chunks]
    said = "".join(d.get("reasoning_content") or d.get("content") or "" for d in deltas)
    assert said == text
    assert [c[STAMP_FIELD] for c in chunks if STAMP_FIELD in c] == [
        f"{i:06d}:{'1' * 19}|" for i in range(6)]


def test_the_default_stream_is_clean_to_the_guard() -> None:
    """Every chunk must reach the client: the guard may not cut the bench's text."""
    settings = ProxyBenchSettings()
    text = clean_text(settings.chunks * settings.piece_chars)
    guard = CallGuard(Config())
    for event in stream_script(settings, text).events:
        channel: Channel = "reasoning" if type(event).__name__ == "Reasoning" else "text"
        assert guard.feed(channel, event.text) is None


# --- the options -----------------------------------------------------------------------


def test_proxy_options_need_proxy(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--streams", "5"]) == 2
    assert "--streams only apply with --proxy" in capsys.readouterr().err


def test_bad_proxy_options_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--proxy", "--quick", "--streams", "0"]) == 2
    assert "streams must be >= 1" in capsys.readouterr().err


# --- rendering, on a made-up report -------------------------------------------------------


def made_up_report() -> ProxyBenchReport:
    streams = [fake_stream([0, 1, 2], MS // 10, 0) for _ in range(4)]
    slower = [fake_stream([0, 1, 2], MS // 2, 0) for _ in range(4)]
    middling = [fake_stream([0, 1, 2], MS // 5, 0) for _ in range(4)]
    cpu = {"client": CPU(0.1, 1.0), "upstream": CPU(0.1, 1.0), "proxy": CPU(0.2, 1.0),
           "machine": CPU(0.6, 1.0)}
    settings = replace(QUICK, streams=4, chunks=3)
    direct = summarise("direct", streams, 3, held_peak=4, wall_seconds=1.0, cpu=cpu,
                       steady=(0, 20))
    proxied = summarise("proxy", slower, 3, held_peak=4, wall_seconds=1.0, cpu=cpu,
                        steady=(0, 20), proxy_streams_peak=4,
                        memory=Memory(40 << 20, 41 << 20, 41 << 20, 4))
    relay = summarise("relay", middling, 3, held_peak=4, wall_seconds=1.0, cpu=cpu,
                      steady=(0, 20))
    return ProxyBenchReport(settings, True, MachineWatch().machine(), "asyncio", direct, proxied,
                            relay)


def test_report_dict_and_tables_of_a_made_up_report(
        capsys: pytest.CaptureFixture[str]) -> None:
    report = made_up_report()
    data = proxy_report_dict(report)
    assert set(REPORT_KEYS) <= set(data)
    assert data["added_latency_ms"] == {"p50": 0.4, "p99": 0.4, "max": 0.4}
    assert data["relay_added_latency_ms"] == {"p50": 0.1, "p99": 0.1, "max": 0.1}
    assert data["relay"]["streams"] == 4
    assert data["streams_held"] == 4
    assert data["memory"]["per_stream_bytes"] == (1 << 20) // 4
    assert data["proxy"]["other_cores"] == pytest.approx(0.2)
    render_proxy(report)
    out = " ".join(capsys.readouterr().out.split())
    for text in ("Latency per chunk", "added by the relay", "added by the proxy",
                 "Streams and chunks", "CPU", "Proxy memory", "256.0 KiB per stream",
                 "not run", "no chunk lost or reordered", "the bare relay alone: +0.100 ms"):
        assert text in out, text


def test_one_run_gives_the_latency_no_verdict_and_calls_a_negative_figure_noise(
        capsys: pytest.CaptureFixture[str]) -> None:
    report = made_up_report()
    render_proxy(report)
    out = " ".join(capsys.readouterr().out.split())
    assert "– no verdict (--quick, 1 run) added p99 per chunk" in out
    assert "✓ met no chunk lost or reordered" in out  # counted, not timed
    # The proxy faster than direct: noise, never "met".
    faster = replace(report, direct=report.proxied, proxied=report.direct, quick=False)
    render_proxy(faster)
    out = " ".join(capsys.readouterr().out.split())
    assert "– no verdict (1 run; within noise: below zero) added p99 per chunk < 1 ms: " \
           "-0.400 ms" in out
    data = proxy_report_dict(faster)
    assert data["targets"]["latency_met"]  # the measurement's own flag is unchanged
    from loopbreak.cli.bench import proxy_verdicts

    assert proxy_verdicts(faster)["latency"].as_json() == {
        "verdict": "no verdict", "why": "1 run; within noise: below zero"}


def test_without_the_relay_the_report_says_none(capsys: pytest.CaptureFixture[str]) -> None:
    report = replace(made_up_report(), relay=None)
    data = proxy_report_dict(report)
    assert data["relay"] is None and data["relay_added_latency_ms"] is None
    render_proxy(report)
    out = " ".join(capsys.readouterr().out.split())
    assert "added by the proxy" in out and "added by the relay" not in out


def test_no_peers_skips_the_relay() -> None:
    from loopbreak.cli import build_parser
    from loopbreak.cli.bench import proxy_settings_from

    parser = build_parser()
    assert proxy_settings_from(parser.parse_args(["bench", "--proxy"])).relay is True
    assert proxy_settings_from(parser.parse_args(["bench", "--proxy", "--no-peers"])).relay \
        is False


# --- one quick run, end to end ------------------------------------------------------------


@pytest.fixture(scope="module")
def quick_run() -> Iterator[dict[str, object]]:
    pytest.importorskip("aiohttp")
    pytest.importorskip("uvicorn")
    capture = pytest.MonkeyPatch()
    out = io.StringIO()
    capture.setattr(sys, "stdout", out)
    try:
        code = main(["bench", "--proxy", "--quick", "--json"])
    finally:
        capture.undo()
    assert code == 0
    yield json.loads(out.getvalue())


def test_quick_run_returns_the_documented_keys(quick_run: dict[str, object]) -> None:
    assert set(REPORT_KEYS) <= set(quick_run)
    assert quick_run["quick"] is True
    for phase in ("direct", "relay", "proxy"):
        data = quick_run[phase]
        assert isinstance(data, dict)
        for key in ("streams", "completed", "held_peak", "chunks", "latency_ms",
                    "steady_latency_ms", "cpu", "wall_seconds", "chunks_per_s"):
            assert key in data, (phase, key)
    added = quick_run["added_latency_ms"]
    assert isinstance(added, dict) and set(added) == {"p50", "p99", "max"}
    targets = quick_run["targets"]
    assert isinstance(targets, dict) and targets["at_target_scale"] is False


def test_quick_run_loses_and_reorders_nothing(quick_run: dict[str, object]) -> None:
    chunks = quick_run["chunks"]
    assert isinstance(chunks, dict)
    assert chunks["expected"] == QUICK.streams * QUICK.chunks
    assert chunks["received"] == chunks["expected"]
    assert (chunks["lost"], chunks["reordered"], chunks["duplicated"]) == (0, 0, 0)
    for phase in ("direct", "relay", "proxy"):
        data = quick_run[phase]
        assert isinstance(data, dict)
        assert data["completed"] == QUICK.streams, data["errors"]
        assert data["chunks"]["lost"] == 0 and data["chunks"]["reordered"] == 0


def test_quick_run_holds_every_stream_at_once(quick_run: dict[str, object]) -> None:
    assert quick_run["streams_held"] == QUICK.streams
    proxy = quick_run["proxy"]
    assert isinstance(proxy, dict)
    assert proxy["held_peak"] == QUICK.streams
    assert proxy["proxy_streams_peak"] == QUICK.streams


def test_a_quick_run_with_two_workers_sums_their_cpu_and_loses_nothing(
        capsys: pytest.CaptureFixture[str]) -> None:
    # `loopbreak proxy --workers 2` as the bench serves it: uvicorn's supervisor and two
    # worker processes on one port; their CPU is summed (the supervisor alone spends
    # almost none), every stream ends and every chunk arrives in order.
    pytest.importorskip("aiohttp")
    pytest.importorskip("uvicorn")
    code = main(["bench", "--proxy", "--quick", "--json", "--workers", "2"])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["settings"]["workers"] == 2
    assert "2 worker processes" in data["settings"]["processes"]
    chunks = data["chunks"]
    assert chunks["received"] == chunks["expected"] == QUICK.streams * QUICK.chunks
    assert (chunks["lost"], chunks["reordered"], chunks["duplicated"]) == (0, 0, 0)
    for phase in ("relay", "proxy"):
        assert data[phase]["completed"] == QUICK.streams
    assert data["streams_held"] == QUICK.streams


def test_process_tree_holds_a_child() -> None:
    import subprocess

    from loopbreak.bench.proxy import _parents, cpu_seconds, process_tree, rss_bytes

    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    try:
        import os

        assert child.pid in process_tree(os.getpid())
        # the scan used where a kernel has no children files finds it too
        assert child.pid in _parents()[os.getpid()]
        mine = rss_bytes(os.getpid())
        assert mine is not None and mine > (rss_bytes(child.pid) or 0)
        assert (cpu_seconds(os.getpid()) or 0) >= (cpu_seconds(child.pid) or 0)
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait()
