"""The proxy as a pure ASGI application.

``POST /v1/chat/completions`` and ``/chat/completions`` (OpenAI) and
``POST /v1/messages`` (Anthropic) are guarded; ``GET /healthz`` and
``GET /metrics`` are the proxy's own; every other path and method is passed to
the upstream untouched, bodies streamed both ways. Auth and other headers pass
through as they came. No session state is kept: any replica serves any request.

The upstream client is aiohttp (``pip install 'loopbreak[proxy]'``): it holds a
thousand concurrent streams on two cores where pure-Python pools spend their
time bookkeeping.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from loopbreak._config import Config, load_config
from loopbreak._engine.call_guard import ChannelGuard
from loopbreak._engine.notices import render
from loopbreak._engine.trip import Trip
from loopbreak._errors import ConfigError
from loopbreak._history import (
    Kind,
    replay,
    session_key,
    thinking_off,
    with_guidance,
    with_note,
    without_unsigned_thinking,
)
from loopbreak.proxy.dialect import AnthropicStream, OpenAIStream, error_body
from loopbreak.proxy.metrics import Metrics
from loopbreak.proxy.relay import (
    GuardedCall,
    Headers,
    UpstreamError,
    UpstreamResponse,
    response_headers,
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

log = logging.getLogger("loopbreak.proxy")

GUARDED: dict[str, Kind] = {
    "/v1/chat/completions": "openai",
    "/chat/completions": "openai",
    "/v1/messages": "anthropic",
}
_SKIP_REQUEST_HEADERS = {"host", "content-length", "connection", "keep-alive", "transfer-encoding",
                         "proxy-connection", "te", "upgrade"}


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
    """The configuration, re-read when its file changes (checked at most every few seconds).
    A file that turns invalid is reported once and the last good configuration stays."""

    def __init__(self, path: str | None, config: Config | None = None) -> None:
        self.path = Path(path) if path else None
        self.config = config or load_config(path).config
        self._mtime = self._stat()
        self._checked = time.monotonic()

    def _stat(self) -> float | None:
        try:
            return self.path.stat().st_mtime if self.path else None
        except OSError:
            return None

    def get(self) -> Config:
        if self.path is None:
            return self.config
        now = time.monotonic()
        if now - self._checked < self.config.proxy.reload_seconds:
            return self.config
        self._checked = now
        mtime = self._stat()
        if mtime is not None and mtime != self._mtime:
            self._mtime = mtime
            try:
                self.config = load_config(self.path).config
                log.info(json.dumps({"event": "config-reloaded", "path": str(self.path)}))
            except ConfigError as exc:
                log.error(json.dumps({"event": "config-rejected", "error": str(exc)}))
        return self.config


class _AiohttpResponse:
    """An aiohttp response seen through the relay's small interface."""

    def __init__(self, response: Any) -> None:
        self._response = response
        self.status: int = response.status
        self.headers: Headers = [(k, v) for k, v in response.headers.items()]
        self._done = False

    async def chunks(self) -> AsyncIterator[bytes]:
        import aiohttp

        try:
            async for data in self._response.content.iter_any():
                yield data
        except aiohttp.ClientError as exc:
            # The relay knows connection errors, not aiohttp's: translate at the boundary.
            raise ConnectionError(f"{type(exc).__name__}: {exc}") from exc
        self._done = True

    async def read(self) -> bytes:
        data: bytes = await self._response.read()
        self._done = True
        return data

    def close(self) -> None:
        # A response read to its end goes back to the pool; any other is closed, which is
        # what stops the upstream generating (and billing).
        if self._done:
            self._response.release()
        else:
            self._response.close()


class _Client:
    """The ASGI response, written as the relay goes."""

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
                 config: Config | None = None) -> None:
        if urlsplit(upstream).scheme not in ("http", "https") or not urlsplit(upstream).netloc:
            raise ConfigError(f"--upstream must be an http(s) URL, not {upstream!r}")
        self.upstream = upstream.rstrip("/")
        self.source = ConfigSource(config_path, config)
        self.metrics = Metrics()
        self._session: Any = None

    # --- ASGI --------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
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
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def aclose(self) -> None:
        """Close the upstream connection pool."""
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
        headers: dict[str, str] = {}
        for raw_name, raw_value in scope["headers"]:
            name = raw_name.decode("latin-1").lower()
            if name not in _SKIP_REQUEST_HEADERS:
                value = raw_value.decode("latin-1")
                headers[name] = f"{headers[name]}, {value}" if name in headers else value
        return headers

    async def _guarded(self, scope: Scope, receive: Receive, send: Send, kind: Kind) -> None:
        config = self.source.get()
        raw = await self._read_body(receive, config.proxy.max_body_bytes)
        if raw is None:
            await self._respond(send, 413, error_body(
                kind, 413, f"request body larger than {config.proxy.max_body_bytes:,} bytes"),
                "application/json")
            return
        try:
            body = json.loads(raw)
        except ValueError as exc:
            await self._respond(send, 400, error_body(kind, 400, f"invalid JSON body: {exc}"),
                                "application/json")
            return
        if not isinstance(body, dict):
            await self._respond(send, 400, error_body(kind, 400, "the body must be a JSON object"),
                                "application/json")
            return
        headers = self._forward_headers(scope)
        view = replay(body, kind, config)
        forwarded = with_guidance(body, view)
        if kind == "anthropic":
            forwarded = without_unsigned_thinking(forwarded)
        reaction = view.reaction
        if reaction is not None:
            self.metrics.add("loopbreak_stall_reactions_total", kind=reaction.kind)
            self._log("stall", kind=reaction.kind, fires=reaction.fires,
                      session=self._hash(session_key(headers, body)))
            if reaction.kind == "steer":
                forwarded = with_note(forwarded, kind, reaction.notice)
            elif reaction.kind == "cancel":
                await self._cancelled(send, kind, body, reaction.notice)
                return
        url = upstream_url(self.upstream, scope["path"], scope.get("query_string", b"").decode())
        opener = self._opener(url, headers, config)
        if body.get("stream"):
            await self._stream(send, receive, kind, forwarded, view, config, opener,
                               model=str(body.get("model") or ""),
                               session=self._hash(session_key(headers, body)))
        else:
            await self._whole(send, kind, forwarded, view, config, opener,
                              session=self._hash(session_key(headers, body)))

    def _opener(self, url: str, headers: dict[str, str], config: Config
                ) -> Callable[[dict[str, Any]], Awaitable[UpstreamResponse]]:
        async def open_upstream(body: dict[str, Any]) -> UpstreamResponse:
            import aiohttp

            session = await self._client_session()
            data = json.dumps(body, ensure_ascii=False).encode()
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=config.proxy.connect_timeout,
                                            sock_read=config.proxy.idle_timeout)
            try:
                # The guard reads what it relays: ask for it uncompressed.
                response = await session.post(url, data=data, headers={
                    **headers, "content-type": "application/json",
                    "accept-encoding": "identity"}, timeout=timeout)
            except asyncio.TimeoutError:
                self.metrics.add("loopbreak_upstream_errors_total", kind="timeout")
                raise UpstreamError(504, f"the upstream did not answer within "
                                         f"{config.proxy.idle_timeout:g} s") from None
            except aiohttp.ClientError as exc:
                self.metrics.add("loopbreak_upstream_errors_total", kind="unreachable")
                raise UpstreamError(502, f"the upstream could not be reached: {exc}") from None
            if response.status >= 400:
                self.metrics.add("loopbreak_upstream_errors_total", kind=str(response.status))
            return _AiohttpResponse(response)

        return open_upstream

    async def _stream(self, send: Send, receive: Receive, kind: Kind, body: dict[str, Any],
                      view: Any, config: Config, opener: Any, *, model: str, session: str) -> None:
        client = _Client(send)

        def on_trip(trip: Trip, recovery: str) -> None:
            self.metrics.add("loopbreak_trips_total", rule=trip.rule, channel=trip.channel)
            self.metrics.add("loopbreak_cut_chars_total", trip.offset)
            if recovery == "retry":
                self.metrics.add("loopbreak_retries_total", reason="thinking-off")
            self._log("trip", rule=trip.rule, channel=trip.channel, offset=trip.offset,
                      model=model, session=session, recovery=recovery)

        call = GuardedCall(kind, body, view, config, opener, client,
                           dialect=config.proxy.dialect, effort=config.proxy.retry_effort,
                           on_trip=on_trip)
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
                self._log("tool-denied", calls=outcome.denials, model=model, session=session)
            if client.started:
                await client.end()
        finally:
            watcher.cancel()
            self.metrics.add("loopbreak_streams_active", -1)

    async def _whole(self, send: Send, kind: Kind, body: dict[str, Any], view: Any,
                     config: Config, opener: Any, *, session: str) -> None:
        """A non-streaming request: nothing can be saved any more, but a reasoning-only answer
        that looped is asked again without thinking, once per turn."""
        try:
            response = await opener(body)
        except UpstreamError as exc:
            await self._respond(send, exc.status, error_body(kind, exc.status, str(exc)),
                                "application/json")
            return
        data = await response.read()
        response.close()
        headers = response_headers(response.headers)
        trip = _judge_whole(data, kind, config) if response.status == 200 else None
        if trip is not None:
            self.metrics.add("loopbreak_trips_total", rule=trip[0].rule, channel=trip[0].channel)
            headers.append(("x-loopbreak-trip", trip[0].rule))
            self._log("trip", rule=trip[0].rule, channel=trip[0].channel,
                      offset=trip[0].offset, model=str(body.get("model") or ""),
                      session=session, recovery="none" if trip[1] else "retry")
            if not trip[1] and config.recovery.on_trip == "retry" \
                    and view.cuts_this_turn < config.recovery.retries_per_turn:
                notice = render("cut.reasoning", view.session.language,
                                chars=f"{trip[0].offset:,}", rule=trip[0].rule)
                retry = with_note(thinking_off(body, kind, config.proxy.dialect,
                                               config.proxy.retry_effort), kind, notice)
                self.metrics.add("loopbreak_retries_total", reason="thinking-off")
                try:
                    second = await opener(retry)
                    data = _with_notice(await second.read(), kind, notice) \
                        if second.status == 200 else data
                    second.close()
                except UpstreamError:
                    pass
        await send({"type": "http.response.start", "status": response.status,
                    "headers": [(k.lower().encode("latin-1"), v.encode("latin-1"))
                                for k, v in headers if k.lower() != "content-length"]
                    + [(b"content-length", str(len(data)).encode())]})
        await send({"type": "http.response.body", "body": data})

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

        config = self.source.get()
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=config.proxy.connect_timeout,
                                        sock_read=config.proxy.idle_timeout)
        try:
            async with session.request(scope["method"], url, headers=self._forward_headers(scope),
                                       data=request_body(), timeout=timeout) as response:
                await send({"type": "http.response.start", "status": response.status,
                            "headers": [(k.lower().encode("latin-1"), v.encode("latin-1"))
                                        for k, v in response.headers.items()
                                        if k.lower() not in ("transfer-encoding", "connection",
                                                             "keep-alive")]})
                async for data in response.content.iter_any():
                    await send({"type": "http.response.body", "body": data, "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.TimeoutError:
            await self._respond(send, 504, error_body("openai", 504, "the upstream timed out"),
                                "application/json")
        except aiohttp.ClientError as exc:
            await self._respond(send, 502, error_body("openai", 502,
                                                      f"the upstream could not be reached: {exc}"),
                                "application/json")

    # --- logs --------------------------------------------------------------------------

    @staticmethod
    def _hash(value: str) -> str:
        return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:12] \
            if value else ""

    @staticmethod
    def _log(event: str, **fields: Any) -> None:
        log.warning(json.dumps({"event": event, **fields}, ensure_ascii=False))


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
    for channel, value in (("reasoning", reasoning), ("text", text)):
        # A whole answer is one delta: every rule but the per-delta one decides the same
        # however the text is split.
        guard = ChannelGuard(channel, config)  # type: ignore[arg-type]
        trip = guard.feed(value) or guard.flush()
        if trip is not None:
            return trip, productive
    return None


def _with_notice(data: bytes, kind: Kind, notice: str) -> bytes:
    """A complete response with the cut notice shown before its answer."""
    try:
        obj = json.loads(data)
    except ValueError:
        return data
    if kind == "openai" and isinstance(obj, dict) and obj.get("choices"):
        message = obj["choices"][0].get("message") or {}
        message["content"] = f"{notice}\n\n{message.get('content') or ''}"
    elif kind == "anthropic" and isinstance(obj, dict):
        obj["content"] = [{"type": "text", "text": notice}, *(obj.get("content") or [])]
    return json.dumps(obj, ensure_ascii=False).encode()


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
    import logging

    from loopbreak.proxy.server import tune_gc

    upstream = default_upstream()
    if not upstream:
        raise ConfigError("LOOPBREAK_UPSTREAM is not set")
    level = os.environ.get(WORKER_LOG_LEVEL_ENV, "warning").upper()
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(message)s")
    app = ProxyApp(upstream, config_path=os.environ.get(WORKER_CONFIG_ENV) or None)
    tune_gc()
    return app
