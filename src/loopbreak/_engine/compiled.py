"""The compiled accelerator: numba kernels for the parts that cost most (block-repeat's
comparisons, the stall rule's 4-gram sets, the words of a tool result's fingerprint), run
in place of their pure-Python code where ``numba`` is installed (``pip install
loopbreak[fast]``).

The pure-Python code stays the reference: every kernel makes the same decisions at the
same character (``tests/engine/test_compiled.py`` feeds both the corpus and generated
streams). numba compiles a kernel on its first call (:func:`warm` makes them all; the str
hash check at import compiles that one) and keeps it on disk, next to this file or in its
user cache, so a machine compiles once; :mod:`loopbreak._engine.accelerator` imports this
module only when loading it pays.

The kernels hold the GIL (no ``nogil``): each runs for microseconds, and a thread that lets
the GIL go and takes it back thousands of times in a row keeps another thread that waits for
it waiting, each release starting its wait for a forced switch over. A session's first
request, replayed in a worker thread, calls the words kernel once a tool result (800 times
in a row): with the GIL let go, the proxy's event loop waited up to 30-55 ms at a time for
its turn (6-7 with the Python reading, and again now).
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


def _code_points(text: str) -> Any:
    """``text``'s code points as the kernels read them: ASCII text as its bytes (the
    kernels index bytes as they index an array), any other as 32-bit words (a lone
    surrogate as itself). Encoding to UTF-32 and wrapping it in an array cost ~1 us a call
    (block-repeat calls once a 128-character block); the ASCII bytes cost a fifth."""
    if text.isascii():
        return text.encode("ascii")
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


def _window_bits(keys: int) -> int:
    """Bits of the window filter's index for a window of at most ``keys`` keys."""
    bits = 8
    while bits < _WINDOW_MAX_BITS and (1 << bits) < _WINDOW_KEYS_PER_COUNTER * keys:
        bits += 1
    return bits


@numba.njit(cache=True)  # type: ignore[misc,unused-ignore]
def _mix(high: Any, low: Any) -> Any:
    # splitmix64's finalizer: every bit of both words reaches the low and the high bits
    # (shingles that differ only in their first character must not share a probe run).
    mixed = low + high * np.uint64(0x9E3779B97F4A7C15)
    mixed = (mixed ^ (mixed >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    mixed = (mixed ^ (mixed >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return mixed ^ (mixed >> np.uint64(31))


@numba.njit(cache=True)  # type: ignore[misc,unused-ignore]
def _key_words(points: Any, start: int, size: int) -> Any:
    """The two words of the key of the ``size`` characters from ``start``."""
    high = np.uint64(0)
    low = np.uint64(0)
    for k in range(size):
        if k < 3:
            high = (high << np.uint64(_BITS)) | np.uint64(points[start + k])
        else:
            low = (low << np.uint64(_BITS)) | np.uint64(points[start + k])
    return high, low


@numba.njit(cache=True)  # type: ignore[misc,unused-ignore]
def _key_points(high: Any, low: Any, size: int, points: Any, at: int) -> None:
    """Write the ``size`` code points a key's two words hold to ``points`` from ``at`` (the
    inverse of :func:`_key_words`)."""
    in_high = min(size, 3)
    mask = np.uint64((1 << _BITS) - 1)
    for k in range(in_high):
        points[at + k] = np.uint32((high >> np.uint64(_BITS * (in_high - 1 - k))) & mask)
    for k in range(size - in_high):
        points[at + in_high + k] = np.uint32(
            (low >> np.uint64(_BITS * (size - in_high - 1 - k))) & mask)


@numba.njit(cache=True)  # type: ignore[misc,unused-ignore]
def _slot(keys: Any, table: Any, high: Any, low: Any, mixed: Any) -> Any:
    """Where a key sits in a table of ``keys``' rows (plus one; 0 is empty), or the empty
    slot where it would go."""
    mask = table.shape[0] - 1
    at = np.int64(mixed & np.uint64(mask))
    while True:
        row = table[at]
        if row == 0:
            return at
        row -= 1
        if keys[row, _HASH] == mixed and keys[row, _HIGH] == high and keys[row, _LOW] == low:
            return at
        at = (at + 1) & mask


@numba.njit(cache=True)  # type: ignore[misc,unused-ignore]
def _holds(keys: Any, table: Any, key: Any) -> bool:
    """Whether a block's table holds ``key``."""
    return bool(table[_slot(keys, table, key[_HIGH], key[_LOW], key[_HASH])] != 0)


@numba.njit(cache=True)  # type: ignore[misc,unused-ignore]
def _shingle_keys(points: Any, size: int, step: int, keys: Any, table: Any) -> int:
    """Write the distinct shingle keys of ``points`` into ``keys`` and the table of their
    rows ``table``; return how many there are."""
    for at in range(table.shape[0]):  # explicit loops: numba's slice assignment is slower
        table[at] = 0
    n = 0
    for start in range(0, len(points) - size + 1, step):
        high, low = _key_words(points, start, size)
        mixed = _mix(high, low)
        at = _slot(keys, table, high, low, mixed)
        if table[at] == 0:
            keys[n, _HIGH] = high
            keys[n, _LOW] = low
            keys[n, _HASH] = mixed
            n += 1
            table[at] = n
    return n


@numba.njit(cache=True)  # type: ignore[misc,unused-ignore]
def _count_window(window: Any, keys: Any, size: int, change: int, shift: Any) -> None:
    """Add ``change`` to the window's counter of each of ``keys``' first ``size`` keys."""
    for i in range(size):
        window[np.int64(keys[i, _HASH] >> shift)] += change


@numba.njit(cache=True)  # type: ignore[misc,unused-ignore]
def block_overlap(points: Any, keys: Any, tables: Any, sizes: Any, window: Any,
                  state: Any, threshold: float, compare: bool) -> float:
    """block-repeat's comparison of one block with the blocks ``min_back`` to ``max_back``
    before it (the ring holds ``max_back`` and a scratch row), nearest first: the first
    Jaccard overlap of their shingle sets that reaches ``threshold``, else at most the
    best overlap, under the threshold (``compare`` false: 0.0). The block is then
    remembered in the ring."""
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
                need = ratio * (size_new + other_size) - _SLACK
                if most < need:
                    continue
                other_keys = keys[slot]
                other_table = tables[slot]
                # A block that has missed more keys than the threshold leaves room for is
                # given up: its overlap so far is below the threshold, and only an overlap
                # that reaches it decides (dissimilar blocks miss within a few keys).
                common = 0
                left = size_new
                for i in range(size_new):
                    left -= 1
                    if _holds(other_keys, other_table, fresh[i]):
                        common += 1
                    elif common + left < need:
                        break
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

    __slots__ = ("_keys", "_sizes", "_state", "_tables", "_threshold", "_window")

    def __init__(self, block_chars: int, size: int, step: int, min_back: int,
                 max_back: int, threshold: float) -> None:
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
        self._threshold = threshold

    def overlap(self, block: str, compare: bool) -> float:
        """See :func:`block_overlap`; ``block`` is remembered either way."""
        return float(block_overlap(_code_points(block), self._keys, self._tables, self._sizes,
                                   self._window, self._state, self._threshold, compare))

    def reset(self) -> None:
        self._window[:] = 0
        self._state[_COUNT] = 0


# --- gram sets: a call's distinct 4-grams, sampled past a cap by Python's own str hash ----

# A gram set past its cap keeps the grams whose str hash has ``level`` low zero bits
# (grams.GramSet). Python's str hash is SipHash (SipHash-1-3 from 3.11, 2-4 before) over
# the string's own storage, one, two or four bytes a character by its widest, keyed by the
# interpreter's secret: reproduced here, so a compiled set keeps the grams the pure one does.
_SIP_ROUNDS = {"siphash13": (1, 3), "siphash24": (2, 4)}
_KEY_COLUMNS = 4  # a gram's key: _HIGH, _LOW, _HASH (the table's) and its str hash
_STR_HASH = 3
_GRAMS_FIRST_ROWS = 256
# _G_HASHED: the rows whose str hash is filled in (the first ones). A set at level 0 keeps
# every gram whatever its hash, so a gram's hash is worked out only when the set first
# halves or is read at a higher level: most calls never hold 65,536 distinct grams, and
# hashing each new gram (~20 ns) was half the kernel's time on stdlib source.
_G_COUNT, _G_LEVEL, _G_CAP, _G_SIZE, _G_HASHED = range(5)


def _str_hash_secret() -> Any:
    """This interpreter's str hash key and rounds, as the kernels take them; ``None`` where
    the hash is not SipHash (or not SipHash as CPython computes it here)."""
    import ctypes
    import sys

    rounds = _SIP_ROUNDS.get(sys.hash_info.algorithm)
    if (rounds is None or sys.hash_info.cutoff or sys.byteorder != "little"
            or sys.implementation.name != "cpython"):
        return None
    try:
        key = (ctypes.c_uint64 * 2).in_dll(ctypes.pythonapi, "_Py_HashSecret")
    except (AttributeError, ValueError, OSError):
        return None
    return np.array([key[0], key[1], rounds[0], rounds[1]], dtype=np.uint64)


@numba.njit(cache=True)  # type: ignore[misc,unused-ignore]
def _rotl(x: Any, bits: int) -> Any:
    return (x << np.uint64(bits)) | (x >> np.uint64(64 - bits))


@numba.njit(cache=True)  # type: ignore[misc,unused-ignore]
def _sip_rounds(v0: Any, v1: Any, v2: Any, v3: Any, rounds: Any) -> Any:
    for _ in range(rounds):
        v0 += v1
        v2 += v3
        v1 = _rotl(v1, 13) ^ v0
        v3 = _rotl(v3, 16) ^ v2
        v0 = _rotl(v0, 32)
        v2 += v1
        v0 += v3
        v1 = _rotl(v1, 17) ^ v2
        v3 = _rotl(v3, 21) ^ v0
        v2 = _rotl(v2, 32)
    return v0, v1, v2, v3


@numba.njit(cache=True)  # type: ignore[misc,unused-ignore]
def _str_hash(points: Any, start: int, size: int, secret: Any) -> Any:
    """``hash(s)`` of the string of ``points[start:start + size]``, as a 64-bit word."""
    widest = np.uint32(0)
    for k in range(size):
        if points[start + k] > widest:
            widest = points[start + k]
    width = 1 if widest < 256 else (2 if widest < 65536 else 4)
    length = size * width
    v0 = secret[0] ^ np.uint64(0x736F6D6570736575)
    v1 = secret[1] ^ np.uint64(0x646F72616E646F6D)
    v2 = secret[0] ^ np.uint64(0x6C7967656E657261)
    v3 = secret[1] ^ np.uint64(0x7465646279746573)
    word = np.uint64(0)
    filled = 0
    for i in range(length):
        byte = (np.uint64(points[start + i // width]) >> np.uint64(8 * (i % width))) \
            & np.uint64(0xFF)
        word |= byte << np.uint64(8 * filled)
        filled += 1
        if filled == 8:
            v3 ^= word
            v0, v1, v2, v3 = _sip_rounds(v0, v1, v2, v3, secret[2])
            v0 ^= word
            word = np.uint64(0)
            filled = 0
    last = (np.uint64(length) << np.uint64(56)) | word
    v3 ^= last
    v0, v1, v2, v3 = _sip_rounds(v0, v1, v2, v3, secret[2])
    v0 ^= last
    v2 ^= np.uint64(0xFF)
    v0, v1, v2, v3 = _sip_rounds(v0, v1, v2, v3, secret[3])
    hashed = v0 ^ v1 ^ v2 ^ v3
    if hashed == np.uint64(0xFFFFFFFFFFFFFFFF):  # -1 is CPython's error value: -2 instead
        hashed = np.uint64(0xFFFFFFFFFFFFFFFE)
    return hashed


@numba.njit(cache=True)  # type: ignore[misc,unused-ignore]
def _gram_rebuild(keys: Any, count: int, table: Any) -> None:
    for at in range(table.shape[0]):
        table[at] = 0
    for row in range(count):
        at = _slot(keys, table, keys[row, _HIGH], keys[row, _LOW], keys[row, _HASH])
        table[at] = row + 1


@numba.njit(cache=True)  # type: ignore[misc,unused-ignore]
def gram_hash_rows(keys: Any, first: int, count: int, size: int, secret: Any) -> None:
    """Fill in the str hash of rows ``first`` to ``count``, from the code points their key
    words hold."""
    points = np.zeros(size, dtype=np.uint32)
    for row in range(first, count):
        _key_points(keys[row, _HIGH], keys[row, _LOW], size, points, 0)
        keys[row, _STR_HASH] = _str_hash(points, 0, size, secret)


@numba.njit(cache=True)  # type: ignore[misc,unused-ignore]
def gram_points(rows: Any, size: int) -> Any:
    """The code points of ``rows``' grams, one gram after another."""
    points = np.zeros(rows.shape[0] * size, dtype=np.uint32)
    for row in range(rows.shape[0]):
        _key_points(rows[row, _HIGH], rows[row, _LOW], size, points, row * size)
    return points


@numba.njit(cache=True)  # type: ignore[misc,unused-ignore]
def gram_take(points: Any, stride: int, keys: Any, table: Any, state: Any,
              secret: Any) -> None:
    """Add the ``size``-grams of ``points`` starting every ``stride`` characters that the
    sample keeps; past the cap, halve the sample (one more low zero bit of the str hash)
    until it fits. ``keys`` has a row for each gram the set can reach before it halves,
    the table at most half full."""
    count = state[_G_COUNT]
    level = state[_G_LEVEL]
    cap = state[_G_CAP]
    size = state[_G_SIZE]
    hashed_rows = state[_G_HASHED]
    for start in range(0, len(points) - size + 1, stride):
        high, low = _key_words(points, start, size)
        mixed = _mix(high, low)
        at = _slot(keys, table, high, low, mixed)
        if table[at] != 0:
            continue
        hashed = np.uint64(0)
        if level:
            hashed = _str_hash(points, start, size, secret)
            if hashed & ((np.uint64(1) << np.uint64(level)) - np.uint64(1)):
                continue
        keys[count, _HIGH] = high
        keys[count, _LOW] = low
        keys[count, _HASH] = mixed
        keys[count, _STR_HASH] = hashed
        count += 1
        table[at] = count
        if level:  # past level 0 every row is hashed: the set halved, or was made at a level
            hashed_rows = count
        if count > cap:
            gram_hash_rows(keys, hashed_rows, count, size, secret)
            while count > cap:
                level += 1
                sample = (np.uint64(1) << np.uint64(level)) - np.uint64(1)
                kept = 0
                for row in range(count):
                    if not keys[row, _STR_HASH] & sample:
                        for column in range(_KEY_COLUMNS):
                            keys[kept, column] = keys[row, column]
                        kept += 1
                count = kept
            hashed_rows = count
            _gram_rebuild(keys, count, table)
    state[_G_COUNT] = count
    state[_G_LEVEL] = level
    state[_G_HASHED] = hashed_rows


@numba.njit(cache=True)  # type: ignore[misc,unused-ignore]
def gram_common(keys: Any, count: int, other_keys: Any, other_count: int, other_table: Any,
                level: int) -> Any:
    """The sizes of both sets' samples at ``level`` and how many grams they share."""
    sample = (np.uint64(1) << np.uint64(level)) - np.uint64(1)
    mine = 0
    common = 0
    for row in range(count):
        if keys[row, _STR_HASH] & sample:
            continue
        mine += 1
        at = _slot(other_keys, other_table, keys[row, _HIGH], keys[row, _LOW], keys[row, _HASH])
        if other_table[at] != 0:
            common += 1
    theirs = 0
    for row in range(other_count):
        if not other_keys[row, _STR_HASH] & sample:
            theirs += 1
    return mine, theirs, common


class GramTable:
    """A compiled :class:`~loopbreak._engine.grams.GramSet`'s grams: exact keys (code
    points, as block-repeat's shingles), each with its str hash, in a hash table that grows
    with them; past ``cap`` keys, sampled by that hash as the pure set samples."""

    __slots__ = ("_keys", "_state", "_table")

    def __init__(self, size: int, cap: int) -> None:
        # Arrays are made by the first take: a call may hold no reasoning.
        self._keys: Any = None
        self._table: Any = None
        self._state = np.zeros(5, dtype=np.int64)
        self._state[_G_CAP] = cap
        self._state[_G_SIZE] = size

    @staticmethod
    def supports(size: int) -> bool:
        """Whether a set of ``size``-grams can run compiled here (its keys hold the gram and
        this interpreter's str hash is reproduced)."""
        return 1 <= size <= MAX_SHINGLE and STR_HASH_SECRET is not None

    @property
    def level(self) -> int:
        return int(self._state[_G_LEVEL])

    def __len__(self) -> int:
        return int(self._state[_G_COUNT])

    def take(self, text: str) -> None:
        """Add the grams of ``text`` (which starts with the last set's carry)."""
        grams = len(text) - int(self._state[_G_SIZE]) + 1
        if grams <= 0:
            return
        self._room(grams)
        gram_take(_code_points(text), 1, self._keys, self._table, self._state, STR_HASH_SECRET)

    def _room(self, grams: int) -> None:
        """Rows for ``grams`` more keys (the set never holds more than its cap and one)."""
        count, cap = int(self._state[_G_COUNT]), int(self._state[_G_CAP])
        need = min(count + grams, cap + 1)
        rows = 0 if self._keys is None else self._keys.shape[0]
        if need <= rows:
            return
        rows = min(max(need, 2 * rows, _GRAMS_FIRST_ROWS), cap + 1)
        keys = np.zeros((rows, _KEY_COLUMNS), dtype=np.uint64)
        if count:
            keys[:count] = self._keys[:count]
        self._keys = keys
        self._table = np.zeros(_table_slots(rows), dtype=np.int32)
        _gram_rebuild(keys, count, self._table)

    @classmethod
    def of(cls, grams: set[str], size: int, level: int) -> GramTable:
        """A table of ``grams`` (a pure set's sample at ``level``), to compare with."""
        return cls.holding(grams, size, max(len(grams), 1), level)

    @classmethod
    def holding(cls, grams: set[str], size: int, cap: int, level: int) -> GramTable:
        """A table of ``cap`` at ``level`` that holds ``grams`` (a sample at that level, at
        most ``cap`` of them)."""
        table = cls(size, cap)
        table._state[_G_LEVEL] = level
        if grams:
            table._room(len(grams))
            gram_take(_code_points("".join(grams)), size, table._keys, table._table,
                      table._state, STR_HASH_SECRET)
        return table

    def common(self, other: GramTable | PackedGramTable, level: int) -> tuple[int, int, int]:
        """Both samples' sizes at ``level`` (at least both levels) and the grams they share."""
        if isinstance(other, PackedGramTable):
            other = other.as_wide()
        self._hash_for(level)
        other._hash_for(level)
        if self._keys is None or other._keys is None:
            mine = 0 if self._keys is None else self._sample_size(level)
            theirs = 0 if other._keys is None else other._sample_size(level)
            return mine, theirs, 0
        mine, theirs, common = gram_common(self._keys, int(self._state[_G_COUNT]),
                                           other._keys, int(other._state[_G_COUNT]),
                                           other._table, level)
        return int(mine), int(theirs), int(common)

    def _hash_for(self, level: int) -> None:
        """Fill in the str hashes a sample at ``level`` reads (at level 0 it reads none)."""
        count = int(self._state[_G_COUNT])
        first = int(self._state[_G_HASHED])
        if level and first < count:
            gram_hash_rows(self._keys, first, count, int(self._state[_G_SIZE]),
                           STR_HASH_SECRET)
            self._state[_G_HASHED] = count

    def _sample_size(self, level: int) -> int:
        self._hash_for(level)
        count = int(self._state[_G_COUNT])
        mask = np.uint64((1 << level) - 1)
        return int(np.count_nonzero((self._keys[:count, _STR_HASH] & mask) == 0))

    def sample(self, level: int) -> set[str]:
        """The grams kept at ``level``, as strings."""
        if self._keys is None:
            return set()
        self._hash_for(level)
        size = int(self._state[_G_SIZE])
        rows = self._keys[: int(self._state[_G_COUNT])]
        rows = rows[(rows[:, _STR_HASH] & np.uint64((1 << level) - 1)) == 0]
        text = gram_points(rows, size).tobytes().decode("utf-32-le", "surrogatepass")
        return {text[i : i + size] for i in range(0, len(text), size)}


# --- packed gram sets: the same set for grams of at most four BMP characters -------------

# A gram of at most four characters of the Basic Multilingual Plane is its code points, 16
# bits each, in one 64-bit word: the word is the key and sits in its slot itself, so a gram
# costs one memory access, where GramTable's slot leads to a row of four words. A long
# call's set (47,000 grams of stdlib source: 1 MB of slots against GramTable's 3 MB of slots
# and rows) then misses the cache less, and pushes less of the rules' data out of it.
_PACK_BITS = 16
_PACK_MOST = 4
# A packed table's integers: grams kept (the all-NUL gram, whose word is the empty slot's,
# among them when _P_ZERO says so), level, cap, gram size, the index's shift, the shift
# that indexes its cache of grams seen.
_P_COUNT, _P_LEVEL, _P_CAP, _P_SIZE, _P_ZERO, _P_SHIFT, _P_SEEN_SHIFT = range(7)
# A packed table keeps the last gram seen in each slot of a small direct-mapped cache: a
# quarter of the table's slots, at most this many (128 kB, within a core's L2 cache). A gram
# met again costs one probe of the cache: past a few hundred kB of reasoning the table (2 MB
# at its cap) misses the L2 cache on most probes, and once sampled, every gram the sample
# leaves out is hashed again each time it comes back (a guard's cost per delta a megabyte
# into a call was 1.09-1.23 times its cost 10 kB in; with the cache, 1.03-1.14).
_SEEN_MOST = 1 << 14


def _packed_slots(keys: int) -> tuple[int, int]:
    """Slots for ``keys`` at a load of at most a half, and the shift that indexes them."""
    slots = _table_slots(keys)
    return slots, _index_shift(slots)


def _index_shift(slots: int) -> int:
    """How far ``_packed_index`` shifts a key's product to index a power of two of slots."""
    return 64 - (slots.bit_length() - 1)


@numba.njit(cache=True)  # type: ignore[misc,unused-ignore]
def _packed_index(key: Any, shift: int) -> Any:
    # Fibonacci hashing: the product's top bits depend on every bit of the key.
    return np.int64((key * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(shift))


@numba.njit(cache=True)  # type: ignore[misc,unused-ignore]
def _packed_find(table: Any, key: Any, shift: int) -> Any:
    """The slot holding ``key``, or the empty one where it would go."""
    mask = table.shape[0] - 1
    at = _packed_index(key, shift)
    while True:
        slot = table[at]
        if slot == key or slot == 0:
            return at
        at = (at + 1) & mask


@numba.njit(cache=True)  # type: ignore[misc,unused-ignore]
def _unpack(key: Any, size: int, points: Any, at: int) -> None:
    """Write the ``size`` code points ``key`` packs to ``points`` from ``at``."""
    for k in range(size):
        points[at + k] = np.uint32((key >> np.uint64(_PACK_BITS * (size - 1 - k)))
                                   & np.uint64(0xFFFF))


@numba.njit(cache=True)  # type: ignore[misc,unused-ignore]
def _packed_hash(key: Any, size: int, points: Any, secret: Any) -> Any:
    """The str hash of the gram ``key`` packs (``points``: scratch room for it)."""
    _unpack(key, size, points, 0)
    return _str_hash(points, 0, size, secret)


@numba.njit(cache=True)  # type: ignore[misc,unused-ignore]
def packed_rehash(old: Any, table: Any, shift: int) -> None:
    """Put every key of ``old`` into the empty ``table``."""
    for at in range(old.shape[0]):
        key = old[at]
        if key != 0:
            table[_packed_find(table, key, shift)] = key


@numba.njit(cache=True)  # type: ignore[misc,unused-ignore]
def packed_take(points: Any, stride: int, table: Any, state: Any, secret: Any,
                seen: Any) -> None:
    """GramTable's take (gram_take) for BMP ``points`` in a packed table: the grams starting
    every ``stride`` characters that the sample keeps; past the cap, the sample halves
    until it fits. ``table`` has room for every gram at a load of at most a half; ``seen``
    is the table's cache of grams seen (zeros: none)."""
    count = state[_P_COUNT]
    level = state[_P_LEVEL]
    cap = state[_P_CAP]
    size = state[_P_SIZE]
    shift = state[_P_SHIFT]
    seen_shift = state[_P_SEEN_SHIFT]
    mask = table.shape[0] - 1
    sample = (np.uint64(1) << np.uint64(level)) - np.uint64(1)
    # A key keeps its last ``size`` characters: a word of four loses the oldest as it shifts.
    full = np.uint64(0xFFFFFFFFFFFFFFFF) if size == _PACK_MOST else \
        (np.uint64(1) << np.uint64(_PACK_BITS * size)) - np.uint64(1)
    key = np.uint64(0)
    if stride == 1:
        for k in range(min(size - 1, len(points))):
            key = (key << np.uint64(_PACK_BITS)) | np.uint64(points[k])
    for start in range(0, len(points) - size + 1, stride):
        # Most grams of text came before: the loop finds them in one probe or two and
        # does nothing more (a new one is hashed and sampled, the all-NUL one flagged).
        if stride == 1:
            key = ((key << np.uint64(_PACK_BITS)) | np.uint64(points[start + size - 1])) & full
        else:
            key = np.uint64(0)
            for k in range(size):
                key = (key << np.uint64(_PACK_BITS)) | np.uint64(points[start + k])
        if key == 0:
            if state[_P_ZERO] or (level and _str_hash(points, start, size, secret) & sample):
                continue
            state[_P_ZERO] = 1
        else:
            # A gram seen before changes nothing now: it is in the table, or the sample
            # leaves it out (it did then, or a halving since dropped it: a level only rises).
            cached = _packed_index(key, seen_shift)
            if seen[cached] == key:
                continue
            seen[cached] = key
            at = _packed_index(key, shift)
            slot = table[at]
            while slot != key and slot != 0:
                at = (at + 1) & mask
                slot = table[at]
            if slot != 0 or (level and _str_hash(points, start, size, secret) & sample):
                continue
            table[at] = key
        count += 1
        if count > cap:
            count, level = _packed_halve(table, state, count, level, size, shift, secret)
            sample = (np.uint64(1) << np.uint64(level)) - np.uint64(1)
    state[_P_COUNT] = count
    state[_P_LEVEL] = level


@numba.njit(cache=True)  # type: ignore[misc,unused-ignore]
def _packed_halve(table: Any, state: Any, count: int, level: int, size: int, shift: int,
                  secret: Any) -> Any:
    """Halve the sample (one more low zero bit of the str hash) until it fits the cap;
    the count and level after."""
    scratch = np.zeros(size, dtype=np.uint32)
    while count > state[_P_CAP]:
        level += 1
        sample = (np.uint64(1) << np.uint64(level)) - np.uint64(1)
        kept = np.zeros(count, dtype=np.uint64)
        left = 0
        for at in range(table.shape[0]):
            old = table[at]
            if old != 0:
                table[at] = 0
                if not _packed_hash(old, size, scratch, secret) & sample:
                    kept[left] = old
                    left += 1
        for row in range(left):
            table[_packed_find(table, kept[row], shift)] = kept[row]
        if state[_P_ZERO] and _packed_hash(np.uint64(0), size, scratch, secret) & sample:
            state[_P_ZERO] = 0
        count = left + state[_P_ZERO]
    return count, level


@numba.njit(cache=True)  # type: ignore[misc,unused-ignore]
def _packed_sample_size(table: Any, zero: int, level: int, size: int, secret: Any) -> int:
    sample = (np.uint64(1) << np.uint64(level)) - np.uint64(1)
    scratch = np.zeros(size, dtype=np.uint32)
    kept = 0
    for at in range(table.shape[0]):
        key = table[at]
        if key != 0 and not _packed_hash(key, size, scratch, secret) & sample:
            kept += 1
    if zero and not _packed_hash(np.uint64(0), size, scratch, secret) & sample:
        kept += 1
    return kept


@numba.njit(cache=True)  # type: ignore[misc,unused-ignore]
def packed_common(table: Any, zero: int, other: Any, other_zero: int, other_shift: int,
                  level: int, size: int, secret: Any) -> Any:
    """How many of the grams of ``table`` kept at ``level`` there are, and how many of them
    ``other`` holds (every gram of ``other`` is kept at its level, at most ``level``)."""
    sample = (np.uint64(1) << np.uint64(level)) - np.uint64(1)
    scratch = np.zeros(size, dtype=np.uint32)
    mine = 0
    common = 0
    for at in range(table.shape[0]):
        key = table[at]
        if key == 0 or (level and _packed_hash(key, size, scratch, secret) & sample):
            continue
        mine += 1
        if other[_packed_find(other, key, other_shift)] != 0:
            common += 1
    if zero and not (level and _packed_hash(np.uint64(0), size, scratch, secret) & sample):
        mine += 1
        if other_zero:
            common += 1
    return mine, common


@numba.njit(cache=True)  # type: ignore[misc,unused-ignore]
def packed_points(table: Any, zero: int, level: int, size: int, secret: Any) -> Any:
    """The code points of the grams kept at ``level``, one gram after another."""
    sample = (np.uint64(1) << np.uint64(level)) - np.uint64(1)
    scratch = np.zeros(size, dtype=np.uint32)
    points = np.zeros((table.shape[0] + 1) * size, dtype=np.uint32)
    n = 0
    for at in range(table.shape[0]):
        key = table[at]
        if key == 0 or (level and _packed_hash(key, size, scratch, secret) & sample):
            continue
        _unpack(key, size, points, n)
        n += size
    if zero and not (level and _packed_hash(np.uint64(0), size, scratch, secret) & sample):
        n += size  # the all-NUL gram: zeros already
    return points[:n]


def _past_bmp(points: Any) -> bool:
    """Whether code points from ``_code_points`` hold one past the BMP (ASCII bytes never)."""
    return not isinstance(points, bytes) and int(points.max()) > 0xFFFF


class PackedGramTable:
    """A :class:`GramTable` for grams of at most four characters, packed in one word each
    while every character is in the Basic Multilingual Plane: the same grams, sampled by
    the same str hash. The first character past it (an emoji) turns the table into a
    GramTable holding the same grams, which takes everything after."""

    __slots__ = ("_seen", "_state", "_table", "_wide")

    def __init__(self, size: int, cap: int) -> None:
        self._table: Any = None  # made by the first take: a call may hold no reasoning
        self._seen: Any = None  # made with the table, and anew with each larger one
        self._wide: GramTable | None = None
        self._state = np.zeros(7, dtype=np.int64)
        self._state[_P_CAP] = cap
        self._state[_P_SIZE] = size

    @staticmethod
    def supports(size: int) -> bool:
        """Whether a set of ``size``-grams can run packed here."""
        return 1 <= size <= _PACK_MOST and STR_HASH_SECRET is not None

    @property
    def level(self) -> int:
        return self._wide.level if self._wide is not None else int(self._state[_P_LEVEL])

    def __len__(self) -> int:
        return len(self._wide) if self._wide is not None else int(self._state[_P_COUNT])

    def take(self, text: str) -> None:
        """Add the grams of ``text`` (which starts with the last set's carry)."""
        if self._wide is not None:
            self._wide.take(text)
            return
        grams = len(text) - int(self._state[_P_SIZE]) + 1
        if grams <= 0:
            return
        points = _code_points(text)
        if _past_bmp(points):
            self._wide = self.as_wide()
            self._table = None
            self._wide.take(text)
            return
        self._room(grams)
        packed_take(points, 1, self._table, self._state, STR_HASH_SECRET, self._seen)

    def _room(self, grams: int) -> None:
        """Slots for ``grams`` more keys (the set never holds more than its cap and one)."""
        need = min(int(self._state[_P_COUNT]) + grams, int(self._state[_P_CAP]) + 1)
        # A table is a power of two of at least 8 slots: at least twice ``need`` is room.
        if self._table is not None and self._table.shape[0] >= 2 * need:
            return
        slots, shift = _packed_slots(need)
        table = np.zeros(slots, dtype=np.uint64)
        if self._table is not None:
            packed_rehash(self._table, table, shift)
        self._table = table
        self._state[_P_SHIFT] = shift
        seen = max(8, min(_SEEN_MOST, slots // 4))
        self._seen = np.zeros(seen, dtype=np.uint64)
        self._state[_P_SEEN_SHIFT] = _index_shift(seen)

    def as_wide(self) -> GramTable:
        """A GramTable holding these grams at this level, with this cap."""
        if self._wide is not None:
            return self._wide
        return GramTable.holding(self.sample(self.level), int(self._state[_P_SIZE]),
                                 int(self._state[_P_CAP]), self.level)

    @classmethod
    def of(cls, grams: set[str], size: int, level: int) -> PackedGramTable:
        """A table of ``grams`` (a pure set's sample at ``level``), to compare with."""
        table = cls(size, max(len(grams), 1))
        table._state[_P_LEVEL] = level
        if grams:
            points = _code_points("".join(grams))
            if _past_bmp(points):
                table._wide = GramTable.of(grams, size, level)
            else:
                table._room(len(grams))
                packed_take(points, size, table._table, table._state, STR_HASH_SECRET,
                            table._seen)
        return table

    def common(self, other: GramTable | PackedGramTable, level: int) -> tuple[int, int, int]:
        """Both samples' sizes at ``level`` (at least both levels) and the grams they share."""
        if self._wide is not None or isinstance(other, GramTable) or other._wide is not None:
            return self.as_wide().common(other, level)
        if self._table is None or other._table is None:
            return self._sample_size(level), other._sample_size(level), 0
        size = int(self._state[_P_SIZE])
        mine, common = packed_common(self._table, int(self._state[_P_ZERO]), other._table,
                                     int(other._state[_P_ZERO]), int(other._state[_P_SHIFT]),
                                     level, size, STR_HASH_SECRET)
        return int(mine), other._sample_size(level), int(common)

    def _sample_size(self, level: int) -> int:
        if self._table is None:
            return 0
        if not level:
            return int(self._state[_P_COUNT])
        return int(_packed_sample_size(self._table, int(self._state[_P_ZERO]), level,
                                       int(self._state[_P_SIZE]), STR_HASH_SECRET))

    def sample(self, level: int) -> set[str]:
        """The grams kept at ``level``, as strings."""
        if self._wide is not None:
            return self._wide.sample(level)
        if self._table is None:
            return set()
        size = int(self._state[_P_SIZE])
        points = packed_points(self._table, int(self._state[_P_ZERO]), level, size,
                               STR_HASH_SECRET)
        text = points.tobytes().decode("utf-32-le", "surrogatepass")
        return {text[i : i + size] for i in range(0, len(text), size)}


# Each byte's class for _ascii_words: 1 str.split's ASCII whitespace (\t \n \v \f \r, the
# four separators, the space), 2 a hex digit, 0 any other.
_ASCII_CLASS = np.array([1 if 9 <= b <= 13 or 28 <= b <= 32 else
                         2 if chr(b) in "0123456789abcdefABCDEF" else 0 for b in range(256)],
                        dtype=np.uint8)


@numba.njit(cache=True)  # type: ignore[misc,unused-ignore]
def _ascii_words(raw: Any, out: Any, hex_run: int, classes: Any) -> int:
    """Write the words of ASCII ``raw`` to ``out``, one space between them (what
    ``" ".join(text.split())`` makes); return the bytes written, or -1 as soon as ``raw``
    holds ``0x`` or ``hex_run`` hex digits in a row (0: never)."""
    # Without a branch on a byte's class: word lengths and hex letters fall at random in
    # tool output, and a mispredicted branch costs more than the byte (2.4 -> 1.7 ns a byte
    # over the bench history's results).
    # A whitespace run writes one space (after a word only); the next byte writes over it
    # unless it starts a word.
    check = 1 if hex_run else 0
    written = 0
    digits = 0
    blank = 1  # as if a blank came before: no space before the first word
    last = 0
    for at in range(len(raw)):
        byte = raw[at]
        kind = classes[byte]
        now_blank = kind & 1
        out[written] = byte + now_blank * (32 - byte)
        written += 1 - now_blank * blank
        blank = now_blank
        digits = (digits + 1) * (kind >> 1)
        if check & ((digits >= hex_run) | ((byte == 120) & (last == 48))):
            return -1
        last = byte
    return written - (blank & (written > 0))


def ascii_words(text: str, hex_run: int) -> str | None:
    """``" ".join(text.split())`` of ASCII ``text``, or ``None`` when it holds ``0x`` or
    ``hex_run`` hex digits in a row (``may_hold_hex_run``: ids to mask first; 0: never). A
    tool result's fingerprint reads its words: ~2.4 ns a character here, call included,
    ~9 in Python (``str.split`` makes an object of every word, the hex check encodes and
    translates); a session's first request to a proxy reads 800 results, 1.2 MB."""
    raw = text.encode("ascii")
    out = np.empty(len(raw), dtype=np.uint8)
    written = _ascii_words(raw, out, hex_run, _ASCII_CLASS)
    if written < 0:
        return None
    return out[:written].tobytes().decode("ascii")


# --- the letters of a language sample ----------------------------------------------------
# Each BMP code point's kind for _letter_counts: bit 0 a letter (str.isalpha), bit 1 a CJK
# letter (``notices.letter_counts``' blocks), as this interpreter's Unicode tables say.
def _letter_kinds() -> Any:
    from loopbreak._engine.notices import CJK_BLOCKS

    kinds = np.fromiter((chr(code).isalpha() for code in range(0x10000)), dtype=np.uint8,
                        count=0x10000)
    for low, high in CJK_BLOCKS:
        kinds[low:high + 1] *= 3
    return kinds


_LETTER_KINDS = _letter_kinds()
_SURROGATES = (0xD800, 0xDFFF)


@numba.njit(cache=True)  # type: ignore[misc,unused-ignore]
def _letter_counts(units: Any, kinds: Any) -> Any:
    """The CJK letters and letters among UTF-16 ``units``; (-1, -1) at a surrogate (a
    character past the BMP, or a lone one: read in Python)."""
    cjk = 0
    letters = 0
    for at in range(len(units)):
        unit = units[at]
        if _SURROGATES[0] <= unit <= _SURROGATES[1]:
            return -1, -1
        kind = kinds[unit]
        letters += kind & 1
        cjk += kind >> 1
    return cjk, letters


def letter_counts(text: str) -> tuple[int, int] | None:
    """``notices.letter_counts`` (the reference) of ``text``, or ``None`` when it holds a
    character past the BMP. A session guard counts every piece of the conversation it is
    shown, and a replayed history shows it one a message: ~3 ns a character here, the call
    included, ~20-40 in Python for CJK text (two regular expressions and a run's
    ``isalpha``)."""
    units = np.frombuffer(text.encode("utf-16-le", "surrogatepass"), dtype=np.uint16)
    cjk, letters = _letter_counts(units, _LETTER_KINDS)
    return None if cjk < 0 else (int(cjk), int(letters))


# --- cycle's candidate listing ------------------------------------------------------------
# The shifts at which a batch's anchor recurs, as ``CycleDetector._recurrences`` lists them
# (the reference), over the buffer's code points: an ASCII buffer's bytes, any other's
# 32-bit words kept in step with it (:class:`CodePoints`). Positions are the buffer's, and the
# kernels read only where the Python reads: inside it.

_NEWLINE = 10
_NO_ROOM = -1  # the periods' array is too short (never: each is listed once)


@numba.njit(cache=True)  # type: ignore[misc,unused-ignore]
def _anchor_shifts(points: Any, rel: int, g: int) -> Any:
    """For each low byte of a code point, how far back the search for the anchor at ``rel``
    may move when the text under the anchor's first character has it: the least ``k`` >= 1
    at which the anchor holds a character with that low byte, or ``g`` (a backward Horspool
    table; an anchor in a flood of spaces is then passed over a cell's text ``g`` characters
    at a time). Characters that share a low byte share the least: a shorter move, never a
    match passed over."""
    shifts = np.full(256, g, dtype=np.int64)
    for k in range(g - 1, 0, -1):
        shifts[points[rel + k] & 255] = k
    return shifts


@numba.njit(cache=True)  # type: ignore[misc,unused-ignore]
def _anchor_rfind(points: Any, n: int, shifts: Any, rel: int, g: int, low: int,
                  end: int) -> int:
    """``buf.rfind(buf[rel : rel + g], low, end)`` for ``low``, ``end`` >= 0 (``shifts``:
    :func:`_anchor_shifts` of the anchor)."""
    if end > n:
        end = n
    q = end - g
    while q >= low:
        k = 0
        while k < g and points[q + k] == points[rel + k]:
            k += 1
        if k == g:
            return q
        q -= shifts[points[q] & 255]
    return -1


@numba.njit(cache=True)  # type: ignore[misc,unused-ignore]
def _run_back(points: Any, end: int, period: int, cap: int) -> int:
    """``_match_run_back``: characters before ``end`` equal to the one ``period`` before."""
    high = min(cap, end - period)
    run = 0
    while run < high and points[end - 1 - run] == points[end - 1 - run - period]:
        run += 1
    return run


@numba.njit(cache=True)  # type: ignore[misc,unused-ignore]
def _repeats(points: Any, start: int, stop: int, period: int) -> bool:
    """``buf[start:stop] == buf[start - period : stop - period]`` (``stop`` within the
    buffer, ``start - period`` >= 0)."""
    for i in range(start, stop):  # noqa: SIM110 (numba compiles no generator into all())
        if points[i] != points[i - period]:
            return False
    return True


@numba.njit(cache=True)  # type: ignore[misc,unused-ignore]
def _no_pool(points: Any, n: int, shortest: int, longest: int, batch_start: int,
             batch_end: int, pool_lines: int) -> bool:
    """``CycleDetector._no_pool``."""
    if batch_end - shortest > n:
        return False
    # Counted to the end, not stopped at ``pool_lines``: a loop without an exit is read many
    # characters at a time (most of the range holds no line break at all).
    lines = 0
    for i in range(max(0, batch_start - 2 * longest), min(n, max(0, batch_end - shortest))):
        lines += points[i] == _NEWLINE
    return lines < pool_lines


@numba.njit(cache=True)  # type: ignore[misc,unused-ignore]
def _repeats_back(points: Any, n: int, period: int, batch_start: int, batch_end: int,
                  lineless: bool, least_needs: Any, lineless_needs: Any,
                  pool_lines: int) -> bool:
    """``CycleDetector._repeats_back``, reading each character once: where the pool's
    stretch repeats, a unit's own longer one is compared only where it reaches further."""
    need = least_needs[period - 1]
    c = batch_end - need
    if c < period:
        return False
    lineless_need = lineless_needs[period - 1]
    checked = batch_start  # from here to the batch's start repeats (nothing yet)
    if need != lineless_need:
        if c < batch_start:
            if points[c] != points[c - period] or not _repeats(points, c, batch_start, period):
                return False
            checked = c
        if lineless or _no_pool(points, n, period, period, batch_start, batch_end, pool_lines):
            need = lineless_need
        c = batch_end - need
    return c >= period and points[c] == points[c - period] and _repeats(
        points, c, checked if c <= checked else batch_start, period)


@numba.njit(cache=True)  # type: ignore[misc,unused-ignore]
def _older_floods(points: Any, n: int, out: Any, count: int, rel: int, g: int, half: int,
                  step: int, low: int, end: int, nearest: int, broken: int,
                  least_needs: Any, lineless_needs: Any, least_from: Any,
                  lineless_from: Any, pool_lines: int) -> int:
    """``CycleDetector._older_floods``: the count of ``out`` after it (or ``_NO_ROOM``)."""
    batch_end = rel + half
    batch_start = batch_end - step + 1
    must_repeat = batch_end - broken
    mark = points[broken]
    shifts = _anchor_shifts(points, rel, g)
    reaching_pool = np.searchsorted(least_from, must_repeat) + 1
    reaching_lineless = np.searchsorted(lineless_from, must_repeat) + 1
    while end - low >= g:
        q = _anchor_rfind(points, n, shifts, rel, g, low, end)
        if q < 0:
            return count
        older = _run_back(points, q + g, nearest, q + g - low)
        first = q - (q - max(low, q + g - older - nearest)) // nearest * nearest
        shortest = rel - q
        longest = rel - first
        lineless = reaching_lineless < reaching_pool and _no_pool(
            points, n, shortest, longest, batch_start, batch_end, pool_lines)
        reaching = reaching_lineless if lineless else reaching_pool
        for period in range(shortest, min(longest + 1, reaching), nearest):
            if _repeats_back(points, n, period, batch_start, batch_end, lineless,
                             least_needs, lineless_needs, pool_lines):
                if count == out.shape[0]:
                    return _NO_ROOM
                out[count] = period
                count += 1
        lowest = max(shortest, reaching)
        x = broken - lowest + 1
        floor = max(0, broken - longest)
        while longest >= lowest and x > 0:
            x -= 1
            while x >= floor and points[x] != mark:
                x -= 1
            if x < floor:
                break
            period = broken - x
            if (period - shortest) % nearest == 0 and _repeats_back(
                    points, n, period, batch_start, batch_end, lineless, least_needs,
                    lineless_needs, pool_lines):
                if count == out.shape[0]:
                    return _NO_ROOM
                out[count] = period
                count += 1
        end = first - 1 + g
    return count


@numba.njit(cache=True)  # type: ignore[misc,unused-ignore]
def cycle_flood(points: Any, rel: int, g: int, half: int, step: int, shortest: int,
                longest: int, q: int, least_needs: Any, lineless_needs: Any, least_from: Any,
                lineless_from: Any, pool_lines: int) -> Any:
    """The rest of ``CycleDetector._recurrences`` once the anchor at ``rel`` was found to
    repeat within itself at ``q`` (its flood branch): the periods, how many (``_NO_ROOM``:
    too many for the array), and how far they are the nearest's multiples."""
    n = len(points)
    out = np.empty(longest + 1, dtype=np.int64)
    low = max(0, rel - longest)
    end = rel - shortest + g
    count = 0
    nearest = rel - q
    run = _run_back(points, rel + g, nearest, rel + g - low)
    start = max(low, rel + g - run - nearest)
    upto = (rel - start) // nearest * nearest
    first = -(-shortest // nearest) * nearest
    for period in range(first, upto + 1, nearest):
        if count == out.shape[0]:
            return out, _NO_ROOM, 0
        out[count] = period
        count += 1
    if count == 0:
        upto = 0
    end = min(end, start - 1 + g)
    if end - low >= g:
        count = _older_floods(points, n, out, count, rel, g, half, step, low, end, nearest,
                              start - 1, least_needs, lineless_needs, least_from,
                              lineless_from, pool_lines)
    return out, count, upto


@numba.njit(cache=True)  # type: ignore[misc,unused-ignore]
def cycle_long_kept(points: Any, periods: Any, rel: int, g: int, batch_start: int,
                    batch_end: int, least_needs: Any, lineless_needs: Any,
                    pool_lines: int) -> Any:
    """Those of ``periods`` at which the anchor at ``rel`` recurs and whose windows repeat
    back (``CycleDetector._candidate_periods``' filter of the long periods), in order."""
    n = len(points)
    kept = np.empty(periods.shape[0], dtype=np.int64)
    count = 0
    for i in range(periods.shape[0]):
        period = periods[i]
        at = rel - period
        if at < 0:  # as str.startswith reads a negative start
            at = max(0, at + n)
        if at + g > n or not _repeats(points, rel, rel + g, rel - at):
            continue
        if _repeats_back(points, n, period, batch_start, batch_end, False, least_needs,
                         lineless_needs, pool_lines):
            kept[count] = period
            count += 1
    return kept[:count]


class CycleTables:
    """A cycle setting's least runs by period, as arrays for the kernels."""

    __slots__ = ("least_from", "least_needs", "lineless_from", "lineless_needs")

    def __init__(self, least_needs: list[int], lineless_needs: list[int],
                 least_from: list[int], lineless_from: list[int]) -> None:
        self.least_needs = np.array(least_needs, dtype=np.int64)
        self.lineless_needs = np.array(lineless_needs, dtype=np.int64)
        self.least_from = np.array(least_from, dtype=np.int64)
        self.lineless_from = np.array(lineless_from, dtype=np.int64)


_CYCLE_TABLES: dict[int, tuple[list[int], CycleTables]] = {}


def cycle_tables(least_needs: list[int], lineless_needs: list[int], least_from: list[int],
                 lineless_from: list[int]) -> CycleTables:
    """The arrays of one setting, found by the list its detectors share (held here, so its
    id stays its own): a detector is built for every call, the arrays once."""
    found = _CYCLE_TABLES.get(id(least_needs))
    if found is not None and found[0] is least_needs:
        return found[1]
    if len(_CYCLE_TABLES) >= 16:  # a sweep over many settings
        _CYCLE_TABLES.clear()
    tables = CycleTables(least_needs, lineless_needs, least_from, lineless_from)
    _CYCLE_TABLES[id(least_needs)] = (least_needs, tables)
    return tables


class CodePoints:
    """The code points of a detector's buffer, for the cycle kernels: an ASCII buffer's are
    its bytes, encoded afresh each call (a copy of ~10 kB, ~0.7 us); any other's are 32-bit
    words kept in step with the buffer (the text it gained since the last call encoded, the
    part it forgot dropped: encoding the whole buffer anew costs ~9 us). Made only once a
    buffer past ASCII is listed, and then at most ~85 kB a rule (its buffer's ~17,000 at the
    defaults, and a quarter more to grow into)."""

    __slots__ = ("base", "points", "size")

    def __init__(self) -> None:
        self.points = np.zeros(0, dtype=np.uint32)
        self.base = 0
        self.size = 0  # characters from ``base`` on that ``points`` holds

    def reset(self) -> None:
        """Forget the buffer (a rule starting over: its positions start again at 0)."""
        self.size = 0

    def of(self, buf: str, base: int) -> Any:
        """The code points of ``buf``, which starts at stream position ``base`` and only
        grows at its end or loses its start since the last call."""
        if buf.isascii():
            # The words kept stay right meanwhile: a stream position's character never
            # changes (until ``reset``).
            return np.frombuffer(buf.encode("ascii"), dtype=np.uint8)
        points, size, n = self.points, self.size, len(buf)
        cut = base - self.base
        if size and 0 <= cut < size and n >= size - cut:
            if cut:
                size -= cut
                points[:size] = points[cut : cut + size]
        else:
            size = 0
        if n > points.shape[0]:
            grown = np.zeros(n + n // 4, dtype=np.uint32)
            grown[:size] = points[:size]
            self.points = points = grown
        if n > size:
            points[size:n] = np.frombuffer(
                buf[size:].encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        self.base, self.size = base, n
        return points[:n]


def cycle_flood_periods(points: Any, rel: int, g: int, half: int, step: int, shortest: int,
                        longest: int, q: int, tables: CycleTables,
                        pool_lines: int) -> tuple[list[int], int] | None:
    """:func:`cycle_flood` over a buffer's code points (:meth:`CodePoints.of`): the periods
    and how far they are the nearest's multiples (``None``: not listed here)."""
    out, count, upto = cycle_flood(points, rel, g, half, step, shortest, longest, q,
                                   tables.least_needs, tables.lineless_needs,
                                   tables.least_from, tables.lineless_from, pool_lines)
    if count < 0:
        return None
    return out[:count].tolist(), upto


def cycle_long_periods(points: Any, periods: list[int], rel: int, g: int, batch_start: int,
                       batch_end: int, tables: CycleTables, pool_lines: int) -> list[int]:
    """:func:`cycle_long_kept` over a buffer's code points."""
    kept = cycle_long_kept(points, np.array(periods, dtype=np.int64), rel, g, batch_start,
                           batch_end, tables.least_needs, tables.lineless_needs, pool_lines)
    return kept.tolist()  # type: ignore[no-any-return]


def _checked_secret() -> Any:
    """The str hash secret, if the kernel hashes strings as this interpreter does (checked
    on strings of every storage width, a lone surrogate and a hash that could be -1)."""
    secret = _str_hash_secret()
    if secret is None:
        return None
    samples = ["abcd", "h\xe9ll", "\u597d\u3002\u6267\u884c", "\U0001f600bc", "x\ud800y ",
               "a\u0100bc", "\x00\x00\x00\x00", "abcdef", "ab"]
    for text in samples:
        if int(_str_hash(_code_points(text), 0, len(text), secret)) != hash(text) & ((1 << 64) - 1):
            return None
    return secret


STR_HASH_SECRET = _checked_secret()
"""This interpreter's str hash key and rounds, or ``None``: gram sets then stay in Python."""


def warm() -> None:
    """Run every kernel once (numba compiles on the first call of each argument type)."""
    ring = BlockRing(8, 4, 2, 1, 2, 0.7)
    for block in ("abcdabcd", "abcdabce", "\U0001f600bcdabcd"):
        ring.overlap(block, True)
    if STR_HASH_SECRET is not None:
        grams = GramTable(4, 2)
        grams.take("abcdefgh\U0001f600")
        grams.take("ijklmnop")  # ASCII text reaches the kernels as bytes: another type
        grams.common(GramTable.of({"abcd"}, 4, grams.level), grams.level)
        grams.sample(0)
        unhashed = GramTable(4, 64)  # grams hashed only when read at a higher level
        unhashed.take("abcdefgh")
        unhashed.sample(1)
        for size in (4, 2):
            packed = PackedGramTable(size, 2)
            packed.take("abcdefgh")  # past its cap: halved
            packed.take("ij\u4e00klmn\x00\x00\x00\x00")
            packed.common(PackedGramTable.of({"abcd"[:size]}, size, packed.level), packed.level)
            packed.common(GramTable.of({"\U0001f600bcd"[:size]}, size, packed.level),
                          packed.level)  # a packed set against a wide one
            packed.sample(packed.level)
            packed.take("\U0001f600bcd")  # turned wide
    ascii_words("a  b\tc", 8)
    ascii_words("", 0)
    letter_counts("\u4e00b\u3002")
    letter_counts("\U0001f600")
    needs = [2, 3, 4, 5, 6, 7, 8, 9]
    tables = cycle_tables(needs, needs, needs, needs)
    for buf in ("ab\n" + " " * 20 + "cd" + " " * 20, "\u597d\n" + " " * 20 + "cd" + " " * 21):
        points = CodePoints().of(buf, 0)  # an ASCII buffer's bytes, another's words
        cycle_flood_periods(points, 40, 4, 4, 2, 1, 8, 39, tables, 3)
        cycle_long_periods(points, [9, 10], 30, 4, 34, 35, tables, 3)
