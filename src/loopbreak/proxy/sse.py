"""Server-sent events, parsed incrementally from network reads.

Bytes arrive in arbitrary pieces: an event can span reads, a read can hold
several events, a UTF-8 character can be split between two reads. The parser
keeps the raw bytes of the event being read (so the proxy relays them
unchanged), decodes complete lines only, and hands out each event, comment
(keep-alive) or blank separator as soon as its terminating blank line arrives.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_EVENT_BYTES = 16 * 1024 * 1024
"""An event larger than this is not an event stream we can relay safely."""


class SSEError(ValueError):
    """The byte stream is not a valid event stream."""


@dataclass(slots=True)
class SSEEvent:
    """One event: its ``event`` name, joined ``data`` lines, and the exact bytes it came in.

    A block made only of comment lines (``: keep-alive``) has ``comment`` set and no
    data; the proxy relays it as it came.
    """

    raw: bytes
    event: str = ""
    data: str = ""
    has_data: bool = False
    comment: str | None = None
    fields: dict[str, str] = field(default_factory=dict)


class SSEParser:
    """Feed bytes, get complete events."""

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self._buffer = bytearray()
        self._max = max_event_bytes
        # No event separator starts before this index of the buffer: a large event that
        # arrives in many reads is searched once, not once per read.
        self._scan_from = 0

    @property
    def pending(self) -> int:
        """Bytes received that do not yet form a complete event."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[SSEEvent]:
        """Add ``data``; return every event it completed, in order."""
        if type(data) is not bytes:
            data = bytes(data)  # an event's raw bytes are relayed as they are: immutable
        if not self._buffer and b"\r" not in data:
            # The common case, a read of whole LF-framed events: split once. The commonest,
            # one event a read (a token a chunk), needs no split at all.
            end = data.find(b"\n\n")
            if end >= 0 and end == len(data) - 2:
                return [_parse_block(data, data[:end])]
            blocks = data.split(b"\n\n")
            rest = blocks.pop()
            if len(rest) > self._max:
                raise SSEError(f"an event grew past {self._max:,} bytes without ending")
            self._buffer += rest
            self._scan_from = max(0, len(rest) - _LONGEST_SEPARATOR + 1)
            return [_parse_block(block + b"\n\n", block) for block in blocks]
        self._buffer += data
        events: list[SSEEvent] = []
        while True:
            end, sep_len = _find_blank_line(self._buffer, self._scan_from)
            if end < 0:
                if len(self._buffer) > self._max:
                    raise SSEError(f"an event grew past {self._max:,} bytes without ending")
                # A separator may start in the last bytes and end in the next read.
                self._scan_from = max(0, len(self._buffer) - _LONGEST_SEPARATOR + 1)
                return events
            raw = bytes(self._buffer[: end + sep_len])
            del self._buffer[: end + sep_len]
            self._scan_from = 0
            events.append(_parse_block(raw, raw[:end]))

    def close(self) -> bytes:
        """The bytes left over when the stream ended (an unfinished event), cleared."""
        rest = bytes(self._buffer)
        self._buffer.clear()
        self._scan_from = 0
        return rest


_SEPARATORS = (b"\n\n", b"\r\n\r\n", b"\r\r")
_LONGEST_SEPARATOR = max(map(len, _SEPARATORS))


def _find_blank_line(buf: bytearray, start: int = 0) -> tuple[int, int]:
    """Index where the first event block ends (searching from ``start``) and the length
    of its separator."""
    best = -1
    best_len = 0
    for sep in _SEPARATORS:
        i = buf.find(sep, start)
        if i >= 0 and (best < 0 or i < best):
            best, best_len = i, len(sep)
    return best, best_len


def _parse_block(raw: bytes, block: bytes) -> SSEEvent:
    try:
        text = block.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SSEError(f"event is not UTF-8 (byte {exc.start})") from None
    # The shapes nearly every event has, read without splitting lines: OpenAI's one data
    # line, Anthropic's name and data line (positional arguments: a third cheaper).
    if text.startswith("data: ") and "\n" not in text:
        return SSEEvent(raw, "", text[6:], True)
    if text.startswith("event: "):
        end = text.find("\n")
        if text.startswith("data: ", end + 1) and text.find("\n", end + 1) < 0 \
                and "\r" not in text:
            return SSEEvent(raw, text[7:end], text[end + 7:], True)
    event = SSEEvent(raw=raw)
    comments = []
    data_lines = []
    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        if not line:
            continue
        if line.startswith(":"):
            comments.append(line[1:].lstrip())
            continue
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            data_lines.append(value)
        elif name == "event":
            event.event = value
        else:
            event.fields[name] = value
    if data_lines:
        event.has_data = True
        event.data = "\n".join(data_lines)
    elif comments:
        event.comment = "\n".join(comments)
    return event
