"""``loopbreak scan``: the batch judge other tools score the engine through.

Input: JSONL, one stream per line, ``{"id": any, "text": str}`` or ``{"id": any,
"pieces": [str, ...]}`` with an optional ``"channel"`` (default ``reasoning``);
other keys are ignored. A ``.txt`` file is one stream whose id is its path.
Output: one JSON line per input stream, in order, ``{"id", "tripped", "rule",
"offset", "chars"}``. A line that cannot be judged gets ``{"id", "error"}``
instead, the rest go on, and the exit code is 2 with one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from loopbreak._config import Config, load_config
from loopbreak._engine.scan import DEFAULT_DELTA_CHARS, scan
from loopbreak._engine.trip import CHANNELS
from loopbreak._errors import InputError

EXAMPLES = """\
examples:
  loopbreak scan streams.jsonl                       one JSON line per stream
  echo '{"id": 1, "text": "hello"}' | loopbreak scan
  loopbreak scan --evidence --channel text answer.txt
  loopbreak scan streams.jsonl | jq -c 'select(.tripped)'
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="*", metavar="FILE",
                        help="JSONL files or .txt files (stdin when none, or '-')")
    parser.add_argument("--delta-chars", type=int, default=DEFAULT_DELTA_CHARS, metavar="N",
                        help="feed 'text' in deltas of N characters "
                             f"(default {DEFAULT_DELTA_CHARS})")
    parser.add_argument("--channel", choices=CHANNELS, default="reasoning",
                        help="channel of streams that do not name one (default reasoning)")
    parser.add_argument("--config", metavar="FILE", help="TOML configuration file")
    parser.add_argument("--evidence", action="store_true",
                        help="add the exact character 'at' and the rule's 'evidence'")


@dataclass
class _Record:
    """One input stream or one reason it could not be read."""

    where: str
    id: Any = None
    stream: str | list[str] | None = None
    channel: str = "reasoning"
    error: str | None = None


def _parse_line(raw: bytes, where: str, default_channel: str) -> _Record:
    from loopbreak.offline.transcripts.plain import ScanRowError, parse_scan_row

    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return _Record(where, error=f"{where}: invalid UTF-8 at byte {exc.start}")
    try:
        row = parse_scan_row(line, default_channel)
    except ScanRowError as exc:
        return _Record(where, id=exc.id, error=f"{where}: {exc}")
    return _Record(where, id=row.id, stream=row.stream, channel=row.channel)


def _records(name: str, handle: IO[bytes], default_channel: str) -> Iterator[_Record]:
    if name.endswith(".txt"):
        data = handle.read()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield _Record(name, id=name, error=f"{name}: invalid UTF-8 at byte {exc.start}")
            return
        yield _Record(name, id=name, stream=text, channel=default_channel)
        return
    for number, raw in enumerate(handle, start=1):
        if not raw.strip():
            continue
        yield _parse_line(raw, f"{name}:{number}", default_channel)


def _sources(files: list[str]) -> Iterator[tuple[str, IO[bytes] | None, str | None]]:
    if not files:
        files = ["-"]
    for name in files:
        if name == "-":
            yield "<stdin>", sys.stdin.buffer, None
            continue
        path = Path(name)
        try:
            handle = path.open("rb")
        except FileNotFoundError:
            yield name, None, f"{name}: no such file"
            continue
        except IsADirectoryError:
            yield name, None, f"{name}: is a directory"
            continue
        except OSError as exc:
            yield name, None, f"{name}: cannot read: {exc.strerror}"
            continue
        with handle:
            yield name, handle, None


def judge(record: _Record, config: Config, delta_chars: int, evidence: bool) -> dict[str, Any]:
    """The output line of one readable record."""
    stream = record.stream if record.stream is not None else ""
    chars = len(stream) if isinstance(stream, str) else sum(len(p) for p in stream)
    trip = scan(stream, record.channel, config, delta_chars=delta_chars)  # type: ignore[arg-type]
    out: dict[str, Any] = {
        "id": record.id,
        "tripped": trip is not None,
        "rule": trip.rule if trip else None,
        "offset": trip.offset if trip else None,
        "chars": chars,
    }
    if evidence:
        out["at"] = trip.at if trip else None
        out["evidence"] = dict(trip.evidence) if trip else None
    return out


def run(args: argparse.Namespace) -> int:
    if args.delta_chars < 1:
        raise InputError(f"--delta-chars must be >= 1, not {args.delta_chars}")
    config = load_config(args.config).config
    out = sys.stdout
    total = failed = 0
    first_error: str | None = None
    for name, handle, open_error in _sources(list(args.files)):
        records = [_Record(name, id=name, error=open_error)] if handle is None \
            else _records(name, handle, args.channel)
        for record in records:
            total += 1
            if record.error is None:
                line = judge(record, config, args.delta_chars, args.evidence)
            else:
                failed += 1
                first_error = first_error or record.error
                line = {"id": record.id, "error": record.error}
            out.write(json.dumps(line, ensure_ascii=False) + "\n")
        out.flush()
    if failed:
        print(f"loopbreak: error: {failed} of {total} streams could not be judged "
              f"(first: {first_error})", file=sys.stderr)
        return 2
    if total == 0:
        print("loopbreak: no streams in the input", file=sys.stderr)
    return 0
