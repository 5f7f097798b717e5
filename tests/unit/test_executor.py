"""The executor against a stateful strict fake of the mon/OSDs, and the journal."""

from __future__ import annotations

import asyncio

import pytest

from rgwkeeper.access import ClusterAccess
from rgwkeeper.actions import RemoveConfig, RestoreAll, SetConfig, SetFlag
from rgwkeeper.adapters.rados import RadosAdapter
from rgwkeeper.errors import RgwkeeperError
from rgwkeeper.executor import Executor, NotLeader, same_value
from rgwkeeper.journal import Journal, MemoryStore
from tests.unit.fakes import FakeCluster


@pytest.fixture
def cluster():
    return FakeCluster()


@pytest.fixture
def rados(cluster, tmp_path):
    access = ClusterAccess(conf=tmp_path / "c", keyring=None, client_name="client.admin", rgw_endpoint=None,
                           rgw_credentials_file=None, timeout_s=5)
    r = RadosAdapter(access, factory=lambda a: cluster)
    r.connect()
    yield r
    r.close()


def make(rados, journal=None, **kw):
    journal = journal or Journal(MemoryStore())
    clock = iter(range(1000, 100000, 10))
    return Executor(rados, journal, holder="admin1", lease_s=90, wall_clock=lambda: float(next(clock)),
                    readback_timeout_s=0.5, **kw), journal


def run(coro):
    return asyncio.run(coro)


THROTTLE = (SetConfig("osd", "osd_scrub_sleep", "0.5"), SetConfig("osd", "osd_max_scrubs", "1"),
            SetFlag("nodeep-scrub"))


def test_apply_journals_originals_and_reads_back(cluster, rados):
    cluster.config[("osd", "osd_max_scrubs")] = "2"  # an operator's own setting
    ex, journal = make(rados)
    results = run(ex.apply(THROTTLE))
    assert [r.ok for r in results] == [True, True, True]
    assert results[0].effective == {0: "0.500000", 1: "0.500000", 2: "0.500000"}
    assert cluster.config[("osd", "osd_scrub_sleep")] == "0.5" and "nodeep-scrub" in cluster.flags
    j = journal.overrides()
    assert (j["config/osd/osd_scrub_sleep"].original_present, j["config/osd/osd_scrub_sleep"].original_value) == (False, None)
    assert (j["config/osd/osd_max_scrubs"].original_present, j["config/osd/osd_max_scrubs"].original_value) == (True, "2")
    assert j["flag/nodeep-scrub"].original_present is False
    assert all(e.holder == "admin1" and e.lease_until > e.since for e in j.values())


def test_reapplying_never_records_our_own_value_as_original(cluster, rados):
    ex, journal = make(rados)
    run(ex.apply(THROTTLE))
    results = run(ex.apply(THROTTLE))
    assert [r.changed for r in results] == [False, False, False]
    assert journal.overrides()["config/osd/osd_scrub_sleep"].original_present is False
    sets = [c for c in cluster.sent if c["prefix"] in ("config set", "osd set")]
    assert len(sets) == 3  # the second pass sent nothing


def test_restore_gives_back_exactly_what_was_there(cluster, rados):
    cluster.config[("osd", "osd_max_scrubs")] = "2"
    ex, journal = make(rados)
    run(ex.apply(THROTTLE))
    results = run(ex.apply([RestoreAll("load dropped")]))
    assert all(r.ok for r in results) and len(results) == 3
    assert cluster.config == {("osd", "osd_max_scrubs"): "2"}
    assert "nodeep-scrub" not in cluster.flags
    assert journal.overrides() == {}
    assert sorted(r.command for r in results) == [
        "ceph config rm osd osd_scrub_sleep", "ceph config set osd osd_max_scrubs 2", "ceph osd unset nodeep-scrub"]


def test_settings_already_in_place_are_not_journaled(cluster, rados):
    cluster.config[("osd", "osd_scrub_sleep")] = "0.5"
    cluster.flags.add("nodeep-scrub")
    ex, journal = make(rados)
    results = run(ex.apply([THROTTLE[0], THROTTLE[2]]))
    assert all(r.ok and not r.changed for r in results)
    assert journal.overrides() == {}
    run(ex.restore())
    assert cluster.config[("osd", "osd_scrub_sleep")] == "0.5" and "nodeep-scrub" in cluster.flags


def test_a_reverted_setting_is_reported_not_trusted(cluster, rados):
    cluster.revert.add("osd_scrub_sleep")  # what mClock does to locked options
    ex, _ = make(rados)
    (r,) = run(ex.apply([THROTTLE[0]]))
    assert not r.ok
    assert "osd.0=0.000000" in r.detail and "not effective" in r.detail


def test_not_leader_acts_on_nothing(cluster, rados):
    ex, journal = make(rados, may_act=lambda: False)
    with pytest.raises(NotLeader):
        run(ex.apply(THROTTLE))
    assert journal.overrides() == {} and cluster.config == {}
    assert not [c for c in cluster.sent if c["prefix"] in ("config set", "osd set")]


def test_restore_of_one_holder_only(cluster, rados):
    journal = Journal(MemoryStore())
    a, _ = make(rados, journal)
    run(a.apply([THROTTLE[0]]))
    b = Executor(rados, journal, holder="admin2", lease_s=90, readback_timeout_s=0.5)
    run(b.apply([THROTTLE[1]]))
    run(b.restore(holder="admin2"))
    assert set(journal.overrides()) == {"config/osd/osd_scrub_sleep"}


def test_dry_run_restore_changes_nothing(cluster, rados):
    ex, journal = make(rados)
    run(ex.apply([THROTTLE[0]]))
    before = dict(cluster.config)
    results = run(ex.restore(dry_run=True))
    assert [r.command for r in results] == ["ceph config rm osd osd_scrub_sleep"]
    assert cluster.config == before and len(journal.overrides()) == 1


def test_policies_may_not_remove_settings_directly(rados):
    ex, _ = make(rados)
    with pytest.raises(RgwkeeperError, match="RestoreAll only"):
        run(ex.apply([RemoveConfig("osd", "osd_scrub_sleep")]))


def test_journal_renew_extends_only_the_holders_leases(cluster, rados):
    journal = Journal(MemoryStore())
    a, _ = make(rados, journal)
    run(a.apply([THROTTLE[0]]))
    assert journal.renew("admin1", 99999.0) == 1
    assert journal.renew("someone-else", 5.0) == 0
    assert journal.overrides()["config/osd/osd_scrub_sleep"].lease_until == 99999.0


@pytest.mark.parametrize("a, b, same", [("0.5", "0.500000", True), ("1", "1", True), ("wpq", "WPQ", True),
                                        ("0.5", "0.25", False), (None, None, True), ("1", None, False)])
def test_same_value(a, b, same):
    assert same_value(a, b) is same


def test_restore_after_a_cancelled_pass_waits_for_the_config_set_still_in_flight(cluster, rados):
    # Shutdown cancels the running pass, but the `config set` it sent keeps going in its thread;
    # a restore that did not wait for it would be overtaken by it (a setting left behind).
    import threading

    gate = threading.Event()
    real = cluster.mon_command

    def slow_mon_command(cmd, inbuf, timeout=0):
        if '"config set"' in cmd:
            gate.wait(10)
        return real(cmd, inbuf, timeout)

    cluster.mon_command = slow_mon_command
    ex, journal = make(rados)

    async def scenario():
        task = asyncio.create_task(ex.apply([SetConfig("osd", "osd_scrub_sleep", "0.5")]))
        while not journal.overrides():
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # the config set is now blocked in its thread
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert await rados.drain(0.2) is False  # still in flight
        gate.set()
        assert await rados.drain(5) is True
        await ex.restore()

    run(scenario())
    assert ("osd", "osd_scrub_sleep") not in cluster.config and journal.overrides() == {}


def _expire_cmd(stdout: str, code: int) -> list[str]:
    """A stand-in for `rgwkeeper` that prints what `expire --yes --json` prints and exits."""
    return ["sh", "-c", f"printf '%s' '{stdout}'; echo 'rgwkeeper: error: expire: ...' >&2; exit {code}", "rgwkeeper"]


def test_fill_triggered_expiry_reports_a_partial_failure_bucket_by_bucket(rados):
    from rgwkeeper.actions import RunExpire

    out = ('[{"bucket": "logs", "ok": true, "checks": []}, '
           '{"bucket": "Legacy_Upper", "ok": false, "stage": "plan", "error": "not valid"}]')
    ex, _ = make(rados, rgwkeeper_cmd=_expire_cmd(out, 1))
    (result,) = run(ex.apply([RunExpire("raw fill 80% crossed 75%")]))
    assert not result.ok
    assert result.detail.startswith("partial: 1 of 2 buckets failed (Legacy_Upper); exit 1: rgwkeeper: error")
    assert result.data == {"expire_buckets": 2, "expire_failed": ["Legacy_Upper"]}
    ex, _ = make(rados, rgwkeeper_cmd=_expire_cmd('[{"bucket": "logs", "ok": true}]', 0))
    (result,) = run(ex.apply([RunExpire("again")]))
    assert result.ok and result.data == {"expire_buckets": 1, "expire_failed": []}
