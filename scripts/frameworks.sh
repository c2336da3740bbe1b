#!/usr/bin/env bash
# Fetches the trainers' own packages that the tests run against, once, into the cache (as the
# default model is): OpenRLHF, verl and NeMo Gym from PyPI, pinned by version and SHA-256
# (requirements/frameworks.txt), installed without their dependencies into site/; and the side
# environment that runs NeMo Gym's genrm_compare and genrm_model servers (gym-venv/, from
# requirements/nemo-gym-servers.txt, every package hashed). Nothing here is imported by the
# service: the tests put site/ on their path and start the Gym servers with gym-venv's Python.
#
# usage: scripts/frameworks.sh PYTHON   (the Python of the project's environment)
# Prints the folder. The folder's name is a digest of both requirement files and the Python
# version (tests/frameworks/installed.py computes the same), so a changed pin fetches afresh and
# worktrees share one copy. A failed or interrupted fetch leaves no stamp and is redone.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${1:?usage: frameworks.sh PYTHON}
version=$("$PYTHON" -c 'import sys; print(sys.version.split()[0])')
key=$(cat requirements/frameworks.txt requirements/nemo-gym-servers.txt <(echo "$version") \
  | sha256sum | cut -c1-16)
root="${XDG_CACHE_HOME:-$HOME/.cache}/reflectrm/frameworks"
dir="$root/$key"
mkdir -p "$root"

if [ ! -f "$dir/.complete" ]; then
  # One fetch at a time per cache (worktrees share it); the others wait for it.
  exec 9>"$root/.lock"
  flock 9
  if [ ! -f "$dir/.complete" ]; then
    echo "frameworks: fetching the pinned OpenRLHF, verl and NeMo Gym packages into $dir" >&2
    rm -rf "$dir"
    mkdir -p "$dir"
    "$PYTHON" -m pip install -q --no-deps --ignore-requires-python --require-hashes \
      --target "$dir/site" -r requirements/frameworks.txt
    "$PYTHON" -m venv "$dir/gym-venv"
    "$dir/gym-venv/bin/python" -m pip install -q --no-deps --require-hashes \
      -r requirements/nemo-gym-servers.txt
    # Gym's packages import as top-level names (nemo_gym, resources_servers, ...): the side
    # environment sees them through a .pth, as an installed Gym would be seen.
    purelib=$("$dir/gym-venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    echo "$dir/site" >"$purelib/reflectrm-frameworks.pth"
    "$dir/gym-venv/bin/python" -c "import ray, fastapi, omegaconf, nemo_gym.server_utils" \
      2>/dev/null || { echo "frameworks: the NeMo Gym side environment does not import" >&2; exit 1; }
    touch "$dir/.complete"
  fi
  flock -u 9
fi
echo "$dir"
