"""The dsh reader on damaged input: it never raises on a file's contents and always
ends with a ReadReport that counts what it could not use."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopbreak.offline.transcripts._model import Event, ReadReport, RecordedCall, SessionStart
from loopbreak.offline.transcripts.dsh import read_dsh
from transcripts import dsh_fixtures as fx

FUZZ = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


def read_all(path: Path) -> tuple[list[Event], ReadReport]:
    """Read ``path`` to the end; the shape every read must have, whatever the bytes."""
    events = list(read_dsh(path))
    assert isinstance(events[0], SessionStart)
    assert isinstance(events[-1], ReadReport)
    assert all(not isinstance(e, (SessionStart, ReadReport)) for e in events[1:-1])
    report = events[-1]
    assert report.bad_rows <= report.rows
    assert (report.first_error is None) == (report.bad_rows == 0)
    assert report.first_error is None or "\n" not in report.first_error
    return events, report


def write(tmp: Path, name: str, data: bytes) -> Path:
    path = tmp / name
    path.write_bytes(data)
    return path


@functools.cache
def synthetic_lines() -> tuple[bytes, ...]:
    return tuple(fx.dumps(*fx.synthetic_log()).splitlines(keepends=True))


@functools.cache
def real_bytes(name: str) -> bytes | None:
    found = [p for p in fx.real_logs() if p.name.split(".")[0] == name]
    return found[0].read_bytes() if found else None


def real_or_skip(name: str) -> bytes:
    data = real_bytes(name)
    if data is None:
        pytest.skip(f"real dsh log {name!r} not found under {fx.dsh_dir() / 'sessions'}: "
                    f"set {fx.DSH_ENV} to the shared dsh folder to run this test")
    return data


# --- random bytes ------------------------------------------------------------------------

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


@FUZZ
@given(data=st.one_of(
    st.binary(max_size=2000),
    st.binary(max_size=400).map(lambda b: ZSTD_MAGIC + b),
    st.binary(max_size=400).map(lambda b: ZSTD_MAGIC + b"\x20" + b),  # single-segment header
    st.binary(max_size=400).map(lambda b: b'{"type":"session","version":0}\n' + b),
))
def test_random_bytes_never_raise(data: bytes, tmp_path: Path) -> None:
    for name in ("session.jsonl", "session.jsonl.zstd"):
        _, report = read_all(write(tmp_path, name, data))
        assert report.lost_bytes <= len(data)


@FUZZ
@given(lines=st.lists(st.one_of(
    st.text(max_size=80),
    st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=10),
                 lambda inner: st.lists(inner, max_size=4)
                 | st.dictionaries(st.sampled_from(
                     ["type", "seq", "seq0", "data", "turn", "step", "chunk", "index", "texts",
                      "args", "id", "name", "stream", "message", "content", "reason", "kind",
                      "text", "error", "usage", "callId", "ignorable"]), inner, max_size=5),
                 max_leaves=20).map(json.dumps),
    st.sampled_from([json.dumps(t) for t in (
        {"type": "assistant/chunk"}, {"type": "reasoning-chunks", "seq0": 1},
        {"type": "assistant/attempt", "data": {"turn": 1, "step": 1, "stream": [1, {}]}},
        {"type": "assistant/message", "data": {"turn": 1, "step": 1, "stream": None}},
        {"type": "tool/result", "data": {"turn": 1, "message": {"content": [{}]}}})]),
), max_size=30), version=st.integers(-1, 6))
def test_random_rows_never_raise(lines: list[str], version: int, tmp_path: Path) -> None:
    header = json.dumps({"type": "session", "version": version, "id": "fuzz"})
    text = "\n".join([header, *lines]) + "\n"
    read_all(write(tmp_path, "session.jsonl", text.encode("utf-8", "surrogatepass")))


# --- truncated lines ---------------------------------------------------------------------


def _sources() -> list[tuple[bytes, ...]]:
    sources = [synthetic_lines()]
    plain = real_bytes("plainlog")
    if plain is not None:
        sources.append(tuple(plain.splitlines(keepends=True)))
    return sources


@FUZZ
@given(which=st.integers(0, 1), cuts=st.dictionaries(st.integers(0, 60), st.floats(0, 1),
                                                     max_size=8))
def test_truncated_lines_are_each_one_bad_row(which: int, cuts: dict[int, float],
                                              tmp_path: Path) -> None:
    sources = _sources()
    lines = list(sources[which % len(sources)])
    broken = 0
    for index, fraction in cuts.items():
        if index >= len(lines):
            continue
        body = lines[index].rstrip(b"\n")
        keep = int(len(body) * fraction)
        broken += 0 < keep < len(body)
        lines[index] = body[:keep] + b"\n"
    _, report = read_all(write(tmp_path, "session.jsonl", b"".join(lines)))
    assert report.bad_rows == broken


# --- wrong types in every field ----------------------------------------------------------


def _paths(value: Any, prefix: tuple[str | int, ...] = ()) -> Iterator[tuple[str | int, ...]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield (*prefix, key)
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield (*prefix, index)
            yield from _paths(item, (*prefix, index))


def _wrong(value: Any) -> list[Any]:
    """Values of other JSON types than ``value``'s."""
    if value is None:
        return [0, "", {}]
    if isinstance(value, bool):
        return ["true", None]
    if isinstance(value, int | float):
        return [str(value), None, [value]]
    if isinstance(value, str):
        return [None, 0, [value]]
    if isinstance(value, list):
        return [None, "x", {}]
    return [None, [], "x"]


def _replace(row: Any, path: tuple[str | int, ...], new: Any) -> Any:
    changed = json.loads(json.dumps(row))
    target = changed
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = new
    return changed


def _every_mutation(log: fx.Log) -> Iterator[bytes]:
    header, rows = log
    all_rows = [header, *rows]
    for i, row in enumerate(all_rows):
        for path in _paths(row):
            value: Any = row
            for key in path:
                value = value[key]
            for new in _wrong(value):
                mutated = [*all_rows[:i], _replace(row, path, new), *all_rows[i + 1 :]]
                yield fx.dumps(mutated[0], mutated[1:])


@pytest.mark.parametrize("form", ["v0", "v2"])
def test_a_wrong_type_in_any_field_costs_at_most_its_row(form: str, tmp_path: Path) -> None:
    log = fx.synthetic_log() if form == "v0" else fx.to_v2(fx.synthetic_log())
    original = [e for e in read_all(write(tmp_path, "o.session.jsonl", fx.dumps(*log)))[0]
                if isinstance(e, RecordedCall)]
    path = tmp_path / "session.jsonl"
    tried = 0
    for data in _every_mutation(log):
        path.write_bytes(data)
        events, report = read_all(path)
        assert report.bad_rows <= 1
        assert sum(isinstance(e, RecordedCall) for e in events) <= len(original) + 1
        tried += 1
    assert tried > 500


@FUZZ
@given(data=st.data())
def test_wrong_types_in_real_rows_never_raise(data: st.DataObject, tmp_path: Path) -> None:
    raw = real_or_skip("tool_bash")
    header, rows = fx.load(write(tmp_path, "src.session.jsonl.zstd", raw))
    all_rows = [header, *rows]
    for _ in range(data.draw(st.integers(1, 5))):
        i = data.draw(st.integers(0, len(all_rows) - 1))
        paths = list(_paths(all_rows[i]))
        if not paths:
            continue
        path = data.draw(st.sampled_from(paths))
        value: Any = all_rows[i]
        for key in path:
            value = value[key]
        all_rows[i] = _replace(all_rows[i], path, data.draw(st.sampled_from(_wrong(value))))
    read_all(write(tmp_path, "session.jsonl", fx.dumps(all_rows[0], all_rows[1:])))


# --- random cuts of a .zstd file ---------------------------------------------------------


def _cut_and_check(data: bytes, cut: int, tmp: Path) -> None:
    ends = [0, *fx.frame_ends(data)]
    whole = [e for e in ends if e <= cut]
    _, report = read_all(write(tmp, "session.jsonl.zstd", data[:cut]))
    assert report.frames == len(whole) - 1
    assert report.lost_bytes == cut - whole[-1]
    assert report.torn == (cut != whole[-1])
    assert report.bad_rows == 0
    # Only a cut inside the header's frame leaves a log without its header.
    assert (report.warnings == []) == (len(whole) > 1)


@FUZZ
@given(fraction=st.floats(0, 1))
def test_random_cut_of_a_real_zstd_log(fraction: float, tmp_path: Path) -> None:
    for name in ("sigterm", "tool_bash", "loop3000"):
        data = real_or_skip(name)
        _cut_and_check(data, int(len(data) * fraction), tmp_path)


@FUZZ
@given(fraction=st.floats(0, 1), batch=st.integers(1, 6))
def test_random_cut_of_a_built_zstd_log(fraction: float, batch: int, tmp_path: Path) -> None:
    data = fx.zstd_frames(fx.synthetic_log(), batch)
    _cut_and_check(data, int(len(data) * fraction), tmp_path)


@FUZZ
@given(data=st.data())
def test_flipped_bytes_in_a_real_zstd_log_never_raise(data: st.DataObject,
                                                      tmp_path: Path) -> None:
    raw = bytearray(real_or_skip("tool_bash"))
    for _ in range(data.draw(st.integers(1, 4))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    _, report = read_all(write(tmp_path, "session.jsonl.zstd", bytes(raw)))
    assert report.lost_bytes <= len(raw)
