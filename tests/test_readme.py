"""The README stays true: its examples run, its configuration table is the code's."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from loopbreak._config import _describe, iter_keys
from support import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.S)


@pytest.mark.parametrize("index", range(len(_blocks("python"))))
def test_python_examples_run(index: int) -> None:
    code = _blocks("python")[index]
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_scan_example_prints_what_the_readme_shows() -> None:
    block = next(b for b in _blocks("bash") if "loopbreak scan" in b)
    command = "\n".join(line for line in block.splitlines() if not line.startswith("#"))
    shown = [line[2:] for line in block.splitlines() if line.startswith("# {")]
    bindir = str(REPO / ".venv" / "bin")
    env = {"PATH": f"{sys.prefix}/bin:{bindir}:/usr/bin:/bin"}
    proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=env,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == shown


def test_configuration_table_is_the_code() -> None:
    rows = {}
    for line in README.splitlines():
        match = re.match(r"\| `([a-z_]+\.[a-z_]+)` \| `([^`]*)` \| (.*?) \| (.*) \|$", line)
        if match:
            rows[match.group(1)] = match.groups()[1:]
    keys = list(iter_keys())
    assert list(rows) == [key for key, _ in keys]
    for key, field in keys:
        default, allowed, why = rows[key]
        value = field.default
        expected = ("true" if value else "false") if isinstance(value, bool) else \
            f'"{value}"' if isinstance(value, str) else \
            f"{value:g}" if isinstance(value, float) else str(value)
        assert (default, allowed, why) == (expected, _describe(field), field.metadata["doc"]), key
