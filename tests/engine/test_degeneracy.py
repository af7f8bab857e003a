"""degeneracy: blocks without meaning (symbol and emoji floods)."""

from __future__ import annotations

import pytest

from loopbreak import DegeneracyConfig, DegeneracyDetector
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
