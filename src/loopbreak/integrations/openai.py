"""The guard around an ``openai`` SDK chat-completions stream, sync and async.

``guard_stream(stream)`` yields the same chunk objects the SDK yields. When a
rule trips, the SDK stream is closed (which closes the connection and stops the
upstream generating), a last chunk with ``finish_reason="stop"`` ends the
iteration lawfully, and ``.trip`` and ``.notice`` tell the caller what
happened. A cut never lands inside a tool call that is still streaming.

``create_guarded(client, **kwargs)`` does the whole recovery in one call: it
streams, and after a reasoning loop it re-asks once without thinking
(``thinking_off_kwargs``) and continues the same iteration with the new answer,
the notice shown first, as the proxy does.

Needs the ``openai`` extra (``pip install '.[openai]'`` from a checkout).
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Iterator
from typing import Any

from loopbreak._extras import missing

try:
    from openai.types.chat import ChatCompletionChunk
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise missing(__name__, "the openai SDK", "openai", exc) from exc

from loopbreak._config import Config
from loopbreak._engine.call_guard import CallGuard
from loopbreak._engine.notices import LANGUAGE_SAMPLE_CHARS, Language, resolve_language
from loopbreak._engine.trip import Trip
from loopbreak._recovery import LoopCutError, cut_notice, normal_finish, plan_cut
from loopbreak._recovery.chunks import feed_piece, openai_pieces
from loopbreak._recovery.requests import conversation_sample, thinking_off

# Parameters the SDK takes by name; everything else a dialect needs goes in extra_body.
_SDK_PARAMS = {"reasoning_effort"}


def thinking_off_kwargs(kwargs: dict[str, Any], dialect: str = "auto",
                        effort: str = "low") -> dict[str, Any]:
    """``create()`` keyword arguments for the same request with thinking disabled.

    DeepSeek: ``extra_body={"thinking": {"type": "disabled"}}``; vLLM and SGLang:
    ``extra_body={"chat_template_kwargs": {"enable_thinking": False, ...}}``; Ollama:
    ``think: false``; OpenAI: ``reasoning_effort`` lowered. ``auto`` reads which one
    the request uses.
    """
    kwargs = copy.deepcopy(kwargs)
    extra = dict(kwargs.pop("extra_body", None) or {})
    body = {**extra, **{k: kwargs.pop(k) for k in list(kwargs) if k in _SDK_PARAMS}}
    body = thinking_off(body, "openai", dialect, effort)
    for key in _SDK_PARAMS:
        if key in body:
            kwargs[key] = body.pop(key)
    if body:
        kwargs["extra_body"] = body
    return kwargs


def _chunk(template: Any, text: str | None = None, finish: str | None = "stop") -> Any:
    """A chunk like ``template`` carrying ``text`` (or nothing), ending the stream when
    ``finish`` is given."""
    return ChatCompletionChunk.model_validate({
        "id": getattr(template, "id", "") or "chatcmpl-loopbreak",
        "object": "chat.completion.chunk",
        "created": getattr(template, "created", 0) or 0,
        "model": getattr(template, "model", "") or "",
        "choices": [{"index": 0, "delta": {"content": text} if text else {},
                     "finish_reason": finish}],
    })


class _Guarded:
    """What the sync and async wrappers share: judging chunks."""

    def __init__(self, config: Config | None, language: str, sample: str = "") -> None:
        self.config = config or Config()
        self.guard = CallGuard(self.config)
        self.trip: Trip | None = None
        self.language = language
        # What the notice's language is read from: the conversation when the caller has
        # it, else what the model wrote before the cut.
        self._sample = sample
        self._sample_writing = not sample
        # Chunks with tool calls went to the reader before the cut.
        self.tools_sent = False

    def judge(self, chunk: Any) -> Trip | None:
        # One reading of the chunk serves the guard, the tool-call flag and the sample.
        pieces = openai_pieces(chunk)
        trip: Trip | None = None
        for piece in pieces:
            trip = feed_piece(self.guard, piece) or trip
        if trip is not None:
            self.trip = trip
            return trip
        for piece in pieces:
            if piece.kind == "tool":
                self.tools_sent = True
            elif self._sample_writing and len(self._sample) < LANGUAGE_SAMPLE_CHARS \
                    and piece.kind in ("reasoning", "text"):
                self._sample += piece.text
        return None

    @property
    def notice_language(self) -> Language:
        """The language the notice is written in."""
        return resolve_language(self.language, self._sample)

    @property
    def notice(self) -> str | None:
        """What the model should read about the cut (``None`` while nothing was cut)."""
        if self.trip is None:
            return None
        return cut_notice(self.trip, self.notice_language)


class GuardedStream(_Guarded):
    """A sync SDK stream, judged chunk by chunk."""

    def __init__(self, stream: Any, config: Config | None = None, *, language: str = "auto",
                 show_notice: bool = False, sample: str = "") -> None:
        super().__init__(config, language, sample)
        self._stream = stream
        self._show_notice = show_notice

    def __iter__(self) -> Iterator[Any]:
        try:
            for chunk in self._stream:
                if self.judge(chunk) is not None:
                    self._stream.close()
                    yield _chunk(chunk, self.notice if self._show_notice else None,
                                 normal_finish("openai", self.tools_sent))
                    return
                yield chunk
        finally:
            # A reader that stops early must not leave the connection generating.
            self._stream.close()

    def close(self) -> None:
        self._stream.close()


class AsyncGuardedStream(_Guarded):
    """An async SDK stream, judged chunk by chunk."""

    def __init__(self, stream: Any, config: Config | None = None, *, language: str = "auto",
                 show_notice: bool = False, sample: str = "") -> None:
        super().__init__(config, language, sample)
        self._stream = stream
        self._show_notice = show_notice

    async def __aiter__(self) -> AsyncIterator[Any]:
        try:
            async for chunk in self._stream:
                if self.judge(chunk) is not None:
                    await self._stream.close()
                    yield _chunk(chunk, self.notice if self._show_notice else None,
                                 normal_finish("openai", self.tools_sent))
                    return
                yield chunk
        finally:
            # A reader that stops early must not leave the connection generating.
            await self._stream.close()

    async def close(self) -> None:
        await self._stream.close()


def guard_stream(stream: Any, config: Config | None = None, *, show_notice: bool = False,
                 messages: Any = None) -> GuardedStream:
    """Judge a sync ``chat.completions.create(..., stream=True)`` stream as it is read.
    ``messages`` (the request's) tell the notice's language; without them it is read from
    what the model wrote."""
    cfg = config or Config()
    return GuardedStream(stream, cfg, language=cfg.recovery.language, show_notice=show_notice,
                         sample=conversation_sample(messages))


def aguard_stream(stream: Any, config: Config | None = None, *, show_notice: bool = False,
                  messages: Any = None) -> AsyncGuardedStream:
    """Judge an async ``chat.completions.create(..., stream=True)`` stream as it is read;
    ``messages`` as for :func:`guard_stream`."""
    cfg = config or Config()
    return AsyncGuardedStream(stream, cfg, language=cfg.recovery.language,
                              show_notice=show_notice, sample=conversation_sample(messages))


class GuardedCompletion:
    """Chunks of a guarded call with its recovery: cut, notice, one retry without thinking."""

    def __init__(self, client: Any, kwargs: dict[str, Any], config: Config | None = None,
                 *, dialect: str = "auto") -> None:
        self.client = client
        self.kwargs = {**kwargs, "stream": True}
        self.config = config or Config()
        self.dialect = dialect
        self.trips: list[Trip] = []

    def __iter__(self) -> Iterator[Any]:
        kwargs = self.kwargs
        retries = 0
        while True:
            stream = guard_stream(self.client.chat.completions.create(**kwargs), self.config,
                                  messages=kwargs.get("messages"))
            for chunk in stream:
                if stream.trip is None:
                    yield chunk
            trip = stream.trip
            if trip is None:
                return
            self.trips.append(trip)
            # One call is a turn of its own: its retries are the ones made here.
            plan = plan_cut(trip, self.config, language=stream.notice_language,
                            retries_used=retries, tools_sent=stream.tools_sent)
            if plan.mode == "error":
                raise LoopCutError(trip, plan.notice)
            if plan.mode == "stop":
                yield _chunk(None, plan.shown or None, plan.finish)
                return
            retries += 1
            if plan.shown:
                yield _chunk(None, plan.shown + "\n\n", finish=None)
            kwargs = thinking_off_kwargs(self.kwargs, self.dialect,
                                         self.config.recovery.retry_effort)
            kwargs["messages"] = [*kwargs.get("messages", []),
                                  {"role": "user", "content": plan.notice}]


def create_guarded(client: Any, *, config: Config | None = None, dialect: str = "auto",
                   **kwargs: Any) -> GuardedCompletion:
    """``client.chat.completions.create(**kwargs, stream=True)`` with the guard and its
    recovery: iterate it like the SDK stream; ``.trips`` lists what was cut."""
    return GuardedCompletion(client, kwargs, config, dialect=dialect)
