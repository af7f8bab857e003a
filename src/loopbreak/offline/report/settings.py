"""What the report shows and how much of it (bounds that keep a page readable)."""

from __future__ import annotations

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
