"""``loopbreak demo``: replay bundled loops and clean streams through the engine.

Each sample streams through a fresh :class:`~loopbreak.ChannelGuard` in small
deltas, as a model would send them. A loop stops where the engine cuts it and
the demo moves on to the next stream; a clean stream runs to its end. A summary
table closes the run. ``--json`` prints one JSON object per stream instead.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from loopbreak import ChannelGuard, Config, InputError, Trip, load_config
from loopbreak._samples import Sample, demo_samples

if TYPE_CHECKING:
    # rich is imported where it draws: the dispatcher imports every command to build its
    # parser, and `loopbreak scan` should not pay for rich.
    from rich.console import Console
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

DEFAULT_SPEED = 2500.0  # characters per second
DELTA_CHARS = 24
TAIL_LINES = 12
FRAMES_PER_SECOND = 30
HOLD_SECONDS = 1.0  # a finished panel stays on screen this long before the next stream
# Evidence worth a glance, in the order shown; the rest (units, chunks) is for --json.
EVIDENCE_KEYS = ("period", "coverage", "concentration", "overlap", "flags", "streak",
                 "repeats", "limit")

EXAMPLES = """\
examples:
  loopbreak demo                               every bundled stream, live on a terminal
  loopbreak demo --only verbatim --speed 0     one stream, no pacing
  loopbreak demo --no-live | grep untouched    plain output, whole tables
  loopbreak demo --json                        one JSON object per stream
  loopbreak demo --proxy                       a live cut through the real proxy
  loopbreak -q demo                            the summary table only
"""

# Tests replace this (or pass ``sleep=``) so they never wait.
sleep: Callable[[float], None] = time.sleep


def _sleep(seconds: float) -> None:
    sleep(seconds)  # looked up on each call, so a replaced module ``sleep`` takes effect


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--speed", type=float, default=DEFAULT_SPEED, metavar="CHARS_PER_SECOND",
                        help=f"replay pace (default {DEFAULT_SPEED:g}; 0 = no delay)")
    parser.add_argument("--only", action="append", metavar="NAME",
                        help="replay only the sample NAME (repeatable; a wrong name "
                             "lists the valid ones)")
    parser.add_argument("--config", metavar="FILE", help="TOML configuration file")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object per stream on stdout, no display (with "
                             "--proxy: one object for the run)")
    parser.add_argument("--proxy", action="store_true",
                        help="a live cut end to end: the openai SDK through loopbreak proxy in "
                             "front of a built-in replay upstream")
    parser.add_argument("--no-live", action="store_true",
                        help="plain output without animation (automatic when stdout "
                             "is not a terminal)")


@dataclass
class Replay:
    """How far one sample got through its guard, and the trip that stopped it."""

    sample: Sample
    consumed: int = 0
    trip: Trip | None = None

    @property
    def finished(self) -> bool:
        return self.trip is not None or self.consumed >= len(self.sample.text)

    @property
    def saved(self) -> int:
        """Characters the stream would still have run after the cut."""
        return len(self.sample.text) - self.trip.offset if self.trip else 0

    @property
    def saved_share(self) -> float:
        return self.saved / len(self.sample.text) if self.sample.text else 0.0

    @property
    def loop_ran(self) -> int | None:
        """Characters of loop the stream produced before the rule's condition held."""
        if self.trip is None or self.sample.loop_start is None:
            return None
        return self.trip.at - self.sample.loop_start

    def as_json(self) -> dict[str, Any]:
        sample, trip = self.sample, self.trip
        return {
            "name": sample.name,
            "title": sample.title,
            "channel": sample.channel,
            "chars": len(sample.text),
            "loop_start": sample.loop_start,
            "tripped": trip is not None,
            "rule": trip.rule if trip else None,
            "offset": trip.offset if trip else None,
            "at": trip.at if trip else None,
            "evidence": dict(trip.evidence) if trip else None,
            "saved_chars": self.saved,
        }


def select_samples(only: Sequence[str] | None) -> list[Sample]:
    """The demo samples, in their order, kept to the names in ``only`` when given."""
    samples = demo_samples()
    if not only:
        return samples
    names = [s.name for s in samples]
    unknown = [name for name in only if name not in names]
    if unknown:
        raise InputError(f"unknown sample {unknown[0]!r} for --only "
                         f"(choose from: {', '.join(names)})")
    return [s for s in samples if s.name in only]


def stream_through_guard(replay: Replay, config: Config | None = None,
                         delta_chars: int = DELTA_CHARS) -> Iterator[Replay]:
    """Feed ``replay``'s sample to a fresh guard in deltas, updating ``replay`` and
    yielding it after each. Stops at the cut: the rest of a loop is never streamed."""
    sample = replay.sample
    # Every delta judged as it comes: the cut shown is where the rules decided, the same
    # offset ``loopbreak scan`` reports (a live guard judging in batches cuts up to a
    # batch later).
    guard = ChannelGuard(sample.channel, (config or Config()).replace(
        **{"judging.batch_chars": 1}))
    for start in range(0, len(sample.text), delta_chars):
        replay.trip = guard.feed(sample.text[start:start + delta_chars])
        replay.consumed = guard.consumed
        yield replay
        if replay.trip is not None:
            return
    replay.trip = guard.flush()
    if replay.trip is not None:
        yield replay


def judge(sample: Sample, config: Config | None = None) -> Replay:
    """Stream ``sample`` at once and return where it ended."""
    replay = Replay(sample)
    for _ in stream_through_guard(replay, config):
        pass
    return replay


def describe_evidence(evidence: Mapping[str, Any]) -> str:
    """The few evidence values a person reads at a glance, e.g. ``period 78``."""
    parts = []
    for key in EVIDENCE_KEYS:
        value = evidence.get(key)
        if value is None:
            continue
        if isinstance(value, (list, tuple)):
            value = "+".join(str(v) for v in value)
        parts.append(f"{key} {value}")
    return ", ".join(parts)


def _tail(replay: Replay, console: Console, width: int) -> Text:
    """The last screen lines of the text streamed so far, padded so the panel keeps its height."""
    from rich.text import Text

    style = "dim italic" if replay.sample.channel == "reasoning" else ""
    # Only the end can be shown; wrapping more than a screenful would cost per frame.
    start = max(0, replay.consumed - TAIL_LINES * width)
    text = Text(replay.sample.text[start:replay.consumed], style=style)
    lines = list(text.wrap(console, width))[-TAIL_LINES:]
    lines += [Text("")] * (TAIL_LINES - len(lines))
    return Text("\n").join(lines)


def stream_panel(replay: Replay, console: Console) -> Panel:
    """One stream: the tail of its text and, once finished, the cut or the all-clear."""
    from rich.console import Group
    from rich.markup import escape
    from rich.panel import Panel
    from rich.rule import Rule
    from rich.text import Text

    from loopbreak.cli._output import text_width

    sample, trip = replay.sample, replay.trip
    total = len(sample.text)
    if trip is not None:
        status = Text.assemble(
            ("✂ cut: ", "bold red"), (f"{trip.rule} at {trip.offset:,} chars", "bold red"),
            (f"  ({describe_evidence(trip.evidence)})", "red"),
            "\n",
            ("saved ", "green"),
            (f"{replay.saved:,} of {total:,} chars ({replay.saved_share:.0%})", "bold green"),
        )
        if replay.loop_ran is not None:
            status.append(f" · the loop ran {replay.loop_ran:,} chars before the cut", "dim")
        border = "red"
    elif replay.finished and sample.is_loop:
        status = Text(f"✗ missed: the loop ran all {total:,} chars, no rule tripped",
                      style="bold yellow")
        border = "yellow"
    elif replay.finished:
        status = Text(f"✓ untouched: all {total:,} chars streamed, no rule tripped",
                      style="bold green")
        border = "green"
    else:
        status = Text(f"▸ streaming… {replay.consumed:,} of {total:,} chars", style="cyan")
        border = "blue"
    panel_width = text_width(console)
    width = max(20, panel_width - 4)
    return Panel(
        Group(_tail(replay, console, width), Rule(style=border), status),
        width=panel_width,
        title=f"[bold]{escape(sample.name)}[/]: {escape(sample.title)}",
        title_align="left",
        subtitle=f"{sample.channel} · {replay.consumed:,} chars",
        subtitle_align="right",
        border_style=border,
    )


def summary_table(replays: Sequence[Replay]) -> Table:
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    # Headers are short and the box has no inner lines so the table fits 80 columns (a pipe
    # gets it whole at any width: see loopbreak.cli._output).
    table = Table(title="what the engine did", title_justify="left", box=box.SIMPLE_HEAD,
                  show_edge=False, padding=(0, 1, 0, 0),
                  caption="loop at: where the loop starts; cut: characters streamed when the "
                          "engine cut; ran: loop characters before the cut; saved: characters "
                          "never streamed",
                  caption_justify="left")
    table.add_column("stream", style="bold", no_wrap=True)
    table.add_column("channel", no_wrap=True)
    table.add_column("chars", justify="right", no_wrap=True)
    table.add_column("loop at", justify="right", no_wrap=True)
    table.add_column("cut", justify="right", no_wrap=True)
    table.add_column("rule", no_wrap=True)
    table.add_column("ran", justify="right", no_wrap=True)
    table.add_column("saved", justify="right", no_wrap=True)
    for replay in replays:
        sample, trip = replay.sample, replay.trip
        if trip is None:
            rule = "[red]missed[/]" if sample.is_loop else "[green]untouched[/]"
        else:
            rule = f"[red]{escape(trip.rule)}[/]" if sample.is_loop \
                else f"[red]{escape(trip.rule)} (false cut)[/]"
        table.add_row(
            escape(sample.name),
            sample.channel,
            f"{len(sample.text):,}",
            f"{sample.loop_start:,}" if sample.loop_start is not None else "—",
            f"{trip.offset:,}" if trip else "—",
            rule,
            f"{replay.loop_ran:,}" if replay.loop_ran is not None else "—",
            f"{replay.saved:,}" if trip else "—",
        )
    return table


def totals_line(replays: Sequence[Replay]) -> str:
    loops = [r for r in replays if r.sample.is_loop]
    clean = [r for r in replays if not r.sample.is_loop]
    parts = []
    if loops:
        loop_chars = sum(len(r.sample.text) for r in loops)
        saved = sum(r.saved for r in loops)
        parts.append(f"{sum(r.trip is not None for r in loops)} of {len(loops)} loops cut, "
                     f"{saved:,} of their {loop_chars:,} characters never streamed "
                     f"({saved / loop_chars:.0%})")
    if clean:
        parts.append(f"{sum(r.trip is None for r in clean)} of {len(clean)} clean streams "
                     f"untouched")
    return "; ".join(parts) + "."


def _animate(sample: Sample, config: Config | None, console: Console, speed: float,
             pause: Callable[[float], None]) -> Replay:
    from rich.live import Live

    # The guard still sees DELTA_CHARS deltas; the screen redraws (and the pace sleeps)
    # once per frame, so a fast speed does not mean hundreds of redraws a second.
    frame_chars = max(DELTA_CHARS, round(speed / FRAMES_PER_SECOND))
    replay = Replay(sample)
    shown = 0
    with Live(stream_panel(replay, console), console=console, auto_refresh=False,
              transient=True) as live:
        for _ in stream_through_guard(replay, config):
            if replay.consumed - shown >= frame_chars or replay.finished:
                live.update(stream_panel(replay, console), refresh=True)
                pause((replay.consumed - shown) / speed)
                shown = replay.consumed
        pause(HOLD_SECONDS)
    return replay


def replay_samples(samples: Sequence[Sample], *, console: Console, config: Config | None = None,
                   speed: float = DEFAULT_SPEED, live: bool = True,
                   sleep: Callable[[float], None] = _sleep) -> list[Replay]:
    """Play ``samples`` on ``console`` (animated when ``live`` and ``speed`` > 0), each
    finished panel left on screen, then the summary; return how each stream ended.
    ``-q`` leaves out the streams (the summary table and totals only), ``-qq`` the totals."""
    from loopbreak.cli import _output

    panels = _output.show_notes()
    if panels:
        console.print(f"Replaying {len(samples)} streams, each through a fresh engine in "
                      f"{DELTA_CHARS}-character deltas.", style="bold", highlight=False)
    replays = []
    for sample in samples:
        if panels and live and speed > 0:
            replay = _animate(sample, config, console, speed, sleep)
        else:
            replay = judge(sample, config)
        if panels:
            console.print(stream_panel(replay, console))
        replays.append(replay)
    console.print(summary_table(replays))
    if _output.show_summary():
        console.print(totals_line(replays), style="bold", highlight=False)
    return replays


def run(args: argparse.Namespace) -> int:
    if not math.isfinite(args.speed) or args.speed < 0:
        raise InputError(f"--speed must be >= 0 characters per second, not {args.speed:g}")
    if args.proxy:
        from loopbreak.cli.demo_proxy import run_from_args

        return run_from_args(args, _sleep)
    samples = select_samples(args.only)
    config = load_config(args.config).config
    if args.json:
        for sample in samples:
            sys.stdout.write(json.dumps(judge(sample, config).as_json(), ensure_ascii=False)
                             + "\n")
        sys.stdout.flush()
        return 0
    from loopbreak.cli import _output

    console = _output.console()
    live = not args.no_live and _output.interactive()
    replay_samples(samples, console=console, config=config, speed=args.speed, live=live)
    return 0
