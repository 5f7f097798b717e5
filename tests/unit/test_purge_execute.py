"""The purge executor against a stateful strict fake of one captured bucket (purge_fakes.World)."""

from __future__ import annotations

import dataclasses
import asyncio
import errno
import email.utils
import json
import os
import signal
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from structlog.testing import capture_logs

from rgwkeeper.errors import CephError, CephTimeout, CephUnreachable, CommandFailed, NotFound, UsageError
from rgwkeeper.purge import CheckpointStore, lcrun, prepare
from rgwkeeper.purge.checkpoint import CRASH_AT_ENV, CRASH_ENV, Checkpoint, State
from rgwkeeper.purge.deleters import HeadDeleter
from rgwkeeper.purge.lcrun import LifecycleBusy
from rgwkeeper.purge.execute import RECHECK_IN_FLIGHT, STEP_HANDLERS, PurgeExecutor, PurgeFailed, Settings
from rgwkeeper.purge.pacing import CAP_REQUEST_S, MIN_SHARE, Limiter, Pacer, RateCap
from rgwkeeper.purge.plan import DeleteObjects, DropBucket, PurgeRequest, Tuning, plan
from rgwkeeper.purge.profile import NoSuchBucket, gather_profile
from tests.unit.fakes import FIXTURES
from tests.unit.manifest_builder import single_put
from tests.unit.purge_fakes import DATA, EXTRA, INDEX, World, purge_io

FAST = Settings(rgw_retry_s=5.0, checkpoint_interval_s=0.0)


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch):
    real = asyncio.sleep

    async def fast(delay, *a, **k):
        await real(0)

    monkeypatch.setattr("rgwkeeper.purge.execute.asyncio.sleep", fast)


def make(world, tmp_path, request=None, **kw):
    io, bulks = purge_io(world, tmp_path)
    profile = asyncio.run(gather_profile(world.bucket, rgw=io.rgw, rados=io.rados, admin_api=io.admin_api,
                                         bulk=io.bulk))
    p = plan(profile, request or PurgeRequest(world.bucket), now=kw.pop("now", time.time()),
             tuning=kw.pop("tuning", Tuning()))
    cp = Checkpoint(tmp_path / "cp.json")
    return p, io, cp, bulks


def run(p, io, cp, state=None, settings=FAST, **kw):
    state = state or State(plan=p.to_dict())
    return asyncio.run(PurgeExecutor(p, io, checkpoint=cp, state=state, settings=settings, **kw).run())


def test_a_direct_purge_planned_with_metadata_rm_resumes_after_an_upgrade_and_finishes(tmp_path, monkeypatch):
    """Pacific and Reef dropped a bucket with `metadata rm` until 2026-11-28; a purge planned then
    and stopped before its drop resumes with the plan its checkpoint holds, that drop included."""
    from rgwkeeper.purge import plan as purge_plan
    from rgwkeeper.purge.plan import Plan

    w = World()
    with monkeypatch.context() as mp:
        mp.setitem(purge_plan.DIRECT_DROP, "pacific", "metadata-rm")
        p, io, cp, _ = make(w, tmp_path)
    drop = p.step(DropBucket)
    assert not drop.through_rgw and drop.entry_rm is not None
    saved = Plan.from_dict(json.loads(json.dumps(p.to_dict())))  # as the checkpoint holds it
    assert purge_plan.DIRECT_DROP["pacific"] == "empty-index"
    report = run(saved, io, cp, state=State(plan=saved.to_dict()))
    assert report.ok and not w.exists, report.checks
    assert f"radosgw-admin metadata rm bucket:{w.bucket}" in w.log and "S3 DeleteBucket" not in " ".join(w.log)


def test_direct_purge_of_a_mixed_bucket_leaves_only_tails_copies_still_use(tmp_path):
    w = World()
    shared = list(w.tails["big"])
    multi_tails = list(w.tails["multi"])
    p, io, cp, _ = make(w, tmp_path)
    assert p.method == "direct"
    report = run(p, io, cp)
    assert report.ok, report.checks
    # Every object went straight to RADOS (the '_' key with its locator): each tail of "big" and
    # "multi" lost its object's reference, with its head's tail tag, before the head went.
    removed = {line.split("/", 1)[1] for line in w.log if line.startswith(f"rados rm {DATA}/")}
    assert removed == {w.head(k) for k in ("plain/0", "plain/1", "plain/2", "_underscore", "big", "multi")}
    assert sorted(w.refcount_puts) == sorted([(t, b"tag-big\0") for t in shared] +
                                             [(t, b"tag-multi\0") for t in multi_tails])
    first_head_rm = w.log.index(f"rados rm {DATA}/{w.head('multi')}")
    assert all(w.log.index(f"rados refcount put removed {DATA}/{t}") < first_head_rm for t in multi_tails)
    assert not any(line.startswith("S3 DeleteObjects") for line in w.log)
    assert "S3 AbortMultipartUpload incomplete" in w.log
    changes = [line for line in w.log if line.startswith(("admin API quota", "rados rm", "S3 Delete", "S3 Abort"))]
    assert changes[0] == "admin API quota max_objects=0"  # the fence comes first
    # The end state, as the fake world holds it and as the report read it back.
    assert not w.exists and w.instance is None and w.bucket not in w.user_buckets
    assert w.rados_left(DATA) == sorted(shared) and w.rados_left(EXTRA) == [] and w.pools[INDEX] == {}
    assert all(w.pools[DATA][t].get("kept") for t in shared)
    checks = {c.name: c for c in report.checks}
    assert "2 tail objects still referenced by copies" in checks[f"no RADOS objects left in {DATA}"].detail
    assert checks["owner stats synced"].status == "ok"
    c = report.counters
    assert (c["direct_removed"], c.get("via_s3", 0), c["uploads_aborted"], c["objects_deleted"]) == (6, 0, 1, 6)
    assert (c["direct_with_tails"], c["tails_released"]) == (2, len(shared) + len(multi_tails))
    assert json.loads(cp.path.read_text())["status"] == "done"
    assert list(report.step_s) == ["fence", "abort_uploads", "delete_objects", "drop_bucket", "verify"]


def test_objects_whose_manifest_it_cannot_read_go_through_s3(tmp_path):
    w = World()
    w.manifests_readable = False  # e.g. explicit manifests from before Firefly
    shared = list(w.tails["big"])
    p, io, cp, _ = make(w, tmp_path)
    assert p.method == "direct"
    report = run(p, io, cp)
    assert report.ok, report.checks
    removed = {line.split("/", 1)[1] for line in w.log if line.startswith(f"rados rm {DATA}/")}
    assert removed == {w.head(k) for k in ("plain/0", "plain/1", "plain/2", "_underscore")}
    assert w.refcount_puts == []
    assert any(line.startswith("S3 DeleteObjects") and "'big'" in line and "'multi'" in line for line in w.log)
    assert w.rados_left(DATA) == sorted(shared) and all(w.pools[DATA][t].get("kept") for t in shared)
    c = report.counters
    assert (c["direct_removed"], c["via_s3"], c["uploads_aborted"], c["objects_deleted"]) == (4, 2, 1, 6)


def test_a_purge_stopped_between_the_tails_and_their_heads_resumes_without_dropping_a_copys_reference(tmp_path):
    """Killed after the tails lost their references and before the heads went: the resumed run
    reads the same manifests and puts the same tags again, which changes nothing (cls_refcount
    retires a tag), so the copy's reference on the shared tails survives."""
    w = World()
    shared = list(w.tails["big"])
    p, io, cp, bulks = make(w, tmp_path)
    data = io.bulk(DATA)
    real_remove = data.remove_many

    async def killed(objs, *, window):
        if any(o == (w.head("big"), "") for o in objs):
            raise KeyboardInterrupt  # SIGINT, or a kill, right after the puts
        return await real_remove(objs, window=window)

    data.remove_many = killed  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        run(p, io, cp)
    copy_only = {"copy-0\0": True}  # the copy's reference, RGW's implicit one gone
    assert w.head("big") in w.pools[DATA] and all(w.pools[DATA][t]["refset"] == copy_only for t in shared)
    data.remove_many = real_remove  # type: ignore[method-assign]
    report = run(p, io, cp, state=cp.load())
    assert report.ok, report.checks
    assert w.rados_left(DATA) == sorted(shared)
    assert all(w.pools[DATA][t]["refset"] == copy_only and w.pools[DATA][t]["kept"] for t in shared)
    assert [t for t, tag in w.refcount_puts].count(shared[0]) == 2  # put twice, once per run


def test_a_failed_refcount_put_stops_the_purge_before_its_head_goes_and_a_rerun_finishes(tmp_path):
    w = World()
    p, io, cp, _ = make(w, tmp_path)
    data = io.bulk(DATA)
    real_put = data.refcount_put_many
    victim = w.tails["multi"][0]

    async def eio_once(objs, *, window):
        rets = await real_put([o for o in objs if o[0] != victim], window=window)
        it = iter(rets)
        return [-errno.EIO if o[0] == victim else next(it) for o in objs]

    data.refcount_put_many = eio_once  # type: ignore[method-assign]
    with pytest.raises(PurgeFailed, match=f"{victim} refcount put.*EIO"):
        run(p, io, cp)
    assert w.head("multi") in w.pools[DATA] and w.exists
    data.refcount_put_many = real_put  # type: ignore[method-assign]
    report = run(p, io, cp, state=cp.load())
    assert report.ok and not w.exists and victim not in w.pools[DATA]


@pytest.mark.parametrize("bend", ["storage-class", "other-head", "no-tag"])
def test_an_object_whose_manifest_does_not_fit_this_bucket_goes_through_s3(tmp_path, bend):
    w = World()
    big = w.head("big")
    prefix = w.tails["big"][0].split("__shadow_", 1)[1].rsplit("_", 1)[0] + "_"
    if bend == "storage-class":  # tails moved to another storage class's pool by a transition
        w.head_xattrs[big]["user.rgw.manifest"] = single_put(w.bucket, w.marker, "big", 9 << 20, prefix,
                                                             placement="default-placement/COLD")
    elif bend == "other-head":  # a manifest naming another object as its head
        w.head_xattrs[big]["user.rgw.manifest"] = single_put(w.bucket, w.marker, "other", 9 << 20, prefix)
    else:
        del w.head_xattrs[big]["user.rgw.tail_tag"], w.head_xattrs[big]["user.rgw.idtag"]
    big_tails = list(w.tails["big"])
    p, io, cp, _ = make(w, tmp_path)
    report = run(p, io, cp)
    assert report.ok, report.checks
    assert any(line.startswith("S3 DeleteObjects") and "'big'" in line and "'multi'" not in line for line in w.log)
    assert not any(t in big_tails for t, _ in w.refcount_puts) and any(w.refcount_puts)
    assert report.counters["via_s3"] == 1 and report.counters["direct_with_tails"] == 1


def test_an_object_copied_in_from_another_bucket_drops_only_its_own_reference(tmp_path):
    """Its tails are the source bucket's: the put must use this object's tail tag (not its id
    tag), so the source keeps its implicit reference and its data."""
    w = World()
    tails = w.add_imported("imported")
    p, io, cp, _ = make(w, tmp_path)
    report = run(p, io, cp)
    assert report.ok, report.checks
    assert sorted(tag for t, tag in w.refcount_puts if t in tails) == [b"tag-imported\0"] * 2
    assert all(w.pools[DATA][t]["refset"] == {"": True} and w.pools[DATA][t]["kept"] for t in tails)
    assert w.head("imported") not in w.pools[DATA]
    assert report.counters["direct_with_tails"] == 3


def test_tails_already_gone_are_counted_apart_not_as_released(tmp_path):
    w = World()
    gone = w.tails["multi"][:2]
    for t in gone:
        del w.pools[DATA][t]
    p, io, cp, _ = make(w, tmp_path)
    report = run(p, io, cp)
    assert report.ok, report.checks
    c = report.counters
    assert (c["tails_missing"], c["tails_released"]) == (2, 3)  # 5 tails (big 2, multi 3), 2 already gone


def crash_after_pages(n: int):
    """A progress callback that interrupts the purge after its ``n``-th page of deletes was done."""
    pages = []

    def crash(progress):
        if progress.step == "delete_objects":
            pages.append(progress.objects_done)
            if len(pages) == n:
                raise KeyboardInterrupt  # what SIGINT or a kill looks like to the checkpoint

    return crash


def test_a_killed_purge_resumes_after_its_last_finished_page(tmp_path):
    w = World(page_size=4, extra_plain=30)
    p, io, cp, _ = make(w, tmp_path)
    with pytest.raises(KeyboardInterrupt):
        run(p, io, cp, on_progress=crash_after_pages(3))
    saved = cp.load()
    assert saved.status == "running" and saved.plan["steps"][saved.step]["kind"] == "delete_objects"
    after = saved.cursor["start_after"]
    assert w.exists and len(w.index) > 0
    w.log.clear()
    report = run(p, io, cp, state=saved)
    assert report.ok, report.checks
    first_listing = next(line for line in w.log if line.startswith("S3 ListObjectsV2"))
    assert first_listing == f"S3 ListObjectsV2 after={after!r}"  # nothing before the checkpoint is listed again
    assert not w.exists and w.rados_left(DATA) == sorted(w.pools[DATA])  # only the shared tails
    assert report.counters["objects_deleted"] == 36


def test_entries_the_listing_missed_are_swept_before_the_index_is_dropped(tmp_path, monkeypatch):
    w = World(extra_plain=5)
    p, io, cp, _ = make(w, tmp_path)
    real = PurgeExecutor._step_delete_objects

    async def then_a_late_write(self, step, *, sweep=False):
        await real(self, step, sweep=sweep)
        if not sweep:  # an object written before the fence took effect, after its page was listed
            w.index["extra/00000a"] = dict(w.index.get("extra/00001") or {}, Key="extra/00000a", Size=100)
            w.pools[DATA][w.head("extra/00000a")] = {"size": 100, "locator": "", "refs": 0}

    monkeypatch.setitem(STEP_HANDLERS, DeleteObjects, then_a_late_write)
    report = run(p, io, cp)
    assert report.ok and report.counters["sweeps"] == 1
    assert w.head("extra/00000a") not in w.pools[DATA]


def test_a_refused_batch_stops_the_purge_and_a_rerun_finishes_it(tmp_path):
    w = World()
    w.manifests_readable = False  # objects with tails go through S3
    w.fail_delete_keys = {"big"}
    p, io, cp, _ = make(w, tmp_path)
    with pytest.raises(PurgeFailed, match="1 of 2 keys refused, e.g. 'big': AccessDenied"):
        run(p, io, cp)
    saved = cp.load()
    assert saved.status == "failed" and "AccessDenied" in saved.error and w.exists
    w.fail_delete_keys = set()
    report = run(p, io, cp, state=saved)
    assert report.ok and not w.exists


def test_rgw_unreachable_for_a_while_is_waited_out(tmp_path):
    w = World(extra_plain=10)
    p, io, cp, _ = make(w, tmp_path)
    w.rgw_down_for = 3  # e.g. RGW restarting, while the listing is under way
    now, slept = [0.0], []

    async def sleep(s):  # the backoff passes on the test's clock
        slept.append(s)
        now[0] += s
        await asyncio.sleep(0)

    report = run(p, io, cp, clock=lambda: now[0], sleep=sleep)
    assert report.ok and "sweeps" not in report.counters, report.checks
    assert slept == [0.5, 1.0, 2.0]  # backoff doubling, on the injected clock and sleep
    w2 = World()
    (tmp_path / "second").mkdir()
    p2, io2, cp2, _ = make(w2, tmp_path / "second")
    w2.rgw_down_for = 1000
    with pytest.raises(CephUnreachable):
        run(p2, io2, cp2, settings=Settings(rgw_retry_s=0.0))


def test_verification_fails_on_anything_left_behind(tmp_path, monkeypatch):
    w = World()
    p, io, cp, _ = make(w, tmp_path)
    stray = f"{w.marker}__shadow_.stray_1"
    real_drop = PurgeExecutor._step_drop_bucket

    async def leave_a_stray_tail(self, step):
        await real_drop(self, step)
        w.pools[DATA][stray] = {"size": 10, "locator": "", "refs": 0}

    monkeypatch.setitem(STEP_HANDLERS, DropBucket, leave_a_stray_tail)
    report = run(p, io, cp)
    assert not report.ok
    failed = [c for c in report.checks if c.status == "failed"]
    assert [c.name for c in failed] == [f"no RADOS objects left in {DATA}"] and stray in failed[0].detail
    assert cp.load().status == "failed"


def test_bypass_gc_is_refused_for_a_bucket_with_tails_and_nothing_changes(tmp_path):
    w = World()
    before = (json.dumps(w.current_stats(), sort_keys=True), sorted(w.pools[DATA]))
    p, io, cp, _ = make(w, tmp_path, PurgeRequest("capture-mixed", method="admin-purge-bypass-gc"))
    with pytest.raises(UsageError, match="73348"):
        run(p, io, cp)
    assert (json.dumps(w.current_stats(), sort_keys=True), sorted(w.pools[DATA])) == before
    assert not cp.path.exists()  # nothing to resume: the refusal came before any change
    assert not any(line.startswith(("admin API quota", "rados rm", "S3 Delete", "S3 Abort")) for line in w.log)


def test_bypass_gc_runs_when_every_object_is_head_only(tmp_path):
    w = World(extra_plain=4).only_head_only_objects()
    p, io, cp, _ = make(w, tmp_path, PurgeRequest("capture-mixed", method="admin-purge-bypass-gc"))
    report = run(p, io, cp)
    assert report.ok and not w.exists
    assert any("--bypass-gc" in line for line in w.log)


def test_s3_method_and_the_stock_bucket_rm_both_end_clean(tmp_path):
    for method in ("s3", "admin-purge"):
        w = World()
        (tmp_path / method).mkdir()
        p, io, cp, _ = make(w, tmp_path / method, PurgeRequest("capture-mixed", method=method))
        report = run(p, io, cp)
        assert report.ok, (method, report.checks)
        assert not w.exists and all(w.pools[DATA][o].get("kept") for o in w.rados_left(DATA))


def test_a_long_bucket_rm_is_watched_through_the_admin_api_not_a_process_per_poll(tmp_path, monkeypatch):
    """While the stock bucket rm runs, progress comes from GET /admin/bucket: a radosgw-admin
    process every poll was rgwkeeper's own load on ingest beside the command it watched."""
    w = World()
    p, io, cp, _ = make(w, tmp_path, PurgeRequest("capture-mixed", method="admin-purge"))
    monkeypatch.setattr(PurgeExecutor, "POLL_S", 0.01)

    async def go():
        w.rm_block = asyncio.Event()
        polls_before = w.log.count("admin API bucket stats")
        task = asyncio.ensure_future(PurgeExecutor(p, io, checkpoint=cp, state=State(plan=p.to_dict()),
                                                   settings=FAST).run())
        while w.log.count("admin API bucket stats") < polls_before + 3 and not task.done():
            await asyncio.sleep(0.01)
        rm_at = next(i for i, line in enumerate(w.log) if line.startswith("radosgw-admin bucket rm"))
        assert not [x for x in w.log[rm_at + 1:] if x.startswith("radosgw-admin bucket stats")], w.log[rm_at:]
        w.rm_block.set()
        return await task

    report = asyncio.run(asyncio.wait_for(go(), 30))
    assert report.ok and not w.exists, report.checks


def test_a_bucket_rm_goes_on_while_the_admin_api_does_not_answer_its_progress_polls(tmp_path, monkeypatch):
    """RGW restarting during the stock bucket rm (which does not need RGW): the progress polls
    fail and are skipped; the purge finishes and its count comes from radosgw-admin after."""
    w = World()
    p, io, cp, _ = make(w, tmp_path, PurgeRequest("capture-mixed", method="admin-purge"))
    monkeypatch.setattr(PurgeExecutor, "POLL_S", 0.01)
    polls = []

    async def unreachable(bucket):
        polls.append(bucket)
        raise CephUnreachable(f"GET /admin/bucket?bucket={bucket}", "cannot connect to http://rgw:8080")

    async def go():
        w.rm_block = asyncio.Event()
        monkeypatch.setattr(io.admin_api, "bucket_stats", unreachable)
        task = asyncio.ensure_future(PurgeExecutor(p, io, checkpoint=cp, state=State(plan=p.to_dict()),
                                                   settings=FAST).run())
        while len(polls) < 3 and not task.done():
            await asyncio.sleep(0.01)
        w.rm_block.set()
        return await task

    report = asyncio.run(asyncio.wait_for(go(), 30))
    assert report.ok and not w.exists and len(polls) >= 3, report.checks
    assert report.counters["objects_deleted"] == p.profile.num_objects


def test_the_gc_step_after_bucket_rm_runs_only_when_gc_holds_objects_of_the_bucket(tmp_path):
    """`gc process --include-all` after the stock bucket rm would process every bucket's entries
    before they are due; small objects queue nothing, so there it is not run (as at the direct drop)."""
    for name, world in (("small", World(extra_plain=4).only_head_only_objects()), ("mixed", World())):
        (tmp_path / name).mkdir()
        p, io, cp, _ = make(world, tmp_path / name, PurgeRequest("capture-mixed", method="admin-purge"))
        report = run(p, io, cp)
        assert report.ok and not world.exists, (name, report.checks)
        processed = "radosgw-admin gc process --include-all" in world.log
        assert "librados gc list" in world.log and "radosgw-admin gc list --include-all" not in world.log
        assert processed == (name == "mixed") and report.counters.get("gc_not_run", 0) == (name == "small"), name


def test_prefix_and_age_purge_deletes_exactly_the_matching_objects(tmp_path):
    import datetime

    w = World(extra_plain=6)
    old = datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc)
    for key in ("extra/00000", "extra/00001", "plain/0"):
        w.index[key]["LastModified"] = old
    p, io, cp, _ = make(w, tmp_path, PurgeRequest("capture-mixed", prefix="extra/", older_than_s=86400))
    assert p.method == "s3"
    report = run(p, io, cp)
    assert report.ok, report.checks
    assert "extra/00000" not in w.index and "extra/00001" not in w.index
    assert {"extra/00002", "plain/0", "big"} <= set(w.index) and w.exists
    assert report.counters["objects_deleted"] == 2


def test_an_age_filtered_purge_keeps_a_key_written_again_after_the_listing(tmp_path):
    import datetime

    w = World(extra_plain=6)
    old = datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc)
    for key in ("extra/00000", "extra/00001", "extra/00002"):
        w.index[key]["LastModified"] = old
    w.rewrite_on_head = {"extra/00001"}  # a client PUTs it again between the listing and the delete
    p, io, cp, _ = make(w, tmp_path, PurgeRequest("capture-mixed", prefix="extra/", older_than_s=86400))
    assert any(c.startswith("S3 HeadObject") for c in p.steps[1].calls)
    report = run(p, io, cp)
    assert report.ok, report.checks
    assert "extra/00000" not in w.index and "extra/00002" not in w.index
    assert "extra/00001" in w.index  # the new data is not older than a day: kept
    assert report.counters["objects_deleted"] == 2 and report.counters["kept_rewritten"] == 1
    heads = [i for i, line in enumerate(w.log) if line.startswith("S3 HeadObject")]
    deletes = [i for i, line in enumerate(w.log) if line.startswith("S3 DeleteObjects")]
    assert len(heads) == 3 and max(heads) < min(deletes)  # every match HEADed right before its batch


def test_a_key_written_again_that_still_matches_a_size_filter_is_deleted(tmp_path):
    w = World(extra_plain=4)
    w.rewrite_on_head = {"extra/00001"}  # new mtime, still larger than the filter: delete it
    p, io, cp, _ = make(w, tmp_path, PurgeRequest("capture-mixed", prefix="extra/", larger_than=1))
    report = run(p, io, cp)
    assert report.ok, report.checks
    assert not any(k.startswith("extra/") for k in w.index)
    assert "kept_rewritten" not in report.counters
    assert sum(line.startswith("S3 HeadObject") for line in w.log) == 4


def test_the_pacing_probe_does_not_wait_behind_the_purges_own_s3_calls(tmp_path):
    """The re-check HEADs block here until all 16 are in flight and a probe ran meanwhile. On
    asyncio's default pool (6 threads on 2 cores) only 6 ran at once and the probe waited
    behind them, timing rgwkeeper's own queue."""
    import datetime
    import threading

    w = World(extra_plain=20, page_size=50)  # one page: one chunk of 20 keys, 16 HEADs at once
    old = datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc)
    for key in [k for k in w.index if k.startswith("extra/")]:
        w.index[key]["LastModified"] = old
    p, io, cp, _ = make(w, tmp_path, PurgeRequest("capture-mixed", prefix="extra/", older_than_s=86400))
    lock, waiting = threading.Lock(), [0]
    all_waiting, probed_meanwhile = threading.Event(), threading.Event()
    real_head, real_exists = io.s3.head_object, io.s3.bucket_exists

    def head(*args, **kwargs):
        with lock:
            waiting[0] += 1
            if waiting[0] == RECHECK_IN_FLIGHT:
                all_waiting.set()
        if not probed_meanwhile.wait(10):
            raise AssertionError(f"{waiting[0]} HEADs in flight, no probe ran meanwhile")
        return real_head(*args, **kwargs)

    def exists(bucket):
        if all_waiting.is_set():
            probed_meanwhile.set()
        return real_exists(bucket)

    io.s3.head_object, io.s3.bucket_exists = head, exists
    settings = Settings(pace_write_latency_s=0.05, pace_probe_interval_s=0.0, checkpoint_interval_s=0)
    report = asyncio.run(PurgeExecutor(p, io, checkpoint=cp, state=State(plan=p.to_dict()), settings=settings).run())
    assert report.ok, report.checks
    assert probed_meanwhile.is_set() and not any(k.startswith("extra/") for k in w.index)


def test_an_unfiltered_prefix_purge_sends_no_heads(tmp_path):
    w = World(extra_plain=6)
    p, io, cp, _ = make(w, tmp_path, PurgeRequest("capture-mixed", prefix="extra/"))
    assert not any(c.startswith("S3 HeadObject") for c in p.steps[1].calls)
    report = run(p, io, cp)
    assert report.ok and not any(k.startswith("extra/") for k in w.index)
    assert not any(line.startswith("S3 HeadObject") for line in w.log)


def test_lifecycle_method_runs_the_rule_and_restores_the_previous_ones(tmp_path):
    w = World(extra_plain=3).as_release("reef", "18.2.4")
    w.lifecycle = [{"ID": "keep-a-week", "Status": "Enabled", "Filter": {"Prefix": ""},
                    "NoncurrentVersionExpiration": {"NoncurrentDays": 7}}]
    p, io, cp, _ = make(w, tmp_path, PurgeRequest("capture-mixed", prefix="extra/", method="lifecycle"))
    report = run(p, io, cp)
    assert report.ok, report.checks
    assert not any(k.startswith("extra/") for k in w.index) and "plain/0" in w.index
    assert [r["ID"] for r in w.lifecycle] == ["keep-a-week"]  # put back as it was
    assert w.log.count("radosgw-admin lc process --bucket capture-mixed") == 1


def test_a_saved_lifecycle_purge_with_a_size_filter_puts_no_rule(tmp_path):
    """Before 2026-11-29 the planner let `--method lifecycle --larger-than` through on Reef and
    Tentacle; its rule (a prefix and an age) would expire every object under the prefix. A plan
    saved then is refused when it resumes, before any rule is put."""
    w = World(extra_plain=3).as_release("tentacle", "20.2.4")
    p, io, cp, _ = make(w, tmp_path, PurgeRequest("capture-mixed", prefix="extra/", method="lifecycle"))
    saved = dataclasses.replace(p, request=dataclasses.replace(p.request, larger_than=1000))
    with pytest.raises(UsageError, match="has a size filter its rule does not carry .*--method s3"):
        run(saved, io, cp)
    assert not any("PutBucketLifecycle" in line for line in w.log) and w.lifecycle == []
    assert all(k in w.index for k in ("extra/00000", "extra/00001", "extra/00002"))


@pytest.mark.parametrize("held, busy", [(2, 0), (0, 1), (1, 1)])
def test_lc_process_that_another_worker_skipped_is_run_again(tmp_path, held, busy):
    # lc process exits 0 having done nothing while RGW's own LC worker holds the entry.
    w = World(extra_plain=3).as_release("reef", "18.2.4")
    w.lifecycle = [{"ID": "keep-a-week", "Status": "Enabled", "Filter": {"Prefix": ""},
                    "NoncurrentVersionExpiration": {"NoncurrentDays": 7}}]
    w.lc_held_runs, w.lc_busy_runs = held, busy
    p, io, cp, _ = make(w, tmp_path, PurgeRequest("capture-mixed", prefix="extra/", method="lifecycle"))
    report = run(p, io, cp, settings=Settings(rgw_retry_s=5.0, checkpoint_interval_s=0.0, lc_poll_s=0.0))
    assert report.ok, report.checks
    assert not any(k.startswith("extra/") for k in w.index)
    assert w.log.count("radosgw-admin lc process --bucket capture-mixed") == held + busy + 1


def test_an_lc_process_that_crashes_runs_once_more_and_a_second_crash_fails_in_one_line(tmp_path):
    rules = [{"ID": "keep-a-week", "Status": "Enabled", "Filter": {"Prefix": ""},
              "NoncurrentVersionExpiration": {"NoncurrentDays": 7}}]
    w = World(extra_plain=3).as_release("reef", "18.2.4")
    w.lifecycle, w.lc_crashes = [dict(r) for r in rules], 1
    p, io, cp, _ = make(w, tmp_path, PurgeRequest("capture-mixed", prefix="extra/", method="lifecycle"))
    report = run(p, io, cp, settings=Settings(checkpoint_interval_s=0.0, lc_poll_s=0.0))
    assert report.ok, report.checks
    assert not any(k.startswith("extra/") for k in w.index)
    assert w.log.count("radosgw-admin lc process --bucket capture-mixed") == 2

    w = World(extra_plain=3).as_release("reef", "18.2.4")
    w.lifecycle, w.lc_crashes = [dict(r) for r in rules], 2
    (tmp_path / "again").mkdir()
    p, io, cp, _ = make(w, tmp_path / "again", PurgeRequest("capture-mixed", prefix="extra/", method="lifecycle"))
    with pytest.raises(CommandFailed, match=r"^radosgw-admin lc process --bucket capture-mixed: crashed with SIGABRT"):
        run(p, io, cp, settings=Settings(checkpoint_interval_s=0.0, lc_poll_s=0.0))
    assert w.log.count("radosgw-admin lc process --bucket capture-mixed") == 2
    assert w.lifecycle == rules and {f"extra/{i:05d}" for i in range(3)} <= set(w.index)


def test_an_lc_process_crash_that_left_a_recent_entry_held_fails_at_once_saying_so(tmp_path):
    """As `expire` finds a bucket whose rules were in place already: RGW's own worker ran it an
    hour ago (`started` stamped). The crashed run leaves the entry PROCESSING since then, which
    RGW skips for two lifecycle days; running again would only look like another worker's hold
    until the wait ran out, so it says so at once."""
    w = World(extra_plain=3).as_release("reef", "18.2.4")
    w.lifecycle = [{"ID": "keep-a-week", "Status": "Enabled", "Filter": {"Prefix": ""},
                    "NoncurrentVersionExpiration": {"NoncurrentDays": 7}}]
    w.lc_entry = {**w.lc_entry, "status": "COMPLETE", "started": email.utils.formatdate(time.time() - 3600, usegmt=True)}
    w.lc_crashes = 1
    io, _ = purge_io(w, tmp_path)
    with pytest.raises(CephError, match=r"crashed with SIGABRT .*left the bucket's lifecycle entry PROCESSING since "
                                        r".*: run expire again after that$"):
        asyncio.run(lcrun.process_now(io.rgw, w.bucket, timeout_s=60.0, busy_wait_s=2.0, poll_s=0.01,
                                      held_hint="run expire again after that"))
    assert w.log.count("radosgw-admin lc process --bucket capture-mixed") == 1
    assert {f"extra/{i:05d}" for i in range(3)} <= set(w.index)


@pytest.mark.parametrize("unread, event", [(1, "lc process crashed; its entry not read"),
                                           (0, "lc process crashed, running it again")])
def test_the_run_after_an_lc_process_crash_is_not_cut_short_by_the_wait(tmp_path, unread, event):
    # The crashed run outlasted purge.lc_busy_wait_s (its entry read after it, or not): the one
    # run after a crash still goes, and its own read-back judges.
    w = World(extra_plain=3).as_release("reef", "18.2.4")
    w.lifecycle, w.lc_crashes = [{"ID": "r", "Status": "Enabled", "Filter": {"Prefix": ""}}], 1
    w.lc_list_timeouts = unread
    io, _ = purge_io(w, tmp_path)
    now = time.time()
    t = iter([now, now] + [now + 5.0] * 20)  # the wait runs out during the crashed run
    with capture_logs() as logs:
        result = asyncio.run(lcrun.process_now(io.rgw, w.bucket, timeout_s=60.0, busy_wait_s=2.0, poll_s=0.01,
                                               clock=lambda: next(t)))
    assert result.crashes == 1 and result.runs == 2
    assert w.log.count("radosgw-admin lc process --bucket capture-mixed") == 2
    assert [e["event"] for e in logs if "lc process crashed" in e["event"]] == [event]


def test_lc_process_held_past_the_wait_fails_and_keeps_the_checkpoint(tmp_path):
    w = World(extra_plain=3).as_release("reef", "18.2.4")
    w.lc_held_runs = 1000
    p, io, cp, _ = make(w, tmp_path, PurgeRequest("capture-mixed", prefix="extra/", method="lifecycle"))
    with pytest.raises(LifecycleBusy, match="PROCESSING since .*lc_busy_wait"):
        run(p, io, cp, settings=Settings(checkpoint_interval_s=0.0, lc_poll_s=0.01, lc_busy_wait_s=0.05))
    assert {f"extra/{i:05d}" for i in range(3)} <= set(w.index)
    assert cp.load() is not None and cp.load().status == "failed"


def _purge_cfg():
    from rgwkeeper.config import PurgeSection

    return dataclasses.replace(PurgeSection(), protected_buckets=[], s3_batches_in_flight=8, rados_ops_in_flight=256,
                               long_command_timeout_s=600.0, list_page_size=1000, max_full_ratio=0.97,
                               max_objects_per_second=0.0, cap_request_s=0.1)


@pytest.mark.parametrize("method", ["auto", "direct", "s3", "lifecycle", "admin-purge-bypass-gc"])
def test_a_bucket_rgwkeepers_s3_user_may_not_reach_is_refused_before_anything_changes(tmp_path, method):
    # Admin caps give no S3 access to another user's bucket: the purge stopped at its first S3
    # call (ListMultipartUploads: AccessDenied), with the bucket already fenced.
    w = World().as_release("tentacle", "20.2.4")
    w.s3_denied = True
    io, _ = purge_io(w, tmp_path)
    store = CheckpointStore(tmp_path / "state")
    with pytest.raises(UsageError) as exc:
        asyncio.run(prepare(PurgeRequest(w.bucket, method=method), io, purge_cfg=_purge_cfg(), store=store))
    msg = str(exc.value)
    assert f"may not reach bucket {w.bucket!r} through S3" in msg and f"its owner is {w.owner!r}" in msg
    assert "(ListObjectsV2: 403;" in msg and "--admin" in msg and "--method admin-purge" in msg
    assert msg.endswith("nothing was changed") and w.s3_access_checks == 1
    assert "\n" not in msg
    assert not any(line.startswith(("admin API quota", "rados rm", "S3 ")) for line in w.log)
    assert not (tmp_path / "state").exists()


def test_a_resumed_purge_is_checked_too_and_resumes_once_s3_may_reach_the_bucket(tmp_path):
    # A purge stopped by AccessDenied (before the check existed: fenced) resumes only once
    # rgwkeeper's RGW user has the admin flag, and says so meanwhile.
    w = World().as_release("tentacle", "20.2.4")
    io, _ = purge_io(w, tmp_path)
    store = CheckpointStore(tmp_path / "state")
    req = PurgeRequest(w.bucket)
    first = asyncio.run(prepare(req, io, purge_cfg=_purge_cfg(), store=store))
    store.ensure()
    first.checkpoint.save(State(plan=first.plan.to_dict(), step=1, status="failed", error="AccessDenied"))
    w.s3_denied = True
    with pytest.raises(UsageError, match="may not reach bucket .* through S3 .*--admin"):
        asyncio.run(prepare(req, io, purge_cfg=_purge_cfg(), store=store))
    w.s3_denied = False
    assert asyncio.run(prepare(req, io, purge_cfg=_purge_cfg(), store=store)).resuming


@pytest.mark.parametrize("fault", [CephError("ListObjectsV2 capture-mixed", "SignatureDoesNotMatch"),
                                   CephError("ListObjectsV2 capture-mixed", "RequestTimeTooSkewed"),
                                   CephUnreachable("ListObjectsV2 capture-mixed", "cannot connect to the RGW endpoint")],
                         ids=["signature", "clock", "down"])
def test_an_s3_error_that_is_not_the_buckets_is_raised_as_it_is(tmp_path, fault):
    w = World()
    io, _ = purge_io(w, tmp_path)
    w.s3_faults["check_list_access"] = [fault]
    with pytest.raises(CephError) as exc:
        asyncio.run(prepare(PurgeRequest(w.bucket), io, purge_cfg=_purge_cfg(),
                            store=CheckpointStore(tmp_path / "state")))
    assert exc.value is fault and not isinstance(exc.value, UsageError)


def test_a_bucket_s3_does_not_find_though_radosgw_admin_does_is_refused(tmp_path):
    w = World()
    io, _ = purge_io(w, tmp_path)
    w.s3_faults["check_list_access"] = [NotFound("ListObjectsV2 capture-mixed", "NoSuchBucket")]
    with pytest.raises(UsageError, match="S3 finds no bucket 'capture-mixed' though radosgw-admin does"):
        asyncio.run(prepare(PurgeRequest(w.bucket), io, purge_cfg=_purge_cfg(),
                            store=CheckpointStore(tmp_path / "state")))
    assert not any(line.startswith("admin API quota") for line in w.log)


def test_admin_purge_needs_no_s3_access_and_is_not_refused(tmp_path):
    w = World()
    w.s3_denied = True
    io, _ = purge_io(w, tmp_path)
    prepared = asyncio.run(prepare(PurgeRequest(w.bucket, method="admin-purge"), io, purge_cfg=_purge_cfg(),
                                   store=CheckpointStore(tmp_path / "state")))
    assert prepared.plan.method == "admin-purge"


def test_prepare_resumes_only_the_same_request_on_the_same_bucket_instance(tmp_path):
    w = World()
    io, _ = purge_io(w, tmp_path)
    cfg = _purge_cfg()
    store = CheckpointStore(tmp_path / "state")
    req = PurgeRequest("capture-mixed")
    first = asyncio.run(prepare(req, io, purge_cfg=cfg, store=store))
    assert not first.resuming and not (tmp_path / "state").exists()  # preparing writes nothing
    store.ensure()
    first.checkpoint.save(State(plan=first.plan.to_dict(), step=2, cursor={"start_after": "plain/0"}))
    again = asyncio.run(prepare(req, io, purge_cfg=cfg, store=store))
    assert again.resuming and again.plan == first.plan and again.state.cursor == {"start_after": "plain/0"}
    with pytest.raises(UsageError, match="unfinished purge .* run that same command"):
        asyncio.run(prepare(PurgeRequest("capture-mixed", prefix="plain/"), io, purge_cfg=cfg, store=store))
    # A new bucket with the same name has another id: the old checkpoint is not resumed.
    w.bucket_id = w.stats["id"] = "6bc64fcb-9701-4a37-b156-2e84927630a8.9999.1"
    w.instance["data"]["bucket_info"]["bucket"]["bucket_id"] = w.bucket_id
    fresh = asyncio.run(prepare(req, io, purge_cfg=cfg, store=store))
    assert not fresh.resuming and "earlier bucket of that name" in fresh.ignored[0]
    # The bucket is gone: an unfinished checkpoint of it is resumed (a crash after the drop),
    # and with none the purge is refused as the operator's mistake.
    w.exists = False
    assert asyncio.run(prepare(req, io, purge_cfg=cfg, store=store)).resuming
    with pytest.raises(NoSuchBucket, match="does not exist; nothing was changed"):
        asyncio.run(prepare(req, io, purge_cfg=cfg, store=CheckpointStore(tmp_path / "none")))


def test_checkpoint_is_atomic_locked_and_versioned(tmp_path):
    store = CheckpointStore(tmp_path)
    cp = store.for_purge("b12", "z.1.1", "k1")
    cp.save(State(plan={"profile": {"bucket": "b12"}}, step=1))
    assert cp.load().step == 1 and not list(tmp_path.glob("*.tmp"))
    assert [c.path for c, _ in store.unfinished("b12")] == [cp.path] and store.unfinished("b1") == []
    cp.lock()
    with pytest.raises(UsageError, match="another rgwkeeper purge of this bucket"):
        store.for_purge("b12", "z.1.1", "other-options").lock()
    cp.unlock()
    cp.path.write_text(json.dumps({"format": 99}))
    with pytest.raises(UsageError, match="format 99"):
        cp.load()


def test_pacer_halves_above_the_target_and_recovers_below_it():
    pacer = Pacer(target_s=0.010)
    for t in range(4):
        pacer.observe(0.050, t)
    assert pacer.fraction == pytest.approx(1 / 16) and pacer.limit(256) == 16
    for t in range(4, 60):
        pacer.observe(0.001, t)
    # The moving average lags: it keeps halving for a few samples after latency drops.
    assert pacer.fraction == 1.0 and pacer.min_fraction_seen <= 1 / 16
    off = Pacer(target_s=0)
    off.observe(5.0, 0)
    assert off.fraction == 1.0 and off.limit(8) == 8


def test_pacer_share_duty_and_floor():
    pacer = Pacer(target_s=0.010, fraction=0.01, min_fraction=MIN_SHARE / 256)
    assert pacer.limit(256) == 2 and pacer.duty(256) == 1.0  # 2.56 wanted: 2 in flight, no pause
    assert pacer.share(8) == pytest.approx(0.08) and pacer.duty(8) == pytest.approx(0.08)  # S3: pauses
    for t in range(20):
        pacer.observe(0.050, t)
    assert pacer.fraction == MIN_SHARE / 256  # stops at the floor, never below
    assert pacer.limit(256) == 1 and pacer.duty(256) == pytest.approx(MIN_SHARE)
    assert pacer.share(8) == MIN_SHARE  # S3 is held at the same floor
    for t in (20, 21, 22):  # the moving average needs three fast probes to come below 10 ms
        pacer.observe(0.001, t)
    assert pacer.fraction == pytest.approx(MIN_SHARE / 256 * 1.25)  # then grows again, x1.25


def test_limiter_follows_a_changing_limit():
    async def scenario():
        limit = [2]
        lim = Limiter(lambda: limit[0])
        await lim.acquire()
        await lim.acquire()
        third = asyncio.ensure_future(lim.acquire())
        await asyncio.sleep(0)
        assert not third.done()
        limit[0] = 3
        await lim.release()  # any release re-checks the limit
        await asyncio.wait_for(third, 1)
        for _ in range(2):
            await lim.release()
        await asyncio.wait_for(lim.drain(), 1)

    asyncio.run(scenario())


def test_limiter_below_one_request_in_flight_pauses_between_requests():
    now = [0.0]
    slept = []

    async def sleep(s):  # the pause passes on the test's clock, not the machine's
        slept.append(round(s, 6))
        await asyncio.sleep(0)

    async def scenario():
        share = [0.25]
        lim = Limiter(lambda: 1, share=lambda: share[0], clock=lambda: now[0], sleep=sleep)
        await lim.acquire()
        now[0] += 0.3  # the request took 0.3 s
        await lim.release()
        nxt = asyncio.ensure_future(lim.acquire())
        for _ in range(5):
            await asyncio.sleep(0)
        assert not nxt.done()  # 0.3 s busy at share 0.25: 0.9 s of pause first
        now[0] += 0.89
        for _ in range(5):
            await asyncio.sleep(0)
        assert not nxt.done()
        now[0] += 0.02
        await asyncio.wait_for(nxt, 1)
        assert slept and slept[0] == 0.9 and all(s > 0 for s in slept)
        now[0] += 0.1
        share[0] = 1.0  # the pacer let go: no pause after this one
        await lim.release()
        slept.clear()
        await asyncio.wait_for(lim.acquire(), 1)
        assert slept == [] and lim.in_flight == 1

    asyncio.run(scenario())


def test_pacing_narrows_the_rados_window_when_probes_are_slow(tmp_path):
    w = World(extra_plain=40, page_size=10)
    p, io, cp, bulks = make(w, tmp_path)
    clock = [0.0]

    async def slow_probe(oid, data):
        clock[0] += 0.5  # every probe write takes 500 ms on the injected clock

    bulks_data = io.bulk(DATA)
    bulks_data.write_full = slow_probe  # type: ignore[method-assign]
    ex = PurgeExecutor(p, io, checkpoint=cp, state=State(plan=p.to_dict()),
                       settings=Settings(pace_write_latency_s=0.05, pace_probe_interval_s=0.0, checkpoint_interval_s=0),
                       clock=lambda: clock[0])
    report = asyncio.run(ex.run())
    assert report.ok
    assert report.pacing["max_probe_ms"] == 500.0
    # Below where it started (1% of 256: a window of 2), down to its floor of one op at 5%.
    assert report.pacing["min_concurrency_fraction"] == pytest.approx(MIN_SHARE / 256, rel=0.01)
    assert max(bulks_data.windows) <= 2 and min(bulks_data.windows) == 1


@pytest.mark.parametrize("absolute_s, expect_ms", [(0.0, 30.0), (0.025, 25.0)])
def test_relative_pacing_targets_the_probe_before_the_purge(tmp_path, absolute_s, expect_ms):
    w = World(extra_plain=10, page_size=10)
    p, io, cp, _ = make(w, tmp_path)
    clock = [0.0]

    async def probe(oid, data):
        clock[0] += 0.020  # a probe write costs 20 ms before and during the purge

    io.bulk(DATA).write_full = probe  # type: ignore[method-assign]
    settings = Settings(pace_write_latency_s=absolute_s, pace_latency_increase=0.5, pace_probe_interval_s=0.0,
                        checkpoint_interval_s=0)
    report = asyncio.run(PurgeExecutor(p, io, checkpoint=cp, state=State(plan=p.to_dict()), settings=settings,
                                       clock=lambda: clock[0]).run())
    assert report.ok
    assert report.pacing["before_probe_ms"] == 20.0 and report.pacing["target_ms"] == expect_ms
    assert report.pacing["samples"] >= 1


def test_a_probe_that_fails_before_the_purge_does_not_stop_it(tmp_path):
    from rgwkeeper.errors import CephError

    w = World(extra_plain=10, page_size=10)
    p, io, cp, _ = make(w, tmp_path)

    async def quota_full(oid, data):
        raise CephError("data pool write", "EDQUOT", ret=-122)

    io.bulk(DATA).write_full = quota_full  # type: ignore[method-assign]
    settings = Settings(pace_write_latency_s=0.05, pace_latency_increase=0.3, pace_probe_interval_s=0.0,
                        checkpoint_interval_s=0)
    report = asyncio.run(PurgeExecutor(p, io, checkpoint=cp, state=State(plan=p.to_dict()), settings=settings).run())
    assert report.ok and not w.exists
    assert report.pacing["before_probe_ms"] is None and report.pacing["target_ms"] == 50.0  # the absolute one


def test_an_index_that_still_counts_unknown_entries_is_never_dropped(tmp_path, monkeypatch):
    w = World()
    p, io, cp, _ = make(w, tmp_path)
    real = World.current_stats

    def drifted(self):
        s = real(self)
        s["usage"]["rgw.main"]["num_objects"] += 1  # stats that do not match what the listing shows
        return s

    monkeypatch.setattr(World, "current_stats", drifted)
    with pytest.raises(PurgeFailed, match="the index was left in place"):
        run(p, io, cp)
    assert w.exists and len(w.pools[INDEX]) == 11 and w.instance is not None
    assert cp.load().status == "failed"


@pytest.mark.parametrize("release", [None, ("tentacle", "20.2.4")])
def test_the_drop_confirms_a_gone_bucket_with_radosgw_admin_before_it_skips_its_checks(tmp_path, monkeypatch,
                                                                                         release):
    """At the drop the admin API answers on RGW's path for S3 (NoSuchBucket to everything) while a
    new bucket has taken the name: "gone" would skip the id check, and the drop goes by name
    (`metadata rm bucket:B`; on Tentacle nothing at all, then a sweep-free end)."""
    from rgwkeeper.purge.plan import DropBucket

    w = World() if release is None else World().as_release(*release)
    p, io, cp, _ = make(w, tmp_path)
    real = STEP_HANDLERS[DropBucket]

    async def recreated_behind_the_s3_path(executor, step):
        w.bucket_id = w.stats["id"] = "6bc64fcb-9701-4a37-b156-2e84927630a8.9999.1"
        w.admin_api_fault = "s3"
        return await real(executor, step)

    monkeypatch.setitem(STEP_HANDLERS, DropBucket, recreated_behind_the_s3_path)
    with pytest.raises(PurgeFailed, match="re-created; nothing more is removed"):
        run(p, io, cp)
    assert w.exists and w.instance is not None and w.pools[INDEX]
    assert any(line.startswith("radosgw-admin bucket stats --bucket capture-mixed") for line in w.log)


def test_a_data_extra_pool_that_was_never_created_holds_nothing(tmp_path):
    # RGW creates the non-ec pool on the first multipart upload only (a fresh 16.2.15 cluster).
    w = World(extra_plain=2).only_head_only_objects()
    del w.pools[EXTRA]
    p, io, cp, bulks = make(w, tmp_path)

    from tests.unit import purge_fakes

    class NoPool(purge_fakes.FakeBulk):
        def __init__(self, world, pool):
            self.w, self.pool, self.windows = world, pool, []

        async def list_prefix(self, prefix, *, max_scanned):
            from rgwkeeper.errors import CephError

            raise CephError(f"{self.pool}/list", "error opening pool", ret=-2)

    real_bulk = io.bulk
    io.bulk = lambda pool: NoPool(w, pool) if pool == EXTRA else real_bulk(pool)
    report = run(p, io, cp)
    assert report.ok
    assert {c.name: c.detail for c in report.checks}[f"no RADOS objects left in {EXTRA}"] == "the pool does not exist"


def test_profile_comes_from_the_admin_api_and_falls_back_without_metadata_caps(tmp_path):
    w = World()
    io, _ = purge_io(w, tmp_path)
    p1 = asyncio.run(gather_profile(w.bucket, rgw=io.rgw, rados=io.rados, admin_api=io.admin_api))
    assert "admin API metadata get" in w.log and not any(line.startswith("radosgw-admin metadata get") for line in w.log)
    w.log.clear()
    w.metadata_caps = False
    p2 = asyncio.run(gather_profile(w.bucket, rgw=io.rgw, rados=io.rados, admin_api=io.admin_api))
    assert any(line.startswith("radosgw-admin metadata get bucket.instance:") for line in w.log)
    assert p1 == p2
    w.exists = False
    with pytest.raises(NoSuchBucket):
        asyncio.run(gather_profile("other-bucket", rgw=io.rgw, rados=io.rados, admin_api=io.admin_api))


@pytest.mark.parametrize("capped", [False, True])
@pytest.mark.parametrize("zone_caps", [True, False])
@pytest.mark.parametrize("root_readable", [True, False])
def test_a_capped_purges_plan_starts_one_radosgw_admin_process_at_a_time(tmp_path, capped, zone_caps,
                                                                          root_readable):
    """Beside ingest, the plan's two radosgw-admin reads (zone get, zonegroup get) starting
    together made the purge's first second its slowest (docs/purge.md, "The plan's reads"):
    under a cap they run one after the other; uncapped, together as before. With the zone=read
    cap the zone comes from the admin API, and a realm-less single zone's zonegroup from
    .rgw.root: then the plan starts no process at all."""
    from rgwkeeper.config import PurgeSection

    w = World()
    w.zone_caps = zone_caps
    if not root_readable:
        w.rgw_root = None
    io, _ = purge_io(w, tmp_path)
    cfg = PurgeSection(max_objects_per_second=450.0 if capped else 0.0)
    p = asyncio.run(prepare(PurgeRequest(w.bucket), io, purge_cfg=cfg, store=CheckpointStore(tmp_path / "state"))).plan
    assert p.profile.zones == 1 and p.method == "direct"
    expected = (["radosgw-admin zone get"] if not zone_caps else []) + \
        (["radosgw-admin zonegroup get"] if not root_readable else [])
    assert sorted(line for line in w.log if line.startswith("radosgw-admin")) == expected
    assert ("admin API zone get" in w.log) == zone_caps
    assert ("librados read .rgw.root" in w.log) == root_readable
    assert w.admin_most_at_once == (min(1, len(expected)) if capped else len(expected))


@pytest.mark.parametrize("option, value", [("rgw_zonegroup_root_pool", "site.rgw.root"),
                                           ("rgw_realm_root_pool", "site.rgw.root"),
                                           ("rgw_config_store", "dbstore")])
def test_rgw_root_is_not_read_where_rgw_keeps_its_configuration_elsewhere(tmp_path, option, value):
    """A .rgw.root left behind by an earlier configuration could say "one zone" while RGW's real
    zonegroup, elsewhere, has two: where a root pool option or the config store is not the
    default, the zonegroup comes from radosgw-admin."""
    w = World().as_release("tentacle", "20.2.4")
    w.root_config[option] = value
    p, io, cp, _ = make(w, tmp_path)
    assert "radosgw-admin zonegroup get" in w.log and "librados read .rgw.root" not in w.log
    w2 = World()  # Pacific: no rgw_config_store option (ENOENT), the default config store
    (tmp_path / "pacific").mkdir()
    make(w2, tmp_path / "pacific")
    assert "librados read .rgw.root" in w2.log and "radosgw-admin zonegroup get" not in w2.log


@pytest.mark.parametrize("answer", [None, {"placement_pools": "default-placement"},
                                    {"placement_pools": [{"key": "default-placement", "val": None}]},
                                    {"placement_pools": [["default-placement"]]}])
def test_a_zone_answer_of_another_shape_is_read_again_with_radosgw_admin(tmp_path, monkeypatch, answer):
    """AdminApi.zone_layout refuses an answer it cannot read (CephError), and the plan asks
    radosgw-admin, never a traceback."""
    from rgwkeeper.adapters.radosgw_admin import zone_layout

    with pytest.raises(CephError, match="zone parameters"):
        zone_layout(answer)
    w = World()
    io, _ = purge_io(w, tmp_path)

    async def odd() -> dict:
        return zone_layout(answer)

    monkeypatch.setattr(io.admin_api, "zone_layout", odd)
    prof = asyncio.run(gather_profile(w.bucket, rgw=io.rgw, rados=io.rados, admin_api=io.admin_api, bulk=io.bulk))
    assert "radosgw-admin zone get" in w.log and prof.data_pool == DATA and prof.gc_pool == "default.rgw.log:gc"


def test_a_multisite_zonegroup_is_read_with_radosgw_admin_and_refuses_the_direct_method(tmp_path):
    """A realm in .rgw.root (multisite needs one) is not answered from .rgw.root: `zonegroup get`
    says two zones, and the direct method is refused (RADOS removals are not replicated)."""
    from rgwkeeper.config import PurgeSection

    w = World()
    w.fx = {**w.fx, "zonegroup_get": {**w.fx["zonegroup_get"],
                                      "zones": [*w.fx["zonegroup_get"]["zones"], {"id": "z2", "name": "secondary"}]}}
    w.rgw_root = {**w.rgw_root, "realms.0d0c3f6e-8a3c-4b5e-9a47-3c1bba2f6a11": b"\x01"}
    io, _ = purge_io(w, tmp_path)
    p = asyncio.run(prepare(PurgeRequest(w.bucket), io, purge_cfg=PurgeSection(),
                            store=CheckpointStore(tmp_path / "state"))).plan
    assert "radosgw-admin zonegroup get" in w.log and p.profile.zones == 2 and p.method != "direct"


@pytest.mark.parametrize("fault", ["busy", "s3"])
def test_profile_reads_with_radosgw_admin_whenever_the_admin_api_gives_no_clear_answer(tmp_path, fault):
    """The plan's reads fall back like the read-back's: RGW shedding load (503) reads with
    radosgw-admin, and so does the admin API's "no such bucket", which RGW's path for S3 answers to
    everything (s3): radosgw-admin confirms it before it counts. An RGW that does not answer at all
    fails the plan at once, in one line and with nothing written: the purge needs it next."""
    w = World()
    io, _ = purge_io(w, tmp_path)
    quiet = asyncio.run(gather_profile(w.bucket, rgw=io.rgw, rados=io.rados, admin_api=io.admin_api))
    w.admin_api_fault = "down"
    with pytest.raises(CephUnreachable, match="cannot connect"):
        asyncio.run(gather_profile(w.bucket, rgw=io.rgw, rados=io.rados, admin_api=io.admin_api))
    w.log.clear()
    w.admin_api_reads.clear()
    w.admin_api_fault = fault
    assert asyncio.run(gather_profile(w.bucket, rgw=io.rgw, rados=io.rados, admin_api=io.admin_api)) == quiet
    assert any(line.startswith("radosgw-admin bucket stats") for line in w.log)
    assert any(line.startswith("radosgw-admin metadata get bucket.instance:") for line in w.log)
    assert "radosgw-admin zone get" in w.log
    # The instance is not read through the API once the stats were not: not a second timeout.
    assert sorted(w.admin_api_reads) == ["GET /admin/bucket?bucket=capture-mixed", "GET /admin/config?type=zone"]


def test_a_recreated_bucket_is_not_taken_for_the_old_one_when_the_admin_api_says_no_such_bucket(tmp_path):
    """An unfinished purge resumes on a bucket that is gone (its crash came after the drop), and on
    no other; RGW's path for S3 answering NoSuchBucket must not make a re-created bucket look gone,
    or its old plan's S3 deletes, which go by name, would resume on the new bucket."""
    w = World()
    io, _ = purge_io(w, tmp_path)
    from rgwkeeper.config import PurgeSection

    cfg = dataclasses.replace(PurgeSection(), protected_buckets=[], long_command_timeout_s=600.0)
    store = CheckpointStore(tmp_path / "state")
    req = PurgeRequest("capture-mixed", method="s3")
    first = asyncio.run(prepare(req, io, purge_cfg=cfg, store=store))
    store.ensure()
    first.checkpoint.save(State(plan=first.plan.to_dict(), step=2, cursor={"start_after": "plain/0"}))
    w.bucket_id = w.stats["id"] = "6bc64fcb-9701-4a37-b156-2e84927630a8.9999.1"
    w.instance["data"]["bucket_info"]["bucket"]["bucket_id"] = w.bucket_id
    w.admin_api_fault = "s3"
    fresh = asyncio.run(prepare(req, io, purge_cfg=cfg, store=store))
    assert not fresh.resuming and "earlier bucket of that name" in fresh.ignored[0]
    assert fresh.plan.profile.bucket_id == w.bucket_id


def test_injected_crash_kills_the_process_right_after_the_nth_cursor_reaches_disk(tmp_path):
    import subprocess
    import sys
    code = ("import sys; from pathlib import Path; from rgwkeeper.purge.checkpoint import Checkpoint, State\n"
            "cp = Checkpoint(Path(sys.argv[1]))\n"
            "cp.save(State(plan={}, step=1))\n"  # no cursor: does not count
            "for i in range(5):\n"
            "    cp.save(State(plan={}, step=2, cursor={'start_after': f'k{i}'}))\n")
    path = tmp_path / "cp.json"
    proc = subprocess.run([sys.executable, "-c", code, str(path)], env={**os.environ, CRASH_ENV: "2"},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert Checkpoint(path).load().cursor == {"start_after": "k1"}


def test_injected_crash_before_a_step_kills_the_process_once_that_steps_checkpoint_is_on_disk(tmp_path):
    import subprocess
    import sys
    code = ("import sys; from pathlib import Path; from rgwkeeper.purge.checkpoint import Checkpoint, State\n"
            "cp = Checkpoint(Path(sys.argv[1]))\n"
            "plan = {'steps': [{'kind': 'fence'}, {'kind': 'delete_objects'}, {'kind': 'verify'}]}\n"
            "cp.save(State(plan=plan, step=1, cursor={'start_after': 'k'}))\n"  # mid-step: does not count
            "cp.save(State(plan=plan, step=1))\n"
            "cp.save(State(plan=plan, step=2))\n"
            "cp.save(State(plan=plan, step=3))\n")
    path = tmp_path / "cp.json"
    proc = subprocess.run([sys.executable, "-c", code, str(path)],
                          env={**os.environ, CRASH_AT_ENV: "before-step:verify"}, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert Checkpoint(path).load().step == 2


def test_rate_cap_spaces_requests_evenly():
    now, slept = [0.0], []

    async def sleep(s):
        slept.append(round(s, 6))
        now[0] += s

    async def scenario():
        cap = RateCap(10.0, clock=lambda: now[0], sleep=sleep, request_s=1.0)
        assert cap.chunk(1000) == 10 and cap.chunk(4) == 4
        for n in (10, 10, 5, 10):
            await cap.take(n)
        assert slept == [1.0, 1.0, 0.5]  # the first goes at once; each reserves n / rate after it
        now[0] += 60  # idle for a minute: no burst of saved-up credit afterwards
        await cap.take(10)
        await cap.take(10)
        assert slept[-1] == 1.0 and len(slept) == 4
        off = RateCap(0.0, clock=lambda: now[0], sleep=sleep)
        assert off.chunk(1000) == 1000 and off.chunk(0) == 1
        await off.take(10_000)
        assert len(slept) == 4

    asyncio.run(scenario())


def test_rate_cap_spaces_concurrent_callers_and_rates_below_one():
    now, starts = [0.0], []

    async def sleep(s):  # yields, so the other callers reserve while one waits; wakes at its time
        wake = now[0] + s
        await asyncio.sleep(0)
        now[0] = max(now[0], wake)

    async def caller(cap, n):
        await cap.take(n)
        starts.append(now[0])

    async def scenario():
        cap = RateCap(4.0, clock=lambda: now[0], sleep=sleep)
        await asyncio.gather(*(caller(cap, 2) for _ in range(4)))
        # Four callers at once get four distinct slots, half a second apart, not one burst.
        assert sorted(starts) == [0.0, 0.5, 1.0, 1.5]
        slow = RateCap(0.25, clock=lambda: now[0], sleep=sleep)  # one object every 4 s
        assert slow.chunk(1000) == 1
        starts.clear()
        t0 = now[0]
        for _ in range(3):
            await caller(slow, 1)
        assert [round(t - t0, 6) for t in starts] == [0.0, 4.0, 8.0]

    asyncio.run(scenario())


def test_a_capped_request_carries_a_tenth_of_a_second_of_work_by_default():
    assert [RateCap(rate).chunk(1000) for rate in (150.0, 20.0, 0.25, 5000.0)] == [15, 2, 1, 500]
    assert RateCap(150.0, request_s=1.0).chunk(1000) == 150 and RateCap(150.0).chunk(7) == 7
    for bad in (float("nan"), float("inf"), 0.0, 11.0, "0.1", True):
        with pytest.raises(UsageError, match="cap_request_s"):
            RateCap(20.0, request_s=bad)
    from rgwkeeper.config import PurgeSection

    assert PurgeSection().cap_request_s == CAP_REQUEST_S


def test_a_capped_direct_purge_stats_each_request_s_objects_just_before_removing_them(tmp_path):
    """Not a page of 1,000 stats at full width first: reads are spread as the removals are."""
    w = World(extra_plain=60, page_size=1000)
    p, io, cp, _ = make(w, tmp_path, PurgeRequest(w.bucket, method="direct"))
    now, calls = [0.0], []

    async def sleep(s):
        now[0] += s

    data = io.bulk(DATA)
    for name in ("stat_many", "remove_many"):
        def recorded(objs, *, window, _name=name, _op=getattr(data, name)):
            calls.append((_name, len(objs), window, now[0]))
            return _op(objs, window=window)
        setattr(data, name, recorded)
    settings = Settings(rgw_retry_s=5.0, checkpoint_interval_s=0.0, max_objects_per_second=40.0)
    report = run(p, io, cp, settings=settings, clock=lambda: now[0], sleep=sleep)
    assert report.ok, report.checks
    capped = [c for c in calls if c[0] == "stat_many" and c[3] < 1000]
    stats = [n for name, n, _, _ in calls if name == "stat_many"]
    removes = [n for name, n, _, _ in calls if name == "remove_many"]
    # 40 objects/s x 0.1 s: 4 objects per request, each stat followed by its removal.
    assert capped and max(removes) <= 4 and sum(removes) >= 60
    names = [c[0] for c in calls if c[0] in ("stat_many", "remove_many")]
    delete_phase = names[:2 * len(removes)]
    assert delete_phase == ["stat_many", "remove_many"] * len(removes)
    assert max(stats[:len(removes)]) <= 4


@pytest.mark.parametrize("field, value", [("rgw_retry_s", float("nan")), ("lc_busy_wait_s", float("inf")),
                                          ("checkpoint_interval_s", -1.0), ("pace_write_latency_s", 1e30),
                                          ("lc_poll_s", float("nan")), ("verify_scan_max_objects", float("nan"))])
def test_settings_refuse_numbers_that_are_not_finite_or_in_range(field, value):
    with pytest.raises(UsageError, match=field):
        Settings(**{field: value})


@pytest.mark.parametrize("rate", [float("nan"), float("inf"), -1.0, 1e7, "5", True])
def test_rate_cap_refuses_a_rate_that_is_not_a_finite_number(rate):
    with pytest.raises(UsageError, match="finite number") as exc:
        RateCap(rate)
    assert "\n" not in str(exc.value)


def test_a_cap_does_not_apply_to_radosgw_admin_methods_and_is_not_reported(tmp_path):
    w = World(extra_plain=5)
    p, io, cp, _ = make(w, tmp_path, PurgeRequest(w.bucket, method="admin-purge"))
    with capture_logs() as logs:
        report = run(p, io, cp, settings=Settings(rgw_retry_s=5.0, max_objects_per_second=8.0))
    assert report.ok, report.checks
    assert report.pacing["max_objects_per_second"] is None
    assert any(e["event"].startswith("purge rate cap does not apply") and e["method"] == "admin-purge"
               for e in logs)


def test_the_caps_wait_is_not_busy_time_for_pacing_and_a_cancelled_wait_frees_its_slot(tmp_path):
    now = [0.0]
    limiter = Limiter(lambda: 1, share=lambda: 0.25, clock=lambda: now[0])

    async def scenario():
        started = await limiter.acquire()
        now[0] = 1.0  # waited a second for the cap while holding the slot
        limiter.restart(started)
        now[0] = 1.5  # the request itself took 0.5 s
        await limiter.release()
        # Busy 25% of the time: 0.5 s busy, then 1.5 s of pause (not 4.5 s after 1.5 s "busy").
        assert limiter.not_before == pytest.approx(3.0)

    asyncio.run(scenario())

    w = World(extra_plain=3)
    p, io, cp, _ = make(w, tmp_path, PurgeRequest(w.bucket, method="s3"))
    forever = asyncio.Event()

    async def sleep(s):
        await forever.wait()

    ex = PurgeExecutor(p, io, checkpoint=cp, settings=Settings(max_objects_per_second=1.0), sleep=sleep)

    async def cancelled():
        slots = Limiter(lambda: 1)
        await ex.cap.take(1)  # the first slot goes at once; the next waits a second
        task = asyncio.create_task(ex.s3_deleter.start([{"Key": "plain/0"}], slots))
        await asyncio.sleep(0.01)
        assert not task.done() and slots.in_flight == 1
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert slots.in_flight == 0  # released: the next batch can go
        await asyncio.wait_for(slots.acquire(), 1)

    asyncio.run(cancelled())


@pytest.mark.parametrize("method", ["s3", "direct"])
def test_a_capped_purge_deletes_no_faster_than_its_cap(tmp_path, method):
    w = World(extra_plain=40, page_size=10)
    p, io, cp, bulks = make(w, tmp_path, PurgeRequest(w.bucket, method=method))
    now, slept = [0.0], []

    async def sleep(s):  # the cap's waits move the injected clock; nothing else does
        slept.append(s)
        now[0] += s

    data, sizes = io.bulk(DATA), []
    remove_many = data.remove_many

    async def recorded(objs, *, window):
        sizes.append(len(objs))
        return await remove_many(objs, window=window)

    data.remove_many = recorded  # type: ignore[method-assign]
    settings = Settings(rgw_retry_s=5.0, checkpoint_interval_s=0.0, max_objects_per_second=8.0)
    report = run(p, io, cp, settings=settings, clock=lambda: now[0], sleep=sleep)
    assert report.ok, report.checks
    assert report.pacing["max_objects_per_second"] == 8.0
    batches = [line for line in w.log if line.startswith("S3 DeleteObjects")]
    assert (batches or method == "direct") and all(line.count("'") // 2 <= 8 for line in batches)
    deleted = report.counters["objects_deleted"] + report.counters.get("delete_markers_deleted", 0)
    assert deleted > 40
    if method == "direct":
        removals = [line for line in w.log if line.startswith(f"rados rm {DATA}/")]
        assert len(removals) >= 40 and max(sizes) <= 8  # head-only objects through RADOS, in capped chunks
    # Every object but the first request's took its slot: at most 8 a second on the clock.
    assert sum(slept) >= (deleted - 8) / 8 - 1e-9


@pytest.mark.parametrize("cap, pages_at_once", [(8.0, 1), (0.0, 3)])
def test_a_capped_purge_works_one_page_at_a_time_so_its_listings_do_not_bunch(tmp_path, monkeypatch, cap,
                                                                               pages_at_once):
    """Three pages worked side by side under a cap ended together, and their three next listings
    went out at once: the bursts ingest noticed (docs/purge.md, "Listings in bursts")."""
    w = World(extra_plain=60, page_size=10)
    p, io, cp, _ = make(w, tmp_path, PurgeRequest(w.bucket, method="direct"))
    now, active, peak = [0.0], [0], [0]

    async def sleep(s):
        now[0] += s

    remove = HeadDeleter.remove

    async def tracked(self, entries, *, sweep):
        active[0] += 1
        peak[0] = max(peak[0], active[0])
        try:
            # A real removal takes a while: the next pages are listed meanwhile (asyncio.sleep is
            # made instant for these tests; a timer is not).
            later = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().call_later(0.02, later.set_result, None)
            await later
            return await remove(self, entries, sweep=sweep)
        finally:
            active[0] -= 1

    monkeypatch.setattr(HeadDeleter, "remove", tracked)
    settings = Settings(rgw_retry_s=5.0, checkpoint_interval_s=0.0, max_objects_per_second=cap)
    report = run(p, io, cp, settings=settings, clock=lambda: now[0], sleep=sleep)
    assert report.ok, report.checks
    assert report.counters["direct_removed"] >= 60 and peak[0] == pages_at_once


@pytest.mark.parametrize("request_kw,page", [({}, 40), ({"older_than_s": 1.0}, 1000)])
def test_a_capped_purge_lists_pages_of_a_few_seconds_so_its_checkpoint_moves(tmp_path, request_kw, page):
    w = World(extra_plain=40, page_size=1000)
    p, io, cp, _ = make(w, tmp_path, PurgeRequest(w.bucket, prefix="plain/", method="s3", **request_kw))
    now, sizes = [0.0], []

    async def sleep(s):
        now[0] += s

    iter_pages = io.s3.iter_pages

    def recorded(*a, **kw):
        if "page_size" in kw:  # the delete step's listing (the end-state check uses the default)
            sizes.append(kw["page_size"])
        return iter_pages(*a, **kw)

    io.s3.iter_pages = recorded  # type: ignore[method-assign]
    report = run(p, io, cp, settings=Settings(rgw_retry_s=5.0, checkpoint_interval_s=0.0, max_objects_per_second=8.0),
                 clock=lambda: now[0], sleep=sleep)
    assert report.ok, report.checks
    # 8 objects/s: pages of 40 keys (5 s of deletes), not 1000; with a filter (few keys may
    # match) the listing keeps its pages, or small pages would multiply it.
    assert sizes and set(sizes) == {page}


def _reef_lc():
    return json.loads((Path(__file__).parents[1] / "fixtures/reef/lc.json").read_text())


def test_a_single_bucket_lc_run_is_read_back_from_its_status_not_its_start_stamp():
    """Reef 18.2.7 (captured): lc process --bucket left `started` at 1970 and the entry COMPLETE."""
    fx = _reef_lc()
    before, after = fx["lc_list_before_run"][0], fx["lc_list_after_bucket_run"][0]
    assert lcrun.started_s(after) == 0.0 and fx["objects_left_after_run"] == []
    t0 = 1_795_000_000.0
    assert lcrun.ran_since(before, after, t0) == (True, "")
    held = {**before, "status": "PROCESSING", "started": "Mon, 23 Nov 2026 11:00:00 GMT"}
    ran, why = lcrun.ran_since(held, after, t0)  # it finished, but another worker's run, begun before ours
    assert not ran and "PROCESSING since Mon, 23 Nov 2026" in why
    assert not lcrun.ran_since(before, {**after, "status": "PROCESSING"}, t0)[0]
    assert not lcrun.ran_since(before, {**after, "status": "UNINITIAL"}, t0)[0]  # a new LC day reset the shard
    stamped = {**after, "status": "UNINITIAL", "started": email.utils.formatdate(t0 + 1, usegmt=True)}
    assert lcrun.ran_since(held, stamped, t0) == (True, "")  # RGW's own worker ran all shards since
    with pytest.raises(CephError, match="lifecycle run failed"):
        lcrun.ran_since(before, {**after, "status": "FAILED"}, t0)
    assert lcrun.ran_since(None, None, t0) == (True, "")
    # A PROCESSING entry RGW takes for a dead run (never stamped, or stamped over two days ago)
    # does not hold the bucket: process_bucket clears it and runs (RGWLC::expired_session).
    for stale in ("Thu, 01 Jan 1970 00:00:00 GMT", email.utils.formatdate(t0 - 3 * 86400, usegmt=True)):
        assert lcrun.ran_since({**before, "status": "PROCESSING", "started": stale}, after, t0) == (True, "")
    recent = {**before, "status": "PROCESSING", "started": email.utils.formatdate(t0 - 3600, usegmt=True)}
    assert lcrun.held_by_another(recent, t0) and not lcrun.ran_since(recent, after, t0)[0]


# -- a lifecycle purge never leaves its rule behind ------------------------------------------------

KEEP_A_WEEK = {"ID": "keep-a-week", "Status": "Enabled", "Filter": {"Prefix": ""},
               "NoncurrentVersionExpiration": {"NoncurrentDays": 7}}
EXTRA_KEYS = {f"extra/{i:05d}" for i in range(3)}


def _lifecycle_purge(tmp_path, previous=(KEEP_A_WEEK,)):
    w = World(extra_plain=3).as_release("reef", "18.2.4")
    w.lifecycle = [dict(r) for r in previous]
    p, io, cp, _ = make(w, tmp_path, PurgeRequest("capture-mixed", prefix="extra/", method="lifecycle"))
    assert [s.kind for s in p.steps][1:4] == ["lifecycle_apply", "lc_process", "lifecycle_restore"]
    return w, p, io, cp


def _finishes_on_rerun(w, p, io, cp, previous=(KEEP_A_WEEK,)):
    state = cp.load()
    report = run(p, io, cp, state=state)
    assert report.ok, report.checks
    assert not EXTRA_KEYS & set(w.index) and [r["ID"] for r in w.lifecycle] == [r["ID"] for r in previous]


@pytest.mark.parametrize("where, fault, raised, step_after", [
    # The read-back after putting the rule on fails (the rule is on).
    ("apply read-back", {"get_lifecycle": [None, CephError("GetBucketLifecycleConfiguration capture-mixed",
                                                             "InternalError")]}, CephError, 1),
    # lc process times out (its runner killed it) or is interrupted.
    ("lc process timeout", CephTimeout("radosgw-admin lc process", "no answer within 21600 s (killed)"),
     CephTimeout, 1),
    ("lc process Ctrl-C", KeyboardInterrupt(), KeyboardInterrupt, 1),
    # Taking the rule off: its read-back fails once; the second attempt puts the rules back.
    ("restore read-back", {"get_lifecycle": [None, None, CephError("GetBucketLifecycleConfiguration "
                                                                   "capture-mixed", "InternalError")]}, CephError, 4),
])
@pytest.mark.parametrize("previous", [(KEEP_A_WEEK,), ()])
def test_a_failed_lifecycle_purge_puts_the_previous_rules_back(tmp_path, where, fault, raised, step_after, previous):
    w, p, io, cp = _lifecycle_purge(tmp_path, previous)
    if isinstance(fault, dict):
        w.s3_faults = {k: list(v) for k, v in fault.items()}  # the parameters are shared between cases
    else:
        w.lc_fault = fault
    with capture_logs() as logs, pytest.raises(raised):
        run(p, io, cp)
    assert w.lifecycle == [dict(r) for r in previous] if previous else w.lifecycle == []
    assert any(e["event"].startswith("purge stopped; the lifecycle rules bucket capture-mixed had before were put "
                                      "back") for e in logs)
    # The checkpoint goes back to putting the rule on (or past taking it off): a re-run finishes.
    assert cp.load().step == step_after
    _finishes_on_rerun(w, p, io, cp, previous)


def test_a_cancelled_lifecycle_purge_puts_the_previous_rules_back(tmp_path):
    # SIGTERM and Ctrl-C reach the purge as a cancellation of its task (cli.purge._run_async).
    w, p, io, cp = _lifecycle_purge(tmp_path)

    async def cancel_during_lc_process():
        w.lc_block = asyncio.Event()
        task = asyncio.create_task(PurgeExecutor(p, io, checkpoint=cp, state=State(plan=p.to_dict()),
                                                 settings=FAST).run())
        while not any("lc process" in line for line in w.log):
            await asyncio.sleep(0)
        assert any(r["ID"].startswith("rgwkeeper-purge-") for r in w.lifecycle)  # the rule is on
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_during_lc_process())
    assert w.lifecycle == [KEEP_A_WEEK] and EXTRA_KEYS <= set(w.index)
    assert cp.load().status == "running" and cp.load().step == 1
    w.lc_block = None
    _finishes_on_rerun(w, p, io, cp)


@pytest.mark.parametrize("previous, command", [
    ((KEEP_A_WEEK,), "aws s3api put-bucket-lifecycle-configuration --bucket capture-mixed --lifecycle-configuration "
                     "'{\"Rules\": [{\"Filter\": {\"Prefix\": \"\"}, \"ID\": \"keep-a-week\", "
                     "\"NoncurrentVersionExpiration\": {\"NoncurrentDays\": 7}, \"Status\": \"Enabled\"}]}'"),
    ((), "aws s3api delete-bucket-lifecycle --bucket capture-mixed"),
])
def test_rules_that_could_not_be_put_back_are_named_and_the_checkpoint_finishes_the_job(tmp_path, previous, command):
    w, p, io, cp = _lifecycle_purge(tmp_path, previous)
    w.lc_fault = CephTimeout("radosgw-admin lc process", "no answer within 21600 s (killed)")
    refused = CephError("PutBucketLifecycleConfiguration capture-mixed", "AccessDenied")
    w.s3_faults = {"put_lifecycle": [None, refused], "delete_lifecycle": [refused]}
    with capture_logs() as logs, pytest.raises(CephTimeout):
        run(p, io, cp)
    assert any(r["ID"].startswith("rgwkeeper-purge-") for r in w.lifecycle)  # still on: RGW refused
    (line,) = [e for e in logs if e["log_level"] == "error"]
    assert line["event"].endswith(f"run this same purge again (it finishes and puts them back), or run: {command}")
    assert "\n" not in line["event"] and "AccessDenied" in line["error"]
    state = cp.load()
    assert state.step == 2 and state.memo["lifecycle_left_on"] == command  # resumes at lc process
    _finishes_on_rerun(w, p, io, cp, previous)


def test_a_purge_by_another_method_has_no_lifecycle_rule_to_undo(tmp_path):
    w = World()
    w.rgw_down_for = 10**6  # every S3 call fails: the purge stops at its first listing
    p, io, cp, _ = make(w, tmp_path, PurgeRequest("capture-mixed", prefix="plain/"))
    with capture_logs() as logs, pytest.raises(CephUnreachable):
        run(p, io, cp, settings=Settings(rgw_retry_s=0.0, checkpoint_interval_s=0.0))
    assert not any("lifecycle" in e["event"] for e in logs) and w.lifecycle == []


OTHER_BUCKETS_GC = {"tag": "tag-elsewhere\u0000", "time": "2026-01-01T00:00:00+0000",
                    "objs": [{"pool": DATA, "oid": "other-marker.9_tail", "key": "", "instance": ""}]}


@pytest.mark.parametrize("release", ["pacific", "tentacle"])
def test_a_direct_purge_that_queued_nothing_leaves_other_buckets_gc_alone(tmp_path, release):
    # gc process --include-all would process this entry of another bucket before it is due.
    w = World().only_head_only_objects()
    if release == "tentacle":
        w.as_release("tentacle", "20.2.4")
    w.pools[DATA]["other-marker.9_tail"] = {"size": 4, "locator": "", "refs": 0}
    w.gc = [dict(OTHER_BUCKETS_GC)]
    p, io, cp, _ = make(w, tmp_path)
    assert p.method == "direct"
    assert "GC lists entries holding objects of the bucket" in p.step(DropBucket).summary  # when GC runs
    assert any("rgw_gc.rgw_gc_queue_list_entries" in c for c in p.step(DropBucket).calls)  # how it looks
    report = run(p, io, cp)
    assert report.ok, report.checks
    assert not [line for line in w.log if line.startswith("radosgw-admin gc")]
    assert w.log.count("librados gc list") == 2  # the drop's look, the read-back's
    assert w.gc == [OTHER_BUCKETS_GC] and "other-marker.9_tail" in w.pools[DATA]
    assert report.counters["gc_not_run"] == 1 and not w.rados_left(DATA)


def test_a_direct_purge_runs_gc_when_gc_already_holds_objects_of_the_bucket(tmp_path):
    w = World().only_head_only_objects()
    old_tail = f"{w.marker}__shadow_.overwritten_1"  # an object overwritten before the purge
    w.pools[DATA][old_tail] = {"size": 4, "locator": "", "refs": 0}
    w.gc = [{"tag": "tag-old\u0000", "time": "2026-01-01T00:00:00+0000",
             "objs": [{"pool": DATA, "oid": old_tail, "key": "", "instance": ""}]}]
    p, io, cp, _ = make(w, tmp_path)
    report = run(p, io, cp)
    assert report.ok, report.checks
    assert [line for line in w.log if line.startswith(("radosgw-admin gc", "librados gc"))] == [
        "librados gc list", "radosgw-admin gc process --include-all", "librados gc list"]
    assert w.gc == [] and old_tail not in w.pools[DATA] and "gc_not_run" not in report.counters


def test_a_direct_purge_that_sent_objects_through_s3_runs_gc_without_looking_first(tmp_path):
    w = World()
    w.manifests_readable = False  # objects with tails go through S3
    p, io, cp, _ = make(w, tmp_path)
    report = run(p, io, cp)
    assert report.ok and report.counters["via_s3"] == 2
    assert [line for line in w.log if line.startswith(("radosgw-admin gc", "librados gc"))] == [
        "radosgw-admin gc process --include-all", "librados gc list"]


@pytest.mark.parametrize("why", ["read fails", "more GC objects than configured", "no zone=read cap"])
def test_gc_is_listed_with_radosgw_admin_when_librados_cannot_read_it_and_the_bucket_s_entries_still_count(
        tmp_path, why):
    """The librados read of GC (profile.gc_entries) gives way to `radosgw-admin gc list`, the
    reference, whenever it cannot answer for all of GC: an OSD error, RGW keeping more GC objects
    than the mon's config says (gc.<n> exists), or a plan made without the zone's GC pool... which
    the zone read through radosgw-admin still gives. The bucket's old entry is found either way."""
    w = World().only_head_only_objects()
    old_tail = f"{w.marker}__shadow_.overwritten_1"
    w.pools[DATA][old_tail] = {"size": 4, "locator": "", "refs": 0}
    w.gc = [{"tag": "tag-old\u0000", "time": "2026-01-01T00:00:00+0000",
             "objs": [{"pool": DATA, "oid": old_tail, "key": "", "instance": ""}]}]
    if why == "read fails":
        w.gc_read_fault = CephError("default.rgw.log:gc/gc.7 rgw_gc.rgw_gc_queue_list_entries", "EIO")
    elif why == "more GC objects than configured":
        w.gc_objects_in_config = 16
    else:
        w.zone_caps = False
    p, io, cp, _ = make(w, tmp_path)
    report = run(p, io, cp)
    assert report.ok, report.checks
    gc_calls = [line for line in w.log if line.startswith(("radosgw-admin gc", "librados gc"))]
    if why == "no zone=read cap":  # the zone came from radosgw-admin, GC pool included
        assert p.profile.gc_pool == "default.rgw.log:gc" and "radosgw-admin zone get" in w.log
        assert gc_calls == ["librados gc list", "radosgw-admin gc process --include-all", "librados gc list"]
    else:
        assert gc_calls == ["radosgw-admin gc list --include-all", "radosgw-admin gc process --include-all",
                            "radosgw-admin gc list --include-all"]
    assert w.gc == [] and old_tail not in w.pools[DATA]


def _read_back(w, tmp_path, *, setup=lambda w: None):
    """Run a purge; return (report, the radosgw-admin calls of its read-back, how many of them
    ran at once at most, the world's log lines of the read-back)."""
    p, io, cp, _ = make(w, tmp_path)
    real = io.rgw._runner
    state = {"now": 0, "most": 0, "verifying": False, "calls": [], "from": 0}

    async def overlapping(argv, timeout):
        state["now"] += 1
        if state["verifying"]:
            state["most"] = max(state["most"], state["now"])
            state["calls"].append(" ".join(a for a in argv[5:] if a != "--format=json"))
        try:
            for _ in range(3):  # a process takes a while: let the others start meanwhile
                await asyncio.sleep(0)
            return await real(argv, timeout)
        finally:
            state["now"] -= 1

    io.rgw._runner = overlapping
    executor = PurgeExecutor(p, io, checkpoint=cp, state=State(plan=p.to_dict()), settings=FAST)
    check = executor.verifier.check

    async def marked(step, **kw):
        state["verifying"], state["from"] = True, len(w.log)
        setup(w)
        return await check(step, **kw)

    executor.verifier.check = marked
    report = asyncio.run(executor.run())
    return report, sorted(state["calls"]), state["most"], w.log[state["from"]:]


def test_the_read_back_reads_through_the_admin_api_runs_two_processes_at_once_and_reports_in_a_fixed_order(
        tmp_path):
    report, calls, most, log = _read_back(World(), tmp_path)
    assert report.ok, report.checks
    # No process: GC is read with librados, the rest through the admin API. When the owner's
    # stats were synced comes from what the drop's sync printed.
    assert calls == [] and most == 0
    assert "librados gc list" in log
    assert "admin API bucket list --uid" in log and "radosgw-admin bucket stats" not in " ".join(log)
    assert [c.name for c in report.checks] == [
        "bucket gone", "bucket instance gone", "index shards gone", f"no RADOS objects left in {DATA}",
        f"no RADOS objects left in {EXTRA}", "GC processed", "owner unlinked", "owner stats synced"]


@pytest.mark.parametrize("fault", ["down", "busy", "s3", "metadata_caps"])
def test_the_read_back_reads_with_radosgw_admin_whenever_the_admin_api_gives_no_clear_answer(tmp_path, fault):
    """RGW restarting (down) or shedding load (503 SlowDown), the admin API's path taken for S3 (a 404
    NoSuchBucket for every read, which must not pass for "the instance is gone"), no metadata=read."""
    def setup(w):
        if fault == "metadata_caps":
            w.metadata_caps = False
        else:
            w.admin_api_fault = fault

    report, calls, _, _ = _read_back(World(), tmp_path, setup=setup)
    assert report.ok, report.checks
    owner, bucket = World().owner, World().bucket
    fallen_back = {f"metadata get bucket.instance:{bucket}:{World().bucket_id}"}
    if fault in ("down", "busy"):
        fallen_back |= {f"bucket stats --bucket {bucket}", f"bucket list --uid {owner}"}
    if fault == "s3":  # NoSuchBucket is the bucket's own "gone" (HeadBucket checks it); the others fall back
        fallen_back |= {f"bucket list --uid {owner}"}
    assert set(calls) == fallen_back


def test_direct_purge_on_tentacle_empties_the_index_and_has_rgw_delete_the_bucket(tmp_path):
    # On 20.2.4 `metadata rm bucket.instance:...` exits 0 and removes nothing (the fake does the same).
    w = World().as_release("tentacle", "20.2.4")
    shared = list(w.tails["big"])
    p, io, cp, bulks = make(w, tmp_path)
    assert p.method == "direct"
    report = run(p, io, cp)
    assert report.ok, report.checks
    assert not w.exists and w.instance is None and w.bucket not in w.user_buckets
    assert w.pools[INDEX] == {} and w.rados_left(DATA) == sorted(shared)
    emptied = [line for line in w.log if line.startswith("rados empty index")]
    assert len(emptied) == 11 and w.log.index("S3 DeleteBucket") > w.log.index(emptied[-1])
    assert not any(line.startswith(f"rados rm {INDEX}/") for line in w.log)  # RGW removes the shards
    assert {c.name: c.status for c in report.checks}["bucket instance gone"] == "ok"


def test_a_tentacle_purge_stopped_after_the_index_was_emptied_resumes_to_a_deleted_bucket(tmp_path):
    w = World(extra_plain=3).as_release("tentacle", "20.2.4")
    p, io, cp, _ = make(w, tmp_path)
    real = io.s3.delete_bucket

    def stop_once(bucket):
        io.s3.delete_bucket = real
        raise KeyboardInterrupt  # killed between emptying the index and DeleteBucket

    io.s3.delete_bucket = stop_once
    with pytest.raises(KeyboardInterrupt):
        run(p, io, cp)
    saved = cp.load()
    assert saved.plan["steps"][saved.step]["kind"] == "drop_bucket" and w.exists and not w.index
    report = run(p, io, cp, state=saved)
    assert report.ok, report.checks
    assert not w.exists and w.instance is None and w.pools[INDEX] == {}


def test_a_tentacle_index_shard_missing_from_where_the_plan_expects_it_is_never_emptied(tmp_path):
    w = World().as_release("tentacle", "20.2.4")
    p, io, cp, _ = make(w, tmp_path)
    del w.pools[INDEX][f".dir.{w.bucket_id}.7"]  # e.g. resharded since the plan: the shards have other names
    with pytest.raises(PurgeFailed, match="1 of 11 index shards are not where the plan expects them"):
        run(p, io, cp)
    assert not any(line.startswith("rados empty index") for line in w.log)
    assert w.exists and w.instance is not None and f".dir.{w.bucket_id}.7" not in w.pools[INDEX]


@pytest.mark.parametrize("release, stats_name_it", [("reef", False), ("tentacle", True), ("tentacle", False)])
def test_a_bucket_resharded_in_place_is_dropped_by_its_current_generations_shards(tmp_path, release, stats_name_it):
    # Reef and later reshard in place: .dir.<id>.<gen>.<n>. Before, the drop removed (or, on
    # Tentacle, looked for) .dir.<id>.<n> and the read-back checked those same names.
    w = World().as_release(release, {"reef": "18.2.7", "tentacle": "20.2.4"}[release])
    w.resharded_in_place(3, stats_name_it=stats_name_it)
    p, io, cp, _ = make(w, tmp_path)
    assert p.method == "direct" and p.profile.index_gen == 3
    report = run(p, io, cp)
    assert report.ok, report.checks
    assert w.pools[INDEX] == {}
    checks = {c.name: c for c in report.checks}
    assert checks["index shards gone"].status == "ok"
    assert any(f".dir.{w.bucket_id}.3.0 .. .dir.{w.bucket_id}.3.10" in c for s in p.steps for c in s.calls)


def test_shards_under_two_generations_and_stats_that_do_not_say_which_refuse_the_direct_method(tmp_path):
    w = World().as_release("reef", "18.2.7").resharded_in_place(2, keep_old=True)
    p, io, cp, _ = make(w, tmp_path)
    assert p.profile.index_gen is None
    assert p.method == "s3"
    assert any(m == "direct" and "index generation" in why for m, why in p.rejected), p.rejected
    report = run(p, io, cp)
    assert report.ok, report.checks
    assert {c.name: c.status for c in report.checks}["index shards gone"] == "warning"


@pytest.mark.parametrize("release", [("pacific", "16.2.15"), ("tentacle", "20.2.4")])
def test_the_drop_reads_its_count_check_through_the_admin_api_not_a_radosgw_admin_process(tmp_path, release):
    # A radosgw-admin process costs 0.3-0.9 s on the test cluster, a sixth to a third of a
    # 3,000-object direct purge; the admin API answers the same stats in one request.
    w = World().as_release(*release)
    p, io, cp, _ = make(w, tmp_path)
    w.log.clear()
    report = run(p, io, cp)
    assert report.ok, report.checks
    removed = max(i for i, line in enumerate(w.log) if line.startswith(f"rados rm {DATA}/"))
    drop = w.log[removed:w.log.index("admin API user stats sync")]
    assert "admin API bucket stats" in drop
    assert not any(line.startswith("radosgw-admin bucket stats") for line in drop), drop


def test_the_report_counts_this_runs_s3_requests_per_endpoint(tmp_path, capsys):
    from rgwkeeper.cli.purge import _report

    w = World()
    p, io, cp, _ = make(w, tmp_path, PurgeRequest("capture-mixed", method="s3"))
    list(io.s3.iter_pages(w.bucket))  # a request before the run: not the run's
    before = io.s3.endpoints.counts()["http://rgw:8080"][0]
    report = run(p, io, cp)
    after = io.s3.endpoints.counts()["http://rgw:8080"][0]
    assert before > 0
    [one] = report.rgw_endpoints
    assert one["endpoint"] == "http://rgw:8080" and one["requests"] == after - before > 0
    assert one["failures"] == 0 and one["per_s"] > 0
    assert json.loads(json.dumps(report.to_dict()))["rgw_endpoints"] == [one]
    _report(report, False, p)
    assert "RGW endpoints" not in capsys.readouterr().out  # one endpoint: nothing to compare
    report.rgw_endpoints = [{**one, "endpoint": "http://a:1", "failures": 3},
                            {**one, "endpoint": "http://b:1", "requests": 7, "per_s": 1.5}]
    _report(report, False, p)
    line = next(x for x in capsys.readouterr().out.splitlines() if "RGW endpoints" in x)
    assert "http://a:1" in line and "3 could not connect" in line and "http://b:1 7 requests (1.5/s)" in line


@pytest.mark.parametrize("release", [("pacific", "16.2.15"), ("reef", "18.2.7"), ("tentacle", "20.2.4")])
@pytest.mark.parametrize("method", ["direct", "s3", "admin-purge"])
def test_the_owners_stats_are_synced_through_the_admin_api_and_the_read_back_takes_them_from_its_answer(
        tmp_path, release, method):
    # One request, not a radosgw-admin process beside the drop's GC check (docs/purge.md, "The owner's stats").
    w = World().as_release(*release)
    p, io, cp, _ = make(w, tmp_path, PurgeRequest(w.bucket, method=method))
    assert p.method == method
    w.log.clear()
    report = run(p, io, cp)
    assert report.ok, report.checks
    assert w.log.count("admin API user stats sync") == 1
    assert not any(line.startswith(f"radosgw-admin user stats --uid {w.owner}") for line in w.log)
    check = {c.name: c for c in report.checks}["owner stats synced"]
    assert check.status == "ok" and check.detail.endswith("synced through the admin API after the bucket was deleted")


@pytest.mark.parametrize("fault", ["down", "busy", "s3", "nouser", "timeout"])
@pytest.mark.parametrize("release", [("pacific", "16.2.15"), ("reef", "18.2.7"), ("tentacle", "20.2.4")])
@pytest.mark.parametrize("method", ["direct", "s3", "admin-purge"])
def test_the_read_back_takes_the_owners_stats_from_what_the_drops_sync_printed(tmp_path, release, method, fault):
    # Where the admin API gives no clear answer, radosgw-admin syncs them, and what it printed is read.
    w = World().as_release(*release)
    p, io, cp, _ = make(w, tmp_path, PurgeRequest(w.bucket, method=method))
    assert p.method == method
    w.log.clear()
    w.sync_api_fault = fault  # "nouser": radosgw-admin is the reference for a user the API says is gone
    report = run(p, io, cp)
    assert report.ok, report.checks
    assert any(r.startswith(f"GET /admin/user?uid={w.owner}&stats=True&sync=True") for r in w.admin_api_reads)
    assert "admin API user stats sync" not in w.log
    synced = w.log.index(f"radosgw-admin user stats --uid {w.owner} --sync-stats")
    assert f"radosgw-admin user stats --uid {w.owner}" not in w.log[synced:]
    check = {c.name: c for c in report.checks}["owner stats synced"]
    assert check.status == "ok" and f"synced {w.user_synced_at}" in check.detail
    assert check.detail.endswith("(as the drop's user stats --sync-stats printed them)")


def _owner_removed_with_bucket(release: str, version: str) -> World:
    """A world whose owner is removed as soon as the bucket is gone, answering as ``release``
    does for a user that does not exist (captured)."""
    w = World().as_release(release, version)
    w.fx["user_missing"] = json.loads((FIXTURES.parent / release / "purge.json").read_text())["user_missing"]
    w.owner_removed_with_bucket = True
    return w


@pytest.mark.parametrize("api", [None, "down"], ids=["admin-api", "api-down"])
@pytest.mark.parametrize("release", [("pacific", "16.2.15"), ("reef", "18.2.7"), ("tentacle", "20.2.4")],
                         ids=["pacific", "reef", "tentacle"])
@pytest.mark.parametrize("method", ["direct", "s3", "admin-purge"])
def test_an_owner_removed_once_the_bucket_is_gone_is_a_warning_not_a_failed_purge(tmp_path, release, method, api):
    # A user who owns a bucket cannot be removed; once the purge deleted it, the owner can be,
    # before the sync. The purge failed then, after the bucket was gone, and every resume too.
    w = _owner_removed_with_bucket(*release)
    p, io, cp, _ = make(w, tmp_path, PurgeRequest(w.bucket, method=method))
    w.sync_api_fault = api  # "down": radosgw-admin alone says the user does not exist
    w.log.clear()
    with capture_logs() as logs:
        report = run(p, io, cp)
    assert report.ok, report.checks
    assert not w.exists
    # radosgw-admin's `bucket list --uid` is the reference, read before any sync: Pacific's
    # sync of a missing user exits 0 and records stats for it (captured).
    assert f"radosgw-admin bucket list --uid {w.owner}" in w.log
    assert f"radosgw-admin user stats --uid {w.owner} --sync-stats" not in w.log and not w.missing_owner_synced
    assert any(e["event"] == "purge owner gone" for e in logs)
    checks = {c.name: c for c in report.checks}
    assert checks["owner stats synced"].status == "warning"
    assert checks["owner stats synced"].detail == f"the owner {w.owner} does not exist: no stats to sync"
    assert checks["owner unlinked"].status == "ok" and "does not exist" in checks["owner unlinked"].detail
    assert json.loads(cp.path.read_text())["status"] == "done"


@pytest.mark.parametrize("release", [("pacific", "16.2.15"), ("reef", "18.2.7"), ("tentacle", "20.2.4")],
                         ids=["pacific", "reef", "tentacle"])
def test_a_purge_resumed_at_its_read_back_after_its_owner_was_removed_finishes(tmp_path, release):
    w = _owner_removed_with_bucket(*release)
    w.owner_removed_with_bucket = False
    p, io, cp, _ = make(w, tmp_path)
    assert run(p, io, cp).ok
    w.owner_removed_with_bucket = True  # removed by the operator before the resume
    w.log.clear()
    verify = next(i for i, step in enumerate(p.steps) if step.kind == "verify")
    again = run(p, io, cp, state=State(plan=p.to_dict(), step=verify))
    assert again.ok, again.checks
    assert f"radosgw-admin bucket list --uid {w.owner}" in w.log  # the reference says the user is gone
    assert not any(line.startswith(f"radosgw-admin user stats --uid {w.owner}") for line in w.log)
    checks = {c.name: c for c in again.checks}
    assert checks["owner stats synced"].status == "warning" and "does not exist" in checks["owner stats synced"].detail


def test_a_failed_sync_of_an_owner_that_exists_still_fails_the_purge(tmp_path, monkeypatch):
    w = World()
    p, io, cp, _ = make(w, tmp_path)
    w.sync_api_fault = "nouser"  # the API says so; radosgw-admin, the reference, finds the user
    original = io.rgw.run

    async def run_(*args, **kw):
        if "--sync-stats" in args:
            raise CommandFailed(["radosgw-admin", *args], 5, "ERROR: (5) Input/output error\n")
        return await original(*args, **kw)

    monkeypatch.setattr(io.rgw, "run", run_)
    w.log.clear()
    with capture_logs() as logs, pytest.raises(CommandFailed):
        run(p, io, cp)
    assert f"radosgw-admin bucket list --uid {w.owner}" in w.log  # the owner was found: the sync ran, and failed
    assert not any(e["event"] == "purge owner gone" for e in logs)
    assert not w.exists and json.loads(cp.path.read_text())["status"] == "failed"  # a resume runs the sync again


@pytest.mark.parametrize("printed", ["", "sync done\n", "[]", '{"stats": 1, "last_stats_sync": "x"}',
                                     '{"stats": {"num_objects": 0}}'])
def test_a_sync_that_printed_no_stats_has_the_read_back_read_them(tmp_path, printed):
    w = World()
    w.sync_prints = printed
    w.sync_api_fault = "busy"  # the sync falls back to radosgw-admin
    p, io, cp, _ = make(w, tmp_path)
    w.log.clear()
    report = run(p, io, cp)
    assert report.ok, report.checks
    synced = w.log.index(f"radosgw-admin user stats --uid {w.owner} --sync-stats")
    assert f"radosgw-admin user stats --uid {w.owner}" in w.log[synced:]
    check = {c.name: c for c in report.checks}["owner stats synced"]
    assert check.status == "ok" and "printed them" not in check.detail


def test_a_purge_resumed_at_its_read_back_reads_the_owners_stats(tmp_path):
    w = World()
    p, io, cp, _ = make(w, tmp_path)
    first = run(p, io, cp)
    assert first.ok, first.checks
    w.log.clear()
    verify = next(i for i, step in enumerate(p.steps) if step.kind == "verify")
    again = run(p, io, cp, state=State(plan=p.to_dict(), step=verify))
    assert f"radosgw-admin user stats --uid {w.owner}" in w.log  # nothing synced in this run: read
    assert not any("--sync-stats" in line for line in w.log)
    check = {c.name: c for c in again.checks}["owner stats synced"]
    assert check.status == "ok" and "printed them" not in check.detail


@pytest.mark.parametrize("release", [("pacific", "16.2.15"), ("tentacle", "20.2.4")])
def test_a_capped_drop_whose_gc_check_fails_leaves_the_index_as_it_was_and_a_rerun_finishes(tmp_path, release):
    # Under a cap GC's check runs before the drop's work: its failure stops the purge before any
    # index shard is touched, not after the bucket was dropped.
    w = World().only_head_only_objects().as_release(*release)  # nothing through S3: GC is checked
    p, io, cp, _ = make(w, tmp_path)
    assert p.method == "direct"
    w.gc_read_fault = CephError("default.rgw.log:gc/gc.3 rgw_gc.rgw_gc_queue_list_entries", "EIO")
    w.gc_list_fails = 1  # and radosgw-admin, which the purge then asks, fails as well
    w.log.clear()
    settings = Settings(rgw_retry_s=5.0, checkpoint_interval_s=0.0, max_objects_per_second=1000.0)
    with pytest.raises(CephError, match="failed to list objs"):
        run(p, io, cp, settings=settings)
    assert not any(line.startswith((f"rados rm {INDEX}/.dir.", "rados empty index", "S3 DeleteBucket"))
                   for line in w.log), w.log
    assert w.exists and "admin API user stats sync" not in w.log
    saved = cp.load()
    assert saved.status == "failed" and "failed to list objs" in saved.error
    report = run(p, io, cp, state=saved, settings=settings)
    assert report.ok and not w.exists, report.checks


@pytest.mark.parametrize("release", [("pacific", "16.2.15"), ("tentacle", "20.2.4")])
def test_a_capped_drop_checks_gc_first_then_works_on_one_index_shard_at_a_time(tmp_path, release):
    # The drop's second was a capped purge's worst (docs/purge.md, "What each second held").
    for cap, window in ((1000.0, 1), (0.0, 64)):
        w = World().as_release(*release)
        (tmp_path / str(cap)).mkdir()
        p, io, cp, bulks = make(w, tmp_path / str(cap))
        assert p.method == "direct"
        bulks[INDEX].windows.clear()
        w.log.clear()
        settings = Settings(rgw_retry_s=5.0, checkpoint_interval_s=0.0, max_objects_per_second=cap)
        report = run(p, io, cp, settings=settings)
        assert report.ok, report.checks
        drop, read_back = bulks[INDEX].windows[:-1], bulks[INDEX].windows[-1]
        assert drop and set(drop) == {window} and read_back == 64
        shard_work = next(i for i, line in enumerate(w.log)
                          if line.startswith((f"rados rm {INDEX}/.dir.", "rados empty index")))
        gc = next(i for i, line in enumerate(w.log)
                  if line.startswith(("radosgw-admin gc ", "librados gc list")))  # list, or process
        assert gc < shard_work or not cap
