"""The OpenAI route through a real proxy, real upstream and the real ``openai`` SDK."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from typing import Any

import httpx
import openai
import pytest

from loopbreak import Config
from loopbreak._samples import clean_reasoning, verbatim_loop
from loopbreak.proxy.server import ProxyServer
from loopbreak.testing import Script, ScriptedUpstream, ToolCall
from support import ProxyFactory, failing_tool_history

LOOP = verbatim_loop().text
ANSWER = "Here is the answer without thinking."


def _collect(stream: openai.Stream) -> dict:  # type: ignore[type-arg]
    out = {"reasoning": "", "text": "", "finish": None, "tools": {}}
    for chunk in stream:
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        delta = choice.delta
        out["reasoning"] += getattr(delta, "reasoning_content", None) or ""
        out["text"] += delta.content or ""
        for call in delta.tool_calls or []:
            entry = out["tools"].setdefault(call.index, {"name": "", "arguments": ""})
            if call.function and call.function.name:
                entry["name"] += call.function.name
            if call.function and call.function.arguments:
                entry["arguments"] += call.function.arguments
        out["finish"] = choice.finish_reason or out["finish"]
    return out


def _client(proxy: ProxyServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-secret", max_retries=0)


def _ask(proxy: ProxyServer, messages: list[dict] | None = None, **extra: object) -> dict:  # type: ignore[type-arg]
    stream = _client(proxy).chat.completions.create(
        model="deepseek-v4-flash", stream=True,
        messages=messages or [{"role": "user", "content": "Fix the upload retry."}],
        extra_body={"thinking": {"type": "enabled"}, **extra})
    return _collect(stream)


def test_clean_stream_passes_byte_for_byte(upstream: ScriptedUpstream, proxy: ProxyServer) -> None:
    script = Script.openai(reasoning=clean_reasoning().text, text="Done: 你好 😀", piece_chars=5,
                           flavour="deepseek").delivered(write_bytes=3, keepalive_every=4)
    body = {"model": "m", "stream": True, "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": "hi"}]}
    upstream.enqueue(script, script)
    with httpx.Client(timeout=10) as client:
        direct = client.post(upstream.base_url + "/chat/completions", json=body).content
        through = client.post(proxy.url + "/v1/chat/completions", json=body,
                              headers={"authorization": "Bearer sk-secret"}).content
    # Each response gets its own id and timestamp; everything else is the same bytes.
    same = re.compile(rb'"(id|created)":("[^"]*"|\d+)')
    assert same.sub(b"", through) == same.sub(b"", direct)
    assert b": keep-alive" in through and b'"usage"' in through and len(through) == len(direct)
    assert upstream.requests[1].header("authorization") == "Bearer sk-secret"


def test_reasoning_loop_is_cut_and_retried_without_thinking(
        upstream: ScriptedUpstream, proxy: ProxyServer) -> None:
    upstream.enqueue(Script.openai(reasoning=LOOP, text="never", piece_chars=16,
                                   flavour="deepseek").delivered(delay=0.0005),
                     Script.openai(text=ANSWER, flavour="deepseek"))
    result = _ask(proxy)
    first, retry = upstream.wait_for_requests(2)
    assert first.wait(2) and first.outcome == "client-disconnected"
    assert len(result["reasoning"]) < 1500 < len(LOOP)
    assert result["text"].startswith("[loopbreak] Your reasoning was cut after ")
    assert result["text"].endswith(ANSWER) and result["finish"] == "stop"
    assert retry.body["thinking"] == {"type": "disabled"}
    assert retry.body["messages"][-1]["content"].startswith("[loopbreak]")
    assert "reasoning_effort" not in retry.body


def test_a_continued_stream_ends_with_done(upstream: ScriptedUpstream,
                                           proxy: ProxyServer) -> None:
    """Clients such as DeepSeek Harness fail a stream without ``[DONE]`` (STREAM_CLOSED)."""
    upstream.enqueue(Script.openai(reasoning=LOOP, piece_chars=16), Script.openai(text=ANSWER))
    with httpx.Client(timeout=10) as client:
        body = client.post(proxy.url + "/v1/chat/completions", json={
            "model": "m", "stream": True, "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": "hi"}]}).content
    assert body.endswith(b"data: [DONE]\n\n") and body.count(b"[DONE]") == 1
    assert b'"finish_reason":"stop"' in body


def test_a_hosts_reminder_does_not_start_a_new_turn(upstream: ScriptedUpstream,
                                                    proxy: ProxyServer) -> None:
    """DeepSeek Harness appends a user-role reminder after repeated tool calls; the failures
    before it still count in the same turn."""
    history = failing_tool_history(3)
    history.insert(-2, {"role": "user", "content": "You are repeating the exact same tool call."})
    upstream.enqueue(Script.openai(tool_calls=[ToolCall.of("read", '{"path": "conf.toml"}')]),
                     Script.openai(text="Trying another way."))
    result = _ask(proxy, history)
    assert result["tools"] == {} and len(upstream.wait_for_requests(2)) == 2


def test_async_client_sees_the_same(upstream: ScriptedUpstream, proxy: ProxyServer) -> None:
    upstream.enqueue(Script.openai(reasoning=LOOP, piece_chars=16),
                     Script.openai(text=ANSWER))

    async def main() -> str:
        client = openai.AsyncOpenAI(base_url=proxy.url + "/v1", api_key="k", max_retries=0)
        stream = await client.chat.completions.create(
            model="m", stream=True, messages=[{"role": "user", "content": "hi"}],
            extra_body={"chat_template_kwargs": {"enable_thinking": True}})
        text = ""
        async for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
        await client.close()
        return text

    assert asyncio.run(main()).endswith(ANSWER)
    retry = upstream.wait_for_requests(2)[1]
    assert retry.body["chat_template_kwargs"] == {"enable_thinking": False, "thinking": False}


def test_stop_mode_ends_lawfully_with_the_notice(upstream: ScriptedUpstream,
                                                 proxy_for: ProxyFactory) -> None:
    proxy = proxy_for(Config().replace(**{"recovery.on_trip": "stop"}))
    upstream.enqueue(Script.openai(reasoning=LOOP, text="never", piece_chars=16))
    result = _ask(proxy)
    assert result["finish"] == "stop" and result["text"].startswith("[loopbreak]")
    assert "never" not in result["text"] and len(upstream.requests) == 1


def test_error_mode_raises_in_the_sdk(upstream: ScriptedUpstream,
                                      proxy_for: ProxyFactory) -> None:
    proxy = proxy_for(Config().replace(**{"recovery.on_trip": "error"}))
    upstream.enqueue(Script.openai(reasoning=LOOP, piece_chars=16))
    with pytest.raises(openai.APIError, match="loopbreak cut a looping reasoning stream"):
        _ask(proxy)


def test_one_retry_per_turn_then_stop(upstream: ScriptedUpstream, proxy: ProxyServer) -> None:
    notice = ("[loopbreak] Your reasoning was cut after 960 characters because it kept "
              "repeating (cycle). Do not repeat that reasoning.")
    history = [{"role": "user", "content": "Fix the upload retry."},
               {"role": "assistant", "content": notice + "\n\nLet me look.",
                "tool_calls": [{"id": "c1", "type": "function",
                                "function": {"name": "read", "arguments": "{}"}}]},
               {"role": "tool", "tool_call_id": "c1", "content": "file contents"}]
    upstream.enqueue(Script.openai(reasoning=LOOP, piece_chars=16))
    result = _ask(proxy, history)
    assert len(upstream.requests) == 1 and result["finish"] == "stop"
    assert result["text"].startswith("[loopbreak]")
    # A new user message starts a new turn: the budget is back.
    upstream.enqueue(Script.openai(reasoning=LOOP, piece_chars=16), Script.openai(text=ANSWER))
    result = _ask(proxy, history + [{"role": "assistant", "content": "ok"},
                                    {"role": "user", "content": "again"}])
    assert result["text"].endswith(ANSWER) and len(upstream.requests) == 3


def test_a_looping_answer_is_stopped_not_retried(upstream: ScriptedUpstream,
                                                 proxy: ProxyServer) -> None:
    unit = "The fix above handles the 429 case by waiting before the next attempt.\n"
    upstream.enqueue(Script.openai(text=unit * 50, piece_chars=12))
    result = _ask(proxy)
    assert result["finish"] == "stop" and len(upstream.requests) == 1
    assert "Your output was cut" in result["text"] and len(result["text"]) < 1200


def test_reasoning_field_of_vllm_and_openrouter(upstream: ScriptedUpstream,
                                                proxy: ProxyServer) -> None:
    upstream.enqueue(Script.openai(reasoning=LOOP, piece_chars=16, reasoning_field="reasoning"),
                     Script.openai(text=ANSWER))
    stream = _client(proxy).chat.completions.create(
        model="m", stream=True, messages=[{"role": "user", "content": "hi"}])
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    # The request names no thinking field: the upstream is asked what it is, once.
    assert text.endswith(ANSWER)
    assert [r.path for r in upstream.requests] == [
        "/v1/chat/completions", "/v1/models", "/v1/chat/completions"]


def test_a_cut_never_lands_inside_an_open_tool_call(upstream: ScriptedUpstream,
                                                    proxy: ProxyServer) -> None:
    unit = "Checking the arguments once more before I send them. OK.\n"
    pieces: list[object] = [ToolCall.of("write", {"path": "a.txt", "content": "x" * 200},
                                        piece_chars=4)]
    pieces += [("text", unit[i : i + 9]) for i in range(0, len(unit), 9)] * 30
    upstream.enqueue(Script.from_pieces(pieces, finish_reason="tool_calls",  # type: ignore[arg-type]
                                        dialect="openai"))
    result = _ask(proxy)
    (call,) = result["tools"].values()
    assert json.loads(call["arguments"]) == {"path": "a.txt", "content": "x" * 200}
    # The call went out whole: the answer ends as one with tool calls, so the client runs it.
    assert result["finish"] == "tool_calls" and "Your output was cut" in result["text"]


def test_failing_tool_results_carry_guidance_upstream(upstream: ScriptedUpstream,
                                                      proxy: ProxyServer) -> None:
    upstream.enqueue(Script.openai(text="Let me try another path."))
    _ask(proxy, failing_tool_history(2))
    sent = upstream.wait_for_requests(1)[0].body["messages"]
    assert sent[2]["content"] == "Error: ENOENT: no such file: conf.toml"
    assert sent[4]["content"].startswith("[loopbreak] This exact call to `read` has now failed 2")
    assert sent[4]["content"].endswith("Error: ENOENT: no such file: conf.toml")


def test_a_request_the_history_leaves_alone_goes_upstream_as_the_clients_bytes(
        upstream: ScriptedUpstream, proxy: ProxyServer) -> None:
    """The bytes, not a new serialisation: the client's spacing, key order, escapes (and a
    lone surrogate, which a UTF-8 serialisation could not even write) arrive as sent; a
    request whose history the proxy changes keeps the client's bytes of every message it
    does not change."""
    untouched = (b'{ "stream": true, "model": "m",\n "messages": [{"content": "caf\\u00e9 '
                 b'\\ud800 ok", "role": "user"}],  "thinking": {"type": "enabled"} }')
    body = {"model": "m", "stream": True, "messages": failing_tool_history(2)}
    body["messages"][0]["content"] += " \ud800"
    changed = json.dumps(body, indent=1).encode()
    upstream.enqueue(Script.openai(text="fine"), Script.openai(text="fine"))
    with httpx.Client(timeout=10) as client:
        for content in (untouched, changed):
            client.post(proxy.url + "/v1/chat/completions", content=content,
                        headers={"content-type": "application/json"}).raise_for_status()
    first, second = upstream.wait_for_requests(2)
    assert first.raw_body == untouched
    assert second.raw_body != changed and second.body["messages"][4]["content"].startswith(
        "[loopbreak] This exact call to `read` has now failed 2")
    assert second.body["messages"][0]["content"].endswith(" \ud800")
    assert b'{\n   "role": "user",\n   "content": "Read the config. \\ud800"\n  }' in \
        second.raw_body


def test_a_long_body_is_read_off_the_event_loop(upstream: ScriptedUpstream, proxy: ProxyServer,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A short body is read where the proxy serves its streams, a long one in a worker
    thread (its parse and replay would stall every stream)."""
    from loopbreak.proxy import app

    threads: list[threading.Thread] = []
    read_request = app.read_request

    def recorded(*args: Any) -> app.GuardedRequest:
        threads.append(threading.current_thread())
        return read_request(*args)

    monkeypatch.setattr(app, "read_request", recorded)
    upstream.enqueue(Script.openai(text="short"), Script.openai(text="long"))
    assert _ask(proxy)["text"] == "short"
    long_history = [{"role": "user", "content": "x" * app.READ_IN_THREAD_BYTES}]
    assert _ask(proxy, long_history)["text"] == "long"
    on_loop, off_loop = threads
    assert off_loop is not on_loop and off_loop is not threading.main_thread()
    assert upstream.wait_for_requests(2)[1].body["messages"] == long_history


def test_a_denied_call_is_not_relayed_and_the_model_is_asked_again(
        upstream: ScriptedUpstream, proxy: ProxyServer) -> None:
    denied = ToolCall.of("read", '{"path": "conf.toml"}')
    upstream.enqueue(Script.openai(reasoning="Read it again.", tool_calls=[denied]),
                     Script.openai(tool_calls=[ToolCall.of("glob", '{"pattern": "*.toml"}')]))
    result = _ask(proxy, failing_tool_history(3))
    assert [c["name"] for c in result["tools"].values()] == ["glob"]
    assert result["finish"] == "tool_calls"
    reask = upstream.wait_for_requests(2)[1].body["messages"]
    assert reask[-2]["tool_calls"][0]["function"]["arguments"] == '{"path": "conf.toml"}'
    assert reask[-1]["content"].startswith("[loopbreak] This call to `read` was not run")


def test_a_model_that_insists_gets_a_lawful_end(upstream: ScriptedUpstream,
                                                proxy: ProxyServer) -> None:
    denied = ToolCall.of("read", '{"path": "conf.toml"}')
    upstream.enqueue(Script.openai(tool_calls=[denied]), Script.openai(tool_calls=[denied]))
    result = _ask(proxy, failing_tool_history(3))
    assert result["tools"] == {} and result["finish"] == "stop"
    assert result["text"].startswith("[loopbreak] This call to `read` was not run")
    assert len(upstream.requests) == 2


def test_three_stalled_calls_steer_the_next_request(upstream: ScriptedUpstream,
                                                    proxy: ProxyServer) -> None:
    history: list[dict] = [{"role": "user", "content": "Refactor the parser."}]  # type: ignore[type-arg]
    for i in range(3):
        thought = "".join(f"Idea {i}.{j}: maybe split tokenizer stage {i * 7 + j}. "
                          for j in range(60))
        history.append({"role": "assistant", "content": "", "reasoning_content": thought})
    upstream.enqueue(Script.openai(text="Splitting the tokenizer now."))
    _ask(proxy, history)
    sent = upstream.wait_for_requests(1)[0].body["messages"]
    assert sent[-1]["role"] == "user"
    assert sent[-1]["content"].startswith("[loopbreak] Your last 3 model calls only thought")


@pytest.mark.parametrize("budget", [1 << 26, 0])
def test_a_growing_session_is_resumed_and_steered_at_the_same_request(
        upstream: ScriptedUpstream, proxy_for: ProxyFactory, budget: int) -> None:
    # An agent's requests, each its history so far: the proxy replays each from where the
    # request before left off, and steers at the request a replay from the start steers at;
    # with the checkpoints off (a budget of 0) every request is replayed from the start.
    from loopbreak import ProxyConfig
    from loopbreak._recovery.history import replay

    proxy = proxy_for(proxy=ProxyConfig(replay_checkpoint_chars=budget))

    history: list[dict] = [{"role": "user", "content": "Refactor the parser."}]  # type: ignore[type-arg]
    for i in range(6):
        history.append({"role": "assistant", "content": "Reading.", "tool_calls": [
            {"id": f"c{i}", "type": "function",
             "function": {"name": "read", "arguments": f'{{"part": {i}}}'}}]})
        history.append({"role": "tool", "tool_call_id": f"c{i}", "content": f"part {i}"})
    steered = []
    for i in range(4):
        thought = "".join(f"Idea {j}: maybe split tokenizer stage {j}. " for j in range(60))
        history.append({"role": "assistant", "content": "", "reasoning_content": thought})
        upstream.enqueue(Script.openai(text="Splitting the tokenizer now."))
        _ask(proxy, history)
        sent = upstream.wait_for_requests(i + 1)[i].body["messages"]
        steered.append(sent[-1]["role"] == "user" and "[loopbreak]" in sent[-1]["content"])
        fresh = replay({"messages": history}, "openai", Config())
        assert steered[-1] == (fresh.reaction is not None and fresh.reaction.kind == "steer")
    assert steered == [False, False, True, False]
    assert proxy.app._replays.resumed == (3 if budget else 0)


def test_a_failing_session_is_resumed_while_each_request_is_rewritten(
        upstream: ScriptedUpstream, proxy_for: ProxyFactory) -> None:
    # The proxy's checkpoints keep the request's own message objects, not copies: every
    # request it rewrites (guidance put into the failing results) must leave them as the
    # client sent them, or the session's next request would no longer resume.
    proxy = proxy_for()
    for calls in range(6, 10):
        upstream.enqueue(Script.openai(text="Let me try another path."))
        _ask(proxy, failing_tool_history(calls))
        sent = upstream.wait_for_requests(calls - 5)[-1].body["messages"]
        assert sent[-1]["content"].startswith("[loopbreak] This exact call to `read`")
    assert proxy.app._replays.resumed == 3


def test_a_changed_checkpoint_budget_starts_the_checkpoints_over() -> None:
    # The proxy section is re-read while the proxy runs: a new budget applies to the next
    # request (the checkpoints are a cache: starting over loses only work).
    from loopbreak.proxy.app import ProxyApp

    app = ProxyApp("http://127.0.0.1:9")
    kept = app._checkpoints(1 << 26)
    assert kept is app._checkpoints(1 << 26) and kept is not None
    smaller = app._checkpoints(1 << 20)
    assert smaller is not None and smaller is not kept and smaller.max_chars == 1 << 20
    assert app._checkpoints(0) is None


def test_non_streaming_reasoning_only_loop_is_retried(upstream: ScriptedUpstream,
                                                      proxy: ProxyServer) -> None:
    upstream.enqueue(Script.openai(reasoning=LOOP), Script.openai(text=ANSWER))
    response = _client(proxy).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}],
        extra_body={"thinking": {"type": "enabled"}})
    assert response.choices[0].message.content.endswith(ANSWER)
    assert response.choices[0].message.content.startswith("[loopbreak]")
    assert upstream.wait_for_requests(2)[1].body["thinking"] == {"type": "disabled"}


def test_non_streaming_answer_passes_with_a_trip_header(upstream: ScriptedUpstream,
                                                        proxy: ProxyServer) -> None:
    upstream.enqueue(Script.openai(reasoning=LOOP, text="The answer."))
    with httpx.Client(timeout=10) as client:
        response = client.post(proxy.url + "/v1/chat/completions", json={
            "model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert response.headers["x-loopbreak-trip"] == "cycle"
    assert response.json()["choices"][0]["message"]["content"] == "The answer."
    assert len(upstream.requests) == 1


def test_a_whole_answer_whose_text_loops_is_cut_with_the_notice(upstream: ScriptedUpstream,
                                                                proxy: ProxyServer) -> None:
    # What the streamed route would have relayed: the text up to where the rule fired, then
    # the notice and a normal finish; the client keeps no loop in its history.
    upstream.enqueue(Script.openai(text=LOOP))
    response = _client(proxy).chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": "hi"}])
    choice = response.parse().choices[0]
    said, _, notice = (choice.message.content or "").partition("\n\n[loopbreak]")
    assert notice and len(said) < len(LOOP) // 2 and LOOP.startswith(said)
    assert choice.finish_reason == "stop"
    assert response.headers["x-loopbreak-trip"] == "cycle"
    assert len(upstream.requests) == 1


def test_a_whole_looping_answer_keeps_its_tool_calls(upstream: ScriptedUpstream,
                                                      proxy_for: ProxyFactory) -> None:
    proxy = proxy_for(Config().replace(**{"recovery.notice": False}))
    call = ToolCall.of("write", {"path": "a.py", "content": "x = 1"}, id="call_w")
    upstream.enqueue(Script.openai(text=LOOP, tool_calls=[call], finish_reason="tool_calls"))
    choice = _client(proxy).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}]).choices[0]
    assert choice.message.content and LOOP.startswith(choice.message.content)
    assert len(choice.message.content) < len(LOOP) // 2  # cut, and no notice: it is off
    assert [c.function.name for c in choice.message.tool_calls or []] == ["write"]  # type: ignore[union-attr]
    assert choice.finish_reason == "tool_calls"


def test_non_streaming_loop_in_error_mode_is_an_error_the_sdk_does_not_retry(
        upstream: ScriptedUpstream, proxy_for: ProxyFactory) -> None:
    proxy = proxy_for(Config().replace(**{"recovery.on_trip": "error"}))
    upstream.enqueue(Script.openai(reasoning=LOOP))
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="k", max_retries=2)
    with pytest.raises(openai.APIStatusError) as raised:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    response = raised.value.response
    assert response.status_code == 502 and response.headers["x-should-retry"] == "false"
    assert response.headers["x-loopbreak-trip"] == "cycle"
    assert response.json()["error"]["code"] == "loop_detected"
    assert len(upstream.requests) == 1  # a retried request would loop (and bill) again


def test_the_upstream_is_closed_quickly_after_a_cut(upstream: ScriptedUpstream,
                                                    proxy: ProxyServer) -> None:
    endless = Script.openai(reasoning="Go. OK. Writing. ", piece_chars=6).repeated(0) \
        .delivered(delay=0.001)
    upstream.enqueue(endless, Script.openai(text=ANSWER))
    started = time.monotonic()
    assert _ask(proxy)["text"].endswith(ANSWER)
    first = upstream.requests[0]
    assert first.wait(2) and first.outcome == "client-disconnected"
    assert first.ended_at is not None and first.ended_at - started < 5


def test_a_large_tool_argument_in_small_pieces_arrives_whole(upstream: ScriptedUpstream,
                                                              proxy: ProxyServer) -> None:
    # 64 kB of arguments in 4-character events: the proxy keeps them as pieces (the call
    # guard joins them once), and relays every event as it came.
    content = "".join(f"line {i}: 值 ok\n" for i in range(4_000))
    call = ToolCall.of("write", {"path": "big.txt", "content": content}, piece_chars=4)
    upstream.enqueue(Script.openai(reasoning="Write the file.", tool_calls=[call],
                                   flavour="deepseek"))
    result = _ask(proxy)
    (tool,) = result["tools"].values()
    assert tool["name"] == "write" and tool["arguments"] == call.arguments_text
    assert json.loads(tool["arguments"])["content"] == content
    assert result["finish"] == "tool_calls"
