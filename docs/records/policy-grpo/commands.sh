# The policy run of docs/rlhf.md ("A policy trained on the service"), in the order the commands
# ran, on one 2-core CPU machine (AVX512-BF16), from the repository's root.

# The judge: the default judge (`make serve`'s), its engine's OpenMP threads on core 0, under the
# engine lock (the lock taken first, so the pid is the server's).
exec 9>/tmp/reflectrm-engine.lock; flock 9
env VLLM_CPU_OMP_THREADS_BIND=0 REFLECTRM_PORT=8100 REFLECTRM_KV_CACHE_GIB=3 .venv/bin/reflectrm serve &

# The policy: SmolLM2-135M-Instruct in float32 (`reflectrm prepare-model base --dtype float32`),
# the trainer on core 1 with one torch thread. 60 steps of 4 questions x 4 completions.
taskset -c 1 env PYTHONPATH=. OMP_NUM_THREADS=1 .venv/bin/python -m examples.policy_grpo train \
  --url http://127.0.0.1:8100 --out runs/policy/run1 --steps 60 --threads 1

# After step 15 the trainer and the judge were stopped (SIGINT) and the judge restarted on the
# code with shared likelihood passes and verdict digits read by id (one probe /v1/rewards call of
# 4 completions, counted in judge-metrics-at-resume.txt); the same train
# command resumed from trainer/checkpoint-15. judge-metrics-at-resume.txt is /metrics just after
# that probe; judge-metrics-after-training.txt is /metrics when training ended.

# The held-out measure, once, at the end (base and trained policy, greedy; rewards from the same
# judge): measure-heldout.json.
env PYTHONPATH=. .venv/bin/python -m examples.policy_grpo measure \
  --url http://127.0.0.1:8100 --out runs/policy/run1 --split heldout

# The tables and the curve of docs/rlhf.md, from these records:
.venv/bin/python -m scripts.policy_results --write --plot
