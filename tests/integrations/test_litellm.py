"""``loopbreak.integrations.litellm`` with the real LiteLLM.

Fast tier: the hook's iterator fed real LiteLLM chunk objects, hand-made and as
``litellm.acompletion`` streams them from the scripted upstream. Slow tier: the real
``litellm`` proxy, started once for the module from the config and the command in
``docs/integrations/litellm.md`` (only the model's address changed, to the scripted
upstream on loopback), driven with the real ``openai`` SDK.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from loopbreak import Config, RecoveryConfig, StallConfig
from loopbreak._engine.trip import Trip
from loopbreak._recovery.history import ReplayCheckpoints
from loopbreak._samples import clean_reasoning, verbatim_loop
from loopbreak.testing import Script, ScriptedUpstream, Text, ToolCall, split_chars

# LiteLLM fetches its model cost map from the internet when imported, unless told not to.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
litellm = pytest.importorskip("litellm", reason="litellm is not installed: "
                              "pip install '.[litellm]'")
from litellm.types.utils import (  # noqa: E402
    Delta,
    ModelResponseStream,
    StreamingChoices,
)

from loopbreak.integrations.litellm import LoopbreakGuard, guard  # noqa: E402
from support import failing_tool_history  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DOC = (REPO / "docs" / "integrations" / "litellm.md").read_text(encoding="utf-8")
DOC_UPSTREAM = "https://api.deepseek.com/v1"
"""The model address in the documented config: the one thing the test changes."""

LOOP = verbatim_loop().text
CLEAN = clean_reasoning().text
MESSAGES = [{"role": "user", "content": "Fix the retry."}]
REQUEST: dict[str, Any] = {"model": "deepseek-reasoner", "messages": MESSAGES}
STOP = Config(recovery=RecoveryConfig(on_trip="stop"))
"""Cuts end the stream at once (the default re-asks a reasoning loop first)."""


# --- the hook alone, with real LiteLLM chunk objects -----------------------------------------

def _chunk(*, reasoning: str | None = None, text: str | None = None,
           tools: list[dict[str, Any]] | None = None, finish: str | None = None,
           role: str | None = None) -> ModelResponseStream:
    return ModelResponseStream(
        id="chatcmpl-1", created=1700000000, model="deepseek-reasoner",
        choices=[StreamingChoices(index=0, finish_reason=finish, delta=Delta(
            role=role, content=text, reasoning_content=reasoning, tool_calls=tools))])


def _tool(index: int, args: str, *, name: str | None = None,
          id: str | None = None) -> dict[str, Any]:
    call: dict[str, Any] = {"index": index, "function": {"arguments": args}}
    if name is not None:
        call.update(id=id, type="function")
        call["function"]["name"] = name
    return call


class _Upstream:
    """An async iterator of chunks that counts what was read and whether it was closed."""

    def __init__(self, chunks: list[Any]) -> None:
        self.chunks = chunks
        self.read = 0
        self.closed = False

    def __aiter__(self) -> _Upstream:
        return self

    async def __anext__(self) -> Any:
        if self.closed or self.read == len(self.chunks):
            raise StopAsyncIteration
        self.read += 1
        return self.chunks[self.read - 1]

    async def aclose(self) -> None:
        self.closed = True


def _through(hook: LoopbreakGuard, response: Any,
             request: dict[str, Any] | None = None) -> list[Any]:
    async def main() -> list[Any]:
        return [chunk async for chunk in hook.async_post_call_streaming_iterator_hook(
            user_api_key_dict=None, response=response, request_data=request or REQUEST)]
    return asyncio.run(main())


def _delta(chunk: Any, name: str) -> Any:
    """A field of a LiteLLM chunk's delta (LiteLLM drops unset fields from the object)."""
    return getattr(chunk.choices[0].delta, name, None) if chunk.choices else None


def _reasoning(chunks: list[Any]) -> str:
    return "".join(_delta(c, "reasoning_content") or "" for c in chunks)


def _content(chunks: list[Any]) -> str:
    return "".join(_delta(c, "content") or "" for c in chunks)


def test_a_loop_is_cut_the_upstream_closed_and_the_stream_ended_lawfully() -> None:
    pieces = split_chars(LOOP, 16)
    upstream = _Upstream([_chunk(role="assistant", reasoning=""),
                          *(_chunk(reasoning=p) for p in pieces), _chunk(finish="stop")])
    hook = LoopbreakGuard(STOP)
    out = _through(hook, upstream)
    (trip,) = hook.trips
    assert trip.rule == "cycle" and trip.channel == "reasoning"
    # The chunks before the trip went out as they came (the same objects), then nothing more
    # was read and the upstream was closed.
    assert out[:-1] == upstream.chunks[: len(out) - 1]
    assert all(a is b for a, b in zip(out[:-1], upstream.chunks))
    assert upstream.closed and upstream.read == len(out)
    assert _reasoning(out) == LOOP[: trip.offset - 16]
    last = out[-1]
    assert isinstance(last, ModelResponseStream)
    assert last.choices[0].finish_reason == "stop"
    assert _delta(last, "content") == hook.notice(trip) == (
        f"[loopbreak] Your reasoning was cut after {trip.offset} characters because it kept "
        "repeating "
        "(cycle). Do not repeat that reasoning. Carry on with the task from where it stands: "
        "take the next concrete step.")
    assert (last.id, last.created, last.model) == ("chatcmpl-1", 1700000000, "deepseek-reasoner")


def test_a_clean_stream_is_the_same_objects() -> None:
    chunks = [_chunk(role="assistant", reasoning=""),
              *(_chunk(reasoning=p) for p in split_chars(CLEAN, 9)),
              *(_chunk(text=p) for p in split_chars("I will read the file first.", 5)),
              _chunk(tools=[_tool(0, '{"path"', name="read", id="call_a")]),
              _chunk(tools=[_tool(0, ': "a.py"}')]), _chunk(finish="tool_calls")]
    upstream = _Upstream(chunks)
    hook = LoopbreakGuard(Config())
    out = _through(hook, upstream)
    assert len(out) == len(chunks) and all(a is b for a, b in zip(out, chunks))
    assert not hook.trips and not upstream.closed


def test_a_trip_inside_an_open_tool_call_waits_for_the_call_to_close() -> None:
    # A text loop streams while a tool call is open: the cut must not truncate its arguments.
    args = split_chars('{"path": "a.py", "text": "retry = 3"}', 8)
    chunks = [_chunk(role="assistant", text=""),
              _chunk(tools=[_tool(0, args[0], name="write", id="call_w")]),
              *(_chunk(text=p) for p in split_chars(LOOP[:3000], 16)),
              *(_chunk(tools=[_tool(0, a)]) for a in args[1:]),
              _chunk(finish="tool_calls")]
    upstream = _Upstream(chunks)
    hook = LoopbreakGuard(Config())
    out = _through(hook, upstream)
    (trip,) = hook.trips
    assert trip.channel == "text" and trip.offset < 3000
    # Everything up to the finish went out; the finish gave way to the notice.
    assert all(a is b for a, b in zip(out[:-1], chunks[:-1])) and len(out) == len(chunks)
    sent = "".join(c.choices[0].delta.tool_calls[0].function.arguments
                   for c in out if _delta(c, "tool_calls"))
    assert sent == "".join(args)
    last = out[-1].choices[0]
    assert last.finish_reason == "tool_calls"
    assert _delta(out[-1], "content").startswith("[loopbreak] Your output was cut after")


def test_a_chunk_that_closes_the_tool_call_goes_out_without_its_finish() -> None:
    # Some providers put the last argument piece and the finish in one chunk.
    chunks = [_chunk(tools=[_tool(0, '{"a": ', name="f", id="call_f")]),
              *(_chunk(text=p) for p in split_chars(LOOP[:3000], 16)),
              _chunk(tools=[_tool(0, "1}")], finish="tool_calls")]
    out = _through(LoopbreakGuard(Config()), _Upstream(chunks))
    closing = out[-2].choices[0]
    assert closing.delta.tool_calls[0].function.arguments == "1}"
    assert closing.finish_reason is None and chunks[-1].choices[0].finish_reason == "tool_calls"
    assert out[-1].choices[0].finish_reason == "tool_calls"


def test_notice_settings_and_language() -> None:
    chunks = [_chunk(reasoning=p) for p in split_chars(LOOP, 16)]
    quiet = _through(LoopbreakGuard(Config(recovery=RecoveryConfig(notice=False,
                                                                   on_trip="stop"))),
                     _Upstream(chunks))
    assert quiet[-1].choices[0].finish_reason == "stop"
    assert _delta(quiet[-1], "content") is None
    chinese = {"model": "m", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "请修复上传模块里的重试逻辑，它会无限循环。"}]}]}
    hook = LoopbreakGuard(STOP)
    out = _through(hook, _Upstream(chunks), chinese)
    (trip,) = hook.trips
    notice = _delta(out[-1], "content")
    assert notice.startswith(f"[loopbreak] 你的思考在 {trip.offset} 个字符处被截断")


def test_what_is_not_a_chat_chunk_passes_through() -> None:
    items: list[Any] = [b'event: message_start\ndata: {"type": "message_start"}\n\n',
                        {"type": "response.output_text.delta", "delta": LOOP}, "data: x"]
    out = _through(LoopbreakGuard(Config()), _Upstream(items))
    assert out == items


def test_configuration_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    toml = tmp_path / "loopbreak.toml"
    toml.write_text("[recovery]\nlanguage = \"zh\"\n", encoding="utf-8")
    monkeypatch.setattr(litellm, "callback_settings", {"loopbreak": {"config": str(toml)}})
    assert LoopbreakGuard().config.recovery.language == "zh"
    monkeypatch.setattr(litellm, "callback_settings", {})
    monkeypatch.setenv("LOOPBREAK_CONFIG", str(toml))
    assert LoopbreakGuard().config.recovery.language == "zh"
    monkeypatch.setenv("LOOPBREAK_RECOVERY__LANGUAGE", "en")  # variables override the file
    assert LoopbreakGuard().config.recovery.language == "en"
    monkeypatch.delenv("LOOPBREAK_CONFIG")
    monkeypatch.delenv("LOOPBREAK_RECOVERY__LANGUAGE")
    assert LoopbreakGuard().config.recovery.language == "auto"
    assert LoopbreakGuard(config_path=toml).config.recovery.language == "zh"


def test_litellm_loads_the_instance_the_docs_name() -> None:
    from litellm.integrations.custom_logger import CustomLogger
    from litellm.proxy.types_utils.utils import get_instance_fn

    (name,) = re.findall(r'callbacks: \["([\w.]+)"\]', DOC)
    assert get_instance_fn(name) is guard
    assert isinstance(guard, CustomLogger)
    # The proxy wraps a stream only for callbacks whose own class defines the hook.
    assert "async_post_call_streaming_iterator_hook" in type(guard).__dict__


def _direct_request(up: ScriptedUpstream, messages: list[dict[str, Any]] | None = None,
                    model: str = "openai/deepseek-reasoner") -> dict[str, Any]:
    """The keyword arguments of a direct ``litellm.acompletion`` stream from ``up``: what
    the hook gets as ``request_data`` outside the proxy (and re-asks with)."""
    return {"model": model, "messages": messages or MESSAGES, "api_base": up.base_url,
            "api_key": "sk-test", "stream": True, "max_retries": 0}


def _acompletion_through_hook(up: ScriptedUpstream, hook: LoopbreakGuard,
                              request: dict[str, Any] | None = None,
                              ) -> tuple[list[Any], bool]:
    """``litellm.acompletion`` streaming from ``up`` (its real chunk objects and stream
    wrapper) through the hook; and whether every upstream exchange had ended by the time
    the hook's iteration was over, with LiteLLM's stream object still alive."""
    request = request or _direct_request(up)

    async def main() -> tuple[list[Any], bool]:
        stream = await litellm.acompletion(**request)
        out = [chunk async for chunk in hook.async_post_call_streaming_iterator_hook(
            user_api_key_dict=None, response=stream, request_data=request)]
        ended = all([await r.wait_async(5) for r in up.requests])
        assert stream is not None  # alive until here: nothing but the hook closed it
        return out, ended
    return asyncio.run(main())


def test_litellm_streams_through_the_hook(upstream: ScriptedUpstream) -> None:
    upstream.enqueue(Script.openai(reasoning=LOOP, text="never", piece_chars=16,
                                   flavour="deepseek").delivered(delay=0.002))
    hook = LoopbreakGuard(STOP)
    out, ended = _acompletion_through_hook(upstream, hook)
    assert all(isinstance(c, ModelResponseStream) for c in out)
    (trip,) = hook.trips
    assert _reasoning(out) == LOOP[: trip.offset - 16]
    assert out[-1].choices[0].finish_reason == "stop"
    assert _content(out) == hook.notice(trip)
    (record,) = upstream.requests
    assert ended and record.outcome == "client-disconnected"
    assert record.events_sent < 400  # of 1250: generation stopped at the cut

    upstream.reset([Script.openai(reasoning=CLEAN, text="Done.", piece_chars=9,
                                  flavour="deepseek")])
    out, ended = _acompletion_through_hook(upstream, hook)
    assert _reasoning(out) == CLEAN and _content(out) == "Done."
    assert out[-1].choices[0].finish_reason == "stop" and len(hook.trips) == 1
    assert ended and upstream.requests[0].outcome == "completed"


def _finishes(chunks: list[Any]) -> list[str]:
    return [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]


def test_a_reasoning_loop_is_re_asked_without_thinking(upstream: ScriptedUpstream) -> None:
    upstream.reset([Script.openai(reasoning=LOOP, text="never", piece_chars=16,
                                  flavour="deepseek").delivered(delay=0.002),
                    Script.openai(text="Bounded the retry at 3.", piece_chars=5,
                                  flavour="deepseek")])
    hook = LoopbreakGuard(Config())
    out, ended = _acompletion_through_hook(upstream, hook)
    (trip,) = hook.trips
    notice = hook.notice(trip)
    # One client stream: the loop up to the cut, the notice, then the new answer; one finish.
    assert _reasoning(out) == LOOP[: trip.offset - 16]
    assert _content(out) == notice + "\n\n" + "Bounded the retry at 3."
    assert _finishes(out) == ["stop"] and out[-1].choices[0].finish_reason == "stop"
    first, second = upstream.requests
    assert ended and first.outcome == "client-disconnected" and second.outcome == "completed"
    # The re-ask: thinking off in DeepSeek's dialect, the notice as the newest user text.
    assert second.body["thinking"] == {"type": "disabled"}
    assert second.body["messages"] == [*MESSAGES, {"role": "user", "content": notice}]
    assert "thinking" not in first.body


def test_a_second_loop_ends_the_stream_with_the_notice(upstream: ScriptedUpstream) -> None:
    looping = Script.openai(reasoning=LOOP, text="never", piece_chars=16,
                            flavour="deepseek").delivered(delay=0.002)
    upstream.reset([looping, looping])
    hook = LoopbreakGuard(Config())
    out, ended = _acompletion_through_hook(upstream, hook)
    first, second = hook.trips
    assert _content(out) == hook.notice(first) + "\n\n" + hook.notice(second)
    assert _finishes(out) == ["stop"]
    assert ended and [r.outcome for r in upstream.requests] == ["client-disconnected"] * 2


def test_a_client_that_leaves_during_the_re_ask_closes_it(upstream: ScriptedUpstream) -> None:
    upstream.reset([Script.openai(reasoning=LOOP, text="never", piece_chars=16,
                                  flavour="deepseek").delivered(delay=0.002),
                    Script.openai(text="x" * 4000, piece_chars=4,
                                  flavour="deepseek").delivered(delay=0.005)])
    hook = LoopbreakGuard(Config())
    request = _direct_request(upstream)

    async def main() -> list[str]:
        stream = await litellm.acompletion(**request)
        answer: list[str] = []
        hook_stream = hook.async_post_call_streaming_iterator_hook(
            user_api_key_dict=None, response=stream, request_data=request)
        async for chunk in hook_stream:
            text = _delta(chunk, "content") or ""
            if text.startswith("x"):
                answer.append(text)
                if len(answer) == 5:
                    break
        await hook_stream.aclose()  # what the LiteLLM proxy does when its client goes
        assert all([await r.wait_async(5) for r in upstream.requests])
        return answer

    assert asyncio.run(main()) == ["xxxx"] * 5
    first, second = upstream.requests
    assert first.outcome == second.outcome == "client-disconnected"
    assert second.events_sent < 100  # of 1000: the re-ask stopped generating too


def test_one_re_ask_per_turn_read_from_the_history() -> None:
    asked: list[dict[str, Any]] = []

    async def reissue(kwargs: dict[str, Any]) -> Any:
        asked.append(kwargs)
        return _Upstream([_chunk(text="again")])

    hook = LoopbreakGuard(Config(), reissue=reissue)
    earlier = hook.notice(Trip("cycle", "reasoning", 960, 960))
    # This turn already had a cut: the model's message carries its notice and a tool call.
    messages = [*MESSAGES,
                {"role": "assistant", "content": earlier, "tool_calls": [
                    {"id": "call_a", "type": "function",
                     "function": {"name": "read", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "call_a", "content": "retry = 3"}]
    chunks = [_chunk(reasoning=p) for p in split_chars(LOOP, 16)]
    out = _through(hook, _Upstream(chunks), {"model": "deepseek-reasoner", "messages": messages})
    assert not asked and _finishes(out) == ["stop"]
    assert _content(out).startswith("[loopbreak] Your reasoning was cut after")
    # A note loopbreak itself put into the request (a stall steer) starts no new turn.
    steered = [*MESSAGES, {"role": "assistant", "content": earlier},
               {"role": "user", "content": "[loopbreak] Your last 3 model calls only thought."}]
    out = _through(hook, _Upstream(chunks), {"model": "deepseek-reasoner", "messages": steered})
    assert not asked and _finishes(out) == ["stop"]
    # A new user message starts a new turn: the re-ask is there again.
    out = _through(hook, _Upstream(chunks), {"model": "deepseek-reasoner", "messages": [
        *messages, {"role": "assistant", "content": "Done."},
        {"role": "user", "content": "Now the upload."}]})
    assert len(asked) == 1 and _content(out).endswith("again")


def test_a_failed_re_ask_still_ends_lawfully() -> None:
    async def reissue(kwargs: dict[str, Any]) -> Any:
        raise litellm.APIConnectionError(message="refused", llm_provider="openai",
                                         model="deepseek-reasoner")

    hook = LoopbreakGuard(Config(), reissue=reissue)
    out = _through(hook, _Upstream([_chunk(reasoning=p) for p in split_chars(LOOP, 16)]))
    (trip,) = hook.trips
    assert _content(out) == hook.notice(trip) + "\n\n"
    assert _finishes(out) == ["stop"] and out[-1].choices[0].finish_reason == "stop"


def test_an_anthropic_model_is_re_asked_with_thinking_disabled(
        upstream: ScriptedUpstream) -> None:
    # LiteLLM's own Anthropic provider: thinking deltas arrive as reasoning_content.
    upstream.reset([Script.anthropic(reasoning=LOOP, text="never", piece_chars=16
                                     ).delivered(delay=0.002),
                    Script.anthropic(text="Bounded the retry at 3.", piece_chars=5)])
    request = {**_direct_request(upstream, model="anthropic/claude-sonnet-4-5"),
               "api_base": upstream.url,  # LiteLLM adds /v1/messages itself
               "thinking": {"type": "enabled", "budget_tokens": 2048}, "max_tokens": 4096}
    hook = LoopbreakGuard(Config())
    out, ended = _acompletion_through_hook(upstream, hook, request)
    (trip,) = hook.trips
    assert trip.channel == "reasoning" and _reasoning(out) == LOOP[: trip.offset - 16]
    assert _content(out) == hook.notice(trip) + "\n\n" + "Bounded the retry at 3."
    assert _finishes(out)[-1] == "stop" and len(_finishes(out)) == 1
    first, second = upstream.requests
    assert first.path.endswith("/v1/messages") and second.path.endswith("/v1/messages")
    assert first.body["thinking"]["type"] == "enabled"
    assert second.body["thinking"] == {"type": "disabled"}
    assert second.body["messages"][-1]["content"][-1]["text"] == hook.notice(trip)
    assert ended and first.outcome == "client-disconnected"


def test_retry_request_per_dialect() -> None:
    from types import SimpleNamespace

    from loopbreak.integrations.litellm import retry_request

    def deployment(model: str) -> Any:
        return SimpleNamespace(litellm_params=SimpleNamespace(model=model))

    proxied = {"model": "m", "messages": MESSAGES, "stream": True, "metadata": {"k": 1},
               "litellm_call_id": "c1", "litellm_logging_obj": object(), "secret_fields": {},
               "stream_options": {"include_usage": True}, "_litellm_strip_stream_usage": True}
    vllm = retry_request({**proxied, "deployment": deployment("hosted_vllm/qwen3")}, "N")
    assert vllm == {"model": "m", "messages": [*MESSAGES, {"role": "user", "content": "N"}],
                    "stream": True, "metadata": {"k": 1}, "extra_body": {
                        "chat_template_kwargs": {"enable_thinking": False, "thinking": False}}}
    claude = retry_request({**proxied, "deployment": deployment("anthropic/claude-sonnet-4-5"),
                            "thinking": {"type": "enabled", "budget_tokens": 2048}}, "N")
    assert claude["thinking"] == {"type": "disabled"} and "extra_body" not in claude
    assert retry_request({**proxied, "deployment": deployment("anthropic/claude-x")},
                         "N")["thinking"] == {"type": "disabled"}
    ollama = retry_request({**proxied, "deployment": deployment("ollama_chat/qwen3")}, "N")
    assert ollama["extra_body"] == {"think": False}
    openai_model = retry_request({**proxied, "model": "openai/o4-mini",
                                  "reasoning_effort": "high"}, "N")
    assert openai_model["reasoning_effort"] == "low" and "extra_body" not in openai_model
    deepseek = retry_request({**proxied, "deployment": deployment("deepseek/deepseek-reasoner"),
                              "extra_body": {"top_k": 5}}, "N")
    assert deepseek["extra_body"] == {"top_k": 5, "thinking": {"type": "disabled"}}
    # An unknown model gets the note and nothing else; the client's usage request stays.
    plain = retry_request({**proxied, "_litellm_strip_stream_usage": False,
                           "deployment": deployment("openai/some-model")}, "N")
    assert "extra_body" not in plain and plain["stream_options"] == {"include_usage": True}
    assert "stream_options" not in vllm
    # Configured dialects win over the provider's name; the request is not changed.
    forced = retry_request({**proxied, "deployment": deployment("openai/qwen3")}, "N",
                           Config(recovery=RecoveryConfig(dialect="vllm")))
    assert forced["extra_body"]["chat_template_kwargs"]["enable_thinking"] is False
    assert proxied["messages"] == MESSAGES and "deployment" not in proxied


def _stalled_history() -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [{"role": "user", "content": "Refactor the parser."}]
    for i in range(3):
        thought = "".join(f"Idea {i}.{j}: maybe split tokenizer stage {i * 7 + j}. "
                          for j in range(60))
        history.append({"role": "assistant", "content": "", "reasoning_content": thought})
    return history


def _pre_call(hook: LoopbreakGuard, messages: list[dict[str, Any]],
              call_type: str = "completion") -> Any:
    data = {"model": "deepseek-reasoner", "messages": messages, "stream": True}
    return asyncio.run(hook.async_pre_call_hook(None, None, data, call_type))


def test_pre_call_puts_guidance_into_failing_results() -> None:
    history = failing_tool_history(2)
    sent = _pre_call(LoopbreakGuard(Config()), history)["messages"]
    assert sent[2]["content"] == "Error: ENOENT: no such file: conf.toml"
    assert sent[4]["content"].startswith("[loopbreak] This exact call to `read` has now failed 2")
    assert sent[4]["content"].endswith("Error: ENOENT: no such file: conf.toml")
    assert history == failing_tool_history(2)  # the caller's list is not changed
    # One failure is no pattern yet: nothing changes.
    assert _pre_call(LoopbreakGuard(Config()), failing_tool_history(1))["messages"] == \
        failing_tool_history(1)


def test_pre_call_applies_the_stall_reaction() -> None:
    sent = _pre_call(LoopbreakGuard(Config()), _stalled_history())["messages"]
    assert sent[:-1] == _stalled_history()
    assert sent[-1]["role"] == "user"
    assert sent[-1]["content"].startswith("[loopbreak] Your last 3 model calls only thought")
    cancel = LoopbreakGuard(Config(stall=StallConfig(reaction="cancel")))
    answer = _pre_call(cancel, _stalled_history())
    assert isinstance(answer, str) and answer.startswith("[loopbreak]")
    warn = LoopbreakGuard(Config(stall=StallConfig(reaction="warn")))
    assert _pre_call(warn, _stalled_history())["messages"] == _stalled_history()


def test_pre_call_resumes_a_growing_history_and_judges_it_the_same() -> None:
    # An agent's requests through LiteLLM's proxy, its history one failing call longer each
    # time: each is replayed from where the one before left off, and what the hook sends is
    # what a hook that replays every history from its first message sends.
    hook, fresh = LoopbreakGuard(Config()), LoopbreakGuard(Config())
    for times in range(1, 9):
        history = failing_tool_history(times)
        sent = _pre_call(hook, history)
        fresh._replays = ReplayCheckpoints()  # nothing kept: a replay from the start
        assert sent == _pre_call(fresh, history)
    assert hook._replays.resumed == 4  # from the fifth call on, four calls follow a checkpoint
    assert fresh._replays.resumed == 0


def test_pre_call_judgement_reaches_the_stream_of_the_same_call() -> None:
    # The pre-call hook puts guidance into the results; the stream of the same call is still
    # judged on the history as the client sent it (so the repeated call is denied), and the
    # judgements it keeps for calls that never stream stay bounded.
    hook = LoopbreakGuard(Config(), reissue=lambda kwargs: _no_reissue())
    data = {"model": "m", "messages": failing_tool_history(3), "litellm_call_id": "call-1",
            "stream": True}
    data = asyncio.run(hook.async_pre_call_hook(None, None, data, "completion"))
    assert data["messages"] != failing_tool_history(3)
    out = _through(hook, _Upstream(_calling("read", '{"path": "conf.toml"}', "call_r")), data)
    assert _tool_names(out) == [] and _content(out).startswith("[loopbreak] This call to")

    async def many(count: int, stream: bool) -> None:
        for i in range(count):
            await hook.async_pre_call_hook(None, None, {
                "messages": [{"role": "user", "content": "hi"}], "litellm_call_id": f"x{i}",
                "stream": stream}, "completion")

    asyncio.run(many(5000, stream=False))
    assert len(hook._views) == 0  # a call that is not streamed never asks for its judgement
    asyncio.run(many(5000, stream=True))
    assert len(hook._views) == 1024


def test_kept_judgements_hold_no_gram_sets_and_expire(monkeypatch: pytest.MonkeyPatch) -> None:
    """A view kept for a stream once held the stall rule's 4-gram set of the last call:
    megabytes each with real reasoning, thousands of them."""
    import tracemalloc

    import loopbreak.integrations.litellm as module

    rng = random.Random(7)
    words = ["split", "token", "stage", "queue", "retry", "cache", "shard", "batch", "merge"]

    def history() -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = [{"role": "user", "content": "Plan the pipeline."}]
        for _ in range(3):
            thought = " ".join(f"{rng.choice(words)}{rng.randrange(10**6)}" for _ in range(25_000))
            out.append({"role": "assistant", "content": "", "reasoning_content": thought})
        return out

    hook = LoopbreakGuard(Config())
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(4):
            data = {"model": "m", "messages": history(), "litellm_call_id": f"big{i}",
                    "stream": True}
            asyncio.run(hook.async_pre_call_hook(None, None, data, "completion"))
            del data
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(hook._views) == 4 and kept < 2 << 20, f"{kept:,} bytes kept for 4 views"
    clock = [time.monotonic() + 601]
    monkeypatch.setattr(module.time, "monotonic", lambda: clock[0])
    asyncio.run(hook.async_pre_call_hook(None, None, {
        "model": "m", "messages": [{"role": "user", "content": "hi"}],
        "litellm_call_id": "late", "stream": True}, "completion"))
    assert list(hook._views) == ["late"]


async def _no_reissue() -> Any:
    raise litellm.APIConnectionError(message="refused", llm_provider="openai", model="m")


def test_pre_call_leaves_other_routes_alone() -> None:
    data = _pre_call(LoopbreakGuard(Config()), failing_tool_history(2), call_type="embedding")
    assert data["messages"] == failing_tool_history(2)


def _tool_names(chunks: list[Any]) -> list[str]:
    return [call.function.name for c in chunks for call in (_delta(c, "tool_calls") or [])
            if call.function and call.function.name]


def _calling(name: str, args: str, call_id: str) -> list[Any]:
    """A model answer that calls one tool, its arguments in two pieces."""
    return [_chunk(role="assistant", reasoning="Read it again."),
            _chunk(tools=[_tool(0, args[:5], name=name, id=call_id)]),
            _chunk(tools=[_tool(0, args[5:])]), _chunk(finish="tool_calls")]


def test_a_denied_call_is_not_relayed_and_the_model_is_asked_again() -> None:
    asked: list[dict[str, Any]] = []
    again = _calling("glob", '{"pattern": "*.toml"}', "call_g")

    async def reissue(kwargs: dict[str, Any]) -> Any:
        asked.append(kwargs)
        return _Upstream(again)

    first = _Upstream(_calling("read", '{"path": "conf.toml"}', "call_r"))
    request = {"model": "deepseek-reasoner", "messages": failing_tool_history(3), "stream": True}
    out = _through(LoopbreakGuard(Config(), reissue=reissue), first, request)
    assert _tool_names(out) == ["glob"] and _finishes(out) == ["tool_calls"]
    assert out[-len(again):] == again  # the second answer as it came
    assert first.closed
    (kwargs,) = asked
    denied_call, denial = kwargs["messages"][-2:]
    assert kwargs["messages"][:-2] == failing_tool_history(3) and kwargs["stream"] is True
    assert denied_call["tool_calls"] == [{"id": "call_r", "type": "function", "function": {
        "name": "read", "arguments": '{"path": "conf.toml"}'}}]
    assert denial["tool_call_id"] == "call_r"
    assert denial["content"].startswith("[loopbreak] This call to `read` was not run")


def test_a_model_that_insists_gets_a_lawful_end() -> None:
    asked: list[dict[str, Any]] = []

    async def reissue(kwargs: dict[str, Any]) -> Any:
        asked.append(kwargs)
        return _Upstream(_calling("read", '{"path": "conf.toml"}', "call_s"))

    request = {"model": "deepseek-reasoner", "messages": failing_tool_history(3)}
    out = _through(LoopbreakGuard(Config(), reissue=reissue),
                   _Upstream(_calling("read", '{"path": "conf.toml"}', "call_r")), request)
    assert _tool_names(out) == [] and _finishes(out) == ["stop"] and len(asked) == 1
    assert _content(out).startswith("[loopbreak] This call to `read` was not run")


def test_a_held_call_that_may_run_is_relayed_whole() -> None:
    # The same tool with other arguments is a new call: held until whole, then let through,
    # with what follows its finish.
    chunks = [*_calling("read", '{"path": "other.toml"}', "call_o"), _chunk()]
    upstream = _Upstream(chunks)
    request = {"model": "deepseek-reasoner", "messages": failing_tool_history(3)}
    out = _through(LoopbreakGuard(Config()), upstream, request)
    assert len(out) == len(chunks) and all(a is b for a, b in zip(out, chunks))
    assert not upstream.closed


# --- the real LiteLLM proxy -------------------------------------------------------------------

@dataclass
class Proxy:
    upstream: ScriptedUpstream
    base_url: str
    key: str
    log: Path

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.base_url, api_key=self.key, max_retries=0,
                             timeout=30)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _documented_config(upstream_url: str) -> str:
    config = next(b for b in re.findall(r"```yaml\n(.*?)```", DOC, flags=re.S)
                  if "model_list:" in b)
    assert config.count(DOC_UPSTREAM) == 1
    return config.replace(DOC_UPSTREAM, upstream_url)


def _documented_command(config: Path, port: int) -> list[str]:
    block = next(b for b in re.findall(r"```bash\n(.*?)```", DOC, flags=re.S)
                 if "litellm --config" in b)
    (line,) = [line for line in block.splitlines() if line.startswith("litellm ")]
    argv = shlex.split(line)
    argv[0] = str(Path(sys.executable).with_name("litellm"))
    argv[argv.index("--config") + 1] = str(config)
    argv[argv.index("--port") + 1] = str(port)
    return argv


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    if not Path(sys.executable).with_name("litellm").exists():
        pytest.skip("the litellm command is not installed: pip install 'litellm[proxy]'")
    work = tmp_path_factory.mktemp("litellm-proxy")
    key = "sk-" + secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LOOPBREAK_", "LITELLM_", "DATABASE_URL"))}
    env.update({
        "LITELLM_MASTER_KEY": key, "DEEPSEEK_API_KEY": "sk-upstream-test",
        # Nothing leaves the machine: the bundled cost map, no telemetry, no proxy for loopback.
        "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY_DISABLED": "true",
        "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
        "PYTHONUNBUFFERED": "1",
    })
    with ScriptedUpstream() as up:
        config = work / "litellm.yaml"
        config.write_text(_documented_config(up.base_url), encoding="utf-8")
        port = _free_port()
        log = work / "litellm.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(_documented_command(config, port), cwd=work, env=env,
                                    stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        try:
            deadline = time.monotonic() + 120
            while True:
                if proc.poll() is not None:
                    pytest.fail(f"litellm exited with {proc.returncode}:\n"
                                f"{log.read_text(errors='replace')[-3000:]}")
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/health/liveliness",
                                 timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    pytest.fail("litellm did not come up in 120 s:\n"
                                f"{log.read_text(errors='replace')[-3000:]}")
                time.sleep(0.1)
            yield Proxy(up, f"http://127.0.0.1:{port}/v1", key, log)
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)


def _stream(proxy: Proxy, *scripts: Script) -> tuple[list[Any], list[Any]]:
    """Stream one chat completion through the LiteLLM proxy with ``scripts`` queued
    upstream; the chunks and, once each exchange has ended, the upstream's records."""
    proxy.upstream.reset(list(scripts))
    chunks = list(proxy.client().chat.completions.create(
        model="deepseek-reasoner", messages=MESSAGES, stream=True))
    records = proxy.upstream.requests
    assert all(r.wait(10) for r in records), "an upstream exchange did not end"
    return chunks, records


def _extra(delta: Any, name: str) -> Any:
    return getattr(delta, name, None) or (delta.model_extra or {}).get(name)


def _reassembled(chunks: list[Any]) -> dict[str, Any]:
    reasoning, text, finish = [], [], []
    calls: dict[int, list[str]] = {}
    for chunk in chunks:
        for choice in chunk.choices:
            delta = choice.delta
            reasoning.append(_extra(delta, "reasoning_content") or "")
            text.append(delta.content or "")
            for call in delta.tool_calls or []:
                entry = calls.setdefault(call.index, ["", "", ""])
                entry[0] += call.id or ""
                entry[1] += (call.function.name or "") if call.function else ""
                entry[2] += (call.function.arguments or "") if call.function else ""
            if choice.finish_reason:
                finish.append(choice.finish_reason)
    return {"reasoning": "".join(reasoning), "text": "".join(text),
            "tool_calls": [tuple(calls[k]) for k in sorted(calls)], "finish": finish}


@pytest.mark.slow
@pytest.mark.parametrize("channel", ["reasoning", "text"])
def test_proxy_cuts_a_loop_lawfully(proxy: Proxy, channel: str) -> None:
    script = (Script.openai(reasoning=LOOP, text="never", piece_chars=16, flavour="deepseek")
              if channel == "reasoning" else
              Script.openai(text=LOOP, piece_chars=16, flavour="deepseek")).delivered(delay=0.002)
    # A reasoning loop is re-asked once without thinking; here the re-ask loops too.
    scripts = (script, script) if channel == "reasoning" else (script,)
    chunks, records = _stream(proxy, *scripts)
    got = _reassembled(chunks)
    assert got["finish"] == ["stop"] and chunks[-1].choices[0].finish_reason == "stop"
    what = "reasoning" if channel == "reasoning" else "output"
    notice = chunks[-1].choices[0].delta.content
    assert re.fullmatch(rf"\[loopbreak\] Your {what} was cut after [\d,]+ characters because "
                        r"it kept repeating \(cycle\)\..*", notice)
    seen = got[channel] if channel == "reasoning" else got["text"][: -len(notice)]
    assert LOOP.startswith(seen[: len(seen) // len(scripts)])
    assert 0 < len(seen) < 1_000 * len(scripts) and len(LOOP) == 20_000
    assert "never" not in got["text"]
    # The upstream saw the client go each time: generation stops there, long before the
    # loop's end.
    assert len(records) == len(scripts)
    for record in records:
        assert record.outcome == "client-disconnected"
        assert record.events_sent < len(script.events) // 2


@pytest.mark.slow
def test_proxy_re_asks_a_reasoning_loop_without_thinking(proxy: Proxy) -> None:
    answer = "Bounded the retry at 3 ✅."
    chunks, (first, second) = _stream(
        proxy, Script.openai(reasoning=LOOP, text="never", piece_chars=16,
                             flavour="deepseek").delivered(delay=0.002),
        Script.openai(text=answer, piece_chars=5, flavour="deepseek"))
    got = _reassembled(chunks)
    notice, _, rest = got["text"].partition("\n\n")
    assert notice.startswith("[loopbreak] Your reasoning was cut after") and rest == answer
    assert LOOP.startswith(got["reasoning"]) and 0 < len(got["reasoning"]) < 1_000
    assert got["finish"] == ["stop"]
    # The re-ask went through LiteLLM's router to the same model: thinking off in DeepSeek's
    # dialect (the model is a DeepSeek one), the notice as the newest user text.
    assert first.outcome == "client-disconnected" and second.outcome == "completed"
    assert "thinking" not in first.body and second.body["thinking"] == {"type": "disabled"}
    assert second.body["model"] == first.body["model"] == "deepseek-reasoner"
    assert second.body["messages"] == [*MESSAGES, {"role": "user", "content": notice}]
    assert second.header("authorization") == first.header("authorization") == (
        "Bearer sk-upstream-test")


@pytest.mark.slow
def test_proxy_passes_a_clean_stream_unchanged(proxy: Proxy) -> None:
    text = "Done ✅: the retry is bounded — 重试有上限."
    call = ToolCall.of("read", {"path": "a.py", "note": "é"}, id="call_a")
    script = Script.openai(reasoning=CLEAN, text=text, tool_calls=[call], piece_chars=9,
                           flavour="deepseek").delivered(write_bytes=7)
    chunks, (record,) = _stream(proxy, script)
    assert _reassembled(chunks) == {"reasoning": CLEAN, "text": text,
                                    "tool_calls": [("call_a", "read", call.arguments_text)],
                                    "finish": ["tool_calls"]}
    # Delta for delta: LiteLLM neither merges nor splits them, and the hook adds none.
    pieces = [p for c in chunks for p in (_extra(c.choices[0].delta, "reasoning_content"),
                                          c.choices[0].delta.content) if c.choices and p]
    assert pieces == split_chars(CLEAN, 9) + split_chars(text, 9)
    assert record.outcome == "completed"


@pytest.mark.slow
def test_proxy_holds_a_cut_until_the_open_tool_call_closes(proxy: Proxy) -> None:
    call = ToolCall.of("write", {"path": "a.py", "text": "retry = 3"}, id="call_w")
    loop = [Text(p) for p in split_chars(LOOP[:3000], 16)]
    chunks, _ = _stream(proxy, Script((call, *loop)))
    got = _reassembled(chunks)
    assert got["tool_calls"] == [("call_w", "write", call.arguments_text)]
    assert got["finish"] == ["tool_calls"]
    assert "[loopbreak] Your output was cut after" in got["text"]


@pytest.mark.slow
def test_proxy_passes_a_response_that_is_not_streamed(proxy: Proxy) -> None:
    proxy.upstream.reset([Script.openai(reasoning=CLEAN, text="Done.")])
    response = proxy.client().chat.completions.create(model="deepseek-reasoner",
                                                      messages=MESSAGES)
    message = response.choices[0].message
    assert message.content == "Done." and _extra(message, "reasoning_content") == CLEAN
    assert response.choices[0].finish_reason == "stop"


@pytest.mark.slow
def test_proxy_steers_failing_tools_and_stalls_from_the_history(proxy: Proxy) -> None:
    proxy.upstream.reset([Script.openai(text="Let me try another path."),
                          Script.openai(text="Splitting the tokenizer now.")])
    client = proxy.client()
    for history in (failing_tool_history(2), _stalled_history()):
        list(client.chat.completions.create(model="deepseek-reasoner", messages=history,
                                            stream=True))
    failing, stalled = (r.body["messages"] for r in proxy.upstream.wait_for_requests(2))
    assert failing[4]["content"].startswith("[loopbreak] This exact call to `read` has now "
                                            "failed 2")
    assert stalled[-1]["content"].startswith("[loopbreak] Your last 3 model calls only thought")


@pytest.mark.slow
def test_proxy_denies_a_repeated_failing_call_and_asks_again(proxy: Proxy) -> None:
    denied = ToolCall.of("read", {"path": "conf.toml"}, id="call_r")
    other = ToolCall.of("glob", {"pattern": "*.toml"}, id="call_g")
    proxy.upstream.reset([Script.openai(reasoning="Read it again.", tool_calls=[denied],
                                        flavour="deepseek"),
                          Script.openai(tool_calls=[other], flavour="deepseek")])
    chunks = list(proxy.client().chat.completions.create(
        model="deepseek-reasoner", messages=failing_tool_history(3), stream=True))
    got = _reassembled(chunks)
    assert got["tool_calls"] == [("call_g", "glob", other.arguments_text)]
    assert got["finish"] == ["tool_calls"]
    first, second = proxy.upstream.wait_for_requests(2)
    assert first.wait(10) and second.wait(10)
    assert second.body["messages"][-1]["content"].startswith(
        "[loopbreak] This call to `read` was not run")
    assert second.body["messages"][-2]["tool_calls"][0]["function"]["name"] == "read"
