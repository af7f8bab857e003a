"""A scripted model upstream: a real HTTP/1.1 server on 127.0.0.1 that replays scripts.

It speaks OpenAI ``chat/completions`` and Anthropic ``messages`` byte for byte,
streaming or not, answers each request with the next :class:`Script` (or one a
``choose`` function picks), and records every exchange: what arrived, and how
it ended (completed, the client disconnected, closed by the script, shut down),
with times taken from :func:`time.monotonic` so a test can compare them with
its own clock.

Standard library only (asyncio streams, one task per connection, no threads
per connection), so it ships inside the package. It runs on the caller's event
loop (``async with``) or on a loop of its own in a background thread (``with``).

Routes: ``POST /v1/chat/completions`` and ``POST /chat/completions`` (OpenAI),
``POST /v1/messages`` (Anthropic), ``GET /v1/models`` (and ``/models``); anything
else is a 404 with a JSON error body.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import http
import json
import socket
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal

from loopbreak.testing._script import Dialect, Script
from loopbreak.testing._wire import (
    Close,
    Context,
    End,
    Pause,
    Write,
    corrupt,
    dumps,
    error_body,
    plan,
    response_body,
    stream_events,
)

Outcome = Literal["pending", "completed", "client-disconnected", "server-closed", "shutdown"]
"""How an exchange ended.

``completed``: the whole response went out (an error status included).
``client-disconnected``: the client went away first. ``server-closed``: the
script closed the connection early. ``shutdown``: the server stopped mid-response.
"""

OPENAI_PATHS = ("/v1/chat/completions", "/chat/completions")
ANTHROPIC_PATHS = ("/v1/messages",)
MODELS_PATHS = ("/v1/models", "/models")

MAX_HEAD_BYTES = 64 * 1024
"""Request line plus headers; real clients send a few KiB."""

DEFAULT_MAX_BODY = 32 * 1024 * 1024
"""Agent histories with 25 tool schemas run to a few MiB; this leaves room."""

_READ = 64 * 1024


@dataclass(eq=False)
class RecordedRequest:
    """One request as the server received it, and how its exchange ended.

    Fields after ``arrived_at`` are filled in by the server as the exchange goes;
    read them after :meth:`wait` returned True.
    """

    index: int
    """Order of arrival on this server, from 0."""
    connection: int
    """Which TCP connection carried it (same number: a reused keep-alive connection)."""
    method: str
    path: str
    """The request target as sent, query included."""
    headers: tuple[tuple[str, str], ...]
    """As received: original case and order."""
    raw_body: bytes
    body: Any
    """The parsed JSON body; ``None`` when absent or not JSON."""
    arrived_at: float
    """``time.monotonic()`` when the whole request had been read."""
    dialect: Dialect | None = None
    stream: bool = False
    script: Script | None = None
    status: int | None = None
    outcome: Outcome = "pending"
    ended_at: float | None = None
    """``time.monotonic()`` when the exchange ended; for ``client-disconnected``,
    when the server noticed the client had gone."""
    events_sent: int = 0
    """Wire events wholly written before the end (keep-alive comments excluded)."""
    bytes_sent: int = 0
    """Response body bytes written before the end (SSE bytes, no chunk framing)."""
    _ended: threading.Event = field(default_factory=threading.Event, repr=False)

    @property
    def route(self) -> str:
        """``path`` without its query string."""
        return self.path.split("?", 1)[0]

    def header(self, name: str) -> str | None:
        """The first header called ``name`` (any case), or ``None``."""
        wanted = name.lower()
        for key, value in self.headers:
            if key.lower() == wanted:
                return value
        return None

    @property
    def ended(self) -> bool:
        return self._ended.is_set()

    def wait(self, timeout: float = 5.0) -> bool:
        """Block until the exchange ended; False on timeout."""
        return self._ended.wait(timeout)

    async def wait_async(self, timeout: float = 5.0) -> bool:
        """:meth:`wait` for async code; works whichever loop runs the server."""
        deadline = time.monotonic() + timeout
        while not self._ended.is_set():
            if time.monotonic() >= deadline:
                return False
            # Polling keeps this loop-agnostic; the end time itself is stamped by
            # the server, so the poll interval never blurs a measurement.
            await asyncio.sleep(0.005)
        return True

    def _finish(self, outcome: Outcome) -> None:
        if self._ended.is_set():
            return
        self.outcome = outcome
        if self.ended_at is None:
            self.ended_at = time.monotonic()
        self._ended.set()


Chooser = Callable[[RecordedRequest], Script | None]
"""Picks the script for a request; ``None`` falls back to the queue."""


class _BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _Connection:
    """One client connection: a read buffer shared by the request parser and the
    disconnect watcher, so bytes the watcher reads are never lost."""

    def __init__(
        self, number: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.number = number
        self.reader = reader
        self.writer = writer
        self.buffer = bytearray()
        self.gone = asyncio.get_running_loop().create_future()
        self.gone_at: float | None = None
        self.record: RecordedRequest | None = None
        self.task: asyncio.Task[Any] | None = None
        self._watcher: asyncio.Task[None] | None = None

    # -- reading --------------------------------------------------------------

    async def _fill(self) -> bool:
        try:
            data = await self.reader.read(_READ)
        except (ConnectionError, OSError):
            data = b""
        if not data:
            self.mark_gone()
            return False
        self.buffer += data
        return True

    async def read_until(self, separator: bytes, limit: int) -> bytes | None:
        """Bytes up to and including ``separator``; ``None`` on EOF."""
        start = 0
        while True:
            found = self.buffer.find(separator, start)
            if found >= 0:
                end = found + len(separator)
                data = bytes(self.buffer[:end])
                del self.buffer[:end]
                return data
            if len(self.buffer) > limit:
                raise _BadRequest(431, "request head too large")
            start = max(0, len(self.buffer) - len(separator) + 1)
            if not await self._fill():
                return None

    async def read_exact(self, size: int) -> bytes:
        while len(self.buffer) < size:
            if not await self._fill():
                raise _BadRequest(400, "request body ended early")
        data = bytes(self.buffer[:size])
        del self.buffer[:size]
        return data

    # -- watching for the client to go -------------------------------------------

    def mark_gone(self) -> None:
        if not self.gone.done():
            self.gone_at = time.monotonic()
            self.gone.set_result(None)

    async def _watch(self) -> None:
        # While a response is written the client sends nothing (no pipelining in
        # practice), so a read that returns is either EOF (it went away) or a
        # pipelined request, which is kept for the parser.
        while await self._fill():
            pass

    def watch(self) -> None:
        if self._watcher is None and not self.gone.done():
            self._watcher = asyncio.ensure_future(self._watch())

    async def unwatch(self) -> None:
        task, self._watcher = self._watcher, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def pause(self, seconds: float | None) -> bool:
        """Wait ``seconds`` (``None``: for ever); True as soon as the client went."""
        if not self.gone.done() and (seconds is None or seconds > 0):
            await asyncio.wait({self.gone}, timeout=seconds)
        return self.gone.done()

    # -- writing --------------------------------------------------------------

    def write(self, data: bytes) -> bool:
        """Write ``data``; False when the client is gone."""
        if self.gone.done() or self.writer.transport.is_closing():
            self.mark_gone()
            return False
        self.writer.write(data)
        return True

    async def drain(self) -> bool:
        try:
            await self.writer.drain()
        except (ConnectionError, OSError):
            self.mark_gone()
        return not self.gone.done()

    def close(self, how: Literal["drop", "reset"] = "drop") -> None:
        transport = self.writer.transport
        if how == "reset":
            sock = transport.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    # Linger 0: close() sends an RST instead of a FIN.
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            transport.abort()
        else:
            transport.close()


def _status_line(status: int) -> str:
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = "Unknown"
    return f"HTTP/1.1 {status} {phrase}\r\n"


def _head(status: int, headers: Iterable[tuple[str, str]]) -> bytes:
    lines = [_status_line(status)] + [f"{k}: {v}\r\n" for k, v in headers] + ["\r\n"]
    return "".join(lines).encode("latin-1")


def _encoded(body: bytes, encoding: str | None) -> bytes:
    if encoding is None:
        return body
    compressor = _compressor(encoding)
    encoded: bytes = compressor.compress(body) + compressor.flush()
    return encoded


def _compressor(encoding: str) -> Any:
    # wbits 31: a gzip member; 15: a zlib stream (what HTTP calls deflate).
    return zlib.compressobj(wbits=31 if encoding == "gzip" else 15)


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


class ScriptedUpstream:
    """The scripted upstream server.

    ``scripts`` are served in order; ``choose`` (called with the recorded request)
    may pick one instead; ``default`` answers once the queue is empty. A request
    with no script gets a 500 and a line in :attr:`errors`.

    Sync use (a background thread runs the loop)::

        with ScriptedUpstream([Script.openai(reasoning="hm", text="hi")]) as up:
            client = openai.OpenAI(base_url=up.base_url, api_key="k")
            ...
            assert up.requests[0].body["stream"] is True

    Async use (the caller's loop): ``async with ScriptedUpstream(...) as up:``.
    """

    def __init__(
        self,
        scripts: Iterable[Script] = (),
        *,
        choose: Chooser | None = None,
        default: Script | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        max_body_bytes: int = DEFAULT_MAX_BODY,
        models: Iterable[str] = ("scripted-model",),
        owned_by: str = "loopbreak",
    ) -> None:
        if max_body_bytes < 0:
            raise ValueError(f"'max_body_bytes' must be >= 0: {max_body_bytes!r}")
        self.host = host
        self._port = port
        self.max_body_bytes = max_body_bytes
        self.models = tuple(models)
        self.owned_by = owned_by
        self.choose = choose
        self.default = default
        self._queue: collections.deque[Script] = collections.deque(scripts)
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._records: list[RecordedRequest] = []
        self._errors: list[str] = []
        self._connections: set[_Connection] = set()
        self._next_connection = 0
        self._server: asyncio.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closing = False
        self._bound_port: int | None = None

    def __repr__(self) -> str:
        where = self.url if self._bound_port is not None else "not started"
        state = "running" if self._server is not None else "stopped"
        return f"<ScriptedUpstream {where} {state}, {len(self._records)} requests>"

    # -- addresses ---------------------------------------------------------------

    @property
    def port(self) -> int:
        """The bound port (still known after a stop, for messages)."""
        if self._bound_port is None:
            raise RuntimeError("the scripted upstream has not started: start it first")
        return self._bound_port

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``, no trailing slash (dsh turns one into ``//``)."""
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """``url`` + ``/v1``: what the ``openai`` SDK takes as ``base_url``."""
        return f"{self.url}/v1"

    # -- scripts and records ---------------------------------------------------------

    def enqueue(self, *scripts: Script) -> None:
        """Append scripts to the queue (from any thread)."""
        with self._lock:
            self._queue.extend(scripts)

    def reset(self, scripts: Iterable[Script] = ()) -> None:
        """Forget every request and error, and queue ``scripts`` instead of what was
        left: one server can then serve many tests (request numbers restart at 0)."""
        with self._lock:
            self._queue = collections.deque(scripts)
            self._records = []
            self._errors = []

    @property
    def pending(self) -> int:
        """Scripts left in the queue."""
        with self._lock:
            return len(self._queue)

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request so far, in order of arrival (a copy of the list)."""
        with self._lock:
            return list(self._records)

    @property
    def errors(self) -> list[str]:
        """What went wrong on the server side: unscripted requests, a script on the
        wrong route, a failing ``choose``, a crashed handler. A test that expects
        none asserts this is empty."""
        with self._lock:
            return list(self._errors)

    def wait_for_requests(self, count: int, timeout: float = 5.0) -> list[RecordedRequest]:
        """Block until ``count`` requests arrived; raise TimeoutError otherwise."""
        with self._arrived:
            if not self._arrived.wait_for(lambda: len(self._records) >= count, timeout):
                raise TimeoutError(
                    f"scripted upstream: {len(self._records)} of {count} requests "
                    f"arrived within {timeout} s"
                )
            return list(self._records)

    async def wait_for_requests_async(
        self, count: int, timeout: float = 5.0
    ) -> list[RecordedRequest]:
        """:meth:`wait_for_requests` for async code."""
        deadline = time.monotonic() + timeout
        while len(self.requests) < count:
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"scripted upstream: {len(self.requests)} of {count} requests "
                    f"arrived within {timeout} s"
                )
            await asyncio.sleep(0.005)
        return self.requests

    def _error(self, message: str) -> None:
        with self._lock:
            self._errors.append(message)

    # -- lifecycle: async -----------------------------------------------------------

    async def _open(self) -> None:
        if self._server is not None:
            raise RuntimeError("the scripted upstream is already running")
        self._closing = False
        self._loop = asyncio.get_running_loop()
        # A deep backlog: a load test opens a thousand connections at once.
        self._server = await asyncio.start_server(self._serve, self.host, self._port, backlog=4096)
        self._bound_port = int(self._server.sockets[0].getsockname()[1])

    async def _shutdown(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        self._closing = True
        server.close()
        tasks = []
        for conn in list(self._connections):
            conn.writer.transport.abort()
            if conn.task is not None and conn.task is not asyncio.current_task():
                conn.task.cancel()
                tasks.append(conn.task)
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()

    async def astart(self) -> ScriptedUpstream:
        """Start on the running loop."""
        await self._open()
        return self

    async def aclose(self) -> None:
        """Stop: close every connection (pending exchanges end as ``shutdown``)."""
        await self._shutdown()

    async def __aenter__(self) -> ScriptedUpstream:
        return await self.astart()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- lifecycle: a thread of its own --------------------------------------------------

    def start(self) -> ScriptedUpstream:
        """Start on a new event loop in a background thread."""
        if self._thread is not None or self._server is not None:
            raise RuntimeError("the scripted upstream is already running")
        loop = asyncio.new_event_loop()
        thread = threading.Thread(
            target=self._run_loop, args=(loop,), name="scripted-upstream", daemon=True
        )
        thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self._open(), loop).result(timeout=10)
        except BaseException:
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
            raise
        self._thread = thread
        return self

    @staticmethod
    def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server and its thread (idempotent)."""
        thread, self._thread = self._thread, None
        loop = self._loop
        if thread is None or loop is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(timeout=timeout)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout)

    def __enter__(self) -> ScriptedUpstream:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- one connection ---------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with self._lock:
            number = self._next_connection
            self._next_connection += 1
        conn = _Connection(number, reader, writer)
        conn.task = asyncio.current_task()
        self._connections.add(conn)
        try:
            while not self._closing and not conn.gone.done():
                if not await self._exchange(conn):
                    break
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # a bug here must reach the test, not vanish in a log
            self._error(f"connection {number}: {type(exc).__name__}: {exc}")
        finally:
            record = conn.record
            if record is not None and not record.ended:
                if self._closing:
                    record._finish("shutdown")
                else:
                    record.ended_at = conn.gone_at
                    record._finish("client-disconnected")
            self._connections.discard(conn)
            await conn.unwatch()
            if not writer.transport.is_closing():
                writer.transport.close()

    async def _exchange(self, conn: _Connection) -> bool:
        """Read one request and answer it; False when the connection must end."""
        try:
            head = await conn.read_until(b"\r\n\r\n", MAX_HEAD_BYTES)
            if head is None:
                return False
            method, path, version, headers = self._parse_head(head)
        except _BadRequest as bad:
            answer = dumps(error_body("openai", bad.status, bad.message)).encode()
            conn.write(self._json_head(bad.status, "openai", close=True, body=answer))
            await conn.drain()
            return False
        lowered = {k.lower(): v for k, v in headers}
        keep = version == "HTTP/1.1" and "close" not in lowered.get("connection", "").lower()
        route = path.split("?", 1)[0]
        dialect = self._dialect_of(route, lowered)
        try:
            raw = await self._read_body(conn, lowered)
        except _BadRequest as bad:
            record = self._record(conn, method, path, headers, b"", None)
            record.dialect = dialect
            await self._send_json(
                conn, record, bad.status, error_body(dialect, bad.status, bad.message), False
            )
            await self._discard(conn)
            return False
        if raw is None:
            return False
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        record = self._record(conn, method, path, headers, raw, body)
        record.dialect = dialect
        conn.watch()
        try:
            if method == "GET" and route in MODELS_PATHS:
                return await self._send_json(conn, record, 200, self._models(lowered), keep)
            if method != "POST" or route not in OPENAI_PATHS + ANTHROPIC_PATHS:
                message = f"no route for {method} {route} (scripted upstream)"
                return await self._send_json(
                    conn, record, 404, error_body(dialect, 404, message), keep
                )
            if not isinstance(body, dict):
                message = "the request body must be a JSON object"
                return await self._send_json(
                    conn, record, 400, error_body(dialect, 400, message), keep
                )
            return await self._answer(conn, record, dialect, body, keep)
        finally:
            await conn.unwatch()

    @staticmethod
    def _parse_head(head: bytes) -> tuple[str, str, str, list[tuple[str, str]]]:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            raise _BadRequest(400, f"bad request line: {lines[0][:80]!r}")
        headers: list[tuple[str, str]] = []
        for line in lines[1:]:
            if not line:
                continue
            name, sep, value = line.partition(":")
            if not sep or not name or name != name.strip():
                raise _BadRequest(400, f"bad header line: {line[:80]!r}")
            headers.append((name, value.strip()))
        return parts[0], parts[1], parts[2], headers

    @staticmethod
    def _dialect_of(route: str, headers: dict[str, str]) -> Dialect:
        if route in ANTHROPIC_PATHS or (
            route not in OPENAI_PATHS and "anthropic-version" in headers
        ):
            return "anthropic"
        return "openai"

    async def _read_body(self, conn: _Connection, headers: dict[str, str]) -> bytes | None:
        # curl waits a second for a "100 Continue" before sending a body over 1 KiB.
        expects = "100-continue" in headers.get("expect", "").lower()
        if "chunked" in headers.get("transfer-encoding", "").lower():
            if expects:
                conn.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            parts = bytearray()
            while True:
                line = await conn.read_until(b"\r\n", 1024)
                if line is None:
                    return None
                try:
                    size = int(line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    raise _BadRequest(400, "bad chunk size in the request body") from None
                if size == 0:
                    trailer = await conn.read_until(b"\r\n", MAX_HEAD_BYTES)
                    while trailer not in (b"\r\n", None):
                        trailer = await conn.read_until(b"\r\n", MAX_HEAD_BYTES)
                    return bytes(parts)
                if len(parts) + size > self.max_body_bytes:
                    raise _BadRequest(413, self._too_large())
                parts += await conn.read_exact(size)
                await conn.read_exact(2)
        length = headers.get("content-length")
        if length is None:
            return b""
        try:
            size = int(length)
        except ValueError:
            raise _BadRequest(400, f"bad content-length: {length!r}") from None
        if size < 0:
            raise _BadRequest(400, f"bad content-length: {length!r}")
        if size > self.max_body_bytes:
            raise _BadRequest(413, self._too_large())
        if size and expects:
            conn.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        return await conn.read_exact(size)

    @staticmethod
    async def _discard(conn: _Connection, seconds: float = 2.0) -> None:
        """After an early error answer, read what the client still sends before
        closing: closing with unread input sends an RST that can destroy the
        answer before the client reads it."""
        with contextlib.suppress(OSError, RuntimeError):
            conn.writer.write_eof()
        deadline = time.monotonic() + seconds
        while not conn.gone.done() and time.monotonic() < deadline:
            conn.buffer.clear()
            try:
                await asyncio.wait_for(conn._fill(), deadline - time.monotonic())
            except asyncio.TimeoutError:
                break

    def _too_large(self) -> str:
        return f"request body over {self.max_body_bytes} bytes (scripted upstream)"

    def _record(
        self,
        conn: _Connection,
        method: str,
        path: str,
        headers: list[tuple[str, str]],
        raw: bytes,
        body: Any,
    ) -> RecordedRequest:
        with self._arrived:
            record = RecordedRequest(
                index=len(self._records),
                connection=conn.number,
                method=method,
                path=path,
                headers=tuple(headers),
                raw_body=raw,
                body=body,
                arrived_at=time.monotonic(),
            )
            self._records.append(record)
            self._arrived.notify_all()
        conn.record = record
        return record

    def _models(self, headers: dict[str, str]) -> dict[str, Any]:
        if "anthropic-version" in headers:
            data: list[dict[str, Any]] = [
                {"type": "model", "id": m, "display_name": m, "created_at": "2025-01-01T00:00:00Z"}
                for m in self.models
            ]
            first = self.models[0] if self.models else None
            last = self.models[-1] if self.models else None
            return {"data": data, "has_more": False, "first_id": first, "last_id": last}
        data = [
            {"id": m, "object": "model", "created": 0, "owned_by": self.owned_by}
            for m in self.models
        ]
        return {"object": "list", "data": data}

    # -- answering -----------------------------------------------------------------

    def _pick(self, record: RecordedRequest) -> Script | None:
        if self.choose is not None:
            try:
                chosen = self.choose(record)
            except Exception as exc:  # the test's chooser failed: say so in errors
                self._error(f"request {record.index}: choose raised {type(exc).__name__}: {exc}")
                return None
            if chosen is not None:
                return chosen
        with self._lock:
            if self._queue:
                return self._queue.popleft()
        return self.default

    async def _answer(
        self,
        conn: _Connection,
        record: RecordedRequest,
        dialect: Dialect,
        body: dict[str, Any],
        keep: bool,
    ) -> bool:
        record.stream = body.get("stream") is True
        script = self._pick(record)
        record.script = script
        if script is None:
            message = f"no script left for request {record.index} (scripted upstream)"
            self._error(message)
            return await self._send_json(conn, record, 500, error_body(dialect, 500, message), keep)
        if script.dialect is not None and script.dialect != dialect:
            message = (
                f"request {record.index}: a script for {script.dialect} was served on "
                f"{record.route} (scripted upstream)"
            )
            self._error(message)
            return await self._send_json(conn, record, 500, error_body(dialect, 500, message), keep)
        if script.repeat == 0 and not record.stream:
            message = f"request {record.index}: an endless script cannot answer stream=false"
            self._error(message)
            return await self._send_json(conn, record, 500, error_body(dialect, 500, message), keep)
        delivery = script.delivery
        if await conn.pause(delivery.headers_delay):
            return self._gone(conn, record)
        model = script.model or body.get("model")
        options = body.get("stream_options")
        ctx = Context(
            dialect=dialect,
            model=model if isinstance(model, str) else "scripted-model",
            response_id=(
                f"chatcmpl-scripted-{record.index}"
                if dialect == "openai"
                else f"msg_scripted_{record.index}"
            ),
            created=int(time.time()),
            seq=record.index,
            include_usage=isinstance(options, dict) and options.get("include_usage") is True,
        )
        extra = list(script.headers)
        if script.status >= 400:
            if script.retry_after is not None:
                extra.append(("retry-after", _seconds(script.retry_after)))
            error = error_body(
                dialect,
                script.status,
                script.error_message,
                script.error_type,
                self._request_id(record),
            )
            return await self._send_json(conn, record, script.status, error, keep, extra)
        if record.stream:
            return await self._stream(conn, record, script, ctx, keep, extra)
        return await self._complete(conn, record, script, ctx, keep, extra)

    async def _complete(
        self,
        conn: _Connection,
        record: RecordedRequest,
        script: Script,
        ctx: Context,
        keep: bool,
        extra: list[tuple[str, str]],
    ) -> bool:
        # Stream faults on a non-streaming answer: a stall delays it, a close
        # drops the connection before any byte, broken JSON cuts the body in
        # half, an error event becomes a 500; a body cut stops after its head.
        if script.body_cut_at is not None:
            body = _encoded(dumps(response_body(script, ctx)).encode(),
                            script.delivery.content_encoding)
            return await self._send_cut(conn, record, script, body, extra)
        if script.stall_after is not None and await conn.pause(script.stall_seconds):
            return self._gone(conn, record)
        if script.close_after is not None:
            conn.close("reset" if script.close_how == "reset" else "drop")
            record._finish("server-closed")
            return False
        if script.error_event_at is not None:
            error = error_body(
                ctx.dialect,
                500,
                script.error_message,
                script.error_type,
                self._request_id(record),
            )
            return await self._send_json(conn, record, 500, error, keep, extra)
        text = dumps(response_body(script, ctx))
        if script.invalid_json_at is not None:
            text = corrupt(text)
        encoding = script.delivery.content_encoding
        if encoding is not None:
            extra = [*extra, ("content-encoding", encoding)]
        return await self._send_raw(conn, record, 200, _encoded(text.encode(), encoding), keep,
                                    extra)

    async def _send_cut(self, conn: _Connection, record: RecordedRequest, script: Script,
                        body: bytes, extra: list[tuple[str, str]]) -> bool:
        """The head of a complete answer and the first ``body_cut_at`` bytes of its body;
        then a close, or a stall until ``stall_seconds`` pass or the client goes away."""
        record.status = 200
        encoding = script.delivery.content_encoding
        if encoding is not None:
            extra = [*extra, ("content-encoding", encoding)]
        head = self._json_head(200, record.dialect or "openai", close=True, body=b"",
                               record=record, extra=extra)
        # The head announced an empty body: announce the whole one instead.
        head = head.replace(b"content-length: 0\r\n",
                            f"content-length: {len(body)}\r\n".encode(), 1)
        cut = body[: script.body_cut_at]
        if not conn.write(head + cut) or not await conn.drain():
            return self._gone(conn, record)
        record.bytes_sent = len(cut)
        if script.stall_after is not None and await conn.pause(script.stall_seconds):
            return self._gone(conn, record)
        conn.close("drop")
        record._finish("server-closed")
        return False

    def _request_id(self, record: RecordedRequest) -> str:
        return f"req_scripted_{record.index}"

    def _json_head(
        self,
        status: int,
        dialect: Dialect,
        *,
        close: bool,
        body: bytes,
        record: RecordedRequest | None = None,
        extra: Iterable[tuple[str, str]] = (),
    ) -> bytes:
        headers = [("content-type", "application/json"), ("content-length", str(len(body)))]
        if record is not None:
            name = "x-request-id" if dialect == "openai" else "request-id"
            headers.append((name, self._request_id(record)))
        headers += list(extra)
        if close:
            headers.append(("connection", "close"))
        return _head(status, headers) + body

    async def _send_json(
        self,
        conn: _Connection,
        record: RecordedRequest,
        status: int,
        obj: Any,
        keep: bool,
        extra: Iterable[tuple[str, str]] = (),
    ) -> bool:
        return await self._send_raw(conn, record, status, dumps(obj).encode(), keep, extra)

    async def _send_raw(
        self,
        conn: _Connection,
        record: RecordedRequest,
        status: int,
        body: bytes,
        keep: bool,
        extra: Iterable[tuple[str, str]] = (),
    ) -> bool:
        record.status = status
        dialect = record.dialect or "openai"
        data = self._json_head(
            status, dialect, close=not keep, body=body, record=record, extra=extra
        )
        if not conn.write(data) or not await conn.drain():
            return self._gone(conn, record)
        record.bytes_sent = len(body)
        record._finish("completed")
        return keep

    def _gone(self, conn: _Connection, record: RecordedRequest) -> bool:
        if self._closing:
            record._finish("shutdown")
        else:
            record.ended_at = conn.gone_at
            record._finish("client-disconnected")
        return False

    async def _stream(
        self,
        conn: _Connection,
        record: RecordedRequest,
        script: Script,
        ctx: Context,
        keep: bool,
        extra: list[tuple[str, str]],
    ) -> bool:
        delivery = script.delivery
        chunked = delivery.chunked
        keep = keep and chunked
        name = "x-request-id" if ctx.dialect == "openai" else "request-id"
        headers = [
            ("content-type", "text/event-stream"),
            ("cache-control", "no-cache"),
            (name, self._request_id(record)),
            ("transfer-encoding", "chunked") if chunked else ("connection", "close"),
            *extra,
        ]
        if chunked and not keep:
            headers.append(("connection", "close"))
        compressor = None
        if delivery.content_encoding is not None:
            headers.append(("content-encoding", delivery.content_encoding))
            compressor = _compressor(delivery.content_encoding)
        record.status = 200
        if not conn.write(_head(200, headers)):
            return self._gone(conn, record)
        comment = f": {delivery.keepalive_text}\n\n".encode()

        def frame(data: bytes) -> bytes:
            if compressor is not None:
                # A sync flush per write: the reader can decode each write as it comes.
                data = compressor.compress(data) + compressor.flush(zlib.Z_SYNC_FLUSH)
            return _chunk(data) if chunked else data

        wrote = False
        for step in plan(script, stream_events(script, ctx), ctx.dialect):
            if isinstance(step, Write):
                if wrote and delivery.delay and await conn.pause(delivery.delay):
                    return self._gone(conn, record)
                if not conn.write(frame(step.data)):
                    return self._gone(conn, record)
                wrote = True
                record.bytes_sent += len(step.data)
                record.events_sent = step.events
                if not await conn.drain():
                    return self._gone(conn, record)
                if not delivery.delay:
                    # Let other connections (and the disconnect watcher) run: a
                    # socket that never fills would otherwise hold the loop.
                    await asyncio.sleep(0)
            elif isinstance(step, Pause):
                if not await self._stall(conn, record, step, lambda: frame(comment)):
                    return self._gone(conn, record)
            elif isinstance(step, Close):
                if step.how == "end" and chunked:
                    if not conn.write(_chunk(b"")) or not await conn.drain():
                        return self._gone(conn, record)
                    record._finish("server-closed")
                    return keep
                if conn.gone.done():
                    return self._gone(conn, record)
                conn.close("reset" if step.how == "reset" else "drop")
                record._finish("server-closed")
                return False
            elif isinstance(step, End):
                if compressor is not None:
                    tail = compressor.flush()
                    if not conn.write(_chunk(tail) if chunked else tail):
                        return self._gone(conn, record)
                if chunked:
                    if not conn.write(_chunk(b"")) or not await conn.drain():
                        return self._gone(conn, record)
                else:
                    conn.close()
                record._finish("completed")
                return keep
        return keep  # pragma: no cover - plan always ends with End or Close

    async def _stall(
        self, conn: _Connection, record: RecordedRequest, pause: Pause,
        comment: Callable[[], bytes]
    ) -> bool:
        """Hold the stream; False when the client went away meanwhile."""
        if pause.keepalive is None:
            return not await conn.pause(pause.seconds)
        loop = asyncio.get_running_loop()
        deadline = None if pause.seconds is None else loop.time() + pause.seconds
        while True:
            wait = pause.keepalive
            if deadline is not None:
                wait = min(wait, deadline - loop.time())
                if wait <= 0:
                    return True
            if await conn.pause(wait):
                return False
            if deadline is not None and loop.time() >= deadline:
                return True
            if not conn.write(comment()) or not await conn.drain():
                return False
