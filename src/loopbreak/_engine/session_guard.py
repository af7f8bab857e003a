"""The per-session guard: turns, steps and the rules that span calls.

Host-agnostic: plain Python values in, decisions out. A host (the proxy, an
SDK wrapper, an agent loop, the offline analyzer) tells it when a turn starts,
hands it each model call's guard when the call ends, and asks it before and
after every tool call. It answers with what to do: a stall reaction, a denial,
guidance for a failing result, whether a retry without thinking is still in the
turn's budget, and the notices the model should read.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from loopbreak._config import Config
from loopbreak._engine.alternation import AlternationRule
from loopbreak._engine.call_guard import CallGuard, CallSummary
from loopbreak._engine.monologue import MonologueRule
from loopbreak._engine.no_progress import NoProgressRule
from loopbreak._engine.notices import (
    LANGUAGE_SAMPLE_CHARS,
    LANGUAGES,
    Language,
    cut_notice,
    is_denial,
    language_of_counts,
    letter_counts,
    render,
)
from loopbreak._engine.repeated_error import RepeatedErrorRule
from loopbreak._engine.stall import Reaction, StallRule, StallVerdict
from loopbreak._engine.state_copy import CopiedByFields
from loopbreak._engine.tool_failure import ToolFailureBreaker, normalise_error
from loopbreak._engine.tool_steps import ToolDecision, ToolGuidance, ToolStep, result_fingerprint
from loopbreak._engine.trip import Trip


@dataclass(frozen=True, init=False)
class CallOutcome:
    """What the session guard concluded about one finished call."""

    turn: int
    step: int
    summary: CallSummary
    stall: StallVerdict
    monologue: Reaction | None = None

    def __init__(self, turn: int, step: int, summary: CallSummary, stall: StallVerdict,
                 monologue: Reaction | None = None) -> None:
        # Frozen, yet one is made for every message of a replayed history: the fields go
        # straight into the instance, not through the frozen __setattr__ (a quarter of the cost).
        fields = self.__dict__
        fields["turn"] = turn
        fields["step"] = step
        fields["summary"] = summary
        fields["stall"] = stall
        fields["monologue"] = monologue

    @property
    def reaction(self) -> Reaction | None:
        """What the host should do before the next call: the monologue rule's reaction or
        the stall rule's, the stronger when both fired."""
        stall = self.stall.reaction
        if self.monologue is None or (stall is not None and stall.kind == "cancel"):
            return stall
        return self.monologue


class SessionGuard(CopiedByFields):
    """Cross-call state of one agent session.

    >>> session = SessionGuard()
    >>> session.start_turn()
    >>> call = session.start_call()
    >>> call.feed_text("The answer is 4.") is None
    True
    >>> session.finish_call(call).stall.judged  # too little reasoning to judge
    False
    """

    def __init__(self, config: Config | None = None, *, language: str | None = None) -> None:
        self._config = config or Config()
        setting = language or self._config.recovery.language
        self._fixed_language: Language | None = setting if setting in LANGUAGES else None
        # The last LANGUAGE_SAMPLE_CHARS characters the guard was shown (the sample ``auto``
        # language reads) are the last of the pieces kept, newest last: the oldest leaves
        # once the others hold the sample. Its letters are counted only when the language
        # is asked for, and the answer is kept until the sample moves: the rules ask only
        # to write a notice, which most calls never do, and a replayed history's view asks
        # once (a history of 800 calls in Chinese counted ~1.6 MB each request when every
        # piece was counted as it came, to write nothing).
        self._sample_parts: deque[str] = deque()
        self._sample_chars = 0  # of the pieces kept
        self._sample_language: Language | None = None  # what the sample says, once asked
        self._stall = StallRule(self._config.stall)
        self._tools = ToolFailureBreaker(self._config.tool_failure)
        self._no_progress = NoProgressRule(self._config.no_progress)
        self._alternation = AlternationRule(self._config.alternation)
        self._repeated_error = RepeatedErrorRule(self._config.repeated_error)
        self._monologue = MonologueRule(self._config.monologue)
        self._tried: set[str] = set()  # keys called since the user last spoke
        self._tools_seen = False
        self._granting = False  # the user spoke since the counts began: one more try each
        self._turn = 0
        self._step = 0
        self._retries = 0
        self._post_trip_hint = False

    @property
    def config(self) -> Config:
        return self._config

    @property
    def turn(self) -> int:
        """The current turn, counted from 1 (0 before the first)."""
        return self._turn

    @property
    def step(self) -> int:
        """Calls started in the current turn."""
        return self._step

    @property
    def monologue_run(self) -> int:
        """Answers in the current run of near-identical answers without a tool call."""
        return self._monologue.run

    @property
    def language(self) -> Language:
        """The language notices are written in now."""
        if self._fixed_language is not None:
            return self._fixed_language
        if self._sample_language is None:
            sample = "".join(self._sample_parts)[-LANGUAGE_SAMPLE_CHARS:]
            # A sample without a CJK letter is English whatever its letters' count.
            self._sample_language = "en" if sample.isascii() else language_of_counts(
                *letter_counts(sample))
        return self._sample_language

    def _language_now(self) -> Language:
        # What the rules are given: asked only when one of them writes a notice.
        return self.language

    def observe(self, text: str) -> None:
        """Show the guard some of the conversation, so ``auto`` language can follow it."""
        if not text:
            return
        if len(text) > LANGUAGE_SAMPLE_CHARS:
            text = text[-LANGUAGE_SAMPLE_CHARS:]
        parts = self._sample_parts
        parts.append(text)
        chars = self._sample_chars + len(text)
        while chars - len(parts[0]) >= LANGUAGE_SAMPLE_CHARS:
            chars -= len(parts.popleft())
        self._sample_chars = chars
        self._sample_language = None

    # turns and calls

    def start_turn(self, user_text: str | None = None) -> None:
        """A new user turn: step count, retry budget and tool-failure counts start over; the
        other tool rules' counts carry over (their ``scope = "session"``: each call gets one
        more try before a denial) or start over (``"turn"``). ``user_text``: what the user
        said, when known; the same words as last time (a host's canned reminder) do not end
        a monologue."""
        self._turn += 1
        self._step = 0
        self._retries = 0
        self._post_trip_hint = False
        cfg = self._config
        self._tools.start_turn()  # SPEC: a new turn starts the tool-failure counts clean
        for rule, scope in ((self._no_progress, cfg.no_progress.scope),
                            (self._alternation, cfg.alternation.scope),
                            (self._repeated_error, cfg.repeated_error.scope)):
            if scope == "turn":
                rule.start_turn()
        self._tried.clear()
        self._granting = self._tools_seen
        self._monologue.user_message(f"\x00turn {self._turn}" if user_text is None else user_text)

    def forget_grams(self) -> None:
        """Drop what only the stall rule's restatement test keeps between calls (the last
        call's 4-gram set): for a guard held on to just to judge tools and retries."""
        self._stall.forget_grams()

    def start_call(self) -> CallGuard:
        """A new model call in this turn; feed the returned guard its deltas."""
        self.count_call()
        return CallGuard(self._config, track_grams=True)

    def count_call(self) -> None:
        """A new model call in this turn whose stream is not judged here (a replayed
        history gives ``finish_call`` its summary)."""
        if self._turn == 0:
            self.start_turn()
        self._step += 1

    def finish_call(self, call: CallGuard | CallSummary) -> CallOutcome:
        """The call ended (normally or cut): judge it across calls."""
        summary = call.summary() if isinstance(call, CallGuard) else call
        if summary.trip is not None:
            self._post_trip_hint = True
        language = self._language_now
        verdict = self._stall.judge(summary, language)
        monologue = self._monologue.judge(summary.text, bool(summary.tool_calls), language)
        return CallOutcome(self._turn, self._step, summary, verdict, monologue)

    # recovery after a trip

    def claim_retry(self) -> bool:
        """Whether to re-ask without thinking now; counts against the turn's budget."""
        recovery = self._config.recovery
        if recovery.on_trip != "retry" or self._retries >= recovery.retries_per_turn:
            return False
        self._retries += 1
        return True

    @property
    def retries_left(self) -> int:
        """Retries without thinking left in this turn."""
        recovery = self._config.recovery
        if recovery.on_trip != "retry":
            return 0
        return max(0, recovery.retries_per_turn - self._retries)

    def notice(self, trip: Trip, cut_chars: int | None = None) -> str:
        """What the model reads after ``trip``: after how many characters its repeating
        reasoning or output was cut, and to carry on. ``cut_chars`` defaults to the
        characters of the channel consumed up to the cut."""
        return cut_notice(trip, self.language, cut_chars)

    # tool calls

    def before_tool(self, name: str, arguments: Any) -> ToolDecision:
        """Ask before dispatching a tool call; a denial carries the reason to show the model
        and the rule that denied it."""
        key = self._tools.key(name, arguments)
        language = self._language_now
        decision = self._tools.before_key(name, key, language)
        if decision.allowed:
            for rule in (self._alternation, self._no_progress, self._repeated_error):
                denial = rule.before(name, key, language)
                if denial is not None:
                    decision = denial
                    break
        if not decision.allowed and self._granting and key not in self._tried:
            # The user spoke since: what they said may have changed what the call meets.
            return ToolDecision(True, None, decision.failures)
        return decision

    def may_deny(self, name: str) -> bool:
        """Whether some call of tool ``name`` could be denied now."""
        return any(rule.may_deny(name) for rule in (
            self._tools, self._no_progress, self._alternation, self._repeated_error))

    def after_tool(self, name: str, arguments: Any, result: str = "", *, failed: bool = False,
                   error_code: str | None = None, error_text: str | None = None
                   ) -> ToolGuidance | None:
        """Report a tool result (``result``: the text the model will read); returns guidance
        to put in front of (or instead of) it, or ``None`` to leave it as it is.

        After a trip in this turn, the first result also carries the post-trip hint.
        A result that is one of loopbreak's own denials (a host stored it as the call's
        result) is not a result of the tool and changes nothing.
        """
        if is_denial(result):
            return None
        language = self._language_now
        key = self._tools.key(name, arguments)
        self._tried.add(key)
        self._tools_seen = True
        error = result if error_text is None else error_text
        step = ToolStep(name, key, result_fingerprint(result), failed,
                        normalise_error(error, self._config.repeated_error.error_chars)
                        if failed else "", result)
        # Every rule records the step; the model reads one guidance, the most specific.
        found = [
            self._tools.after_key(name, key, failed=failed, error_code=error_code,
                                  error_text=error, language=language),
            self._alternation.after(step, language),
            self._no_progress.after(step, result, language),
            self._repeated_error.after(step, error, language),
        ]
        guidance = None
        for guidance in found:
            if guidance is not None:
                break
        if not self._post_trip_hint:
            return guidance
        self._post_trip_hint = False
        hint = render("post_trip", language)
        if guidance is None:
            return ToolGuidance(hint, "prefix", 0, "post-trip")
        return ToolGuidance(f"{hint}\n\n{guidance.text}", guidance.mode, guidance.failures,
                            guidance.rule)
