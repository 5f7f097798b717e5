"""A purge's work items in RADOS (purge.board): leases that run out on the OSD's clock, records
only the current owner can write, takeover from the last recorded page, and a direct purge run
as items by several workers and joined by another process, over strict fakes (FakeOsd fails the
way cls_lock and omap_cmp fail)."""

from __future__ import annotations

import asyncio
import json

import pytest

from rgwkeeper import purge as purge_api
from rgwkeeper.errors import CephTimeout, UsageError
from rgwkeeper.purge.board import Board, Item, LeaseLost, NoSuchJob
from rgwkeeper.purge.checkpoint import State
from rgwkeeper.purge.execute import PurgeExecutor, join
from rgwkeeper.purge.plan import Plan, PurgeRequest, Tuning
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
    with pytest.raises(Exception, match="holds purge '0123456789ab'"):
        b.publish({**SPEC, "plan_id": "ffffffffffff"}, [".dir.x.0"])
    with pytest.raises(NoSuchJob, match="no purge 'aaaaaaaaaaaa'"):
        Board(FakeBoardStore(osd, "client.9"), "aaaaaaaaaaaa", worker="w", lease_s=30).read()


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
    assert {i.worker for i in snap.items} == {"client.a"}


class Killed(BaseException):
    """What SIGKILL looks like here: the process stops between two calls, releasing nothing."""


def test_a_worker_killed_mid_item_loses_nothing_another_takes_it_over_from_its_last_page(tmp_path):
    w = World(page_size=4, extra_plain=60)
    p, io, cp, _ = make(w, tmp_path, tuning=Tuning(direct_listing="index", list_page_size=2))
    clock = Clock()
    osd = FakeOsd(clock)
    killed = FakeBoardStore(osd, "client.a")
    records: list[dict] = []  # every item a wrote (take, pages), as written

    def record_then_die(obj, key, expected, values, real=killed.omap_set_if):
        if not key.startswith("owner.") or not any(k.startswith("item.") for k in values):
            return real(obj, key, expected, values)  # the publish, or a take's owner.<n>: not a record
        rec = json.loads(next(iter(values.values())))
        paged = [r for r in records if r["n"] == rec["n"] and r["cursor"].get("after")]
        if rec["n"] >= 2 and paged and rec["cursor"].get("after"):  # an item's second page, past the first items
            killed.omap_set_if = lambda *a, **k: (_ for _ in ()).throw(Killed())  # every later write dies too
            killed.unlock = lambda *a, **k: None  # a killed process releases nothing
            raise Killed()
        records.append(rec)
        return real(obj, key, expected, values)

    killed.omap_set_if = record_then_die
    board = Board(killed, p.plan_id, worker="client.a", lease_s=30, clock=clock)
    state = State(plan=p.to_dict())
    with pytest.raises(Killed):
        asyncio.run(_executor(p, io, cp, board, state=state, workers=1).run())
    held = [i for i in board.read().items if i.state != "done" and i.takes]
    assert len(held) == 1 and held[0].cursor  # killed mid-item, after recording pages of it
    stuck = held[0]
    # Another node joins while the lease still holds: it does every other item, and waits for
    # that one; it takes it over once the lease has run out on the OSD's clock.
    joiner = _board(osd, p, "client.b")

    async def join_then_expire():
        task = asyncio.ensure_future(join(p, io, joiner, workers=2, settings=FAST, sleep=quick))
        while not all(i.state == "done" or i.n == stuck.n for i in joiner.read().items):
            await asyncio.sleep(0)
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
