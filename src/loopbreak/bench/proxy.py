"""What ``loopbreak bench --proxy`` measures: the proxy under many concurrent streams.

Three processes share the machine, each with an event loop of its own (uvloop
where installed):

* the **upstream**: :class:`loopbreak.testing.ScriptedUpstream` answering every
  streaming OpenAI request with the same clean script (reasoning, then text),
  one event every ``1 / chunks_per_s`` seconds. Each content chunk carries, in a
  top-level field of its own (``loopbreak_bench``, which no client or guard reads),
  ``NNNNNN:TTTTTTTTTTTTTTTTTTT|``: its sequence number and the wall-clock time
  (``time.time_ns()``) at which the upstream wrote it to its socket (a fixed-width
  placeholder in the script, filled in as the bytes are written, so the stamp is
  the send time, not the time the event was planned). The delta itself is clean
  text only: a stamp inside it would have the guard judge 26 digits a chunk, which
  no real stream sends (measured at 1,000 streams: 1.8-2.1x the relay's CPU per chunk
  with the stamp judged, 1.44-1.61x without);
* the **proxy**: :class:`loopbreak.proxy.app.ProxyApp` with the default
  configuration, served the way ``loopbreak proxy`` serves it (``uvicorn.Server.run``,
  uvloop when installed), in front of that upstream. Not through
  :class:`~loopbreak.proxy.server.ProxyServer`: it starts uvicorn with
  ``asyncio.run``, which ignores its ``loop`` argument and always runs the standard
  asyncio loop (~35 % more proxy CPU per chunk, measured);
* the **bare relay** (unless ``relay`` is off): that server again, with
  :class:`RelayOnly` in front of the app;
* the **load client**: this process, aiohttp with one connection per stream,
  starting ``streams`` requests spread evenly over ``ramp_seconds`` so that every
  stream is open at once for most of the run.

The same load runs straight at the upstream (the baseline), through a **bare
relay** (the peer: the same server, process and event loop as the proxy, with every
request passed through unjudged, the way the proxy passes paths it does not guard;
what any Python relay on this stack costs here), and through the proxy. A
chunk's latency is the client's receive time (``clock``, by default
``time.time_ns``: the same clock the upstream stamps with, CLOCK_REALTIME, shared
by every process) minus its stamp. The proxy's **added latency** at a quantile is
the through-proxy latency at that quantile minus the direct latency at it (p50,
p99, max): what the proxy costs a chunk beyond the network, the upstream and the
client themselves. Every stream's chunks are checked complete and in order; the
peak of streams held is read from the proxy's own ``loopbreak_streams_active``
gauge and counted by the client; the proxy's memory is its RSS (``VmRSS``) before
the load, at its peak and after; each process's CPU comes from ``/proc/<pid>/stat``
(the client's from :func:`time.process_time`).

The arithmetic (quantiles, order checks, added latency, targets) is in pure
functions over plain values, results are frozen dataclasses; rendering lives in
:mod:`loopbreak.cli.bench`. ``python -m loopbreak.bench.proxy upstream|proxy``
runs one of the two servers as a child (it prints ``PORT <n>`` and serves until
its stdin closes).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import re
import selectors
import subprocess
import sys
import tempfile
import threading
import time
from array import array
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from loopbreak._errors import InputError
from loopbreak.bench.throughput import Clock, Machine, MachineWatch, OnProgress

if TYPE_CHECKING:
    from loopbreak.proxy.app import ProxyApp, Receive, Scope, Send
    from loopbreak.testing import Script

TARGET_STREAMS = 1_000
"""The issue's concurrency target on a 2-core machine."""

TARGET_P99_ADDED_NS = 1_000_000
"""The issue's ceiling on the proxy's added p99 latency per chunk: 1 ms."""

PLACEHOLDER = "~" * 19
"""Where the upstream writes its send time (``time.time_ns()`` has 19 digits)."""

STAMP_FIELD = "loopbreak_bench"
"""The chunk's top-level field that carries its stamp."""

MARK = re.compile(rb'"(\d{6}):(\d{19})\|')
"""A chunk's stamp as it appears in the event's JSON: sequence and send time."""

WARM_MODEL = "loopbreak-bench-warm-up"
"""Requests for this model get a short script with no delays (warming pools up)."""

PROXY_LOOPS = ("auto", "asyncio", "uvloop")

_WARM_CHUNKS = 4
_DONE = b"data: [DONE]"
_STREAMS_GAUGE = re.compile(rb"^loopbreak_streams_active(?:\{[^}]*\})? ([0-9.eE+-]+)$", re.M)


# ---------------------------------------------------------------------------
# Settings


@dataclass(frozen=True)
class ProxyBenchSettings:
    """The load of one run. The defaults finish in well under a minute."""

    streams: int = TARGET_STREAMS
    """Concurrent streams (each on its own connection)."""
    chunks: int = 50
    """Content chunks (stamped deltas) per stream; the first half reasoning, then text."""
    chunks_per_s: float = 5.0
    """Chunks per second in each stream. LLM streams send tens per second, but on two
    cores the three processes together spend ~240 µs of CPU per chunk (proxy ~115,
    upstream ~75, client ~50, measured), so 1,000 streams at 5/s (5,000 chunks/s) keep
    the machine under half busy; at 20/s the proxy's one event loop saturates (it
    tops out near 9,000 chunks/s on a core) and the run measures its queue."""
    ramp_seconds: float = 3.0
    """The streams start evenly spread over this long."""
    piece_chars: int = 12
    """Clean text in each delta (about three tokens); the stamp travels beside it."""
    warmup_streams: int = 8
    """Short streams run before measuring, to open pools and load code."""
    sample_every: float = 0.1
    """Seconds between samples of the proxy's RSS and streams gauge."""
    settle_seconds: float = 0.5
    """Wait after the load before the 'after' memory sample."""
    timeout_seconds: float = 120.0
    """A phase still running after its nominal length plus this is stopped."""
    proxy_loop: str = "auto"
    """The proxy's event loop, as uvicorn's ``--loop`` (``auto``: uvloop when installed,
    which is what ``loopbreak proxy`` runs on)."""
    relay: bool = True
    """Also run the load through a bare relay (the peer the proxy is compared with)."""
    workers: int = 1
    """Processes serving the proxy (and the relay) on one port, as ``loopbreak proxy
    --workers``; their CPU and memory are summed."""

    def __post_init__(self) -> None:
        for name in ("streams", "chunks", "piece_chars", "workers"):
            value = getattr(self, name)
            if value < 1:
                raise InputError(f"{name} must be >= 1, not {value}")
        if self.chunks > 999_999:
            raise InputError(f"chunks must be <= 999999, not {self.chunks}")
        if self.warmup_streams < 0:
            raise InputError(f"warmup_streams must be >= 0, not {self.warmup_streams}")
        for name in ("chunks_per_s", "sample_every", "timeout_seconds"):
            value = getattr(self, name)
            if not value > 0:
                raise InputError(f"{name} must be > 0, not {value}")
        if self.proxy_loop not in PROXY_LOOPS:
            raise InputError(f"proxy_loop must be one of {', '.join(PROXY_LOOPS)}, "
                             f"not {self.proxy_loop!r}")
        for name in ("ramp_seconds", "settle_seconds"):
            value = getattr(self, name)
            if not value >= 0:
                raise InputError(f"{name} must be >= 0, not {value}")

    @property
    def stream_seconds(self) -> float:
        """How long one stream lasts (its chunks at its rate)."""
        return self.chunks / self.chunks_per_s

    @property
    def offered_chunks_per_s(self) -> float:
        """Chunks per second across all streams while every stream is open."""
        return self.streams * self.chunks_per_s

    @property
    def all_open_seconds(self) -> float:
        """How long every stream is open at once (nominally)."""
        return max(0.0, self.stream_seconds - self.ramp_seconds)


QUICK = ProxyBenchSettings(streams=20, chunks=30, chunks_per_s=20.0, ramp_seconds=0.2,
                           warmup_streams=2, sample_every=0.05, settle_seconds=0.2,
                           timeout_seconds=60.0)
"""A few seconds in all: tests and CI smoke runs."""


# ---------------------------------------------------------------------------
# The script the upstream serves


def clean_text(chars: int) -> str:
    """Clean text to cut the deltas from: the standard library's source, as the engine
    benchmark uses (the full rule set stops none of it)."""
    from loopbreak.bench.throughput import stdlib_text

    return stdlib_text(chars).text


def stamp_text(seq: int, stamp: str = PLACEHOLDER) -> str:
    """One chunk's stamp: ``NNNNNN:<stamp>|``."""
    return f"{seq:06d}:{stamp}|"


def stream_script(settings: ProxyBenchSettings, text: str | None = None) -> Script:
    """The script every measured request gets: ``chunks`` clean deltas, each chunk stamped
    beside its delta, the first half reasoning and the rest text, one write each,
    ``1 / chunks_per_s`` s apart."""
    from loopbreak.testing import Reasoning, Script, Text

    n, size = settings.chunks, settings.piece_chars
    text = clean_text(n * size) if text is None else text
    events: list[Reasoning | Text] = []
    for seq in range(n):
        piece = text[seq * size : (seq + 1) * size]
        fields = ((STAMP_FIELD, stamp_text(seq)),)
        events.append(Reasoning(piece, fields) if seq < (n + 1) // 2 else Text(piece, fields))
    return Script(tuple(events), dialect="openai").delivered(delay=1.0 / settings.chunks_per_s)


def warm_script(settings: ProxyBenchSettings, text: str | None = None) -> Script:
    """A short stream with no delays, for warming up."""
    from dataclasses import replace

    from loopbreak.testing import Script

    full = stream_script(replace(settings, chunks=_WARM_CHUNKS), text)
    return Script(full.events, dialect="openai")


def stamp_writes() -> None:
    """Make the scripted upstream (in this process) fill every placeholder with the time
    it writes the bytes. The stamp has the placeholder's width, so the HTTP chunk
    framing computed before the write stays right."""
    from loopbreak.testing import upstream as module

    conn = module._Connection
    original = conn.write
    marker = PLACEHOLDER.encode()

    def write(self: Any, data: bytes) -> bool:
        if marker in data:
            data = data.replace(marker, b"%019d" % time.time_ns())
        return original(self, data)

    conn.write = write  # type: ignore[method-assign]


# ---------------------------------------------------------------------------
# Pure arithmetic


@dataclass(frozen=True)
class Integrity:
    """Whether one stream's (or all streams') chunks arrived complete and in order."""

    expected: int
    received: int
    lost: int
    """Sequence numbers that never arrived."""
    reordered: int
    """Chunks that arrived after a later one."""
    duplicated: int

    @property
    def intact(self) -> bool:
        return self.lost == 0 and self.reordered == 0 and self.duplicated == 0

    def __add__(self, other: Integrity) -> Integrity:
        return Integrity(self.expected + other.expected, self.received + other.received,
                         self.lost + other.lost, self.reordered + other.reordered,
                         self.duplicated + other.duplicated)


NO_CHUNKS = Integrity(0, 0, 0, 0, 0)


def check_sequence(seqs: Sequence[int], expected: int) -> Integrity:
    """Compare the sequence numbers one stream delivered with ``0 .. expected - 1``."""
    seen: set[int] = set()
    reordered = duplicated = 0
    highest = -1
    for seq in seqs:
        if seq in seen:
            duplicated += 1
            continue
        seen.add(seq)
        if seq < highest:
            reordered += 1
        highest = max(highest, seq)
    lost = sum(1 for seq in range(expected) if seq not in seen)
    return Integrity(expected, len(seqs), lost, reordered, duplicated)


def quantile(ordered: Sequence[int], q: float) -> int:
    """The nearest-rank ``q`` quantile of sorted values (``q = 1``: the maximum)."""
    if not ordered:
        raise ValueError("no values")
    if not 0 <= q <= 1:
        raise ValueError(f"q must be in 0..1, not {q}")
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True)
class Latency:
    """A latency distribution, ns; ``count`` 0 means nothing arrived (all fields 0)."""

    count: int
    p50: int
    p90: int
    p99: int
    p999: int
    max: int
    mean: float

    @classmethod
    def of(cls, values: Sequence[int]) -> Latency:
        if not values:
            return cls(0, 0, 0, 0, 0, 0, 0.0)
        ordered = sorted(values)
        return cls(len(ordered), quantile(ordered, 0.5), quantile(ordered, 0.9),
                   quantile(ordered, 0.99), quantile(ordered, 0.999), ordered[-1],
                   sum(ordered) / len(ordered))


@dataclass(frozen=True)
class Added:
    """What the proxy adds to a chunk's latency, ns: through-proxy minus direct, quantile
    by quantile."""

    p50: int
    p99: int
    max: int


def added_latency(direct: Latency, proxied: Latency) -> Added:
    return Added(proxied.p50 - direct.p50, proxied.p99 - direct.p99, proxied.max - direct.max)


@dataclass(frozen=True)
class Memory:
    """The proxy's resident memory, bytes."""

    before: int
    peak: int
    after: int
    streams: int

    @property
    def per_stream(self) -> float:
        """Growth from before the load to its peak, per concurrent stream."""
        return (self.peak - self.before) / self.streams if self.streams else 0.0


@dataclass(frozen=True)
class CPU:
    """CPU seconds one process spent during a phase, and the share of one core."""

    seconds: float
    wall: float

    @property
    def cores(self) -> float:
        return self.seconds / self.wall if self.wall > 0 else 0.0


# ---------------------------------------------------------------------------
# One stream, one phase


@dataclass(frozen=True)
class StreamResult:
    """What the client saw of one stream."""

    status: int | None
    seqs: tuple[int, ...]
    latencies: tuple[int, ...]
    """ns per chunk, in arrival order (receive time minus the upstream's stamp)."""
    arrivals: tuple[int, ...]
    """Each chunk's receive time on the client's clock, ns."""
    done: bool
    """The stream ended with ``data: [DONE]``."""
    error: str | None = None


def scan_events(data: bytes, now: int) -> tuple[list[int], list[int], bool]:
    """Sequence numbers and latencies (``now`` minus each stamp) of the complete events in
    ``data``, and whether the stream's ``[DONE]`` is among them."""
    seqs: list[int] = []
    latencies: list[int] = []
    for match in MARK.finditer(data):
        seqs.append(int(match[1]))
        latencies.append(now - int(match[2]))
    return seqs, latencies, _DONE in data


@dataclass
class _Live:
    """Counters the streams and the sampler share inside one phase."""

    streams: int = 0
    held: int = 0
    held_peak: int = 0
    finished: int = 0
    all_held_at: int | None = None
    """Client clock when every stream was first open at once."""
    first_end_at: int | None = None
    """Client clock when the first stream ended."""
    gauge_peak: int | None = None
    rss_peak: int = 0


def request_body(model: str = "loopbreak-bench") -> bytes:
    return json.dumps({"model": model, "stream": True,
                       "messages": [{"role": "user", "content": "Say something clean."}]}).encode()


_HEADERS = {"content-type": "application/json", "authorization": "Bearer sk-bench"}


async def one_stream(session: Any, url: str, body: bytes, clock: Clock,
                     live: _Live) -> StreamResult:
    """Run one streaming request; stamp each read with ``clock`` when it arrives."""
    seqs = array("l")
    latencies = array("q")
    arrivals = array("q")
    done = False
    status: int | None = None
    held = False
    try:
        async with session.post(url, data=body, headers=_HEADERS) as response:
            status = int(response.status)
            if status != 200:
                await response.read()
                return StreamResult(status, (), (), (), False, f"HTTP {status}")
            held = True
            live.held += 1
            live.held_peak = max(live.held_peak, live.held)
            if live.held == live.streams and live.all_held_at is None:
                live.all_held_at = clock()
            tail = b""
            async for data in response.content.iter_any():
                now = clock()
                buffer = tail + data if tail else data
                end = buffer.rfind(b"\n\n") + 2
                if end < 2:
                    tail = buffer
                    continue
                tail = buffer[end:]
                got, lat, finished = scan_events(buffer[:end], now)
                seqs.extend(got)
                latencies.extend(lat)
                arrivals.extend(now for _ in got)
                done = done or finished
    except asyncio.CancelledError:
        return StreamResult(status, tuple(seqs), tuple(latencies), tuple(arrivals), False,
                            "timed out")
    except Exception as exc:  # a failed stream is counted, not fatal to the run
        return StreamResult(status, tuple(seqs), tuple(latencies), tuple(arrivals), False,
                            f"{type(exc).__name__}: {exc}")
    finally:
        if held:
            live.held -= 1
            if live.first_end_at is None:
                live.first_end_at = clock()
        live.finished += 1
    return StreamResult(status, tuple(seqs), tuple(latencies), tuple(arrivals), done,
                        None if done else "ended without [DONE]")


@dataclass(frozen=True)
class Phase:
    """One load run against one URL (the upstream directly, or the proxy)."""

    name: str
    streams: int
    completed: int
    """Streams that ended with ``[DONE]``, HTTP 200."""
    held_peak: int
    """Most streams the client had open at once."""
    integrity: Integrity
    latency: Latency
    """Every chunk."""
    steady: Latency
    """Chunks received while every stream was open (after the last one started, before
    the first one ended): no connection being set up or torn down."""
    steady_seconds: float
    wall_seconds: float
    """From the first request to the last stream's end."""
    cpu: Mapping[str, CPU]
    """By process: ``client``, ``upstream``, ``proxy``; ``machine``: every process on the
    machine together (Linux)."""
    proxy_streams_peak: int | None = None
    """The proxy's ``loopbreak_streams_active`` at its highest sample (proxy phase)."""
    memory: Memory | None = None
    errors: tuple[str, ...] = ()
    """The first few distinct stream errors, with counts."""

    @property
    def failed(self) -> int:
        return self.streams - self.completed

    @property
    def chunks_per_s(self) -> float:
        """Chunks received per second of the phase, ramp and tail included."""
        return self.integrity.received / self.wall_seconds if self.wall_seconds > 0 else 0.0

    @property
    def other_cores(self) -> float | None:
        """Cores busy with processes other than the bench's three (``None``: unknown)."""
        machine = self.cpu.get("machine")
        if machine is None:
            return None
        ours = sum(c.cores for role, c in self.cpu.items() if role != "machine")
        return max(0.0, machine.cores - ours)

    def cpu_per_chunk(self, role: str) -> float | None:
        """CPU microseconds ``role`` spent per chunk received."""
        cpu = self.cpu.get(role)
        if cpu is None or not self.integrity.received:
            return None
        return cpu.seconds / self.integrity.received * 1e6


def summarise(name: str, results: Sequence[StreamResult], expected: int, *, held_peak: int,
              wall_seconds: float, cpu: Mapping[str, CPU], steady: tuple[int, int] | None = None,
              proxy_streams_peak: int | None = None, memory: Memory | None = None) -> Phase:
    """A phase's numbers from what each stream saw; ``steady`` is the window (client clock,
    ns) when every stream was open."""
    integrity = NO_CHUNKS
    latencies: list[int] = []
    steady_latencies: list[int] = []
    errors: dict[str, int] = {}
    completed = 0
    for result in results:
        integrity = integrity + check_sequence(result.seqs, expected)
        latencies.extend(result.latencies)
        if steady is not None:
            low, high = steady
            steady_latencies.extend(lat for lat, at in zip(result.latencies, result.arrivals)
                                    if low <= at <= high)
        if result.done and result.status == 200 and result.error is None:
            completed += 1
        elif result.error:
            errors[result.error] = errors.get(result.error, 0) + 1
    shown = tuple(f"{count} × {error}" for error, count in sorted(
        errors.items(), key=lambda item: -item[1])[:5])
    steady_seconds = (steady[1] - steady[0]) / 1e9 if steady is not None else 0.0
    return Phase(name, len(results), completed, held_peak, integrity, Latency.of(latencies),
                 Latency.of(steady_latencies), steady_seconds, wall_seconds, dict(cpu),
                 proxy_streams_peak, memory, shown)


# ---------------------------------------------------------------------------
# Processes


def cpu_seconds(pid: int) -> float | None:
    """User plus system CPU seconds of process ``pid`` and every process under it (a
    server's workers; Linux ``/proc``), or ``None``."""
    ticks = None
    for stat in _tree_texts(pid, "stat"):
        fields = stat[stat.rindex(")") + 2 :].split()
        ticks = (ticks or 0) + int(fields[11]) + int(fields[12])
    return None if ticks is None else ticks / os.sysconf("SC_CLK_TCK")


def process_tree(pid: int) -> list[int]:
    """``pid`` and the processes under it (Linux ``/proc``: each thread's ``children``
    file, else a scan of every process's parent; ``[pid]`` where neither reads)."""
    tree, todo = [], [pid]
    parents: dict[int, list[int]] | None = None
    while todo:
        one = todo.pop()
        tree.append(one)
        try:
            todo.extend(int(child) for task in os.listdir(f"/proc/{one}/task")
                        for child in Path(f"/proc/{one}/task/{task}/children").read_text().split())
        except OSError:
            if parents is None:
                parents = _parents()
            todo.extend(parents.get(one, ()))
    return tree


def _parents() -> dict[int, list[int]]:
    """Every process's children, by a scan of ``/proc``."""
    parents: dict[int, list[int]] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                for stat in _tree_texts(int(entry.name), "stat", tree=False):
                    parent = int(stat[stat.rindex(")") + 2 :].split()[1])
                    parents.setdefault(parent, []).append(int(entry.name))
    return parents


def _tree_texts(pid: int, name: str, *, tree: bool = True) -> Iterator[str]:
    """``/proc/PID/name`` of ``pid`` (and, with ``tree``, of every process under it), each
    that could be read."""
    for one in process_tree(pid) if tree else (pid,):
        try:
            yield Path(f"/proc/{one}/{name}").read_text()
        except OSError:
            continue


def machine_cpu_seconds() -> float | None:
    """Busy CPU seconds of the whole machine, every core (Linux ``/proc/stat``), or ``None``."""
    try:
        with open("/proc/stat") as stat:
            fields = stat.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    # user nice system idle iowait irq softirq steal ...: everything but idle and iowait
    ticks = [int(x) for x in fields[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def rss_bytes(pid: int) -> int | None:
    """``VmRSS`` of process ``pid`` and the processes under it, in bytes (Linux ``/proc``),
    or ``None``."""
    total = None
    for status in _tree_texts(pid, "status"):
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total = (total or 0) + int(line.split()[1]) * 1024
    return total


def raise_open_files_limit() -> None:
    """Two sockets per proxied stream: lift the soft descriptor limit to the hard one."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not on Windows
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def new_event_loop() -> tuple[asyncio.AbstractEventLoop, str]:
    """uvloop when installed (as uvicorn picks it), else asyncio's own."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop(), "asyncio"
    return uvloop.new_event_loop(), "uvloop"


def event_loop_name() -> str:
    loop, name = new_event_loop()
    loop.close()
    return name


class Child:
    """One server in a process of its own: ``python -m loopbreak.bench.proxy ROLE ...``.

    Its stderr goes to a temporary file (a full pipe would stall it); the port it
    prints is :attr:`port`; closing its stdin stops it.
    """

    def __init__(self, role: str, args: Sequence[str], *, start_timeout: float = 30.0) -> None:
        self.role = role
        self._args = [sys.executable, "-m", "loopbreak.bench.proxy", role, *args]
        self._timeout = start_timeout
        self._stderr: IO[bytes] | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stderr_text(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        return self._stderr.read().decode("utf-8", "replace")

    def start(self) -> Child:
        import loopbreak

        env = dict(os.environ)
        package_root = str(Path(loopbreak.__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH"))
                                            if p)
        env["PYTHONUNBUFFERED"] = "1"
        # Kept open for the child's whole life and closed in stop().
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115
        self.process = subprocess.Popen(self._args, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=self._stderr, env=env)
        assert self.process.stdout is not None
        line = _read_line(self.process.stdout, self._timeout)
        if not line.startswith(b"PORT "):
            self.stop(keep_stderr=True)
            why = self.stderr_text().strip()[-2000:] or repr(line)
            self.stop()
            raise RuntimeError(f"the bench {self.role} did not start: {why}")
        self.port = int(line.split()[1])
        return self

    def stop(self, *, keep_stderr: bool = False) -> None:
        process, self.process = self.process, None
        if process is not None:
            with contextlib.suppress(OSError):
                assert process.stdin is not None
                process.stdin.close()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            if process.stdout is not None:
                process.stdout.close()
        if self._stderr is not None and not keep_stderr:
            self._stderr.close()
            self._stderr = None

    def __enter__(self) -> Child:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _read_line(stream: IO[bytes], timeout: float) -> bytes:
    """One line from a child's stdout, or ``b""`` when none came within ``timeout``."""
    with selectors.DefaultSelector() as selector:
        selector.register(stream, selectors.EVENT_READ)
        if not selector.select(timeout):
            return b""
    return stream.readline()


# ---------------------------------------------------------------------------
# A phase: warm up, load, sample


@dataclass(frozen=True)
class Target:
    """Where a phase sends its load, and which processes it accounts for."""

    name: str
    url: str
    pids: Mapping[str, int]
    """Servers' process ids by role (``upstream``, ``proxy``)."""
    proxy_pid: int | None = None
    """Set when the load goes through the proxy: its memory and gauge are sampled."""


async def _warm_up(session: Any, url: str, count: int, clock: Clock) -> None:
    if count:
        live = _Live()
        await asyncio.gather(*(one_stream(session, url, request_body(WARM_MODEL), clock, live)
                               for _ in range(count)))


async def _proxy_gauge(session: Any, base: str) -> int | None:
    try:
        async with session.get(f"{base}/metrics") as response:
            text = await response.read()
    except Exception:
        return None
    match = _STREAMS_GAUGE.search(text)
    return int(float(match[1])) if match else None


async def _sample(session: Any, target: Target, base: str, live: _Live, every: float,
                  stop: asyncio.Event, progress: Callable[[], None]) -> None:
    while not stop.is_set():
        if target.proxy_pid is not None:
            rss = rss_bytes(target.proxy_pid)
            if rss is not None:
                live.rss_peak = max(live.rss_peak, rss)
            gauge = await _proxy_gauge(session, base)
            if gauge is not None:
                live.gauge_peak = max(live.gauge_peak or 0, gauge)
        progress()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), every)


def _cpu_now(pids: Mapping[str, int]) -> dict[str, float | None]:
    now: dict[str, float | None] = {"client": time.process_time(),
                                    "machine": machine_cpu_seconds()}
    for role, pid in pids.items():
        now[role] = cpu_seconds(pid)
    return now


async def _phase(target: Target, settings: ProxyBenchSettings, clock: Clock,
                 on_progress: Callable[[float], None]) -> Phase:
    import aiohttp

    base = target.url
    url = f"{base}/v1/chat/completions"
    n = settings.streams
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout,
                                     auto_decompress=False) as session:
        await _warm_up(session, url, settings.warmup_streams, clock)
        rss_before = rss_bytes(target.proxy_pid) if target.proxy_pid is not None else None
        live = _Live(streams=n, rss_peak=rss_before or 0)
        loop = asyncio.get_running_loop()
        body = request_body()
        cpu_before = _cpu_now(target.pids)
        started = loop.time()

        async def scheduled(i: int) -> StreamResult:
            delay = started + settings.ramp_seconds * i / n - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            return await one_stream(session, url, body, clock, live)

        def progress() -> None:
            on_progress(live.finished / n)

        stop = asyncio.Event()
        sampler = asyncio.ensure_future(_sample(session, target, base, live,
                                                settings.sample_every, stop, progress))
        tasks = [asyncio.ensure_future(scheduled(i)) for i in range(n)]
        limit = settings.ramp_seconds + settings.stream_seconds + settings.timeout_seconds
        _, pending = await asyncio.wait(tasks, timeout=limit)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        results = [task.result() if not task.cancelled() and task.exception() is None
                   else StreamResult(None, (), (), (), False, "timed out") for task in tasks]
        wall = loop.time() - started
        cpu_after = _cpu_now(target.pids)
        stop.set()
        await sampler
        memory = None
        if target.proxy_pid is not None and rss_before is not None:
            await asyncio.sleep(settings.settle_seconds)
            rss_peak = max(live.rss_peak, rss_bytes(target.proxy_pid) or 0)
            memory = Memory(rss_before, rss_peak, rss_bytes(target.proxy_pid) or 0, n)
    cpu = {}
    for role, before in cpu_before.items():
        after = cpu_after.get(role)
        if before is not None and after is not None:
            cpu[role] = CPU(after - before, wall)
    on_progress(1.0)
    steady = None
    if live.all_held_at is not None and live.first_end_at is not None \
            and live.first_end_at > live.all_held_at:
        steady = (live.all_held_at, live.first_end_at)
    return summarise(target.name, results, settings.chunks, held_peak=live.held_peak,
                     wall_seconds=wall, cpu=cpu, steady=steady,
                     proxy_streams_peak=live.gauge_peak, memory=memory)


def run_phase(target: Target, settings: ProxyBenchSettings, *, clock: Clock = time.time_ns,
              on_progress: Callable[[float], None] | None = None) -> Phase:
    """Warm up, then run the whole load against ``target`` on a fresh event loop."""
    raise_open_files_limit()
    loop, _ = new_event_loop()
    try:
        return loop.run_until_complete(_phase(target, settings, clock,
                                              on_progress or (lambda done: None)))
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


# ---------------------------------------------------------------------------
# The whole run


@dataclass(frozen=True)
class ProxyTargets:
    """The issue's targets, judged on the through-proxy phase."""

    streams: int
    streams_held: int
    p99_added_ns: int
    lost: int
    reordered: int

    @property
    def at_target_scale(self) -> bool:
        """The run had the target's number of streams (smaller runs cannot meet it)."""
        return self.streams >= TARGET_STREAMS

    @property
    def streams_met(self) -> bool:
        return self.at_target_scale and self.streams_held >= TARGET_STREAMS

    @property
    def latency_met(self) -> bool:
        return self.p99_added_ns < TARGET_P99_ADDED_NS

    @property
    def intact(self) -> bool:
        return self.lost == 0 and self.reordered == 0

    @property
    def all_met(self) -> bool:
        return self.streams_met and self.latency_met and self.intact


@dataclass(frozen=True)
class ProxyBenchReport:
    """Everything one ``bench --proxy`` run measured."""

    settings: ProxyBenchSettings
    quick: bool
    machine: Machine
    event_loop: str
    direct: Phase
    proxied: Phase
    relay: Phase | None = None
    """The same load through the bare relay, when it ran."""

    @property
    def added(self) -> Added:
        return added_latency(self.direct.latency, self.proxied.latency)

    @property
    def relay_added(self) -> Added | None:
        """What the bare relay adds over direct (the floor under the proxy's figure)."""
        if self.relay is None:
            return None
        return added_latency(self.direct.latency, self.relay.latency)

    @property
    def streams_held(self) -> int:
        """Streams the proxy held at once: its own gauge's peak, the client's count when the
        gauge could not be read."""
        peak = self.proxied.proxy_streams_peak
        if peak is None or self.settings.workers > 1:  # the gauge is one worker's
            return self.proxied.held_peak
        return peak

    @property
    def targets(self) -> ProxyTargets:
        p = self.proxied
        return ProxyTargets(self.settings.streams, self.streams_held, self.added.p99,
                            p.integrity.lost + self.direct.integrity.lost,
                            p.integrity.reordered + self.direct.integrity.reordered)


def run_proxy_bench(settings: ProxyBenchSettings, *, quick: bool = False,
                    clock: Clock = time.time_ns,
                    on_progress: OnProgress | None = None) -> ProxyBenchReport:
    """Start the upstream, the proxy and the bare relay in processes of their own,
    then run the load straight at the upstream, through the relay and through the
    proxy."""
    watch = MachineWatch()

    def report(what: str, done: float) -> None:
        if on_progress is not None:
            on_progress(what, done)

    report("starting the upstream and the proxy", 0.0)
    upstream_args = ["--chunks", str(settings.chunks), "--chunks-per-s",
                     repr(settings.chunks_per_s), "--piece-chars", str(settings.piece_chars)]
    phases = 3 if settings.relay else 2
    n = f"{settings.streams:,} streams"

    def progress(what: str, index: int) -> Callable[[float], None]:
        return lambda done: report(what, (index + done) / phases)

    relay = None
    with Child("upstream", upstream_args) as upstream:
        direct = run_phase(Target("direct", upstream.url, {"upstream": upstream.pid}),
                           settings, clock=clock,
                           on_progress=progress(f"{n} straight to the upstream", 0))
        if settings.relay:
            with Child("proxy", [upstream.url, "--loop", settings.proxy_loop,
                                 "--workers", str(settings.workers), "--relay-only"]) as bare:
                pids = {"upstream": upstream.pid, "proxy": bare.pid}
                relay = run_phase(Target("relay", bare.url, pids, bare.pid), settings,
                                  clock=clock,
                                  on_progress=progress(f"{n} through a bare relay", 1))
                _check_alive(upstream, bare)
        with Child("proxy", [upstream.url, "--loop", settings.proxy_loop,
                             "--workers", str(settings.workers)]) as proxy:
            pids = {"upstream": upstream.pid, "proxy": proxy.pid}
            proxied = run_phase(Target("proxy", proxy.url, pids, proxy.pid), settings,
                                clock=clock,
                                on_progress=progress(f"{n} through the proxy", phases - 1))
            _check_alive(upstream, proxy)
    report("done", 1.0)
    return ProxyBenchReport(settings, quick, watch.machine(), event_loop_name(),
                            direct, proxied, relay)


def _check_alive(*children: Child) -> None:
    for child in children:
        if child.process is not None and child.process.poll() is not None:
            raise RuntimeError(f"the bench {child.role} exited during the run: "
                               f"{child.stderr_text().strip()[-2000:]}")


# ---------------------------------------------------------------------------
# JSON


def _ms(ns: float) -> float:
    return round(ns / 1e6, 4)


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def latency_dict(latency: Latency) -> dict[str, Any]:
    return {"count": latency.count, "p50": _ms(latency.p50), "p90": _ms(latency.p90),
            "p99": _ms(latency.p99), "p999": _ms(latency.p999), "max": _ms(latency.max),
            "mean": _ms(latency.mean)}


def phase_dict(phase: Phase) -> dict[str, Any]:
    """One phase's numbers, JSON-ready (latencies in ms)."""
    i = phase.integrity
    out: dict[str, Any] = {
        "streams": phase.streams,
        "completed": phase.completed,
        "failed": phase.failed,
        "held_peak": phase.held_peak,
        "chunks": {"expected": i.expected, "received": i.received, "lost": i.lost,
                   "reordered": i.reordered, "duplicated": i.duplicated},
        "latency_ms": latency_dict(phase.latency),
        "steady_latency_ms": latency_dict(phase.steady),
        "steady_seconds": round(phase.steady_seconds, 3),
        "wall_seconds": round(phase.wall_seconds, 3),
        "chunks_per_s": round(phase.chunks_per_s, 1),
        "cpu": {role: {"seconds": round(c.seconds, 3), "cores": round(c.cores, 3),
                       "us_per_chunk": _round(phase.cpu_per_chunk(role), 1)}
                for role, c in phase.cpu.items()},
        "other_cores": _round(phase.other_cores, 3),
        "errors": list(phase.errors),
    }
    if phase.proxy_streams_peak is not None:
        out["proxy_streams_peak"] = phase.proxy_streams_peak
    if phase.memory is not None:
        out["proxy_memory"] = memory_dict(phase.memory)
    return out


def memory_dict(memory: Memory) -> dict[str, Any]:
    return {"rss_before_bytes": memory.before, "rss_peak_bytes": memory.peak,
            "rss_after_bytes": memory.after, "per_stream_bytes": round(memory.per_stream)}


REPORT_KEYS = ("loopbreak_version", "quick", "machine", "settings", "direct", "proxy",
               "added_latency_ms", "relay", "relay_added_latency_ms", "streams_held",
               "memory", "chunks", "targets")
"""The top-level keys of :func:`proxy_report_dict`."""


def proxy_report_dict(report: ProxyBenchReport) -> dict[str, Any]:
    """The whole report as one JSON-ready object (``loopbreak bench --proxy --json``)."""
    from loopbreak import __version__

    s = report.settings
    m = report.machine
    t = report.targets
    added = report.added
    proxied = report.proxied
    relay_added = report.relay_added
    return {
        "loopbreak_version": __version__,
        "quick": report.quick,
        "machine": {**m.as_json(), "event_loop": report.event_loop},
        "settings": {
            "streams": s.streams, "chunks_per_stream": s.chunks,
            "chunks_per_s_per_stream": s.chunks_per_s,
            "offered_chunks_per_s": s.offered_chunks_per_s,
            "stream_seconds": s.stream_seconds, "ramp_seconds": s.ramp_seconds,
            "all_open_seconds": s.all_open_seconds, "piece_chars": s.piece_chars,
            "content": "clean standard-library source; first half reasoning_content, "
                       "then content",
            "config": "defaults",
            "proxy_loop": s.proxy_loop,
            "workers": s.workers,
            "processes": ("upstream, proxy and load client: one process and event loop each"
                          if s.workers == 1 else
                          f"upstream and load client: one process each; proxy and relay: "
                          f"{s.workers} worker processes each, CPU and memory summed"),
            "relay": "the proxy's server with every request passed through unjudged"
                     if s.relay else None,
        },
        "direct": phase_dict(report.direct),
        "proxy": phase_dict(proxied),
        "added_latency_ms": {"p50": _ms(added.p50), "p99": _ms(added.p99),
                             "max": _ms(added.max)},
        "added_latency_meaning": "through-proxy latency minus direct latency at the same "
                                 "quantile; latency = client receive time minus the "
                                 "upstream's send stamp",
        "relay": phase_dict(report.relay) if report.relay is not None else None,
        "relay_added_latency_ms": None if relay_added is None else {
            "p50": _ms(relay_added.p50), "p99": _ms(relay_added.p99),
            "max": _ms(relay_added.max)},
        "streams_held": report.streams_held,
        "memory": memory_dict(proxied.memory) if proxied.memory is not None else None,
        "chunks": {"expected": proxied.integrity.expected,
                   "received": proxied.integrity.received,
                   "lost": t.lost, "reordered": t.reordered,
                   "duplicated": proxied.integrity.duplicated
                   + report.direct.integrity.duplicated},
        "targets": {
            "streams": TARGET_STREAMS,
            "p99_added_ms": _ms(TARGET_P99_ADDED_NS),
            "at_target_scale": t.at_target_scale,
            "streams_met": t.streams_met,
            "latency_met": t.latency_met,
            "intact": t.intact,
            "all_met": t.all_met,
        },
    }


# ---------------------------------------------------------------------------
# The child processes


def _serve_forever(start: Callable[[], Coroutine[Any, Any, int]],
                   stop: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run ``start`` on a loop, print its port, serve until stdin closes, run ``stop``."""
    loop, _ = new_event_loop()
    asyncio.set_event_loop(loop)
    closed = asyncio.Event()

    def watch_stdin() -> None:
        with contextlib.suppress(OSError, ValueError):
            sys.stdin.buffer.read()
        loop.call_soon_threadsafe(closed.set)

    async def main() -> None:
        port = await start()
        sys.stdout.write(f"PORT {port}\n")
        sys.stdout.flush()
        threading.Thread(target=watch_stdin, daemon=True).start()
        await closed.wait()
        await stop()

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()


def _upstream_main(args: argparse.Namespace) -> None:
    from loopbreak.testing import ScriptedUpstream

    settings = ProxyBenchSettings(chunks=args.chunks, chunks_per_s=args.chunks_per_s,
                                  piece_chars=args.piece_chars)
    text = clean_text(settings.chunks * settings.piece_chars)
    script = stream_script(settings, text)
    warm = warm_script(settings, text)
    stamp_writes()

    def choose(record: Any) -> Any:
        body = record.body
        return warm if isinstance(body, dict) and body.get("model") == WARM_MODEL else None

    upstream = ScriptedUpstream(default=script, choose=choose)

    async def start() -> int:
        await upstream.astart()
        return upstream.port

    _serve_forever(start, upstream.aclose)


class RelayOnly:
    """The bench's peer: a :class:`~loopbreak.proxy.app.ProxyApp` that passes every HTTP
    request through unjudged, the way it passes the paths it does not guard (same
    upstream client, same server), so that what the proxy adds over it is the guard."""

    def __init__(self, app: ProxyApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self.app.passthrough(scope, receive, send)
        else:
            await self.app(scope, receive, send)


def _proxy_main(args: argparse.Namespace) -> None:
    """The proxy served the way ``loopbreak proxy`` serves it (uvicorn's own run, its event
    loop chosen by ``--loop`` as uvicorn chooses), on an ephemeral port; with
    ``--relay-only``, the bare relay."""
    import uvicorn

    from loopbreak._config import Config
    from loopbreak.proxy.app import ProxyApp

    if args.workers > 1:
        _workers_main(args)
        return
    proxy = ProxyApp(args.upstream, config=Config())
    app: ProxyApp | RelayOnly = RelayOnly(proxy) if args.relay_only else proxy
    config = uvicorn.Config(app, host="127.0.0.1", port=0,
                            loop=args.loop, log_level="warning", access_log=False,
                            lifespan="on", timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    from loopbreak.proxy.server import tune_process

    tune_process()

    def report_and_wait() -> None:
        while not server.started and not server.should_exit:
            time.sleep(0.01)
        if server.started:
            port = server.servers[0].sockets[0].getsockname()[1]
            sys.stdout.write(f"PORT {port}\n")
            sys.stdout.flush()
        with contextlib.suppress(OSError, ValueError):
            sys.stdin.buffer.read()
        server.should_exit = True

    threading.Thread(target=report_and_wait, daemon=True).start()
    server.run()


_WORKER_UPSTREAM_ENV = "LOOPBREAK_BENCH_UPSTREAM"
_WORKER_RELAY_ENV = "LOOPBREAK_BENCH_RELAY_ONLY"


def worker_app() -> Any:
    """The app each worker process builds (uvicorn's factory, from the environment)."""
    from loopbreak._config import Config
    from loopbreak.proxy.app import ProxyApp
    from loopbreak.proxy.server import tune_process

    tune_process()
    proxy = ProxyApp(os.environ[_WORKER_UPSTREAM_ENV], config=Config())
    return RelayOnly(proxy) if os.environ.get(_WORKER_RELAY_ENV) == "1" else proxy


def _workers_main(args: argparse.Namespace) -> None:
    """The proxy served by several processes as ``loopbreak proxy --workers`` serves it:
    uvicorn's supervisor binds the port, each worker builds its own app. The port is
    reported once a worker answers; closing stdin stops them all."""
    import signal
    import socket

    import uvicorn

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    os.environ[_WORKER_UPSTREAM_ENV] = args.upstream
    os.environ[_WORKER_RELAY_ENV] = "1" if args.relay_only else "0"

    def report_and_wait() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            except OSError:
                time.sleep(0.05)
                continue
            sys.stdout.write(f"PORT {port}\n")
            sys.stdout.flush()
            break
        with contextlib.suppress(OSError, ValueError):
            sys.stdin.buffer.read()
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=report_and_wait, daemon=True).start()
    uvicorn.run("loopbreak.bench.proxy:worker_app", factory=True, workers=args.workers,
                host="127.0.0.1", port=port, loop=args.loop, log_level="warning",
                access_log=False, timeout_graceful_shutdown=2)


def child_main(argv: Sequence[str]) -> int:
    """``python -m loopbreak.bench.proxy upstream|proxy ...``: one bench server."""
    parser = argparse.ArgumentParser(prog="python -m loopbreak.bench.proxy")
    sub = parser.add_subparsers(dest="role", required=True)
    up = sub.add_parser("upstream")
    up.add_argument("--chunks", type=int, required=True)
    up.add_argument("--chunks-per-s", type=float, required=True)
    up.add_argument("--piece-chars", type=int, required=True)
    px = sub.add_parser("proxy")
    px.add_argument("upstream")
    px.add_argument("--loop", default="auto", choices=PROXY_LOOPS)
    px.add_argument("--workers", type=int, default=1)
    px.add_argument("--relay-only", action="store_true",
                    help="pass every request through unjudged (the bench's peer)")
    args = parser.parse_args(argv)
    raise_open_files_limit()
    if args.role == "upstream":
        _upstream_main(args)
    else:
        _proxy_main(args)
    return 0


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
