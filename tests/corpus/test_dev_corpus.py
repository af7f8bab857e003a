"""The development corpus: real loops and clean streams from public sources.

``corpus/`` in the repository holds the sources whose licence lets them be
redistributed (its README names each, with repository, commit and licence);
``.corpus-local/`` holds, on machines that fetched them, sources that may not be
committed. Every check runs the shipped defaults through ``loopbreak.scan``, the
path ``loopbreak scan`` takes, and reads every folder present.
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

import pytest

import loopbreak
from loopbreak.offline.calibrate import runs_long_enough
from loopbreak.offline.corpus import LOOP_KINDS, LabelledStream, alpaca_loops, dev_corpus
from support import REPO

CORPUS = REPO / "corpus"
LOCAL = REPO / ".corpus-local"
PERMISSIVE = {"Apache-2.0", "MIT", "BSD-3-Clause", "BSD-2-Clause", "CC-BY-4.0", "CC0-1.0"}

# Loops long enough to be cut in time, cut at shipped defaults, per source: the floor
# under what was measured on 2026-12-01 (README, "Measured results").
RECALL_FLOOR = {
    # Measured 2026-12-03: 505 of 520 (one-line code copies, indented Japanese prose, items).
    "ku-nlp-ja-vicuna-qa-benchmark": 0.95,
    "shreshthtuli-smart-glasses-llms": 0.90,
    "augmxnt-fastchat": 0.95,
    # Measured 2026-12-03: 161 of 181.
    "alpaca-loops": 0.88,
    "anirudhcheruvu-qwen3-0.6b-gsm8k-experiments": 0.88,
    "zhi0467-cot-loop": 0.70,
    # Measured 2026-12-02 when the source was added: 13 of 28 (its paraphrase loops, 4 of 18).
    "cpldcpu-misguidedattention": 0.45,
    # Measured 2026-12-02 when the source was added: 32 of 40; 39 of 40 since 2026-12-03
    # (three copies of a prose unit in reasoning cut once 192 characters repeat).
    "shisa-ai-shaberi": 0.95,
}


def _dirs() -> list[Path]:
    return [d for d in (CORPUS, LOCAL) if d.is_dir()]


def _streams() -> list[LabelledStream]:
    return list(dev_corpus(_dirs()))


def test_every_committed_source_says_where_it_came_from() -> None:
    sources = sorted(p for p in CORPUS.iterdir() if p.is_dir())
    assert len(sources) >= 4
    for folder in sources:
        assert (folder / "SOURCE.md").is_file(), folder
        for name in ("loops.jsonl.gz", "clean.jsonl.gz"):
            with gzip.open(folder / name, "rt", encoding="utf-8") as rows:
                for line in rows:
                    row = json.loads(line)
                    prov = row["provenance"]
                    assert prov["licence"] in PERMISSIVE, (folder.name, prov["licence"])
                    assert len(prov["commit"]) == 40 and prov["repo"].count("/") == 1
                    assert row["source"] == folder.name and row["id"].startswith(folder.name)
                    if row["label"] == "loop":
                        assert row["kind"] in LOOP_KINDS
                        assert 0 <= row["onset"] <= len(row["text"])


def test_the_committed_corpus_is_large_and_varied() -> None:
    streams = list(dev_corpus([CORPUS]))
    loops = [s for s in streams if s.label == "loop"]
    clean = [s for s in streams if s.label == "clean"]
    assert len(loops) >= 900 and len(clean) >= 12_000
    assert {s.kind for s in loops} >= {"verbatim", "long-period", "counter", "flood", "pool"}
    assert len({s.source for s in loops}) >= 4
    reasoning = [s for s in streams if s.channel == "reasoning"]
    reasoning_loops = [s for s in reasoning if s.label == "loop"]
    assert len(reasoning_loops) >= 70 and len({s.source for s in reasoning_loops}) >= 3
    assert sum(s.label == "clean" for s in reasoning) >= 3_000


# Finished Qwen3-1.7B traces of an unlicensed source (.corpus-local) that the defaults cut:
# sparing them would cut the seed's DeepSeek loops later (README, "Known limits").
KNOWN_LOCAL_TRIPS = {"zhi0467-cot-loop:c137", "zhi0467-cot-loop:p131"}


@pytest.mark.slow
def test_no_clean_stream_is_cut() -> None:
    tripped = []
    count = 0
    for stream in _streams():
        if stream.label != "clean":
            continue
        count += 1
        trip = loopbreak.scan(stream.text, stream.channel)
        if trip is not None:
            tripped.append((stream.id, trip.rule, trip.at))
    assert count >= 12_000
    committed = {p.name for p in CORPUS.iterdir() if p.is_dir()}
    assert [t for t in tripped if t[0].split(":")[0] in committed] == []
    assert {t[0] for t in tripped} <= KNOWN_LOCAL_TRIPS


@pytest.mark.slow
def test_recall_per_source_stays_above_its_floor(corpus: Path) -> None:
    cut: dict[str, list[bool]] = defaultdict(list)
    loops = [s for s in [*_streams(), *alpaca_loops(corpus)] if s.label == "loop"]
    for stream in loops:
        if runs_long_enough(stream):
            cut[stream.source].append(loopbreak.scan(stream.text, stream.channel) is not None)
    recall = {source: sum(v) / len(v) for source, v in cut.items()}
    for source, floor in RECALL_FLOOR.items():
        if source in recall:
            assert recall[source] >= floor, (source, recall[source])
    assert set(RECALL_FLOOR) & set(recall) >= {"ku-nlp-ja-vicuna-qa-benchmark",
                                               "shreshthtuli-smart-glasses-llms",
                                               "augmxnt-fastchat", "alpaca-loops"}


def test_the_look_alikes_that_repeat_on_purpose_are_left_alone(corpus: Path) -> None:
    clean = [s for s in alpaca_loops(corpus) if s.label == "clean"]
    assert len(clean) == 4
    for stream in clean:
        assert loopbreak.scan(stream.text, "text") is None, stream.id


def test_a_bad_row_is_one_line(tmp_path: Path) -> None:
    from loopbreak import InputError

    folder = tmp_path / "src"
    folder.mkdir()
    with gzip.open(folder / "loops.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write(json.dumps({"id": "x", "label": "loop", "channel": "text", "text": "a",
                            "kind": "spiral"}) + "\n")
    with pytest.raises(InputError, match=r"loops.jsonl.gz:1: 'kind' must be one of"):
        list(dev_corpus([tmp_path]))
    (folder / "loops.jsonl.gz").write_bytes(b"\x1f\x8b\x08\x00torn")
    with pytest.raises(InputError, match="cannot read"):
        list(dev_corpus([tmp_path]))
