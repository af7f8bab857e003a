"""``loopbreak bench``: engine speed against the peers a user would pick instead.

Measures, in one process and one run, on the same inputs: throughput (chars/s) of
loopbreak's full rule set on one channel and of each installed peer, on clean
text (the Python standard library's source) and on looping text (the loop
samples, each judged until it is stopped); the per-delta cost at 10 kB and at
1 MB into one stream; and where each subject stopped each loop. People get rich
tables on stdout (with a progress bar on stderr while it measures); ``--json``
prints one JSON object on stdout instead. The measuring lives in :mod:`loopbreak.bench.throughput`.

``loopbreak bench --proxy`` measures the HTTP proxy instead: ``--streams`` concurrent
streams (default 1,000) through it against the scripted upstream on loopback, each
process on its own event loop, the same load also run straight at the upstream;
it reports the latency the proxy adds per chunk (p50/p99/max), the streams it held
at once, its memory per stream, the CPU of every process, and that no chunk was
lost or reordered. The measuring lives in :mod:`loopbreak.bench.proxy`.

A target's verdict (✓ met, ✗ missed) is given only from repeated runs of its figure
(:data:`MIN_RUNS`, not ``--quick``), beside the range those runs gave; otherwise the
figure is shown with "no verdict" and why (:func:`judge`). ``--json`` carries the
same verdicts under ``targets.verdicts``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from loopbreak._errors import InputError
from loopbreak._extras import missing
from loopbreak.bench.throughput import (
    QUICK,
    TARGET_CHARS_PER_S,
    TARGET_LOOPING_CHARS_PER_S,
    TARGET_MAX_GROWTH,
    BenchReport,
    BenchSettings,
    Machine,
    Peer,
    PerDelta,
    Throughput,
    report_dict,
    run_bench,
)

if TYPE_CHECKING:
    from rich.table import Table

    from loopbreak.bench.in_engine import StepCost
    from loopbreak.bench.proxy import Latency, Phase, ProxyBenchReport, ProxyBenchSettings

DEFAULT = BenchSettings()

EXAMPLES = """\
examples:
  loopbreak bench                           engine throughput against installed peers
  loopbreak bench --quick --no-peers        a few seconds: figures only, no verdicts
  loopbreak bench --json > bench.json
  loopbreak bench --adversarial --quick
  loopbreak bench --proxy --streams 200 --chunks-per-s 10
  loopbreak bench --proxy --workers 2
  loopbreak bench --in-engine
  loopbreak bench --in-engine --engine vllm
"""

MIN_RUNS = 3
"""A verdict needs this many timed runs (passes, windows, repeats) of its figure: one run
can be far off (a quick run once showed 21× per-delta growth where reruns gave ~1×)."""

# ``bench --proxy`` defaults as its help shows them (a test holds them equal to
# loopbreak.bench.proxy's presets, which are not imported here: every command pays for
# this module's imports when the parser is built).
PROXY_HELP_DEFAULTS = {"streams": (1000, 20), "chunks_per_s": (5.0, 20.0),
                       "chunks": (50, 30), "ramp_seconds": (3.0, 0.2), "workers": (1, 1)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object on stdout instead of tables")
    parser.add_argument("--quick", action="store_true",
                        help="small sizes: a few seconds (tests, CI smoke runs)")
    parser.add_argument("--delta-chars", type=int, default=DEFAULT.delta_chars, metavar="N",
                        help="characters per delta (default 0: token-sized deltas, cut like a "
                             f"BPE tokenizer's stream; clean text is also measured at "
                             f"{DEFAULT.fixed_chars}-char deltas)")
    parser.add_argument("--seconds", type=float, metavar="S",
                        help="least time spent on each throughput figure, repeating passes "
                             f"(default {DEFAULT.min_seconds:g}; --quick {QUICK.min_seconds:g})")
    parser.add_argument("--clean-chars", type=int, metavar="N",
                        help="clean text per throughput pass "
                             f"(default {DEFAULT.clean_chars:,}; --quick {QUICK.clean_chars:,})")
    parser.add_argument("--far-chars", type=int, metavar="N",
                        help="where the deep per-delta probe starts "
                             f"(default {DEFAULT.far_chars:,}; --quick {QUICK.far_chars:,})")
    parser.add_argument("--stream-seconds", type=float, metavar="S",
                        help="stop feeding a subject the long stream after S seconds and "
                             "probe where it got to (default "
                             f"{DEFAULT.stream_seconds:g}; --quick {QUICK.stream_seconds:g})")
    parser.add_argument("--no-peers", action="store_true",
                        help="measure loopbreak only (with --proxy: skip the bare relay)")
    proxy = parser.add_argument_group(
        "proxy load (--proxy)",
        "many concurrent streams through `loopbreak proxy` against a scripted upstream")
    proxy.add_argument("--proxy", action="store_true",
                       help="measure the proxy under load instead of the engine")
    parser.add_argument("--adversarial", action="store_true",
                        help="measure the inputs that could make the engine crawl instead "
                             "(floods, counting runs, numeric CSV, 10 MB without a newline, "
                             "CJK, emoji, a million unique lines, indented lines, a triangle "
                             "of stars, a staircase of digits, SQL inserts, padded tables "
                             "(ASCII and CJK cells), a 1 MB tool argument, a 4 MB event, an "
                             "800-call history), "
                             "against the peers")
    parser.add_argument("--in-engine", action="store_true",
                        help="measure the transformers stopping criteria's cost per decode "
                             "step with a real model (SmolLM2-135M) at batch 1, 8 and 64, "
                             "beside the step time")
    parser.add_argument("--engine", choices=("transformers", "vllm"),
                        help="with --in-engine: whose generation loop (default transformers; "
                             "vllm: the logits processor inside vLLM's engine, at batch 1, 8 "
                             "and 32)")
    helps = {"streams": "concurrent streams",
             "chunks_per_s": "chunks per second in each stream",
             "chunks": "chunks per stream",
             "ramp_seconds": "start the streams spread over this many seconds",
             "workers": "serve the proxy and the bare relay with N processes, as "
                        "`loopbreak proxy --workers N` does"}
    for name, metavar, kind in (("streams", "N", int), ("chunks_per_s", "R", float),
                                ("chunks", "N", int), ("ramp_seconds", "S", float),
                                ("workers", "N", int)):
        default, quick = PROXY_HELP_DEFAULTS[name]
        proxy.add_argument(f"--{name.replace('_', '-')}", type=kind, metavar=metavar,
                           help=f"{helps[name]} (default {default:g}; --quick {quick:g})")


_SettingsT = TypeVar("_SettingsT", "BenchSettings", "ProxyBenchSettings")


def _given(base: _SettingsT, args: argparse.Namespace, options: tuple[tuple[str, str], ...],
           changes: dict[str, Any], command: str) -> _SettingsT:
    """``base`` with ``changes`` and every option given on the command line (option name,
    settings field), each checked by the settings themselves."""
    for option, name in options:
        value = getattr(args, option, None)
        if value is not None:
            changes[name] = value
    try:
        return dataclasses.replace(base, **changes)
    except InputError as exc:
        raise InputError(f"{command}: {exc}") from None


_OPTIONS = (("seconds", "min_seconds"), ("clean_chars", "clean_chars"),
            ("far_chars", "far_chars"), ("stream_seconds", "stream_seconds"))


def settings_from(args: argparse.Namespace) -> BenchSettings:
    """The preset (default or ``--quick``) with the options given on top."""
    return _given(QUICK if args.quick else DEFAULT, args, _OPTIONS,
                  {"delta_chars": args.delta_chars}, "bench")


@dataclasses.dataclass(frozen=True)
class Verdict:
    """A target judged, or not: ``met`` is None when the runs cannot tell (``why``)."""

    met: bool | None
    why: str = ""
    """Why there is no verdict, or what to know about it (a figure within noise)."""

    @property
    def mark(self) -> str:
        """For people (rich markup): ``✓ met``, ``✗ missed`` or ``– no verdict (why)``."""
        if self.met is None:
            return f"[yellow]– no verdict[/] ({self.why})"
        text = "[green]✓ met[/]" if self.met else "[red]✗ missed[/]"
        return f"{text} ({self.why})" if self.why else text

    def as_json(self) -> dict[str, Any]:
        return {"verdict": {True: "met", False: "missed", None: "no verdict"}[self.met],
                "why": self.why or None}


def _runs(n: int) -> str:
    return f"{n} run{'' if n == 1 else 's'}"


def judge(met: bool, runs: int, *, quick: bool = False) -> Verdict:
    """``met`` as a verdict when it was judged on ``runs`` ≥ :data:`MIN_RUNS` repeated
    runs of a full-size (not ``--quick``) measurement; else no verdict."""
    why = [reason for reason, no in (("--quick", quick), (_runs(runs), runs < MIN_RUNS)) if no]
    return Verdict(None, ", ".join(why)) if why else Verdict(met)


def judge_added(added_ns: Sequence[float], target_ns: float, *,
                quick: bool = False) -> Verdict:
    """Latency a relay adds (through it minus direct, per run) against ``target_ns``:
    met when every run added less. A negative figure is noise (a relay cannot make a
    chunk arrive sooner): it counts as nothing added, and the verdict says so."""
    verdict = judge(bool(added_ns) and max(added_ns) < target_ns, len(added_ns), quick=quick)
    below = sum(a < 0 for a in added_ns)
    if not below:
        return verdict
    noise = (f"within noise: below zero in {below} of {_runs(len(added_ns))}"
             if len(added_ns) > 1 else "within noise: below zero")
    return Verdict(verdict.met, f"{verdict.why}; {noise}" if verdict.why else noise)


def _range(values: Sequence[float], fmt: Callable[[float], str], unit: str) -> str:
    """``(low–high over N units)``, or ``(1 unit)``."""
    units = unit if len(values) == 1 else unit + ("es" if unit.endswith("s") else "s")
    if len(values) < 2:
        return f"({len(values)} {units})"
    return f"({fmt(min(values))}–{fmt(max(values))} over {len(values)} {units})"


@contextlib.contextmanager
def _progress(first: str) -> Iterator[Callable[[str, float], None]]:
    """A transient progress bar on stderr; yields the ``on_progress(what, done)`` to feed it."""
    from rich.progress import BarColumn, TextColumn, TimeElapsedColumn

    from loopbreak.cli import _output

    columns = (TextColumn("[progress.description]{task.description}"), BarColumn(),
               TextColumn("{task.percentage:>3.0f}%"), TimeElapsedColumn())
    with _output.progress(*columns) as progress:
        task = progress.add_task(first, total=1.0)

        def on_progress(what: str, done: float) -> None:
            progress.update(task, description=what, completed=done)

        yield on_progress


def _print_json(data: dict[str, Any]) -> int:
    sys.stdout.write(json.dumps(data) + "\n")
    sys.stdout.flush()
    return 0


def _measure(settings: BenchSettings, args: argparse.Namespace) -> BenchReport:
    peers: list[Peer] | None = [] if args.no_peers else None
    with _progress("reading the standard library") as on_progress:
        return run_bench(settings, quick=args.quick, peers=peers, on_progress=on_progress)


_PROXY_OPTIONS = (("streams", "streams"), ("chunks_per_s", "chunks_per_s"),
                  ("chunks", "chunks"), ("ramp_seconds", "ramp_seconds"),
                  ("workers", "workers"))


def proxy_settings_from(args: argparse.Namespace) -> ProxyBenchSettings:
    """The proxy preset (default or ``--quick``) with the options given on top."""
    from loopbreak.bench.proxy import QUICK as PROXY_QUICK
    from loopbreak.bench.proxy import ProxyBenchSettings

    return _given(PROXY_QUICK if args.quick else ProxyBenchSettings(), args, _PROXY_OPTIONS,
                  {"relay": not args.no_peers}, "bench --proxy")


def _measure_proxy(settings: ProxyBenchSettings, args: argparse.Namespace) -> ProxyBenchReport:
    from loopbreak.bench.proxy import run_proxy_bench

    with _progress("starting") as on_progress:
        try:
            return run_proxy_bench(settings, quick=args.quick, on_progress=on_progress)
        except ImportError as exc:
            raise missing("bench --proxy", exc.name or "the proxy extra", "proxy",
                          exc) from None
        except RuntimeError as exc:
            raise InputError(f"bench --proxy: {exc}") from None


def _run_proxy(args: argparse.Namespace) -> int:
    from loopbreak.bench.proxy import proxy_report_dict

    settings = proxy_settings_from(args)
    report = _measure_proxy(settings, args)
    if args.json:
        data = proxy_report_dict(report)
        data["targets"]["verdicts"] = {
            name: v.as_json() for name, v in proxy_verdicts(report).items()}
        return _print_json(data)
    render_proxy(report)
    return 0


def _run_adversarial(args: argparse.Namespace) -> int:
    from loopbreak.bench.adversarial import QUICK as ADV_QUICK
    from loopbreak.bench.adversarial import (
        AdversarialSettings,
        adversarial_dict,
        run_adversarial,
    )
    from loopbreak.bench.throughput import find_peers

    settings = ADV_QUICK if args.quick else AdversarialSettings()
    peers = [] if args.no_peers else find_peers()
    with _progress("making the inputs") as on_progress:
        report = run_adversarial(settings, peers, on_progress=on_progress)
    data = adversarial_dict(report)
    quick = bool(args.quick)
    if args.json:
        data["targets"]["verdicts"] = {
            name: v.as_json() for name, v in adversarial_verdicts(data, quick).items()}
        return _print_json(data)
    render_adversarial(data, quick=quick)
    return 0


def _run_in_engine(args: argparse.Namespace) -> int:
    if getattr(args, "engine", None) == "vllm":
        return _run_in_engine_vllm(args)
    from loopbreak.bench.in_engine import QUICK as ENGINE_QUICK
    from loopbreak.bench.in_engine import (
        TARGET_MS_PER_STEP,
        EngineSettings,
        engine_dict,
        run_engine_bench,
    )
    from loopbreak.cli import _output

    settings = ENGINE_QUICK if args.quick else EngineSettings()
    with _progress("loading") as on_progress:
        report = run_engine_bench(settings, on_progress=on_progress)
    met = report.met()
    verdict = None if met is None else judge(met, settings.runs, quick=bool(args.quick))
    if args.json:
        data = engine_dict(report)
        data["verdict"] = None if verdict is None else verdict.as_json()
        return _print_json(data)
    console = _output.console()
    _machine_line("loopbreak bench --in-engine", report.machine, quick=bool(args.quick))
    console.print(_costs_table(f"In-engine: transformers stopping criteria, {report.model}, "
                               f"{settings.new_tokens} new tokens, {settings.runs} runs "
                               "(ranges)", "criteria ms/step", report.costs))
    if verdict is not None:
        at_64 = next(c for c in report.costs if c.batch == 64)
        console.print(f"  {verdict.mark}  criteria ≤ {TARGET_MS_PER_STEP:g} ms per step at "
                      "batch 64 in every run: "
                      f"{_range(at_64.guard_ms, lambda x: f'{x:.3f}', 'run')} ms")
    return 0


def _run_in_engine_vllm(args: argparse.Namespace) -> int:
    import os

    # vLLM logs to stdout unless told otherwise (set before it is imported): keep stdout for
    # the table or the JSON.
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    from loopbreak.bench.in_engine_vllm import DEFAULT as VLLM_DEFAULT
    from loopbreak.bench.in_engine_vllm import QUICK as VLLM_QUICK
    from loopbreak.bench.in_engine_vllm import run_vllm_bench, vllm_dict
    from loopbreak.cli import _output

    settings = VLLM_QUICK if args.quick else VLLM_DEFAULT
    with _progress("loading") as on_progress:
        report = run_vllm_bench(settings, on_progress=on_progress)
    if args.json:
        return _print_json(vllm_dict(report))
    _machine_line("loopbreak bench --in-engine --engine vllm", report.machine,
                  quick=bool(args.quick))
    _output.console().print(_costs_table(
        f"In-engine: vLLM logits processor ({report.vllm}, {report.runner} model runner, "
        f"{report.device}), {report.model}, {settings.new_tokens} new tokens, "
        f"{settings.runs} runs (ranges)", "processor ms/step", report.costs))
    return 0


def _machine_line(command: str, machine: Machine, *, quick: bool, then: str = "") -> None:
    """Which command ran where, ``then`` after it (a note: hidden by ``-q``)."""
    from rich.markup import escape

    from loopbreak.cli import _output

    if _output.show_notes():
        where = machine.describe() + (f", {then}" if then else "")
        _output.console().print(f"[bold]{command}[/]{' (quick)' if quick else ''}: "
                                + escape(where), highlight=False)


def _costs_table(title: str, guard_column: str, costs: Sequence[StepCost]) -> Table:
    """The in-engine table: per batch size, the guard's cost per step beside the step's."""
    from rich.table import Table

    from loopbreak.bench.in_engine import costs_text

    table = Table(title=title, title_justify="left")
    for name in ("batch", guard_column, "step ms", "share", "rows cut"):
        table.add_column(name, justify="right")
    for row in costs_text(costs):
        table.add_row(*row)
    return table


def run(args: argparse.Namespace) -> int:
    if getattr(args, "engine", None) is not None and not getattr(args, "in_engine", False):
        raise InputError("--engine only applies with --in-engine")
    chosen = [flag for flag, on in (("--proxy", getattr(args, "proxy", False)),
                                    ("--adversarial", getattr(args, "adversarial", False)),
                                    ("--in-engine", getattr(args, "in_engine", False))) if on]
    if len(chosen) > 1:
        raise InputError(f"{' and '.join(chosen)} are different benchmarks: run one at a time")
    if getattr(args, "proxy", False):
        return _run_proxy(args)
    if getattr(args, "adversarial", False):
        return _run_adversarial(args)
    if getattr(args, "in_engine", False):
        return _run_in_engine(args)
    given = [f"--{option.replace('_', '-')}" for option, _ in _PROXY_OPTIONS
             if getattr(args, option, None) is not None]
    if given:
        raise InputError(f"{', '.join(given)} only apply with --proxy")
    settings = settings_from(args)
    report = _measure(settings, args)
    if args.json:
        data = report_dict(report)
        data["targets"]["verdicts"] = {
            name: v.as_json() for name, v in engine_verdicts(report).items()}
        data["targets"]["min_runs"] = MIN_RUNS
        return _print_json(data)
    render(report)
    return 0


def engine_verdicts(report: BenchReport) -> dict[str, Verdict]:
    """The engine targets judged: throughput on passes, flatness on probe windows; the
    false positives are counted, not timed, so they always get a verdict."""
    t, ref, quick = report.targets, report.reference, report.quick
    return {
        "throughput_clean": judge(t.throughput_clean_met, ref.clean.passes, quick=quick),
        "throughput_looping": judge(t.throughput_looping_met, ref.looping.passes,
                                    quick=quick),
        "flat": judge(t.flat_met, len(ref.per_delta.far_ns), quick=quick),
        "false_positives": Verdict(t.false_positives == 0),
    }


def adversarial_verdicts(data: dict[str, Any], quick: bool) -> dict[str, Verdict]:
    """``bench --adversarial``'s targets judged on its passes and repeats."""
    t = data["targets"]
    passes = min((r["passes"] for r in data["engine"] if r["subject"].startswith("loopbreak")),
                 default=0)
    repeats = min((len(p["ms"]) for p in data["parts"]), default=0)
    return {"engine": judge(t["engine_met"], passes, quick=quick),
            "parts": judge(t["parts_met"], repeats, quick=quick)}


def proxy_verdicts(report: ProxyBenchReport) -> dict[str, Verdict]:
    """``bench --proxy``'s targets: the latency is one run's, so it gets no verdict; the
    streams held and the chunks lost or reordered are counted, not timed."""
    from loopbreak.bench.proxy import TARGET_P99_ADDED_NS

    t = report.targets
    streams = Verdict(t.streams_met) if t.at_target_scale else Verdict(
        None, f"not run at scale: {report.settings.streams:,} streams")
    return {"streams": streams,
            "latency": judge_added([t.p99_added_ns], TARGET_P99_ADDED_NS, quick=report.quick),
            "intact": Verdict(t.intact)}


# ---------------------------------------------------------------------------
# Tables for people


def render_adversarial(data: dict[str, Any], *, quick: bool = False) -> None:
    """``bench --adversarial`` as tables."""
    from rich.markup import escape
    from rich.table import Table

    from loopbreak.cli import _output

    console = _output.console()
    _machine_line("loopbreak bench --adversarial", Machine.from_json(data["machine"]),
                  quick=quick)
    subjects = list(dict.fromkeys(r["subject"] for r in data["engine"]))
    table = Table(title="Adversarial inputs, million chars/s: median (slowest–fastest pass); "
                        "a stop restarts a fresh guard", title_justify="left")
    table.add_column("input")
    table.add_column("chars", justify="right")
    for name in subjects:
        table.add_column(_short(name), justify="right")
    cells = {(r["subject"], r["input"]): r for r in data["engine"]}
    for item in data["inputs"]:
        row = [item["name"], f"{item['chars']:,}"]
        for name in subjects:
            r = cells[(name, item["name"])]
            low, high = r["chars_per_s_range"]
            row.append(f"{r['chars_per_s'] / 1e6:.2f} ({low / 1e6:.2f}–{high / 1e6:.2f})")
        table.add_row(*row)
    console.print(table)
    parts = Table(title="Around the engine, ms: median (range)", title_justify="left")
    for name in ("part", "what", "ms", "target"):
        parts.add_column(name, justify="left" if name in ("part", "what") else "right")
    for p in data["parts"]:
        parts.add_row(escape(p["name"]), escape(p["what"]),
                      f"{p['median_ms']:.1f} ({min(p['ms']):.1f}–{max(p['ms']):.1f})",
                      "—" if p["target_ms"] is None else f"≤ {p['target_ms']:g}")
    console.print(parts)
    t = data["targets"]
    slowest = t["slowest"]
    verdicts = adversarial_verdicts(data, quick)
    console.print("[bold]Targets[/] (slowest pass of every figure):")
    console.print(f"  {verdicts['engine'].mark}  every input ≥ {t['min_chars_per_s']:,} "
                  f"chars/s for loopbreak: slowest {escape(slowest['input'])} on "
                  f"{escape(slowest['subject'])}, {slowest['chars_per_s_low']:,.0f}",
                  highlight=False)
    console.print(f"  {verdicts['parts'].mark}  every part around the engine within its "
                  "target", highlight=False)


def _rate(x: float) -> str:
    return f"{x:,.0f}"


def _span(tp: Throughput | None) -> str:
    """A throughput as the range of its passes, in millions of chars/s."""
    if tp is None:
        return "—"
    low, high = tp.rate_range
    return f"{low / 1e6:.2f}–{high / 1e6:.2f} M" if tp.passes > 1 else f"{low / 1e6:.2f} M"


def _times(x: float) -> str:
    return f"{x:,.2f}×" if x < 100 else f"{x:,.0f}×"


def _spread(values: Sequence[float], fmt: Callable[[float], str]) -> str:
    """The lowest and highest of repeated measurements, ``—`` for fewer than two."""
    if len(values) < 2:
        return "—"
    return f"{fmt(min(values))}–{fmt(max(values))}"


def _ns(x: float) -> str:
    return f"{x:,.0f}"


def _short(name: str) -> str:
    """A column heading that fits: ``lb`` for loopbreak, long names on two lines."""
    name = name.replace("loopbreak (", "lb\n").rstrip(")")
    return name.replace("llm-degen-guard", "llm-degen-\nguard")


def _growths(pd: PerDelta) -> list[float]:
    """Per-delta growth in each probe window (far over near, the same deltas)."""
    return [f / n for f, n in zip(pd.far_ns, pd.near_ns, strict=True) if n > 0]


def render(report: BenchReport) -> None:
    """Print the report as tables on stdout."""
    from rich.markup import escape
    from rich.table import Table

    from loopbreak.cli import _output

    console = _output.console()
    notes_shown = _output.show_notes()
    s = report.settings
    m = report.machine
    far = report.reference.per_delta.far_target
    if notes_shown:
        _machine_line("loopbreak bench", m, quick=report.quick)
        console.print(escape(
            f"Inputs: clean {len(report.clean.text):,} chars of standard-library source "
            f"({report.clean.files} files, {report.clean.root}); looping "
            f"{len(report.loops)} samples ({sum(len(lp.text) for lp in report.loops):,} "
            f"chars, each judged until stopped); one {s.stream_chars:,}-char clean stream; "
            f"{s.deltas_label} deltas"
            + (f" (clean text at {s.fixed_chars}-char deltas too)." if s.fixed_chars
               and s.fixed_chars != s.delta_chars else ".")), highlight=False)

    results = list(report.loopbreak) + [pr.result for pr in report.peers if pr.result]
    ratios_of = {pr.result.name: pr.ratios for pr in report.peers if pr.result}
    missing = [pr.peer for pr in report.peers if pr.result is None]

    speed = Table(title="Throughput, chars/s: median, and the range over passes "
                        "(× = how many times faster loopbreak (reasoning) is)",
                  title_justify="left")
    speed.add_column("subject")
    fixed = f"clean @{s.fixed_chars}" if s.fixed_chars and s.fixed_chars != s.delta_chars \
        else None
    for name in ("clean", "range", *([fixed] if fixed else []), "looping", "FPs", "cut",
                 "× clean", "× loop"):
        speed.add_column(name, justify="right")
    for r in results:
        ratio = ratios_of.get(r.name)
        speed.add_row(r.name, _rate(r.clean.chars_per_s), _span(r.clean),
                      *([_span(r.clean_fixed)] if fixed else []),
                      _rate(r.looping.chars_per_s), str(r.false_positives),
                      f"{r.loops_stopped}/{len(r.loop_stops)}",
                      "—" if ratio is None else _times(ratio.clean_throughput),
                      "—" if ratio is None else _times(ratio.looping_throughput))
    for peer in missing:
        speed.add_row(escape(peer.name), escape(peer.status),
                      *[""] * (len(speed.columns) - 2))
    console.print(speed)

    cost = Table(title="Per-delta cost, ns, on the same deltas near the start of one stream "
                       "and deep into it", title_justify="left")
    cost.add_column("subject")
    for name in (f"@{s.near_start:,}", f"@{far:,}", "growth", "growth range", "× near",
                 "× far"):
        cost.add_column(name, justify="right")
    for r in results:
        pd = r.per_delta
        ratio = ratios_of.get(r.name)
        cost.add_row(r.name, _ns(pd.near),
                     _ns(pd.far) + (f" (at {pd.far_at:,})" if pd.capped else ""),
                     _times(pd.growth), _spread(_growths(pd), _times),
                     "—" if ratio is None else _times(ratio.per_delta_near),
                     "—" if ratio is None else _times(ratio.per_delta_far))
    console.print(cost)

    stops = Table(title="Characters each loop ran before it was stopped (— = not stopped)",
                  title_justify="left")
    stops.add_column("loop sample")
    stops.add_column("loop at", justify="right")
    for r in results:
        stops.add_column(_short(r.name), justify="right")
    for i, loop in enumerate(report.loops):
        cells = []
        for r in results:
            after = r.loop_stops[i].after_loop_start
            cells.append("—" if after is None else f"{after:,}")
        stops.add_row(loop.name, f"{loop.loop_start:,}", *cells)
    console.print(stops)

    t = report.targets
    ref = report.reference
    v = engine_verdicts(report)
    console.print(f"[bold]Targets[/] (loopbreak, reasoning channel, every rule on; a verdict "
                  f"needs {MIN_RUNS} full-size runs):", highlight=False)
    console.print(f"  {v['throughput_clean'].mark}  clean text ≥ "
                  f"{TARGET_CHARS_PER_S:,} chars/s in the slowest pass: "
                  f"{_rate(t.clean_chars_per_s)} {_range(ref.clean.rates, _rate, 'pass')}",
                  highlight=False)
    console.print(f"  {v['throughput_looping'].mark}  looping text ≥ "
                  f"{TARGET_LOOPING_CHARS_PER_S:,} chars/s in the slowest pass: "
                  f"{_rate(t.looping_chars_per_s)} {_range(ref.looping.rates, _rate, 'pass')}",
                  highlight=False)
    console.print(f"  {v['flat'].mark}  per-delta cost at {t.far_at:,} ≤ "
                  f"{TARGET_MAX_GROWTH}× the cost at {s.near_start:,}: {_times(t.growth)} "
                  f"{_range(_growths(ref.per_delta), _times, 'window')}", highlight=False)
    console.print(f"  {v['false_positives'].mark}  no stop on clean text: "
                  f"{t.false_positives}", highlight=False)
    if not notes_shown:
        return
    notes = [
        "Versions: " + ", ".join(f"{r.name} {r.version}" for r in results) + ".",
        "FPs: stops on clean text; cut: loop samples stopped.",
        "Config: defaults with degeneracy on the text channel too and the reasoning cap off "
        "(one counter; the clean inputs run past its 120,000 chars).",
        f"Per-delta: median of {s.windows} windows of {s.window_deltas} deltas, the same "
        f"deltas at both points (near: fresh guards after {s.near_start:,} chars of context; "
        "far: one guard after the whole clean stream).",
        "Ratios: loopbreak (reasoning) over each peer; above 1 means loopbreak is faster.",
    ]
    for result in results:
        pd = result.per_delta
        if pd.capped:
            notes.append(f"{result.name}: the long stream was capped at {pd.far_at:,} chars "
                         f"after --stream-seconds {s.stream_seconds:g}; its far cost is "
                         f"measured there, not at {pd.far_target:,}.")
        if pd.stopped_at is not None:
            notes.append(f"{result.name}: stopped the clean long stream at "
                         f"{pd.stopped_at:,} (it kept being fed).")
        if result.note:
            notes.append(f"{result.name}: {result.note}.")
    for peer in missing:
        notes.append(f"{peer.name}: {peer.status}; get it with: {peer.install}")
    for note in notes:
        console.print(f"[dim]- {escape(note)}[/]", highlight=False)


# ---------------------------------------------------------------------------
# Proxy load tables


def _ms(ns: float) -> str:
    return f"{ns / 1e6:,.3f}"


def _signed_ms(ns: float) -> str:
    return f"{ns / 1e6:+,.3f}"


def _latency_cells(latency: Latency) -> list[str]:
    if not latency.count:
        return ["0", "—", "—", "—", "—", "—"]
    return [f"{latency.count:,}", _ms(latency.p50), _ms(latency.p90), _ms(latency.p99),
            _ms(latency.p999), _ms(latency.max)]


def _added_cells(direct: Latency, proxied: Latency) -> list[str]:
    if not direct.count or not proxied.count:
        return ["", "—", "—", "—", "—", "—"]
    return ["", _signed_ms(proxied.p50 - direct.p50), _signed_ms(proxied.p90 - direct.p90),
            _signed_ms(proxied.p99 - direct.p99), _signed_ms(proxied.p999 - direct.p999),
            _signed_ms(proxied.max - direct.max)]


def _cores(phase: Phase, role: str) -> str:
    cpu = phase.cpu.get(role)
    if cpu is None:
        return "—"
    per_chunk = phase.cpu_per_chunk(role)
    tail = f" ({per_chunk:,.0f})" if per_chunk is not None and role != "machine" else ""
    return f"{cpu.cores:.2f}{tail}"


def _mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def render_proxy(report: ProxyBenchReport) -> None:
    """Print a ``bench --proxy`` report as tables on stdout."""
    from rich.markup import escape
    from rich.table import Table

    from loopbreak.bench.proxy import TARGET_P99_ADDED_NS, TARGET_STREAMS
    from loopbreak.cli import _output

    console = _output.console()
    notes_shown = _output.show_notes()
    s = report.settings
    m = report.machine
    direct, proxied, relay = report.direct, report.proxied, report.relay
    phases = [("direct", direct)] + ([("relay", relay)] if relay is not None else []) \
        + [("proxy", proxied)]
    if notes_shown:
        _machine_line("loopbreak bench --proxy", m, quick=report.quick,
                      then=report.event_loop)
        console.print(
            f"Load: {s.streams:,} concurrent streams × {s.chunks_per_s:g} chunks/s = "
            f"{s.offered_chunks_per_s:,.0f} chunks/s offered; {s.chunks} chunks per stream "
            f"({s.stream_seconds:g} s, {s.piece_chars} chars of text each and a send stamp "
            f"beside it, reasoning then text, clean), started over {s.ramp_seconds:g} s; "
            f"upstream, proxy and client in "
            + ("a process each." if s.workers == 1 else
               f"processes of their own, the proxy (and the relay) in {s.workers} workers."),
            highlight=False)

    lat = Table(title="Latency per chunk, ms: upstream socket write → client read",
                title_justify="left")
    for name in ("", "chunks", "p50", "p90", "p99", "p99.9", "max"):
        lat.add_column(name, justify="left" if not name else "right")
    for steady in (False, True):
        suffix = ", all open" if steady else ""

        def of(phase: Phase, steady: bool = steady) -> Latency:
            return phase.steady if steady else phase.latency

        for label, phase in phases:
            lat.add_row(label + suffix, *_latency_cells(of(phase)))
        if relay is not None:
            lat.add_row(f"added by the relay{suffix}", *_added_cells(of(direct), of(relay)))
        lat.add_row(f"[bold]added by the proxy{suffix}[/]",
                    *_added_cells(of(direct), of(proxied)))
        if not steady:
            lat.add_section()
    console.print(lat)

    runs = Table(title="Streams and chunks", title_justify="left")
    for name in ("", "ended", "held", "gauge", "chunks", "lost", "reord", "dup", "chunks/s"):
        runs.add_column(name, justify="left" if not name else "right")
    for label, phase in phases:
        i = phase.integrity
        gauge = phase.proxy_streams_peak
        runs.add_row(label, f"{phase.completed:,}/{phase.streams:,}",
                     f"{phase.held_peak:,}", "—" if gauge is None else f"{gauge:,}",
                     f"{i.received:,}", str(i.lost), str(i.reordered), str(i.duplicated),
                     f"{phase.chunks_per_s:,.0f}")
    console.print(runs)

    cpu = Table(title="CPU, cores busy during each run (µs per chunk)", title_justify="left")
    for name in ("", "client", "upstream", "proxy", "others", "machine"):
        cpu.add_column(name, justify="left" if not name else "right")
    for label, phase in phases:
        other = phase.other_cores
        cpu.add_row(label, _cores(phase, "client"), _cores(phase, "upstream"),
                    _cores(phase, "proxy"), "—" if other is None else f"{other:.2f}",
                    _cores(phase, "machine"))
    console.print(cpu)

    if proxied.memory is not None:
        mem = proxied.memory
        console.print(f"[bold]Proxy memory[/] (RSS): {_mib(mem.before)} before, "
                      f"{_mib(mem.peak)} at peak, {_mib(mem.after)} after: "
                      f"[bold]{mem.per_stream / 1024:,.1f} KiB per stream[/]")

    t = report.targets
    v = proxy_verdicts(report)
    console.print("[bold]Targets[/] (through the proxy):")
    if t.at_target_scale:
        console.print(f"  {v['streams'].mark}  {TARGET_STREAMS:,} concurrent streams "
                      f"held: {t.streams_held:,}", highlight=False)
    else:
        console.print(f"  [yellow]– not run[/]  {TARGET_STREAMS:,} concurrent streams: this "
                      f"run held {t.streams_held:,} of {s.streams:,}", highlight=False)
    console.print(f"  {v['latency'].mark}  added p99 per chunk < "
                  f"{TARGET_P99_ADDED_NS / 1e6:g} ms: {_signed_ms(t.p99_added_ns)} ms"
                  + ("" if report.relay_added is None else
                     f" (the bare relay alone: {_signed_ms(report.relay_added.p99)} ms)"),
                  highlight=False)
    console.print(f"  {v['intact'].mark}  no chunk lost or reordered: {t.lost} lost, "
                  f"{t.reordered} reordered", highlight=False)
    if not notes_shown:
        return
    notes = [
        "Latency: the client's receive time minus the send time the upstream wrote into the "
        "chunk (one wall clock for every process); added = proxy (or relay) minus direct, "
        "quantile by quantile.",
        "Relay: the proxy's own server passing every request through unjudged, the floor "
        "under the proxy's figures on this machine (--no-peers skips it).",
        "All open: chunks received while every stream was open ("
        + ", ".join(f"{p.steady_seconds:.1f} s {label}" for label, p in phases)
        + "): no connection being set up or torn down.",
        "Ended: streams that ended with [DONE], of those run; held: most open at once, "
        "counted by the client; gauge: the proxy's loopbreak_streams_active at its highest "
        "sample.",
        "Others: CPU taken by processes outside the bench while it ran, on the same cores.",
        "Verdicts: the latency is one run's, so it gets none; rerun to see how it moves "
        "(a negative added figure is noise: a relay cannot make chunks arrive sooner).",
    ]
    for _, phase in phases:
        for error in phase.errors:
            notes.append(f"{phase.name}: {error}")
    for note in notes:
        console.print(f"[dim]- {escape(note)}[/]", highlight=False)
