"""The systemd unit: notify type, watchdog, restore after any stop, hardening vs radosgw's unit."""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parents[2] / "systemd" / "rgwkeeper.service"
RADOSGW_UNIT = Path("/lib/systemd/system/ceph-radosgw@.service")


def _unit():
    cp = configparser.ConfigParser(strict=False, interpolation=None)
    cp.optionxform = str
    cp.read_string(UNIT.read_text())
    return cp


def test_service_shape():
    svc = _unit()["Service"]
    assert svc["Type"] == "notify" and svc["Restart"] == "on-failure"
    assert int(svc["WatchdogSec"]) > 0 and svc["User"] == "rgwkeeper"
    assert "rgwkeeper daemon" in svc["ExecStart"]
    assert "rgwkeeper restore --own" in svc["ExecStopPost"]
    assert svc["NoNewPrivileges"] == "yes" and svc["ProtectSystem"] == "strict"


def _exposure(path: Path) -> float:
    out = subprocess.run(["systemd-analyze", "security", "--offline=yes", str(path)], capture_output=True,
                         text=True, timeout=60).stdout
    return float(re.search(r"Overall exposure level for \S+: ([\d.]+)", out).group(1))


@pytest.mark.skipif(shutil.which("systemd-analyze") is None or not RADOSGW_UNIT.exists(),
                    reason="needs systemd-analyze and Debian's ceph-radosgw@.service (scripts/setup-host.sh installs both)")
def test_hardening_is_at_least_as_strict_as_radosgw(tmp_path):
    # Offline analysis needs a concrete instance name for the template.
    rgw = tmp_path / "ceph-radosgw@x.service"
    rgw.write_text(RADOSGW_UNIT.read_text())
    ours, theirs = _exposure(UNIT), _exposure(rgw)
    assert ours <= theirs, (ours, theirs)
    assert ours < 3.0
