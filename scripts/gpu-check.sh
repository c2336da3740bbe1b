#!/usr/bin/env bash
# The GPU path checked end to end on a machine with an NVIDIA GPU, in one command of at most about
# ten minutes: set-up, the default judge served on the GPU, the README's request, the trap and the
# held-out sample through the service, the benchmark at concurrency 1, 16 and 64 against the raw
# engine; one JSON and one Markdown summary in the output folder (docs/gpu-check.md).
#   scripts/gpu-check.sh --help
#   scripts/gpu-check.sh --out runs/gpu-check/first
# Where no GPU is, it refuses at once (exit 2) and installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-python3}" -m loadtests.gpu_check "$@"
