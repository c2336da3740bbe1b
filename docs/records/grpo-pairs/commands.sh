# The GRPO pairs of docs/training.md ("Pairs whose length and position predict nothing") built on
# section 7's pools; no engine. Each command's output is saved beside this file (the pairs
# themselves, dataset text, are not).
D=../shared/data; R=runs/grpo-pairs; T=".venv/bin/reflectrm train"
POOL="--data $D/train/helpsteer2_ratings_pairs.jsonl.gz --data $D/train/pandalm_human_testset.jsonl.gz \
  --benchmark $D/benchmarks/rewardbench.jsonl.gz --benchmark $D/benchmarks/rm-bench.jsonl.gz \
  --benchmark $D/benchmarks/rmb.jsonl.gz --benchmark $D/benchmarks/judgebench.jsonl.gz"
$T pool-split $POOL --role train --out $R/train-pool.jsonl > docs/records/grpo-pairs/train-pool.txt
$T pool-split $POOL --role heldout --out $R/heldout-pool.jsonl > docs/records/grpo-pairs/heldout-pool.txt
TOK=~/.cache/reflectrm/models/SmolLM2-135M-Instruct-f32
$T grpo-pairs --pairs $R/train-pool.jsonl --out $R/train-pairs.jsonl --split train --per-kind 120 \
  --tokenizer $TOK > docs/records/grpo-pairs/train-pairs.txt
$T grpo-pairs --pairs $R/heldout-pool.jsonl --out $R/heldout-pairs.jsonl --split heldout \
  --per-kind 50 --seed 1 --tokenizer $TOK > docs/records/grpo-pairs/heldout-pairs.txt

# The rerun on those pairs (docs/training.md, "The rerun on those pairs"), 2026-12-06, each engine
# run under a lock file (flock) so that no two engines ran at once; outputs copied beside this
# file: build-data-stats.json, warmup-manifest.json, warmup-metrics.jsonl, grpo-manifest.json,
# metrics.jsonl, checks/ (those with the format enforced), strata.json, reward-curve.png.
export REFLECTRM_TEMPLATE_VERSION=v3 REFLECTRM_KV_CACHE_GIB=1 REFLECTRM_MAX_MODEL_LEN=2048 \
  VLLM_CPU_OMP_THREADS_BIND=0-1
TRAP=harness/reflectrm_harness/evaluation/data/trap.jsonl
CORR=harness/reflectrm_harness/evaluation/data/correctness.jsonl
# 1. the base judges each training pair 8 times (build-data-stats.json)
$T build-data --data $R/train-pairs.jsonl --model base --max-prompt-tokens 700 --samples 8 \
  --max-tokens 96 --concurrency 16 --out $R/data
# 2. the format warm-up, then GRPO from it, the items balanced by length (balance_length)
OMP_NUM_THREADS=2 $T warmup --judgments $R/data/judgments.jsonl --output-dir $R/warmup \
  --set model=base --set template_version=v3 --set max_examples=40 --set epochs=2 --set batch=8 \
  --set learning_rate=1e-4
OMP_NUM_THREADS=2 $T grpo --config small --data $R/data/train.jsonl --output-dir $R/grpo \
  --set model=$R/warmup/checkpoint --set max_steps=80 --set balance_length=true
# 3. the checks: one greedy judgment per pair and order (checks/<name>[-enforced][-<set>].json),
# with the format enforced (as served): the held-out pairs, the trap and the correctness set
run() {  # NAME MODEL SUFFIX PAIRS [FLAG]
  $T check --model $2 --pairs $4 --max-tokens 128 $5 --out $R/checks/$1$3.json
}
for M in base warmup grpo; do
  P=$R/$M/checkpoint; [ $M = base ] && P=base
  run $M $P -enforced $R/heldout-pairs.jsonl --enforce-format
  run $M $P -enforced-trap $TRAP --enforce-format
  run $M $P -enforced-correctness $CORR --enforce-format
done
# 4. the tables and the curve of docs/training.md
.venv/bin/python -m scripts.grpo_pairs_results --strata --plot --write

# 5. served as a user serves a checkpoint, with the defaults: the README's request and "What is
# 2+2?" in both orders, and a group reward as a trainer asks it (served.txt)
REFLECTRM_MODEL=$R/grpo/checkpoint REFLECTRM_PORT=8100 REFLECTRM_KV_CACHE_GIB=1 .venv/bin/reflectrm serve &
curl -s 127.0.0.1:8100/v1/judge -H 'content-type: application/json' -d '{"prompt": "What is the capital of France?",
  "responses": ["The capital of France is Paris.", "The capital of France is Berlin."]}'   # and swapped; 2+2
curl -s 127.0.0.1:8100/v1/rewards -H 'content-type: application/json' -d '{"prompt": "What is 7 times 6?",
  "completions": ["7 times 6 is 42.", "I am sorry, but I cannot help with that request.", "7 times 6 is 48.",
  "Multiplying 7 by 6 gives 42."]}'
