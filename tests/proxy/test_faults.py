"""Broken upstreams, bad requests, disconnects: every stream still ends lawfully."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from loopbreak import ProxyConfig
from loopbreak._samples import verbatim_loop
from loopbreak.proxy.app import upstream_url
from loopbreak.proxy.server import ProxyServer
from loopbreak.testing import Script, ScriptedUpstream
from support import ProxyFactory

CHAT = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}


def _stream_text(proxy: ProxyServer) -> str:
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="k", max_retries=0)
    stream = client.chat.completions.create(model="m", stream=True,
                                            messages=[{"role": "user", "content": "hi"}])
    return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)


@pytest.mark.parametrize("broken", [
    Script.openai(text="part one, part two").with_invalid_json(0),
    Script.openai(text="part one, part two").closing_after(0, how="drop"),
    Script.openai(text="part one, part two").closing_after(0, how="end"),
])
def test_a_response_broken_before_content_is_resent_invisibly(
        upstream: ScriptedUpstream, proxy: ProxyServer, broken: Script) -> None:
    upstream.enqueue(broken, Script.openai(text="the whole answer"))
    assert _stream_text(proxy) == "the whole answer"
    assert len(upstream.requests) == 2


def test_resends_stop_after_two(upstream: ScriptedUpstream, proxy: ProxyServer) -> None:
    broken = Script.openai(text="x").with_invalid_json(0)
    upstream.enqueue(broken, broken, broken, Script.openai(text="never reached"))
    with pytest.raises(openai.APIError, match="broke off"):
        _stream_text(proxy)
    assert len(upstream.requests) == 3


@pytest.mark.parametrize("broken", [
    Script.openai(text="0123456789" * 10, piece_chars=10).with_invalid_json(5),
    Script.openai(text="0123456789" * 10, piece_chars=10).closing_after(5, how="drop"),
])
def test_a_response_broken_after_content_ends_with_a_lawful_error(
        upstream: ScriptedUpstream, proxy: ProxyServer, broken: Script) -> None:
    upstream.enqueue(broken)
    with httpx.Client(timeout=10) as client:
        body = client.post(proxy.url + "/v1/chat/completions", json=CHAT).content
    events = [line for line in body.split(b"\n\n") if line]
    assert json.loads(events[-2][6:])["error"]["message"].startswith("the upstream response")
    assert events[-1] == b"data: [DONE]" and len(upstream.requests) == 1
    with pytest.raises(openai.APIError):
        upstream.enqueue(broken)
        _stream_text(proxy)


def test_anthropic_broken_stream_is_an_error_event(upstream: ScriptedUpstream,
                                                   proxy: ProxyServer) -> None:
    upstream.enqueue(Script.anthropic(text="0123456789" * 10, piece_chars=10)
                     .closing_after(6, how="drop"))
    client = anthropic.Anthropic(base_url=proxy.url, api_key="k", max_retries=0)
    with pytest.raises(anthropic.APIError), client.messages.stream(model="m", max_tokens=10,
                                messages=[{"role": "user", "content": "hi"}]) as stream:
        stream.get_final_message()


@pytest.mark.parametrize("status", [429, 500, 400])
def test_upstream_errors_pass_through_unchanged(upstream: ScriptedUpstream, proxy: ProxyServer,
                                               status: int) -> None:
    upstream.enqueue(Script.error(status, "no", retry_after=3 if status == 429 else None),
                     Script.error(status, "no", retry_after=3 if status == 429 else None))
    with httpx.Client(timeout=10) as client:
        direct = client.post(upstream.base_url + "/chat/completions", json=CHAT)
        through = client.post(proxy.url + "/v1/chat/completions", json=CHAT)
    assert (through.status_code, through.content) == (direct.status_code, direct.content)
    if status == 429:
        assert through.headers["retry-after"] == "3"


def test_a_refused_upstream_is_a_502_in_the_clients_format(proxy_for: ProxyFactory) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proxy = proxy_for(base=f"http://127.0.0.1:{port}")
    with httpx.Client(timeout=10) as client:
        chat = client.post(proxy.url + "/v1/chat/completions", json=CHAT)
        messages = client.post(proxy.url + "/v1/messages", json={**CHAT, "max_tokens": 5})
    assert chat.status_code == 502 and chat.json()["error"]["type"] == "upstream_error"
    assert messages.status_code == 502 and messages.json()["type"] == "error"


def test_a_silent_upstream_is_a_504(upstream: ScriptedUpstream, proxy_for: ProxyFactory) -> None:
    proxy = proxy_for(proxy=ProxyConfig(idle_timeout=1.0))
    upstream.enqueue(Script.openai(text="late").delivered(headers_delay=5))
    with httpx.Client(timeout=10) as client:
        response = client.post(proxy.url + "/v1/chat/completions", json=CHAT)
    assert response.status_code == 504 and "did not answer" in response.json()["error"]["message"]


def test_a_stalled_stream_ends_with_a_lawful_error(upstream: ScriptedUpstream,
                                                   proxy_for: ProxyFactory) -> None:
    proxy = proxy_for(proxy=ProxyConfig(idle_timeout=1.0))
    upstream.enqueue(Script.openai(text="0123456789" * 5, piece_chars=5).stalling(4))
    with pytest.raises(openai.APIError, match="broke off"):
        _stream_text(proxy)


def test_client_disconnect_closes_the_upstream_within_100_ms(upstream: ScriptedUpstream,
                                                             proxy: ProxyServer) -> None:
    endless = Script.openai(text="a fine sentence that goes on ", piece_chars=5).repeated(0) \
        .delivered(delay=0.002)
    upstream.enqueue(endless)
    # The clock starts before the stream is closed, so the bound includes the close itself.
    with httpx.Client(timeout=10) as client:  # noqa: SIM117
        with client.stream("POST", proxy.url + "/v1/chat/completions", json=CHAT) as response:
            for i, _ in enumerate(response.iter_bytes()):
                if i > 20:
                    break
            closed_at = time.monotonic()
    record = upstream.wait_for_requests(1)[0]
    assert record.wait(2) and record.outcome == "client-disconnected"
    assert record.ended_at is not None and record.ended_at - closed_at < 0.1


def test_bad_requests_get_a_clear_4xx(upstream: ScriptedUpstream, proxy_for: ProxyFactory) -> None:
    proxy = proxy_for(proxy=ProxyConfig(max_body_bytes=4096))
    with httpx.Client(timeout=10) as client:
        big = client.post(proxy.url + "/v1/chat/completions",
                          json={**CHAT, "messages": [{"role": "user", "content": "x" * 10000}]})
        bad = client.post(proxy.url + "/v1/chat/completions", content=b"{not json")
        array = client.post(proxy.url + "/v1/messages", content=b"[1, 2]")
    assert big.status_code == 413 and "larger than 4,096 bytes" in big.json()["error"]["message"]
    assert bad.status_code == 400 and "invalid JSON" in bad.json()["error"]["message"]
    assert array.status_code == 400 and array.json()["error"]["type"] == "invalid_request_error"
    assert upstream.requests == []


def test_other_paths_pass_through(upstream: ScriptedUpstream, proxy: ProxyServer) -> None:
    with httpx.Client(timeout=10) as client:
        models = client.get(proxy.url + "/v1/models", headers={"authorization": "Bearer k"})
        missing = client.post(proxy.url + "/v1/embeddings", json={"input": "x"})
    assert models.status_code == 200 and models.json()["data"]
    assert missing.status_code == 404
    assert upstream.requests[0].header("authorization") == "Bearer k"


def test_health_and_metrics(upstream: ScriptedUpstream, proxy: ProxyServer) -> None:
    upstream.enqueue(Script.openai(reasoning=verbatim_loop().text, piece_chars=16),
                     Script.openai(text="ok"))
    _stream_text(proxy)
    with httpx.Client(timeout=10) as client:
        assert client.get(proxy.url + "/healthz").text == "ok\n"
        metrics = client.get(proxy.url + "/metrics").text
    assert 'loopbreak_trips_total{channel="reasoning",rule="cycle"} 1' in metrics
    assert 'loopbreak_retries_total{reason="thinking-off"} 1' in metrics
    assert "loopbreak_streams_active 0" in metrics


def _wait_for(condition: Callable[[], bool], what: str, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"not within {seconds} s: {what}"
        time.sleep(0.02)


def _replaced(path: Path, text: str) -> None:
    """``path`` given ``text`` in one step, as an editor that saves by renaming does: a
    rewrite in place can be caught empty by two checks in a row when this process stalls
    (an empty file on purpose means the defaults: tested below, not here)."""
    spare = path.with_name(path.name + ".new")
    spare.write_text(text)
    os.replace(spare, path)


def test_config_file_is_reloaded_without_restart(upstream: ScriptedUpstream,
                                                 proxy_for: ProxyFactory, tmp_path: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "loopbreak.toml"
    path.write_text('[recovery]\non_trip = "stop"\n\n[proxy]\nreload_seconds = 0.1\n')
    proxy = proxy_for(config_path=str(path))
    source = proxy.app.source
    loop = Script.openai(reasoning=verbatim_loop().text, piece_chars=16)
    upstream.enqueue(loop)
    assert _stream_text(proxy).startswith("[loopbreak]") and len(upstream.requests) == 1
    _replaced(path, '[recovery]\non_trip = "error"\n\n[proxy]\nreload_seconds = 0.1\n')
    _wait_for(lambda: source.config.recovery.on_trip == "error", "the edit applied")
    upstream.enqueue(loop)
    with pytest.raises(openai.APIError, match="loopbreak cut"):
        _stream_text(proxy)
    with caplog.at_level("ERROR", logger="loopbreak.proxy"):
        _replaced(path, '[recovery]\non_trip = "bogus"\n')  # rejected: the last good one stays
        _wait_for(lambda: "config-rejected" in caplog.text and "bogus" in caplog.text,
                  "the bad edit reported")
    upstream.enqueue(loop)
    with pytest.raises(openai.APIError, match="loopbreak cut"):
        _stream_text(proxy)


def test_the_trip_log_line_names_no_key_or_prompt(upstream: ScriptedUpstream,
                                                  proxy: ProxyServer,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    upstream.enqueue(Script.openai(reasoning=verbatim_loop().text, piece_chars=16),
                     Script.openai(text="ok"))
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-very-secret", max_retries=0)
    with caplog.at_level("WARNING", logger="loopbreak.proxy"):
        list(client.chat.completions.create(
            model="deepseek-v4", stream=True,
            messages=[{"role": "user", "content": "my private prompt"}]))
    (line,) = [r.getMessage() for r in caplog.records if r.name == "loopbreak.proxy"]
    record = json.loads(line)
    assert record["event"] == "trip" and record["rule"] == "cycle" and record["offset"] > 0
    assert record["model"] == "deepseek-v4" and len(record["session"]) == 12
    assert "sk-very-secret" not in line and "private prompt" not in line


def test_upstream_url_keeps_v1_once() -> None:
    assert upstream_url("http://h:1/v1", "/v1/chat/completions") == \
        "http://h:1/v1/chat/completions"
    assert upstream_url("http://h:1", "/v1/chat/completions") == "http://h:1/v1/chat/completions"
    assert upstream_url("https://api.deepseek.com", "/chat/completions") == \
        "https://api.deepseek.com/chat/completions"
    assert upstream_url("https://api.deepseek.com/anthropic", "/v1/messages", "beta=true") == \
        "https://api.deepseek.com/anthropic/v1/messages?beta=true"


def test_proxy_binds_loopback_by_default() -> None:
    from loopbreak.cli.proxy import DEFAULT_HOST

    assert DEFAULT_HOST == "127.0.0.1"
    server = ProxyServer("http://127.0.0.1:9")
    assert server.host == "127.0.0.1"


def test_concurrent_streams_stay_separate(upstream: ScriptedUpstream, proxy: ProxyServer) -> None:
    texts = [f"stream {i} says " + "abc " * 20 for i in range(20)]
    upstream.enqueue(*[Script.openai(text=t, piece_chars=3) for t in texts])
    results: list[str] = []

    def one() -> None:
        results.append(_stream_text(proxy))

    threads = [threading.Thread(target=one) for _ in texts]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert sorted(results) == sorted(texts)


def test_a_rewrite_within_one_time_stamp_is_still_read(tmp_path: Path) -> None:
    """An editor that truncates and then writes can leave both versions with one
    modification time: the check must not stop at the empty one, nor apply it."""
    from loopbreak.proxy.app import ConfigSource

    path = tmp_path / "loopbreak.toml"
    path.write_text('[recovery]\non_trip = "stop"\n')
    stamp = path.stat().st_mtime_ns
    source = ConfigSource(str(path))
    path.write_text("")  # caught half-way through a rewrite
    os.utime(path, ns=(stamp, stamp))
    source.check()
    assert source.config.recovery.on_trip == "stop"  # not the defaults an empty file means
    path.write_text('[recovery]\non_trip = "error"\n')
    os.utime(path, ns=(stamp, stamp))
    source.check()
    assert source.config.recovery.on_trip == "stop"  # changed since the last check: wait
    source.check()
    assert source.config.recovery.on_trip == "error"


def test_a_file_emptied_on_purpose_brings_back_the_defaults(tmp_path: Path) -> None:
    from loopbreak.proxy.app import ConfigSource

    path = tmp_path / "loopbreak.toml"
    path.write_text('[recovery]\non_trip = "stop"\n')
    source = ConfigSource(str(path))
    path.write_text("")
    source.check()
    assert source.config.recovery.on_trip == "stop"
    source.check()
    assert source.config.recovery.on_trip == "retry"
