"""A purge's work items in RADOS (purge.board): leases that run out on the OSD's clock, records
only the current owner can write, takeover from the last recorded page, and a direct purge run
as items by several workers and joined by another process, over strict fakes (FakeOsd fails the
way cls_lock and omap_cmp fail)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import time

import pytest

from rgwkeeper import purge as purge_api
from rgwkeeper.errors import CephError, CephTimeout, UsageError
from rgwkeeper.purge.board import RANGE_STRIDE, Board, Item, LeaseLost, NoSuchJob
from rgwkeeper.purge.checkpoint import State
from rgwkeeper.purge.execute import PurgeExecutor, join
from rgwkeeper.purge.plan import DeleteObjects, Plan, PurgeRequest, Tuning, plan
from tests.unit.purge_fakes import FakeBoardStore, FakeOsd, World
from tests.unit.test_purge_execute import FAST, make, no_sleep  # noqa: F401 (autouse: no real waits)

INDEX_LISTING = Tuning(direct_listing="index")
SPEC = {"plan_id": "0123456789ab", "plan": {}, "created": 1000.0, "lease_s": 30}


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def boards(n: int = 2, lease_s: int = 30):
    clock = Clock()
    osd = FakeOsd(clock)
    return clock, osd, [Board(FakeBoardStore(osd, f"client.{i}"), SPEC["plan_id"], worker=f"host{i}:1",
                              lease_s=lease_s, clock=clock, wall=clock) for i in range(n)]


def test_items_are_published_once_and_a_resumed_purge_keeps_them_as_they_stand():
    _, osd, (a, b) = boards()
    assert a.publish(SPEC, [".dir.x.0", ".dir.x.1"])
    lease = a.take()
    lease.item.cursor = {"after": "k9"}
    a.record(lease)
    assert not b.publish(SPEC, [".dir.x.0", ".dir.x.1"])  # kept, not reset
    assert b.read().items[0].cursor == {"after": "k9"}
    with pytest.raises(CephError, match="holds items of 2 other index shards than the plan's 1"):
        b.publish(SPEC, [".dir.x.0"])
    for bad in ("{", json.dumps({"format": 1, "plan_id": "0123456789ab"})):
        osd.omaps["purge.0123456789ab"]["spec"] = bad
        with pytest.raises(UsageError, match="does not hold readable work items"):
            b.read()
    with pytest.raises(NoSuchJob, match="no purge 'aaaaaaaaaaaa'"):
        Board(FakeBoardStore(osd, "client.9"), "aaaaaaaaaaaa", worker="w", lease_s=30).read()


def test_a_join_before_the_purge_published_its_items_is_told_to_run_again_and_one_after_reads_them():
    clock, osd, (a, b) = boards()
    with pytest.raises(NoSuchJob, match=r"^no purge .* has work items .*: if it did, run --join again in a few "
                                        r"seconds$"):
        purge_api.read_to_join(b)
    assert a.publish(SPEC, [".dir.x.0"])
    assert [i.shard for i in purge_api.read_to_join(b).items] == [".dir.x.0"]


def test_an_item_under_a_live_lease_is_not_taken_and_one_whose_lease_ran_out_is_taken_over():
    clock, osd, (a, b) = boards()
    a.publish(SPEC, [".dir.x.0"])
    held = a.take()
    assert held.item.takes == 1 and b.take() is None  # EBUSY: a holds it
    held.item.cursor = {"after": "k5"}
    held.item.counters = {"objects_deleted": 5}
    a.record(held)
    clock.t += 31  # a stopped renewing (killed, or stuck): its lease ran out on the OSD
    taken = b.take()
    assert taken is not None and taken.item.takes == 2 and taken.item.worker == "host1:1"
    assert taken.item.cursor == {"after": "k5"} and taken.item.counters == {"objects_deleted": 5}
    # a, resumed from its stall, may not write: its clock says its lease ran out ...
    with pytest.raises(LeaseLost, match="ran out"):
        a.record(held)
    # ... and had its clock not noticed, the owner compare refuses it and nothing is written.
    held.valid_until = clock.t + 100
    writes = len(osd.writes)
    with pytest.raises(LeaseLost, match="taken over"):
        a.record(held)
    assert len(osd.writes) == writes and b.read().items[0].cursor == {"after": "k5"}
    with pytest.raises(LeaseLost, match="taken over"):
        a.renew(held)  # EBUSY: b holds the lock now


def test_a_renewed_lease_outlives_its_first_term_and_a_done_item_is_never_taken_again():
    clock, _, (a, b) = boards(lease_s=30)
    a.publish(SPEC, [".dir.x.0", ".dir.x.1"])
    lease = a.take()
    for _ in range(5):
        clock.t += 10
        a.renew(lease)
    assert b.take().item.n == 1  # item 0 is still a's after 50 s
    a.finish(lease)
    clock.t += 100  # b's lease on item 1 ran out too: item 1 is taken again, item 0 never
    assert a.take().item.n == 1 and a.take() is None and b.read().items[0].state == "done"


def test_a_lost_reply_to_the_take_leaves_the_item_to_its_lease():
    clock, osd, (a, b) = boards()
    a.publish(SPEC, [".dir.x.0"])
    osd.lose_next_write = True  # the lock lands, its reply does not
    with pytest.raises(CephTimeout):
        a.take()
    assert b.take() is None  # held by a's lost lock until it runs out
    clock.t += 31
    assert b.take() is not None


def test_counters_add_up_over_items_and_status_tells_running_from_stalled():
    clock, _, (a, b) = boards()
    spec = {**SPEC, "plan": {"profile": {"bucket": "logs1", "bucket_id": "id1", "num_objects": 100},
                             "request": {"bucket": "logs1"}}}
    a.publish(spec, [".dir.x.0", ".dir.x.1", ".dir.x.2"])
    one, two = a.take(), b.take()
    one.item.counters = {"objects_deleted": 30}
    a.record(one)
    two.item.counters = {"objects_deleted": 10}
    b.finish(two)
    clock.t += 40  # a's last record is older than the lease
    view = purge_api.items_view(a.read(), now=clock.t)
    assert view["counters"] == {"objects_deleted": 40}
    assert [i["state"] for i in view["items"]] == ["stalled", "done", "waiting"]
    assert view["objects_per_s"] == 1.0 and view["eta_s"] == 60.0  # 40 in 40 s, 60 left
    from rgwkeeper.cli.render import render_items

    text = "\n".join(render_items(SPEC["plan_id"], view))
    assert "1 of 3 work items done, 0 running, 1 stalled, 1 waiting" in text and "40 of 100" in text


# -- a direct purge run as items ------------------------------------------------------------

def _executor(p, io, cp, board, *, state=None, workers=2, **kw):
    return PurgeExecutor(p, io, checkpoint=cp, state=state or State(plan=p.to_dict()), settings=FAST, board=board,
                         workers=workers, sleep=quick, **kw)


async def quick(delay: float) -> None:
    await asyncio.sleep(min(delay, 0.005))  # waits and lease renewals go on, without real seconds


def _board(osd, p, client: str) -> Board:
    return Board(FakeBoardStore(osd, client), p.plan_id, worker=client, lease_s=30, clock=osd.clock)


def test_a_direct_purge_run_as_items_by_two_workers_ends_clean_with_exact_counts(tmp_path):
    w = World(page_size=4, extra_plain=30)
    p, io, cp, _ = make(w, tmp_path, tuning=INDEX_LISTING)
    clock = Clock()
    osd = FakeOsd(clock)
    board = _board(osd, p, "client.a")
    report = asyncio.run(_executor(p, io, cp, board).run())
    assert report.ok, report.checks
    assert not w.exists and report.counters["objects_deleted"] == 36 and "sweeps" not in report.counters
    snap = board.read()
    assert len(snap.items) == len(p.profile.index_shards) and snap.done
    assert sum(i.counters.get("objects_deleted", 0) for i in snap.items) == 36
    assert all(i.takes == 1 for i in snap.items)  # a clean run takes each item once


class Killed(BaseException):
    """What SIGKILL looks like here: the process stops between two calls, releasing nothing."""


def _killed_at(killed, dies, p, io, cp, clock, state) -> Board:
    """Run the purge as client.a over ``killed`` until ``dies(key, values)`` says its next
    compared write is where the process is killed: that write and every later one fail, and
    nothing is released (a killed process unlocks nothing). The board client.a worked on."""
    def write(obj, key, expected, values, real=killed.omap_set_if):
        if dies(key, values):
            killed.omap_set_if = lambda *a, **k: (_ for _ in ()).throw(Killed())
            killed.unlock = lambda *a, **k: None
            raise Killed()
        return real(obj, key, expected, values)

    killed.omap_set_if = write
    board = Board(killed, p.plan_id, worker="client.a", lease_s=30, clock=clock)
    with pytest.raises(Killed):
        asyncio.run(_executor(p, io, cp, board, state=state, workers=1).run())
    return board


def test_a_worker_killed_mid_item_loses_nothing_another_takes_it_over_from_its_last_page(tmp_path):
    w = World(page_size=4, extra_plain=60)
    p, io, cp, _ = make(w, tmp_path, tuning=Tuning(direct_listing="index", list_page_size=2))
    clock = Clock()
    osd = FakeOsd(clock)
    killed = FakeBoardStore(osd, "client.a")
    records: list[dict] = []  # every item a wrote (take, pages), as written

    def second_page(key, values) -> bool:
        if not key.startswith("owner.") or not any(k.startswith("item.") for k in values):
            return False  # the publish, or a take's owner.<n>: not a record
        rec = json.loads(next(iter(values.values())))
        paged = [r for r in records if r["n"] == rec["n"] and r["cursor"].get("after")]
        if rec["n"] >= 2 and paged and rec["cursor"].get("after"):  # an item's second page, past the first items
            return True
        records.append(rec)
        return False

    state = State(plan=p.to_dict())
    board = _killed_at(killed, second_page, p, io, cp, clock, state)
    held = [i for i in board.read().items if i.state != "done" and i.takes]
    assert len(held) == 1 and held[0].cursor  # killed mid-item, after recording pages of it
    stuck = held[0]
    # Another node joins while the lease still holds: it does every other item, and waits for
    # that one; it takes it over once the lease has run out on the OSD's clock.
    joiner = _board(osd, p, "client.b")

    async def join_then_expire():
        task = asyncio.ensure_future(join(p, io, joiner, workers=2, settings=FAST, sleep=quick))
        while not all(i.state == "done" or i.n == stuck.n for i in joiner.read().items):
            assert not task.done(), task.exception()  # the join may not end (or fail) before the takeover
            await asyncio.sleep(0.01)
        assert joiner.read().items[stuck.n].state != "done"
        clock.t += 31
        return await task

    report = asyncio.run(join_then_expire())
    items = joiner.read().items
    assert all(i.state == "done" for i in items) and items[stuck.n].takes == 2
    assert len([x for x in osd.writes if x[0] == "client.a" and x[2].startswith("set item")]) == len(records)
    # The joiner counted what it deleted: everything but the pages a recorded (a's unrecorded
    # last page shows up as heads already gone, counted once, by the joiner).
    by_a = {r["n"]: r["counters"].get("objects_deleted", 0) for r in records}
    assert report.counters["objects_deleted"] == 66 - sum(by_a.values())
    assert report.items_done == report.items == len(items)
    # The purge that owns the items resumes, finds them done, and drops the bucket: the counts
    # agree without a sweep (each page counted once, with its cursor).
    resumed = _executor(Plan.from_dict(state.plan), io, cp, _board(osd, p, "client.a2"), state=state)
    final = asyncio.run(resumed.run())
    assert final.ok, final.checks
    assert final.counters["objects_deleted"] == 66 and "sweeps" not in final.counters and not w.exists


def test_a_join_with_another_command_line_or_under_a_rate_cap_is_refused_naming_why(tmp_path):
    w = World(extra_plain=5)
    p, io, cp, _ = make(w, tmp_path, tuning=INDEX_LISTING)
    osd = FakeOsd(Clock())
    board = _board(osd, p, "client.a")
    board.publish({"plan_id": p.plan_id, "plan": p.to_dict(), "created": 0, "lease_s": 30}, list(p.profile.index_shards))
    from rgwkeeper.config import parse

    cfg = parse({}).purge
    with pytest.raises(UsageError, match=r"prefix: 'logs/' here, None in the purge"):
        asyncio.run(purge_api.join(board, PurgeRequest(w.bucket, prefix="logs/"), io, purge_cfg=cfg, workers=1))
    capped = make(w, tmp_path, tuning=Tuning(direct_listing="index", max_objects_per_second=20))[0]
    with pytest.raises(UsageError, match="rate cap or pacing"):
        asyncio.run(join(capped, io, board, workers=1, settings=FAST))
    assert all(i.takes == 0 for i in board.read().items)  # nothing was taken


def test_a_plan_listing_by_index_uses_items_and_one_listing_through_s3_does_not(tmp_path):
    w = World()
    assert purge_api.uses_items(make(w, tmp_path, tuning=INDEX_LISTING)[0])
    assert not purge_api.uses_items(make(w, tmp_path)[0])
    assert purge_api.valid_job_id("0123456789ab")
    for bad in ("0123456789AB", "0123456789a", "../etc/passw", "0123456789abc", ""):
        assert not purge_api.valid_job_id(bad)
    assert Item(3, ".dir.x.3").key == "item.000003"


def test_a_worker_whose_renewals_stop_gives_its_item_up_before_the_lease_ends_and_writes_nothing_more(tmp_path):
    """Alive but unable to renew (every renewal times out) while its item's listing hangs: the
    worker stops the item a quarter of a lease before it would run out on its own clock, records
    nothing more, and the item is taken again (from its last page) once the OSD lets the lease go."""
    w = World(page_size=4, extra_plain=40)
    p, io, cp, bulks = make(w, tmp_path, tuning=Tuning(direct_listing="index", list_page_size=2))
    clock = Clock()
    osd = FakeOsd(clock)
    store = FakeBoardStore(osd, "client.a")
    real_lock, seen = store.lock_exclusive, set()

    def lock(obj, name, cookie, desc, duration_s):
        if cookie in seen:  # a renewal: the take used this cookie first
            raise CephTimeout(f"{obj} lock {name}", "no answer within 10 s")
        seen.add(cookie)
        return real_lock(obj, name, cookie, desc, duration_s)

    store.lock_exclusive = lock
    index = io.bulk(p.profile.index_pool)
    real_page, pages = index.omap_page, []

    async def page_then_hang(*args, **kwargs):
        pages.append(args)
        if len(pages) > 1:
            await asyncio.Event().wait()  # the second page never comes back
        return await real_page(*args, **kwargs)

    index.omap_page = page_then_hang

    async def sleep(delay: float) -> None:  # every wait moves the clocks (ours and the OSD's) on
        clock.t += delay
        await asyncio.sleep(0.001)

    board = Board(store, p.plan_id, worker="client.a", lease_s=30, clock=clock)
    ex = PurgeExecutor(p, io, checkpoint=cp, state=State(plan=p.to_dict()), settings=FAST, board=board, workers=1,
                       sleep=sleep)
    board.publish({"plan_id": p.plan_id, "plan": p.to_dict(), "created": 0, "lease_s": 30}, list(p.profile.index_shards))
    lease = board.take()
    taken_at, writes = clock.t, len(osd.writes)
    with pytest.raises(LeaseLost, match="ran out|could not renew"):
        asyncio.run(ex._run_item(p.step(DeleteObjects), lease))
    assert taken_at + 30 * 0.75 <= clock.t < taken_at + 30  # given up before the OSD would let it go
    assert len(pages) == 2 and len(osd.writes) == writes  # stopped while the listing hung; wrote nothing
    recorded = board.read().items[lease.item.n]
    assert recorded.state == "todo" and recorded.cursor == {}
    other = Board(FakeBoardStore(osd, "client.b"), p.plan_id, worker="b", lease_s=30, clock=clock)
    others = frozenset(i.n for i in other.read().items) - {lease.item.n}
    assert other.take(skip=others) is None  # the OSD still holds a's lease
    clock.t = taken_at + 30
    again = other.take(skip=others)
    assert again.item.n == lease.item.n and again.item.takes == 2 and again.item.cursor == recorded.cursor


def test_a_worker_whose_wall_clock_is_far_off_neither_keeps_nor_loses_a_lease_early():
    """Leases run on the OSD's clock and validity on the worker's monotonic clock: the wall clock
    (an hour off here) only stamps the records status shows."""
    clock, osd, _ = boards()
    skewed = Board(FakeBoardStore(osd, "client.7"), SPEC["plan_id"], worker="skewed", lease_s=30, clock=clock,
                   wall=lambda: clock.t - 3600)
    other = Board(FakeBoardStore(osd, "client.8"), SPEC["plan_id"], worker="other", lease_s=30, clock=clock)
    skewed.publish(SPEC, [".dir.x.0"])
    lease = skewed.take()
    clock.t += 20
    assert other.take() is None  # still held, whatever the stamp says
    skewed.record(lease)
    assert other.read().items[0].updated == clock.t - 3600
    clock.t += 11
    assert other.take() is not None  # run out on the OSD 30 s after the take, not an hour early or late


def test_an_interrupted_purge_stops_its_items_work_before_it_returns(tmp_path):
    """Ctrl-C or SIGTERM cancels the run: every item's page work stops with it; nothing is
    listed, removed or recorded after the run has returned (a worker left running would go on
    beside the next owner of its item)."""
    w = World(page_size=4, extra_plain=60)
    p, io, cp, bulks = make(w, tmp_path, tuning=Tuning(direct_listing="index", list_page_size=2))
    osd = FakeOsd(Clock())
    board = _board(osd, p, "client.a")

    ex = _executor(p, io, cp, board, workers=2)
    board.publish({"plan_id": p.plan_id, "plan": p.to_dict(), "created": 0, "lease_s": 30}, list(p.profile.index_shards))

    async def interrupted():
        # The workers alone (as a join runs them): the run's thread pools stay open meanwhile,
        # so only the cancellation itself can stop the items' work.
        task = asyncio.ensure_future(ex.run_items(p.step(DeleteObjects)))
        while sum(1 for x in osd.writes if x[2].startswith("set item")) < 6:
            assert not task.done()
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert asyncio.all_tasks() == {asyncio.current_task()}  # nothing of the run is left running
        writes, log = len(osd.writes), len(w.log)
        for _ in range(100):
            await asyncio.sleep(0.002)
        return writes, log

    try:
        writes, log = asyncio.run(interrupted())
    finally:
        ex._close_threads()
    assert len(osd.writes) == writes and len(w.log) == log
    assert any(i.state != "done" for i in board.read().items)  # really interrupted mid-way


def test_a_join_ends_well_when_the_purge_finishes_and_removes_its_items_meanwhile(tmp_path):
    w = World(extra_plain=10)
    p, io, cp, _ = make(w, tmp_path, tuning=INDEX_LISTING)
    clock = Clock()
    osd = FakeOsd(clock)
    owner = _board(osd, p, "client.a")
    owner.publish({"plan_id": p.plan_id, "plan": p.to_dict(), "created": 0, "lease_s": 30}, list(p.profile.index_shards))
    held = owner.take()  # the purge's own worker holds item 0 throughout
    joiner = _board(osd, p, "client.b")

    async def joined():
        task = asyncio.ensure_future(join(p, io, joiner, workers=2, settings=FAST, sleep=quick))
        while not all(i.state == "done" or i.n == held.item.n for i in joiner.read().items):
            assert not task.done(), task.exception()
            await asyncio.sleep(0.01)
        owner.finish(held)
        owner.discard()  # the purge verified the end state and removed its items
        return await task

    report = asyncio.run(joined())
    assert report.items_done == report.items == len(p.profile.index_shards)


def test_a_take_slower_than_the_lease_leaves_the_item_instead_of_failing_the_purge():
    clock, osd, (a, b) = boards()
    a.publish(SPEC, [".dir.x.0", ".dir.x.1"])
    real = a.store.omap_update_if

    def slow(*args):
        clock.t += 25  # the owner compare-and-set answered late: past 3/4 of the 30 s lease
        return real(*args)

    a.store.omap_update_if = slow
    assert a.take() is None  # both items given up, nothing raised
    assert a.holding == set()
    clock.t += 31
    assert b.take().item.n == 0  # taken as soon as the OSD let the lease go


def test_a_join_of_a_bucket_re_created_under_the_same_name_is_refused(tmp_path):
    w = World(extra_plain=5)
    p, io, cp, _ = make(w, tmp_path, tuning=INDEX_LISTING)
    board = _board(FakeOsd(Clock()), p, "client.a")
    board.publish({"plan_id": p.plan_id, "plan": p.to_dict(), "created": 0, "lease_s": 30, "paced": False,
                   "rate_cap": 0}, list(p.profile.index_shards))
    from rgwkeeper.config import parse

    w.stats["id"] = "another-instance.1"
    with pytest.raises(UsageError, match="is now id another-instance.1, not the purge's"):
        asyncio.run(purge_api.join(board, PurgeRequest(w.bucket), io, purge_cfg=parse({}).purge, workers=1))
    board.publish({"plan_id": p.plan_id, "plan": p.to_dict(), "created": 0, "lease_s": 30, "paced": True,
                   "rate_cap": 0}, list(p.profile.index_shards))  # kept as it was: not paced
    with pytest.raises(UsageError, match="rate cap or pacing"):
        asyncio.run(join(p, io, board, workers=1, settings=FAST, spec={"paced": True}))
    assert all(i.takes == 0 for i in board.read().items)


def test_a_worker_waiting_on_another_process_item_ends_within_a_poll_of_it_being_done(tmp_path):
    """It watches only the items left (their keys), each second, not the whole board every third
    of a lease: the purge's last step waits a second for a joined worker's last item, not ten."""
    w = World(extra_plain=10)
    p, io, cp, _ = make(w, tmp_path, tuning=INDEX_LISTING)
    clock = Clock()
    osd = FakeOsd(clock)
    other = _board(osd, p, "client.a")
    other.publish({"plan_id": p.plan_id, "plan": p.to_dict(), "created": 0, "lease_s": 30}, list(p.profile.index_shards))
    held = other.take()
    store = FakeBoardStore(osd, "client.b")
    full_reads = []
    real_get_all = store.omap_get_all
    store.omap_get_all = lambda obj: (full_reads.append(clock.t), real_get_all(obj))[1]
    me = Board(store, p.plan_id, worker="b", lease_s=30, clock=clock)

    async def sleep(delay: float) -> None:
        if finish_at[0] < float("inf"):  # time passes only once the joiner waits (the held lease stays live)
            clock.t += delay
        if clock.t >= finish_at[0] and held.item.state != "done":
            other.finish(held)  # done at finish_at (it is applied at the first wait past it)
        await asyncio.sleep(0)

    finish_at = [float("inf")]

    async def joined():
        task = asyncio.ensure_future(join(p, io, me, workers=1, settings=FAST, sleep=sleep))
        while not all(i.state == "done" or i.n == held.item.n for i in other.read().items):
            assert not task.done(), task.exception()
            await asyncio.sleep(0.01)
        finish_at[0] = clock.t + 3.5  # the other process finishes its item 3.5 s into the wait
        reads = len(full_reads)
        report = await task
        return report, reads

    report, reads = asyncio.run(joined())
    assert report.items_done == report.items
    assert finish_at[0] <= clock.t <= finish_at[0] + 1.0  # noticed within one poll of it being done
    # The wait read the left item's keys each second; whole-board reads are a take and the check
    # after it once a third of a lease (at most twice in these few seconds), and the join's count.
    assert len(full_reads) - reads <= 5


def test_a_purge_whose_node_was_lost_is_finished_by_a_new_plan_on_another_node(tmp_path):
    """The node that started the purge dies for good mid-items: the same command on another node
    plans anew (a new id, new items), counts the heads already removed as gone, agrees with the
    index's count without a sweep, and drops and checks the bucket (docs/purge.md)."""
    w = World(page_size=4, extra_plain=60)
    p, io, cp, _ = make(w, tmp_path, tuning=Tuning(direct_listing="index", list_page_size=2))
    osd = FakeOsd(Clock())
    lost = FakeBoardStore(osd, "client.a")
    real, records = lost.omap_set_if, []

    def die_after_some(obj, key, expected, values):
        if key.startswith("owner.") and any(k.startswith("item.") for k in values):
            records.append(key)
            if len(records) > 8:
                lost.unlock = lambda *a, **k: None
                raise Killed()
        return real(obj, key, expected, values)

    lost.omap_set_if = die_after_some
    with pytest.raises(Killed):
        asyncio.run(_executor(p, io, cp, Board(lost, p.plan_id, worker="a", lease_s=30), workers=1).run())
    removed_before = sum(1 for line in w.log if line.startswith("rados rm"))
    assert removed_before and w.exists  # heads removed, the bucket and its index still there

    (tmp_path / "other-node").mkdir()
    again, io2, cp2, _ = make(w, tmp_path / "other-node", tuning=Tuning(direct_listing="index", list_page_size=2),
                              now=p.created_at + 60)
    assert again.plan_id != p.plan_id
    report = asyncio.run(_executor(again, io2, cp2, _board(osd, again, "client.b")).run())
    assert report.ok, report.checks
    assert "sweeps" not in report.counters and not w.exists
    assert report.counters["objects_deleted"] == 66  # the heads the lost node removed count as gone


def test_a_resumed_run_s_cap_and_lease_are_what_a_join_follows(tmp_path):
    """The items are kept on a resume, but the run's fields are rewritten: a purge resumed under a
    rate cap refuses joins, and joins take the lease of the run they join."""
    w = World(extra_plain=5)
    p, io, cp, _ = make(w, tmp_path, tuning=INDEX_LISTING)
    board = _board(FakeOsd(Clock()), p, "client.a")
    spec = {"plan_id": p.plan_id, "plan": p.to_dict(), "created": 0, "lease_s": 30}
    assert board.publish(spec, list(p.profile.index_shards), {"lease_s": 30, "paced": False, "rate_cap": 0})
    assert not board.publish(spec, list(p.profile.index_shards), {"lease_s": 60, "paced": False, "rate_cap": 50})
    assert board.read().spec["rate_cap"] == 50 and board.read().spec["lease_s"] == 60
    from rgwkeeper.config import parse

    with pytest.raises(UsageError, match="rate cap or pacing"):
        asyncio.run(purge_api.join(board, PurgeRequest(w.bucket), io, purge_cfg=parse({}).purge, workers=1))
    with pytest.raises(UsageError, match="lease_s 0 is not 3 to 3600 seconds"):
        board.publish(spec, list(p.profile.index_shards), {"lease_s": 0, "paced": False, "rate_cap": 0})
    with pytest.raises(UsageError, match="lease_s 0 is not 3 to 3600 seconds"):
        board.read()


def test_a_renewal_under_way_when_the_item_is_released_does_not_lock_it_again():
    import threading

    clock, osd, (a, b) = boards()
    a.publish(SPEC, [".dir.x.0"])
    lease = a.take()
    entered, go = threading.Event(), threading.Event()
    real = a.store.lock_exclusive

    def slow_lock(*args):
        entered.set()
        go.wait(5)
        return real(*args)

    a.store.lock_exclusive = slow_lock
    renewing = threading.Thread(target=a.renew, args=(lease,))
    renewing.start()
    assert entered.wait(5)
    releasing = threading.Thread(target=a.release, args=(lease,))
    releasing.start()
    releasing.join(0.2)
    assert releasing.is_alive()  # the release waits for the renewal on its way
    go.set()
    renewing.join(5)
    releasing.join(5)
    assert a.store.holders(a.oid, "item.000000") == []  # released after the renewal, not before it
    assert b.take() is not None


def test_a_take_that_fails_after_its_lock_landed_unlocks_the_item():
    clock, osd, (a, b) = boards()
    a.publish(SPEC, [".dir.x.0"])
    real, reads = a.store.omap_get_all, []

    def second_read_times_out(obj):
        reads.append(obj)
        if len(reads) == 2:  # the read after the lock and the owner compare
            raise CephTimeout(f"{obj} omap get", "no answer within 10 s")
        return real(obj)

    a.store.omap_get_all = second_read_times_out
    with pytest.raises(CephTimeout):
        a.take()
    assert b.take() is not None  # at once, not a lease later


def test_a_join_works_under_the_lease_of_the_run_it_joins(tmp_path):
    w = World(extra_plain=5)
    p, io, cp, _ = make(w, tmp_path, tuning=INDEX_LISTING)
    board = _board(FakeOsd(Clock()), p, "client.b")  # this node's config: 30 s
    spec = {"plan_id": p.plan_id, "plan": p.to_dict(), "created": 0, "lease_s": 30}
    board.publish(spec, list(p.profile.index_shards), {"lease_s": 45, "paced": False, "rate_cap": 0})
    from rgwkeeper.config import parse

    report = asyncio.run(purge_api.join(board, PurgeRequest(w.bucket), io, purge_cfg=parse({}).purge, workers=1))
    assert board.lease_s == 45 and report.items_done == report.items


def test_closing_the_connection_waits_for_a_call_still_running_before_librados_shuts_down():
    import threading

    from rgwkeeper.access import ClusterAccess
    from rgwkeeper.adapters.rados import RadosAdapter

    events: list[str] = []
    started = threading.Event()

    class Cluster:
        def shutdown(self):
            events.append("shutdown")

    rados = RadosAdapter(ClusterAccess(conf=None, keyring=None, client_name="client.admin", rgw_endpoint=None,
                                       rgw_credentials_file=None, timeout_s=5))
    rados._cluster = Cluster()

    def slow_call():
        started.set()
        threading.Event().wait(0.3)
        events.append("call returned")

    rados.submit(slow_call)
    assert started.wait(5)
    rados.close()
    assert events == ["call returned", "shutdown"]


def test_a_prefix_purge_through_s3_runs_as_items_and_leaves_everything_outside_the_prefix(tmp_path):
    w = World(page_size=4, extra_plain=30)
    keys = set(w.index)
    inside = {k for k in keys if k.startswith("extra/")}
    assert len(inside) == 30 and len(keys) > 30
    p, io, cp, _ = make(w, tmp_path, request=PurgeRequest(w.bucket, prefix="extra/", method="s3"), tuning=INDEX_LISTING)
    assert p.method == "s3" and purge_api.uses_items(p)
    [step] = [s for s in p.steps if isinstance(s, DeleteObjects)]
    assert "index shards with librados, each shard a work item" in step.summary
    assert step.calls[0].startswith("librados ") and "from 'extra/'" in step.calls[0]
    board = _board(FakeOsd(Clock()), p, "client.a")
    report = asyncio.run(_executor(p, io, cp, board).run())
    assert report.ok, report.checks
    assert set(w.index) == keys - inside and w.exists  # the rest of the bucket, untouched
    assert report.counters["objects_deleted"] == len(inside)
    snap = board.read()
    assert snap.done and sum(i.counters.get("objects_deleted", 0) for i in snap.items) == len(inside)
    # Only S3 deleted (the s3 method): no RADOS removal, and no key outside the prefix was named.
    assert not any(line.startswith("rados rm") for line in w.log)
    deletes = " ".join(line for line in w.log if line.startswith("S3 DeleteObjects"))
    assert all(repr(k) not in deletes for k in keys - inside)


def test_an_age_purge_through_s3_as_items_heads_each_key_and_keeps_one_written_again(tmp_path):
    import datetime

    w = World(page_size=2, extra_plain=6)
    old = ["extra/00000", "extra/00001", "extra/00002"]
    for key in old:
        w.index[key]["LastModified"] = datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc)
    w.rewrite_on_head = {"extra/00001"}  # a client PUTs it again between the listing and the delete
    p, io, cp, _ = make(w, tmp_path, request=PurgeRequest(w.bucket, prefix="extra/", older_than_s=86400,
                                                           method="s3"), tuning=INDEX_LISTING)
    assert purge_api.uses_items(p) and any(isinstance(s, DeleteObjects) and s.recheck for s in p.steps)
    board = _board(FakeOsd(Clock()), p, "client.a")
    report = asyncio.run(_executor(p, io, cp, board).run())
    assert report.ok, report.checks
    assert board.read().done
    assert "extra/00001" in w.index and "extra/00000" not in w.index and "extra/00002" not in w.index
    assert sum(1 for k in w.index if k.startswith("extra/")) == 4  # the three newer ones and the rewritten
    assert sorted(line for line in w.log if line.startswith("S3 HeadObject")) == [f"S3 HeadObject {k}" for k in old]
    assert report.counters["objects_deleted"] == 2 and report.counters["kept_rewritten"] == 1


def test_a_versioned_bucket_s3_purge_does_not_use_items_even_listing_by_index(tmp_path):
    w = World()
    request = PurgeRequest(w.bucket, prefix="plain/", method="s3")
    p, _, _, _ = make(w, tmp_path, request=request, tuning=INDEX_LISTING)
    assert purge_api.uses_items(p)
    for versioning in ("enabled", "suspended"):
        v = plan(dataclasses.replace(p.profile, versioning=versioning), request, now=time.time(), tuning=INDEX_LISTING)
        assert not purge_api.uses_items(v)
        [step] = [s for s in v.steps if isinstance(s, DeleteObjects)]
        assert step.versions and "ListObjectVersions" in step.calls[0]


# -- key ranges of huge shards ----------------------------------------------------------------

RANGES = Tuning(direct_listing="index", range_entries=5, list_page_size=4)


def _check_ranges(items: list[Item]) -> list[Item]:
    """Each shard's ranges are numbered 1..cuts after it and follow each other: returns them."""
    ranges = [i for i in items if i.of >= 0]
    for s in (i for i in items if i.of < 0):
        mine = sorted((r for r in ranges if r.of == s.n), key=lambda r: r.n)
        assert [r.n for r in mine] == [s.n + RANGE_STRIDE * k for k in range(1, s.cuts + 1)], s
        assert [r.last for r in mine] == sorted(r.last for r in mine) and all(r.shard == s.shard for r in mine)
        assert not s.cutting and not s.last
    return ranges


def test_a_cut_by_a_worker_that_lost_its_item_writes_no_range_and_the_new_owner_numbers_on():
    clock, osd, (a, b) = boards()
    a.publish(SPEC, [".dir.x.0"], cutting=True)
    held = a.take()
    rng = a.cut(held, "", "k4")
    assert (rng.n, rng.of, rng.cursor, rng.last) == (RANGE_STRIDE, 0, {}, "k4")
    assert held.item.cursor == {"after": "k4"} and held.item.cuts == 1 and held.item.cutting
    clock.t += 31
    taken = b.take()
    assert taken.item.cursor == {"after": "k4"} and taken.item.cuts == 1 and taken.item.cutting
    held.valid_until = clock.t + 100  # a's clock did not notice: the owner compare refuses it
    with pytest.raises(LeaseLost, match="taken over"):
        a.cut(held, "k4", "k9")
    assert held.item.cuts == 1 and held.item.cursor == {"after": "k4"}  # what was not written is not kept
    assert [i.n for i in b.read().items] == [0, RANGE_STRIDE]
    nxt = b.cut(taken, "k4", "k9")
    assert (nxt.n, nxt.cursor, nxt.last) == (2 * RANGE_STRIDE, {"after": "k4"}, "k9")
    from rgwkeeper.cli.render import render_items

    spec = {**SPEC, "plan": {"profile": {"bucket": "logs1", "bucket_id": "id1", "num_objects": 100},
                             "request": {"bucket": "logs1"}}}
    text = "\n".join(render_items(SPEC["plan_id"], purge_api.items_view(dataclasses.replace(b.read(), spec=spec),
                                                                          now=clock.t)))
    assert "item     0 .dir.x.0 (cutting key ranges): running by host1:1 (taken 2x)" in text, text
    assert "item 1000000 .dir.x.0 keys up to 'k4' (a range of item 0): waiting" in text, text
    assert "item 2000000 .dir.x.0 keys up to 'k9' (a range of item 0): waiting" in text, text
    assert not a.publish(SPEC, [".dir.x.0"], cutting=True)  # ranges are not shards: a resume keeps them
    assert a.take().item.n == RANGE_STRIDE  # a range is an item like any other


def test_a_cut_retried_after_its_reply_was_lost_does_not_reset_the_range_another_worker_finished():
    clock, osd, (a, b) = boards()
    a.publish(SPEC, [".dir.x.0"], cutting=True)
    held = a.take()
    osd.lose_next_write = True  # the cut lands, its reply does not
    with pytest.raises(CephTimeout):
        a.cut(held, "", "k4")
    assert held.item.cuts == 0 and held.item.cursor == {}  # not known to be written
    rng = b.take()  # the range that landed is taken and finished meanwhile
    assert rng.item.n == RANGE_STRIDE
    rng.item.counters = {"objects_deleted": 5}
    b.finish(rng)
    again = a.cut(held, "", "k4")  # the retry: it finds its cut landed and writes nothing
    assert again.n == RANGE_STRIDE and held.item.cuts == 1 and held.item.cursor == {"after": "k4"}
    done = next(i for i in b.read().items if i.n == RANGE_STRIDE)
    assert done.state == "done" and done.counters == {"objects_deleted": 5}
    assert a.cut(held, "k4", "k9").n == 2 * RANGE_STRIDE  # and cuts on
    # A cut that did not land is written by the retry.
    osd.unreachable = True
    with pytest.raises(CephTimeout):
        a.cut(held, "k9", "k12")
    osd.unreachable = False
    assert a.cut(held, "k9", "k12").n == 3 * RANGE_STRIDE and held.item.cuts == 3
    assert [i.n for i in a.read().items] == [0, RANGE_STRIDE, 2 * RANGE_STRIDE, 3 * RANGE_STRIDE]


def test_huge_shards_are_cut_into_key_ranges_that_workers_share_and_every_object_is_purged_once(tmp_path):
    w = World(page_size=4, extra_plain=300)
    p, io, cp, _ = make(w, tmp_path, tuning=RANGES)
    assert p.tuning.cuts_shards(p.profile)
    assert "is cut into ranges of 5 keys by the worker that takes it" in p.step(DeleteObjects).summary
    assert any("omap keys only of" in c and "every 5 keys, a range item" in c for c in p.step(DeleteObjects).calls)
    osd = FakeOsd(Clock())
    board = _board(osd, p, "client.a")
    # The last shard lists its keys slowly: the other workers run out of items while it still
    # cuts, and must wait for the ranges it has yet to publish instead of leaving.
    index = io.bulk(p.profile.index_pool)
    real_keys, slow = index.omap_keys_page, p.profile.index_shards[-1]

    async def slow_keys(oid, *a, **k):
        for _ in range(5000 if oid == slow else 0):
            await asyncio.sleep(0)
        return await real_keys(oid, *a, **k)

    index.omap_keys_page = slow_keys
    events: list[tuple[str, int]] = []
    real_take, real_finish = board.take, board.finish

    def take(*a, **k):
        lease = real_take(*a, **k)
        events.append(("take", lease.item.n) if lease else ("none", -1))
        return lease

    def finish(lease):
        events.append(("finish", lease.item.n))
        return real_finish(lease)

    board.take, board.finish = take, finish
    report = asyncio.run(_executor(p, io, cp, board, workers=3).run())
    assert report.ok, report.checks
    assert not w.exists and report.counters["objects_deleted"] == 306 and "sweeps" not in report.counters
    items = board.read().items
    ranges = _check_ranges(items)
    last = len(p.profile.index_shards) - 1
    # Every range of the slow shard was taken while its owner still worked on it: the others waited.
    cut_done = events.index(("finish", last))
    assert all(events.index(("take", r.n)) < cut_done for r in ranges if r.of == last), str(events)
    assert len(ranges) >= 40 and all(i.state == "done" for i in items)
    assert all(0 < r.counters.get("objects_deleted", 0) <= 5 for r in ranges)
    assert all(s.counters.get("objects_deleted", 0) <= 5 for s in items if s.of < 0)  # what was left after the cuts
    removed = [line for line in w.log if line.startswith("rados rm ")]
    assert len(removed) == len(set(removed))  # no head removed twice


@pytest.mark.parametrize("planned_cap, run_cap", [(1e6, 1e6), (0.0, 1e6)])
def test_a_capped_purge_does_not_cut_its_huge_shards(tmp_path, planned_cap, run_cap):
    """Under a cap one item at a time, and no join: nobody would take the ranges. Capped when
    planned (the dry run shows no cut), or only in this run (a resumed plan made without a cap)."""
    w = World(page_size=4, extra_plain=300)
    p, io, cp, _ = make(w, tmp_path, tuning=dataclasses.replace(RANGES, max_objects_per_second=planned_cap))
    assert p.tuning.cuts_shards(p.profile) is (planned_cap == 0)
    assert ("ranges of 5 keys" in p.step(DeleteObjects).summary) is (planned_cap == 0)
    board = _board(FakeOsd(Clock()), p, "client.a")
    settings = dataclasses.replace(FAST, max_objects_per_second=run_cap)
    ex = PurgeExecutor(p, io, checkpoint=cp, state=State(plan=p.to_dict()), settings=settings, board=board,
                       workers=3, sleep=quick)
    report = asyncio.run(ex.run())
    assert report.ok, report.checks
    assert not w.exists and report.counters["objects_deleted"] == 306
    items = board.read().items
    assert len(items) == len(p.profile.index_shards) and not any(i.cutting or i.of >= 0 for i in items)


def test_shards_expected_to_hold_less_than_two_ranges_are_not_cut(tmp_path):
    w = World(page_size=4, extra_plain=100)  # about 10 entries a shard, ranges of 5: not cut
    p, io, cp, _ = make(w, tmp_path, tuning=RANGES)
    assert not p.tuning.cuts_shards(p.profile) and "ranges" not in p.step(DeleteObjects).summary
    board = _board(FakeOsd(Clock()), p, "client.a")
    report = asyncio.run(_executor(p, io, cp, board).run())
    assert report.ok and report.counters["objects_deleted"] == 106
    assert [i.n for i in board.read().items] == list(range(len(p.profile.index_shards)))
    assert not getattr(io.bulk(p.profile.index_pool), "key_pages", 0)  # no listing ahead


def test_an_owner_killed_while_cutting_is_taken_over_and_its_shard_cut_on_from_the_last_range(tmp_path):
    w = World(page_size=4, extra_plain=300)
    p, io, cp, _ = make(w, tmp_path, tuning=RANGES)
    clock = Clock()
    osd = FakeOsd(clock)
    killed = FakeBoardStore(osd, "client.a")
    cuts = []

    def third_cut(key, values) -> bool:
        if sum(k.startswith("item.") for k in values) == 2:  # a cut: the range and the shard's item
            if len(cuts) == 2:
                return True
            cuts.append(values)
        return False

    state = State(plan=p.to_dict())
    board = _killed_at(killed, third_cut, p, io, cp, clock, state)
    stuck = next(i for i in board.read().items if i.takes and i.state != "done")
    assert stuck.cutting and stuck.cuts == 2 and stuck.cursor["after"]
    joiner = _board(osd, p, "client.b")

    async def join_then_expire():
        task = asyncio.ensure_future(join(p, io, joiner, workers=2, settings=FAST, sleep=quick))
        while not all(i.state == "done" or i.n == stuck.n for i in joiner.read().items):
            assert not task.done(), task.exception()
            for _ in range(100):  # sleeps take no time here (no_sleep): let the workers run between reads
                await asyncio.sleep(0)
        for _ in range(100):
            await asyncio.sleep(0)
        assert not task.done()  # the shard still being cut may publish more ranges: the join waits
        clock.t += 31
        return await task

    report = asyncio.run(join_then_expire())
    items = joiner.read().items
    ranges = _check_ranges(items)
    again = next(i for i in items if i.n == stuck.n)
    assert again.takes == 2 and again.cuts > 2 and all(i.state == "done" for i in items)
    assert report.items == len(items)
    resumed = _executor(Plan.from_dict(state.plan), io, cp, _board(osd, p, "client.a2"), state=state)
    final = asyncio.run(resumed.run())
    assert final.ok, final.checks
    assert final.counters["objects_deleted"] == 306 and "sweeps" not in final.counters and not w.exists
    removed = [line for line in w.log if line.startswith("rados rm ")]
    assert len(removed) == len(set(removed)) and ranges


def test_a_bucket_too_big_for_its_range_size_gets_bigger_ranges_not_more_items(tmp_path):
    from rgwkeeper.purge.plan import MAX_RANGES

    w = World(extra_plain=10)
    p, *_ = make(w, tmp_path, tuning=RANGES)
    huge = dataclasses.replace(p.profile, num_objects=10**9)
    t = Tuning(direct_listing="index", range_entries=100)
    assert t.range_size(huge) == 10**9 // MAX_RANGES and t.cuts_shards(huge)
    assert f"ranges of {10**9 // MAX_RANGES:,} keys" in t.items_listing(huge)
    assert t.range_size(dataclasses.replace(p.profile, num_objects=10**5)) == 100
    assert not Tuning(direct_listing="index").cuts_shards(huge)  # range_entries 0: never cut


@pytest.mark.parametrize("cap, most", [(0.0, 4), (1e6, 1)])
def test_under_a_rate_cap_a_process_works_one_item_at_a_time_whatever_its_workers(tmp_path, cap, most):
    """Four workers: uncapped, they hold up to four items at once (at least two here); under a
    cap (one too high to ever wait for), one, so the items' listings do not start together."""
    w = World(page_size=4, extra_plain=30)
    p, io, cp, _ = make(w, tmp_path, tuning=INDEX_LISTING)
    assert len(p.profile.index_shards) > 4
    board = _board(FakeOsd(Clock()), p, "client.a")
    held, seen, lock = [0], [], threading.Lock()  # board calls run on the executor's threads

    def counting(name, delta):
        real = getattr(board, name)

        def call(*args, **kwargs):
            out = real(*args, **kwargs)
            if delta < 0 or out is not None:
                with lock:
                    held[0] += delta
                    seen.append(held[0])
            return out
        setattr(board, name, call)

    counting("take", 1)
    for name in ("release", "let_go"):  # finish releases
        counting(name, -1)
    settings = dataclasses.replace(FAST, max_objects_per_second=cap)
    ex = PurgeExecutor(p, io, checkpoint=cp, state=State(plan=p.to_dict()), settings=settings, board=board,
                       workers=4, sleep=quick)
    assert ex.items_at_once() == most
    report = asyncio.run(ex.run())
    assert report.ok and not w.exists and report.counters["objects_deleted"] == 36
    assert (max(seen) >= 2 if most > 1 else max(seen) == 1) and held[0] == 0
