"""``loopbreak proxy --workers N``: the command itself, several processes on one port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

from loopbreak._samples import verbatim_loop
from loopbreak.testing import Script, ScriptedUpstream

LOOP = verbatim_loop().text


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    if not path.exists():
        pytest.skip("this system does not list a process's children in /proc")
    return [int(p) for p in path.read_text().split()]


def test_two_workers_serve_and_guard_every_request(upstream: ScriptedUpstream,
                                                   tmp_path: Path) -> None:
    config = tmp_path / "loopbreak.toml"
    # Every worker reads the same file: "stop" ends a looping call with the notice, no retry.
    config.write_text('[recovery]\non_trip = "stop"\n', encoding="utf-8")
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "loopbreak", "proxy", "--upstream", upstream.url,
         "--port", str(port), "--workers", "2", "--config", str(config)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline, "the proxy did not start"
            time.sleep(0.2)
        assert len(_children(proc.pid)) >= 2
        client = openai.OpenAI(base_url=base + "/v1", api_key="sk-secret", max_retries=0)
        for _ in range(3):  # whichever worker takes it, every request is guarded the same
            upstream.enqueue(Script.openai(reasoning=LOOP, text="never", piece_chars=16,
                                           flavour="deepseek"))
            reasoning = text = ""
            stream = client.chat.completions.create(
                model="deepseek-v4-flash", stream=True,
                messages=[{"role": "user", "content": "Fix the upload retry."}],
                extra_body={"thinking": {"type": "enabled"}})
            for chunk in stream:
                if chunk.choices:
                    delta = chunk.choices[0].delta
                    reasoning += getattr(delta, "reasoning_content", None) or ""
                    text += delta.content or ""
            assert len(reasoning) < 1500 < len(LOOP)
            assert "[loopbreak]" in text and "never" not in text
        assert len(upstream.requests) == 3  # stopped, never retried
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    output = proc.stdout.read() if proc.stdout else ""
    assert f"http://127.0.0.1:{port}" in output and "2 workers" in output
    assert "Traceback" not in output


def test_workers_must_be_at_least_one(capsys: pytest.CaptureFixture[str]) -> None:
    from loopbreak.cli import main

    assert main(["proxy", "--upstream", "http://127.0.0.1:9", "--workers", "0"]) == 2
    assert "--workers must be >= 1, not 0" in capsys.readouterr().err
