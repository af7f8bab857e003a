"""char-flood: one character makes nearly all of the text, its runs broken by a little else.

``char-run`` needs an unbroken run. Real floods are broken: ``るるる…<unk|LLM-jp>るるる``,
``ыыы…<unk>ыыы``, backspaces between leaked control tokens, a column of ``1``, ``11``,
``12`` lines that a small chat model wrote until its budget ran out. Every run stays
below ``char_run.max_run`` and ``degeneracy`` lets them through its gate (letters and
digits are meaning to it), so no other rule sees them.

The stream is cut into disjoint blocks of ``block_chars`` (``blocks.BlockCutter``). A
block counts when one character that is not space, does not draw layout (dashes,
dots, box drawing: ``charclass.LAYOUT_CHARS``) and is not an ASCII letter (code spells
test data with them) makes at least ``min_share`` of its
non-space characters (leaked control tokens taken out, whole or cut by the block's
edges), and non-space is at least half the block; ``streak`` such blocks
in a row, the same character in each, trip. A cut lands within ``streak`` blocks and
one more of the flood's start.

Clean text never holds one character at that share for long: a padded table is
layout, ``'a' * 200`` spelled out is one run, a hex dump or a number spreads over
several digits.
"""

from __future__ import annotations

import re
import string

from loopbreak._config import CharFloodConfig
from loopbreak._engine.blocks import BlockCutter
from loopbreak._engine.charclass import CONTROL_TOKEN, LAYOUT_CHARS
from loopbreak._engine.trip import Channel, Trip

CHAR_FLOOD = "char-flood"
# Every whitespace character (none lies above U+3000).
_SPACES = frozenset(c for c in map(chr, range(0x3001)) if c.isspace())
# Space, layout, and ASCII letters: code spells test data and padding with them (CPython's
# test_quopri holds lines of b'zzzz…' broken by ``=``); an unbroken run is char-run's.
_NOT_FILLERS = LAYOUT_CHARS | frozenset(string.ascii_letters) | _SPACES
# The ASCII bytes that cannot fill a block (space, layout, letters): deleted, what is left
# bounds a filler's count, read in C.
_ASCII_NOT_FILLERS = bytes(sorted(ord(c) for c in _NOT_FILLERS if ord(c) < 128))
# The pieces of a control token that a block's edges cut off.
_TOKEN_PIECE = re.compile(r"^[^<>\s]{1,45}>|<[^<>\s]{0,45}$")


class CharFloodDetector:
    """Blocks in a row that one character fills, counted across deltas."""

    def __init__(self, config: CharFloodConfig | None = None,
                 channel: Channel = "reasoning") -> None:
        cfg = config or CharFloodConfig()
        self._channel: Channel = channel
        self._share = cfg.min_share
        self._streak = cfg.streak
        self._cutter = BlockCutter(cfg.block_chars)
        # A block with more distinct characters than this cannot be filled by one.
        self._max_distinct = int((1.0 - cfg.min_share) * cfg.block_chars) + 4
        self._char = ""
        self._run = 0
        self._settle_quiet()

    @property
    def consumed(self) -> int:
        return self._cutter.consumed

    def reset(self) -> None:
        self._cutter.reset()
        self._char = ""
        self._run = 0
        self._settle_quiet()

    def feed(self, delta: str) -> Trip | None:
        blocks = self._cutter.push(delta)
        # Blocks are judged out of order, none twice: first the block a streak would first
        # trip at, then the ones before it only while they hold its filler. Clean text (no
        # block filled) costs a block a streak instead of every block; the run and the trip
        # are the ones judging them in order gives.
        filler = self._filler
        done = 0  # blocks whose run is known: (self._char, self._run) after them
        while done < len(blocks):
            probe = min(done + self._streak - self._run, len(blocks))
            char = filler(blocks[probe - 1][0])
            if not char:
                self._char, self._run = "", 0
                done = probe
                continue
            start = probe - 1
            while start > done and filler(blocks[start - 1][0]) == char:
                start -= 1
            if start == done and char == self._char:  # a run (none has the filler "")
                self._run += probe - done
            else:
                self._char, self._run = char, probe - start
            done = probe
            if self._run >= self._streak:
                return Trip(CHAR_FLOOD, self._channel, self.consumed, blocks[probe - 1][1],
                            {"char": char, "blocks": self._run,
                             "block_chars": self._cutter.size})
        self._settle_quiet()
        return None

    def _settle_quiet(self) -> None:
        # A trip needs the streak's missing blocks (a new filler needs all of them).
        self.quiet_through = self._cutter.quiet_through(self._streak - self._run)

    def _filler(self, block: str) -> str:
        """The character that fills ``block`` (leaked control tokens aside), or ``""``."""
        if "<" in block or ">" in block:
            block = _TOKEN_PIECE.sub("", CONTROL_TOKEN.sub("", block))
            if not block:
                return ""
        elif not self.may_be_filled(block):
            return ""
        return self._top_filler(block)

    def may_be_filled(self, block: str) -> bool:
        """``False`` when ``_top_filler(block)`` is sure to find nothing: an ASCII block with
        fewer characters that could fill it than the least share a filler needs (its test
        on a bound of the filler's count, read in C), or with more kinds of them than a
        filler leaves room for. Most prose and code end at the first test, numbers at the
        second, without a set of the block's characters built. Outside ASCII, a block whose
        code points end in more distinct low bytes than a filled block holds characters (CJK
        prose, emoji): each character there is a new object to the interpreter, bytes are
        not, and no two characters share a code point."""
        if not block.isascii():
            low_bytes = block.encode("utf-32-le", "surrogatepass")[::4]
            return len(set(low_bytes)) <= self._max_distinct
        fillers = block.encode().translate(None, _ASCII_NOT_FILLERS)
        if 2 * len(fillers) < self._share * len(block):
            return False
        # A filler makes ``min_share`` of the ink, which holds every byte left here: each
        # other byte value needs one of the rest. Digits, numbers in CSV and hex spread over
        # more values than that allows. (The margin only lets more blocks through.)
        size = len(fillers)
        return len(set(fillers)) - 1 <= size - self._share * size + 1e-9

    def _top_filler(self, block: str) -> str:
        distinct = set(block)
        if len(distinct) > self._max_distinct:
            return ""
        top = max(distinct - _NOT_FILLERS, key=block.count, default="")
        if not top:
            return ""
        count = block.count(top)
        # Ink is at least half the block: a filler short of that share of all of it fails
        # before the spaces are counted.
        if 2 * count < self._share * len(block):
            return ""
        ink = len(block) - sum(map(block.count, distinct & _SPACES))
        return top if 2 * ink >= len(block) and count >= self._share * ink else ""
