"""Shared fixtures: where the real corpus is, and helpers to feed streams."""

from __future__ import annotations

from pathlib import Path

import pytest

from support import real_corpus


@pytest.fixture(scope="session")
def corpus() -> Path:
    root = real_corpus()
    if not (root / "dsh-loop-guard").is_dir():
        pytest.skip(f"real corpus not found at {root}: set LOOPBREAK_CORPUS to run this test")
    return root
