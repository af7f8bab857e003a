"""``loopbreak scan``: the batch contract other tools score the engine through."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import loopbreak
from loopbreak._samples import clean_code, phrase_pool, verbatim_loop
from loopbreak.cli import main

CONTRACT_KEYS = {"id", "tripped", "rule", "offset", "chars"}


def _run(args: list[str], stdin: bytes = b"") -> tuple[int, list[dict], str]:  # type: ignore[type-arg]
    proc = subprocess.run([sys.executable, "-m", "loopbreak", "scan", *args], input=stdin,
                          capture_output=True, timeout=120)
    lines = [json.loads(line) for line in proc.stdout.decode().splitlines()]
    return proc.returncode, lines, proc.stderr.decode()


def _jsonl(*records: object) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode()


def test_scan_judges_each_stream_in_order_like_the_library() -> None:
    loop, clean = verbatim_loop(), clean_code()
    pool = phrase_pool()
    pieces = [pool.text[i : i + 5] for i in range(0, 9000, 5)]
    code, out, err = _run([], _jsonl(
        {"id": "loop", "text": loop.text},
        {"id": 7, "text": clean.text, "channel": "text", "extra": "ignored"},
        {"id": None, "pieces": pieces},
    ))
    assert code == 0 and err == ""
    assert [set(line) for line in out] == [CONTRACT_KEYS] * 3
    assert [line["id"] for line in out] == ["loop", 7, None]
    expected = loopbreak.scan(loop.text)
    assert expected is not None
    assert out[0] == {"id": "loop", "tripped": True, "rule": expected.rule,
                      "offset": expected.offset, "chars": len(loop.text)}
    assert out[1] == {"id": 7, "tripped": False, "rule": None, "offset": None,
                      "chars": len(clean.text)}
    by_pieces = loopbreak.scan(pieces)
    assert by_pieces is not None and out[2]["offset"] == by_pieces.offset
    assert out[2]["chars"] == sum(map(len, pieces))


def test_delta_chars_changes_offsets_not_decisions() -> None:
    loop = verbatim_loop()
    _, small, _ = _run(["--delta-chars", "1"], _jsonl({"id": 1, "text": loop.text}))
    _, large, _ = _run(["--delta-chars", "100"], _jsonl({"id": 1, "text": loop.text}))
    assert small[0]["rule"] == large[0]["rule"]
    assert 0 <= large[0]["offset"] - small[0]["offset"] < 100


@pytest.mark.parametrize("size", [1, 4, 7, 32, 200])
def test_offset_is_the_end_of_the_delta_that_holds_the_trip(size: int) -> None:
    # The guard judges in batches and finds a trip up to a batch late; the contract's
    # offset is still the end of the delta holding character ``at``.
    text = verbatim_loop().text
    pieces = [text[i : i + size] for i in range(0, len(text), size)]
    trip = loopbreak.scan(pieces)
    assert trip is not None
    assert trip.offset == min(len(text), -(-trip.at // size) * size)
    one_by_one = loopbreak.scan(list(text))
    assert one_by_one is not None and (one_by_one.rule, one_by_one.at) == (trip.rule, trip.at)
    assert one_by_one.offset == trip.at


def test_txt_files_are_one_stream_each(tmp_path: Path) -> None:
    a = tmp_path / "loop.txt"
    a.write_text(verbatim_loop().text, encoding="utf-8")
    b = tmp_path / "streams.jsonl"
    b.write_bytes(_jsonl({"id": "x", "text": "fine"}))
    code, out, _ = _run([str(a), str(b)])
    assert code == 0
    assert out[0]["id"] == str(a) and out[0]["tripped"] is True
    assert out[1] == {"id": "x", "tripped": False, "rule": None, "offset": None, "chars": 4}


def test_bad_lines_get_error_records_and_the_rest_is_judged() -> None:
    stdin = (_jsonl({"id": 1, "text": "ok"}) + b"{not json\n" + b"\xff\xfe\n" + b"[1, 2]\n"
             + _jsonl({"id": 5, "text": "x", "channel": "tool"}, {"id": 6},
                      {"id": 7, "text": 42}, {"id": 8, "pieces": ["a", 3]})
             + b"\n" + _jsonl({"id": 9, "text": ""}))
    code, out, err = _run([], stdin)
    assert code == 2
    assert [line.get("id") for line in out] == [1, None, None, None, 5, 6, 7, 8, 9]
    assert [("error" in line) for line in out] == [False] + [True] * 7 + [False]
    assert "invalid JSON" in out[1]["error"] and "invalid UTF-8" in out[2]["error"]
    assert "unknown channel 'tool'" in out[4]["error"]
    assert out[8] == {"id": 9, "tripped": False, "rule": None, "offset": None, "chars": 0}
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("loopbreak: error: 7 of 9 streams")


def test_missing_file_and_invalid_utf8_txt(tmp_path: Path) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"caf\xe9 loop")
    code, out, err = _run([str(tmp_path / "missing.jsonl"), str(bad)])
    assert code == 2
    assert "no such file" in out[0]["error"] and "invalid UTF-8 at byte 3" in out[1]["error"]
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_evidence_flag_adds_exact_position(capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    loop = verbatim_loop()
    stdin = io.TextIOWrapper(io.BytesIO(_jsonl({"id": 1, "text": loop.text})))
    monkeypatch.setattr(sys, "stdin", stdin)
    assert main(["scan", "--evidence"]) == 0
    line = json.loads(capsys.readouterr().out)
    trip = loopbreak.scan(loop.text)
    assert trip is not None
    assert line["at"] == trip.at and line["evidence"]["period"] == trip.evidence["period"]


def test_bad_delta_chars_is_one_line() -> None:
    code, out, err = _run(["--delta-chars", "0"], _jsonl({"id": 1, "text": "x"}))
    assert code == 2 and out == []
    assert err.strip() == "loopbreak: error: --delta-chars must be >= 1, not 0"


def test_library_scan_validates_its_input() -> None:
    with pytest.raises(loopbreak.InputError, match="channel"):
        loopbreak.scan("x", channel="tools")  # type: ignore[arg-type]
    with pytest.raises(loopbreak.InputError, match="piece 1 must be a string"):
        loopbreak.scan(["a", 3])  # type: ignore[list-item]
    assert loopbreak.scan("") is None and loopbreak.scan([]) is None
