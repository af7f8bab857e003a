"""Escaping and numbers for the report: every string shown goes through ``_esc`` or
``_attr``."""

from __future__ import annotations

import math

# --- escaping ---------------------------------------------------------------------------

# Characters that reorder the text around them: shown as marks, or an excerpt could
# display something other than what the model wrote.
_BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))


def _text_table() -> dict[int, str]:
    table = {ord("&"): "&amp;", ord("<"): "&lt;", ord(">"): "&gt;", ord('"'): "&quot;",
             ord("'"): "&#39;"}

    def mark(shown: str, what: str) -> str:
        return f'<span class="ctl" title="{what}">{shown}</span>'

    for code in range(0x20):
        if code not in (0x09, 0x0A):
            table[code] = mark(f"\\x{code:02x}", f"control character U+{code:04X}")
    table[0x7F] = mark("\\x7f", "control character U+007F")
    for code in range(0x80, 0xA0):
        table[code] = mark(f"\\x{code:02x}", f"control character U+{code:04X}")
    for code in _BIDI:
        table[code] = mark(f"U+{code:04X}", "direction control, shown instead of applied")
    for code in range(0xD800, 0xE000):
        table[code] = mark("\ufffd", "lone surrogate (not valid Unicode text)")
    for code in (0xFFFE, 0xFFFF):
        table[code] = mark("\ufffd", f"noncharacter U+{code:04X}")
    return table


def _attr_table() -> dict[int, str]:
    table = {ord("&"): "&amp;", ord("<"): "&lt;", ord(">"): "&gt;", ord('"'): "&quot;",
             ord("'"): "&#39;"}
    for code in (*range(0x20), 0x7F, *range(0x80, 0xA0), *_BIDI, *range(0xD800, 0xE000),
                 0xFFFE, 0xFFFF):
        if code not in (0x09, 0x0A):
            table[code] = "\ufffd"
    return table


_TEXT = _text_table()
_ATTR = _attr_table()


def _esc(value: object) -> str:
    """Text content: safe inside any element, every character visible for what it is."""
    return str(value).translate(_TEXT)


def _attr(value: object) -> str:
    """An attribute value (always written in double quotes)."""
    return str(value).translate(_ATTR)


def _visible_ws(value: str) -> str:
    """Escaped text with line breaks and tabs drawn, for short units shown inline."""
    out = _esc(value)
    return out.replace("\n", '<span class="ws">\u21b5</span>').replace(
        "\t", '<span class="ws">\u2192</span>')


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


# --- numbers ----------------------------------------------------------------------------

_DASH = "\u2014"


def _n(value: int) -> str:
    return f"{value:,}"


def _pct(part: int, whole: int) -> str:
    if whole <= 0:
        return "0%"
    share = 100 * part / whole
    if 0 < share < 1:
        return "<1%"
    return f"{share:.0f}%"


def _compact(value: int) -> str:
    if value < 1000:
        return str(value)
    if value < 1_000_000:
        return f"{value / 1000:g}k"
    return f"{value / 1_000_000:g}M"


def _width(part: float, whole: float) -> str:
    # Three decimals: enough for a 300,000-character call, stable across runs.
    if whole <= 0:
        return "0%"
    return f"{100 * part / whole:.3f}".rstrip("0").rstrip(".") + "%"


def _nice_scale(longest: int) -> tuple[int, int]:
    """Full width and tick step of a linear axis that holds ``longest`` in about 4 ticks."""
    longest = max(longest, 1)
    magnitude = 10 ** max(0, math.floor(math.log10(longest / 4))) if longest >= 4 else 1
    step = magnitude
    for multiple in (1, 2, 5, 10):
        step = multiple * magnitude
        if step * 4 >= longest:
            break
    return math.ceil(longest / step) * step, step


def _s(count: int) -> str:
    return "" if count == 1 else "s"


def _plural(count: int, one: str, many: str | None = None) -> str:
    return f"{_n(count)} {one if count == 1 else (many or one + 's')}"


