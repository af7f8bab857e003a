"""stale-words (off by default): word runs said before, whatever the period."""

from __future__ import annotations

import random

from loopbreak import Config, scan
from loopbreak._config import StaleWordsConfig
from loopbreak._engine.call_guard import build_detectors
from loopbreak._engine.detectors import StaleWordsDetector
from support import first_trip

PARAGRAPHS = [
    "The first step is to read the configuration file and check which keys it sets. ",
    "Then the loader merges the environment over the file, and explicit overrides win. ",
    "A bad value is rejected with a message that names the key and the allowed range. ",
]


def test_a_pool_of_paragraphs_is_cut_once_it_goes_stale() -> None:
    rng = random.Random(1)
    text = "Let me explain how configuration works here. " + "".join(
        rng.choice(PARAGRAPHS) for _ in range(60))
    trip = first_trip(StaleWordsDetector(), text)
    assert trip is not None and trip.rule == "stale-words"
    assert trip.evidence["stale_share"] >= StaleWordsConfig().min_stale_share


def test_fresh_prose_is_never_stale() -> None:
    rng = random.Random(2)
    words = [f"w{i}" for i in range(5000)]
    text = " ".join(rng.choice(words) for _ in range(6000))
    assert first_trip(StaleWordsDetector(StaleWordsConfig(ngram=3, min_stale_share=0.5)),
                      text) is None


def test_indented_code_is_not_read() -> None:
    code = "def f(x):\n" + "    return self.assertEqual(x, y)\n" * 500
    assert first_trip(StaleWordsDetector(), code) is None
    listed = "Steps:\n" + "  - read the file and check the keys again\n" * 500
    assert first_trip(StaleWordsDetector(), listed) is not None


def test_cjk_characters_are_words() -> None:
    text = "我们先读取配置文件，然后检查每一个键。" * 80
    assert first_trip(StaleWordsDetector(), text) is not None


def test_off_by_default_and_on_text_only_when_enabled() -> None:
    text = "".join(PARAGRAPHS) * 40
    names = {type(d).__name__ for d in build_detectors("text", Config())}
    assert "StaleWordsDetector" not in names
    on = Config().replace(**{"stale_words.enabled": True, "cycle.max_period": 0,
                             "counter_cycle.enabled": False, "lines.min_mass": 0})
    assert scan(text, "text", on) is not None and scan(text, "text", on).rule == "stale-words"
    assert scan(text, "reasoning", on) is None or scan(text, "reasoning", on).rule != \
        "stale-words"
