"""The guard inside a LangChain v1 agent: :class:`LoopbreakMiddleware`.

``create_agent(model, tools, middleware=[LoopbreakMiddleware()])`` guards every
model call and every tool call of the agent with one :class:`loopbreak.SessionGuard`
per conversation (the LangGraph ``thread_id``, else the conversation's first
message); a new user message starts a new turn.

Model calls (``wrap_model_call``): the model is made to stream, and each call is
judged while it streams. For models built on ``langchain-openai``'s
``BaseChatOpenAI`` (``ChatOpenAI``, ``AzureChatOpenAI``, ``ChatDeepSeek``...) the
guard reads the raw Chat Completions chunks through the model's SDK client, so
it sees the reasoning deltas (``reasoning_content`` / ``reasoning``) that
``ChatOpenAI`` itself drops; on a trip it closes the SDK stream (the HTTP
connection, which stops the upstream generating) and ends the stream with a
normal ``finish_reason``, so LangChain builds an ordinary message. Other chat
models are judged through a callback on their streamed chunks (text, reasoning
and thinking blocks, ``additional_kwargs["reasoning_content"]``); a trip stops
their stream by raising out of the callback, and the message is assembled from
what had streamed. Either way a cut never lands inside an open tool call, and
the agent gets a lawful ``AIMessage``: what was produced, the ``[loopbreak]``
notice, and only complete tool calls. After a reasoning loop it re-asks once per
turn with thinking off (``recovery.on_trip = "retry"``, DeepSeek / vLLM /
OpenAI spellings for ``BaseChatOpenAI`` models, as the proxy does) and the
answer continues the same message; ``stop`` keeps the cut message, ``error``
raises :class:`LoopCutError`. The stall rule's reactions apply to the next call
(``steer``: the notice goes with the request; ``cancel``: the call is answered
with the notice, no model).

Tool calls (``wrap_tool_call``): the tool-failure breaker. A call that failed the
same way ``deny_after`` times in this turn is not run: the model reads a
``ToolMessage`` (``status="error"``) that says why. A failure is a ``ToolMessage``
with ``status="error"``, a result that reads like an error, or an exception; from
the ``steer_from``-th identical failure on, the result carries guidance to change
approach. An exception is recorded and re-raised, unless ``handle_tool_errors``
turns it into an error ``ToolMessage`` the model reads.

A custom LangGraph graph can use the same hooks: ``ToolNode(tools,
wrap_tool_call=middleware.wrap_tool_call)``.

Needs the ``langchain`` extra (``pip install '.[langchain]'`` from a checkout).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NoReturn

from loopbreak._extras import missing

try:
    from langchain.agents.middleware import (
        AgentMiddleware,
        AgentState,
        ModelRequest,
        ModelResponse,
    )
    from langchain.agents.middleware.types import ExtendedModelResponse
    from langchain_core.callbacks import BaseCallbackHandler
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import (
        AIMessage,
        AIMessageChunk,
        HumanMessage,
        ToolMessage,
    )
    from langchain_core.messages.ai import add_ai_message_chunks
    from langchain_core.outputs import ChatGenerationChunk
    from langgraph.errors import GraphBubbleUp
    from langgraph.prebuilt.tool_node import ToolCallRequest
    from langgraph.types import Command
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise missing(__name__, "LangChain v1 (agent middleware)", "langchain", exc) from exc

from loopbreak._config import Config
from loopbreak._engine.call_guard import CallGuard
from loopbreak._engine.session_guard import SessionGuard
from loopbreak._engine.stall import Reaction
from loopbreak._engine.tool_failure import looks_like_failure
from loopbreak._engine.trip import Channel, Trip
from loopbreak._recovery import LoopCutError, normal_finish, plan_cut
from loopbreak._recovery.chunks import feed_openai_chunk
from loopbreak._recovery.chunks import field as _field
from loopbreak.integrations.openai import thinking_off_kwargs

__all__ = ["LoopCutError", "LoopbreakMiddleware"]

logger = logging.getLogger(__name__)


class _Cut(BaseException):
    """Raised out of a chat model's token callback to stop its stream (sync calls).

    A ``BaseException``, so that LangChain's callback manager (which logs
    ``Exception``) and middleware that catches ``Exception`` let it through.
    """

    def __init__(self, trip: Trip) -> None:
        super().__init__(f"loopbreak cut a looping {trip.channel} stream ({trip.rule})")
        self.trip = trip


class _CutAsync(Exception):
    """:class:`_Cut` for async calls: ``BaseChatModel.agenerate`` only handles an
    ``Exception`` raised from a call."""

    def __init__(self, trip: Trip) -> None:
        super().__init__(f"loopbreak cut a looping {trip.channel} stream ({trip.rule})")
        self.trip = trip


class _QuietCut(logging.Filter):
    """Keeps LangChain's callback manager from logging an async cut as a callback error."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        return not any(isinstance(arg, str) and arg.startswith("_CutAsync(") for arg in args)


logging.getLogger("langchain_core.callbacks.manager").addFilter(_QuietCut())


def _stop(trip: Trip) -> NoReturn:
    """Stop the stream whose callback is running now."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        raise _Cut(trip) from None
    raise _CutAsync(trip)


# -- judging one call -----------------------------------------------------------------


def _message_pieces(message: AIMessageChunk) -> Iterator[tuple[Channel, str]]:
    """The reasoning and text deltas one streamed chunk carries."""
    for name in ("reasoning_content", "reasoning"):
        value = message.additional_kwargs.get(name)
        if isinstance(value, str) and value:
            yield "reasoning", value
    content = message.content
    if isinstance(content, str):
        if content:
            yield "text", content
        return
    for block in content:
        if isinstance(block, str):
            if block:
                yield "text", block
            continue
        kind = block.get("type")
        if kind == "text":
            text = block.get("text")
            if isinstance(text, str) and text:
                yield "text", text
        elif kind in ("reasoning", "thinking"):
            value = block.get(kind)
            if isinstance(value, str) and value:
                yield "reasoning", value
            for part in block.get("summary") or []:  # OpenAI Responses reasoning summaries
                text = part.get("text") if isinstance(part, dict) else None
                if isinstance(text, str) and text:
                    yield "reasoning", text


def _chunk_key(piece: Mapping[str, Any]) -> Hashable:
    """Which tool call a streamed piece belongs to: its index, else its id."""
    index = piece.get("index")
    if isinstance(index, int):
        return index
    ident = piece.get("id")
    return str(ident) if ident is not None else 0


class _Watch:
    """One guarded model call: its call guard, what streamed, and the trip acted on."""

    def __init__(self, call: CallGuard) -> None:
        self.call = call
        self.trip: Trip | None = None
        self.raw = False  # the SDK-client hook judges this call; the callback stands aside
        self.chunks: list[AIMessageChunk] = []

    def feed_raw(self, chunk: Any) -> Trip | None:
        """An OpenAI Chat Completions chunk, as the SDK yields it."""
        trip = feed_openai_chunk(self.call, chunk)
        if trip is not None and self.trip is None:
            self.trip = trip
            return trip
        return None

    def feed_message(self, message: AIMessageChunk) -> Trip | None:
        """A LangChain message chunk (the callback path)."""
        if self.raw:  # judged (and cut) by the SDK-client hook
            return None
        call = self.call
        trip: Trip | None = None
        for channel, text in _message_pieces(message):
            trip = call.feed(channel, text) or trip
        for piece in message.tool_call_chunks:
            call.tool_call_delta(_chunk_key(piece), piece.get("name") or "",
                                 piece.get("args") or "")
        if message.chunk_position == "last" or message.response_metadata.get("finish_reason"):
            trip = call.close_tool_call() or trip
        if trip is not None and self.trip is None:
            self.trip = trip
            return trip
        self.chunks.append(message)
        return None

    def message(self) -> AIMessage:
        """What streamed before the cut, as a message: complete tool calls only."""
        if not self.chunks:
            return AIMessage(content="")
        merged = add_ai_message_chunks(self.chunks[0], *self.chunks[1:])
        closed = {record.key for record in self.call.tool_calls if not record.open}
        kept = [piece for piece in merged.tool_call_chunks if _chunk_key(piece) in closed]
        complete = AIMessageChunk(content=merged.content,
                                  additional_kwargs=merged.additional_kwargs,
                                  response_metadata=merged.response_metadata,
                                  tool_call_chunks=kept, id=merged.id,
                                  usage_metadata=merged.usage_metadata)
        return AIMessage(content=complete.content, additional_kwargs=complete.additional_kwargs,
                         response_metadata=complete.response_metadata,
                         tool_calls=complete.tool_calls,
                         invalid_tool_calls=complete.invalid_tool_calls, id=complete.id,
                         usage_metadata=complete.usage_metadata)


class _Watcher(BaseCallbackHandler):
    """Feeds a model's streamed chunks to the call's watch; stops the stream on a trip."""

    run_inline = True
    raise_error = True  # the cut must reach the model call, not be logged and dropped

    def __init__(self, watch: _Watch) -> None:
        self.watch = watch

    def on_llm_new_token(self, token: Any, *, chunk: Any = None, **kwargs: Any) -> None:
        if isinstance(chunk, ChatGenerationChunk) and isinstance(chunk.message, AIMessageChunk):
            trip = self.watch.feed_message(chunk.message)
            if trip is not None:
                _stop(trip)


# -- the SDK-client hook (BaseChatOpenAI models) --------------------------------------


def _end_chunk(template: Any) -> dict[str, Any]:
    """The last chunk of a cut stream: nothing more, a normal finish."""
    return {
        "id": _field(template, "id") or "chatcmpl-loopbreak",
        "object": "chat.completion.chunk",
        "created": _field(template, "created") or 0,
        "model": _field(template, "model") or "",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop", "logprobs": None}],
    }


def _finishes(chunk: Any) -> bool:
    return any(_field(choice, "finish_reason") for choice in _field(chunk, "choices") or [])


class _SyncStream:
    """An SDK ``Stream`` judged as it is read; a trip closes it and ends it lawfully."""

    def __init__(self, stream: Any, watch: _Watch) -> None:
        self._stream = stream
        self._watch = watch
        watch.raw = True

    def __enter__(self) -> _SyncStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[Any]:
        try:
            for chunk in self._stream:
                if self._watch.feed_raw(chunk) is not None:
                    self.close()
                    yield chunk if _finishes(chunk) else _end_chunk(chunk)
                    return
                yield chunk
        finally:
            self.close()

    def close(self) -> None:
        self._stream.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class _AsyncStream:
    """An SDK ``AsyncStream`` judged as it is read."""

    def __init__(self, stream: Any, watch: _Watch) -> None:
        self._stream = stream
        self._watch = watch
        watch.raw = True

    async def __aenter__(self) -> _AsyncStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def __aiter__(self) -> AsyncIterator[Any]:
        try:
            async for chunk in self._stream:
                if self._watch.feed_raw(chunk) is not None:
                    await self.close()
                    yield chunk if _finishes(chunk) else _end_chunk(chunk)
                    return
                yield chunk
        finally:
            await self.close()

    async def close(self) -> None:
        await self._stream.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class _Raw:
    """A ``with_raw_response`` result whose ``parse()`` gives the judged stream."""

    def __init__(self, raw: Any, watch: _Watch, stream: bool, sync: bool) -> None:
        self._raw = raw
        self._watch = watch
        self._is_stream = stream
        self._sync = sync

    def parse(self, *args: Any, **kwargs: Any) -> Any:
        parsed = self._raw.parse(*args, **kwargs)
        if not self._is_stream:
            return parsed
        return _SyncStream(parsed, self._watch) if self._sync else _AsyncStream(parsed,
                                                                               self._watch)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


class _Completions:
    """``client.chat.completions`` whose streams are judged (sync)."""

    def __init__(self, inner: Any, watch: _Watch, raw: bool = False) -> None:
        self._inner = inner
        self._watch = watch
        self._raw = raw

    def create(self, *args: Any, **kwargs: Any) -> Any:
        result = self._inner.create(*args, **kwargs)
        if self._raw:
            return _Raw(result, self._watch, bool(kwargs.get("stream")), sync=True)
        return _SyncStream(result, self._watch) if kwargs.get("stream") else result

    @property
    def with_raw_response(self) -> _Completions:
        return _Completions(self._inner.with_raw_response, self._watch, raw=True)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _AsyncCompletions:
    """``client.chat.completions`` whose streams are judged (async)."""

    def __init__(self, inner: Any, watch: _Watch, raw: bool = False) -> None:
        self._inner = inner
        self._watch = watch
        self._raw = raw

    async def create(self, *args: Any, **kwargs: Any) -> Any:
        result = await self._inner.create(*args, **kwargs)
        if self._raw:
            return _Raw(result, self._watch, bool(kwargs.get("stream")), sync=False)
        return _AsyncStream(result, self._watch) if kwargs.get("stream") else result

    @property
    def with_raw_response(self) -> _AsyncCompletions:
        return _AsyncCompletions(self._inner.with_raw_response, self._watch, raw=True)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _openai_base() -> type[Any] | None:
    try:
        from langchain_openai.chat_models.base import BaseChatOpenAI
    except ImportError:
        return None
    return BaseChatOpenAI


def _is_openai(model: BaseChatModel) -> bool:
    base = _openai_base()
    return base is not None and isinstance(model, base)


def _guarded_model(model: BaseChatModel, watch: _Watch) -> BaseChatModel:
    """A shallow copy of ``model`` that streams and is judged while it does."""
    update: dict[str, Any] = {}
    callbacks = model.callbacks
    watcher = _Watcher(watch)
    if callbacks is None:
        update["callbacks"] = [watcher]
    elif isinstance(callbacks, list):
        update["callbacks"] = [*callbacks, watcher]
    else:
        manager = callbacks.copy()
        manager.add_handler(watcher, inherit=False)
        update["callbacks"] = manager
    fields = type(model).model_fields
    explicit_off = "streaming" in model.model_fields_set and \
        getattr(model, "streaming", None) is False
    if "streaming" in fields and not explicit_off:
        update["streaming"] = True
    if _is_openai(model):
        client = getattr(model, "client", None)
        async_client = getattr(model, "async_client", None)
        if client is not None:
            update["client"] = _Completions(client, watch)
        if async_client is not None:
            update["async_client"] = _AsyncCompletions(async_client, watch)
    return model.model_copy(update=update)


def _streams_by_setting(model: BaseChatModel) -> bool:
    """Whether streaming must be asked per call (``stream=True``): no ``streaming`` field."""
    return "streaming" not in type(model).model_fields and model.disable_streaming is not True


def _thinking_off(model: BaseChatModel, settings: dict[str, Any], dialect: str,
                  effort: str) -> tuple[BaseChatModel, dict[str, Any]]:
    """The model and call settings of the same request with thinking disabled.

    ``BaseChatOpenAI`` models: ``extra_body`` and ``reasoning_effort`` (model fields or
    call settings) get the dialect's spelling (see ``thinking_off_kwargs``). Other models
    are left as they are; the retry still carries the notice.
    """
    if not _is_openai(model):
        return model, settings
    kwargs: dict[str, Any] = {}
    extra = {**(getattr(model, "extra_body", None) or {}), **(settings.get("extra_body") or {})}
    if extra:
        kwargs["extra_body"] = extra
    effort_now = settings.get("reasoning_effort", getattr(model, "reasoning_effort", None))
    if effort_now is not None:
        kwargs["reasoning_effort"] = effort_now
    changed = thinking_off_kwargs(kwargs, dialect, effort)
    settings = {k: v for k, v in settings.items() if k not in ("extra_body", "reasoning_effort")}
    model = model.model_copy(update={"extra_body": changed.get("extra_body"),
                                     "reasoning_effort": changed.get("reasoning_effort")})
    return model, settings


# -- messages ---------------------------------------------------------------------------


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for block in content or []:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict) and block.get("type") == "text":
            parts.append(str(block.get("text", "")))
    return "".join(parts)


def _joined(*parts: Any) -> Any:
    """Contents joined with blank lines: a string while every part is one, else blocks."""
    present = [p for p in parts if p]
    if all(isinstance(p, str) for p in present):
        return "\n\n".join(present)
    blocks: list[Any] = []
    for part in present:
        if isinstance(part, str):
            blocks.append({"type": "text", "text": part})
        else:
            blocks.extend(part)
    return blocks


def _with_guidance(content: Any, text: str, mode: Literal["prefix", "replace"]) -> Any:
    if mode == "replace":
        return text
    if isinstance(content, str):
        return f"{text}\n\n{content}" if content else text
    return [{"type": "text", "text": text}, *content]


def _response_of(result: Any) -> ModelResponse[Any]:
    if isinstance(result, ModelResponse):
        return result
    if isinstance(result, AIMessage):
        return ModelResponse(result=[result])
    if isinstance(result, ExtendedModelResponse):
        return result.model_response
    raise TypeError(f"unexpected model call result: {type(result).__name__}")


def _ai_index(response: ModelResponse[Any]) -> int:
    for i, message in enumerate(response.result):
        if isinstance(message, AIMessage):
            return i
    return -1


def _is_human(message: Any) -> bool:
    return getattr(message, "type", None) == "human"


def _messages_of(state: Any) -> list[Any]:
    if isinstance(state, dict):
        messages = state.get("messages")
    else:
        messages = getattr(state, "messages", None)
    return list(messages) if isinstance(messages, list) else []


def _thread_id() -> Any:
    try:
        from langgraph.config import get_config

        return (get_config().get("configurable") or {}).get("thread_id")
    except (ImportError, RuntimeError):
        return None


# -- the middleware -----------------------------------------------------------------------


@dataclass
class _Entry:
    """One conversation's session and what the middleware remembers about it."""

    session: SessionGuard
    marker: Any = None
    reaction: Reaction | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class _Attempt:
    request: ModelRequest[Any]
    watch: _Watch


class LoopbreakMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """Cut looping model streams and break repeated failing tool calls in an agent.

    ``config``: the loopbreak configuration (``loopbreak.load_config()`` reads the
    file and ``LOOPBREAK_*``); ``language``: of the notices (default
    ``recovery.language``); ``dialect``: how a retry turns thinking off (default
    ``recovery.dialect``: ``auto`` reads the model's ``extra_body`` / ``reasoning_effort``);
    ``handle_tool_errors``: an exception a tool raises becomes an error ``ToolMessage``
    the model reads (otherwise it is recorded and re-raised); ``max_sessions``: how many
    conversations are remembered (least recently used go first).

    ``trips`` holds the most recent trips (rule, channel, offset) for logs and tests.
    """

    def __init__(self, config: Config | None = None, *, language: str | None = None,
                 dialect: str | None = None, handle_tool_errors: bool = False,
                 max_sessions: int = 256) -> None:
        super().__init__()
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be >= 1: {max_sessions!r}")
        self.config = config or Config()
        self.language = language
        self.dialect = dialect or self.config.recovery.dialect
        self.handle_tool_errors = handle_tool_errors
        self.max_sessions = max_sessions
        self.tools = []
        self.trips: deque[Trip] = deque(maxlen=256)
        self._sessions: OrderedDict[Any, _Entry] = OrderedDict()
        self._lock = threading.Lock()

    # sessions and turns

    def _entry(self, messages: list[Any]) -> _Entry:
        """The session of this conversation, a new turn started on a new user message."""
        thread = _thread_id()
        if thread is not None:
            key: Any = ("thread", str(thread))
        elif messages and getattr(messages[0], "id", None):
            key = ("first", messages[0].id)
        else:
            key = ("default",)
        with self._lock:
            entry = self._sessions.get(key)
            if entry is None:
                entry = _Entry(SessionGuard(self.config, language=self.language))
                self._sessions[key] = entry
                while len(self._sessions) > self.max_sessions:
                    self._sessions.popitem(last=False)
            else:
                self._sessions.move_to_end(key)
        human = next(((i, m) for i, m in reversed(list(enumerate(messages))) if _is_human(m)),
                     None)
        if human is not None:
            index, message = human
            marker = message.id or (index, hash(_text_of(message.content)))
            with entry.lock:
                if marker != entry.marker:
                    entry.marker = marker
                    entry.session.start_turn(_text_of(message.content))
                    entry.session.observe(_text_of(message.content))
        return entry

    # model calls

    def _begin(self, entry: _Entry, request: ModelRequest[Any]) -> _Attempt:
        with entry.lock:
            call = entry.session.start_call()
        watch = _Watch(call)
        model = request.model
        if not isinstance(model, BaseChatModel):  # nothing to hook into: pass it through
            return _Attempt(request, watch)
        settings = request.model_settings
        if _streams_by_setting(model):
            settings = {**settings, "stream": True}
        return _Attempt(request.override(model=_guarded_model(model, watch),
                                         model_settings=settings), watch)

    def _end(self, entry: _Entry, attempt: _Attempt, result: Any | None
             ) -> tuple[ModelResponse[Any], Trip | None]:
        """The call ended (``result`` is ``None`` when the callback stopped it)."""
        watch = attempt.watch
        with entry.lock:
            reaction = entry.session.finish_call(watch.call).reaction
        if reaction is not None:
            entry.reaction = reaction
        trip = watch.trip
        if result is None:
            response: ModelResponse[Any] = ModelResponse(result=[watch.message()])
        else:
            response = _response_of(result)
        if trip is not None:
            self.trips.append(trip)
            logger.info("loopbreak cut a %s stream (%s) after %s characters", trip.channel,
                        trip.rule, f"{trip.offset:,}")
            index = _ai_index(response)
            if index >= 0:
                message = response.result[index]
                metadata = {**message.response_metadata,
                            "loopbreak": {"rule": trip.rule, "channel": trip.channel,
                                          "offset": trip.offset}}
                metadata.setdefault("finish_reason", normal_finish(
                    "openai", bool(getattr(message, "tool_calls", None))))
                response.result[index] = message.model_copy(
                    update={"response_metadata": metadata})
        return response, trip

    def _after_trip(self, entry: _Entry, request: ModelRequest[Any],
                    response: ModelResponse[Any], trip: Trip, *, may_retry: bool = True
                    ) -> tuple[ModelResponse[Any], ModelRequest[Any] | None]:
        """Recovery: the cut message with the notice, and the retry to make (if any)."""
        index = _ai_index(response)
        message = response.result[index] if index >= 0 else AIMessage(content="")
        has_tools = bool(getattr(message, "tool_calls", None))
        recovery = self.config.recovery
        with entry.lock:
            session = entry.session
            used = recovery.retries_per_turn - session.retries_left if may_retry \
                else recovery.retries_per_turn
            plan = plan_cut(trip, self.config, language=session.language, retries_used=used,
                            tools_sent=has_tools)
            if plan.mode == "retry":
                session.claim_retry()
        if plan.mode == "error":
            raise LoopCutError(trip, plan.notice)
        retry = None
        if plan.mode == "retry":
            model, settings = _thinking_off(request.model, request.model_settings,
                                            self.dialect, self.config.recovery.retry_effort)
            retry = request.override(model=model, model_settings=settings,
                                     messages=[*request.messages,
                                               HumanMessage(content=plan.notice)])
        shown = plan.shown
        cut = message.model_copy(update={"content": _joined(message.content, shown)})
        if index >= 0:
            response.result[index] = cut
        else:
            response.result.insert(0, cut)
        return response, retry

    @staticmethod
    def _continued(first: ModelResponse[Any], second: ModelResponse[Any]) -> ModelResponse[Any]:
        """The retry's answer continues the cut message (its text and the notice first)."""
        head = first.result[_ai_index(first)]
        index = _ai_index(second)
        if index < 0:
            return first
        answer = second.result[index]
        metadata = {**answer.response_metadata,
                    "loopbreak": head.response_metadata.get("loopbreak")}
        second.result[index] = answer.model_copy(update={
            "content": _joined(head.content, answer.content), "response_metadata": metadata})
        return second

    def _reacted(self, entry: _Entry, request: ModelRequest[Any]
                 ) -> tuple[ModelRequest[Any], AIMessage | None]:
        """The stall or monologue rule's reaction to the previous call, applied to this one."""
        reaction, entry.reaction = entry.reaction, None
        if reaction is None:
            return request, None
        logger.warning("loopbreak %s rule fired (%s)", reaction.rule, reaction.kind)
        if reaction.kind == "cancel":
            return request, AIMessage(content=reaction.notice)
        if reaction.kind == "steer":
            return request.override(messages=[*request.messages,
                                              HumanMessage(content=reaction.notice)]), None
        return request, None

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any] | AIMessage:
        """Guard the model call: cut a looping stream lawfully, recover, notice."""
        entry = self._entry(request.messages)
        request, cancelled = self._reacted(entry, request)
        if cancelled is not None:
            return cancelled
        attempt = self._begin(entry, request)
        try:
            result: Any = handler(attempt.request)
        except (_Cut, _CutAsync):
            result = None
        response, trip = self._end(entry, attempt, result)
        if trip is None:
            return response
        response, retry = self._after_trip(entry, request, response, trip)
        if retry is None:
            return response
        second = self._begin(entry, retry)
        try:
            result = handler(second.request)
        except (_Cut, _CutAsync):
            result = None
        answer, trip = self._end(entry, second, result)
        if trip is not None:
            answer, _ = self._after_trip(entry, retry, answer, trip, may_retry=False)
        return self._continued(response, answer)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any] | AIMessage:
        """:meth:`wrap_model_call` for ``ainvoke`` / ``astream``."""
        entry = self._entry(request.messages)
        request, cancelled = self._reacted(entry, request)
        if cancelled is not None:
            return cancelled
        attempt = self._begin(entry, request)
        try:
            result: Any = await handler(attempt.request)
        except (_Cut, _CutAsync):
            result = None
        response, trip = self._end(entry, attempt, result)
        if trip is None:
            return response
        response, retry = self._after_trip(entry, request, response, trip)
        if retry is None:
            return response
        second = self._begin(entry, retry)
        try:
            result = await handler(second.request)
        except (_Cut, _CutAsync):
            result = None
        answer, trip = self._end(entry, second, result)
        if trip is not None:
            answer, _ = self._after_trip(entry, retry, answer, trip, may_retry=False)
        return self._continued(response, answer)

    # tool calls

    def _before_tool(self, request: ToolCallRequest) -> tuple[_Entry, ToolMessage | None]:
        entry = self._entry(_messages_of(request.state))
        call = request.tool_call
        with entry.lock:
            decision = entry.session.before_tool(call["name"], call.get("args") or {})
        if decision.allowed:
            return entry, None
        logger.info("loopbreak denied a call to %s (%s, %d times)", call["name"],
                    decision.rule, decision.failures)
        return entry, ToolMessage(content=decision.reason or "", tool_call_id=call.get("id") or "",
                                  name=call["name"], status="error")

    def _after_tool(self, entry: _Entry, request: ToolCallRequest,
                    result: ToolMessage | Command[Any]) -> ToolMessage | Command[Any]:
        call = request.tool_call
        name, args = call["name"], call.get("args") or {}
        if not isinstance(result, ToolMessage):
            with entry.lock:  # a state update: what it sets is its result
                entry.session.after_tool(name, args, repr(getattr(result, "update", result)),
                                         failed=False)
            return result
        text = _text_of(result.content)
        failed = result.status == "error" or looks_like_failure(text)
        with entry.lock:
            guidance = entry.session.after_tool(name, args, text, failed=failed)
        if guidance is None:
            return result
        return result.model_copy(update={
            "content": _with_guidance(result.content, guidance.text, guidance.mode)})

    def _tool_error(self, entry: _Entry, request: ToolCallRequest, exc: Exception
                    ) -> ToolMessage | None:
        """A tool raised: record it; the message the model reads, or ``None`` to re-raise."""
        call = request.tool_call
        text = f"Error: {type(exc).__name__}: {exc}"
        with entry.lock:
            guidance = entry.session.after_tool(call["name"], call.get("args") or {}, text,
                                                failed=True, error_code=type(exc).__name__)
        if not self.handle_tool_errors:
            return None
        content = guidance.apply(text) if guidance is not None else text
        return ToolMessage(content=content, tool_call_id=call.get("id") or "",
                           name=call["name"], status="error")

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        """The tool-failure breaker around one tool call: deny, run, guide."""
        entry, denied = self._before_tool(request)
        if denied is not None:
            return denied
        try:
            result = handler(request)
        except GraphBubbleUp:  # an interrupt, not a failure
            raise
        except Exception as exc:
            message = self._tool_error(entry, request, exc)
            if message is None:
                raise
            return message
        return self._after_tool(entry, request, result)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        """:meth:`wrap_tool_call` for ``ainvoke`` / ``astream``."""
        entry, denied = self._before_tool(request)
        if denied is not None:
            return denied
        try:
            result = await handler(request)
        except GraphBubbleUp:  # an interrupt, not a failure
            raise
        except Exception as exc:
            message = self._tool_error(entry, request, exc)
            if message is None:
                raise
            return message
        return self._after_tool(entry, request, result)
