"""The scripted upstream, driven by the real clients over real sockets.

Every test starts the real server on 127.0.0.1 and talks to it with the real
``openai`` (sync and async), ``anthropic`` and ``httpx`` clients: what they
parse must be exactly what was scripted, however the bytes were cut.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import anthropic
import httpx
import openai
import pytest

from loopbreak.testing import (
    Context,
    Delivery,
    Reasoning,
    Script,
    ScriptedUpstream,
    Text,
    ToolCall,
    Usage,
    anthropic_body,
    anthropic_events,
    openai_events,
)

REASONING = "让我想想……🤔 The loop again: 再来一次 🔁 and once more; ß∂ƒ 👩‍💻 ok.\n"
TEXT = "答案是 42 🎉. Fertig — ça marche! 終わり😀"
MESSAGES: Any = [{"role": "user", "content": "hi"}]

DELIVERIES = {
    "plain": Delivery(),
    "one-byte": Delivery(write_bytes=1),
    "keepalive-grouped": Delivery(events_per_write=3, keepalive_every=1),
    "odd-split-grouped": Delivery(write_bytes=5, events_per_write=4, keepalive_every=2),
}


def pieces(script: Script, kind: type[Reasoning] | type[Text]) -> list[str]:
    return [e.text for e in script.events if isinstance(e, kind)]


@dataclass
class OpenAIStream:
    """What an OpenAI SDK stream delivered, delta by delta."""

    reasoning: list[str] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    finish: list[str] = field(default_factory=list)
    usage: Any = None
    roles: list[str] = field(default_factory=list)

    def add(self, chunk: Any, reasoning_field: str = "reasoning_content") -> None:
        if chunk.usage is not None:
            self.usage = chunk.usage
        for choice in chunk.choices:
            delta = choice.delta
            if delta.role:
                self.roles.append(delta.role)
            piece = getattr(delta, reasoning_field, None)
            if piece:
                self.reasoning.append(piece)
            if delta.content:
                self.text.append(delta.content)
            for call in delta.tool_calls or ():
                slot = self.calls.setdefault(call.index, {"id": None, "name": "", "args": []})
                if call.id:
                    slot["id"] = call.id
                if call.function and call.function.name:
                    slot["name"] += call.function.name
                if call.function and call.function.arguments:
                    slot["args"].append(call.function.arguments)
            if choice.finish_reason:
                self.finish.append(choice.finish_reason)


@dataclass
class AnthropicStream:
    """What an Anthropic SDK raw event stream delivered."""

    names: list[str] = field(default_factory=list)
    thinking: list[str] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    json: dict[int, list[str]] = field(default_factory=dict)
    tools: dict[int, tuple[str, str]] = field(default_factory=dict)
    signatures: list[str] = field(default_factory=list)
    stop_reason: str | None = None
    output_tokens: int | None = None
    input_tokens: int | None = None

    def add(self, event: Any) -> None:
        self.names.append(event.type)
        if event.type == "message_start":
            self.input_tokens = event.message.usage.input_tokens
        elif event.type == "content_block_start" and event.content_block.type == "tool_use":
            self.tools[event.index] = (event.content_block.id, event.content_block.name)
        elif event.type == "content_block_delta":
            delta = event.delta
            if delta.type == "thinking_delta":
                self.thinking.append(delta.thinking)
            elif delta.type == "text_delta":
                self.text.append(delta.text)
            elif delta.type == "input_json_delta":
                self.json.setdefault(event.index, []).append(delta.partial_json)
            elif delta.type == "signature_delta":
                self.signatures.append(delta.signature)
        elif event.type == "message_delta":
            self.stop_reason = event.delta.stop_reason
            self.output_tokens = event.usage.output_tokens


# Building an SDK client loads the CA store (~35 ms); the module shares one of each
# per server so the file stays fast.
_CLIENTS: dict[tuple[str, str], Any] = {}


def _client(kind: str, upstream: ScriptedUpstream) -> Any:
    key = (kind, upstream.url)
    if key not in _CLIENTS:
        if kind == "openai":
            made: Any = openai.OpenAI(base_url=upstream.base_url, api_key="sk-test", max_retries=0)
        elif kind == "anthropic":
            made = anthropic.Anthropic(base_url=upstream.url, api_key="sk-ant", max_retries=0)
        else:
            made = httpx.Client()
        _CLIENTS[key] = made
    return _CLIENTS[key]


def oai(upstream: ScriptedUpstream, **options: Any) -> openai.OpenAI:
    client: openai.OpenAI = _client("openai", upstream)
    return client.with_options(**options) if options else client


def claude(upstream: ScriptedUpstream) -> anthropic.Anthropic:
    client: anthropic.Anthropic = _client("anthropic", upstream)
    return client


def http(upstream: ScriptedUpstream) -> httpx.Client:
    client: httpx.Client = _client("httpx", upstream)
    return client


def sse_data(raw: bytes) -> list[str]:
    """The ``data:`` payloads of an SSE body."""
    out = []
    for block in raw.decode("utf-8").split("\n\n"):
        for line in block.split("\n"):
            if line.startswith("data: "):
                out.append(line[len("data: ") :])
    return out


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream() as up:
        yield up
    for client in _CLIENTS.values():
        client.close()
    _CLIENTS.clear()


@pytest.fixture
def upstream(server: ScriptedUpstream) -> Iterator[ScriptedUpstream]:
    """The module's server with a fresh record; a test must leave no server-side error."""
    server.reset()
    yield server
    assert server.errors == []


# -- round trips through the SDKs -----------------------------------------------------


@pytest.mark.parametrize("delivery", DELIVERIES.values(), ids=DELIVERIES.keys())
@pytest.mark.parametrize("reasoning_field", ["reasoning_content", "reasoning"])
def test_openai_sync_stream_reassembles_exact_deltas(
    upstream: ScriptedUpstream, delivery: Delivery, reasoning_field: str
) -> None:
    script = Script.openai(
        reasoning=REASONING, text=TEXT, piece_chars=5, reasoning_field=reasoning_field
    ).delivered(delivery)
    upstream.enqueue(script)
    got = OpenAIStream()
    stream = oai(upstream).chat.completions.create(
        model="deepseek-v4-flash",
        messages=MESSAGES,
        stream=True,
        stream_options={"include_usage": True},
    )
    for chunk in stream:
        got.add(chunk, reasoning_field)
    assert got.reasoning == pieces(script, Reasoning)
    assert got.text == pieces(script, Text)
    assert got.roles == ["assistant"]
    assert got.finish == ["stop"]
    usage = script.usage_or_default()
    assert got.usage.prompt_tokens == usage.input_tokens
    assert got.usage.completion_tokens == usage.output_tokens
    assert got.usage.completion_tokens_details.reasoning_tokens == usage.reasoning_tokens
    record = upstream.requests[0]
    assert record.wait(2)
    assert record.outcome == "completed"


def test_deepseek_flavour_names_both_fields(upstream: ScriptedUpstream) -> None:
    script = Script.openai(reasoning=REASONING, text=TEXT, flavour="deepseek")
    upstream.enqueue(script, script)
    got = OpenAIStream()
    for chunk in oai(upstream).chat.completions.create(
        model="deepseek-v4-flash", messages=MESSAGES, stream=True
    ):
        got.add(chunk)
    assert (got.reasoning, got.text) == (pieces(script, Reasoning), pieces(script, Text))
    raw = http(upstream).post(upstream.base_url + "/chat/completions", json={"stream": True})
    deltas = [json.loads(d)["choices"][0]["delta"] for d in sse_data(raw.content)[:-1]]
    assert deltas[0] == {"role": "assistant", "content": None, "reasoning_content": ""}
    assert deltas[1] == {"content": None, "reasoning_content": REASONING[:8]}
    assert {"content": TEXT[:8], "reasoning_content": None} in deltas


def test_openai_async_stream_with_tool_calls_and_small_writes(
    upstream: ScriptedUpstream,
) -> None:
    calls = [
        ToolCall.of("bash", {"command": "ls 目录 🗂"}, id="call_a", piece_chars=3),
        ToolCall.of("read", '{"path": "/tmp/ß.txt"}', piece_chars=4),
    ]
    usage = Usage(input_tokens=120, output_tokens=33, reasoning_tokens=7)
    script = Script.openai(reasoning=REASONING, tool_calls=calls, usage=usage).delivered(
        write_bytes=3
    )
    upstream.enqueue(script)

    async def run() -> OpenAIStream:
        got = OpenAIStream()
        async with openai.AsyncOpenAI(
            base_url=upstream.base_url, api_key="k", max_retries=0
        ) as client:
            stream = await client.chat.completions.create(
                model="m",
                messages=MESSAGES,
                stream=True,
                stream_options={"include_usage": True},
            )
            async for chunk in stream:
                got.add(chunk)
        return got

    got = asyncio.run(run())
    assert "".join(got.reasoning) == REASONING
    assert got.text == []
    assert got.finish == ["tool_calls"]
    assert got.calls[0] == {"id": "call_a", "name": "bash", "args": list(calls[0].arguments)}
    assert got.calls[1]["id"] == "call_0_1"  # default ids carry the request number
    assert "".join(got.calls[1]["args"]) == '{"path": "/tmp/ß.txt"}'
    assert (got.usage.prompt_tokens, got.usage.completion_tokens) == (120, 33)


def test_openai_usage_chunk_only_when_asked(upstream: ScriptedUpstream) -> None:
    forced = replace(Script.openai(text="forced"), usage_chunk=True)
    upstream.enqueue(Script.openai(text="plain"), forced)
    url = upstream.base_url + "/chat/completions"
    plain = sse_data(http(upstream).post(url, json={"stream": True}).content)
    usage = sse_data(http(upstream).post(url, json={"stream": True}).content)
    assert plain[-1] == usage[-1] == "[DONE]"
    chunks = [json.loads(d) for d in plain[:-1]]
    assert all("usage" not in c and len(c["choices"]) == 1 for c in chunks)
    assert json.loads(usage[-2])["choices"] == []
    assert json.loads(usage[-2])["usage"]["completion_tokens"] == 1


@pytest.mark.parametrize("delivery", DELIVERIES.values(), ids=DELIVERIES.keys())
def test_anthropic_raw_events_reassemble_exact_deltas(
    upstream: ScriptedUpstream, delivery: Delivery
) -> None:
    call = ToolCall.of("get_weather", {"city": "東京 🗼"}, id="toolu_w", piece_chars=4)
    script = Script.anthropic(
        reasoning=REASONING, text=TEXT, tool_calls=[call], piece_chars=6, signature="sig=="
    ).delivered(delivery)
    upstream.enqueue(script)
    got = AnthropicStream()
    events = claude(upstream).messages.create(
        model="claude-x", max_tokens=100, messages=MESSAGES, stream=True
    )
    for event in events:
        got.add(event)
    assert got.thinking == pieces(script, Reasoning)
    assert got.text == pieces(script, Text)
    assert got.signatures == ["sig=="]
    assert got.tools == {2: ("toolu_w", "get_weather")}
    assert got.json[2] == list(call.arguments)
    assert got.stop_reason == "tool_use"
    usage = script.usage_or_default()
    assert (got.input_tokens, got.output_tokens) == (usage.input_tokens, usage.output_tokens)
    assert got.names[:2] == ["message_start", "content_block_start"]  # the SDK drops pings
    assert got.names[-2:] == ["message_delta", "message_stop"]
    assert got.names.count("content_block_start") == got.names.count("content_block_stop") == 3


def test_anthropic_stream_helpers_sync_and_async(upstream: ScriptedUpstream) -> None:
    call = ToolCall.of("edit", {"file": "a.py", "old": "x", "new": "ÿ"}, piece_chars=5)
    script = Script.anthropic(reasoning=REASONING, text=TEXT, tool_calls=[call])
    upstream.enqueue(script, script.delivered(write_bytes=2, keepalive_every=1))

    with claude(upstream).messages.stream(
        model="claude-x", max_tokens=100, messages=MESSAGES
    ) as stream:
        message = stream.get_final_message()

    async def run() -> Any:
        async with (
            anthropic.AsyncAnthropic(base_url=upstream.url, api_key="k", max_retries=0) as client,
            client.messages.stream(model="claude-x", max_tokens=100, messages=MESSAGES) as stream,
        ):
            return await stream.get_final_message()

    for final in (message, asyncio.run(run())):
        kinds = [block.type for block in final.content]
        assert kinds == ["thinking", "text", "tool_use"]
        assert final.content[0].thinking == REASONING
        assert final.content[1].text == TEXT
        assert final.content[2].input == {"file": "a.py", "old": "x", "new": "ÿ"}
        assert final.stop_reason == "tool_use"


def test_one_byte_writes_reach_the_client_split_and_byte_exact(
    upstream: ScriptedUpstream,
) -> None:
    script = Script.openai(reasoning="思考🤔", text="答🎉").delivered(write_bytes=1)
    upstream.enqueue(script)
    with http(upstream).stream(
        "POST", upstream.base_url + "/chat/completions", json={"model": "m", "stream": True}
    ) as response:
        assert response.headers["content-type"] == "text/event-stream"
        assert response.headers["transfer-encoding"] == "chunked"
        parts = list(response.iter_raw())
    raw = b"".join(parts)
    assert max(len(p) for p in parts) == 1
    # Multi-byte characters went out one byte per write: a piece on its own is not UTF-8.
    assert any(p[0] >= 0x80 for p in parts)
    first = json.loads(sse_data(raw)[0])
    ctx = Context("openai", "m", first["id"], first["created"], seq=0)
    assert raw == b"".join(e.encode() for e in openai_events(script, ctx))


def test_openai_wire_shape(upstream: ScriptedUpstream) -> None:
    upstream.enqueue(Script.openai(reasoning="r", text="t", piece_chars=1))
    raw = httpx.post(
        upstream.url + "/chat/completions",
        json={"model": "deepseek", "stream": True, "stream_options": {"include_usage": True}},
    ).content
    data = sse_data(raw)
    assert raw.startswith(b'data: {"id":"chatcmpl-')
    chunks = [json.loads(d) for d in data[:-1]]
    assert data[-1] == "[DONE]"
    first = chunks[0]
    assert list(first) == [
        "id",
        "object",
        "created",
        "model",
        "system_fingerprint",
        "choices",
        "usage",
    ]
    assert first["object"] == "chat.completion.chunk"
    assert first["model"] == "deepseek"
    assert first["usage"] is None
    assert first["choices"] == [
        {
            "index": 0,
            "delta": {"role": "assistant", "content": ""},
            "logprobs": None,
            "finish_reason": None,
        }
    ]
    assert chunks[1]["choices"][0]["delta"] == {"reasoning_content": "r"}
    assert chunks[2]["choices"][0]["delta"] == {"content": "t"}
    assert chunks[3]["choices"][0]["finish_reason"] == "stop"
    assert chunks[4]["choices"] == []
    assert chunks[4]["usage"]["total_tokens"] == 10
    assert len({c["id"] for c in chunks}) == 1


def test_anthropic_wire_shape(upstream: ScriptedUpstream) -> None:
    upstream.enqueue(Script.anthropic(text="hi"))
    response = httpx.post(
        upstream.url + "/v1/messages", json={"model": "c", "stream": True, "max_tokens": 5}
    )
    assert response.headers["content-type"] == "text/event-stream"
    blocks = response.text.strip("\n").split("\n\n")
    names = []
    for block in blocks:
        event_line, data_line = block.split("\n")
        name = event_line.removeprefix("event: ")
        assert json.loads(data_line.removeprefix("data: "))["type"] == name
        names.append(name)
    assert names == [
        "message_start",
        "content_block_start",
        "ping",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]


# -- non-streaming ----------------------------------------------------------------------


def test_non_streaming_responses_parse_with_both_sdks(upstream: ScriptedUpstream) -> None:
    call = ToolCall.of("grep", {"pattern": "TODO"}, id="call_g")
    upstream.enqueue(
        Script.openai(reasoning=REASONING, text=TEXT, tool_calls=[call], finish_reason="tool_use"),
        Script.anthropic(reasoning=REASONING, text=TEXT, tool_calls=[call]),
    )
    completion = oai(upstream).chat.completions.create(model="m", messages=MESSAGES)
    choice = completion.choices[0]
    assert completion.object == "chat.completion"
    assert choice.message.content == TEXT
    assert choice.message.reasoning_content == REASONING
    assert choice.finish_reason == "tool_calls"  # mapped from Anthropic's name
    tool = choice.message.tool_calls[0]
    assert (tool.id, tool.function.name) == ("call_g", "grep")
    assert json.loads(tool.function.arguments) == {"pattern": "TODO"}
    assert completion.usage is not None and completion.usage.total_tokens > 0

    message = claude(upstream).messages.create(model="c", max_tokens=10, messages=MESSAGES)
    assert [b.type for b in message.content] == ["thinking", "text", "tool_use"]
    assert message.content[0].thinking == REASONING
    assert message.content[1].text == TEXT
    assert message.content[2].input == {"pattern": "TODO"}
    assert message.stop_reason == "tool_use"
    assert [r.stream for r in upstream.requests] == [False, False]


def test_non_streaming_repeat_keeps_the_streamed_block_order() -> None:
    script = Script.from_pieces([("reasoning", "r"), ("text", "t")]).repeated(2)
    ctx = Context("anthropic", "c", "msg_1", 0, seq=0)
    body = anthropic_body(script, ctx)
    assert [(b["type"], b.get("thinking", b.get("text"))) for b in body["content"]] == [
        ("thinking", "r"),
        ("text", "t"),
        ("thinking", "r"),
        ("text", "t"),
    ]
    started = [
        json.loads(e.data)["content_block"]["type"]
        for e in anthropic_events(script, ctx)
        if e.name == "content_block_start"
    ]
    assert started == ["thinking", "text", "thinking", "text"]


def test_extra_fields_ride_in_the_event_that_carries_the_delta() -> None:
    # A benchmark's stamp travels beside a delta, never inside the text a client assembles.
    events = (Reasoning("r", (("stamp", "1"),)), Text("t", (("stamp", "2"),)), Text("u"))
    script = Script(events, dialect="openai")
    chunks = [json.loads(e.data) for e in openai_events(script, Context("openai", "m", "c", 0, 0))
              if e.data != "[DONE]"]
    assert [c.get("stamp") for c in chunks if c["choices"][0]["delta"].get("reasoning_content")
            or c["choices"][0]["delta"].get("content")] == ["1", "2", None]
    script = Script(events, dialect="anthropic")
    ctx = Context("anthropic", "m", "c", 0, 0)
    deltas = [d for d in (json.loads(e.data) for e in anthropic_events(script, ctx)
                          if e.name == "content_block_delta")
              if d["delta"]["type"] in ("thinking_delta", "text_delta")]
    assert [(d["delta"].get("thinking", d["delta"].get("text")), d.get("stamp"))
            for d in deltas] == [("r", "1"), ("t", "2"), ("u", None)]


# -- misbehaviour -----------------------------------------------------------------------


def test_error_statuses_reach_the_sdks(upstream: ScriptedUpstream) -> None:
    upstream.enqueue(
        Script.error(429, "slow down", retry_after=2),
        Script.error(500),
        Script.error(400, "bad thinking field"),
        Script.error(429, retry_after=1),
        Script.error(529),
    )
    client = oai(upstream)
    with pytest.raises(openai.RateLimitError) as rate:
        client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
    assert rate.value.response.headers["retry-after"] == "2"
    assert rate.value.body == {
        "message": "slow down",
        "type": "rate_limit_error",
        "param": None,
        "code": "rate_limit_exceeded",
    }
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="m", messages=MESSAGES)
    with pytest.raises(openai.BadRequestError, match="bad thinking field"):
        client.chat.completions.create(model="m", messages=MESSAGES)
    with pytest.raises(anthropic.RateLimitError) as limited:
        claude(upstream).messages.create(model="c", max_tokens=5, messages=MESSAGES, stream=True)
    assert limited.value.body["error"]["type"] == "rate_limit_error"
    with pytest.raises(anthropic.InternalServerError):
        claude(upstream).messages.create(model="c", max_tokens=5, messages=MESSAGES)
    assert [r.status for r in upstream.requests] == [429, 500, 400, 429, 529]


def test_in_stream_error_events_reach_the_sdks(upstream: ScriptedUpstream) -> None:
    upstream.enqueue(
        Script.openai(text=TEXT).with_error_event(3, "upstream fell over"),
        Script.anthropic(text=TEXT).with_error_event("finish"),
    )
    with pytest.raises(openai.APIError, match="upstream fell over"):
        for _ in oai(upstream).chat.completions.create(model="m", messages=MESSAGES, stream=True):
            pass
    with pytest.raises(anthropic.APIStatusError, match="Overloaded"):
        for _ in claude(upstream).messages.create(
            model="c", max_tokens=5, messages=MESSAGES, stream=True
        ):
            pass


def test_expect_100_continue(upstream: ScriptedUpstream) -> None:
    upstream.enqueue(Script.openai(text="ok"))
    body = b'{"stream": false}'
    with socket.create_connection(("127.0.0.1", upstream.port), timeout=2) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body)
        )
        assert sock.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(body)
        assert sock.recv(100).startswith(b"HTTP/1.1 200 OK\r\n")
    assert upstream.requests[0].body == {"stream": False}


def test_early_close_is_visible(upstream: ScriptedUpstream) -> None:
    upstream.enqueue(
        Script.openai(text=TEXT).closing_after(3),
        Script.openai(text=TEXT).closing_after("finish", how="end"),
        Script.openai(text="after"),
        Script.openai(text=TEXT).closing_after(2, how="reset"),
    )
    url = upstream.base_url + "/chat/completions"
    with httpx.Client() as client:  # its own pool: the test checks connection reuse
        seen = bytearray()
        with (
            pytest.raises(httpx.RemoteProtocolError),
            client.stream("POST", url, json={"stream": True}) as response,
        ):
            for part in response.iter_raw():
                seen += part
        assert len(sse_data(bytes(seen))) == 3
        assert b"[DONE]" not in seen
        # A clean end of body without a finish: the connection stays usable.
        ended = client.post(url, json={"stream": True})
        data = sse_data(ended.content)
        assert "[DONE]" not in data
        assert all(json.loads(d)["choices"][0]["finish_reason"] is None for d in data)
        assert sse_data(client.post(url, json={"stream": True}).content)[-1] == "[DONE]"
        with pytest.raises((httpx.ReadError, httpx.RemoteProtocolError)):
            client.post(url, json={"stream": True})
    records = upstream.requests
    assert [r.outcome for r in records] == [
        "server-closed",
        "server-closed",
        "completed",
        "server-closed",
    ]
    assert records[0].events_sent == 3
    assert records[1].connection == records[2].connection


def test_early_close_reaches_the_openai_sdk_as_a_connection_error(
    upstream: ScriptedUpstream,
) -> None:
    upstream.enqueue(Script.openai(reasoning=REASONING).closing_after(4))
    got = OpenAIStream()
    with pytest.raises(openai.APIConnectionError):
        for chunk in oai(upstream).chat.completions.create(
            model="m", messages=MESSAGES, stream=True
        ):
            got.add(chunk)
    assert len(got.reasoning) == 3  # role chunk + 3 reasoning chunks went out
    assert got.finish == []


def test_invalid_json_reaches_the_client_as_is(upstream: ScriptedUpstream) -> None:
    script = Script.openai(text="abcdef", piece_chars=2).with_invalid_json(2)
    upstream.enqueue(script, Script.anthropic(text="x").with_invalid_json("finish"))
    raw = http(upstream).post(upstream.url + "/chat/completions", json={"stream": True}).content
    data = sse_data(raw)
    whole = [json.loads(d) for i, d in enumerate(data) if i != 2 and d != "[DONE]"]
    ctx = Context("openai", "scripted-model", whole[0]["id"], whole[0]["created"], seq=0)
    original = [e.data for e in openai_events(script, ctx)]
    assert data[2] == original[2][: len(original[2]) // 2]
    with pytest.raises(ValueError):
        json.loads(data[2])
    assert data[:2] + data[3:] == original[:2] + original[3:]
    with pytest.raises(Exception, match=r"Expecting|Unterminated|JSON|EOF"):
        for _ in claude(upstream).messages.create(
            model="c", max_tokens=5, messages=MESSAGES, stream=True
        ):
            pass


def test_stall_is_cut_by_a_client_timeout_and_the_disconnect_recorded_quickly(
    upstream: ScriptedUpstream,
) -> None:
    upstream.enqueue(Script.openai(text=TEXT).stalling(after=2))
    with (
        pytest.raises(httpx.ReadTimeout),
        http(upstream).stream(
            "POST",
            upstream.base_url + "/chat/completions",
            json={"stream": True},
            timeout=httpx.Timeout(5.0, read=0.2),
        ) as response,
    ):
        for _ in response.iter_raw():
            pass
    closed = time.monotonic()
    record = upstream.requests[0]
    assert record.wait(2)
    assert record.outcome == "client-disconnected"
    assert record.ended_at is not None and record.ended_at - closed < 0.5
    assert record.events_sent == 2


def test_openai_sdk_timeout_during_a_stall(upstream: ScriptedUpstream) -> None:
    upstream.enqueue(Script.openai(reasoning=REASONING).stalling(after="finish"))
    got = OpenAIStream()
    with pytest.raises(openai.APITimeoutError):
        for chunk in oai(upstream, timeout=0.2).chat.completions.create(
            model="m", messages=MESSAGES, stream=True
        ):
            got.add(chunk)
    assert "".join(got.reasoning) == REASONING
    record = upstream.requests[0]
    assert record.wait(2) and record.outcome == "client-disconnected"


def test_timed_stall_with_keepalives_resumes(upstream: ScriptedUpstream) -> None:
    upstream.enqueue(Script.openai(text=TEXT).stalling(after=1, seconds=0.3, keepalive=0.05))
    started = time.monotonic()
    raw = (
        http(upstream)
        .post(
            upstream.base_url + "/chat/completions",
            json={"stream": True},
            timeout=httpx.Timeout(5.0, read=0.15),
        )
        .content
    )
    assert time.monotonic() - started >= 0.3
    assert raw.count(b": keep-alive\n\n") >= 4
    assert sse_data(raw)[-1] == "[DONE]"
    record = upstream.requests[0]
    assert record.wait(2) and record.outcome == "completed"


def test_disconnect_during_a_slow_drip_and_an_endless_stream(upstream: ScriptedUpstream) -> None:
    drip = Script.openai(text=TEXT * 20).delivered(Delivery.drip(write_bytes=8, every=0.002))
    endless = Script.from_pieces([Reasoning("OK. Writing. ")]).repeated(0)
    upstream.enqueue(drip, endless.delivered(delay=0.001))
    url = upstream.base_url + "/chat/completions"
    for _ in range(2):
        with http(upstream).stream("POST", url, json={"stream": True}) as response:
            got = 0
            for part in response.iter_raw():
                got += len(part)
                if got > 600:
                    break
        closed = time.monotonic()
        record = upstream.requests[-1]
        assert record.wait(2)
        assert record.outcome == "client-disconnected"
        assert record.ended_at is not None and record.ended_at - closed < 0.5
        assert record.bytes_sent >= 600 and record.events_sent >= 2


def test_headers_delay_then_disconnect(upstream: ScriptedUpstream) -> None:
    upstream.enqueue(Script.openai(text="x").delivered(headers_delay=30))
    with pytest.raises(httpx.ReadTimeout):
        http(upstream).post(upstream.url + "/chat/completions", json={"stream": True}, timeout=0.1)
    closed = time.monotonic()
    record = upstream.requests[0]
    assert record.wait(2) and record.outcome == "client-disconnected"
    assert record.ended_at is not None and record.ended_at - closed < 0.5
    assert record.bytes_sent == 0


# -- recording, routes, limits ----------------------------------------------------------


def test_recording_keeps_headers_bodies_and_outcomes(upstream: ScriptedUpstream) -> None:
    upstream.enqueue(Script.openai(text="first"), Script.openai(text="retry"))
    client = openai.OpenAI(
        base_url=upstream.url,  # no /v1, as dsh may be configured
        api_key="sk-secret",
        max_retries=0,
        default_headers={"X-DeepSeek-Harness-Session-Id": "session-1"},
    )
    for thinking in ("enabled", "disabled"):
        for _ in client.chat.completions.create(
            model="deepseek-v4-flash",
            messages=MESSAGES,
            stream=True,
            extra_body={"thinking": {"type": thinking}},
        ):
            pass
    first, retry = upstream.wait_for_requests(2)
    assert retry.wait(2)
    assert first.method == "POST" and first.path == "/chat/completions"
    assert first.header("authorization") == "Bearer sk-secret"
    assert first.header("x-deepseek-harness-session-id") == "session-1"
    assert first.headers[0][0] == "Host"  # names as received, in order
    assert first.dialect == "openai" and first.stream
    assert retry.body["thinking"] == {"type": "disabled"}
    assert json.loads(retry.raw_body) == retry.body
    assert first.arrived_at <= retry.arrived_at
    assert first.script is not None and first.script.text == "first"
    assert first.wait(2) and first.outcome == retry.outcome == "completed"


def test_routes_models_404_and_bad_json(upstream: ScriptedUpstream) -> None:
    with httpx.Client(base_url=upstream.url) as client:  # its own: one connection
        models = client.get("/v1/models").json()
        assert models["object"] == "list" and models["data"][0]["id"] == "scripted-model"
        claude_models = client.get("/v1/models", headers={"anthropic-version": "2023-06-01"})
        assert claude_models.json()["data"][0]["type"] == "model"
        missing = client.post("/v1/completions", json={})
        assert missing.status_code == 404
        assert missing.json()["error"]["type"] == "invalid_request_error"
        assert client.post("//chat/completions", json={}).status_code == 404
        bad = client.post("/v1/chat/completions", content=b"{not json")
        assert bad.status_code == 400 and "JSON" in bad.json()["error"]["message"]
        bad_claude = client.post("/v1/messages", content=b"[1, 2")
        assert bad_claude.status_code == 400
        assert bad_claude.json()["type"] == "error"
        assert bad_claude.json()["error"]["type"] == "invalid_request_error"
    assert upstream.requests[4].body is None
    assert upstream.requests[4].raw_body == b"{not json"
    assert len({r.connection for r in upstream.requests}) == 1  # one keep-alive connection


def test_body_limit_and_chunked_request_bodies() -> None:
    with ScriptedUpstream([Script.openai(text="ok")], max_body_bytes=1000) as upstream:
        url = upstream.base_url + "/chat/completions"
        too_big = httpx.post(url, json={"pad": "x" * 5000})
        assert too_big.status_code == 413
        assert too_big.json()["error"]["code"] == "request_too_large"

        def body() -> Iterable[bytes]:
            yield b'{"stream": false, '
            yield b'"model": "chunked"}'

        ok = httpx.post(url, content=body())
        assert ok.status_code == 200 and ok.json()["model"] == "chunked"
        assert upstream.requests[1].header("transfer-encoding") == "chunked"
        assert upstream.requests[1].body == {"stream": False, "model": "chunked"}
        assert upstream.errors == []


def test_choose_default_and_server_side_errors() -> None:
    def choose(request: Any) -> Script | None:
        if request.body.get("max_tokens") == 64:  # dsh's title request
            return Script.openai(text="A title")
        return None

    with ScriptedUpstream([Script.anthropic(text="claude only")], choose=choose) as upstream:
        url = upstream.base_url + "/chat/completions"
        title = httpx.post(url, json={"max_tokens": 64}).json()
        assert title["choices"][0]["message"]["content"] == "A title"
        mismatch = httpx.post(url, json={})
        assert mismatch.status_code == 500
        unscripted = http(upstream).post(upstream.url + "/v1/messages", json={})
        assert unscripted.status_code == 500 and unscripted.json()["type"] == "error"
        assert len(upstream.errors) == 2
        assert "a script for anthropic" in upstream.errors[0]
        assert "no script left" in upstream.errors[1]
        upstream.default = Script.openai(text="fallback")
        assert httpx.post(url, json={}).json()["choices"][0]["message"]["content"] == "fallback"


# -- load, lifecycle ----------------------------------------------------------------------


def test_200_concurrent_streams_complete_intact() -> None:
    count = 200
    texts = [f"stream {n}: " + "数据🙂 " * 20 for n in range(count)]

    def choose(request: Any) -> Script:
        n = request.body["n"]
        return Script.openai(text=texts[n], piece_chars=12).delivered(write_bytes=100)

    async def one(client: httpx.AsyncClient, url: str, n: int) -> str:
        async with client.stream("POST", url, json={"stream": True, "n": n}) as response:
            raw = b"".join([part async for part in response.aiter_raw()])
        data = sse_data(raw)
        assert data[-1] == "[DONE]"
        return "".join(json.loads(d)["choices"][0]["delta"].get("content", "") for d in data[:-1])

    async def run(url: str) -> list[str]:
        # Several clients: httpcore's pool rescans every connection on each event
        # (quadratic), which would make one pool of 200 the slow part of this test.
        shards = 8
        limits = httpx.Limits(max_connections=count // shards)
        clients = [httpx.AsyncClient(limits=limits, timeout=30) for _ in range(shards)]
        try:
            return await asyncio.gather(*(one(clients[n % shards], url, n) for n in range(count)))
        finally:
            await asyncio.gather(*(client.aclose() for client in clients))

    with ScriptedUpstream(choose=choose) as upstream:
        got = asyncio.run(run(upstream.base_url + "/chat/completions"))
        assert got == texts
        records = upstream.requests
        assert len(records) == count
        assert all(r.wait(2) and r.outcome == "completed" for r in records)
        assert upstream.errors == []


def test_async_context_manager_on_the_callers_loop() -> None:
    async def run() -> None:
        async with ScriptedUpstream([Script.anthropic(reasoning="hm", text="yes")]) as up:
            assert threading.active_count() == before
            async with anthropic.AsyncAnthropic(
                base_url=up.url, api_key="k", max_retries=0
            ) as client:
                got = AnthropicStream()
                events = await client.messages.create(
                    model="c", max_tokens=5, messages=MESSAGES, stream=True
                )
                async for event in events:
                    got.add(event)
            assert "".join(got.text) == "yes"
            assert await up.requests[0].wait_async(2)
            port = up.port
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=1).close()

    before = threading.active_count()
    asyncio.run(run())


def test_stop_ends_open_exchanges_and_leaks_no_thread() -> None:
    before = {t.ident for t in threading.enumerate()}
    upstream = ScriptedUpstream([Script.openai(text="x").stalling(after=1)])
    with upstream:
        response = httpx.stream(
            "POST", upstream.base_url + "/chat/completions", json={"stream": True}
        )
        response.__enter__()
        upstream.wait_for_requests(1)
        port = upstream.port
    response.__exit__(None, None, None)
    record = upstream.requests[0]
    assert record.ended and record.outcome == "shutdown"
    assert {t.ident for t in threading.enumerate()} <= before
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    upstream.stop()  # idempotent


def test_script_validation_names_field_and_value() -> None:
    with pytest.raises(ValueError, match="'write_bytes' must be >= 1: 0"):
        Delivery(write_bytes=0)
    with pytest.raises(ValueError, match=r"'status'.*302"):
        Script(status=302)
    with pytest.raises(ValueError, match=r"'close_after'.*-1"):
        Script().closing_after(-1)
    with pytest.raises(ValueError, match="'repeat' must be 1"):
        Script(events=(ToolCall("x"),), repeat=0)
    with pytest.raises(ValueError, match="'pieces'"):
        Script.from_pieces([("thinking", "x")])
