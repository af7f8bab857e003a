"""``loopbreak calibrate --agents``: the rules across tool calls on real agent runs.

Scores the labelled runs of the agent corpus under the configuration (stuck runs
steered by the third repeat of their loop and stopped by the fourth; healthy runs
never denied), with the failure of a result read from the host's own flag and from
its text alone; then sweeps each threshold alone, and with ``--loso`` scores each
source under the values every other source chose.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from loopbreak._config import load_config
from loopbreak._errors import InputError
from loopbreak.offline.agent_corpus import (
    MODES,
    SWEEP,
    Tally,
    agent_corpus_dirs,
    evaluate,
    leave_one_source_out,
    load_trajectories,
    sweep,
    tally,
)


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def run_agents(args: argparse.Namespace) -> int:
    from rich.markup import escape
    from rich.table import Table

    from loopbreak.cli import _output

    dirs = agent_corpus_dirs()
    trajectories = load_trajectories(dirs)
    if not trajectories:
        raise InputError("no agent corpus found: run from the repository (agent-corpus/) or "
                         "set LOOPBREAK_AGENT_CORPUS")
    config = load_config(args.config).config
    out = _output.console()
    scores = {reading: evaluate(trajectories, config, reading) for reading in MODES}
    result: dict[str, Any] = {
        "corpus": [str(d) for d in dirs],
        "runs": len(trajectories),
        "scores": {reading: {key: {name: t.as_dict() for name, t in tally(v, key).items()}
                             for key in ("all", "source", "pattern")}
                   for reading, v in scores.items()},
    }
    with _output.progress() as progress:
        task = progress.add_task("sweeping", total=sum(len(v) for v in SWEEP.values()))
        points = sweep(trajectories, config, progress=lambda: progress.advance(task))
    result["sweep"] = [{"key": p.key, "value": p.value, "default": p.default,
                        "flags": p.flags.as_dict(), "text": p.text.as_dict()} for p in points]
    if args.loso:
        result["loso"] = {}
        for reading in MODES:
            held = leave_one_source_out(trajectories, points, config, reading)
            total = Tally()
            for h in held:
                total.merge(h.score)
            result["loso"][reading] = {
                "sources": [{"source": h.source, "chosen": h.chosen, **h.score.as_dict()}
                            for h in held],
                "total": total.as_dict()}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0

    _output.note(escape(f"agent corpus: {', '.join(str(d) for d in dirs)}: "
                        f"{len(trajectories)} runs"))
    for key, title in (("source", "by source"), ("pattern", "by pattern")):
        table = Table(title=f"agent rules at {escape(args.config or 'the defaults')}, {title}",
                      title_justify="left")
        table.add_column(key)
        for reading in MODES:
            table.add_column(f"caught ({reading})", justify="right")
        table.add_column("healthy denied (flags/text)", justify="right")
        table.add_column("healthy steered (flags/text)", justify="right")
        by = {reading: tally(scores[reading], key) for reading in MODES}
        for name in sorted(by["flags"]):
            f, t = by["flags"][name], by["text"][name]
            table.add_row(escape(name),
                          *(f"{s.caught}/{s.stuck} {_pct(s.caught, s.stuck)}" if s.stuck
                            else "-" for s in (f, t)),
                          f"{f.healthy_denied}/{t.healthy_denied} of {f.healthy}",
                          f"{f.healthy_steered}/{t.healthy_steered}")
        f, t = tally(scores["flags"])["all"], tally(scores["text"])["all"]
        table.add_row("all", f"{f.caught}/{f.stuck} {_pct(f.caught, f.stuck)}",
                      f"{t.caught}/{t.stuck} {_pct(t.caught, t.stuck)}",
                      f"{f.healthy_denied}/{t.healthy_denied} of {f.healthy}",
                      f"{f.healthy_steered}/{t.healthy_steered}", style="bold")
        out.print(table)
    table = Table(title="sweep: one key at a time (* shipped)", title_justify="left")
    for name in ("key", "value", "caught (flags)", "caught (text)", "healthy denied",
                 "healthy steered"):
        table.add_column(name, justify="left" if name in ("key", "value") else "right")
    for p in points:
        table.add_row(p.key, escape(f"{p.value}{' *' if p.default else ''}"),
                      f"{p.flags.caught}/{p.flags.stuck}", f"{p.text.caught}/{p.text.stuck}",
                      f"{p.flags.healthy_denied}/{p.text.healthy_denied}",
                      f"{p.flags.healthy_steered}/{p.text.healthy_steered}")
    out.print(table)
    for reading, loso in result.get("loso", {}).items():
        table = Table(title=f"leave one source out ({reading}): each source under the values "
                            "the others chose", title_justify="left")
        for name in ("held out", "caught", "healthy denied", "chosen (differs from shipped)"):
            table.add_column(name)
        for row in loso["sources"]:
            differs = {k: v for k, v in row["chosen"].items()
                       if any(p.key == k and p.value == v and not p.default for p in points)}
            table.add_row(escape(row["source"]), f"{row['caught']}/{row['stuck']}",
                          f"{row['healthy_denied']} of {row['healthy']}",
                          escape(", ".join(f"{k}={v}" for k, v in differs.items()) or "-"))
        total = loso["total"]
        table.add_row("all", f"{total['caught']}/{total['stuck']} "
                      f"{_pct(total['caught'], total['stuck'])}",
                      f"{total['healthy_denied']} of {total['healthy']}", "", style="bold")
        out.print(table)
    return 0
