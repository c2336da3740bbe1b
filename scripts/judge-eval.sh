#!/usr/bin/env bash
# The shipped judge's measurements (docs/results.md, "The default judge"), on the real engine.
# Usage: scripts/judge-eval.sh STEP [MODEL]   (from the repository root; MODEL default 'default')
# Every run writes OUT/results.jsonl as it goes (a rerun resumes) and OUT/report.{json,md,png}.
set -euo pipefail
cd "$(dirname "$0")/.."
step=${1:?usage: scripts/judge-eval.sh STEP [MODEL]}
model=${2:-default}
data=../shared/data
out=runs/judge-eval
bin=.venv/bin
pool=(--data "$data/train/helpsteer2_ratings_pairs.jsonl.gz"
      --data "$data/train/hh_rlhf_harmless_base_test.jsonl.gz"
      --data "$data/train/pandalm_human_testset.jsonl.gz")
export REFLECTRM_KV_CACHE_GIB=${REFLECTRM_KV_CACHE_GIB:-2}

heldout() {
  [ -s runs/heldout.jsonl.gz ] || "$bin/reflectrm" train heldout "${pool[@]}" --out runs/heldout.jsonl.gz
}

case "$step" in
  heldout-trained)  # the trained judge on every held-out pair, both orders, its own format
    heldout
    REFLECTRM_ENFORCE_FORMAT=false "$bin/reflectrm" eval --dataset heldout=runs/heldout.jsonl.gz \
      --mode single --max-tokens 64 --concurrency 16 --no-progress --model "$model" \
      --out-dir "$out/heldout-trained"
    "$bin/reflectrm" train vs-length --pairs runs/heldout.jsonl.gz \
      --results "$out/heldout-trained/results.jsonl" --title "Held-out pairs, trained judge" \
      --out "$out/heldout-trained/vs-length" ;;
  heldout-base)  # the base model on a sample of the held-out pairs (format enforced, as served)
    heldout
    "$bin/reflectrm" eval --dataset heldout=runs/heldout.jsonl.gz --limit 300 --mode single \
      --max-tokens 64 --concurrency 16 --no-progress --model base --out-dir "$out/heldout-base"
    REFLECTRM_ENFORCE_FORMAT=false "$bin/reflectrm" eval --dataset heldout=runs/heldout.jsonl.gz \
      --limit 100 --mode single --max-tokens 64 --concurrency 16 --no-progress --model base \
      --out-dir "$out/heldout-base-unenforced" ;;
  length-wrong-way)  # sets where the longer response is mostly the worse one
    "$bin/python" - <<'PY'
import gzip, json
for src, out, key, value in (
    ("rewardbench", "rewardbench-chat-hard", "section", "Chat Hard"),
    ("rm-bench", "rmbench-hard", "difficulty", "hard"),
):
    with gzip.open(f"../shared/data/benchmarks/{src}.jsonl.gz", "rt") as f, \
            gzip.open(f"runs/{out}.jsonl.gz", "wt") as g:
        g.writelines(line for line in f if json.loads(line).get(key) == value)
PY
    for name in rewardbench-chat-hard rmbench-hard; do
      REFLECTRM_ENFORCE_FORMAT=false "$bin/reflectrm" eval --dataset "$name=runs/$name.jsonl.gz" \
        --limit 300 --mode single --max-tokens 64 --concurrency 16 --no-progress \
        --model "$model" --out-dir "$out/$name"
      "$bin/reflectrm" train vs-length --pairs "runs/$name.jsonl.gz" \
        --results "$out/$name/results.jsonl" --title "$name, trained judge" \
        --out "$out/$name/vs-length"
    done ;;
  modes)  # single, vote and reflect on a held-out sample
    heldout
    REFLECTRM_ENFORCE_FORMAT=false "$bin/reflectrm" eval --dataset heldout=runs/heldout.jsonl.gz \
      --limit 100 --mode single --mode vote --mode reflect --max-tokens 64 --concurrency 8 \
      --no-progress --model "$model" --out-dir "$out/modes" ;;
  *) echo "unknown step $step" >&2; exit 2 ;;
esac
