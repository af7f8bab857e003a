"""HTTP rules the proxy applies between client and upstream: which headers go on, and how a
compressed upstream body is read.

Headers: the hop-by-hop ones (RFC 9110 §7.6.1) and every header the ``Connection``
header names stay on their hop; ``Proxy-Authorization`` is meant for this proxy, not the
upstream; ``Server`` and ``Date`` are set by the server that answers the client, so the
upstream's copies would be doubles. ``Authorization`` and every other end-to-end header
pass untouched.

Bodies: the proxy asks for ``identity``, but some upstreams compress anyway. The guard
must read what it judges, so gzip and deflate bodies are decoded as they arrive (a
stream flushed per write decodes per write) and passed on decoded, without their
``Content-Encoding``. An encoding it cannot read is refused with a 502 rather than
relayed unjudged.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator

Headers = list[tuple[str, str]]

HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "te", "trailer",
                        "transfer-encoding", "upgrade"})
_NOT_FORWARDED = HOP_BY_HOP | {"host", "content-length", "proxy-authorization"}
_NOT_RETURNED = HOP_BY_HOP | {"server", "date", "proxy-authenticate"}

READABLE_ENCODINGS = ("gzip", "x-gzip", "deflate")
# Decoded output handed on at a time: a small compressed chunk cannot become a huge string.
_DECODE_STEP = 1 << 20


def _named_by_connection(headers: Iterable[tuple[str, str]]) -> set[str]:
    return {token.strip().lower() for name, value in headers if name.lower() == "connection"
            for token in value.split(",") if token.strip()}


def request_headers(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The client's headers fit to send upstream (repeated names joined with ``, ``)."""
    pairs = list(headers)
    dropped = _NOT_FORWARDED | _named_by_connection(pairs)
    out: dict[str, str] = {}
    for raw_name, value in pairs:
        name = raw_name.lower()
        if name not in dropped:
            out[name] = f"{out[name]}, {value}" if name in out else value
    return out


def response_headers(headers: Iterable[tuple[str, str]], *, keep_length: bool = False
                     ) -> Headers:
    """The upstream's headers fit to pass to the client. ``Content-Length`` goes only with
    a body passed byte for byte (``keep_length``); a judged body may be cut or grow."""
    pairs = list(headers)
    dropped = _NOT_RETURNED | _named_by_connection(pairs)
    if not keep_length:
        dropped = dropped | {"content-length"}
    return [(k, v) for k, v in pairs if k.lower() not in dropped]


def content_encoding(headers: Iterable[tuple[str, str]]) -> str:
    """The body's encoding, lower case; ``identity`` when none is named."""
    for name, value in headers:
        if name.lower() == "content-encoding" and value.strip():
            return value.strip().lower()
    return "identity"


class BodyError(Exception):
    """A compressed body that cannot be decoded: corrupt, or cut in the middle of a frame."""


class BodyDecoder:
    """Undoes a gzip or deflate ``Content-Encoding`` chunk by chunk."""

    def __init__(self, encoding: str) -> None:
        if encoding not in READABLE_ENCODINGS:
            raise ValueError(f"cannot decode content-encoding {encoding!r}")
        self.encoding = encoding
        # 31: a gzip member; 15: a zlib stream, what HTTP's deflate means (a raw deflate
        # stream, which some servers send instead, is tried when that fails at once).
        self._gzip = encoding != "deflate"
        self._inflate = zlib.decompressobj(wbits=31 if self._gzip else 15)
        self._started = False
        self._head = b""

    def decode(self, data: bytes) -> Iterator[bytes]:
        """The decoded bytes of the next piece of the body, in bounded parts."""
        try:
            try:
                out = self._inflate.decompress(data, _DECODE_STEP)
            except zlib.error:
                if self._gzip or self._started:
                    raise
                self._inflate = zlib.decompressobj(wbits=-15)
                out = self._inflate.decompress(self._head + data, _DECODE_STEP)
            if not self._started:
                # zlib checks its two-byte header once it has both: until then a raw
                # deflate stream may still be what came.
                self._head += data
                self._started = len(self._head) >= 2
            while True:
                if out:
                    yield out
                tail = self._inflate.unconsumed_tail
                if not tail:
                    return
                out = self._inflate.decompress(tail, _DECODE_STEP)
        except zlib.error as exc:
            raise BodyError(f"the upstream's {self.encoding} body is corrupt: {exc}") from None

    def finish(self) -> bytes:
        """What the decoder still holds once the body has ended; a body cut inside a frame
        is an error."""
        rest = self._inflate.flush()
        if not self._inflate.eof:
            raise BodyError(f"the upstream's {self.encoding} body ended in the middle of a "
                            "compressed frame")
        return rest
