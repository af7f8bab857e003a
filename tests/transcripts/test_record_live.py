"""Re-recording with the real dsh CLI gives the committed logs' calls (slow tier).

Runs ``scripts/record_dsh_sessions.py``'s ``loop`` scenario live: dsh 0.1.0-rc.8 from
``$LOOPBREAK_DSH_INSTALL`` (default /work/dsh-install, made by
``../shared/dsh/install_dsh.sh``) against the scripted upstream, in a fresh ``DSH_HOME``.
Skipped with the reason when the install or the shared patches are missing. About 2 s.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from loopbreak.offline.transcripts import Event, ReadReport, SessionStart
from loopbreak.offline.transcripts.dsh import read_dsh

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
COMMITTED = Path(__file__).resolve().parent / "data" / "recorded"


def _load_recorder() -> ModuleType:
    path = REPO / "scripts" / "record_dsh_sessions.py"
    spec = importlib.util.spec_from_file_location("record_dsh_sessions", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


rec = _load_recorder()


def _replayed(path: Path) -> tuple[list[Event], ReadReport]:
    """Everything the reader yields but the session's name and source, and its report.

    Calls, tool results and turns carry no ids or times (tool keys are the ids the
    scripted upstream gave), so equal lists mean the same session modulo ids and times.
    """
    events = list(read_dsh(path))
    report = events[-1]
    assert isinstance(events[0], SessionStart) and isinstance(report, ReadReport)
    return events[1:-1], report


def test_loop_scenario_records_the_committed_calls_again(tmp_path: Path) -> None:
    install = rec.find_install()
    if install is None:
        pytest.skip(f"no dsh install at {rec.install_dir()}: set {rec.INSTALL_ENV} to a folder "
                    f"made by ../shared/dsh/install_dsh.sh")
    patches = rec.shared_dir()
    missing = [name for name in rec.scenario("loop").patches if not (patches / name).is_file()]
    if missing:
        pytest.skip(f"dsh patches {missing} not found in {patches}: set {rec.SHARED_ENV}")

    recording = rec.record(rec.scenario("loop"), install, tmp_path)

    assert recording.exit_code == 0, recording.stderr
    assert recording.stdout == rec.LOOP_ANSWER + "\n"
    assert recording.upstream_errors == []
    assert recording.requests == [(200, "completed")]
    fresh, fresh_report = _replayed(recording.log)
    committed, _ = _replayed(COMMITTED / "loop.session.jsonl.zstd")
    assert fresh_report.bad_rows == 0 and not fresh_report.unknown_rows
    assert fresh == committed
