"""Concatenated zstd frames, as DeepSeek Harness appends them to a session log.

dsh compresses every write batch into its own independent frame and appends it
to the file, so a crash can leave the last frame torn. This module walks the
frames by their block headers (the layout of RFC 8878, the same walk as dsh's
own ``scanZstdFrames``) before decompressing any of them, which tells an intact
frame from a torn one without reading the file into memory: only frames that
are whole on disk are decompressed, and what could not be read is counted in
the :class:`~loopbreak.offline.transcripts._model.ReadReport`.

``zstandard`` is optional (the ``logs`` extra, or ``pip install zstandard``) and imported only
when a compressed log is actually read.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from types import ModuleType
from typing import BinaryIO, Final

from loopbreak._errors import InputError
from loopbreak.offline.transcripts._model import ReadReport

ZSTD_MAGIC: Final = b"\x28\xb5\x2f\xfd"
_SKIPPABLE_LOW: Final = 0x184D2A50
_BLOCK_MAX: Final = 128 * 1024
_READ: Final = 1 << 20

# Sentinel the frame reader yields where bytes were lost, so that a line cut in
# half by the loss is dropped instead of being glued to the next frame's start.
BREAK: Final = None


def is_zstd_start(head: bytes) -> bool:
    """Whether ``head`` (a file's first bytes) opens a zstd or skippable frame."""
    if len(head) < 4:
        return False
    return head[:4] == ZSTD_MAGIC or (int.from_bytes(head[:4], "little") & ~0xF) == _SKIPPABLE_LOW


def require_zstandard(path: str) -> ModuleType:
    """The ``zstandard`` module, or a one-line InputError telling how to install it."""
    try:
        import zstandard
    except ImportError:
        raise InputError(
            f"{path}: reading a compressed session log needs zstandard: "
            "pip install zstandard"
        ) from None
    return zstandard


class _Torn(Exception):
    """The file ends inside this frame."""


class _Corrupt(Exception):
    """The bytes here are not a frame."""


def _read_at(f: BinaryIO, pos: int, n: int) -> bytes:
    f.seek(pos)
    return f.read(n)


def _frame_end(f: BinaryIO, pos: int, size: int) -> tuple[int, bool]:
    """End offset of the frame at ``pos`` and whether it holds data (False: skippable).

    Raises ``_Torn`` when the file ends inside it, ``_Corrupt`` when it is no frame.
    """
    head = _read_at(f, pos, 5)
    if len(head) < 4:
        raise _Torn
    magic = int.from_bytes(head[:4], "little")
    if (magic & ~0xF) == _SKIPPABLE_LOW:
        length = _read_at(f, pos + 4, 4)
        if len(length) < 4:
            raise _Torn
        end = pos + 8 + int.from_bytes(length, "little")
        if end > size:
            raise _Torn
        return end, False
    if head[:4] != ZSTD_MAGIC:
        raise _Corrupt
    if len(head) < 5:
        raise _Torn
    descriptor = head[4]
    if descriptor & 0x18:
        raise _Corrupt
    single_segment = bool(descriptor & 0x20)
    dict_bytes = (0, 1, 2, 4)[descriptor & 0x03]
    size_flag = descriptor >> 6
    content_size_bytes = (1 if single_segment else 0) if size_flag == 0 else 1 << size_flag
    p = pos + 5 + (0 if single_segment else 1) + dict_bytes + content_size_bytes
    while True:
        block = _read_at(f, p, 3)
        if len(block) < 3:
            raise _Torn
        header = int.from_bytes(block, "little")
        last, kind, block_size = header & 1, (header >> 1) & 3, header >> 3
        if kind == 3 or block_size > _BLOCK_MAX:
            raise _Corrupt
        p += 3 + (1 if kind == 1 else block_size)
        if p > size:
            raise _Torn
        if last:
            break
    if descriptor & 0x04:
        p += 4
    if p > size:
        raise _Torn
    return p, True


def _next_magic(f: BinaryIO, start: int, size: int) -> int | None:
    """Offset of the next zstd magic at or after ``start``, if any."""
    pos = start
    while pos < size:
        chunk = _read_at(f, pos, _READ + 3)
        found = chunk.find(ZSTD_MAGIC)
        if found >= 0:
            return pos + found
        if len(chunk) <= 3:
            return None
        pos += len(chunk) - 3
    return None


def iter_frames(f: BinaryIO, path: str, report: ReadReport) -> Iterator[bytes | None]:
    """Decompressed bytes of every intact frame of ``f``, in order.

    Yields :data:`BREAK` where bytes were lost. Records in ``report`` the frames
    read, whether the last one was torn and how many compressed bytes were lost;
    never raises on the file's contents (only InputError when zstandard is missing).
    """
    zstandard = require_zstandard(path)
    size = os.fstat(f.fileno()).st_size
    pos = 0
    damaged_regions = 0
    damaged_bytes = 0
    # Whether the run of failures since the last good frame began with a frame
    # the file ends inside: if nothing good follows, that is a torn tail.
    streak_torn = False
    while pos < size:
        try:
            end, has_data = _frame_end(f, pos, size)
            if has_data:
                yield from _decompress(zstandard, f, pos, end)
            report.frames += 1
            streak_torn = False
            pos = end
            continue
        except _Torn:
            streak_torn = True
        except (_Corrupt, zstandard.ZstdError):
            pass
        # Resynchronise on the next frame: a damaged frame need not be the last
        # (a copy taken mid-write, a writer that appended after a crash).
        resume = _next_magic(f, pos + 1, size)
        lost = (size if resume is None else resume) - pos
        report.lost_bytes += lost
        yield BREAK
        if resume is None and streak_torn:
            report.torn = True
            break
        damaged_regions += 1
        damaged_bytes += lost
        if resume is None:
            break
        pos = resume
    if damaged_regions:
        report.warn(f"{damaged_regions} damaged zstd region(s), {damaged_bytes} bytes skipped")


def _decompress(zstandard: ModuleType, f: BinaryIO, start: int, end: int) -> Iterator[bytes]:
    decoder = zstandard.ZstdDecompressor().decompressobj()
    pos = start
    while pos < end:
        chunk = _read_at(f, pos, min(_READ, end - pos))
        if not chunk:
            raise zstandard.ZstdError("file shrank while reading")
        pos += len(chunk)
        out: bytes = decoder.decompress(chunk)
        if out:
            yield out
    if not decoder.eof:
        raise zstandard.ZstdError("frame ended early")
