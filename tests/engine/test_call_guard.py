"""The per-call guard: rules per channel, first trip, cuts held while a tool call streams."""

from __future__ import annotations

import copy
import pickle

import pytest

from loopbreak import CallGuard, ChannelGuard, Config, build_detectors
from loopbreak._engine.call_guard import ANSWER_SAMPLE_CHARS
from loopbreak._engine.grams import GramSet
from loopbreak._samples import answer_loop, counter_loop, star_flood, verbatim_loop


def _feed(guard: CallGuard, channel: str, text: str, size: int = 32):  # type: ignore[no-untyped-def]
    for i in range(0, len(text), size):
        trip = guard.feed(channel, text[i : i + size])  # type: ignore[arg-type]
        if trip is not None:
            return trip
    return None


def test_rules_per_channel() -> None:
    reasoning = {type(d).__name__ for d in build_detectors("reasoning", Config())}
    text = {type(d).__name__ for d in build_detectors("text", Config())}
    floods = {"CharRunDetector", "CharFloodDetector", "ControlTokensDetector",
              "ProgressionDetector"}
    assert reasoning == {"DegeneracyDetector", "BlockRepeatDetector", "CycleDetector",
                         "CounterCycleDetector", "LinesDetector", "CharCapDetector"} | floods
    assert text == {"DegeneracyDetector", "CycleDetector", "CounterCycleDetector",
                    "LinesDetector", "IdenticalChunksDetector"} | floods
    off = Config().replace(**{"counter_cycle.enabled": False})
    assert "CounterCycleDetector" not in {type(d).__name__ for d in build_detectors("text", off)}
    off_text = Config().replace(**{"degeneracy.on_text": False})
    assert "DegeneracyDetector" not in {type(d).__name__
                                        for d in build_detectors("text", off_text)}
    stale = Config().replace(**{"stale_words.enabled": True})
    assert "StaleWordsDetector" in {type(d).__name__ for d in build_detectors("text", stale)}
    assert "StaleWordsDetector" not in {type(d).__name__
                                        for d in build_detectors("reasoning", stale)}


def test_unknown_channel_is_rejected() -> None:
    with pytest.raises(ValueError, match="channel"):
        CallGuard().feed("tool", "x")  # type: ignore[arg-type]


def test_first_trip_is_returned_once_and_kept() -> None:
    guard = CallGuard()
    trip = _feed(guard, "reasoning", verbatim_loop().text)
    assert trip is not None and guard.trip == trip
    assert guard.feed_reasoning("more") is None
    assert guard.feed_text("and text") is None


def test_earliest_rule_wins_within_one_delta() -> None:
    # One large delta holds both a star flood (degeneracy) and, later, a long periodic tail.
    sample = star_flood()
    guard = ChannelGuard("reasoning")
    trip = guard.feed(sample.text)
    assert trip is not None and trip.rule == "symbol-flood"
    assert trip.offset == len(sample.text)


def test_trip_waits_for_an_open_tool_call() -> None:
    guard = CallGuard()
    guard.tool_call_delta(0, name="write", arguments='{"path": "a.txt", ')
    assert guard.tool_call_open
    assert _feed(guard, "text", answer_loop().text) is None  # held: the tool call is open
    assert guard.held is not None and guard.trip is guard.held
    guard.tool_call_delta(0, arguments='"content": "x"}')
    released = guard.close_tool_call(0)
    assert released is not None and released.rule == "cycle"
    assert guard.held is None and not guard.tool_call_open


def test_a_new_tool_call_closes_the_previous_one() -> None:
    guard = CallGuard()
    guard.tool_call_delta("call_1", name="read")
    guard.tool_call_delta("call_2", name="grep")
    records = guard.tool_calls
    assert [r.open for r in records] == [False, True]
    assert guard.close_tool_call() is None


def test_summary_counts_channels_and_tool_calls() -> None:
    guard = CallGuard(track_grams=True)
    guard.feed_reasoning("thinking " * 10)
    guard.feed_text("answer")
    guard.tool_call_delta(0, name="bash", arguments="{}")
    summary = guard.summary()
    assert (summary.reasoning_chars, summary.text_chars, summary.tool_calls) == (90, 6, ("bash",))
    assert summary.productive and summary.trip is None
    assert summary.grams is not None and len(summary.grams) > 0
    assert CallGuard().summary().grams is None


def test_a_channel_that_never_streamed_has_consumed_nothing() -> None:
    # A channel's rules are built on its first delta; asking about one that has none builds
    # nothing and still checks the name.
    guard = CallGuard(track_grams=True)
    guard.feed_reasoning("abc")
    assert (guard.consumed("reasoning"), guard.consumed("text")) == (3, 0)
    assert guard.summary().text_chars == 0
    with pytest.raises(ValueError, match="channel must be one of"):
        guard.consumed("audio")  # type: ignore[arg-type]


def test_summary_grams_hold_every_reasoning_character_after_a_trip_too() -> None:
    # The grams are read a batch at a time: what waits, text in between and what comes after
    # the call's trip all reach them, and no text-channel character does.
    guard = CallGuard(track_grams=True)
    reasoning = ["Let me open the file. ", "好。" * 120, "and then", " the tests.", "x" * 50]
    for i, delta in enumerate(reasoning):
        for k in range(0, len(delta), 3):
            guard.feed_reasoning(delta[k : k + 3])
        guard.feed_text(f"<answer {i}>")
    summary = guard.summary()
    assert summary.trip is not None
    expected = GramSet()
    expected.feed("".join(reasoning))
    assert summary.grams is not None and summary.grams.sample(0) == expected.sample(0)


@pytest.mark.parametrize("batch", [1, 7, 64, 300])
def test_summary_text_is_the_answer_s_first_characters_however_it_was_batched(batch: int) -> None:
    # The answer sample is taken a batch at a time: what waits, what comes after the call's
    # trip and what passes the sample's size all land where a delta-at-a-time copy would put
    # them, and no reasoning character does.
    config = Config().replace(**{"judging.batch_chars": batch})
    answer = ["Sure.\n", "好。" * 100, *(f"line {i}: the answer goes on.\n" for i in range(900))]
    guard = CallGuard(config)
    fed = ""
    for i, delta in enumerate(answer):
        for k in range(0, len(delta), 5):
            guard.feed_text(delta[k : k + 5])
        fed += delta
        if i % 97 == 0:
            guard.feed_reasoning(f"<thought {i}>")
    assert len(fed) > ANSWER_SAMPLE_CHARS
    summary = guard.summary()
    assert summary.trip is not None  # the sample goes on past the trip
    assert summary.text == fed[:ANSWER_SAMPLE_CHARS]
    short = CallGuard(config)
    short.feed_text("Only this.")
    assert short.summary().text == "Only this."


# -- judging in batches ------------------------------------------------------------------------


def _first_at(text: str, channel: str = "reasoning") -> int:
    """Where the rules trip on ``text`` judged one character at a time."""
    guard = ChannelGuard(channel, Config().replace(**{"judging.batch_chars": 1}))  # type: ignore[arg-type]
    for i, ch in enumerate(text):
        trip = guard.feed(ch)
        if trip is not None:
            assert trip.offset == i + 1
            return trip.at
    raise AssertionError("no trip")


@pytest.mark.parametrize("batch", [1, 7, 64, 300])
def test_token_sized_deltas_trip_at_the_same_character_at_most_a_batch_later(batch: int) -> None:
    text = verbatim_loop().text
    at = _first_at(text)
    guard = ChannelGuard("reasoning", Config().replace(**{"judging.batch_chars": batch}))
    trip = None
    for i in range(0, len(text), 4):
        trip = guard.feed(text[i : i + 4])
        if trip is not None:
            break
    assert trip is not None and trip.at == at
    assert at <= trip.offset < at + batch + 4
    assert guard.pending == 0 and guard.consumed == trip.offset


def test_what_waits_is_judged_by_flush() -> None:
    text = verbatim_loop().text
    at = _first_at(text)
    guard = ChannelGuard("reasoning")
    # Everything up to the trip in pieces too small to complete a batch.
    assert guard.feed(text[: at - 10]) is None
    for ch in text[at - 10 : at]:
        assert guard.feed(ch) is None
    assert guard.pending == 10
    trip = guard.flush()
    assert trip is not None and (trip.at, trip.offset) == (at, at)
    assert guard.flush() is None and guard.trip is trip


def _tripping_char_waits(guard: CallGuard) -> int:
    """Feed ``guard`` a reasoning loop up to the character it trips at, the last few
    characters in a delta too small to complete a batch; return that character."""
    text = verbatim_loop().text
    at = _first_at(text)
    assert guard.feed("reasoning", text[: at - 3]) is None
    assert guard.feed("reasoning", text[at - 3 : at]) is None  # waits in a batch
    assert guard.trip is None
    return at


def test_a_channel_switch_judges_the_other_channel_first() -> None:
    guard = CallGuard()
    at = _tripping_char_waits(guard)
    trip = guard.feed("text", "The answer.")
    assert trip is not None and (trip.channel, trip.at, trip.offset) == ("reasoning", at, at)


def test_a_trip_found_as_a_tool_call_opens_waits_for_it_to_close() -> None:
    guard = CallGuard()
    at = _tripping_char_waits(guard)
    guard.tool_call_delta("call_1", name="bash", arguments='{"cmd": ')
    assert guard.held is not None and guard.held.at == at
    guard.tool_call_delta("call_1", arguments='"ls"}')
    released = guard.close_tool_call("call_1")
    assert released is not None and released.at == at
    assert guard.tool_calls[0].arguments == '{"cmd": "ls"}'


def test_summary_and_flush_judge_what_waits() -> None:
    guard = CallGuard()
    at = _tripping_char_waits(guard)
    assert guard.summary().trip is not None and guard.trip is not None and guard.trip.at == at
    other = CallGuard()
    _tripping_char_waits(other)
    flushed = other.flush()
    assert flushed is not None and flushed.at == at and other.flush() is None


def test_tool_arguments_in_many_pieces_are_joined_once() -> None:
    guard = CallGuard()
    pieces = [f'{{"n": {i}}}' for i in range(2000)]
    for piece in pieces:
        guard.tool_call_delta("call_1", arguments=piece)
    record = guard.tool_calls[0]
    assert record.arguments == "".join(pieces)
    assert record.arguments is record.arguments  # joined once, then kept


@pytest.mark.parametrize("channel", ["reasoning", "text"])
def test_a_guard_is_copied_and_pickled_whole_and_judges_on_alike(channel: str) -> None:
    # Its rules built and judging (cycle and counter-cycle share what they judged through the
    # process, not through the guard): a copy, or one pickled and loaded, trips where the
    # original does.
    text = counter_loop().text
    whole = _feed(CallGuard(), channel, text)
    assert whole is not None and whole.rule in ("counter-cycle", "cycle")
    half = whole.at // 2
    original = CallGuard()
    assert _feed(original, channel, text[:half]) is None
    copies = [copy.deepcopy(original), pickle.loads(pickle.dumps(original))]
    trips = [_feed(guard, channel, text[half:]) for guard in [original, *copies]]
    assert all(t is not None and (t.rule, t.at) == (whole.rule, whole.at) for t in trips)
