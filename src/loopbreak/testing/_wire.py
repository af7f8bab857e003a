"""A :class:`Script` rendered in each wire format, and cut into socket writes.

Pure functions, no I/O: the server in ``upstream.py`` only executes the steps of
:func:`plan`. Shapes follow what the real services send: OpenAI
``chat.completion.chunk`` objects (``system_fingerprint``, ``logprobs``, a first
delta with the role, a last choice chunk with the finish reason, an optional
usage chunk with ``choices: []``, then ``data: [DONE]``), and Anthropic's event
sequence (``message_start``, ``content_block_start``/``_delta``/``_stop`` per
block, ``ping``, ``message_delta`` with stop reason and usage, ``message_stop``).
"""

from __future__ import annotations

import bisect
import http
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from loopbreak.testing._script import (
    CloseHow,
    Dialect,
    Event,
    Reasoning,
    Script,
    Text,
    ToolCall,
)


def dumps(obj: Any) -> str:
    """Compact JSON with non-ASCII text kept as UTF-8, as the real services send it
    (so multi-byte characters are really on the wire to be split)."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True)
class Context:
    """What a response takes from its request and the server."""

    dialect: Dialect
    model: str
    response_id: str
    created: int
    seq: int
    """The request's number on this server; default tool-call ids carry it, so
    they stay unique across the turns of a conversation."""
    include_usage: bool = False


@dataclass(frozen=True)
class WireEvent:
    """One SSE event: ``data`` and, for Anthropic, the ``event:`` name."""

    data: str
    name: str | None = None
    finish: bool = False
    """This event carries the finish (a script's ``"finish"`` position)."""

    def encode(self, data: str | None = None) -> bytes:
        body = self.data if data is None else data
        if self.name is None:
            return f"data: {body}\n\n".encode()
        return f"event: {self.name}\ndata: {body}\n\n".encode()


def _tool_id(call: ToolCall, ctx: Context, n: int) -> str:
    if call.id is not None:
        return call.id
    prefix = "call" if ctx.dialect == "openai" else "toolu"
    return f"{prefix}_{ctx.seq}_{n}"


# -- OpenAI -----------------------------------------------------------------------


def openai_events(script: Script, ctx: Context) -> Iterator[WireEvent]:
    """The ``chat.completion.chunk`` stream of ``script``, ``[DONE]`` included."""
    usage_chunk = ctx.include_usage if script.usage_chunk is None else script.usage_chunk
    head = {
        "id": ctx.response_id,
        "object": "chat.completion.chunk",
        "created": ctx.created,
        "model": ctx.model,
        "system_fingerprint": None,
    }

    def chunk(delta: dict[str, Any], finish: str | None = None,
              fields: tuple[tuple[str, str], ...] = ()) -> WireEvent:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        obj: dict[str, Any] = {**head, "choices": [choice], **dict(fields)}
        if usage_chunk:
            # With include_usage every other chunk carries "usage": null.
            obj["usage"] = None
        return WireEvent(dumps(obj), finish=finish is not None)

    field = script.reasoning_field
    deepseek = script.flavour == "deepseek"
    role_pending = not script.role_chunk
    if script.role_chunk:
        first = {"role": "assistant", "content": None, field: ""} if deepseek else None
        yield chunk(first or {"role": "assistant", "content": ""})

    def with_role(delta: dict[str, Any]) -> dict[str, Any]:
        nonlocal role_pending
        if role_pending:
            role_pending = False
            return {"role": "assistant", **delta}
        return delta

    calls = 0
    for event in script.iter_events():
        if isinstance(event, Reasoning):
            delta = {"content": None, field: event.text} if deepseek else {field: event.text}
            yield chunk(with_role(delta), fields=event.fields)
        elif isinstance(event, Text):
            delta = {"content": event.text, field: None} if deepseek else {"content": event.text}
            yield chunk(with_role(delta), fields=event.fields)
        else:
            start = {
                "index": calls,
                "id": _tool_id(event, ctx, calls),
                "type": "function",
                "function": {"name": event.name, "arguments": ""},
            }
            yield chunk(with_role({"tool_calls": [start]}))
            for piece in event.arguments:
                part = {"index": calls, "function": {"arguments": piece}}
                yield chunk({"tool_calls": [part]})
            calls += 1
    yield chunk(with_role({}), script.finish_for("openai"))
    if usage_chunk:
        usage = script.usage_or_default().openai()
        yield WireEvent(dumps({**head, "choices": [], "usage": usage}))
    yield WireEvent("[DONE]")


def openai_body(script: Script, ctx: Context) -> dict[str, Any]:
    """The non-streaming ``chat.completion`` of ``script``."""
    calls = script.tool_calls
    message: dict[str, Any] = {
        "role": "assistant",
        "content": script.text if script.text or not calls else None,
        "refusal": None,
    }
    if script.reasoning:
        message[script.reasoning_field] = script.reasoning
    if calls:
        message["tool_calls"] = [
            {
                "id": _tool_id(call, ctx, n),
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments_text},
            }
            for n, call in enumerate(calls)
        ]
    choice = {
        "index": 0,
        "message": message,
        "logprobs": None,
        "finish_reason": script.finish_for("openai"),
    }
    return {
        "id": ctx.response_id,
        "object": "chat.completion",
        "created": ctx.created,
        "model": ctx.model,
        "system_fingerprint": None,
        "choices": [choice],
        "usage": script.usage_or_default().openai(),
    }


# -- Anthropic --------------------------------------------------------------------


def _event(name: str, obj: dict[str, Any], *, finish: bool = False) -> WireEvent:
    return WireEvent(dumps({"type": name, **obj}), name=name, finish=finish)


def _kind(event: Event) -> str:
    if isinstance(event, Reasoning):
        return "thinking"
    return "text" if isinstance(event, Text) else "tool_use"


def anthropic_events(script: Script, ctx: Context) -> Iterator[WireEvent]:
    """The Messages event stream of ``script``: consecutive deltas of one kind
    share a content block; every tool call is a block of its own."""
    usage = script.usage_or_default()
    message: dict[str, Any] = {
        "id": ctx.response_id,
        "type": "message",
        "role": "assistant",
        "model": ctx.model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": usage.input_tokens, "output_tokens": 1},
    }
    yield _event("message_start", {"message": message})
    index = -1
    open_kind: str | None = None
    pinged = not script.ping
    calls = 0

    def close() -> Iterator[WireEvent]:
        if open_kind == "thinking" and script.signature:
            delta = {"type": "signature_delta", "signature": script.signature}
            yield _event("content_block_delta", {"index": index, "delta": delta})
        yield _event("content_block_stop", {"index": index})

    for event in script.iter_events():
        kind = _kind(event)
        if kind != open_kind or isinstance(event, ToolCall):
            if open_kind is not None:
                yield from close()
            index += 1
            open_kind = kind
            block: dict[str, Any]
            if isinstance(event, Reasoning):
                block = {"type": "thinking", "thinking": "", "signature": ""}
            elif isinstance(event, Text):
                block = {"type": "text", "text": ""}
            else:
                block = {
                    "type": "tool_use",
                    "id": _tool_id(event, ctx, calls),
                    "name": event.name,
                    "input": {},
                }
                calls += 1
            yield _event("content_block_start", {"index": index, "content_block": block})
            if not pinged:
                pinged = True
                yield _event("ping", {})
        if isinstance(event, Reasoning):
            delta = {"type": "thinking_delta", "thinking": event.text}
            yield _event("content_block_delta",
                         {"index": index, "delta": delta, **dict(event.fields)})
        elif isinstance(event, Text):
            delta = {"type": "text_delta", "text": event.text}
            yield _event("content_block_delta",
                         {"index": index, "delta": delta, **dict(event.fields)})
        else:
            for piece in event.arguments:
                delta = {"type": "input_json_delta", "partial_json": piece}
                yield _event("content_block_delta", {"index": index, "delta": delta})
    if open_kind is not None:
        yield from close()
    if not pinged:
        yield _event("ping", {})
    stop = {"stop_reason": script.finish_for("anthropic"), "stop_sequence": None}
    counts = {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens}
    yield _event("message_delta", {"delta": stop, "usage": counts}, finish=True)
    yield _event("message_stop", {})


def _tool_input(arguments: str) -> Any:
    try:
        return json.loads(arguments) if arguments else {}
    except ValueError:
        # Broken arguments are kept as they came, so a test sees what was scripted.
        return arguments


def anthropic_body(script: Script, ctx: Context) -> dict[str, Any]:
    """The non-streaming Messages response of ``script``."""
    content: list[dict[str, Any]] = []
    calls = 0
    for event in script.iter_events():
        last = content[-1] if content else None
        if isinstance(event, Reasoning):
            if last is not None and last["type"] == "thinking":
                last["thinking"] += event.text
            else:
                content.append(
                    {"type": "thinking", "thinking": event.text, "signature": script.signature}
                )
        elif isinstance(event, Text):
            if last is not None and last["type"] == "text":
                last["text"] += event.text
            else:
                content.append({"type": "text", "text": event.text})
        else:
            content.append(
                {
                    "type": "tool_use",
                    "id": _tool_id(event, ctx, calls),
                    "name": event.name,
                    "input": _tool_input(event.arguments_text),
                }
            )
            calls += 1
    usage = script.usage_or_default()
    return {
        "id": ctx.response_id,
        "type": "message",
        "role": "assistant",
        "model": ctx.model,
        "content": content,
        "stop_reason": script.finish_for("anthropic"),
        "stop_sequence": None,
        "usage": {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens},
    }


# -- both -------------------------------------------------------------------------


def stream_events(script: Script, ctx: Context) -> Iterator[WireEvent]:
    if ctx.dialect == "openai":
        return openai_events(script, ctx)
    return anthropic_events(script, ctx)


def response_body(script: Script, ctx: Context) -> dict[str, Any]:
    if ctx.dialect == "openai":
        return openai_body(script, ctx)
    return anthropic_body(script, ctx)


_OPENAI_ERRORS = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("permission_error", None),
    404: ("invalid_request_error", "not_found"),
    413: ("invalid_request_error", "request_too_large"),
    429: ("rate_limit_error", "rate_limit_exceeded"),
}
_ANTHROPIC_ERRORS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def error_body(
    dialect: Dialect,
    status: int,
    message: str | None = None,
    error_type: str | None = None,
    request_id: str | None = None,
) -> dict[str, Any]:
    """The error body each service sends with an error status."""
    if message is None:
        try:
            phrase = http.HTTPStatus(status).phrase
        except ValueError:
            phrase = "Error"
        message = f"{phrase} (scripted upstream)"
    if dialect == "openai":
        default_type, code = _OPENAI_ERRORS.get(
            status, ("server_error", None) if status >= 500 else ("invalid_request_error", None)
        )
        error = {"message": message, "type": error_type or default_type, "param": None}
        return {"error": {**error, "code": code}}
    fallback = "api_error" if status >= 500 else "invalid_request_error"
    kind = error_type or _ANTHROPIC_ERRORS.get(status, fallback)
    body: dict[str, Any] = {"type": "error", "error": {"type": kind, "message": message}}
    if request_id is not None:
        body["request_id"] = request_id
    return body


def error_event(dialect: Dialect, message: str | None, error_type: str | None) -> WireEvent:
    """An error sent inside a stream (Anthropic ``event: error``; OpenAI an
    ``error`` object in a ``data:`` line, as OpenAI-compatible servers do)."""
    if dialect == "openai":
        error = {
            "message": message or "The server had an error while processing your request.",
            "type": error_type or "server_error",
            "param": None,
            "code": None,
        }
        return WireEvent(dumps({"error": error}))
    error = {"type": error_type or "overloaded_error", "message": message or "Overloaded"}
    return _event("error", {"error": error})


def corrupt(data: str) -> str:
    """``data`` cut in half: any proper prefix of a JSON object is invalid JSON."""
    return data[: max(1, len(data) // 2)]


# -- delivery -----------------------------------------------------------------------


@dataclass(frozen=True)
class Write:
    """Bytes for one socket write (one HTTP chunk)."""

    data: bytes
    events: int
    """Wire events wholly sent once this write is out (a running count)."""


@dataclass(frozen=True)
class Pause:
    """Send nothing for ``seconds`` (``None``: until the client or the server goes)."""

    seconds: float | None
    keepalive: float | None = None


@dataclass(frozen=True)
class Close:
    """End the exchange early."""

    how: CloseHow


@dataclass(frozen=True)
class End:
    """End the body normally."""


Step = Write | Pause | Close | End


def plan(script: Script, events: Iterable[WireEvent], dialect: Dialect) -> Iterator[Step]:
    """The socket writes, pauses and ending of a stream, faults applied.

    Lazy, so an endless script costs no memory.
    """
    d = script.delivery
    comment = f": {d.keepalive_text}\n\n".encode()
    group = bytearray()
    ends: list[int] = []  # offsets in ``group`` where an event is complete
    done = 0  # events complete in earlier groups

    def flush() -> Iterator[Step]:
        nonlocal done
        if not group:
            return
        size = d.write_bytes or len(group)
        for start in range(0, len(group), size):
            stop = min(start + size, len(group))
            yield Write(bytes(group[start:stop]), done + bisect.bisect_right(ends, stop))
        done += len(ends)
        group.clear()
        ends.clear()

    for index, event in enumerate(events):

        def hits(at: object, index: int = index, event: WireEvent = event) -> bool:
            return at == index or (at == "finish" and event.finish)

        if hits(script.close_after):
            yield from flush()
            yield Close(script.close_how)
            return
        if index and d.keepalive_every and index % d.keepalive_every == 0:
            group += comment
        if hits(script.error_event_at):
            group += error_event(dialect, script.error_message, script.error_type).encode()
            ends.append(len(group))
            yield from flush()
            yield End()
            return
        if hits(script.stall_after):
            yield from flush()
            yield Pause(script.stall_seconds, script.stall_keepalive)
        data = corrupt(event.data) if hits(script.invalid_json_at) else None
        group += event.encode(data)
        ends.append(len(group))
        if len(ends) >= d.events_per_write:
            yield from flush()
    yield from flush()
    yield End()
