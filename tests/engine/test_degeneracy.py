"""degeneracy: blocks without meaning (symbol and emoji floods)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from loopbreak import DegeneracyConfig, DegeneracyDetector
from loopbreak._engine.charclass import EMOJI, MEANING, SPACE, SYMBOL, class_string
from loopbreak._samples import emoji_flood, star_flood, table_template
from support import first_trip, hard_negatives


def test_star_flood_trips_as_symbol_flood() -> None:
    sample = star_flood()
    trip = first_trip(DegeneracyDetector(), sample.text)
    assert trip is not None and trip.rule == "symbol-flood"
    assert trip.at > sample.loop_start
    assert "run-heavy" in trip.evidence["flags"]


def test_emoji_flood_trips_as_emoji_flood() -> None:
    sample = emoji_flood()
    trip = first_trip(DegeneracyDetector(), sample.text)
    assert trip is not None and trip.rule == "emoji-flood"


def test_one_endless_run_trips() -> None:
    trip = first_trip(DegeneracyDetector(), "Thinking about it:\n" + "*" * 2000)
    assert trip is not None and trip.rule == "symbol-flood"


def test_cjk_punctuation_soup_trips() -> None:
    soup = "。，、！？；：" * 400
    trip = first_trip(DegeneracyDetector(), "好的，我来想一想。" + soup)
    assert trip is not None and trip.rule == "symbol-flood"


def test_two_hundred_distinct_emoji_trip_without_repeating() -> None:
    emoji = [chr(c) for c in range(0x1F300, 0x1F3C8)]  # 200 distinct pictographs
    text = "".join(emoji[(i * 7) % len(emoji)] for i in range(1200))
    trip = first_trip(DegeneracyDetector(), text)
    assert trip is not None and trip.rule == "emoji-flood"


def test_a_block_with_words_is_never_degenerate() -> None:
    detector = DegeneracyDetector()
    block = ("*" * 100) + " retry loop fixed now"
    assert detector.judge_block(block[:128]) is None


def test_blank_table_rows_are_layout_not_a_flood() -> None:
    assert first_trip(DegeneracyDetector(), table_template(40).text) is None
    # Two gates hold it: too little ink, and nothing but what tables are drawn with.
    no_gate = DegeneracyDetector(DegeneracyConfig(min_ink_share=0.0))
    assert first_trip(no_gate, table_template(40).text) is None
    starred = table_template(40).text.replace("|", "*")
    assert first_trip(no_gate, starred) is not None
    assert first_trip(DegeneracyDetector(), starred) is None


def test_a_table_border_of_any_width_is_left_to_char_run() -> None:
    # A real AlpacaEval answer pads its columns with 379 dashes: not a flood by itself.
    border = "| Product |\n|" + "-" * 2000 + "|\n"
    assert first_trip(DegeneracyDetector(channel="text"), border) is None


def test_streak_counts_consecutive_blocks() -> None:
    flood = "*** " * 32  # exactly one 128-character block
    words = "A sentence with real words in it, long enough to fill one block of text here." * 2
    words = words[:128]
    text = (flood + words) * 10 + flood * 2
    assert first_trip(DegeneracyDetector(DegeneracyConfig(streak=3)), text) is None
    assert first_trip(DegeneracyDetector(DegeneracyConfig(streak=2)), text) is not None


@pytest.mark.parametrize("name", sorted(hard_negatives()))
def test_degeneracy_leaves_hard_negatives_alone(name: str) -> None:
    assert first_trip(DegeneracyDetector(), hard_negatives()[name]) is None


# Symbols, emoji (a skin tone and a ZWJ class as space), letters, CJK marks and spaces: every
# flag and gate of the rule can go either way on blocks drawn from these.
_BLOCK_CHARS = list("*#=-|:+_~ \n.ab1\u3002\uff0c\u2192") + ["\U0001f600", "\U0001f525",
                                                           "\U0001f3fb", "\u200d"]


def _flags_by_definition(block: str, cfg: DegeneracyConfig) -> list[str] | None:
    """The rule's flags read off its definition (``None``: a gate turns the block away)."""
    classes = class_string(block)
    nonspace = sum(k != SPACE for k in classes)
    if nonspace == 0 or nonspace < cfg.min_ink_share * len(block):
        return None
    if not block.strip(" \t\n-|:=+_"):
        return None
    if classes.count(MEANING) > cfg.max_meaning_share * nonspace:
        return None
    noise = classes.count(SYMBOL) + classes.count(EMOJI)
    visible = {c for c, k in zip(block, classes) if k != SPACE}
    runs = [len(r) for r in classes.replace(SPACE, " ").replace(MEANING, " ")
            .replace(EMOJI, " ").split() if len(r) >= cfg.run_chars]
    flags = {
        "noisy": noise >= cfg.min_noise_share * nonspace,
        "low-variety": len(visible) / min(nonspace, cfg.variety_window) <= cfg.max_variety,
        "run-heavy": max(runs, default=0) >= cfg.long_run_chars or len(runs) >= cfg.min_runs,
        "emoji-flood": (classes.count(EMOJI) >= cfg.min_emoji
                        and classes.count(EMOJI) >= cfg.min_emoji_share * nonspace),
    }
    return [name for name, up in flags.items() if up]


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(block=st.lists(st.sampled_from(_BLOCK_CHARS), min_size=1, max_size=128).map("".join),
       min_evidence=st.integers(1, 4), max_variety=st.sampled_from([0.05, 0.2, 0.3, 0.6, 2.0]),
       min_noise_share=st.sampled_from([0.0, 0.3, 0.65, 0.95]),
       min_emoji=st.integers(1, 40), min_runs=st.integers(1, 6),
       long_run_chars=st.integers(2, 40), variety_window=st.integers(1, 128))
# Every flag up at once (random blocks seldom raise run-heavy beside emoji-flood): the order.
@example(block="\U0001f600" * 60 + "*** " * 17, min_evidence=1, max_variety=2.0,
         min_noise_share=0.3, min_emoji=8, min_runs=1, long_run_chars=3, variety_window=128)
def test_every_block_gets_the_verdict_and_flags_of_the_definition(
        block: str, min_evidence: int, max_variety: float, min_noise_share: float,
        min_emoji: int, min_runs: int, long_run_chars: int, variety_window: int) -> None:
    # The full judgement (the block that completes a streak) and the one without evidence (the
    # blocks before it, which read the flags only until they decide) against the definition.
    cfg = DegeneracyConfig(
        min_evidence=min_evidence, max_variety=max_variety, min_noise_share=min_noise_share,
        min_emoji=min_emoji, min_runs=min_runs, long_run_chars=long_run_chars,
        variety_window=variety_window, max_meaning_share=0.3)
    detector = DegeneracyDetector(cfg)
    flags = _flags_by_definition(block, cfg)
    degenerate = flags is not None and len(flags) >= min_evidence
    full = detector.judge_block(block)
    assert (full is not None) is degenerate
    assert (detector._judge(block, False) is not None) is degenerate
    if full is not None:
        assert full["flags"] == flags


def _degeneracy_by_definition(text: str, config: DegeneracyConfig
                              ) -> tuple[int, str, dict[str, object]] | None:
    """Where degeneracy trips, judging every block in order (the rule's definition): the
    count of characters at the end of the block that completes the streak, the rule, and
    its evidence."""
    detector = DegeneracyDetector(config)
    size = config.block_chars
    run = 0
    for end in range(size, len(text) + 1, size):
        evidence = detector.judge_block(text[end - size : end])
        run = run + 1 if evidence is not None else 0
        if evidence is not None and run >= config.streak:
            rule = str(evidence.pop("rule"))
            return end, rule, {**evidence, "streak": run}
    return None


_DEGENERATE_BLOCKS = {
    "prose": "Each block of this stream reads as plain words, nothing degenerate in it. ",
    "stars": "*" * 40,
    "emoji": "\U0001f600\U0001f601\U0001f602" * 12,
    "marks": "!?;:%$#@" * 5,
    "half": "*" * 20 + " and then words again, ",
}


@settings(max_examples=300, deadline=None)
@given(kinds=st.lists(st.sampled_from(sorted(_DEGENERATE_BLOCKS)), min_size=1, max_size=60),
       streak=st.integers(1, 5), block_chars=st.sampled_from([32, 64, 128]),
       shift=st.integers(0, 127), pieces=st.lists(st.integers(1, 600), min_size=1,
                                                     max_size=8))
@example(kinds=["prose"] * 4 + ["stars"] * 2 + ["prose"] + ["stars"] * 12, streak=3,
         block_chars=128, shift=0, pieces=[2000])
def test_degeneracy_trips_where_judging_every_block_in_order_does(
        kinds: list[str], streak: int, block_chars: int, shift: int, pieces: list[int]) -> None:
    # The rule judges the block a streak would complete at first and the ones before it
    # only while they are degenerate: streaks broken and resumed, longer than needed, fed
    # in batches of any size (a guard hands a quiet rule many blocks at once).
    text = "x" * shift + "".join(_DEGENERATE_BLOCKS[kind] for kind in kinds)
    config = DegeneracyConfig(streak=streak, block_chars=block_chars)
    detector = DegeneracyDetector(config)
    trip = None
    at = 0
    while trip is None and at < len(text):
        size = pieces[at % len(pieces)]
        trip = detector.feed(text[at : at + size])
        at += size
    expected = _degeneracy_by_definition(text, config)
    assert (None if trip is None else (trip.at, trip.rule, dict(trip.evidence))) == expected
