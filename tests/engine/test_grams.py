"""Shingles and the bounded 4-gram set of a call."""

from __future__ import annotations

import random

from loopbreak._engine.grams import GramSet, jaccard, shingles


def test_shingles_are_taken_every_step() -> None:
    assert shingles("abcdefgh", 4, 2) == frozenset({"abcd", "cdef", "efgh"})
    assert shingles("ab", 4, 2) == frozenset({"ab"})
    assert shingles("", 4, 2) == frozenset()


def test_jaccard() -> None:
    a, b = frozenset("abc"), frozenset("bcd")
    assert jaccard(a, b) == 0.5 and jaccard(a, frozenset()) == 0.0


def test_gram_set_spans_delta_boundaries() -> None:
    whole, split = GramSet(), GramSet()
    text = "the retry loop never sleeps"
    whole.feed(text)
    for ch in text:
        split.feed(ch)
    assert whole.sample(0) == split.sample(0) and len(whole) == len(set(
        text[i : i + 4] for i in range(len(text) - 3)))


def test_gram_set_stays_bounded_and_estimates_containment() -> None:
    rng = random.Random(3)
    alphabet = "abcdefghijklmnopqrstuvwxyz "
    text = "".join(rng.choice(alphabet) for _ in range(300_000))
    big, same = GramSet(cap=4096), GramSet(cap=4096)
    big.feed(text)
    same.feed(text[: len(text) // 2])
    assert len(big) <= 4096 and big.level > 0
    # Half of the text holds most of its grams; the sample sees nearly the exact share.
    exact_small, exact_big = GramSet(cap=1 << 30), GramSet(cap=1 << 30)
    exact_small.feed(text[: len(text) // 2])
    exact_big.feed(text)
    exact = exact_small.containment(exact_big)
    assert abs(same.containment(big) - exact) < 0.05
    assert GramSet().containment(big) == 0.0
