"""An absent real corpus skips its tests, except under CI, where it fails them.

``.ci/run`` exports ``LOOPBREAK_REQUIRE_CORPUS=1``: a wrong ``LOOPBREAK_CORPUS`` must turn the
run red, not pass it with every real-corpus test skipped.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from support import REPO, REQUIRE_CORPUS_ENV, corpus_required

ONE_TEST = "tests/corpus/test_real_corpus.py::test_every_real_loop_is_cut"


@pytest.mark.parametrize(("value", "required"), [
    (None, False), ("", False), ("0", False), (" 0 ", False), ("1", True), ("yes", True)])
def test_the_setting_reads_as_documented(monkeypatch: pytest.MonkeyPatch, value: str | None,
                                         required: bool) -> None:
    if value is None:
        monkeypatch.delenv(REQUIRE_CORPUS_ENV, raising=False)
    else:
        monkeypatch.setenv(REQUIRE_CORPUS_ENV, value)
    assert corpus_required() is required


def _run_with_corpus_at(path: Path, *, required: bool) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LOOPBREAK_CORPUS": str(path)}
    env.pop(REQUIRE_CORPUS_ENV, None)
    if required:
        env[REQUIRE_CORPUS_ENV] = "1"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rEs", "-p", "no:cacheprovider",
                           ONE_TEST], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)


def test_a_wrong_corpus_path_skips_by_default_and_fails_when_required(tmp_path: Path) -> None:
    absent = tmp_path / "no-corpus-here"

    skipped = _run_with_corpus_at(absent, required=False)
    assert skipped.returncode == 0, skipped.stdout + skipped.stderr
    assert "1 skipped" in skipped.stdout
    assert f"real corpus not found at {absent}" in skipped.stdout

    failed = _run_with_corpus_at(absent, required=True)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "1 error" in failed.stdout  # the fixture fails: an error in setup, the run is red
    assert f"real corpus not found at {absent}" in failed.stdout
    assert f"{REQUIRE_CORPUS_ENV} is set" in failed.stdout
