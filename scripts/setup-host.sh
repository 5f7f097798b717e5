#!/usr/bin/env bash
# Idempotent host setup for rgwkeeper development, tests and the demo.
# Installs Debian packages (Ceph clients, librados for Python, the Docker engine,
# debootstrap for the test image), then the venv with rgwkeeper and its test extra.
# Safe to run again: each step checks before it acts.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${RGWKEEPER_VENV:-$ROOT/.venv}"
STAMP_DIR="$VENV/.stamps"

log() { printf 'setup: %s\n' "$*" >&2; }

# Debian packages. librados for Python is not on PyPI: it is python3-rados,
# built for /usr/bin/python3, so the venv below uses --system-site-packages.
# radosgw ships radosgw-admin; ceph-common ships ceph and rados. prometheus ships
# promtool, which checks and unit-tests the shipped alert rules (its service is not started).
APT_PACKAGES=(
  python3-venv python3-rados ceph-common radosgw
  docker.io debootstrap uuid-runtime ca-certificates prometheus
)

need_apt=()
for p in "${APT_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    need_apt+=("$p")
  fi
done
if ((${#need_apt[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    log "missing Debian packages: ${need_apt[*]}; run this script as root or install them"
    exit 1
  fi
  log "installing Debian packages: ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # policy-rc.d keeps package scripts from starting services on the host.
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

# The venv: Debian's interpreter, so python3-rados is importable.
if [[ ! -x "$VENV/bin/python" ]]; then
  log "creating venv $VENV"
  /usr/bin/python3 -m venv --system-site-packages "$VENV"
fi
mkdir -p "$STAMP_DIR"
req_hash="$(cat "$ROOT/setup.cfg" "$ROOT/pyproject.toml" 2>/dev/null | sha256sum | cut -c1-16)"
if [[ ! -e "$STAMP_DIR/pip-$req_hash" ]]; then
  log "installing rgwkeeper and its test extra into the venv"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q -e "$ROOT[test]"
  rm -f "$STAMP_DIR"/pip-*
  touch "$STAMP_DIR/pip-$req_hash"
fi
"$VENV/bin/python" -c 'import rados, rgwkeeper' || {
  log "venv check failed: rados or rgwkeeper does not import"; exit 1; }
log "host ready (venv: $VENV)"
