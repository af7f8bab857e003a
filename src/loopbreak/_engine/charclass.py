"""Character classes the rules share, and the degeneracy rule's: space, emoji, meaning, symbol.

``meaning`` is letters, digits and combining marks of any script: a block that
carries words carries meaning. ``emoji`` is Unicode's ``Extended_Pictographic``
minus the pictographs that technical prose uses as text (©, ®, ™, arrows,
bullets...), so a block of arrows reads as symbols, not as an emoji flood.
Emoji components (ZWJ, variation selectors, skin tones, regional indicators,
keycaps, tags) and invisible format characters count as ``space``: they ride on
another character and must not dilute a share or break a run.
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_right

CJK_RANGES = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
"""Kana, CJK ideographs and Hangul, as a regular-expression class body: scripts written
without spaces, whose every character the word-reading rules take as a word."""

LAYOUT_CHARS = frozenset(" \t\u3000-=_*~.·•─━═┄┈│|+#")
"""Characters that draw layout (padding, rules, table borders, dot leaders): char-run lets
them run longer, char-flood never takes them for a flood's filler."""

CONTROL_TOKEN = re.compile(r"<\|[^|<>\s]{1,40}\|>|<unk[^<>\s]{0,40}>|</?s>|<pad>|\[(?:PAD|UNK)\]"
                           r"|<</?SYS>>|\[/?INST\]")
"""A chat-template control token written as text (control-tokens counts them, char-flood
reads a block without them)."""

CONTROL_TOKEN_START = re.compile(r"<[|u/sp<]|\[[PUI/]")
"""The first two characters of every :data:`CONTROL_TOKEN`: text without them holds none
(and only its last character can begin one)."""

CONTROL_TOKEN_HEAD = re.compile(CONTROL_TOKEN_START.pattern + r"|[<\[]\Z")
"""Where a :data:`CONTROL_TOKEN` cut by the text's end can begin: its first two characters,
or its first as the text's last."""

CONTROL_TOKEN_OPEN = re.compile(r"<(?:\|[^|<>\s]{0,40}\|?|unk[^<>\s]{0,40})\Z")
"""A ``<|…|>`` or ``<unk…>`` token that the text's end may still close: it would hold the
bracket tokens written inside it (``<|[PAD]|>`` is one token, not ``[PAD]``). It begins at the
text's last ``<`` (neither holds one)."""

SPACE = "s"
EMOJI = "e"
MEANING = "m"
SYMBOL = "y"

# Extended_Pictographic, from Unicode's emoji-data.txt (15.1, unchanged in 16.0).
# The test suite checks it code point by code point against ``uniseg``'s copy.
_EXTENDED_PICTOGRAPHIC: tuple[tuple[int, int], ...] = (
    (0x00A9, 0x00A9), (0x00AE, 0x00AE), (0x203C, 0x203C), (0x2049, 0x2049),
    (0x2122, 0x2122), (0x2139, 0x2139), (0x2194, 0x2199), (0x21A9, 0x21AA),
    (0x231A, 0x231B), (0x2328, 0x2328), (0x2388, 0x2388), (0x23CF, 0x23CF),
    (0x23E9, 0x23F3), (0x23F8, 0x23FA), (0x24C2, 0x24C2), (0x25AA, 0x25AB),
    (0x25B6, 0x25B6), (0x25C0, 0x25C0), (0x25FB, 0x25FE), (0x2600, 0x2605),
    (0x2607, 0x2612), (0x2614, 0x2685), (0x2690, 0x2705), (0x2708, 0x2712),
    (0x2714, 0x2714), (0x2716, 0x2716), (0x271D, 0x271D), (0x2721, 0x2721),
    (0x2728, 0x2728), (0x2733, 0x2734), (0x2744, 0x2744), (0x2747, 0x2747),
    (0x274C, 0x274C), (0x274E, 0x274E), (0x2753, 0x2755), (0x2757, 0x2757),
    (0x2763, 0x2767), (0x2795, 0x2797), (0x27A1, 0x27A1), (0x27B0, 0x27B0),
    (0x27BF, 0x27BF), (0x2934, 0x2935), (0x2B05, 0x2B07), (0x2B1B, 0x2B1C),
    (0x2B50, 0x2B50), (0x2B55, 0x2B55), (0x3030, 0x3030), (0x303D, 0x303D),
    (0x3297, 0x3297), (0x3299, 0x3299), (0x1F000, 0x1F0FF), (0x1F10D, 0x1F10F),
    (0x1F12F, 0x1F12F), (0x1F16C, 0x1F171), (0x1F17E, 0x1F17F), (0x1F18E, 0x1F18E),
    (0x1F191, 0x1F19A), (0x1F1AD, 0x1F1E5), (0x1F201, 0x1F20F), (0x1F21A, 0x1F21A),
    (0x1F22F, 0x1F22F), (0x1F232, 0x1F23A), (0x1F23C, 0x1F23F), (0x1F249, 0x1F3FA),
    (0x1F400, 0x1F53D), (0x1F546, 0x1F64F), (0x1F680, 0x1F6FF), (0x1F774, 0x1F77F),
    (0x1F7D5, 0x1F7FF), (0x1F80C, 0x1F80F), (0x1F848, 0x1F84F), (0x1F85A, 0x1F85F),
    (0x1F888, 0x1F88F), (0x1F8AE, 0x1F8FF), (0x1F90C, 0x1F93A), (0x1F93C, 0x1F945),
    (0x1F947, 0x1FAFF), (0x1FC00, 0x1FFFD),
)
_EP_STARTS = tuple(start for start, _ in _EXTENDED_PICTOGRAPHIC)

# Pictographs that prose and technical writing use as text: marks, arrows,
# bullets, CJK marks. Classed as symbols.
_TEXT_PICTOGRAPHS: frozenset[int] = frozenset(
    [0x00A9, 0x00AE, 0x203C, 0x2049, 0x2122, 0x2139, 0x24C2, 0x3030, 0x303D, 0x3297, 0x3299]
    + list(range(0x2194, 0x219A))
    + [0x21A9, 0x21AA, 0x2934, 0x2935, 0x27A1, 0x2B05, 0x2B06, 0x2B07]
    + [0x25AA, 0x25AB, 0x25B6, 0x25C0, 0x25FB, 0x25FC, 0x25FD, 0x25FE]
)

_EMOJI_COMPONENTS: tuple[tuple[int, int], ...] = (
    (0x200D, 0x200D),  # zero-width joiner
    (0x20E3, 0x20E3),  # combining enclosing keycap
    (0xFE00, 0xFE0F),  # variation selectors
    (0x1F1E6, 0x1F1FF),  # regional indicators (flags)
    (0x1F3FB, 0x1F3FF),  # skin-tone modifiers
    (0xE0020, 0xE007F),  # tags
)


def is_extended_pictographic(code_point: int) -> bool:
    """Whether ``code_point`` has Unicode's ``Extended_Pictographic`` property."""
    i = bisect_right(_EP_STARTS, code_point) - 1
    return i >= 0 and code_point <= _EXTENDED_PICTOGRAPHIC[i][1]


def classify(code_point: int) -> str:
    """The class letter of one code point: ``s``, ``e``, ``m`` or ``y``."""
    ch = chr(code_point)
    if ch.isspace():
        return SPACE
    for low, high in _EMOJI_COMPONENTS:
        if low <= code_point <= high:
            return SPACE
    if is_extended_pictographic(code_point):
        return SYMBOL if code_point in _TEXT_PICTOGRAPHS else EMOJI
    category = unicodedata.category(ch)
    if category[0] in "LNM":
        return MEANING
    if category == "Cf":
        return SPACE
    return SYMBOL


class _ClassTable(dict[int, str]):
    """A ``str.translate`` table that classifies each code point once, on first sight."""

    def __missing__(self, code_point: int) -> str:
        letter = classify(code_point)
        self[code_point] = letter
        return letter


_TABLE = _ClassTable()
for _cp in range(128):
    _TABLE[_cp] = classify(_cp)
# The ASCII part as a bytes table: bytes.translate is several times cheaper than a dict.
_ASCII_TABLE = bytes(ord(_TABLE[_cp]) for _cp in range(128)) + bytes(128)


def class_string(text: str) -> str:
    """``text`` with every character replaced by its class letter (same length)."""
    if text.isascii():
        return text.encode().translate(_ASCII_TABLE).decode()
    return text.translate(_TABLE)


SURE_MEANING_RUN = re.compile("[0-9A-Za-z\u3041-\u3096\u30a1-\u30fa\u4e00-\u9fa5\uac00-\ud7a3]+")
"""A run of characters classed ``MEANING`` for certain (ASCII letters and digits, kana, CJK
ideographs, Hangul syllables), found without classing each one. Only blocks assigned since
Unicode 3.2: every Python's ``unicodedata`` classes them alike (U+9FA6 on were assigned later,
and Python 3.10 reads U+9FFD-U+9FFF as unassigned, a symbol)."""
