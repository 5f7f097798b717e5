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
    run(b.restore(holders={"admin2"}))
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
    assert journal.renew({"admin1"}, 99999.0) == 1
    assert journal.renew({"someone-else"}, 5.0) == 0
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


# -- restore gives back only what is still ours, each entry on its own ---------------------------

def test_restore_leaves_a_value_an_operator_changed_and_keeps_its_entry(cluster, rados):
    cluster.config[("osd", "osd_max_scrubs")] = "2"
    ex, journal = make(rados)
    run(ex.apply([THROTTLE[1]]))  # rgwkeeper sets 1
    cluster.config[("osd", "osd_max_scrubs")] = "4"  # the operator, during the throttle
    (r,) = run(ex.restore())
    assert (r.ok, r.status) == (False, "left")
    assert r.detail == ("osd/osd_max_scrubs is 4 now, not the 1 rgwkeeper set: left as it is and kept in the "
                        "journal; rgwkeeper restore --force puts back 2")
    assert cluster.config[("osd", "osd_max_scrubs")] == "4"
    assert "config/osd/osd_max_scrubs" in journal.overrides()
    assert not [c for c in cluster.sent if c["prefix"] == "config set" and c["value"] != "1"]
    (forced,) = run(ex.restore(force=True))
    assert (forced.ok, forced.status) == (True, "restored")
    assert cluster.config[("osd", "osd_max_scrubs")] == "2" and journal.overrides() == {}


def test_a_pass_does_not_reassert_over_a_value_an_operator_set(cluster, rados):
    ex, journal = make(rados)
    run(ex.apply([THROTTLE[1]]))
    cluster.config[("osd", "osd_max_scrubs")] = "4"
    (r,) = run(ex.apply([THROTTLE[1]]))  # the policy keeps the throttle on
    assert (r.ok, r.status, r.changed) == (False, "left", False)
    assert cluster.config[("osd", "osd_max_scrubs")] == "4"
    assert "rgwkeeper restore --force removes it" in r.detail


def test_a_value_put_back_by_someone_else_is_forgotten_without_a_command(cluster, rados):
    cluster.config[("osd", "osd_max_scrubs")] = "2"
    ex, journal = make(rados)
    run(ex.apply([THROTTLE[1]]))
    cluster.config[("osd", "osd_max_scrubs")] = "2"  # an operator gave it back by hand
    sent = len(cluster.sent)
    (r,) = run(ex.restore())
    assert (r.ok, r.status) == (True, "forgotten") and journal.overrides() == {}
    assert not [c for c in cluster.sent[sent:] if c["prefix"] in ("config set", "config rm")]


def test_a_flag_unset_by_someone_else_is_forgotten_and_never_cleared_later(cluster, rados):
    ex, journal = make(rados)
    run(ex.apply([THROTTLE[2]]))
    cluster.flags.discard("nodeep-scrub")  # an operator unsets it
    assert run(ex.drop_lost_flags()) == ["nodeep-scrub"]  # the next pass sees it: no longer ours
    cluster.flags.add("nodeep-scrub")  # later the operator sets it by hand, for maintenance
    assert run(ex.restore()) == []
    assert "nodeep-scrub" in cluster.flags


def test_restore_of_a_flag_someone_unset_sends_nothing(cluster, rados):
    ex, journal = make(rados)
    run(ex.apply([THROTTLE[2]]))
    cluster.flags.discard("nodeep-scrub")
    sent = len(cluster.sent)
    (r,) = run(ex.restore())
    assert (r.ok, r.status) == (True, "forgotten") and journal.overrides() == {}
    assert not [c for c in cluster.sent[sent:] if c["prefix"] == "osd unset"]


def test_restore_never_deletes_an_entry_a_new_leader_wrote_meanwhile(cluster, rados):
    store = MemoryStore()
    journal = Journal(store)
    ex, _ = make(rados, journal)
    run(ex.apply([THROTTLE[0]]))
    leader = Executor(rados, journal, holder="admin2", lease_s=90, readback_timeout_s=0.5)

    def new_leader_reapplies(obj, key):  # between our read and our forget
        store.before_write = None
        run_in_thread(leader.apply([THROTTLE[0]]))

    store.before_write = new_leader_reapplies
    (r,) = run(ex.restore())
    assert r.ok and "changed meanwhile" in r.detail
    assert journal.overrides()["config/osd/osd_scrub_sleep"].holder == "admin2"


def run_in_thread(coro):
    """Run a coroutine to the end from inside a running loop's synchronous callback."""
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def test_restore_with_an_unwritable_journal_reports_every_entry_and_goes_on(cluster, rados):
    from rgwkeeper.errors import CephError

    cluster.config[("osd", "osd_max_scrubs")] = "2"
    store = MemoryStore()
    ex, journal = make(rados, Journal(store))
    run(ex.apply(THROTTLE))
    store.write_error = CephError("rgwkeeper/rgwkeeper.journal omap update", "no answer within 10 s")
    results = run(ex.restore())
    assert len(results) == 3 and not any(r.ok for r in results)
    assert all(r.status == "failed" and "could not be removed" in r.detail for r in results)
    # Every setting was given back all the same; the entries stay for the next restore.
    assert cluster.config == {("osd", "osd_max_scrubs"): "2"} and "nodeep-scrub" not in cluster.flags
    assert len(journal.overrides()) == 3
    store.write_error = None
    again = run(ex.restore())
    assert [r.status for r in again] == ["forgotten", "forgotten", "forgotten"] and journal.overrides() == {}


def test_one_failing_entry_does_not_stop_the_others(cluster, rados):
    ex, journal = make(rados)
    run(ex.apply(THROTTLE))
    real = cluster.mon_command

    def refuse_config_rm(cmd, inbuf, timeout=0):
        if '"config rm"' in cmd:
            return -1, b"", "EPERM: access denied"
        return real(cmd, inbuf, timeout)

    cluster.mon_command = refuse_config_rm
    results = {r.command: r for r in run(ex.restore())}
    assert results["ceph config rm osd osd_scrub_sleep"].status == "failed"
    assert "access denied" in results["ceph config rm osd osd_scrub_sleep"].detail
    assert results["ceph config rm osd osd_max_scrubs"].status == "failed"
    assert results["ceph osd unset nodeep-scrub"].status == "restored"
    assert "nodeep-scrub" not in cluster.flags and set(journal.overrides()) == {
        "config/osd/osd_scrub_sleep", "config/osd/osd_max_scrubs"}


def test_an_entry_of_an_unknown_kind_is_left_and_the_rest_restored(cluster, rados):
    from rgwkeeper.journal import Override

    ex, journal = make(rados)
    run(ex.apply([THROTTLE[0]]))
    journal.record(Override(key="future/x", kind="future", who="", name="x", original_present=True,
                            original_value="1", applied_value="2", holder="admin1", since=1.0, lease_until=2.0))
    results = {r.status for r in run(ex.restore())}
    assert results == {"left", "restored"} and set(journal.overrides()) == {"future/x"}


def test_renew_skips_an_entry_changed_since_it_was_read(cluster, rados):
    store = MemoryStore()
    journal = Journal(store)
    ex, _ = make(rados, journal)
    run(ex.apply([THROTTLE[0], THROTTLE[1]]))
    entries = journal.overrides()

    def other_writes(obj, key):
        if key == "config/osd/osd_max_scrubs":
            e = entries[key]
            store.objects[obj][key] = e.__class__(**{**e.__dict__, "holder": "admin2"}).to_json()

    store.before_write = other_writes
    assert journal.renew({"admin1"}, 99999.0) == 1
    assert journal.overrides()["config/osd/osd_max_scrubs"].holder == "admin2"
    assert journal.overrides()["config/osd/osd_scrub_sleep"].lease_until == 99999.0


def test_memory_store_compares_like_omap_cmp():
    store = MemoryStore()
    assert not store.omap_update_if("o", "k", "", "v")  # no object: ENOENT, nothing written
    store.omap_set("o", {"a": "1"})
    assert store.omap_update_if("o", "k", "", "v")  # a missing key reads as ""
    assert not store.omap_update_if("o", "k", "w", None) and store.omap_get_all("o")["k"] == "v"
    assert store.omap_update_if("o", "k", "v", None) and "k" not in store.omap_get_all("o")


def test_restore_own_takes_this_hosts_and_legacy_entries_not_a_twin_hosts(cluster, rados):
    from rgwkeeper.journal import holder_name, own_holders

    journal = Journal(MemoryStore())
    for holder, action in (("a@host1", THROTTLE[0]), ("a@host2", THROTTLE[1]), ("a", THROTTLE[2])):
        ex = Executor(rados, journal, holder=holder, lease_s=90, readback_timeout_s=0.5)
        run(ex.apply([action]))
    results = run(ex.restore(holders=own_holders("a", "host1")))
    assert sorted(r.command for r in results) == ["ceph config rm osd osd_scrub_sleep", "ceph osd unset nodeep-scrub"]
    assert {e.holder for e in journal.overrides().values()} == {holder_name("a", "host2")}


def _expire_runner(outcome, calls):
    """Stands in for the purge engine's configured expiry (daemon/service.py builds the real one)."""
    async def run(raise_full_ratio):
        calls.append(raise_full_ratio)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome
    return run


def test_fill_triggered_expiry_reports_a_partial_failure_bucket_by_bucket(rados):
    from rgwkeeper.actions import RunExpire
    from rgwkeeper.purge import ExpiryOutcome
    from rgwkeeper.purge.execute import Check
    from rgwkeeper.purge.expire import BucketFailure, ExpireResult

    def result(bucket, ok):
        return ExpireResult(bucket, ["r"], True, True, 10, 0 if ok else 10, 100, 0, 1.0,
                            [Check("objects gone", "ok" if ok else "failed", "")])

    calls = []
    partial = ExpiryOutcome([result("logs", True)], [BucketFailure("Legacy_Upper", "plan", "not valid")], [])
    ex, _ = make(rados, expire=_expire_runner(partial, calls))
    (res,) = run(ex.apply([RunExpire("raw fill 80% crossed 75%", raise_full_ratio=0.96)]))
    assert calls == [0.96] and not res.ok
    assert res.detail == ("partial: 1 of 2 buckets failed (Legacy_Upper): 1 bucket(s) not expired (see above): "
                          "Legacy_Upper (plan)")
    assert res.data == {"expire_buckets": 2, "expire_failed": ["Legacy_Upper"]}
    ex, _ = make(rados, expire=_expire_runner(ExpiryOutcome([result("logs", True)], [], []), calls))
    (res,) = run(ex.apply([RunExpire("again")]))
    assert calls == [0.96, None] and res.ok and res.detail == "expired 1 bucket(s)"
    assert res.data == {"expire_buckets": 1, "expire_failed": []}
    ex, _ = make(rados, expire=_expire_runner(ExpiryOutcome([result("logs", False)], [], []), calls))
    (res,) = run(ex.apply([RunExpire("checks")]))
    assert not res.ok and res.detail == "partial: 1 of 1 buckets failed (logs): 1 bucket(s) failed a check " \
                                        "(see above): logs (objects gone)"


def test_fill_triggered_expiry_without_rgw_or_refused_is_one_failed_line(rados):
    from rgwkeeper.actions import RunExpire
    from rgwkeeper.errors import CephError, UsageError

    ex, _ = make(rados)
    (res,) = run(ex.apply([RunExpire("fill")]))
    assert not res.ok and "rgw.endpoint" in res.detail
    for exc in (UsageError("no lifecycle rules: set purge.lifecycle_rules in the config"), CephError("osd pool ls", "timed out after 30 s")):
        ex, _ = make(rados, expire=_expire_runner(exc, []))
        (res,) = run(ex.apply([RunExpire("fill")]))
        assert not res.ok and res.detail == str(exc)


def test_fill_triggered_expiry_that_outlasts_the_long_action_bound_is_cancelled(rados):
    from rgwkeeper.actions import RunExpire

    cancelled = []

    async def hangs(raise_full_ratio):
        try:
            await asyncio.Event().wait()  # an lc process that never ends
        except asyncio.CancelledError:
            cancelled.append(True)  # where the engine stops lc process and gives the ratio back
            raise

    ex, _ = make(rados, expire=hangs, long_timeout_s=0.05)
    (res,) = run(ex.apply([RunExpire("fill")]))
    assert not res.ok and res.detail.startswith("not finished within 0.05 s: cancelled") and cancelled == [True]
