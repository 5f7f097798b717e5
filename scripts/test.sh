#!/usr/bin/env bash
# The whole test suite: unit tests, then integration tests against a real Ceph
# (containerized, booted by the harness; or an existing cluster named by
# RGWKEEPER_TEST_CEPH_CONF & co, see docs/testing.md). Does all its own setup.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
timeout 1800 ./scripts/setup-host.sh
exec .venv/bin/python -m pytest -p no:cacheprovider "$@"
