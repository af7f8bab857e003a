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

from loopbreak.offline.report.page import CSP, render_html
from loopbreak.offline.report.settings import (
    AFTER_LINES,
    BLOCK_RULES,
    DEFAULT_TITLE,
    DEGENERACY_RULES,
    EXCERPTS_PER_PAGE,
    EXCERPTS_PER_SESSION,
    FOLD_FROM,
    FOLD_ROWS,
    MESSAGE_CHARS,
    OPEN_CARDS,
    TABLE_ROWS,
)

__all__ = [
    "AFTER_LINES", "BLOCK_RULES", "CSP", "DEFAULT_TITLE", "DEGENERACY_RULES",
    "EXCERPTS_PER_PAGE", "EXCERPTS_PER_SESSION", "FOLD_FROM", "FOLD_ROWS", "MESSAGE_CHARS",
    "OPEN_CARDS", "TABLE_ROWS", "render_html"
]
