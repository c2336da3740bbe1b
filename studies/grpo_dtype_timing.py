"""One GRPO step's two costs on this CPU, bf16 against float32: a rollout of 16 completions of
64 tokens (2 prompts x 8) and one forward and backward pass over them, on the warm-up checkpoint
of docs/training.md section 7. Run from the repository root:

    OMP_NUM_THREADS=2 .venv/bin/python studies/grpo_dtype_timing.py
"""

from __future__ import annotations

import json
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

torch.set_num_threads(2)
path = "runs/grpo-cpu/warmup/checkpoint"
tok = AutoTokenizer.from_pretrained(path)
tok.padding_side = "left"
with open("runs/grpo-cpu/data/train.jsonl") as f:
    items = [json.loads(line) for line in f][:2]
texts = [
    tok.apply_chat_template(i["prompt"], tokenize=False, add_generation_prompt=True)
    for i in items
    for _ in range(8)
]
for dt in (torch.bfloat16, torch.float32):
    m = AutoModelForCausalLM.from_pretrained(path, dtype=dt)
    enc = tok(texts, return_tensors="pt", padding=True)
    t = time.time()
    with torch.no_grad():
        out = m.generate(  # type: ignore[misc]
            **enc, max_new_tokens=64, do_sample=True, temperature=1.0, pad_token_id=tok.pad_token_id
        )
    g = time.time() - t
    t = time.time()
    loss = m(input_ids=out, labels=out).loss
    loss.backward()
    fb = time.time() - t
    print(
        dt,
        "prompt",
        enc.input_ids.shape,
        "generate",
        round(g, 1),
        "fwd+bwd",
        round(fb, 1),
        flush=True,
    )
