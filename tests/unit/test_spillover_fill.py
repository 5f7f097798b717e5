"""Spillover compaction and fill alerts, with plain data and a hand-driven clock."""

from __future__ import annotations

import copy

import pytest

from rgwkeeper.actions import CompactOsd, RunExpire
from rgwkeeper.config import FillSection, SpilloverSection
from rgwkeeper.policy import fill, spillover
from rgwkeeper.snapshot import BluefsUsage, parse
from tests.unit.fakes import load_fixture

GIB = 1 << 30


def snap(slow=None, used=None, osd_used=None):
    obs = copy.deepcopy(load_fixture("observation.json"))
    for osd, perf in obs["osd_bluefs"].items():
        if slow is not None:
            perf["bluefs"]["slow_used_bytes"] = slow.get(int(osd), 0)
    if used is not None:
        st = obs["df"]["stats"]
        st["total_used_raw_bytes"] = int(st["total_bytes"] * used)
    for n in obs["osd_df"]["nodes"]:
        if osd_used is not None and n["id"] in osd_used:
            n["kb_used"] = int(n["kb"] * osd_used[n["id"]])
    return parse(obs)


S = SpilloverSection(max_write_ops=1000, min_interval_s=3600)


def test_compacts_the_worst_osd_only_when_quiet():
    s = snap(slow={0: 1 * GIB, 1: 3 * GIB, 2: 0})
    d = spillover.decide(s, S, {}, smoothed_write_ops=10, gate_open=True, now=100.0)
    assert d.actions == (CompactOsd(1, d.reason),) and d.actions[0].command() == "ceph tell osd.1 compact"
    busy = spillover.decide(s, S, {}, smoothed_write_ops=5000, gate_open=True, now=100.0)
    assert busy.actions == () and "compaction waits" in busy.reason
    closed = spillover.decide(s, S, {}, smoothed_write_ops=10, gate_open=False, now=100.0)
    assert closed.actions == ()


def test_one_at_a_time_and_not_again_within_the_interval():
    s = snap(slow={0: 1 * GIB, 1: 3 * GIB})
    mem = {"osd.1": {"at": 100.0, "slow_before": 3 * GIB, "slow_after": 3 * GIB, "cleared": False}}
    d = spillover.decide(s, S, mem, smoothed_write_ops=10, gate_open=True, now=200.0)
    assert d.actions == (CompactOsd(0, d.reason),)
    mem["osd.0"] = {"at": 150.0, "cleared": True}
    d = spillover.decide(s, S, mem, smoothed_write_ops=10, gate_open=True, now=200.0)
    assert d.actions == () and "compacted within" in d.reason


def test_spillover_compaction_did_not_clear_needs_a_bigger_db():
    s = snap(slow={0: 3 * GIB})
    b = next(x for x in s.bluefs if x.osd_id == 0)
    outcome = spillover.record_outcome(b, b, at=10.0)
    assert outcome["cleared"] is False
    d = spillover.decide(s, S, {"osd.0": outcome}, smoothed_write_ops=10, gate_open=True, now=20.0)
    want = spillover.recommended_db_bytes(b, 1.3)
    assert d.needs_bigger_db == {0: want} and want % GIB == 0 and want >= (b.db_used_bytes + b.slow_used_bytes) * 1.3


def test_record_outcome_cleared_when_slow_falls():
    before = BluefsUsage(0, 128 << 20, 16 << 20, 280 << 20)
    after = BluefsUsage(0, 128 << 20, 60 << 20, 0)
    assert spillover.record_outcome(before, after, at=1.0)["cleared"] is True


F = FillSection(warn_margin=0.05, hysteresis=0.02, expire_at_ratio=0.5)


def test_fill_alert_with_hysteresis_raw_and_per_osd():
    mem = {}
    d = fill.decide(snap(used=0.81), F, mem, now=0.0)  # nearfull 0.85, alert at 0.80
    assert d.alerts["raw"] and d.raised[0] == "raw"
    d2 = fill.decide(snap(used=0.79), F, d.memory, now=10.0)  # above 0.78: still alerting
    assert d2.alerts["raw"] and not d2.cleared
    d3 = fill.decide(snap(used=0.77), F, d2.memory, now=20.0)
    assert not d3.alerts["raw"] and d3.cleared == ("raw",)
    one = fill.decide(snap(used=0.3, osd_used={2: 0.84}), F, {}, now=0.0)
    assert one.alerts["osd.2"] and not one.alerts["raw"]


def test_expiry_starts_once_per_crossing():
    d = fill.decide(snap(used=0.4), F, {}, now=0.0)
    assert d.actions == ()
    d = fill.decide(snap(used=0.55), F, d.memory, now=10.0)
    assert d.actions == (RunExpire(d.actions[0].reason),) and d.actions[0].command() == "rgwkeeper expire --yes --json"
    d = fill.decide(snap(used=0.56), F, d.memory, now=20.0)
    assert d.actions == ()  # still above: not again
    d = fill.decide(snap(used=0.45), F, d.memory, now=30.0)  # re-armed
    assert fill.decide(snap(used=0.52), F, d.memory, now=40.0).actions != ()


def test_projected_time_to_nearfull():
    assert fill.projected_seconds([[0, 0.50], [100, 0.51], [200, 0.52]], 0.85) == pytest.approx(3300, rel=1e-6)
    assert fill.projected_seconds([[0, 0.5], [100, 0.5]], 0.85) is None  # not filling
    assert fill.projected_seconds([[0, 0.5]], 0.85) is None
    assert fill.projected_seconds([[0, 0.8], [10, 0.9]], 0.85) == 0.0


def test_an_expiry_the_gate_held_back_is_not_remembered_as_started():
    """CI (Tentacle, a daemon's first pass): the gate was closed (a PG not yet active), the
    expiry action was dropped, and the policy's memory said it had started, so it never ran."""
    import dataclasses
    from datetime import time as dtime

    from rgwkeeper.config import Config
    from rgwkeeper.reconcile import plan_pass as plan

    cfg = dataclasses.replace(Config(), fill=FillSection(expire_at_ratio=0.01))  # the fixture is past 1%
    snap = parse(load_fixture("observation.json"))
    paused = plan(snap, cfg, {}, {"paused": {"by": "op"}}, now=0.0, local_time=dtime(12))
    assert not any(isinstance(a, RunExpire) for a in paused.actions)
    assert not paused.memory["fill"]["expiry_started"]
    sent = plan(snap, cfg, {}, {"fill": paused.memory["fill"]}, now=1.0, local_time=dtime(12))
    assert [a for a in sent.actions if isinstance(a, RunExpire)] and sent.memory["fill"]["expiry_started"]
    again = plan(snap, cfg, {}, {"fill": sent.memory["fill"]}, now=2.0, local_time=dtime(12))
    assert not any(isinstance(a, RunExpire) for a in again.actions)  # once per crossing still
