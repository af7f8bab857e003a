"""A retry must turn thinking off even when the request never named a thinking field: the
proxy asks the upstream what it is, and drops the field again if the upstream rejects it."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest

from loopbreak._recovery.requests import dialect_of_upstream, requested_dialect
from loopbreak._samples import verbatim_loop
from loopbreak.proxy.server import ProxyServer
from loopbreak.testing import Script, ScriptedUpstream

LOOP = verbatim_loop().text
ANSWER = "Here is the answer without thinking."
MESSAGES = [{"role": "user", "content": "Fix the upload retry."}]


@pytest.fixture
def vllm() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream(models=("smollm2", "other"), owned_by="vllm") as upstream:
        yield upstream


@pytest.fixture
def proxy(vllm: ScriptedUpstream) -> Iterator[ProxyServer]:
    with ProxyServer(vllm.url) as server:
        yield server


def _client(proxy: ProxyServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-user", max_retries=0)


def _chats(upstream: ScriptedUpstream) -> list[dict[str, object]]:
    return [r.body for r in upstream.requests if r.path == "/v1/chat/completions"]


def _stream_text(proxy: ProxyServer) -> str:
    stream = _client(proxy).chat.completions.create(model="smollm2", stream=True,
                                                    messages=MESSAGES)  # type: ignore[arg-type]
    return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)


def test_a_vllm_upstream_gets_its_own_thinking_field(vllm: ScriptedUpstream,
                                                     proxy: ProxyServer) -> None:
    vllm.enqueue(Script.openai(reasoning=LOOP, piece_chars=16), Script.openai(text=ANSWER),
                 Script.openai(reasoning=LOOP, piece_chars=16), Script.openai(text=ANSWER))
    assert _stream_text(proxy).endswith(ANSWER)
    assert _stream_text(proxy).endswith(ANSWER)
    first, retry, _, again = _chats(vllm)
    assert "chat_template_kwargs" not in first
    assert retry["chat_template_kwargs"] == {"enable_thinking": False, "thinking": False}
    assert again["chat_template_kwargs"] == retry["chat_template_kwargs"]
    (lookup,) = [r for r in vllm.requests if r.path == "/v1/models"]  # asked once per model
    assert lookup.header("authorization") == "Bearer sk-user"


def test_a_rejected_field_is_dropped_once_streamed(vllm: ScriptedUpstream,
                                                   proxy: ProxyServer) -> None:
    vllm.enqueue(Script.openai(reasoning=LOOP, piece_chars=16),
                 Script.error(400, "Unrecognized field chat_template_kwargs"),
                 Script.openai(text=ANSWER))
    text = _stream_text(proxy)
    assert text.startswith("[loopbreak]") and text.endswith(ANSWER)
    _, rejected, plain = _chats(vllm)
    assert "chat_template_kwargs" in rejected and "chat_template_kwargs" not in plain
    assert plain["messages"] == rejected["messages"]  # the notice is still there


def test_a_rejected_field_is_dropped_once_whole(vllm: ScriptedUpstream,
                                                proxy: ProxyServer) -> None:
    vllm.enqueue(Script.openai(reasoning=LOOP), Script.error(400, "no such field"),
                 Script.openai(text=ANSWER))
    with httpx.Client(timeout=10) as client:
        answer = client.post(proxy.url + "/v1/chat/completions",
                             json={"model": "smollm2", "messages": MESSAGES}).json()
    assert answer["choices"][0]["message"]["content"].endswith(ANSWER)
    assert [("chat_template_kwargs" in body) for body in _chats(vllm)] == [False, True, False]


def test_a_request_that_names_its_field_is_not_second_guessed(vllm: ScriptedUpstream,
                                                              proxy: ProxyServer) -> None:
    vllm.enqueue(Script.openai(reasoning=LOOP, piece_chars=16), Script.openai(text=ANSWER))
    stream = _client(proxy).chat.completions.create(
        model="smollm2", stream=True, messages=MESSAGES,  # type: ignore[arg-type]
        extra_body={"thinking": {"type": "enabled"}})
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert _chats(vllm)[1]["thinking"] == {"type": "disabled"}
    assert not [r for r in vllm.requests if r.path == "/v1/models"]


@pytest.mark.parametrize(("host", "owned_by", "dialect"), [
    ("127.0.0.1:8000", "vllm", "vllm"),
    ("127.0.0.1:30000", "sglang", "vllm"),
    ("127.0.0.1:8080", "llamacpp", "vllm"),
    ("localhost:11434", "library", "ollama"),
    ("localhost:11434", "", "ollama"),
    ("api.deepseek.com", "deepseek", "deepseek"),
    ("api.deepseek.com", "", "deepseek"),
    ("api.openai.com", "system", "openai"),
    ("127.0.0.1:4000", "", "none"),
    ("127.0.0.1:4000", "someone", "none"),
])
def test_the_upstream_kind_from_host_and_owner(host: str, owned_by: str, dialect: str) -> None:
    assert dialect_of_upstream(host, owned_by) == dialect


def test_what_a_request_names() -> None:
    assert requested_dialect({"thinking": {"type": "enabled"}}) == "deepseek"
    assert requested_dialect({"chat_template_kwargs": {}}) == "vllm"
    assert requested_dialect({"reasoning_effort": "high"}) == "openai"
    assert requested_dialect({}) == "none" and requested_dialect({}, "anthropic") == "anthropic"
