"""``loopbreak config show``: the effective configuration, key by key, with its source."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from loopbreak._config import load_config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["show"], help="show: print every key")
    parser.add_argument("--config", metavar="FILE",
                        help="TOML file (default: $LOOPBREAK_CONFIG when set)")
    parser.add_argument("--json", action="store_true", help="print JSON for machines")


def run(args: argparse.Namespace) -> int:
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
    from rich.console import Console
    from rich.table import Table

    table = Table(title="loopbreak configuration", title_justify="left")
    table.add_column("key", style="bold")
    table.add_column("value")
    table.add_column("source")
    table.add_column("allowed", style="dim")
    for k in keys:
        changed = k.source != "default"
        table.add_row(k.key, f"[yellow]{k.value!r}[/]" if changed else repr(k.value),
                      k.source, k.allowed)
    Console().print(table)
    return 0
