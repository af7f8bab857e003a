"""Every rule but identical-chunks decides the same way however the stream is split.

The same text fed one character at a time, 32 at a time or in random pieces
trips the same rule at the same exact character (``at``) with the same
evidence; ``offset`` then differs by less than the tripping delta.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from loopbreak import (
    BlockRepeatConfig,
    BlockRepeatDetector,
    ChannelGuard,
    Config,
    CounterCycleConfig,
    CycleConfig,
    CycleDetector,
    DegeneracyConfig,
    DegeneracyDetector,
    Detector,
    LinesConfig,
    LinesDetector,
    Trip,
    build_detectors,
)
from loopbreak._config import (
    CharFloodConfig,
    CharRunConfig,
    ControlTokensConfig,
    ProgressionConfig,
    StaleWordsConfig,
)
from loopbreak._engine import call_guard
from loopbreak._engine.detectors import (
    CharFloodDetector,
    CharRunDetector,
    ControlTokensDetector,
    CounterCycleDetector,
    ProgressionDetector,
    StaleWordsDetector,
)
from loopbreak._engine.trip import Channel, QuietDetector
from loopbreak.bench.throughput import cut

ALPHABETS = ["ab", "Go. OK.\n", "好。执行。\n", "* \n", "😀😂 ", "abc def\n  x()", "| -\n",
             "Fish 19.\n"]


@st.composite
def streams(draw: st.DrawFn) -> str:
    alphabet = draw(st.sampled_from(ALPHABETS))
    letters = st.text(alphabet=alphabet, min_size=1, max_size=60)
    parts = []
    for _ in range(draw(st.integers(1, 6))):
        if draw(st.booleans()):
            parts.append(draw(letters) * draw(st.integers(1, 40)))
        else:
            parts.append(draw(letters))
    return "".join(parts)[:3000]


@st.composite
def counted_streams(draw: st.DrawFn) -> str:
    """Text, then a list whose items repeat while their numbers tick (``14. Pluto``)."""
    head = draw(st.text(alphabet="abc de.\n", max_size=200))
    item = draw(st.sampled_from(["Pluto", "Fish (x)", "Use a timer: it helps.", "a0b", "é 2"]))
    start = draw(st.integers(0, 120))
    count = draw(st.integers(1, 80))
    style = draw(st.sampled_from(["{n}. {item}\n", "{item} {n}\n", "Step {n}: {item} "]))
    body = "".join(style.format(n=n, item=item) for n in range(start, start + count))
    return (head + body + draw(st.text(alphabet="xyz \n", max_size=40)))[:3000]


@st.composite
def flood_streams(draw: st.DrawFn) -> str:
    """Text with floods the flood rules watch: one character run on, control tokens,
    numbers counting on, words re-said."""
    head = draw(st.text(alphabet="abc de.1\n<|", max_size=120))
    kind = draw(st.sampled_from(["run", "tokens", "count", "words"]))
    if kind == "run":
        body = draw(st.sampled_from(["a", " ", "-", "！", "0", "\n", "る\n", "1\n11\n"])) \
            * draw(st.integers(1, 60))
    elif kind == "tokens":
        token = draw(st.sampled_from(["<|im_start|>\n", "<unk|x> ", "</s>", "[PAD]", "<|a b|>"]))
        body = token * draw(st.integers(1, 20))
    elif kind == "count":
        start, step = draw(st.integers(0, 990)), draw(st.integers(-3, 500))
        sep = draw(st.sampled_from([", ", "\n", " ", ",1"]))
        body = sep.join(str(start + i * step) for i in range(draw(st.integers(1, 30))))
    else:
        words = draw(st.lists(st.sampled_from(["go", "ok", "let", "me", "read", "好", "。"]),
                              min_size=1, max_size=8))
        body = " ".join(words) * draw(st.integers(1, 20))
    return (head + body + draw(st.text(alphabet="xy 9\n", max_size=30)))[:3000]


@st.composite
def splits(draw: st.DrawFn, text: str) -> list[str]:
    cuts = sorted(set(draw(st.lists(st.integers(0, len(text)), max_size=60))))
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds) if b > a]


def _run(detector: Detector, pieces: list[str]) -> tuple[Trip | None, int]:
    for piece in pieces:
        trip = detector.feed(piece)
        if trip is not None:
            return trip, len(piece)
    if isinstance(detector, ChannelGuard):
        # A guard judges in batches: the end of the stream judges what waits.
        return detector.flush(), 0
    return None, 0


def _check(make: Callable[[], Detector], text: str, pieces: list[str]) -> Trip | None:
    reference, _ = _run(make(), list(text))
    fixed = [text[i : i + 32] for i in range(0, len(text), 32)]
    for split in (fixed, pieces, [text]):
        detector = make()
        trip, piece_len = _run(detector, split)
        if reference is None:
            assert trip is None
            continue
        assert trip is not None
        assert (trip.rule, trip.at, dict(trip.evidence)) == \
            (reference.rule, reference.at, dict(reference.evidence))
        # Found on the delta that tripped, or for a guard on the one that completed the
        # batch holding it (or at the end): never more than a batch later.
        late = Config().judging.batch_chars if isinstance(detector, ChannelGuard) else 1
        assert trip.at <= trip.offset < trip.at + piece_len + late
        assert trip.offset <= len(text)
    return reference


# Small thresholds make the rules trip on short generated streams.
SMALL = {
    "cycle": lambda: CycleDetector(CycleConfig(max_period=64, min_span_reasoning=48,
                                               min_span_code=96)),
    "counter-cycle": lambda: CounterCycleDetector(
        CounterCycleConfig(), CycleConfig(max_period=64, min_span_reasoning=48,
                                          min_span_code=96)),
    "block-repeat": lambda: BlockRepeatDetector(BlockRepeatConfig(
        block_chars=32, novelty_streak=3, novelty_streak_code=5, exact_streak=2)),
    "degeneracy": lambda: DegeneracyDetector(DegeneracyConfig(block_chars=32, streak=2)),
    "lines": lambda: LinesDetector(LinesConfig(min_mass=64, window_chars=512,
                                               min_concentration=2.0)),
    "char-run": lambda: CharRunDetector(CharRunConfig(max_run=16, max_layout_run=24)),
    "char-flood": lambda: CharFloodDetector(CharFloodConfig(block_chars=16, streak=3)),
    "control-tokens": lambda: ControlTokensDetector(ControlTokensConfig(min_tokens=3,
                                                                        window_chars=64)),
    "progression": lambda: ProgressionDetector(ProgressionConfig(min_terms=5)),
    "stale-words": lambda: StaleWordsDetector(StaleWordsConfig(ngram=2, window_words=8,
                                                               min_stale_share=0.75,
                                                               horizon_words=40)),
    "guard-text": lambda: ChannelGuard("text", Config().replace(**{
        "cycle.min_span_text": 48, "cycle.min_span_code": 96, "char_run.max_run": 16,
        "char_run.max_layout_run": 24, "control_tokens.min_tokens": 3,
        "progression.min_terms": 5, "stale_words.enabled": True, "stale_words.ngram": 2,
        "stale_words.window_words": 8, "degeneracy.block_chars": 32,
        "identical_chunks.max_repeats": 0})),
    "guard": lambda: ChannelGuard("reasoning", Config().replace(**{
        "cycle.min_span_reasoning": 48, "cycle.min_span_code": 96, "block_repeat.block_chars": 32,
        "degeneracy.block_chars": 32, "lines.min_mass": 64, "lines.window_chars": 512,
        "limits.max_reasoning_chars": 2000})),
}


def _property(name: str) -> Callable[[], None]:
    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(data=st.data())
    def prop(data: st.DataObject) -> None:
        text = data.draw(st.one_of(streams(), counted_streams(), flood_streams()))
        reference = _check(SMALL[name], text, data.draw(splits(text)))
        event("tripped" if reference is not None else "clean")

    return prop


test_cycle_split_independent = _property("cycle")
test_counter_cycle_split_independent = _property("counter-cycle")
test_block_repeat_split_independent = _property("block-repeat")
test_degeneracy_split_independent = _property("degeneracy")
test_lines_split_independent = _property("lines")
test_channel_guard_split_independent = _property("guard")
test_char_run_split_independent = _property("char-run")
test_char_flood_split_independent = _property("char-flood")
test_control_tokens_split_independent = _property("control-tokens")
test_progression_split_independent = _property("progression")
test_stale_words_split_independent = _property("stale-words")
test_text_guard_split_independent = _property("guard-text")


def test_default_guard_split_independent_on_samples() -> None:
    from loopbreak._samples import clean_samples, loop_samples

    for sample in loop_samples() + clean_samples():
        if sample.name == "token-repeat":
            continue  # carried by identical-chunks on the text channel, split-dependent by design
        text = sample.text[:8000]
        _check(lambda s=sample: ChannelGuard(s.channel), text,  # type: ignore[misc]
               [text[i : i + 7] for i in range(0, len(text), 7)])


# -- text held back from a rule until it can trip --------------------------------------------

QUIET_RULES = [name for name, make in SMALL.items() if hasattr(make(), "quiet_through")]


def _keeps_its_word(detector: QuietDetector, pieces: list[str]) -> Trip | None:
    """Feed ``pieces``; every ``quiet_through`` the rule said before its trip lies below the
    trip's ``at`` (a guard holds text back from it that far)."""
    return _said_before_trip(detector, pieces)[0]


def _said_before_trip(detector: QuietDetector, pieces: list[str]) -> tuple[Trip | None, int]:
    """``_keeps_its_word``, and the farthest the rule said it could not trip."""
    said = detector.quiet_through
    for piece in pieces:
        trip = detector.feed(piece)
        if trip is not None:
            assert trip.at > said, f"{trip.rule} tripped at {trip.at}, said quiet to {said}"
            return trip, said
        said = max(said, detector.quiet_through)
    return None, said


def test_cycle_is_quiet_to_the_end_of_a_step_without_candidates_and_no_further() -> None:
    # A unit whose period is the rule's least run ends its first qualifying window with a run
    # just that long: its anchor (the run's first character and one before it) recurs
    # nowhere, so the rule says it is quiet to the step's end, and the window can end one
    # character later.
    unit = "Wait, is that right? No."
    assert len(unit) == 24  # SMALL["cycle"]'s least run
    rng = random.Random(3)
    prefix = "".join(rng.choices("abcdefghijklmnopqrstuvwxyz .,\n", k=60))
    exact = 0
    for start in range(30):
        text = prefix[:start] + unit * 12
        reference, _ = _run(SMALL["cycle"](), list(text))
        assert reference is not None
        for cut_at in range(reference.at - 40, reference.at - 1):
            detector = SMALL["cycle"]()
            assert isinstance(detector, QuietDetector)
            trip, said = _said_before_trip(detector, [text[:cut_at], text[cut_at:]])
            assert trip is not None and trip.at == reference.at
            exact += said == trip.at - 1
    assert exact > 0


def test_counter_cycle_is_quiet_past_a_stretch_without_a_number_and_no_further() -> None:
    # A step whose window (a longest period back) holds no number: no unit that counts can
    # end before the least run it needs past the step, because its first period-long
    # stretch must reach the next number. A unit whose one number is its last character,
    # the rest of it standing before that number, ends its first window just there.
    detector = SMALL["counter-cycle"]()
    assert isinstance(detector, CounterCycleDetector)
    period, least = detector._max_period, detector._least_run
    body = ("The upload failed again, so retry it with a longer timeout " * 2)[: period - 1]
    assert body.isascii() and not any(c.isdigit() for c in body)
    rng = random.Random(11)
    exact = 0
    for extra in range(0, 40, 3):
        lead = " ".join("".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=5))
                        for _ in range((detector._min_span + extra) // 6))
        text = lead + " " + body + "".join(f"{n % 10}" + body for n in range(1, 40))
        number_at = text.index("1")
        reference, _ = _run(SMALL["counter-cycle"](), list(text))
        assert reference is not None and reference.evidence["period"] == period
        detector = SMALL["counter-cycle"]()
        assert isinstance(detector, QuietDetector)
        trip, said = _said_before_trip(detector, [text[:number_at], text[number_at:]])
        assert trip is not None and trip.at == reference.at
        exact += said == trip.at - 1 and said == number_at + least
    assert exact > 0


def test_lines_is_quiet_as_far_as_a_line_seen_twice_can_reach() -> None:
    # A line's second sighting adds twice its length to the repeated mass at once.
    detector = SMALL["lines"]()
    assert isinstance(detector, QuietDetector)
    line = "x" * 32 + "\n"  # twice: a repeated mass of 64, the small rule's least
    trip, said = _said_before_trip(detector, list(line + line))
    assert trip is not None and trip.at == 66 and said == 65


@pytest.mark.parametrize("first", ["1,2,3,4,", "1,2,3,4,5"])
def test_progression_is_quiet_as_far_as_the_shortest_numbers_can_reach(first: str) -> None:
    # Each term missing needs a digit and the character after it; a number being read, only
    # that character.
    detector = SMALL["progression"]()
    assert isinstance(detector, QuietDetector)
    trip, said = _said_before_trip(detector, [first, "1,2,3,4,5,"[len(first):]])
    assert trip is not None and trip.at == 10 and said == 9


def test_block_repeat_is_quiet_until_a_streak_can_start_min_back_blocks_in() -> None:
    # A block is compared with those min_back (3) or more behind it: the fourth block is
    # the first that can repeat, so a loop from the first character trips at the end of
    # the fifth (a streak of 2), and the rule says so from the start.
    unit = "We retry the upload, then wait. "
    assert len(unit) == 32  # SMALL["block-repeat"]'s block
    for pieces in (list(unit * 8), [unit * 3, unit * 5], [unit[:7], unit[7:] + unit * 7]):
        detector = SMALL["block-repeat"]()
        assert isinstance(detector, QuietDetector)
        assert detector.quiet_through == 159
        trip, said = _said_before_trip(detector, pieces)
        assert trip is not None and trip.at == 160 and said == 159


def test_the_rules_that_say_how_far_they_cannot_trip() -> None:
    # Every rule that waits for blocks, a streak, a period's step or a mass to build up.
    assert set(QUIET_RULES) == {"cycle", "counter-cycle", "block-repeat", "degeneracy", "lines",
                                "char-run", "char-flood", "progression"}


@pytest.mark.parametrize("name", QUIET_RULES)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_each_rule_keeps_its_word(name: str, data: st.DataObject) -> None:
    text = data.draw(st.one_of(streams(), counted_streams(), flood_streams()))
    make = SMALL[name]
    tripped = False
    for pieces in (list(text), data.draw(splits(text))):
        detector = make()
        assert isinstance(detector, QuietDetector)
        tripped = _keeps_its_word(detector, pieces) is not None or tripped
    event("tripped" if tripped else "clean")


def _every_batch_to_every_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    # A guard takes no rule's word for how far it cannot trip: it holds no batch back;
    # each batch is judged by every rule as it completes.
    monkeypatch.setattr(call_guard, "_says_quiet", lambda detector: False)
    monkeypatch.setattr(call_guard, "_PLANS", {})


def _guard_run(make: Callable[[], ChannelGuard], pieces: list[str]) -> Trip | None:
    trip, _ = _run(make(), pieces)
    return trip


def _same_trip(a: Trip | None, b: Trip | None) -> None:
    if a is None or b is None:
        assert a is b
        return
    assert (a.rule, a.at, a.offset, dict(a.evidence)) == (b.rule, b.at, b.offset,
                                                            dict(b.evidence))


@pytest.mark.parametrize("name", ["guard", "guard-text"])
@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_holding_text_back_cuts_where_judging_every_batch_does(
        name: str, data: st.DataObject, monkeypatch: pytest.MonkeyPatch) -> None:
    text = data.draw(st.one_of(streams(), counted_streams(), flood_streams()))
    pieces = data.draw(splits(text))
    make = SMALL[name]
    held = _guard_run(make, pieces)  # type: ignore[arg-type]
    with monkeypatch.context() as patch:
        _every_batch_to_every_rule(patch)
        every = _guard_run(make, pieces)  # type: ignore[arg-type]
    _same_trip(held, every)
    event("tripped" if held is not None else "clean")


def _real_streams(corpus: Path) -> list[tuple[Channel, str]]:
    from loopbreak.offline.corpus import alpaca_loops, dsh_loop_guard, smollm2_lists

    streams = [*dsh_loop_guard(corpus), *alpaca_loops(corpus), *smollm2_lists()]
    assert len(streams) > 200
    return [(s.channel, s.text) for s in streams]  # type: ignore[misc]


def test_real_loops_trip_where_every_rule_said_they_could(corpus: Path) -> None:
    # The default rules on the real loops (and the clean calls among them), at the deltas a
    # tokenizer produces: no rule trips where it said it could not.
    tripped = 0
    for channel, text in _real_streams(corpus):
        pieces = cut(text, 0)
        for detector in build_detectors(channel, Config()):
            if isinstance(detector, QuietDetector):
                tripped += _keeps_its_word(detector, pieces) is not None
    assert tripped > 250  # of 1,000 or so streams' rules: the bounds were put to the test


def test_real_loops_are_cut_where_judging_every_batch_cuts_them(
        corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs: list[list[Trip | None]] = []
    for hold in (True, False):
        with monkeypatch.context() as patch:
            if not hold:
                _every_batch_to_every_rule(patch)
            runs.append([_guard_run(lambda c=channel: ChannelGuard(c), cut(text, 0))  # type: ignore[misc]
                         for channel, text in _real_streams(corpus)])
    for held, every in zip(*runs, strict=True):
        _same_trip(held, every)
    assert sum(t is not None for t in runs[0]) > 150


_EVERY_OTHER_RULE_OFF = {"degeneracy.enabled": False, "cycle.max_period": 0,
                         "char_run.max_run": 0, "char_flood.enabled": False,
                         "progression.min_terms": 0, "control_tokens.min_tokens": 0,
                         "lines.min_mass": 0, "limits.max_reasoning_chars": 0}


@pytest.mark.parametrize("alone", [False, True])
def test_a_rule_that_cannot_trip_is_still_handed_the_stream(alone: bool) -> None:
    # block-repeat with every streak off never trips: the text held back from it is handed
    # over once 64 batches wait, not kept for the whole call; also when it is the only
    # rule (no other rule's turn makes the guard look at the rules one by one).
    config = Config().replace(**{"block_repeat.exact_streak": 0,
                                 "block_repeat.novelty_streak": 0,
                                 "block_repeat.novelty_streak_code": 0,
                                 **(_EVERY_OTHER_RULE_OFF if alone else {})})
    guard = ChannelGuard("reasoning", config)
    rng = random.Random(7)
    text = " ".join("".join(rng.choices("abcdefghij", k=5)) for _ in range(20_000))
    for piece in cut(text, 0):
        assert guard.feed(piece) is None
    # Built when first handed text, 64 batches in.
    rule = next(r for r in guard._quiet if isinstance(r.detector, BlockRepeatDetector))
    assert rule.detector is not None and rule.detector.quiet_through > len(text)
    waiting = guard._held[rule.start - guard._held_from :]  # the batches held back from it
    assert len(waiting) <= 64
    judged = guard.consumed - guard.pending
    assert rule.detector.consumed + sum(map(len, waiting)) == judged


def test_a_short_call_builds_only_the_rules_that_could_trip_in_it() -> None:
    # A rule is built when first handed text: in a 200-character call, only those that can
    # trip that early (cycle's least span is 192 in reasoning) are.
    text = "The user wants the upload retried with backoff; first I read the client. " * 3
    guard = ChannelGuard("reasoning")
    for piece in cut(text[:200], 0):
        assert guard.feed(piece) is None
    assert guard.flush() is None
    built = {type(r.detector).__name__ for r in guard._quiet if r.detector is not None}
    assert built == {"CycleDetector"}
    assert len(guard._quiet) == 8
    rng = random.Random(5)
    for piece in cut(" ".join("".join(rng.choices("abcdefgh", k=6)) for _ in range(1000)), 0):
        assert guard.feed(piece) is None
    assert all(r.detector is not None for r in guard._quiet)  # all of them, 7,000 in
