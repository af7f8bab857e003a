"""``loopbreak demo``: every bundled loop is cut, every clean stream is left alone,
and the live replay paces itself through an injected sleep (tests never wait)."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest
from rich.console import Console

from loopbreak._engine.detectors.block_repeat import EXACT_REPEAT, LOW_NOVELTY
from loopbreak._engine.detectors.char_cap import MAX_REASONING_CHARS
from loopbreak._engine.detectors.counter_cycle import COUNTER_CYCLE
from loopbreak._engine.detectors.cycle import CYCLE
from loopbreak._engine.detectors.degeneracy import DEGENERATE_OUTPUT, EMOJI_FLOOD, SYMBOL_FLOOD
from loopbreak._engine.detectors.identical_chunks import IDENTICAL_CHUNKS
from loopbreak._engine.detectors.lines import LINES
from loopbreak._samples import demo_samples
from loopbreak.cli import demo, main

ENGINE_RULES = {EXACT_REPEAT, LOW_NOVELTY, MAX_REASONING_CHARS, CYCLE, COUNTER_CYCLE,
                DEGENERATE_OUTPUT,
                EMOJI_FLOOD, SYMBOL_FLOOD, IDENTICAL_CHUNKS, LINES}


def _forbid_sleep(seconds: float) -> None:
    raise AssertionError(f"slept {seconds} s where no delay was asked for")


def _json_lines(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict[str, object]]:
    assert main(["demo", "--json", *argv]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def _terminal() -> tuple[Console, io.StringIO]:
    # A terminal without colours: Live still redraws, and the text stays searchable.
    screen = io.StringIO()
    return Console(file=screen, force_terminal=True, color_system=None, width=100), screen


def test_json_cuts_every_loop_and_leaves_clean_streams(
        capsys: pytest.CaptureFixture[str]) -> None:
    samples = demo_samples()
    lines = _json_lines(capsys, "--speed", "0")
    assert [line["name"] for line in lines] == [s.name for s in samples]
    assert {s.is_loop for s in samples} == {True, False}  # both kinds are exercised
    for sample, line in zip(samples, lines, strict=True):
        assert line["channel"] == sample.channel
        assert line["chars"] == len(sample.text)
        assert line["loop_start"] == sample.loop_start
        if sample.is_loop:
            assert line["tripped"] is True, sample.name
            assert line["rule"] in ENGINE_RULES
            assert isinstance(line["offset"], int) and isinstance(line["at"], int)
            assert sample.loop_start is not None
            assert sample.loop_start < line["at"] <= line["offset"] <= len(sample.text)
            assert line["saved_chars"] == len(sample.text) - line["offset"] > 0
            assert isinstance(line["evidence"], dict) and line["evidence"]
        else:
            assert line["tripped"] is False, f"{sample.name} was cut by {line['rule']}"
            assert line["rule"] is line["offset"] is line["at"] is line["evidence"] is None
            assert line["saved_chars"] == 0


def test_json_agrees_with_the_engine_fed_directly(capsys: pytest.CaptureFixture[str]) -> None:
    from loopbreak import scan

    for sample, line in zip(demo_samples(), _json_lines(capsys), strict=True):
        trip = scan(sample.text, sample.channel, delta_chars=demo.DELTA_CHARS)
        assert line["rule"] == (trip.rule if trip else None)
        assert line["offset"] == (trip.offset if trip else None)


def test_only_keeps_the_named_samples_in_demo_order(capsys: pytest.CaptureFixture[str]) -> None:
    loops = [s.name for s in demo_samples() if s.is_loop]
    wanted = [loops[-1], loops[0]]
    lines = _json_lines(capsys, "--only", wanted[0], "--only", wanted[1])
    assert [line["name"] for line in lines] == [loops[0], loops[-1]]


def test_unknown_only_name_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--json", "--only", "no-such-stream"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.strip().splitlines()) == 1
    assert "no-such-stream" in err
    for sample in demo_samples():
        assert sample.name in err


@pytest.mark.parametrize("speed", ["-1", "nan", "inf"])
def test_speed_must_be_a_finite_pace(capsys: pytest.CaptureFixture[str], speed: str) -> None:
    assert main(["demo", "--speed", speed]) == 2
    assert "--speed" in capsys.readouterr().err


def test_config_file_changes_what_the_engine_does(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    default = _json_lines(capsys, "--only", "verbatim")[0]
    config = tmp_path / "loopbreak.toml"
    config.write_text("[cycle]\nmax_period = 0\n", encoding="utf-8")
    no_cycle = _json_lines(capsys, "--only", "verbatim", "--config", str(config))[0]
    assert default["rule"] == CYCLE
    assert no_cycle["rule"] != CYCLE


def test_no_live_summary_names_every_sample(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(demo, "sleep", _forbid_sleep)
    assert main(["demo", "--no-live", "--speed", "0"]) == 0
    out = capsys.readouterr().out
    summary = out[out.index("what the engine did"):]
    for sample in demo_samples():
        assert sample.name in summary
    for replay in map(demo.judge, demo_samples()):
        assert (replay.trip.rule if replay.trip else "untouched") in summary
    assert "✂ cut:" in out


def test_pipe_output_never_animates_or_sleeps(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # capsys's stdout is not a terminal: the default speed must not slow a pipe down.
    monkeypatch.setattr(demo, "sleep", _forbid_sleep)
    assert main(["demo", "--only", "verbatim"]) == 0
    out = capsys.readouterr().out
    assert "✂ cut:" in out
    assert "\x1b[" not in out


def test_live_replay_paces_through_the_injected_sleep() -> None:
    samples = demo.select_samples(["verbatim", "clean-code"])
    console, screen = _terminal()
    slept: list[float] = []
    started = time.monotonic()
    replays = demo.replay_samples(samples, console=console, speed=2500, sleep=slept.append)
    elapsed = time.monotonic() - started
    assert slept
    assert elapsed < sum(slept)  # the pace was asked for, not waited out
    loop, clean = replays
    assert loop.trip is not None and clean.trip is None
    # A cut stops the stream: the rest of the loop is neither shown nor waited for.
    assert loop.consumed == loop.trip.offset < len(loop.sample.text)
    assert clean.consumed == len(clean.sample.text)
    streamed = sum(slept) - demo.HOLD_SECONDS * len(samples)
    assert streamed == pytest.approx((loop.consumed + clean.consumed) / 2500)
    out = screen.getvalue()
    assert f"✂ cut: {loop.trip.rule} at {loop.trip.offset:,} chars" in out
    assert "untouched" in out
    assert "streaming…" in out  # the panel was drawn while the stream ran


def test_module_sleep_can_be_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(demo, "sleep", slept.append)
    console, _ = _terminal()
    demo.replay_samples(demo.select_samples(["clean-code"]), console=console, speed=10_000)
    assert slept


def test_speed_zero_never_calls_sleep() -> None:
    console, screen = _terminal()
    replays = demo.replay_samples(demo_samples(), console=console, speed=0, sleep=_forbid_sleep)
    assert len(replays) == len(demo_samples())
    assert "what the engine did" in screen.getvalue()


def test_default_pace_takes_a_readable_while() -> None:
    slept: list[float] = []
    console, _ = _terminal()
    demo.replay_samples(demo_samples(), console=console, speed=demo.DEFAULT_SPEED,
                        sleep=slept.append)
    assert 10 <= sum(slept) <= 20
