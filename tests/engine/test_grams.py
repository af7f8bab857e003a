"""Shingles and the bounded 4-gram set of a call."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

import loopbreak._engine.grams as grams_module
from loopbreak._engine.grams import _TAKE_CHARS, GramSet, jaccard, shingles


def _substrings(block: str, size: int, step: int) -> set[str]:
    if len(block) < size:
        return {block} if block else set()
    return {block[i : i + size] for i in range(0, len(block) - size + 1, step)}


def test_shingles_are_taken_every_step() -> None:
    # Other sizes are the substrings themselves.
    assert shingles("abcdefgh", 3, 2) == {"abc", "cde", "efg"}
    assert shingles("ab", 4, 2) == {"ab"}
    assert shingles("", 4, 2) == set()
    assert len(shingles("abcdefgh", 4, 2)) == 3
    assert len(shingles("abcdabcdab", 4, 2)) == 2  # abcd, cdab


# BMP letters, NUL, lone surrogates and astral pictographs: the key's two paths must agree.
_CHARS = st.sampled_from("ab c\x00\u00e9\u4e2d\ud800\ude00\U0001f600\U0001f4a5")


@given(st.text(_CHARS, max_size=40), st.text(_CHARS, max_size=40), st.sampled_from([1, 2, 4]))
def test_shingle_keys_compare_as_the_substrings_do(a: str, b: str, step: int) -> None:
    """Keys are equal exactly when the substrings are, across the word and the string path
    (one block with an astral character, one without), so every overlap is the same."""
    keys_a, keys_b = shingles(a, 4, step), shingles(b, 4, step)
    subs_a, subs_b = _substrings(a, 4, step), _substrings(b, 4, step)
    assert len(keys_a) == len(subs_a) and len(keys_b) == len(subs_b)
    assert len(keys_a & keys_b) == len(subs_a & subs_b)


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


def _grams_one_delta_at_a_time(deltas: list[str], cap: int) -> tuple[set[str], int]:
    """The gram set as defined: each delta's grams added, halved whenever over the cap."""
    grams: set[str] = set()
    level, text = 0, ""
    for delta in deltas:
        start = max(0, len(text) - 3)
        text += delta
        grams.update(g for g in (text[i : i + 4] for i in range(start, len(text) - 3))
                     if not hash(g) & ((1 << level) - 1))
        while len(grams) > cap:
            level += 1
            grams = {g for g in grams if not hash(g) & ((1 << level) - 1)}
    return grams, level


@given(st.lists(st.text(alphabet="abcdefgh \n😀", max_size=300), max_size=40),
       st.sampled_from([8, 64, 1 << 16]))
def test_gram_set_taken_in_batches_is_the_set_taken_delta_by_delta(
        deltas: list[str], cap: int) -> None:
    grams = GramSet(cap=cap)
    for delta in deltas:
        grams.feed(delta)
    expected, level = _grams_one_delta_at_a_time(deltas, cap)
    assert grams.consumed == sum(map(len, deltas))
    assert (grams.level, grams.sample(grams.level), len(grams)) == (level, expected,
                                                                      len(expected))


def test_gram_set_taken_in_batches_spans_their_edges() -> None:
    # Thousands of characters in token-sized deltas: many batches, grams across each edge.
    rng = random.Random(5)
    deltas = ["".join(rng.choice("abcdefgh \n😀") for _ in range(rng.randrange(1, 9)))
              for _ in range(3000)]
    for cap in (1 << 16, 2048):
        grams = GramSet(cap=cap)
        for delta in deltas:
            grams.feed(delta)
        expected, level = _grams_one_delta_at_a_time(deltas, cap)
        assert (grams.level, grams.sample(grams.level)) == (level, expected)


def test_sampled_gram_set_read_at_any_point_is_the_set_taken_delta_by_delta(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Past its cap a gram set tests a batch's grams at once or gathers them first, and
    # switches between the two: read between batches, mid-gathering and after many sifts,
    # it must be the defined set, and what it holds while nobody reads it must stay
    # bounded. Stretches of new grams (random letters) alternate with stretches of
    # repeated ones (three phrases, now and then a new one, so gathering fills up).
    monkeypatch.setattr(grams_module, "_FRESH_GRAMS", 512)
    rng = random.Random(11)
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ 😀"
    pool = ["the retry loop never sleeps ", "let me check the file again ", "好。执行。"]
    deltas: list[str] = []
    for stretch in range(17):
        if stretch % 2:
            text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(3000, 12_000)))
        else:
            text = "".join("".join(rng.choice(alphabet) for _ in range(24)) + " "
                           if rng.random() < 0.15 else rng.choice(pool) for _ in range(400))
        at = 0
        while at < len(text):
            step = rng.randrange(1, 9)
            deltas.append(text[at : at + step])
            at += step
    cap = 2048
    grams = GramSet(cap=cap)
    reads = set(rng.sample(range(len(deltas)), 40))
    most_held = 0
    ways = [True]  # whether the set gathers (it does until a fill was mostly distinct)
    for i, delta in enumerate(deltas):
        grams.feed(delta)
        most_held = max(most_held, len(grams._grams) + len(grams._fresh))
        gathering = grams._test_left <= 0
        if gathering != ways[-1]:
            ways.append(gathering)
        if i in reads:
            expected, level = _grams_one_delta_at_a_time(deltas[: i + 1], cap)
            assert (grams.level, grams.sample(grams.level)) == (level, expected)
    expected, level = _grams_one_delta_at_a_time(deltas, cap)
    assert level > 2 and (grams.level, grams.sample(grams.level)) == (level, expected)
    assert most_held <= cap + 512 + _TAKE_CHARS and len(ways) > 8


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
