"""How the commands write (issue 14): whole plain tables in a pipe, NO_COLOR over FORCE_COLOR,
``-V``, ``-q``/``-v`` before or after the command, examples in every ``--help`` that the
parser accepts, markup never eating a hint, and bench verdicts only from repeated runs."""

from __future__ import annotations

import io
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from loopbreak import __version__
from loopbreak._samples import demo_samples
from loopbreak.cli import COMMANDS, _output, build_parser, demo, main
from loopbreak.cli.bench import MIN_RUNS, Verdict, judge, judge_added
from support import REPO

ANSI = "\x1b["


@pytest.fixture(autouse=True)
def _normal_level(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # main() sets the level for its run; calls made straight to a command see the default.
    monkeypatch.setattr(_output, "_level", _output.Level())
    for name in ("NO_COLOR", "FORCE_COLOR", "TERM", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)
    yield


def _piped(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``loopbreak ARGS`` in a child whose stdout and stderr are pipes, 40 columns asked."""
    base = {k: v for k, v in os.environ.items()
            if k not in ("NO_COLOR", "FORCE_COLOR", "TERM", "COLUMNS")}
    return subprocess.run([sys.executable, "-m", "loopbreak", *args], capture_output=True,
                          text=True, timeout=120, env={**base, "COLUMNS": "40", **env},
                          cwd=REPO)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


# --- piped output: whole, plain ---------------------------------------------------------------


def test_piped_demo_summary_is_whole_one_row_a_line() -> None:
    done = _piped("demo", "--speed", "0")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "…" not in out and ANSI not in out
    rows = {line.split()[0]: line for line in out.splitlines()
            if line.split() and line.split()[0] in {s.name for s in demo_samples()}}
    assert set(rows) == {s.name for s in demo_samples()}
    for replay in map(demo.judge, demo_samples()):
        line = rows[replay.sample.name]
        assert (replay.trip.rule if replay.trip else "untouched") in line
        assert (f"{replay.saved:,}" if replay.trip else "—") in line
    # The totals sentence on one line, not cut at the 40 columns COLUMNS asked for.
    assert re.search(r"^\d of \d loops cut, [\d,]+ of their [\d,]+ characters never streamed "
                     r"\(\d+%\); \d of \d clean streams untouched\.$", out, re.M)
    # Panels keep a readable width in a pipe.
    assert max(len(line) for line in out.splitlines() if line.startswith("╭")) == \
        _output.TEXT_WIDTH


def test_piped_calibrate_prints_every_key_name_whole(tmp_path: Path) -> None:
    absent = str(tmp_path / "absent")
    done = _piped("calibrate", "--only", "code streak", "--only", "cycle (reasoning)",
                  "--stdlib-every", "400", "--jobs", "1", LOOPBREAK_CORPUS=absent,
                  LOOPBREAK_DEV_CORPUS=absent, LOOPBREAK_LOCAL_CORPUS=absent)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "…" not in out and ANSI not in out
    for key in ("novelty_streak_code", "min_span_reasoning", "min_span_code", "clean trips",
                "loop misses", "median cut"):
        assert key in out, key
    # `grep` finds a setting's row whole: its values and its counts on one line.
    header = next(line for line in out.splitlines() if "min_span_reasoning" in line)
    row = next(line for line in out.splitlines()
               if re.match(r"^\W*256\W+768\W", line))
    assert len(row) == len(header)
    # The note is for people: on stderr, whole.
    assert "corpus not found at" in done.stderr and "…" not in done.stderr


def test_a_terminal_console_keeps_its_width_a_pipe_gets_no_cap() -> None:
    assert _output.console(file=_Terminal()).width < _output.PIPE_WIDTH
    piped = _output.console(file=io.StringIO())
    assert piped.width == _output.PIPE_WIDTH and _output.whole(piped)
    assert _output.text_width(piped) == _output.TEXT_WIDTH


# --- colour ------------------------------------------------------------------------------------


def test_force_color_colours_a_pipe(monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert main(["demo", "--only", "verbatim", "--speed", "0"]) == 0
    out = capsys.readouterr().out
    assert ANSI in out
    assert "…" not in out  # coloured, still whole


def test_no_color_wins_over_force_color(monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("NO_COLOR", "1")
    assert main(["demo", "--only", "verbatim", "--speed", "0"]) == 0
    out = capsys.readouterr().out
    assert ANSI not in out and "✂ cut:" in out


def test_no_color_on_a_terminal_drops_every_style(monkeypatch: pytest.MonkeyPatch) -> None:
    screen = _Terminal()
    monkeypatch.setenv("NO_COLOR", "1")
    out = _output.console(file=screen)
    out.print("[bold red]cut[/] [green]✓ met[/]", style="bold")
    assert screen.getvalue() == "cut ✓ met\n"
    monkeypatch.setenv("NO_COLOR", "")  # empty: not set (no-color.org)
    coloured = _Terminal()
    _output.console(file=coloured).print("[red]cut[/]")
    assert ANSI in coloured.getvalue()


def test_dumb_terminal_gets_no_colour_and_no_animation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TERM", "dumb")
    screen = _Terminal()
    assert not _output.interactive(screen)
    _output.console(file=screen).print("[red]cut[/]")
    assert screen.getvalue() == "cut\n"


# --- -V, -q, -v --------------------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["-V", "--version"])
def test_version(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([flag])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"loopbreak {__version__}"


@pytest.mark.parametrize("argv", [["-q", "demo"], ["demo", "-q"], ["demo", "--quiet"]])
def test_quiet_before_or_after_the_command_leaves_the_summary(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*argv, "--speed", "0"]) == 0
    out = capsys.readouterr().out
    assert "what the engine did" in out and "loops cut" in out
    assert "✂ cut:" not in out and "Replaying" not in out


@pytest.mark.parametrize("argv", [["-qq", "demo"], ["-q", "demo", "-q"]])
def test_quiet_twice_leaves_the_results_only(argv: list[str],
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*argv, "--speed", "0"]) == 0
    out = capsys.readouterr().out
    assert "what the engine did" in out and "loops cut" not in out


def test_quiet_turns_progress_bars_and_notes_off(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "stderr", _Terminal())
    assert not _output.progress().disable
    _output.configure(quiet=1)
    assert _output.progress().disable
    _output.note("a note")
    assert sys.stderr.getvalue() == ""
    _output.configure()
    _output.note("a note")
    assert "a note" in sys.stderr.getvalue()


def test_progress_is_off_when_stderr_is_not_a_terminal(
        capsys: pytest.CaptureFixture[str]) -> None:
    with _output.progress() as bar:  # pytest's stderr is not a terminal
        bar.advance(bar.add_task("reading", total=2))
    assert bar.disable
    assert capsys.readouterr() == ("", "")  # not even the newline rich ends a bar with


def _boom(args: object) -> int:
    raise RuntimeError("boom")


def test_an_unexpected_error_is_one_line_and_its_traceback_is_at_v(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(demo, "run", _boom)
    assert main(["demo"]) == 2
    err = capsys.readouterr().err
    assert err == "loopbreak: error: unexpected RuntimeError: boom (a bug: run again with -v " \
                  "for the traceback)\n"
    for argv in (["-v", "demo"], ["demo", "-v"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("Traceback (most recent call last):")
        assert 'raise RuntimeError("boom")' in err
        assert err.splitlines()[-1].startswith("loopbreak: error: unexpected RuntimeError: boom")


def test_an_expected_error_stays_one_line_at_v_and_shows_its_traceback_at_vv(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-v", "demo", "--only", "nope"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert main(["-vv", "demo", "--only", "nope"]) == 2
    assert "Traceback" in capsys.readouterr().err


# --- examples in every --help ------------------------------------------------------------------


def _subparsers() -> dict[str, object]:
    parser = build_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    return dict(action.choices)  # type: ignore[arg-type]


def _example_commands(help_text: str) -> list[list[str]]:
    """The loopbreak commands in a help text's examples: each line's command (a description
    follows after three spaces or more), every piece of a pipeline that runs loopbreak,
    without leading VAR=value assignments or a trailing redirection."""
    block = help_text.split("examples:\n", 1)[1]
    commands = []
    for line in block.splitlines():
        if not line.startswith("  "):
            break
        command = re.split(r"\s{3,}", line.strip())[0]
        for piece in command.split("|"):
            words = shlex.split(piece)
            redirect = next((i for i, w in enumerate(words) if re.match(r"\d?>", w)), None)
            words = words[:redirect]
            while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
                words = words[1:]
            if words and words[0] == "loopbreak":
                commands.append(words[1:])
    return commands


def test_main_help_has_examples_that_parse() -> None:
    text = build_parser().format_help()
    commands = _example_commands(text)
    assert len(commands) >= 4
    for argv in commands:
        build_parser().parse_args(argv)


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_command_help_has_examples_of_itself_that_parse(name: str) -> None:
    text = _subparsers()[name].format_help()  # type: ignore[attr-defined]
    commands = _example_commands(text)
    assert commands, f"loopbreak {name} --help has no examples"
    for argv in commands:
        args = build_parser().parse_args(argv)  # SystemExit(2) on an invalid example
        assert args.command == name, argv


def test_examples_keep_their_layout() -> None:
    # RawDescriptionHelpFormatter: the examples are printed as written, one a line.
    text = _subparsers()["demo"].format_help()  # type: ignore[attr-defined]
    assert "\n  loopbreak demo --json                        one JSON object per stream\n" in text


# --- markup never eats a hint ------------------------------------------------------------------


def test_zstandard_hint_is_printed_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    from transcripts import dsh_fixtures as fx

    log = fx.write_zstd(tmp_path / "run[logs].session.jsonl.zstd", fx.synthetic_log())
    monkeypatch.setitem(sys.modules, "zstandard", None)
    assert main(["analyze", str(log)]) == 2
    captured = capsys.readouterr()
    unreadable = next(line for line in captured.out.splitlines() if "unreadable:" in line)
    assert "run[logs].session.jsonl.zstd" in unreadable
    assert unreadable.endswith("pip install zstandard")
    assert captured.err.strip().endswith("pip install zstandard)")


def test_analyze_prints_bracketed_names_as_they_are(monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from loopbreak.cli import analyze

    def unreadable(path: Path, config: object) -> tuple[list[object], str]:
        return [], f"{path.name}: needs the [logs] extra: pip install '.[logs]'"

    monkeypatch.setattr(analyze, "analyze_file", unreadable)
    assert main(["analyze", str(analyze.demo_log())]) == 2
    assert "needs the [logs] extra: pip install '.[logs]'" in capsys.readouterr().out


# --- bench verdicts ----------------------------------------------------------------------------


def test_a_verdict_needs_repeated_full_size_runs() -> None:
    assert MIN_RUNS == 3
    assert judge(True, 1) == Verdict(None, "1 run")
    assert judge(False, 2) == Verdict(None, "2 runs")
    assert judge(True, 3) == Verdict(True)
    assert judge(False, 8) == Verdict(False)
    assert judge(True, 25, quick=True) == Verdict(None, "--quick")
    assert judge(True, 1, quick=True) == Verdict(None, "--quick, 1 run")


def test_verdict_marks() -> None:
    assert judge(True, 1).mark == "[yellow]– no verdict[/] (1 run)"
    assert judge(True, 5).mark == "[green]✓ met[/]"
    assert judge(False, 5).mark == "[red]✗ missed[/]"
    assert judge(True, 1).as_json() == {"verdict": "no verdict", "why": "1 run"}
    assert judge(False, 3).as_json() == {"verdict": "missed", "why": None}


def test_a_negative_added_latency_is_noise_never_a_lone_met() -> None:
    target = 5e6
    # One run, below zero: the figure is shown as noise, with no verdict.
    single = judge_added([-0.2e6], target)
    assert single.met is None and "✓" not in single.mark
    assert single.why == "1 run; within noise: below zero"
    # Repeated runs: below zero counts as nothing added, and the verdict says so.
    assert judge_added([-1e5, 2e5, 1e5], target) == Verdict(
        True, "within noise: below zero in 1 of 3 runs")
    assert judge_added([1e6, 6e6, 2e6], target) == Verdict(False)
    assert judge_added([1e6, 2e6, 3e6], target, quick=True).met is None
