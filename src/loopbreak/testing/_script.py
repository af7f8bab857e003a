"""What a scripted upstream answers: one :class:`Script` per response, plain data.

A script holds the content of one model response as a sequence of events
(reasoning pieces, text pieces, tool calls), how its bytes reach the socket
(:class:`Delivery`), and the misbehaviour to act out (an HTTP error status, a
broken event, an early close, a stall). The same script serves either wire
format: the route the request arrives on picks OpenAI or Anthropic framing.

Positions of stream faults count *wire events* (SSE events, keep-alive comments
excluded), 0-based: "after N" means once N events have been sent. The string
``"finish"`` names the event that carries the finish instead (OpenAI: the choice
chunk with ``finish_reason``; Anthropic: ``message_delta``), so a fault can hit a
stream just before it would have ended, whatever its length.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

Dialect = Literal["openai", "anthropic"]
"""The two wire formats the upstream speaks."""

Flavour = Literal["openai", "deepseek"]
"""How OpenAI-style deltas are spelled.

``openai``: a delta names only what it carries; the first chunk is
``{"role":"assistant","content":""}``. ``deepseek``: as DeepSeek sends them, every
reasoning or text delta names both fields, the unused one ``null``
(``{"content":null,"reasoning_content":"..."}``), and the first chunk is
``{"role":"assistant","content":null,"reasoning_content":""}``.
"""

CloseHow = Literal["drop", "reset", "end"]
"""How an early close looks on the wire.

``drop``: a FIN in the middle of the body (a chunked body left unterminated, so an
HTTP client sees an incomplete message). ``reset``: an RST. ``end``: the HTTP body
ends properly but the stream never carried its finish (nor ``[DONE]``); the
connection stays usable for the next request.
"""

At = int | Literal["finish"]
"""Where a stream fault strikes: after that many wire events, or at the finish."""

DEFAULT_SIGNATURE = "c2NyaXB0ZWQtdGhpbmtpbmc="
"""Anthropic thinking blocks end with an opaque signature; clients keep it verbatim."""

# Finish reasons differ by dialect; a script may use either vocabulary (or one
# neither knows, e.g. ``loop_detected``, which passes through unchanged).
_TO_ANTHROPIC = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "content_filter": "refusal",
}
_TO_OPENAI = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}


def _positive(name: str, value: int) -> None:
    if value < 1:
        raise ValueError(f"'{name}' must be >= 1: {value!r}")


def _not_negative(name: str, value: float | None) -> None:
    if value is not None and value < 0:
        raise ValueError(f"'{name}' must be >= 0 (or None): {value!r}")


def _check_at(name: str, value: At | None) -> None:
    if value is None or value == "finish":
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"'{name}' must be an event count >= 0, 'finish' or None: {value!r}")


def split_chars(text: str, piece_chars: int) -> list[str]:
    """``text`` cut into pieces of ``piece_chars`` characters (code points)."""
    _positive("piece_chars", piece_chars)
    return [text[i : i + piece_chars] for i in range(0, len(text), piece_chars)]


@dataclass(frozen=True)
class Reasoning:
    """One reasoning (thinking) delta, sent exactly as given. ``fields``: extra top-level
    JSON fields of the one wire event that carries it (a benchmark's send stamp, kept out
    of the text a guard judges); none in a real stream's shape."""

    text: str
    fields: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Text:
    """One visible-text delta, sent exactly as given; ``fields`` as for :class:`Reasoning`."""

    text: str
    fields: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ToolCall:
    """One tool call: its start, then one wire event per argument piece.

    ``id`` defaults to ``call_<n>`` (OpenAI) or ``toolu_<n>`` (Anthropic), ``n``
    counting the tool calls of the response.
    """

    name: str
    arguments: tuple[str, ...] = ()
    id: str | None = None

    def __post_init__(self) -> None:
        # Accept any sequence of pieces, keep a tuple so the script stays hashable data.
        object.__setattr__(self, "arguments", tuple(self.arguments))

    @classmethod
    def of(
        cls,
        name: str,
        arguments: str | Mapping[str, Any] = "",
        *,
        id: str | None = None,
        piece_chars: int = 8,
    ) -> ToolCall:
        """A call whose arguments (a JSON string, or a mapping to serialise) are
        cut into pieces of ``piece_chars`` characters."""
        # Models write raw UTF-8 in arguments; keeping it unescaped puts multi-byte
        # characters on the wire where a split write can cut them.
        text = (
            arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
        )
        return cls(name, tuple(split_chars(text, piece_chars)), id)

    @property
    def arguments_text(self) -> str:
        """The arguments a client reassembles."""
        return "".join(self.arguments)


Event = Reasoning | Text | ToolCall
"""One content event of a script."""


@dataclass(frozen=True)
class Usage:
    """Token counts reported at the end of a response.

    OpenAI: ``prompt_tokens``/``completion_tokens``/``total_tokens`` and, when
    ``reasoning_tokens`` is set, ``completion_tokens_details.reasoning_tokens``.
    Anthropic: ``input_tokens``/``output_tokens``.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int | None = None

    def __post_init__(self) -> None:
        for name in ("input_tokens", "output_tokens", "reasoning_tokens"):
            _not_negative(name, getattr(self, name))

    def openai(self) -> dict[str, Any]:
        """The ``usage`` object of a chat completion."""
        out: dict[str, Any] = {
            "prompt_tokens": self.input_tokens,
            "completion_tokens": self.output_tokens,
            "total_tokens": self.input_tokens + self.output_tokens,
        }
        if self.reasoning_tokens is not None:
            out["completion_tokens_details"] = {"reasoning_tokens": self.reasoning_tokens}
        return out


@dataclass(frozen=True)
class Delivery:
    """How the bytes of a streamed response reach the socket.

    Events are grouped ``events_per_write`` at a time (keep-alive comments ride in
    the group they follow); each group is then cut into writes of ``write_bytes``
    bytes when that is set, which splits events, lines and multi-byte UTF-8
    characters anywhere. With chunked transfer encoding (the default, as real
    upstreams do) every write is one HTTP chunk, so a client's HTTP layer hands
    the pieces on as they were written even when TCP coalesces them.
    """

    write_bytes: int | None = None
    """Bytes per socket write; ``None``: one write per group of events."""
    events_per_write: int = 1
    """SSE events put into one write (before ``write_bytes`` splits it)."""
    keepalive_every: int = 0
    """A ``: keep-alive`` comment after every N events; 0: none."""
    keepalive_text: str = "keep-alive"
    """The comment's text (OpenRouter sends ``OPENROUTER PROCESSING``)."""
    delay: float = 0.0
    """Seconds to wait before every write but the first (a slow drip with small writes)."""
    headers_delay: float = 0.0
    """Seconds to wait before the status line (time to first byte)."""
    chunked: bool = True
    """``Transfer-Encoding: chunked``; ``False``: the body ends when the connection closes."""
    content_encoding: Literal["gzip", "deflate"] | None = None
    """Compress the body and say so in ``Content-Encoding``, whatever the request accepted
    (as some upstreams do); a stream is flushed after every write, so it stays live."""

    def __post_init__(self) -> None:
        if self.content_encoding not in (None, "gzip", "deflate"):
            raise ValueError("'content_encoding' must be 'gzip', 'deflate' or None: "
                             f"{self.content_encoding!r}")
        if self.write_bytes is not None:
            _positive("write_bytes", self.write_bytes)
        _positive("events_per_write", self.events_per_write)
        _not_negative("keepalive_every", self.keepalive_every)
        _not_negative("delay", self.delay)
        _not_negative("headers_delay", self.headers_delay)
        if "\n" in self.keepalive_text or "\r" in self.keepalive_text:
            raise ValueError(
                f"'keepalive_text' must be one line (an SSE comment): {self.keepalive_text!r}"
            )

    @classmethod
    def drip(cls, write_bytes: int = 1, every: float = 0.01) -> Delivery:
        """A slow drip: ``write_bytes`` bytes every ``every`` seconds."""
        return cls(write_bytes=write_bytes, delay=every)


@dataclass(frozen=True)
class Script:
    """One scripted response: content, delivery, and misbehaviour on demand.

    Build one with :meth:`openai`, :meth:`anthropic` or :meth:`reply` (text cut
    into pieces), :meth:`from_pieces` (exact deltas) or :meth:`error` (an HTTP
    error status), then adjust it with the ``with_``/``-ing`` methods, which
    return changed copies.
    """

    events: tuple[Event, ...] = ()
    """The content, in order; each event is one delta (tool calls: one per piece)."""
    finish_reason: str | None = None
    """``None``: ``tool_calls``/``tool_use`` when the script calls a tool, else
    ``stop``/``end_turn``. Either dialect's names are mapped to the other's."""
    usage: Usage | None = None
    """``None``: 8 input tokens, one output token per content delta."""
    dialect: Dialect | None = None
    """The route this script is meant for; a request on the other dialect's route
    gets a 500 and is noted in the upstream's ``errors``. ``None``: either."""
    model: str | None = None
    """``None``: echo the request's ``model``."""
    reasoning_field: str = "reasoning_content"
    """OpenAI delta field for reasoning: DeepSeek ``reasoning_content``, vLLM and
    OpenRouter ``reasoning``."""
    flavour: Flavour = "openai"
    """OpenAI route: how deltas are spelled (see :data:`Flavour`)."""
    signature: str = DEFAULT_SIGNATURE
    """Anthropic: the ``signature_delta`` closing each thinking block ("" for none)."""
    role_chunk: bool = True
    """OpenAI: a first chunk ``{"role":"assistant","content":""}``; ``False``: the
    role rides on the first content delta."""
    ping: bool = True
    """Anthropic: a ``ping`` event after the first ``content_block_start``."""
    usage_chunk: bool | None = None
    """OpenAI: the ``choices: []`` usage chunk; ``None``: when the request asked
    ``stream_options.include_usage``."""
    repeat: int = 1
    """Send the events this many times over (one growing block); 0: forever,
    until the client goes away (streaming only; no tool calls)."""
    delivery: Delivery = field(default_factory=Delivery)

    status: int = 200
    """A status >= 400 answers with an error body in the request's dialect, no stream."""
    error_type: str | None = None
    """Error ``type`` of an error status or error event; ``None``: the dialect's usual one."""
    error_message: str | None = None
    retry_after: float | None = None
    """``Retry-After`` header (seconds) on an error status."""
    headers: tuple[tuple[str, str], ...] = ()
    """Extra response headers."""

    invalid_json_at: At | None = None
    """That event's JSON is cut in half (sent otherwise as is)."""
    close_after: At | None = None
    """Close the connection there (see ``close_how``): no finish, no ``[DONE]``."""
    close_how: CloseHow = "drop"
    stall_after: At | None = None
    """Stop sending there for ``stall_seconds``, keeping the connection open."""
    stall_seconds: float | None = None
    """``None``: stall until the client goes away or the server stops."""
    stall_keepalive: float | None = None
    """While stalled, a keep-alive comment every this many seconds (streaming only)."""
    error_event_at: At | None = None
    """Send an in-stream error event there instead, then end the body."""
    body_cut_at: int | None = None
    """Non-streaming: send the head (announcing the whole body) and only this many bytes of
    the body, then close the connection, or stall when ``stall_after`` is also set."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "events", tuple(self.events))
        object.__setattr__(self, "headers", tuple((str(k), str(v)) for k, v in self.headers))
        for event in self.events:
            if not isinstance(event, (Reasoning, Text, ToolCall)):
                raise ValueError(
                    f"'events' must hold Reasoning, Text or ToolCall values: {event!r}"
                )
        if self.dialect not in (None, "openai", "anthropic"):
            raise ValueError(f"'dialect' must be 'openai', 'anthropic' or None: {self.dialect!r}")
        if self.status != 200 and not 400 <= self.status <= 599:
            raise ValueError(
                f"'status' must be 200 (a response) or 400-599 (an error): {self.status!r}"
            )
        _not_negative("repeat", self.repeat)
        if self.repeat != 1 and any(isinstance(e, ToolCall) for e in self.events):
            raise ValueError(
                "'repeat' must be 1 when the script calls a tool (ids would clash): "
                f"{self.repeat!r}"
            )
        _not_negative("retry_after", self.retry_after)
        _not_negative("stall_seconds", self.stall_seconds)
        if self.stall_keepalive is not None and self.stall_keepalive <= 0:
            raise ValueError(f"'stall_keepalive' must be > 0 (or None): {self.stall_keepalive!r}")
        _not_negative("body_cut_at", self.body_cut_at)
        for name in ("invalid_json_at", "close_after", "stall_after", "error_event_at"):
            _check_at(name, getattr(self, name))
        if self.close_how not in ("drop", "reset", "end"):
            raise ValueError(f"'close_how' must be 'drop', 'reset' or 'end': {self.close_how!r}")
        if not self.reasoning_field:
            raise ValueError("'reasoning_field' must not be empty: ''")
        if self.flavour not in ("openai", "deepseek"):
            raise ValueError(f"'flavour' must be 'openai' or 'deepseek': {self.flavour!r}")

    # -- builders ---------------------------------------------------------------

    @classmethod
    def reply(
        cls,
        *,
        reasoning: str = "",
        text: str = "",
        tool_calls: Iterable[ToolCall] = (),
        piece_chars: int = 8,
        finish_reason: str | None = None,
        usage: Usage | None = None,
        model: str | None = None,
        dialect: Dialect | None = None,
    ) -> Script:
        """Reasoning, then text, then tool calls; text cut every ``piece_chars`` characters."""
        events: list[Event] = [Reasoning(p) for p in split_chars(reasoning, piece_chars)]
        events += [Text(p) for p in split_chars(text, piece_chars)]
        events += list(tool_calls)
        return cls(
            tuple(events), finish_reason=finish_reason, usage=usage, model=model, dialect=dialect
        )

    @classmethod
    def openai(
        cls,
        *,
        reasoning: str = "",
        text: str = "",
        tool_calls: Iterable[ToolCall] = (),
        piece_chars: int = 8,
        reasoning_field: str = "reasoning_content",
        flavour: Flavour = "openai",
        finish_reason: str | None = None,
        usage: Usage | None = None,
        model: str | None = None,
    ) -> Script:
        """:meth:`reply` for the OpenAI route, reasoning in ``reasoning_field``,
        deltas spelled the ``flavour`` way."""
        script = cls.reply(
            reasoning=reasoning,
            text=text,
            tool_calls=tool_calls,
            piece_chars=piece_chars,
            finish_reason=finish_reason,
            usage=usage,
            model=model,
            dialect="openai",
        )
        return replace(script, reasoning_field=reasoning_field, flavour=flavour)

    @classmethod
    def anthropic(
        cls,
        *,
        reasoning: str = "",
        text: str = "",
        tool_calls: Iterable[ToolCall] = (),
        piece_chars: int = 8,
        signature: str = DEFAULT_SIGNATURE,
        finish_reason: str | None = None,
        usage: Usage | None = None,
        model: str | None = None,
    ) -> Script:
        """:meth:`reply` for the Anthropic route: thinking, text and tool_use blocks."""
        script = cls.reply(
            reasoning=reasoning,
            text=text,
            tool_calls=tool_calls,
            piece_chars=piece_chars,
            finish_reason=finish_reason,
            usage=usage,
            model=model,
            dialect="anthropic",
        )
        return replace(script, signature=signature)

    @classmethod
    def from_pieces(
        cls,
        pieces: Iterable[Event | tuple[str, str]],
        *,
        finish_reason: str | None = None,
        usage: Usage | None = None,
        dialect: Dialect | None = None,
    ) -> Script:
        """Exact deltas: events, or ``("reasoning" | "text", piece)`` pairs."""
        events: list[Event] = []
        for piece in pieces:
            if isinstance(piece, (Reasoning, Text, ToolCall)):
                events.append(piece)
            elif isinstance(piece, tuple) and len(piece) == 2 and piece[0] == "reasoning":
                events.append(Reasoning(piece[1]))
            elif isinstance(piece, tuple) and len(piece) == 2 and piece[0] == "text":
                events.append(Text(piece[1]))
            else:
                raise ValueError(
                    f"'pieces' must hold events or ('reasoning'|'text', str) pairs: {piece!r}"
                )
        return cls(tuple(events), finish_reason=finish_reason, usage=usage, dialect=dialect)

    @classmethod
    def error(
        cls,
        status: int,
        message: str | None = None,
        *,
        error_type: str | None = None,
        retry_after: float | None = None,
        dialect: Dialect | None = None,
    ) -> Script:
        """An HTTP error status with an error body in the request's dialect."""
        if status < 400:
            raise ValueError(f"'status' of an error must be >= 400: {status!r}")
        return cls(
            status=status,
            error_message=message,
            error_type=error_type,
            retry_after=retry_after,
            dialect=dialect,
        )

    # -- changed copies -----------------------------------------------------------

    def delivered(self, delivery: Delivery | None = None, **fields: Any) -> Script:
        """A copy delivered differently: a :class:`Delivery`, or its fields by name."""
        base = delivery if delivery is not None else self.delivery
        return replace(self, delivery=replace(base, **fields))

    def closing_after(self, at: At, how: CloseHow = "drop") -> Script:
        """A copy that closes the connection once ``at`` events went out."""
        return replace(self, close_after=at, close_how=how)

    def stalling(
        self, after: At, seconds: float | None = None, *, keepalive: float | None = None
    ) -> Script:
        """A copy that stops sending after ``after`` events (``seconds=None``: forever)."""
        return replace(self, stall_after=after, stall_seconds=seconds, stall_keepalive=keepalive)

    def cutting_body(self, at_bytes: int, *, stall: bool = False,
                     seconds: float | None = None) -> Script:
        """A non-streaming copy whose body stops after ``at_bytes`` bytes: the connection
        closes there, or stalls (``seconds=None``: until the client goes away)."""
        if stall:
            return replace(self, body_cut_at=at_bytes, stall_after=0, stall_seconds=seconds)
        return replace(self, body_cut_at=at_bytes)

    def with_invalid_json(self, at: At) -> Script:
        """A copy whose event ``at`` carries JSON cut in half."""
        return replace(self, invalid_json_at=at)

    def with_error_event(
        self, at: At, message: str | None = None, *, error_type: str | None = None
    ) -> Script:
        """A copy that sends an in-stream error event at ``at`` and ends there."""
        return replace(
            self,
            error_event_at=at,
            error_message=message if message is not None else self.error_message,
            error_type=error_type if error_type is not None else self.error_type,
        )

    def repeated(self, times: int = 0) -> Script:
        """A copy whose events go out ``times`` times over (0: forever)."""
        return replace(self, repeat=times)

    # -- what a client should reassemble --------------------------------------------

    def iter_events(self) -> Iterator[Event]:
        """The events as sent, ``repeat`` included (endless when ``repeat`` is 0)."""
        if self.repeat == 0:
            if not self.events:
                return
            while True:
                yield from self.events
        for _ in range(self.repeat):
            yield from self.events

    def _joined(self, kind: type[Reasoning] | type[Text]) -> str:
        if self.repeat == 0:
            raise ValueError("an endless script (repeat=0) has no final content")
        one = "".join(e.text for e in self.events if isinstance(e, kind))
        return one * self.repeat

    @property
    def reasoning(self) -> str:
        """All reasoning a client reassembles (``repeat`` included)."""
        return self._joined(Reasoning)

    @property
    def text(self) -> str:
        """All visible text a client reassembles (``repeat`` included)."""
        return self._joined(Text)

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        return tuple(e for e in self.events if isinstance(e, ToolCall))

    def finish_for(self, dialect: Dialect) -> str:
        """The finish reason in ``dialect``'s vocabulary."""
        if self.finish_reason is None:
            calls = bool(self.tool_calls)
            if dialect == "openai":
                return "tool_calls" if calls else "stop"
            return "tool_use" if calls else "end_turn"
        table = _TO_OPENAI if dialect == "openai" else _TO_ANTHROPIC
        return table.get(self.finish_reason, self.finish_reason)

    def usage_or_default(self) -> Usage:
        """The scripted usage, or one output token per content delta."""
        if self.usage is not None:
            return self.usage
        if self.repeat == 0:
            return Usage(8, 0, 0)
        reasoning = sum(isinstance(e, Reasoning) for e in self.events) * self.repeat
        output = (
            sum(len(e.arguments) + 1 if isinstance(e, ToolCall) else 1 for e in self.events)
            * self.repeat
        )
        return Usage(input_tokens=8, output_tokens=output, reasoning_tokens=reasoning)
