"""The Anthropic route through a real proxy, real upstream and the real ``anthropic`` SDK."""

from __future__ import annotations

import re

import anthropic
import httpx

from loopbreak import Config
from loopbreak._samples import clean_reasoning, verbatim_loop
from loopbreak.proxy.server import ProxyServer
from loopbreak.testing import Script, ScriptedUpstream, ToolCall
from support import ProxyFactory

LOOP = verbatim_loop().text
ANSWER = "Answered without thinking."


def _client(proxy: ProxyServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=proxy.url, api_key="sk-ant-secret", max_retries=0)


def _ask(proxy: ProxyServer, messages: list[dict] | None = None) -> anthropic.types.Message:  # type: ignore[type-arg]
    with _client(proxy).messages.stream(
            model="deepseek-chat", max_tokens=4096,
            thinking={"type": "enabled", "budget_tokens": 2048},
            messages=messages or [{"role": "user", "content": "Fix the retry."}]) as stream:
        return stream.get_final_message()


def test_clean_stream_passes_byte_for_byte(upstream: ScriptedUpstream, proxy: ProxyServer) -> None:
    script = Script.anthropic(reasoning=clean_reasoning().text, text="Fine 你好",
                              tool_calls=[ToolCall.of("grep", {"q": "retry"})], piece_chars=7
                              ).delivered(write_bytes=5, events_per_write=3)
    body = {"model": "m", "max_tokens": 100, "stream": True,
            "messages": [{"role": "user", "content": "hi"}]}
    upstream.enqueue(script, script)
    with httpx.Client(timeout=10) as client:
        direct = client.post(upstream.url + "/v1/messages", json=body).content
        through = client.post(proxy.url + "/v1/messages", json=body,
                              headers={"x-api-key": "sk-ant-secret"}).content
    same = re.compile(rb'"id":"[^"]*"')
    assert same.sub(b"", through) == same.sub(b"", direct)
    assert upstream.requests[1].header("x-api-key") == "sk-ant-secret"


def test_thinking_loop_is_cut_and_retried(upstream: ScriptedUpstream, proxy: ProxyServer) -> None:
    # Paced like a model, so the cut reaches the upstream before the whole loop is sent.
    upstream.enqueue(Script.anthropic(reasoning=LOOP, text="never", piece_chars=16)
                     .delivered(delay=0.0005), Script.anthropic(text=ANSWER))
    message = _ask(proxy)
    kinds = [block.type for block in message.content]
    assert kinds == ["thinking", "text", "text"]
    assert len(message.content[0].thinking) < 1500  # type: ignore[union-attr]
    assert message.content[1].text.startswith("[loopbreak] Your reasoning was cut")  # type: ignore[union-attr]
    assert message.content[2].text == ANSWER  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn"
    first, retry = upstream.wait_for_requests(2)
    assert first.wait(2) and first.outcome == "client-disconnected"
    assert retry.body["thinking"] == {"type": "disabled"}
    last = retry.body["messages"][-1]
    assert last["role"] == "user" and last["content"][-1]["text"].startswith("[loopbreak]")


def test_stop_mode(upstream: ScriptedUpstream, proxy_for: ProxyFactory) -> None:
    proxy = proxy_for(Config().replace(**{"recovery.on_trip": "stop"}))
    upstream.enqueue(Script.anthropic(reasoning=LOOP, piece_chars=16))
    message = _ask(proxy)
    assert [b.type for b in message.content] == ["thinking", "text"]
    assert message.stop_reason == "end_turn" and len(upstream.requests) == 1


def test_cut_thinking_is_not_sent_back_upstream(upstream: ScriptedUpstream,
                                                proxy: ProxyServer) -> None:
    history = [{"role": "user", "content": "Fix it."},
               {"role": "assistant", "content": [
                   {"type": "thinking", "thinking": "Go. OK. Go. OK."},  # cut: no signature
                   {"type": "text", "text": "[loopbreak] Your reasoning was cut after 9 "
                                            "characters because it kept repeating (cycle)."},
                   {"type": "thinking", "thinking": "fine", "signature": "c2ln"}]},
               {"role": "user", "content": "continue"}]
    upstream.enqueue(Script.anthropic(text="ok"))
    _ask(proxy, history)
    sent = upstream.wait_for_requests(1)[0].body["messages"][1]["content"]
    assert [b["type"] for b in sent] == ["text", "thinking"] and sent[1]["signature"] == "c2ln"


def _failed_three_times() -> list[dict]:  # type: ignore[type-arg]
    """A history in which the same ``bash`` call failed three times alike."""
    history: list[dict] = [{"role": "user", "content": "Run the tests."}]  # type: ignore[type-arg]
    for i in range(3):
        history.append({"role": "assistant", "content": [
            {"type": "tool_use", "id": f"t{i}", "name": "bash", "input": {"cmd": "make test"}}]})
        history.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"t{i}", "content": "make: *** [test] Error 2",
             "is_error": True}]})
    return history


def test_a_denied_tool_use_is_not_relayed(upstream: ScriptedUpstream, proxy: ProxyServer) -> None:
    history = _failed_three_times()
    upstream.enqueue(Script.anthropic(tool_calls=[ToolCall.of("bash", {"cmd": "make test"})]),
                     Script.anthropic(text="The tests need the database; starting it first."))
    message = _ask(proxy, history)
    assert [b.type for b in message.content] == ["text"]
    reask = upstream.wait_for_requests(2)[1].body["messages"]
    assert reask[-1]["content"][0]["is_error"] is True
    assert reask[-1]["content"][0]["content"].startswith("[loopbreak] This call to `bash`")


def test_a_denied_tool_use_in_a_whole_answer_is_not_relayed(upstream: ScriptedUpstream,
                                                             proxy: ProxyServer) -> None:
    # The whole route as the streamed one: re-asked once, and a model that insists ends with
    # the reason (its text kept, the call dropped, a normal stop reason).
    history = _failed_three_times()
    insists = Script.anthropic(text="Once more.",
                               tool_calls=[ToolCall.of("bash", {"cmd": "make test"})])
    upstream.enqueue(insists, insists)
    message = _client(proxy).messages.create(model="deepseek-chat", max_tokens=4096,
                                             messages=history)  # type: ignore[arg-type]
    assert [b.type for b in message.content] == ["text", "text"]
    assert message.content[0].text == "Once more."  # type: ignore[union-attr]
    assert message.content[1].text.startswith("[loopbreak] This call to `bash` was not run")  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn"
    reask = upstream.wait_for_requests(2)[1].body["messages"]
    assert reask[-1]["content"][0]["content"].startswith("[loopbreak] This call to `bash`")
    assert len(upstream.requests) == 2


def test_a_whole_answer_whose_text_loops_is_cut_with_the_notice(upstream: ScriptedUpstream,
                                                                proxy: ProxyServer) -> None:
    half = len(LOOP) // 2
    upstream.enqueue(Script.anthropic(reasoning="Plan the answer.", text=LOOP))
    message = _client(proxy).messages.create(
        model="deepseek-chat", max_tokens=4096,
        messages=[{"role": "user", "content": "hi"}])
    assert [b.type for b in message.content] == ["thinking", "text", "text"]
    said, notice = message.content[1].text, message.content[2].text  # type: ignore[union-attr]
    assert LOOP.startswith(said) and 0 < len(said) < half
    assert notice.startswith("[loopbreak]")
    assert message.stop_reason == "end_turn"
