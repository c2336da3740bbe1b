# The default judge, one mode per invocation of `reflectrm eval` (each its own engine, so no mode
# reads another's prefix cache), into one record; bf16, both cores, under the engine lock.
# The held-out split: the pool-split command of docs/results.md (runs/heldout.jsonl).
exec 9>/tmp/reflectrm-engine.lock; flock 9
for MODE in single margin; do
  VLLM_CPU_OMP_THREADS_BIND=0-1 .venv/bin/reflectrm eval --model default \
    --dataset heldout=runs/heldout.jsonl --limit heldout=200 \
    --dataset trap=harness/reflectrm_harness/evaluation/data/trap.jsonl \
    --dataset correctness=harness/reflectrm_harness/evaluation/data/correctness.jsonl \
    --mode $MODE --concurrency 8 --out-dir docs/records/default-judge-modes --no-progress
done
# reflect: started on the same 350 pairs, it judged one judgment in its first ten minutes (8 in
# flight, each about 9 minutes while other work shared the two cores) and was stopped (its `run`
# row and that judgment stay in results.jsonl). Run again on a nested sample of the same pairs
# (the --limit samples nest: 40 of the 200 held-out pairs, 20 of the trap's, 20 of the
# correctness set's), and stopped with SIGTERM before its end, for the time this machine had:
VLLM_CPU_OMP_THREADS_BIND=0-1 VLLM_REGEX_COMPILATION_TIMEOUT_S=120 .venv/bin/reflectrm eval \
  --model default --dataset heldout=runs/heldout.jsonl --limit heldout=40 \
  --dataset trap=harness/reflectrm_harness/evaluation/data/trap.jsonl --limit trap=20 \
  --dataset correctness=harness/reflectrm_harness/evaluation/data/correctness.jsonl \
  --limit correctness=20 --mode reflect --concurrency 8 \
  --out-dir docs/records/default-judge-modes --no-progress
# the whole record scored again, the pairs every mode judged in both orders set apart and scored,
# and the page's tables
.venv/bin/reflectrm eval --score-only --out-dir docs/records/default-judge-modes
.venv/bin/python -m scripts.mode_table --same-pairs
.venv/bin/reflectrm eval --score-only --out-dir docs/records/default-judge-modes/same-pairs
.venv/bin/python -m scripts.mode_table --write
