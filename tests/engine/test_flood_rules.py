"""char-run, control-tokens and progression: the floods no unit-based rule can see."""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from loopbreak import Config, scan
from loopbreak._config import (
    CharFloodConfig,
    CharRunConfig,
    ControlTokensConfig,
    ProgressionConfig,
)
from loopbreak._engine.charclass import CONTROL_TOKEN
from loopbreak._engine.detectors import (
    CharFloodDetector,
    CharRunDetector,
    ControlTokensDetector,
    CycleDetector,
    DegeneracyDetector,
    ProgressionDetector,
)
from support import feed_pieces, first_trip, split_fixed, split_random

INTRO = "Here is what I found after reading the report carefully.\n"


# --- char-run -------------------------------------------------------------------------------

@pytest.mark.parametrize("char", ["る", "！", "0", "1", "\x08", "」", "\n"])
def test_a_run_of_one_character_is_cut_at_its_limit(char: str) -> None:
    text = INTRO + char * 2000
    trip = first_trip(CharRunDetector(channel="text"), text)
    assert trip is not None and trip.rule == "char-run"
    # The run starts where the intro's own characters stop being ``char``.
    assert trip.at == len(INTRO.rstrip(char)) + CharRunConfig().max_run
    # cycle ignores one-character units on purpose, degeneracy lets letters and digits by.
    assert first_trip(CycleDetector(channel="text"), text) is None


@pytest.mark.parametrize("char", [" ", "-", "=", "_", "\t"])
def test_layout_characters_run_longer(char: str) -> None:
    cfg = CharRunConfig()
    assert first_trip(CharRunDetector(), INTRO + char * (cfg.max_layout_run - 1) + "x") is None
    trip = first_trip(CharRunDetector(), INTRO + char * 5000)
    assert trip is not None and trip.at == len(INTRO) + cfg.max_layout_run


def test_runs_that_clean_text_holds_are_left_alone() -> None:
    # A padded markdown table (379 dashes, 367 spaces in a real AlpacaEval answer), a
    # 200-character literal as CPython's tests spell one out.
    table = "| Product" + " " * 367 + "| Price |\n|" + "-" * 379 + "|-------|\n"
    literal = "    self.assertEqual(r(s), " + "'" + "a" * 200 + "')\n"
    for text in (table * 3, literal * 3):
        assert first_trip(CharRunDetector(channel="text"), text) is None


def test_char_run_counts_across_deltas_exactly() -> None:
    text = INTRO + "ab" * 10 + "!" * 1000
    expected = first_trip(CharRunDetector(), text, size=1)
    assert expected is not None
    rng = random.Random(3)
    for pieces in (split_fixed(text, 7), split_fixed(text, 300), split_random(text, rng)):
        detector = CharRunDetector()
        trip = next(t for t in (detector.feed(p) for p in pieces) if t is not None)
        assert trip.at == expected.at


# --- char-flood ----------------------------------------------------------------------------

# Real floods of the development corpus, their runs broken (by leaked tokens, line breaks).
BROKEN_FLOODS = {
    "letter between unk tokens": ("る" * 37 + "<unk|LLM-jp>") * 20,
    "a column of ones": "\n".join(random.Random(3).choice(["1", "1", "1", "11", "12", "1111"])
                                for _ in range(400)),
    "backspaces and tokens": ("\x08" * 120 + "<unk|LLM-jp>") * 6,
}


@pytest.mark.parametrize("name", sorted(BROKEN_FLOODS))
def test_a_broken_flood_of_one_character_is_cut(name: str) -> None:
    flood = BROKEN_FLOODS[name]
    text = INTRO + flood
    assert first_trip(CharRunDetector(channel="text"), text) is None  # no run reaches 256
    trip = first_trip(CharFloodDetector(channel="text"), text, 5)
    assert trip is not None and trip.rule == "char-flood"
    cfg = CharFloodConfig()
    assert trip.at - len(INTRO) <= (cfg.streak + 1) * cfg.block_chars
    # the same character at the same place however the stream is split
    again, _ = feed_pieces(CharFloodDetector(channel="text"), split_random(text, random.Random(1)))
    assert again is not None and (again.at, again.evidence) == (trip.at, trip.evidence)


@pytest.mark.parametrize("text", [
    "b'" + "z" * 75 + "=\n" + "z" * 75 + "=\n" + "z" * 40 + "'\n",  # test data (test_quopri)
    "| Name | Value |\n|" + "-" * 300 + "|" + " " * 300 + "|\n",  # a padded table
    "\n".join(str(n) for n in range(1000, 1400)),  # a column of numbers
    "0x00, 0x01, 0x00, 0x00, 0xff, 0x00, 0x10, 0x00, " * 30,  # a byte table
    "The answer is 1,000,000,000,000,000,000,000,000,000,000,000,000 exactly.\n" * 3,
])
def test_text_that_one_character_does_not_fill_is_left_alone(text: str) -> None:
    assert first_trip(CharFloodDetector(channel="text"), INTRO + text * 4, 5) is None


@settings(max_examples=400, deadline=None)
@given(block=st.text(st.sampled_from("0123456789()[],;:'\"/\\!?@$%^&`\x00\x7f"
                                     " \n\t-=_*~.|+#aZ"), min_size=64, max_size=64),
       share=st.sampled_from([0.5, 0.6, 0.85, 0.95]))
def test_a_block_ruled_out_by_its_count_bound_holds_no_filler(block: str, share: float) -> None:
    # The bound read in C only ever rules out a block the full reading finds no filler in;
    # blocks near the share are drawn as well (a filler at 40 to 60 of 64 characters).
    detector = CharFloodDetector(CharFloodConfig(min_share=share))
    if not detector.may_be_filled(block):
        assert detector._top_filler(block) == ""


@settings(max_examples=200, deadline=None)
@given(filler=st.sampled_from("0)/;'\x00"), count=st.integers(20, 64),
       rest=st.text(st.sampled_from(" \n-=.|ab"), min_size=64, max_size=64),
       seed=st.integers(0, 1000))
def test_a_nearly_filled_block_is_judged_in_full(filler: str, count: int, rest: str,
                                                 seed: int) -> None:
    chars = list(filler * count + rest[: 64 - count])
    random.Random(seed).shuffle(chars)
    block = "".join(chars)
    detector = CharFloodDetector()
    if not detector.may_be_filled(block):
        assert detector._top_filler(block) == ""
    if detector._top_filler(block):
        assert detector.may_be_filled(block)



@settings(max_examples=400, deadline=None)
@given(filler=st.sampled_from("0)/;'\x00"), count=st.integers(16, 64),
       others=st.permutations("123456789,;:!?%$&@^`~"), kinds=st.integers(0, 21),
       pad=st.text(st.sampled_from(" \n-=.|ab"), min_size=64, max_size=64),
       share=st.sampled_from([0.5, 0.6, 0.75, 0.85, 0.95]), seed=st.integers(0, 1000))
def test_a_filler_beside_many_kinds_of_other_characters_is_judged_in_full(
        filler: str, count: int, others: list[str], kinds: int, pad: str, share: float,
        seed: int) -> None:
    # The bound on how many kinds of characters a filled block can hold: blocks whose other
    # characters are each of a different kind, at and around every share.
    chars = (list(filler * count) + others[:kinds] + list(pad))[:64]
    random.Random(seed).shuffle(chars)
    block = "".join(chars)
    detector = CharFloodDetector(CharFloodConfig(min_share=share))
    if detector._top_filler(block):
        assert detector.may_be_filled(block)
    if not detector.may_be_filled(block):
        assert detector._top_filler(block) == ""


@settings(max_examples=400, deadline=None)
@given(kinds=st.integers(1, 64), base=st.sampled_from([0x100, 0x4E00, 0x1F300, 0xD800]),
       stride=st.sampled_from([1, 7, 256, 257]), filler=st.integers(0, 63),
       count=st.integers(0, 64), share=st.sampled_from([0.5, 0.6, 0.75, 0.85, 0.95]),
       seed=st.integers(0, 1000))
def test_a_block_outside_ascii_ruled_out_by_its_low_bytes_holds_no_filler(
        kinds: int, base: int, stride: int, filler: int, count: int, share: float,
        seed: int) -> None:
    # Characters a stride apart share low bytes (256, CJK and astral pages, lone
    # surrogates): the bound counts at most as many kinds as there are, around the most a
    # filled block holds.
    rng = random.Random(seed)
    chars = [chr(base + stride * rng.randrange(kinds)) for _ in range(64 - count)]
    chars += [chr(base + stride * (filler % kinds))] * count
    rng.shuffle(chars)
    block = "".join(chars)
    detector = CharFloodDetector(CharFloodConfig(min_share=share))
    if not detector.may_be_filled(block):
        assert detector._top_filler(block) == ""
        assert len(set(block)) > detector._max_distinct


@pytest.mark.parametrize(("share", "size"), [(0.5, 40), (0.75, 64), (0.75, 40), (0.85, 40),
                                             (0.85, 60), (0.95, 60)])
def test_a_block_filled_at_exactly_its_share_beside_other_kinds_is_found(share: float,
                                                                         size: int) -> None:
    # The bound's edge: the filler at exactly its share of the ink, every other character
    # of a kind of its own (the most kinds a filled block can hold), the rest spaces.
    count = round(share * size)
    block = "0" * count + "123456789,;:!?%$&@^`"[: size - count] + " " * (64 - size)
    detector = CharFloodDetector(CharFloodConfig(min_share=share))
    assert detector._top_filler(block) == "0"
    assert detector.may_be_filled(block)
    one_more_kind = block.replace("0", "~", 1)  # one kind too many: no filler, ruled out
    assert detector._top_filler(one_more_kind) == ""
    assert not detector.may_be_filled(one_more_kind)


def _char_flood_by_definition(text: str, config: CharFloodConfig) -> tuple[int, str] | None:
    """Where char-flood trips, judging every block in order (the rule's definition): the
    count of characters at the end of the block that completes the streak, and its filler."""
    judge = CharFloodDetector(config)._filler
    size = config.block_chars
    char, run = "", 0
    for end in range(size, len(text) + 1, size):
        filler = judge(text[end - size : end])
        run = run + 1 if filler and filler == char else (1 if filler else 0)
        char = filler
        if run >= config.streak:
            return end, char
    return None


_FLOOD_BLOCKS = {
    "prose": "Each block of this stream reads as plain words, nothing fills it at all. ",
    "stars": "*" * 64,
    "dots": "." * 60 + " a b",
    "zeros": "0" * 56 + "1,2,3,4,",
    "bangs": "!" * 64,
    "half": "*" * 32 + "The rest of this block is prose.",
}


@settings(max_examples=300, deadline=None)
@given(kinds=st.lists(st.sampled_from(sorted(_FLOOD_BLOCKS)), min_size=1, max_size=40),
       streak=st.integers(1, 6), block_chars=st.sampled_from([16, 32, 64]),
       shift=st.integers(0, 63), seed=st.integers(0, 10_000))
@example(kinds=["prose", "stars", "stars", "stars", "dots", "stars", "stars", "stars", "stars"],
         streak=4, block_chars=64, shift=0, seed=0)
def test_char_flood_trips_where_judging_every_block_in_order_does(
        kinds: list[str], streak: int, block_chars: int, shift: int, seed: int) -> None:
    # The rule judges a streak's last block first and the ones before it only while they
    # hold its filler: runs broken, resumed, of another filler, floods longer than a
    # streak, fed in batches of any size (a guard hands a quiet rule many blocks at once).
    text = "x" * shift + "".join(_FLOOD_BLOCKS[kind] for kind in kinds)
    config = CharFloodConfig(streak=streak, block_chars=block_chars)
    rng = random.Random(seed)
    trip, _ = feed_pieces(CharFloodDetector(config), split_random(text, rng, longest=400))
    expected = _char_flood_by_definition(text, config)
    assert (None if trip is None else (trip.at, trip.evidence["char"])) == expected
    if trip is not None:
        assert trip.evidence["blocks"] == streak


# --- control-tokens -------------------------------------------------------------------------

@pytest.mark.parametrize("token", ["<|im_start|>\n", "<|im_end|>\n<|im_start|>", "<unk|LLM-jp> ",
                                   "</s>", "[PAD]",
                                   # Llama 2's template markers (a FastChat JA MT-bench answer)
                                   "[<</SYS>>]\n", "[/INST] "])
def test_leaking_control_tokens_are_cut(token: str) -> None:
    text = INTRO + token * 200
    trip = first_trip(ControlTokensDetector(channel="text"), text)
    assert trip is not None and trip.rule == "control-tokens"
    assert trip.at - len(INTRO) <= ControlTokensConfig().window_chars


def test_a_text_that_explains_a_chat_template_is_left_alone() -> None:
    chatml = ("ChatML wraps every turn:\n<|im_start|>system\nYou are helpful.<|im_end|>\n"
              "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"
              "The model stops at <|im_end|>; <s> and </s> mark a sequence in Llama 2.\n"
              "Llama 2 writes [INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello! </s>\n")
    assert first_trip(ControlTokensDetector(channel="text"), chatml * 1) is None
    assert scan(chatml, "text") is None


def test_a_control_token_split_across_deltas_counts_once() -> None:
    text = INTRO + "<|im_start|>\n" * 40
    expected = first_trip(ControlTokensDetector(), text, size=len(text))
    for size in (1, 2, 5, 13, 32):
        trip = first_trip(ControlTokensDetector(), text, size=size)
        assert trip is not None and expected is not None and trip.at == expected.at


# Pieces of every kind of token, of near-tokens and of the code that writes "<" and "[".
_TOKEN_BITS = ["<|", "im_end", "|>", "<", "[", "]", ">", "|", "/", "PAD]", "UNK]", "</s>", "<s",
               "<pad>", "<unk", "<<SYS>>", "<</SYS>>", "[/", "INST]", "[I", " ", "\n", "x", "a[i]",
               "a < b", "<p", "s>", "</", "<<", "<u", "nk>"]


def _reference_control_trip(text: str, cfg: ControlTokensConfig) -> int | None:
    """Where control-tokens must trip on ``text``: the whole text read with the token
    pattern at once, the tokens counted over the window."""
    ends: list[int] = []
    for m in CONTROL_TOKEN.finditer(text):
        ends = [e for e in ends if e > m.end() - cfg.window_chars] + [m.end()]
        if len(ends) >= cfg.min_tokens:
            return m.end()
    return None


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(_TOKEN_BITS), max_size=200), st.randoms(use_true_random=False))
def test_control_tokens_trip_where_the_whole_text_read_at_once_says(
        bits: list[str], rnd: random.Random) -> None:
    # However the text is cut, the tokens counted are those of the whole text. (The text
    # ends in a newline: a "<|" or "<unk" still open at the end of a stream holds back the
    # bracket token written in it, which the next character decides.)
    text = "".join(bits) + "\n"
    cfg = ControlTokensConfig(min_tokens=3, window_chars=40)
    expected = _reference_control_trip(text, cfg)
    for pieces in (list(text), split_random(text, rnd), [text]):
        detector = ControlTokensDetector(cfg)
        trip = next((t for t in (detector.feed(p) for p in pieces) if t is not None), None)
        assert (trip.at if trip is not None else None) == expected


@pytest.mark.parametrize(("text", "at", "token"), [
    ("</s><|[PAD]|>", 13, "<|[PAD]|>"),  # the "<|" closes: it holds "[PAD]"
    ("</s><|[PAD] ", 11, "[PAD]"),  # it never closes: "[PAD]" counts
    ("[UNK] <unk|[INST]>", 18, "<unk|[INST]>"),
    ("[UNK] <unk [INST]>", 17, "[INST]"),
    ("<<SYS>><</SYS>>", 15, "<</SYS>>"),  # every piece cut after its first "<"
])
def test_a_token_counts_once_the_text_after_it_says_what_it_is(
        text: str, at: int, token: str) -> None:
    cfg = ControlTokensConfig(min_tokens=2, window_chars=40)
    for size in range(1, len(text) + 1):
        detector = ControlTokensDetector(cfg)
        pieces = [text[i : i + size] for i in range(0, len(text), size)]
        trip = next((t for t in (detector.feed(p) for p in pieces) if t is not None), None)
        assert trip is not None, size
        assert (trip.at, trip.evidence["token"], trip.evidence["tokens"]) == (at, token, 2), size


# --- progression ----------------------------------------------------------------------------

@pytest.mark.parametrize(("start", "step", "sep"), [(1156, 1, ", "), (478000, 500, ", "),
                                                    (7, 7, "\n"), (2000, -1, " ")])
def test_a_runaway_count_is_cut(start: int, step: int, sep: str) -> None:
    text = "Let me count them: " + sep.join(str(start + i * step) for i in range(2000))
    trip = first_trip(ProgressionDetector(), text)
    assert trip is not None and trip.rule == "progression"
    assert trip.evidence["terms"] == ProgressionConfig().min_terms
    assert trip.evidence["step"] == step and trip.evidence["separator"] == sep
    # Nothing else sees it: no word, every number new.
    assert scan(text, config=Config().replace(**{"progression.min_terms": 0})) is None


def test_lists_people_ask_for_are_left_alone() -> None:
    one_to_hundred = ", ".join(str(n) for n in range(1, 101))
    ages = "He pays from age 30 to 62: " + ", ".join(str(n) for n in range(30, 63)) + "."
    numbered = "".join(f"{n}. Item number {n}\n" for n in range(1, 120))
    random_numbers = ", ".join(str(random.Random(n).randint(1, 9999)) for n in range(3000))
    for text in (one_to_hundred, ages, numbered, random_numbers):
        assert first_trip(ProgressionDetector(), text) is None


def test_progression_judges_a_number_on_the_character_after_it() -> None:
    text = "Counting: " + ", ".join(str(n) for n in range(10, 400))
    expected = first_trip(ProgressionDetector(), text, size=len(text))
    assert expected is not None and text[expected.at - 1] == ","
    for size in (1, 3, 32):
        trip = first_trip(ProgressionDetector(), text, size=size)
        assert trip is not None and trip.at == expected.at


def _reference_progression(text: str, min_terms: int, max_sep: int) -> tuple[int, int] | None:
    """The rule read from its definition, one number at a time over the whole text: where
    it trips (the character after the number that makes ``min_terms``) and the count."""
    prev: int | None = None
    step = terms = 0
    template = ""
    end = 0  # where the text since the last number starts
    for number in re.finditer(r"\d+", text):
        if number.end() == len(text):
            break  # a number the text ends in is not complete
        sep, digits = text[end : number.start()], number.group()
        end = number.end()
        if len(digits) > 18 or len(sep) > max_sep:
            prev, terms = (None, 0) if len(digits) > 18 else (int(digits), 1)
            continue
        value = int(digits)
        if prev is None:
            terms = 1
        elif terms >= 2 and value - prev == step and sep == template:
            terms += 1
        elif value != prev:
            step, template, terms = value - prev, sep, 2
        else:
            terms = 1
        prev = value
        if terms >= min_terms:
            return number.end() + 1, terms
    return None


# Runs that count on (some for longer than min_terms, some broken by a wrong step, a changed
# separator, a repeated number or words), random numbers, 19-digit numbers, text without any.
_NUMERIC_PIECE = st.one_of(
    st.tuples(st.integers(-50, 5000), st.integers(-3, 12), st.sampled_from([", ", ",", "\n", " "]),
              st.integers(1, 40)).map(lambda r: r[2].join(str(abs(r[0] + i * r[1]))
                                                           for i in range(r[3]))),
    # one step, the separator changing now and then
    st.tuples(st.integers(0, 500), st.integers(1, 3),
              st.lists(st.sampled_from([", ", ", ", ", ", ","]), min_size=1, max_size=40)).map(
        lambda r: "".join(f"{r[0] + i * r[1]}{sep}" for i, sep in enumerate(r[2]))),
    # counts across the longest number a counter may have (18 digits) and past it
    st.tuples(st.sampled_from([10**17, 10**18 - 3, 10**18 + 2, 2 * 10**18, 10**19]),
              st.sampled_from([-3, -1, 1, 2]), st.integers(1, 12)).map(
        lambda r: ", ".join(str(r[0] + i * r[1]) for i in range(r[2])) + ", "),
    st.lists(st.integers(0, 999), max_size=12).map(lambda xs: ",".join(map(str, xs))),
    st.sampled_from(["1234567890123456789012", "7", "\n", ", ", " and then some words ", "x"]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_NUMERIC_PIECE, max_size=30).map("".join), st.integers(3, 40),
       st.sampled_from([2, 16]), st.randoms(use_true_random=False))
@example("".join(f"{i}{',' if i == 5 else ', '}" for i in range(40)), 30, 16,
         random.Random(1))  # the separator changes once inside a delta: the count starts over
@example("".join(f"{10**18 + 2 - i}, " for i in range(12)), 9, 16,
         random.Random(1))  # a delta ends after the last number too long to count (19 digits)
def test_progression_trips_where_its_definition_does(text: str, min_terms: int, max_sep: int,
                                                     rng: random.Random) -> None:
    # Deltas that cannot trip are read straight to the state the stepwise reading ends in;
    # every split must give the definition's trip, or none.
    expected = _reference_progression(text, min_terms, max_sep)
    for pieces in (split_random(text, rng, 90), split_fixed(text, 1), split_fixed(text, 24),
                   [text]):
        detector = ProgressionDetector(ProgressionConfig(min_terms=min_terms,
                                                         max_separator=max_sep))
        trip = feed_pieces(detector, pieces)[0]
        got = None if trip is None else (trip.at, trip.evidence["terms"])
        assert got == expected


# --- degeneracy on the visible answer -------------------------------------------------------

def test_symbol_floods_are_cut_in_the_answer_by_default() -> None:
    text = INTRO + "+$" * 2000
    trip = first_trip(DegeneracyDetector(channel="text"), text)
    assert trip is not None and trip.rule == "symbol-flood"
    assert scan(text, "text") is not None
