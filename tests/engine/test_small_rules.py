"""identical-chunks and max-reasoning-chars."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopbreak import CharCapDetector, Config, IdenticalChunksConfig, IdenticalChunksDetector
from loopbreak._engine.call_guard import ChannelGuard
from loopbreak._samples import data_text
from support import feed_pieces, hard_negatives


def test_identical_chunks_trips_after_max_repeats() -> None:
    detector = IdenticalChunksDetector()
    trip, _ = feed_pieces(detector, ["Sure.\n"] + ["好。"] * 100)
    assert trip is not None and trip.rule == "identical-chunks"
    assert trip.evidence["repeats"] == IdenticalChunksConfig().max_repeats
    assert trip.offset == len("Sure.\n") + 2 * IdenticalChunksConfig().max_repeats


def test_identical_chunks_compares_stripped_deltas() -> None:
    pieces = [" ok", "ok ", "\nok"] * 30
    trip, _ = feed_pieces(IdenticalChunksDetector(), pieces)
    assert trip is not None


def test_identical_chunks_skips_empty_deltas_and_resets_on_change() -> None:
    pieces = (["word"] * 59 + [""] * 10 + ["other"]) * 5
    assert feed_pieces(IdenticalChunksDetector(), pieces)[0] is None


def test_identical_chunks_is_off_at_zero() -> None:
    detector = IdenticalChunksDetector(IdenticalChunksConfig(max_repeats=0))
    assert feed_pieces(detector, ["x"] * 1000)[0] is None


@settings(max_examples=300, deadline=None)
@given(deltas=st.lists(st.sampled_from(["a", "a ", " a", "b", "", "\n", "  ", "好。", "ab",
                                        "\u3000", "\u200b", "x\u3000", "🙂"]), max_size=200),
       cuts=st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=20),
       joins=st.lists(st.booleans(), min_size=1, max_size=20),
       limit=st.one_of(st.integers(min_value=2, max_value=6), st.just(60)))
def test_identical_chunks_decides_the_same_however_deltas_are_batched(
        deltas: list[str], cuts: list[int], joins: list[bool], limit: int) -> None:
    # A guard hands over its deltas a batch at a time (joined too); batches too short to
    # trip, or with too few equal deltas in a row, take shortcuts (a batch without
    # whitespace is read unstripped), and must leave the run where one delta at a time does.
    config = IdenticalChunksConfig(max_repeats=limit)
    one, batched = IdenticalChunksDetector(config), IdenticalChunksDetector(config)
    expected = got = None
    start, i = 0, 0
    while start < len(deltas):
        size = cuts[i % len(cuts)]
        batch = deltas[start : start + size]
        for delta in batch:
            trip = one.feed(delta)
            expected = expected or trip
        joined = "".join(batch) if joins[i % len(joins)] else None
        trip = batched.feed_pieces(batch, joined=joined)
        got = got or trip
        if expected is None:
            # The run a batch leaves is the one the deltas fed one by one leave.
            assert (batched._last, batched._run) == (one._last, one._run)
        start += size
        i += 1
    assert (got.at, got.evidence) == (expected.at, expected.evidence) if expected else got is None
    assert batched.consumed == one.consumed == sum(map(len, deltas))


def test_identical_chunks_counts_a_run_on_across_batches_of_it_alone() -> None:
    # Batches that hold nothing but the run, each too short to trip, carry it on whole.
    detector = IdenticalChunksDetector(IdenticalChunksConfig(max_repeats=6))
    assert detector.feed_pieces(["x", "a", "a"]) is None
    assert detector.feed_pieces(["a"]) is None
    assert detector.feed_pieces([" a", "a\n"]) is None
    trip = detector.feed_pieces(["a", "b"])
    assert trip is not None and trip.at == 9 and trip.evidence["repeats"] == 6


def test_char_cap_trips_on_the_first_character_beyond_it() -> None:
    detector = CharCapDetector(100)
    assert detector.feed("a" * 100) is None
    trip = detector.feed("bc")
    assert trip is not None and trip.at == 101 and trip.offset == 102
    assert trip.rule == "max-reasoning-chars"


def test_char_cap_is_off_at_zero() -> None:
    assert CharCapDetector(0).feed("a" * 1_000_000) is None


def _tokens(text: str) -> list[str]:
    """Deltas the way a tokenizer streams them: words with their leading space, runs of
    punctuation, newlines."""
    import re

    return re.findall(r" ?\w+| ?[^\w\s]+|\s", text)


@pytest.mark.parametrize("name", sorted(hard_negatives()))
def test_identical_chunks_leaves_hard_negatives_alone(name: str) -> None:
    assert feed_pieces(IdenticalChunksDetector(), _tokens(hard_negatives()[name]))[0] is None


def test_char_cap_leaves_a_long_productive_call_alone() -> None:
    text = data_text("clean_reasoning.txt")
    detector = CharCapDetector(120_000)
    pieces = [text] * (119_000 // len(text))
    assert feed_pieces(detector, pieces)[0] is None and detector.consumed < 120_000


@settings(max_examples=200, deadline=None)
@given(deltas=st.lists(st.sampled_from(["a", "a ", " a", "b", "", "\n", "好。", "ab",
                                        "\U0001f600"]), max_size=300),
       batch=st.integers(min_value=1, max_value=64))
def test_identical_chunks_in_a_guard_counts_every_character_it_is_handed(
        deltas: list[str], batch: int) -> None:
    # The guard hands it each batch with the batch's length (it joined the deltas already):
    # the rule's count, which places its trips, is the characters judged so far.
    config = Config().replace(**{"judging.batch_chars": batch,
                                 "identical_chunks.max_repeats": 10_000})
    guard = ChannelGuard("text", config)
    ((_, rule),) = guard._per_delta
    for delta in deltas:
        guard.feed(delta)
        assert rule.consumed == guard.consumed - guard.pending
    guard.flush()
    assert rule.consumed == sum(map(len, deltas))
