"""Character classes: the emoji table against Unicode's own property."""

from __future__ import annotations

import sys

from uniseg.emoji import extended_pictographic

from loopbreak._engine.charclass import (
    EMOJI,
    MEANING,
    SPACE,
    SURE_MEANING_RUN,
    SYMBOL,
    class_string,
    is_extended_pictographic,
)


def test_extended_pictographic_table_matches_unicode() -> None:
    # uniseg carries Unicode's emoji-data (UTS #51); the regex module's
    # \p{Extended_Pictographic} is narrower than the property and cannot serve here.
    mismatches = [hex(cp) for cp in range(sys.maxunicode + 1)
                  if not 0xD800 <= cp <= 0xDFFF
                  if extended_pictographic(chr(cp)) != is_extended_pictographic(cp)]
    assert mismatches == []


def test_classes_of_common_characters() -> None:
    text = "a1 好。*😀©→\u200d\ufe0f"
    assert class_string(text) == "".join([MEANING, MEANING, SPACE, MEANING, SYMBOL, SYMBOL,
                                          EMOJI, SYMBOL, SYMBOL, SPACE, SPACE])


def test_combining_marks_carry_meaning() -> None:
    # Devanagari vowel signs are marks, part of the word.
    assert set(class_string("नमस्ते")) == {MEANING}


def test_class_string_keeps_length() -> None:
    text = "😀" * 10 + "\U0010ffff" + "\x00"
    assert len(class_string(text)) == len(text)


def test_every_sure_meaning_character_is_classed_meaning() -> None:
    # The degeneracy rule skips blocks on this count without classing them.
    sure = "".join(chr(cp) for cp in range(0x30000) if SURE_MEANING_RUN.fullmatch(chr(cp)))
    assert len(sure) > 30_000
    assert set(class_string(sure)) == {MEANING}
