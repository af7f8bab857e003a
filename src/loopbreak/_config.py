"""Configuration: one validated, frozen object; every key optional.

Each section is a frozen dataclass whose fields carry their allowed range and a
one-line reason in ``metadata``; ``__post_init__`` checks every value, so a
``Config`` that exists is valid. Loading from a TOML file and ``LOOPBREAK_*``
environment variables lives at the bottom of this module, at the edge, in this
order (later wins): defaults, file, environment, explicit overrides.

The defaults are the measured ones; the README's configuration table and the
docstrings of the detector modules say where each comes from.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import shlex
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loopbreak._errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

ENV_PREFIX = "LOOPBREAK_"
ENV_CONFIG_FILE = "LOOPBREAK_CONFIG"


def _key(default: Any, doc: str, *, low: float | None = None, high: float | None = None,
         choices: tuple[str, ...] | None = None, off: Any = None) -> Any:
    """A config field: its default, why, and what values it accepts."""
    meta = {"doc": doc, "low": low, "high": high, "choices": choices, "off": off}
    return field(default=default, metadata=meta)


def _scope_key(why: str) -> Any:
    """The ``scope`` key the tool rules past tool-failure share; ``why`` is its measurement."""
    return _key("session", "turn: each user message starts the counts over; session: they carry "
                "over and a user message gives each call one more try. " + why,
                choices=("turn", "session"))


class _Section:
    """Validation shared by every section: type, range and choices of each field."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            _check_value(f"{self._name()}.{f.name}", getattr(self, f.name), f)

    @classmethod
    def _name(cls) -> str:
        return _SECTION_NAMES[cls]


def _describe(f: dataclasses.Field[Any]) -> str:
    """The allowed values of a field, as a person reads them."""
    meta = f.metadata
    if meta["choices"]:
        return "one of " + ", ".join(repr(c) for c in meta["choices"])
    kind = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}[
        type(f.default)
    ]
    if meta["low"] is not None or meta["high"] is not None:
        low = "" if meta["low"] is None else _fmt(meta["low"])
        high = "" if meta["high"] is None else _fmt(meta["high"])
        kind += f" in {low}..{high}"
    if meta["off"] is not None:
        kind += f" ({_fmt(meta['off'])} = off)"
    return kind


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _check_value(key: str, value: Any, f: dataclasses.Field[Any]) -> None:
    expected = type(f.default)
    ok_type = isinstance(value, expected) and not (expected is not bool and isinstance(value, bool))
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        ok_type = True
    if not ok_type or (isinstance(value, float) and not math.isfinite(value)):
        raise ConfigError(f"{key} must be {_describe(f)}, not {value!r}")
    meta = f.metadata
    if meta["choices"] and value not in meta["choices"]:
        raise ConfigError(f"{key} must be {_describe(f)}, not {value!r}")
    if meta["off"] is not None and value == meta["off"]:
        return
    if (meta["low"] is not None and value < meta["low"]) or (
        meta["high"] is not None and value > meta["high"]
    ):
        raise ConfigError(f"{key} must be {_describe(f)}, not {value!r}")


@dataclass(frozen=True)
class BlockRepeatConfig(_Section):
    """block-repeat (reasoning): disjoint blocks that repeat earlier ones."""

    enabled: bool = _key(True, "Run the block-repeat rule on reasoning.")
    block_chars: int = _key(128, "Swept 96-256: 96 and 256 miss a loop, 192 cuts later; 128 cuts "
                                 "earliest with no miss and no clean trip.",
                                 low=16, high=4096)
    min_back: int = _key(3, "Nearest earlier block compared (the seed's 3). Swept 1-4: all "
                            "clean at max_back 32; 1 cuts about 140 characters earlier.",
                         low=1, high=64)
    max_back: int = _key(32, "Farthest earlier block compared; memory is this many blocks. "
                             "Swept: 64 trips clean text, 16 cuts a real bleed 17,000 "
                             "characters later.",
                         low=1, high=256)
    shingle_chars: int = _key(4, "Shingle length of the low-novelty overlap (seed's value).",
                                 low=2, high=16)
    shingle_step: int = _key(2, "Shingles are taken every this many characters (seed's value).",
                                low=1, high=16)
    novelty_overlap: float = _key(0.7, "Jaccard overlap at which a block is not new. Swept with "
                                       "the streak: 0.7/10 trips no clean stream; 0.7/8 and "
                                       "0.6/10 do.",
                                       low=0.05, high=1.0)
    novelty_streak: int = _key(10, "Not-new prose blocks in a row that trip low-novelty (0 = off). "
                                   "12 spares a real Qwen3 trace that weighs the same options "
                                   "in reworded paragraphs, but cuts the seed's 124,070-char "
                                   "bleed 160 characters later.",
                                   low=1, high=1000, off=0)
    novelty_streak_code: int = _key(20, "The same when the streak holds a code-shaped block (0 = "
                                        "off). Swept: 14 trips clean code, 16 is the first clean; "
                                        "20 keeps a margin.",
                                        low=1, high=1000, off=0)
    exact_streak: int = _key(3, "Prose blocks in a row identical to an earlier one that trip "
                                "exact-repeat (0 = off). Swept: 1 trips clean text, 2 is the "
                                "first clean; 3 keeps a margin.",
                                low=1, high=1000, off=0)


@dataclass(frozen=True)
class DegeneracyConfig(_Section):
    """degeneracy: blocks that carry no meaning (symbol and emoji floods)."""

    enabled: bool = _key(True, "Run the degeneracy rule on reasoning.")
    on_text: bool = _key(True, "Also judge the visible answer: symbol floods end real answers "
                               "(measured on three MT-bench sources).")
    block_chars: int = _key(128, "Block size (seed's value).",
                                 low=16, high=4096)
    max_meaning_share: float = _key(0.08, "Gate: letters and digits over non-space at most this, "
                                          "so a block with words is never degenerate (seed's "
                                          "value).",
                                          low=0.0, high=1.0)
    min_ink_share: float = _key(0.25, "Blocks with less non-space than this are layout (blank "
                                      "table rows), not floods. Swept: 0 trips a blank table "
                                      "template, 0.1-0.6 trip nothing clean and miss nothing.",
                                      low=0.0, high=1.0)
    min_noise_share: float = _key(0.65, "noisy: symbols and emoji over non-space at least this "
                                        "(seed's value).",
                                        low=0.0, high=1.0)
    max_variety: float = _key(0.3, "low-variety: distinct characters / min(non-space, "
                                   "variety_window) at most this (seed's value).",
                                   low=0.0, high=10.0)
    variety_window: int = _key(48, "Denominator cap of the variety ratio (seed's value).",
                                   low=1, high=4096)
    run_chars: int = _key(3, "A symbol run counts from this length (seed's value).",
                             low=2, high=4096)
    min_runs: int = _key(3, "run-heavy: at least this many counted runs, or ... (seed's value).",
                            low=1, high=4096)
    long_run_chars: int = _key(24, "... one symbol run at least this long (seed's value).",
                                   low=2, high=4096)
    min_emoji: int = _key(8, "emoji-flood: at least this many emoji ... (seed's value).",
                             low=1, high=4096)
    min_emoji_share: float = _key(0.4, "... making at least this share of non-space (seed's "
                                       "value).",
                                       low=0.0, high=1.0)
    min_evidence: int = _key(2, "Flags besides the gate a degenerate block needs. Swept with the "
                                "streak: 3 misses a flood.",
                                low=1, high=4)
    streak: int = _key(3, "Degenerate blocks in a row that trip. Swept: 2 trips ASCII art and rst "
                          "tables in CPython's stdlib; 3 trips nothing clean (the seed shipped 2).",
                          low=1, high=1000)


@dataclass(frozen=True)
class CycleConfig(_Section):
    """cycle: the tail of a channel repeats with a period."""

    max_period: int = _key(4096, "Longest period looked for; must sit above every measured period "
                                 "(up to 1,396 in real loops), since a cap below a period fails "
                                 "silently. 512 misses 40 real loops; 4096 trips nothing clean.",
                                low=2, high=4096, off=0)
    min_span_reasoning: int = _key(384, "Reasoning tail that must repeat. Swept 256-512: all "
                                        "clean; 448 misses a real stall.",
                                        low=16, high=65536)
    min_span_text: int = _key(256, "Visible-text tail that must repeat. Swept: 192 trips a clean "
                                   "stdlib file, 256 is the first clean.",
                                   low=16, high=65536)
    min_span_code: int = _key(1536, "Tail that must repeat when the unit is shaped like code or "
                                    "data. Swept: 1024 trips stdlib code (periodic stretches "
                                    "reach 1,030), 1280 is the first clean.",
                                    low=16, high=65536)
    min_distinct: int = _key(2, "A unit with fewer distinct characters (====, ----) does not "
                                "count.",
                                low=1, high=64)
    past_two_copies: int = _key(128, "Characters of a third copy a unit must show besides two "
                                     "whole copies: an answer prints a heading or an item "
                                     "twice and moves on, a trace pastes a passage twice.",
                                low=0, high=65536)
    three_copies_reasoning: int = _key(192, "In reasoning, a prose unit (one with a letter, "
                                            "not code) whose three whole copies fit in "
                                            "min_span_reasoning is cut after three copies, "
                                            "once this much repeats: a short unit then lands "
                                            "within two copies and 128 characters of its "
                                            "start. 0 turns it off. Swept 0-256: 128 trips 3 "
                                            "clean streams, 160 is the first clean; 192 "
                                            "keeps a margin.",
                                       low=0, high=65536)
    two_copies_reasoning: int = _key(192, "In reasoning, units up to this long are cut after two "
                                          "whole copies, as the seed's DeepSeek loops were; "
                                          "0 asks the third copy of all. 208 cuts a Qwen3 "
                                          "answer that restates two lines once.",
                                     low=0, high=4096)
    two_copies_pool_reasoning: int = _key(512, "... and units up to this long that are a pool of "
                                               "their own lines (OK. / Output. / Go. over and "
                                               "over: the seed's 235-character DeepSeek loop).",
                                          low=0, high=4096)
    blank_table_copies: int = _key(12, "Copies after which blank table rows (|   |   |, "
                                       "no letter or digit) are cut, when fewer than "
                                       "min_span_code: a template leaves a few rows blank, "
                                       "a loop draws hundreds. Swept 4-16: 8 and fewer trip "
                                       "a template with 8 blank rows, 12 is the first clean. "
                                       "0 leaves them to min_span_code.",
                                   low=0, high=65536)
    code_copies: int = _key(64, "Copies after which any other unit shaped like code is cut, "
                                "when fewer than min_span_code: a model draws `<td></td>` or "
                                "`r+:9` until its budget ends, code repeats a short unit a few "
                                "dozen times. Swept 8-96: 32 trips a stdlib codec table, 48 is "
                                "the first clean; 64 keeps a margin. 0 leaves them to "
                                "min_span_code.",
                            low=0, high=65536)
    one_line_code_copies: int = _key(4, "Copies after which a code-shaped unit of 16 or more "
                                        "characters with no line break is cut, when fewer "
                                        "than the above: code repeats whole lines, a model "
                                        "flattens a snippet onto one line and says it over "
                                        "(`return sorted(arr)[1:] # ...`). Swept 0-16: even "
                                        "2 (read as prose) trips nothing clean, 4 cuts as "
                                        "many loops, 8 misses 3 of them. 0 leaves them to "
                                        "code_copies.",
                                     low=0, high=65536)


@dataclass(frozen=True)
class CounterCycleConfig(_Section):
    """counter-cycle: the tail repeats once every digit reads as 0 (periods and spans are
    cycle's)."""

    enabled: bool = _key(True, "Cut loops whose only change is a counter (14. Pluto, 15. Pluto, "
                               "...), which cycle cannot see.")
    min_word_share: float = _key(0.25, "Share of the unit's characters in words of letters; "
                                       "spares data whose numbers alone change (base64, number "
                                       "tables). Swept: 0 trips 4 clean stdlib files, "
                                       "0.1-0.5 none and cut the same loops, 0.75 misses 2.",
                                 low=0.0, high=1.0)
    words_per_number: float = _key(1.0, "A unit may hold max(2, words / this) numbers: a counted "
                                        "template changes one number, data rows and logs "
                                        "change many.",
                                   low=0.5, high=1000.0)
    max_period: int = _key(1024, "Longest unit (as read) looked for; cycle's cap applies too. "
                                 "Counted templates measure up to 480 characters (a numbered "
                                 "exam question re-asked).",
                           low=2, high=4096)
    min_copies: int = _key(3, "Whole copies of the unit (as read) the tail must hold, besides "
                              "cycle's third-copy start: a short enumeration (dice totals 3 to 6) "
                              "repeats its template three or four times and stops.",
                           low=2, high=64)
    min_span_reasoning: int = _key(768, "Reasoning tail that must repeat once numbers read as 0.",
                                   low=16, high=65536)
    min_span_text: int = _key(256, "Visible-text tail that must repeat once numbers read as 0.",
                              low=16, high=65536)


@dataclass(frozen=True)
class LinesConfig(_Section):
    """lines: a phrase pool, a loop with no period because its lines are reshuffled."""

    min_mass: int = _key(1024, "Characters of repeated lines that trip (0 = off). Swept 512-2048 "
                               "at window 8192: all clean; 1024 halves the seed's 2048 cut.",
                               low=64, high=1 << 24, off=0)
    min_coverage: float = _key(0.6, "Share of counted characters in repeated lines. Swept "
                                    "0.5-0.8: 0.8 misses a bleed.",
                                    low=0.0, high=1.0)
    min_concentration: float = _key(4.0, "Sightings per distinct line; spares reasoning that "
                                         "quotes code twice. Swept: 2 trips clean text, 3 is the "
                                         "first clean.",
                                         low=1.0, high=1000.0)
    min_line_chars: int = _key(2, "Shorter stripped lines are not counted: }, ); and the like "
                                  "(seed's value).",
                                  low=1, high=1024)
    count_indented: bool = _key(False, "Count indented lines; off because code repeats its lines "
                                       "legitimately and no real pool line is indented.")
    window_chars: int = _key(8192, "Counted characters the rule looks back over. Swept: 4096 "
                                   "trips clean text, 8192 is the first clean; larger cuts later.",
                                   low=256, high=1 << 24)
    max_line_chars: int = _key(1024, "A longer line counts as unique mass and is not stored "
                                     "(memory bound).",
                                     low=16, high=1 << 20)


@dataclass(frozen=True)
class StaleWordsConfig(_Section):
    """stale-words: the last words repeat word runs said shortly before (long periods,
    pools, templates), whatever the period. Off by default: see its module."""

    enabled: bool = _key(False, "Run stale-words on the visible answer. Off: it trips 6 to 30 "
                                "of 15,412 clean text streams at every setting swept "
                                "(2-copy repeats in CJK answers, HTML tables, code).")
    on_reasoning: bool = _key(False, "Also judge reasoning: honest re-verification reuses its "
                                     "own phrases as much as a paraphrase loop does.")
    ngram: int = _key(8, "Words in a run compared with earlier runs (a CJK character is a "
                         "word).",
                      low=1, high=64)
    window_words: int = _key(128, "Runs judged together: the share of stale ones among the last "
                                  "this many trips the rule.",
                             low=8, high=65536)
    min_stale_share: float = _key(1.0, "Share of the window's runs that occurred before within "
                                       "the horizon.",
                                  low=0.0, high=1.0)
    horizon_words: int = _key(1024, "How many words back an earlier run counts.",
                              low=8, high=1 << 20)


@dataclass(frozen=True)
class CharRunConfig(_Section):
    """char-run: one character over and over (floods of a letter, digit or space)."""

    max_run: int = _key(256, "Longest run of one character (0 = off). Clean runs top out at "
                             "200 ('a' * 200 spelled out in CPython's tests).",
                        low=16, high=1 << 20, off=0)
    max_layout_run: int = _key(512, "The same for spaces, tabs and rule characters (- = _ * "
                                    "...): a padded markdown table holds runs of 379.",
                               low=16, high=1 << 20)


@dataclass(frozen=True)
class CharFloodConfig(_Section):
    """char-flood: one character fills block after block, its runs broken by a little else."""

    enabled: bool = _key(True, "Cut floods of one letter, digit or symbol broken by leaked "
                               "tokens or line breaks (るる<unk>るる, a column of 1s).")
    block_chars: int = _key(64, "Block size.", low=8, high=4096)
    min_share: float = _key(0.85, "Share of a block's non-space one character must make.",
                            low=0.5, high=1.0)
    streak: int = _key(4, "Filled blocks in a row, the same character, that trip.",
                       low=1, high=1000)


@dataclass(frozen=True)
class ControlTokensConfig(_Section):
    """control-tokens: chat-template control tokens (<|im_start|>, <unk>) written as text."""

    min_tokens: int = _key(16, "Control tokens within the window that trip (0 = off); a "
                               "three-turn ChatML example quotes six. Swept: 8 trips web text "
                               "with leaked <unk>, 12 is the first clean.",
                           low=2, high=4096, off=0)
    window_chars: int = _key(384, "Characters the tokens are counted over.",
                             low=16, high=1 << 20)


@dataclass(frozen=True)
class ProgressionConfig(_Section):
    """progression: a run of numbers counting on with one step and one separator."""

    min_terms: int = _key(128, "Terms of one arithmetic progression that trip (0 = off). Real "
                               "clean text counts to 33 at most (a reasoning trace listing "
                               "ages 30..62); a user may ask for 1 to 100.",
                          low=3, high=1 << 20, off=0)
    max_separator: int = _key(16, "Longest text between two terms; longer (words in between) "
                                  "ends the run.",
                              low=0, high=1024)


@dataclass(frozen=True)
class IdenticalChunksConfig(_Section):
    """identical-chunks (text): the same visible delta over and over."""

    max_repeats: int = _key(60, "Visible deltas in a row equal after stripping that trip (0 = "
                                "off). Seed's value; 10-100 all trip nothing clean.",
                                low=2, high=1 << 20, off=0)


@dataclass(frozen=True)
class LimitsConfig(_Section):
    """Hard caps per call."""

    max_reasoning_chars: int = _key(120_000, "Reasoning characters one call may produce (0 = "
                                             "off): a budget, 3.4x the longest productive call in "
                                             "the corpus (35,441).",
                                             low=1, high=1 << 40, off=0)


@dataclass(frozen=True)
class JudgingConfig(_Section):
    """How often the single-call rules look at a stream."""

    batch_chars: int = _key(64, "Deltas are judged together once this many characters wait (and "
                                "when the channel changes, a tool call starts or the call ends). "
                                "Every rule still trips at the same character; a cut lands at "
                                "most this many characters minus one later. 64: 4 to 7 times the "
                                "speed of judging every token-sized delta (bench), about 16 "
                                "tokens of delay at most; 128 and 256 gain 10-20% more. 1 = "
                                "every delta.",
                        low=1, high=1 << 20)
    compiled: str = _key("auto", "auto: the parts with a compiled kernel (block-repeat, "
                                 "cycle's and counter-cycle's listing of a flood's shifts, the "
                                 "stall rule's 4-gram sets, a tool result's words, the letters "
                                 "of the sample the notices' language follows) run it "
                                 "where numba is installed "
                                 "(pip install loopbreak[fast]): "
                                 "loaded when the proxy or an in-engine processor starts, else "
                                 "once a process has judged 1,000,000 characters (loading "
                                 "costs ~0.6 s); same decisions, tested against the "
                                 "pure-Python rules. off: pure Python (a tool result's words "
                                 "and a sample's letters, the same either way, are read "
                                 "compiled wherever the process has loaded the kernels).",
                         choices=("auto", "off"))


@dataclass(frozen=True)
class StallConfig(_Section):
    """stall: calls that think without doing, across calls of one session."""

    min_reasoning_chars: int = _key(2048, "Calls with less reasoning are not judged (seed's "
                                          "value).",
                                          low=0, high=1 << 30)
    similarity: float = _key(0.8, "4-gram containment in the previous judged call that makes a "
                                  "call restated (0 = off; seed's value).",
                                  low=0.01, high=1.0, off=0.0)
    max_stalled_calls: int = _key(3, "Stalled calls in a row that fire a reaction (seed's value).",
                                     low=1, high=1000)
    reaction: str = _key("steer", "What a fire does: warn (report only), steer (a notice the "
                                  "model reads), cancel (end the turn).",
                                  choices=("warn", "steer", "cancel"))
    max_fires: int = _key(4, "Fires per session at most; each fire resets the count (seed's "
                             "value).",
                             low=0, high=1000)
    cancel_cause: str = _key("thinking-loop", "Cause given when the reaction is cancel.")


@dataclass(frozen=True)
class ToolFailureConfig(_Section):
    """tool-failure: the same failing tool call re-sent within one turn."""

    enabled: bool = _key(True, "Run the tool-failure breaker.")
    steer_from: int = _key(2, "From this failure of the same signature on, the result carries "
                              "guidance (SPEC). On the agent runs: 3 catches 1 fewer and steers "
                              "4 healthy runs instead of 17.",
                              low=1, high=1000)
    deny_after: int = _key(3, "Failures of the same key after which the identical call is denied "
                              "before dispatch (SPEC). On the agent runs: 2 denies a healthy run; "
                              "4 catches 3 fewer.",
                              low=1, high=1000)
    guidance: str = _key("prefix", "Whether guidance prefixes or replaces the failing result.",
                                   choices=("prefix", "replace"))
    error_chars: int = _key(160, "Normalised error text kept in a failure signature.",
                                 low=1, high=1 << 16)
    max_arg_depth: int = _key(8, "Nesting kept in an argument key (memory bound).",
                                 low=1, high=64)
    max_arg_chars: int = _key(4096, "Characters kept of an argument key (memory bound).",
                                    low=64, high=1 << 20)


# Measured with `loopbreak calibrate --agents` on 571 real agent runs (268 stuck, 303
# healthy, 11 sources; agent-corpus/): "caught" = steered by the 3rd round of the loop and
# stopped by the 4th, read from result text alone; no setting below denies a healthy run
# unless it says so.


@dataclass(frozen=True)
class NoProgressConfig(_Section):
    """no-progress: the same tool call returning the same result, again and again, whether
    or not the result reads as a failure."""

    enabled: bool = _key(True, "Run the no-progress rule.")
    steer_from: int = _key(3, "From this identical result on, the result carries guidance. 2 "
                              "catches no more and steers 48 healthy runs (3: 17).",
                              low=1, high=1000)
    deny_after: int = _key(3, "Identical results after which the identical call is denied "
                              "before dispatch. 258 of 268 caught; 2 catches 2 more but denies "
                              "the 3rd identical call; 4 catches 75 fewer.", low=1, high=1000)
    waiting_deny_after: int = _key(8, "The same, when the result reports a state still in "
                                      "progress (status: running, still pending, not ready yet): "
                                      "polling is how such a state is watched. No real run "
                                      "polls; 8 is a policy.", low=1, high=1000)
    scope: str = _scope_key("Session: 3 more caught (agents retry across the user's replies).")


@dataclass(frozen=True)
class AlternationConfig(_Section):
    """alternation: two or three calls taking turns, each returning what it returned before."""

    enabled: bool = _key(True, "Run the alternation rule.")
    max_period: int = _key(3, "Longest cycle of distinct calls watched (2 = A-B-A-B only): 2 "
                              "catches 11 fewer; 4 and 5 no more.", low=2, high=8)
    cycles: int = _key(3, "Full cycles with unchanged results that steer; the call that would "
                          "start the next cycle is denied. 2 denies a healthy run.",
                          low=2, high=100)
    scope: str = _scope_key("Either catches 258.")


@dataclass(frozen=True)
class RepeatedErrorConfig(_Section):
    """repeated-error: different tool calls failing with the same error."""

    enabled: bool = _key(True, "Run the repeated-error rule.")
    steer_from: int = _key(3, "Failures with the same error (from at least two different calls) "
                              "from which the result carries guidance. 4 catches 55 fewer.",
                              low=2, high=1000)
    deny_after: int = _key(3, "Such failures after which the tools that gave them (every tool, "
                              "when the error came from two tools or in a row) are denied until "
                              "one of them succeeds. 4 catches 63 fewer.", low=2, high=1000)
    error_chars: int = _key(160, "Normalised error text kept in an error signature.",
                                 low=1, high=1 << 16)
    scope: str = _scope_key("Session: 1 more caught.")


@dataclass(frozen=True)
class MonologueConfig(_Section):
    """monologue: the model's visible answer said again, call after call, with no tool call
    and no new word from the user. No real run in the corpus is one: the values are a policy
    that meets the agent bar (steered by the 3rd answer, stopped by the 4th)."""

    enabled: bool = _key(True, "Run the monologue rule.")
    similarity: float = _key(0.8, "Word 3-gram Jaccard similarity to the previous answer that "
                                  "makes an answer a repeat.", low=0.01, high=1.0)
    steer_from: int = _key(2, "Answers in the run (the first and its repeats) that steer: a "
                              "note the model reads on its next call.", low=2, high=1000)
    stop_after: int = _key(3, "Answers in the run after which the turn is ended instead of "
                              "asking the model again.", low=2, high=1000)
    min_chars: int = _key(1, "Answers shorter than this (stripped) are not judged.",
                             low=1, high=1 << 20)


@dataclass(frozen=True)
class RecoveryConfig(_Section):
    """What adapters do after a trip."""

    on_trip: str = _key("retry", "retry: re-ask once per turn with thinking off; stop: lawful "
                                 "finish with a notice; error: end with an error.",
                                 choices=("retry", "stop", "error"))
    retries_per_turn: int = _key(1, "Retries without thinking per turn.",
                                    low=0, high=100)
    max_request_retries: int = _key(2, "Re-sends of a response that never arrived intact.",
                                       low=0, high=10)
    notice: bool = _key(True, "Tell the model what was cut and to carry on.")
    language: str = _key("auto", "Language of model-facing notices; auto follows the conversation.",
                                 choices=("auto", "en", "zh"))
    dialect: str = _key("auto", "How a retry turns thinking off: auto reads the request (thinking, "
                        "chat_template_kwargs, think, reasoning_effort), else asks the upstream.",
                        choices=("auto", "deepseek", "anthropic", "vllm", "ollama", "openai",
                                 "none"))
    retry_effort: str = _key("low", "reasoning_effort a retry asks of an OpenAI-style upstream.",
                             choices=("minimal", "low", "none"))


@dataclass(frozen=True)
class ProxyConfig(_Section):
    """How ``loopbreak proxy`` serves and talks to the upstream: a section of the same file,
    kept apart from :class:`Config` (the engine and the other faces never read it)."""

    max_body_bytes: int = _key(32 << 20, "Largest request body accepted (413 beyond).",
                               low=1024, high=1 << 31)
    max_response_bytes: int = _key(64 << 20, "Largest whole (non-streamed) upstream answer "
                                   "read (502 beyond): the proxy holds it to judge it.",
                                   low=1024, high=1 << 31)
    connect_timeout: float = _key(10.0, "Seconds to connect to the upstream (502 beyond).",
                                  low=0.1, high=600.0)
    idle_timeout: float = _key(300.0, "Seconds the upstream may send nothing (504, or a lawful "
                               "error mid-stream).", low=1.0, high=86400.0)
    reload_seconds: float = _key(2.0, "How often the config file is checked for changes; a change "
                                 "applies once it has held still for one check.",
                                 low=0.1, high=3600.0)
    replay_checkpoint_chars: int = _key(1 << 26, "Characters of history each process keeps "
                                        "to replay a session's next request from "
                                        "where the last one's replay left off (0 = off: every "
                                        "request replayed from its first message, to the same "
                                        "decisions). 64 M holds about ten 800-call sessions; "
                                        "a resumed 800-call replay takes 2-3.5 ms, one from the "
                                        "start 8-11 (bench --adversarial).",
                                        low=1 << 16, high=1 << 34, off=0)


@dataclass(frozen=True)
class Config:
    """The whole configuration. Every section and key is optional."""

    block_repeat: BlockRepeatConfig = field(default_factory=BlockRepeatConfig)
    degeneracy: DegeneracyConfig = field(default_factory=DegeneracyConfig)
    cycle: CycleConfig = field(default_factory=CycleConfig)
    counter_cycle: CounterCycleConfig = field(default_factory=CounterCycleConfig)
    lines: LinesConfig = field(default_factory=LinesConfig)
    stale_words: StaleWordsConfig = field(default_factory=StaleWordsConfig)
    char_run: CharRunConfig = field(default_factory=CharRunConfig)
    char_flood: CharFloodConfig = field(default_factory=CharFloodConfig)
    progression: ProgressionConfig = field(default_factory=ProgressionConfig)
    control_tokens: ControlTokensConfig = field(default_factory=ControlTokensConfig)
    identical_chunks: IdenticalChunksConfig = field(default_factory=IdenticalChunksConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    judging: JudgingConfig = field(default_factory=JudgingConfig)
    stall: StallConfig = field(default_factory=StallConfig)
    tool_failure: ToolFailureConfig = field(default_factory=ToolFailureConfig)
    no_progress: NoProgressConfig = field(default_factory=NoProgressConfig)
    alternation: AlternationConfig = field(default_factory=AlternationConfig)
    repeated_error: RepeatedErrorConfig = field(default_factory=RepeatedErrorConfig)
    monologue: MonologueConfig = field(default_factory=MonologueConfig)
    recovery: RecoveryConfig = field(default_factory=RecoveryConfig)

    def __post_init__(self) -> None:
        br = self.block_repeat
        if br.min_back > br.max_back:
            raise ConfigError(
                f"block_repeat.min_back must be <= block_repeat.max_back ({br.max_back}), "
                f"not {br.min_back}"
            )

    def replace(self, **changes: Any) -> Config:
        """A copy with dotted keys changed: ``config.replace(**{"cycle.max_period": 0})``."""
        for key in changes:
            if _moved(key).startswith("proxy."):
                raise ConfigError(f"{key} is a setting of the proxy, not of the engine: pass "
                                  f"ProxyConfig({key.split('.', 1)[1]}=...) to the proxy")
        return _build(self, {k: (v, "override") for k, v in changes.items()})[0]

    def as_dict(self) -> dict[str, dict[str, Any]]:
        """Every key and value, by section."""
        return {
            name: {f.name: getattr(getattr(self, name), f.name) for f in dataclasses.fields(cls)}
            for name, cls in _SECTIONS.items() if name != "proxy"
        }


_SECTIONS: dict[str, type[Any]] = {
    **{f.name: f.type if isinstance(f.type, type) else globals()[str(f.type)]
       for f in dataclasses.fields(Config)},
    "proxy": ProxyConfig,  # the same file's; loaded beside the Config, not inside it
}
# Keys that moved to another section: still read from files, variables and overrides.
_MOVED_KEYS = {"proxy.dialect": "recovery.dialect", "proxy.retry_effort": "recovery.retry_effort"}


def _moved(key: str) -> str:
    return _MOVED_KEYS.get(key, key)
_SECTION_NAMES: dict[type[Any], str] = {cls: name for name, cls in _SECTIONS.items()}


@dataclass(frozen=True)
class KeyInfo:
    """One configuration key as ``loopbreak config show`` prints it."""

    key: str
    value: Any
    default: Any
    source: str
    allowed: str
    doc: str


def iter_keys() -> Iterator[tuple[str, dataclasses.Field[Any]]]:
    """Every dotted key with its field, in declaration order."""
    for name, cls in _SECTIONS.items():
        for f in dataclasses.fields(cls):
            yield f"{name}.{f.name}", f


_FIELDS: dict[str, dataclasses.Field[Any]] = dict(iter_keys())


def _unknown(key: str, where: str) -> ConfigError:
    close = difflib.get_close_matches(key, list(_FIELDS), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return ConfigError(f"unknown key {key!r} in {where}{hint}")


def _build(base: Config, values: Mapping[str, tuple[Any, str]],
           proxy: ProxyConfig | None = None) -> tuple[Config, dict[str, str], ProxyConfig]:
    """Apply dotted-key values to ``base`` (and ``proxy.*`` ones to ``proxy``); return the
    config, each key's source, and the proxy's settings."""
    per_section: dict[str, dict[str, Any]] = {}
    sources: dict[str, str] = {}
    for raw_key, (value, source) in values.items():
        key = _moved(raw_key)
        if key not in _FIELDS:
            raise _unknown(raw_key, source)
        section, name = key.split(".", 1)
        per_section.setdefault(section, {})[name] = value
        sources[key] = source
    try:
        proxy_changes = per_section.pop("proxy", {})
        proxy = dataclasses.replace(proxy or ProxyConfig(), **proxy_changes)
        sections = {
            name: dataclasses.replace(getattr(base, name), **changes)
            for name, changes in per_section.items()
        }
        return dataclasses.replace(base, **sections), sources, proxy
    except ConfigError as exc:
        key = str(exc).split(" ", 1)[0]
        if key in sources:
            raise ConfigError(f"{exc} (from {sources[key]})") from None
        raise


def _parse_env(key: str, raw: str, var: str) -> Any:
    f = _FIELDS[key]
    default: Any = f.default
    kind = type(default)
    text = raw.strip()
    try:
        if kind is bool:
            lowered = text.lower()
            if lowered in ("1", "true", "yes", "on"):
                return True
            if lowered in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if kind is int:
            return int(text.replace("_", ""))
        if kind is float:
            return float(text)
    except ValueError:
        raise ConfigError(f"{key} must be {_describe(f)}, not {raw!r} (from {var})") from None
    return raw


def env_var(key: str) -> str:
    """The environment variable that sets a dotted key: ``cycle.max_period`` ->
    ``LOOPBREAK_CYCLE__MAX_PERIOD``."""
    section, name = key.split(".", 1)
    return f"{ENV_PREFIX}{section.upper()}__{name.upper()}"


def _flatten_toml(data: Mapping[str, Any], where: str) -> dict[str, tuple[Any, str]]:
    values: dict[str, tuple[Any, str]] = {}
    for section, body in data.items():
        if section not in _SECTIONS:
            raise _unknown(section, where)
        if not isinstance(body, Mapping):
            raise ConfigError(f"[{section}] in {where} must be a table of keys, not {body!r}")
        for name, value in body.items():
            values[f"{section}.{name}"] = (value, where)
    return values


@dataclass(frozen=True)
class LoadedConfig:
    """A configuration with where each key's value came from."""

    config: Config
    sources: Mapping[str, str]
    path: Path | None
    proxy: ProxyConfig = field(default_factory=ProxyConfig)
    """The file's ``[proxy]`` section: the proxy's own settings."""

    def keys(self) -> list[KeyInfo]:
        """Every key with value, default, source and allowed values."""
        out = []
        for key, f in iter_keys():
            section, name = key.split(".", 1)
            holder = self.proxy if section == "proxy" else getattr(self.config, section)
            out.append(KeyInfo(
                key=key,
                value=getattr(holder, name),
                default=f.default,
                source=self.sources.get(key, "default"),
                allowed=_describe(f),
                doc=f.metadata["doc"],
            ))
        return out


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    content: bytes | None = None,
) -> LoadedConfig:
    """Defaults, then the TOML file, then ``LOOPBREAK_*`` variables, then ``overrides``.

    ``path`` defaults to ``$LOOPBREAK_CONFIG`` when set; a named file that is
    missing is an error, as is any unknown key or bad value (one line, naming the
    key, what it accepts and where the value came from). ``content``, when given, is the
    file's bytes already read (a reload judges exactly the bytes it checked).
    """
    environ = os.environ if env is None else env
    values: dict[str, tuple[Any, str]] = {}
    file_path: Path | None = None
    named_by = ""
    if path is None and environ.get(ENV_CONFIG_FILE):
        path = environ[ENV_CONFIG_FILE]
        named_by = f"named by ${ENV_CONFIG_FILE}; "
    if path is not None:
        file_path = Path(path)
        try:
            raw = file_path.read_bytes() if content is None else content
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {file_path} ({named_by}`loopbreak config "
                              f"init {shlex.quote(str(file_path))}` writes one)") from None
        except OSError as exc:
            raise ConfigError(f"cannot read config file {file_path}: {exc.strerror}") from None
        try:
            data = tomllib.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{file_path}: not UTF-8 text (byte {exc.start})") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{file_path}: invalid TOML: {exc}") from None
        values.update(_flatten_toml(data, str(file_path)))
    for var, raw_value in environ.items():
        if not var.startswith(ENV_PREFIX) or var == ENV_CONFIG_FILE or "__" not in var:
            continue
        section, _, name = var[len(ENV_PREFIX):].partition("__")
        key = _moved(f"{section.lower()}.{name.lower()}")
        if key not in _FIELDS:
            raise _unknown(key, var)
        values[key] = (_parse_env(key, raw_value, var), var)
    for key, value in (overrides or {}).items():
        values[key] = (value, "override")
    config, sources, proxy = _build(Config(), values)
    return LoadedConfig(config=config, sources=sources, path=file_path, proxy=proxy)
