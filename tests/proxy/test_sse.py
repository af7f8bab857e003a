"""The incremental SSE parser: any split of the bytes gives the same events."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopbreak.proxy.sse import SSEError, SSEParser


def _events(data: bytes, cuts: list[int]) -> list[tuple[bytes, str, str, str | None]]:
    parser = SSEParser()
    out = []
    bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(data))), len(data)]
    for a, b in itertools.pairwise(bounds):
        for e in parser.feed(data[a:b]):
            out.append((e.raw, e.event, e.data, e.comment))
    return out


def test_openai_stream_with_keepalives_and_done() -> None:
    chunk = {"choices": [{"delta": {"content": "héllo 😀"}}]}
    data = (b": keep-alive\n\n" + f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n".encode()
            + b"data: [DONE]\n\n")
    events = _events(data, [])
    assert [e[3] for e in events] == ["keep-alive", None, None]
    assert json.loads(events[1][2]) == chunk and events[2][2] == "[DONE]"
    assert b"".join(e[0] for e in events) == data


def test_anthropic_events_with_crlf_and_multiline_data() -> None:
    data = (b"event: message_start\r\ndata: {\"type\":\r\ndata: \"message_start\"}\r\n\r\n"
            b"event: ping\ndata: {\"type\": \"ping\"}\n\n")
    events = _events(data, [5, 40])
    assert [e[1] for e in events] == ["message_start", "ping"]
    assert json.loads(events[0][2].replace("\n", " ")) == {"type": "message_start"}


def test_invalid_utf8_is_an_error() -> None:
    with pytest.raises(SSEError, match="not UTF-8"):
        SSEParser().feed(b"data: \xff\xfe\n\n")


def test_an_endless_event_is_bounded() -> None:
    parser = SSEParser(max_event_bytes=1024)
    with pytest.raises(SSEError, match="grew past"):
        parser.feed(b"data: " + b"x" * 2000)


def test_leftover_is_returned_on_close() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: 1\n\ndata: 2") != []
    assert parser.pending == 7 and parser.close() == b"data: 2" and parser.pending == 0


@pytest.mark.parametrize("kind", [bytearray, memoryview])
@pytest.mark.parametrize("data", [b"data: 1\n\n", b"data: 1\n\ndata: 2\n\n: ka\n\n",
                                  b"data: 1\r\n\r\n"])
def test_an_event_s_raw_bytes_are_bytes_whatever_the_read_was(kind: type, data: bytes) -> None:
    # The relay passes ``raw`` on as it is: a mutable read must not leak into what it sends.
    read = kind(bytearray(data))
    events = SSEParser().feed(read)
    assert events and all(type(e.raw) is bytes for e in events)
    assert b"".join(e.raw for e in events) == data
    if isinstance(read, memoryview):
        read.release()
    else:
        read[:] = b"x" * len(read)
    assert b"".join(e.raw for e in events) == data


text = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"),
               max_size=40)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["", "message_start", "content_block_delta"]),
                          st.lists(text, min_size=0, max_size=3), st.booleans()),
                max_size=12),
       st.lists(st.integers(0, 4000), max_size=40), st.sampled_from([b"\n", b"\r\n"]))
def test_any_split_gives_the_same_events(spec: list[tuple[str, list[str], bool]],
                                         cuts: list[int], newline: bytes) -> None:
    blocks = []
    for name, lines, comment in spec:
        parts = []
        if comment:
            parts.append(b": keep-alive")
        if name:
            parts.append(b"event: " + name.encode())
        parts += [b"data: " + line.encode() for line in lines]
        if not parts:
            parts.append(b": empty")
        blocks.append(newline.join(parts) + newline + newline)
    data = b"".join(blocks)
    whole = _events(data, [])
    assert _events(data, cuts) == whole
    assert len(whole) == len(blocks) and b"".join(e[0] for e in whole) == data


def _read_line_by_line(lines: list[str]) -> tuple[str, str, bool, str | None, dict[str, str]]:
    """An event block's fields as the event-stream format defines them, line by line."""
    name, data, comments, fields = "", [], [], {}
    for line in lines:
        if not line:
            continue
        if line.startswith(":"):
            comments.append(line[1:].lstrip())
            continue
        key, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if key == "data":
            data.append(value)
        elif key == "event":
            name = value
        else:
            fields[key] = value
    comment = "\n".join(comments) if comments and not data else None
    return name, "\n".join(data), bool(data), comment, fields


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.just(["event: ", "data: "]), st.just(["data: "]),
                 st.lists(st.sampled_from(["event: ", "event:", "data: ", "data:", ": ", "id: ",
                                           "x"]), min_size=1, max_size=3)),
       st.lists(st.text(st.characters(blacklist_categories=("Cs",),
                                      blacklist_characters="\r\n"), max_size=12),
                min_size=3, max_size=3),
       st.sampled_from(["\n", "\r\n"]))
def test_every_block_reads_as_the_format_defines_it(heads: list[str], values: list[str],
                                                   newline: str) -> None:
    # The parser reads the common shapes (one data line; a name and a data line) by
    # shortcuts, CRLF blocks and the rest line by line: each must give the format's event.
    lines = [head + value for head, value in zip(heads, values, strict=False)]
    block = newline.join(lines).encode() + (newline * 2).encode()
    (read,) = SSEParser().feed(block)
    assert (read.event, read.data, read.has_data, read.comment, read.fields) \
        == _read_line_by_line(lines)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2000), st.lists(st.integers(0, 2000), max_size=20))
def test_random_bytes_never_raise_anything_but_sse_error(data: bytes, cuts: list[int]) -> None:
    parser = SSEParser(max_event_bytes=4096)
    bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(data))), len(data)]
    try:
        for a, b in itertools.pairwise(bounds):
            parser.feed(data[a:b])
    except SSEError:
        pass


def test_an_event_holding_a_lone_surrogate_is_written_as_escapes() -> None:
    """An upstream may escape a lone surrogate (``\\ud800`` parses); the event the proxy
    writes back must still be UTF-8 and parse to the same value."""
    from loopbreak.proxy.formats import json_bytes, sse_data

    value = {"delta": "caf\u00e9 \ud800 ok"}
    (event,) = SSEParser().feed(sse_data(value, "content_block_delta"))
    assert event.event == "content_block_delta" and json.loads(event.data) == value
    assert json.loads(json_bytes(value)) == value
    assert json_bytes({"delta": "caf\u00e9"}) == '{"delta": "café"}'.encode()
