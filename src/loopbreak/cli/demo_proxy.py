"""``loopbreak demo --proxy``: a live cut through the real proxy, end to end.

A built-in replay upstream (:class:`~loopbreak.testing.ScriptedUpstream`) plays a
model whose reasoning degenerates into a reshuffled phrase pool, spelled the way
DeepSeek streams it, at a model's pace; :class:`~loopbreak.proxy.server.ProxyServer`
guards it; the ``openai`` SDK streams through the proxy exactly as an application
would. The reasoning scrolls live until the proxy cuts it, closes the upstream
connection, shows its notice and re-asks once with thinking off; the retried answer
continues the same response. The closing summary takes its numbers from the
upstream's records of both exchanges and from the proxy's own trip log.

Needs the proxy extra and the ``openai`` SDK (``pip install '.[proxy,openai]'`` from a checkout).
``--json`` prints the same facts as one JSON object instead (:func:`run_dict`).
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from loopbreak._config import Config, load_config
from loopbreak._errors import InputError, LoopbreakError
from loopbreak._extras import install_hint

if TYPE_CHECKING:
    # Imported where they are used: the dispatcher imports every command module to
    # build its parser, and no other command should pay for these.
    from rich.console import Console, RenderableType
    from rich.live import Live
    from rich.table import Table

    from loopbreak.testing import RecordedRequest, Script

DEFAULT_SPEED = 2500.0
"""Characters per second the replay upstream streams at (``loopbreak demo``'s pace)."""
MODEL = "deepseek-v4-flash"
PROMPT = "Summarise the design notes in one sentence."
ANSWER = ("The notes say: cut a looping stream as soon as it repeats, tell the model why, "
          "and let it carry on.")
LOOP_CHARS = 30_000
"""The whole looping reasoning the upstream would send if nobody cut it."""
REASONING_PIECE = 12
ANSWER_PIECE = 6
FIRST_BYTE_SECONDS = 0.3
"""Time to the first byte of each response (only when paced)."""
CUT_HOLD_SECONDS = 1.2
"""How long the cut stays on screen before the retried answer streams (live only)."""
FRAMES_PER_SECOND = 30
TAIL_LINES = 10
NOTICE_TAG = "[loopbreak]"
INSTALL_HINT = install_hint("proxy", "openai")


def _requirements() -> Any:
    """The ``openai`` module, once the proxy extra is known to be there."""
    try:
        import openai
    except ImportError:
        raise InputError(f"demo --proxy streams with the openai SDK: {INSTALL_HINT}") from None
    try:
        import aiohttp  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise InputError(f"demo --proxy needs the proxy extra: {INSTALL_HINT}") from None
    return openai


# --- what the upstream plays ---------------------------------------------------------------


def loop_script(speed: float) -> Script:
    """The first answer: reasoning that starts with real work, then loops for good."""
    from loopbreak._samples import phrase_pool
    from loopbreak.testing import Script

    script = Script.openai(reasoning=phrase_pool(LOOP_CHARS).text,
                           text="(the loop never gets this far)", piece_chars=REASONING_PIECE,
                           flavour="deepseek")
    return _paced(script, REASONING_PIECE, speed)


def answer_script(speed: float) -> Script:
    """The retry's answer, asked without thinking: short and to the point."""
    from loopbreak.testing import Script

    script = Script.openai(text=ANSWER, piece_chars=ANSWER_PIECE, flavour="deepseek")
    return _paced(script, ANSWER_PIECE, speed)


def _paced(script: Script, piece: int, speed: float) -> Script:
    if speed <= 0:
        return script
    return script.delivered(delay=piece / speed, headers_delay=FIRST_BYTE_SECONDS)


def thinking_disabled(request: RecordedRequest) -> bool:
    """Whether a request asked the DeepSeek way for no thinking."""
    body = request.body
    return isinstance(body, dict) and body.get("thinking") == {"type": "disabled"}


def sent_reasoning_chars(script: Script, request: RecordedRequest) -> int:
    """Reasoning characters in the events the upstream wrote for ``request`` before its
    exchange ended: what the model generated before the proxy closed the connection."""
    from loopbreak.testing import Context, openai_events

    ctx = Context(dialect="openai", model=MODEL, response_id="sent", created=0,
                  seq=request.index)
    total = 0
    for index, event in enumerate(openai_events(script, ctx)):
        if index >= request.events_sent or event.data == "[DONE]":
            break
        for choice in json.loads(event.data).get("choices") or []:
            total += len((choice.get("delta") or {}).get(script.reasoning_field) or "")
    return total


# --- one run -------------------------------------------------------------------------------


@dataclass
class ProxyDemoRun:
    """What the client received, what the upstream recorded and what the proxy logged."""

    proxy_url: str
    upstream_url: str
    speed: float
    loop: Script
    requests: list[RecordedRequest] = field(default_factory=list)
    reasoning: str = ""
    content: str = ""
    finish_reason: str | None = None
    log: list[dict[str, Any]] = field(default_factory=list)
    """The proxy's JSON log lines, filled as they are written (from the proxy's thread)."""

    @property
    def notice(self) -> str:
        """The proxy's notice at the start of the visible text ("" when none came)."""
        if not self.content.lstrip().startswith(NOTICE_TAG):
            return ""
        return self.content.strip().split("\n\n", 1)[0]

    @property
    def answer(self) -> str:
        """The visible answer after the notice."""
        notice = self.notice
        text = self.content.strip()
        return text[len(notice):].strip() if notice else text

    @property
    def looping(self) -> RecordedRequest | None:
        return self.requests[0] if self.requests else None

    @property
    def retry(self) -> RecordedRequest | None:
        return self.requests[1] if len(self.requests) > 1 else None

    @property
    def trip(self) -> dict[str, Any] | None:
        """The proxy's log line for the cut."""
        return next((e for e in list(self.log) if e.get("event") == "trip"), None)

    @property
    def loop_chars(self) -> int:
        return len(self.loop.reasoning)

    @property
    def upstream_chars(self) -> int:
        """Reasoning the upstream sent before the proxy closed it."""
        looping = self.looping
        return sent_reasoning_chars(self.loop, looping) if looping is not None else 0

    @property
    def saved_chars(self) -> int:
        """Loop characters never generated: the proxy closed the connection first."""
        return self.loop_chars - self.upstream_chars

    @property
    def cut(self) -> bool:
        return self.trip is not None and bool(self.notice)


class _TripLog(logging.Handler):
    """Keeps the proxy's JSON log lines (one per trip) for the summary."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.events: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            event = json.loads(record.getMessage())
        except ValueError:
            return
        if isinstance(event, dict):
            self.events.append(event)


@contextmanager
def _proxy_log() -> Iterator[_TripLog]:
    """The proxy's log lines, caught for the summary instead of printed over the display."""
    logger = logging.getLogger("loopbreak.proxy")
    handler = _TripLog()
    propagate = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


def stream_through_proxy(speed: float = DEFAULT_SPEED, *, config: Config | None = None,
                         on_delta: Callable[[ProxyDemoRun], None] | None = None) -> ProxyDemoRun:
    """Start the upstream and the proxy, stream one request through them with the
    ``openai`` SDK and return what happened; ``on_delta`` sees the run after every chunk."""
    openai = _requirements()
    from loopbreak.proxy.server import ProxyServer
    from loopbreak.testing import ScriptedUpstream

    loop, answer = loop_script(speed), answer_script(speed)

    def choose(request: RecordedRequest) -> Script:
        # The model loops whenever it may think; asked without thinking, it answers.
        return answer if thinking_disabled(request) else loop

    with _proxy_log() as log, ScriptedUpstream(choose=choose, models=(MODEL,)) as upstream, \
            ProxyServer(upstream.url, config=config) as proxy:
        run = ProxyDemoRun(proxy.url, upstream.url, speed, loop, log=log.events)
        with openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="sk-demo", max_retries=0,
                           timeout=60.0) as client:
            try:
                stream = client.chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": PROMPT}], stream=True,
                    stream_options={"include_usage": True},
                    extra_body={"thinking": {"type": "enabled"}, "reasoning_effort": "high"})
                for chunk in stream:
                    for choice in chunk.choices:
                        delta = choice.delta
                        reasoning = getattr(delta, "reasoning_content", None)
                        if isinstance(reasoning, str):
                            run.reasoning += reasoning
                        if delta.content:
                            run.content += delta.content
                        if choice.finish_reason:
                            run.finish_reason = choice.finish_reason
                    if on_delta is not None:
                        on_delta(run)
            except openai.APIError as exc:
                raise LoopbreakError(f"demo --proxy: the stream through the proxy failed: "
                                     f"{exc}") from None
        for request in upstream.requests:
            request.wait(5)
        run.requests = upstream.requests
    return run


# --- the display ---------------------------------------------------------------------------


def _tail(text: str, console: Console, width: int, lines: int, style: str) -> RenderableType:
    from rich.text import Text

    shown = Text(text[-lines * width:], style=style)
    wrapped = list(shown.wrap(console, width))[-lines:]
    wrapped += [Text("")] * (lines - len(wrapped))
    return Text("\n").join(wrapped)


def reasoning_panel(run: ProxyDemoRun, console: Console) -> RenderableType:
    """The reasoning as it streams, and once the notice came, the cut."""
    from rich.console import Group
    from rich.panel import Panel
    from rich.rule import Rule
    from rich.text import Text

    from loopbreak.cli._output import text_width

    trip = run.trip
    if run.notice and trip is not None:
        status = Text.assemble(
            ("✂ cut by the proxy: ", "bold red"),
            (f"{trip.get('rule')} at {trip.get('offset', 0):,} chars of reasoning", "bold red"),
            (" · upstream connection closed · "
             + ("re-asked with thinking off" if trip.get("recovery") == "retry"
                else f"recovery: {trip.get('recovery')}"), "red"))
        border = "red"
    elif run.notice:
        status = Text("✂ the proxy ended the reasoning", style="bold red")
        border = "red"
    else:
        status = Text(f"▸ reasoning streams through the proxy… {len(run.reasoning):,} chars",
                      style="cyan")
        border = "blue"
    panel_width = text_width(console)
    width = max(20, panel_width - 4)
    return Panel(Group(_tail(run.reasoning, console, width, TAIL_LINES, "dim italic"),
                       Rule(style=border), status), width=panel_width,
                 title=f"[bold]{MODEL}[/] reasoning, via loopbreak proxy", title_align="left",
                 subtitle=f"{len(run.reasoning):,} chars", subtitle_align="right",
                 border_style=border)


def answer_panel(run: ProxyDemoRun, width: int | None = None) -> RenderableType:
    """The notice the proxy added, then the retried answer, in the same response."""
    from rich.panel import Panel
    from rich.text import Text

    text = Text()
    if run.notice:
        text.append(run.notice, style="yellow")
        text.append("\n\n")
    text.append(run.answer)
    done = run.finish_reason is not None
    return Panel(text, title="[bold]answer[/] (the same response, continued)", width=width,
                 title_align="left",
                 subtitle=f"finish_reason: {run.finish_reason}" if done else "streaming…",
                 subtitle_align="right", border_style="green" if done else "blue")


def screen(run: ProxyDemoRun, console: Console) -> RenderableType:
    from rich.console import Group

    from loopbreak.cli._output import text_width

    parts = [reasoning_panel(run, console)]
    if run.content:
        parts.append(answer_panel(run, text_width(console)))
    return Group(*parts)


def summary_lines(run: ProxyDemoRun) -> list[tuple[str, str]]:
    """What happened, each fact from the upstream's records or the proxy's log."""
    rows = [("reasoning streamed", f"{len(run.reasoning):,} chars reached the client")]
    trip = run.trip
    if trip is not None:
        rows.append(("cut", f"{trip.get('rule')} at {trip.get('offset', 0):,} chars of "
                            f"reasoning (recovery: {trip.get('recovery')})"))
    else:
        rows.append(("cut", "none: the proxy let the stream run"))
    looping = run.looping
    if looping is not None:
        took = (looping.ended_at - looping.arrived_at) if looping.ended_at is not None else 0.0
        if looping.outcome == "client-disconnected":
            rows.append(("upstream", f"connection closed by the proxy after {took:.2f} s, "
                                     f"{run.upstream_chars:,} chars of reasoning sent"))
        else:
            # Unpaced, the whole loop can be in flight before the cut reaches the upstream.
            rows.append(("upstream", f"first exchange {looping.outcome} after {took:.2f} s, "
                                     f"{run.upstream_chars:,} chars of reasoning sent"))
    retry = run.retry
    if retry is not None:
        body = retry.body if isinstance(retry.body, dict) else {}
        asked = "thinking off" if thinking_disabled(retry) else \
            f"thinking {json.dumps(body.get('thinking'))}"
        rows.append(("retry", f"re-asked once with {asked}: a {len(run.answer):,}-char answer, "
                              f"finish_reason {run.finish_reason}"))
    else:
        rows.append(("retry", f"none (recovery: {trip.get('recovery') if trip else 'none'})"))
    saved = f"{run.saved_chars:,} of the loop's {run.loop_chars:,} chars never generated " \
            f"({run.saved_chars / run.loop_chars:.0%})"
    if run.speed > 0:
        saved += f"; the whole loop would have streamed for {run.loop_chars / run.speed:.0f} s"
    rows.append(("saved", saved))
    return rows


def summary_table(run: ProxyDemoRun) -> Table:
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="what the proxy did", title_justify="left", box=box.SIMPLE_HEAD,
                  show_header=False, show_edge=False, padding=(0, 1, 0, 0),
                  caption="from the replay upstream's records of both exchanges and the "
                          "proxy's trip log", caption_justify="left")
    table.add_column("what", style="bold", no_wrap=True)
    table.add_column("measured")
    for what, measured in summary_lines(run):
        table.add_row(what, escape(measured))
    return table


class _Frames:
    """Redraws the live display at most ``FRAMES_PER_SECOND`` times a second, and holds
    the cut on screen for a moment when the notice arrives."""

    def __init__(self, display: Live, console: Console, sleep: Callable[[float], None]) -> None:
        self.display = display
        self.console = console
        self.sleep = sleep
        self.drawn_at = 0.0
        self.cut_shown = False

    def draw(self, run: ProxyDemoRun) -> None:
        if run.notice and not self.cut_shown:
            self.cut_shown = True
            self.display.update(screen(run, self.console), refresh=True)
            self.sleep(CUT_HOLD_SECONDS)
        elif time.monotonic() - self.drawn_at >= 1 / FRAMES_PER_SECOND:
            self.display.update(screen(run, self.console), refresh=True)
        else:
            return
        self.drawn_at = time.monotonic()


def run_proxy_demo(console: Console | None = None, speed: float = DEFAULT_SPEED,
                   sleep: Callable[[float], None] = time.sleep, *,
                   config: Config | None = None, live: bool | None = None) -> int:
    """Stream through the proxy on ``console`` (animated when ``live``, default: on a
    terminal, and ``speed`` > 0), then print the summary. 0 when the proxy cut the loop
    (and, recovering as configured, ended the response lawfully), else 1."""
    from rich.live import Live

    from loopbreak.cli import _output

    if console is None:
        console = _output.console()
        terminal = _output.interactive()
    else:
        terminal = console.is_terminal
    quiet = not _output.show_notes()
    animate = (terminal if live is None else live) and speed > 0 and not quiet
    if not quiet:
        console.print(f"Streaming with the openai SDK through loopbreak proxy, in front of a "
                      f"replay upstream whose model loops ({LOOP_CHARS:,} chars of reasoning "
                      f"at {speed:g} chars/s)." if speed > 0 else
                      "Streaming with the openai SDK through loopbreak proxy, in front of a "
                      f"replay upstream whose model loops ({LOOP_CHARS:,} chars of reasoning, "
                      f"unpaced).", style="bold", highlight=False)
        console.print(f"user: {PROMPT}", highlight=False)
    if animate:
        with Live(console=console, auto_refresh=False, transient=True) as display:
            frames = _Frames(display, console, sleep)
            run = stream_through_proxy(speed, config=config, on_delta=frames.draw)
    else:
        run = stream_through_proxy(speed, config=config)
    if not quiet:
        console.print(screen(run, console))
    console.print(summary_table(run))
    if not run.cut:
        console.print("The proxy did not cut this stream: see the summary.", style="bold yellow",
                      highlight=False)
        return 1
    if _output.show_summary():
        console.print("A live cut, end to end: the client got a lawful, complete response.",
                      style="bold green", highlight=False)
    return 0


def run_dict(run: ProxyDemoRun) -> dict[str, Any]:
    """One run as a JSON-ready object (``loopbreak demo --proxy --json``): the summary's
    facts, from the upstream's records and the proxy's trip log."""
    retry = run.retry
    return {
        "cut": run.cut,
        "trip": run.trip,
        "speed": run.speed,
        "reasoning_chars": len(run.reasoning),
        "loop_chars": run.loop_chars,
        "upstream_chars": run.upstream_chars,
        "saved_chars": run.saved_chars,
        "notice": run.notice,
        "retried": retry is not None,
        "retry_thinking_disabled": None if retry is None else thinking_disabled(retry),
        "answer": run.answer,
        "finish_reason": run.finish_reason,
        "requests": [r.outcome for r in run.requests],
        "summary": dict(summary_lines(run)),
    }


def run_from_args(args: argparse.Namespace, sleep: Callable[[float], None] = time.sleep) -> int:
    """``loopbreak demo --proxy``: ``--speed``, ``--config``, ``--no-live`` and ``--json``
    apply."""
    config = load_config(getattr(args, "config", None)).config
    if getattr(args, "json", False):
        run = stream_through_proxy(args.speed, config=config)
        print(json.dumps(run_dict(run), ensure_ascii=False))
        return 0 if run.cut else 1
    live = False if getattr(args, "no_live", False) else None
    return run_proxy_demo(None, args.speed, sleep, config=config, live=live)
