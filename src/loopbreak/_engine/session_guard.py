"""The per-session guard: turns, steps and the rules that span calls.

Host-agnostic: plain Python values in, decisions out. A host (the proxy, an
SDK wrapper, an agent loop, the offline analyzer) tells it when a turn starts,
hands it each model call's guard when the call ends, and asks it before and
after every tool call. It answers with what to do: a stall reaction, a denial,
guidance for a failing result, whether a retry without thinking is still in the
turn's budget, and the notices the model should read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loopbreak._config import Config
from loopbreak._engine.call_guard import CallGuard, CallSummary
from loopbreak._engine.notices import Language, cut_notice, render, resolve_language
from loopbreak._engine.stall import StallRule, StallVerdict
from loopbreak._engine.tool_failure import ToolDecision, ToolFailureBreaker, ToolGuidance
from loopbreak._engine.trip import Trip


@dataclass(frozen=True)
class CallOutcome:
    """What the session guard concluded about one finished call."""

    turn: int
    step: int
    summary: CallSummary
    stall: StallVerdict


class SessionGuard:
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
        self._language_setting = language or self._config.recovery.language
        self._sample = ""
        self._stall = StallRule(self._config.stall)
        self._tools = ToolFailureBreaker(self._config.tool_failure)
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
    def language(self) -> Language:
        """The language notices are written in now."""
        return resolve_language(self._language_setting, self._sample)

    def observe(self, text: str) -> None:
        """Show the guard some of the conversation, so ``auto`` language can follow it."""
        if text:
            self._sample = (self._sample + text)[-4000:]

    # turns and calls

    def start_turn(self) -> None:
        """A new user turn: step count, tool-failure counts and retry budget start over."""
        self._turn += 1
        self._step = 0
        self._retries = 0
        self._post_trip_hint = False
        self._tools.start_turn()

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
        verdict = self._stall.judge(summary, self.language)
        return CallOutcome(self._turn, self._step, summary, verdict)

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
        """Ask before dispatching a tool call; a denial carries the reason to show the model."""
        return self._tools.before(name, arguments, self.language)

    def may_deny(self, name: str) -> bool:
        """Whether some call of tool ``name`` would be denied now."""
        return self._tools.may_deny(name)

    def after_tool(self, name: str, arguments: Any, result: str = "", *, failed: bool = False,
                   error_code: str | None = None, error_text: str | None = None
                   ) -> ToolGuidance | None:
        """Report a tool result; returns guidance to put in front of (or instead of) the result
        the model will read, or ``None`` to leave it as it is.

        After a trip in this turn, the first result also carries the post-trip hint.
        """
        guidance = self._tools.after(
            name, arguments, failed=failed, error_code=error_code,
            error_text=result if error_text is None else error_text, language=self.language,
        )
        if not self._post_trip_hint:
            return guidance
        self._post_trip_hint = False
        hint = render("post_trip", self.language)
        if guidance is None:
            return ToolGuidance(hint, "prefix", 0)
        return ToolGuidance(f"{hint}\n\n{guidance.text}", guidance.mode, guidance.failures)
