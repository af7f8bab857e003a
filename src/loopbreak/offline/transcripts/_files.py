"""Reading recorded files line by line: plain, gzip or zstd, without ever raising mid-file."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path
from typing import IO, cast

from loopbreak._errors import InputError
from loopbreak.offline.transcripts._model import ReadReport


def open_binary(path: Path) -> IO[bytes]:
    """``path`` opened for reading, with a one-line error when it cannot be."""
    try:
        return path.open("rb")
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from None


def open_text_lines(path: Path, report: ReadReport) -> Iterator[tuple[int, str]]:
    """Numbered lines of a text file (``.gz`` decompressed); a line that is not UTF-8, or a
    torn compressed tail, is counted in ``report`` instead of raising."""
    raw = open_binary(path)
    stream = cast(IO[bytes], gzip.GzipFile(fileobj=raw)) if path.suffix == ".gz" else raw
    number = 0
    try:
        with raw:
            for number, line in enumerate(stream, start=1):
                try:
                    yield number, line.decode("utf-8")
                except UnicodeDecodeError as exc:
                    report.note_bad(f"line {number}: invalid UTF-8 at byte {exc.start}")
    except (OSError, EOFError) as exc:
        report.torn = True
        report.warn(f"{path}: the compressed data ends early after line {number} ({exc})")
