"""``loopbreak analyze``: replay recorded sessions and report where each rule would have cut.

With no path it reads ``~/.dsh/sessions`` when that exists, and otherwise a
bundled demo session log (written by the real DeepSeek Harness CLI against this
project's scripted upstream), so a new user sees a real report at once.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from importlib import resources
from pathlib import Path
from typing import Any

from loopbreak._config import Config, load_config
from loopbreak._errors import InputError, LoopbreakError
from loopbreak.offline.analyze import (
    SessionReport,
    analyze_events,
    display_path,
    report_dict,
    summary,
)

DEFAULT_STORE = Path("~/.dsh/sessions")
DEMO_LOG = "demo.session.jsonl"

EXAMPLES = """\
examples:
  loopbreak analyze                              ~/.dsh/sessions, else the bundled demo log
  loopbreak analyze ~/.dsh/sessions --jobs 4 --html report.html
  loopbreak analyze session.jsonl --json
  loopbreak analyze logs/ | grep -A20 'would have been cut'
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="*", metavar="PATH",
                        help="session logs, folders of them, JSONL logs or text files "
                             "(default: ~/.dsh/sessions, else the bundled demo log)")
    parser.add_argument("--json", action="store_true", help="print JSON for machines")
    parser.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report")
    parser.add_argument("--jobs", type=int, default=1, metavar="N",
                        help="files analysed in parallel (default 1)")
    parser.add_argument("--config", metavar="FILE", help="TOML configuration file")


def demo_log() -> Path:
    """The bundled demo session log."""
    return Path(str(resources.files("loopbreak").joinpath("_data").joinpath(DEMO_LOG)))


def default_paths() -> tuple[list[Path], str]:
    store = DEFAULT_STORE.expanduser()
    if store.is_dir() and any(store.iterdir()):
        return [store], f"reading {store}"
    return [demo_log()], ("no path given and no ~/.dsh/sessions: analysing the bundled demo "
                          "session")


def analyze_file(path: Path, config: Config) -> tuple[list[SessionReport], str | None]:
    """Every session in one file, or the one-line reason the file cannot be read."""
    from loopbreak.offline.transcripts import read_path

    try:
        return list(analyze_events(read_path(path), display_path(path), config)), None
    except LoopbreakError as exc:
        return [], str(exc)


def run(args: argparse.Namespace) -> int:
    from loopbreak.cli import _output
    from loopbreak.offline.transcripts import find_sources

    if args.jobs < 1:
        raise InputError(f"--jobs must be >= 1, not {args.jobs}")
    if args.html:  # checked before the analysis, which can take a while
        _output.check_output_file(Path(args.html), f"--html {args.html}", "report.html")
    config = load_config(args.config).config
    note = None
    if args.paths:
        roots = [Path(p) for p in args.paths]
    else:
        roots, note = default_paths()
    files = find_sources(roots)
    if not files:
        raise InputError(f"no session logs or recordings under {', '.join(map(str, roots))}")

    from rich.markup import escape

    from loopbreak.cli import _output

    if note and not args.json:
        _output.note(escape(note))
    reports: list[SessionReport] = []
    errors: list[str] = []
    work = functools.partial(analyze_file, config=config)
    with _output.progress(disable=len(files) < 2) as progress:
        task = progress.add_task("analysing", total=len(files))
        results: list[tuple[list[SessionReport], str | None]] = []
        if args.jobs > 1 and len(files) > 1:
            with ProcessPoolExecutor(min(args.jobs, os.cpu_count() or 1)) as pool:
                for result in pool.map(work, files, chunksize=4):
                    results.append(result)
                    progress.advance(task)
        else:
            for path in files:
                results.append(work(path))
                progress.advance(task)
    for found, error in results:
        reports.extend(found)
        if error:
            errors.append(error)
    if args.html:
        from loopbreak.offline.report import render_html

        try:
            Path(args.html).write_text(render_html(reports), encoding="utf-8")
        except OSError as exc:
            raise InputError(f"cannot write {args.html}: {exc.strerror}") from None
    if args.json:
        out: dict[str, Any] = report_dict(reports)
        out["errors"] = errors
        json.dump(out, sys.stdout, ensure_ascii=False)
        sys.stdout.write("\n")
    else:
        _print(reports, errors)
    if errors:
        print(f"loopbreak: error: {len(errors)} of {len(files)} files could not be read "
              f"(first: {errors[0]})", file=sys.stderr)
        return 2
    return 0


def _unread(read: dict[str, Any]) -> str:
    """What of a file could not be read, and why, in a few words ("" when all was)."""
    parts = []
    bad = int(read.get("bad_rows") or 0)
    if bad:
        first = read.get("first_error")
        parts.append(f"{bad} invalid row{'s' if bad != 1 else ''}"
                     + (f" (first: {first})" if first else ""))
    for kind, count in sorted(dict(read.get("unknown_rows") or {}).items()):
        parts.append(f"{count} row{'s' if count != 1 else ''} of unknown type {kind!r}")
    lost = int(read.get("lost_bytes") or 0)
    if lost:
        parts.append(f"{lost:,} bytes in torn compressed frames")
    return "; ".join(parts)


def _print(reports: list[SessionReport], errors: list[str]) -> None:
    from rich.markup import escape
    from rich.table import Table

    from loopbreak.cli import _output

    console = _output.console()
    # A terminal gets session ids cut to fit and a file name above its session; a pipe gets
    # them whole, one row a line, for grep.
    limit, under = (None, " ") if _output.whole(console) else (28, "\n")
    sessions = Table(title="sessions", title_justify="left")
    not_read: list[str] = []
    for name in ("session", "calls", "cut", "rules", "saved chars", "≈ tokens", "stalls",
                 "tool steer/deny", "unread"):
        sessions.add_column(name, justify="left" if name in ("session", "rules") else "right")
    for r in reports:
        t = r.totals()
        unread = _unread(r.read)
        if unread:
            not_read.append(f"{Path(r.path).name}: {unread}")
        sessions.add_row(
            f"{escape(Path(r.path).name)}{under}[dim]{escape(r.session)}[/]", str(t["calls"]),
            str(t["cut_calls"]),
            escape(", ".join(f"{k} ×{v}" for k, v in t["rules"].items()) or "-"),
            f"{t['saved_chars']:,}", f"{t['saved_tokens']:,}", str(len(r.stalls)),
            f"{t['tool_steers']}/{t['tool_denials']}",
            "see below" if unread else "-")
    console.print(sessions)
    for line in not_read:
        console.print(f"[yellow]not read:[/] {escape(line)}", highlight=False, soft_wrap=True)
    cuts = [(r, c) for r in reports for c in r.calls if c.cut]
    if cuts:
        table = Table(title="calls that would have been cut", title_justify="left")
        for name in ("session", "turn", "step", "channel", "rule", "cut at", "call chars",
                     "saved", "≈ tokens"):
            table.add_column(name, justify="left" if name in ("session", "rule", "channel")
                             else "right")
        for r, c in cuts:
            assert c.cut is not None
            table.add_row(escape(r.session[:limit]), str(c.turn), str(c.step), c.cut.channel,
                          escape(c.cut.rule),
                          f"{c.cut.at:,}", f"{c.chars:,}", f"{c.saved_chars:,}",
                          f"{c.saved_tokens:,}")
        console.print(table)
    actions = [(r, a) for r in reports for a in r.tool_actions]
    if actions:
        table = Table(title="tool rules", title_justify="left")
        for name in ("session", "turn", "tool", "rule", "action", "count"):
            table.add_column(name)
        for r, a in actions:
            table.add_row(escape(r.session[:limit]), str(a.turn), escape(a.tool), escape(a.rule),
                          a.action, str(a.failures))
        console.print(table)
    total = summary(reports)
    if _output.show_summary():
        console.print(
            f"[bold]{total['sessions']} sessions, {total['calls']} calls: {total['cut_calls']} "
            f"would have been cut, saving {total['saved_chars']:,} characters "
            f"(≈ {total['saved_tokens']:,} tokens); {total['stall_fires']} stall fires, "
            f"{total['monologue_fires']} monologue fires, {total['tool_steers']} tool steers, "
            f"{total['tool_denials']} denials.[/]", highlight=False)
    for error in errors:
        # Errors carry paths and install hints ("pip install zstandard"): never markup.
        console.print(f"[red]unreadable:[/] {escape(error)}", highlight=False, soft_wrap=True)
