"""``loopbreak.integrations.openai`` with the real ``openai`` SDK against the scripted upstream."""

from __future__ import annotations

import asyncio

import openai
import pytest

from loopbreak._samples import cjk_loop, clean_reasoning, verbatim_loop
from loopbreak.integrations.openai import (
    aguard_stream,
    create_guarded,
    guard_stream,
    thinking_off_kwargs,
)
from loopbreak.testing import Script, ScriptedUpstream, ToolCall
from support import point_openai_at, run_doc_example

LOOP = verbatim_loop().text
MESSAGES = [{"role": "user", "content": "Fix the retry."}]


def _client(up: ScriptedUpstream) -> openai.OpenAI:
    return openai.OpenAI(base_url=up.base_url, api_key="k", max_retries=0)


def test_a_loop_is_cut_and_the_iteration_ends_lawfully(upstream: ScriptedUpstream) -> None:
    upstream.enqueue(Script.openai(reasoning=LOOP, text="never", piece_chars=16)
                     .delivered(delay=0.0005))
    stream = _client(upstream).chat.completions.create(model="m", messages=MESSAGES, stream=True)
    guarded = guard_stream(stream)
    chunks = list(guarded)
    assert guarded.trip is not None and guarded.trip.rule == "cycle"
    assert chunks[-1].choices[0].finish_reason == "stop"
    reasoning = "".join(getattr(c.choices[0].delta, "reasoning_content", None) or ""
                        for c in chunks if c.choices)
    assert len(reasoning) == guarded.trip.offset - 16 and reasoning == LOOP[: len(reasoning)]
    record = upstream.wait_for_requests(1)[0]
    assert record.wait(2) and record.outcome == "client-disconnected"
    assert guarded.notice is not None and "cut after" in guarded.notice


def test_a_clean_stream_is_the_same_objects(upstream: ScriptedUpstream) -> None:
    script = Script.openai(reasoning=clean_reasoning().text, text="Done.", piece_chars=9,
                           tool_calls=[ToolCall.of("read", {"path": "a.py"}, id="call_a")])
    upstream.enqueue(script, script)
    client = _client(upstream)
    plain = [c.model_dump() for c in client.chat.completions.create(
        model="m", messages=MESSAGES, stream=True)]
    guarded = guard_stream(client.chat.completions.create(model="m", messages=MESSAGES,
                                                          stream=True))
    same = [c.model_dump() for c in guarded]
    for a, b in zip(plain, same):
        a.pop("id"), b.pop("id"), a.pop("created"), b.pop("created")
    assert same == plain and guarded.trip is None


def test_async_stream(upstream: ScriptedUpstream) -> None:
    upstream.enqueue(Script.openai(reasoning=LOOP, piece_chars=16))

    async def main() -> tuple[str | None, str | None]:
        client = openai.AsyncOpenAI(base_url=upstream.base_url, api_key="k", max_retries=0)
        stream = await client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
        guarded = aguard_stream(stream)
        last = None
        async for chunk in guarded:
            last = chunk
        await client.close()
        return (guarded.trip.rule if guarded.trip else None,
                last.choices[0].finish_reason if last else None)

    assert asyncio.run(main()) == ("cycle", "stop")


def test_create_guarded_retries_without_thinking(upstream: ScriptedUpstream) -> None:
    upstream.enqueue(Script.openai(reasoning=LOOP, piece_chars=16),
                     Script.openai(text="The answer."))
    completion = create_guarded(_client(upstream), model="deepseek-chat", messages=MESSAGES,
                                extra_body={"thinking": {"type": "enabled"}},
                                reasoning_effort="high")
    text = "".join(c.choices[0].delta.content or "" for c in completion if c.choices)
    assert text.startswith("[loopbreak] Your reasoning was cut") and text.endswith("The answer.")
    retry = upstream.wait_for_requests(2)[1].body
    assert retry["thinking"] == {"type": "disabled"} and "reasoning_effort" not in retry
    assert [t.rule for t in completion.trips] == ["cycle"]


class _Counted:
    """An SDK chunk that notes each reading of its ``choices``."""

    def __init__(self, chunk: object, reads: list[int]) -> None:
        self._chunk, self._reads = chunk, reads

    def __getattr__(self, name: str) -> object:
        if name == "choices":
            self._reads.append(1)
        return getattr(self._chunk, name)


class _Replayed:
    """A stream that hands out chunks already read (what ``guard_stream`` needs of one)."""

    def __init__(self, chunks: list[object]) -> None:
        self._chunks = chunks

    def __iter__(self) -> object:
        return iter(self._chunks)

    def close(self) -> None:
        pass


def test_each_chunk_is_read_once(upstream: ScriptedUpstream) -> None:
    """The guard, the tool-call flag and the language sample share one reading of a chunk
    (three readers once read each chunk in turn)."""
    upstream.enqueue(Script.openai(reasoning=clean_reasoning().text, text="Done.",
                                   piece_chars=9,
                                   tool_calls=[ToolCall.of("read", {"path": "a.py"})]))
    chunks = list(_client(upstream).chat.completions.create(model="m", messages=MESSAGES,
                                                            stream=True))
    reads: list[int] = []
    guarded = guard_stream(_Replayed([_Counted(c, reads) for c in chunks]))
    assert len(list(guarded)) == len(chunks) and guarded.trip is None
    assert len(reads) == len(chunks)


def test_thinking_off_kwargs_per_dialect() -> None:
    base = {"model": "m", "messages": MESSAGES}
    assert thinking_off_kwargs({**base, "extra_body": {"thinking": {"type": "enabled"}}})[
        "extra_body"] == {"thinking": {"type": "disabled"}}
    vllm = thinking_off_kwargs({**base, "extra_body": {"chat_template_kwargs": {"x": 1}}})
    assert vllm["extra_body"]["chat_template_kwargs"] == {"x": 1, "enable_thinking": False,
                                                          "thinking": False}
    assert thinking_off_kwargs({**base, "reasoning_effort": "high"})["reasoning_effort"] == "low"
    assert thinking_off_kwargs(base, dialect="deepseek")["extra_body"] == {
        "thinking": {"type": "disabled"}}


def test_the_readme_example_runs(upstream: ScriptedUpstream,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    point_openai_at(monkeypatch, upstream)
    upstream.enqueue(Script.openai(reasoning=LOOP, piece_chars=16),
                     Script.openai(reasoning=LOOP, piece_chars=16),
                     Script.openai(text="Because nothing counts the attempts."))
    printed = run_doc_example("openai")
    assert "cut: cycle at" in printed and "[loopbreak] Your reasoning was cut" in printed
    assert printed.rstrip().endswith("Because nothing counts the attempts.")
    assert upstream.requests[2].body["thinking"] == {"type": "disabled"}


ZH_MESSAGES = [{"role": "user", "content": "请修复上传重试的逻辑，并说明原因。"}]


def test_the_notice_follows_the_conversations_language(upstream: ScriptedUpstream) -> None:
    """The wrapper's ``auto`` language once always came out English."""
    upstream.enqueue(Script.openai(reasoning=LOOP, piece_chars=16),
                     Script.openai(reasoning=cjk_loop().text, piece_chars=8))
    client = _client(upstream)
    by_messages = guard_stream(client.chat.completions.create(
        model="m", messages=ZH_MESSAGES, stream=True), messages=ZH_MESSAGES)
    list(by_messages)
    assert by_messages.notice is not None and "你的思考在" in by_messages.notice
    by_writing = guard_stream(client.chat.completions.create(
        model="m", messages=MESSAGES, stream=True))
    list(by_writing)
    assert by_writing.notice is not None and "你的思考在" in by_writing.notice


def test_create_guarded_tells_the_model_in_its_language(upstream: ScriptedUpstream) -> None:
    upstream.enqueue(Script.openai(reasoning=LOOP, piece_chars=16), Script.openai(text="好的。"))
    chunks = list(create_guarded(_client(upstream), model="m", messages=ZH_MESSAGES))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.startswith("[loopbreak] 你的思考在") and text.endswith("好的。")
    assert upstream.wait_for_requests(2)[1].body["messages"][-1]["content"].startswith(
        "[loopbreak] 你的思考在")


def test_an_async_reader_that_stops_early_closes_the_upstream(upstream: ScriptedUpstream) -> None:
    endless = Script.openai(text="a fine sentence that goes on ", piece_chars=5).repeated(0) \
        .delivered(delay=0.002)
    upstream.enqueue(endless)

    async def main() -> None:
        client = openai.AsyncOpenAI(base_url=upstream.base_url, api_key="k", max_retries=0)
        stream = await client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
        guarded = aguard_stream(stream)
        reader = guarded.__aiter__()
        for _ in range(5):
            await reader.__anext__()
        await reader.aclose()  # what `break` leads to once the generator is dropped
        record = upstream.wait_for_requests(1)[0]
        assert await record.wait_async(2) and record.outcome == "client-disconnected"
        await client.close()

    asyncio.run(main())
