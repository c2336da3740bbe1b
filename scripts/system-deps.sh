#!/usr/bin/env bash
# Debian packages the test suite uses: a real Prometheus server for the metrics tests.
set -euo pipefail
if command -v prometheus >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "system-deps: prometheus is missing; install it with: sudo apt-get install prometheus" >&2
  exit 1
fi
echo "system-deps: installing prometheus (Debian package)"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends prometheus >/dev/null
# The package's service is not needed: tests start their own server on loopback.
(service prometheus stop || systemctl stop prometheus || true) >/dev/null 2>&1
