#!/usr/bin/env bash
# Debian packages the test suite uses: a real Prometheus server for the metrics tests and, as root,
# what the Docker tests (tests/docker) need: a Docker engine with a client that builds with BuildKit
# (docker.io), docker-compose 1.29, and debootstrap for a local base image where no image registry
# is reachable. Without root the Docker tests skip, saying why.
set -euo pipefail
need=()
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
if [ "$(id -u)" -eq 0 ]; then
  command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
  command -v docker-compose >/dev/null 2>&1 || need+=(docker-compose)
  command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
fi
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "system-deps: ${need[*]} missing; install with: sudo apt-get install ${need[*]}" >&2
  exit 1
fi
echo "system-deps: installing ${need[*]} (Debian packages)"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
# The packages' services are not needed: tests start their own servers (and dockerd if none runs).
for service in prometheus docker; do
  (service "$service" stop || systemctl stop "$service" || true) >/dev/null 2>&1
done
