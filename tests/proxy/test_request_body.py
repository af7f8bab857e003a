"""A guarded request's body: parsed as ``json.loads`` parses it, sent as the client's bytes.

Every body made from a parsed one (values shared, changes copied) must be sent as bytes
that parse to that body; the unchanged body is the client's bytes; bad bodies fail with
``json.loads``' own message.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopbreak._config import Config
from loopbreak._recovery.history import with_guidance, with_note, without_unsigned_thinking
from loopbreak.proxy.app import read_request
from loopbreak.proxy.body import RequestBody

_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12) | st.sampled_from(
    ["caf\u00e9", "你好", "\U0001f600", "a\"b\\c", "\ud800", "line\nbreak"])
_scalar = st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(
    allow_nan=False, allow_infinity=False) | _text
_value = st.recursive(_scalar, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    _text, inner, max_size=3), max_leaves=8)
_message = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "tool"]),
                                  "content": _value})
_body = st.fixed_dictionaries({"messages": st.lists(_message, max_size=6)},
                              optional={"model": _text, "stream": st.booleans(),
                                        "thinking": _value, "": _value})


def _dumped(body: dict[str, Any], style: int) -> bytes:
    """``body`` as a client might write it: compact, spaced, indented, ASCII-escaped."""
    kwargs: list[dict[str, Any]] = [
        {"separators": (",", ":"), "ensure_ascii": False}, {"ensure_ascii": True},
        {"indent": 2, "ensure_ascii": False}, {"indent": "\t", "separators": (" ,", " : ")}]
    text = json.dumps(body, **kwargs[style])
    if not text.isascii() and any("\ud800" <= c <= "\udfff" for c in text):
        text = json.dumps(body)  # what a client's encoder does when UTF-8 cannot hold it
    return (" \n" * (style % 2) + text + "\r\n" * (style // 2)).encode()


@settings(max_examples=300, deadline=None)
@given(_body, st.integers(0, 3), st.data())
def test_every_body_made_from_a_parsed_one_is_sent_as_itself(
        body: dict[str, Any], style: int, data: st.DataObject) -> None:
    raw = _dumped(body, style)
    parsed = RequestBody(raw)
    assert parsed.value == json.loads(raw)
    assert parsed.bytes_of(parsed.value) == raw
    changed = dict(parsed.value)
    messages = changed["messages"] = list(changed["messages"])
    for _ in range(data.draw(st.integers(0, 4))):
        action = data.draw(st.sampled_from(["replace", "append", "drop", "move", "field",
                                            "unset"]))
        if action == "replace" and messages:
            j = data.draw(st.integers(0, len(messages) - 1))
            messages[j] = {**messages[j], "content": data.draw(_value)}
        elif action == "append":
            messages.append(data.draw(_message))
        elif action == "drop" and messages:
            del messages[data.draw(st.integers(0, len(messages) - 1))]
        elif action == "move" and len(messages) > 1:
            messages.insert(0, messages.pop())
        elif action == "field":
            changed[data.draw(_text)] = data.draw(_value)
        elif action == "unset" and len(changed) > 1:
            del changed[data.draw(st.sampled_from(sorted(changed)))]
    sent = parsed.bytes_of(changed)
    assert json.loads(sent.decode("utf-8")) == changed  # strict UTF-8: sent as upstreams read it


def test_shared_messages_keep_the_clients_bytes() -> None:
    raw = (b'{"model": "m",  "messages": [ {"role":"user", "content":"caf\\u00e9"} ,'
           b'{"role": "user", "content": "x"}\n]}')
    parsed = RequestBody(raw)
    noted = with_note(parsed.value, "openai", "note \ud800")
    assert parsed.bytes_of(noted) == (
        b'{"model":"m","messages":[{"role":"user", "content":"caf\\u00e9"} ,'
        b'{"role": "user", "content": "x"},{"role": "user", "content": "note \\ud800"}]}')


@pytest.mark.parametrize("raw", [
    b"", b"   ", b"{", b'{"a": 1', b'{"a": 1}}', b'{"a": 1} x', b'{"a" 1}', b'{a: 1}',
    b'{"messages": [1, ]}', b'{"messages": [1 2]}', b'{"messages": [}', b'{"a": "\\x"}',
    b'{"a": tru}', b"\xff\xfe\xfd", b'{"a": "\xc3"}', b"[1, 2]", b"7", b'"text"',
])
def test_a_bad_body_fails_as_json_loads_says(raw: bytes) -> None:
    try:
        expected: Any = json.loads(raw)
    except ValueError as exc:
        with pytest.raises(ValueError) as caught:
            RequestBody(raw)
        assert str(caught.value) == str(exc)
        with pytest.raises(ValueError, match=r"^invalid JSON body: "):
            read_request(raw, "openai", Config())
    else:
        assert RequestBody(raw).value == expected
        with pytest.raises(ValueError, match=r"^the body must be a JSON object$"):
            read_request(raw, "openai", Config())


def test_too_deep_a_body_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"^invalid JSON body: nested too deeply$"):
        read_request(b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "openai",
                     Config())


def test_a_surrogate_written_in_bytes_is_not_utf8() -> None:
    """json.loads lets it pass; the proxy would send the client's bytes on: a clear 400."""
    raw = '{"messages": [], "model": "\ud800"}'.encode("utf-8", "surrogatepass")
    with pytest.raises(ValueError, match=r"^invalid JSON body: 'utf-8' codec can't decode"):
        read_request(raw, "openai", Config())


@pytest.mark.parametrize("encoding", ["utf-16", "utf-32", "utf-8-sig"])
def test_other_encodings_are_read_and_sent_as_utf8(encoding: str) -> None:
    body = {"messages": [{"role": "user", "content": "caf\u00e9"}], "model": "m"}
    raw = json.dumps(body).encode(encoding)
    parsed = RequestBody(raw)
    assert parsed.value == body
    assert json.loads(parsed.bytes_of(parsed.value).decode("utf-8")) == body


def test_a_guided_anthropic_request_keeps_the_rest_as_sent() -> None:
    failing = [{"type": "tool_result", "tool_use_id": "t", "is_error": True,
                "content": "Error: ENOENT"}]
    call = {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "hm"},  # unsigned: dropped before it goes upstream
        {"type": "tool_use", "id": "t", "name": "read", "input": {"path": "a"}}]}
    body = {"model": "m", "messages": [{"role": "user", "content": "read a"}]
            + [call, {"role": "user", "content": failing}] * 3}
    raw = json.dumps(body, indent=1).encode()
    request = read_request(raw, "anthropic", Config())
    assert request.forwarded is not request.body
    assert request.forwarded == without_unsigned_thinking(with_guidance(
        json.loads(raw), request.view))
    sent = request.bytes_of(request.forwarded)
    assert json.loads(sent) == request.forwarded
    first = raw.index(b'{\n   "role": "user"')  # the first message, as the client wrote it
    assert raw[first: raw.index(b"}", first) + 1] in sent
