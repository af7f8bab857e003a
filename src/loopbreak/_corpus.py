"""Labelled streams to measure the rules on: the real corpus, clean text on the
machine, and the project's own samples.

The real corpus (``dsh-loop-guard`` fixtures, AlpacaEval answers) is found
through one setting, ``$LOOPBREAK_CORPUS``, which defaults to ``../shared/corpus``;
it is read in place and never copied into the project. Clean text that every
machine has: the Python standard library's sources.
"""

from __future__ import annotations

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
STRONG_MODELS = ("gpt4_1106_preview", "claude-3-5-sonnet-20240620")

Label = Literal["loop", "clean"]


@dataclass(frozen=True)
class LabelledStream:
    """A stream with its label; ``loop_start`` where the loop's start is known."""

    id: str
    group: str
    label: Label
    channel: Channel
    text: str
    loop_start: int | None = None


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
                                 item["output"])


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
                                 channel, text)


SMOLLM2_LISTS = "smollm2-lists"


def smollm2_lists() -> Iterator[LabelledStream]:
    """Runaway lists SmolLM2-135M-Instruct really wrote (greedy, 500 new tokens), recorded
    by ``scripts/record_smollm2_lists.py``: visible answers whose items repeat while their
    numbers tick (``14. Pluto``, ``15. Pluto``, ...)."""
    for line in data_text("smollm2_lists.jsonl").splitlines():
        row = json.loads(line)
        yield LabelledStream(row["id"], SMOLLM2_LISTS, "loop", "text", row["text"])


def sample_streams() -> Iterator[LabelledStream]:
    """The project's own generated loops, recorded loops and written clean calls."""
    for sample in loop_samples():
        yield LabelledStream(sample.name, "samples", "loop", sample.channel, sample.text,
                             sample.loop_start)
    yield from smollm2_lists()
    for sample in clean_samples():
        yield LabelledStream(sample.name, "samples", "clean", sample.channel, sample.text)


def labelled_jsonl(path: str | os.PathLike[str]) -> Iterator[LabelledStream]:
    """Labelled streams from a JSONL file in the ``loopbreak scan`` format plus
    ``"label": "loop" | "clean"`` (and optionally ``"loop_start"``, the character where
    the loop begins). A bad line is a one-line error naming it."""
    from loopbreak._engine.trip import CHANNELS

    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: invalid UTF-8 at byte {exc.start}") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise InputError(f"{where}: invalid JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise InputError(f"{where}: a stream must be a JSON object")
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
