"""``loopbreak calibrate``: the sweeps that justify every default.

Loops: the real bleeds, loops and stalls of the dsh-loop-guard corpus, the
hand-labelled AlpacaEval loops, every source of the development corpus
(``corpus/``, and ``.corpus-local/`` where present) and the project's generated
loop shapes. Clean: the corpora's clean streams, two strong models' AlpacaEval
answers, every standard-library source file, and the project's clean samples.
Each table marks the shipped default and every setting with zero clean trips.
``--loso`` scores each source under settings chosen on all the others.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from loopbreak._config import load_config
from loopbreak._engine.trip import Channel
from loopbreak._errors import InputError
from loopbreak.offline.calibrate import (
    CaseResult,
    HeldOut,
    SourceScore,
    Sweep,
    SweepRow,
    clean_for,
    leave_one_source_out,
    loso_sweeps,
    run_cases,
    run_sweep,
    score_by_source,
    standard_sweeps,
)
from loopbreak.offline.corpus import (
    LabelledStream,
    alpaca_loops,
    alpaca_outputs,
    corpus_dir,
    dev_corpus,
    dev_corpus_dirs,
    dsh_loop_guard,
    labelled_jsonl,
    sample_streams,
    stdlib_sources,
)

EXAMPLES = """\
examples:
  loopbreak calibrate --only "period cap" --stdlib-every 20
  loopbreak calibrate --cases --config loopbreak.toml
  loopbreak calibrate --loso --json > loso.json
  loopbreak calibrate --agents
  loopbreak calibrate --input mine.jsonl --only novelty > sweeps.txt
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--corpus", metavar="DIR",
                        help="corpus folder (default: $LOOPBREAK_CORPUS or ../shared/corpus)")
    parser.add_argument("--input", action="append", metavar="FILE", default=[],
                        help="labelled JSONL (scan format plus \"label\": \"loop\"|\"clean\", "
                             "optional \"loop_start\"); repeatable")
    parser.add_argument("--only", action="append", metavar="NAME", default=[],
                        help="run only sweeps whose name contains NAME (repeatable)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, metavar="N",
                        help="processes for the clean corpora (default: all cores)")
    parser.add_argument("--stdlib-every", type=int, default=1, metavar="K",
                        help="use every K-th standard-library file (1 = all; for quick runs)")
    parser.add_argument("--cases", action="store_true",
                        help="instead of sweeping, judge every labelled stream under the shipped "
                             "defaults (or --config) and list where each loop was cut")
    parser.add_argument("--loso", action="store_true",
                        help="leave one source out: choose each sweep's setting on every "
                             "source but one, score the one left out, for each source")
    parser.add_argument("--agents", action="store_true",
                        help="the rules across tool calls instead: score the labelled agent "
                             "runs of agent-corpus/ (and .agent-corpus-local/) under the "
                             "defaults (or --config), sweep their thresholds; with --loso, "
                             "leave one source out")
    parser.add_argument("--config", metavar="FILE", help="TOML configuration for --cases and "
                                                         "--agents")
    parser.add_argument("--json", action="store_true", help="print JSON for machines")


def _corpora(args: argparse.Namespace) -> tuple[list[LabelledStream], list[LabelledStream], str]:
    root = corpus_dir(args.corpus)
    real: list[LabelledStream] = []
    note = f"corpus: {root}"
    fix = "pass --corpus DIR or set LOOPBREAK_CORPUS to the folder that holds dsh-loop-guard/"
    if root.is_dir() and not (root / "dsh-loop-guard").is_dir():
        raise InputError(f"{root} is not the shared corpus (no dsh-loop-guard/ in it): {fix}")
    if root.is_dir():
        real = list(dsh_loop_guard(root)) + list(alpaca_outputs(root)) + list(alpaca_loops(root))
    elif args.corpus is not None:
        what = "not a folder" if root.exists() else "no such folder"
        raise InputError(f"--corpus {root}: {what} ({fix})")
    else:
        note = (f"corpus not found at {root} (set LOOPBREAK_CORPUS or pass --corpus); sweeping "
                f"the project's samples, its development corpus and the standard library only")
    dirs = dev_corpus_dirs()
    real += list(dev_corpus(dirs))
    note += "; development corpus: " + (", ".join(str(d) for d in dirs) or "none found")
    own = list(sample_streams())
    for path in args.input:
        own.extend(labelled_jsonl(path))
    loops = [s for s in real + own if s.label == "loop"]
    clean = [s for s in real + own if s.label == "clean"]
    return loops, clean, note


def _check_paths(args: argparse.Namespace) -> None:
    """Options the chosen run would not read, and files that are not there: one line each,
    before anything is loaded."""
    if args.agents and (args.corpus is not None or args.input):
        given = "--corpus" if args.corpus is not None else "--input"
        raise InputError(f"{given} is for the text sweeps; --agents reads the agent corpus "
                         "(agent-corpus/, or set LOOPBREAK_AGENT_CORPUS)")
    if args.config is not None and not (args.cases or args.agents):
        raise InputError("--config applies to --cases and --agents; the sweeps start from the "
                         "shipped defaults")
    for name in args.input:
        path = Path(name)
        if path.is_dir():
            raise InputError(f"--input {path}: a folder, not a labelled JSONL file")
        if not path.exists():
            raise InputError(f"--input {path}: no such file")


def _row_json(row: SweepRow) -> dict[str, Any]:
    return {
        "setting": row.setting,
        "clean_trips": len(row.clean_trips),
        "clean_tripped": row.clean_trips,
        "loop_misses": len(row.misses),
        "missed": row.misses,
        "median_cut": row.median_cut,
        "max_cut": row.max_cut,
        "cuts": row.cuts,
        "default": row.is_default,
    }


def run(args: argparse.Namespace) -> int:
    if args.jobs < 1 or args.stdlib_every < 1:
        raise InputError("--jobs and --stdlib-every must be >= 1")
    _check_paths(args)
    if args.agents:
        from loopbreak.cli.calibrate_agents import run_agents

        return run_agents(args)
    if args.cases:
        return _run_cases(args)
    pool = loso_sweeps() if args.loso else standard_sweeps()
    sweeps = [s for s in pool if not args.only or any(word in s.name for word in args.only)]
    if not sweeps:
        names = ", ".join(s.name for s in pool)
        raise InputError(f"no sweep matches {args.only!r}; sweeps: {names}")
    if args.loso:
        return _run_loso(args, sweeps)
    loops, clean, note = _corpora(args)
    stdlib = {ch: [s for i, s in enumerate(stdlib_sources((ch,))) if i % args.stdlib_every == 0]
              for ch in ("reasoning", "text")}

    from rich.markup import escape

    from loopbreak.cli import _output

    if not args.json:
        _output.note(escape(note))
    results: list[tuple[Sweep, list[SweepRow], int]] = []
    with _output.progress() as progress:
        for sweep in sweeps:
            sweep_clean = clean_for(sweep.channel, clean) + stdlib[sweep.channel]
            passes = 1 if sweep.loosest is not None else len(sweep.settings())
            task = progress.add_task(sweep.name, total=len(sweep_clean) * passes)
            rows = run_sweep(sweep, loops, sweep_clean, jobs=args.jobs,
                             progress=functools.partial(progress.advance, task))
            progress.remove_task(task)
            results.append((sweep, rows, len(sweep_clean)))
    if args.json:
        out = {
            "note": note,
            "loops": len(loops),
            "sweeps": [{"name": s.name, "rule": s.rule, "channel": s.channel,
                        "keys": list(s.keys), "clean_streams": n,
                        "rows": [_row_json(r) for r in rows]} for s, rows, n in results],
        }
        json.dump(out, sys.stdout, ensure_ascii=False)
        sys.stdout.write("\n")
        return 0
    _print_tables(results, len(loops))
    return 0


def _print_tables(results: list[tuple[Sweep, list[SweepRow], int]], loops: int) -> None:
    from rich.markup import escape
    from rich.table import Table

    from loopbreak.cli import _output

    console = _output.console()
    for sweep, rows, n_clean in results:
        table = Table(title=f"{sweep.name}: {loops} loops, {n_clean} clean streams "
                            f"({sweep.channel} channel)", title_justify="left")
        for key in sweep.keys:
            table.add_column(key.split(".", 1)[1], justify="right")
        for name in ("clean trips", "loop misses", "median cut", "max cut", ""):
            table.add_column(name, justify="right")
        for row in rows:
            marks = ("default " if row.is_default else "") + ("0 FP" if not row.clean_trips else "")
            style = "bold" if row.is_default else ("green" if not row.clean_trips else "dim")
            table.add_row(*[str(v) for v in row.setting.values()], str(len(row.clean_trips)),
                          str(len(row.misses)),
                          "-" if row.median_cut is None else f"{row.median_cut:,.0f}",
                          "-" if row.max_cut is None else f"{row.max_cut:,}", marks.strip(),
                          style=style)
        console.print(table)
        default = next((r for r in rows if r.is_default), None)
        if default and (default.clean_trips or default.misses) and _output.show_summary():
            console.print(escape(f"  default trips on: {', '.join(default.clean_trips[:8]) or '-'}"
                                 f"; misses: {', '.join(default.misses[:8]) or '-'}"),
                          highlight=False, soft_wrap=True)


def _run_cases(args: argparse.Namespace) -> int:
    from rich.markup import escape
    from rich.table import Table

    from loopbreak.cli import _output

    config = load_config(args.config).config
    loops, clean, note = _corpora(args)
    stdlib = [s for i, s in enumerate(stdlib_sources()) if i % args.stdlib_every == 0]
    # The reasoning cap is a budget, not a loop rule: large source files exceed it by design.
    uncapped = config.replace(**{"limits.max_reasoning_chars": 0})
    note += "; standard-library files are judged with limits.max_reasoning_chars off"
    with _output.progress() as progress:
        task = progress.add_task("judging", total=len(loops) + len(clean) + len(stdlib))
        advance = functools.partial(progress.advance, task)
        results = run_cases(loops + clean, config, jobs=args.jobs, progress=advance)
        results += run_cases(stdlib, uncapped, jobs=args.jobs, progress=advance)
    loop_results = [r for r in results if r.stream.label == "loop"]
    scores = score_by_source(results)
    groups: dict[str, list[CaseResult]] = {}
    for r in results:
        if r.stream.label == "clean":
            groups.setdefault(r.stream.group, []).append(r)
    if args.json:
        out = {
            "note": note,
            "loops": [{"id": r.stream.id, "group": r.stream.group, "channel": r.stream.channel,
                       "chars": len(r.stream.text), "loop_start": r.stream.loop_start,
                       "rule": r.trip.rule if r.trip else None,
                       "at": r.trip.at if r.trip else None,
                       "offset": r.trip.offset if r.trip else None, "ran": r.ran}
                      for r in loop_results],
            "clean": {g: {"streams": len(rs), "tripped": [
                {"id": r.stream.id, "rule": r.trip.rule, "at": r.trip.at}
                for r in rs if r.trip]} for g, rs in groups.items()},
            "sources": [_score_json(sc) for sc in scores.values()],
        }
        json.dump(out, sys.stdout, ensure_ascii=False)
        sys.stdout.write("\n")
        return 0
    console = _output.console()
    _output.note(escape(note))
    table = Table(title="loops under this configuration", title_justify="left")
    for name in ("loop", "group", "chan", "chars", "starts", "rule", "cut at", "ran"):
        table.add_column(name, justify="left" if name in ("loop", "group", "rule") else "right")
    for r in loop_results:
        s = r.stream
        table.add_row(escape(s.id), escape(s.group), s.channel[:4], f"{len(s.text):,}",
                      "-" if s.loop_start is None else f"{s.loop_start:,}",
                      escape(r.trip.rule) if r.trip else "[red]not cut[/]",
                      f"{r.trip.at:,}" if r.trip else "-",
                      f"{r.ran:,}" if r.ran is not None else "-")
    console.print(table)
    clean_table = Table(title="clean streams", title_justify="left")
    for name in ("group", "streams", "tripped"):
        clean_table.add_column(name, justify="left" if name == "group" else "right")
    for group, rs in groups.items():
        hits = [r for r in rs if r.trip]
        clean_table.add_row(escape(group), f"{len(rs):,}", "0" if not hits else "[red]" + escape(
            ", ".join(f"{r.stream.id} ({r.trip.rule})" for r in hits[:5] if r.trip)) + "[/]")
    console.print(clean_table)
    console.print(_source_table("by source, shipped defaults", scores.values()))
    return 0


def _score_json(score: SourceScore) -> dict[str, Any]:
    return {
        "source": score.source, "loops": score.loops, "cut": score.cut,
        "recall": score.recall, "long_enough": score.long_enough,
        "long_enough_cut": score.long_enough_cut,
        "long_enough_recall": score.long_enough_recall, "in_budget": score.in_budget,
        "clean": score.clean, "clean_trips": score.clean_trips,
        "latency": {kind: {"median": statistics.median(v), "worst": max(v), "cut": len(v)}
                    for kind, v in sorted(score.latencies.items())},
    }


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _source_table(title: str, scores: Iterable[SourceScore],
                  chosen: dict[str, dict[str, Any]] | None = None) -> Any:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    columns = ["source", "loops", "cut", "recall", "long enough", "recall", "in budget",
               "median / worst after start", "clean", "clean trips"]
    if chosen is not None:
        columns.append("settings chosen without it (differ from defaults)")
    for name in columns:
        table.add_column(name, justify="left" if (name[0].isalpha() and name in (
            "source", "median / worst after start", "clean trips")) or name.startswith(
            "settings") else "right")
    for sc in scores:
        lat = ", ".join(f"{kind} {statistics.median(v):,.0f}/{max(v):,}"
                        for kind, v in sorted(sc.latencies.items()))
        row = [escape(sc.source), f"{sc.loops:,}", f"{sc.cut:,}", _pct(sc.recall),
               f"{sc.long_enough:,}", _pct(sc.long_enough_recall), f"{sc.in_budget:,}",
               lat or "-", f"{sc.clean:,}",
               "0" if not sc.clean_trips else f"[red]{len(sc.clean_trips)}[/] "
               + escape(", ".join(sc.clean_trips[:3]))]
        if chosen is not None:
            row.append(escape(", ".join(f"{k}={v}" for k, v in chosen.get(sc.source, {}).items())
                              or "defaults"))
        table.add_row(*row)
    return table


def _run_loso(args: argparse.Namespace, sweeps: list[Sweep]) -> int:
    from rich.markup import escape

    from loopbreak.cli import _output

    loops, clean, note = _corpora(args)
    stdlib = {ch: [s for i, s in enumerate(stdlib_sources((ch,))) if i % args.stdlib_every == 0]
              for ch in ("reasoning", "text")}
    channels: tuple[Channel, ...] = ("reasoning", "text")
    by_channel: dict[Channel, list[LabelledStream]] = {
        ch: clean_for(ch, clean) + stdlib[ch] for ch in channels}
    if not args.json:
        _output.note(escape(note))
    total = sum(len(by_channel[s.channel]) for s in sweeps)
    with _output.progress() as progress:
        task = progress.add_task("sweeping", total=total)
        held: list[HeldOut] = leave_one_source_out(
            sweeps, loops, by_channel, jobs=args.jobs,
            progress=functools.partial(progress.advance, task))
    if args.json:
        json.dump({"note": note, "sweeps": [s.name for s in sweeps],
                   "held_out": [{**_score_json(h.score), "chosen": h.chosen} for h in held]},
                  sys.stdout, ensure_ascii=False)
        sys.stdout.write("\n")
        return 0
    console = _output.console()
    console.print(_source_table("leave one source out: each source scored under settings "
                                "chosen on all the others", [h.score for h in held],
                                {h.source: h.chosen for h in held}))
    return 0
