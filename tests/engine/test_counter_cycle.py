"""counter-cycle: a tail that is periodic once every digit reads as 0."""

from __future__ import annotations

import random
import re
import sysconfig
import types
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopbreak import ChannelGuard, Config, CounterCycleConfig, CycleConfig
from loopbreak._engine.detectors import CounterCycleDetector, CycleDetector, counter_cycle
from loopbreak._engine.detectors.counter_cycle import DIGITS_AS_ZERO, read_counters, word_share
from loopbreak._engine.shape import unit_looks_like_code
from loopbreak._engine.trip import Channel
from loopbreak.offline.corpus import smollm2_lists
from support import feed_pieces, first_trip, split_fixed, split_random

PLUTO = "".join(f"{n}. Pluto\n" for n in range(10, 99))


def brute_force(text: str, cfg: CycleConfig, share: float, min_span: int,
                counter: CounterCycleConfig | None = None) -> tuple[int, int] | None:
    """The rule as its module states it, recomputed from scratch at every character: the
    reading with every number as one ``0``, positions mapped back to the stream."""
    counter = counter or CounterCycleConfig()
    folded = re.sub("[0-9\uff10-\uff19]+", "0", text)
    assert read_counters(text) == folded
    kept = [i for i, c in enumerate(text.translate(DIGITS_AS_ZERO))
            if not (c == "0" and i and text.translate(DIGITS_AS_ZERO)[i - 1] == "0")]
    assert len(kept) == len(folded)
    for m in range(1, len(folded) + 1):
        for p in range(1, cfg.max_period + 1):
            unit = folded[m - p : m]
            span = max(cfg.min_span_code if unit_looks_like_code(unit) else min_span,
                       counter.min_copies * p + cfg.past_two_copies)
            if m >= span and folded[m - span + p : m] == folded[m - span : m - p] \
                    and len(set(unit)) >= cfg.min_distinct and "0" in unit \
                    and unit.count("0") <= max(2, _cyclic_words(unit) / counter.words_per_number) \
                    and word_share(unit) >= share:
                return kept[m - 1] + 1, p
    return None


def _cyclic_words(unit: str) -> int:
    """Letter runs of ``unit`` read as a cycle: every rotation is tried and the one that
    starts where no word is cut counts (a unit of letters only is one word)."""
    if not unit:
        return 0
    if unit.isalpha():
        return 1
    counts = [len(re.findall(r"[^\W\d_]+", unit[k:] + unit[:k])) for k in range(len(unit))]
    return min(counts)


def _counted_text(rng: random.Random) -> str:
    item = rng.choice(["Pluto", "Fish", "a b", "x1y", "Use a timer.", "Ca (Ca)", "é"])
    style = rng.choice(["{n}. {item}\n", "{item} {n} ", "Day {n}: {item}\n", "{n}{n}"])
    start = rng.randint(0, 150)
    head = "".join(rng.choice("ab cd\n") for _ in range(rng.randint(0, 80)))
    body = "".join(style.format(n=n, item=item) for n in range(start, start + rng.randint(1, 60)))
    return (head + body)[:700]


def _assert_brute_force_at_every_split(text: str, rng: random.Random, shares: list[float],
                                      sizes: tuple[int, int, int]) -> None:
    """The rule on ``text`` under settings drawn from ``rng``, fed in pieces of each of
    ``sizes`` and at random, trips where the brute force says."""
    cfg = CycleConfig(max_period=rng.choice([16, 30, 64]), min_span_text=rng.choice([24, 48]),
                      min_span_code=rng.choice([64, 100]))
    share = rng.choice(shares)
    expected = brute_force(text, cfg, share, cfg.min_span_text)
    counter = CounterCycleConfig(min_word_share=share, min_span_text=cfg.min_span_text)
    for pieces in (*(split_fixed(text, size) for size in sizes), split_random(text, rng)):
        detector = CounterCycleDetector(counter, cfg, "text")
        trip, _ = feed_pieces(detector, pieces)
        got = None if trip is None else (trip.at, trip.evidence["period"])
        assert got == expected


@pytest.mark.parametrize("seed", range(60))
def test_counter_cycle_matches_brute_force_at_every_split(seed: int) -> None:
    rng = random.Random(seed)
    _assert_brute_force_at_every_split(_counted_text(rng), rng, [0.0, 0.25, 0.5], (1, 7, 500))


def _numbers_around_counted_text(rng: random.Random) -> str:
    """Stretches with no letter (a counting run, a CSV row, a number a line) before, inside
    and after counted text, a lone letter among them: the rule skips the steps no unit with a
    letter can end in, and these put the edge of that skip everywhere."""
    def numbers() -> str:
        start = rng.randint(0, 500)
        style = rng.choice(["{n}, ", "{n},{m},{m}\n", "{n}\n", "{n}. {m}\n"])
        return "".join(style.format(n=n, m=rng.randint(0, 99))
                       for n in range(start, start + rng.randint(0, 40)))

    counted = _counted_text(rng)
    cut = rng.randint(0, len(counted))
    parts = [numbers(), counted[:cut], numbers(), rng.choice(["", "x", "é", "中"]), numbers(),
             counted[cut:], numbers()]
    return "".join(parts)[:900]


@pytest.mark.parametrize("seed", range(40))
def test_counter_cycle_matches_brute_force_around_stretches_without_letters(seed: int) -> None:
    rng = random.Random(1000 + seed)
    _assert_brute_force_at_every_split(_numbers_around_counted_text(rng), rng,
                                       [0.0, 0.1, 0.25], (1, 5, 64))


@pytest.mark.parametrize("period", [12, 16, 30])
def test_a_unit_whose_only_letter_starts_the_window_is_still_judged(period: int) -> None:
    # One-letter words, one a unit: each step looks back max_period characters for a letter,
    # and the trip can come on the step whose window starts on it (fed a character a delta,
    # where the rule knows where each letter stands exactly). Judging one step too few there
    # cuts a character late (tried).
    cfg = CycleConfig(max_period=period, min_span_text=24, min_span_code=64)
    counter = CounterCycleConfig(min_word_share=0.05, min_span_text=24)

    def line(n: int) -> str:
        return " ".join(["x", str(n)] + ["%;:=~!?#&@^|,"[i % 13]
                                         for i in range((period - 4) // 2)]) + " "

    for lead in range(0, 8):
        text = "7, " * lead + "".join(line(n) for n in range(10, 40))
        expected = brute_force(text, cfg, 0.05, 24)
        assert expected is not None
        trip, _ = feed_pieces(CounterCycleDetector(counter, cfg, "text"), split_fixed(text, 1))
        assert trip is not None and (trip.at, trip.evidence["period"]) == expected


@pytest.mark.parametrize("steps", [1, 2, 3, 1000])
@pytest.mark.parametrize("channel", ["reasoning", "text"])
def test_a_unit_whose_only_letter_lies_far_behind_every_step_end_is_still_judged(
        monkeypatch: pytest.MonkeyPatch, channel: Channel, steps: int) -> None:
    # A step asks whether a letter lies in its window and looks near the step's end first.
    # Here the unit is one step long, its one letter starts every step and the deltas end
    # where steps do (as a guard's batches can), so no step finds a letter near its end: the
    # search must go on back to the window's start. The trip is the one a search of the
    # whole window finds (searching the end alone never trips: tried).
    counter = CounterCycleConfig(min_word_share=0.002)
    step = CounterCycleDetector(counter, channel=channel)._step
    assert step > 2 * counter_cycle._LETTER_TAIL

    def unit(n: int) -> str:
        # Read with the number as one 0: exactly a step long, the letter first.
        marks = "".join("%;:=~!?#&@^|,"[i % 13] + " " for i in range(step))
        return f"x {n} " + marks[: step - 5] + " "

    # Dots first, whole steps of them past the longest period, so that every step of the
    # units asks (none asks while a letter could still lie before the stream's start).
    lead = "." * step * (counter.max_period // step + 1)
    text = lead + "".join(unit(n) for n in range(10, 30))
    assert len(read_counters(unit(10))) == step

    def trip_at() -> tuple[int, int] | None:
        trip, _ = feed_pieces(CounterCycleDetector(counter, channel=channel),
                              split_fixed(text, steps * step))
        return None if trip is None else (trip.at, trip.evidence["period"])

    found = trip_at()
    monkeypatch.setattr(counter_cycle, "_LETTER_TAIL", 1 << 30)
    whole_window = trip_at()
    assert whole_window is not None and whole_window[1] == step
    assert found == whole_window


@pytest.mark.parametrize("channel", ["reasoning", "text"])
def test_a_counted_list_is_cut_where_cycle_sees_nothing(channel: str) -> None:
    intro = "The planets, in order:\n1. Mercury\n2. Venus\n3. Earth\n4. Mars\n"
    text = intro + PLUTO
    assert first_trip(CycleDetector(channel=channel), text) is None  # type: ignore[arg-type]
    trip = first_trip(CounterCycleDetector(channel=channel), text)  # type: ignore[arg-type]
    assert trip is not None and trip.rule == "counter-cycle" and trip.channel == channel
    # Every number reads as one 0: the unit as read is one line shorter than the line.
    assert trip.evidence["period"] == len("0. Pluto\n")
    assert sorted(trip.evidence["unit"]) == sorted("0. Pluto\n")  # a rotation of it
    # Cut once the span (counted in the reading, where each line lost a digit) has
    # repeated past the first counted line; a few characters of the intro may match.
    counter = CounterCycleConfig()
    span = counter.min_span_reasoning if channel == "reasoning" else counter.min_span_text
    lines_in_span = span // len("0. Pluto\n")
    assert len(intro) + span - 10 <= trip.at <= len(intro) + span + lines_in_span + 1
    # The full guard reports it, at the same character.
    guard = ChannelGuard(channel)  # type: ignore[arg-type]
    trips = [t for t in (guard.feed(text[i : i + 32]) for i in range(0, len(text), 32)) if t]
    trips += [t for t in (guard.flush(),) if t]
    assert [(t.rule, t.at) for t in trips] == [("counter-cycle", trip.at)]


def test_a_counter_that_gains_a_digit_stays_one_loop() -> None:
    # 9 -> 10 and 99 -> 100 change the line's width; read as one 0 they do not.
    text = "Here is the list you asked for:\n" + "".join(f"{n}. Pluto\n" for n in range(1, 130))
    trip = first_trip(CounterCycleDetector(channel="text"), text)
    assert trip is not None and trip.evidence["period"] == len("0. Pluto\n")
    start = text.index("1. Pluto")
    assert trip.at - start <= 256 + 3 * len("10. Pluto\n")


def test_counted_cjk_prose_counts_its_characters_as_words() -> None:
    # 2024年。2025年。... : CJK has no spaces; each character is a word of its own.
    assert word_share("0年。") == pytest.approx(1 / 3)
    text = "未来の年表です。" + "".join(f"{year}年。" for year in range(2024, 2200))
    trip = first_trip(CounterCycleDetector(channel="text"), text)
    assert trip is not None and trip.rule == "counter-cycle"


def test_a_verbatim_loop_is_left_to_cycle() -> None:
    # No digit in the unit: cycle's loop, not this rule's.
    assert first_trip(CounterCycleDetector(), "Let me check.\nOK.\n" * 100) is None
    # With a digit that does not change, both see it; the guard names cycle (listed first).
    text = "Step 1 again.\n" * 100
    assert first_trip(CounterCycleDetector(), text) is not None
    guard = ChannelGuard("reasoning")
    trip = next(t for t in (guard.feed(text[i : i + 32]) for i in range(0, len(text), 32)) if t)
    assert trip.rule == "cycle"


@pytest.mark.parametrize("channel", ["reasoning", "text"])
def test_numbers_without_words_are_data(channel: str) -> None:
    rng = random.Random(1)
    numbers = "Here are 400 random numbers: " + ", ".join(
        str(rng.randint(10, 99)) for _ in range(400))
    table = "Multiplication table of 7:\n" + "".join(f"7 × {n} = {7 * n}\n" for n in range(1, 60))
    floats = "[" + ", ".join(f"{rng.random():.4f}" for _ in range(300)) + "]"
    for text in (numbers, table, floats):
        assert first_trip(CounterCycleDetector(channel=channel), text) is None  # type: ignore[arg-type]


@pytest.mark.parametrize("channel", ["reasoning", "text"])
def test_hard_negatives(channel: str) -> None:
    rng = random.Random(2)
    # A numbered list of distinct items, a table with numbered rows, a short training log.
    fruits = ["Apple", "Banana", "Cherry", "Date", "Elderberry", "Fig", "Grape", "Kiwi",
              "Lemon", "Mango", "Nectarine", "Orange", "Papaya", "Quince", "Raspberry"]
    numbered = "".join(f"{i}. {f}: {rng.choice(['sweet', 'tart', 'mild'])} and "
                       f"{rng.choice(['red', 'yellow', 'green'])}\n"
                       for i, f in enumerate(fruits * 3, 1))
    rows = "| # | name | score |\n|---|---|---|\n" + "".join(
        f"| {i} | {rng.choice(fruits)} | {rng.randint(1, 99)} |\n" for i in range(1, 60))
    log = "".join(f"Epoch {i}/30 - loss: {rng.random():.4f} - accuracy: {rng.random():.4f}\n"
                  for i in range(1, 31))
    for text in (numbered, rows, log):
        assert first_trip(CounterCycleDetector(channel=channel), text) is None, text[:60]  # type: ignore[arg-type]


def test_a_base64_image_attached_twice_is_data() -> None:
    # CPython's test_email attaches one PNG as Face-1 ... Face-N: periodic once digits read
    # as 0, and no loop; its units hold no words.
    path = Path(sysconfig.get_paths()["stdlib"]) / "test" / "test_email" / "test_email.py"
    if not path.exists():
        pytest.skip(f"{path} is not installed with this Python")
    text = path.read_text(encoding="utf-8")
    loose = CounterCycleConfig(min_word_share=0.0, words_per_number=0.5, min_copies=2,
                               min_span_text=256)
    trip = first_trip(CounterCycleDetector(loose, channel="text"), text)
    assert trip is not None and word_share(trip.evidence["unit"]) < 0.1
    assert first_trip(CounterCycleDetector(channel="text"), text) is None
    assert first_trip(CounterCycleDetector(), text) is None


@given(st.text(alphabet="ab 0.\n:é(", min_size=1, max_size=40), st.integers(0, 39))
def test_word_share_is_the_same_for_every_rotation(unit: str, k: int) -> None:
    k %= len(unit)
    assert word_share(unit[k:] + unit[:k]) == pytest.approx(word_share(unit))


@given(st.text(alphabet="ab0 .\n年,'", min_size=1, max_size=30), st.integers(0, 29))
def test_a_rotation_counts_from_the_kept_verdicts_as_it_is_judged(unit: str, k: int) -> None:
    # Rules of one setting share what they judged: a rotation is answered from its unit's.
    k %= len(unit)
    rotated = unit[k:] + unit[:k]
    first, fresh = CounterCycleDetector(), CounterCycleDetector()
    first._counted_prose(unit)
    assert fresh._counted_prose(rotated) == fresh._judge_counted_prose(rotated)
    assert fresh._judge_counted_prose(rotated) == fresh._judge_counted_prose(unit)


def test_word_share_examples() -> None:
    assert word_share("00. Pluto\n") == pytest.approx(5 / 8)
    assert word_share("0000000000") == 0.0
    assert word_share("00, ") == 0.0
    assert word_share("Use a timer: it helps.\n") == 1.0


def test_smollm2_runaway_lists() -> None:
    cut = {}
    for stream in smollm2_lists():
        # No exact period and no line that repeats whole: cycle and lines never see them.
        others = Config().replace(**{"counter_cycle.enabled": False})
        guard = ChannelGuard("text", others)
        assert not any(guard.feed(stream.text[i : i + 32])
                       for i in range(0, len(stream.text), 32)), stream.id
        trip = first_trip(CounterCycleDetector(channel="text"), stream.text)
        if trip is not None:
            cut[stream.id] = trip.at
            assert trip.at < len(stream.text) // 2 + 500
        # The full guard names this rule, at the same character.
        full = ChannelGuard("text")
        trips = [t for t in (full.feed(stream.text[i : i + 32])
                             for i in range(0, len(stream.text), 32)) if t]
        assert trip is not None and [(t.rule, t.at) for t in trips] == [
            ("counter-cycle", trip.at)]
    # The two whose units once looked like code ("41. Calcium (Ca)", "Le décembre 41: 42")
    # are prose to the code gate now: prose brackets and a colon before a space.
    assert set(cut) == {"smollm2-planets", "smollm2-fruits", "smollm2-study-tips",
                        "smollm2-animals", "smollm2-elements", "smollm2-french-days"}


def test_off_switch_and_config_errors() -> None:
    assert Config().replace(**{"counter_cycle.enabled": False}).counter_cycle.enabled is False
    with pytest.raises(Exception, match=r"counter_cycle.min_word_share"):
        CounterCycleConfig(min_word_share=1.5)


def test_an_endless_number_a_digit_a_delta_keeps_memory_flat_and_the_trip_in_place() -> None:
    # Digits that only go on with the last number drop where the reading stands: one entry,
    # however many deltas bring them, and a later trip lands on the same character at any split.
    loop = "".join(f"Step {i}: the count is {i * 37 % 1000} now.\n" for i in range(120))
    text = "Here is the number: " + "7" * 30_000 + ", and now the steps.\n" + loop
    detector = CounterCycleDetector(channel="text")
    for digit in text[: 20 + 30_000]:
        assert detector.feed(digit) is None
    assert len(detector._drops) <= 2
    one_by_one = detector
    for char in text[20 + 30_000 :]:
        trip = one_by_one.feed(char)
        if trip is not None:
            break
    whole = first_trip(CounterCycleDetector(channel="text"), text, size=997)
    assert trip is not None and whole is not None
    assert trip.at == whole.at and trip.at > 30_000


@pytest.mark.parametrize("seed", range(6))
def test_a_trip_maps_back_through_thousands_of_deltas_that_dropped_digits(seed: int) -> None:
    # Numeric text fed a few characters at a time leaves one entry per delta that dropped a
    # digit (more than the 4,096 kept, so the oldest are forgotten); the counted list after
    # it must still map back to the character a whole-text read finds.
    rng = random.Random(seed)
    noise = ", ".join(str(rng.randrange(10, 10**6)) for _ in range(rng.randrange(3000, 6000)))
    start = rng.randrange(1, 500)
    loop = "".join(f"{n}. Pluto is planet number {n * 7}\n" for n in range(start, start + 200))
    text = noise + "\n\nAnd the list:\n" + loop
    expected = first_trip(CounterCycleDetector(channel="text"), text, size=len(text))
    assert expected is not None and expected.at > len(noise)
    detector = CounterCycleDetector(channel="text")
    trip, _ = feed_pieces(detector, split_random(text, rng, 6))
    assert detector._forgotten > 0
    assert trip is not None and (trip.at, trip.evidence) == (expected.at, expected.evidence)


def test_counter_cycle_runs_its_own_copy_of_cycles_code() -> None:
    # The interpreter specializes a function for the types it meets, in its code object: the
    # two rules run one after the other on every batch, so each has code of its own (the
    # same functions, the same answers: the split tests above run the copies).
    copies = 0
    for name, base in vars(CycleDetector).items():
        if not isinstance(base, types.FunctionType):
            continue
        own = getattr(CounterCycleDetector, name)
        assert own.__code__ is not base.__code__, name
        if own.__code__.co_code == base.__code__.co_code:  # not one it overrides
            copies += 1
            assert own.__doc__ == base.__doc__ and own.__defaults__ == base.__defaults__
            assert own.__annotations__ == base.__annotations__
    assert copies >= 10
    feed = CounterCycleDetector.feed
    assert feed is not CycleDetector.feed
    assert feed.__code__.co_code == CycleDetector.feed.__code__.co_code
    text = "14. Pluto is far.\n15. Pluto is far.\n16. Pluto is far.\n" * 40
    assert first_trip(CounterCycleDetector(channel="text"), text, 4) is not None


@pytest.mark.parametrize("seed", range(3))
def test_rows_of_data_leave_out_multiples_judged_alike_and_trip_as_brute_force(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # SQL inserts read with every number as 0 are code-shaped: the row's unit needs the code
    # span, and so does each repetition of it, whose least span is shorter. Those multiples
    # are left out on their kept verdict (once judged each was judged again at every step);
    # the trip stays where the brute force puts it, at every split.
    rng = random.Random(seed)
    head = "".join(rng.choice("ab cd\n") for _ in range(rng.randint(0, 60)))
    first = rng.randint(0, 120)
    rows = "".join(f"INSERT INTO t VALUES ({n}, '{rng.randrange(10**5)}', "
                   f"{rng.random():.4f});\n" for n in range(first, first + 22))
    text = head + rows
    # The row's multiples up to 108 characters need less than the code span at the least
    # (three copies and 128: 344 and 452), but their units are code-shaped too.
    cfg = CycleConfig(max_period=120, min_span_text=48, min_span_code=600)
    counter = CounterCycleConfig(min_span_text=48)
    expected = brute_force(text, cfg, counter.min_word_share, cfg.min_span_text, counter)
    assert expected is not None and expected[1] == len(read_counters(rows.split("\n")[0])) + 1
    left_out = 0
    keep = CycleDetector._unjudged_multiples

    def counted(self: CycleDetector, periods: list[int], *args: int) -> list[int]:
        nonlocal left_out
        kept = keep(self, periods, *args)
        left_out += len(periods) - len(kept)
        return kept

    monkeypatch.setattr(CounterCycleDetector, "_unjudged_multiples", counted)
    for pieces in (*(split_fixed(text, size) for size in (1, 7, 64)), split_random(text, rng)):
        trip, _ = feed_pieces(CounterCycleDetector(counter, cfg, "text"), pieces)
        assert trip is not None and (trip.at, trip.evidence["period"]) == expected
    assert left_out > 0
