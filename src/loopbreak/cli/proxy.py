"""``loopbreak proxy``: serve the guard in front of a model endpoint.

``loopbreak proxy --upstream https://api.deepseek.com`` listens on
``127.0.0.1:8787``; point a client's base URL at it (``DEEPSEEK_BASE_URL=
http://127.0.0.1:8787``, ``openai.OpenAI(base_url="http://127.0.0.1:8787/v1")``).
It binds 127.0.0.1 unless told otherwise, logs one JSON line per trip (no keys,
no prompts), and re-reads ``--config`` when the file changes.
"""

from __future__ import annotations

import argparse
import errno
import os
import socket
import sys

from loopbreak._errors import InputError
from loopbreak._extras import missing

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8787
DEFAULT_LOG_LEVEL = "warning"

EXAMPLES = """\
examples:
  loopbreak proxy --upstream https://api.deepseek.com
  LOOPBREAK_UPSTREAM=http://localhost:8000/v1 loopbreak proxy --port 0
  loopbreak proxy --upstream http://localhost:8000/v1 --config loopbreak.toml --workers 4
  loopbreak -v proxy --upstream https://api.deepseek.com      log at info (-vv: debug)
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--upstream", metavar="URL",
                        help="the model endpoint's base URL, e.g. https://api.deepseek.com or "
                             "http://localhost:8000/v1 (default: $LOOPBREAK_UPSTREAM)")
    parser.add_argument("--host", default=DEFAULT_HOST,
                        help=f"address to listen on (default {DEFAULT_HOST}: this machine only)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help=f"port to listen on (default {DEFAULT_PORT}; 0 = any free port)")
    parser.add_argument("--config", metavar="FILE",
                        help="TOML configuration, re-read when it changes")
    parser.add_argument("--workers", type=int, default=1, metavar="N",
                        help="worker processes sharing the port (default 1); the proxy keeps "
                             "no session state, so any worker serves any request (each has "
                             "its own /metrics)")
    parser.add_argument("--log-level", choices=["debug", "info", "warning", "error"],
                        help=f"trips are logged at warning (default {DEFAULT_LOG_LEVEL}; -v: "
                             "info, -vv: debug)")


def run(args: argparse.Namespace) -> int:
    from loopbreak.proxy.app import ProxyApp, default_upstream

    upstream = args.upstream or default_upstream()
    if not upstream:
        raise InputError("--upstream URL is required (or set LOOPBREAK_UPSTREAM)")
    if not 0 <= args.port <= 65535:
        raise InputError(f"--port must be in 0..65535, not {args.port}")
    try:
        import aiohttp  # noqa: F401
        import uvicorn
    except ImportError as exc:
        raise missing("loopbreak proxy", exc.name or "its extra", "proxy", exc) from None
    from loopbreak.proxy.server import tune_process

    if args.workers < 1:
        raise InputError(f"--workers must be >= 1, not {args.workers}")
    # Built here first in any case: a bad upstream or configuration is reported once, now.
    app = ProxyApp(upstream, config_path=args.config)
    from loopbreak.cli import _output
    from loopbreak.proxy.logs import configure_logging

    args.log_level = log_level(args.log_level, _output.level())
    configure_logging(args.log_level)
    # The port is taken before the banner: a port in use is one clear line, and port 0
    # prints the port the system chose.
    sock = listen(args.host, args.port)
    port = sock.getsockname()[1]
    workers = f", {args.workers} workers" if args.workers > 1 else ""
    if _output.show_summary():  # the banner says the port chosen: gone only with -qq
        print(f"loopbreak proxy: http://{_host_in_url(args.host)}:{port} -> "
              f"{app.upstream}{workers}", file=sys.stderr)
    if args.workers > 1:
        # Each worker is a fresh process that builds its own app from the environment; the
        # supervisor binds the port again (just released: it is free unless taken meanwhile).
        from loopbreak.proxy.app import WORKER_CONFIG_ENV, WORKER_LOG_LEVEL_ENV

        sock.close()
        os.environ["LOOPBREAK_UPSTREAM"] = app.upstream
        os.environ[WORKER_LOG_LEVEL_ENV] = args.log_level
        if args.config:
            os.environ[WORKER_CONFIG_ENV] = os.path.abspath(args.config)
        uvicorn.run("loopbreak.proxy.app:app_from_environment", factory=True,
                    workers=args.workers, host=args.host, port=port,
                    log_level=args.log_level, access_log=False, timeout_graceful_shutdown=5)
        return 0
    tune_process()
    server = uvicorn.Server(uvicorn.Config(app, log_level=args.log_level, access_log=False,
                                           timeout_graceful_shutdown=5))
    server.run(sockets=[sock])
    return 0


def log_level(given: str | None, level: int) -> str:
    """``--log-level`` when given, else from ``-v``/``-q``: warning (trips), info at
    ``-v``, debug at ``-vv``; ``-q`` keeps warning, since trips are the proxy's results."""
    if given:
        return given
    return "debug" if level >= 2 else "info" if level == 1 else DEFAULT_LOG_LEVEL


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` and listening; a clear error when it cannot be."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        reason = "the port is in use" if exc.errno == errno.EADDRINUSE else (
            exc.strerror or str(exc))
        raise InputError(f"cannot listen on {host}:{port}: {reason} (choose another --port, "
                         "or 0 for any free one)") from None
    sock.set_inheritable(True)
    return sock


def _host_in_url(host: str) -> str:
    return f"[{host}]" if ":" in host else host
