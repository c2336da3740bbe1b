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
# reflect (the same command with --mode reflect) was not run yet: about an hour on this CPU.
.venv/bin/python -m scripts.mode_table --write
