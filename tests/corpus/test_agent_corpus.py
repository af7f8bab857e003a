"""The rules across tool calls on the committed agent corpus (``agent-corpus/``): real runs
of real agents from ten public sources, labelled stuck or healthy. What the README
promises is held here: stuck runs steered by the third repeat of their loop and stopped
by the fourth, whether the host flags failures or the failure is read from the result's
text; no healthy run denied; the same when each source is judged under values the others
chose."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

from loopbreak import Config, looks_like_failure
from loopbreak._errors import InputError
from loopbreak.offline.agent_corpus import (
    MODES,
    evaluate,
    leave_one_source_out,
    load_trajectories,
    sweep,
    tally,
)

CORPUS = Path(__file__).resolve().parents[2] / "agent-corpus"
PERMISSIVE = {"MIT", "Apache-2.0", "BSD-3-Clause", "BSD-2-Clause"}
RUNS = load_trajectories([CORPUS])


def test_every_source_says_where_it_came_from_under_a_licence_that_allows_it() -> None:
    folders = sorted(p for p in CORPUS.iterdir() if p.is_dir())
    assert len(folders) >= 4
    for folder in folders:
        assert (folder / "SOURCE.md").is_file(), folder
        with gzip.open(folder / "trajectories.jsonl.gz", "rt", encoding="utf-8") as rows:
            for line in rows:
                row = json.loads(line)
                prov = row["provenance"]
                assert prov["licence"] in PERMISSIVE, (folder.name, prov["licence"])
                assert len(prov["commit"]) == 40 and prov["repo"].count("/") == 1
                assert row["source"] == folder.name and row["id"].startswith(folder.name)


def test_the_corpus_is_large_and_varied() -> None:
    labels = Counter(t.label for t in RUNS)
    assert len(RUNS) >= 200 and labels["healthy"] >= 150 and labels["stuck"] >= 150
    stuck_sources = {t.source for t in RUNS if t.label == "stuck"}
    assert len(stuck_sources) >= 4
    assert {t.pattern for t in RUNS if t.label == "stuck"} >= {
        "failing-call", "no-progress", "alternation", "repeated-error"}
    assert {t.hard_negative for t in RUNS} >= {"lookup", "fix-then-success", "two-retries"}


@pytest.mark.parametrize("reading", MODES)
def test_stuck_runs_are_steered_and_stopped_and_no_healthy_run_is_denied(reading: str) -> None:
    verdicts = evaluate(RUNS, Config(), reading)  # type: ignore[arg-type]
    score = tally(verdicts)["all"]
    assert score.healthy_denied == 0, [v.trajectory.id for v in verdicts
                                       if v.trajectory.label == "healthy" and v.stopped]
    assert score.caught >= 0.95 * score.stuck, (score.caught, score.stuck)
    for pattern, part in tally(verdicts, "pattern").items():
        if part.stuck:
            assert part.caught >= 0.85 * part.stuck, (pattern, part.as_dict())


def test_failures_are_read_as_the_hosts_that_flag_them_say() -> None:
    agree: Counter[tuple[bool, bool]] = Counter()
    for run in RUNS:
        for step in run.steps:
            if step["role"] == "tool" and isinstance(step.get("failed"), bool):
                agree[(step["failed"], looks_like_failure(step.get("result") or ""))] += 1
    flagged = agree[(True, True)] + agree[(True, False)]
    clean = agree[(False, True)] + agree[(False, False)]
    assert flagged >= 200 and clean >= 1000
    assert agree[(True, True)] >= 0.75 * flagged  # 221 of 282 when this was written
    assert agree[(False, True)] <= 0.005 * clean  # 1 of 1,742


@pytest.mark.slow
def test_each_source_held_out_keeps_the_promise() -> None:
    points = sweep(RUNS)
    shipped = [p for p in points if p.default]
    assert {p.key for p in shipped} == {p.key for p in points}  # every key's default swept
    for reading in MODES:
        held = leave_one_source_out(RUNS, points, reading=reading)  # type: ignore[arg-type]
        caught = sum(h.score.caught for h in held)
        stuck = sum(h.score.stuck for h in held)
        assert caught >= 0.95 * stuck, (reading, caught, stuck)
        # The others pick the most aggressive value that denies none of theirs; once that was
        # tool_failure.deny_after = 2, and it denied one healthy run of the held-out source
        # (the README's figures): the shipped 3 keeps a margin the greedy choice does not.
        assert sum(h.score.healthy_denied for h in held) <= 1, reading


def test_a_malformed_row_is_a_clear_error(tmp_path: Path) -> None:
    folder = tmp_path / "src"
    folder.mkdir()
    with gzip.open(folder / "trajectories.jsonl.gz", "wt", encoding="utf-8") as out:
        out.write(json.dumps({"id": "src:1", "label": "stuck", "pattern": "no-progress",
                              "repeats": [0], "steps": [{"role": "assistant"}]}) + "\n")
    with pytest.raises(InputError, match=r"trajectories.jsonl.gz:1: 'repeats' must list"):
        load_trajectories([tmp_path])
    (folder / "trajectories.jsonl.gz").write_bytes(b"\x1f\x8b torn")
    with pytest.raises(InputError, match=r"trajectories\.jsonl\.gz: cannot read"):
        load_trajectories([tmp_path])
