"""``loopbreak calibrate``: sweeps over labelled streams, and the shortcut they rely on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loopbreak._samples import loop_samples, verbatim_loop
from loopbreak.cli import main
from loopbreak.offline.calibrate import _trips, standard_sweeps
from loopbreak.offline.corpus import sample_streams, stdlib_sources


@pytest.mark.slow
def test_monotone_sweeps_can_prefilter_on_their_loosest_setting() -> None:
    """A clean stream that a setting trips is tripped by the sweep's loosest setting too,
    so running only the loosest over the large corpora loses nothing."""
    hard = [s for s in stdlib_sources(("reasoning",)) if s.id in {
        "test/test_email/test_email.py", "test/test_gettext.py", "test/test_enum.py",
        "test/test_generators.py", "idlelib/pyparse.py", "test/test_pprint.py"}]
    hard += [s for s in sample_streams() if s.label == "clean"]
    assert len(hard) >= 8
    checked = 0
    for sweep in standard_sweeps():
        if sweep.loosest is None:
            continue
        loose = {sid for sid, _ in _trips((sweep, dict(zip(sweep.keys, sweep.loosest)), hard))}
        for setting in sweep.settings():
            tripped = {sid for sid, _ in _trips((sweep, setting, hard))}
            assert tripped <= loose, (sweep.name, setting)
            checked += 1
    assert checked > 40


def test_calibrate_takes_labelled_jsonl(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPBREAK_CORPUS", str(tmp_path / "absent"))
    monkeypatch.setenv("LOOPBREAK_DEV_CORPUS", str(tmp_path / "absent"))
    monkeypatch.setenv("LOOPBREAK_LOCAL_CORPUS", str(tmp_path / "absent"))
    loop = verbatim_loop()
    labelled = tmp_path / "mine.jsonl"
    labelled.write_text(
        json.dumps({"id": "my-loop", "text": loop.text, "label": "loop",
                    "loop_start": loop.loop_start}) + "\n"
        + json.dumps({"id": "my-clean", "text": "A fine answer.\n" * 3, "label": "clean",
                      "channel": "text"}) + "\n", encoding="utf-8")
    assert main(["calibrate", "--input", str(labelled), "--only", "period cap",
                 "--stdlib-every", "400", "--jobs", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "corpus not found" in out["note"]
    (sweep,) = out["sweeps"]
    default = next(r for r in sweep["rows"] if r["default"])
    assert "my-loop" in default["cuts"] and default["cuts"]["my-loop"] < 1000
    assert default["clean_trips"] == 0
    tiny = next(r for r in sweep["rows"] if r["setting"] == {"cycle.max_period": 64})
    assert "my-loop" in tiny["missed"]


def test_bad_labelled_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "x", "label": "maybe"}\n', encoding="utf-8")
    assert main(["calibrate", "--input", str(bad), "--only", "period cap"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("'label' must be 'loop' or 'clean', not 'maybe'") and "\n" not in err


def test_cases_lists_every_loop(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPBREAK_CORPUS", str(tmp_path / "absent"))
    monkeypatch.setenv("LOOPBREAK_DEV_CORPUS", str(tmp_path / "absent"))
    monkeypatch.setenv("LOOPBREAK_LOCAL_CORPUS", str(tmp_path / "absent"))
    assert main(["calibrate", "--cases", "--stdlib-every", "400", "--jobs", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    loops = {item["id"]: item for item in out["loops"]}
    expected = {s.id for s in sample_streams() if s.label == "loop"}
    assert set(loops) == expected
    generated = {s.name for s in loop_samples()}
    assert all(item["rule"] for i, item in loops.items() if i in generated)
    # SmolLM2's runaway lists: all six are cut by counter-cycle ("41. Calcium (Ca)" and
    # "Le décembre 41: 42" read as prose since the code gate spares prose brackets).
    recorded = {i: item["rule"] for i, item in loops.items() if i.startswith("smollm2-")}
    assert set(recorded) == {"smollm2-planets", "smollm2-fruits", "smollm2-study-tips",
                             "smollm2-animals", "smollm2-elements", "smollm2-french-days"}
    assert set(recorded.values()) == {"counter-cycle"}
    assert all(not group["tripped"] for group in out["clean"].values())



def test_leave_one_source_out_scores_a_source_under_settings_it_did_not_choose() -> None:
    from loopbreak.offline.calibrate import leave_one_source_out, loso_sweeps
    from loopbreak.offline.corpus import LabelledStream

    intro = "Here is the answer you asked for, in full.\n"

    def loop(source: str, i: int, char: str) -> LabelledStream:
        return LabelledStream(f"{source}:l{i}", source, "loop", "text", intro + char * 600,
                              len(intro), source=source, kind="flood")

    def clean(source: str, i: int, text: str) -> LabelledStream:
        return LabelledStream(f"{source}:c{i}", source, "clean", "text", text, source=source)

    # Source "a" writes a legitimate 200-character run; source "b" never does.
    loops = [loop("a", i, "!") for i in range(3)] + [loop("b", i, "？") for i in range(3)]
    cleans = [clean("a", 0, intro + "=" * 10 + "!" * 200 + " done.\n"),
              clean("b", 0, intro + "A plain answer.\n" * 5)]
    (sweep,) = [s for s in loso_sweeps() if s.name == "char-run (text)"]
    held = {h.source: h for h in leave_one_source_out([sweep], loops, {"text": cleans,
                                                                       "reasoning": []})}
    # Chosen without "a": nothing seen forbids 128, so "a"'s own clean run is cut: the
    # out-of-sample cost a tuned default hides.
    assert held["a"].chosen == {"char_run.max_run": 128, "char_run.max_layout_run": 384}
    assert held["a"].score.clean_trips == ["a:c0"] and held["a"].score.cut == 3
    # Chosen with "a" seen: 256, the first run length that spares it, and "b" is still cut.
    assert held["b"].chosen.get("char_run.max_run", 256) == 256
    assert held["b"].score.clean_trips == [] and held["b"].score.cut == 3
