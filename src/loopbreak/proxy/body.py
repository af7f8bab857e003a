"""A guarded request's body: parsed once, and sent upstream as the client's own bytes.

The proxy changes a request only by copying what it changes (a note appended, a
guided tool result, a top-level field for a retry); everything else is the very
object parsed from the client's bytes. Serialising a 6.5 MB history again took
~35 ms of the event loop on every request (``json.dumps``), the parse ~10. So the
body is parsed with the place of each top-level value and of each message, and a
body made from it is written by copying the client's bytes of every value it
shares with it and serialising only what is new: the unchanged body is the
client's bytes, a body with a note 1.3-5 ms of copying (measured on that history).

A body that is not UTF-8 JSON (UTF-16, a byte-order mark) is parsed by ``json.loads``
and always serialised anew, as is every body whose shape the place-keeping parse does
not expect.
"""

from __future__ import annotations

import json
import json.scanner
import re
from dataclasses import dataclass
from typing import Any, cast

from loopbreak.proxy.formats import json_bytes

_WHITESPACE = re.compile(r"[ \t\n\r]*")
# json.loads' own scanner (its decoder's settings), without the checks around it; the
# stub types its argument as a scanner, what it reads is a decoder's settings.
_scan = json.scanner.make_scanner(cast(Any, json.JSONDecoder()))


def _skip(text: str, i: int) -> int:
    """Where the whitespace at ``i`` ends."""
    found = _WHITESPACE.match(text, i)
    return i if found is None else found.end()


class _Unexpected(Exception):
    """The text is not a JSON object the place-keeping parse reads (``json.loads`` decides
    what it is instead)."""


@dataclass(frozen=True)
class _Places:
    """Where the values of a parsed object lie in its text: ``(start, end)`` each."""

    text: str
    ascii: bool  # then a place in the text is the same place in the bytes
    fields: dict[str, tuple[int, int]]
    messages: list[tuple[int, int]] | None  # each element of the ``messages`` array


class RequestBody:
    """A JSON body parsed from ``raw`` (``value``: what ``json.loads(raw)`` gives; the same
    ``ValueError`` where it fails, and one for a surrogate written in bytes, which it lets
    pass), and the bytes to send for it or for a copy-on-write change of it."""

    __slots__ = ("_places", "raw", "value")

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self._places: _Places | None = None
        if json.detect_encoding(raw) != "utf-8":
            self.value: Any = json.loads(raw)
            return
        # Strict, where json.loads lets a surrogate encoded in three bytes pass: that is not
        # UTF-8, and the client's bytes go upstream as they came (an escaped one, \ud800,
        # is JSON and passes). A UnicodeDecodeError is a ValueError: a clear 400.
        text = raw.decode("utf-8")
        try:
            self.value, self._places = _parse(text)
        except (_Unexpected, StopIteration, IndexError, RecursionError):
            self.value = json.loads(text)  # the error it raises, or a body of another shape

    def bytes_of(self, body: Any) -> bytes:
        """What to send for ``body``: the client's bytes for ``value`` itself, and for a
        dict made from it (values shared with it are the very objects parsed; a changed
        one is a new object, never the old one changed in place) the client's bytes of
        every shared value around the serialised new ones."""
        places = self._places
        if body is self.value:
            return self.raw if places is not None else json_bytes(body)
        if places is None or type(body) is not dict:
            return json_bytes(body)
        old: dict[str, Any] = self.value
        out: list[bytes | memoryview] = []
        for key, item in body.items():
            out += (b"," if out else b"{", json_bytes(key), b":")
            place = places.fields.get(key)
            if place is not None and key in old and item is old[key]:
                out.append(self._slice(*place))
            elif key == "messages" and places.messages is not None and type(item) is list:
                self._messages(item, old[key], places.messages, out)
            else:
                out.append(json_bytes(item))
        out.append(b"}" if out else b"{}")
        return b"".join(out)

    def _messages(self, items: list[Any], olds: list[Any], places: list[tuple[int, int]],
                  out: list[bytes | memoryview]) -> None:
        """A messages array: each run of the parsed messages, in their order, as one copy of
        the client's bytes; every other element serialised."""
        index = {id(m): j for j, m in enumerate(olds)}
        out.append(b"[")
        run: tuple[int, int] | None = None  # the parsed elements j..k-1 waiting to be copied
        first = True
        for item in items:
            j = index.get(id(item), -1)
            if j >= 0 and olds[j] is item:
                if run is not None and run[1] == j:
                    run = (run[0], j + 1)
                    continue
                if run is not None:
                    out += (b"" if first else b",", self._run(places, *run))
                    first = False
                run = (j, j + 1)
                continue
            if run is not None:
                out += (b"" if first else b",", self._run(places, *run))
                first, run = False, None
            out += (b"" if first else b",", json_bytes(item))
            first = False
        if run is not None:
            out += (b"" if first else b",", self._run(places, *run))
        out.append(b"]")

    def _run(self, places: list[tuple[int, int]], start: int, end: int) -> bytes | memoryview:
        # Elements start..end-1 in a row: from the first's start to the last's end, the
        # separators between them as the client wrote them.
        return self._slice(places[start][0], places[end - 1][1])

    def _slice(self, start: int, end: int) -> bytes | memoryview:
        places = self._places
        assert places is not None
        if places.ascii:
            return memoryview(self.raw)[start:end]  # joined without a copy of its own
        return places.text[start:end].encode()


def _parse(text: str) -> tuple[dict[str, Any], _Places]:
    """The object ``text`` holds, and where each of its values lies."""
    skip = _skip
    i = skip(text, 0)
    if text[i] != "{":
        raise _Unexpected
    i = skip(text, i + 1)
    value: dict[str, Any] = {}
    fields: dict[str, tuple[int, int]] = {}
    messages: list[tuple[int, int]] | None = None
    if text[i] == "}":
        i += 1
    else:
        while True:
            if text[i] != '"':
                raise _Unexpected
            key, i = _scan(text, i)
            i = skip(text, i)
            if text[i] != ":":
                raise _Unexpected
            start = i = skip(text, i + 1)
            if key == "messages" and text[i] == "[":
                items: list[Any] = []
                messages = []
                i = skip(text, i + 1)
                if text[i] != "]":
                    while True:
                        item, end = _scan(text, i)
                        items.append(item)
                        messages.append((i, end))
                        i = skip(text, end)
                        if text[i] == ",":
                            i = skip(text, i + 1)
                        elif text[i] == "]":
                            break
                        else:
                            raise _Unexpected
                i += 1
                value[key] = items
            else:
                value[key], i = _scan(text, i)
                if key == "messages":
                    messages = None  # a later "messages" that is not an array wins
            fields[key] = (start, i)
            i = skip(text, i)
            if text[i] == ",":
                i = skip(text, i + 1)
            elif text[i] == "}":
                i += 1
                break
            else:
                raise _Unexpected
    if skip(text, i) != len(text):
        raise _Unexpected  # extra data: json.loads says so
    return value, _Places(text, text.isascii(), fields, messages)
