"""What a pure function of a text returned, kept for the texts that come back.

A proxy replays a session's whole history on every request, so the same tool results and
arguments come back each time and their fingerprints, failure readings and canonical forms
are kept between requests. A cache bounded by its number of entries (``lru_cache``) fails
a proxy that serves several long sessions: with 4,096 entries, eight agents at 800 calls each
take turns evicting each other and every request is replayed cold (40-60 ms instead of 10,
measured). This cache is bounded by the characters of the texts it keeps instead, which is
also what its memory is.

Two generations of plain dicts: a text is looked up in the newer, then in the older (and
moved to the newer on a hit); when a text would take the newer past half the budget, the
newer becomes the older and the older is dropped. The texts seen within about the last
``max_chars / 2`` characters of distinct texts stay kept, and a lookup is one or two
C-level dict lookups. Threads may share a cache: each step is one dict operation, so a
race can lose an entry or miscount the budget by one text, never pair a text with
another's value.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar, cast

V = TypeVar("V")

KEPT_CHARS = 1 << 25
"""Characters each of the tool rules' caches keeps (32 M): the texts of 16 M characters in
turn stay kept, twenty sessions of 800 calls whose results average 1 kB."""

_MISSING: object = object()


class TextCache(Generic[V]):
    """``compute(text, *extra)`` kept for texts of at most ``max_text_chars`` characters,
    ``max_chars`` characters of them in all."""

    __slots__ = ("_chars", "_compute", "_half", "_max_text", "_newer", "_older")

    def __init__(self, compute: Callable[..., V], max_chars: int, max_text_chars: int) -> None:
        if max_text_chars < 0 or 2 * max_text_chars > max_chars:
            raise ValueError("a text cache needs 0 <= max_text_chars <= max_chars / 2, not "
                             f"{max_text_chars} and {max_chars}")
        self._compute = compute
        self._half = max_chars // 2
        self._max_text = max_text_chars
        self._newer: dict[Hashable, V] = {}
        self._older: dict[Hashable, V] = {}
        self._chars = 0  # characters of the texts in the newer generation

    def __call__(self, text: str, *extra: Hashable) -> V:
        key: Hashable = (text, *extra) if extra else text
        # No ``cast``: it is a call at run time, and a replay looks up ~3,700 texts.
        found = self._newer.get(key, _MISSING)
        if found is not _MISSING:
            return found  # type: ignore[return-value]
        found = self._older.pop(key, _MISSING)
        if found is _MISSING:
            value: V = self._compute(text, *extra)
            if len(text) > self._max_text:
                return value
        else:
            value = found  # type: ignore[assignment]
        if self._chars + len(text) > self._half:
            self._older, self._newer, self._chars = self._newer, {}, 0
        self._newer[key] = value
        self._chars += len(text)
        return value

    @property
    def chars(self) -> int:
        """Characters of the texts kept, in both generations."""
        return sum(len(_text_of(key)) for generation in (self._newer, self._older)
                   for key in generation)

    def __len__(self) -> int:
        return len(self._newer) + len(self._older)

    def clear(self) -> None:
        """Forget every kept value."""
        self._newer, self._older, self._chars = {}, {}, 0


def _text_of(key: Hashable) -> str:
    return key if isinstance(key, str) else cast("tuple[str, ...]", key)[0]
