"""The tool rules' caches: bounded by the characters they keep, not their number."""

from __future__ import annotations

import pytest

from loopbreak._engine.text_cache import TextCache


class _Counted:
    def __init__(self) -> None:
        self.calls: list[tuple[object, ...]] = []

    def __call__(self, text: str, *extra: object) -> str:
        self.calls.append((text, *extra))
        return text.upper() + "".join(map(str, extra))


def test_texts_taken_in_turn_within_half_the_budget_are_computed_once() -> None:
    compute = _Counted()
    cache: TextCache[str] = TextCache(compute, max_chars=20_000, max_text_chars=100)
    texts = [f"result {i:04d} " * 5 for i in range(600)]  # 60 chars each: 36,000 in all
    working = texts[:150]  # 9,000 characters: under half the budget
    for _ in range(4):
        assert [cache(t) for t in working] == [t.upper() for t in working]
    assert len(compute.calls) == len(working)


def test_what_is_kept_stays_within_the_budget_and_the_newest_stays() -> None:
    compute = _Counted()
    cache: TextCache[str] = TextCache(compute, max_chars=20_000, max_text_chars=100)
    texts = [f"result {i:04d} " * 5 for i in range(600)]
    for text in texts:
        cache(text)
        assert cache.chars <= 20_000
    compute.calls.clear()
    newest = texts[-150:]  # the last 9,000 characters seen
    for text in newest:
        cache(text)
    assert compute.calls == []
    cache(texts[0])  # long gone: computed again
    assert compute.calls == [(texts[0],)]


def test_a_text_over_the_size_limit_is_computed_each_time_and_not_kept() -> None:
    compute = _Counted()
    cache: TextCache[str] = TextCache(compute, max_chars=1_000, max_text_chars=10)
    assert cache("x" * 11) == "X" * 11 and cache("x" * 11) == "X" * 11
    assert len(compute.calls) == 2 and len(cache) == 0
    cache("x" * 10)
    cache("x" * 10)
    assert len(compute.calls) == 3 and len(cache) == 1


def test_extra_arguments_are_part_of_the_key() -> None:
    compute = _Counted()
    cache: TextCache[str] = TextCache(compute, max_chars=1_000, max_text_chars=100)
    assert cache("error 12", 160) == "ERROR 12160"
    assert cache("error 12", 80) == "ERROR 1280"
    assert cache("error 12", 160) == "ERROR 12160"
    assert compute.calls == [("error 12", 160), ("error 12", 80)]
    assert cache.chars == 16
    cache.clear()
    assert len(cache) == 0 and cache.chars == 0
    cache("error 12", 160)
    assert len(compute.calls) == 3


def test_the_budget_holds_to_the_character() -> None:
    cache: TextCache[str] = TextCache(_Counted(), max_chars=1_000, max_text_chars=70)
    for i in range(400):
        cache(f"{i:03d}" * (1 + i % 23))  # 3 to 69 characters
        assert cache.chars <= 1_000


def test_a_cache_without_room_for_two_of_its_longest_texts_is_refused() -> None:
    with pytest.raises(ValueError, match="max_text_chars"):
        TextCache(str, max_chars=100, max_text_chars=51)
