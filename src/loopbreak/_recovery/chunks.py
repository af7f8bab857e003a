"""OpenAI chat-completion chunks read once for every face, and the pieces a guard judges.

A chunk arrives as parsed JSON (the proxy), as an ``openai`` SDK object, or as LiteLLM's
own object; :func:`openai_pieces` reads any of them the same way: ``choices[0].delta``'s
reasoning (``reasoning_content`` or ``reasoning``), text (``content``) and tool-call pieces,
then its ``finish_reason``. :func:`feed_piece` hands a piece to a call guard, the same way
for every face: a finish (or the end of a tool block) closes the open tool call, which
releases a trip that waited for it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from loopbreak._engine.call_guard import CallGuard
from loopbreak._engine.trip import Trip

PieceKind = Literal["reasoning", "text", "tool", "block_start", "block_stop", "finish", "usage",
                    "done", "start", "error", "other"]


@dataclass(slots=True)
class Piece:
    """One meaningful part of a chunk or event."""

    kind: PieceKind
    text: str = ""
    key: int | str | None = None
    name: str = ""


class MalformedChunk(ValueError):
    """A chunk whose shape is not a chat-completion chunk's (read with ``strict``)."""


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


def openai_pieces(chunk: Any, *, strict: bool = False) -> list[Piece]:
    """The pieces of the first choice of one chunk, in the order a guard must see them.
    ``strict``: a chunk without a choices list, or with a delta that is not an object, is
    :class:`MalformedChunk` (the proxy reads untrusted bytes); otherwise it has no pieces."""
    # Parsed JSON (the proxy's hot path, every event) is read with ``dict.get`` itself, a C
    # call with no Python frame; objects through :func:`field`. The choice is made inline:
    # a helper that picks it was a fifth of a chunk's reading.
    choices = chunk.get("choices") if type(chunk) is dict else field(chunk, "choices")
    if not isinstance(choices, list):
        if strict:
            raise MalformedChunk("event has no choices list")
        return []
    pieces: list[Piece] = []
    for choice in choices:
        if choice is None:
            continue
        get: Callable[[Any, str], Any] = dict.get if type(choice) is dict else field
        if (get(choice, "index") or 0) != 0:
            continue
        delta = get(choice, "delta")
        if delta is not None:
            get_delta: Callable[[Any, str], Any]
            if type(delta) is dict:
                get_delta = dict.get
            elif strict and not isinstance(delta, dict):
                raise MalformedChunk("choice delta is not an object")
            else:
                get_delta = field
            for name in ("reasoning_content", "reasoning"):
                value = get_delta(delta, name)
                if isinstance(value, str) and value:
                    pieces.append(Piece("reasoning", value))
            content = get_delta(delta, "content")
            if isinstance(content, str) and content:
                pieces.append(Piece("text", content))
            for call in get_delta(delta, "tool_calls") or []:
                key = field(call, "index")
                key = key if key is not None else field(call, "id")
                key = key if key is not None else 0
                function = field(call, "function")
                tool = field(function, "name") if function is not None else None
                args = field(function, "arguments") if function is not None else None
                if isinstance(key, (int, str)):
                    pieces.append(Piece("tool", args if isinstance(args, str) else "", key,
                                        tool if isinstance(tool, str) else ""))
        finish = get(choice, "finish_reason")
        if isinstance(finish, str) and finish:
            pieces.append(Piece("finish", finish))
    return pieces


def feed_piece(guard: CallGuard, piece: Piece) -> Trip | None:
    """Hand one piece to ``guard``; the trip to act on now, if any."""
    kind = piece.kind
    if kind == "reasoning" or kind == "text":
        return guard.feed(kind, piece.text)
    if kind == "tool" and piece.key is not None:
        # The guard keeps each call's name and arguments (in pieces, joined once).
        guard.tool_call_delta(piece.key, piece.name, piece.text)
        return None
    if kind == "block_stop" and piece.key is not None \
            and any(record.key == piece.key for record in guard.tool_calls):
        return guard.close_tool_call(piece.key)
    if kind == "finish":
        return guard.close_tool_call()
    return None


def feed_openai_chunk(guard: CallGuard, chunk: Any) -> Trip | None:
    """Judge one chunk; the trip to act on now, if any."""
    trip: Trip | None = None
    for piece in openai_pieces(chunk):
        trip = feed_piece(guard, piece) or trip
    return trip


def carries_tool_calls(chunk: Any) -> bool:
    """Whether a chunk carries a piece of a tool call."""
    return any(piece.kind == "tool" for piece in openai_pieces(chunk))
