"""Deep-scrub deadlines and paying the debt back: plain data, a hand-driven clock, and the
JSON captured from real clusters (tests/fixtures/<release>/deep-scrub.json)."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
from datetime import datetime, time as dtime, timezone

import pytest

from rgwkeeper.actions import DeepScrubPg, RestoreAll
from rgwkeeper.config import Config, ScrubDebtSection, ScrubThrottleSection
from rgwkeeper.executor import Executor
from rgwkeeper.journal import Journal, MemoryStore
from rgwkeeper.adapters.rados import RadosAdapter
from rgwkeeper.policy import scrub
from rgwkeeper.policy.scrub_debt import DebtMemory, Requested, decide
from rgwkeeper.reconcile import plan_pass as plan
from rgwkeeper.snapshot import DeepScrubDeadlines, PgDeepScrub, parse, parse_deep_scrub, parse_stamp
from tests.fixtures import ROOT
from tests.unit.fakes import FakeRados, load_fixture

DAY = 86400.0
WEEK = 7 * DAY
S = ScrubDebtSection(horizon_s=2 * DAY, max_in_flight=2, max_write_ops=1000, request_timeout_s=3600)
NOW = 1_800_000_000.0


def pg(pgid, stamp, *, interval=WEEK, ratio=0.75, deep=False):
    return PgDeepScrub(pgid=pgid, last_deep_scrub_stamp=stamp, deep_scrubbing=deep, interval_s=interval,
                       warn_at=stamp + interval * (1 + ratio))


def deadlines(*pgs):
    return DeepScrubDeadlines(pgs=tuple(pgs), osd_deep_scrub_interval=WEEK, warn_ratio=0.75)


def quiet(d, memory=DebtMemory(), s=S, now=NOW, **kw):
    return decide(d, s, memory, throttle_engaged=kw.get("engaged", False),
                  smoothed_write_ops=kw.get("write_ops", 0.0), now=now)


def requested(decision):
    return [a.pgid for a in decision.actions]


# -- reading the deadlines -----------------------------------------------------------------
@pytest.mark.parametrize("release", ["pacific", "tentacle"])
def test_deadlines_from_a_real_capture(release):
    path = ROOT / release / "deep-scrub.json"
    if not path.exists():
        pytest.fail(f"{path} missing: run python -m tests.fixtures.capture_deep_scrub on that release")
    cap = json.loads(path.read_text())
    d = parse_deep_scrub(cap["pg_deep_scrub"], cap["osd_dump"])
    assert d.warn_ratio == 0.75 and d.osd_deep_scrub_interval == WEEK  # the releases' defaults
    own_pool = next(p["pool"] for p in cap["osd_dump"]["pools"] if p["pool_name"] == cap["pool_with_own_interval"])
    by_pg = {p.pgid: p for p in d.pgs}
    assert len(by_pg) == sum(p["pg_num"] for p in cap["osd_dump"]["pools"])
    for p in d.pgs:
        own = p.pgid.startswith(f"{own_pool}.")
        assert p.interval_s == (cap["pool_interval_s"] if own else WEEK), p.pgid
        assert p.warn_at == pytest.approx(p.last_deep_scrub_stamp + p.interval_s * 1.75)
        assert p.last_deep_scrub_stamp > 1.7e9  # new PGs get the pool's creation time, not 0
    scrubbed = by_pg[cap["deep_scrubbed_pgid"]]
    assert scrubbed.last_deep_scrub_stamp > parse_stamp(cap["stamp_before"])


def test_stamps_in_every_form_ceph_prints():
    assert parse_stamp("0.000000") == 0.0
    utc = datetime(2027, 1, 15, 8, tzinfo=timezone.utc).timestamp()
    assert parse_stamp("2027-01-15T08:00:00.000000+0000") == utc == parse_stamp("2027-01-15 08:00:00.000000")
    assert parse_stamp("2027-01-15T09:00:00.000000+0100") == parse_stamp("2027-01-15T08:00:00.000000+0000")


def _raw_with(deep):
    obs = copy.deepcopy(load_fixture("observation.json"))
    obs["pg_deep_scrub"] = deep
    return obs


@pytest.mark.parametrize("bad", [
    {"pgs": {"pg_stats": [{"pgid": "1.0", "last_deep_scrub_stamp": "yesterday"}]},
     "osd_deep_scrub_interval": 604800, "warn_ratio": 0.75},
    {"pgs": {"pg_stats": "nope"}, "osd_deep_scrub_interval": 604800, "warn_ratio": 0.75},
    {"pgs": {"pg_stats": []}, "osd_deep_scrub_interval": "x", "warn_ratio": 0.75},
    {"pgs": {"pg_stats": []}, "osd_deep_scrub_interval": 0, "warn_ratio": 0.75},
    {"pgs": {"pg_stats": [{"pgid": "1.0"}]}, "osd_deep_scrub_interval": 604800, "warn_ratio": 0.75},
])
def test_an_unreadable_answer_is_an_error_not_a_crash_nor_a_request(bad):
    snap = parse(_raw_with(bad))
    assert snap.deep_scrub is None
    assert [e.source for e in snap.errors] == ["pg dump pgs (deep-scrub deadlines)"]
    d = quiet(snap.deep_scrub)
    assert d.actions == () and d.summary is None and "unknown" in d.reason


def test_the_settings_may_come_wrapped_as_config_get_prints_them():
    d = parse_deep_scrub({"pgs": [{"pgid": "3.1", "last_deep_scrub_stamp": "0.000000", "state": "active+clean"}],
                          "osd_deep_scrub_interval": {"osd_deep_scrub_interval": "86400"},
                          "warn_ratio": {"mon_warn_pg_not_deep_scrubbed_ratio": "0.5"}},
                         {"pools": [{"pool": 3, "options": {"deep_scrub_interval": 0}}]})
    assert d.pgs[0].warn_at == 86400 * 1.5


# -- the policy ----------------------------------------------------------------------------
def test_requests_the_closest_deadlines_first_oldest_first_within_the_bound():
    d = deadlines(pg("1.0", NOW - 6 * DAY),  # due in 6.25 days: outside the horizon
                  pg("1.1", NOW - 11 * DAY),  # 1.25 days before its point
                  pg("1.2", NOW - 12.5 * DAY),  # past it
                  pg("1.3", NOW - 12 * DAY))  # 0.25 days before it
    out = quiet(d)
    assert requested(out) == ["1.2", "1.3"]
    assert all("PG_NOT_DEEP_SCRUBBED" in a.reason for a in out.actions)
    s = out.summary
    assert (s.past_deadline, s.due_within_horizon, s.nearest_pgid) == (1, 2, "1.2")
    assert s.seconds_to_nearest == pytest.approx(-(12.5 - 12.25) * DAY)


def test_a_pool_with_its_own_interval_is_due_on_its_own_clock():
    d = deadlines(pg("1.0", NOW - 10 * DAY), pg("7.0", NOW - 3 * 3600, interval=3600))
    out = quiet(d, s=dataclasses.replace(S, horizon_s=0, max_in_flight=1))
    assert requested(out) == ["7.0"]  # 1.0 is 2.25 days from its point, 7.0 is past its own


def test_never_deep_scrubbed_comes_first():
    out = quiet(deadlines(pg("1.0", NOW - 13 * DAY), pg("2.5", 0.0)), s=dataclasses.replace(S, max_in_flight=1))
    assert requested(out) == ["2.5"]


def test_the_bound_counts_pgs_already_deep_scrubbing():
    d = deadlines(pg("1.0", NOW - 13 * DAY), pg("1.1", NOW - 13 * DAY), pg("1.2", NOW - 5 * DAY, deep=True))
    assert requested(quiet(d)) == ["1.0"]
    busy = deadlines(pg("1.0", NOW - 13 * DAY), pg("1.1", NOW - 5 * DAY, deep=True), pg("1.2", NOW - 5 * DAY, deep=True))
    out = quiet(busy)
    assert out.actions == () and "max_in_flight 2" in out.reason


def test_a_requested_pg_waits_for_its_stamp_or_the_timeout():
    stamp = NOW - 13 * DAY
    d = deadlines(pg("1.0", stamp), pg("1.1", stamp - 1))
    first = quiet(d, s=dataclasses.replace(S, max_in_flight=1))
    assert requested(first) == ["1.1"]
    # Not started yet: still in flight, so nothing more and not 1.1 again.
    again = quiet(d, first.memory, s=dataclasses.replace(S, max_in_flight=1), now=NOW + 60)
    assert again.actions == () and "1 deep-scrubbing or requested" in again.reason
    # Its stamp moved: forgotten, and the next one is asked for.
    moved = deadlines(pg("1.0", stamp), pg("1.1", NOW + 100))
    after = quiet(moved, again.memory, s=dataclasses.replace(S, max_in_flight=1), now=NOW + 200)
    assert requested(after) == ["1.0"] and set(after.memory.requested) == {"1.0"}
    # Never started: asked again once request_timeout_s has passed.
    late = quiet(d, first.memory, s=dataclasses.replace(S, max_in_flight=2), now=NOW + 3600)
    assert requested(late) == ["1.1", "1.0"]


def test_nothing_while_the_throttle_is_engaged_or_the_load_is_high():
    d = deadlines(pg("1.0", NOW - 13 * DAY))
    assert quiet(d, engaged=True).actions == ()
    high = quiet(d, write_ops=1000)
    assert high.actions == () and "1000 op/s is not below 1000" in high.reason


def test_memory_survives_the_journal_round_trip_and_damage():
    mem = DebtMemory({"1.0": Requested(5.0, 6.0)})
    assert DebtMemory.from_dict(json.loads(json.dumps(mem.to_dict()))) == mem
    assert DebtMemory.from_dict({"requested": {"1.0": {"stamp": "x"}, "1.1": {"stamp": 1, "at": 2}}}) == \
        DebtMemory({"1.1": Requested(1.0, 2.0)})


# -- the throttle gives scrub back before the deadline -------------------------------------
THROTTLE = ScrubThrottleSection(high_write_ops=500, low_write_ops=200, smoothing_s=0, hold_s=60, max_defer_s=3600,
                                cooldown_s=600, release_before_deadline_s=DAY)


def _snap(write_ops, d):
    obs = copy.deepcopy(load_fixture("observation.json"))
    for p in obs["pool_stats"]:
        if p["pool_name"] == "default.rgw.buckets.data":
            p["client_io_rate"] = {"write_op_per_sec": write_ops}
    return dataclasses.replace(parse(obs), deep_scrub=d)


def test_the_throttle_gives_scrub_back_before_the_nearest_deadline():
    keys = {"config/osd/osd_max_scrubs"}
    far = deadlines(pg("1.0", NOW - 9 * DAY))  # 3.25 days from its point
    held = scrub.decide(_snap(900, far), THROTTLE, scrub.ThrottleMemory(), keys, NOW)
    assert held.state == "throttled"
    near = deadlines(pg("1.0", NOW - 11.5 * DAY))  # 0.75 days from it, inside the one-day margin
    d = scrub.decide(_snap(900, near), THROTTLE, scrub.ThrottleMemory(), keys, NOW)
    assert d.state == "forced-release" and isinstance(d.actions[0], RestoreAll) and "pg 1.0" in d.reason
    fresh = scrub.decide(_snap(900, near), THROTTLE, scrub.ThrottleMemory(), set(), NOW)
    assert fresh.state == "idle" and fresh.actions == () and "not throttling" in fresh.reason


# -- reconcile, executor -------------------------------------------------------------------
#: The control object after a quiet pass a moment ago: quiet-time work needs two (reconcile.quiet_load).
QUIET_BEFORE = {"scrub_throttle": {"ema_write_ops": 0.0, "last_sample_at": NOW - 1}}


def test_plan_shows_the_debt_and_remembers_only_what_it_may_send():
    cfg = dataclasses.replace(Config(), scrub_debt=S)
    snap = _snap(0, deadlines(pg("1.0", NOW - 13 * DAY)))
    first = plan(snap, cfg, {}, {}, now=NOW, local_time=dtime(12))
    assert not [c for c in first.commands() if " pg " in c] and "not known yet" in first.debt.reason
    p = plan(snap, cfg, {}, QUIET_BEFORE, now=NOW, local_time=dtime(12))
    assert [c for c in p.commands() if " pg " in c] == ["ceph pg deep-scrub 1.0"]
    assert p.to_dict()["scrub_debt"]["summary"]["past_deadline"] == 1
    assert set(p.memory["scrub_debt"]["requested"]) == {"1.0"}
    paused = plan(snap, cfg, {}, {"paused": {"by": "op"}}, now=NOW, local_time=dtime(12))
    assert paused.actions == () and paused.memory["scrub_debt"]["requested"] == {}


def test_a_request_the_mon_refused_is_not_remembered_and_is_asked_again_next_pass():
    cfg = dataclasses.replace(Config(), scrub_debt=S)
    snap = _snap(0, deadlines(pg("1.0", NOW - 13 * DAY), pg("1.1", NOW - 12 * DAY)))
    p = plan(snap, cfg, {}, QUIET_BEFORE, now=NOW, local_time=dtime(12))
    assert [c for c in p.commands() if " pg " in c] == ["ceph pg deep-scrub 1.0", "ceph pg deep-scrub 1.1"]
    kept = p.memory_after({"ceph pg deep-scrub 1.0", "ceph config set osd osd_max_scrubs 1"})
    assert set(kept["scrub_debt"]["requested"]) == {"1.1"}
    assert set(p.memory["scrub_debt"]["requested"]) == {"1.0", "1.1"}  # the plan itself is left as it was
    assert p.memory_after(set()) == dict(p.memory)
    again = plan(snap, cfg, {}, kept, now=NOW + 2, local_time=dtime(12))
    assert [c for c in again.commands() if " pg " in c] == ["ceph pg deep-scrub 1.0"]


def test_the_executor_sends_pg_deep_scrub_as_a_mon_command():
    from rgwkeeper.access import ClusterAccess

    fake = FakeRados().expect({"prefix": "pg deep-scrub", "pgid": "5.1f"}, None, outs="instructing pg 5.1f on osd.2")
    rados = RadosAdapter(ClusterAccess(conf=None, keyring=None, client_name="client.admin", rgw_endpoint=None,
                                       rgw_credentials_file=None, timeout_s=5),
                         factory=lambda _a: fake)
    rados.connect()
    try:
        ex = Executor(rados, Journal(MemoryStore()), holder="t@h", lease_s=60)
        [r] = asyncio.run(ex.apply([DeepScrubPg("5.1f", "debt")]))
    finally:
        rados.close()
    assert r.ok and r.command == "ceph pg deep-scrub 5.1f"
    assert [c for _, c in fake.calls] == [{"prefix": "pg deep-scrub", "pgid": "5.1f", "format": "json"}]


def test_the_bound_also_counts_deep_scrubs_ceph_status_sees_now():
    # The deadlines may be an older read (scrub_debt.read_every_s): ceph status's count wins.
    d = deadlines(pg("1.0", NOW - 13 * DAY), pg("1.1", NOW - 13 * DAY))
    out = decide(d, S, DebtMemory(), throttle_engaged=False, smoothed_write_ops=0, now=NOW, deep_scrubbing_now=1)
    assert requested(out) == ["1.0"]
    full = decide(d, S, DebtMemory(), throttle_engaged=False, smoothed_write_ops=0, now=NOW, deep_scrubbing_now=2)
    assert full.actions == ()


def test_status_shows_the_debt_and_what_would_be_requested():
    import io

    from rich.console import Console

    from rgwkeeper.cli.render import render_status
    from rgwkeeper.cli.status import debt_view

    snap = dataclasses.replace(_snap(0, deadlines(pg("1.0", NOW - 13 * DAY), pg("1.1", NOW - 11 * DAY),
                                                  pg("1.2", NOW))), taken_at=NOW)
    debt = debt_view(snap, dataclasses.replace(Config(), scrub_debt=dataclasses.replace(S, max_in_flight=1)), None)
    buf = io.StringIO()
    render_status(snap, console=Console(file=buf, width=160, color_system=None), debt=debt)
    text = buf.getvalue()
    assert "deep-scrub debt: 1 PGs past their PG_NOT_DEEP_SCRUBBED point, 1 due within the horizon" in text
    assert "nearest: pg 1.0, 18 h 00 min past it" in text
    assert "would request: ceph pg deep-scrub 1.0" in text and "deep-scrub 1.1" not in text
    assert json.loads(json.dumps(debt))["summary"]["nearest_pgid"] == "1.0"


def test_status_json_lists_only_the_pgs_nearest_their_deadline():
    from rgwkeeper.snapshot import DEEP_SCRUB_PGS_LISTED

    many = [pg(f"2.{i:x}", NOW - i * 60) for i in range(DEEP_SCRUB_PGS_LISTED * 3)]
    doc = _snap(0, deadlines(*many)).to_dict()["deep_scrub"]
    assert doc["pgs_total"] == DEEP_SCRUB_PGS_LISTED * 3
    assert [p["warn_at"] for p in doc["pgs"]] == sorted(p.warn_at for p in many)[:DEEP_SCRUB_PGS_LISTED]
