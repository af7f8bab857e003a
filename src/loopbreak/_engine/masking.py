"""Masking what changes between two readings of the same tool output (digit runs, hex
ids), as the tool rules' fingerprints and error signatures need it.

A proxy computes these for every tool result of a history it has not seen yet (a
session's first request after a start: 800 results, a megabyte). The regular
expressions that define them test a pattern at every character, 10-25 ns each; on
ASCII text the same answers come from C string methods at 1-3 ns a character, and
text those methods cannot rule out still goes through the expression.
"""

from __future__ import annotations

import re

_DIGIT_RUN = re.compile(r"\d+")
_DIGIT_RUN_SPLIT = re.compile(r"(\d+)")
# Every ASCII digit as "0": a digit run is then a run of "0" the replace loop shortens. A
# byte table: str.translate looks every character up in a dict, eight times the cost.
_ASCII_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
# Every ASCII hex digit (either case) as "h", every other byte as ".".
_HEX_AS_H = bytes(ord("h") if chr(b) in "0123456789abcdefABCDEF" else ord(".")
                  for b in range(256))


def mask_digit_runs(text: str, mark: str) -> str:
    """``text`` with every run of decimal digits replaced by ``mark``: the same string as
    ``re.sub(r"\\d+", mark, text)``."""
    if not text.isascii():
        return _DIGIT_RUN.sub(mark, text)  # \d is every script's digits
    zeros = ascii_digits_as_zero(text)
    if "0" not in zeros:
        return text
    # Each pass halves every run of zeros (each was a digit): log2 of the longest run.
    while "00" in zeros:
        zeros = zeros.replace("00", "0")
    return zeros.replace("0", mark)


def split_digit_runs(text: str) -> list[str]:
    """``re.split(r"(\\d+)", text)``: the text between digit runs and the runs, in turn
    (text first and last, maybe empty)."""
    if not text.isascii():
        return _DIGIT_RUN_SPLIT.split(text)
    zeros = ascii_digits_as_zero(text)
    digits = zeros.count("0")
    if not digits:
        return [text]
    if digits * 8 > len(text):
        # Dense digits (numeric tables, counting): a step a digit below costs more than
        # the expression's scan.
        return _DIGIT_RUN_SPLIT.split(text)
    pieces = zeros.split("0")  # the text between any two digits
    count = digits + 1
    parts = [pieces[0]]
    at = len(pieces[0])
    i = 1
    while i < count:
        # A run: this digit and one more for each empty piece after it (two digits in a
        # row), then the text after it (the last piece: empty when a run ends the text).
        digits = 1
        while i < count - 1 and not pieces[i]:
            digits += 1
            i += 1
        after = pieces[i]
        parts.append(text[at : at + digits])
        parts.append(after)
        at += digits + len(after)
        i += 1
    return parts


def ascii_digits_as_zero(text: str) -> str:
    """ASCII ``text`` with every digit read as ``0``."""
    return text.encode().translate(_ASCII_DIGITS_AS_ZERO).decode()


def may_hold_hex_run(text: str, length: int) -> bool:
    """False only when ``text`` holds neither ``0x`` nor ``length`` ASCII hex digits in a
    row (what every hex-id pattern of the tool rules needs): such text needs no hex
    masking. UTF-8 writes an ASCII character as itself and nothing else with ASCII bytes,
    so the bytes answer for the characters."""
    if "0x" in text:
        return True
    return b"h" * length in text.encode("utf-8", "surrogatepass").translate(_HEX_AS_H)
