"""``loopbreak.scan``: judge one finished stream in-process, as ``loopbreak scan`` does."""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from collections.abc import Iterable
from dataclasses import replace

from loopbreak._config import Config
from loopbreak._engine.call_guard import ChannelGuard
from loopbreak._engine.trip import CHANNELS, Channel, Trip
from loopbreak._errors import InputError

DEFAULT_DELTA_CHARS = 32


def iter_deltas(text: str, delta_chars: int = DEFAULT_DELTA_CHARS) -> Iterable[str]:
    """``text`` cut into deltas of ``delta_chars`` characters, as a stream would bring it."""
    if delta_chars < 1:
        raise InputError(f"delta_chars must be >= 1, not {delta_chars}")
    return (text[i : i + delta_chars] for i in range(0, len(text), delta_chars))


def scan(
    text_or_pieces: str | Iterable[str],
    channel: Channel = "reasoning",
    config: Config | None = None,
    *,
    delta_chars: int = DEFAULT_DELTA_CHARS,
) -> Trip | None:
    """The first trip of a stream through a fresh engine with every single-call rule of
    ``channel``, or ``None``.

    A string is fed in deltas of ``delta_chars``; an iterable of strings is fed
    piece by piece, exactly as given.
    """
    if channel not in CHANNELS:
        raise InputError(f"channel must be one of {', '.join(CHANNELS)}, not {channel!r}")
    pieces = iter_deltas(text_or_pieces, delta_chars) if isinstance(text_or_pieces, str) \
        else text_or_pieces
    guard = ChannelGuard(channel, config)
    # Ends of the recent pieces: the guard finds a trip up to a batch late, the contract's
    # offset is the end of the piece that holds it.
    ends: deque[int] = deque()
    horizon = guard.batch_chars + 1
    end = 0
    for i, piece in enumerate(pieces):
        if not isinstance(piece, str):
            raise InputError(f"piece {i} must be a string, not {type(piece).__name__}")
        end += len(piece)
        if piece:
            ends.append(end)
            while ends[0] < end - horizon - len(piece):
                ends.popleft()
        trip = guard.feed(piece)
        if trip is not None:
            return _at_its_piece(trip, ends)
    trip = guard.flush()
    return None if trip is None else _at_its_piece(trip, ends)


def _at_its_piece(trip: Trip, ends: deque[int]) -> Trip:
    """``trip`` with its offset at the end of the piece that holds character ``at``."""
    offset = ends[bisect_left(ends, trip.at)]
    return trip if offset == trip.offset else replace(trip, offset=offset)
