"""What ``loopbreak bench --adversarial`` measures: the inputs that could make it crawl.

A guard that is fast on prose and slow on one odd input is a fault: the proxy
judges every stream on one event loop, and inside vLLM the rules run in the
engine step, so one slow stream stalls all the others. Each input here is a
shape that once cost the engine (or its parsers) far more per character than
clean text did, or one a model really produces in a loop:

* engine inputs, fed to loopbreak on both channels and to every installed peer,
  in token-sized deltas (1-character deltas for the flood): a 1-character flood,
  a counting run, one number per line, numbered unique lines, numeric CSV, text
  without a newline, CJK prose, emoji, unique short lines, indented lines, a triangle of
  stars, a staircase of digit lines, rows of SQL inserts, padded tables (their cells
  ASCII, and CJK words). A stop restarts a fresh
  guard (as a proxy starts a new call), so the figure is the cost of judging the
  input however often it trips;
* the parts around the engine: one tool call whose arguments stream in 4-character
  pieces (1 MB), one 4 MB server-sent event read in 16 kB pieces, and a request
  history of 800 calls replayed as the proxy does on every request, each request
  parsed anew from its bytes: cold (a session's first request to a proxy just
  started, nothing kept), from the first message (the results' readings kept, but
  not where the last replay left off: another worker served the request before; the
  replay keeps a checkpoint for the next request, as the proxy's does), the same for a
  session held in Chinese,
  as a session's later requests find it (one call more each, resumed from the
  checkpoint the request before left), and eight such sessions in turn (eight
  agents sharing one proxy); and a later request as the proxy handles it, its
  parsing and the bytes it sends upstream included, and the longest the proxy's
  event loop waits while a session's first request is read (no targets of their
  own: the issue's is the replay's).

Every figure is repeated; the report gives the median and the range. The subjects judge
each engine input in rounds (a pass each in turn), as ``loopbreak bench`` measures them.
"""

from __future__ import annotations

import gc
import json
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from loopbreak._engine.trip import CHANNELS
from loopbreak.bench.throughput import (
    Clock,
    Machine,
    MachineWatch,
    OnProgress,
    Peer,
    Subject,
    Throughput,
    cut,
    heap_frozen,
    loopbreak_subject,
    measure_throughputs,
)

if TYPE_CHECKING:
    from loopbreak._recovery.history import ReplayCheckpoints

TARGET_CHARS_PER_S = 1_000_000
"""No engine input may be judged slower than this."""

TARGET_PART_MS = 50.0
"""A 1 MB tool argument and a 4 MB event, each at most this long."""

TARGET_HISTORY_MS = 10.0
"""An 800-call history replayed at most this long."""


@dataclass(frozen=True)
class AdversarialSettings:
    """Sizes of one run: ``scale`` 1.0 is the full suite (10 MB without a newline, a
    million unique lines); the quick run uses a small fraction."""

    scale: float = 1.0
    passes: int = 3
    """Passes over each engine input (each one timed)."""
    repeats: int = 5
    """Timings of each part around the engine."""


QUICK = AdversarialSettings(scale=0.02, passes=2, repeats=3)


@dataclass(frozen=True)
class EngineInput:
    """One adversarial stream: its name, what it is, its deltas."""

    name: str
    shape: str
    deltas: tuple[str, ...]

    @property
    def chars(self) -> int:
        return sum(map(len, self.deltas))


def engine_inputs(scale: float = 1.0, seed: int = 7) -> list[EngineInput]:
    """The engine inputs, generated from a seed (the same on every run)."""
    rng = random.Random(seed)

    def size(full: int) -> int:
        return max(2_000, int(full * scale))

    def numbered(n: int) -> str:
        return "\n".join(f"item {i}: {rng.randrange(100_000)}" for i in range(n))

    words = ("return", "value", "config", "path", "items", "- name:", "if", "else:", "{", "}")

    def indented(chars: int) -> str:
        lines: list[str] = []
        total = 0
        while total < chars:
            line = " " * rng.randrange(64) + " ".join(rng.choice(words)
                                                       for _ in range(rng.randint(1, 3)))
            lines.append(line)
            total += len(line) + 1
        return "\n".join(lines)[:chars]

    def triangle(chars: int) -> str:
        rows = "".join("*" * k + "\n" for k in range(1, 81))
        return (rows * (chars // len(rows) + 1))[:chars]

    def staircase(chars: int) -> str:
        digits = "1234567890" * 40
        rows = "".join(digits[:k] + "\n" for k in range(1, 401))
        return (rows * (chars // len(rows) + 1))[:chars]

    def padded_tables(chars: int, cells: tuple[str, ...] = (
            "alpha", "beta", "error", "value", "path", "result", "ok", "n/a")) -> str:
        tables: list[str] = []
        total = 0
        while total < chars:
            widths = [rng.choice((12, 20, 60, 250)) for _ in range(rng.randint(2, 5))]
            rows = "\n".join("| " + " | ".join(
                (rng.choice(cells) if rng.random() < 0.6 else str(rng.randrange(10**5))).ljust(w)
                for w in widths) + " |" for _ in range(rng.randint(20, 60)))
            tables.append(rows)
            total += len(rows) + 2
        return "\n\n".join(tables)[:chars]

    def sql_inserts(chars: int) -> str:
        rows = (f"INSERT INTO t VALUES ({i}, '{rng.randrange(100_000)}', {rng.random():.4f});"
                for i in range(chars // 40))
        return "\n".join(rows)[:chars]

    made: list[tuple[str, str, str, int]] = [
        # (name, shape, text, delta chars: 0 = token-sized)
        ("1-char flood", "one character, one character per delta", "." * size(1_000_000), 1),
        ("counting run", "0, 1, 2, 3, ... (trips progression, restarts)",
         ", ".join(map(str, range(size(1_000_000) // 6))), 0),
        ("number per line", "one number per line", "\n".join(
            str(rng.randrange(10**6)) for _ in range(size(1_000_000) // 7)), 0),
        ("numbered lines", "item 17: 48213, never the same twice",
         numbered(size(1_000_000) // 18), 0),
        ("numeric CSV", "8 numbers per row", "\n".join(
            ",".join(str(rng.randrange(1000)) for _ in range(8))
            for _ in range(size(1_000_000) // 30)), 0),
        ("no newline", "letters and spaces, no newline (10 MB at full scale)", "".join(
            rng.choices("abcdefghijklmnopqrstuvwxyz     ", k=size(10_000_000))), 0),
        ("CJK", "CJK characters with full-width punctuation", "".join(
            rng.choice(("，", "。")) if rng.random() < 0.08 else chr(rng.randrange(0x4E00, 0x9FA5))
            for _ in range(size(1_000_000))), 0),
        ("emoji", "pictographs outside the BMP", "".join(
            chr(rng.randrange(0x1F300, 0x1F64F)) for _ in range(size(1_000_000))), 0),
        ("unique lines", "a million unique short lines at full scale", "\n".join(
            f"{rng.randrange(16**6):06x}" for _ in range(size(1_000_000))), 0),
        # A flood's anchor recurs at every shift of the older floods: these once offered
        # cycle ~170 periods a step, each judged (0.3 M chars/s).
        ("indented lines", "a few words a line, indented 0 to 63 spaces", indented(
            size(1_000_000)), 0),
        ("triangle", "lines of stars growing by one to 80, again and again", triangle(
            size(1_000_000)), 0),
        # Each line a flood of ten digits, its shifts recurring in every older line in step
        # with it: cycle judged a dozen periods a step (0.6 M chars/s on reasoning).
        ("staircase", "lines 1, 12, 123, ... growing by one digit to 400, again and again",
         staircase(size(1_000_000)), 0),
        # Rows of data that counter-cycle cuts every ~50 rows, a fresh guard each time meeting
        # the same cycles of rows in another rotation: each rotation's shape was judged anew
        # (0.33-0.38 M chars/s).
        ("SQL inserts", "INSERT INTO t VALUES (17, '48213', 0.4821); one row a line",
         sql_inserts(size(1_000_000)), 0),
        # A cell's padding recurs in every older row's: each shift of an anchor in it was a
        # candidate judged at every delta (0.19-0.32 M chars/s on reasoning).
        ("padded tables", "table rows, cells padded with spaces to 12, 20, 60 or 250",
         padded_tables(size(1_000_000)), 0),
        # The same tables past ASCII: the kernels read such a buffer as 32-bit words kept in
        # step with it (0.83-0.86 M chars/s on reasoning with the listing in Python).
        ("padded tables, CJK cells", "padded tables whose cells hold CJK words",
         padded_tables(size(1_000_000), ("名前", "値", "経路", "結果", "エラー", "正常", "なし",
                                         "項目")), 0),
    ]
    return [EngineInput(name, shape, tuple(cut(text, chars))) for name, shape, text, chars
            in made]


@dataclass(frozen=True)
class EngineResult:
    """One subject on one input."""

    subject: str
    input: str
    throughput: Throughput

    @property
    def chars_per_s(self) -> float:
        return self.throughput.chars_per_s


@dataclass(frozen=True)
class PartResult:
    """One part around the engine: what it did and its timings in milliseconds."""

    name: str
    what: str
    target_ms: float | None
    """``None``: a figure the issue sets no target for, reported beside the others."""
    ms: tuple[float, ...]

    @property
    def median_ms(self) -> float:
        return statistics.median(self.ms)

    @property
    def met(self) -> bool | None:
        return None if self.target_ms is None else max(self.ms) <= self.target_ms


@dataclass(frozen=True)
class AdversarialReport:
    settings: AdversarialSettings
    machine: Machine
    inputs: tuple[EngineInput, ...]
    engine: tuple[EngineResult, ...]
    parts: tuple[PartResult, ...]

    def slowest_loopbreak(self) -> EngineResult:
        """loopbreak's slowest input, on either channel (the target is judged on it)."""
        ours = [r for r in self.engine if r.subject.startswith("loopbreak")]
        return min(ours, key=lambda r: r.throughput.rate_range[0])


def _timed(action: Callable[[], object], repeats: int, clock: Clock) -> tuple[float, ...]:
    out = []
    for _ in range(repeats):
        start = clock()
        action()
        out.append((clock() - start) / 1e6)
    return tuple(out)


def tool_argument_part(repeats: int, scale: float, clock: Clock) -> PartResult:
    """One tool call whose 1 MB of arguments stream in 4-character pieces, read back whole
    and put in canonical form (what the call guard and the tool-failure rule do)."""
    from loopbreak._engine.call_guard import CallGuard
    from loopbreak._engine.tool_failure import canonical_arguments

    content = "x" * max(10_000, int(1_000_000 * scale))
    pieces = cut(json.dumps({"path": "big.txt", "content": content}), 4)

    def run() -> None:
        guard = CallGuard()
        for piece in pieces:
            guard.tool_call_delta("call_1", "", piece)
        guard.close_tool_call("call_1")
        canonical_arguments(guard.tool_calls[0].arguments)

    return PartResult("tool argument", f"{sum(map(len, pieces)):,} chars in 4-char pieces",
                      TARGET_PART_MS, _timed(run, repeats, clock))


def sse_event_part(repeats: int, scale: float, clock: Clock) -> PartResult:
    """One 4 MB server-sent event read in 16 kB pieces."""
    from loopbreak.proxy.sse import SSEParser

    data = b"data: " + b"x" * max(40_000, int(4_000_000 * scale)) + b"\n\n"
    reads = [data[i : i + 16_384] for i in range(0, len(data), 16_384)]

    def run() -> None:
        parser = SSEParser()
        events = [e for chunk in reads for e in parser.feed(chunk)]
        assert len(events) == 1 and len(events[0].raw) == len(data)

    return PartResult("SSE event", f"{len(data):,} bytes in 16 kB reads", TARGET_PART_MS,
                      _timed(run, repeats, clock))


_WORDS = ("the", "file", "read", "check", "test", "module", "value", "error", "line", "return",
          "config", "path", "function", "update", "import", "string", "result")
# A Chinese session's words (its reasoning and answers; its tool output stays `cat -n`'s).
_CHINESE_WORDS = ("我", "需要", "检查", "这个", "文件", "然后", "运行", "测试", "看看", "结果",
                  "是否", "正确", "配置", "路径", "函数", "模块", "，", "。")


def history_body(calls: int = 800, seed: int = 11, chinese: bool = False) -> dict[str, Any]:
    """A chat request whose history holds ``calls`` model calls, each with reasoning, a
    tool call and its result (every third one failing): ~6.5 MB at 800. ``chinese``: the
    user, the reasoning and the answers write Chinese."""
    rng = random.Random(seed)
    words, space = (_CHINESE_WORDS, "") if chinese else (_WORDS, " ")

    def para(n: int) -> str:
        return space.join(rng.choice(words) for _ in range(n))

    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."},
                                      {"role": "user", "content": "Fix the bug. " + para(60)}]
    for i in range(calls):
        messages.append({
            "role": "assistant", "content": "" if chinese and i % 2 else para(30),
            "reasoning_content": para(1000),
            "tool_calls": [{"id": f"call_{i}", "type": "function", "function": {
                "name": "read_file", "arguments": json.dumps({"path": f"src/m{i % 40}.py"})}}],
        })
        # A file read as `cat -n` shows it: numbered lines (digits every line, as real tool
        # output has them).
        first = 1 + 17 * (i % 40)
        lines = [f"{first + n:6d}\t{' '.join(rng.choice(_WORDS) for _ in range(11))}"
                 for n in range(20)]
        result = ("Error: no such file or directory\n" if i % 3 == 0 else "") + "\n".join(lines)
        messages.append({"role": "tool", "tool_call_id": f"call_{i}", "content": result})
    return {"model": "bench", "messages": messages, "stream": True}


def _history_calls(scale: float) -> int:
    return max(20, int(800 * scale))


def _describe(body: dict[str, Any]) -> str:
    calls = sum(1 for m in body["messages"] if m["role"] == "assistant")
    return f"{calls:,} calls, {len(json.dumps(body)) / 1e6:.1f} MB"


def _first_calls(body: dict[str, Any], calls: int) -> dict[str, Any]:
    """``body`` with the first ``calls`` calls of its history."""
    # Two messages before the calls (system, user), then two per call (answer, result).
    return {**body, "messages": body["messages"][: 2 + 2 * calls]}


def _request(body: dict[str, Any], calls: int) -> dict[str, Any]:
    """The request holding the first ``calls`` calls of ``body``'s history, parsed from its
    bytes as the proxy parses every request (fresh objects: nothing is shared with an
    earlier request but what the proxy itself kept)."""
    parsed: dict[str, Any] = json.loads(json.dumps(_first_calls(body, calls)))
    return parsed


def _replayed(requests: Iterator[dict[str, Any]], clock: Clock,
              checkpoints: ReplayCheckpoints | None = None,
              clear: bool = False) -> tuple[float, ...]:
    """Each request replayed as the proxy replays it, timed alone (its parsing is not)."""
    from loopbreak._config import Config
    from loopbreak._recovery.history import clear_caches, replay

    config = Config()
    out = []
    for body in requests:
        if clear:
            clear_caches()
        start = clock()
        replay(body, "openai", config, checkpoints)
        out.append((clock() - start) / 1e6)
    return tuple(out)


def history_cold_part(repeats: int, scale: float, clock: Clock) -> PartResult:
    """A session's first request to a proxy that has just started: nothing kept."""
    from loopbreak.proxy.app import proxy_checkpoints

    calls = _history_calls(scale)
    body = history_body(calls)
    timings: list[float] = []
    for _ in range(repeats):
        timings += _replayed(iter([_request(body, calls)]), clock, proxy_checkpoints(),
                             clear=True)
    return PartResult("history replay, cold", f"{_describe(body)}, a session's first request",
                      TARGET_HISTORY_MS, tuple(timings))


def history_unkept_part(repeats: int, scale: float, clock: Clock) -> PartResult:
    """A later request replayed from the first message: the results' readings kept, but
    not where the session's last replay left off (another worker served it, or the proxy
    dropped its checkpoint to stay within its budget). The replay keeps a checkpoint for
    the session's next request, as the proxy's does."""
    return _unkept("history replay, from the start", "", repeats, scale, clock)


def history_chinese_part(repeats: int, scale: float, clock: Clock) -> PartResult:
    """``history_unkept_part`` for a session held in Chinese: the guard's language follows
    the conversation's last 4,000 characters, asked at every call and result (counting
    them anew each time cost ~0.7 s a request)."""
    return _unkept("history replay, Chinese", "a session held in Chinese, ", repeats, scale,
                   clock, chinese=True)


def _unkept(name: str, held: str, repeats: int, scale: float, clock: Clock,
            chinese: bool = False) -> PartResult:
    from loopbreak.proxy.app import proxy_checkpoints

    calls = _history_calls(scale)
    body = history_body(calls + repeats, chinese=chinese)
    _replayed(iter([_request(body, calls)]), clock)
    timings: list[float] = []
    for k in range(repeats):
        timings += _replayed(iter([_request(body, calls + 1 + k)]), clock, proxy_checkpoints())
    return PartResult(name, f"{_describe(_first_calls(body, calls))}, {held}a later request, "
                      "its checkpoint lost", TARGET_HISTORY_MS, tuple(timings))


def history_part(repeats: int, scale: float, clock: Clock) -> PartResult:
    """A session's later requests, as the proxy meets them: each one the history before and
    the call since, resumed from where the replay of the request before left off."""
    from loopbreak.proxy.app import proxy_checkpoints

    calls = _history_calls(scale)
    body = history_body(calls + repeats)
    kept = proxy_checkpoints()
    _replayed(iter([_request(body, calls)]), clock, kept)
    timings = _replayed((_request(body, calls + 1 + k) for k in range(repeats)), clock, kept)
    return PartResult("history replay", f"{_describe(_first_calls(body, calls))}, a session's "
                      "later requests (one call more each)", TARGET_HISTORY_MS, timings)


def history_request_part(repeats: int, scale: float, clock: Clock) -> PartResult:
    """A session's later requests as the proxy handles each before it goes upstream (in a
    worker thread for a body this long): the body parsed from the client's bytes, the
    history replayed (resumed from the request before), and the bytes to send (this
    history's last calls restate their thinking: each request is sent with the stall rule's
    note added)."""
    from loopbreak._config import Config
    from loopbreak.proxy.app import proxy_checkpoints, read_request

    calls = _history_calls(scale)
    body = history_body(calls + repeats)
    raws = [json.dumps(_first_calls(body, calls + k)).encode() for k in range(repeats + 1)]
    config, kept = Config(), proxy_checkpoints()
    noted = 0

    def handle(raw: bytes) -> None:
        nonlocal noted
        request = read_request(raw, "openai", config, kept)
        if request.bytes_of(request.forwarded) is not raw:
            noted += 1

    handle(raws[0])
    timings = []
    for raw in raws[1:]:
        start = clock()
        handle(raw)
        timings.append((clock() - start) / 1e6)
    return PartResult("history request", f"{_describe(_first_calls(body, calls))}, a later "
                      f"request parsed, replayed and sent ({noted} of {repeats + 1} changed)",
                      None, tuple(timings))


def request_stall_part(repeats: int, scale: float, clock: Clock) -> PartResult:
    """The longest the proxy's event loop waits while it reads a session's first request
    (nothing kept) as it reads every request (``read_request_off_loop``): a task on the
    loop that asks to wake every millisecond measures the gaps between its wakes."""
    import asyncio

    from loopbreak._config import Config
    from loopbreak._recovery.history import clear_caches
    from loopbreak.proxy.app import proxy_checkpoints, read_request_off_loop

    calls = _history_calls(scale)
    body = history_body(calls)
    raw = json.dumps(body).encode()
    config = Config()

    async def longest_wait() -> float:
        reading = asyncio.ensure_future(read_request_off_loop(raw, "openai", config,
                                                              proxy_checkpoints()))
        longest, last = 0, clock()
        while not reading.done():
            await asyncio.sleep(0.001)
            now = clock()
            longest, last = max(longest, now - last), now
        reading.result()
        return longest / 1e6

    timings = []
    for _ in range(repeats):
        clear_caches()
        timings.append(asyncio.run(longest_wait()))
    return PartResult("event-loop wait", f"{_describe(body)}, a session's first request read "
                      "as the proxy reads it; the longest wait of a task on its loop",
                      None, tuple(timings))


SESSIONS_IN_TURN = 8
"""Sessions whose histories the proxy replays in turn (agents sharing one proxy)."""


def history_sessions_part(repeats: int, scale: float, clock: Clock) -> PartResult:
    """Eight sessions of 800 calls, their requests in turn, as a proxy meets eight agents
    at once: every request after the first round timed (``repeats`` rounds), each one call
    longer than the session's request before."""
    from loopbreak._recovery.history import clear_caches
    from loopbreak.proxy.app import proxy_checkpoints

    calls = _history_calls(scale)
    bodies = [history_body(calls + repeats, seed=101 + k) for k in range(SESSIONS_IN_TURN)]
    kept = proxy_checkpoints()
    clear_caches()
    _replayed((_request(body, calls) for body in bodies), clock, kept)
    timings = _replayed((_request(body, calls + 1 + k) for k in range(repeats)
                         for body in bodies), clock, kept)
    return PartResult("history replay, 8 sessions", f"{SESSIONS_IN_TURN} histories of "
                      f"{calls:,} calls in turn, each request after the first round",
                      TARGET_HISTORY_MS, timings)


_PROXY_PARTS = (history_cold_part, history_unkept_part, history_chinese_part, history_part,
                history_sessions_part, history_request_part, request_stall_part)
"""The parts that measure what the proxy does, run as a proxy's collector runs."""


@contextmanager
def _as_in_a_proxy() -> Iterator[None]:
    """The collector and the thread switch interval set as ``loopbreak proxy`` sets them
    (``tune_process``) while a part measures what the proxy does, restored after. Without
    it the millions of deltas this process holds for the engine inputs are walked by every
    full collection a replay triggers: 17-20 ms a warm replay instead of 10-11 (measured),
    a cost of the bench's heap that a proxy's does not have."""
    from loopbreak.proxy.server import tune_process

    thresholds = gc.get_threshold()
    interval = sys.getswitchinterval()
    # heap_frozen restores what was frozen; tune_process's own freeze then takes in nothing
    # new.
    with heap_frozen():
        tune_process()
        try:
            yield
        finally:
            gc.set_threshold(*thresholds)
            sys.setswitchinterval(interval)


def run_adversarial(settings: AdversarialSettings, peers: Sequence[Peer] = (), *,
                    clock: Clock = time.perf_counter_ns,
                    on_progress: OnProgress | None = None) -> AdversarialReport:
    """Every engine input through loopbreak (both channels) and each installed peer, then
    the parts around the engine."""
    watch = MachineWatch()
    inputs = engine_inputs(settings.scale)
    subjects: list[Subject] = [loopbreak_subject(channel) for channel in CHANNELS]
    subjects += [p.subject for p in peers if p.subject is not None]
    results: list[EngineResult] = []
    parts_run = (tool_argument_part, sse_event_part, *_PROXY_PARTS)
    steps = len(inputs) + len(parts_run)
    done = 0
    with heap_frozen():
        for item in inputs:
            if on_progress is not None:
                on_progress(f"{item.name}, every subject in turn", done / steps)
            # In rounds (each subject a pass in turn): a change in the machine's speed
            # weighs on every subject alike.
            tps = measure_throughputs([subject.make for subject in subjects], [item.deltas],
                                      go_on=True, min_seconds=float("inf"),
                                      max_passes=settings.passes, clock=clock)
            results += [EngineResult(subject.name, item.name, tp)
                        for subject, tp in zip(subjects, tps, strict=True)]
            done += 1
    # The inputs (millions of deltas, kept in tuples the collector never examined while the
    # heap was frozen) are the bench's own: collected here, not in the first part timed (the
    # 4 MB event's first pass read 31-52 ms instead of 10-17 once the staircase was added).
    gc.collect()
    parts = []
    for part in parts_run:
        if on_progress is not None:
            on_progress(part.__name__.replace("_part", "").replace("_", " "), done / steps)
        with _as_in_a_proxy() if part in _PROXY_PARTS else nullcontext():
            parts.append(part(settings.repeats, settings.scale, clock))
        done += 1
    if on_progress is not None:
        on_progress("done", 1.0)
    return AdversarialReport(settings, watch.machine(), tuple(inputs), tuple(results), tuple(parts))


def adversarial_dict(report: AdversarialReport) -> dict[str, Any]:
    """The report as one JSON-ready object (``loopbreak bench --adversarial --json``)."""
    from loopbreak import __version__

    slowest = report.slowest_loopbreak()
    return {
        "loopbreak_version": __version__,
        "machine": report.machine.as_json(),
        "settings": {"scale": report.settings.scale, "passes": report.settings.passes,
                     "repeats": report.settings.repeats},
        "inputs": [{"name": i.name, "shape": i.shape, "chars": i.chars, "deltas": len(i.deltas)}
                   for i in report.inputs],
        "engine": [{"subject": r.subject, "input": r.input, "chars_per_s": r.chars_per_s,
                    "chars_per_s_range": list(r.throughput.rate_range),
                    "passes": r.throughput.passes, "stops": r.throughput.stop_count}
                   for r in report.engine],
        "parts": [{"name": p.name, "what": p.what, "ms": list(p.ms), "median_ms": p.median_ms,
                   "target_ms": p.target_ms, "met": p.met} for p in report.parts],
        "targets": {
            "min_chars_per_s": TARGET_CHARS_PER_S,
            "slowest": {"subject": slowest.subject, "input": slowest.input,
                        "chars_per_s_low": slowest.throughput.rate_range[0]},
            "engine_met": slowest.throughput.rate_range[0] >= TARGET_CHARS_PER_S,
            "parts_met": all(p.met for p in report.parts if p.met is not None),
        },
    }

