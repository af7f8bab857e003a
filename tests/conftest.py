"""Shared fixtures: where the real corpus is, and a scripted upstream on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from loopbreak.testing import ScriptedUpstream
from support import real_corpus


@pytest.fixture
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream() as up:
        yield up


@pytest.fixture(scope="session")
def corpus() -> Path:
    root = real_corpus()
    if not (root / "dsh-loop-guard").is_dir():
        pytest.skip(f"real corpus not found at {root}: set LOOPBREAK_CORPUS to run this test")
    return root
