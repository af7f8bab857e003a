"""block-repeat: exact-repeat and low-novelty over disjoint 128-character blocks."""

from __future__ import annotations

import pytest

from loopbreak import BlockRepeatConfig, BlockRepeatDetector
from loopbreak._samples import block_aligned_loop, cjk_loop, counter_loop
from support import first_trip, hard_negatives


def test_low_novelty_trips_on_a_loop_with_a_counter() -> None:
    sample = counter_loop()
    trip = first_trip(BlockRepeatDetector(), sample.text)
    assert trip is not None and trip.rule == "low-novelty"
    assert trip.at > sample.loop_start
    assert trip.evidence["streak"] == BlockRepeatConfig().novelty_streak


def test_low_novelty_trips_on_a_chinese_pool() -> None:
    sample = cjk_loop()
    trip = first_trip(BlockRepeatDetector(), sample.text)
    assert trip is not None and trip.rule == "low-novelty" and trip.at > sample.loop_start


def test_exact_repeat_trips_when_the_unit_divides_the_block() -> None:
    sample = block_aligned_loop()
    trip = first_trip(BlockRepeatDetector(), sample.text)
    assert trip is not None and trip.rule == "exact-repeat"
    assert trip.evidence["overlap"] == 1.0


def test_blocks_one_or_two_back_are_not_compared() -> None:
    def block(i: int) -> str:
        return (f"Block {i} says something of its own about the upload client and its "
                f"retries, item {i * 37}. " * 3)[:128]

    # Block 2 repeats block 0 (two back) exactly; no other block repeats.
    text = block(0) + block(1) + block(0) + "".join(block(i) for i in range(3, 12))
    config = BlockRepeatConfig(min_back=3, novelty_streak=0, exact_streak=1)
    assert first_trip(BlockRepeatDetector(config), text) is None
    config = BlockRepeatConfig(min_back=2, novelty_streak=0, exact_streak=1)
    trip = first_trip(BlockRepeatDetector(config), text)
    assert trip is not None and trip.at == 3 * 128


def test_code_shaped_streak_needs_more_blocks() -> None:
    line = "        with warnings_helper.check_warnings(('', DeprecationWarning)):\n"
    body = "".join(f"{line}            spam = self.channel._SMTPChannel__attr{i % 3}\n"
                   for i in range(60))
    tight = BlockRepeatDetector(BlockRepeatConfig(novelty_streak_code=10))
    assert first_trip(tight, body) is not None
    trip = first_trip(BlockRepeatDetector(), body * 3)
    assert trip is not None and trip.evidence["code"] is True
    assert trip.evidence["streak"] == BlockRepeatConfig().novelty_streak_code


@pytest.mark.parametrize("name", sorted(hard_negatives()))
def test_block_repeat_leaves_hard_negatives_alone(name: str) -> None:
    assert first_trip(BlockRepeatDetector(), hard_negatives()[name]) is None


def test_block_repeat_memory_is_bounded_by_max_back() -> None:
    detector = BlockRepeatDetector()
    first_trip(detector, "".join(f"fresh sentence number {i} about topic {i * 31 % 977}. "
                                 for i in range(20_000)))
    assert len(detector._recent) <= BlockRepeatConfig().max_back


def _reference(text: str, cfg: BlockRepeatConfig) -> tuple[str, int] | None:
    """The rule recomputed from scratch: every block against every compared block."""
    from loopbreak._engine.grams import jaccard, shingles
    from loopbreak._engine.shape import looks_like_code

    size = cfg.block_chars
    blocks = [text[i : i + size] for i in range(0, len(text) - size + 1, size)]
    grams = [shingles(b, cfg.shingle_chars, cfg.shingle_step) for b in blocks]
    exact_run = novelty_run = 0
    code_in_run = False
    for i, block in enumerate(blocks):
        back = range(cfg.min_back, cfg.max_back + 1)
        exact = any(i - k >= 0 and blocks[i - k] == block for k in back)
        best = max([jaccard(grams[i], grams[i - k]) for k in back if i - k >= 0], default=0.0)
        if exact:
            best = 1.0
        if best < cfg.novelty_overlap:
            exact_run = novelty_run = 0
            code_in_run = False
            continue
        code = looks_like_code(block)
        novelty_run += 1
        code_in_run = code_in_run or code
        exact_run = exact_run + 1 if exact and not code else 0
        if cfg.exact_streak and exact_run >= cfg.exact_streak:
            return "exact-repeat", (i + 1) * size
        need = cfg.novelty_streak_code if code_in_run else cfg.novelty_streak
        if need and novelty_run >= need:
            return "low-novelty", (i + 1) * size
    return None


@pytest.mark.parametrize("config", [
    BlockRepeatConfig(block_chars=32, novelty_streak=4, novelty_streak_code=6,
                      exact_streak=2, max_back=8),
    # min_back 1: the block just behind is compared too
    BlockRepeatConfig(block_chars=32, novelty_streak=4, novelty_streak_code=6,
                      exact_streak=2, min_back=1, max_back=5),
    BlockRepeatConfig(block_chars=32, novelty_streak=4, novelty_streak_code=6,
                      exact_streak=2, min_back=4, max_back=4),
    # many compared blocks: the shingle sets of several generations bound the overlap
    BlockRepeatConfig(block_chars=16, novelty_streak=4, novelty_streak_code=6,
                      exact_streak=2, min_back=2, max_back=40),
    # long blocks of many distinct shingles, every one taken
    BlockRepeatConfig(block_chars=320, shingle_step=1, novelty_streak=3,
                      novelty_streak_code=4, exact_streak=2, max_back=6),
], ids=["max-back-8", "min-back-1", "one-block-compared", "max-back-40", "long-blocks"])
def test_union_bound_filter_keeps_every_decision(config: BlockRepeatConfig) -> None:
    import random

    rng = random.Random(12)
    words = ["Go.", "OK.", "let", "me", "check", "the", "file", "x = f(y)", "\n", "  ", "好。"]
    if config.block_chars > 255:
        # Words that share few shingles: blocks of many distinct shingles.
        words += ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=9)) for _ in range(60)]
    unit_sizes = [config.block_chars // 4, config.block_chars // 2, config.block_chars]
    seen = set()
    for _ in range(300):
        pool = rng.sample(words, rng.randint(2, len(words)))
        text = " ".join(rng.choice(pool) for _ in range(rng.randint(20, 400)))
        if rng.random() < 0.3:  # a unit that divides the block: exact repeats
            unit = (text * 10)[: rng.choice(unit_sizes)]
            text = text[: rng.randint(0, 200)] + unit * rng.randint(5, 40)
        expected = _reference(text, config)
        trip = first_trip(BlockRepeatDetector(config), text, size=rng.randint(1, 64))
        assert (None if trip is None else (trip.rule, trip.at)) == expected
        seen.add(None if expected is None else expected[0])
    assert seen == {None, "exact-repeat", "low-novelty"}


@pytest.mark.parametrize("max_back", [8, 17, 33, 40, 64])
def test_a_block_that_repeats_only_the_farthest_compared_one_is_found(max_back: int) -> None:
    # The union that bounds the overlaps must hold the farthest compared block however the
    # generations of its shingle sets have turned over.
    import random

    rng = random.Random(max_back)
    config = BlockRepeatConfig(block_chars=16, exact_streak=2, novelty_streak=3,
                               novelty_streak_code=3, min_back=2, max_back=max_back)
    for offset in range(0, 40, 3):
        warm = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(16 * offset))
        blocks = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(16))
                  for _ in range(max_back)]
        text = warm + "".join(blocks) + "".join(blocks)
        expected = _reference(text, config)
        trip = first_trip(BlockRepeatDetector(config), text, size=7)
        assert expected is not None
        assert (None if trip is None else (trip.rule, trip.at)) == expected


@pytest.mark.parametrize("max_back", [8, 17, 33, 40, 64])
def test_a_block_that_resembles_only_the_farthest_compared_one_is_found(max_back: int) -> None:
    # Near repeats (one character changed: no exact match to fall back on) of blocks as far
    # back as the rule compares: each block must be bounded by the generation set that
    # holds its shingles, at every alignment of the generations.
    import random

    rng = random.Random(max_back)
    config = BlockRepeatConfig(block_chars=64, exact_streak=2, novelty_streak=3,
                               novelty_streak_code=3, min_back=2, max_back=max_back)
    letters = "abcdefghijklmnopqrstuvwxyz "
    for offset in range(0, 40, 3):
        warm = "".join(rng.choice(letters) for _ in range(64 * offset))
        blocks = ["".join(rng.choice(letters) for _ in range(64)) for _ in range(max_back)]
        near = [b[:-1] + ("#" if b[-1] != "#" else "%") for b in blocks]
        text = warm + "".join(blocks) + "".join(near)
        expected = _reference(text, config)
        trip = first_trip(BlockRepeatDetector(config), text, size=13)
        assert expected is not None and expected[0] == "low-novelty"
        assert (None if trip is None else (trip.rule, trip.at)) == expected
