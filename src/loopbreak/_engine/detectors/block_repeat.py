"""block-repeat: a reasoning stream whose blocks keep repeating earlier blocks.

Catches verbatim and near-verbatim loops whose unit is longer than a few words
(``Let me check the file again. ...`` with or without a ticking counter, CJK
paragraphs, ping-pong between two drafts). The stream is cut into disjoint
blocks; each block is compared with the blocks ``min_back``..``max_back``
before it:

* exact-repeat: the block is identical to one of them, ``exact_streak`` blocks
  in a row;
* low-novelty: the best Jaccard overlap of its shingle set with theirs is at
  least ``novelty_overlap``, ``novelty_streak`` blocks in a row (an exact repeat
  has overlap 1.0, so it counts here too).

A streak that holds a block shaped like code or data (``shape.looks_like_code``)
needs ``novelty_streak_code`` blocks and never trips exact-repeat: generated
tests and tables legitimately repeat near-identical blocks (CPython's
``test_enum.py`` holds 14 in a row at overlap 0.7), while every real loop in the
corpus is prose-shaped.

False positives it must leave alone: prose and code that reuse words (overlap of
clean blocks stays far below 0.7: measured in ``tests/engine/test_block_repeat.py``
and the calibration sweep), tables whose rows share a layout but not their
content. Known blind spot: a unit shorter than a block dragged along by varying
content (a 6-char phrase with a counter scores ~0.22); the cycle and lines rules
cover the short shapes.

Measured 2026-12-01 (``loopbreak calibrate --only block-repeat``; 21 loops,
3,412 clean streams): 0.7/10 trips no clean stream (0.7/8 and 0.6/10 do); a
code streak of 14 trips CPython's ``test_enum.py``, 16 is the first clean; an
exact streak of 1 trips clean text, 2 is the first clean.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from loopbreak._config import BlockRepeatConfig
from loopbreak._engine import accelerator
from loopbreak._engine.blocks import BlockCutter
from loopbreak._engine.grams import Shingle, shingles
from loopbreak._engine.shape import looks_like_code
from loopbreak._engine.trip import Channel, Trip

if TYPE_CHECKING:
    from loopbreak._engine.compiled import BlockRing

EXACT_REPEAT = "exact-repeat"
# Compared blocks whose shingles one generation set gathers.
_GENERATION = 16
# Floating-point room for the size test: it may let a hopeless block through, never skip one
# that reaches the threshold.
_SLACK = 1e-9
# Blocks judged in Python before the compiled ring takes over: its arrays (~100 kB at the
# defaults) would triple the memory of a proxied stream whose reasoning is short.
_PYTHON_BLOCKS = 8
LOW_NOVELTY = "low-novelty"
_NEVER = 1 << 40  # blocks before a trip when no streak can trip


class BlockRepeatDetector:
    """Exact-repeat and low-novelty over disjoint blocks of one channel."""

    def __init__(self, config: BlockRepeatConfig | None = None,
                 channel: Channel = "reasoning", *, compiled: bool = False) -> None:
        self._config = cfg = config or BlockRepeatConfig()
        self._channel: Channel = channel
        self._cutter = BlockCutter(cfg.block_chars)
        # The last max_back blocks; their shingle sets in _recent_grams (pure Python) or,
        # with ``compiled`` and the kernels loaded, in a compiled ring that makes the same
        # decisions at a third of the cost. The ring is made after _PYTHON_BLOCKS blocks,
        # filled from the texts of the blocks before (the state it would have had from the
        # start).
        self._recent: deque[str] = deque(maxlen=cfg.max_back)
        self._recent_grams: deque[set[Shingle]] = deque(maxlen=cfg.max_back)
        self._ring: BlockRing | None = None
        self._ring_in = _PYTHON_BLOCKS
        # A rule made before the kernels load stays in Python, counting what it judges
        # towards loading them (accelerator.LOAD_AFTER_CHARS).
        kernels = accelerator.loaded() if compiled else None
        self._kernels = (kernels if kernels is not None
                         and cfg.shingle_chars <= kernels.MAX_SHINGLE
                         and cfg.block_chars >= cfg.shingle_chars else None)
        self._counts_work = compiled and self._kernels is None
        # The shingles of the blocks that entered the compared window (min_back..max_back
        # back), _GENERATION blocks to a set, newest last: enough sets to hold every
        # compared block and perhaps a few that left. A set bounds the overlap of every
        # block it holds from above; it grows with one C-level union per block and forgets
        # by dropping the oldest set, never by counting shingles.
        compared = self._config.max_back - self._config.min_back + 1
        self._keep_generations = 1 + -(-(compared - 1) // _GENERATION)
        self._generations: deque[set[Shingle]] = deque([set()])
        self._in_newest = 0
        # How many of the compared blocks hold each block text.
        self._compared_texts: dict[str, int] = {}
        self._exact_run = 0
        self._novelty_run = 0
        self._code_in_run = False
        # The least streak of each kind that can trip (0: none can).
        novelty = [n for n in (cfg.novelty_streak, cfg.novelty_streak_code) if n]
        self._least_novelty = min(novelty, default=0)
        self._settle_quiet()

    @property
    def consumed(self) -> int:
        return self._cutter.consumed

    @property
    def compiled(self) -> bool:
        """Whether the compiled ring compares the blocks (after the first
        ``_PYTHON_BLOCKS``)."""
        return self._kernels is not None

    def reset(self) -> None:
        self._cutter.reset()
        self._recent.clear()
        self._recent_grams.clear()
        if self._ring is not None:
            self._ring.reset()
        self._generations = deque([set()])
        self._in_newest = 0
        self._compared_texts.clear()
        self._exact_run = self._novelty_run = 0
        self._code_in_run = False
        self._settle_quiet()

    def feed(self, delta: str) -> Trip | None:
        for block, end in self._cutter.push(delta):
            trip = self._judge(block, end)
            if trip is not None:
                return trip
        self._settle_quiet()
        return None

    def _settle_quiet(self) -> None:
        # A trip needs a streak's missing blocks; a streak is of blocks compared with one
        # min_back or more behind, so it starts at block min_back + 1 at the earliest (a
        # flood that degeneracy cuts at its third block never has this rule built).
        missing = _NEVER
        cfg = self._config
        before_first = cfg.min_back - self._cutter.consumed // cfg.block_chars
        if cfg.exact_streak:
            missing = cfg.exact_streak - self._exact_run
        if self._least_novelty:
            missing = min(missing, self._least_novelty - self._novelty_run)
        self.quiet_through = self._cutter.quiet_through(missing + max(0, before_first))

    def _judge(self, block: str, end: int) -> Trip | None:
        cfg = self._config
        if self._ring is not None:
            exact = block in self._compared_texts
            best = 1.0 if exact else self._ring.overlap(block, True)
            if exact:
                self._ring.overlap(block, False)
            self._push_text(block)
            return self._decide(block, end, exact, best)
        if self._counts_work:
            accelerator.judged_in_python(len(block))
        elif self._kernels is not None:
            self._ring_in -= 1
            if self._ring_in <= 0:
                self._start_ring()
                return self._judge(block, end)
        grams = shingles(block, cfg.shingle_chars, cfg.shingle_step)
        exact = False
        best = 0.0
        # Jaccard(A, B) <= |A & B| / |A| <= |A & G| / |A| for the generation set G that holds
        # B: a generation whose bound is under the threshold holds no block that can reach
        # it. On clean stdlib source this skips 80% of blocks outright (the union of every
        # set: 71%) and cuts the pairwise intersections by two thirds, same decisions.
        size = len(grams)
        threshold = cfg.novelty_overlap
        floor = threshold * size - _SLACK
        known = [len(grams & generation) for generation in self._generations]
        if max(known) >= floor:
            if block in self._compared_texts:
                exact, best = True, 1.0
            else:
                best = self._best_overlap(grams, known, floor)
        self._push(block, grams)
        return self._decide(block, end, exact, best)

    def _start_ring(self) -> None:
        """Make the ring, hand it the blocks remembered in Python and forget their sets."""
        cfg = self._config
        assert self._kernels is not None
        self._ring = ring = self._kernels.BlockRing(
            cfg.block_chars, cfg.shingle_chars, cfg.shingle_step, cfg.min_back, cfg.max_back,
            cfg.novelty_overlap)
        for text in self._recent:
            ring.overlap(text, False)
        self._recent_grams.clear()
        self._generations = deque([set()])
        self._in_newest = 0

    def _decide(self, block: str, end: int, exact: bool, best: float) -> Trip | None:
        """Extend or end the streaks with the block's best overlap; trip when one is long."""
        cfg = self._config
        if best < cfg.novelty_overlap:
            self._exact_run = self._novelty_run = 0
            self._code_in_run = False
            return None
        code = looks_like_code(block)
        self._novelty_run += 1
        self._code_in_run = self._code_in_run or code
        self._exact_run = self._exact_run + 1 if exact and not code else 0
        evidence = {"block_chars": cfg.block_chars, "overlap": round(best, 3),
                    "code": self._code_in_run}
        if cfg.exact_streak and self._exact_run >= cfg.exact_streak:
            return Trip(EXACT_REPEAT, self._channel, self.consumed, end,
                        {**evidence, "streak": self._exact_run})
        need = cfg.novelty_streak_code if self._code_in_run else cfg.novelty_streak
        if need and self._novelty_run >= need:
            return Trip(LOW_NOVELTY, self._channel, self.consumed, end,
                        {**evidence, "streak": self._novelty_run})
        return None

    def _best_overlap(self, grams: set[Shingle], known: list[int], floor: float) -> float:
        """The overlap of the nearest compared block that reaches the threshold, or the
        best overlap of all when none does; ``known[i]`` bounds the blocks of generation i."""
        cfg = self._config
        threshold = cfg.novelty_overlap
        # Jaccard >= t needs |A & B| >= t (|A| + |B|) / (1 + t), and |A & B| is at most
        # min(known, |B|): blocks of the wrong size are passed over without being
        # intersected (about 60% of those left on clean code).
        ratio = threshold / (1.0 + threshold)
        size = len(grams)
        recent = self._recent_grams
        best = 0.0
        # Nearest first: a loop resembles the blocks just behind it. The first overlap that
        # reaches the threshold decides; the rest cannot change the decision. The compared
        # blocks entered the generations in order: the nearest ``_in_newest`` are in the
        # newest set, each _GENERATION before them in the set before.
        first = cfg.min_back
        last = min(cfg.max_back, len(recent))
        generation = len(known) - 1
        end = first + self._in_newest
        while first <= last and generation >= 0:
            most = known[generation]
            if most >= floor:
                for back in range(first, min(end, last + 1)):
                    other = recent[-back]
                    other_size = len(other)
                    if (most if most < other_size else other_size) < (
                            ratio * (size + other_size) - _SLACK):
                        continue
                    common = len(grams & other)  # jaccard(), inlined: this loop is hot
                    overlap = common / (size + other_size - common) if common else 0.0
                    if overlap > best:
                        best = overlap
                        if best >= threshold:
                            return best
            first, end = end, end + _GENERATION
            generation -= 1
        return best

    def _push_text(self, block: str) -> None:
        """Append a block's text; count the texts of the blocks min_back..max_back back."""
        recent = self._recent
        if len(recent) == recent.maxlen:
            _decrement(self._compared_texts, recent[0])
        recent.append(block)
        if len(recent) >= self._config.min_back:
            entering = recent[-self._config.min_back]
            self._compared_texts[entering] = self._compared_texts.get(entering, 0) + 1

    def _push(self, block: str, grams: set[Shingle]) -> None:
        """Append a block; keep what the blocks min_back..max_back back hold."""
        self._push_text(block)
        recent = self._recent_grams
        recent.append(grams)
        back = self._config.min_back
        if len(recent) < back:
            return
        entering = recent[-back]
        generations = self._generations
        if self._in_newest == _GENERATION:
            generations.append(set())
            if len(generations) > self._keep_generations:
                generations.popleft()
            self._in_newest = 0
        generations[-1] |= entering
        self._in_newest += 1


def _decrement(counts: dict[str, int], key: str) -> None:
    count = counts[key] - 1
    if count:
        counts[key] = count
    else:
        del counts[key]
