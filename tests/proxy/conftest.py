"""A real proxy in front of a real scripted upstream, both on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from loopbreak import Config, ProxyConfig
from loopbreak.proxy.server import ProxyServer
from loopbreak.testing import ScriptedUpstream


@pytest.fixture
def proxy_for(upstream: ScriptedUpstream) -> Iterator[Callable[..., ProxyServer]]:
    started: list[ProxyServer] = []

    def start(config: Config | None = None, *, base: str | None = None,
              config_path: str | None = None, proxy: ProxyConfig | None = None) -> ProxyServer:
        server = ProxyServer(base or upstream.url, config=config, proxy=proxy,
                             config_path=config_path)
        started.append(server.start())
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def proxy(proxy_for: Callable[..., ProxyServer]) -> ProxyServer:
    return proxy_for()
