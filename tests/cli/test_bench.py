"""``loopbreak bench``: the arithmetic under a fake clock, loops judged until they stop,
peers found or reported missing, and the command end to end. No test times anything:
every number checked here comes from an injected clock or is only checked for sign."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import platform
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopbreak import scan
from loopbreak._errors import InputError
from loopbreak.bench.throughput import (
    QUICK,
    TOKEN_CHARS,
    BenchSettings,
    Factory,
    Feeder,
    Machine,
    PerDelta,
    Subject,
    Targets,
    Throughput,
    bench_config,
    cpu_model,
    cpu_times,
    cut,
    load_degen_guard,
    load_dgxarley,
    loop_inputs,
    loopbreak_subject,
    measure_per_delta,
    measure_subject,
    measure_subjects,
    measure_throughput,
    measure_throughputs,
    plan_stream,
    ratios,
    stdlib_text,
    steal_between,
    throughput_ratio,
    token_deltas,
)
from loopbreak.cli import main


class FakeClock:
    """A clock that only moves when a fake guard does work."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def fake_guard(clock: FakeClock, cost: Callable[[int], int],
               stop_after: int | None = None) -> Factory:
    """A guard whose delta at stream position ``at`` costs ``cost(at)`` ns on ``clock``,
    and that stops the stream once it has judged ``stop_after`` characters."""

    def make() -> Feeder:
        seen = 0

        def feed(delta: str) -> bool:
            nonlocal seen
            if not delta:  # the end of a stream: nothing waits in this guard
                return False
            clock.now += cost(seen)
            seen += len(delta)
            return stop_after is not None and seen >= stop_after

        return feed

    return make


def flat(ns: int) -> Callable[[int], int]:
    return lambda at: ns


SMALL = BenchSettings(delta_chars=32, clean_chars=320, near_chars=64, far_chars=640,
                      window_deltas=2, windows=3, min_seconds=1e-9, max_passes=1,
                      stream_seconds=10.0)


# --- throughput arithmetic -------------------------------------------------------


def test_throughput_is_chars_judged_over_clock_time() -> None:
    clock = FakeClock()
    deltas = ["x" * 32] * 10
    result = measure_throughput(fake_guard(clock, flat(400)), [deltas], go_on=True,
                                min_seconds=1e-6, max_passes=10, clock=clock)
    # 320 chars in 10 x 400 ns: 80 million chars/s, one pass (4,000 ns >= 1,000 ns).
    assert result.chars_per_pass == 320
    assert result.pass_ns == (4_000,)
    assert result.chars_per_s == pytest.approx(80_000_000)


def test_throughput_repeats_passes_until_min_seconds_or_max_passes() -> None:
    clock = FakeClock()
    deltas = ["x" * 32] * 10
    make = fake_guard(clock, flat(400))
    three = measure_throughput(make, [deltas], go_on=True, min_seconds=1e-5, max_passes=10,
                               clock=clock)
    assert three.passes == 3  # 4,000 + 4,000 + 4,000 >= 10,000 ns
    two = measure_throughput(make, [deltas], go_on=True, min_seconds=1.0, max_passes=2,
                             clock=clock)
    assert two.passes == 2
    # At least min_passes however soon min_seconds is spent, never past max_passes.
    four = measure_throughput(make, [deltas], go_on=True, min_seconds=1e-9, min_passes=4,
                              max_passes=10, clock=clock)
    assert four.passes == 4
    capped = measure_throughput(make, [deltas], go_on=True, min_seconds=1e-9, min_passes=4,
                                max_passes=2, clock=clock)
    assert capped.passes == 2



def _slowing_guard(clock: FakeClock, ns: int, order: list[int]) -> Factory:
    """A guard costing ``ns`` a delta on a machine that halves its speed at 12,000 ns."""
    def make() -> Feeder:
        order.append(ns)

        def feed(delta: str) -> bool:
            clock.now += (ns if clock.now < 12_000 else 2 * ns) if delta else 0
            return False

        return feed

    return make


def test_subjects_judge_their_passes_in_rounds() -> None:
    # Each subject a pass in turn: both meet the machine before and after it slows alike,
    # and their ratio holds (1,000 and 3,000 ns a pass, then 2,000 and 6,000).
    clock, order = FakeClock(), []
    deltas = ["x" * 10] * 10
    ours, peer = measure_throughputs(
        [_slowing_guard(clock, 100, order), _slowing_guard(clock, 300, order)], [deltas],
        go_on=True, min_seconds=9e-6, max_passes=20, clock=clock)
    # Rounds until the faster one has spent 9,000 ns too: 3 x 1,000 + 3 x 2,000.
    assert ours.passes == peer.passes == 6
    assert order == [100, 300] * 6
    assert measure_throughputs([], [deltas], go_on=True, min_seconds=1.0, max_passes=3) == ()
    assert ours.chars_per_s / peer.chars_per_s == pytest.approx(3.0)
    # One after the other, the second subject alone meets the slow machine: its passes take
    # 3,000 and 6,000 ns, the first's all 1,000, and the ratio reads 4.
    clock, order = FakeClock(), []
    alone = [measure_throughput(_slowing_guard(clock, ns, order), [deltas], go_on=True,
                                min_seconds=9e-6, max_passes=20, clock=clock)
             for ns in (100, 300)]
    assert alone[0].chars_per_s / alone[1].chars_per_s == pytest.approx(4.0)

def test_a_ratio_of_throughputs_measured_in_rounds_is_the_median_of_the_rounds() -> None:
    # 100 characters a pass: ours 10, 12 and 20 ns, theirs 20, 8 and 100 ns, round by round.
    ours = Throughput(100, (10, 12, 20), ((),))
    theirs = Throughput(100, (20, 8, 100), ((),))
    # The rounds' ratios are 2, 2/3 and 5: their median is 2 (the medians' ratio, 20 ns
    # against 12, would read 1.67).
    assert throughput_ratio(ours, theirs) == pytest.approx(2.0)
    # Not measured in rounds (as many passes or not): the ratio of the medians.
    assert throughput_ratio(ours, Throughput(100, (20, 8), ((),))) == pytest.approx(
        ours.chars_per_s / Throughput(100, (20, 8), ((),)).chars_per_s)


def test_throughput_median_ignores_one_slow_pass() -> None:
    clock = FakeClock()
    passes = iter([100, 100, 10_000])

    def make() -> Feeder:
        cost = next(passes)

        def feed(delta: str) -> bool:
            clock.now += cost if delta else 0
            return False

        return feed

    result = measure_throughput(make, [["x" * 10]], go_on=True, min_seconds=1.0,
                                max_passes=3, clock=clock)
    assert result.pass_ns == (100, 100, 10_000)
    assert result.chars_per_s == pytest.approx(10 * 1e9 / 100)


def test_loops_are_judged_until_they_stop_then_the_next_starts_fresh() -> None:
    clock = FakeClock()
    pieces = [["x" * 32] * 10, ["y" * 32] * 10, ["z" * 32] * 2]
    result = measure_throughput(fake_guard(clock, flat(1), stop_after=100), pieces,
                                go_on=False, min_seconds=1e-9, max_passes=1, clock=clock)
    # Stopped on the 4th delta (128 chars) of each long piece; the short one never stops.
    assert result.stops == ((128,), (128,), ())
    assert result.chars_per_pass == 128 + 128 + 64
    assert clock.now == 4 + 4 + 2  # nothing after a stop was fed


def test_clean_stop_is_a_false_positive_and_a_fresh_guard_judges_on() -> None:
    clock = FakeClock()
    result = measure_throughput(fake_guard(clock, flat(1), stop_after=100),
                                [["x" * 32] * 10], go_on=True, min_seconds=1e-9,
                                max_passes=1, clock=clock)
    assert result.stops == ((128, 256),)
    assert result.stop_count == 2
    assert result.chars_per_pass == 320
    assert clock.now == 10  # every delta judged


def test_loopbreak_judges_each_loop_until_its_trip() -> None:
    loops = loop_inputs()
    pieces = [cut(loop.text, 32) for loop in loops]
    result = measure_throughput(loopbreak_subject("reasoning").make, pieces, go_on=False,
                                min_seconds=1e-9, max_passes=1)
    expected_chars = 0
    batch = bench_config().judging.batch_chars
    for loop, stops in zip(loops, result.stops, strict=True):
        trip = scan(loop.text, "reasoning", bench_config())
        # The guard stops the stream on the delta that completes the batch holding the trip.
        assert len(stops) == (1 if trip else 0)
        if trip:
            assert trip.offset <= stops[0] < trip.at + batch + 32
        expected_chars += stops[0] if trip else len(loop.text)
    assert result.chars_per_pass == expected_chars
    assert expected_chars < sum(len(loop.text) for loop in loops)  # stopped loops stop early


# --- per-delta cost ----------------------------------------------------------------


def _text(settings: BenchSettings) -> str:
    return "".join(chr(ord("a") + i % 26) for i in range(settings.clean_needed))


def test_per_delta_growth_is_far_cost_over_near_cost() -> None:
    clock = FakeClock()
    plan = plan_stream(_text(SMALL), SMALL)
    # 100 ns per delta before 500 chars into a stream, 300 ns after.
    make = fake_guard(clock, lambda at: 100 if at < 500 else 300)
    result = measure_per_delta(make, plan, stream_seconds=10.0, clock=clock)
    assert result.near_ns == (100, 100, 100)
    assert result.far_ns == (300, 300, 300)
    assert result.growth == pytest.approx(3.0)
    assert (result.near_at, result.far_at, result.capped) == (64, 640, False)


def test_per_delta_growth_is_the_median_of_the_window_pairs() -> None:
    # Near and far windows alternate: a slow stretch over three pairs of eight slows both
    # sides of them. The pairs read 1.1 but one; the medians' ratio would read 1.25.
    near = (1288, 1325, 1204, 807, 796, 807, 798, 839)
    far = (1417, 1458, 1324, 888, 876, 888, 878, 1166)
    result = PerDelta(10_000, 1_000_000, 1_000_000, near, far)
    assert result.far / result.near > 1.2
    assert result.growth == pytest.approx(1.1, rel=1e-3)


def test_per_delta_long_stream_is_capped_by_its_deadline() -> None:
    settings = BenchSettings(delta_chars=32, clean_chars=32, near_chars=0,
                             far_chars=32 * 1024, window_deltas=1, windows=1)
    clock = FakeClock()
    plan = plan_stream(_text(settings), settings)
    # 1,000 ns per delta, 300,000 ns allowed: the clock is read every 256 deltas, so
    # the feed stops after 512 deltas and the far window is timed there.
    result = measure_per_delta(fake_guard(clock, flat(1_000)), plan, stream_seconds=300e-6,
                               clock=clock)
    assert result.far_at == 512 * 32
    assert result.capped


def test_plan_times_the_same_deltas_near_and_far() -> None:
    plan = plan_stream(_text(SMALL), SMALL)
    assert [sum(map(len, c)) for c in plan.contexts] == [SMALL.near_start] * SMALL.windows
    assert [len(s) for s in plan.segments] == [SMALL.window_deltas] * SMALL.windows
    assert plan.base_chars == SMALL.far_start
    text = _text(SMALL)
    # Each window follows its own context in the clean text.
    for context, segment in zip(plan.contexts, plan.segments, strict=True):
        joined = "".join(context) + "".join(segment)
        assert joined in text
    # The default probes sit past 1 MB of one stream, in token-sized deltas.
    assert BenchSettings().far_start >= 1_000_000 and BenchSettings().delta_chars == 0
    assert BenchSettings().stream_chars > BenchSettings().far_start


def test_plan_needs_enough_clean_text() -> None:
    with pytest.raises(InputError, match="needs"):
        plan_stream("x" * 10, SMALL)


def test_ratios_say_how_many_times_faster_loopbreak_is() -> None:
    text = _text(SMALL)
    plan = plan_stream(text, SMALL)
    clean = cut(text[: SMALL.clean_chars], 32)
    loops = loop_inputs()[:2]

    def result(ns: int) -> Any:
        clock = FakeClock()
        subject = Subject("s", "1", fake_guard(clock, flat(ns), stop_after=10_000))
        return measure_subject(subject, clean, loops, plan, SMALL, clock=clock)

    ours, peer = result(400), result(1_200)
    assert ours.clean.chars_per_s == pytest.approx(32 * 1e9 / 400)
    assert ours.per_delta.near == ours.per_delta.far == 400
    r = ratios(ours, peer)
    assert (r.clean_throughput, r.looping_throughput) == pytest.approx((3.0, 3.0))
    assert (r.per_delta_near, r.per_delta_far) == pytest.approx((3.0, 3.0))
    assert [s.stopped_at for s in ours.loop_stops] == [10_016, 10_016]
    assert ours.loop_stops[0].after_loop_start == 10_016 - loops[0].loop_start
    # Measured together (the throughputs in rounds on one clock): the same numbers.
    clock = FakeClock()
    together = measure_subjects([Subject(name, "1", fake_guard(clock, flat(ns),
                                                                stop_after=10_000))
                                 for name, ns in (("ours", 400), ("peer", 1_200))],
                                clean, loops, plan, SMALL, clock=clock)
    assert [r.name for r in together] == ["ours", "peer"]
    assert together[0].clean == ours.clean and together[1].looping == peer.looping
    assert together[1].per_delta.near_ns == peer.per_delta.near_ns


def test_targets_judge_the_thresholds() -> None:
    assert Targets(2_000_000, 1_000_000, 1.2, 1_000_000, 0).all_met
    assert not Targets(1_999_999, 3e6, 1.0, 1_000_000, 0).throughput_clean_met
    assert not Targets(3e6, 999_999, 1.0, 1_000_000, 0).throughput_looping_met
    assert not Targets(3e6, 3e6, 1.21, 1_000_000, 0).flat_met
    assert not Targets(3e6, 3e6, 1.0, 1_000_000, 1).all_met


def test_settings_are_checked() -> None:
    with pytest.raises(InputError, match=r"delta_chars must be >= 0 \(0: token-sized\), not -1"):
        BenchSettings(delta_chars=-1)
    with pytest.raises(InputError, match="fixed_chars must be >= 0"):
        BenchSettings(fixed_chars=-3)
    with pytest.raises(InputError, match="far_chars"):
        BenchSettings(near_chars=100, far_chars=100)


# --- clean input -------------------------------------------------------------------


def test_stdlib_text_is_ordered_and_skips_what_it_cannot_use(tmp_path: Path) -> None:
    (tmp_path / "b.py").write_text("B\n", encoding="utf-8")
    (tmp_path / "a.py").write_text("A\n", encoding="utf-8")
    (tmp_path / "notes.txt").write_text("T\n", encoding="utf-8")
    (tmp_path / "bad.py").write_bytes(b"\xff\xfe\xfa")
    (tmp_path / "site-packages").mkdir()
    (tmp_path / "site-packages" / "s.py").write_text("S\n", encoding="utf-8")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "c.py").write_text("C\n", encoding="utf-8")
    got = stdlib_text(100, str(tmp_path))
    assert (got.text, got.files) == ("A\nB\nC\n", 3)
    assert stdlib_text(3, str(tmp_path)).text == "A\nB"


def test_stdlib_text_reads_the_real_standard_library() -> None:
    got = stdlib_text(50_000)
    assert len(got.text) == 50_000
    assert got.text == stdlib_text(50_000).text
    assert "def " in got.text


# --- peers ---------------------------------------------------------------------------


def _hide(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> Any:
        return None if name in names else real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_missing_peers_are_reported_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    _hide(monkeypatch, "degen_guard", "dgxarley")
    degen, dgx = load_degen_guard(), load_dgxarley()
    assert (degen.status, degen.installed, degen.subject) == ("not installed", False, None)
    assert (dgx.status, dgx.installed) == ("not installed", False)
    assert degen.install == "pip install llm-degen-guard"
    assert "pip install" in dgx.install and "dgxarley" in dgx.install


def _fake_package(tmp_path: Path, guard_source: str | None) -> importlib.machinery.ModuleSpec:
    package = tmp_path / "dgxarley"
    (package / "integration").mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('the package init ran')\n")
    if guard_source is not None:
        (package / "integration" / "streaming_repetition_guard.py").write_text(guard_source)
    spec = importlib.machinery.ModuleSpec("dgxarley", None, is_package=True)
    spec.submodule_search_locations = [str(package)]
    return spec


GUARD = '''
from __future__ import annotations
from dataclasses import dataclass

@dataclass
class FeedResult:
    should_stop: bool = False

class RepetitionGuard:
    def __init__(self) -> None:
        self.seen = 0

    def feed(self, chunk: str) -> FeedResult:
        self.seen += len(chunk)
        return FeedResult(should_stop=self.seen >= 64)
'''


def test_dgxarley_guard_loads_by_file_without_the_package_init(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    spec = _fake_package(tmp_path, GUARD)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, package=None: spec if name == "dgxarley"
                        else real(name, package))
    monkeypatch.delitem(sys.modules, "_loopbreak_bench_dgxarley_streaming_repetition_guard",
                        raising=False)
    package_loaded = "dgxarley" in sys.modules
    peer = load_dgxarley()
    assert peer.status == "measured" and peer.subject is not None
    feed = peer.subject.make()
    assert [feed("x" * 32), feed("x" * 32)] == [False, True]  # the fake guard, by its path
    assert ("dgxarley" in sys.modules) == package_loaded  # no package __init__ ran


def test_a_broken_peer_is_reported_not_raised(monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    spec = _fake_package(tmp_path, None)  # the guard module is missing
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, package=None: spec if name == "dgxarley"
                        else real(name, package))
    peer = load_dgxarley()
    assert peer.status.startswith("failed to load: ")
    assert peer.subject is None


# --- where it ran ------------------------------------------------------------------

# /proc/stat's first line on a 2-core VM: user nice system idle iowait irq softirq steal
# guest guest_nice, in clock ticks.
STAT = "cpu  45458 0 5743 88509 811 0 795 2830 0 0\ncpu0 22729 0 2871 44254 405 0 397 1415 0 0\n"


def test_cpu_times_reads_the_machine_line_and_its_steal(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text(STAT)
    assert cpu_times(str(stat)) == (45458 + 5743 + 88509 + 811 + 795 + 2830, 2830)
    later = STAT.replace("45458", "46458").replace(" 2830 0 0\ncpu0", " 3830 0 0\ncpu0")
    stat.write_text(later)
    assert cpu_times(str(tmp_path / "missing")) is None
    assert steal_between(None, cpu_times(str(stat))) is None
    before = (45458 + 5743 + 88509 + 811 + 795 + 2830, 2830)
    assert steal_between(before, cpu_times(str(stat))) == 0.5  # 1000 of 2000 ticks
    assert steal_between(before, before) is None  # no time passed: no share
    for torn in ("", "cpu  1 2 3\n", "intr 1 2 3 4 5 6 7 8 9\n", "cpu  1 2 x 4 5 6 7 8\n",
                 "cpu  1 2 3 4 5 6 7 8 9\udcff\n"):  # a byte that is not ASCII
        stat.write_text(torn, errors="surrogateescape")
        assert cpu_times(str(stat)) is None, torn


def test_cpu_model_reads_cpuinfo_else_asks_platform(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC\n"
                    "processor\t: 1\nmodel name\t: AMD EPYC\n")
    assert cpu_model(str(info)) == "AMD EPYC"
    info.write_text("processor\t: 0\nmodel name\t:\n")  # empty: not a name
    assert cpu_model(str(info)) == (platform.processor() or None)
    assert cpu_model(str(tmp_path / "missing")) == (platform.processor() or None)


def test_the_machine_line_says_processor_cores_load_and_steal() -> None:
    machine = Machine("3.11.7", "CPython", "Linux-6.18", "x86_64", 2, (0.5, 0.4, 0.3),
                      (1.25, 0.5, 0.3), "AMD EPYC [7B13]", 0.125)
    assert machine.describe() == ("CPython 3.11.7 on Linux-6.18, AMD EPYC [7B13], 2 CPUs, "
                                  "load 0.5 → 1.25, steal 12.5%")
    assert Machine.from_json(json.loads(json.dumps(machine.as_json()))) == machine
    bare = Machine("3.11.7", "CPython", "Darwin", "arm64", None)
    assert bare.describe() == "CPython 3.11.7 on Darwin, None CPUs"
    assert Machine.from_json(bare.as_json()) == bare


# --- the command -------------------------------------------------------------------

TOP_KEYS = {"loopbreak_version", "quick", "machine", "settings", "inputs", "loopbreak",
            "peers", "ratios", "ratios_meaning", "targets"}


def _bench_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main(["bench", "--quick", "--json", *argv]) == 0
    out = capsys.readouterr().out
    data: dict[str, Any] = json.loads(out)
    return data


def _check_subject(numbers: dict[str, Any]) -> None:
    assert numbers["clean"]["chars_per_s"] > 0
    assert numbers["clean"]["chars_per_pass"] == QUICK.clean_chars
    assert numbers["looping"]["chars_per_s"] > 0
    assert numbers["looping"]["chars_per_pass"] > 0
    assert numbers["per_delta"]["ns_near"] > 0
    assert numbers["per_delta"]["ns_far"] > 0
    assert numbers["per_delta"]["growth"] > 0


def test_bench_quick_json_end_to_end(capsys: pytest.CaptureFixture[str]) -> None:
    data = _bench_json(capsys)
    assert set(data) == TOP_KEYS
    assert data["quick"] is True
    assert {"python", "platform", "cpu_count", "cpu_model", "steal"} <= set(data["machine"])
    assert Machine.from_json(data["machine"]).as_json() == {
        **data["machine"], "load_before": tuple(data["machine"]["load_before"] or ()) or None,
        "load_after": tuple(data["machine"]["load_after"] or ()) or None}
    assert data["inputs"]["clean"]["chars"] == QUICK.clean_chars
    assert data["inputs"]["looping"]["chars"] > 0
    assert data["inputs"]["stream"]["chars"] == QUICK.stream_chars
    assert set(data["loopbreak"]) == {"reasoning", "text"}
    for numbers in data["loopbreak"].values():
        _check_subject(numbers)
        assert numbers["clean"]["false_positives"] == 0
        assert numbers["per_delta"]["stopped_at"] is None
    reasoning = data["loopbreak"]["reasoning"]
    samples = reasoning["looping"]["samples"]
    assert reasoning["looping"]["stopped"] == len(samples) == len(loop_inputs())
    assert all(s["after_loop_start"] > 0 for s in samples)
    assert set(data["peers"]) == set(data["ratios"]) == {"llm-degen-guard", "dgxarley"}
    for name, peer in data["peers"].items():
        if peer["installed"]:
            _check_subject(peer["results"])
            assert all(x > 0 for x in data["ratios"][name].values())
        else:
            assert peer["results"] is None and data["ratios"][name] is None
    targets = data["targets"]
    assert targets["chars_per_s"] == 2_000_000 and targets["max_growth"] == 1.2
    assert targets["looping_chars_per_s"] == 1_000_000
    assert targets["judged_on"] == "the slowest pass"
    for key in ("throughput_clean_met", "throughput_looping_met", "flat_met", "all_met"):
        assert isinstance(targets[key], bool)
    assert targets["false_positives"] == 0
    # A quick run judges nothing it timed; the false positives are counted, not timed.
    assert targets["min_runs"] == 3
    for key in ("throughput_clean", "throughput_looping", "flat"):
        assert targets["verdicts"][key]["verdict"] == "no verdict"
        assert targets["verdicts"][key]["why"].startswith("--quick")
    assert targets["verdicts"]["false_positives"] == {"verdict": "met", "why": None}


def test_bench_reports_a_missing_peer_as_not_installed(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _hide(monkeypatch, "degen_guard", "dgxarley")
    data = _bench_json(capsys)
    for name in ("llm-degen-guard", "dgxarley"):
        peer = data["peers"][name]
        assert peer["status"] == "not installed"
        assert peer["results"] is None
        assert peer["install"].startswith("pip install")
        assert data["ratios"][name] is None
    # People see it too, with the command that gets it, and no traceback.
    assert main(["bench", "--quick"]) == 0
    captured = capsys.readouterr()
    assert "not installed" in captured.out and "pip install llm-degen-guard" in captured.out
    assert "Targets" in captured.out and "Traceback" not in captured.out + captured.err


def test_bench_without_peers_prints_tables(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--quick", "--no-peers"]) == 0
    captured = capsys.readouterr()
    for text in ("Throughput", "Per-delta cost", "loopbreak (reasoning)", "verbatim",
                 "Targets", "growth range"):
        assert text in captured.out
    # --quick: figures with their ranges, and no verdict on anything timed.
    targets = captured.out[captured.out.index("Targets"):].splitlines()
    timed = [line for line in targets if "chars/s in the slowest pass" in line
             or "per-delta cost at" in line]
    assert len(timed) == 3
    for line in timed:
        assert "– no verdict (--quick" in line and "✓" not in line and "✗" not in line
        assert re.search(r"\((\d+ (pass|window)|[\d.,×]+–[\d.,×]+ over \d+ "
                         r"(passes|windows))\)$", line), line


def test_bench_rejects_a_bad_delta_size(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--quick", "--delta-chars", "-1"]) == 2
    assert "delta_chars must be >= 0 (0: token-sized), not -1" in capsys.readouterr().err


def test_bench_measures_token_sized_deltas_and_32_char_ones(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--quick", "--no-peers", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["settings"]["deltas"] == "token-sized"
    assert report["settings"]["fixed_chars"] == 32
    for result in report["loopbreak"].values():
        low, high = result["clean"]["chars_per_s_range"]
        assert 0 < low <= result["clean"]["chars_per_s"] <= high
        assert result["clean_fixed"]["chars_per_s"] > 0
    assert main(["bench", "--quick", "--no-peers"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # rich wraps narrow output
    assert "token-sized deltas" in out and "@32" in out


# --- token-sized deltas ------------------------------------------------------------


def test_token_deltas_cut_like_a_tokenizer_stream() -> None:
    text = "Hello, world! It's 2026.\n    return value_of(x)  # ok\n你好，世界 😀😀"
    pieces = token_deltas(text)
    assert "".join(pieces) == text
    assert pieces[:6] == ["Hello", ",", " world", "!", " It", "'s"]
    assert [p for p in pieces if p.isdigit()] == ["2", "0", "2", "6"]  # one digit each
    assert pieces[pieces.index("你"):pieces.index("界") + 1] == ["你", "好", "，", "世", "界"]
    assert pieces.count("😀") == 2
    assert max(map(len, pieces)) <= 6


@given(st.text(max_size=300))
def test_token_deltas_lose_nothing(text: str) -> None:
    assert "".join(token_deltas(text)) == text
    assert all(token_deltas(text))


def test_token_deltas_are_about_a_token_long_on_clean_text() -> None:
    text = stdlib_text(50_000).text
    mean = len(text) / len(token_deltas(text))
    assert 2.0 <= mean <= TOKEN_CHARS


# --- the adversarial suite ---------------------------------------------------------


def test_adversarial_suite_runs_every_input_and_part(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--adversarial", "--quick", "--no-peers", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert {"python", "platform", "cpu_count", "cpu_model", "steal"} <= set(report["machine"])
    names = [i["name"] for i in report["inputs"]]
    assert names == ["1-char flood", "counting run", "number per line", "numbered lines",
                     "numeric CSV", "no newline", "CJK", "emoji", "unique lines",
                     "indented lines", "triangle", "staircase", "SQL inserts",
                     "padded tables", "padded tables, CJK cells"]
    subjects = {r["subject"] for r in report["engine"]}
    assert subjects == {"loopbreak (reasoning)", "loopbreak (text)"}
    assert len(report["engine"]) == 2 * len(names)
    for r in report["engine"]:
        low, high = r["chars_per_s_range"]
        assert 0 < low <= r["chars_per_s"] <= high and r["passes"] >= 1
    # The flood and the counting run trip (and restart); the prose-free inputs never do.
    stops = {(r["subject"], r["input"]): r["stops"] for r in report["engine"]}
    assert stops[("loopbreak (reasoning)", "1-char flood")] > 0
    assert stops[("loopbreak (text)", "counting run")] > 0
    assert stops[("loopbreak (text)", "unique lines")] == 0
    assert [p["name"] for p in report["parts"]] == [
        "tool argument", "SSE event", "history replay, cold", "history replay, from the start",
        "history replay, Chinese", "history replay", "history replay, 8 sessions",
        "history request", "event-loop wait"]
    # Every request of every round is timed: 8 a round in the eight-session part.
    assert [len(p["ms"]) for p in report["parts"]] == [3, 3, 3, 3, 3, 3, 24, 3, 3]
    # The whole request and the loop's wait have no targets of their own (the replay's is
    # the issue's).
    assert [p["target_ms"] is None and p["met"] is None for p in report["parts"]] == [
        False] * 7 + [True] * 2
    assert all(p["median_ms"] > 0 for p in report["parts"])
    slowest = report["targets"]["slowest"]
    assert slowest["chars_per_s_low"] == min(r["chars_per_s_range"][0]
                                             for r in report["engine"])
    assert report["targets"]["verdicts"] == {
        "engine": {"verdict": "no verdict", "why": "--quick, 2 runs"},
        "parts": {"verdict": "no verdict", "why": "--quick"}}
    assert main(["bench", "--adversarial", "--quick", "--no-peers"]) == 0
    out = capsys.readouterr().out
    assert "Adversarial inputs" in out and "history replay" in out and "Targets" in out
    assert f"{os.cpu_count()} CPUs" in out.splitlines()[0]
    assert "✓" not in out and "✗" not in out and "– no verdict (--quick" in out


def test_adversarial_and_proxy_are_two_benchmarks(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--adversarial", "--proxy", "--quick"]) == 2
    assert "run one at a time" in capsys.readouterr().err
    assert main(["bench", "--adversarial", "--in-engine", "--quick"]) == 2
    assert "--adversarial and --in-engine are different benchmarks" in capsys.readouterr().err


def test_history_body_is_the_size_the_suite_says() -> None:
    from loopbreak.bench.adversarial import history_body

    body = history_body(800)
    assert sum(1 for m in body["messages"] if m["role"] == "assistant") == 800
    assert 5e6 < len(json.dumps(body)) < 8e6
    # Every result is a numbered file read: digits on every line, as real tool output has.
    results = [m["content"] for m in body["messages"] if m["role"] == "tool"]
    assert all(line.split("\t")[0].strip().isdigit()
               for r in results for line in r.splitlines() if not line.startswith("Error"))
    # The Chinese session: the same calls and results, its conversation read as Chinese
    # (half its answers empty, so the guard reads their reasoning's last 2,000 characters).
    from loopbreak import Config
    from loopbreak._recovery.history import replay

    chinese = history_body(40, chinese=True)
    assert [m.get("tool_calls") for m in chinese["messages"]] == [
        m.get("tool_calls") for m in history_body(40)["messages"]]
    assert sum(1 for m in chinese["messages"] if m["role"] == "assistant" and not m["content"]) \
        == 20
    assert replay(chinese, "openai", Config()).language == "zh"
    assert replay(history_body(40), "openai", Config()).language == "en"


def test_history_parts_run_under_the_proxys_collector_then_restore_it() -> None:
    import gc

    from loopbreak.bench.adversarial import _as_in_a_proxy

    before, frozen = gc.get_threshold(), gc.get_freeze_count()
    interval = sys.getswitchinterval()
    with _as_in_a_proxy():
        # As `loopbreak proxy` runs: start-up objects frozen, a first threshold of 50,000,
        # a worker thread handing the loop the GIL every millisecond.
        assert gc.get_threshold()[0] == 50_000 and gc.get_freeze_count() > 0
        assert sys.getswitchinterval() == pytest.approx(0.001)
    assert gc.get_threshold() == before and sys.getswitchinterval() == interval
    if not frozen:
        assert gc.get_freeze_count() == 0


def test_subjects_are_timed_with_the_heap_frozen_then_it_is_restored() -> None:
    import gc

    from loopbreak.bench.throughput import heap_frozen

    frozen = gc.get_freeze_count()
    held = [[i] for i in range(1000)]  # tracked objects made before the timing
    with heap_frozen():
        assert gc.get_freeze_count() >= frozen + len(held)
    if not frozen:
        assert gc.get_freeze_count() == 0
