"""sd_notify, the watchdog interval, metrics, and the plan that `rgwkeeper plan` prints."""

from __future__ import annotations

import pytest

import copy
import socket
from datetime import time as dtime

from prometheus_client import generate_latest

from rgwkeeper.config import Config, parse as parse_config
from rgwkeeper.daemon import sdnotify
from rgwkeeper.daemon.metrics import Metrics
from rgwkeeper.journal import Journal, MemoryStore, Override
from rgwkeeper.reconcile import plan_pass as plan
from rgwkeeper.snapshot import parse
from tests.unit.fakes import load_fixture


def test_notify_sends_a_datagram(tmp_path, monkeypatch):
    path = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as srv:
        srv.bind(str(path))
        monkeypatch.setenv("NOTIFY_SOCKET", str(path))
        assert sdnotify.notify("READY=1")
        assert srv.recv(64) == b"READY=1"


def test_notify_without_systemd_is_a_no_op(monkeypatch):
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert sdnotify.notify("READY=1") is False


def test_watchdog_interval_is_half_of_watchdogsec(monkeypatch):
    monkeypatch.setenv("WATCHDOG_USEC", "120000000")
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    assert sdnotify.watchdog_interval_s() == 60.0
    monkeypatch.setenv("WATCHDOG_PID", "1")  # meant for another process
    assert sdnotify.watchdog_interval_s() is None


def test_metrics_render_the_snapshot():
    m = Metrics()
    m.observe(parse(load_fixture("observation.json")), smoothed_write_ops=42.0)
    m.leader.set(1)
    text = generate_latest(m.registry).decode()
    assert "rgwkeeper_leader 1.0" in text
    assert 'rgwkeeper_rgw_write_ops{kind="smoothed"} 42.0' in text
    assert 'rgwkeeper_bluefs_slow_used_bytes{osd="0"}' in text


def _snap(write_ops):
    obs = copy.deepcopy(load_fixture("observation.json"))
    for p in obs["pool_stats"]:
        if p["pool_name"] == "default.rgw.buckets.data":
            p["client_io_rate"] = {"write_op_per_sec": write_ops}
    return parse(obs)


CFG = parse_config({"scrub_throttle": {"high_write_ops": 500.0, "low_write_ops": 200.0, "smoothing_s": 0.0},
                    "preshard": {"daemon_reshards": False}, "spillover": {"enabled": False}})


def _override(key="config/osd/osd_scrub_sleep"):
    return Override(key=key, kind="config", who="osd", name="osd_scrub_sleep", original_present=True,
                    original_value="0.1", applied_value="0.5", holder="admin1", since=1.0, lease_until=99.0)


def test_plan_renders_exact_commands():
    p = plan(_snap(900), CFG, {}, {}, now=100.0, local_time=dtime(12, 0))
    assert p.commands() == ["ceph config set osd osd_scrub_sleep 0.5", "ceph config set osd osd_scrub_load_threshold 0.05",
                            "ceph config set osd osd_max_scrubs 1"]
    assert p.to_dict()["scrub_throttle"]["state"] == "engage"


def test_pause_gives_everything_back_and_plans_nothing_else():
    control = {"paused": {"by": "bob@admin1", "reason": "incident"}}
    p = plan(_snap(900), CFG, {"config/osd/osd_scrub_sleep": _override()}, control, now=1.0, local_time=dtime(1, 0))
    assert p.commands() == ["ceph config set osd osd_scrub_sleep 0.1"]
    assert not p.gate.open and "bob@admin1" in str(p.gate)


def test_closed_gate_blocks_new_changes_but_not_restores():
    cfg = parse_config({"scrub_throttle": {"high_write_ops": 500.0, "low_write_ops": 200.0, "smoothing_s": 0.0},
                        "gates": {"maintenance_window": "01:00-02:00"}})  # every policy on
    assert plan(_snap(900), cfg, {}, {}, now=1.0, local_time=dtime(12, 0)).actions == ()
    mem = {"scrub_throttle": {"throttled_since": 0.0, "below_low_since": 0.0, "ema_write_ops": 0.0,
                              "last_sample_at": 0.0}}
    p = plan(_snap(0), cfg, {"config/osd/osd_scrub_sleep": _override()}, mem, now=10_000.0, local_time=dtime(12, 0))
    assert p.commands() == ["ceph config set osd osd_scrub_sleep 0.1"]


def test_journal_reads_entries_with_fields_it_does_not_know():
    store = MemoryStore()
    j = Journal(store)
    store.omap_set("rgwkeeper.journal", {"k": _override().to_json()[:-1] + ', "added_later": 1}'})
    assert j.overrides()["k"].applied_value == "0.5"
    assert Config().daemon.pool == "rgwkeeper"


def test_quiet_pass_reshards_the_near_bucket_and_compacts_one_osd():
    cfg = parse_config({"preshard": {"max_write_ops": 1000.0}, "spillover": {"max_write_ops": 1000.0},
                        "scrub_throttle": {"smoothing_s": 0.0}})
    quiet_before = {"scrub_throttle": {"ema_write_ops": 100.0, "last_sample_at": 0.0}}
    p = plan(_snap(100), cfg, {}, quiet_before, now=1.0, local_time=dtime(12, 0))
    assert p.commands() == ["radosgw-admin bucket reshard --bucket capture-near-limit --num-shards 5",
                            "ceph tell osd.0 compact"]
    storm = plan(_snap(5000), cfg, {}, quiet_before, now=1.0, local_time=dtime(12, 0))
    assert storm.commands() == []
    assert "waiting for a quiet time" in storm.shards_reason and "compaction waits" in storm.spillover.reason


@pytest.mark.parametrize("before", [{}, {"scrub_throttle": {"ema_write_ops": 5000.0, "last_sample_at": 0.0}},
                                    {"scrub_throttle": {"ema_write_ops": 100.0, "last_sample_at": -100.0}}],
                         ids=["first-pass", "a-dip-after-load", "a-pause-of-more-than-three-ticks"])
def test_one_low_sample_is_never_quiet(before):
    # Measured on Tentacle: a daemon's first pass read 33 op/s from the mgr during an ingest of
    # 600-2,600 op/s, judged it quiet, and resharded a bucket and compacted an OSD.
    cfg = parse_config({"preshard": {"max_write_ops": 1000.0}, "spillover": {"max_write_ops": 1000.0},
                        "scrub_throttle": {"smoothing_s": 0.0}, "daemon": {"tick_s": 30.0}})
    p = plan(_snap(100), cfg, {}, before, now=1.0, local_time=dtime(12, 0))
    assert p.commands() == []
    assert "waiting for a quiet time" in p.shards_reason and "compaction waits" in p.spillover.reason
    if not before or before["scrub_throttle"]["last_sample_at"] < -90:
        assert "write load not known yet" in p.shards_reason
    # The next pass, 30 s on, has a quiet pass behind it.
    again = plan(_snap(100), cfg, {}, p.memory, now=31.0, local_time=dtime(12, 0))
    assert "radosgw-admin bucket reshard --bucket capture-near-limit --num-shards 5" in again.commands()


def test_ingest_plans_wait_for_not_before_then_create_and_shard():
    from datetime import datetime

    cfg = parse_config({"preshard": {"plans": [{"bucket": "ingest-dec", "expected_objects": 1000,
                                                 "not_before": "2026-12-01T02:00"}]},
                        "spillover": {"enabled": False}})
    early = plan(_snap(0), cfg, {}, {}, now=1.0, local_time=dtime(12, 0), local_now=datetime(2026, 11, 30, 12))
    assert not any("ingest-dec" in c for c in early.commands()) and "waits until" in early.shards_reason
    due = plan(_snap(0), cfg, {}, {}, now=1.0, local_time=dtime(12, 0), local_now=datetime(2026, 12, 1, 3))
    assert due.commands()[:2] == ["s3 CreateBucket ingest-dec",
                                  "radosgw-admin bucket reshard --bucket ingest-dec --num-shards 53"]
    assert "pacific: RGW's dynamic resharding never reduces" in due.to_dict()["preshard"]["plans"][0]["min_shards"]


def test_an_ingest_plan_on_tentacle_pins_the_minimum_after_sharding():
    import dataclasses
    from datetime import datetime

    cfg = parse_config({"preshard": {"plans": [{"bucket": "ingest-dec", "expected_objects": 1000}]},
                        "spillover": {"enabled": False}})
    snap = dataclasses.replace(_snap(0), release="tentacle")
    due = plan(snap, cfg, {}, {}, now=1.0, local_time=dtime(12, 0), local_now=datetime(2026, 12, 1, 3))
    assert due.commands()[:3] == ["s3 CreateBucket ingest-dec",
                                  "radosgw-admin bucket reshard --bucket ingest-dec --num-shards 53",
                                  "radosgw-admin bucket set-min-shards --bucket ingest-dec --num-shards 53"]
    # The next pass sees the bucket with its 53 shards (its minimum not in the snapshot): nothing more.
    obs = copy.deepcopy(load_fixture("observation.json"))
    done = next(b for b in obs["buckets"] if b["bucket"] == "capture-small")
    obs["buckets"].append({**done, "bucket": "ingest-dec", "num_shards": 53})
    later = plan(dataclasses.replace(parse(obs), release="tentacle"), cfg, {}, {}, now=2.0, local_time=dtime(12, 0),
                 local_now=datetime(2026, 12, 1, 4))
    assert not any("ingest-dec" in c for c in later.commands()), later.commands()


# -- shutdown and the watchdog -------------------------------------------------------------------

def test_the_units_stop_timeout_leaves_room_for_the_longest_shutdown():
    import dataclasses
    import re
    from pathlib import Path

    from rgwkeeper.config import DaemonSection
    from rgwkeeper.daemon.service import HARD_EXIT_MARGIN_S

    unit = (Path(__file__).resolve().parents[2] / "systemd" / "rgwkeeper.service").read_text()
    (stop_s,) = [int(v) for v in re.findall(r"^TimeoutStopSec=(\d+)$", unit, re.M)]
    longest = {f.name: f for f in dataclasses.fields(DaemonSection)}["shutdown_timeout_s"].metadata["max"]
    # The hard exit fires HARD_EXIT_MARGIN_S after shutdown_timeout_s; systemd must not kill first.
    assert longest + HARD_EXIT_MARGIN_S + 10 <= stop_s, (longest, stop_s)


class _Outage:
    """A leader lock that never answers: what a mon outage looks like to the daemon."""

    async def acquire(self):
        from rgwkeeper.errors import CephTimeout

        raise CephTimeout("rgwkeeper/rgwkeeper.leader lock leader", "no answer within 10 s")

    async def break_stale_own(self):
        raise AssertionError("not reached")

    async def release(self):
        pass


def _service(clock):
    from pathlib import Path

    from rgwkeeper.access import ClusterAccess
    from rgwkeeper.daemon.service import Service
    from rgwkeeper.leader import LeaderLease

    access = ClusterAccess(conf=Path("/nonexistent"), keyring=None, client_name="client.admin", rgw_endpoint=None,
                           rgw_credentials_file=None, timeout_s=10)
    return Service(cfg=CFG, access=access, rados=None, journal=Journal(MemoryStore()),
                   lease=LeaderLease(_Outage(), lease_s=90, clock=clock), adapters=None, metrics=Metrics(),
                   instance_id="admin1", host="h1", monotonic=clock, last_progress_at=clock())


def test_a_mon_outage_is_reported_every_pass_and_keeps_the_watchdog_fed():
    import asyncio

    from structlog.testing import capture_logs

    now = [1000.0]
    svc = _service(lambda: now[0])
    for _ in range(20):  # ten minutes of outage, one pass every 30 s
        with capture_logs() as logs:
            asyncio.run(svc.tick())
        (failed,) = [e for e in logs if e["event"] == "reconcile pass failed"]
        assert "no answer within 10 s" in failed["error"]
        now[0] += 30
        assert svc.watchdog_ok(now[0])
    assert failed["failed_passes_in_a_row"] == 20
    assert "rgwkeeper_cluster_reachable 0.0" in generate_latest(svc.metrics.registry).decode()


def test_the_watchdog_stops_only_for_a_wedged_pass_or_a_stopped_loop():
    from rgwkeeper.daemon.service import watchdog_ok
    from rgwkeeper.executor import LONG_TIMEOUT_S

    def ok(elapsed, running):
        return watchdog_ok(100.0 + elapsed, pass_running=running, last_progress_at=100.0, tick_s=30,
                           call_timeout_s=10)

    assert ok(200, running=True)  # a slow pass (a long reshard) is not wedged
    assert ok(LONG_TIMEOUT_S, running=True)
    assert not ok(LONG_TIMEOUT_S + 4 * 10 + 60, running=True)  # far past any step's timeout
    assert ok(100, running=False)  # between passes
    assert not ok(2 * 30 + 60, running=False)  # no pass started for two ticks: the scheduler is stuck


def test_host_identity_is_hostname_and_machine_id(tmp_path):
    from rgwkeeper.hostid import host_identity
    from rgwkeeper.journal import own_holders

    (tmp_path / "machine-id").write_text("3d1219c7c4c5404aaa1f6d2a48adfda4\n")
    assert host_identity(tmp_path / "machine-id", hostname="admin1") == "admin1/3d1219c7c4c5"
    assert host_identity(tmp_path / "missing", hostname="admin1") == "admin1"
    # Entries written before host identity (bare instance id) are still this node's.
    assert own_holders("admin1", "admin1/3d12") == {"admin1@admin1/3d12", "admin1"}
