"""Whether a piece of text is shaped like code or data rather than prose.

Code and data repeat verbatim for good reasons: test vectors, lookup tables,
copied blocks, nested literals. CPython's standard library holds periodic
stretches of up to 1,030 characters and runs of 14 near-identical 128-character
blocks, none of them a loop; the prose of two strong models' 1,610 AlpacaEval
answers holds none longer than a table template. Every real loop in the corpus
is prose-shaped (code-symbol share 0.00, no indented line). So the repetition
rules ask more of code-shaped material before they cut it, and still cut it.

Code-shaped: a line indented by two or more spaces or a tab (a list item is
not, nor a line with no ASCII character on it: Japanese prose indented as a
paragraph, which put two ja-vicuna loops behind the code span; measured
2026-12-03, nothing clean trips for reading them as prose), or code symbols
(ASCII brackets, operators, ``_``, backticks...) making at least
``CODE_SYMBOL_SHARE`` of the non-space characters. What prose punctuates
with does not count: an apostrophe inside a word (``I'm``), a colon before a
space (``Output: ...``), ``#`` (headings, hashtags), brackets opened after a
space with no code inside (``(see above)``, ``[Your Name]``, ``[1, 5, 8]``).
Measured on the development corpus, a third of the real loops the older gate
sent to the long code span were prose (``I'm not sure.``, a heading, a letter
template). Full-width CJK punctuation is not a code symbol, so CJK prose loops
stay prose. Nor is word-problem arithmetic code: calculator notes (``<<12*6=72>>``)
and an ``=`` or ``$`` before a number made 69 of the 194 Qwen3 GSM8K reasoning loops
"code" and put them past their latency budget, and exponents (``4x^3``) did the same
to ja-vicuna's equation loops (measured 2026-12-02; no clean stream and no
standard-library file trips for reading them as prose). Nor is algebra
(``3x + 10 = 5(x - 2)``, ``f(2) = 5(2)^3 - 2(2) + 3``), a code fence line
(what the fence holds is judged on its own), or a bracket opened right after
Japanese or Chinese text, which puts no space before it: read so, 8 more
ja-vicuna loops and 4 more Qwen3 GSM8K loops are cut, 21 more within their
budget, and nothing clean trips (measured 2026-12-02, second round). The readings only
take symbols away, so they are made only where the symbols alone say code. A
unit of symbols alone (``]{'``) is a flood, not code, unless it draws a table
(``|``); ``cycle`` asks blank table rows for a dozen copies rather than the
code span.
"""

from __future__ import annotations

import re

from loopbreak._engine.rotations import RotationVerdicts

POOL_LINES = 4
"""Lines (not blank) a unit needs to be a pool of lines (``repeats_its_lines``): a unit with
fewer line breaks is none."""

CODE_SYMBOL_SHARE = 0.05
"""Share of code symbols from which text counts as code. Real loop units in the
corpus measure 0.00; periodic units in stdlib code 0.05 and up, or indented."""

# Symbols that code and data use and prose does not. Left out because prose uses them
# too: ``#`` (markdown headings, hashtags), ``*`` (emphasis, bullets), ``/`` (dates,
# and/or), ``%``, ``&``, ``+``, ``!``, ``?``, ``-``, ``,``, ``.``. Counted only in their
# code use: a quote or apostrophe that is not inside a word (``I'm`` is prose) and a
# colon that is not followed by a space or line end (``Output: [1, 5]`` is prose).
_CODE_SYMBOLS = re.compile(
    r"[()\[\]{}=<>_;\\|$^~`@]|(?<![^\W\d_])['\"]|['\"](?![^\W\d_])|:(?=\S)"
)
# Brackets as prose uses them: opened after a space or a line start, closed on the same
# line, with no code symbol inside (``(see above)``, ``[Your Name]``, ``[1, 5, 8, 1]``).
# ``foo(a)`` and ``x[0]`` open right after a word and stay code.
# Japanese and Chinese put no space before a bracket (``(2, -2)と(10, 4)``).
_CJK = "\u3000-\u30ff\u3400-\u9fff\uff00-\uffef"
_INSIDE = r"[^()\[\]{}=<>;|\\\n]{0,120}"
_PROSE_BRACKETS = re.compile(rf"(?:(?<=[\s{_CJK}])|^)(?:\({_INSIDE}\)|\[{_INSIDE}\])")
# Arithmetic as word problems write it: a calculator note (``<<12*6=72>>``, the GSM8K
# format small reasoning models learned), an equals sign or a dollar sign before a
# number (``3 * 6 = 18``, ``3*35 = $105``) and an exponent (``4x^3``, ``2^{10}``).
# ``x = 5``, ``a[0] = 1``, ``1 == 1``, ``a ^ b`` and a regex's ``^`` stay code.
_PROSE_MATH = re.compile(r"<<[\w.,+\-*/()^ ]{1,60}=[\w.,+\-*/^ ]{1,30}>>"
                         r"|(?<=\d) ?=(?![=>])(?= ?[$\d(-])|\$(?=\d)|(?<=[\w)])\^(?=[\d{(-])")
# An equation or expression as algebra writes it: numbers, one-letter variables and
# coefficients (``3x``, ``2k``), operators and brackets, one space at most between them
# (``3x + 10 = 5(x - 2)``, ``f(2) = 5(2)^3 - 2(2) + 3``, ``20*2k + 50*2k + x*2k =``).
# Read as prose when it holds an equals sign beside arithmetic, or a number multiplying a
# bracket (``3(3x - 2)``, no programming language's syntax). A run cannot start after a
# letter or a dot, so ``foo(a)`` and ``x.y(1)`` stay code, and ``x = 5``, ``a = b ^ c``
# and ``1 == 1`` have no arithmetic beside their ``=``.
_EQUALS = r"(?<![=<>!])=(?![=<>])"
_OPERATOR = r"[-+*/\u00d7\u00f7]"
_MATH_TOKEN = (r"(?:\d+(?:\.\d+)?(?:[A-Za-z](?![A-Za-z_]))?"
               r"|(?<![A-Za-z_\d])[A-Za-z\u2211\u221a\u03c0](?![A-Za-z_\d])"
               rf"|{_OPERATOR}|[()^]|{_EQUALS})")
_MATH_RUN = re.compile(rf"(?<![\w.]){_MATH_TOKEN}(?: ?{_MATH_TOKEN})*")
_NUMBER_BEFORE_BRACKET = r"\d\("
_ARITHMETIC = re.compile(rf"{_EQUALS}[\s\S]*{_OPERATOR}|{_OPERATOR}[\s\S]*{_EQUALS}"
                         rf"|{_NUMBER_BEFORE_BRACKET}")
_DIGIT_BRACKET = re.compile(_NUMBER_BEFORE_BRACKET)
# A fence line (three backticks and a language name) marks a block as code; what the
# block holds is judged on its own symbols.
_FENCE = re.compile(r"(?:^|(?<=\n))```[\w+-]*(?=\n|$)")
# A line indented by two or more spaces or a tab, unless it is a list item or holds no
# ASCII character at all (Japanese or Chinese prose indented as a paragraph).
_INDENTED_LINE = re.compile(
    r"\n(?: {2,}|\t)[ \t]*(?![-*+\u2022] |\d{1,3}[.)] |\s)(?=[^\n]*[!-~])\S")
_NON_SPACE = re.compile(r"\S")
# The most characters a pattern here looks at around a position (a prose bracket's span).
_CONTEXT_CHARS = 130
# How far from a text's edge a prose reading can be changed by the edge (a calculator note).
_EDGE_CHARS = 128


def is_indented(line: str) -> bool:
    """Whether ``line`` starts with two or more spaces or a tab before its text."""
    return line.startswith(("  ", "\t")) and not line.isspace()


_unit_verdicts = RotationVerdicts(64)


def unit_looks_like_code(unit: str) -> bool:
    """Whether a repeating unit is shaped like code, judged around the cycle so that every
    rotation of the unit gets the same answer: each position of the unit is judged once,
    with as much of the cycle before and after it as any pattern here looks at."""
    # Kept per cycle: cycle asks twice for the unit it trips on (its span, then its
    # evidence), and a loop cut again and again (a proxy's retries, a flood that restarts
    # the guard) brings the same cycles back, each time in another rotation (rows of SQL
    # inserts, cut every ~1,900 characters, offered 217 units of 13 cycles, each answer
    # 0.3-0.7 ms of regex work: 0.26 M chars/s). 64 cycles of at most max_period
    # characters: a bounded memory.
    return _unit_verdicts.verdict(unit, _unit_looks_like_code)


def _unit_looks_like_code(unit: str) -> bool:
    if not unit:
        return False
    if "|" not in unit and not any(c.isalnum() for c in unit):
        # Symbols alone (``]{'``, ``*-*``) are a flood or a rule line, not code; blank
        # table rows (``|    |    |``) stay with code and data.
        return False
    side = -(-_CONTEXT_CHARS // len(unit))
    lo = side * len(unit)
    hi = lo + len(unit)
    text = unit * (2 * side + 1)
    if any(lo <= m.start() < hi for m in _INDENTED_LINE.finditer(text)):
        return True
    # As for a block (``looks_like_code``): the prose readings only take symbols away.
    if not _window_symbols_make_code(text, lo, hi, unit):
        return False
    # They are made on a wider tiling and judged away from its edges, so that no reading
    # that reaches the window is changed by where the tiling was cut.
    extra = -(-_EDGE_CHARS // len(unit))
    tiled = unit * (2 * (side + extra) + 1)
    wide = _without_prose_math(tiled, margin=_EDGE_CHARS)
    if wide is tiled:
        return True  # nothing read as prose: the window is the one judged code above
    return _window_symbols_make_code(wide[extra * len(unit) : len(wide) - extra * len(unit)],
                                     lo, hi, unit)


def _window_symbols_make_code(text: str, lo: int, hi: int, unit: str) -> bool:
    """Whether the code symbols that start in ``text[lo:hi]`` (one copy of ``unit``, with
    the cycle around it) make the unit code."""
    symbols = _matches_starting_in(_CODE_SYMBOLS, text, lo, hi)
    if not symbols:
        return False
    pairs = _matches_starting_in(_PROSE_BRACKETS, text, lo, hi)
    return _enough_symbols(symbols - 2 * pairs, unit)


def _matches_starting_in(pattern: re.Pattern[str], text: str, lo: int, hi: int) -> int:
    """The matches of ``pattern`` in ``text`` that start in ``text[lo:hi]``, the search
    begun at ``lo``: a lookbehind still reads what lies before it, ``^`` does not match
    there, and no match of a code symbol (one character) or of a prose bracket (none inside
    another) starts inside one that begins earlier, so they are the whole text's matches
    (the tiling's other copies are not walked as well)."""
    count = 0
    for match in pattern.finditer(text, lo):
        if match.start() >= hi:
            break
        count += 1
    return count


def repeats_its_lines(unit: str) -> bool:
    """Whether a repeating unit is a pool of a few lines said over and over (``OK.``
    ``Output.`` ``Go.``): at least four lines, each said twice on average. Judged on the
    unit's lines as a cycle, so every rotation of it gets the same answer."""
    first = unit.find("\n")
    if first < 0:
        return False
    lines = [line.strip() for line in (unit[first + 1 :] + unit[: first + 1]).split("\n")]
    lines = [line for line in lines if line]
    return len(lines) >= POOL_LINES and 2 * len(set(lines)) <= len(lines)


def is_blank_table(unit: str) -> bool:
    """Whether a repeating unit draws table rows with nothing in them (``|    |    |``,
    ``|--+--|``): rules and bars alone, no letter or digit."""
    return "|" in unit and not any(c.isalnum() for c in unit)


def is_table_row(line: str) -> bool:
    """Whether ``line`` is a markdown table row (``| a | b |``)."""
    row = line.strip()
    return len(row) > 1 and row[0] == "|" and row[-1] == "|"


def looks_like_code(text: str) -> bool:
    """Whether ``text`` is shaped like code or data (see the module docstring).

    Only lines that start inside ``text`` can be indented: a block begins mid-line.
    A repeating unit is judged by ``unit_looks_like_code``.
    """
    if _INDENTED_LINE.search(text):
        return True
    # The prose readings only take code symbols away: text that is prose without them is
    # prose with them, and most text is prose.
    if not _symbols_make_code(text):
        return False
    read = _without_prose_math(text)
    return read is text or _symbols_make_code(read)


def _symbols_make_code(text: str) -> bool:
    symbols = len(_CODE_SYMBOLS.findall(text))
    if not symbols:
        return False
    return _enough_symbols(symbols - 2 * len(_PROSE_BRACKETS.findall(text)), text)


def _without_prose_math(text: str, margin: int = 0) -> str:
    """``text`` with its word-problem arithmetic and algebra read as digits and its code
    fences as blanks (same length, same lines). An algebra run is judged on what of it lies
    ``margin`` or more characters inside ``text``: a cycle tiled round a unit has edges that
    the stream has not, and a run as long as the text must not be judged by where it was cut."""
    algebra = "(" in text or "=" in text
    if "`" in text:
        text = _FENCE.sub(lambda m: " " * len(m.group()), text)
    if "=" in text or "$" in text or "^" in text:
        text = _PROSE_MATH.sub(lambda m: "0" * len(m.group()), text)
    if not algebra or ("=" not in text and _DIGIT_BRACKET.search(text) is None):
        # No stretch of the text holds arithmetic (an equals sign, or a number before a
        # bracket): no run is read as digits, and the text comes back as it is.
        return text
    inside = len(text) - margin

    def algebra_as_digits(match: re.Match[str]) -> str:
        run = match.group()
        judged = text[max(match.start(), margin) : min(match.end(), inside)]
        if len(run) < 5 or not _ARITHMETIC.search(judged):
            return run
        return _as_digits(run)

    return _MATH_RUN.sub(algebra_as_digits, text)


def _as_digits(run: str) -> str:
    """``run`` with every character but spaces read as a digit, save a bracket whose partner
    lies outside it (``17 (0-based)``: that pair is prose, and stays whole)."""
    open_at: list[int] = []
    unmatched: set[int] = set()
    for i, c in enumerate(run):
        if c == "(":
            open_at.append(i)
        elif c == ")":
            if open_at:
                open_at.pop()
            else:
                unmatched.add(i)
    unmatched.update(open_at)
    return "".join(run[i] if i in unmatched or run[i] == " " else "0" for i in range(len(run)))


def _enough_symbols(symbols: int, text: str) -> bool:
    """Whether ``symbols`` code symbols (prose brackets taken out) make ``text`` code."""
    return symbols > 0 and symbols >= CODE_SYMBOL_SHARE * len(_NON_SPACE.findall(text))
