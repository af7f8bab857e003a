"""The two wire formats the proxy guards: what their events mean and how to end them.

A format's stream object turns one server-sent event into the pieces the engine
judges (reasoning, text, tool-call arguments, finish, usage), and writes the
events the proxy adds itself: a notice the model will read, a lawful finish
after a cut, an error in the client's own format, and the chunks of a retried
answer rewritten to continue the stream the client is already reading.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from loopbreak._recovery.chunks import MalformedChunk, Piece, openai_pieces
from loopbreak.proxy.sse import SSEEvent


class BrokenStream(ValueError):
    """An upstream event that is not valid data of its format."""


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def json_bytes(obj: Any, *, compact: bool = False) -> bytes:
    """``obj`` as UTF-8 JSON. A string may hold a lone surrogate (JSON escapes one as
    ``\\ud800``, and such an escape parses), which UTF-8 cannot write: then the whole text
    is written with ASCII escapes, still the same JSON value."""
    separators = (",", ":") if compact else None
    try:
        return json.dumps(obj, ensure_ascii=False, separators=separators).encode()
    except UnicodeEncodeError:
        return json.dumps(obj, separators=separators).encode()


def sse_data(obj: Any, event: str | None = None) -> bytes:
    """One event with ``obj`` as its JSON data."""
    head = f"event: {event}\n" if event else ""
    return b"%sdata: %s\n\n" % (head.encode(), json_bytes(obj, compact=True))


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


_loads: Callable[[str], Any]
try:  # orjson parses an event in a fifth of the time, where it is installed
    from orjson import loads as _loads
except ImportError:  # pragma: no cover - depends on the environment
    _loads = json.loads


def _load(event: SSEEvent) -> Any:
    try:
        return _loads(event.data)
    except ValueError as exc:
        raise BrokenStream(f"unparseable event data: {exc}") from None


@dataclass
class OpenAIStream:
    """State of one OpenAI chat-completions stream as the client has seen it."""

    id: str = ""
    model: str = ""
    created: int = 0
    sent_role: bool = False
    tool_keys: set[int | str] = field(default_factory=set)

    kind: Literal["openai"] = "openai"

    def parse(self, event: SSEEvent) -> list[Piece]:
        data = event.data
        # A chunk's JSON ends in "}": only other data is stripped to look for the end marker
        # (a copy of every event otherwise).
        if not data.endswith("}") and data.strip() == "[DONE]":
            return [Piece("done")]
        obj = _load(event)
        if not isinstance(obj, dict):
            raise BrokenStream("event data is not a JSON object")
        if "error" in obj:
            return [Piece("error", _dumps(obj["error"]))]
        if not (self.id and self.model and self.created):
            self.id = self.id or str(obj.get("id") or "")
            self.model = self.model or str(obj.get("model") or "")
            created = obj.get("created")
            self.created = self.created or (created if isinstance(created, int) else 0)
        try:
            pieces = openai_pieces(obj, strict=True)
        except MalformedChunk as exc:
            raise BrokenStream(str(exc)) from None
        choices = obj["choices"]
        if not self.sent_role:
            for choice in choices:
                delta = choice.get("delta") if isinstance(choice, dict) else None
                if isinstance(delta, dict) and delta.get("role"):
                    self.sent_role = True
        for piece in pieces:
            if piece.kind == "tool" and piece.key is not None:
                self.tool_keys.add(piece.key)
        if isinstance(obj.get("usage"), dict) and not choices:
            pieces.append(Piece("usage"))
        return pieces

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        return sse_data({
            "id": self.id or "chatcmpl-loopbreak", "object": "chat.completion.chunk",
            "created": self.created or int(time.time()), "model": self.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        })

    def text(self, text: str) -> bytes:
        """A chunk that shows ``text`` to the client (and, in its history, to the model)."""
        delta: dict[str, Any] = {"content": text}
        if not self.sent_role:
            delta = {"role": "assistant", **delta}
            self.sent_role = True
        return self._chunk(delta)

    def finish(self, reason: str = "stop") -> bytes:
        """The lawful end: a last chunk with a finish reason, then ``[DONE]``."""
        return self._chunk({}, reason) + b"data: [DONE]\n\n"

    def error(self, message: str, code: str = "upstream_error") -> bytes:
        """An error the client's SDK raises, then the end of the stream."""
        return sse_data({"error": {"message": message, "type": code, "param": None,
                                   "code": code}}) + b"data: [DONE]\n\n"

    def continuation(self, event: SSEEvent, pieces: list[Piece]) -> bytes | None:
        """A retried answer's event rewritten to continue this stream (``None``: drop it)."""
        if any(p.kind == "done" for p in pieces):
            return b"data: [DONE]\n\n"
        obj = json.loads(event.data)
        if not isinstance(obj, dict):
            return None
        choices = obj.get("choices") or []
        if choices and not any(p.kind in ("text", "tool", "finish", "reasoning") for p in pieces):
            return None  # the retry's role-only opening chunk
        for choice in choices:
            if isinstance(choice, dict) and isinstance(choice.get("delta"), dict):
                choice["delta"].pop("role", None)
        obj["id"], obj["created"] = self.id or obj.get("id"), self.created or obj.get("created")
        return sse_data(obj)


@dataclass
class AnthropicStream:
    """State of one Anthropic messages stream as the client has seen it."""

    message_id: str = ""
    model: str = ""
    open_blocks: dict[int, str] = field(default_factory=dict)
    next_index: int = 0
    index_offset: int = 0
    output_tokens: int = 0
    started: bool = False

    kind: Literal["anthropic"] = "anthropic"

    def parse(self, event: SSEEvent) -> list[Piece]:
        obj = _load(event)
        if not isinstance(obj, dict):
            raise BrokenStream("event data is not a JSON object")
        kind = obj.get("type") or event.event
        if kind == "message_start":
            message = _dict(obj.get("message"))
            self.message_id = self.message_id or str(message.get("id") or "")
            self.model = self.model or str(message.get("model") or "")
            self.started = True
            return [Piece("start")]
        if kind == "content_block_start":
            block = obj.get("content_block")
            index = obj.get("index")
            if not isinstance(block, dict) or not isinstance(index, int):
                raise BrokenStream("content_block_start without a block and an index")
            block_type = str(block.get("type"))
            self.open_blocks[index + self.index_offset] = block_type
            self.next_index = max(self.next_index, index + self.index_offset + 1)
            if block_type == "tool_use":
                return [Piece("block_start", "", index, str(block.get("name") or "")),
                        Piece("tool", "", index, str(block.get("name") or ""))]
            return [Piece("block_start", block_type, index)]
        if kind == "content_block_delta":
            delta = obj.get("delta")
            index = obj.get("index")
            if not isinstance(delta, dict):
                raise BrokenStream("content_block_delta without a delta")
            if delta.get("type") == "thinking_delta" and isinstance(delta.get("thinking"), str):
                return [Piece("reasoning", delta["thinking"], index)]
            if delta.get("type") == "text_delta" and isinstance(delta.get("text"), str):
                return [Piece("text", delta["text"], index)]
            if delta.get("type") == "input_json_delta" and isinstance(index, int):
                partial = delta.get("partial_json")
                return [Piece("tool", partial if isinstance(partial, str) else "", index)]
            return [Piece("other")]
        if kind == "content_block_stop":
            index = obj.get("index")
            if isinstance(index, int):
                self.open_blocks.pop(index + self.index_offset, None)
            return [Piece("block_stop", "", index)]
        if kind == "message_delta":
            delta = _dict(obj.get("delta"))
            usage = _dict(obj.get("usage"))
            if isinstance(usage.get("output_tokens"), int):
                self.output_tokens = usage["output_tokens"]
            reason = delta.get("stop_reason")
            return [Piece("finish", reason)] if isinstance(reason, str) else [Piece("usage")]
        if kind == "message_stop":
            return [Piece("done")]
        if kind == "error":
            return [Piece("error", _dumps(obj.get("error")))]
        return [Piece("other")]

    def _close_open(self) -> bytes:
        out = b"".join(sse_data({"type": "content_block_stop", "index": i}, "content_block_stop")
                       for i in sorted(self.open_blocks))
        self.open_blocks.clear()
        return out

    def _start(self) -> bytes:
        if self.started:
            return b""
        self.started = True
        return sse_data({"type": "message_start", "message": {
            "id": self.message_id or "msg_loopbreak", "type": "message", "role": "assistant",
            "model": self.model, "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0}}}, "message_start")

    def text(self, text: str) -> bytes:
        """A text block the client shows (and, in its history, the model reads)."""
        index = self.next_index
        self.next_index += 1
        return (self._start() + self._close_open()
                + sse_data({"type": "content_block_start", "index": index,
                            "content_block": {"type": "text", "text": ""}}, "content_block_start")
                + sse_data({"type": "content_block_delta", "index": index,
                            "delta": {"type": "text_delta", "text": text}}, "content_block_delta")
                + sse_data({"type": "content_block_stop", "index": index}, "content_block_stop"))

    def close_blocks(self) -> bytes:
        """Close every open block, so the next block can start lawfully."""
        return self._close_open()

    def finish(self, reason: str = "end_turn") -> bytes:
        """The lawful end: open blocks closed, a stop reason, ``message_stop``."""
        return (self._start() + self._close_open()
                + sse_data({"type": "message_delta",
                            "delta": {"stop_reason": reason, "stop_sequence": None},
                            "usage": {"output_tokens": self.output_tokens}}, "message_delta")
                + sse_data({"type": "message_stop"}, "message_stop"))

    def error(self, message: str, code: str = "api_error") -> bytes:
        """An error event the client's SDK raises."""
        return sse_data({"type": "error", "error": {"type": code, "message": message}}, "error")

    def continuation(self, event: SSEEvent, pieces: list[Piece]) -> bytes | None:
        """A retried answer's event rewritten to continue this stream (``None``: drop it)."""
        obj = json.loads(event.data)
        if not isinstance(obj, dict):
            return None
        kind = obj.get("type") or event.event
        if kind in ("message_start", "ping"):
            return None
        if isinstance(obj.get("index"), int):
            obj["index"] += self.index_offset
        return sse_data(obj, str(kind))


Stream = OpenAIStream | AnthropicStream


def error_body(kind: str, status: int, message: str, code: str | None = None) -> bytes:
    """A JSON error response body in the client's format (``code``: its type, else the
    status's)."""
    if kind == "anthropic":
        error_type = code or {400: "invalid_request_error", 401: "authentication_error",
                              404: "not_found_error", 413: "request_too_large",
                              429: "rate_limit_error", 502: "api_error",
                              504: "timeout_error"}.get(status, "api_error")
        return json_bytes({"type": "error", "error": {"type": error_type, "message": message}},
                          compact=True)
    error_type = code or {400: "invalid_request_error", 413: "invalid_request_error",
                          502: "upstream_error", 504: "upstream_timeout"}.get(status, "api_error")
    return json_bytes({"error": {"message": message, "type": error_type, "param": None,
                                 "code": error_type}}, compact=True)
