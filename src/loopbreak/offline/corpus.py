"""Labelled streams to measure the rules on: the real corpora, clean text on the
machine, and the project's own samples.

Three places hold real model output, each read in place:

* the shared corpus (``dsh-loop-guard`` fixtures, AlpacaEval answers, the
  hand-labelled ``alpaca_loops``), found through ``$LOOPBREAK_CORPUS``, default
  ``../shared/corpus``, and never copied into the project;
* the project's development corpus, ``corpus/`` in the repository (one folder
  per public source, whose licence lets it be redistributed; see its README),
  found through ``$LOOPBREAK_DEV_CORPUS``;
* sources whose licence does not let them be committed, kept beside it in
  ``.corpus-local/`` (``$LOOPBREAK_LOCAL_CORPUS``) on the machines that fetched
  them, in the same format.

Every stream names its ``source`` (a leave-one-source-out calibration holds one
out at a time) and, for loops, its ``kind`` and where it starts. Clean text that
every machine has: the Python standard library's sources.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from loopbreak._engine.trip import Channel
from loopbreak._errors import InputError
from loopbreak._samples import clean_samples, data_text, loop_samples

CORPUS_ENV = "LOOPBREAK_CORPUS"
DEFAULT_CORPUS = Path("..") / "shared" / "corpus"
DEV_CORPUS_ENV = "LOOPBREAK_DEV_CORPUS"
DEFAULT_DEV_CORPUS = Path("corpus")
LOCAL_CORPUS_ENV = "LOOPBREAK_LOCAL_CORPUS"
DEFAULT_LOCAL_CORPUS = Path(".corpus-local")

LOOP_KINDS = ("verbatim", "long-period", "paraphrase", "pool", "counter", "word-run", "flood")
"""Loop shapes a labelled loop may name (the development corpus's README defines them)."""
STRONG_MODELS = ("gpt4_1106_preview", "claude-3-5-sonnet-20240620")

Label = Literal["loop", "clean"]


@dataclass(frozen=True)
class LabelledStream:
    """A stream with its label; ``loop_start`` where the loop's start is known.

    ``group`` names the set a stream came in (what a sweep aims at); ``source`` the
    public source it came from (what a leave-one-source-out run holds out); ``kind``
    a loop's shape and ``period`` its exact period, where labelled.
    """

    id: str
    group: str
    label: Label
    channel: Channel
    text: str
    loop_start: int | None = None
    source: str = ""
    kind: str | None = None
    period: int | None = None


def corpus_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The corpus folder: ``explicit``, else ``$LOOPBREAK_CORPUS``, else ``../shared/corpus``."""
    if explicit is not None:
        return Path(explicit)
    return Path(os.environ.get(CORPUS_ENV) or DEFAULT_CORPUS)


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"corpus file not found: {path}") from None
    except ValueError as exc:
        raise InputError(f"{path}: invalid JSON: {exc}") from None


def dsh_loop_guard(root: Path) -> Iterator[LabelledStream]:
    """The dsh-loop-guard fixtures: real DeepSeek reasoning, labelled by the seed's authors."""
    for stream in _dsh_loop_guard(root):
        yield dataclasses.replace(stream, source="dsh-loop-guard")


def _dsh_loop_guard(root: Path) -> Iterator[LabelledStream]:
    base = root / "dsh-loop-guard"
    bleed = _load_json(base / "fixtures-reasoning-bleed.json")
    for item in bleed["loops"]:
        yield LabelledStream(f"loop-{item['seq']}", "bleed-loops", "loop", "reasoning",
                             item["text"])
    for item in bleed["normals"]:
        yield LabelledStream(f"normal-{item['seq']}", "bleed-normals", "clean", "reasoning",
                             item["text"])
    lines = _load_json(base / "fixtures-reasoning-lines.json")
    for item in lines["bleeds"]:
        yield LabelledStream(f"bleed-{item['reasoningChars']}", "line-bleeds", "loop",
                             "reasoning", item["head"])
    for item in lines["controls"]:
        yield LabelledStream(f"control-{item['seq']}", "line-controls", "clean", "reasoning",
                             item["head"])
    for item in _load_json(base / "fixtures-reasoning-quote.json")["quotes"]:
        yield LabelledStream(f"quote-{item['id']}", "quote", "clean", "reasoning", item["text"])
    for item in _load_json(base / "fixtures-reasoning-stall.json")["stalls"]:
        yield LabelledStream(f"stall-t{item['turn']}s{item['step']}", "stalls", "loop",
                             "reasoning", item["text"])


def alpaca_outputs(root: Path, models: tuple[str, ...] = STRONG_MODELS) -> Iterator[LabelledStream]:
    """AlpacaEval answers of ``models`` as clean visible text."""
    for model in models:
        for i, item in enumerate(_load_json(root / "alpaca_eval" / f"{model}.json")):
            yield LabelledStream(f"{model}#{i}", f"alpaca-{model}", "clean", "text",
                                 item["output"], source="alpaca-eval-strong")


def stdlib_sources(
    channels: tuple[Channel, ...] = ("reasoning", "text"),
) -> Iterator[LabelledStream]:
    """Every readable ``.py`` file of this Python's standard library, once per channel."""
    root = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(root.rglob("*.py")):
        if "site-packages" in path.parts or "dist-packages" in path.parts:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        for channel in channels:
            yield LabelledStream(str(path.relative_to(root)), f"stdlib-{channel}", "clean",
                                 channel, text, source="cpython-stdlib")


SMOLLM2_LISTS = "smollm2-lists"


def smollm2_lists() -> Iterator[LabelledStream]:
    """Runaway lists SmolLM2-135M-Instruct really wrote (greedy, 500 new tokens), recorded
    by ``scripts/record_smollm2_lists.py``: visible answers whose items repeat while their
    numbers tick (``14. Pluto``, ``15. Pluto``, ...)."""
    for line in data_text("smollm2_lists.jsonl").splitlines():
        row = json.loads(line)
        yield LabelledStream(row["id"], SMOLLM2_LISTS, "loop", "text", row["text"],
                             source="smollm2", kind="counter")


def alpaca_loops(root: Path) -> Iterator[LabelledStream]:
    """The 187 hand-labelled AlpacaEval answers of the shared corpus: periodic tails and
    floods (labelled with where the periodic tail starts), hard loops by kind, and four
    clean look-alikes."""
    path = root / "alpaca_loops" / "loops.jsonl"
    for number, row in _jsonl_rows(path):
        label = row.get("label")
        if label not in ("loop", "clean"):
            raise InputError(f"{path}:{number}: 'label' must be 'loop' or 'clean', not {label!r}")
        kind = row.get("kind") or ("verbatim" if label == "loop" else None)
        period = row.get("period")
        if kind == "verbatim" and isinstance(period, int) and period > 512:
            kind = "long-period"
        yield LabelledStream(str(row["id"]), "alpaca-loops", label, "text", row["text"],
                             row.get("onset"), source="alpaca-loops", kind=kind,
                             period=period if isinstance(period, int) else None)


def dev_corpus_dirs() -> list[Path]:
    """The development corpus and the local-only one, where they exist."""
    dirs = [Path(os.environ.get(DEV_CORPUS_ENV) or DEFAULT_DEV_CORPUS),
            Path(os.environ.get(LOCAL_CORPUS_ENV) or DEFAULT_LOCAL_CORPUS)]
    return [d for d in dirs if d.is_dir()]


def dev_corpus(dirs: list[Path] | None = None) -> Iterator[LabelledStream]:
    """Every labelled stream of the development corpora: one folder per source, each with
    ``loops.jsonl.gz`` and ``clean.jsonl.gz``."""
    for base in dev_corpus_dirs() if dirs is None else dirs:
        for folder in sorted(p for p in base.iterdir() if p.is_dir()):
            for name in ("loops.jsonl.gz", "clean.jsonl.gz"):
                path = folder / name
                if path.exists():
                    yield from _dev_rows(path, folder.name)


def _dev_rows(path: Path, source: str) -> Iterator[LabelledStream]:
    from loopbreak._engine.trip import CHANNELS

    for number, row in _jsonl_rows(path):
        where = f"{path}:{number}"
        label, channel, kind = row.get("label"), row.get("channel"), row.get("kind")
        if label not in ("loop", "clean"):
            raise InputError(f"{where}: 'label' must be 'loop' or 'clean', not {label!r}")
        if channel not in CHANNELS:
            raise InputError(f"{where}: unknown channel {channel!r}")
        if label == "loop" and kind not in LOOP_KINDS:
            raise InputError(f"{where}: 'kind' must be one of {', '.join(LOOP_KINDS)}, "
                             f"not {kind!r}")
        text, onset, period = row.get("text"), row.get("onset"), row.get("period")
        if not isinstance(text, str):
            raise InputError(f"{where}: 'text' must be a string")
        if onset is not None and not (isinstance(onset, int) and 0 <= onset <= len(text)):
            raise InputError(f"{where}: 'onset' must be a position in the text, not {onset!r}")
        yield LabelledStream(str(row.get("id")), source, label, channel, text,
                             onset if label == "loop" else None, source=source,
                             kind=kind if label == "loop" else None,
                             period=period if isinstance(period, int) else None)


def _jsonl_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """The JSON objects of a (gzip-compressed) JSONL file with their line numbers; a bad
    line is a one-line error naming it."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as lines:
            for number, line in enumerate(lines, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError as exc:
                    raise InputError(f"{path}:{number}: invalid JSON: {exc}") from None
                if not isinstance(row, dict):
                    raise InputError(f"{path}:{number}: a row must be a JSON object")
                yield number, row
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: invalid UTF-8 at byte {exc.start}") from None
    except (OSError, EOFError) as exc:
        raise InputError(f"{path}: cannot read: {exc}") from None


def sample_streams() -> Iterator[LabelledStream]:
    """The project's own generated loops, recorded loops and written clean calls."""
    for sample in loop_samples():
        yield LabelledStream(sample.name, "samples", "loop", sample.channel, sample.text,
                             sample.loop_start, source="samples")
    yield from smollm2_lists()
    for sample in clean_samples():
        yield LabelledStream(sample.name, "samples", "clean", sample.channel, sample.text,
                             source="samples")


def labelled_jsonl(path: str | os.PathLike[str]) -> Iterator[LabelledStream]:
    """Labelled streams from a JSONL file in the ``loopbreak scan`` format plus
    ``"label": "loop" | "clean"`` (and optionally ``"loop_start"``, the character where
    the loop begins). A bad line is a one-line error naming it."""
    from loopbreak._engine.trip import CHANNELS

    path = Path(path)
    for number, obj in _jsonl_rows(path):
        where = f"{path}:{number}"
        label, channel = obj.get("label"), obj.get("channel", "reasoning")
        if label not in ("loop", "clean"):
            raise InputError(f"{where}: 'label' must be 'loop' or 'clean', not {label!r}")
        if channel not in CHANNELS:
            raise InputError(f"{where}: unknown channel {channel!r}")
        text = obj.get("text")
        if text is None and isinstance(obj.get("pieces"), list):
            text = "".join(p for p in obj["pieces"] if isinstance(p, str))
        if not isinstance(text, str):
            raise InputError(f"{where}: a stream needs 'text' or 'pieces'")
        start = obj.get("loop_start")
        yield LabelledStream(str(obj.get("id", f"{path.name}:{number}")), path.name, label,
                             channel, text, start if isinstance(start, int) else None)
