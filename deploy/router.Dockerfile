# syntax=docker/dockerfile:1
# vllm-router (a Rust load balancer for vLLM, from PyPI) for the fleet stack in
# deploy/compose.fleet.yaml: consistent hashing on X-Session-ID keeps each judgment on one replica.
FROM python:3.12-slim-bookworm

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# The same version the fleet tests run (the `dev` extra in pyproject.toml).
RUN pip install "vllm-router==0.1.17"

USER 65534
EXPOSE 8000 29000

HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/liveness', timeout=4)"]

ENTRYPOINT ["vllm-router"]
