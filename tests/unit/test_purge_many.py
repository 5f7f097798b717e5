"""Many buckets as one purge job (purge.many): the buckets chosen and refused, the job's items
worked by several workers over a strict fake OSD, a bucket's checkpoint mirrored into its item
and resumed by the worker that takes it over, failures kept for a re-run."""

from __future__ import annotations

import asyncio

import pytest

from rgwkeeper.errors import CephError, InvalidName, UsageError
from rgwkeeper.purge import many
from rgwkeeper.purge.board import Board, LeaseLost
from rgwkeeper.purge.checkpoint import Checkpoint, State
from rgwkeeper.purge.execute import Check, PurgeReport
from rgwkeeper.purge.plan import PurgeRequest
from tests.unit.purge_fakes import FakeBoardStore, FakeOsd

FILTERS = many.filters_of(PurgeRequest(bucket="any-bucket", prefix="logs/"))
BUCKETS = ["b-one", "b-three", "b-two"]


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def job(n: int = 2, lease_s: int = 30, buckets: list[str] = BUCKETS):
    clock = Clock()
    osd = FakeOsd(clock)
    jid = many.job_id(FILTERS, many.list_source(buckets))
    boards = [Board(FakeBoardStore(osd, f"client.{i}"), jid, worker=f"host{i}:1", lease_s=lease_s, clock=clock,
                    wall=clock) for i in range(n)]
    assert boards[0].publish(many.spec_for(FILTERS, many.list_source(buckets), buckets, job=jid, lease_s=lease_s,
                                           created=clock()), buckets)
    return clock, osd, boards


def report(bucket: str, ok: bool = True, objects: int = 5) -> PurgeReport:
    return PurgeReport(plan_id=f"plan-{bucket}", bucket=bucket, bucket_id="id", method="direct", request={},
                       resumed=0, counters={"objects_deleted": objects, "bytes_deleted": objects * 10},
                       checks=[Check("bucket gone", "ok" if ok else "failed", "read back")], elapsed_s=1.0,
                       space_free_s=1.0)


def run(coro):
    return asyncio.run(coro)


def call(fn, *args):
    async def now():
        return fn(*args)
    return now()


# -- what the operator typed ----------------------------------------------------------------------

def test_a_list_is_validated_line_by_line_and_one_bad_name_refuses_all():
    assert many.parse_list("b-one\n\n# a comment\nb-two  # trailing\nb-one\n", "f") == ["b-one", "b-two"]
    with pytest.raises(InvalidName, match="f line 2: bucket name 'Bad_Name'"):
        many.parse_list("b-one\nBad_Name\n", "f")
    with pytest.raises(UsageError, match="f names no bucket; nothing was changed"):
        many.parse_list("# only a comment\n\n", "f")


def test_patterns_skip_protected_and_tenant_buckets_and_refuse_an_empty_match():
    chosen, skipped = many.select(["*logs-*"], ["logs-a", "logs-keep", "tenant/logs-x", "other", "logs-a"],
                                  protected=["*-keep"])
    assert chosen == ["logs-a"]
    assert [b for b, _ in skipped] == ["logs-keep", "tenant/logs-x"]
    assert skipped[0][1] == "protected (purge.protected_buckets pattern '*-keep')"
    with pytest.raises(UsageError, match=r"no bucket matches logs-\* that is not skipped \(1 skipped\)"):
        many.select(["logs-*"], ["logs-keep"], protected=["*-keep"])
    for bad in ("", " logs", "a/b", "x" * 64, "a b"):
        with pytest.raises(UsageError, match="is not a bucket name pattern"):
            many.check_patterns([bad])


def test_too_many_buckets_are_refused(monkeypatch):
    monkeypatch.setattr(many, "MAX_BUCKETS", 2)
    with pytest.raises(UsageError, match="3 buckets is more than one job takes"):
        many.parse_list("aaa\nbbb\nccc\n", "f")


def test_the_job_id_is_the_same_for_the_same_command_and_differs_with_any_filter():
    a = many.job_id(FILTERS, many.list_source(["b", "a"]))
    assert a == many.job_id(FILTERS, many.list_source(["a", "b", "a"]))
    assert a != many.job_id({**FILTERS, "prefix": "x"}, many.list_source(["a", "b"]))
    assert a != many.job_id(FILTERS, many.pattern_source(["a", "b"]))
    assert len(a) == 12 and int(a, 16) >= 0
    assert many.request_for(FILTERS, "b-one") == PurgeRequest(bucket="b-one", prefix="logs/")


# -- working the job ------------------------------------------------------------------------------

def test_two_workers_purge_every_bucket_once_and_the_job_reads_done():
    _, osd, (a, b) = job()
    ran: list[tuple[str, str]] = []

    def runner(board):
        async def one(lease):
            ran.append((board.worker, lease.item.shard))
            await asyncio.sleep(0)
            return report(lease.item.shard), False
        return one

    async def both():
        return await asyncio.gather(many.work(a, runner(a), slots=2, call=call),
                                    many.work(b, runner(b), slots=2, call=call))

    ra, rb = run(both())
    assert sorted(s for _, s in ran) == BUCKETS  # each bucket once, whoever took it
    assert ra.ok and rb.ok and ra.done == 3
    snap = a.read()
    assert all(i.state == "done" and i.cursor["result"]["ok"] for i in snap.items)
    assert snap.counters() == {"objects_deleted": 15, "bytes_deleted": 150}
    assert many.view(snap, now=1000.0)["by_state"]["done"] == 3


def test_a_failed_bucket_is_kept_with_its_error_and_not_retried_in_the_run_but_is_in_the_next():
    _, _, (a,) = job(1)
    tries: list[str] = []

    async def flaky(lease):
        tries.append(lease.item.shard)
        if lease.item.shard == "b-two" and tries.count("b-two") == 1:
            raise CephError("radosgw-admin bucket stats", "timed out")
        return report(lease.item.shard, ok=lease.item.shard != "b-three" or tries.count("b-three") > 1), False

    first = run(many.work(a, flaky, slots=1, call=call))
    assert not first.ok and first.done == 1 and sorted(tries) == BUCKETS
    failed = {o.bucket: o for o in first.outcomes if not o.ok}
    assert set(failed) == {"b-two", "b-three"}
    assert "timed out" in failed["b-two"].error and failed["b-three"].checks_failed == ["bucket gone: read back"]
    v = many.view(a.read(), now=1000.0)
    assert v["by_state"] == {"done": 1, "running": 0, "stalled": 0, "waiting": 0, "failed": 2}
    assert {r["bucket"]: r["error"] for r in v["buckets"] if r["error"]}.keys() == {"b-two", "b-three"}
    # Released, not left to run out: the next run takes them at once.
    second = run(many.work(a, flaky, slots=1, call=call))
    assert second.ok and second.done == 3 and sorted(o.bucket for o in second.outcomes) == ["b-three", "b-two"]


def test_a_bucket_that_is_gone_with_no_purge_recorded_is_done():
    _, _, (a,) = job(1, buckets=["b-one"])

    async def gone(lease):
        raise many.Gone(lease.item.shard)

    r = run(many.work(a, gone, slots=1, call=call))
    assert r.ok and r.outcomes[0].method == "none" and "did not exist" in r.outcomes[0].line()
    assert a.read().items[0].cursor == {"result": {"ok": True, "gone": True}}


def test_a_killed_workers_bucket_is_taken_over_after_its_lease_with_its_mirrored_checkpoint(tmp_path):
    clock, osd, (dead, alive) = job(2, buckets=["b-one"])
    lease = dead.take()
    cp = many.MirroredCheckpoint(Checkpoint(tmp_path / "b-one.json"), dead, lease, "planid000001")
    cp.save(State(plan={"big": "plan"}, step=3, cursor={"after": "k42"}, counters={"objects_deleted": 42},
                  memo={"previous_rules": []}))
    cp.flush()
    # SIGKILL: nothing released. Another worker finds the bucket held and waits for the lease.
    seen = []

    async def resume(lease):
        seen.append(dict(lease.item.cursor))
        return report("b-one", objects=58), True

    async def sleep(s):
        clock.t += s
        await asyncio.sleep(0)

    r = run(many.work(alive, resume, slots=1, call=call, sleep=sleep))
    assert r.ok and r.outcomes[0].resumed
    assert seen[0]["plan_id"] == "planid000001"
    assert seen[0]["state"]["step"] == 3 and seen[0]["state"]["cursor"] == {"after": "k42"}
    assert "plan" not in seen[0]["state"]  # the plan is kept once, in plan.<n>
    state = many.mirrored_state(seen[0], _Plan({"p": 1}))
    assert state.step == 3 and state.plan == {"p": 1} and state.memo == {"previous_rules": []}
    item = alive.read().items[0]
    assert item.takes == 2 and item.state == "done"
    # The dead worker's next save (had it lived on) lands nowhere: the lease is the new owner's.
    cp.save(State(plan={}, step=4))  # the write runs on the mirror's thread, and fails there
    with pytest.raises(LeaseLost):
        cp.flush()
    with pytest.raises(LeaseLost):  # and the next save says so before it writes anything
        cp.save(State(plan={}, step=5))
    cp.close()
    assert alive.read().items[0].state == "done"


class _Plan:
    def __init__(self, d):
        self.d = d

    def to_dict(self):
        return self.d


def test_a_damaged_mirrored_state_is_one_line():
    with pytest.raises(UsageError, match="mirrored checkpoint cannot be read"):
        many.mirrored_state({"state": {"step": 1, "nonsense": 2}}, _Plan({}))
    assert many.mirrored_state({"plan_id": "x"}, _Plan({})) is None


def test_a_worker_that_loses_the_bucket_mid_purge_stops_it_and_writes_nothing_more(tmp_path):
    clock, osd, (a, b) = job(2, lease_s=3, buckets=["b-one"])
    stopped = asyncio.Event()

    async def slow(lease):
        try:
            await asyncio.sleep(3600)
        finally:
            stopped.set()

    async def sleep(s):
        clock.t += 10  # every renewal comes after the lease ran out
        await asyncio.sleep(0)

    async def go():
        taken = asyncio.ensure_future(many.work(a, slow, slots=1, call=call, sleep=sleep))
        for _ in range(50):
            await asyncio.sleep(0)
            if stopped.is_set():
                break
        taken.cancel()
        await asyncio.gather(taken, return_exceptions=True)

    run(go())
    assert stopped.is_set()
    assert a.read().items[0].state == "todo"


def test_the_job_join_command_and_the_differences_name_the_filters():
    from rgwkeeper.cli.purge import many_join_command

    assert many_join_command(FILTERS, "0123456789ab") == "rgwkeeper purge --prefix logs/ --join 0123456789ab"
    assert many.filters_differences({**FILTERS, "prefix": None}, FILTERS) == ["prefix: None here, 'logs/' in the job"]


def test_status_text_names_each_open_bucket_its_state_and_error():
    from rgwkeeper.cli.render import render_job

    _, _, (a,) = job(1)

    async def fail_two(lease):
        if lease.item.shard == "b-two":
            raise UsageError("bucket 'b-two' is protected")
        return report(lease.item.shard), False

    run(many.work(a, fail_two, slots=1, call=call))
    lines = render_job(a.job_id, many.view(a.read(), now=1000.0))
    assert lines[0].startswith(f"purge job {a.job_id} of 3 buckets (list:")
    assert "prefix 'logs/'" in lines[0] and "2 done, 0 running, 0 stalled, 1 failed, 0 waiting" in lines[0]
    assert lines[1].startswith("  objects deleted: 10,")
    assert lines[2].startswith("  b-two: failed by host0:1 (taken 1x)") and "is protected" in lines[2]
    assert len(lines) == 3  # done buckets are counted, not listed


def test_a_worker_that_finds_the_job_finished_and_removed_by_another_ends_ok():
    _, _, (a, b) = job(2)

    async def ok(lease):
        return report(lease.item.shard), False

    assert run(many.work(a, ok, slots=2, call=call)).ok
    a.discard()  # run_many removes a finished job
    late = run(many.work(b, ok, slots=2, call=call))  # it used to exit with "no purge ... check the id"
    assert late.ok and late.outcomes == []


def test_a_mirrored_lifecycle_memo_with_a_date_is_written(tmp_path):
    import datetime

    _, _, (a,) = job(1, buckets=["b-one"])
    lease = a.take()
    cp = many.MirroredCheckpoint(Checkpoint(tmp_path / "b-one.json"), a, lease, "planid000001")
    when = datetime.datetime(2026, 11, 27, tzinfo=datetime.timezone.utc)
    cp.save(State(plan={}, step=1, memo={"previous_rules": [{"Expiration": {"Date": when}}]}))
    cp.flush()
    cp.close()
    assert a.read().items[0].cursor["state"]["memo"] == {"previous_rules": [{"Expiration": {"Date": str(when)}}]}


def test_a_slow_mirror_write_does_not_hold_up_the_save_and_later_states_win(tmp_path):
    import threading

    _, osd, (a,) = job(1, buckets=["b-one"])
    lease = a.take()
    cp = many.MirroredCheckpoint(Checkpoint(tmp_path / "b-one.json"), a, lease, "planid000001")
    gate = threading.Event()
    real_set_if = a.store.omap_set_if

    def slow_set_if(*args):
        gate.wait(10)
        return real_set_if(*args)

    a.store.omap_set_if = slow_set_if
    state = State(plan={}, step=1, counters={"objects_deleted": 1})
    cp.save(state)  # returns while the OSD "is slow"
    state.counters["objects_deleted"] = 7  # the executor goes on counting: the write in flight keeps step 1's
    state.step = 2
    cp.save(state)
    assert (tmp_path / "b-one.json").exists()
    gate.set()
    cp.flush()
    cp.close()
    item = a.read().items[0]
    assert item.cursor["state"]["step"] == 2 and item.counters == {"objects_deleted": 7}


def test_a_value_beside_an_item_is_written_only_by_its_owner():
    clock, _, (a, b) = job(2, buckets=["b-one"])
    lease = a.take()
    a.record_value(lease, many.plan_key(0), '{"plan": 1}')
    assert b.value(many.plan_key(0)) == '{"plan": 1}' and b.value("plan.000009") is None
    clock.t += 31  # a's lease ran out on the OSD's clock; b takes the bucket over
    taken = b.take()
    assert taken is not None
    with pytest.raises(LeaseLost):
        a.record_value(lease, many.plan_key(0), '{"plan": "stale"}')
    assert b.value(many.plan_key(0)) == '{"plan": 1}'


def test_a_bucket_held_below_its_cap_by_the_window_says_so_on_its_line():
    from rgwkeeper.purge.many import BucketOutcome

    kept = BucketOutcome("b1", True, plan_id="abc", method="direct", objects_deleted=10, cap_held_back=True)
    assert kept.line() == ("b1: purged (direct, purge abc): 10 objects, below its rate cap with "
                           "purge.cap_ops_in_flight operations in flight")
    assert "rate cap" not in BucketOutcome("b1", True, plan_id="abc", method="direct", objects_deleted=10).line()
