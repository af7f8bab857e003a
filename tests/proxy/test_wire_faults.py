"""Wire faults the proxy must survive: compressed upstreams, bodies that stop after their
head, passthrough bodies that break, hop-by-hop headers, doubled server headers."""

from __future__ import annotations

import json
import logging
import socket
import threading
import zlib

import anthropic
import httpx
import openai
import pytest

from loopbreak import ProxyConfig
from loopbreak._samples import verbatim_loop
from loopbreak.proxy.metrics import Metrics
from loopbreak.proxy.server import ProxyServer
from loopbreak.proxy.wire import BodyDecoder, BodyError
from loopbreak.testing import Script, ScriptedUpstream
from support import ProxyFactory

LOOP = verbatim_loop().text
ANSWER = "Here is the answer without thinking."
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def _client(proxy: ProxyServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-k", max_retries=0)


def _stream(proxy: ProxyServer) -> tuple[str, str, str | None]:
    reasoning = text = ""
    finish = None
    for chunk in _client(proxy).chat.completions.create(stream=True, **CHAT):  # type: ignore[call-overload]
        if chunk.choices:
            delta = chunk.choices[0].delta
            reasoning += getattr(delta, "reasoning_content", None) or ""
            text += delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
    return reasoning, text, finish


# --- compressed upstreams ---------------------------------------------------------------

@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_a_compressed_stream_is_judged_and_cut(upstream: ScriptedUpstream, proxy: ProxyServer,
                                               encoding: str) -> None:
    """Some upstreams compress whatever the request accepted: the guard must read it."""
    upstream.enqueue(Script.openai(reasoning=LOOP, piece_chars=16).delivered(
                         write_bytes=7, content_encoding=encoding),  # type: ignore[arg-type]
                     Script.openai(text=ANSWER).delivered(
                         content_encoding=encoding))  # type: ignore[arg-type]
    reasoning, text, finish = _stream(proxy)
    assert len(reasoning) < 1500 < len(LOOP)
    assert text.startswith("[loopbreak]") and text.endswith(ANSWER) and finish == "stop"
    assert len([r for r in upstream.requests if r.path == "/v1/chat/completions"]) == 2


def test_a_compressed_clean_stream_reaches_the_client_readable(upstream: ScriptedUpstream,
                                                               proxy: ProxyServer) -> None:
    upstream.enqueue(Script.openai(text="Done: 你好 😀", piece_chars=3).delivered(
        write_bytes=5, content_encoding="gzip"))
    with httpx.Client(timeout=10) as client:
        response = client.post(proxy.url + "/v1/chat/completions", json={**CHAT, "stream": True})
    # The body is sent decoded, so it must not claim an encoding.
    assert "content-encoding" not in response.headers
    events = [json.loads(line[6:]) for line in response.text.split("\n\n")
              if line.startswith("data: {")]
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])
    assert text == "Done: 你好 😀" and response.text.endswith("data: [DONE]\n\n")


def test_a_compressed_whole_answer_is_judged_and_retried(upstream: ScriptedUpstream,
                                                         proxy: ProxyServer) -> None:
    upstream.enqueue(Script.openai(reasoning=LOOP).delivered(content_encoding="gzip"),
                     Script.openai(text=ANSWER).delivered(content_encoding="deflate"))
    response = _client(proxy).chat.completions.create(  # type: ignore[call-overload]
        **CHAT, extra_body={"thinking": {"type": "enabled"}})
    content = response.choices[0].message.content
    assert content.startswith("[loopbreak]") and content.endswith(ANSWER)
    assert upstream.wait_for_requests(2)[1].body["thinking"] == {"type": "disabled"}


def test_an_anthropic_compressed_stream_is_read(upstream: ScriptedUpstream,
                                                proxy: ProxyServer) -> None:
    upstream.enqueue(Script.anthropic(text="Hello there.", piece_chars=4).delivered(
        write_bytes=9, content_encoding="gzip"))
    client = anthropic.Anthropic(base_url=proxy.url, api_key="k", max_retries=0)
    with client.messages.stream(model="m", max_tokens=10,
                                messages=[{"role": "user", "content": "hi"}]) as stream:
        message = stream.get_final_message()
    assert message.content[0].text == "Hello there."  # type: ignore[union-attr]


def test_an_encoding_the_guard_cannot_read_is_a_502(upstream: ScriptedUpstream,
                                                    proxy: ProxyServer) -> None:
    labelled = Script.openai(text="plain bytes labelled br")
    upstream.enqueue(Script(**{**labelled.__dict__, "headers": (("content-encoding", "br"),)}))
    with httpx.Client(timeout=10) as client:
        response = client.post(proxy.url + "/v1/chat/completions", json={**CHAT, "stream": True})
    assert response.status_code == 502
    assert "content-encoding br" in response.json()["error"]["message"]


def test_a_torn_compressed_stream_ends_with_a_lawful_error(upstream: ScriptedUpstream,
                                                           proxy: ProxyServer) -> None:
    upstream.enqueue(Script.openai(text="0123456789" * 10, piece_chars=10).delivered(
        content_encoding="gzip").closing_after(5, how="drop"))
    with pytest.raises(openai.APIError, match="broke off"):
        _stream(proxy)


# --- whole answers that stop after their head ----------------------------------------------

def test_a_whole_answer_cut_after_its_head_is_a_502(upstream: ScriptedUpstream,
                                                    proxy: ProxyServer) -> None:
    upstream.enqueue(Script.openai(text="a complete answer").cutting_body(30))
    with httpx.Client(timeout=10) as client:
        response = client.post(proxy.url + "/v1/chat/completions", json=CHAT)
        messages = client.post(proxy.url + "/v1/messages", json={**CHAT, "max_tokens": 5})
    assert response.status_code == 502, response.text
    assert "broke off" in response.json()["error"]["message"]
    # No script left: the scripted upstream answers 500, passed on as it came.
    assert messages.status_code == 500


def test_a_whole_answer_that_stalls_after_its_head_is_a_504(upstream: ScriptedUpstream,
                                                            proxy_for: ProxyFactory) -> None:
    proxy = proxy_for(proxy=ProxyConfig(idle_timeout=1.0))
    upstream.enqueue(Script.anthropic(text="a complete answer").cutting_body(30, stall=True,
                                                                            seconds=5))
    with httpx.Client(timeout=10) as client:
        response = client.post(proxy.url + "/v1/messages", json={**CHAT, "max_tokens": 5})
    assert response.status_code == 504, response.text
    assert response.json()["type"] == "error"


def test_a_whole_answer_larger_than_the_limit_is_a_502(upstream: ScriptedUpstream,
                                                       proxy_for: ProxyFactory) -> None:
    proxy = proxy_for(proxy=ProxyConfig(max_response_bytes=4096))
    upstream.enqueue(Script.openai(text="x" * 10_000))
    with httpx.Client(timeout=10) as client:
        response = client.post(proxy.url + "/v1/chat/completions", json=CHAT)
    assert response.status_code == 502
    assert "larger than 4,096 bytes" in response.json()["error"]["message"]


# --- passthrough ---------------------------------------------------------------------------

class _HalfBodyServer:
    """Answers every request with a head that promises 1,000 bytes, sends 10, and closes."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                             b"content-length: 1000\r\n\r\n0123456789")

    def close(self) -> None:
        self.sock.close()


def test_a_passthrough_body_that_breaks_is_logged_not_raised(
        proxy_for: ProxyFactory, caplog: pytest.LogCaptureFixture) -> None:
    server = _HalfBodyServer()
    try:
        proxy = proxy_for(base=server.url)
        with caplog.at_level(logging.WARNING), httpx.Client(timeout=10) as client, \
                pytest.raises(httpx.RemoteProtocolError):
            client.get(proxy.url + "/v1/models")
    finally:
        server.close()
    lines = [r.getMessage() for r in caplog.records if r.name == "loopbreak.proxy"]
    assert [json.loads(line)["event"] for line in lines] == ["passthrough-broken"]
    # The app itself never raised: the server has no traceback to print.
    assert not [r for r in caplog.records if r.exc_info]


# --- headers -------------------------------------------------------------------------------

def test_hop_by_hop_request_headers_stay_behind(upstream: ScriptedUpstream,
                                                proxy: ProxyServer) -> None:
    upstream.enqueue(Script.openai(text="ok"), Script.openai(text="ok"))
    headers = {"authorization": "Bearer sk-user", "connection": "keep-alive, x-hop",
               "x-hop": "1", "proxy-authorization": "Basic cHJveHk6c2VjcmV0",
               "x-end-to-end": "kept"}
    with httpx.Client(timeout=10) as client:
        client.post(proxy.url + "/v1/chat/completions", json={**CHAT, "stream": True},
                    headers=headers)
        client.get(proxy.url + "/v1/models", headers=headers)
    for record in upstream.requests:
        assert record.header("authorization") == "Bearer sk-user"
        assert record.header("x-end-to-end") == "kept"
        assert record.header("x-hop") is None and record.header("proxy-authorization") is None


@pytest.mark.parametrize("stream", [True, False])
def test_responses_carry_one_server_and_one_date(upstream: ScriptedUpstream, proxy: ProxyServer,
                                                 stream: bool) -> None:
    answer = Script.openai(text="ok")
    upstream.enqueue(Script(**{**answer.__dict__, "headers": (
        ("server", "upstream/1.0"), ("date", "Tue, 01 Dec 2026 00:00:00 GMT"),
        ("x-request-cost", "3"))}))
    with httpx.Client(timeout=10) as client:
        response = client.post(proxy.url + "/v1/chat/completions", json={**CHAT, "stream": stream})
    assert len(response.headers.get_list("server")) == 1
    assert len(response.headers.get_list("date")) == 1
    assert response.headers["x-request-cost"] == "3"


# --- metrics -------------------------------------------------------------------------------

def test_metrics_print_whole_numbers_whole() -> None:
    metrics = Metrics()
    metrics.add("loopbreak_cut_chars_total", 1_234_567)
    metrics.add("loopbreak_streams_active", 0.5)
    text = metrics.render()
    assert "loopbreak_cut_chars_total 1234567\n" in text
    assert "loopbreak_streams_active 0.5\n" in text


# --- the decoder on its own ------------------------------------------------------------------

def _deflated(data: bytes, wbits: int) -> bytes:
    compressor = zlib.compressobj(wbits=wbits)
    return compressor.compress(data) + compressor.flush()


@pytest.mark.parametrize(("encoding", "wbits"), [("gzip", 31), ("deflate", 15), ("deflate", -15)])
def test_the_decoder_reads_every_spelling_byte_by_byte(encoding: str, wbits: int) -> None:
    """deflate means a zlib stream, but servers also send raw deflate: both are read."""
    body = "data: 你好 😀\n\n".encode() * 50
    decoder = BodyDecoder(encoding)
    encoded = _deflated(body, wbits)
    out = b"".join(part for i in range(len(encoded)) for part in decoder.decode(encoded[i:i + 1]))
    assert out + decoder.finish() == body


def test_the_decoder_hands_a_bomb_on_in_bounded_parts() -> None:
    decoder = BodyDecoder("gzip")
    parts = list(decoder.decode(_deflated(b"\0" * (8 << 20), 31)))
    assert sum(map(len, parts)) == 8 << 20 and max(map(len, parts)) <= 1 << 20


def test_the_decoder_names_corrupt_and_torn_bodies() -> None:
    with pytest.raises(BodyError, match="gzip body is corrupt"):
        list(BodyDecoder("gzip").decode(b"not gzip at all"))
    torn = BodyDecoder("gzip")
    list(torn.decode(_deflated(b"x" * 1000, 31)[:-6]))
    with pytest.raises(BodyError, match="ended in the middle of a compressed frame"):
        torn.finish()
    with pytest.raises(ValueError, match="cannot decode content-encoding 'br'"):
        BodyDecoder("br")
