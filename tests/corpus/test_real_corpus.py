"""The real corpus: every real loop cut, every real productive call left alone.

Reads ``$LOOPBREAK_CORPUS`` (default ``../shared/corpus``); skips with that reason
where it is absent. Everything here runs the shipped defaults through
``loopbreak.scan``, the same path ``loopbreak scan`` takes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import loopbreak
from loopbreak.offline.corpus import STRONG_MODELS, stdlib_sources
from support import load_fixture

# What the seed plugin published for the two phrase-pool bleeds (chars from the call's start).
SEED_CUTS = {330_188: 3_264, 124_070: 17_888}


def test_every_real_loop_is_cut(corpus: Path) -> None:
    for item in load_fixture(corpus, "fixtures-reasoning-bleed.json")["loops"]:
        trip = loopbreak.scan(item["text"])
        assert trip is not None, f"loop {item['seq']} was not cut"


def test_both_bleeds_are_cut_no_later_than_the_seed(corpus: Path) -> None:
    for item in load_fixture(corpus, "fixtures-reasoning-lines.json")["bleeds"]:
        trip = loopbreak.scan(item["head"])
        assert trip is not None
        assert trip.offset <= SEED_CUTS[item["reasoningChars"]], (item["reasoningChars"], trip)


def test_productive_calls_are_left_alone(corpus: Path) -> None:
    bleed = load_fixture(corpus, "fixtures-reasoning-bleed.json")
    lines = load_fixture(corpus, "fixtures-reasoning-lines.json")
    quote = load_fixture(corpus, "fixtures-reasoning-quote.json")
    texts = ([i["text"] for i in bleed["normals"]] + [i["head"] for i in lines["controls"]]
             + [i["text"] for i in quote["quotes"]])
    assert len(texts) == 12
    for text in texts:
        assert loopbreak.scan(text) is None
        assert loopbreak.scan(text, "text") is None


def test_the_quote_call_survives_every_delta_size(corpus: Path) -> None:
    text = load_fixture(corpus, "fixtures-reasoning-quote.json")["quotes"][0]["text"]
    for size in (1, 7, 32, 500, len(text)):
        assert loopbreak.scan(text, delta_chars=size) is None


def test_at_least_two_of_three_stalls_are_cut(corpus: Path) -> None:
    stalls = load_fixture(corpus, "fixtures-reasoning-stall.json")["stalls"]
    cut = [loopbreak.scan(item["text"]) for item in stalls]
    assert sum(trip is not None for trip in cut) >= 2


def test_strong_models_answers_are_never_cut(corpus: Path) -> None:
    tripped = []
    total = 0
    for model in STRONG_MODELS:
        answers = json.loads((corpus / "alpaca_eval" / f"{model}.json").read_text("utf-8"))
        for i, answer in enumerate(answers):
            total += 1
            trip = loopbreak.scan(answer["output"], "text")
            if trip is not None:
                tripped.append((model, i, trip.rule, trip.at))
    assert total == 1610
    assert tripped == []


@pytest.mark.slow
@pytest.mark.parametrize("channel", ["reasoning", "text"])
def test_standard_library_sources_are_never_cut(channel: str) -> None:
    # The hard cap (max_reasoning_chars) is a budget, not a loop rule: a 200 kB source file
    # exceeds it by design, so it is off here and every shape rule is on.
    config = loopbreak.Config().replace(**{"limits.max_reasoning_chars": 0})
    tripped = []
    count = 0
    for stream in stdlib_sources((channel,)):  # type: ignore[arg-type]
        count += 1
        trip = loopbreak.scan(stream.text, stream.channel, config)
        if trip is not None:
            tripped.append((stream.id, trip.rule, trip.at))
    assert count > 1000
    assert tripped == []
