"""``loopbreak demo --proxy``: a live cut through the real proxy, streamed with the openai
SDK; the summary states what the replay upstream recorded, and pauses go through the
injected sleep (tests never wait)."""

from __future__ import annotations

import argparse
import io
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from loopbreak import Config, InputError
from loopbreak._engine.notices import render
from loopbreak.cli import demo_proxy
from loopbreak.testing import Reasoning

pytest.importorskip("openai")
pytest.importorskip("aiohttp")
pytest.importorskip("uvicorn")

NOTICE = re.compile(r"\[loopbreak\] Your reasoning was cut after (?P<chars>[\d,]+) characters "
                    r"because it kept repeating \((?P<rule>[^)]+)\)\.[^\n]*")
SPEED = 50_000.0
"""A pace that keeps the tests quick while the upstream still streams slower than the proxy
judges: the whole loop would take over half a second, the cut comes after a few dozen ms."""


def _terminal(width: int = 200) -> tuple[Console, io.StringIO]:
    # A terminal without colours: Live still redraws, and the text stays searchable. Wide,
    # so no summary line wraps.
    screen = io.StringIO()
    return Console(file=screen, force_terminal=True, color_system=None, width=width), screen


def _forbid_sleep(seconds: float) -> None:
    raise AssertionError(f"slept {seconds} s where no delay was asked for")


def _recorded(monkeypatch: pytest.MonkeyPatch) -> list[demo_proxy.ProxyDemoRun]:
    """Keep every run the demo makes, to compare its summary with the upstream's records."""
    runs: list[demo_proxy.ProxyDemoRun] = []
    real = demo_proxy.stream_through_proxy

    def keep(*args: Any, **kwargs: Any) -> demo_proxy.ProxyDemoRun:
        runs.append(real(*args, **kwargs))
        return runs[-1]

    monkeypatch.setattr(demo_proxy, "stream_through_proxy", keep)
    return runs


def _sent_reasoning(run: demo_proxy.ProxyDemoRun) -> str:
    """The reasoning in the wire events the upstream wrote before the exchange ended: the
    role chunk first, then one reasoning delta per event."""
    looping = run.looping
    assert looping is not None
    pieces = [e.text for e in run.loop.events if isinstance(e, Reasoning)]
    return "".join(pieces[: max(0, looping.events_sent - 1)])


def test_unpaced_run_cuts_retries_and_summarises_the_records(
        monkeypatch: pytest.MonkeyPatch) -> None:
    runs = _recorded(monkeypatch)
    console, screen = _terminal()
    slept: list[float] = []
    assert demo_proxy.run_proxy_demo(console, 0, slept.append) == 0
    assert slept == []  # speed 0: no pause asked for
    (run,) = runs
    out = screen.getvalue()

    # The upstream's records: the loop was closed by the proxy, the retry asked without
    # thinking and completed; nothing else reached it.
    assert len(run.requests) == 2
    looping, retry = run.requests
    assert looping.body["thinking"] == {"type": "enabled"}
    # Unpaced, the upstream may have written the whole loop into the socket buffers before
    # the cut reached it; paced (below), the proxy always closes it first.
    assert looping.outcome in ("client-disconnected", "completed")
    assert retry.body["thinking"] == {"type": "disabled"}
    assert retry.outcome == "completed"
    sent = _sent_reasoning(run)
    loop = run.loop.reasoning
    assert loop.startswith(sent)
    assert (sent == loop) == (looping.outcome == "completed")

    # What the client received: reasoning up to the cut, the notice, the retried answer.
    assert loop.startswith(run.reasoning) and len(run.reasoning) <= len(sent)
    match = NOTICE.fullmatch(run.notice)
    assert match is not None, run.content[:300]
    assert run.notice == render("cut.reasoning", "en", chars=match["chars"], rule=match["rule"])
    assert run.answer == demo_proxy.ANSWER
    assert run.finish_reason == "stop"
    trip = run.trip
    assert trip is not None
    assert (trip["rule"], f"{trip['offset']:,}") == (match["rule"], match["chars"])

    # The summary states exactly those facts.
    assert looping.ended_at is not None
    took = looping.ended_at - looping.arrived_at
    saved = len(loop) - len(sent)
    for fact in (
        f"{len(run.reasoning):,} chars reached the client",
        f"{match['rule']} at {match['chars']} chars of reasoning (recovery: retry)",
        (f"connection closed by the proxy after {took:.2f} s"
         if looping.outcome == "client-disconnected" else
         f"first exchange completed after {took:.2f} s") + f", {len(sent):,} chars of "
        f"reasoning sent",
        f"re-asked once with thinking off: a {len(demo_proxy.ANSWER):,}-char answer, "
        f"finish_reason stop",
        f"{saved:,} of the loop's {len(loop):,} chars never generated "
        f"({saved / len(loop):.0%})",
    ):
        assert fact in out, fact
    assert f"[loopbreak] Your reasoning was cut after {match['chars']} characters" in out
    assert "✂ cut by the proxy" in out
    assert "A live cut, end to end" in out


def test_live_run_holds_the_cut_through_the_injected_sleep(
        monkeypatch: pytest.MonkeyPatch) -> None:
    runs = _recorded(monkeypatch)
    console, screen = _terminal()
    slept: list[float] = []
    started = time.monotonic()
    assert demo_proxy.run_proxy_demo(console, SPEED, slept.append) == 0
    elapsed = time.monotonic() - started
    assert slept == [demo_proxy.CUT_HOLD_SECONDS]
    assert elapsed < 10
    (run,) = runs
    out = screen.getvalue()
    assert "reasoning streams through the proxy…" in out  # drawn while the stream ran
    assert "✂ cut by the proxy" in out
    # Paced, the upstream had sent no more than the client saw before the proxy closed it.
    looping = run.looping
    assert looping is not None and looping.outcome == "client-disconnected"
    assert f"{len(_sent_reasoning(run)):,} chars of reasoning sent" in out
    loop_seconds = len(run.loop.reasoning) / SPEED
    assert f"the whole loop would have streamed for {loop_seconds:.0f} s" in out


def test_not_a_terminal_never_animates(monkeypatch: pytest.MonkeyPatch) -> None:
    _recorded(monkeypatch)
    screen = io.StringIO()
    console = Console(file=screen, width=200)
    assert demo_proxy.run_proxy_demo(console, SPEED, _forbid_sleep) == 0
    out = screen.getvalue()
    assert "\x1b[" not in out
    assert "streams through the proxy…" not in out
    assert "✂ cut by the proxy" in out


def test_stop_recovery_ends_with_the_notice_and_no_retry(
        monkeypatch: pytest.MonkeyPatch) -> None:
    runs = _recorded(monkeypatch)
    console, screen = _terminal()
    config = Config().replace(**{"recovery.on_trip": "stop"})
    assert demo_proxy.run_proxy_demo(console, SPEED, _forbid_sleep, config=config,
                                     live=False) == 0
    (run,) = runs
    assert [r.outcome for r in run.requests] == ["client-disconnected"]
    assert NOTICE.fullmatch(run.notice) and run.answer == ""
    assert run.finish_reason == "stop"
    out = screen.getvalue()
    assert "none (recovery: stop)" in out
    assert "recovery: stop" in out


def test_no_cut_says_so_and_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    # A loop far below every threshold that would cut it: the proxy lets it run to its end.
    monkeypatch.setattr(demo_proxy, "LOOP_CHARS", 800)
    runs = _recorded(monkeypatch)
    console, screen = _terminal()
    assert demo_proxy.run_proxy_demo(console, 0, _forbid_sleep) == 1
    (run,) = runs
    assert [r.outcome for r in run.requests] == ["completed"]
    assert run.trip is None and run.notice == ""
    assert "The proxy did not cut this stream" in screen.getvalue()


@pytest.mark.parametrize("missing", ["openai", "aiohttp", "uvicorn"])
def test_missing_requirements_name_the_pip_command(
        monkeypatch: pytest.MonkeyPatch, missing: str) -> None:
    monkeypatch.setitem(sys.modules, missing, None)  # makes `import missing` fail
    console, _ = _terminal()
    with pytest.raises(InputError, match=re.escape(demo_proxy.INSTALL_HINT)):
        demo_proxy.run_proxy_demo(console, 0, _forbid_sleep)


def test_module_imports_nothing_heavy() -> None:
    # The dispatcher imports every command module to build its parser.
    code = ("import sys, loopbreak.cli.demo_proxy; "
            "print(sorted(m for m in ('openai', 'aiohttp', 'uvicorn', 'loopbreak.proxy', "
            "'loopbreak.testing', 'rich.live') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"


def test_command_line_arguments_apply(monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str],
                                      tmp_path: Path) -> None:
    # What `loopbreak demo --proxy` hands over: --speed, --config and --no-live.
    runs = _recorded(monkeypatch)
    config = tmp_path / "loopbreak.toml"
    config.write_text('[recovery]\non_trip = "stop"\n', encoding="utf-8")
    args = argparse.Namespace(speed=SPEED, config=str(config), no_live=True, json=False)
    assert demo_proxy.run_from_args(args, _forbid_sleep) == 0
    (run,) = runs
    assert len(run.requests) == 1 and run.trip is not None
    assert run.trip["recovery"] == "stop"
    assert "none (recovery: stop)" in capsys.readouterr().out


def test_json_prints_the_summary_as_one_object(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    runs = _recorded(monkeypatch)
    args = argparse.Namespace(speed=0.0, config=None, no_live=False, json=True)
    assert demo_proxy.run_from_args(args, _forbid_sleep) == 0
    (run,) = runs
    data = json.loads(capsys.readouterr().out)
    assert data["cut"] is True and data["trip"]["rule"] == run.trip["rule"]
    assert data["retried"] and data["retry_thinking_disabled"]
    assert data["answer"] == demo_proxy.ANSWER
    assert data["summary"]["saved"].startswith(f"{run.saved_chars:,} of the loop's")
