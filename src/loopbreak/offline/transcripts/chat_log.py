"""OpenAI- and Anthropic-style logs: requests, responses and recorded stream chunks.

One JSONL file is one session. A line can be:

* ``{"request": {...}, "response": {...}}``: a chat-completions or messages request
  with its complete response, or with ``"chunks": [...]`` / ``"events": [...]``
  holding the recorded stream instead of ``response``;
* a bare ``chat.completion`` response or Anthropic ``message``;
* one recorded stream chunk (``chat.completion.chunk``) or stream event
  (``message_start`` ... ``message_stop``); consecutive chunks of one response id
  (or one message) form one call. ``data: `` prefixes of raw SSE captures are
  accepted.

Reasoning comes from ``reasoning_content`` or ``reasoning`` (OpenAI dialects) and
``thinking`` (Anthropic), text from ``content``/``text``, tool calls from
``tool_calls`` / ``tool_use``. Turns and tool results come from the requests'
history when the log has it: a new user message starts a turn, a tool message
(``role: tool``, or a ``tool_result`` block) is a result of an earlier call.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from loopbreak._engine.tool_failure import looks_like_failure
from loopbreak.offline.transcripts._model import (
    Delta,
    Event,
    ReadReport,
    RecordedCall,
    SessionStart,
    ToolCallRecord,
    ToolResult,
    TurnEnd,
    TurnStart,
)


class _CallBuilder:
    """Accumulates the deltas of one streamed response."""

    def __init__(self, ident: str | None) -> None:
        self.ident = ident
        self.deltas: list[Delta] = []
        self.tools: dict[int | str, list[str]] = {}  # key -> [name, arguments]
        self.finish: str | None = None
        self.usage: dict[str, int] = {}
        self.anthropic_blocks: dict[int, str] = {}

    def add(self, channel: str, text: Any, key: str | int | None = None, name: str = "") -> None:
        if isinstance(text, str) and (text or name):
            self.deltas.append(Delta(channel, text, key, name))  # type: ignore[arg-type]
            if channel == "tool" and key is not None:
                entry = self.tools.setdefault(key, ["", ""])
                entry[0] += name
                entry[1] += text

    def build(self, turn: int, step: int) -> RecordedCall:
        tools = tuple(ToolCallRecord(k, v[0], v[1]) for k, v in self.tools.items())
        return RecordedCall(turn, step, tuple(self.deltas), "message", self.finish, tools,
                            dict(self.usage))


def _usage(raw: Any) -> dict[str, int]:
    if not isinstance(raw, dict):
        return {}
    return {k: v for k, v in raw.items() if isinstance(v, int) and not isinstance(v, bool)}


def _openai_chunk(builder: _CallBuilder, chunk: dict[str, Any]) -> None:
    builder.usage.update(_usage(chunk.get("usage")))
    for choice in chunk.get("choices") or []:
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta") or {}
        if isinstance(delta, dict):
            for field in ("reasoning_content", "reasoning"):
                builder.add("reasoning", delta.get(field))
            builder.add("text", delta.get("content"))
            for call in delta.get("tool_calls") or []:
                if not isinstance(call, dict):
                    continue
                key = call.get("index", call.get("id"))
                fn = call.get("function") or {}
                name = fn.get("name") if isinstance(fn, dict) else None
                args = fn.get("arguments") if isinstance(fn, dict) else None
                if isinstance(key, (int, str)):
                    builder.add("tool", args if isinstance(args, str) else "", key,
                                name if isinstance(name, str) else "")
        if isinstance(choice.get("finish_reason"), str):
            builder.finish = choice["finish_reason"]


def _openai_response(builder: _CallBuilder, response: dict[str, Any]) -> None:
    builder.usage.update(_usage(response.get("usage")))
    choices = response.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        return
    message = choices[0].get("message") or {}
    if isinstance(message, dict):
        for field in ("reasoning_content", "reasoning"):
            builder.add("reasoning", message.get(field))
        builder.add("text", message.get("content"))
        for i, call in enumerate(message.get("tool_calls") or []):
            if isinstance(call, dict) and isinstance(call.get("function"), dict):
                fn = call["function"]
                builder.add("tool", fn.get("arguments") if isinstance(fn.get("arguments"), str)
                            else "", call.get("id", i) if isinstance(call.get("id", i), (str, int))
                            else i, fn.get("name") if isinstance(fn.get("name"), str) else "")
    if isinstance(choices[0].get("finish_reason"), str):
        builder.finish = choices[0]["finish_reason"]


def _anthropic_event(builder: _CallBuilder, event: dict[str, Any]) -> bool:
    """Apply one stream event; True when the message is complete."""
    kind = event.get("type")
    if kind == "message_start" and isinstance(event.get("message"), dict):
        builder.usage.update(_usage(event["message"].get("usage")))
    elif kind == "content_block_start":
        block = event.get("content_block") or {}
        index = event.get("index")
        if isinstance(block, dict) and isinstance(index, int):
            builder.anthropic_blocks[index] = str(block.get("type"))
            if block.get("type") == "tool_use":
                builder.add("tool", "", index, str(block.get("name") or ""))
            elif block.get("type") == "text":
                builder.add("text", block.get("text"))
            elif block.get("type") == "thinking":
                builder.add("reasoning", block.get("thinking"))
    elif kind == "content_block_delta":
        delta = event.get("delta") or {}
        index = event.get("index")
        if isinstance(delta, dict):
            if delta.get("type") == "thinking_delta":
                builder.add("reasoning", delta.get("thinking"))
            elif delta.get("type") == "text_delta":
                builder.add("text", delta.get("text"))
            elif delta.get("type") == "input_json_delta" and isinstance(index, int):
                builder.add("tool", delta.get("partial_json"), index)
    elif kind == "message_delta":
        delta = event.get("delta") or {}
        if isinstance(delta, dict) and isinstance(delta.get("stop_reason"), str):
            builder.finish = delta["stop_reason"]
        builder.usage.update(_usage(event.get("usage")))
    return kind == "message_stop"


def _anthropic_message(builder: _CallBuilder, message: dict[str, Any]) -> None:
    builder.usage.update(_usage(message.get("usage")))
    for i, block in enumerate(message.get("content") or []):
        if not isinstance(block, dict):
            continue
        if block.get("type") == "thinking":
            builder.add("reasoning", block.get("thinking"))
        elif block.get("type") == "text":
            builder.add("text", block.get("text"))
        elif block.get("type") == "tool_use":
            builder.add("tool", json.dumps(block.get("input", {}), ensure_ascii=False),
                        block.get("id", i) if isinstance(block.get("id", i), (str, int)) else i,
                        str(block.get("name") or ""))
    if isinstance(message.get("stop_reason"), str):
        builder.finish = message["stop_reason"]


class _History:
    """What the requests' message history says: turns and tool results."""

    def __init__(self) -> None:
        self.seen = 0
        self.turn = 0
        self.calls_by_id: dict[str, tuple[str, str]] = {}
        self.working = False  # the model's last message asked for tools: its turn goes on

    def advance(self, request: dict[str, Any]) -> Iterator[Event]:
        messages = request.get("messages")
        if not isinstance(messages, list):
            return
        new = messages[self.seen :] if len(messages) >= self.seen else messages
        self.seen = len(messages)
        for message in new:
            if not isinstance(message, dict):
                continue
            role = message.get("role")
            content = message.get("content")
            if role == "assistant":
                self.working = bool(message.get("tool_calls")) or any(
                    isinstance(b, dict) and b.get("type") == "tool_use"
                    for b in (content if isinstance(content, list) else []))
                for call in message.get("tool_calls") or []:
                    if isinstance(call, dict) and isinstance(call.get("function"), dict):
                        fn = call["function"]
                        self.calls_by_id[str(call.get("id"))] = (str(fn.get("name") or ""),
                                                                 str(fn.get("arguments") or ""))
                for block in content if isinstance(content, list) else []:
                    if isinstance(block, dict) and block.get("type") == "tool_use":
                        self.calls_by_id[str(block.get("id"))] = (
                            str(block.get("name") or ""),
                            json.dumps(block.get("input", {}), ensure_ascii=False))
            elif role == "tool":
                key = str(message.get("tool_call_id"))
                name, args = self.calls_by_id.get(key, (str(message.get("name") or ""), ""))
                text = _text_of(content)
                yield ToolResult(self.turn, key, name, args, text, looks_like_failure(text))
            elif role == "user":
                results = [b for b in content if isinstance(b, dict)
                           and b.get("type") == "tool_result"] if isinstance(content, list) else []
                for block in results:
                    key = str(block.get("tool_use_id"))
                    name, args = self.calls_by_id.get(key, ("", ""))
                    text = _text_of(block.get("content"))
                    failed = bool(block.get("is_error")) or looks_like_failure(text)
                    yield ToolResult(self.turn, key, name, args, text, failed)
                if not results and not (self.working and self.turn):
                    # A user message while the model works (a reminder) stays in its turn.
                    if self.turn:
                        yield TurnEnd(self.turn)
                    self.turn += 1
                    yield TurnStart(self.turn)


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b.get("text", "") if isinstance(b, dict) and isinstance(b.get("text"), str)
                       else b if isinstance(b, str) else "" for b in content)
    return ""


def _parse(line: str) -> Any:
    line = line.strip()
    if line.startswith("data:"):
        line = line[5:].strip()
        if line == "[DONE]":
            return None
    if not line or line.startswith(("event:", ":")):
        return None
    return json.loads(line)


def read_chat_log(path: str | Path) -> Iterator[Event]:
    """The events of one OpenAI- or Anthropic-style JSONL log."""
    from loopbreak.offline.transcripts._files import open_text_lines

    path = Path(path)
    report = ReadReport(str(path))
    history = _History()
    yield SessionStart(str(path), "chat-log")
    step = 0
    builder: _CallBuilder | None = None
    turn_of_last = 0

    def flush() -> Iterator[Event]:
        nonlocal builder, step, turn_of_last
        if builder is not None and (builder.deltas or builder.finish):
            if history.turn == 0:
                history.turn = 1
                yield TurnStart(1)
            if history.turn != turn_of_last:
                step, turn_of_last = 0, history.turn
            step += 1
            yield builder.build(history.turn, step)
        builder = None

    for number, line in open_text_lines(path, report):
        report.rows += 1
        try:
            obj = _parse(line)
        except ValueError as exc:
            report.note_bad(f"line {number}: invalid JSON: {exc}")
            continue
        if obj is None:
            continue
        if not isinstance(obj, dict):
            report.note_bad(f"line {number}: not a JSON object")
            continue
        kind = obj.get("object") or obj.get("type")
        if isinstance(obj.get("request"), dict) or "response" in obj or "chunks" in obj \
                or "events" in obj:
            yield from flush()
            if isinstance(obj.get("request"), dict):
                yield from history.advance(obj["request"])
            builder = _CallBuilder(None)
            response = obj.get("response")
            if isinstance(response, dict) and response.get("type") == "message":
                _anthropic_message(builder, response)
            elif isinstance(response, dict):
                _openai_response(builder, response)
            for chunk in obj.get("chunks") or []:
                if isinstance(chunk, dict):
                    _openai_chunk(builder, chunk)
            for event in obj.get("events") or []:
                if isinstance(event, dict):
                    _anthropic_event(builder, event)
            yield from flush()
        elif kind == "chat.completion.chunk":
            ident = obj.get("id") if isinstance(obj.get("id"), str) else None
            if builder is None or builder.ident != ident:
                yield from flush()
                builder = _CallBuilder(ident)
            _openai_chunk(builder, obj)
        elif kind == "chat.completion":
            yield from flush()
            builder = _CallBuilder(None)
            _openai_response(builder, obj)
            yield from flush()
        elif kind == "message":
            yield from flush()
            builder = _CallBuilder(None)
            _anthropic_message(builder, obj)
            yield from flush()
        elif kind in ("message_start", "content_block_start", "content_block_delta",
                      "content_block_stop", "message_delta", "message_stop", "ping"):
            if kind == "message_start" or builder is None:
                yield from flush()
                builder = _CallBuilder("anthropic")
            if _anthropic_event(builder, obj):
                yield from flush()
        else:
            report.unknown_rows[str(kind)] += 1
    yield from flush()
    if history.turn:
        yield TurnEnd(history.turn)
    yield report
