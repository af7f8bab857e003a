"""Relaying one guarded model call: judge every event, cut lawfully, recover.

The relay reads the upstream's event stream, feeds each event's reasoning, text
and tool-call pieces to a per-call guard, and passes the event on to the client
as soon as it is judged, byte for byte. On a trip it closes the upstream
connection (which stops generation and billing there) and recovers as
configured: re-ask once per turn with thinking off and continue the same client
response with the new answer, or finish lawfully with a notice, or end with an
error. A cut never lands inside an open tool call. A tool call the history says
must be denied is held back and never reaches the client: the model is asked
once more, told why; if it insists, the call ends lawfully with that reason.
A response that never arrived intact is re-sent while nothing has reached the
client, at most ``recovery.max_request_retries`` times.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Protocol

from loopbreak._config import Config
from loopbreak._engine.call_guard import CallGuard
from loopbreak._engine.trip import Trip
from loopbreak._recovery import normal_finish, plan_cut, plan_denial
from loopbreak._recovery.chunks import Piece, feed_piece
from loopbreak._recovery.history import (
    HistoryView,
    Kind,
    thinking_off_retry,
    with_denial,
)
from loopbreak._recovery.requests import requested_dialect
from loopbreak.proxy.formats import (
    AnthropicStream,
    BrokenStream,
    OpenAIStream,
    Stream,
    error_body,
    sse_data,
)
from loopbreak.proxy.sse import SSEError, SSEEvent, SSEParser
from loopbreak.proxy.wire import BodyError, response_headers

Headers = list[tuple[str, str]]


class UpstreamResponse(Protocol):
    """A response from the model server, read as it arrives (decoded, if it came
    compressed: ``headers`` then no longer name an encoding)."""

    status: int
    headers: Headers

    def chunks(self) -> AsyncIterator[bytes]: ...

    def close(self) -> None: ...

    async def read(self, limit: int) -> bytes:
        """The whole body; :class:`UpstreamError` when it breaks off (502), stalls (504) or
        grows past ``limit`` bytes (502)."""
        ...


class UpstreamError(Exception):
    """The upstream could not be reached (``status`` 502) or did not answer in time (504)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


Opener = Callable[[dict[str, Any]], Awaitable[UpstreamResponse]]


class ClientSink(Protocol):
    """Where the client's response goes."""

    started: bool

    async def start(self, status: int, headers: Headers) -> None: ...

    async def write(self, data: bytes) -> None: ...


@dataclass
class Outcome:
    """What happened to one guarded call, for logs and metrics."""

    trips: list[Trip] = field(default_factory=list)
    recoveries: list[str] = field(default_factory=list)
    broken_retries: int = 0
    denials: int = 0
    cut_chars: int = 0
    upstream_error: str | None = None
    field_rejected: bool = False
    """The upstream answered 400 to the thinking field a retry added; it was sent without."""


class _Broken(Exception):
    """The upstream response did not arrive intact."""


_SSE_HEADERS: Headers = [("content-type", "text/event-stream; charset=utf-8"),
                         ("cache-control", "no-cache")]


class StreamRelay:
    """One streamed request relayed through the guard, to its lawful end (the engine's
    per-call guard is :class:`~loopbreak.CallGuard`; this is the proxy's side of a call)."""

    def __init__(self, kind: Kind, body: dict[str, Any], view: HistoryView, config: Config,
                 opener: Opener, client: ClientSink, *, dialect: str = "auto",
                 effort: str = "low", on_trip: Callable[[Trip, str], None] | None = None,
                 upstream_dialect: Callable[[], Awaitable[str]] | None = None,
                 max_response_bytes: int = 64 << 20) -> None:
        self.kind = kind
        self.body = body
        self.view = view
        self.config = config
        self.opener = opener
        self.client = client
        self.dialect = dialect
        self.effort = effort
        self.on_trip = on_trip
        self.upstream_dialect = upstream_dialect
        self.max_response_bytes = max_response_bytes
        self.stream: Stream = OpenAIStream() if kind == "openai" else AnthropicStream()
        self.outcome = Outcome()
        self._content_sent = False
        # Complete tool calls of this answer reached the client: a cut then ends with the
        # tool-call finish and no retry (plan_cut).
        self._tools_sent = False
        self._reasked = False  # a denied call was re-asked once already
        self._cuts = view.cuts_this_turn
        self._language = view.session.language
        self._reask_request: dict[str, Any] = body

    # --- the whole exchange ---------------------------------------------------------

    async def run(self) -> Outcome:
        """Relay the call to its lawful end, whatever the upstream does."""
        request = self.body
        continuing = False  # relaying a second answer into the stream already open
        broken_left = self.config.recovery.max_request_retries
        # A retry that named a thinking field the request did not: sent without it if the
        # upstream rejects the field (a 400).
        without_field: dict[str, Any] | None = None
        while True:
            try:
                response = await self.opener(request)
            except UpstreamError as exc:
                await self._fail(exc.status, str(exc))
                return self.outcome
            if response.status == 400 and without_field is not None:
                response.close()
                request, without_field = without_field, None
                self.outcome.field_rejected = True
                continue
            without_field = None
            if response.status != 200:
                await self._pass_error(response)
                return self.outcome
            if not self.client.started:
                await self.client.start(200, response_headers(response.headers) or _SSE_HEADERS)
            try:
                action = await self._relay(response, continuing)
            except _Broken as exc:
                response.close()
                if not self._content_sent and broken_left > 0:
                    broken_left -= 1
                    self.outcome.broken_retries += 1
                    continue
                self.outcome.upstream_error = str(exc)
                await self.client.write(self.stream.error(
                    f"the upstream response broke off: {exc}"))
                return self.outcome
            finally:
                response.close()
            if action is None:
                return self.outcome
            kind, payload = action
            if kind == "retry":
                dialect = self.dialect
                if dialect == "auto" and requested_dialect(self.body, self.kind) == "none" \
                        and self.upstream_dialect is not None:
                    # The request names no thinking field: ask what the upstream speaks.
                    dialect = await self.upstream_dialect()
                request, without_field = thinking_off_retry(self.body, self.kind, dialect,
                                                            self.effort, payload)
            elif kind == "reask":  # the model's tool call was denied: it plans again
                self._reasked = True
                request = self._reask_request
            else:  # "end": a model that insists gets the reason and a lawful end
                await self.client.write(self.stream.text(payload)
                                        + self.stream.finish(normal_finish(self.kind)))
                return self.outcome
            if isinstance(self.stream, AnthropicStream):
                self.stream.index_offset = self.stream.next_index
            continuing = True

    # --- one upstream response -----------------------------------------------------

    async def _relay(self, response: UpstreamResponse, continuing: bool
                     ) -> tuple[str, str] | None:
        """Relay one upstream response; return what to do next (``None``: done)."""
        guard = CallGuard(self.config)
        parser = SSEParser()
        stream = self.stream
        anthropic = stream if isinstance(stream, AnthropicStream) else None
        held: list[bytes] | None = None  # tool-call events held back for a denial check
        held_state: tuple[int, dict[int, str]] | None = None
        finished = False
        # Events that arrived in one read leave in one write: fewer sends, same order.
        outbox: list[bytes] = []
        try:
            async for chunk in response.chunks():
                for event in parser.feed(chunk):
                    if not event.has_data:
                        # Keep-alives and comments pass as they came.
                        if held is None:
                            outbox.append(event.raw)
                        continue
                    # What the client has seen before this event, in case it is held back.
                    before = (anthropic.next_index, dict(anthropic.open_blocks)) \
                        if anthropic is not None and held is None else None
                    pieces = stream.parse(event)
                    trip: Trip | None = None
                    # What the event holds, read in the one pass that feeds the guard.
                    has_tool = has_error = done = False
                    for piece in pieces:
                        trip = feed_piece(guard, piece) or trip
                        kind = piece.kind
                        if kind == "tool":
                            has_tool = True
                        elif kind == "finish":
                            finished = True
                        elif kind == "done":
                            finished = done = True
                        elif kind == "error":
                            has_error = True
                    if held is None and has_tool and self._holds(pieces):
                        held = []
                        held_state = before
                    if trip is not None:
                        await self._flush(outbox)
                        return await self._cut(trip, guard)
                    if has_error:
                        outbox.append(self._out(event, pieces, continuing))
                        await self._flush(outbox)
                        return None
                    if held is not None:
                        out = self._out(event, pieces, continuing)
                        if out:
                            held.append(out)
                        if not finished:
                            continue
                        denied = self._denied(guard)
                        if denied:
                            self.outcome.denials += len(denied)
                            if held_state is not None and anthropic is not None:
                                anthropic.next_index, anthropic.open_blocks = held_state
                            await self._flush(outbox)
                            return await self._deny(denied, guard)
                        outbox.extend(held)
                        self._tools_sent = True
                        held = None
                        continue
                    out = self._out(event, pieces, continuing)
                    if out:
                        outbox.append(out)
                        if has_tool:
                            self._tools_sent = True
                    if done:
                        await self._flush(outbox)
                        return None
                await self._flush(outbox)
        except (BrokenStream, SSEError, BodyError) as exc:
            await self._flush(outbox)
            raise _Broken(str(exc)) from None
        except (ConnectionError, asyncio.TimeoutError, OSError) as exc:
            await self._flush(outbox)
            raise _Broken(type(exc).__name__) from None
        if held is not None and finished:
            denied = self._denied(guard)
            if denied:
                self.outcome.denials += len(denied)
                return await self._deny(denied, guard)
            await self._flush(held)
            self._tools_sent = True
        if not finished:
            raise _Broken("the stream ended before a finish")
        # A finish arrived but not the stream's last event: end it the way clients expect.
        await self.client.write(b"data: [DONE]\n\n" if isinstance(stream, OpenAIStream)
                                else sse_data({"type": "message_stop"}, "message_stop"))
        return None

    async def _flush(self, outbox: list[bytes]) -> None:
        """Send what waits in ``outbox`` in one write."""
        if not outbox:
            return
        # Keep-alive comments alone do not commit the response: a broken stream can still
        # be re-sent unseen.
        if not self._content_sent and any(not part.startswith(b":") for part in outbox):
            self._content_sent = True
        data = outbox[0] if len(outbox) == 1 else b"".join(outbox)
        outbox.clear()
        await self.client.write(data)

    def _out(self, event: SSEEvent, pieces: list[Piece], continuing: bool) -> bytes:
        if not continuing:
            return event.raw  # bytes: the parser hands out no other
        return self.stream.continuation(event, pieces) or b""

    def _holds(self, pieces: list[Piece]) -> bool:
        return any(p.kind == "tool" and p.name and self.view.may_deny(p.name) for p in pieces)

    def _denied(self, guard: CallGuard) -> dict[str, str]:
        out = {}
        for record in guard.tool_calls:
            reason = self.view.denied(record.name, record.arguments)
            if reason is not None:
                out[str(record.key)] = reason
        return out

    # --- recovery ------------------------------------------------------------------

    async def _cut(self, trip: Trip, guard: CallGuard) -> tuple[str, str] | None:
        """A rule tripped: the upstream is closed by the caller; end or continue lawfully."""
        self.outcome.trips.append(trip)
        self.outcome.cut_chars += trip.offset
        plan = plan_cut(trip, self.config, language=self._language, retries_used=self._cuts,
                        tools_sent=self._tools_sent, wire=self.kind)
        self._cuts += 1
        self.outcome.recoveries.append(plan.mode)
        if self.on_trip is not None:
            self.on_trip(trip, plan.mode)
        stream = self.stream
        if plan.mode == "error":
            await self.client.write(stream.error(plan.error, "loop_detected"))
            return None
        shown = plan.shown + "\n\n" if plan.shown else ""
        if plan.mode == "stop":
            await self.client.write((stream.text(shown) if shown else b"")
                                    + stream.finish(plan.finish))
            return None
        # retry: close what the client has open, leave the notice in its history, re-ask.
        prefix = stream.close_blocks() if isinstance(stream, AnthropicStream) else b""
        await self.client.write(prefix + (stream.text(shown) if shown else b""))
        self._content_sent = True
        return "retry", plan.notice

    async def _deny(self, denied: dict[str, str], guard: CallGuard) -> tuple[str, str]:
        records = guard.tool_calls
        calls = [(self._call_id(r.key), r.name, r.arguments) for r in records]
        plan = plan_denial([cid for cid, _, _ in calls],
                           {self._call_id(r.key): denied[str(r.key)] for r in records
                            if str(r.key) in denied}, reasked=self._reasked)
        if not plan.reask:
            return "end", plan.reason
        self._reask_request = with_denial(self.body, self.kind, calls, plan.reasons)
        return "reask", plan.reason

    @staticmethod
    def _call_id(key: Hashable) -> str:
        return f"call_loopbreak_{key}" if isinstance(key, int) else str(key)

    # --- errors ----------------------------------------------------------------------

    async def _pass_error(self, response: UpstreamResponse) -> None:
        """An upstream 4xx/5xx goes to the client unchanged (status, headers, body)."""
        try:
            body = await response.read(self.max_response_bytes)
        except UpstreamError as exc:
            await self._fail(exc.status, str(exc))
            return
        if not self.client.started:
            await self.client.start(response.status, response_headers(response.headers))
            await self.client.write(body)
        else:
            self.outcome.upstream_error = f"HTTP {response.status}"
            await self.client.write(self.stream.error(
                f"the upstream answered HTTP {response.status} to the retried request"))

    async def _fail(self, status: int, message: str) -> None:
        self.outcome.upstream_error = message
        if not self.client.started:
            await self.client.start(status, [("content-type", "application/json")])
            await self.client.write(error_body(self.kind, status, message))
        else:
            await self.client.write(self.stream.error(message))
