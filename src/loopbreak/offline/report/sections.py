"""The parts of the page: totals, rules chart, index, per-session timelines, cut cards,
stall and tool tables."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from loopbreak.offline.analyze import (
    EXCERPT_AFTER,
    EXCERPT_BEFORE,
    CallReport,
    SessionReport,
    StallReport,
    ToolAction,
    summary,
)
from loopbreak.offline.report.excerpts import _head_lines, _int, _marks, _render_excerpt
from loopbreak.offline.report.settings import (
    AFTER_LINES,
    EXCERPTS_PER_PAGE,
    EXCERPTS_PER_SESSION,
    FOLD_FROM,
    FOLD_ROWS,
    MESSAGE_CHARS,
    OPEN_CARDS,
    TABLE_ROWS,
)
from loopbreak.offline.report.text import (
    _DASH,
    _attr,
    _clip,
    _compact,
    _esc,
    _n,
    _nice_scale,
    _pct,
    _plural,
    _s,
    _visible_ws,
    _width,
)

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
                    f'<td><span class="badge {badge}">{_esc(a.rule)} {_esc(a.action)}</span>'
                    "</td>"
                    f'<td class="num">{_n(a.failures)}</td>'
                    f'<td class="msg">{_esc(_clip(a.text, MESSAGE_CHARS))}</td></tr>')
    steers = sum(1 for a in report.tool_actions if a.action == "steer")
    denials = sum(1 for a in report.tool_actions if a.action == "deny")
    more = _more_rows(len(report.tool_actions))
    return (f'<details class="side"><summary>Tool rules: {_plural(steers, "steer")}, '
            f'{_plural(denials, "denial")}</summary><div class="scroll"><table><thead><tr>'
            '<th scope="col" class="num">Turn</th><th scope="col" class="num">After step</th>'
            '<th scope="col">Tool</th><th scope="col">Action</th>'
            '<th scope="col" class="num">Count</th><th scope="col">What the model would '
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


