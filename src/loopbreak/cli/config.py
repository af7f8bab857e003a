"""``loopbreak config``: the effective configuration as TOML, and a template of every key.

``loopbreak config`` (or ``config show``) prints the configuration in force as a valid
TOML file, sections as the file format has them, each key with a comment that says
where its value came from; saved, it loads to the same values. ``config init [PATH]``
writes a commented template: every key at its measured default, with the key's reason
and allowed values (the same metadata the README's table is made from). A file
holding only defaults loads to exactly the defaults.

The TOML writer here covers the value types a configuration holds (true/false,
integers, floats, strings, and lists of those); the standard library only reads TOML.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import sys
import textwrap
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from loopbreak import __version__
from loopbreak._config import (
    _SECTIONS,
    ENV_CONFIG_FILE,
    KeyInfo,
    _describe,
    iter_keys,
    load_config,
)
from loopbreak._errors import InputError
from loopbreak.cli import _output

EXAMPLES = """\
examples:
  loopbreak config                                the configuration in force, as TOML
  loopbreak config show --changed                 only what a file or variable set
  loopbreak config show --config loopbreak.toml --json
  loopbreak config init loopbreak.toml            a commented template of every key
  loopbreak config show | grep novelty_streak
"""

ACTIONS = ("show", "init")
WIDTH = 88
"""Comment lines of the template are wrapped to this width."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", nargs="?", choices=ACTIONS, default="show",
                        help="show (the default): print the configuration in force as TOML, "
                             "each key's source in a comment; init: write a commented template "
                             "of every key at its default")
    parser.add_argument("path", nargs="?", metavar="PATH",
                        help="init: the file to write (standard output when none, or '-')")
    parser.add_argument("--config", metavar="FILE",
                        help=f"show: TOML file (default: ${ENV_CONFIG_FILE} when set)")
    parser.add_argument("--changed", action="store_true",
                        help="show: only the keys a file or variable set")
    parser.add_argument("--json", action="store_true", help="show: print JSON for machines")
    parser.add_argument("--force", action="store_true",
                        help="init: overwrite PATH if it exists")
    parser.add_argument("--active", action="store_true",
                        help="init: write every key active, pinned to this version's defaults "
                             "(default: commented out, so later measured defaults apply)")


def run(args: argparse.Namespace) -> int:
    _check_options(args)
    if args.action == "init":
        return _init(args)
    loaded = load_config(args.config)
    keys = loaded.keys()
    if args.json:
        out: dict[str, Any] = {
            "file": str(loaded.path) if loaded.path else None,
            "keys": {k.key: {"value": k.value, "default": k.default, "source": k.source,
                             "allowed": k.allowed} for k in keys},
        }
        json.dump(out, sys.stdout, ensure_ascii=False, indent=2)
        sys.stdout.write("\n")
        return 0
    sys.stdout.write(show_toml(keys, loaded.path, changed=args.changed))
    return 0


def _check_options(args: argparse.Namespace) -> None:
    """Options that belong to the other action are an error, not silently ignored."""
    other = {"show": ("force", "active"), "init": ("config", "changed", "json")}[args.action]
    given = [f"--{name}" for name in other if getattr(args, name)]
    if given:
        raise InputError(f"{', '.join(given)} is not an option of 'config {args.action}' "
                         "(see loopbreak config --help)")
    if args.action == "show" and args.path is not None:
        raise InputError(f"config show takes no PATH ({args.path!r}): name the file to read "
                         "with --config FILE")


# --- show ------------------------------------------------------------------------------------


def _source(info: KeyInfo) -> str:
    if info.source == "default":
        return "default"
    where = f"${info.source}" if info.source.startswith("LOOPBREAK_") else info.source
    return _one_line(f"from {where} (default {toml_value(info.default)})")


def _one_line(text: str) -> str:
    """A comment cannot hold a line break or other control character (a file's name can)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _typed(info: KeyInfo) -> Any:
    """The value as its key's type: a number key given an integer is written as a float."""
    if isinstance(info.default, float) and isinstance(info.value, int) \
            and not isinstance(info.value, bool):
        return float(info.value)
    return info.value


def show_toml(keys: Iterable[KeyInfo], path: Path | None = None, *,
              changed: bool = False) -> str:
    """The configuration in force as TOML: one table per section, each key with a comment
    saying where its value came from (``# default``, ``# from FILE``, ``# from $VAR``)."""
    keys = list(keys)
    layers = ["defaults"] + ([str(path)] if path else [])
    if any(k.source.startswith("LOOPBREAK_") for k in keys):
        layers.append("LOOPBREAK_* variables")
    lines = [_one_line(f"# loopbreak {__version__}: the configuration in force "
                       f"({', then '.join(layers)})."),
             "# Valid TOML: saved, it loads to these values (--config FILE)."]
    if changed:
        lines.append("# Only the keys a file or variable set (--changed).")
    by_section: dict[str, list[KeyInfo]] = {}
    for info in keys:
        if changed and info.source == "default":
            continue
        by_section.setdefault(info.key.split(".", 1)[0], []).append(info)
    for section, infos in by_section.items():
        assigns = [f"{toml_key(i.key.split('.', 1)[1])} = {toml_value(_typed(i))}" for i in infos]
        width = max(len(a) for a in assigns)
        lines += ["", f"[{toml_key(section)}]"]
        lines += [f"{a.ljust(width)}  # {_source(i)}" for a, i in zip(assigns, infos)]
    return "\n".join(lines) + "\n"


# --- init ------------------------------------------------------------------------------------


def _clean_doc(text: str) -> str:
    """A docstring or reason as one plain line: reST roles and double backquotes dropped."""
    text = re.sub(r":\w+:`~?([^`]*)`", r"\1", text).replace("``", "`")
    return " ".join(text.split())


def _allowed(f: dataclasses.Field[Any]) -> str:
    choices = f.metadata["choices"]
    if choices:
        return "one of " + ", ".join(toml_value(c) for c in choices)
    return _describe(f)


def _comment(text: str, indent: str = "") -> list[str]:
    return textwrap.wrap(text, WIDTH - len(indent) - 2, initial_indent=f"{indent}# ",
                         subsequent_indent=f"{indent}# ", break_long_words=False,
                         break_on_hyphens=False)


def init_template(*, active: bool = False) -> str:
    """A TOML file with every key at its measured default, each commented with its reason
    and allowed values; keys commented out unless ``active``. Either loads to the defaults."""
    lines = [
        f"# loopbreak configuration (template written by loopbreak {__version__}:",
        "# loopbreak config init).",
        "#",
        "# Every key is optional; a key left out takes its measured default.",
    ]
    if active:
        lines += ["# Every key below is set to this version's default (config init --active):",
                  "# a key you keep pins that value when a later version measures another."]
    else:
        lines += ["# Every key below is commented out at its default: uncomment and edit the",
                  "# ones you change, so the others follow the defaults of later versions."]
    lines += [
        f"# Use it with --config FILE or {ENV_CONFIG_FILE}=FILE; LOOPBREAK_<SECTION>__<KEY>",
        "# variables override it. `loopbreak config show --config FILE` prints what is in",
        "# force and where each value came from.",
    ]
    fields: dict[str, list[tuple[str, dataclasses.Field[Any]]]] = {}
    for key, f in iter_keys():
        section, name = key.split(".", 1)
        fields.setdefault(section, []).append((name, f))
    for section, items in fields.items():
        lines += ["", ""]
        lines += _comment(_clean_doc(_SECTIONS[section].__doc__ or section))
        lines.append(f"[{toml_key(section)}]")
        for name, f in items:
            lines.append("")
            lines += _comment(_clean_doc(f.metadata["doc"]))
            lines += _comment(f"Allowed: {_allowed(f)}.")
            assign = f"{toml_key(name)} = {toml_value(f.default)}"
            lines.append(assign if active else f"# {assign}")
    return "\n".join(lines) + "\n"


def _init(args: argparse.Namespace) -> int:
    text = init_template(active=args.active)
    if args.path in (None, "-"):
        sys.stdout.write(text)
        return 0
    path = Path(args.path)
    _output.check_output_file(path, str(path), "loopbreak.toml")
    if path.exists() and not args.force:
        raise InputError(f"{path} exists: pass --force to overwrite it, or name another file")
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror}") from None
    if not getattr(args, "quiet", 0):
        print(f"wrote {path}: every key at its default, "
              f"{'active' if args.active else 'commented out'}; use it with --config {path} "
              f"or {ENV_CONFIG_FILE}={path}", file=sys.stderr)
    return 0


# --- a TOML writer for configuration values --------------------------------------------------

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f",
            "\r": "\\r"}


def toml_key(key: str) -> str:
    """A key as TOML writes it: bare where it can be, else a quoted string."""
    return key if _BARE_KEY.fullmatch(key) else toml_string(key)


def toml_string(text: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters escaped."""
    out = []
    for ch in text:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def toml_value(value: Any) -> str:
    """A configuration value as TOML: true/false, an integer, a float that reads back
    exactly, a string, or an array of those."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)  # always has a '.' or an exponent, and reads back the same float
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {type(value).__name__} values: {value!r}")
