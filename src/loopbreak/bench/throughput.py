"""What ``loopbreak bench`` measures: engine speed against the peers, in one run.

Every subject (loopbreak on the reasoning channel, loopbreak on the text channel,
and each peer package that is installed) is measured the same way, on the same
inputs, in the same process:

* **throughput on clean text**: Python standard-library source (on every machine),
  fed in token-sized deltas (:func:`token_deltas`, the default) or deltas of
  ``delta_chars``, and again in deltas of ``fixed_chars`` (32) beside it. A stop
  here is a false positive: it is recorded and a fresh guard judges the rest.
* **throughput on looping text**: each of :func:`loopbreak._samples.loop_samples`
  is fed to a fresh guard until the guard stops it; only the characters actually
  judged count (a guard that has stopped judges nothing more).
* the throughputs are measured **in rounds**: each subject judges one pass of the input
  in turn, round after round, so a change in the machine's speed while they run (this
  class of machine swings by a quarter within seconds) weighs on every subject alike, and
  a ratio between two subjects is the median of the rounds' ratios; measured one subject
  after another, a peer timed in a fast stretch once made loopbreak read 1.90 times as
  fast where the runs around it read 2.5 to 3.4.
* **per-delta cost** near the start of one stream (10 kB) and deep into it
  (1 MB), on the *same* deltas: the probe segments are timed once after a fresh
  guard has judged the 10 kB of text that precede them, and once appended to a
  1 MB clean stream that one guard has judged. Their ratio says whether the
  cost grows with the length of the stream (the engine promises it does not).

The functions here are pure: inputs in, frozen result dataclasses out, with the
clock injected (``clock=time.perf_counter_ns`` by default) so tests can check the
arithmetic with a fake one. Rendering lives in :mod:`loopbreak.cli.bench`.
"""

from __future__ import annotations

import gc
import importlib
import importlib.metadata
import importlib.util
import os
import platform
import re
import statistics
import sys
import sysconfig
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from loopbreak._config import Config
from loopbreak._engine import accelerator
from loopbreak._engine.call_guard import CallGuard
from loopbreak._engine.trip import CHANNELS, Channel
from loopbreak._errors import InputError
from loopbreak._samples import loop_samples

Clock = Callable[[], int]
"""Nanoseconds from an arbitrary origin (``time.perf_counter_ns``)."""

Feeder = Callable[[str], bool]
"""Judge one delta; ``True`` when the guard stops the stream on it. An empty delta ends
the stream (a guard that judges in batches judges what waits)."""

Factory = Callable[[], Feeder]
"""A fresh guard, ready for the first delta of a stream."""

OnProgress = Callable[[str, float], None]
"""What is being measured now, and the share of the whole run done (0..1)."""

TARGET_CHARS_PER_S = 2_000_000
"""The floor for the full rule set on one channel, clean text, token-sized deltas."""

TARGET_LOOPING_CHARS_PER_S = 1_000_000
"""The floor on looping text (each loop judged until it is stopped)."""

TARGET_MAX_GROWTH = 1.2
"""The ceiling on per-delta cost at 1 MB over the cost at 10 kB."""

_DEADLINE_CHECK_EVERY = 256  # deltas between clock reads while feeding the long stream


# ---------------------------------------------------------------------------
# Settings and inputs


@dataclass(frozen=True)
class BenchSettings:
    """Sizes and budgets of one run. The defaults finish well under a minute."""

    delta_chars: int = 0
    """Characters per delta; 0: token-sized deltas (:func:`token_deltas`)."""
    fixed_chars: int = 32
    """Clean throughput is measured at this fixed delta size too (0: not)."""
    clean_chars: int = 500_000
    """Clean text judged per throughput pass."""
    near_chars: int = 10_000
    """Where the first per-delta probe starts (rounded up to a delta boundary)."""
    far_chars: int = 1_000_000
    """Where the second per-delta probe starts."""
    window_deltas: int = 1000
    """Deltas in one timed probe window (a thousand: a window spans dozens of batches, so
    where the batch boundaries fall does not sway it)."""
    windows: int = 8
    """Probe windows per point; their median is reported."""
    min_seconds: float = 0.5
    """A throughput figure repeats passes over its input until this much time is spent."""
    min_passes: int = 3
    """Passes every subject judges at least (up to ``max_passes``): a verdict needs three."""
    max_passes: int = 25
    stream_seconds: float = 30.0
    """A subject that needs longer than this to judge the long stream is stopped
    there and probed where it got to (reported as capped)."""

    def __post_init__(self) -> None:
        for name in ("clean_chars", "window_deltas", "windows", "min_passes", "max_passes"):
            value = getattr(self, name)
            if value < 1:
                raise InputError(f"{name} must be >= 1, not {value}")
        for name in ("delta_chars", "fixed_chars"):
            value = getattr(self, name)
            if value < 0:
                raise InputError(f"{name} must be >= 0 (0: token-sized), not {value}")
        if self.near_chars < 0:
            raise InputError(f"near_chars must be >= 0, not {self.near_chars}")
        if self.far_chars <= self.near_chars:
            raise InputError(f"far_chars must be > near_chars ({self.near_chars}), "
                             f"not {self.far_chars}")
        for name in ("min_seconds", "stream_seconds"):
            value = getattr(self, name)
            if not value > 0:
                raise InputError(f"{name} must be > 0, not {value}")

    @property
    def step_chars(self) -> int:
        """The size windows are measured in: ``delta_chars``, or a token's mean size."""
        return self.delta_chars or TOKEN_CHARS

    @property
    def deltas_label(self) -> str:
        """How the deltas are cut, for people."""
        return f"{self.delta_chars}-char" if self.delta_chars else "token-sized"

    @property
    def near_start(self) -> int:
        return _round_up(self.near_chars, self.step_chars)

    @property
    def far_start(self) -> int:
        return _round_up(self.far_chars, self.step_chars)

    @property
    def probe_chars(self) -> int:
        """Characters of all probe windows of one point together."""
        return self.windows * self.window_deltas * self.step_chars

    @property
    def stream_chars(self) -> int:
        """Length of the long stream: the far base plus the probe windows."""
        return self.far_start + self.probe_chars

    @property
    def clean_needed(self) -> int:
        """Clean text the run needs: the throughput input, and the per-delta plan's."""
        return max(self.clean_chars, self.near_start + self.probe_chars + self.far_start)


QUICK = BenchSettings(clean_chars=40_000, far_chars=100_000, window_deltas=50, windows=3,
                      min_seconds=0.02, max_passes=3, stream_seconds=5.0)
"""Small sizes for tests and CI smoke runs: a few seconds with both peers installed."""


def _round_up(n: int, step: int) -> int:
    return -(-n // step) * step


@dataclass(frozen=True)
class CleanText:
    """Clean input: standard-library source files concatenated in a fixed order."""

    text: str
    root: str
    files: int


def stdlib_text(chars: int, root: str | None = None) -> CleanText:
    """At least ``chars`` characters (when the library has them) of ``.py`` files under
    ``root`` (the standard library by default), walked in sorted order, skipping
    ``site-packages`` and files that cannot be read as UTF-8; cut to ``chars``."""
    base = Path(root if root is not None else sysconfig.get_paths()["stdlib"])
    parts: list[str] = []
    size = files = 0
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames
                             if d not in ("site-packages", "dist-packages", "__pycache__"))
        for name in sorted(filenames):
            if not name.endswith(".py"):
                continue
            try:
                text = (Path(dirpath) / name).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            parts.append(text)
            size += len(text)
            files += 1
            if size >= chars:
                return CleanText("".join(parts)[:chars], str(base), files)
    return CleanText("".join(parts), str(base), files)


@dataclass(frozen=True)
class LoopInput:
    """One looping stream: its name, its text, where its loop starts."""

    name: str
    text: str
    loop_start: int


def loop_inputs() -> list[LoopInput]:
    """The loop samples this project generates (seeded, the same on every run)."""
    return [LoopInput(s.name, s.text, s.loop_start or 0) for s in loop_samples()]


def cut(text: str, delta_chars: int) -> list[str]:
    """``text`` in deltas of ``delta_chars`` characters; 0: token-sized deltas."""
    if delta_chars < 0:
        raise InputError(f"delta_chars must be >= 0, not {delta_chars}")
    if delta_chars == 0:
        return token_deltas(text)
    return [text[i : i + delta_chars] for i in range(0, len(text), delta_chars)]


TOKEN_CHARS = 4
"""The mean size of a real token on prose and code, in characters (3-4)."""

_CJK = "\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef"
_PICTOGRAPHS = "\U0001f000-\U0001faff\u2600-\u27bf"
_TOKEN_PIECE = re.compile(
    "'(?:[sdmt]|ll|ve|re)(?![^\\W\\d_])"  # English contractions
    f"|[{_CJK}{_PICTOGRAPHS}]"  # one CJK character or pictograph
    f"| ?[^\\W\\d_{_CJK}]+"  # a word with its leading space
    "|\\d"  # one digit
    "|\\s+(?!\\S)|\\s+"  # spaces, the last one left to the next word
    f"| ?[^\\s\\w{_PICTOGRAPHS}]{{1,3}}"  # punctuation, up to three together
    "|_+|[\\s\\S]"
)
_LONGEST_PIECE = 6
_WORD_PART = 4


def token_deltas(text: str) -> list[str]:
    """``text`` cut the way a byte-level BPE tokenizer's stream arrives, without needing
    one: a word with its leading space, one digit, one CJK character or pictograph
    (a decoder emits whole characters), punctuation up to three together, and words
    longer than six characters in four-character parts. Measured on the bench inputs it
    is a little finer than SmolLM2's tokenizer (tests/integrations), so the figures it
    gives are not flattered by coarse deltas."""
    out: list[str] = []
    for piece in _TOKEN_PIECE.findall(text):
        if len(piece) <= _LONGEST_PIECE:
            out.append(piece)
        else:
            out.extend(piece[i : i + _WORD_PART] for i in range(0, len(piece), _WORD_PART))
    return out


# ---------------------------------------------------------------------------
# Throughput


@dataclass(frozen=True)
class Throughput:
    """Characters per second over repeated passes on one input.

    ``stops`` has one entry per piece of input (one for clean text, one per loop
    sample): the offsets, within that piece, of every delta the subject stopped on,
    from the first pass (passes are identical).
    """

    chars_per_pass: int
    """Characters judged in one pass (a stopped loop is not judged past its stop)."""
    pass_ns: tuple[int, ...]
    stops: tuple[tuple[int, ...], ...]

    @property
    def passes(self) -> int:
        return len(self.pass_ns)

    @property
    def rates(self) -> tuple[float, ...]:
        """Characters judged per second in each pass."""
        return tuple(self.chars_per_pass * 1e9 / max(ns, 1) for ns in self.pass_ns)

    @property
    def chars_per_s(self) -> float:
        """Median over passes of characters judged per second."""
        return statistics.median(self.rates)

    @property
    def rate_range(self) -> tuple[float, float]:
        """The slowest and the fastest pass, in characters per second."""
        return min(self.rates), max(self.rates)

    @property
    def stop_count(self) -> int:
        return sum(len(s) for s in self.stops)


def _judge_pass(make: Factory, pieces: Sequence[Sequence[str]], go_on: bool,
                ) -> tuple[int, tuple[tuple[int, ...], ...]]:
    """One pass over ``pieces``, each with a fresh guard. After a stop: with ``go_on``
    a fresh guard judges the rest of the piece, else the piece is done."""
    judged = 0
    stops: list[tuple[int, ...]] = []
    for piece in pieces:
        feed = make()
        at = 0
        here: list[int] = []
        for delta in piece:
            at += len(delta)
            if feed(delta):
                here.append(at)
                if not go_on:
                    break
                feed = make()
        else:
            if feed(""):
                here.append(at)
        judged += at
        stops.append(tuple(here))
    return judged, tuple(stops)


@contextmanager
def heap_frozen() -> Iterator[None]:
    """Freeze what the process holds for the collector while the subjects are timed, as
    ``loopbreak proxy`` freezes what its start-up made: the bench's inputs (up to seven
    million deltas) and numba's ~90,000 objects are the bench's heap, not the guard's, yet
    every full collection a guard's garbage set off walked them (a flood that trips every
    384 characters and restarts its guard ran 0.87-1.08 M chars/s unfrozen, 1.09-1.20
    frozen, measured in one process). What the subjects make is collected as always."""
    frozen = gc.get_freeze_count()
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        if not frozen:  # a process that froze its objects itself keeps them frozen
            gc.unfreeze()


def measure_throughput(make: Factory, pieces: Sequence[Sequence[str]], *, go_on: bool,
                       min_seconds: float, max_passes: int, min_passes: int = 1,
                       clock: Clock = time.perf_counter_ns) -> Throughput:
    """Repeat passes over ``pieces`` (each a list of deltas) until ``min_seconds`` are
    spent and ``min_passes`` done, or ``max_passes`` are done; at least one pass.

    ``go_on=False`` is the looping input: each piece is judged until the subject stops
    it, then the next piece starts on a fresh guard. ``go_on=True`` is the clean input:
    a stop is a false positive, recorded, and a fresh guard judges on.
    """
    return measure_throughputs([make], pieces, go_on=go_on, min_seconds=min_seconds,
                               max_passes=max_passes, min_passes=min_passes, clock=clock)[0]


def measure_throughputs(makes: Sequence[Factory], pieces: Sequence[Sequence[str]], *,
                        go_on: bool, min_seconds: float, max_passes: int, min_passes: int = 1,
                        clock: Clock = time.perf_counter_ns) -> tuple[Throughput, ...]:
    """:func:`measure_throughput` of several subjects in rounds: each judges one pass in
    turn, round after round, until every one has spent ``min_seconds`` and ``min_passes``
    rounds are done, or ``max_passes`` rounds are (every subject judges as many passes)."""
    if not makes:
        return ()
    pass_ns: list[list[int]] = [[] for _ in makes]
    chars = [0] * len(makes)
    stops: list[tuple[tuple[int, ...], ...]] = [() for _ in makes]
    spent = [0] * len(makes)
    rounds = 0
    while not rounds or (rounds < max_passes and (rounds < min_passes
                                                   or min(spent) < min_seconds * 1e9)):
        for i, make in enumerate(makes):
            start = clock()
            judged, these = _judge_pass(make, pieces, go_on)
            ns = clock() - start
            if not rounds:
                chars[i], stops[i] = judged, these
            pass_ns[i].append(ns)
            spent[i] += ns
        rounds += 1
    return tuple(Throughput(chars[i], tuple(pass_ns[i]), stops[i]) for i in range(len(makes)))


# ---------------------------------------------------------------------------
# Per-delta cost near the start of a stream and deep into it


@dataclass(frozen=True)
class StreamPlan:
    """The deltas of the per-delta measurement.

    ``segments[k]`` is probe window k. Near: a fresh guard judges ``contexts[k]``
    (the ``near_start`` characters that precede segment k in the clean text), then
    segment k is timed. Far: one guard judges ``base`` (clean text from after the
    probes, so it never repeats them), then every segment is timed in order, each
    right after its near twin.
    """

    contexts: tuple[tuple[str, ...], ...]
    segments: tuple[tuple[str, ...], ...]
    base: tuple[str, ...]
    near_start: int
    far_start: int

    @property
    def base_chars(self) -> int:
        return sum(len(d) for d in self.base)


def plan_stream(text: str, settings: BenchSettings) -> StreamPlan:
    """Cut the per-delta measurement's deltas out of clean ``text``."""
    if len(text) < settings.clean_needed:
        raise InputError(f"the per-delta measurement needs {settings.clean_needed:,} clean "
                         f"characters, only {len(text):,} were found")
    dc = settings.delta_chars
    near = settings.near_start
    seg = settings.window_deltas * settings.step_chars
    contexts = tuple(tuple(cut(text[k * seg : near + k * seg], dc))
                     for k in range(settings.windows))
    segments = tuple(tuple(cut(text[near + k * seg : near + (k + 1) * seg], dc))
                     for k in range(settings.windows))
    base_from = near + settings.probe_chars
    base = tuple(cut(text[base_from : base_from + settings.far_start], dc))
    return StreamPlan(contexts, segments, base, near, settings.far_start)


@dataclass(frozen=True)
class PerDelta:
    """Nanoseconds per delta in each probe window, near and far."""

    near_at: int
    far_at: int
    """Where the far windows started: ``far_start``, or less when capped."""
    far_target: int
    near_ns: tuple[float, ...]
    far_ns: tuple[float, ...]
    stopped_at: int | None = None
    """The first character offset of the long stream the subject stopped on (it
    should not stop on clean text; loopbreak judges nothing after a stop, which
    makes its far numbers meaningless)."""

    @property
    def capped(self) -> bool:
        return self.far_at < self.far_target

    @property
    def near(self) -> float:
        return statistics.median(self.near_ns)

    @property
    def far(self) -> float:
        return statistics.median(self.far_ns)

    @property
    def growth(self) -> float:
        """Per-delta cost far over near: 1.0 is flat. The windows alternate (near k, then
        far k): the median of their ratios, which a change in the machine's speed across
        some of the windows does not sway (three slow pairs out of eight once read 1.28
        as the medians' ratio, the pairs' ratios 1.07-1.18 but one)."""
        if len(self.near_ns) != len(self.far_ns) or not self.near_ns:
            return _div(self.far, self.near)
        return _median_ratio(self.far_ns, self.near_ns)


def _time_window(feed: Feeder, deltas: Sequence[str], clock: Clock) -> tuple[float, bool]:
    stopped = False
    start = clock()
    for delta in deltas:
        if feed(delta):
            stopped = True
    ns = clock() - start
    return ns / max(len(deltas), 1), stopped


def measure_per_delta(make: Factory, plan: StreamPlan, *, stream_seconds: float,
                      clock: Clock = time.perf_counter_ns,
                      on_progress: Callable[[float], None] | None = None) -> PerDelta:
    """Time every probe window near the start of a stream and deep into one.

    Stops do not end the stream here: the deltas keep coming as a model's would,
    and the first stop is recorded. Judging the far base stops after
    ``stream_seconds`` (checked every few hundred deltas); the far windows are then
    timed where the guard got to, and the result says so (``capped``).
    """
    stopped_at: int | None = None
    far = make()
    at = 0
    deadline = clock() + int(stream_seconds * 1e9)
    total = max(plan.base_chars, 1)
    for i, delta in enumerate(plan.base):
        at += len(delta)
        if far(delta) and stopped_at is None:
            stopped_at = at
        if i % _DEADLINE_CHECK_EVERY == _DEADLINE_CHECK_EVERY - 1:
            if on_progress is not None:
                on_progress(at / total)
            if clock() > deadline:
                break
    far_at = at
    # Near and far windows alternate, so a change in the machine's load while this
    # runs weighs on both points alike.
    near_ns: list[float] = []
    far_ns: list[float] = []
    for context, segment in zip(plan.contexts, plan.segments, strict=True):
        near = make()
        for delta in context:
            near(delta)
        ns, _ = _time_window(near, segment, clock)
        near_ns.append(ns)
        ns, stopped = _time_window(far, segment, clock)
        far_ns.append(ns)
        if stopped and stopped_at is None:
            stopped_at = at  # somewhere in this window; its start is close enough
        at += sum(len(d) for d in segment)
    if on_progress is not None:
        on_progress(1.0)
    return PerDelta(plan.near_start, far_at, plan.far_start, tuple(near_ns), tuple(far_ns),
                    stopped_at)


# ---------------------------------------------------------------------------
# Subjects: loopbreak and its peers


@dataclass(frozen=True)
class Subject:
    """Something that judges a stream delta by delta."""

    name: str
    version: str
    make: Factory
    note: str = ""


def bench_config() -> Config:
    """Every rule on: the defaults, degeneracy on the text channel too, and the hard
    reasoning cap off (it is one counter, and clean inputs run past 120,000 chars)."""
    return Config().replace(**{"degeneracy.on_text": True, "limits.max_reasoning_chars": 0})


def loopbreak_subject(channel: Channel, config: Config | None = None) -> Subject:
    """loopbreak's full rule set on one channel, fed as a session's call is (what the proxy
    and the integrations run): through a call guard that also keeps the reasoning's 4-grams
    for the stall rule."""
    from loopbreak import __version__

    cfg = config if config is not None else bench_config()
    # numba compiles (or loads) the kernels once per process: here, not in a timed pass.
    compiled = accelerator.wanted(cfg.judging.compiled) is not None

    def make() -> Feeder:
        guard = CallGuard(cfg, track_grams=True)
        feed, flush = guard.feed, guard.flush
        return lambda delta: (feed(channel, delta) if delta else flush()) is not None

    note = ("compiled kernels (numba): block-repeat, 4-gram sets"
            if compiled and channel == "reasoning" else "pure Python" if not compiled else "")
    return Subject(f"loopbreak ({channel})", __version__, make, note)


@dataclass(frozen=True)
class Peer:
    """A package a user might pick instead; ``subject`` is ``None`` unless it loaded."""

    name: str
    install: str
    status: str
    """``measured``, ``not installed``, or ``failed to load: ...``."""
    version: str | None = None
    subject: Subject | None = None

    @property
    def installed(self) -> bool:
        return self.subject is not None


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _find(module: str) -> Any:
    try:
        return importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None


DEGEN_INSTALL = "pip install llm-degen-guard"
DGX_INSTALL = ("pip install dgxarley" if sys.version_info >= (3, 14)
               else "pip install --no-deps --ignore-requires-python dgxarley")
_DGX_GUARD_MODULE = "_loopbreak_bench_dgxarley_streaming_repetition_guard"


def load_degen_guard() -> Peer:
    """``llm-degen-guard``: ``DegenGuard().feed(chunk) -> (is_degenerate, score)``."""
    name = "llm-degen-guard"
    if _find("degen_guard") is None:
        return Peer(name, DEGEN_INSTALL, "not installed")
    try:
        cls: Any = importlib.import_module("degen_guard").DegenGuard
    except Exception as exc:  # a broken install is reported, not raised
        return Peer(name, DEGEN_INSTALL, f"failed to load: {type(exc).__name__}: {exc}")

    def make() -> Feeder:
        feed = cls().feed
        return lambda delta: bool(delta) and bool(feed(delta)[0])

    version = _version(name)
    return Peer(name, DEGEN_INSTALL, "measured", version,
                Subject(name, version or "?", make))


def _load_file_module(name: str, path: Path) -> ModuleType:
    """Execute one source file as module ``name`` without its package's ``__init__``."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def load_dgxarley() -> Peer:
    """``dgxarley``'s ``RepetitionGuard``, loaded by file path: the package ``__init__``
    needs Python 3.14 and third-party imports, the guard module only the stdlib."""
    name = "dgxarley"
    spec = _find("dgxarley")
    locations = list(getattr(spec, "submodule_search_locations", None) or []) if spec else []
    if not locations:
        return Peer(name, DGX_INSTALL, "not installed")
    path = Path(locations[0]) / "integration" / "streaming_repetition_guard.py"
    try:
        module = _load_file_module(_DGX_GUARD_MODULE, path)
        cls: Any = module.RepetitionGuard
    except Exception as exc:
        return Peer(name, DGX_INSTALL, f"failed to load: {type(exc).__name__}: {exc}")

    def make() -> Feeder:
        feed = cls().feed
        return lambda delta: bool(delta) and bool(feed(delta).should_stop)

    version = _version(name)
    return Peer(name, DGX_INSTALL, "measured", version,
                Subject(name, version or "?", make,
                        "keeps the whole text of a stream (one string, grown by every delta)"))


def find_peers() -> list[Peer]:
    """Every peer this benchmark knows, loaded when installed."""
    return [load_degen_guard(), load_dgxarley()]


# ---------------------------------------------------------------------------
# One subject, one run


@dataclass(frozen=True)
class LoopStop:
    """Where a subject stopped one loop sample, if it did."""

    sample: str
    chars: int
    loop_start: int
    stopped_at: int | None

    @property
    def after_loop_start(self) -> int | None:
        """Characters the loop ran before the cut (negative: cut before the loop)."""
        return None if self.stopped_at is None else self.stopped_at - self.loop_start


@dataclass(frozen=True)
class SubjectResult:
    """All numbers of one subject."""

    name: str
    version: str
    note: str
    clean: Throughput
    looping: Throughput
    per_delta: PerDelta
    loop_stops: tuple[LoopStop, ...]
    clean_fixed: Throughput | None = None
    """Clean throughput at ``fixed_chars`` deltas, when measured beside the main one."""

    @property
    def false_positives(self) -> int:
        """Stops on clean text."""
        return self.clean.stop_count

    @property
    def loops_stopped(self) -> int:
        return sum(1 for s in self.loop_stops if s.stopped_at is not None)


@dataclass(frozen=True)
class Ratios:
    """How many times faster loopbreak is than a peer (above 1: loopbreak is faster)."""

    clean_throughput: float
    looping_throughput: float
    per_delta_near: float
    per_delta_far: float


def _div(a: float, b: float) -> float:
    return a / b if b > 0 else float("inf")


def _median_ratio(tops: Sequence[float], bottoms: Sequence[float]) -> float:
    """The median of ``tops[k] / bottoms[k]``: figures measured in pairs, side by side."""
    return statistics.median(_div(top, bottom)
                             for top, bottom in zip(tops, bottoms, strict=True))


def throughput_ratio(ours: Throughput, theirs: Throughput) -> float:
    """How many times ``theirs``'s throughput ``ours`` is: with as many passes (measured in
    rounds, the k-th of each side by side), the median of the rounds' ratios, which a change
    in the machine's speed from one round to the next does not sway; else the ratio of the
    medians."""
    if ours.passes != theirs.passes:
        return _div(ours.chars_per_s, theirs.chars_per_s)
    return _median_ratio(ours.rates, theirs.rates)


def ratios(ours: SubjectResult, peer: SubjectResult) -> Ratios:
    """loopbreak over ``peer``: throughput ours/theirs, per-delta cost theirs/ours."""
    return Ratios(
        throughput_ratio(ours.clean, peer.clean),
        throughput_ratio(ours.looping, peer.looping),
        _div(peer.per_delta.near, ours.per_delta.near),
        _div(peer.per_delta.far, ours.per_delta.far),
    )


@dataclass(frozen=True)
class Targets:
    """The targets, judged on loopbreak's reasoning channel (the full rule set), on the
    slowest of the repeated passes: one fast pass does not meet a target."""

    clean_chars_per_s: float
    looping_chars_per_s: float
    growth: float
    far_at: int
    false_positives: int

    @property
    def throughput_clean_met(self) -> bool:
        return self.clean_chars_per_s >= TARGET_CHARS_PER_S

    @property
    def throughput_looping_met(self) -> bool:
        return self.looping_chars_per_s >= TARGET_LOOPING_CHARS_PER_S

    @property
    def flat_met(self) -> bool:
        return self.growth <= TARGET_MAX_GROWTH

    @property
    def all_met(self) -> bool:
        return (self.throughput_clean_met and self.throughput_looping_met and self.flat_met
                and self.false_positives == 0)


def targets(result: SubjectResult) -> Targets:
    return Targets(result.clean.rate_range[0], result.looping.rate_range[0],
                   result.per_delta.growth, result.per_delta.far_at, result.false_positives)


def measure_subject(subject: Subject, clean: Sequence[str], loops: Sequence[LoopInput],
                    plan: StreamPlan, settings: BenchSettings, *,
                    clock: Clock = time.perf_counter_ns,
                    on_progress: Callable[[str, float], None] | None = None,
                    clean_fixed: Sequence[str] = ()) -> SubjectResult:
    """Clean throughput (and at fixed-size deltas, when given), looping throughput and
    per-delta cost of one subject.

    ``on_progress(what, done)`` gets the share done (0..1)."""
    return measure_subjects([subject], clean, loops, plan, settings, clock=clock,
                            on_progress=on_progress, clean_fixed=clean_fixed)[0]


def measure_subjects(subjects: Sequence[Subject], clean: Sequence[str],
                     loops: Sequence[LoopInput], plan: StreamPlan, settings: BenchSettings,
                     *, clock: Clock = time.perf_counter_ns,
                     on_progress: Callable[[str, float], None] | None = None,
                     clean_fixed: Sequence[str] = ()) -> tuple[SubjectResult, ...]:
    """:func:`measure_subject` of every subject, the throughputs measured in rounds (every
    subject a pass in turn), then each subject's per-delta cost.

    ``on_progress(what, done)`` gets the share done (0..1)."""
    def step(what: str, done: float) -> None:
        if on_progress is not None:
            on_progress(what, done)

    if not subjects:
        return ()
    makes = [subject.make for subject in subjects]

    def in_rounds(pieces: Sequence[Sequence[str]], go_on: bool) -> tuple[Throughput, ...]:
        return measure_throughputs(makes, pieces, go_on=go_on, clock=clock,
                                   min_seconds=settings.min_seconds,
                                   min_passes=settings.min_passes,
                                   max_passes=settings.max_passes)

    step("clean text, every subject in turn", 0.0)
    clean_tps = in_rounds([clean], True)
    fixed_tps: Sequence[Throughput | None] = (
        in_rounds([clean_fixed], True) if clean_fixed else [None] * len(subjects))
    step("looping text, every subject in turn", 0.2)
    loop_tps = in_rounds([cut(loop.text, settings.delta_chars) for loop in loops], False)
    share = 0.6 / len(subjects)
    results = []
    for i, subject in enumerate(subjects):
        what = f"{subject.name}: {plan.far_start:,}-char stream"

        def stream_progress(done: float, i: int = i, what: str = what) -> None:
            step(what, 0.4 + share * (i + done))

        stream_progress(0.0)
        per_delta = measure_per_delta(subject.make, plan, stream_seconds=settings.stream_seconds,
                                      clock=clock, on_progress=stream_progress)
        stops = tuple(
            LoopStop(loop.name, len(loop.text), loop.loop_start, s[0] if s else None)
            for loop, s in zip(loops, loop_tps[i].stops, strict=True)
        )
        results.append(SubjectResult(subject.name, subject.version, subject.note,
                                     clean_tps[i], loop_tps[i], per_delta, stops,
                                     fixed_tps[i]))
    return tuple(results)


# ---------------------------------------------------------------------------
# The whole run


@dataclass(frozen=True)
class Machine:
    """Where the numbers were taken: the processor (the same bench reads 2-3x apart on two
    2-core machines that both say x86_64), how busy the machine was (load averages), and
    how much of its time the hypervisor gave to other machines meanwhile (``steal``)."""

    python: str
    implementation: str
    platform: str
    machine: str
    cpu_count: int | None
    load_before: tuple[float, ...] | None = None
    load_after: tuple[float, ...] | None = None
    cpu_model: str | None = None
    steal: float | None = None
    """The share of the CPU time that passed during the run taken by the hypervisor
    (Linux's ``steal``): ``None`` where the system does not say."""

    def describe(self) -> str:
        """One line for people: interpreter, platform, processor, cores, load, steal."""
        return (f"{self.implementation} {self.python} on {self.platform}"
                + (f", {self.cpu_model}" if self.cpu_model else "")
                + f", {self.cpu_count} CPUs"
                + (f", load {self.load_before[0]:g} → {self.load_after[0]:g}"
                   if self.load_before and self.load_after else "")
                + (f", steal {self.steal:.1%}" if self.steal is not None else ""))

    def as_json(self) -> dict[str, Any]:
        return {"python": self.python, "implementation": self.implementation,
                "platform": self.platform, "machine": self.machine,
                "cpu_model": self.cpu_model, "cpu_count": self.cpu_count,
                "load_before": self.load_before, "load_after": self.load_after,
                "steal": self.steal}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Machine:
        """Read back what :meth:`as_json` wrote (its other keys ignored)."""
        def loads(key: str) -> tuple[float, ...] | None:
            value = data.get(key)
            return None if value is None else tuple(value)
        return cls(data["python"], data["implementation"], data["platform"], data["machine"],
                   data["cpu_count"], loads("load_before"), loads("load_after"),
                   data.get("cpu_model"), data.get("steal"))


def load_average() -> tuple[float, ...] | None:
    """1, 5 and 15-minute load averages, where the system keeps them."""
    try:
        return tuple(round(x, 2) for x in os.getloadavg())
    except (AttributeError, OSError):
        return None


def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str | None:
    """The processor's name: Linux's ``/proc/cpuinfo``, else what ``platform`` says."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as info:
            for line in info:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or None


def cpu_times(stat_file: str = "/proc/stat") -> tuple[int, int] | None:
    """The machine's CPU time so far and the hypervisor's share of it (Linux's
    ``/proc/stat``, in clock ticks); ``None`` where the system does not keep them."""
    try:
        with open(stat_file, encoding="ascii") as stat:
            fields = stat.readline().split()
    except (OSError, UnicodeDecodeError):
        return None
    if len(fields) < 9 or fields[0] != "cpu" or not all(f.isdigit() for f in fields[1:9]):
        return None
    # user nice system idle iowait irq softirq steal (guest time is counted in user)
    ticks = [int(f) for f in fields[1:9]]
    return sum(ticks), ticks[7]


def steal_between(before: tuple[int, int] | None, after: tuple[int, int] | None,
                  ) -> float | None:
    """The hypervisor's share of the CPU time between two :func:`cpu_times` readings."""
    if before is None or after is None or after[0] <= before[0]:
        return None
    return round((after[1] - before[1]) / (after[0] - before[0]), 3)


class MachineWatch:
    """Taken at a run's start; :meth:`machine` says where it ran and how busy it was."""

    __slots__ = ("_load", "_times")

    def __init__(self) -> None:
        self._load = load_average()
        self._times = cpu_times()

    def machine(self) -> Machine:
        return Machine(platform.python_version(), platform.python_implementation(),
                       platform.platform(), platform.machine(), os.cpu_count(),
                       self._load, load_average(), cpu_model(),
                       steal_between(self._times, cpu_times()))


@dataclass(frozen=True)
class PeerResult:
    peer: Peer
    result: SubjectResult | None
    ratios: Ratios | None


@dataclass(frozen=True)
class BenchReport:
    """Everything one run measured."""

    settings: BenchSettings
    quick: bool
    machine: Machine
    clean: CleanText
    loops: tuple[LoopInput, ...]
    loopbreak: tuple[SubjectResult, ...]
    """Reasoning channel first (the full rule set; the targets are judged on it)."""
    peers: tuple[PeerResult, ...] = field(default=())

    @property
    def reference(self) -> SubjectResult:
        return self.loopbreak[0]

    @property
    def targets(self) -> Targets:
        return targets(self.reference)


def run_bench(settings: BenchSettings, *, quick: bool = False,
              peers: Sequence[Peer] | None = None, clean: CleanText | None = None,
              clock: Clock = time.perf_counter_ns,
              on_progress: OnProgress | None = None) -> BenchReport:
    """Measure loopbreak (reasoning, then text) and every installed peer."""
    watch = MachineWatch()
    clean = clean if clean is not None else stdlib_text(settings.clean_needed)
    plan = plan_stream(clean.text, settings)
    clean_deltas = cut(clean.text[: settings.clean_chars], settings.delta_chars)
    fixed = settings.fixed_chars
    clean_fixed = cut(clean.text[: settings.clean_chars], fixed) \
        if fixed and fixed != settings.delta_chars else []
    loops = loop_inputs()
    peers = list(peers) if peers is not None else find_peers()
    subjects = [loopbreak_subject(channel) for channel in CHANNELS]
    subjects += [p.subject for p in peers if p.subject is not None]

    with heap_frozen():
        results = measure_subjects(subjects, clean_deltas, loops, plan, settings, clock=clock,
                                   on_progress=on_progress, clean_fixed=clean_fixed)
    if on_progress is not None:
        on_progress("done", 1.0)

    ours = results[: len(CHANNELS)]
    by_name = {r.name: r for r in results[len(CHANNELS) :]}
    peer_results = []
    for peer in peers:
        result = by_name.get(peer.subject.name) if peer.subject is not None else None
        peer_results.append(PeerResult(peer, result,
                                       ratios(ours[0], result) if result else None))
    return BenchReport(settings, quick, watch.machine(), CleanText(
        clean.text[: settings.clean_chars], clean.root, clean.files), tuple(loops),
        tuple(ours), tuple(peer_results))


# ---------------------------------------------------------------------------
# JSON


def _throughput_dict(tp: Throughput) -> dict[str, Any]:
    low, high = tp.rate_range
    return {"chars_per_s": tp.chars_per_s, "chars_per_s_range": [low, high],
            "chars_per_pass": tp.chars_per_pass, "passes": tp.passes}


def subject_dict(result: SubjectResult) -> dict[str, Any]:
    """One subject's numbers, JSON-ready."""
    pd = result.per_delta
    clean = _throughput_dict(result.clean)
    clean["false_positives"] = result.false_positives
    clean["false_positive_offsets"] = list(result.clean.stops[0]) if result.clean.stops else []
    looping = _throughput_dict(result.looping)
    looping["stopped"] = result.loops_stopped
    looping["samples"] = [
        {"sample": s.sample, "chars": s.chars, "loop_start": s.loop_start,
         "stopped_at": s.stopped_at, "after_loop_start": s.after_loop_start}
        for s in result.loop_stops
    ]
    return {
        "name": result.name,
        "version": result.version,
        "note": result.note,
        "clean": clean,
        "clean_fixed": _throughput_dict(result.clean_fixed) if result.clean_fixed else None,
        "looping": looping,
        "per_delta": {
            "near_at": pd.near_at, "far_at": pd.far_at, "far_target": pd.far_target,
            "capped": pd.capped, "ns_near": pd.near, "ns_far": pd.far, "growth": pd.growth,
            "ns_near_windows": list(pd.near_ns), "ns_far_windows": list(pd.far_ns),
            "stopped_at": pd.stopped_at,
        },
    }


def report_dict(report: BenchReport) -> dict[str, Any]:
    """The whole report as one JSON-ready object (``loopbreak bench --json``)."""
    from loopbreak import __version__

    s = report.settings
    t = report.targets
    peers: dict[str, Any] = {}
    ratio_map: dict[str, Any] = {}
    for pr in report.peers:
        peers[pr.peer.name] = {
            "status": pr.peer.status,
            "installed": pr.peer.installed,
            "version": pr.peer.version,
            "install": pr.peer.install,
            "results": subject_dict(pr.result) if pr.result else None,
        }
        ratio_map[pr.peer.name] = None if pr.ratios is None else {
            "clean_throughput": pr.ratios.clean_throughput,
            "looping_throughput": pr.ratios.looping_throughput,
            "per_delta_near": pr.ratios.per_delta_near,
            "per_delta_far": pr.ratios.per_delta_far,
        }
    m = report.machine
    return {
        "loopbreak_version": __version__,
        "quick": report.quick,
        "machine": m.as_json(),
        "settings": {
            "delta_chars": s.delta_chars, "deltas": s.deltas_label,
            "fixed_chars": s.fixed_chars, "clean_chars": s.clean_chars,
            "near_chars": s.near_start, "far_chars": s.far_start,
            "window_deltas": s.window_deltas, "windows": s.windows,
            "min_seconds": s.min_seconds, "max_passes": s.max_passes,
            "stream_seconds": s.stream_seconds,
            "config": "defaults + degeneracy.on_text = true, limits.max_reasoning_chars = 0",
        },
        "inputs": {
            "clean": {"source": "python standard library (.py)", "root": report.clean.root,
                      "files": report.clean.files, "chars": len(report.clean.text)},
            "looping": {"chars": sum(len(lp.text) for lp in report.loops),
                        "samples": [{"name": lp.name, "chars": len(lp.text),
                                     "loop_start": lp.loop_start} for lp in report.loops]},
            "stream": {"chars": s.stream_chars},
        },
        "loopbreak": dict(zip(CHANNELS, map(subject_dict, report.loopbreak), strict=True)),
        "peers": peers,
        "ratios": ratio_map,
        "ratios_meaning": "loopbreak (reasoning) over peer: throughput ours/theirs (the "
                          "median of the rounds' ratios), per-delta cost theirs/ours; above "
                          "1 = loopbreak faster",
        "targets": {
            "chars_per_s": TARGET_CHARS_PER_S,
            "looping_chars_per_s": TARGET_LOOPING_CHARS_PER_S,
            "judged_on": "the slowest pass",
            "max_growth": TARGET_MAX_GROWTH,
            "channel": "reasoning",
            "throughput_clean_met": t.throughput_clean_met,
            "throughput_looping_met": t.throughput_looping_met,
            "flat_met": t.flat_met,
            "flat_measured_at": [s.near_start, t.far_at],
            "false_positives": t.false_positives,
            "all_met": t.all_met,
        },
    }
