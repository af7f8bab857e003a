"""Labelled agent trajectories, replayed through a session guard and scored.

A trajectory is a real agent run (tool calls, their results, the agent's text)
from a public source, labelled ``stuck`` (with the pattern and the steps of its
loop) or ``healthy`` (with the hard negative it is, if any); ``agent-corpus/``
in the repository holds the ones whose licence lets them be redistributed (its
README describes the format), ``.agent-corpus-local/`` the others on the
machines that fetched them.

Replaying feeds the steps to a :class:`~loopbreak.SessionGuard` the way every
face does: a user message starts a turn unless the agent is mid-task, an
assistant message is a finished call (its tool calls asked for with
``before_tool``), a tool message is a result (``after_tool``). Whether a result
failed comes from the log's own flag (``flags``) or from reading its text alone
(``text``, what the proxy and the LiteLLM hook have). Scored as the rules
promise: a stuck run is *steered* when guidance or a steer reached the model by
the third repeat of its loop, *stopped* when the fourth repeat (or, where the
log ends the loop sooner, an identical next call) was denied or the turn ended;
a healthy run must never be denied.
"""

from __future__ import annotations

import json
import os
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from loopbreak._config import Config
from loopbreak._engine.call_guard import CallSummary
from loopbreak._engine.session_guard import SessionGuard
from loopbreak._engine.tool_failure import looks_like_failure
from loopbreak._errors import InputError
from loopbreak.offline.corpus import _jsonl_rows

AGENT_CORPUS_ENV = "LOOPBREAK_AGENT_CORPUS"
DEFAULT_AGENT_CORPUS = Path("agent-corpus")
LOCAL_AGENT_CORPUS_ENV = "LOOPBREAK_LOCAL_AGENT_CORPUS"
DEFAULT_LOCAL_AGENT_CORPUS = Path(".agent-corpus-local")

PATTERNS = ("failing-call", "no-progress", "alternation", "monologue", "repeated-error")
HARD_NEGATIVES = ("pagination", "lookup", "polling", "fix-then-success", "two-retries", "other")
FailureReading = Literal["flags", "text"]
MODES: tuple[FailureReading, ...] = ("flags", "text")


@dataclass(frozen=True)
class Trajectory:
    """One labelled agent run."""

    id: str
    source: str
    label: Literal["stuck", "healthy"]
    steps: tuple[dict[str, Any], ...]
    pattern: str | None = None
    repeats: tuple[int, ...] = ()
    hard_negative: str | None = None

    @property
    def period(self) -> int:
        """Steps in one round of the loop: two for an alternation, else one."""
        return 2 if self.pattern == "alternation" else 1


def agent_corpus_dirs() -> list[Path]:
    """The committed agent corpus and the local-only one, where they exist."""
    dirs = [Path(os.environ.get(AGENT_CORPUS_ENV) or DEFAULT_AGENT_CORPUS),
            Path(os.environ.get(LOCAL_AGENT_CORPUS_ENV) or DEFAULT_LOCAL_AGENT_CORPUS)]
    return [d for d in dirs if d.is_dir()]


def load_trajectories(dirs: Sequence[Path] | None = None) -> list[Trajectory]:
    """Every trajectory of the agent corpora: one folder per source, each with
    ``trajectories.jsonl.gz``; a malformed row is an :class:`InputError` naming its line."""
    out: list[Trajectory] = []
    for base in agent_corpus_dirs() if dirs is None else dirs:
        for folder in sorted(p for p in base.iterdir() if p.is_dir()):
            path = folder / "trajectories.jsonl.gz"
            if path.exists():
                out.extend(_rows(path, folder.name))
    return out


def _rows(path: Path, source: str) -> Iterator[Trajectory]:
    for number, row in _jsonl_rows(path):
        yield _trajectory(row, f"{path}:{number}", source)


def _trajectory(row: dict[str, Any], where: str, source: str) -> Trajectory:
    label, steps = row.get("label"), row.get("steps")
    if label not in ("stuck", "healthy"):
        raise InputError(f"{where}: 'label' must be 'stuck' or 'healthy', not {label!r}")
    if not isinstance(steps, list) or not all(
            isinstance(s, dict) and s.get("role") in ("user", "assistant", "tool") for s in steps):
        raise InputError(f"{where}: 'steps' must be a list of user, assistant and tool steps")
    pattern, repeats = row.get("pattern"), row.get("repeats") or []
    if label == "stuck":
        if pattern not in PATTERNS:
            raise InputError(f"{where}: 'pattern' must be one of {', '.join(PATTERNS)}, "
                             f"not {pattern!r}")
        if len(repeats) < 3 or not all(
                isinstance(i, int) and 0 <= i < len(steps) and steps[i]["role"] == "assistant"
                for i in repeats):
            raise InputError(f"{where}: 'repeats' must list 3 or more assistant steps")
    negative = row.get("hard_negative")
    if negative is not None and negative not in HARD_NEGATIVES:
        raise InputError(f"{where}: unknown hard_negative {negative!r}")
    return Trajectory(str(row.get("id")), source, label, tuple(steps),
                      pattern if label == "stuck" else None, tuple(repeats),
                      negative if label == "healthy" else None)


# -- replay ------------------------------------------------------------------------------


@dataclass
class Replay:
    """What the session guard did along one trajectory, by assistant step index."""

    steers: list[int] = field(default_factory=list)
    stops: list[int] = field(default_factory=list)
    rules: Counter[str] = field(default_factory=Counter)
    next_denied: bool = False  # the loop's next round, where the log has none, was denied


def _calls(step: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(str(c.get("name") or ""), c.get("arguments", ""))
            for c in step.get("tool_calls") or [] if isinstance(c, dict)]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else "" if value is None else json.dumps(value)


def replay(trajectory: Trajectory, config: Config, reading: FailureReading = "flags") -> Replay:
    """Feed ``trajectory`` to a fresh session guard as a face would; see the module."""
    session = SessionGuard(config, language="en")
    out = Replay()
    steps = trajectory.steps
    # Where the labelled loop has no fourth round, ask for one right after its last round's
    # results: the call the loop would make next.
    rounds, period = trajectory.repeats, trajectory.period
    probe_after = rounds[-1] if trajectory.label == "stuck" and len(rounds) <= 3 * period else None
    probe = _calls(steps[rounds[len(rounds) - period]])[:1] if probe_after is not None else []
    pending: list[tuple[str, Any]] = []
    working = False
    last = -1
    for i, step in enumerate(steps):
        if probe_after is not None and i > probe_after and step["role"] != "tool":
            out.next_denied = _denied(session, probe)
            probe_after = None
        role = step["role"]
        if role == "user":
            text = _text(step.get("text"))
            if not working:
                session.start_turn(text)
            session.observe(text[-2000:])
        elif role == "assistant":
            text = _text(step.get("text"))
            calls = _calls(step)
            session.count_call()
            outcome = session.finish_call(CallSummary(0, len(text.strip()),
                                                      tuple(n for n, _ in calls), None, None,
                                                      text))
            reaction = outcome.reaction
            if reaction is not None and reaction.kind in ("steer", "cancel"):
                (out.stops if reaction.kind == "cancel" else out.steers).append(i)
                out.rules[f"{reaction.rule} {reaction.kind}"] += 1
            for name, arguments in calls:
                decision = session.before_tool(name, arguments)
                if not decision.allowed:
                    out.stops.append(i)
                    out.rules[f"{decision.rule} deny"] += 1
            pending, working, last = list(calls), bool(calls), i
        else:
            result = _text(step.get("result"))
            name, arguments = pending.pop(0) if pending else (str(step.get("name") or ""), "")
            flag = step.get("failed")
            failed = flag if reading == "flags" and isinstance(flag, bool) else \
                looks_like_failure(result)
            guidance = session.after_tool(name, arguments, result, failed=failed)
            if guidance is not None and guidance.rule != "post-trip":
                out.steers.append(last)
                out.rules[f"{guidance.rule} steer"] += 1
    if probe_after is not None:
        out.next_denied = _denied(session, probe)
    return out


def _denied(session: SessionGuard, calls: list[tuple[str, Any]]) -> bool:
    return any(not session.before_tool(name, arguments).allowed for name, arguments in calls)


# -- scores ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """How the rules did on one trajectory."""

    trajectory: Trajectory
    steered: bool  # stuck: by the third round; healthy: anywhere
    stopped: bool  # stuck: by the fourth round; healthy: any denial or ended turn
    rules: tuple[str, ...]


def judge(trajectory: Trajectory, config: Config, reading: FailureReading = "flags") -> Verdict:
    """Replay and score one trajectory."""
    played = replay(trajectory, config, reading)
    rules = tuple(sorted(played.rules))
    if trajectory.label == "healthy":
        return Verdict(trajectory, bool(played.steers), bool(played.stops), rules)
    rounds, period = trajectory.repeats, trajectory.period
    start = rounds[0]
    steer_by = rounds[min(len(rounds), 3 * period) - 1]
    steered = any(start <= s <= steer_by for s in [*played.steers, *played.stops])
    if len(rounds) > 3 * period:
        stopped = any(start <= s <= rounds[3 * period] for s in played.stops)
    else:
        stopped = played.next_denied or any(start <= s for s in played.stops)
    return Verdict(trajectory, steered, stopped, rules)


@dataclass
class Tally:
    """Counts over a set of verdicts."""

    stuck: int = 0
    steered: int = 0
    stopped: int = 0
    caught: int = 0  # steered and stopped
    healthy: int = 0
    healthy_steered: int = 0
    healthy_denied: int = 0

    def add(self, verdict: Verdict) -> None:
        if verdict.trajectory.label == "stuck":
            self.stuck += 1
            self.steered += verdict.steered
            self.stopped += verdict.stopped
            self.caught += verdict.steered and verdict.stopped
        else:
            self.healthy += 1
            self.healthy_steered += verdict.steered
            self.healthy_denied += verdict.stopped

    def merge(self, other: Tally) -> None:
        """Add ``other``'s counts to these."""
        for name, value in vars(other).items():
            setattr(self, name, getattr(self, name) + value)

    @property
    def recall(self) -> float:
        return self.caught / self.stuck if self.stuck else 1.0

    def as_dict(self) -> dict[str, Any]:
        return {"stuck": self.stuck, "steered": self.steered, "stopped": self.stopped,
                "caught": self.caught, "recall": round(self.recall, 4),
                "healthy": self.healthy, "healthy_steered": self.healthy_steered,
                "healthy_denied": self.healthy_denied}


def tally(verdicts: Iterable[Verdict], key: str = "all") -> dict[str, Tally]:
    """Verdicts counted by ``key``: ``all``, ``source``, ``pattern`` (stuck) / hard
    negative (healthy)."""
    out: dict[str, Tally] = defaultdict(Tally)
    for v in verdicts:
        t = v.trajectory
        if key == "source":
            name = t.source
        elif key == "pattern":
            name = t.pattern or f"healthy: {t.hard_negative or 'plain'}"
        else:
            name = "all"
        out[name].add(v)
    return dict(out)


def evaluate(trajectories: Sequence[Trajectory], config: Config,
             reading: FailureReading = "flags") -> list[Verdict]:
    """Every trajectory judged under ``config``."""
    return [judge(t, config, reading) for t in trajectories]


# -- the sweep ---------------------------------------------------------------------------

SWEEP: dict[str, tuple[Any, ...]] = {
    "no_progress.steer_from": (2, 3),
    "no_progress.deny_after": (2, 3, 4),
    "tool_failure.steer_from": (2, 3),
    "tool_failure.deny_after": (2, 3, 4),
    "repeated_error.steer_from": (2, 3, 4),
    "repeated_error.deny_after": (3, 4, 5),
    "alternation.cycles": (2, 3),
    "alternation.max_period": (2, 3, 4, 5),
    "no_progress.waiting_deny_after": (3, 5, 8),
    "no_progress.scope": ("turn", "session"),
    "alternation.scope": ("turn", "session"),
    "repeated_error.scope": ("turn", "session"),
}
"""The thresholds swept one at a time around the shipped configuration."""


@dataclass(frozen=True)
class SweepPoint:
    """One value of one key, scored under both failure readings, overall and by source."""

    key: str
    value: Any
    default: bool
    flags: Tally
    text: Tally
    by_source: dict[FailureReading, dict[str, Tally]] = field(compare=False, repr=False,
                                                              default_factory=dict)

    def score(self, reading: FailureReading) -> Tally:
        return self.flags if reading == "flags" else self.text


def sweep(trajectories: Sequence[Trajectory], base: Config | None = None,
          grid: dict[str, tuple[Any, ...]] | None = None,
          progress: Callable[[], object] | None = None) -> list[SweepPoint]:
    """Each key of ``grid`` varied alone from ``base``; both failure readings scored;
    ``progress`` is called after each value."""
    base = base or Config()
    points = []
    for key, values in (SWEEP if grid is None else grid).items():
        section, name = key.split(".")
        shipped = getattr(getattr(base, section), name)
        for value in values:
            config = base.replace(**{key: value})
            verdicts = {reading: evaluate(trajectories, config, reading) for reading in MODES}
            if progress is not None:
                progress()
            points.append(SweepPoint(
                key, value, value == shipped, tally(verdicts["flags"])["all"],
                tally(verdicts["text"])["all"],
                {reading: tally(v, "source") for reading, v in verdicts.items()}))
    return points


@dataclass(frozen=True)
class HeldOutSource:
    """One source scored under the settings the other sources chose."""

    source: str
    chosen: dict[str, Any]
    score: Tally


def leave_one_source_out(trajectories: Sequence[Trajectory], points: Sequence[SweepPoint],
                         base: Config | None = None, reading: FailureReading = "text"
                         ) -> list[HeldOutSource]:
    """For each source: every other source picks, key by key from ``points`` (a
    :func:`sweep`), the value that catches the most stuck runs without denying a healthy
    one (ties keep the shipped value); the held-out source is scored under the result."""
    base = base or Config()
    keys = list(dict.fromkeys(p.key for p in points))
    out = []
    for source in sorted({t.source for t in trajectories}):
        chosen: dict[str, Any] = {}
        for key in keys:
            best: tuple[int, int] | None = None
            for point in (p for p in points if p.key == key):
                rest = Tally()
                for name, part in point.by_source[reading].items():
                    if name != source:
                        rest.merge(part)
                if rest.healthy_denied:
                    continue
                rank = (rest.caught, point.default)
                if best is None or rank > best:
                    best, chosen[key] = rank, point.value
        config = base.replace(**chosen)
        held = [t for t in trajectories if t.source == source]
        out.append(HeldOutSource(source, chosen, tally(evaluate(held, config, reading))["all"]))
    return out
