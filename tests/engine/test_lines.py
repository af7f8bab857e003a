"""lines: the phrase pool, a loop with no period."""

from __future__ import annotations

import pytest

from loopbreak import CycleDetector, LinesConfig, LinesDetector
from loopbreak._samples import phrase_pool
from support import first_trip, hard_negatives


def test_lines_trips_on_a_reshuffled_pool() -> None:
    sample = phrase_pool()
    trip = first_trip(LinesDetector(), sample.text)
    assert trip is not None and trip.rule == "lines"
    assert trip.evidence["coverage"] >= LinesConfig().min_coverage
    assert trip.evidence["concentration"] >= LinesConfig().min_concentration
    assert trip.evidence["repeated_mass"] >= LinesConfig().min_mass


def test_a_reshuffled_pool_has_no_period_for_the_cycle_rule() -> None:
    sample = phrase_pool()
    assert first_trip(CycleDetector(), sample.text) is None


def test_concentration_spares_code_quoted_twice() -> None:
    # Every line seen twice: coverage 1.0, concentration 2.
    body = "".join(f"step {i}: update the handler for case {i}\n" for i in range(120))
    text = body + body
    assert first_trip(LinesDetector(LinesConfig(min_concentration=1.5)), text) is not None
    assert first_trip(LinesDetector(), text) is None


def test_short_and_indented_lines_do_not_count() -> None:
    code = "".join("    }\n    pass\n        return None\n" for _ in range(400))
    assert first_trip(LinesDetector(), code) is None
    assert first_trip(LinesDetector(LinesConfig(count_indented=True)), code) is not None


def test_window_forgets_old_lines() -> None:
    pool = "".join(f"{w}\n" for w in ["Go.", "OK.", "Now.", "Writing."] * 60)
    fresh = "".join(f"a different sentence number {i} that is new\n" for i in range(400))
    # The pool is far behind the window by the time it ends: nothing trips after it.
    detector = LinesDetector(LinesConfig(min_mass=4096))
    assert first_trip(detector, pool + fresh) is None
    assert detector._mass <= LinesConfig().window_chars + 64


def test_overlong_lines_are_not_stored() -> None:
    detector = LinesDetector()
    first_trip(detector, "x" * 50_000)
    assert len(detector._partial) <= 4 * LinesConfig().max_line_chars


@pytest.mark.parametrize("name", sorted(hard_negatives()))
@pytest.mark.parametrize("channel", ["reasoning", "text"])
def test_lines_leaves_hard_negatives_alone(name: str, channel: str) -> None:
    assert first_trip(LinesDetector(channel=channel), hard_negatives()[name]) is None  # type: ignore[arg-type]


def _numbered(items: list[str]) -> str:
    return "".join(f"{i}. {item}\n" for i, item in enumerate(items, 1))


def test_a_pool_said_as_a_numbered_list_trips_under_new_numbers() -> None:
    # Shaped like a smart-glasses answer: the same books recommended again and again, each
    # time under the next number, so no two lines are equal as written.
    books = ['"The Immortal Life of Henrietta Lacks" by Rebecca Skloot - the story of the cells.',
             '"The Handmaid\'s Tale" by Margaret Atwood - a dystopian novel about control.',
             '"To Kill a Mockingbird" by Harper Lee - a classic novel of the American South.']
    order = [0, 1, 0, 2, 1, 0, 2, 2, 1, 0] * 4
    text = "Here are some books you may like:\n" + _numbered([books[k] for k in order])
    trip = first_trip(LinesDetector(channel="text"), text)
    assert trip is not None and trip.evidence["distinct_lines"] <= 4
    # The same number of distinct items is a list, not a pool.
    distinct = _numbered([f"{books[k % 3][:40]} (edition {k})" for k in range(40)])
    assert first_trip(LinesDetector(channel="text"), distinct) is None
    # The number is read off the same way however the stream is split.
    for size in (1, 3, 7, 64, len(text)):
        split = first_trip(LinesDetector(channel="text"), text, size=size)
        assert split is not None and split.at == trip.at
