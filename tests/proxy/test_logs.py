"""What the proxy tells its operator: JSON lines, the port it really took, configuration
problems as they happen, sessions named without revealing prompts."""

from __future__ import annotations

import hashlib
import json
import os
import re
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
from support import ProxyFactory


def _free_port_refusing() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _command(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "loopbreak", "proxy", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "NO_COLOR": "1"})


def test_the_command_prints_its_real_port_and_logs_json_lines() -> None:
    upstream = f"http://127.0.0.1:{_free_port_refusing()}"  # nothing listens: a 502
    proc = _command("--upstream", upstream, "--port", "0", "--log-level", "info")
    try:
        assert proc.stderr is not None
        banner = proc.stderr.readline()
        match = re.search(r"http://127\.0\.0\.1:(\d+) ->", banner)
        assert match is not None and match.group(1) != "0", banner
        url = f"http://127.0.0.1:{match.group(1)}"
        deadline = time.monotonic() + 20
        while True:
            try:
                answer = httpx.post(url + "/v1/chat/completions", timeout=5, json={
                    "model": "m", "messages": [{"role": "user", "content": "secret prompt"}]})
                break
            except httpx.ConnectError:
                assert time.monotonic() < deadline, "the proxy did not start"
                time.sleep(0.1)
        assert answer.status_code == 502
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=20)
    ours = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    events = {line["event"]: line for line in ours}
    assert events["upstream-error"]["status"] == 502
    assert events["request"]["status"] == 502 and events["request"]["path"] == \
        "/v1/chat/completions"
    assert all(line["time"].endswith("Z") and line["level"] for line in ours)
    assert "secret prompt" not in err


def test_a_port_in_use_is_one_clear_line_and_no_banner() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = _command("--upstream", "http://127.0.0.1:9", "--port", str(port))
        _, err = proc.communicate(timeout=30)
    assert proc.returncode != 0
    assert err.strip().splitlines() == [
        f"loopbreak: error: cannot listen on 127.0.0.1:{port}: the port is in use "
        "(choose another --port, or 0 for any free one)"]


def _events(caplog: pytest.LogCaptureFixture) -> list[dict[str, object]]:
    return [json.loads(r.getMessage()) for r in caplog.records if r.name == "loopbreak.proxy"]


def test_configuration_problems_are_reported_without_a_request(
        upstream: ScriptedUpstream, proxy_for: ProxyFactory, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "loopbreak.toml"
    path.write_text('[proxy]\nreload_seconds = 0.1\n')
    with caplog.at_level("INFO", logger="loopbreak.proxy"):
        proxy_for(config_path=str(path))
        path.write_text('[recovery]\non_trip = "bogus"\n')
        deadline = time.monotonic() + 5
        while not any(e["event"] == "config-rejected" for e in _events(caplog)):
            assert time.monotonic() < deadline, "a broken edit was not reported"
            time.sleep(0.05)
        path.unlink()
        while not any(e["event"] == "config-missing" for e in _events(caplog)):
            assert time.monotonic() < deadline, "a deleted file was not reported"
            time.sleep(0.05)
        time.sleep(0.3)  # reported once, not at every check
    assert [e["event"] for e in _events(caplog)].count("config-missing") == 1
    assert upstream.requests == []


def test_the_session_is_a_salted_hash(upstream: ScriptedUpstream, proxy_for: ProxyFactory,
                                      caplog: pytest.LogCaptureFixture) -> None:
    """An unsalted hash of the first prompt lets anyone with the log confirm a guess."""
    proxy = proxy_for()
    prompt = "Fix the upload retry."
    upstream.enqueue(Script.openai(reasoning=verbatim_loop().text, piece_chars=16),
                     Script.openai(text="ok"))
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="k", max_retries=0)
    with caplog.at_level("WARNING", logger="loopbreak.proxy"):
        list(client.chat.completions.create(model="m", stream=True,
                                            messages=[{"role": "user", "content": prompt}]))
    (trip,) = [e for e in _events(caplog) if e["event"] == "trip"]
    session = str(trip["session"])
    assert len(session) == 12 and re.fullmatch("[0-9a-f]+", session)
    assert session != hashlib.sha256(prompt.encode()).hexdigest()[:12]
