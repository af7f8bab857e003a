"""Running the proxy in a background thread: for tests, demos and benchmarks.

A real uvicorn server on 127.0.0.1 and an ephemeral port, started and stopped
from synchronous code; ``url`` is what a client uses as its base URL.
"""

from __future__ import annotations

import gc
import sys
import threading
from types import TracebackType
from typing import Any

from loopbreak._config import Config, ProxyConfig
from loopbreak.proxy.app import ProxyApp


class ProxyServer:
    """``with ProxyServer(upstream_url) as proxy: openai.OpenAI(base_url=proxy.url + "/v1")``"""

    def __init__(self, upstream: str, *, config: Config | None = None,
                 proxy: ProxyConfig | None = None,
                 config_path: str | None = None, host: str = "127.0.0.1", port: int = 0,
                 loop: str = "auto") -> None:
        self.app = ProxyApp(upstream, config=config, proxy=proxy, config_path=config_path)
        self.host = host
        self._port = port
        self._loop_kind = loop
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    @property
    def port(self) -> int:
        sockets = self._server.servers[0].sockets if self._server and self._server.servers else []
        return int(sockets[0].getsockname()[1]) if sockets else self._port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> ProxyServer:
        import uvicorn

        config = uvicorn.Config(self.app, host=self.host, port=self._port, log_level="warning",
                                access_log=False, loop=self._loop_kind, lifespan="on",
                                timeout_graceful_shutdown=2)
        self._server = uvicorn.Server(config)
        self._server.install_signal_handlers = lambda: None

        def serve() -> None:
            try:
                # uvicorn's own run picks the event loop (uvloop when installed) as the
                # command does; signals stay with the main thread.
                self._server.run()
            except BaseException as exc:  # reported to the starting thread
                self._error = exc
            finally:
                self._ready.set()

        self._thread = threading.Thread(target=serve, name="loopbreak-proxy", daemon=True)
        self._thread.start()
        while not self._ready.is_set():
            if self._server.started:
                break
            self._ready.wait(0.01)
        if self._error is not None:
            raise RuntimeError(f"the proxy did not start: {self._error}") from self._error
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> ProxyServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


_tuned = False

SWITCH_INTERVAL_S = 0.001
"""How long a thread of a proxy process runs before it hands the GIL to one that waits."""


def tune_process() -> None:
    """Keep the collector and the worker threads from pausing a busy proxy's event loop.

    A thousand open streams keep ~200 tracked objects each, none of them garbage;
    every full collection walked them all (54-138 ms pauses measured at 1,000
    streams, the whole of the p99). Freezing what start-up created and raising the
    first threshold brought the added p99 per chunk from 36 ms to 2-4 ms
    (``loopbreak bench --proxy``). A long request is read in a worker thread, which
    hands the loop the GIL every switch interval: 5 ms by default, the longest the loop
    then waited while a session's first 6.5 MB request was read (6.3-14.8 ms in
    ``bench --adversarial``'s event-loop wait); 1 ms brings that to 2.3-8.5. Only for a
    process that is a proxy server.
    """
    global _tuned
    _tuned = True
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    sys.setswitchinterval(SWITCH_INTERVAL_S)


def freeze_late_startup() -> None:
    """Freeze what start-up made after :func:`tune_process` (in a tuned process only).

    The compiled kernels load in the app's lifespan, after the process was tuned:
    numba, llvmlite and numpy leave ~90,000 tracked objects, and a full collection
    that walks them takes ~100 ms on a 2-core machine, a pause for every stream.
    """
    if _tuned:
        gc.collect()
        gc.freeze()
