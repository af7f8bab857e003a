"""The ``loopbreak`` command: one module per subcommand, imported when it runs.

People get rich tables and progress on stderr; ``--json`` gives machines plain
JSON on stdout. Every expected failure is one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

from loopbreak import __version__
from loopbreak._errors import LoopbreakError

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "scan": ("loopbreak.cli.scan", "judge streams given as JSONL or text files (batch contract)"),
    "analyze": ("loopbreak.cli.analyze", "replay recorded sessions: where rules would have cut"),
    "proxy": ("loopbreak.cli.proxy", "guard an OpenAI- or Anthropic-style endpoint over HTTP"),
    "demo": ("loopbreak.cli.demo", "replay bundled loops and clean streams through the engine"),
    "bench": ("loopbreak.cli.bench", "measure engine throughput against peer packages"),
    "calibrate": ("loopbreak.cli.calibrate", "sweep rule thresholds over labelled corpora"),
    "config": ("loopbreak.cli.config", "print the effective configuration and where it came from"),
}

EXIT_ERROR = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="loopbreak",
        description="Circuit breakers for LLM agent loops.",
    )
    parser.add_argument("--version", action="version", version=f"loopbreak {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        command = sub.add_parser(name, help=help_text, description=help_text)
        add_arguments: Callable[[argparse.ArgumentParser], None] = (
            importlib.import_module(module).add_arguments
        )
        add_arguments(command)
    return parser


def fail(message: str) -> int:
    """Print one line that says what is wrong; return the error exit code."""
    print(f"loopbreak: error: {message}", file=sys.stderr)
    return EXIT_ERROR


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_ERROR
    module = importlib.import_module(COMMANDS[args.command][0])
    run: Callable[[argparse.Namespace], int] = module.run
    try:
        return run(args)
    except LoopbreakError as exc:
        return fail(str(exc))
    except KeyboardInterrupt:
        print("loopbreak: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (``| head``); nothing left to say to it.
        sys.stderr.close()
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
