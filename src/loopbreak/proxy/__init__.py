"""The HTTP proxy face: guard any OpenAI- or Anthropic-style streaming endpoint.

Needs the ``proxy`` extra (``pip install '.[proxy]'`` from a checkout): aiohttp talks to
the upstream and uvicorn serves the ASGI app.
"""

from loopbreak.proxy.app import ProxyApp, upstream_url

__all__ = ["ProxyApp", "upstream_url"]
