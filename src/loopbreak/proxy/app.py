"""The proxy as a pure ASGI application.

``POST /v1/chat/completions`` and ``/chat/completions`` (OpenAI) and
``POST /v1/messages`` (Anthropic) are guarded; ``GET /healthz`` and
``GET /metrics`` are the proxy's own; every other path and method is passed to
the upstream untouched, bodies streamed both ways. Auth and other headers pass
through as they came. No session state is kept: any replica serves any request.

The upstream client is aiohttp (the ``proxy`` extra): it holds a
thousand concurrent streams on two cores where pure-Python pools spend their
time bookkeeping.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from loopbreak._config import Config, ProxyConfig, load_config
from loopbreak._engine import accelerator
from loopbreak._engine.call_guard import ChannelGuard
from loopbreak._engine.trip import Trip
from loopbreak._errors import ConfigError
from loopbreak._recovery import normal_finish, plan_cut, plan_denial
from loopbreak._recovery.history import (
    HistoryView,
    Kind,
    ReplayCheckpoints,
    replay,
    session_key,
    thinking_off_retry,
    tool_calls_of,
    with_denial,
    with_guidance,
    with_note,
    without_unsigned_thinking,
)
from loopbreak._recovery.requests import dialect_of_upstream, requested_dialect
from loopbreak.proxy.body import RequestBody
from loopbreak.proxy.formats import AnthropicStream, OpenAIStream, error_body, json_bytes
from loopbreak.proxy.logs import event as log_event
from loopbreak.proxy.logs import log as proxy_log
from loopbreak.proxy.logs import session_id
from loopbreak.proxy.metrics import Metrics
from loopbreak.proxy.relay import (
    Headers,
    StreamRelay,
    UpstreamError,
    UpstreamResponse,
)
from loopbreak.proxy.wire import (
    READABLE_ENCODINGS,
    BodyDecoder,
    BodyError,
    content_encoding,
    request_headers,
    response_headers,
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


GUARDED: dict[str, Kind] = {
    "/v1/chat/completions": "openai",
    "/chat/completions": "openai",
    "/v1/messages": "anthropic",
}


def upstream_url(base: str, path: str, query: str = "") -> str:
    """The upstream URL for a client path: an upstream base ending in ``/v1`` and a path
    starting with ``/v1/`` share that segment once."""
    split = urlsplit(base.rstrip("/"))
    prefix = split.path
    if prefix.endswith("/v1") and (path == "/v1" or path.startswith("/v1/")):
        path = path[3:]
    url = f"{split.scheme}://{split.netloc}{prefix}{path}"
    return f"{url}?{query}" if query else url


class ConfigSource:
    """The configuration, re-read when its file changes. The proxy checks the file every
    ``proxy.reload_seconds`` in the background (:meth:`check`), so a broken edit or a
    deleted file is reported when it happens, not at the next request; the last good
    configuration stays in force until a valid file replaces it.

    A change is applied once two checks in a row read the same bytes: an editor or a
    script that truncates and then writes leaves an empty or half-written file for a
    moment, and that moment must not become the configuration in force (an empty file
    is valid TOML, so it would silently bring back every default). A writer stalled
    between the two for a whole check is not told from one that meant it (in one CI run
    the reload test's rewrite in place brought the defaults back, under load); saving by
    renaming leaves no such moment."""

    def __init__(self, path: str | None, config: Config | None = None,
                 proxy: ProxyConfig | None = None) -> None:
        self.path = Path(path) if path else None
        # What is not given comes from the file (or the defaults and $LOOPBREAK_* variables).
        loaded = load_config(path) if config is None or (proxy is None and path) else None
        self.config = config or (loaded.config if loaded else Config())
        self.proxy = proxy or (loaded.proxy if loaded else ProxyConfig())
        self._content = self._read()
        self._pending: bytes | None = None
        self._missing = False

    def _read(self) -> bytes | None:
        # The content, not the modification time, says whether the file changed: two
        # versions can share one time stamp. A configuration file is a few hundred bytes.
        try:
            return self.path.read_bytes() if self.path else None
        except OSError:
            return None

    def check(self) -> None:
        """Re-read the file; apply a change once it has held still for one check, and
        report a file that broke or went away (once)."""
        if self.path is None:
            return
        content = self._read()
        if content is None:
            if not self._missing:
                self._missing = True
                log_event("config-missing", logging.ERROR, path=str(self.path),
                          error="the configuration file is gone; the last one read stays "
                                "in force")
            return
        self._missing = False
        if content == self._content:
            self._pending = None
            return
        if content != self._pending:
            self._pending = content
            return
        self._content, self._pending = content, None
        try:
            loaded = load_config(self.path, content=content)
            self.config, self.proxy = loaded.config, loaded.proxy
            log_event("config-reloaded", logging.INFO, path=str(self.path))
        except ConfigError as exc:
            log_event("config-rejected", logging.ERROR, path=str(self.path), error=str(exc))

    async def watch(self) -> None:
        """Check the file every ``proxy.reload_seconds`` until cancelled."""
        while True:
            await asyncio.sleep(self.proxy.reload_seconds)
            self.check()


class _AiohttpResponse:
    """An aiohttp response seen through the relay's small interface, decoded when the
    upstream compressed it."""

    def __init__(self, response: Any, decoder: BodyDecoder | None = None) -> None:
        self._response = response
        self._decoder = decoder
        self.status: int = response.status
        self.headers: Headers = [(k, v) for k, v in response.headers.items()
                                 if decoder is None or k.lower() != "content-encoding"]
        self._done = False

    async def chunks(self) -> AsyncIterator[bytes]:
        import aiohttp

        decoder = self._decoder
        try:
            async for data in self._response.content.iter_any():
                if decoder is None:
                    yield data
                else:
                    for part in decoder.decode(data):
                        yield part
            if decoder is not None:
                rest = decoder.finish()
                if rest:
                    yield rest
        except asyncio.TimeoutError:
            # aiohttp's read timeouts are ClientErrors too: a stall must stay a stall.
            raise asyncio.TimeoutError("the upstream stopped sending") from None
        except aiohttp.ClientError as exc:
            # The relay knows connection errors, not aiohttp's: translate at the boundary.
            raise ConnectionError(f"{type(exc).__name__}: {exc}") from exc
        self._done = True

    async def read(self, limit: int) -> bytes:
        parts: list[bytes] = []
        size = 0
        try:
            async for data in self.chunks():
                size += len(data)
                if size > limit:
                    raise UpstreamError(502, f"the upstream's answer is larger than {limit:,} "
                                             "bytes (proxy.max_response_bytes)")
                parts.append(data)
        except asyncio.TimeoutError:
            raise UpstreamError(504, "the upstream stopped sending its answer") from None
        except (ConnectionError, BodyError) as exc:
            raise UpstreamError(502, f"the upstream's answer broke off: {exc}") from None
        return b"".join(parts)

    def close(self) -> None:
        # A response read to its end goes back to the pool; any other is closed, which is
        # what stops the upstream generating (and billing).
        if self._done:
            self._response.release()
        else:
            self._response.close()


class _ResponseSink:
    """Where the relay writes the client's response: the ASGI ``send``, started once."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self.started = False
        self.status = 0

    async def start(self, status: int, headers: Headers) -> None:
        self.started = True
        self.status = status
        await self._send({"type": "http.response.start", "status": status,
                          "headers": [(k.lower().encode("latin-1"), v.encode("latin-1"))
                                      for k, v in headers]})

    async def write(self, data: bytes) -> None:
        if data:
            await self._send({"type": "http.response.body", "body": data, "more_body": True})

    async def end(self) -> None:
        await self._send({"type": "http.response.body", "body": b"", "more_body": False})


class ProxyApp:
    """``loopbreak proxy`` as an ASGI app: ``ProxyApp("https://api.deepseek.com")``."""

    def __init__(self, upstream: str, *, config_path: str | None = None,
                 config: Config | None = None, proxy: ProxyConfig | None = None) -> None:
        if urlsplit(upstream).scheme not in ("http", "https") or not urlsplit(upstream).netloc:
            raise ConfigError(f"--upstream must be an http(s) URL, not {upstream!r}")
        self.upstream = upstream.rstrip("/")
        self.source = ConfigSource(config_path, config, proxy)
        self.metrics = Metrics()
        self._session: Any = None
        self._watcher: asyncio.Future[None] | None = None
        self._dialects: dict[str, str] = {}
        # Where each session's last replay left off: its next request replays what is new
        # (sized to the budget in force by _checkpoints, request by request).
        self._replays = proxy_checkpoints()

    # --- ASGI --------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        if not proxy_log.isEnabledFor(logging.INFO):
            await self._route(scope, receive, send)
            return
        # --log-level info: one line per request (no headers, no query, no body).
        began = time.monotonic()
        status = 0

        async def noting_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self._route(scope, receive, noting_status)
        finally:
            log_event("request", logging.INFO, method=scope["method"], path=scope["path"],
                      status=status, ms=round((time.monotonic() - began) * 1000, 1))

    async def _route(self, scope: Scope, receive: Receive, send: Send) -> None:
        path, method = scope["path"], scope["method"]
        if method == "GET" and path == "/healthz":
            await self._respond(send, 200, b"ok\n", "text/plain; charset=utf-8")
        elif method == "GET" and path == "/metrics":
            await self._respond(send, 200, self.metrics.render().encode(),
                                "text/plain; version=0.0.4; charset=utf-8")
        elif method == "POST" and path in GUARDED:
            self.metrics.add("loopbreak_requests_total", route=path)
            await self._guarded(scope, receive, send, GUARDED[path])
        else:
            self.metrics.add("loopbreak_requests_total", route="passthrough")
            await self.passthrough(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                # numba compiles (first run on a machine: seconds) or loads the kernels now,
                # off the event loop, not inside the first stream (unless they are off).
                kernels = await asyncio.get_running_loop().run_in_executor(
                    None, accelerator.wanted, self.source.config.judging.compiled)
                if kernels is not None:
                    from loopbreak.proxy.server import freeze_late_startup

                    freeze_late_startup()
                if self.source.path is not None:
                    self._watcher = asyncio.ensure_future(self.source.watch())
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def aclose(self) -> None:
        """Stop watching the configuration file; close the upstream connection pool."""
        if self._watcher is not None:
            self._watcher.cancel()
            await asyncio.gather(self._watcher, return_exceptions=True)
            self._watcher = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _client_session(self) -> Any:
        if self._session is None:
            import aiohttp

            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300),
                auto_decompress=False, trust_env=False)
        return self._session

    @staticmethod
    async def _respond(send: Send, status: int, body: bytes, content_type: str) -> None:
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", content_type.encode()),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    # --- requests ---------------------------------------------------------------------

    async def _read_body(self, receive: Receive, limit: int) -> bytes | None:
        """The request body, or ``None`` when it is larger than ``limit``."""
        parts = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise asyncio.CancelledError
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return None
            parts.append(chunk)
            if not message.get("more_body"):
                return b"".join(parts)

    @staticmethod
    def _forward_headers(scope: Scope) -> dict[str, str]:
        return request_headers((name.decode("latin-1"), value.decode("latin-1"))
                               for name, value in scope["headers"])

    async def _guarded(self, scope: Scope, receive: Receive, send: Send, kind: Kind) -> None:
        config = self.source.config
        settings = self.source.proxy
        raw = await self._read_body(receive, settings.max_body_bytes)
        if raw is None:
            await self._respond(send, 413, error_body(
                kind, 413, f"request body larger than {settings.max_body_bytes:,} bytes"),
                "application/json")
            return
        try:
            request = await read_request_off_loop(
                raw, kind, config, self._checkpoints(settings.replay_checkpoint_chars))
        except ValueError as exc:
            await self._respond(send, 400, error_body(kind, 400, str(exc)), "application/json")
            return
        body, view, forwarded = request.body, request.view, request.forwarded
        headers = self._forward_headers(scope)
        reaction = view.reaction
        if reaction is not None:
            self.metrics.add("loopbreak_stall_reactions_total", kind=reaction.kind,
                             rule=reaction.rule)
            log_event(reaction.rule, kind=reaction.kind, fires=reaction.fires,
                      session=session_id(session_key(headers, body)))
            if reaction.kind == "cancel":
                await self._cancelled(send, kind, body, reaction.notice)
                return
        url = upstream_url(self.upstream, scope["path"], scope.get("query_string", b"").decode())
        opener = self._opener(url, headers, settings, request)
        model = str(body.get("model") or "")

        def asker() -> Awaitable[str]:
            return self.upstream_dialect(headers, model)

        if body.get("stream"):
            await self._stream(send, receive, kind, forwarded, view, config, opener,
                               model=str(body.get("model") or ""),
                               session=session_id(session_key(headers, body)),
                               ask_dialect=asker)
        else:
            await self._whole(send, kind, forwarded, view, config, opener,
                              session=session_id(session_key(headers, body)),
                              ask_dialect=asker)

    def _checkpoints(self, max_chars: int) -> ReplayCheckpoints | None:
        """The replay checkpoints within the budget in force (a changed budget starts them
        over: they are a cache); ``None`` when they are off."""
        if not max_chars:
            return None
        if self._replays.max_chars != max_chars:
            self._replays = proxy_checkpoints(max_chars)
        return self._replays

    async def upstream_dialect(self, headers: dict[str, str], model: str) -> str:
        """How the upstream turns thinking off, for a request that names no thinking field:
        from what its ``GET /v1/models`` says owns ``model`` (asked once per model, with the
        client's own credentials), else from its host name; ``none`` when neither tells."""
        if model in self._dialects:
            return self._dialects[model]
        import aiohttp

        owned_by = ""
        headers = {k: v for k, v in headers.items()
                   if k not in ("content-type", "accept-encoding", "accept")}
        try:
            session = await self._client_session()
            async with session.get(upstream_url(self.upstream, "/v1/models"),
                                   headers={**headers, "accept-encoding": "identity"},
                                   timeout=aiohttp.ClientTimeout(total=3)) as response:
                if response.status == 200:
                    listing = json.loads(await response.content.read(1 << 20))
                    entries = [e for e in listing.get("data") or [] if isinstance(e, dict)]
                    entry = next((e for e in entries if e.get("id") == model),
                                 entries[0] if entries else {})
                    owned_by = str(entry.get("owned_by") or "")
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, AttributeError):
            pass  # the host name is all there is to go on
        dialect = dialect_of_upstream(urlsplit(self.upstream).netloc, owned_by)
        if len(self._dialects) >= 256:
            self._dialects.clear()
        self._dialects[model] = dialect
        log_event("upstream-dialect", logging.INFO, model=model, owned_by=owned_by,
                  dialect=dialect)
        return dialect

    def _opener(self, url: str, headers: dict[str, str], settings: ProxyConfig,
                request: GuardedRequest) -> Callable[[dict[str, Any]], Awaitable[UpstreamResponse]]:
        async def open_upstream(body: dict[str, Any]) -> UpstreamResponse:
            import aiohttp

            session = await self._client_session()
            data = request.bytes_of(body)
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=settings.connect_timeout,
                                            sock_read=settings.idle_timeout)
            try:
                # The guard reads what it relays: ask for it uncompressed.
                response = await session.post(url, data=data, headers={
                    **headers, "content-type": "application/json",
                    "accept-encoding": "identity"}, timeout=timeout)
            except asyncio.TimeoutError:
                self.metrics.add("loopbreak_upstream_errors_total", kind="timeout")
                message = f"the upstream did not answer within {settings.idle_timeout:g} s"
                log_event("upstream-error", status=504, error=message)
                raise UpstreamError(504, message) from None
            except aiohttp.ClientError as exc:
                self.metrics.add("loopbreak_upstream_errors_total", kind="unreachable")
                message = f"the upstream could not be reached: {exc}"
                log_event("upstream-error", status=502, error=message)
                raise UpstreamError(502, message) from None
            if response.status >= 400:
                self.metrics.add("loopbreak_upstream_errors_total", kind=str(response.status))
            encoding = content_encoding(response.headers.items())
            if encoding == "identity":
                return _AiohttpResponse(response)
            if encoding in READABLE_ENCODINGS:
                return _AiohttpResponse(response, BodyDecoder(encoding))
            if response.status >= 400:
                # An error is passed on as it came, its encoding named.
                return _AiohttpResponse(response)
            response.close()
            self.metrics.add("loopbreak_upstream_errors_total", kind="encoding")
            message = (f"the upstream answered with content-encoding {encoding}, which the "
                       "guard cannot read (it asks for identity; gzip and deflate are decoded)")
            log_event("upstream-error", status=502, error=message)
            raise UpstreamError(502, message)

        return open_upstream

    async def _stream(self, send: Send, receive: Receive, kind: Kind, body: dict[str, Any],
                      view: Any, config: Config, opener: Any, *, model: str, session: str,
                      ask_dialect: Callable[[], Awaitable[str]]) -> None:
        client = _ResponseSink(send)

        def on_trip(trip: Trip, recovery: str) -> None:
            self.metrics.add("loopbreak_trips_total", rule=trip.rule, channel=trip.channel)
            self.metrics.add("loopbreak_cut_chars_total", trip.offset)
            if recovery == "retry":
                self.metrics.add("loopbreak_retries_total", reason="thinking-off")
            log_event("trip", rule=trip.rule, channel=trip.channel, offset=trip.offset,
                      model=model, session=session, recovery=recovery)

        call = StreamRelay(kind, body, view, config, opener, client,
                           dialect=config.recovery.dialect, effort=config.recovery.retry_effort,
                           on_trip=on_trip, upstream_dialect=ask_dialect,
                           max_response_bytes=self.source.proxy.max_response_bytes)
        self.metrics.add("loopbreak_streams_active", 1)
        relay = asyncio.ensure_future(call.run())
        watcher = asyncio.ensure_future(_disconnected(receive))
        try:
            done, _ = await asyncio.wait({relay, watcher}, return_when=asyncio.FIRST_COMPLETED)
            if relay not in done:
                # The client went away: cancelling the relay closes the upstream connection.
                relay.cancel()
                await asyncio.gather(relay, return_exceptions=True)
                return
            outcome = relay.result()
            if outcome.broken_retries:
                self.metrics.add("loopbreak_retries_total", outcome.broken_retries,
                                 reason="broken-response")
            if outcome.denials:
                self.metrics.add("loopbreak_tool_denials_total", outcome.denials)
                log_event("tool-denied", calls=outcome.denials, model=model, session=session)
            if client.started:
                await client.end()
        finally:
            watcher.cancel()
            self.metrics.add("loopbreak_streams_active", -1)

    async def _whole(self, send: Send, kind: Kind, body: dict[str, Any], view: Any,
                     config: Config, opener: Any, *, session: str,
                     ask_dialect: Callable[[], Awaitable[str]]) -> None:
        """A non-streaming request. A whole answer is already made and paid for, so what saves
        anything is what the client keeps: an answer whose text loops is cut where the rule
        fired and ends with the notice, as the streamed route would have ended it (its tool
        calls, whole, kept); one whose reasoning loops but that holds an answer or tool calls
        passes as it came (``x-loopbreak-trip`` marks it); one that holds nothing but reasoning
        is recovered as the plan says (asked again without thinking, once per turn; ended
        with the notice; or an error, as is any looping answer in ``error`` mode). Tool calls
        the history denies never reach the client (the model is re-asked once, then the
        answer ends with the reason), as on the streamed route."""
        limit = self.source.proxy.max_response_bytes
        try:
            response = await opener(body)
            try:
                data = await response.read(limit)
            except UpstreamError as exc:
                log_event("upstream-error", status=exc.status, error=str(exc), session=session)
                raise
            finally:
                response.close()
        except UpstreamError as exc:
            await self._respond(send, exc.status, error_body(kind, exc.status, str(exc)),
                                "application/json")
            return
        status = response.status
        headers = response_headers(response.headers)
        trip = _judge_whole(data, kind, config) if status == 200 else None
        if trip is not None:
            cut, productive = trip
            plan = plan_cut(cut, config, language=view.session.language,
                            retries_used=view.cuts_this_turn, wire=kind)
            recovery = plan.mode if plan.mode == "error" or not productive else (
                "stop" if cut.channel == "text" else "none")
            self.metrics.add("loopbreak_trips_total", rule=cut.rule, channel=cut.channel)
            headers.append(("x-loopbreak-trip", cut.rule))
            log_event("trip", rule=cut.rule, channel=cut.channel, offset=cut.offset,
                      model=str(body.get("model") or ""), session=session, recovery=recovery)
            if recovery == "error":
                # Not 5xx-retried by the SDKs: the same request would loop (and bill) again.
                status, data = 502, error_body(kind, 502, plan.error, code="loop_detected")
                headers = [("content-type", "application/json"), ("x-should-retry", "false"),
                           ("x-loopbreak-trip", cut.rule)]
            elif recovery == "stop" and productive:
                data = _text_cut(data, kind, cut.at, plan.shown)
            elif recovery == "stop":
                data = _with_notice(data, kind, plan.shown)
            elif recovery == "retry":
                dialect = config.recovery.dialect
                if dialect == "auto" and requested_dialect(body, kind) == "none":
                    dialect = await ask_dialect()
                retry, without_field = thinking_off_retry(body, kind, dialect,
                                                          config.recovery.retry_effort,
                                                          plan.notice)
                self.metrics.add("loopbreak_retries_total", reason="thinking-off")
                try:
                    second = await opener(retry)
                    if second.status == 400 and without_field is not None:
                        # The upstream rejects the field the retry added: once without it.
                        second.close()
                        second = await opener(without_field)
                    try:
                        answer = await second.read(limit)
                    finally:
                        second.close()
                    data = _with_notice(answer, kind, plan.shown) if second.status == 200 \
                        else data
                except UpstreamError:
                    pass
        if status == 200:
            data = await self._whole_denied(kind, body, view, opener, data,
                                            model=str(body.get("model") or ""), session=session)
        await send({"type": "http.response.start", "status": status,
                    "headers": [(k.lower().encode("latin-1"), v.encode("latin-1"))
                                for k, v in headers if k.lower() != "content-length"]
                    + [(b"content-length", str(len(data)).encode())]})
        await send({"type": "http.response.body", "body": data})

    async def _whole_denied(self, kind: Kind, body: dict[str, Any], view: Any, opener: Any,
                            data: bytes, *, model: str, session: str) -> bytes:
        """A whole answer with no tool call the history denies: the answer itself, or the
        re-asked model's, or (the model insists, or the re-ask failed) the answer without its
        calls, ended with the reason (``plan_denial``)."""
        denials, reasked = 0, False
        try:
            while True:
                calls = _whole_calls(data, kind)
                denied = {cid: reason for cid, name, arguments in calls
                          if (reason := view.denied(name, arguments)) is not None}
                if not denied:
                    return data
                denials += len(denied)
                plan = plan_denial([cid for cid, _, _ in calls], denied, reasked=reasked)
                if not plan.reask:
                    return _ended_with(data, kind, plan.reason)
                reasked = True
                try:
                    response = await opener(with_denial(body, kind, calls, plan.reasons))
                    try:
                        answer = await response.read(self.source.proxy.max_response_bytes)
                    finally:
                        response.close()
                except UpstreamError:
                    return _ended_with(data, kind, plan.reason)
                if response.status != 200:
                    return _ended_with(data, kind, plan.reason)
                data = answer
        finally:
            if denials:
                self.metrics.add("loopbreak_tool_denials_total", denials)
                log_event("tool-denied", calls=denials, model=model, session=session)

    async def _cancelled(self, send: Send, kind: Kind, body: dict[str, Any], notice: str) -> None:
        """The stall rule's ``cancel``: end the call lawfully with the notice, no upstream."""
        stream_model = str(body.get("model") or "")
        stream = OpenAIStream(model=stream_model) if kind == "openai" \
            else AnthropicStream(model=stream_model)
        if body.get("stream"):
            end = "stop" if kind == "openai" else "end_turn"
            data = stream.text(notice) + stream.finish(end)
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"text/event-stream; charset=utf-8")]})
            await send({"type": "http.response.body", "body": data})
            return
        if kind == "openai":
            whole = {"id": "chatcmpl-loopbreak", "object": "chat.completion",
                     "created": int(time.time()), "model": stream_model,
                     "choices": [{"index": 0, "message": {"role": "assistant", "content": notice},
                                  "finish_reason": "stop"}]}
        else:
            whole = {"id": "msg_loopbreak", "type": "message", "role": "assistant",
                     "model": stream_model, "content": [{"type": "text", "text": notice}],
                     "stop_reason": "end_turn", "stop_sequence": None,
                     "usage": {"input_tokens": 0, "output_tokens": 0}}
        await self._respond(send, 200, json.dumps(whole).encode(), "application/json")

    async def passthrough(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Relay one request and its response unjudged, bodies streamed both ways (every
        path and method the proxy does not guard)."""
        import aiohttp

        session = await self._client_session()
        url = upstream_url(self.upstream, scope["path"], scope.get("query_string", b"").decode())

        async def request_body() -> AsyncIterator[bytes]:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                yield message.get("body", b"")
                if not message.get("more_body"):
                    return

        settings = self.source.proxy
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=settings.connect_timeout,
                                        sock_read=settings.idle_timeout)
        started = False
        try:
            async with session.request(scope["method"], url, headers=self._forward_headers(scope),
                                       data=request_body(), timeout=timeout) as response:
                # The body goes on byte for byte, compressed or not, its length announced.
                headers = response_headers(response.headers.items(), keep_length=True)
                await send({"type": "http.response.start", "status": response.status,
                            "headers": [(k.lower().encode("latin-1"), v.encode("latin-1"))
                                        for k, v in headers]})
                started = True
                async for data in response.content.iter_any():
                    await send({"type": "http.response.body", "body": data, "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except (asyncio.TimeoutError, aiohttp.ClientError) as exc:
            timed_out = isinstance(exc, asyncio.TimeoutError)
            if started:
                # The head is out: the only honest end is a cut connection, which the server
                # makes when the app returns without ending the body.
                log_event("passthrough-broken", path=scope["path"],
                          error="timeout" if timed_out else f"{type(exc).__name__}: {exc}")
                return
            status, message = (504, "the upstream timed out") if timed_out else (
                502, f"the upstream could not be reached: {exc}")
            log_event("upstream-error", status=status, path=scope["path"], error=message)
            await self._respond(send, status, error_body("openai", status, message),
                                "application/json")


async def _disconnected(receive: Receive) -> None:
    """Return when the client has gone away."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


def _judge_whole(data: bytes, kind: Kind, config: Config) -> tuple[Trip, bool] | None:
    """The first trip in a complete response, and whether the response did something besides
    reasoning (an answer or a tool call)."""
    try:
        obj = json.loads(data)
    except ValueError:
        return None
    reasoning = text = ""
    productive = False
    if kind == "openai":
        choices = obj.get("choices") if isinstance(obj, dict) else None
        message = choices[0].get("message") if isinstance(choices, list) and choices \
            and isinstance(choices[0], dict) else None
        if isinstance(message, dict):
            reasoning = str(message.get("reasoning_content") or message.get("reasoning") or "")
            text = str(message.get("content") or "")
            productive = bool(text.strip() or message.get("tool_calls"))
    elif isinstance(obj, dict):
        for block in obj.get("content") or []:
            if isinstance(block, dict):
                if block.get("type") == "thinking":
                    reasoning += str(block.get("thinking") or "")
                elif block.get("type") == "text":
                    text += str(block.get("text") or "")
                elif block.get("type") == "tool_use":
                    productive = True
        productive = productive or bool(text.strip())
    # The text first: a looping answer is cut even when its reasoning looped too.
    for channel, value in (("text", text), ("reasoning", reasoning)):
        # A whole answer is one delta: every rule but the per-delta one decides the same
        # however the text is split.
        guard = ChannelGuard(channel, config)  # type: ignore[arg-type]
        trip = guard.feed(value) or guard.flush()
        if trip is not None:
            return trip, productive
    return None


def _with_notice(data: bytes, kind: Kind, notice: str) -> bytes:
    """A complete response with the cut notice shown before its answer (as it is when the
    notice is ``""``: ``recovery.notice`` off)."""
    if not notice:
        return data
    try:
        obj = json.loads(data)
    except ValueError:
        return data
    if kind == "openai" and isinstance(obj, dict) and obj.get("choices"):
        message = obj["choices"][0].get("message") or {}
        message["content"] = f"{notice}\n\n{message.get('content') or ''}"
    elif kind == "anthropic" and isinstance(obj, dict):
        obj["content"] = [{"type": "text", "text": notice}, *(obj.get("content") or [])]
    return json_bytes(obj)


def _text_cut(data: bytes, kind: Kind, at: int, notice: str) -> bytes:
    """A complete response whose text ends at character ``at`` (where the rule fired),
    followed by ``notice`` ("" with ``recovery.notice`` off), with a normal finish, or the
    tool-call one when it holds tool calls (whole, they are kept: the client runs them)."""
    obj = json.loads(data)
    if kind == "openai":
        choice = obj["choices"][0]
        message = choice.get("message") or {}
        said = str(message.get("content") or "")[:at]
        message["content"] = f"{said}\n\n{notice}" if said and notice else said or notice
        choice["finish_reason"] = normal_finish(kind, bool(message.get("tool_calls")))
        return json_bytes(obj)
    blocks: list[Any] = []
    left = at
    for block in obj.get("content") or []:
        if isinstance(block, dict) and block.get("type") == "text":
            text = str(block.get("text") or "")
            if left <= 0:
                continue
            block = {**block, "text": text[:left]}
            left -= len(text)
        blocks.append(block)
    if notice:
        # After the text it ends, before any tool use (the order a stream would have had).
        last = max((i for i, b in enumerate(blocks)
                    if isinstance(b, dict) and b.get("type") == "text"), default=-1)
        blocks.insert(last + 1, {"type": "text", "text": notice})
    obj["content"] = blocks
    obj["stop_reason"] = normal_finish(kind, any(
        isinstance(b, dict) and b.get("type") == "tool_use" for b in blocks))
    return json_bytes(obj)


def _whole_calls(data: bytes, kind: Kind) -> list[tuple[str, str, str]]:
    """The tool calls of a complete response: ``(id, name, arguments)`` each."""
    try:
        obj = json.loads(data)
    except ValueError:
        return []
    if not isinstance(obj, dict):
        return []
    if kind == "anthropic":
        return tool_calls_of(obj, kind)
    choices = obj.get("choices")
    message = choices[0].get("message") if isinstance(choices, list) and choices \
        and isinstance(choices[0], dict) else None
    return tool_calls_of(message, kind) if isinstance(message, dict) else []


def _ended_with(data: bytes, kind: Kind, text: str) -> bytes:
    """A complete response without its tool calls, ``text`` after what else it said, and the
    normal finish: what a model that insists on a denied call ends with."""
    obj = json.loads(data)
    if kind == "openai":
        choice = obj["choices"][0]
        message = choice.get("message") or {}
        message.pop("tool_calls", None)
        said = message.get("content") or ""
        message["content"] = f"{said}\n\n{text}" if said else text
        choice["message"] = message
        choice["finish_reason"] = normal_finish(kind)
    else:
        obj["content"] = [b for b in obj.get("content") or []
                          if not (isinstance(b, dict) and b.get("type") == "tool_use")] \
            + [{"type": "text", "text": text}]
        obj["stop_reason"] = normal_finish(kind)
    return json_bytes(obj)


@dataclass(frozen=True)
class GuardedRequest:
    """A guarded route's request as the proxy reads it: its body, what its history says,
    and the body to send upstream (the parsed one itself when the history changes
    nothing)."""

    parsed: RequestBody
    view: HistoryView
    forwarded: dict[str, Any]

    @property
    def body(self) -> dict[str, Any]:
        """The body the client sent."""
        body: dict[str, Any] = self.parsed.value
        return body

    def bytes_of(self, body: dict[str, Any]) -> bytes:
        """What goes upstream for ``body`` (this request's, or one made from it)."""
        return self.parsed.bytes_of(body)


def proxy_checkpoints(max_chars: int = ProxyConfig().replay_checkpoint_chars
                      ) -> ReplayCheckpoints:
    """The replay checkpoints the proxy keeps: of the request objects themselves, not
    copies. Each request is parsed here from its bytes and never changed once replayed
    (``with_guidance``, ``with_note`` and the rest change copies of what they change), so
    a session's first request copies nothing into its checkpoint."""
    return ReplayCheckpoints(max_chars, copy_messages=False)


def read_request(raw: bytes, kind: Kind, config: Config,
                 checkpoints: ReplayCheckpoints | None = None) -> GuardedRequest:
    """Parse a guarded route's body and replay its history: the proxy's work on its event
    loop before a request goes upstream. ``ValueError`` says what is wrong with the body."""
    try:
        parsed = RequestBody(raw)
    except ValueError as exc:
        raise ValueError(f"invalid JSON body: {exc}") from None
    except RecursionError:
        raise ValueError("invalid JSON body: nested too deeply") from None
    body = parsed.value
    if not isinstance(body, dict):
        raise ValueError("the body must be a JSON object")
    view = replay(body, kind, config, checkpoints)
    forwarded = with_guidance(body, view)
    if kind == "anthropic":
        forwarded = without_unsigned_thinking(forwarded)
    if view.reaction is not None and view.reaction.kind == "steer":
        forwarded = with_note(forwarded, kind, view.reaction.notice)
    return GuardedRequest(parsed, view, forwarded)


READ_IN_THREAD_BYTES = 64 * 1024
"""A body longer than this is read (parsed and replayed) in a worker thread."""


async def read_request_off_loop(raw: bytes, kind: Kind, config: Config,
                                checkpoints: ReplayCheckpoints | None = None
                                ) -> GuardedRequest:
    """``read_request`` as the proxy runs it: a long body in a worker thread. A session's
    first 6.5 MB request costs 80-125 ms to parse and replay, all of it one stall of every
    stream on the event loop when read in place; in a thread the parse hands the loop its
    turn between messages and the replay between bytecodes (every switch interval: 1 ms in a
    proxy process, ``tune_process``), and the loop waits a few milliseconds at the longest
    (``bench --adversarial``'s event-loop wait). A body up to 64 kB
    is read in place: one of 100 calls read in 2.4 ms, a handover to a thread costs ~0.1 ms
    (a two-message body: 53 us in place, 139 through a thread)."""
    if len(raw) <= READ_IN_THREAD_BYTES:
        return read_request(raw, kind, config, checkpoints)
    # The replay shares only what is safe across threads (the checkpoints take a lock,
    # the kept readings are single dict operations).
    return await asyncio.to_thread(read_request, raw, kind, config, checkpoints)


def default_upstream() -> str | None:
    """``$LOOPBREAK_UPSTREAM`` when set."""
    return os.environ.get("LOOPBREAK_UPSTREAM") or None


WORKER_CONFIG_ENV = "LOOPBREAK_PROXY_CONFIG_FILE"
WORKER_LOG_LEVEL_ENV = "LOOPBREAK_PROXY_LOG_LEVEL"


def app_from_environment() -> ProxyApp:
    """The proxy as each worker process of ``loopbreak proxy --workers N`` builds it: the
    upstream from ``$LOOPBREAK_UPSTREAM``, the configuration file from
    ``$LOOPBREAK_PROXY_CONFIG_FILE`` (both set by the command). The proxy keeps no session
    state, so any worker can serve any request; each keeps its own ``/metrics``."""
    from loopbreak.proxy.logs import configure_logging
    from loopbreak.proxy.server import tune_process

    upstream = default_upstream()
    if not upstream:
        raise ConfigError("LOOPBREAK_UPSTREAM is not set")
    configure_logging(os.environ.get(WORKER_LOG_LEVEL_ENV, "warning"))
    app = ProxyApp(upstream, config_path=os.environ.get(WORKER_CONFIG_ENV) or None)
    tune_process()
    return app
