"""End a looping request inside vLLM: :class:`LoopbreakLogitsProcessor`.

A vLLM custom logits processor for both of vLLM's model runners: the V1 model
runner's interface (``vllm.v1.sample.logits_processor.LogitsProcessor``) and Model
Runner V2's (``vllm.v1.worker.gpu.sample.logits_processor.LogitsProcessor``, the
default in recent vLLM on GPUs). One class implements both; vLLM constructs and
drives it through whichever runner it picked. Load it when the engine starts::

    vllm serve MODEL \\
        --logits-processors loopbreak.integrations.vllm:LoopbreakLogitsProcessor

and opt a request in with the custom argument ``loopbreak`` (the REST API's
``vllm_xargs``, offline ``SamplingParams.extra_args``)::

    extra_body={"vllm_xargs": {"loopbreak": "auto"}}

Values: ``"auto"`` or ``1`` (reasoning while the request is inside a
``<think>`` block, text otherwise), ``"reasoning"`` or ``"text"`` (the channel the
output starts on), ``0`` or ``"off"`` (not opted in).

What it does per opted-in request, in the engine process where the tokens are
made: it decodes the request's new output ids incrementally (the same decoder
and judge as ``loopbreak.integrations.transformers``), feeds reasoning and answer
to the engine's rules (``<think>``/``</think>`` tokens switch between them), and
once a rule trips it forces end-of-sequence on that request's next token: every
logit ``-inf`` but the end-of-sequence token's. The request then finishes as a
normal ``stop``; the trip is logged (logger ``loopbreak.vllm``) and kept in
:attr:`LoopbreakLogitsProcessor.trips`. Requests that did not opt in cost nothing:
they have no state and ``apply`` never looks at their rows.

The engine configuration comes from :func:`loopbreak.load_config` (``LOOPBREAK_*``
variables, ``LOOPBREAK_CONFIG``) in the process that builds the processor.

Under the V1 model runner vLLM hands the processor each request's live list of
output ids (``update_state``). Model Runner V2 keeps them on the device: the
processor learns of a request in ``add_request`` (its slot; it declines the
requests that did not opt in, so vLLM skips it for batches without one) and, in
``apply``, copies each opted-in request's new ids (and, once, the prompt's tail)
from the runner's token buffer to the host in one transfer per step, then forces
end-of-sequence on every logits row of a tripped request (one row per draft token
under speculative decoding, which V2 runs custom processors under; the V1 runner
runs none there).

The module imports without vLLM; :class:`LoopbreakLogitsProcessor` then has no
vLLM base class, which is enough for its unit tests (``tokenizer=`` stands in for
the one vLLM would load). Needs the ``vllm`` extra to serve.
"""

from __future__ import annotations

import importlib
import logging
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from loopbreak._config import Config, load_config
from loopbreak._engine import accelerator
from loopbreak._engine.trip import Trip
from loopbreak._extras import missing
from loopbreak.integrations.transformers import (
    StartChannel,
    TokenJudge,
    make_decode,
    marker_ids,
    start_channel,
)

XARG = "loopbreak"
"""The custom argument (``vllm_xargs`` / ``extra_args`` key) a request opts in with."""

_ON = {"1", "on", "true", "yes"}
_OFF = {"", "0", "off", "false", "no"}
_CHANNELS: tuple[StartChannel, ...] = ("auto", "reasoning", "text")
_PROMPT_TAIL = 16  # prompt ids kept: decoding context, and where "auto" looks for <think>

logger = logging.getLogger("loopbreak.vllm")


def requested_channel(params: Any) -> StartChannel | None:
    """The channel a request opted in with (``None``: not opted in).

    Raises ``ValueError`` naming the allowed values for anything else, and for a
    request that also sets ``ignore_eos`` (an end-of-sequence it would ignore
    cannot end it).
    """
    extra = getattr(params, "extra_args", None)
    if not isinstance(extra, Mapping) or extra.get(XARG) is None:
        return None
    value = extra[XARG]
    channel: StartChannel | None
    if isinstance(value, bool) or (isinstance(value, (int, float)) and value in (0, 1)):
        channel = "auto" if value else None
    elif isinstance(value, str) and value.strip().lower() in _CHANNELS:
        channel = next(c for c in _CHANNELS if c == value.strip().lower())
    elif isinstance(value, str) and value.strip().lower() in _ON | _OFF:
        channel = "auto" if value.strip().lower() in _ON else None
    else:
        raise ValueError(
            f"{XARG} must be 1, 'auto', 'reasoning', 'text', or 0 / 'off' (not {value!r})")
    if channel is not None and getattr(params, "ignore_eos", False):
        raise ValueError(
            f"{XARG} ends a looping request with end-of-sequence, which ignore_eos=True "
            "ignores: drop one of them")
    return channel


V1_INTERFACE = "vllm.v1.sample.logits_processor"
V2_INTERFACE = "vllm.v1.worker.gpu.sample.logits_processor.interface"
"""Where vLLM defines each model runner's ``LogitsProcessor`` (both import without a GPU)."""


def _logits_processor_bases() -> tuple[type, ...]:
    """vLLM's ``LogitsProcessor`` classes where vLLM is installed: the V1 model runner's,
    then Model Runner V2's (older vLLM has only the first)."""
    bases: list[type] = []
    for module_name in (V1_INTERFACE, V2_INTERFACE):
        try:
            base = getattr(importlib.import_module(module_name), "LogitsProcessor", None)
        except ImportError:
            continue
        if isinstance(base, type):
            bases.append(base)
    return tuple(bases) or (object,)


if TYPE_CHECKING:
    _Bases: tuple[type, ...] = (object,)
else:
    _Bases = _logits_processor_bases()


def load_tokenizer(vllm_config: Any) -> Any:
    """The tokenizer vLLM uses for this model (its own cached loader, where the
    installed version has one)."""
    model_config = vllm_config.model_config
    if getattr(model_config, "skip_tokenizer_init", False):
        raise ValueError(
            "LoopbreakLogitsProcessor reads the generated text, which needs the tokenizer: "
            "serve without --skip-tokenizer-init")
    for module_name in ("vllm.tokenizers", "vllm.transformers_utils.tokenizer"):
        try:
            loader = importlib.import_module(module_name).cached_tokenizer_from_config
        except (ImportError, AttributeError):
            continue
        tokenizer = loader(model_config)
        if tokenizer is not None:
            return tokenizer
    try:
        transformers = importlib.import_module("transformers")
    except ImportError as exc:  # no vLLM (whose dependency it is) either
        raise missing(__name__, "vLLM", "vllm", exc) from exc
    return transformers.AutoTokenizer.from_pretrained(
        model_config.tokenizer, revision=getattr(model_config, "tokenizer_revision", None),
        trust_remote_code=getattr(model_config, "trust_remote_code", False))


@dataclass
class RequestState:
    """One opted-in request: its live output ids, how many were judged, its judge."""

    output: list[int]
    judge: TokenJudge
    fed: int = 0

    def catch_up(self) -> Trip | None:
        """Judge the output ids that arrived since the last step.

        Under async scheduling the newest id can be a ``-1`` placeholder until
        vLLM repairs it just before sampling; judging stops at the first one. vLLM
        may drop ids it had placed (after a failed KV load); judging then goes on
        from the shorter list.
        """
        self.fed = min(self.fed, len(self.output))
        new = self.output[self.fed:]
        for n, token_id in enumerate(new):
            if token_id < 0:
                new = new[:n]
                break
        self.fed += len(new)
        return self.judge.feed(new) if new else None


@dataclass
class SlotState:
    """Model Runner V2: one opted-in request in its slot. The judge is made at the
    request's first step, when the prompt's tail can be read from the device."""

    channel: StartChannel
    judge: TokenJudge | None = None
    fed: int = 0
    """Output ids judged so far."""


def is_v2_request_state(value: Any) -> bool:
    """Whether ``value`` is Model Runner V2's ``LogitsProcRequestState`` (what V2 passes
    where the V1 runner passes the device)."""
    return all(hasattr(value, name) for name in ("all_token_ids", "total_len", "prompt_len"))


class LoopbreakLogitsProcessor(*_Bases):  # type: ignore[misc]
    """vLLM logits processor: force end-of-sequence on opted-in requests that loop.

    The V1 model runner constructs it as ``(vllm_config, device, is_pin_memory)`` and
    drives it through ``update_state`` and ``apply(logits)``; Model Runner V2 as
    ``(vllm_config, req_states)`` (its ``LogitsProcRequestState``) through
    ``add_request`` and ``apply(logits, ctx)``. ``tokenizer`` and ``config`` are for
    use outside vLLM's loader (tests, embedding): by default the tokenizer is vLLM's
    for the served model and the configuration is :func:`loopbreak.load_config`'s.
    """

    def __init__(self, vllm_config: Any = None, device: Any = None,
                 is_pin_memory: bool = False, *, tokenizer: Any = None,
                 config: Config | None = None) -> None:
        self.config = config if config is not None else load_config().config
        # numba compiles or loads the kernels here, at engine start, not inside a step.
        accelerator.wanted(self.config.judging.compiled)
        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer(vllm_config)
        eos = getattr(self.tokenizer, "eos_token_id", None)
        if not isinstance(eos, int):
            raise ValueError("LoopbreakLogitsProcessor needs a tokenizer with an eos_token_id")
        self.eos_token_id: int = eos
        self._decode = make_decode(self.tokenizer)
        self._markers = marker_ids(self.tokenizer)
        self.req_states: Any = device if is_v2_request_state(device) else None
        """Model Runner V2's shared request state (``None`` under the V1 model runner)."""
        self.requests: dict[int, RequestState] = {}
        """V1 model runner: the opted-in requests by batch index."""
        self.slots: dict[int, SlotState] = {}
        """Model Runner V2: the opted-in requests by slot."""
        self.trips: deque[Trip] = deque(maxlen=256)
        """The latest trips (bounded), oldest first."""

    @classmethod
    def validate_params(cls, sampling_params: Any) -> None:
        """Reject a request whose ``loopbreak`` argument is not one we accept."""
        requested_channel(sampling_params)

    def is_argmax_invariant(self) -> bool:
        """It changes the argmax (to end-of-sequence), so greedy requests need it too."""
        return False

    def update_state(self, batch_update: Any) -> None:
        """Follow the persistent batch: removed, then added, then moved requests."""
        if batch_update is None:
            return
        for index in batch_update.removed:
            self.requests.pop(index, None)
        for added in batch_update.added:
            index, params, output = added[0], added[1], added[-1]
            prompt = added[2] if len(added) >= 4 else None
            channel = requested_channel(params)
            if channel is None:
                self.requests.pop(index, None)
                continue
            context = list(prompt[-_PROMPT_TAIL:]) if prompt else []
            self.requests[index] = RequestState(output, TokenJudge(
                self._decode, self.config, context=context, markers=self._markers,
                channel=start_channel(channel, context, self._markers)))
        for a, b, direction in batch_update.moved:
            moved_a = self.requests.pop(a, None)
            moved_b = self.requests.pop(b, None)
            if moved_a is not None:
                self.requests[b] = moved_a
            if moved_b is not None and getattr(direction, "name", "") == "SWAP":
                self.requests[a] = moved_b

    def apply(self, logits: Any, ctx: Any = None) -> Any:
        """Judge each opted-in request's new ids; force end-of-sequence where one tripped.

        ``ctx`` is Model Runner V2's ``LogitsContext`` (the V1 runner passes none)."""
        if ctx is not None:
            return self._apply_v2(logits, ctx)
        if not self.requests:
            return logits
        rows: list[int] = []
        for index, state in self.requests.items():
            if state.judge.trip is None:
                trip = state.catch_up()
                if trip is not None:
                    self._tripped(trip, state.judge, f"batch index {index}")
            if state.judge.trip is not None and index < logits.shape[0]:
                rows.append(index)
        if rows:
            force_token(logits, rows, self.eos_token_id)
        return logits

    def _tripped(self, trip: Trip, judge: TokenJudge, where: str) -> None:
        self.trips.append(trip)
        logger.warning("loopbreak: %s loop on %s after %d chars (%d tokens); ending the "
                       "request at %s", trip.rule, trip.channel, trip.offset,
                       judge.trip_token or 0, where)

    # -- Model Runner V2 ------------------------------------------------------------------

    def add_request(self, req_idx: int, sampling_params: Any) -> bool:
        """Model Runner V2: a request takes slot ``req_idx`` (whatever held it before is
        gone). Answers whether this processor acts on it: only if it opted in."""
        channel = requested_channel(sampling_params)
        if channel is None:
            self.slots.pop(req_idx, None)
            return False
        self.slots[req_idx] = SlotState(channel)
        return True

    def apply_staged_writes(self) -> None:
        """Model Runner V2: nothing is staged (the state lives on the host)."""

    def _apply_v2(self, logits: Any, ctx: Any) -> Any:
        if not self.slots:
            return logits
        batch = [int(slot) for slot in ctx.idx_mapping_np.tolist()]
        tripped: set[int] = set()
        reads: list[tuple[int, SlotState, int, int, int]] = []
        for pos, slot in enumerate(batch):
            state = self.slots.get(slot)
            if state is None:
                continue
            if state.judge is not None and state.judge.trip is not None:
                tripped.add(slot)
                continue
            prompt_len = int(self.req_states.prompt_len.np[slot])
            start = (prompt_len + state.fed if state.judge is not None
                     else max(prompt_len - _PROMPT_TAIL, 0))
            # This step's sequence length bounds the committed ids (exactly, without
            # speculative decoding); the device's total length trims the rest.
            end = max(int(ctx.seq_lens_upper_bound_np[pos]), prompt_len, start)
            reads.append((slot, state, prompt_len, start, end))
        for (slot, state, prompt_len, start, _), (total, ids) in zip(
                reads, read_committed(self.req_states, [(s, a, b) for s, _, _, a, b in reads])):
            ids = ids[:max(total - start, 0)]
            if state.judge is None:
                context, ids = ids[:prompt_len - start], ids[prompt_len - start:]
                state.judge = TokenJudge(
                    self._decode, self.config, context=context, markers=self._markers,
                    channel=start_channel(state.channel, context, self._markers))
            state.fed += len(ids)
            trip = state.judge.feed(ids) if ids else None
            if trip is not None:
                self._tripped(trip, state.judge, f"slot {slot}")
                tripped.add(slot)
        if tripped:
            if logits.shape[0] == len(batch):
                rows = [pos for pos, slot in enumerate(batch) if slot in tripped]
            else:  # speculative decoding: a request has one row per draft token
                rows = [row for row, slot in enumerate(ctx.expanded_idx_mapping.tolist())
                        if slot in tripped]
            force_token(logits, rows, self.eos_token_id)
        return logits


def read_committed(req_states: Any,
                   spans: Sequence[tuple[int, int, int]]) -> list[tuple[int, list[int]]]:
    """Model Runner V2: for each ``(slot, start, end)``, the slot's committed length and
    its token ids ``start:end`` (past the committed length they are stale), read from
    the runner's device buffers in one copy to the host."""
    if not spans:
        return []
    import torch

    tokens = req_states.all_token_ids.gpu
    total = req_states.total_len.gpu
    width = tokens.shape[1]
    parts = [total[slot:slot + 1].to(tokens.dtype) for slot, _, _ in spans]
    parts += [tokens[slot, min(start, width):min(end, width)] for slot, start, end in spans]
    flat = torch.cat(parts).tolist()
    out: list[tuple[int, list[int]]] = []
    at = len(spans)
    for n, (_, start, end) in enumerate(spans):
        size = max(min(end, width) - min(start, width), 0)
        out.append((int(flat[n]), [int(i) for i in flat[at:at + size]]))
        at += size
    return out


def force_token(logits: Any, rows: Sequence[int], token_id: int) -> None:
    """Make ``token_id`` the only choice of each of ``rows`` (in place)."""
    index = list(rows)
    logits[index] = float("-inf")
    logits[index, token_id] = 0.0
