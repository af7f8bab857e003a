"""The ``loopbreak`` command: one module per subcommand, imported when it runs.

People get rich tables on stdout and progress on stderr (whole, plain tables when
stdout is not a terminal: see :mod:`loopbreak.cli._output`); ``--json`` gives machines
plain JSON on stdout. Every expected failure is one line on stderr and exit code 2; an
unexpected one too, with its traceback at ``-v``. ``-q``/``-v`` go before or after the
command; each command's ``--help`` ends with examples (its module's ``EXAMPLES``).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback
from collections.abc import Callable, Sequence

from loopbreak import __version__
from loopbreak._errors import LoopbreakError
from loopbreak.cli import _output

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "scan": ("loopbreak.cli.scan", "judge streams given as JSONL or text files (batch contract)"),
    "analyze": ("loopbreak.cli.analyze", "replay recorded sessions: where rules would have cut"),
    "proxy": ("loopbreak.cli.proxy", "guard an OpenAI- or Anthropic-style endpoint over HTTP"),
    "demo": ("loopbreak.cli.demo", "replay bundled loops and clean streams through the engine"),
    "bench": ("loopbreak.cli.bench", "measure engine throughput against peer packages"),
    "calibrate": ("loopbreak.cli.calibrate", "sweep rule thresholds over labelled corpora"),
    "config": ("loopbreak.cli.config", "print the configuration as TOML; init writes a template"),
}

EXIT_ERROR = 2

EXAMPLES = """\
examples:
  loopbreak demo                          watch bundled loops being cut
  loopbreak scan streams.jsonl            one JSON verdict per stream
  loopbreak analyze ~/.dsh/sessions       where recorded sessions would have been cut
  loopbreak proxy --upstream https://api.deepseek.com
  loopbreak calibrate --cases | grep counter-cycle
  loopbreak -q bench --quick --no-peers   tables only, no progress bar

Piped or redirected, tables print whole and uncoloured; NO_COLOR and FORCE_COLOR are
honoured. `loopbreak COMMAND --help` shows each command's own examples.
"""

def _common(parser: argparse.ArgumentParser, *, after: bool) -> None:
    """``-q``/``-v``, before the command (``after`` False) or after it: counted apart,
    summed by :func:`main`, so ``loopbreak -q demo -q`` is ``-qq``."""
    suffix = "_after" if after else ""
    default = argparse.SUPPRESS if after else 0
    parser.add_argument("-q", "--quiet", action="count", default=default, dest="quiet" + suffix,
                        help="say less: no progress bars or notes (-qq: results and errors "
                             "only)")
    parser.add_argument("-v", "--verbose", action="count", default=default,
                        dest="verbose" + suffix,
                        help="say more: the traceback of an unexpected error (-vv: of every "
                             "error); the proxy logs at info (-vv: debug)")


def examples(name: str) -> str | None:
    """The examples that end ``loopbreak NAME --help`` (a test holds every command to
    having some, each one a command this parser accepts)."""
    module = importlib.import_module(COMMANDS[name][0])
    text: str | None = getattr(module, "EXAMPLES", None)
    return text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="loopbreak",
        description="Circuit breakers for LLM agent loops.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-V", "--version", action="version", version=f"loopbreak {__version__}")
    _common(parser, after=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        command = sub.add_parser(name, help=help_text, description=help_text,
                                 epilog=examples(name),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
        add_arguments: Callable[[argparse.ArgumentParser], None] = (
            importlib.import_module(module).add_arguments
        )
        add_arguments(command)
        _common(command, after=True)
    return parser


def fail(message: str) -> int:
    """Print one line that says what is wrong; return the error exit code."""
    print(f"loopbreak: error: {message}", file=sys.stderr)
    return EXIT_ERROR


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.quiet += getattr(args, "quiet_after", 0)
    args.verbose += getattr(args, "verbose_after", 0)
    _output.configure(args.quiet, args.verbose)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_ERROR
    module = importlib.import_module(COMMANDS[args.command][0])
    run: Callable[[argparse.Namespace], int] = module.run
    try:
        return run(args)
    except LoopbreakError as exc:
        if _output.tracebacks(expected=True):
            traceback.print_exc()
        return fail(str(exc))
    except KeyboardInterrupt:
        print("loopbreak: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (``| head``); nothing left to say to it.
        sys.stderr.close()
        return 0
    except Exception as exc:  # a bug: one line, the traceback with -v
        if _output.tracebacks():
            traceback.print_exc()
            return fail(f"unexpected {type(exc).__name__}: {exc} (a bug: please report it "
                        "with the traceback above)")
        return fail(f"unexpected {type(exc).__name__}: {exc} (a bug: run again with -v for "
                    "the traceback)")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
