"""systemd/rgwkeeper.service under a real systemd: a container booted with systemd as PID 1
(integration/systemd_host.py) next to the Ceph one, installed as docs/operations.md says, with a
cephx client that has exactly the least-privilege caps of docs/cluster-access.md.

Pacific only: its wpq levers are the throttle that something must give back; on Reef and
Tentacle the daemon sets nothing (releases.SCRUB_LEVERS), so a stop would have nothing to restore.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from integration.cluster import CACHE_DIR
from integration import engine as engine_mod
from integration import systemd_host
from tests.integration.test_caps import documented_caps, make_client
from tests.integration.test_daemon import (  # noqa: F401 - journal_pool is a fixture
    POOL, _break_leftover_leader_locks, _toml, clean, data_pool_write_ops, every_lever_effective, journal_pool,
    levers, mon_db, put_load, wait_for)

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "systemd" / "rgwkeeper.service"
#: The shipped WatchdogSec is 120 s (a ping a minute); the test's drop-in makes it 6 s so a few
#: pings fit in the test. The daemon takes its interval from WATCHDOG_USEC either way.
WATCHDOG_S = 6


@pytest.fixture
def admin_node(ceph_cluster):
    """A booted systemd container; the checkout and its venv mounted read-only at their paths."""
    engine = engine_mod.find_or_start(CACHE_DIR)
    client = engine.client(timeout=900)
    mounts = {str(ROOT): str(ROOT)}
    if not Path(sys.prefix).resolve().is_relative_to(ROOT):
        mounts[str(Path(sys.prefix).resolve())] = str(Path(sys.prefix).resolve())
    try:
        image = systemd_host.ensure_image(client, CACHE_DIR)
        with systemd_host.SystemdHost(client, image, mounts=mounts) as host:
            yield host
    finally:
        client.close()
        engine.stop()


def _install(host, ceph_cluster, tmp_path):
    """docs/operations.md's install, with the checkout's venv standing in for the wheel's
    (tests/packaging/test_wheel.py installs the wheel itself)."""
    host.run("useradd", "--system", "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", "rgwkeeper").check()
    host.run("install", "-d", "-m", "0750", "-o", "root", "-g", "rgwkeeper", "/etc/rgwkeeper").check()
    host.run("ln", "-sfn", str(Path(sys.prefix).resolve()), "/opt/rgwkeeper").check()
    keyring = tmp_path / "ceph.client.rgwkeeper.keyring"
    make_client(ceph_cluster, "client.rgwkeeper", documented_caps(), keyring)
    host.write("/etc/ceph/ceph.client.rgwkeeper.keyring", keyring.read_text(), mode="0600",
               owner="rgwkeeper:rgwkeeper")
    # [global] only: the harness's [client.admin] section names the admin keyring's host path.
    host.write("/etc/ceph/ceph.conf", ceph_cluster.conf.read_text().split("[client.admin]")[0])
    host.write("/etc/rgwkeeper/rgw-admin.credentials", ceph_cluster.credentials_file.read_text(),
               mode="0600", owner="rgwkeeper:rgwkeeper")
    sections = {
        "cluster": {"name": "client.rgwkeeper", "keyring": "/etc/ceph/ceph.client.rgwkeeper.keyring",
                    "timeout_s": 10.0},
        "rgw": {"endpoint": ceph_cluster.rgw_endpoint, "credentials_file": "/etc/rgwkeeper/rgw-admin.credentials"},
        "daemon": {"tick_s": 2.0, "lease_s": 30.0, "pool": POOL, "instance_id": "systemd", "metrics_address": ""},
        # A long hold: the throttle is still on when the test kills the daemon after the load.
        "scrub_throttle": {"high_write_ops": 60.0, "low_write_ops": 30.0, "smoothing_s": 2.0, "hold_s": 600.0},
        "spillover": {"enabled": False},
        "preshard": {"daemon_reshards": False},
    }
    toml = "".join(f"[{s}]\n" + "".join(f"{k} = {_toml(v)}\n" for k, v in values.items())
                   for s, values in sections.items())
    host.write("/etc/rgwkeeper/rgwkeeper.toml", toml, mode="0640", owner="root:rgwkeeper")
    host.write("/etc/systemd/system/rgwkeeper.service", UNIT.read_text())
    host.write("/etc/systemd/system/rgwkeeper.service.d/watchdog.conf", f"[Service]\nWatchdogSec={WATCHDOG_S}\n")
    hidden = _hidden_from_the_unit(ROOT, Path(sys.prefix).resolve())
    if hidden:  # a checkout under /tmp or /home: the venv the unit runs must be visible to it
        host.write("/etc/systemd/system/rgwkeeper.service.d/checkout.conf",
                   "[Service]\n" + "".join(f"BindReadOnlyPaths={p}\n" for p in hidden))
    host.run("systemctl", "daemon-reload").check()


def _hidden_from_the_unit(*paths: Path) -> list[Path]:
    """Those of ``paths`` that the unit's PrivateTmp=yes or ProtectHome=yes hide (a checkout
    cloned under /tmp, say); the test binds them back in with a drop-in, the unit unchanged."""
    hidden_roots = (Path("/tmp"), Path("/var/tmp"), Path("/home"), Path("/root"), Path("/run/user"))
    return [p for p in dict.fromkeys(paths) if any(p.is_relative_to(r) for r in hidden_roots)]


def _events(host):
    """The unit's journal, -o json: each record's MESSAGE parsed where it is a JSON event."""
    out = host.run("journalctl", "-u", "rgwkeeper", "-o", "json", "--no-pager").check()
    records = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    events = []
    for r in records:
        message = r.get("MESSAGE")
        if isinstance(message, str) and message.startswith("{"):
            events.append({**json.loads(message), "_pid": r.get("_PID"), "_comm": r.get("_COMM")})
    return records, events


@pytest.mark.releases("pacific")  # the wpq levers are what a stop must give back
def test_the_unit_under_real_systemd(ceph_cluster, s3, bucket_name, journal_pool, admin_node, tmp_path):
    assert levers(ceph_cluster), "this test needs a release where the throttle sets levers"
    host = admin_node
    before = mon_db(ceph_cluster)
    _break_leftover_leader_locks(ceph_cluster)
    _install(host, ceph_cluster, tmp_path)
    try:
        # Type=notify: `systemctl start` returns once the daemon said READY=1.
        host.run("systemctl", "start", "rgwkeeper").check()
        state = host.show("rgwkeeper", "ActiveState", "SubState", "MainPID", "WatchdogUSec")
        assert (state["ActiveState"], state["SubState"]) == ("active", "running"), state
        assert state["WatchdogUSec"] in (f"{WATCHDOG_S}s", str(WATCHDOG_S * 1_000_000)), state
        first_pid = state["MainPID"]

        # The watchdog is pinged: its timestamp moves, and systemd never kills the daemon for it.
        pinged = host.show("rgwkeeper", "WatchdogTimestampMonotonic")["WatchdogTimestampMonotonic"]
        wait_for("a watchdog ping", lambda: host.show("rgwkeeper", "WatchdogTimestampMonotonic")[
            "WatchdogTimestampMonotonic"] not in ("0", pinged), timeout=WATCHDOG_S * 3)

        # systemctl stop under load, throttled: SIGTERM gives everything back, exit 0.
        with put_load(s3, bucket_name):
            wait_for("throttled by the unit's daemon", lambda: every_lever_effective(ceph_cluster), timeout=120)
            host.run("systemctl", "stop", "rgwkeeper").check()
            stopped = host.show("rgwkeeper", "ActiveState", "Result", "ExecMainStatus", "ExecMainCode")
            assert mon_db(ceph_cluster) == before  # still under load, and yet given back
        assert stopped["ActiveState"] == "inactive" and stopped["Result"] == "success", stopped
        assert stopped["ExecMainStatus"] == "0", stopped
        wait_for("the OSDs back to their own values", lambda: clean(ceph_cluster), timeout=30)

        # SIGKILL of the main process: nobody in the daemon restores; ExecStopPost does.
        host.run("systemctl", "start", "rgwkeeper").check()
        with put_load(s3, bucket_name + "-2"):
            wait_for("throttled again", lambda: every_lever_effective(ceph_cluster), timeout=120)
        # The mgr's pool rates lag by a report interval: let the load leave them, so the
        # restarted daemon does not throttle again.
        wait_for("load gone from pool stats", lambda: data_pool_write_ops(ceph_cluster) < 30, timeout=60)
        killed = host.show("rgwkeeper", "MainPID")["MainPID"]
        assert killed != first_pid
        host.run("systemctl", "kill", "--signal=SIGKILL", "--kill-whom=main", "rgwkeeper").check()
        wait_for("ExecStopPost restored", lambda: mon_db(ceph_cluster) == before, timeout=90)
        wait_for("the OSDs back to their own values", lambda: clean(ceph_cluster), timeout=30)
        # Restart=on-failure brings it back (RestartSec=5) with nothing to restore.
        wait_for("restarted", lambda: (lambda s: s["ActiveState"] == "active" and s["MainPID"] not in ("0", killed)
                                       and s["NRestarts"] == "1")(
            host.show("rgwkeeper", "ActiveState", "MainPID", "NRestarts")), timeout=60)
        post = host.run("systemctl", "show", "rgwkeeper", "--property=ExecStopPost").check()
        assert "status=0/0" in post, post  # restore --own exited 0: everything given back

        # journald carries the structured events of all three runs.
        records, events = _events(host)
        assert all(r.get("SYSLOG_IDENTIFIER") for r in records)
        kinds = {e.get("event") for e in events}
        assert {"became leader", "override applied", "reconciled", "restored before exit"} <= kinds, kinds
        assert any(e.get("event") == "reconciled" and e.get("scrub_state") for e in events)
        texts = [r.get("MESSAGE") for r in records]
        assert any(isinstance(t, str) and t.startswith("restored") for t in texts), \
            "restore --own in ExecStopPost printed no restored line"
        # ExecStopPost gave everything back before the restart: the restarted daemon found nothing.
        last_leader = [e for e in events if e.get("event") == "became leader"][-1]
        assert not last_leader.get("restored"), last_leader
        secret = ceph_cluster.credentials()[1]
        assert not any(secret in json.dumps(r) for r in records)
    finally:
        host.run("systemctl", "stop", "rgwkeeper")
    assert host.show("rgwkeeper", "Result")["Result"] == "success"
    wait_for("clean after the last stop", lambda: clean(ceph_cluster), timeout=30)
    ceph_cluster.ceph("auth", "del", "client.rgwkeeper")
