# The GRPO run on two CPU cores (docs/training.md section 7), the commands in the order they ran,
# from the repository root, on 2026-12-05. Each engine run took a lock file (flock) so
# that no two engines ran at once.
D=../shared/data; R=runs/grpo-cpu; T=".venv/bin/reflectrm train"
POOL="--data $D/train/helpsteer2_ratings_pairs.jsonl.gz --data $D/train/pandalm_human_testset.jsonl.gz \
  --benchmark $D/benchmarks/rewardbench.jsonl.gz --benchmark $D/benchmarks/rm-bench.jsonl.gz \
  --benchmark $D/benchmarks/rmb.jsonl.gz --benchmark $D/benchmarks/judgebench.jsonl.gz"
$T pool-split $POOL --role train --out $R/train-pool.jsonl            # 810 pairs
$T pool-split $POOL --role heldout --out $R/heldout-pool.jsonl        # 299 pairs
$T counterfactuals --pairs $R/train-pool.jsonl --out $R/train-pairs.jsonl \
  --per-kind 120 --kind non_answer --kind other_prompt                 # 240 pairs
$T counterfactuals --pairs $R/heldout-pool.jsonl --out $R/heldout-pairs.jsonl \
  --per-kind 50 --kind non_answer --kind other_prompt --seed 1         # 100 pairs

export REFLECTRM_TEMPLATE_VERSION=v3 REFLECTRM_KV_CACHE_GIB=1 REFLECTRM_MAX_MODEL_LEN=2048 \
  VLLM_CPU_OMP_THREADS_BIND=0-1
# 1. the base model judges each training pair 8 times (build-data-stats.json)
$T build-data --data $R/train-pairs.jsonl --model base --max-prompt-tokens 700 --samples 8 \
  --max-tokens 96 --concurrency 16 --out $R/data

# 2. the checks (one greedy judgment per pair and order; checks/<name>[-enforced][-trap].json)
check() {  # NAME MODEL
  for F in "" "--enforce-format"; do
    $T check --model $2 --pairs $R/heldout-pairs.jsonl --max-tokens 128 $F --out $R/checks/$1${F:+-enforced}.json
    $T check --model $2 --pairs harness/reflectrm_harness/evaluation/data/trap.jsonl --max-tokens 128 $F \
      --out $R/checks/$1${F:+-enforced}-trap.json
  done
}
check base base

# 3. the format warm-up (warmup-manifest.json)
OMP_NUM_THREADS=2 $T warmup --judgments $R/data/judgments.jsonl --output-dir $R/warmup \
  --set model=base --set template_version=v3 --set max_examples=40 --set epochs=2 --set batch=8 \
  --set learning_rate=1e-4

# 4a. the first GRPO run (first-run/): items as build-data then selected them, 80 of 107
# preference items with Response 2 winning; it learned to name Response 2, so it was measured
# without the format enforced only and build-data was fixed (preference items balanced)
OMP_NUM_THREADS=2 $T grpo --config small --data $R/data/train.jsonl --output-dir $R/grpo \
  --set model=$R/warmup/checkpoint                                     # 110 steps
$T check --model $R/grpo/checkpoint --pairs $R/heldout-pairs.jsonl --max-tokens 128 --out $R/checks/grpo.json
$T check --model $R/grpo/checkpoint --pairs harness/reflectrm_harness/evaluation/data/trap.jsonl \
  --max-tokens 128 --out $R/checks/grpo-trap.json
mv $R/grpo $R/grpo-first; mv $R/checks $R/checks-first                # first-run/
mkdir $R/checks; cp $R/checks-first/base*.json $R/checks/

# 4b. the run: the same judgments selected again by the fixed build-data, then GRPO
$T build-data --from-judgments $R/data/judgments.jsonl --max-prompt-tokens 700 --samples 8 \
  --max-tokens 96 --out $R/data-balanced                               # balanced-items-stats.json
OMP_NUM_THREADS=2 $T grpo --config small --data $R/data-balanced/train.jsonl --output-dir $R/grpo \
  --set model=$R/warmup/checkpoint --set max_steps=80                  # metrics.jsonl, grpo-manifest.json
check grpo $R/grpo/checkpoint
check warmup $R/warmup/checkpoint

# 5. the tables and the curve of docs/training.md
.venv/bin/python -m scripts.grpo_results --plot --write
