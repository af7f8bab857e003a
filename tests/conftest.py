"""Shared fixtures: where the real corpus is, and a scripted upstream on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from loopbreak.testing import ScriptedUpstream
from support import REQUIRE_CORPUS_ENV, corpus_required, real_corpus


@pytest.fixture
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream() as up:
        yield up


@pytest.fixture(scope="session")
def corpus() -> Path:
    """The real corpus; its tests skip where it is absent, and fail instead where
    ``$LOOPBREAK_REQUIRE_CORPUS`` is set (CI sets it: a wrong path must not pass as green)."""
    root = real_corpus()
    if not (root / "dsh-loop-guard").is_dir():
        why = f"real corpus not found at {root}: set LOOPBREAK_CORPUS to run this test"
        if corpus_required():
            pytest.fail(f"{why} ({REQUIRE_CORPUS_ENV} is set)", pytrace=False)
        pytest.skip(why)
    return root
