#!/usr/bin/env bash
# The main job on the embedded default: boot the containerized Ceph, put some load on
# RGW, run rgwkeeper against it and show what it sees, then tear everything down.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
timeout 1800 ./scripts/setup-host.sh
# Tentacle, the current release, unless RGWKEEPER_TEST_RELEASE names another (reef, pacific).
export RGWKEEPER_TEST_RELEASE="${RGWKEEPER_TEST_RELEASE:-tentacle}"
exec .venv/bin/python -m integration demo "$@"
