"""degeneracy: blocks that no longer carry meaning (symbol and emoji floods).

Catches ``*** *** ***`` walls, one endless ``*`` run, rotating or all-distinct
emoji floods and CJK punctuation soup: shapes that need not repeat (200
distinct emoji cycled with a stride co-prime to the block never give two equal
blocks, so block-repeat is blind to them by construction).

Each block is classed character by character (space, emoji, meaning, symbol;
see ``charclass``). The gate: meaning over non-space at most
``max_meaning_share``. A block with real words can never be degenerate, which
excludes markdown tables, code, JSON and ``====`` rules with prose around them
by construction. A block whose non-space characters are fewer than
``min_ink_share`` of it is layout (blank table rows, aligned columns), not a
flood, and is not judged either. Behind the gates the evidence flags vote:

* noisy: symbols + emoji over non-space >= ``min_noise_share``;
* low-variety: distinct characters / min(non-space, ``variety_window``) <= ``max_variety``;
* run-heavy: a symbol run >= ``long_run_chars``, or >= ``min_runs`` runs of >= ``run_chars``;
* emoji-flood: >= ``min_emoji`` emoji making >= ``min_emoji_share`` of non-space.

A block is degenerate with the gate and >= ``min_evidence`` flags;
``streak`` degenerate blocks in a row trip, named emoji-flood (the emoji flag is
up), symbol-flood (symbols alone are noisy or run-heavy) or degenerate-output.
A block drawn only with what tables and rules are made of (``-``, ``|``, ``:``,
``=``, ``+``, ``_``) is left to ``char-run``: a real answer pads a table border
to 379 dashes. The rule judges the visible answer too (``on_text``): symbol
floods end real answers of chat models (``+$+$+$``, ``#::#::``).
Known limits: pure-symbol ASCII art without labels can trip (raise ``streak``);
a wall that is 95% symbols and 5% words passes the gate by design.

Measured 2026-12-01 (``loopbreak calibrate --only degeneracy``; 3,412 clean
streams): a streak of 2 trips ASCII-art boards and verbose regexes in CPython's
standard library, 3 trips nothing clean; 3 flags miss the emoji flood; without
the layout gate a blank table template trips.
"""

from __future__ import annotations

import re
from functools import lru_cache

from loopbreak._config import DegeneracyConfig
from loopbreak._engine.blocks import BlockCutter
from loopbreak._engine.charclass import (
    EMOJI,
    MEANING,
    SPACE,
    SURE_MEANING_RUN,
    SYMBOL,
    class_string,
)
from loopbreak._engine.trip import Channel, Trip

# A run of characters classed as space, in a block's class string.
_SPACE_RUN = re.compile(f"{SPACE}+")
# What markdown tables and rules are drawn with.
_RULE_DRAWING = " \t\n-|:=+_"

EMOJI_FLOOD = "emoji-flood"
SYMBOL_FLOOD = "symbol-flood"
DEGENERATE_OUTPUT = "degenerate-output"


@lru_cache(maxsize=16)
def _symbol_run_of(chars: int) -> re.Pattern[str]:
    # Compiled once per length, not per detector (see char_run's _run_of).
    return re.compile(f"{SYMBOL}{{{chars},}}")


class DegeneracyDetector:
    """The degeneracy rule over disjoint blocks of one channel."""

    def __init__(self, config: DegeneracyConfig | None = None,
                 channel: Channel = "reasoning") -> None:
        self._config = config or DegeneracyConfig()
        self._channel: Channel = channel
        self._cutter = BlockCutter(self._config.block_chars)
        self._run = 0
        self._settle_quiet()
        self._symbol_run = _symbol_run_of(self._config.run_chars)

    @property
    def consumed(self) -> int:
        return self._cutter.consumed

    def reset(self) -> None:
        self._cutter.reset()
        self._run = 0
        self._settle_quiet()

    def feed(self, delta: str) -> Trip | None:
        streak = self._config.streak
        blocks = self._cutter.push(delta)
        # Blocks are judged out of order, none twice: first the block a streak would first
        # complete at, then the ones before it only while they are degenerate. Clean text
        # costs a block a streak instead of every block; the run and the trip are the ones
        # judging them in order gives (a block's verdict does not depend on whether its
        # evidence is asked for).
        judge = self._judge
        done = 0  # blocks whose run is known: self._run after them
        while done < len(blocks):
            target = done + streak - self._run
            probe = min(target, len(blocks))
            # Only the block that can complete a streak reports its evidence: the others
            # need their verdict alone (an emoji flood's variety, a set of astral
            # characters, was about half of judging its block).
            evidence = judge(blocks[probe - 1][0], probe == target)
            if evidence is None:
                self._run = 0
                done = probe
                continue
            start = probe - 1
            while start > done and judge(blocks[start - 1][0], False) is not None:
                start -= 1
            self._run = self._run + probe - done if start == done else probe - start
            done = probe
            if self._run >= streak:
                rule = str(evidence.pop("rule"))
                evidence["streak"] = self._run
                return Trip(rule, self._channel, self.consumed, blocks[probe - 1][1], evidence)
        self._settle_quiet()
        return None

    def _settle_quiet(self) -> None:
        # A trip needs the streak's missing blocks.
        self.quiet_through = self._cutter.quiet_through(self._config.streak - self._run)

    def judge_block(self, block: str) -> dict[str, object] | None:
        """The evidence that makes ``block`` degenerate, or ``None`` if it is not."""
        return self._judge(block, True)

    def _judge(self, block: str, evidence: bool) -> dict[str, object] | None:
        """:meth:`judge_block`; without ``evidence`` a degenerate block gets an empty dict, and
        the flags are read only until they decide."""
        cfg = self._config
        if not block.isascii():
            # Classing a character outside ASCII is a dict lookup: a block with more sure
            # letters (ASCII, CJK, kana, Hangul) than the meaning gate below allows is turned
            # away before, as that gate would turn it away (every block of CJK prose).
            sure = sum(map(len, SURE_MEANING_RUN.findall(block)))
            if sure > cfg.max_meaning_share * len(block):
                return None
        classes = class_string(block)
        nonspace = len(classes) - classes.count(SPACE)
        if nonspace == 0 or nonspace < cfg.min_ink_share * len(classes):
            return None
        if not block.strip(_RULE_DRAWING):
            # A table border or a rule, however wide: char-run judges how long it runs.
            return None
        meaning = classes.count(MEANING)
        if meaning > cfg.max_meaning_share * nonspace:
            return None
        emoji = classes.count(EMOJI)
        symbols = classes.count(SYMBOL)
        noisy = symbols + emoji >= cfg.min_noise_share * nonspace
        emoji_flood = emoji >= cfg.min_emoji and emoji >= cfg.min_emoji_share * nonspace
        flags_up = noisy + emoji_flood
        if not evidence and flags_up >= cfg.min_evidence:
            return {}
        runs = [len(m) for m in self._symbol_run.findall(classes)]
        longest = max(runs, default=0)
        run_heavy = longest >= cfg.long_run_chars or len(runs) >= cfg.min_runs
        flags_up += run_heavy
        if flags_up + 1 < cfg.min_evidence:
            return None  # not even low variety would make it degenerate
        if not evidence and flags_up >= cfg.min_evidence:
            return {}
        # A character's class does not depend on where it stands: the distinct characters
        # less those found in the runs classed as space (a flood block is 128 characters,
        # few of them spaces; half the cost of classing each character in Python).
        visible = set(block)
        if nonspace < len(classes):
            visible.difference_update(*[block[m.start() : m.end()]
                                        for m in _SPACE_RUN.finditer(classes)])
        variety = len(visible) / min(nonspace, cfg.variety_window)
        low_variety = variety <= cfg.max_variety
        if flags_up + low_variety < cfg.min_evidence:
            return None
        if not evidence:
            return {}
        flags = [flag for flag, up in (("noisy", noisy), ("low-variety", low_variety),
                                       ("run-heavy", run_heavy), ("emoji-flood", emoji_flood))
                 if up]
        if emoji_flood:
            rule = EMOJI_FLOOD
        elif symbols >= cfg.min_noise_share * nonspace or "run-heavy" in flags:
            rule = SYMBOL_FLOOD
        else:
            rule = DEGENERATE_OUTPUT
        return {
            "rule": rule,
            "flags": flags,
            "meaning": round(meaning / nonspace, 3),
            "noise": round((symbols + emoji) / nonspace, 3),
            "variety": round(variety, 3),
            "runs": len(runs),
            "longest_run": longest,
            "emoji": emoji,
        }
