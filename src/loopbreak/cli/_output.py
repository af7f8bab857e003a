"""Where and how every command writes for people: one place that makes the consoles.

On a terminal, rich as usual: colour, the terminal's width, progress bars and live
views on stderr. Not on a terminal (a pipe, a file): no colour, no animation, no
progress bar, and no width cap, so a table is printed whole, one row a line, every
name in full, and ``grep``, ``cut -c`` and ``awk`` see what a person would.

The environment, read when a console is made:

- ``NO_COLOR`` (any value but empty, https://no-color.org): no colour and no other
  styling either; it wins over ``FORCE_COLOR``.
- ``FORCE_COLOR`` (any value but empty or ``0``): colour even in a pipe (for
  ``less -R``); tables are still printed whole and nothing animates.
- ``TERM=dumb``: no colour, no cursor movement (no progress bar, no live view).

The command line's ``-q`` and ``-v`` set the level (:func:`configure`): ``-q`` hides
progress bars, notes and decorations (errors still print), ``-qq`` also the summary
lines, leaving the results; ``-v`` prints the traceback of an unexpected error (``-vv``
of every error) and makes the proxy log more.
"""

from __future__ import annotations

import io
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from loopbreak._errors import InputError

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, ProgressColumn

PIPE_WIDTH = 100_000
"""The width a console gets when its stream is not a terminal: wide enough that no
table row wraps or is cut short."""
TEXT_WIDTH = 100
"""Panels and rules (which fill the width they are given) get this much in a pipe."""


@dataclass(frozen=True)
class Level:
    """How much a command says: ``-q`` and ``-v`` given on the command line."""

    quiet: int = 0
    verbose: int = 0

    @property
    def value(self) -> int:
        """Verbose minus quiet: 0 is normal, below is quieter, above says more."""
        return self.verbose - self.quiet


_level = Level()


def configure(quiet: int = 0, verbose: int = 0) -> None:
    """Set the level for this run (the dispatcher does, from ``-q`` and ``-v``)."""
    global _level
    _level = Level(max(0, quiet), max(0, verbose))


def level() -> int:
    """Verbose minus quiet (see :class:`Level`)."""
    return _level.value


def show_notes() -> bool:
    """Notes, intros, progress bars: hidden by ``-q``."""
    return _level.value >= 0


def show_summary() -> bool:
    """Summary lines after the tables: hidden by ``-qq``."""
    return _level.value >= -1


def tracebacks(expected: bool = False) -> bool:
    """Whether an error's traceback is printed: unexpected ones at ``-v``, all at ``-vv``."""
    return _level.value >= (2 if expected else 1)


def _env(name: str) -> str:
    return os.environ.get(name, "")


def no_color() -> bool:
    return _env("NO_COLOR") != ""


def force_color() -> bool:
    return not no_color() and _env("FORCE_COLOR") not in ("", "0")


def is_tty(stream: IO[str]) -> bool:
    """Whether ``stream`` is a terminal."""
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # closed
        return False


def interactive(stream: IO[str] | None = None) -> bool:
    """Whether ``stream`` (stdout by default) can show a live view: a real terminal that
    is not dumb. ``FORCE_COLOR`` brings colour to a pipe, never animation."""
    return is_tty(stream or sys.stdout) and _env("TERM").lower() not in ("dumb", "unknown")


def console(*, stderr: bool = False, file: IO[str] | None = None) -> Console:
    """The console a command prints on: stdout (results), or stderr (notes, progress)."""
    from rich.console import Console

    stream = file or (sys.stderr if stderr else sys.stdout)
    tty = is_tty(stream)
    colour = not no_color() and (tty or force_color())
    options: dict[str, Any] = {
        "color_system": "auto" if colour else None,
        "no_color": no_color(),
        # rich reads FORCE_COLOR itself (any value, even empty): decided here instead.
        "force_terminal": True if colour and not tty else tty,
        "force_interactive": interactive(stream),
    }
    if not tty:
        options["width"] = PIPE_WIDTH
    if file is not None:
        options["file"] = file
    return Console(stderr=stderr, **options)


def whole(out: Console) -> bool:
    """Whether ``out`` prints tables whole (not a terminal): cells not cut to fit, one row
    a line."""
    return out.width >= PIPE_WIDTH


def text_width(out: Console) -> int:
    """The width for something that fills it (a panel, a rule): the terminal's, or
    :data:`TEXT_WIDTH` in a pipe."""
    return TEXT_WIDTH if whole(out) else out.width


def progress(*columns: str | ProgressColumn, disable: bool = False) -> Progress:
    """A transient progress bar on stderr, off with ``-q`` and off a terminal."""
    from rich.progress import Progress

    off = disable or not show_notes() or not interactive(sys.stderr)
    # rich ends even a disabled bar with a newline on its console: an unseen one takes it.
    err = console(file=io.StringIO()) if off else console(stderr=True)
    return Progress(*columns, console=err, transient=True, disable=off)


def note(message: str) -> None:
    """One line for people on stderr (not with ``-q``); ``message`` is rich markup."""
    if show_notes():
        console(stderr=True).print(message, highlight=False, soft_wrap=True)


def check_output_file(path: Path, label: str, example: str) -> None:
    """Refuse, before any work, a file to write that cannot be: a folder, or in a folder that
    does not exist (``label`` names it in the message, ``example`` is a file name to suggest)."""
    if path.is_dir():
        raise InputError(f"{label}: a folder; name the file to write, e.g. {path / example}")
    if not path.parent.is_dir():
        raise InputError(f"{label}: no folder {path.parent} (create it first)")
