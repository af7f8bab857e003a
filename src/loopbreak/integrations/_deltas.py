"""OpenAI-shaped chunks (SDK objects, LiteLLM's, plain dicts) fed to a call guard.

One place reads ``choices[0].delta``: reasoning from ``reasoning_content`` or
``reasoning``, text from ``content``, tool calls from ``tool_calls``; a
``finish_reason`` closes the tool calls, releasing a trip that waited for them.
"""

from __future__ import annotations

from typing import Any

from loopbreak._engine.call_guard import CallGuard
from loopbreak._engine.trip import Trip


def field(obj: Any, name: str) -> Any:
    """``obj.name`` or ``obj[name]``, whichever the object has; ``None`` otherwise."""
    if isinstance(obj, dict):
        return obj.get(name)
    value = getattr(obj, name, None)
    if value is None:
        extra = getattr(obj, "model_extra", None)
        if isinstance(extra, dict):
            value = extra.get(name)
    return value


def feed_openai_chunk(guard: CallGuard, chunk: Any) -> Trip | None:
    """Judge one chunk; the trip to act on now, if any."""
    trip: Trip | None = None
    for choice in field(chunk, "choices") or []:
        index = field(choice, "index")
        if index not in (0, None):
            continue
        delta = field(choice, "delta")
        if delta is not None:
            for name in ("reasoning_content", "reasoning"):
                value = field(delta, name)
                if isinstance(value, str) and value:
                    trip = guard.feed("reasoning", value) or trip
            content = field(delta, "content")
            if isinstance(content, str) and content:
                trip = guard.feed("text", content) or trip
            for call in field(delta, "tool_calls") or []:
                key = field(call, "index")
                key = key if key is not None else field(call, "id")
                function = field(call, "function")
                tool = field(function, "name") if function is not None else None
                args = field(function, "arguments") if function is not None else None
                guard.tool_call_delta(key if key is not None else 0,
                                      tool if isinstance(tool, str) else "",
                                      args if isinstance(args, str) else "")
        if field(choice, "finish_reason"):
            trip = guard.close_tool_call() or trip
    return trip


def carries_tool_calls(chunk: Any) -> bool:
    """Whether a chunk carries a piece of a tool call."""
    for choice in field(chunk, "choices") or []:
        delta = field(choice, "delta")
        if delta is not None and field(delta, "tool_calls"):
            return True
    return False


def written_text(chunk: Any) -> str:
    """The reasoning and text a chunk carries."""
    out = []
    for choice in field(chunk, "choices") or []:
        delta = field(choice, "delta")
        if delta is not None:
            for name in ("content", "reasoning_content", "reasoning"):
                value = field(delta, name)
                if isinstance(value, str):
                    out.append(value)
    return "".join(out)
