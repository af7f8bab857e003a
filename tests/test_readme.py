"""The README stays true: its examples run, its generated parts match their sources."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from support import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")
# The integrations section is made of docs/integrations/*.md; each file's example runs in the
# test of its integration, against the scripted upstream.
OWN = README.split("<!-- integrations:start -->")[0] + README.split("<!-- integrations:end -->")[1]


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", OWN, flags=re.S)


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


def test_generated_parts_match_their_sources() -> None:
    """The configuration table is the code's keys, defaults and reasons; the integrations
    section is docs/integrations/*.md. ``python scripts/sync_readme.py`` rewrites both."""
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "sync_readme.py"), "--check"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, "README.md is stale: run python scripts/sync_readme.py"


def test_every_integration_doc_is_in_the_readme() -> None:
    for doc in sorted((REPO / "docs" / "integrations").glob("*.md")):
        assert doc.read_text(encoding="utf-8").rstrip() in README, doc.name


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_contents_list_every_section_in_order() -> None:
    prose = re.sub(r"^```.*?^```", "", README, flags=re.S | re.M)
    headings = re.findall(r"^## (.+)$", prose, flags=re.M)
    contents = README.split("**Contents**\n", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^- \[(.+)\]\(#([^)]+)\)$", contents, flags=re.M)
    assert [title for title, _ in listed] == headings
    assert [anchor for _, anchor in listed] == [_anchor(h) for h in headings]
    links = set(re.findall(r"\]\(#([^)]+)\)", README))
    anchors = {_anchor(h) for h in re.findall(r"^#{2,4} (.+)$", prose, flags=re.M)}
    assert links <= anchors, sorted(links - anchors)
