"""Expire's run from a listing (Pacific, where `lc process --bucket` cannot run one bucket) on
the purge's lister and S3 deleter: retries, the rate cap, refused keys counted. Adapters faked
with the strict purge world; time injected, nothing sleeps."""

from __future__ import annotations

import asyncio
import datetime

import pytest

from rgwkeeper import lifecycle as lc
from rgwkeeper.errors import CephError, CephUnreachable, RgwkeeperError, UsageError
from rgwkeeper.purge.execute import Settings
from rgwkeeper.purge.expire import apply_expire, plan_expire
from rgwkeeper.purge.runtime import Time
from tests.unit.purge_fakes import World, purge_io, rules_without_sizes


def _aged(world: World, *keys: str, days: int = 10) -> None:
    for key in keys:
        world.index[key]["LastModified"] = (datetime.datetime.now(datetime.timezone.utc)
                                            - datetime.timedelta(days=days))


def _expire(world: World, tmp_path, *, settings: Settings = Settings(), time_: Time = Time()):
    io, _ = purge_io(world, tmp_path)
    rule = lc.ExpiryRule(bucket=world.bucket, prefix="plain/", days=2)

    async def go():
        xp = await plan_expire(world.bucket, [rule], io, protected=[], run_now=True)
        assert xp.by_listing, "the default world is Pacific: expire runs from a listing"
        return await apply_expire(xp, io, long_timeout_s=60, settings=settings, time_=time_)

    result = asyncio.run(go())
    return result, next(c for c in result.checks if c.name.endswith("applied now"))


def _fake_time():
    now, slept = [0.0], []

    async def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    return Time(clock=lambda: now[0], sleep=sleep), slept


def test_expire_from_a_listing_retries_a_listing_and_a_delete_while_rgw_restarts(tmp_path):
    world = World()
    _aged(world, "plain/0", "plain/1")
    unreachable = CephUnreachable("S3", "cannot connect to the RGW endpoint")
    world.s3_faults = {"iter_pages": [unreachable], "delete_batch": [unreachable]}
    time_, slept = _fake_time()
    result, applied = _expire(world, tmp_path, time_=time_)
    assert result.ok, result.checks
    assert applied.detail == "2 objects expired through S3 deletes"
    assert not {"plain/0", "plain/1"} & set(world.index) and "plain/2" in world.index
    assert slept.count(0.5) == 2  # one back-off for each fault, on the shared retry policy
    assert world.s3_faults == {"iter_pages": [], "delete_batch": []}


def test_expire_from_a_listing_keeps_to_the_purge_rate_cap(tmp_path):
    world = World()
    _aged(world, "plain/0", "plain/1", "plain/2")
    time_, slept = _fake_time()
    result, applied = _expire(world, tmp_path, settings=Settings(max_objects_per_second=1.0), time_=time_)
    assert result.ok and applied.detail == "3 objects expired through S3 deletes"
    deletes = [line for line in world.log if line.startswith("S3 DeleteObjects")]
    assert deletes == ["S3 DeleteObjects ['plain/0']", "S3 DeleteObjects ['plain/1']",
                       "S3 DeleteObjects ['plain/2']"]  # a second's worth a request
    assert sum(slept) == 2.0  # 3 objects at 1/s: at 0, 1 and 2 s


def test_expire_from_a_listing_counts_a_refused_key_apart_and_goes_on(tmp_path):
    world = World()
    _aged(world, "plain/0", "plain/1")
    world.fail_delete_keys = {"plain/0"}
    result, applied = _expire(world, tmp_path)
    assert applied.status == "failed" and not result.ok
    # Only the key RGW deleted counts as expired (it used to count both).
    assert applied.detail == "1 objects expired through S3 deletes, 1 deletes refused"
    assert "plain/0" in world.index and "plain/1" not in world.index


def test_expire_from_a_listing_is_paced_like_a_purge_and_removes_its_probe(tmp_path):
    world = World()
    _aged(world, "plain/0")
    time_, _ = _fake_time()
    result, applied = _expire(world, tmp_path, settings=Settings(pace_latency_increase=0.5), time_=time_)
    assert result.ok and applied.detail == "1 objects expired through S3 deletes"
    probes = [line for line in world.log if "rgwkeeper.expire.probe." in line]
    # The target is measured before the first delete (9 probes), and the probe object goes after.
    first_delete = next(i for i, line in enumerate(world.log) if line.startswith("S3 DeleteObjects"))
    assert sum(1 for line in world.log[:first_delete] if line.startswith("rados write")
               and "rgwkeeper.expire.probe." in line) >= 9
    assert probes[-1].startswith("rados rm ") and probes[-1].endswith(f"rgwkeeper.expire.probe.{world.bucket_id}")


def test_a_lifecycle_day_is_read_for_the_client_radosgw_admin_runs_as(tmp_path):
    """rgw_lc_debug_interval set for client.rgwkeeper (the client the docs tell operators to
    run as) makes a day 1 s; reading client.admin's instead missed it (found on a real cluster
    by the least-privilege caps test)."""
    import dataclasses

    from rgwkeeper.purge.expire import lc_debug_interval
    from tests.unit.purge_fakes import FakeRados

    world = World()
    io, _ = purge_io(world, tmp_path)
    access = dataclasses.replace(io.rgw.access, client_name="client.rgwkeeper")
    io.rgw.access = access
    io = dataclasses.replace(io, rados=FakeRados(world, client_name="client.rgwkeeper", lc_debug_interval=1.0))
    assert asyncio.run(lc_debug_interval(io)) == 1.0


def test_expire_of_a_bucket_rgwkeepers_s3_user_may_not_reach_says_what_to_do_and_changes_nothing(tmp_path):
    world = World()
    world.s3_denied = True  # another user's bucket; rgwkeeper's RGW user has admin caps, not the admin flag
    io, _ = purge_io(world, tmp_path)
    rule = lc.ExpiryRule(bucket=world.bucket, prefix="plain/", days=2)
    with pytest.raises(UsageError) as exc:
        asyncio.run(plan_expire(world.bucket, [rule], io, protected=[], run_now=True))
    msg = str(exc.value)
    assert f"may not reach bucket {world.bucket!r} through S3 (GetBucketLifecycleConfiguration: 403" in msg
    assert "--admin" in msg and msg.endswith("nothing was changed")
    assert world.lifecycle == [] and not any(line.startswith("S3 ") for line in world.log)


# -- rules RGW keeps otherwise ---------------------------------------------------------------------

def _put_size_rule(world: World, tmp_path):
    """expire with a size filter on a release rgwkeeper lets take them, whose RGW keeps the rule
    without the size (what 18.2.7 does): every object under the rule would expire."""
    world.as_release("tentacle", "20.2.4")
    world.lifecycle_kept = rules_without_sizes
    io, _ = purge_io(world, tmp_path)
    rule = lc.ExpiryRule(bucket=world.bucket, prefix="plain/", days=2, larger_than=1000)

    async def go():
        xp = await plan_expire(world.bucket, [rule], io, protected=[], run_now=False)
        return await apply_expire(xp, io, long_timeout_s=60)

    with pytest.raises(CephError) as exc:
        asyncio.run(go())
    return str(exc.value)


def test_rules_kept_without_their_size_filter_are_taken_off_again(tmp_path):
    world = World()
    msg = _put_size_rule(world, tmp_path)
    assert "the rules read back differ from those put; the bucket had no rules before, and has none again" in msg
    assert world.lifecycle == []
    puts = [line for line in world.log if "Lifecycle" in line]
    assert len(puts) == 2 and puts[0].startswith("S3 PutBucketLifecycleConfiguration") \
        and puts[1] == "S3 DeleteBucketLifecycle", puts


def test_rules_kept_otherwise_give_the_bucket_its_own_rules_back(tmp_path):
    world = World()
    theirs = [{"ID": "theirs", "Status": "Enabled", "Filter": {"Prefix": "archive/"}, "Expiration": {"Days": 3650}}]
    world.lifecycle = [dict(r) for r in theirs]
    msg = _put_size_rule(world, tmp_path)
    assert msg.endswith("the bucket's rules from before were put back")
    assert lc.same_rules(world.lifecycle, theirs)


def test_a_put_back_that_fails_says_so_and_what_to_check(tmp_path):
    world = World()
    world.s3_faults = {"delete_lifecycle": [CephUnreachable("S3", "cannot connect to the RGW endpoint")]}
    msg = _put_size_rule(world, tmp_path)
    assert "putting back the bucket's rules from before failed too" in msg
    assert "check them with GetBucketLifecycleConfiguration" in msg and "\n" not in msg


def test_a_put_whose_answer_is_lost_is_checked_and_taken_off(tmp_path):
    """RGW applied the PUT but its answer never came: the rules are put back all the same."""
    world = World()
    world.as_release("tentacle", "20.2.4")
    io, _ = purge_io(world, tmp_path)
    real_put = io.s3.put_lifecycle

    def put_then_lose_the_answer(bucket, rules):
        real_put(bucket, rules)
        raise CephUnreachable("PutBucketLifecycleConfiguration", "no answer within 10 s; the request may have run")

    io.s3.put_lifecycle = put_then_lose_the_answer
    rule = lc.ExpiryRule(bucket=world.bucket, prefix="plain/", days=2)

    async def go():
        xp = await plan_expire(world.bucket, [rule], io, protected=[], run_now=False)
        return await apply_expire(xp, io, long_timeout_s=60)

    with pytest.raises(CephUnreachable) as exc:  # still the kind of failure it was
        asyncio.run(go())
    assert "the request may have run; the bucket had no rules before, and has none again" in str(exc.value)
    assert world.lifecycle == []


@pytest.mark.parametrize("release, version", [("reef", "18.2.7"), ("squid", "19.2.3"), ("pacific", "16.2.15")])
def test_a_size_filter_is_refused_before_any_put_where_rgw_does_not_keep_it(tmp_path, release, version):
    world = World()
    world.as_release(release, version)
    world.lifecycle_kept = rules_without_sizes
    io, _ = purge_io(world, tmp_path)
    rule = lc.ExpiryRule(bucket=world.bucket, prefix="plain/", days=2, larger_than=1000)
    with pytest.raises(UsageError, match=f"need Tentacle; this cluster runs {release}") as exc:
        asyncio.run(plan_expire(world.bucket, [rule], io, protected=[], run_now=True))
    assert "already holds" not in str(exc.value)
    assert not any("PutBucketLifecycle" in line for line in world.log)


def test_a_size_filtered_rule_an_earlier_rgwkeeper_left_on_reef_is_named(tmp_path):
    """Before 2026-11-29 rgwkeeper put this rule on Reef, which kept it without its size."""
    world = World()
    world.as_release("reef", "18.2.7")
    rule = lc.ExpiryRule(bucket=world.bucket, prefix="plain/", days=2, larger_than=1000)
    world.lifecycle = rules_without_sizes(rule.to_s3_rules())
    io, _ = purge_io(world, tmp_path)
    with pytest.raises(UsageError) as exc:
        asyncio.run(plan_expire(world.bucket, [rule], io, protected=[], run_now=True))
    msg = str(exc.value)
    assert f"the bucket already holds rule {rule.rule_id}, put by an earlier rgwkeeper" in msg and "\n" not in msg
    assert world.lifecycle == rules_without_sizes(rule.to_s3_rules())  # named, not changed


def test_rules_changed_between_the_plan_and_the_put_are_not_overwritten(tmp_path):
    """The daemon plans every bucket, then applies them one by one: an operator's rule put in
    between would be lost to the merge made from the rules read at planning."""
    world = World()
    io, _ = purge_io(world, tmp_path)
    rule = lc.ExpiryRule(bucket=world.bucket, prefix="plain/", days=2)
    theirs = [{"ID": "theirs", "Status": "Enabled", "Filter": {"Prefix": "archive/"}, "Expiration": {"Days": 3650}}]

    async def go():
        xp = await plan_expire(world.bucket, [rule], io, protected=[], run_now=False)
        world.lifecycle = [dict(r) for r in theirs]  # the operator's change, after the plan
        return await apply_expire(xp, io, long_timeout_s=60)

    with pytest.raises(RgwkeeperError, match="its lifecycle rules changed since the plan; nothing was put"):
        asyncio.run(go())
    assert world.lifecycle == theirs
    assert not any("PutBucketLifecycle" in line for line in world.log)


def test_an_interrupt_during_the_put_is_not_put_back_and_goes_on_up(tmp_path):
    """A cancel does not stop the PUT's thread: a put-back then could land before the PUT. So
    nothing is put back, the error log says to run expire again, and the cancel is not swallowed."""
    import threading

    world = World()
    world.as_release("tentacle", "20.2.4")
    io, _ = purge_io(world, tmp_path)
    real_put, started, release = io.s3.put_lifecycle, threading.Event(), threading.Event()

    def slow_put(bucket, rules):
        started.set()
        release.wait(5)
        real_put(bucket, rules)

    io.s3.put_lifecycle = slow_put
    rule = lc.ExpiryRule(bucket=world.bucket, prefix="plain/", days=2)

    async def go():
        xp = await plan_expire(world.bucket, [rule], io, protected=[], run_now=False)
        task = asyncio.ensure_future(apply_expire(xp, io, long_timeout_s=60))
        while not started.is_set():
            await asyncio.sleep(0.01)
        task.cancel()
        try:
            await task
        finally:
            release.set()

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(go())
    assert not any(line == "S3 DeleteBucketLifecycle" for line in world.log)
