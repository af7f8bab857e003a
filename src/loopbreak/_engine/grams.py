"""Character n-grams: block shingles and a bounded set of a whole call's 4-grams."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Set
from functools import lru_cache
from itertools import compress
from operator import not_
from typing import TYPE_CHECKING

from loopbreak._engine import accelerator

if TYPE_CHECKING:
    from loopbreak._engine.compiled import GramTable, PackedGramTable

Shingle = int | str
"""A shingle's key: equal keys mean equal substrings."""

_TAKE_CHARS = 1024  # characters a gram set lets wait before reading them into grams
_FRESH_GRAMS = 1 << 14  # grams a sampled gram set gathers before testing them
_TEST_FOR = 8  # after gathering mostly distinct grams, how many times as many to test at once
_SHINGLE_WORD = 4  # characters of a shingle read as one 64-bit word of UTF-16 units
# Byte maps for blocks with an astral character: any set byte as 1; 0 as 1, the rest as 0.
_NONZERO_AS_ONE = bytes([0] + [1] * 255)
_ZERO_AS_ONE = bytes([1] + [0] * 255)


def shingles(block: str, size: int, step: int) -> set[Shingle]:
    """The ``size``-character substrings of ``block`` taken every ``step`` characters, as
    keys. Four-character shingles of BMP text (step 1, 2 or 4) are read in C as the 64-bit
    words their UTF-16 units spell, about twice as cheap as slicing out each substring;
    other shingles are the substrings themselves, and a BMP shingle of a block that holds
    an astral character gets the same word, so keys of any two blocks compare."""
    last = len(block) - size
    if last < 0:
        return {block} if block else set()
    if size != _SHINGLE_WORD or _SHINGLE_WORD % step:
        return set(map(block.__getitem__, _slices(len(block), size, step)))
    units = block.encode("utf-16-le", "surrogatepass")
    keys: set[Shingle] = set()
    if len(units) == 2 * len(block):
        for _, words in _word_rows(units, step):
            keys.update(words)
        return keys
    # An astral character takes two units: word boundaries no longer fall on characters.
    # Every character is read as its low 16 bits instead (a BMP character's unit), the
    # shingles that hold no astral character keep those words, and those that hold one are
    # keyed by their text: all in C, as above.
    points = block.encode("utf-32-le", "surrogatepass")
    low = bytearray(2 * len(block))
    low[0::2] = points[0::4]
    low[1::2] = points[1::4]
    # 1 where a character is astral (its third byte is set); then, OR-ing each byte with
    # the next three (the bytes of one big integer), 1 where a shingle starting there
    # holds an astral character.
    astral = int.from_bytes(points[2::4].translate(_NONZERO_AS_ONE), "little")
    astral |= astral >> 8
    astral |= astral >> 16
    holds = astral.to_bytes(len(block), "little")
    for first, words in _word_rows(low, step):
        keys.update(compress(words, holds[first::_SHINGLE_WORD].translate(_ZERO_AS_ONE)))
    keys.update(map(block.__getitem__,
                    compress(_slices(len(block), size, step), holds[: last + 1 : step])))
    return keys


def _word_rows(units: bytes | bytearray, step: int) -> list[tuple[int, memoryview]]:
    """The 64-bit words of the four-unit shingles of UTF-16 ``units`` taken every ``step``
    units, a row per alignment: the unit the row's first shingle starts at, and its words."""
    view = memoryview(units)
    rows = []
    for first in range(0, _SHINGLE_WORD, step):
        start = 2 * first
        rows.append((first, view[start : start + 8 * ((len(units) - start) // 8)].cast("Q")))
    return rows


@lru_cache(maxsize=64)
def _slices(length: int, size: int, step: int) -> tuple[slice, ...]:
    # Blocks have one length: the slices are made once and applied in C.
    return tuple(slice(i, i + size) for i in range(0, length - size + 1, step))


def _in_sample(grams: Collection[str], level: int) -> Iterator[str]:
    """The grams whose hash has ``level`` low zero bits, picked in C (a string keeps its
    hash: the set they go into, or were gathered in, does not work it out twice)."""
    return compress(grams, map(not_, map(((1 << level) - 1).__and__, map(hash, grams))))


def jaccard(a: Set[Shingle], b: Set[Shingle]) -> float:
    """|a ∩ b| / |a ∪ b|, 0.0 for two empty sets."""
    if not a or not b:
        return 0.0
    common = len(a & b)
    return common / (len(a) + len(b) - common)


class GramSet:
    """Every distinct 4-character substring of a stream, within a memory bound.

    Exact while the stream has at most ``cap`` distinct grams (a 2,048-character
    call has at most 2,045). Past that it keeps a consistent hash sample: grams
    whose hash has ``level`` low zero bits, halving the sample each time it
    overflows. Two sets compared at the same level estimate containment without
    bias, so a 1 MB call costs no more memory than a 64 kB one.

    With ``compiled`` and the kernels loaded, the grams are kept in a compiled table
    (:class:`~loopbreak._engine.compiled.PackedGramTable`, each gram of at most four BMP
    characters one word; :class:`~loopbreak._engine.compiled.GramTable` for longer grams
    and from a call's first astral character on) that holds the same grams, sampled by the
    same str hash, at about a quarter of the cost.
    """

    __slots__ = ("_cap", "_carry", "_consumed", "_fresh", "_gathered", "_grams", "_level",
                 "_pending", "_pending_chars", "_size", "_table", "_test_left")

    def __init__(self, size: int = 4, cap: int = 1 << 16, *, compiled: bool = False) -> None:
        self._size = size
        self._cap = cap
        kernels = accelerator.loaded() if compiled else None
        self._table: GramTable | PackedGramTable | None = (
            None if kernels is None
            else kernels.PackedGramTable(size, cap) if kernels.PackedGramTable.supports(size)
            else kernels.GramTable(size, cap) if kernels.GramTable.supports(size) else None)
        self._grams: set[str] = set()
        self._level = 0
        self._carry = ""
        self._consumed = 0
        # Deltas not read into grams yet: a gram set is fed every token of a call's
        # reasoning but read once, at its end; the grams are taken _TAKE_CHARS at a time
        # (or when read), the same set, a sixth of the cost of taking each delta's.
        self._pending: list[str] = []
        self._pending_chars = 0
        # Once sampled, a batch's grams are either gathered here first (at most
        # _FRESH_GRAMS) and each distinct one tested against the sample's hash mask once,
        # or all tested at once. Prose and code repeat most of their grams within a few
        # pages (stdlib source: 27% of 16,384 are distinct): gathered, they cost half as
        # much as tested one by one (which made a long call's last token ~1.25x dearer
        # than its first). Text whose grams hardly repeat (random letters, CJK, hashes)
        # costs more gathered (the strings stay alive longer, out of cache).
        self._fresh: set[str] = set()
        self._gathered = 0  # grams gathered (with their repeats) since the last sift
        self._test_left = 0  # grams to test at once before gathering again (none: gather)

    @property
    def compiled(self) -> bool:
        """Whether the grams are kept in the compiled table."""
        return self._table is not None

    @property
    def level(self) -> int:
        """How many times the sample has been halved (0 = exact)."""
        self._read_all()
        return self._level if self._table is None else self._table.level

    @property
    def consumed(self) -> int:
        """Characters fed so far."""
        return self._consumed

    def __len__(self) -> int:
        self._read_all()
        return len(self._grams) if self._table is None else len(self._table)

    def feed(self, delta: str) -> None:
        """Add the grams that end inside ``delta``."""
        if not delta:
            return
        self._consumed += len(delta)
        self._pending.append(delta)
        self._pending_chars += len(delta)
        if self._pending_chars >= _TAKE_CHARS:
            self._take()

    def _read_all(self) -> None:
        """Bring the set up to date with everything fed (before it is read)."""
        self._take()
        if self._fresh:
            self._sift()

    def _take(self) -> None:
        """Read the deltas that wait into grams. The level the set ends at is the one taking
        each delta alone ends at (the least whose sample of every gram seen fits the cap),
        so the set is the same."""
        if not self._pending:
            return
        text = self._carry + "".join(self._pending)
        self._pending.clear()
        self._pending_chars = 0
        size = self._size
        if self._table is not None:
            self._table.take(text)
            self._carry = text[-(size - 1) :] if size > 1 else ""
            return
        # zip of shifted copies then one join per gram: C loops, no Python frame per gram
        new = map("".join, zip(*(text[k:] for k in range(size))))
        self._carry = text[-(size - 1) :] if size > 1 else ""
        if not self._level:
            self._grams.update(new)
        elif self._test_left <= 0:
            self._fresh.update(new)
            self._gathered += len(text) - size + 1
            if len(self._fresh) > _FRESH_GRAMS:
                self._sift()
            return
        else:
            grams = list(new)
            self._grams.update(_in_sample(grams, self._level))
            self._test_left -= len(grams)
        self._shrink()

    def _sift(self) -> None:
        """Move the fresh grams the sample keeps into it and forget the rest."""
        fresh = self._fresh
        if 2 * len(fresh) > self._gathered:
            # Most grams gathered were distinct: the next ones are tested at once, eight
            # times as many as were gathered, before gathering is tried again.
            self._test_left = _TEST_FOR * self._gathered
        self._gathered = 0
        self._grams.update(_in_sample(fresh, self._level))
        fresh.clear()
        self._shrink()

    def _shrink(self) -> None:
        """Halve the sample until it fits the cap."""
        while len(self._grams) > self._cap:
            self._level += 1
            self._grams = set(_in_sample(self._grams, self._level))

    def sample(self, level: int) -> set[str]:
        """The grams kept at ``level`` (``level >= self.level``)."""
        self._read_all()
        if self._table is not None:
            return self._table.sample(level)
        if level == self._level:
            return self._grams
        return set(_in_sample(self._grams, level))

    def containment(self, other: GramSet) -> float:
        """|A ∩ B| / min(|A|, |B|): how much of the smaller set the larger one holds."""
        level = max(self.level, other.level)
        if self._table is not None or other._table is not None:
            # A compiled set and a pure one (made before the kernels loaded) meet as tables.
            mine_table = (self._table if self._table is not None
                          else _as_table(self, other._table, level))
            their_table = (other._table if other._table is not None
                           else _as_table(other, self._table, level))
            mine_size, their_size, common = mine_table.common(their_table, level)
            if not mine_size or not their_size:
                return 0.0
            return common / min(mine_size, their_size)
        mine, theirs = self.sample(level), other.sample(level)
        if not mine or not theirs:
            return 0.0
        small, large = (mine, theirs) if len(mine) <= len(theirs) else (theirs, mine)
        return len(small & large) / len(small)


def _as_table(grams: GramSet, compiled: GramTable | PackedGramTable | None,
              level: int) -> GramTable | PackedGramTable:
    """A pure set's sample at ``level`` as a table like ``compiled``, to compare with it."""
    assert compiled is not None
    return type(compiled).of(grams.sample(level), grams._size, level)
