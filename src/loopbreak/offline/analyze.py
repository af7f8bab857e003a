"""Replaying recorded sessions through the engine: where each rule would have cut.

Pure: events in (from any reader in ``loopbreak.offline.transcripts``), report data out.
Each call goes through a fresh per-call guard fed its deltas in stream order;
each session goes through one session guard that sees every call whole (what
really happened), every tool call before its result and every result after it.
So the report answers "should it have fired, and what would it have saved?"
call by call, without pretending to know what the model would have done after
a cut.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from loopbreak._config import Config
from loopbreak._engine.call_guard import CallGuard
from loopbreak._engine.session_guard import SessionGuard
from loopbreak._engine.trip import Trip
from loopbreak.offline.transcripts._model import (
    Event,
    ReadReport,
    RecordedCall,
    SessionStart,
    ToolResult,
    TurnEnd,
    TurnStart,
)

EXCERPT_BEFORE = 1200
EXCERPT_AFTER = 300


def estimate_tokens(text_chars: int, cjk_chars: int = 0) -> int:
    """Roughly how many tokens ``text_chars`` characters are: 4 per token for most text,
    one per CJK character (what common tokenizers average on each)."""
    return cjk_chars + max(0, text_chars - cjk_chars) // 4


def _cjk(text: str) -> int:
    return sum(1 for ch in text if "\u3000" <= ch <= "\u9fff" or "\uf900" <= ch <= "\ufaff")


@dataclass
class Cut:
    """Where a rule would have cut a call."""

    rule: str
    channel: str
    offset: int
    at: int
    position: int
    evidence: dict[str, Any]
    excerpt_before: str
    excerpt_after: str


@dataclass
class CallReport:
    """One recorded call and what the engine makes of it."""

    turn: int
    step: int
    kind: str
    finish: str | None
    reasoning_chars: int
    text_chars: int
    tool_chars: int
    tool_calls: list[str]
    cut: Cut | None
    saved_chars: int
    saved_tokens: int
    stall: dict[str, Any] | None = None

    @property
    def chars(self) -> int:
        return self.reasoning_chars + self.text_chars + self.tool_chars


@dataclass
class ToolAction:
    """What the tool rules would have done with one tool call."""

    turn: int
    step: int
    tool: str
    action: str  # "steer" or "deny"
    failures: int  # the count the rule acted on: failures, identical results, cycles
    text: str
    rule: str = "tool-failure"


@dataclass
class StallReport:
    turn: int
    step: int
    reason: str | None
    run: int
    reaction: str | None
    containment: float | None
    rule: str = "stall"  # or "monologue": the same answer again without acting


@dataclass
class SessionReport:
    """Everything the replay found in one source."""

    path: str
    session: str
    source: str
    calls: list[CallReport] = field(default_factory=list)
    stalls: list[StallReport] = field(default_factory=list)
    tool_actions: list[ToolAction] = field(default_factory=list)
    read: dict[str, Any] = field(default_factory=dict)

    @property
    def cut_calls(self) -> list[CallReport]:
        return [c for c in self.calls if c.cut is not None]

    def totals(self) -> dict[str, Any]:
        rules = Counter(c.cut.rule for c in self.calls if c.cut)
        return {
            "calls": len(self.calls),
            "cut_calls": len(self.cut_calls),
            "chars": sum(c.chars for c in self.calls),
            "saved_chars": sum(c.saved_chars for c in self.calls),
            "saved_tokens": sum(c.saved_tokens for c in self.calls),
            "rules": dict(rules),
            "stall_fires": sum(1 for s in self.stalls if s.reaction and s.rule == "stall"),
            "monologue_fires": sum(1 for s in self.stalls
                                   if s.reaction and s.rule == "monologue"),
            "tool_steers": sum(1 for a in self.tool_actions if a.action == "steer"),
            "tool_denials": sum(1 for a in self.tool_actions if a.action == "deny"),
        }


def _excerpt(text: str, at: int) -> tuple[str, str]:
    return text[max(0, at - EXCERPT_BEFORE) : at], text[at : at + EXCERPT_AFTER]


def replay_call(call: RecordedCall, guard: CallGuard) -> tuple[Trip | None, int]:
    """Feed a recorded call to ``guard`` in stream order; return its first trip and the
    position where its rule fired, in characters of the whole call (every channel): what a
    streaming cut would have kept. A log that recorded a whole message as one piece still
    saves from there, not from the end of the piece."""
    position = 0
    # Per delta of a judged channel: (channel, its characters before, the call's before).
    starts: list[tuple[str, int, int]] = []
    channel_chars: dict[str, int] = {}
    cut: Trip | None = None
    for delta in call.deltas:
        if delta.channel == "tool":
            guard.tool_call_delta(delta.key, delta.name, delta.text)
            trip = None
        else:
            before = channel_chars.get(delta.channel, 0)
            starts.append((delta.channel, before, position))
            channel_chars[delta.channel] = before + len(delta.text)
            # Open tool blocks end when the model goes back to thinking or writing.
            trip = guard.close_tool_call() if guard.tool_call_open else None
            trip = guard.feed(delta.channel, delta.text) or trip
        position += len(delta.text)
        if trip is not None and cut is None:
            cut = trip
    trip = guard.flush()
    trip = guard.close_tool_call() or trip
    if trip is not None and cut is None:
        cut = trip
    if cut is None:
        return None, 0
    return cut, _call_position(cut, starts)


def _call_position(trip: Trip, starts: list[tuple[str, int, int]]) -> int:
    """Where channel character ``trip.at`` lies in the whole call."""
    for channel, before, position in reversed(starts):
        if channel == trip.channel and before < trip.at:
            return position + trip.at - before
    return trip.at


def _call_report(call: RecordedCall, guard: CallGuard) -> CallReport:
    trip, position = replay_call(call, guard)
    reasoning, text, tools = call.chars("reasoning"), call.chars("text"), call.chars("tool")
    cut = None
    saved_chars = saved_tokens = 0
    if trip is not None:
        channel_text = call.joined(trip.channel)
        before, after = _excerpt(channel_text, trip.at)
        cut = Cut(trip.rule, trip.channel, trip.offset, trip.at, position,
                  dict(trip.evidence), before, after)
        rest = "".join(d.text for d in call.deltas)[position:]
        saved_chars = len(rest)
        saved_tokens = _saved_tokens(call, rest)
    return CallReport(
        turn=call.turn, step=call.step, kind=call.kind, finish=call.finish,
        reasoning_chars=reasoning, text_chars=text, tool_chars=tools,
        tool_calls=[t.name for t in call.tool_calls], cut=cut,
        saved_chars=saved_chars, saved_tokens=saved_tokens,
    )


def _saved_tokens(call: RecordedCall, rest: str) -> int:
    """Tokens the cut would have saved: the call's own token count scaled to the characters
    left, when the log recorded usage; an estimate from the characters otherwise."""
    output = call.usage.get("outputTokens") or call.usage.get("output_tokens") \
        or call.usage.get("completion_tokens")
    total = sum(len(d.text) for d in call.deltas)
    if output and total:
        return round(output * len(rest) / total)
    return estimate_tokens(len(rest), _cjk(rest))


def analyze_events(events: Iterable[Event], path: str, config: Config | None = None
                   ) -> Iterator[SessionReport]:
    """Replay the events of one source; one report per session in it.

    Every delta is judged as it comes (``judging.batch_chars`` 1): a report says where
    the rules decided, the delta that holds the tripping character, as ``loopbreak scan``
    does; a live guard judging in batches cuts up to a batch later."""
    config = (config or Config()).replace(**{"judging.batch_chars": 1})
    report: SessionReport | None = None
    session: SessionGuard | None = None
    step = 0
    for event in events:
        if isinstance(event, SessionStart):
            if report is not None:
                yield report
            report = SessionReport(path=path, session=event.session, source=event.source)
            session = SessionGuard(config)
            continue
        if report is None or session is None:
            report = SessionReport(path=path, session=path, source="unknown")
            session = SessionGuard(config)
        if isinstance(event, TurnStart):
            session.start_turn()
        elif isinstance(event, RecordedCall):
            if event.kind == "attempt" and not event.deltas:
                continue  # a request that failed before streaming anything is not a model call
            step = event.step
            guard = session.start_call()
            call_report = _call_report(event, guard)
            session.observe(event.joined("text")[-2000:] or event.joined("reasoning")[-2000:])
            outcome = session.finish_call(guard)
            verdict = outcome.stall
            if outcome.monologue is not None:
                report.stalls.append(StallReport(event.turn, event.step, "monologue",
                                                 outcome.monologue.fires,
                                                 outcome.monologue.kind, None, "monologue"))
            if verdict.judged:
                call_report.stall = {
                    "stalled": verdict.stalled, "reason": verdict.reason, "run": verdict.run,
                    "containment": verdict.containment,
                    "reaction": verdict.reaction.kind if verdict.reaction else None,
                }
                if verdict.stalled:
                    report.stalls.append(StallReport(
                        event.turn, event.step, verdict.reason, verdict.run,
                        verdict.reaction.kind if verdict.reaction else None,
                        verdict.containment))
            report.calls.append(call_report)
        elif isinstance(event, ToolResult):
            decision = session.before_tool(event.name, event.arguments)
            if not decision.allowed:
                report.tool_actions.append(ToolAction(
                    event.turn, step, event.name, "deny", decision.failures, decision.reason or "",
                    decision.rule or "tool-failure"))
            guidance = session.after_tool(event.name, event.arguments, event.text,
                                          failed=event.failed, error_code=event.error_code)
            if guidance is not None and guidance.failures:
                report.tool_actions.append(ToolAction(
                    event.turn, step, event.name, "steer", guidance.failures, guidance.text,
                    guidance.rule))
        elif isinstance(event, TurnEnd):
            pass
        elif isinstance(event, ReadReport):
            report.read = {
                "rows": event.rows, "bad_rows": event.bad_rows, "first_error": event.first_error,
                "unknown_rows": dict(event.unknown_rows), "frames": event.frames,
                "torn": event.torn, "lost_bytes": event.lost_bytes, "warnings": event.warnings,
            }
    if report is not None:
        yield report


def summary(reports: Iterable[SessionReport]) -> dict[str, Any]:
    """Totals over every session."""
    out: dict[str, Any] = {"sessions": 0, "calls": 0, "cut_calls": 0, "chars": 0,
                           "saved_chars": 0, "saved_tokens": 0, "rules": Counter(),
                           "stall_fires": 0, "monologue_fires": 0, "tool_steers": 0,
                           "tool_denials": 0}
    for report in reports:
        out["sessions"] += 1
        for key, value in report.totals().items():
            if key == "rules":
                out["rules"].update(value)
            else:
                out[key] += value
    out["rules"] = dict(out["rules"])
    return out


def report_dict(reports: list[SessionReport]) -> dict[str, Any]:
    """The stable ``--json`` shape."""
    sessions = []
    for r in reports:
        calls = []
        for c in r.calls:
            calls.append({
                "turn": c.turn, "step": c.step, "kind": c.kind, "finish": c.finish,
                "channel": c.cut.channel if c.cut else None,
                "rule": c.cut.rule if c.cut else None,
                "offset": c.cut.offset if c.cut else None,
                "at": c.cut.at if c.cut else None,
                "chars": c.chars, "reasoning_chars": c.reasoning_chars,
                "text_chars": c.text_chars, "tool_chars": c.tool_chars,
                "tool_calls": c.tool_calls,
                "saved_chars": c.saved_chars, "saved_tokens": c.saved_tokens,
                "evidence": c.cut.evidence if c.cut else None,
                "stall": c.stall,
            })
        sessions.append({
            "path": r.path, "session": r.session, "source": r.source, "calls": calls,
            "stalls": [asdict(s) for s in r.stalls],
            "tool_actions": [asdict(a) for a in r.tool_actions],
            "read": r.read, "totals": r.totals(),
        })
    return {"sessions": sessions, "summary": summary(reports)}


def display_path(path: str | os.PathLike[str]) -> str:
    """A path as people read it: relative to the working folder when below it."""
    p = Path(path)
    try:
        return str(p.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(p)
