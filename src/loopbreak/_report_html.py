"""``loopbreak analyze --html``: the replay as one self-contained page.

One file a person can open offline and mail around: inline CSS, no fonts,
images or requests. The only script opens folded cut cards for printing and
offers "expand all"; a Content-Security-Policy lets that one script run (by its hash)
and nothing else, so model output that slipped past escaping still could not
execute.

Everything shown is model output or read from logs, so every string goes
through ``_esc`` (text) or ``_attr`` (attribute values): HTML specials escaped,
control and direction-changing characters shown as visible marks, lone
surrogates replaced (the page must encode as UTF-8). The page holds no time
stamp or anything else that varies, so the same reports give the same bytes.

Size stays bounded by the reports: per call one timeline row, per cut call at
most one excerpt (itself bounded by ``EXCERPT_BEFORE``/``EXCERPT_AFTER``), and
long runs of uneventful calls fold into one summary row.
"""

from __future__ import annotations

import base64
import bisect
import hashlib
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from loopbreak import __version__
from loopbreak._analyze import (
    EXCERPT_AFTER,
    EXCERPT_BEFORE,
    CallReport,
    Cut,
    SessionReport,
    StallReport,
    ToolAction,
    summary,
)
from loopbreak._config import Config
from loopbreak._engine.detectors.counter_cycle import (
    COUNTER_CYCLE,
    kept_positions,
    read_counters,
)

DEFAULT_TITLE = "loopbreak analyze report"

# Uneventful calls in a row from which the timeline folds them into one row: short runs
# stay visible as context around the calls that matter.
FOLD_FROM = 6
# Rows drawn inside one fold; beyond it the fold says how many it left out.
FOLD_ROWS = 200
# Cut calls excerpted per session and per page (the largest savings first): the
# timeline still lists every cut; this keeps a page of thousands of cuts readable.
EXCERPTS_PER_SESSION = 40
EXCERPTS_PER_PAGE = 150
# Cut cards open on load, in page order; the rest start folded.
OPEN_CARDS = 12
# Lines of text after the cut shown in an excerpt (of at most EXCERPT_AFTER characters).
AFTER_LINES = 5
# Tool-breaker messages and read warnings shown, each cut to this many characters.
MESSAGE_CHARS = 400
TABLE_ROWS = 200

BLOCK_RULES = {"exact-repeat", "low-novelty"}
DEGENERACY_RULES = {"symbol-flood", "emoji-flood", "degenerate-output"}

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


# --- the repeating part of an excerpt -------------------------------------------------------

@dataclass
class _Marks:
    """Ranges of an excerpt to highlight (start, end, tint) and what they mean."""

    ranges: list[tuple[int, int, int]] = field(default_factory=list)
    caption: str = ""


def _cycle_marks(text: str, cut: int, period: int, *, counted: bool = False) -> _Marks:
    if not counted:
        return _periodic_marks(text, cut, period, "")
    # counter-cycle's loop is periodic once every number reads as one 0: find the
    # repetitions in that reading, then map them back onto the text.
    kept = kept_positions(text)
    marks = _periodic_marks(read_counters(text), bisect.bisect_left(kept, cut), period,
                            ", its numbers aside")
    ends = kept[1:] + [len(text)]
    marks.ranges = [(kept[lo], ends[hi - 1], tint) for lo, hi, tint in marks.ranges]
    return marks


def _periodic_marks(text: str, cut: int, period: int, aside: str) -> _Marks:
    if period <= 0 or cut < period:
        return _Marks()
    # The periodic stretch around the cut: every character equal to the one a period away.
    start = cut - period
    while start > 0 and text[start - 1] == text[start - 1 + period]:
        start -= 1
    end = cut
    while end < len(text) and text[end] == text[end - period]:
        end += 1
    marks = _Marks()
    # Any rotation of the unit is the same loop: count repetitions from where the loop
    # began (at its first line or word start), so the shades split it where a reader would.
    phase = _phase(text, start, period)
    if start > 0:
        # The loop began inside the excerpt: the characters before its first line start
        # match by accident (a full stop, a line break), so they are left plain.
        start = phase
    k = -math.ceil((phase - start) / period)
    while phase + k * period < end:
        lo, hi = max(start, phase + k * period), min(end, phase + (k + 1) * period)
        if lo < hi:
            marks.ranges.append((lo, hi, k % 2))
        k += 1
    before = (cut - start) // period
    unit = f"{_n(period)}-character unit{aside}"
    marks.caption = (f"Highlighted: each repetition of the {unit} "
                     f"(alternating shades); {_plural(before, 'whole repetition')} before the cut "
                     f"in this excerpt.")
    return marks


def _phase(text: str, first: int, period: int) -> int:
    """Where in ``text[first:first + period]`` (one whole unit) a repetition best starts:
    after a line break, else after a space, else at ``first``."""
    for wanted in ("\n", " "):
        for i in range(first, first + period):
            if i > 0 and text[i - 1] == wanted and not text[i].isspace():
                return i
    return first


def _lines_marks(text: str) -> _Marks:
    spans: list[tuple[int, int, str]] = []
    pos = 0
    for line in text.split("\n"):
        stripped = line.strip()
        if len(stripped) >= 2:
            lead = len(line) - len(line.lstrip())
            spans.append((pos + lead, pos + lead + len(stripped), stripped))
        pos += len(line) + 1
    counts = Counter(key for _, _, key in spans)
    # One shade per distinct line, alternating in order of first appearance, so two
    # different repeated lines side by side stay apart.
    shade: dict[str, int] = {}
    marks = _Marks()
    for lo, hi, key in spans:
        if counts[key] >= 2:
            tint = shade.setdefault(key, len(shade) % 2)
            marks.ranges.append((lo, hi, tint))
    marks.caption = (f"Highlighted: the lines that occur more than once in this excerpt "
                     f"({_plural(len(shade), 'distinct line')}, shaded by line).")
    return marks


def _block_marks(text: str, cut: int, block: int, streak: int, what: str) -> _Marks:
    if block <= 0 or streak <= 0:
        return _Marks()
    marks = _Marks()
    for k in range(streak):
        lo, hi = max(0, cut - (k + 1) * block), cut - k * block
        if hi <= 0:
            break
        marks.ranges.append((lo, hi, k % 2))
    marks.ranges.reverse()
    shown = len(marks.ranges)
    more = "" if shown == streak else f" ({_n(shown)} of them fit in this excerpt)"
    marks.caption = (f"Highlighted: the last {_plural(streak, 'block')} of {_n(block)} "
                     f"characters before the cut, {what}{more}.")
    return marks


def _chunk_marks(text: str, chunk: str, repeats: int) -> _Marks:
    if not chunk:
        return _Marks()
    marks = _Marks()
    pos = text.find(chunk)
    k = 0
    while pos >= 0:
        marks.ranges.append((pos, pos + len(chunk), k % 2))
        k += 1
        pos = text.find(chunk, pos + len(chunk))
    marks.caption = (f"Highlighted: each arrival of the repeated chunk "
                     f"({_n(repeats)} identical chunks in a row tripped the rule).")
    return marks


def _marks(cut: Cut, text: str, at: int) -> _Marks:
    ev = cut.evidence
    if cut.rule in ("cycle", COUNTER_CYCLE):
        return _cycle_marks(text, at, _int(ev.get("period")), counted=cut.rule == COUNTER_CYCLE)
    if cut.rule == "lines":
        return _lines_marks(text)
    if cut.rule in BLOCK_RULES:
        block = _int(ev.get("block_chars")) or Config().block_repeat.block_chars
        what = ("each identical to a block before it" if cut.rule == "exact-repeat"
                else "each close to a block before it")
        return _block_marks(text, at, block, _int(ev.get("streak")) or 1, what)
    if cut.rule in DEGENERACY_RULES:
        # Degeneracy evidence does not carry its block size: the default one is shown.
        block = _int(ev.get("block_chars")) or Config().degeneracy.block_chars
        return _block_marks(text, at, block, _int(ev.get("streak")) or 1,
                            "each judged degenerate")
    if cut.rule == "identical-chunks":
        return _chunk_marks(text, str(ev.get("chunk") or ""), _int(ev.get("repeats")))
    if cut.rule == "max-reasoning-chars":
        return _Marks(caption="A hard cap, not a repetition: nothing to highlight.")
    return _Marks(caption="This rule names no repeating unit: nothing to highlight.")


def _head_lines(text: str, lines: int) -> str:
    """``text`` up to its ``lines``-th line break: enough of what follows the cut to show the
    loop running on, short enough that the cut stays in view above it."""
    end = -1
    for _ in range(lines):
        end = text.find("\n", end + 1)
        if end < 0:
            return text
    return text[:end]


def _int(value: object) -> int:
    if isinstance(value, bool):
        return 0
    if isinstance(value, (int, float)) and math.isfinite(value):
        return int(value)
    return 0


def _render_excerpt(before: str, after: str, marks: _Marks) -> str:
    text = before + after
    cut = len(before)
    points = {0, cut, len(text)}
    for lo, hi, _ in marks.ranges:
        points.update((max(0, min(lo, len(text))), max(0, min(hi, len(text)))))
    # The ranges never overlap: one sweep finds the range (if any) each piece falls in.
    ranges = sorted(marks.ranges)
    j = 0
    out: list[str] = []
    for lo, hi in pairwise(sorted(points)):
        while j < len(ranges) and ranges[j][1] <= lo:
            j += 1
        tint = ranges[j][2] if j < len(ranges) and ranges[j][0] <= lo else None
        if lo == cut:
            out.append(_CUT_MARK + '<span class="after">')
        piece = _esc(text[lo:hi])
        out.append(f'<mark class="h{tint}">{piece}</mark>' if tint is not None else piece)
    if cut == len(text):
        out.append(_CUT_MARK + '<span class="after">')
    out.append("</span>")
    return "".join(out)


_CUT_MARK = '<span class="cutpt" role="img" aria-label="the cut point">cut</span>'


# --- page parts -----------------------------------------------------------------------------

def _read_totals(reports: Sequence[SessionReport]) -> dict[str, Any]:
    out: dict[str, Any] = {"rows": 0, "bad_rows": 0, "unknown": Counter(), "frames": 0,
                           "torn": 0, "lost_bytes": 0, "warnings": []}
    for report in reports:
        read = report.read or {}
        out["rows"] += _int(read.get("rows"))
        out["bad_rows"] += _int(read.get("bad_rows"))
        out["frames"] += _int(read.get("frames"))
        out["torn"] += 1 if read.get("torn") else 0
        out["lost_bytes"] += _int(read.get("lost_bytes"))
        for kind, count in dict(read.get("unknown_rows") or {}).items():
            out["unknown"][str(kind)] += _int(count)
        for warning in read.get("warnings") or ():
            if warning not in out["warnings"]:
                out["warnings"].append(warning)
    return out


def _read_problems(read: dict[str, Any]) -> list[str]:
    """The read problems as short escaped phrases; empty when everything was read."""
    parts = []
    if read["bad_rows"]:
        parts.append(_esc(_plural(read["bad_rows"], "bad row")))
    unknown = sum(read["unknown"].values())
    if unknown:
        kinds = ", ".join(f"{_esc(k)} \u00d7{_n(v)}" for k, v in sorted(read["unknown"].items()))
        parts.append(f"{_esc(_plural(unknown, 'unknown row'))} ({kinds})")
    if read["torn"]:
        parts.append(_esc(_plural(read["torn"], "torn frame stream", "torn frame streams")))
    if read["lost_bytes"]:
        parts.append(_esc(_plural(read["lost_bytes"], "byte") + " lost"))
    return parts


def _stat(label: str, value: str, note: str = "", cls: str = "") -> str:
    note_html = f'<span class="note">{note}</span>' if note else ""
    return (f'<div class="stat {cls}"><dt>{_esc(label)}</dt>'
            f'<dd><span class="big">{value}</span>{note_html}</dd></div>')


def _totals_section(reports: Sequence[SessionReport]) -> str:
    total = summary(reports)
    read = _read_totals(reports)
    problems = _read_problems(read)
    sources = len({r.path for r in reports})
    chars = total["chars"]
    stats = [
        _stat("Sessions", _n(total["sessions"]), _esc(_plural(sources, "source"))),
        _stat("Model calls", _n(total["calls"]), _esc(f"{_n(chars)} characters")),
        _stat("Calls that would be cut", _n(total["cut_calls"]),
              _esc(f"{_pct(total['cut_calls'], total['calls'])} of calls"),
              "accent" if total["cut_calls"] else ""),
        _stat("Stall fires", _n(total["stall_fires"]),
              _esc(_plural(sum(len(r.stalls) for r in reports), "stalled call"))),
        _stat("Tool breaker",
              f"{_n(total['tool_steers'])}<small> steer{_s(total['tool_steers'])}</small> "
              f"{_n(total['tool_denials'])}<small> denial{_s(total['tool_denials'])}</small>",
              "repeated failing tool calls"),
        _stat("Unreadable input",
              _n(read["bad_rows"] + sum(read["unknown"].values())) if problems else "none",
              " · ".join(problems) if problems else _esc(f"{_n(read['rows'])} rows read, "
                                                         "all understood"),
              "warn" if problems else ""),
    ]
    parts = [
        '<section class="totals" aria-labelledby="totals-h">',
        '<h2 id="totals-h">Totals</h2>',
        _headline(total),
        f'<dl class="stats">{"".join(stats)}</dl>',
    ]
    if problems:
        parts.append('<div class="notice" role="note"><strong>Not everything could be read: '
                     f'</strong>{" · ".join(problems)}.')
        if read["warnings"]:
            items = "".join(f"<li>{_esc(_clip(str(w), MESSAGE_CHARS))}</li>"
                            for w in read["warnings"][:20])
            parts.append(f"<ul>{items}</ul>")
        parts.append("</div>")
    parts.append(_rules_chart(reports))
    parts.append("</section>")
    return "".join(parts)


def _headline(total: dict[str, Any]) -> str:
    """The one number people came for, in words and as one bar."""
    chars, saved = total["chars"], total["saved_chars"]
    if not total["cut_calls"]:
        return (f'<div class="hero"><p class="headline">No rule would have cut any of the '
                f'{_plural(total["calls"], "call")} ({_n(chars)} characters).</p></div>')
    said = (f"{_n(saved)} of {_n(chars)} characters ({_pct(saved, chars)}) would never have "
            f"been generated: \u2248 {_n(total['saved_tokens'])} tokens, in "
            f"{_n(total['cut_calls'])} of {_plural(total['calls'], 'call')}.")
    return (f'<div class="hero"><p class="headline"><span class="big">{_n(saved)}</span> '
            f'of {_n(chars)} characters <span class="pct-big">({_pct(saved, chars)})</span> '
            "would never have been generated: \u2248 "
            f"<strong>{_n(total['saved_tokens'])}</strong> tokens, in "
            f"{_n(total['cut_calls'])} of {_plural(total['calls'], 'call')}.</p>"
            f'<div class="hero-bar" role="img" aria-label="{_attr(said)}">'
            f'<span class="kept" style="width:{_width(chars - saved, chars)}"></span>'
            f'<span class="gone" style="width:{_width(saved, chars)}"></span></div>'
            f'<p class="hero-keys" aria-hidden="true"><span><span class="sw kept"></span>'
            f"generated anyway: {_n(chars - saved)}</span><span><span class=\"sw gone\"></span>"
            f"saved by the cuts: {_n(saved)}</span></p></div>")


def _rules_chart(reports: Sequence[SessionReport]) -> str:
    calls: Counter[str] = Counter()
    saved: Counter[str] = Counter()
    tokens: Counter[str] = Counter()
    for report in reports:
        for call in report.calls:
            if call.cut is not None:
                calls[call.cut.rule] += 1
                saved[call.cut.rule] += call.saved_chars
                tokens[call.cut.rule] += call.saved_tokens
    if not calls:
        return ('<p class="quiet">No rule would have cut any call: every call ran to its end '
                'in the replay too.</p>')
    most = max(max(saved.values()), 1)
    rows = []
    for rule in sorted(calls, key=lambda r: (-saved[r], -calls[r], r)):
        rows.append(
            f'<tr><th scope="row"><span class="chip">{_esc(rule)}</span></th>'
            f'<td class="num">{_n(calls[rule])}</td>'
            f'<td class="chart"><span class="hbar" style="width:{_width(saved[rule], most)}">'
            f'</span></td>'
            f'<td class="num">{_n(saved[rule])}</td>'
            f'<td class="num">\u2248 {_n(tokens[rule])}</td></tr>')
    return ('<div class="scroll"><table class="rules"><caption>Which rules would have cut, '
            'and what each would have saved</caption><thead><tr><th scope="col">Rule</th>'
            '<th scope="col" class="num">Calls cut</th><th scope="col">'
            '<span class="sr">Characters saved, drawn</span></th>'
            '<th scope="col" class="num">Characters saved</th>'
            '<th scope="col" class="num">Tokens saved</th></tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div>')


def _legend(cuts: bool) -> str:
    tools = ('<div class="card-tools" id="card-tools" hidden><span>Cut cards:</span>'
             '<button type="button" data-open>Expand all</button>'
             '<button type="button" data-close>Collapse all</button></div>' if cuts else "")
    return (
        '<section class="legend" aria-labelledby="legend-h"><h2 id="legend-h">How to read it'
        '</h2><ul class="keys">'
        '<li><span class="sw r" aria-hidden="true"></span>reasoning</li>'
        '<li><span class="sw t" aria-hidden="true"></span>visible text</li>'
        '<li><span class="sw a" aria-hidden="true"></span>tool-call arguments</li>'
        '<li><span class="sw saved-sw" aria-hidden="true"></span>what the cut would have '
        'saved (hatched)</li>'
        '<li><span class="sw cut-sw" aria-hidden="true"></span>cut point</li>'
        '<li><span class="badge stall">stall</span>the call restated the last one without '
        'acting; <span class="badge stall fire">stall: steer</span> the stall rule fired</li>'
        '<li><span class="badge steer">tool steer</span>a failing tool result would carry '
        'guidance</li>'
        '<li><span class="badge deny">tool deny</span>a repeated failing tool call would be '
        'refused</li>'
        '<li><mark class="h0">repeat</mark><mark class="h1">ing</mark> unit, and text the cut '
        'would have dropped: <span class="after">after the cut</span></li>'
        '</ul><p class="scale-note"><strong>Scale.</strong> Each session\u2019s timeline is '
        'linear: a bar\u2019s length is proportional to the call\u2019s characters, and the '
        'full width is stated above each timeline. No bar is drawn narrower than 3 pixels, so '
        'the shortest calls stay visible beside a 300,000-character one. Within a bar the '
        'parts are drawn in stream order as usually recorded (reasoning, then text, then tool '
        'arguments); the cut mark sits at its exact position in the stream. Each cut call\u2019s '
        'card below draws that call alone, at its own scale. Tokens are approximate unless the '
        f'log recorded usage.</p>{tools}</section>')


def _index(reports: Sequence[SessionReport]) -> str:
    rows = []
    for i, report in enumerate(reports, 1):
        t = report.totals()
        problems = _read_problems(_read_totals([report]))
        rows.append(
            f'<tr><th scope="row"><a href="#s{i}">{_esc(report.path)}</a>'
            f'<span class="sid">{_esc(report.session)}</span></th>'
            f"<td>{_esc(report.source)}</td>"
            f'<td class="num">{_n(t["calls"])}</td><td class="num">{_n(t["cut_calls"])}</td>'
            f'<td class="num">{_n(t["saved_chars"])}<span class="pct">'
            f'{_pct(t["saved_chars"], t["chars"])}</span></td>'
            f'<td class="num">{_n(t["stall_fires"])}</td>'
            f'<td class="num">{_n(t["tool_steers"])} / {_n(t["tool_denials"])}</td>'
            f'<td>{" · ".join(problems) or _DASH}</td></tr>')
    return ('<nav class="index" aria-labelledby="index-h"><h2 id="index-h">Sessions</h2>'
            '<div class="scroll"><table><thead><tr><th scope="col">Source and session</th>'
            '<th scope="col">Format</th><th scope="col" class="num">Calls</th>'
            '<th scope="col" class="num">Cut</th><th scope="col" class="num">Chars saved</th>'
            '<th scope="col" class="num">Stall fires</th>'
            '<th scope="col" class="num">Steers / denials</th>'
            '<th scope="col">Unreadable</th></tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div></nav>')


@dataclass
class _Row:
    """One call and what happened around it, ready to draw."""

    index: int
    call: CallReport
    stall: StallReport | None
    actions: list[ToolAction]
    card: bool = False  # whether the page holds this cut's card

    @property
    def quiet(self) -> bool:
        return self.call.cut is None and self.stall is None and not self.actions


def _rows(report: SessionReport) -> list[_Row]:
    rows = [_Row(j, call, None, []) for j, call in enumerate(report.calls, 1)]
    # Stalls and tool actions name a turn and step; the last call there is the one they follow.
    last: dict[tuple[int, int], _Row] = {}
    for row in rows:
        last[(row.call.turn, row.call.step)] = row
    for stall in report.stalls:
        stalled = last.get((stall.turn, stall.step))
        if stalled is not None and stalled.stall is None:
            stalled.stall = stall
    for action in report.tool_actions:
        acted = last.get((action.turn, action.step))
        if acted is not None:
            acted.actions.append(action)
    return rows


def _bar(call: CallReport, full: int, *, big: bool = False) -> str:
    chars = call.chars
    segs = []
    for cls, size in (("r", call.reasoning_chars), ("t", call.text_chars),
                      ("a", call.tool_chars)):
        if size:
            segs.append(f'<span class="seg {cls}" style="width:{_width(size, chars)}"></span>')
    extra = ""
    if call.cut is not None and chars:
        position = max(0, min(chars, chars - call.saved_chars))
        left = _width(position, chars)
        extra = (f'<span class="saved" style="left:{left}"></span>'
                 f'<span class="cutmark" style="left:{left}"></span>')
    width = "100%" if big else _width(chars, full)
    empty = "" if chars else " empty"
    return (f'<span class="bar{empty}" style="width:{width}" aria-hidden="true">'
            f'{"".join(segs)}{extra}</span>')


def _describe(call: CallReport) -> str:
    parts = [f"turn {call.turn}, step {call.step}"]
    if call.kind != "message":
        parts.append(call.kind)
    mix = [f"{_n(size)} {name}" for name, size in
           (("reasoning", call.reasoning_chars), ("text", call.text_chars),
            ("tool-argument", call.tool_chars)) if size]
    parts.append(f"{_n(call.chars)} characters" + (f" ({', '.join(mix)})" if mix else ""))
    if call.tool_calls:
        parts.append("tools: " + ", ".join(call.tool_calls[:8])
                     + (" \u2026" if len(call.tool_calls) > 8 else ""))
    if call.finish:
        parts.append(f"finished: {call.finish}")
    if call.cut is not None:
        parts.append(f"{call.cut.rule} would cut at {_n(call.chars - call.saved_chars)}, "
                     f"saving {_n(call.saved_chars)}")
    return "; ".join(parts)


def _badges(row: _Row) -> str:
    out = []
    if row.stall is not None:
        if row.stall.reaction:
            out.append(f'<span class="badge stall fire">stall: {_esc(row.stall.reaction)}'
                       "</span>")
        else:
            out.append('<span class="badge stall">stall</span>')
    steers = sum(1 for a in row.actions if a.action == "steer")
    denials = sum(1 for a in row.actions if a.action == "deny")
    if steers:
        out.append(f'<span class="badge steer">tool steer{f" ×{steers}" if steers > 1 else ""}'
                   "</span>")
    if denials:
        out.append(f'<span class="badge deny">tool deny{f" ×{denials}" if denials > 1 else ""}'
                   "</span>")
    return "".join(out)


def _call_row(sid: str, row: _Row, full: int) -> str:
    call = row.call
    cls = "call cut" if call.cut is not None else "call"
    kind = f' <span class="tag">{_esc(call.kind)}</span>' if call.kind != "message" else ""
    info = [f'<span class="chars">{_n(call.chars)}</span>']
    if call.cut is not None:
        chip = (f'<a class="chip" href="#{sid}-x{row.index}">' if row.card
                else '<span class="chip">')
        info.append(f'{chip}{_esc(call.cut.rule)}{"</a>" if row.card else "</span>"}'
                    f'<span class="minus">\u2212{_n(call.saved_chars)}</span>')
    badges = _badges(row)
    if badges:
        info.append(f'<span class="marks">{badges}</span>')
    return (f'<li class="{cls}" id="{sid}-c{row.index}" title="{_attr(_describe(call))}">'
            f'<span class="step">step {_n(call.step)}{kind}</span>'
            f'<span class="track">{_bar(call, full)}</span>'
            f'<span class="info">{"".join(info)}</span>'
            f'<span class="sr">{_esc(_describe(call))}.</span></li>')


def _more(rows: list[_Row]) -> str:
    return (f'<li class="more">{_plural(len(rows), "more call")} '
            f"({_n(sum(r.call.chars for r in rows))} characters) not drawn, to keep the page "
            "small.</li>")


def _fold(sid: str, rows: list[_Row], full: int) -> str:
    """Uneventful calls of one turn in a row, as one row that opens to show them."""
    chars = sum(r.call.chars for r in rows)
    span = f"steps {_n(rows[0].call.step)}\u2013{_n(rows[-1].call.step)}"
    drawn = "".join(_call_row(sid, r, full) for r in rows[:FOLD_ROWS])
    more = _more(rows[FOLD_ROWS:]) if len(rows) > FOLD_ROWS else ""
    return (f'<li class="fold"><details><summary>{_plural(len(rows), "call")} without a cut, '
            f"stall or tool action \u00b7 {span} \u00b7 {_n(chars)} characters</summary>"
            f'<ol class="calls">{drawn}{more}</ol></details></li>')


def _turn(sid: str, group: list[_Row], full: int, budget: int | None = None) -> str:
    """One turn: its heading and its calls, uneventful runs folded; at most ``budget`` rows
    drawn when given (inside a fold of whole turns)."""
    turn = group[0].call.turn
    cut = sum(1 for r in group if r.call.cut is not None)
    chars = sum(r.call.chars for r in group)
    note = f"{_plural(len(group), 'call')} \u00b7 {_n(chars)} characters"
    if cut:
        note += (f" \u00b7 {_n(cut)} cut \u00b7 "
                 f"{_n(sum(r.call.saved_chars for r in group))} saved")
    out = [f'<section class="turn"><h4>Turn {_n(turn)} <span class="muted">{_esc(note)}'
           '</span></h4><ol class="calls">']
    if budget is not None:
        out.append("".join(_call_row(sid, r, full) for r in group[:budget]))
        if len(group) > budget:
            out.append(_more(group[budget:]))
    else:
        i = 0
        while i < len(group):
            j = i
            while j < len(group) and group[j].quiet:
                j += 1
            if j - i >= FOLD_FROM:
                out.append(_fold(sid, group[i:j], full))
                i = j
            else:
                out.append(_call_row(sid, group[i], full))
                i += 1
    out.append("</ol></section>")
    return "".join(out)


def _quiet_turns(sid: str, groups: list[list[_Row]], full: int) -> str:
    """Whole turns in a row without any event, as one row that opens to show them."""
    calls = sum(len(g) for g in groups)
    chars = sum(r.call.chars for g in groups for r in g)
    first, last = groups[0][0].call.turn, groups[-1][0].call.turn
    budget = FOLD_ROWS
    drawn: list[str] = []
    for k, group in enumerate(groups):
        if budget <= 0:
            rest = [r for g in groups[k:] for r in g]
            drawn.append(f'<ol class="calls">{_more(rest)}</ol>')
            break
        drawn.append(_turn(sid, group, full, budget))
        budget -= len(group)
    return (f'<div class="fold turns"><details><summary>Turns {_n(first)}\u2013{_n(last)}: '
            f"{_plural(calls, 'call')} without a cut, stall or tool action \u00b7 "
            f"{_n(chars)} characters</summary>{''.join(drawn)}</details></div>")


def _timeline(sid: str, rows: list[_Row]) -> str:
    if not rows:
        return '<p class="quiet">No model calls were recorded in this session.</p>'
    longest = max(r.call.chars for r in rows)
    full, step = _nice_scale(longest)
    ticks = "".join(
        f'<span class="tick" style="left:{_width(x, full)}">{_compact(x)}</span>'
        for x in range(0, full + 1, step))
    out = [f'<div class="timeline"><p class="axis-note">Linear scale: the full width is '
           f"{_n(full)} characters; the longest call has {_n(longest)}.</p>"
           '<div class="axis" aria-hidden="true"><span class="step"></span>'
           f'<span class="ticks">{ticks}</span><span class="info"></span></div>']
    groups: list[list[_Row]] = []
    for row in rows:
        if groups and groups[-1][-1].call.turn == row.call.turn:
            groups[-1].append(row)
        else:
            groups.append([row])
    i = 0
    while i < len(groups):
        j = i
        while j < len(groups) and all(r.quiet for r in groups[j]):
            j += 1
        if j - i >= 2 or (j > i and len(groups[i]) >= FOLD_FROM):
            out.append(_quiet_turns(sid, groups[i:j], full))
            i = j
        else:
            out.append(_turn(sid, groups[i], full))
            i += 1
    out.append("</div>")
    return "".join(out)


def _evidence(evidence: dict[str, Any]) -> str:
    items = []
    for key in sorted(evidence):
        value = evidence[key]
        if isinstance(value, bool):
            shown = "yes" if value else "no"
        elif isinstance(value, str):
            shown = f'<code class="unit">{_visible_ws(_clip(value, 160))}</code>'
        elif isinstance(value, (list, tuple)):
            shown = _esc(", ".join(str(v) for v in value[:12]))
        elif isinstance(value, dict):
            shown = _esc(_clip(", ".join(f"{k}: {v}" for k, v in value.items()), 160))
        elif isinstance(value, int):
            shown = _n(value)
        else:
            shown = _esc(_clip(str(value), 160))
        items.append(f"<div><dt>{_esc(str(key).replace('_', ' '))}</dt><dd>{shown}</dd></div>")
    return f'<dl class="evidence">{"".join(items)}</dl>' if items else ""


def _cut_card(sid: str, row: _Row, open_: bool) -> str:
    call = row.call
    cut = call.cut
    assert cut is not None
    chars = call.chars
    position = max(0, chars - call.saved_chars)
    before = cut.excerpt_before[-EXCERPT_BEFORE:]
    after = _head_lines(cut.excerpt_after[:EXCERPT_AFTER], AFTER_LINES)
    marks = _marks(cut, before + after, len(before))
    channel = {"reasoning": "reasoning", "text": "visible text"}.get(cut.channel, cut.channel)
    kind = f" ({_esc(call.kind)})" if call.kind != "message" else ""
    head = (f'<summary><h4><span class="where">Turn {_n(call.turn)} \u00b7 step '
            f'{_n(call.step)}{kind}</span> <span class="chip">{_esc(cut.rule)}</span> '
            f'<span class="muted">on the {_esc(channel)} \u00b7 saves '
            f"{_n(call.saved_chars)} of {_n(chars)} characters "
            f"({_pct(call.saved_chars, chars)})</span></h4></summary>")
    facts = (
        f"<p>The rule held at character {_n(cut.at)} of the {_esc(channel)}; the stream would "
        f"have been cut at the end of that delta, {_n(position)} characters into the call "
        f"(all channels). That leaves {_n(call.saved_chars)} characters, "
        f"\u2248 {_n(call.saved_tokens)} tokens, never generated"
        + (f"; the call finished with <code>{_esc(call.finish)}</code>" if call.finish
           else "; the recorded stream never finished")
        + ".</p>")
    scale = (f'<div class="own-scale" aria-hidden="true"><span>0</span>'
             f'<span class="at" style="left:{_width(position, chars)}">{_n(position)}</span>'
             f"<span>{_n(chars)}</span></div>")
    lead = ""
    if cut.at > len(before):
        lead = (f'<span class="elided">[\u2026 {_n(cut.at - len(before))} earlier characters '
                "of this channel not shown \u2026]</span>\n")
    tail = ""
    if call.saved_chars > len(after):
        tail = '\n<span class="elided">[\u2026 the loop runs on \u2026]</span>'
    excerpt = (f'<figure class="excerpt"><figcaption>{_esc(marks.caption)}</figcaption>'
               f'<div class="scroller" tabindex="0" role="region" aria-label="excerpt">'
               f"<pre>{lead}{_render_excerpt(before, after, marks)}{tail}</pre></div>"
               "</figure>")
    stall = ""
    if row.stall is not None:
        s = row.stall
        reaction = f", and it fired: {_esc(s.reaction)}" if s.reaction else ""
        stall = (f'<p class="muted">The session\u2019s stall rule also counted this call as '
                 f"stalled ({_esc(s.reason or 'no reason given')}, {_plural(s.run, 'call')} "
                 f"in a row{reaction}).</p>")
    return (f'<article class="cutcard" id="{sid}-x{row.index}">'
            f'<details{" open" if open_ else ""}>{head}<div class="card-body">{facts}'
            f'<div class="own">{_bar(call, chars, big=True)}</div>{scale}'
            f'{_evidence(cut.evidence)}{stall}{excerpt}'
            f'<p class="back"><a href="#{sid}-c{row.index}">back to the timeline</a></p>'
            "</div></details></article>")


def _stall_table(report: SessionReport) -> str:
    if not report.stalls:
        return ""
    rows = []
    for s in report.stalls[:TABLE_ROWS]:
        containment = "\u2014" if s.containment is None else f"{s.containment:.2f}"
        reaction = (f'<span class="badge stall fire">{_esc(s.reaction)}</span>' if s.reaction
                    else "\u2014")
        rows.append(f'<tr><td class="num">{_n(s.turn)}</td><td class="num">{_n(s.step)}</td>'
                    f"<td>{_esc(s.reason or '')}</td><td class=\"num\">{_n(s.run)}</td>"
                    f'<td class="num">{containment}</td><td>{reaction}</td></tr>')
    more = _more_rows(len(report.stalls))
    return (f'<details class="side"><summary>Stalls: {_plural(len(report.stalls), "stalled call")}'
            f', {_plural(sum(1 for s in report.stalls if s.reaction), "fire")}</summary>'
            '<div class="scroll"><table><thead><tr><th scope="col" class="num">Turn</th>'
            '<th scope="col" class="num">Step</th><th scope="col">Reason</th>'
            '<th scope="col" class="num">In a row</th><th scope="col" class="num">Containment'
            '</th><th scope="col">Reaction</th></tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div>{more}</details>')


def _tool_table(report: SessionReport) -> str:
    if not report.tool_actions:
        return ""
    rows = []
    for a in report.tool_actions[:TABLE_ROWS]:
        badge = "deny" if a.action == "deny" else "steer"
        rows.append(f'<tr><td class="num">{_n(a.turn)}</td><td class="num">{_n(a.step)}</td>'
                    f"<td><code>{_esc(a.tool)}</code></td>"
                    f'<td><span class="badge {badge}">tool {_esc(a.action)}</span></td>'
                    f'<td class="num">{_n(a.failures)}</td>'
                    f'<td class="msg">{_esc(_clip(a.text, MESSAGE_CHARS))}</td></tr>')
    steers = sum(1 for a in report.tool_actions if a.action == "steer")
    denials = sum(1 for a in report.tool_actions if a.action == "deny")
    more = _more_rows(len(report.tool_actions))
    return (f'<details class="side"><summary>Tool breaker: {_plural(steers, "steer")}, '
            f'{_plural(denials, "denial")}</summary><div class="scroll"><table><thead><tr>'
            '<th scope="col" class="num">Turn</th><th scope="col" class="num">After step</th>'
            '<th scope="col">Tool</th><th scope="col">Action</th>'
            '<th scope="col" class="num">Failures</th><th scope="col">What the model would '
            f'read</th></tr></thead><tbody>{"".join(rows)}</tbody></table></div>{more}'
            "</details>")


def _more_rows(count: int) -> str:
    if count <= TABLE_ROWS:
        return ""
    return f'<p class="muted">{_n(count - TABLE_ROWS)} more not listed here.</p>'


def _session(i: int, report: SessionReport, excerpted: set[tuple[int, int]],
             opened: set[tuple[int, int]]) -> str:
    sid = f"s{i}"
    t = report.totals()
    facts = [
        ("session", f"<code>{_esc(report.session)}</code>"),
        ("format", _esc(report.source)),
        ("calls", _n(t["calls"])),
        ("cut", f'{_n(t["cut_calls"])}'
                + (" (" + ", ".join(f"{_esc(r)} {_n(n)}" for r, n in sorted(t["rules"].items()))
                   + ")" if t["rules"] else "")),
        ("saved", f'{_n(t["saved_chars"])} of {_n(t["chars"])} characters '
                  f'({_pct(t["saved_chars"], t["chars"])}) \u00b7 \u2248 '
                  f'{_n(t["saved_tokens"])} tokens'),
        ("stall fires", _n(t["stall_fires"])),
        ("tool steers / denials", f'{_n(t["tool_steers"])} / {_n(t["tool_denials"])}'),
    ]
    meta = "".join(f"<div><dt>{_esc(k)}</dt><dd>{v}</dd></div>" for k, v in facts)
    read = _read_totals([report])
    problems = _read_problems(read)
    notice = ""
    if problems:
        first = (report.read or {}).get("first_error")
        notice = ('<div class="notice" role="note"><strong>Not everything in this source '
                  f'could be read: </strong>{" · ".join(problems)}.'
                  + (f" First error: <code>{_esc(_clip(str(first), MESSAGE_CHARS))}</code>"
                     if first else "") + "</div>")
    rows = _rows(report)
    cut_rows = [r for r in rows if r.call.cut is not None]
    for row in cut_rows:
        row.card = (i, row.index) in excerpted
    cards = [_cut_card(sid, r, (i, r.index) in opened) for r in cut_rows if r.card]
    if not cut_rows:
        cuts = ('<p class="quiet">No rule would have cut a call in this session.</p>')
    else:
        left = len(cut_rows) - len(cards)
        more = (f'<p class="muted">{_plural(left, "more cut call")} '
                "(smaller savings) are marked on the timeline but not excerpted, to keep the "
                "page small.</p>" if left else "")
        cuts = "".join(cards) + more
    return (f'<section class="session" id="{sid}" aria-labelledby="{sid}-h">'
            f'<header><h2 id="{sid}-h"><span class="kicker">Session {i}</span>'
            f'<span class="path">{_esc(report.path)}</span></h2>'
            f'<dl class="meta">{meta}</dl></header>{notice}'
            f'<h3>Timeline</h3>{_timeline(sid, rows)}'
            f'{_stall_table(report)}{_tool_table(report)}'
            f'<h3>Cuts</h3>{cuts}</section>')


def _choose_excerpts(reports: Sequence[SessionReport]
                     ) -> tuple[set[tuple[int, int]], set[tuple[int, int]]]:
    """Which cut calls get a card (the largest savings first, within the caps) and which
    of those start open (the first in page order)."""
    picked: list[tuple[int, int]] = []
    for i, report in enumerate(reports, 1):
        cut = [(j, c) for j, c in enumerate(report.calls, 1) if c.cut is not None]
        cut.sort(key=lambda jc: (-jc[1].saved_chars, jc[0]))
        picked.extend((i, j) for j, _ in cut[:EXCERPTS_PER_SESSION])
    if len(picked) > EXCERPTS_PER_PAGE:
        saved = {(i, j): reports[i - 1].calls[j - 1].saved_chars for i, j in picked}
        picked.sort(key=lambda key: (-saved[key], key))
        picked = picked[:EXCERPTS_PER_PAGE]
    excerpted = set(picked)
    opened = set(sorted(excerpted)[:OPEN_CARDS])
    return excerpted, opened


# --- the page -------------------------------------------------------------------------------

_SCRIPT = """
(function () {
  var doc = document;
  function cards() { return doc.querySelectorAll(".cutcard > details"); }
  function setAll(open) { cards().forEach(function (d) { d.open = open; }); }
  var closed = [];
  window.addEventListener("beforeprint", function () {
    closed = [];
    cards().forEach(function (d) { if (!d.open) { closed.push(d); d.open = true; } });
  });
  window.addEventListener("afterprint", function () {
    closed.forEach(function (d) { d.open = false; });
    closed = [];
  });
  var tools = doc.getElementById("card-tools");
  if (tools && cards().length) {
    tools.hidden = false;
    tools.querySelector("[data-open]").addEventListener("click", function () { setAll(true); });
    tools.querySelector("[data-close]").addEventListener("click", function () {
      setAll(false);
    });
  }
  doc.documentElement.setAttribute("data-ready", "1");
})();
"""

# The policy lets exactly this script run: a <script> that slipped into model output
# would be refused even if escaping failed.
_SCRIPT_HASH = base64.b64encode(hashlib.sha256(_SCRIPT.encode("utf-8")).digest()).decode()
CSP = (f"default-src 'none'; style-src 'unsafe-inline'; script-src 'sha256-{_SCRIPT_HASH}'; "
       "img-src data:; base-uri 'none'; form-action 'none'")

_CSS = """
:root {
  --bg: #ffffff; --fg: #1b1d22; --muted: #565b66; --line: #d8dbe2; --panel: #f5f6f8;
  --r: #5a4bc4; --t: #0a7570; --a: #b05500; --cut: #c8102e; --accent: #2b59c3;
  --ink: #3b4352;
  --hl0: #ffe27a; --hl1: #ffc58f; --after-bg: #fbeaea; --after-fg: #4f525b;
  --stall-bg: #fff1c7; --stall-fg: #6a4700; --stall-line: #c99a16;
  --steer-bg: #e2ecff; --steer-fg: #173f85; --deny-bg: #fde4e4; --deny-fg: #8f1b1b;
  --hatch: rgba(255, 255, 255, .74); --on-cut: #ffffff;
  color-scheme: light dark;
}
@media (prefers-color-scheme: dark) {
  :root {
    --bg: #15171c; --fg: #e7e9ee; --muted: #a8adb8; --line: #363a44; --panel: #1e2128;
    --r: #9d92ff; --t: #35c4bb; --a: #f0a04b; --cut: #ff5c6c; --accent: #8fb0ff;
    --ink: #8a93a6;
    --hl0: #6b5a10; --hl1: #7a4314; --after-bg: #3a2226; --after-fg: #c4c7cf;
    --stall-bg: #4a3a0c; --stall-fg: #ffe08a; --stall-line: #d6a526;
    --steer-bg: #1d2e52; --steer-fg: #b9ceff; --deny-bg: #4a1d1f; --deny-fg: #ffc1c1;
    --hatch: rgba(21, 23, 28, .70); --on-cut: #1a0407;
  }
}
* { box-sizing: border-box; }
html { -webkit-text-size-adjust: 100%; }
body {
  margin: 0; background: var(--bg); color: var(--fg);
  font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Liberation Sans",
        "DejaVu Sans", sans-serif;
  -webkit-print-color-adjust: exact; print-color-adjust: exact;
}
.page { max-width: 1180px; margin: 0 auto; padding: 28px 24px 48px; }
a { color: var(--accent); }
a:focus-visible, summary:focus-visible, .scroller:focus-visible, button:focus-visible {
  outline: 3px solid var(--accent); outline-offset: 2px;
}
code, pre, .unit { font-family: ui-monospace, "DejaVu Sans Mono", "Liberation Mono",
  Menlo, Consolas, monospace; font-size: .92em; }
h1 { font-size: 1.75rem; line-height: 1.2; margin: 0 0 .35rem; letter-spacing: -.01em; }
h2 { font-size: 1.25rem; margin: 0 0 .75rem; }
h3 { font-size: 1.02rem; margin: 1.6rem 0 .6rem; text-transform: uppercase;
     letter-spacing: .06em; color: var(--muted); }
h4 { font-size: .95rem; margin: 0; font-weight: 600; }
.lede { color: var(--muted); margin: 0; max-width: 60rem; }
.muted, .quiet { color: var(--muted); }
.quiet { font-style: italic; }
.sr { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0);
      white-space: nowrap; }
.num { text-align: right; font-variant-numeric: tabular-nums; }
.site-head { border-bottom: 1px solid var(--line); padding-bottom: 1.1rem;
             margin-bottom: 1.4rem; }
.brand { display: inline-block; font-weight: 700; font-size: .78rem; letter-spacing: .12em;
         text-transform: uppercase; color: var(--accent); margin-bottom: .3rem; }
section { margin: 0 0 2rem; }
.hero { margin: 0 0 1rem; }
.headline { font-size: 1.1rem; margin: 0 0 .5rem; max-width: 60rem; }
.headline .big { font-size: 2.2rem; font-weight: 750; letter-spacing: -.02em;
                 font-variant-numeric: tabular-nums; }
.headline .pct-big { font-weight: 700; }
.hero-bar { display: flex; height: 22px; border-radius: 5px; overflow: hidden;
            border: 1px solid var(--line); }
.hero-bar .kept, .sw.kept { background: var(--ink); }
.hero-bar .gone, .sw.gone { background: repeating-linear-gradient(-45deg, var(--cut) 0 2.5px,
  transparent 2.5px 6px), var(--after-bg); }
.hero-keys { display: flex; flex-wrap: wrap; gap: 4px 22px; font-size: .85rem;
             color: var(--muted); margin: .35rem 0 0; font-variant-numeric: tabular-nums; }
.hero-keys .sw { margin-right: 6px; vertical-align: -1px; }
.stats { display: grid; grid-template-columns: repeat(auto-fit, minmax(165px, 1fr));
         gap: 10px; margin: 0 0 1.2rem; }
.stat { background: var(--panel); border: 1px solid var(--line); border-radius: 10px;
        padding: 12px 14px; margin: 0; }
.stat dt { font-size: .78rem; text-transform: uppercase; letter-spacing: .06em;
           color: var(--muted); }
.stat dd { margin: .15rem 0 0; }
.stat .big { display: block; font-size: 1.65rem; font-weight: 700; line-height: 1.2;
             font-variant-numeric: tabular-nums; }
.stat .big small { font-size: .8rem; font-weight: 500; color: var(--muted); }
.stat .note { display: block; font-size: .85rem; color: var(--muted); }
.stat.accent { border-color: var(--cut); box-shadow: inset 4px 0 0 var(--cut); }
.stat.warn { border-color: var(--stall-line); box-shadow: inset 4px 0 0 var(--stall-line); }
table { border-collapse: collapse; width: 100%; font-size: .92rem; }
th, td { padding: 6px 10px; border-bottom: 1px solid var(--line); text-align: left;
         vertical-align: top; }
thead th { font-size: .78rem; text-transform: uppercase; letter-spacing: .05em;
           color: var(--muted); font-weight: 600; }
caption { text-align: left; font-weight: 600; padding: 0 0 .5rem; }
.scroll { overflow-x: auto; }
table.rules td.chart { width: 40%; vertical-align: middle; }
.hbar { display: block; height: 12px; min-width: 2px; border-radius: 3px;
        background: var(--ink); }
.chip { display: inline-block; font: 600 .78rem/1.5 ui-monospace, "DejaVu Sans Mono",
        monospace; padding: 0 .45em; border-radius: 4px; background: var(--cut);
        color: var(--on-cut); text-decoration: none; white-space: nowrap; }
a.chip:hover { filter: brightness(1.1); }
.badge { display: inline-block; font-size: .72rem; line-height: 1.45; padding: 0 .45em;
         border-radius: 999px; white-space: nowrap; border: 1px solid transparent;
         font-weight: 600; }
.badge.stall { background: var(--bg); color: var(--stall-fg); border-color: var(--stall-line); }
.badge.stall.fire { background: var(--stall-bg); }
.badge.steer { background: var(--steer-bg); color: var(--steer-fg); }
.badge.deny { background: var(--deny-bg); color: var(--deny-fg); }
.notice { background: var(--stall-bg); color: var(--fg); border-left: 4px solid
          var(--stall-line); padding: .6rem .9rem; border-radius: 6px; margin: 0 0 1rem; }
.notice ul { margin: .4rem 0 0; padding-left: 1.2rem; }
.legend { background: var(--panel); border: 1px solid var(--line); border-radius: 10px;
          padding: 14px 16px; }
.keys { list-style: none; margin: 0 0 .6rem; padding: 0; display: flex; flex-wrap: wrap;
        gap: 6px 18px; font-size: .9rem; }
.keys li { display: block; }
.keys .sw, .keys .badge, .keys mark { margin-right: 4px; }
.keys .sw { vertical-align: -1px; }
.sw { display: inline-block; width: 26px; height: 12px; border-radius: 2px; }
.sw.r, .seg.r { background: var(--r); }
.sw.t, .seg.t { background: var(--t); }
.sw.a, .seg.a { background: var(--a); }
.sw.saved-sw { background: var(--r); position: relative; overflow: hidden; }
.sw.saved-sw::after, .saved { background: repeating-linear-gradient(-45deg, var(--hatch) 0
  2.5px, transparent 2.5px 5px); }
.sw.saved-sw::after { content: ""; position: absolute; inset: 0; }
.sw.cut-sw { width: 3px; height: 18px; background: var(--cut); border-radius: 0; }
.scale-note { font-size: .88rem; color: var(--muted); margin: 0; max-width: 70rem; }
.index th[scope="row"] { min-width: 14rem; }
.index .sid { display: block; font-size: .8rem; color: var(--muted);
              overflow-wrap: anywhere; }
.index th a { overflow-wrap: anywhere; }
.pct { color: var(--muted); margin-left: .4em; font-size: .85em; }
.session { border-top: 3px solid var(--fg); padding-top: 1rem; margin-top: 2.5rem; }
.session > header h2 { display: flex; flex-direction: column; gap: .1rem; }
.kicker { font-size: .75rem; text-transform: uppercase; letter-spacing: .1em;
          color: var(--muted); font-weight: 600; }
.path { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 1.1rem;
        word-break: break-all; }
.meta { display: flex; flex-wrap: wrap; gap: 4px 22px; margin: 0 0 1rem; font-size: .9rem; }
.meta div { display: flex; gap: .4em; }
.meta dt { color: var(--muted); }
.meta dt::after { content: ":"; }
.meta dd { margin: 0; font-variant-numeric: tabular-nums; }
.timeline { --label: 7.5rem; --info: 21rem; }
.axis-note { font-size: .85rem; color: var(--muted); margin: 0 0 .2rem; }
.axis, .calls > li.call { display: grid; grid-template-columns: var(--label) 1fr var(--info);
  column-gap: 12px; align-items: center; }
.axis { position: sticky; top: 0; background: var(--bg); z-index: 2; padding: 4px 0 2px;
        border-bottom: 1px solid var(--line); }
.ticks { position: relative; height: 1.2rem; font-size: .72rem; color: var(--muted);
         font-variant-numeric: tabular-nums; }
.tick { position: absolute; top: 0; transform: translateX(-50%); white-space: nowrap; }
.tick:first-child { transform: none; }
.tick:last-child { transform: translateX(-100%); }
.tick::before { content: ""; position: absolute; left: 50%; top: 1.05rem; height: 4px;
                border-left: 1px solid var(--muted); }
.tick:first-child::before { left: 0; }
.tick:last-child::before { left: auto; right: 0; }
.turn { margin: .7rem 0 0; }
.turn h4 { font-size: .85rem; padding: 3px 0; border-bottom: 1px dashed var(--line);
           margin-bottom: 2px; }
.turn h4 .muted { font-weight: 400; margin-left: .5em; }
ol.calls { list-style: none; margin: 0; padding: 0; }
.calls > li.call { min-height: 24px; padding: 1px 0; border-radius: 4px; }
.calls > li.call:hover, .calls > li.call:target { background: var(--panel); }
.calls > li.cut { background: linear-gradient(90deg, transparent, transparent); }
.step { font-size: .8rem; color: var(--muted); text-align: right; white-space: nowrap;
        font-variant-numeric: tabular-nums; }
.cut .step { color: var(--fg); font-weight: 600; }
.tag { font-size: .68rem; border: 1px solid var(--line); border-radius: 3px; padding: 0 3px;
       color: var(--muted); font-weight: 400; }
.track { position: relative; display: flex; align-items: center; gap: 8px; min-width: 0;
         height: 22px; }
.bar { position: relative; display: flex; height: 14px; min-width: 3px; flex: none;
       background: var(--line); border-radius: 2px; }
.bar.empty { background: transparent; border: 1px dashed var(--muted); }
.seg { display: block; height: 100%; min-width: 0; }
.seg:first-child { border-radius: 2px 0 0 2px; }
.seg:last-of-type { border-radius: 0 2px 2px 0; }
.saved { position: absolute; top: 0; bottom: 0; right: 0; }
.cutmark { position: absolute; top: -5px; bottom: -5px; width: 3px; margin-left: -1px;
           background: var(--cut); border-radius: 1px; }
.cutmark::before { content: ""; position: absolute; top: -2px; left: -3.5px;
                   border: 5px solid transparent; border-top: 6px solid var(--cut);
                   border-bottom: 0; }
.marks { display: inline-flex; flex-wrap: wrap; gap: 3px; }
.info { display: flex; align-items: center; gap: 8px; font-size: .82rem;
        font-variant-numeric: tabular-nums; min-width: 0; }
.info .chars { min-width: 5.5em; text-align: right; color: var(--muted); }
.cut .info .chars { color: var(--fg); }
.minus { color: var(--cut); font-weight: 600; white-space: nowrap; }
li.fold { margin: 2px 0; }
.fold > details > summary { cursor: pointer; font-size: .82rem; color: var(--muted);
  padding: 3px 8px 3px calc(var(--label) - 3.5rem); background: var(--panel);
  border-radius: 4px; border: 1px solid var(--line); }
.fold > details[open] > summary { margin-bottom: 2px; }
div.fold.turns { margin: .7rem 0 0; }
li.more { font-size: .82rem; color: var(--muted); padding-left: var(--label); }
details.side { margin: .8rem 0; border: 1px solid var(--line); border-radius: 8px;
               padding: .4rem .8rem; }
details.side > summary { cursor: pointer; font-weight: 600; }
details.side table { margin-top: .5rem; }
td.msg { font-size: .85rem; white-space: pre-wrap; overflow-wrap: anywhere; }
.card-tools { display: flex; align-items: center; gap: 8px; margin: .7rem 0 0;
              font-size: .88rem; color: var(--muted); }
.card-tools[hidden] { display: none; }
button { font: inherit; font-size: .85rem; padding: 3px 10px; border-radius: 6px;
         border: 1px solid var(--line); background: var(--panel); color: var(--fg);
         cursor: pointer; }
.cutcard { border: 1px solid var(--line); border-left: 4px solid var(--cut);
           border-radius: 8px; margin: 0 0 12px; background: var(--bg); }
.cutcard > details > summary { cursor: pointer; padding: 10px 14px; }
.cutcard > details > summary h4 { display: inline; }
.cutcard .where { margin-right: .3em; }
.cutcard .muted { font-weight: 400; }
.card-body { padding: 0 14px 12px; }
.card-body > p { margin: .2rem 0 .7rem; max-width: 70rem; }
.own { position: relative; padding: 8px 0 0; }
.own .bar { height: 20px; }
.own .cutmark { top: -7px; bottom: -7px; }
.own-scale { position: relative; height: 1.3rem; font-size: .75rem; color: var(--muted);
             display: flex; justify-content: space-between; font-variant-numeric:
             tabular-nums; margin-top: 4px; }
.own-scale .at { position: absolute; transform: translateX(-50%); color: var(--cut);
                 font-weight: 700; background: var(--bg); padding: 0 3px; }
.evidence { display: flex; flex-wrap: wrap; gap: 4px 18px; font-size: .85rem;
            margin: .4rem 0 .8rem; }
.evidence div { display: flex; gap: .4em; max-width: 100%; }
.evidence dt { color: var(--muted); }
.evidence dd { margin: 0; min-width: 0; overflow-wrap: anywhere; }
.unit { background: var(--panel); border: 1px solid var(--line); border-radius: 3px;
        padding: 0 3px; white-space: pre-wrap; }
.ws { color: var(--muted); }
.excerpt { margin: 0; }
.excerpt figcaption { font-size: .85rem; color: var(--muted); margin-bottom: 4px; }
/* column-reverse starts the scroll at the bottom: the cut shows without scrolling. */
.scroller { display: flex; flex-direction: column-reverse; max-height: 24rem;
  overflow: auto; background: var(--panel); border: 1px solid var(--line);
  border-radius: 6px; }
.excerpt pre { margin: 0; padding: 10px 12px; white-space: pre-wrap;
  overflow-wrap: anywhere; line-height: 1.5; font-size: .82rem; }
mark.h0, mark.h1 { color: inherit; border-radius: 2px; }
mark.h0 { background: var(--hl0); }
mark.h1 { background: var(--hl1); }
.after { background: var(--after-bg); color: var(--after-fg); }
.cutpt { display: inline-block; background: var(--cut); color: var(--on-cut); margin: 0 2px;
  font: 700 .62rem/1.35 system-ui, "DejaVu Sans", sans-serif; padding: 0 4px;
  border-radius: 2px; text-transform: uppercase; letter-spacing: .05em;
  vertical-align: 1px; box-shadow: -2px 0 0 var(--bg), 2px 0 0 var(--bg); }
.elided { color: var(--muted); font-style: italic; }
.ctl { color: var(--cut); border: 1px solid currentColor; border-radius: 2px;
       padding: 0 1px; font-size: .85em; }
.back { font-size: .82rem; margin: .6rem 0 0; }
footer { border-top: 1px solid var(--line); margin-top: 3rem; padding-top: 1rem;
         font-size: .82rem; color: var(--muted); }
@media screen and (max-width: 760px) {
  .page { padding: 16px 12px 32px; }
  .timeline { --label: 4.6rem; }
  .axis { grid-template-columns: var(--label) 1fr; }
  .axis .info { display: none; }
  .calls > li.call { grid-template-columns: var(--label) 1fr; row-gap: 0; }
  .calls > li.call .info { grid-column: 2; font-size: .78rem; flex-wrap: wrap; }
  .calls .step { white-space: normal; line-height: 1.2; }
  .calls .step .tag { display: block; width: max-content; margin-left: auto; }
  .info .chars { min-width: 0; text-align: left; }
  .stat .big { font-size: 1.35rem; }
  .stats { grid-template-columns: repeat(auto-fill, minmax(150px, 1fr)); }
  table.rules td.chart, table.rules th:nth-child(3) { display: none; }
  .meta { gap: 2px 14px; }
}
@media print {
  body { font-size: 11px; }
  .page { max-width: none; padding: 0; }
  .axis { position: static; }
  .card-tools, .back { display: none !important; }
  .scroller { max-height: none; overflow: visible; }
  .calls > li, .stat, tr, .own, .evidence, .hero { break-inside: avoid; }
  h2, h3, h4, summary { break-after: avoid; }
  .timeline { --label: 4.5rem; --info: 15rem; }
  .scroll { overflow: visible; }
  .info { flex-wrap: wrap; }
  .stats { grid-template-columns: repeat(3, 1fr); }
  .session { break-before: page; }
  a { color: inherit; text-decoration: none; }
}
"""


def render_html(reports: Sequence[SessionReport], *, title: str = DEFAULT_TITLE) -> str:
    """The whole report as one HTML page (a string; write it as UTF-8)."""
    reports = list(reports)
    total = summary(reports)
    excerpted, opened = _choose_excerpts(reports)
    lede = (f"A replay of {_plural(total['sessions'], 'recorded session')} through "
            "loopbreak\u2019s rules: where each rule would have cut a call while it streamed, "
            "and what the cut would have saved. Nothing was cut for real: each call is shown "
            "as it was recorded.")
    body: list[str] = [
        f'<header class="site-head"><span class="brand">loopbreak analyze</span>'
        f"<h1>{_esc(title)}</h1><p class=\"lede\">{_esc(lede)}</p></header>",
        '<main>',
    ]
    if not reports:
        body.append('<p class="quiet">No sessions were read: nothing to report.</p>')
    else:
        body.append(_totals_section(reports))
        body.append(_legend(any(r.cut_calls for r in reports)))
        if len(reports) > 1:
            body.append(_index(reports))
        for i, report in enumerate(reports, 1):
            body.append(_session(i, report, excerpted, opened))
    body.append("</main>")
    body.append(f"<footer>Made by <code>loopbreak analyze --html</code> "
                f"(loopbreak {_esc(__version__)}). The page is self-contained: it loads "
                "nothing from anywhere.</footer>")
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{_attr(CSP)}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<meta name="generator" content="loopbreak analyze">\n'
        f"<title>{_esc(title)}</title>\n<style>{_CSS}</style>\n</head>\n"
        f'<body>\n<div class="page">\n{"".join(body)}\n</div>\n'
        f"<script>{_SCRIPT}</script>\n</body>\n</html>\n"
    )

