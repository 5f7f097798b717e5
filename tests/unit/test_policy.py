"""The scrub throttle and the gates, with plain data and a hand-driven clock."""

from __future__ import annotations

import copy
import dataclasses
from datetime import time as dtime

import pytest

from rgwkeeper.actions import RestoreAll, SetConfig, SetFlag
from rgwkeeper.config import GatesSection, ScrubThrottleSection, parse as parse_config
from rgwkeeper.policy import gates, scrub
from rgwkeeper.policy.scrub import ThrottleMemory, decide
from rgwkeeper.snapshot import parse
from tests.unit.fakes import load_fixture

S = ScrubThrottleSection(high_write_ops=500, low_write_ops=200, smoothing_s=0, hold_s=60, max_defer_s=3600,
                         cooldown_s=600)
THROTTLE_KEYS = {"config/osd/osd_scrub_sleep", "config/osd/osd_scrub_load_threshold", "config/osd/osd_max_scrubs"}


def snap(write_ops=0.0, op_queue="wpq", checks=(), pgs_by_state=None):
    obs = copy.deepcopy(load_fixture("observation.json"))
    for p in obs["pool_stats"]:
        if p["pool_name"] == "default.rgw.buckets.data":
            p["client_io_rate"] = {"write_op_per_sec": write_ops}
    for opts in obs["osd_config"].values():
        opts["osd_op_queue"] = op_queue
    for code in checks:
        obs["health"]["checks"][code] = {"severity": "HEALTH_WARN", "summary": {"message": code, "count": 1}}
    if pgs_by_state is not None:
        obs["status"]["pgmap"]["pgs_by_state"] = pgs_by_state
    return parse(obs)


class Driver:
    """Runs the policy tick by tick like the daemon, with the journal reduced to key sets."""

    def __init__(self, settings=S):
        self.s, self.mem, self.keys, self.now = settings, ThrottleMemory(), set(), 1000.0

    def tick(self, write_ops, dt=10.0, **kw):
        self.now += dt
        d = decide(snap(write_ops, **kw), self.s, self.mem, self.keys, self.now)
        self.mem = d.memory
        for a in d.actions:
            if isinstance(a, RestoreAll):
                self.keys.clear()
            else:
                self.keys.add(a.key)
        return d


def test_idle_under_the_high_watermark():
    d = Driver().tick(400)
    assert (d.state, d.actions) == ("idle", ())


def test_engages_above_high_with_wpq_levers():
    d = Driver().tick(900)
    assert d.state == "engage"
    assert d.actions == (
        SetConfig("osd", "osd_scrub_sleep", "0.5", d.actions[0].reason),
        SetConfig("osd", "osd_scrub_load_threshold", "0.05", d.actions[1].reason),
        SetConfig("osd", "osd_max_scrubs", "1", d.actions[2].reason),
    )
    assert [a.command() for a in d.actions][0] == "ceph config set osd osd_scrub_sleep 0.5"


def test_mclock_uses_profile_not_sleep():
    d = Driver().tick(900, op_queue="mclock_scheduler")
    names = [a.name for a in d.actions]
    assert names == ["osd_mclock_profile", "osd_max_scrubs"]
    assert d.actions[0].value == "high_client_ops"


def test_flag_only_when_configured():
    d = Driver(dataclasses.replace(S, set_nodeep_scrub_flag=True)).tick(900)
    assert SetFlag("nodeep-scrub", d.actions[-1].reason) == d.actions[-1]
    assert d.actions[-1].command() == "ceph osd set nodeep-scrub"


def test_smoothing_delays_engagement_over_one_spike():
    drv = Driver(dataclasses.replace(S, smoothing_s=60))
    drv.tick(100)
    assert drv.tick(2000, dt=5).state == "idle"  # one 5 s spike moves a 60 s average only ~8%
    states = [drv.tick(2000, dt=30).state for _ in range(3)]
    assert "engage" in states


def test_release_only_after_hold_below_low():
    drv = Driver()
    drv.tick(900)
    assert drv.tick(300).state == "throttled"  # between the watermarks: keep
    assert drv.tick(100).state == "holding"
    assert drv.tick(100, dt=30).state == "holding"
    assert drv.tick(300).state == "throttled"  # back above low resets the hold
    assert drv.tick(100).state == "holding"
    d = drv.tick(100, dt=61)
    assert d.state == "release" and d.actions == (RestoreAll(d.reason),)
    assert drv.keys == set()


def test_never_defer_past_max_and_cool_down():
    drv = Driver()
    drv.tick(900)
    for _ in range(5):
        drv.tick(900, dt=600)
    d = drv.tick(900, dt=600)  # 3,600 s of throttle
    assert d.state == "forced-release" and "max_defer_s" in d.reason
    assert drv.tick(900).state == "cooldown"
    assert drv.tick(900, dt=700).state == "engage"


def test_pg_not_deep_scrubbed_releases_and_blocks():
    drv = Driver()
    drv.tick(900)
    d = drv.tick(900, checks=["PG_NOT_DEEP_SCRUBBED"])
    assert d.state == "forced-release" and isinstance(d.actions[0], RestoreAll)
    d = drv.tick(900, dt=700, checks=["PG_NOT_DEEP_SCRUBBED"])
    assert d.state == "idle" and d.actions == () and "PG_NOT_DEEP_SCRUBBED" in d.reason


def test_throttled_state_comes_from_the_journal_not_memory():
    # A new leader with fresh memory but journaled overrides still manages them.
    d = decide(snap(100), S, ThrottleMemory(), THROTTLE_KEYS, now=5000.0)
    assert d.state == "holding"


def test_disabled_gives_back():
    d = decide(snap(900), dataclasses.replace(S, enabled=False), ThrottleMemory(), THROTTLE_KEYS, now=1.0)
    assert d.state == "release" and isinstance(d.actions[0], RestoreAll)


def test_memory_round_trips():
    m = ThrottleMemory(ema_write_ops=12.5, last_sample_at=3.0, throttled_since=1.0)
    assert ThrottleMemory.from_dict(m.to_dict()) == m
    assert ThrottleMemory.from_dict(None) == ThrottleMemory()


G = GatesSection(max_inactive_pgs=0, max_degraded_ratio=0.05, maintenance_window=None)


def test_gate_open_on_a_healthy_cluster():
    r = gates.check(snap(), G, paused=None, local_time=dtime(12, 0))
    assert r.open and str(r) == "ok"


def test_gate_closed_says_every_reason():
    s = snap(pgs_by_state=[{"state_name": "active+clean", "count": 40}, {"state_name": "peering", "count": 3},
                           {"state_name": "unknown", "count": 6}])
    r = gates.check(s, dataclasses.replace(G, maintenance_window="22:00-06:00"),
                    paused={"by": "alice@admin1", "reason": "upgrade"}, local_time=dtime(12, 0))
    assert not r.open
    assert r.reasons == ("paused by alice@admin1 (upgrade); run rgwkeeper resume",
                         "9 PGs inactive (limit 0)",
                         "outside the maintenance window 22:00-06:00 (local time 12:00)")


@pytest.mark.parametrize("window, t, inside", [
    ("22:00-06:00", dtime(23, 0), True), ("22:00-06:00", dtime(5, 59), True), ("22:00-06:00", dtime(6, 0), False),
    ("01:00-03:00", dtime(2, 0), True), ("01:00-03:00", dtime(3, 0), False), ("01:00-03:00", dtime(0, 59), False),
])
def test_windows(window, t, inside):
    assert gates.in_window(window, t) is inside


@pytest.mark.parametrize("raw, message", [
    ({"scrub_throttle": {"low_write_ops": 600.0, "high_write_ops": 500.0}}, "must be below high_write_ops"),
    ({"gates": {"maintenance_window": "10pm-6am"}}, "must look like 22:00-06:00"),
    ({"daemon": {"tick_s": 60.0, "lease_s": 90.0}}, "at least twice daemon.tick_s"),
    ({"daemon": {"metrics_address": "9877"}}, "must be host:port"),
    ({"scrub_throttle": {"mclock_profile": "fast"}}, "must be one of"),
])
def test_cross_field_config_checks(raw, message):
    from rgwkeeper.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        parse_config(raw)
