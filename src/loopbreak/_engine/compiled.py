"""The compiled accelerator: numba kernels for the rules that cost most, run in place of
their pure-Python code where ``numba`` is installed (``pip install loopbreak[fast]``).

The pure-Python code stays the reference: every kernel makes the same decisions at the
same character (``tests/engine/test_compiled.py`` feeds both the corpus and generated
streams). numba compiles a kernel on its first call (:func:`warm` makes them all) and
keeps it on disk, next to this file or in its user cache, so a machine compiles once;
:mod:`loopbreak._engine.accelerator` imports this module only when loading it pays.
"""

from __future__ import annotations

from typing import Any

import numba  # type: ignore[import-untyped,import-not-found,unused-ignore]
import numpy as np

# A shingle of up to six characters is its code points, 21 bits each, in two 64-bit words:
# equal keys mean equal substrings, astral characters included. A third word holds the
# key's hash, for the tables.
MAX_SHINGLE = 6
_BITS = 21
_HIGH, _LOW, _HASH = range(3)
# The compared window's counting filter: a power of two counters, four per key the window
# can hold (8,192 at the defaults, 32 kB), at most 16,384.
_WINDOW_MAX_BITS = 14
_WINDOW_KEYS_PER_COUNTER = 4
_SLACK = 1e-9  # as block_repeat's: a bound may let a hopeless block through, never skip one
# The ring's integers: blocks remembered, the shingle size and step, the nearest block
# compared, how far a key's hash shifts to index the window's filter.
_COUNT, _SIZE, _STEP, _MIN_BACK, _SHIFT = range(5)


def _table_slots(keys: int) -> int:
    """A power of two with room for ``keys`` at a load of at most a half."""
    slots = 8
    while slots < 2 * keys:
        slots *= 2
    return slots


def _window_bits(keys: int) -> int:
    """Bits of the window filter's index for a window of at most ``keys`` keys."""
    bits = 8
    while bits < _WINDOW_MAX_BITS and (1 << bits) < _WINDOW_KEYS_PER_COUNTER * keys:
        bits += 1
    return bits


@numba.njit(cache=True, nogil=True)  # type: ignore[misc,unused-ignore]
def _mix(high: Any, low: Any) -> Any:
    # splitmix64's finalizer: every bit of both words reaches the low and the high bits
    # (shingles that differ only in their first character must not share a probe run).
    mixed = low + high * np.uint64(0x9E3779B97F4A7C15)
    mixed = (mixed ^ (mixed >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    mixed = (mixed ^ (mixed >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return mixed ^ (mixed >> np.uint64(31))


@numba.njit(cache=True, nogil=True)  # type: ignore[misc,unused-ignore]
def _holds(keys: Any, table: Any, key: Any) -> bool:
    """Whether a block's table (its keys' rows, plus one; 0 is empty) holds ``key``."""
    mask = table.shape[0] - 1
    at = np.int64(key[_HASH] & np.uint64(mask))
    while True:
        row = table[at]
        if row == 0:
            return False
        row -= 1
        if (keys[row, _HASH] == key[_HASH] and keys[row, _HIGH] == key[_HIGH]
                and keys[row, _LOW] == key[_LOW]):
            return True
        at = (at + 1) & mask


@numba.njit(cache=True, nogil=True)  # type: ignore[misc,unused-ignore]
def _shingle_keys(points: Any, size: int, step: int, keys: Any, table: Any) -> int:
    """Write the distinct shingle keys of ``points`` into ``keys`` and the table of their
    rows ``table``; return how many there are."""
    for at in range(table.shape[0]):  # explicit loops: numba's slice assignment is slower
        table[at] = 0
    mask = table.shape[0] - 1
    n = 0
    for start in range(0, points.shape[0] - size + 1, step):
        high = np.uint64(0)
        low = np.uint64(0)
        for k in range(size):
            if k < 3:
                high = (high << np.uint64(_BITS)) | np.uint64(points[start + k])
            else:
                low = (low << np.uint64(_BITS)) | np.uint64(points[start + k])
        mixed = _mix(high, low)
        at = np.int64(mixed & np.uint64(mask))
        while True:
            row = table[at]
            if row == 0:
                keys[n, _HIGH] = high
                keys[n, _LOW] = low
                keys[n, _HASH] = mixed
                n += 1
                table[at] = n
                break
            row -= 1
            if keys[row, _HASH] == mixed and keys[row, _HIGH] == high and keys[row, _LOW] == low:
                break
            at = (at + 1) & mask
    return n


@numba.njit(cache=True, nogil=True)  # type: ignore[misc,unused-ignore]
def _count_window(window: Any, keys: Any, size: int, change: int, shift: Any) -> None:
    """Add ``change`` to the window's counter of each of ``keys``' first ``size`` keys."""
    for i in range(size):
        window[np.int64(keys[i, _HASH] >> shift)] += change


@numba.njit(cache=True, nogil=True)  # type: ignore[misc,unused-ignore]
def block_overlap(points: Any, keys: Any, tables: Any, sizes: Any, window: Any,
                  state: Any, threshold: float, compare: bool) -> float:
    """block-repeat's comparison of one block with the blocks ``min_back`` to ``max_back``
    before it (the ring holds ``max_back`` and a scratch row), nearest first: the first
    Jaccard overlap of their shingle sets that reaches ``threshold``, else at most the
    best overlap (``compare`` false: 0.0). The block is then remembered in the ring."""
    max_back = keys.shape[0] - 1
    min_back = state[_MIN_BACK]
    shift = np.uint64(state[_SHIFT])
    count = state[_COUNT]
    slot_new = count % max_back
    # The slot the new block takes is the oldest block's, compared last when the ring is
    # full: the new keys go to the scratch row past the ring first.
    fresh = keys[max_back]
    size_new = _shingle_keys(points, state[_SIZE], state[_STEP], fresh, tables[max_back])
    best = 0.0
    last = min(max_back, count)
    if compare and min_back <= last:
        # Every compared block's keys are counted in the window's filter: a block shares
        # at most as many keys with one of them as have a counter above zero, and
        # Jaccard(A, B) <= |A & B| / |A|.
        known = 0
        for i in range(size_new):
            if window[np.int64(fresh[i, _HASH] >> shift)] > 0:
                known += 1
        if known >= threshold * size_new - _SLACK:
            ratio = threshold / (1.0 + threshold)
            for back in range(min_back, last + 1):
                slot = (count - back) % max_back
                other_size = sizes[slot]
                most = known if known < other_size else other_size
                if most < ratio * (size_new + other_size) - _SLACK:
                    continue
                other_keys = keys[slot]
                other_table = tables[slot]
                common = 0
                for i in range(size_new):
                    if _holds(other_keys, other_table, fresh[i]):
                        common += 1
                overlap = common / (size_new + other_size - common) if common else 0.0
                if overlap > best:
                    best = overlap
                    if best >= threshold:
                        break
    if min_back <= max_back and count >= max_back:  # the oldest block leaves the window
        _count_window(window, keys[slot_new], sizes[slot_new], -1, shift)
    for i in range(size_new):
        for word in range(3):
            keys[slot_new, i, word] = fresh[i, word]
    for at in range(tables.shape[1]):
        tables[slot_new, at] = tables[max_back, at]
    sizes[slot_new] = size_new
    count += 1
    state[_COUNT] = count
    if min_back <= max_back and count >= min_back:  # a block enters it
        entering = (count - min_back) % max_back
        _count_window(window, keys[entering], sizes[entering], 1, shift)
    return best


class BlockRing:
    """block-repeat's compared window, compiled: the shingle keys of the last ``max_back``
    blocks, each with a hash table of its own, and a counting filter of every compared
    key (a block that shares too few keys with all of them is compared with none)."""

    __slots__ = ("_keys", "_shape", "_sizes", "_state", "_tables", "_threshold", "_window")

    def __init__(self, block_chars: int, size: int, step: int, min_back: int,
                 max_back: int, threshold: float) -> None:
        self._shape = (block_chars, size, step, min_back, max_back)
        self._threshold = threshold
        # The arrays (~100 kB at the defaults, 32 kB of it the filter) are made when the
        # first block arrives: a ring can be made for a stream that never needs one.
        self._keys: Any = None
        self._tables: Any = None
        self._sizes: Any = None
        self._window: Any = None
        self._state: Any = None

    def _allocate(self) -> None:
        block_chars, size, step, min_back, max_back = self._shape
        rows = (block_chars - size) // step + 1
        # One row more than the ring: the scratch row a new block's keys go to first.
        self._keys = np.zeros((max_back + 1, rows, 3), dtype=np.uint64)
        self._tables = np.zeros((max_back + 1, _table_slots(rows)), dtype=np.int32)
        self._sizes = np.zeros(max_back, dtype=np.int64)
        bits = _window_bits(max(0, max_back - min_back + 1) * rows)
        self._window = np.zeros(1 << bits, dtype=np.int32)
        self._state = np.zeros(5, dtype=np.int64)
        self._state[_SIZE], self._state[_STEP], self._state[_MIN_BACK] = size, step, min_back
        self._state[_SHIFT] = 64 - bits

    @property
    def allocated(self) -> bool:
        """Whether a block arrived and the arrays were made."""
        return self._state is not None

    def overlap(self, block: str, compare: bool) -> float:
        """See :func:`block_overlap`; ``block`` is remembered either way."""
        if self._state is None:
            self._allocate()
        points = np.frombuffer(block.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        return float(block_overlap(points, self._keys, self._tables, self._sizes,
                                   self._window, self._state, self._threshold, compare))

    def reset(self) -> None:
        if self._state is not None:
            self._window[:] = 0
            self._state[_COUNT] = 0


def warm() -> None:
    """Run every kernel once (numba compiles on the first call of each argument type)."""
    ring = BlockRing(8, 4, 2, 1, 2, 0.7)
    for block in ("abcdabcd", "abcdabce", "\U0001f600bcdabcd"):
        ring.overlap(block, True)
