"""The page itself: its one script (allowed by hash), its CSS, and ``render_html``."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence

from loopbreak import __version__
from loopbreak.offline.analyze import (
    SessionReport,
    summary,
)
from loopbreak.offline.report.sections import (
    _choose_excerpts,
    _index,
    _legend,
    _session,
    _totals_section,
)
from loopbreak.offline.report.settings import DEFAULT_TITLE
from loopbreak.offline.report.text import _attr, _esc, _plural

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

