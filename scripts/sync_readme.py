"""Rewrite the README's generated parts from their sources: the configuration table (from
the code's keys, defaults and reasons) and the integrations section (from
``docs/integrations/*.md``, each of which its own test runs). ``--check`` exits 1 when the
README differs from what would be written; ``tests/test_readme.py`` calls that check."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
DOCS = REPO / "docs" / "integrations"
ORDER = ["openai", "litellm", "langchain", "tools", "openai_agents", "pydantic_ai",
         "transformers", "vllm"]


def config_table() -> str:
    from loopbreak._config import _describe, iter_keys

    rows = ["| key | default | allowed | why |", "| --- | --- | --- | --- |"]
    for key, f in iter_keys():
        value = f.default
        if isinstance(value, bool):
            shown = "true" if value else "false"
        elif isinstance(value, str):
            shown = f'"{value}"'
        elif isinstance(value, float):
            shown = f"{value:g}"
        else:
            shown = str(value)
        rows.append(f"| `{key}` | `{shown}` | {_describe(f)} | {f.metadata['doc']} |")
    return "\n".join(rows) + "\n"


def integrations() -> str:
    names = [n for n in ORDER if (DOCS / f"{n}.md").exists()]
    extra = sorted(p.stem for p in DOCS.glob("*.md") if p.stem not in ORDER)
    return "\n".join((DOCS / f"{n}.md").read_text(encoding="utf-8").rstrip() + "\n"
                     for n in names + extra)


def _replace(text: str, name: str, body: str) -> str:
    start, end = f"<!-- {name}:start -->\n", f"<!-- {name}:end -->"
    if start not in text or end not in text:
        raise SystemExit(f"README.md has no {start.strip()} ... {end} markers")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}{body}{end}{tail}"


def generated(text: str) -> str:
    text = _replace(text, "config-table", config_table())
    return _replace(text, "integrations", integrations())


def main(argv: list[str]) -> int:
    text = README.read_text(encoding="utf-8")
    new = generated(text)
    if "--check" in argv:
        return 0 if new == text else 1
    README.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
