"""The fast masks give exactly what the regular expressions that define them give."""

from __future__ import annotations

import re

from hypothesis import example, given, settings
from hypothesis import strategies as st

from loopbreak._engine import tool_failure, tool_steps
from loopbreak._engine.masking import mask_digit_runs, may_hold_hex_run, split_digit_runs

# Digits, hex letters, whitespace of several kinds, the mask's own characters, a non-ASCII
# digit, a lone surrogate: what the fast paths could get wrong.
_ALPHABET = st.sampled_from(list("0123456789abcdefxABCDEFgz #<n>\t\n\u00a0\u3000\u0663é\ud800"))
_TEXTS = st.text(_ALPHABET, max_size=80) | st.text(max_size=40)


@settings(max_examples=600)
@given(_TEXTS)
@example("1 22 333 4444 55555 " + "9" * 1000)
@example("#1#")
@example("a٣b 12")  # an Arabic-Indic digit: \d holds it, the ASCII path must not run
def test_digit_runs_are_masked_as_the_expression_masks_them(text: str) -> None:
    for mark in ("#", "<n>"):
        assert mask_digit_runs(text, mark) == re.sub(r"\d+", mark, text)


# Prose with a few numbers (the split's loop over its digits) and dense digits (the
# expression): each way must split as the expression does.
_SPARSE = st.lists(st.text(st.sampled_from("ab .\n\t"), min_size=1, max_size=30) |
                   st.text(st.sampled_from("0123456789"), min_size=1, max_size=4),
                   max_size=12).map("".join)


@settings(max_examples=800)
@given(_TEXTS | _SPARSE)
@example("a12b")
@example("12")
@example("x" * 40 + "7")
@example("7" + "x" * 40 + "00")
@example("a٣b 12")
def test_digit_runs_are_split_as_the_expression_splits_them(text: str) -> None:
    assert split_digit_runs(text) == re.split(r"(\d+)", text)


@settings(max_examples=600)
@given(_TEXTS)
@example("deadbeef")
@example("id 0x1 here")
@example("é1a2b3c4d5é")
def test_text_ruled_out_holds_no_hex_run(text: str) -> None:
    for length in (6, 8):
        if not may_hold_hex_run(text, length):
            assert not re.search(rf"0x|[0-9a-fA-F]{{{length}}}", text)
    if may_hold_hex_run(text, 8):
        assert may_hold_hex_run(text, 6)


def test_a_hex_run_or_0x_is_never_ruled_out() -> None:
    assert may_hold_hex_run("commit 3f9a2b1c landed", 8)
    assert may_hold_hex_run("at 0x1f", 8)
    assert not may_hold_hex_run("commit 3f9a2b1 landed", 8)
    assert may_hold_hex_run("commit 3f9a2b1 landed", 6)


def _fingerprints_by_definition(result: str) -> tuple[str, str]:
    text = tool_steps._HEX_RUN.sub(tool_steps._id, result)
    return (tool_steps.digest(" ".join(text.split())),
            tool_steps.digest(" ".join(re.sub(r"\d+", "#", text).split())))


def _normalised_by_definition(text: str) -> str:
    text = tool_failure._HEX.sub("<hex>", text.lower())
    text = re.sub(r"\d+", "<n>", text)
    return re.sub(r"\s+", " ", text).strip()


@settings(max_examples=400)
@given(_TEXTS)
@example("Error 0x1F at deadbeef12, line 42\n\n  again 7")
@example("\u3000Ａ١２ 3")
@example("FACADE cafebabe 1234567 beef12 a1b2c3d4e5 abc123_x 0x 0xg dead-beef00")
def test_fingerprints_and_error_forms_keep_their_definitions(text: str) -> None:
    assert (tool_steps._fingerprint(text), tool_steps._shape(text)) \
        == _fingerprints_by_definition(text)
    assert tool_failure._normalise(text) == _normalised_by_definition(text)
