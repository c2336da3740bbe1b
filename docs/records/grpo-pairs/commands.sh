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
