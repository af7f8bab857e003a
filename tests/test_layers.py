"""The package's layers, read from the imports of every module: the engine knows nothing of
the rest, the recovery core nothing of the faces, no face of another face's framework, and
nothing but the command line of the benchmarks or the command line itself."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "loopbreak"

# Per layer (a path prefix inside the package): the parts of loopbreak it may import.
ALLOWED: dict[str, tuple[str, ...]] = {
    "_engine/": ("loopbreak._engine", "loopbreak._config", "loopbreak._errors"),
    "_recovery/": ("loopbreak._engine", "loopbreak._config", "loopbreak._errors",
                   "loopbreak._recovery"),
    "proxy/": ("loopbreak._engine", "loopbreak._config", "loopbreak._errors",
               "loopbreak._extras", "loopbreak._recovery", "loopbreak.proxy"),
    "integrations/": ("loopbreak._engine", "loopbreak._config", "loopbreak._errors",
                      "loopbreak._extras", "loopbreak._recovery", "loopbreak.integrations"),
    "offline/": ("loopbreak._engine", "loopbreak._config", "loopbreak._errors",
                 "loopbreak._extras",
                 "loopbreak._recovery", "loopbreak.offline", "loopbreak._samples",
                 "loopbreak.__version__", "loopbreak"),
}


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
    return [n for n in names if n == "loopbreak" or n.startswith("loopbreak.")]


def _modules(prefix: str) -> list[Path]:
    return sorted((PACKAGE / prefix).rglob("*.py"))


@pytest.mark.parametrize("layer", ALLOWED)
def test_each_layer_imports_only_what_is_below_it(layer: str) -> None:
    allowed = ALLOWED[layer]
    wrong = [f"{path.relative_to(PACKAGE)} imports {name}"
             for path in _modules(layer) for name in _imports(path)
             if not any(name == a or name.startswith(a + ".") for a in allowed)]
    assert wrong == []


def test_the_extras_table_stands_on_the_errors_alone() -> None:
    # _extras sits beside _errors under every layer: it may import nothing else of loopbreak.
    assert set(_imports(PACKAGE / "_extras.py")) <= {"loopbreak._errors"}


def test_only_the_command_line_reaches_the_benchmarks_and_itself() -> None:
    wrong = [f"{path.relative_to(PACKAGE)} imports {name}"
             for path in sorted(PACKAGE.rglob("*.py"))
             if not str(path.relative_to(PACKAGE)).startswith(("cli/", "bench/", "__main__"))
             for name in _imports(path)
             if name.startswith(("loopbreak.cli", "loopbreak.bench"))]
    assert wrong == []
