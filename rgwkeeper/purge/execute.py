"""The purge executor: runs a Plan's steps, one handler per step type, with parts that each do
one job: the lister (pages of keys), the S3 and RADOS head deleters, the verifier (the end
state read back), the ledger (counters and the checkpoint) and the pacer with its probe and
limiters; all share one retry policy and one injected clock (``runtime``).

Every step is idempotent from its checkpoint: a listing-driven step records the last key
(or version marker) whose page is fully done, so a killed run resumes after it; heads already
removed show up as ENOENT and count as done; radosgw-admin removals of what is already gone
are accepted. Exit codes are not evidence: every change is read back, and the last step
checks the end state.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import functools
import json
import shlex
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Awaitable, Callable, TypeVar

import structlog

from rgwkeeper.aio import bounded
from rgwkeeper.adapters.adminapi import AdminApi
from rgwkeeper.adapters.rados import BulkObjects, RadosAdapter
from rgwkeeper.adapters.radosgw_admin import RadosgwAdmin
from rgwkeeper.adapters.s3 import S3Adapter
from rgwkeeper.errors import CephError, ClusterFull, CommandFailed, NotFound, UsageError
from rgwkeeper.observe import read_full_state
from rgwkeeper import lifecycle as lc
from rgwkeeper.purge import lcrun
from rgwkeeper.purge.board import RENEWALS_PER_LEASE, Board, Lease, LeaseLost, NoSuchJob
from rgwkeeper.purge.checkpoint import Checkpoint, Ledger, Progress, State, crash_point
from rgwkeeper.purge.deleters import RECHECK_IN_FLIGHT, CapWindow, HeadDeleter, S3Deleter, check_removed, chunks
from rgwkeeper.purge.layout import head_oid
from rgwkeeper.purge.lister import Entry, IndexLister, Lister, key_pages
from rgwkeeper.purge.pacing import CAP_REQUEST_S, Limiter, Pacer, Probe, RateCap, run_pacer
from rgwkeeper.purge.plan import (EVERYTHING, AbortUploads, Argv, AdminBucketRm, DeleteBucket, DeleteObjects, DropBucket,
                                  DropLifecycle, Fence, FreeWhileFull, GcProcess, LcProcess, LifecycleApply,
                                  LifecycleRestore, Plan, ProveHeadOnly, Scope, Step, Verify, rate_cap_for)
from rgwkeeper.purge.profile import admin_first, bucket_id_now, confirmed_bucket_stats, gc_entries
from rgwkeeper.purge.runtime import PurgeFailed, Retry, Threads, Time
from rgwkeeper.purge.verifier import OWNER_GONE, SYNCED_BY_ADMIN_API, Check, Verifier, owner_stats_of
from rgwkeeper.units import MAX_DURATION_S, MAX_OPS_IN_FLIGHT, check_number, human_bytes

__all__ = ["Check", "JoinReport", "Progress", "PurgeExecutor", "PurgeFailed", "PurgeIO", "PurgeReport", "Settings",
           "STEP_HANDLERS", "execute", "join"]

log = structlog.get_logger("rgwkeeper.purge")
PACED_LIST_PAGE = 200
CAPPED_PAGE_S = 5  # under a rate cap a listing page holds about this many seconds of deletes
CAPPED_PAGE_MIN = 10
DROP_SHARDS_AT_ONCE = 64  # index shard objects the drop stats, empties or removes at once (uncapped)
PAGES_IN_FLIGHT = 3  # unpaced: pages of head work at once (one stats while another removes)
# Putting a lifecycle purge's previous rules back after a failure or an interrupt: long enough
# for a few S3 round trips, short enough that a stopped purge does not hang.
LIFECYCLE_UNDO_TIMEOUT_S = 30.0
_T = TypeVar("_T")

PROBE_BYTES = b"\0" * 4096
FULL_POLL_S = 2.0  # the mon clears OSD_FULL a few seconds after usage falls (OSDs report every 5 s)


@dataclass
class PurgeIO:
    """What a purge talks to (injected, so unit tests pass strict fakes)."""

    rgw: RadosgwAdmin
    s3: S3Adapter
    rados: RadosAdapter
    bulk: Callable[[str], BulkObjects]  # pool name -> bulk object operations in that pool
    admin_api: AdminApi


@dataclass(frozen=True)
class Settings:
    """From ``[purge]`` in the config."""

    pace_write_latency_s: float = 0.0
    pace_latency_increase: float = 0.0  # relative target: the probe before the purge x (1 + this)
    pace_probe_interval_s: float = 1.0
    verify_scan_max_objects: int = 1_000_000
    rgw_retry_s: float = 120.0
    lc_busy_wait_s: float = 300.0
    lc_poll_s: float | None = None  # None: a tenth of lc_busy_wait_s, at most 2 s
    checkpoint_interval_s: float = 1.0
    max_objects_per_second: float = 0.0  # 0: no cap (see pacing.RateCap)
    cap_request_s: float = CAP_REQUEST_S  # the cap's work per request (pacing.RateCap)
    cap_ops_in_flight: int = 1  # under a cap, the most librados operations in flight (deleters.CapWindow)
    full_wait_s: float = 60.0  # a full cluster: how long to wait for it to fall below full after freeing

    def __post_init__(self) -> None:
        # For callers of the Python API (the config's bounds hold these already): a NaN wait or
        # retry time passes every comparison.
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is not None:
                check_number(value, f.name, lo=0, hi=MAX_DURATION_S if f.name.endswith("_s") else None)
        check_number(self.cap_ops_in_flight, "cap_ops_in_flight", lo=1, hi=MAX_OPS_IN_FLIGHT, integer=True)

    @property
    def paced(self) -> bool:
        return self.pace_write_latency_s > 0 or self.pace_latency_increase > 0


@dataclass
class PurgeReport:
    plan_id: str
    bucket: str
    bucket_id: str
    method: str
    request: dict[str, Any]
    resumed: int
    counters: dict[str, int]
    elapsed_s: float  # this run, until verified
    space_free_s: float  # this run, until the last change (GC included) was done
    checks: list[Check] = field(default_factory=list)
    pacing: dict[str, Any] = field(default_factory=dict)
    step_s: dict[str, float] = field(default_factory=dict)  # seconds each step took in this run
    #: This run's S3 requests per RGW endpoint: requests, failures to connect, requests/s.
    rgw_endpoints: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.status != "failed" for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ok"] = self.ok
        deleted = self.counters.get("objects_deleted", 0)
        d["objects_per_s"] = round(deleted / self.space_free_s, 1) if self.space_free_s > 0 else None
        return d


def items_at_once(workers: int, rate_cap: float) -> int:
    """Work items one process runs at once: ``workers``, or one under a rate cap. A cap's head
    work goes one page at a time however many items there are (``_pages_in_flight``), so more
    items add no rate; they only list their shards ahead together, and items that end together
    listed their next shards' pages in the same second, a burst ingest noticed (docs/purge.md,
    "The typical PUT and the slow seconds")."""
    return 1 if rate_cap > 0 else workers


class PurgeExecutor:
    def __init__(self, plan: Plan, io: PurgeIO, *, checkpoint: Checkpoint | None, state: State | None = None,
                 settings: Settings = Settings(), on_progress: Callable[[Progress], None] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 board: Board | None = None, workers: int = 1) -> None:
        self.plan = plan
        #: The purge's work items in RADOS (purge.board): an index-listed direct delete runs as
        #: items taken by ``workers`` workers here and by any that join from other nodes.
        self.board = board
        self.workers = workers
        self._count_own = True  # a page an item records also counts in this run's ledger
        self.io = io
        self.settings = settings
        self.time = Time(clock, sleep)
        p = plan.profile
        self.ledger = Ledger(state or State(plan=plan.to_dict()), checkpoint, interval_s=settings.checkpoint_interval_s,
                             clock=clock, totals=(p.num_objects, p.size_bytes), on_progress=on_progress)
        n = plan.tuning.rados_ops_in_flight
        self.pacer = run_pacer(settings.pace_write_latency_s, paced=settings.paced,
                               widest=n if plan.method == "direct" else plan.tuning.s3_batches_in_flight)
        cap = rate_cap_for(plan.method, settings.max_objects_per_second)
        if settings.max_objects_per_second > 0 and not cap:
            log.warning("purge rate cap does not apply to this method; it runs at RGW's own pace",
                        method=plan.method, max_objects_per_second=settings.max_objects_per_second)
        self.cap = RateCap(cap, clock=clock, sleep=sleep, request_s=settings.cap_request_s)
        # Board calls (takes, records, renewals) on threads of their own: asyncio's default pool
        # has 6 on 2 cores, and a renewal queued behind the other items' takes can miss its lease.
        self._board_threads = ThreadPoolExecutor(2 * self.items_at_once() + 4, thread_name_prefix="rgwkeeper-items") \
            if board is not None else None
        #: Under the cap, the most librados operations in flight and what the window held back (the report's).
        self.cap_window = CapWindow(most=min(plan.tuning.rados_ops_in_flight, settings.cap_ops_in_flight))
        self.retry = Retry(settings.rgw_retry_s, self.time, before_retry=self._stop_if_full)
        self.threads = Threads(plan.tuning.s3_batches_in_flight + RECHECK_IN_FLIGHT + 2, self.retry)
        self.lister = Lister(io.s3, p.bucket, self.threads, page_size=self._page_size)
        self.index_lister = IndexLister(io.bulk(p.index_pool), p.index_shards, self.threads,
                                        page_size=self._page_size) if plan.tuning.direct_listing == "index" else None
        self.s3_deleter = S3Deleter(io.s3, p.bucket, self.threads, self.ledger, self.cap)
        self._data = io.bulk(p.data_pool) if p.data_pool else None
        self._head_limiter = Limiter(lambda: 1, share=lambda: self.pacer.duty(n), clock=clock, sleep=sleep)
        self.heads = self._head_deleter(self.ledger)
        self.verifier = Verifier(p, rgw=io.rgw, bulk=io.bulk, lister=self.lister, created_at=plan.created_at,
                                 scan_max_objects=settings.verify_scan_max_objects, admin=io.admin_api)
        self.probe: Probe | None = None
        self.t0 = clock()
        self._s3_counts = io.s3.endpoints.counts()
        # One process's share of the cluster, however many workers: the pages of head work and the
        # DeleteObjects batches in flight are bounded for all its items together, as for one listing.
        self._item_limiter = self._s3_limiter()
        self._item_pages = asyncio.Semaphore(self._pages_in_flight())
        self._item_rechecks = asyncio.Semaphore(RECHECK_IN_FLIGHT)  # HEADs of every item's pages together
        self._space_free_at: float | None = None
        #: The owner's stats as the drop's sync printed them, for the read-back (None: not run here).
        self._owner_stats: dict[str, Any] | None = None
        self._step_s: dict[str, float] = {}

    def _head_deleter(self, ledger: Ledger) -> HeadDeleter | None:
        """The head deleter counting into ``ledger``; all of a run's share one limiter."""
        p = self.plan.profile
        if self._data is None:
            return None
        tails = next((s.tails_placement for s in self.plan.steps if isinstance(s, DeleteObjects)), "")
        return HeadDeleter(self._data, pool=p.data_pool, marker=p.marker, head_chunk_bytes=p.head_chunk_bytes,
                           window=self.plan.tuning.rados_ops_in_flight,
                           pacer=self.pacer if self.settings.paced else None, cap=self.cap, ledger=ledger,
                           limiter=self._head_limiter, tails_placement=tails or None,
                           cap_window=self.cap_window)

    @property
    def state(self) -> State:
        return self.ledger.state

    @property
    def counters(self) -> dict[str, int]:
        return self.ledger.counters

    def _page_size(self, filtered: bool) -> int:
        size = self.plan.tuning.list_page_size
        if self.settings.paced:  # a 1,000-key listing is itself a burst of RGW and index work
            size = min(size, PACED_LIST_PAGE)
        if self.cap.rate > 0 and not filtered:
            # Progress and the checkpoint move per page: a few seconds' work. Not with a
            # filter: few keys may match, and small pages would multiply the listing.
            size = min(size, max(CAPPED_PAGE_MIN, int(self.cap.rate * CAPPED_PAGE_S)))
        return size

    def _batch_keys(self) -> int:
        return batch_keys(self.pacer, self.cap, paced=self.settings.paced)

    def _s3_limiter(self) -> Limiter:
        return s3_limiter(self.pacer, self.plan.tuning.s3_batches_in_flight, self.time)

    async def _stop_if_full(self, what: str) -> None:
        """A call that got no answer on a full cluster waits for a write the full flag blocks:
        retrying it for rgw_retry_s only hides that (measured: the fence's quota PUT)."""
        try:
            full = await read_full_state(self.io.rados)
        except CephError:
            return  # the mon does not answer either: an outage, which the retry is for
        if full.full:
            raise ClusterFull(f"purge of {self.plan.profile.bucket!r} stopped at {what}: {full.describe()}; RGW "
                              "cannot write until usage is below the full ratio; run the same command with "
                              "--raise-full-ratio R to finish (it resumes from its checkpoint)")

    async def _s3(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await self.threads.call(what, fn, *args, **kwargs)

    async def _admin(self, args: tuple[str, ...], *, long: bool = False, missing_ok: bool = False,
                     by_name: bool = False) -> str | None:
        """Run one radosgw-admin step. One that crashed (an assert or a fault, not a refusal and
        not a kill) is run once more before the purge fails, as a resume would run it:
        radosgw-admin 20.2.4 has aborted in the middle of `bucket rm --purge-objects`
        (docs/purge.md, "When radosgw-admin crashes"). A step that names the bucket by name
        (``by_name``: bucket rm, metadata rm bucket:B) runs again only while that name is still
        the planned bucket, as a resume checks: the crash may have freed the name for a new one.
        Returns what it printed (None for a missing bucket with ``missing_ok``)."""
        timeout = self.plan.tuning.long_timeout_s if long else None
        for again in (False, True):
            try:
                return (await self.io.rgw.run(*args, timeout=timeout)).stdout
            except NotFound:
                if not missing_ok:
                    raise
                return None
            except CommandFailed as exc:
                if exc.signal_name is None or again:
                    raise
                log.warning("purge radosgw-admin crashed, running it again", plan=self.plan.plan_id,
                            command=exc.request, crash=exc.detail)
                if by_name and not await self._still_the_planned_bucket(exc):
                    return None
        raise AssertionError("unreachable: the second run returns or raises")

    async def _still_the_planned_bucket(self, crash: CommandFailed) -> bool:
        """Before a step by name runs again: False if the bucket is gone (the crashed run got
        that far), True if the name still holds the planned bucket; a bucket of that name with
        another id stops the purge."""
        p = self.plan.profile
        now_id = await bucket_id_now(p.bucket, admin_api=self.io.admin_api, rgw=self.io.rgw)
        if now_id is None:
            return False
        if now_id != p.bucket_id:
            raise PurgeFailed(crash.request, f"crashed, and bucket {p.bucket!r} now has id {now_id} (planned "
                              f"{p.bucket_id}): re-created meanwhile; nothing more was removed")
        return True

    def _probe(self) -> Probe | None:
        """The pacing probe; none when not paced, and none on a full cluster without a raise,
        where a probe write would wait out its timeout each time (docs/purge.md, "Full cluster")."""
        freeing = self.plan.has(FreeWhileFull)
        if freeing and self.settings.paced:
            log.warning("purge pacing off: the cluster is full and probe writes would wait", plan=self.plan.plan_id)
        if not self.settings.paced or self._data is None or freeing:
            return None
        return pacing_probe(self.pacer, self.settings, self._data, self._probe_oid, self.threads,
                            lambda: self.io.s3.bucket_exists(self.plan.profile.bucket), self.time)

    @property
    def _probe_oid(self) -> str:
        return f"rgwkeeper.purge.probe.{self.plan.plan_id}"

    # -- the run ------------------------------------------------------------------------------
    async def run(self) -> PurgeReport:
        probe = self.probe = self._probe()
        checks: list[Check] = []
        try:
            if probe is not None:
                await probe.start()  # inside the try: an interrupt here still removes the probe object
            for i in range(self.state.step, len(self.plan.steps)):
                step = self.plan.steps[i]
                self.ledger.step_name = step.kind
                log.info("purge step", plan=self.plan.plan_id, bucket=self.plan.profile.bucket, step=step.kind,
                         index=i + 1, of=len(self.plan.steps))
                started = self.time.clock()
                if isinstance(step, Verify):
                    self._space_free_at = self._space_free_at or self.time.clock()
                    checks = await self.verifier.check(step, owner_stats=self._owner_stats)
                else:
                    await STEP_HANDLERS[type(step)](self, step)
                self._step_s[step.kind] = round(self.time.clock() - started, 3)
                self.state.step = i + 1
                self.state.cursor = {}
                self.ledger.save(force=True)
                self.ledger.progress()
        except BaseException as exc:
            if isinstance(exc, UsageError) and self.state.step == 0 and self.ledger.checkpoint is not None:
                # Refused by a read-only first step: nothing changed, nothing to resume.
                self.ledger.checkpoint.discard()
                raise
            await self._undo_lifecycle_rule()
            self.state.status = "failed" if isinstance(exc, Exception) else "running"
            self.state.error = str(exc)[:500]
            self.ledger.save(force=True)
            raise
        finally:
            try:
                if probe is not None:
                    await probe.stop()
                    await self._data.remove(self._probe_oid)  # type: ignore[union-attr]
            finally:
                self._close_threads()
        end = self.time.clock()
        report = PurgeReport(
            plan_id=self.plan.plan_id, bucket=self.plan.profile.bucket, bucket_id=self.plan.profile.bucket_id,
            method=self.plan.method, request=asdict(self.plan.request), resumed=self.state.resumed,
            counters=dict(self.counters), elapsed_s=round(end - self.t0, 3),
            space_free_s=round((self._space_free_at or end) - self.t0, 3), checks=checks,
            pacing=self._pacing_report(), step_s=dict(self._step_s),
            rgw_endpoints=self.io.s3.endpoints.report(since=self._s3_counts, elapsed_s=end - self.t0))
        self.state.status = "done" if report.ok else "failed"
        if not report.ok:
            self.state.error = "; ".join(f"{c.name}: {c.detail}" for c in checks if c.status == "failed")[:500]
        self.ledger.save(force=True)
        return report

    def _close_threads(self) -> None:
        self.threads.close()
        if self._board_threads is not None:
            self._board_threads.shutdown(wait=False)

    def _pacing_report(self) -> dict[str, Any]:
        before = self.probe.before_s if self.probe is not None else None
        return {"target_ms": round(self.pacer.target_s * 1000, 2),
                "before_probe_ms": round(before * 1000, 2) if before else None,
                "samples": len(self.pacer.samples),
                "max_probe_ms": round(max((s for _, s in self.pacer.samples), default=0) * 1000, 2),
                "min_concurrency_fraction": float(f"{self.pacer.min_fraction_seen:.3g}"),
                "max_objects_per_second": self.cap.rate or None,
                **({"cap_ops_in_flight": self.cap_window.most, "cap_requests_timed": self.cap_window.requests,
                    "cap_requests_slow": self.cap_window.slow, "cap_held_back_by_window": self.cap_window.held_back()}
                   if self.cap.rate > 0 and self.plan.method == "direct" else {})}

    # -- steps --------------------------------------------------------------------------------
    async def _step_fence(self, step: Fence) -> None:
        b = self.plan.profile.bucket
        await self.retry.call("set bucket quota", lambda: self.io.admin_api.set_bucket_quota(
            step.owner, b, max_objects=0, max_size_kb=0, enabled=True))
        stats = await self.retry.call("bucket stats", lambda: self.io.admin_api.bucket_stats(b))
        quota = stats.get("bucket_quota", {})
        if not (quota.get("enabled") and quota.get("max_objects") == 0):
            raise PurgeFailed("fence writes", f"bucket quota reads back as {quota}, not enabled with 0 objects")

    async def _step_free_while_full(self, step: FreeWhileFull) -> None:
        """On a full cluster: remove head-only objects with librados full-try (removals free space
        there; RGW's own writes wait), then wait a bounded time for usage to fall below the full
        ratio before the steps that need RGW to write. Still full: stop, say what is left."""
        p = self.plan.profile
        assert self.heads is not None
        freed = freed_bytes = 0
        async for entries, _ in self.lister.pages(EVERYTHING, {}):
            remove, _gone, _others = await self.heads.head_only(entries)
            rets = await self.heads.many(self.heads.data.remove_many, [o for _, o in remove])
            for (e, obj), ret in zip(remove, rets):
                check_removed(p.data_pool, obj[0], ret)
                if ret == 0:
                    freed, freed_bytes = freed + 1, freed_bytes + e["Size"]
        # Counted as deleted by delete_objects, which finds these heads gone.
        self.ledger.count(freed_while_full=freed, bytes_deleted=freed_bytes)
        self.ledger.save(force=True)
        wait_s = step.wait_s
        deadline = self.time.clock() + wait_s
        while True:
            full = await read_full_state(self.io.rados)
            if not full.full:
                log.info("purge: the cluster is below its full ratio again", bucket=p.bucket, freed=freed)
                return
            if self.time.clock() >= deadline:
                raise ClusterFull(
                    f"purge of {p.bucket!r} stopped: removed {freed:,} head-only objects ({human_bytes(freed_bytes)}) "
                    f"with librados full-try, but after {wait_s:.0f} s {full.describe()}; left: objects with tails, "
                    "the index and the bucket's metadata, which go after the fence, and the fence needs RGW to "
                    "write: run the same command with "
                    "--raise-full-ratio R to finish (it resumes from its checkpoint)")
            await self.time.sleep(min(FULL_POLL_S, max(0.0, deadline - self.time.clock())))

    async def _step_drop_lifecycle(self, step: DropLifecycle) -> None:
        b = self.plan.profile.bucket
        await self._s3("DeleteBucketLifecycle", self.io.s3.delete_lifecycle, b)
        if await self._s3("GetBucketLifecycleConfiguration", self.io.s3.get_lifecycle, b):
            raise PurgeFailed(f"DeleteBucketLifecycle {b}", "the bucket still has lifecycle rules")

    async def _step_abort_uploads(self, step: AbortUploads) -> None:
        b = self.plan.profile.bucket
        await self.s3_deleter.abort_uploads(await self.lister.uploads(step.scope), self._s3_limiter())
        left = await self.lister.uploads(step.scope)
        if left:
            raise PurgeFailed(f"AbortMultipartUpload {b}", f"{len(left)} uploads still listed after aborting them")

    # The main loop: list once, page by page (the next page is fetched while this one is
    # worked on), delete, and checkpoint each page once it and every page before it are done.
    async def _step_delete_objects(self, step: DeleteObjects, *, sweep: bool = False) -> None:
        if self.board is not None and not step.versions and not sweep:
            return await self._delete_by_items(step)
        limiter = self._s3_limiter()
        still = self._still_matching(step.scope) if step.recheck else None
        page_slots = asyncio.Semaphore(self._pages_in_flight())
        pending: deque[tuple[dict[str, Any], list[asyncio.Task[None]]]] = deque()
        cursor = self.state.cursor if not sweep else {}
        lister: Lister | IndexLister = self.lister
        if (self.index_lister is not None and step.strategy == "direct" and not step.versions and not sweep
                and IndexLister.fresh(cursor, len(self.index_lister.shards))):
            lister = self.index_lister  # the sweep lists through S3: another path to the same keys
        try:
            async for entries, resume_at in lister.pages(step.scope, cursor, versions=step.versions,
                                                         filtered=step.recheck):
                entries = [e for e in entries if step.scope.matches(e)]
                tasks = []
                if step.strategy == "direct":
                    await page_slots.acquire()
                    assert self.heads is not None
                    tasks.append(asyncio.create_task(self._direct_page(entries, page_slots, limiter, sweep,
                                                                       self.heads, self.s3_deleter)))
                else:
                    for chunk in chunks(entries, self._batch_keys()):
                        tasks.append(await self.s3_deleter.start(chunk, limiter, still))
                pending.append((resume_at, tasks))
                await self._settle(pending, block=False, done=None if sweep else self._done_through)
            await self._settle(pending, block=True, done=None if sweep else self._done_through)
        finally:
            for _, tasks in pending:
                for t in tasks:
                    t.cancel()
            await asyncio.gather(*(t for _, ts in pending for t in ts), return_exceptions=True)

    def items_at_once(self) -> int:
        """Work items this process runs at once: ``workers``, or one under a cap (items_at_once)."""
        return items_at_once(self.workers, self.cap.rate)

    def _pages_in_flight(self) -> int:
        """Pages of head work at once. Unpaced, up to 3 overlap (one stats while another removes).
        Under a cap, one: the cap sets the pace anyway, and pages worked side by side under it
        end together, so their next listings went out at once, a burst ingest noticed
        (docs/purge.md, "Listings in bursts")."""
        return 1 if self.cap.rate > 0 else PAGES_IN_FLIGHT

    async def _direct_page(self, entries: list[Entry], page_slots: asyncio.Semaphore, limiter: Limiter,
                           sweep: bool, heads: HeadDeleter, s3_deleter: S3Deleter) -> None:
        try:
            others = await heads.remove(entries, sweep=sweep)
        finally:
            page_slots.release()
        batches = []
        for chunk in chunks(others, self._batch_keys()):
            batches.append(await s3_deleter.start(chunk, limiter))
        await asyncio.gather(*batches)

    async def _s3_page(self, entries: list[Entry], page_slots: asyncio.Semaphore, limiter: Limiter,
                       s3_deleter: S3Deleter, still: Callable[[Entry], bool] | None) -> None:
        try:
            batches = [await s3_deleter.start(chunk, limiter, still) for chunk in chunks(entries, self._batch_keys())]
        finally:
            page_slots.release()
        await asyncio.gather(*batches)

    async def _done_through(self, resume_at: dict[str, Any]) -> None:
        self.ledger.done_through(resume_at)

    async def _settle(self, pending: deque[tuple[dict[str, Any], list[asyncio.Task[None]]]], *, block: bool,
                      done: Callable[[dict[str, Any]], Awaitable[None]] | None) -> None:
        """Pages whose work is finished, oldest first: each one's cursor goes to ``done`` (the
        checkpoint, or the work item's record), never past a page still in flight."""
        while pending:
            resume_at, tasks = pending[0]
            if block:
                await asyncio.gather(*tasks)
            elif not all(t.done() for t in tasks):
                return
            for t in tasks:
                t.result()  # a failed batch stops the purge here, before its page is checkpointed
            pending.popleft()
            if done is not None:
                await done(resume_at)
            self.ledger.progress()

    # -- work items (purge.board): one per index shard, taken under a lease -------------------
    ITEMS_KEY = "counters_before_items"

    async def _board(self, fn: Callable[..., _T], *args: Any) -> _T:
        """A board call (blocking RADOS) on a thread, retried through an outage by the run's policy."""
        return await self.retry.call(f"work items {getattr(fn, '__name__', '')}", lambda: self._board_once(fn, *args))

    async def _board_once(self, fn: Callable[..., _T], *args: Any) -> _T:
        return await asyncio.get_running_loop().run_in_executor(self._board_threads, functools.partial(fn, *args))

    async def _delete_by_items(self, step: DeleteObjects) -> None:
        """Publish the items (kept as they are on a resume), work them with this run's workers
        until every item is done (workers joined from other nodes take some), then count what all
        of them did: the drop's count check needs every worker's removals."""
        assert self.board is not None
        p = self.plan.profile
        if self.ITEMS_KEY not in self.state.memo:
            self.state.memo[self.ITEMS_KEY] = dict(self.counters)
            self.ledger.save(force=True)
        before = self.state.memo[self.ITEMS_KEY]
        spec = {"plan_id": self.plan.plan_id, "plan": self.plan.to_dict(), "created": time.time(),
                "lease_s": self.board.lease_s}
        # A resumed run may hold another cap or lease than the first: joins follow this run's.
        run = {"lease_s": self.board.lease_s, "paced": self.settings.paced, "rate_cap": self.cap.rate}
        created = await self._board(functools.partial(self.board.publish, spec, list(p.index_shards), run,
                                                      cutting=self.plan.tuning.cuts_shards(p)
                                                      and self.cap.rate <= 0))  # nor if only this run is capped
        log.info("purge work items", plan=self.plan.plan_id, bucket=p.bucket, items=len(p.index_shards),
                 created=created, workers=self.items_at_once(), board=self.board.oid)
        await self.run_items(step, counted_from=before)
        snap = await self._board(self.board.read)
        if not snap.done:  # the workers only return once every item is done, or others hold the rest
            raise PurgeFailed(f"work items {self.board.oid}", "not every item is done; run the purge again")
        self.counters.clear()
        self.counters.update(_added(before, snap.counters()))

    async def run_items(self, step: DeleteObjects, *, counted_from: dict[str, int] | None = None) -> None:
        """Run ``self.workers`` workers until every item is done. ``counted_from``: show progress
        as these counters plus every item's (the purge that owns the items); without it, this
        process's own work (a joined worker)."""
        self._count_own = counted_from is None
        workers = [asyncio.ensure_future(self._worker(step, w)) for w in range(self.items_at_once())]
        watcher = asyncio.ensure_future(self._watch_items(counted_from)) if counted_from is not None else None
        try:
            await _first_failure(workers)
        finally:
            for t in [*workers, *([watcher] if watcher else [])]:
                t.cancel()
            await asyncio.gather(*workers, *([watcher] if watcher else []), return_exceptions=True)

    async def _watch_items(self, before: dict[str, int]) -> None:
        assert self.board is not None
        # A read of every item each second is cheap for tens of shards; thousands get a slower view.
        interval = max(ITEMS_POLL_S, len(self.plan.profile.index_shards) / 2000)
        while True:
            await self.time.sleep(interval)
            try:
                snap = await self._board_once(self.board.read)
            except (CephError, UsageError) as exc:  # progress only: the workers report what matters
                log.debug("purge items not read for progress", error=str(exc)[:200])
                continue
            self.counters.clear()
            self.counters.update(_added(before, snap.counters()))
            self.ledger.progress()

    async def _worker(self, step: DeleteObjects, w: int) -> None:
        """Take items until none is left; an item another worker holds is waited for (its lease
        may run out: then it is taken over here)."""
        assert self.board is not None
        board = self.board
        while True:
            try:
                lease = await self._board(board.take)
                snap = await self._board(board.read) if lease is None else None
            except NoSuchJob:
                if self._count_own:
                    return  # joined: the purge finished, checked the end state and removed its items
                raise
            if snap is not None:
                left = [i.n for i in snap.items if i.state != "done"]
                if any(i.cutting for i in snap.items if i.state != "done"):
                    # A huge shard's owner is still cutting ranges off it: more items may come.
                    await self.time.sleep(ITEMS_POLL_S)
                    continue
                if all(n in board.holding for n in left):
                    return  # done, or the rest is this process's other workers'
                try:
                    await self._wait_for(left)
                except NoSuchJob:
                    if self._count_own:
                        return
                    raise
                continue
            assert lease is not None
            log.info("purge item taken", plan=self.plan.plan_id, item=lease.item.n, shard=lease.item.shard,
                     worker=w, takes=lease.item.takes, cursor=lease.item.cursor)
            try:
                await self._run_item(step, lease)
            except LeaseLost as exc:
                board.let_go(lease)
                log.warning("purge item lost: another worker goes on with it", plan=self.plan.plan_id,
                            item=lease.item.n, why=exc.detail)
                continue
            except BaseException:
                await asyncio.shield(self._board_once(board.release, lease))  # another may go on at once
                raise

    async def _wait_for(self, left: list[int]) -> None:
        """Items another process holds: watch those few every ITEMS_POLL_S until they are done
        (or this process's own), and at most a third of a lease, when a dead holder's lease may
        have run out and the next take can take its item over."""
        assert self.board is not None
        board = self.board
        waited = 0.0
        while waited < board.lease_s / RENEWALS_PER_LEASE:
            await self.time.sleep(ITEMS_POLL_S)
            waited += ITEMS_POLL_S
            left = await self._board(board.left, left)
            if all(n in board.holding for n in left):
                return

    async def _run_item(self, step: DeleteObjects, lease: Lease) -> None:
        """One shard listed and purged page by page, each page recorded in the item (cursor and
        that page's counters, in one conditional write) once it and every page before it are done."""
        assert self.board is not None and (step.strategy == "s3" or self._data is not None)
        board, item, p = self.board, lease.item, self.plan.profile
        still = self._still_matching(step.scope) if step.recheck else None
        lister = IndexLister(self.io.bulk(p.index_pool), [item.shard], self.threads, page_size=self._page_size,
                             last=item.last)
        limiter, page_slots = self._item_limiter, self._item_pages
        pending: deque[tuple[dict[str, Any], list[asyncio.Task[None]]]] = deque()

        async def record(page: dict[str, Any]) -> None:
            counted = page["ledger"].counters
            for k, v in counted.items():
                item.counters[k] = item.counters.get(k, 0) + v
            if self._count_own:
                self.ledger.count(**counted)
            item.cursor = {"after": page["at"]["shards"][0]}
            await self._board(board.record, lease)
            log.debug("purge item recorded", item=item.n)  # bench.timeline places it in its second

        async def work() -> None:
            if item.cutting:
                await self._cut(lease, step.scope)
            cursor = {"shards": [item.cursor["after"]]} if item.cursor else {}
            try:
                async for entries, resume_at in lister.pages(step.scope, cursor, filtered=step.recheck):
                    # Each page counts apart: the item records a page's counts with its cursor, so a
                    # worker that takes the item over counts nothing twice.
                    ledger = Ledger(State(plan={}), None, interval_s=0, clock=self.time.clock)
                    s3_deleter = S3Deleter(self.io.s3, p.bucket, self.threads, ledger, self.cap,
                                           recheck_slots=self._item_rechecks)
                    matching = [e for e in entries if step.scope.matches(e)]
                    await page_slots.acquire()
                    if step.strategy == "direct":
                        heads = self._head_deleter(ledger)
                        assert heads is not None
                        task = asyncio.create_task(self._direct_page(matching, page_slots, limiter, False, heads,
                                                                     s3_deleter))
                    else:
                        task = asyncio.create_task(self._s3_page(matching, page_slots, limiter, s3_deleter, still))
                    pending.append(({"at": resume_at, "ledger": ledger}, [task]))
                    await self._settle(pending, block=False, done=record)
                await self._settle(pending, block=True, done=record)
            finally:
                for _, tasks in pending:
                    for t in tasks:
                        t.cancel()
                await asyncio.gather(*(t for _, ts in pending for t in ts), return_exceptions=True)

        job = asyncio.ensure_future(work())
        keeper = asyncio.ensure_future(self._keep(lease))
        try:
            await asyncio.wait([job, keeper], return_when=asyncio.FIRST_COMPLETED)
            if not job.done():
                job.cancel()
                await asyncio.gather(job, return_exceptions=True)
                keeper.result()  # raises LeaseLost
            job.result()
        finally:
            # Cancelled from outside (an interrupt, another worker's failure): the item's work
            # stops before its lease is released, never goes on beside the next owner.
            for t in (job, keeper):
                t.cancel()
            await asyncio.gather(job, keeper, return_exceptions=True)
        await self._board(board.finish, lease)
        log.info("purge item done", plan=self.plan.plan_id, item=item.n, counters=item.counters)

    async def _cut(self, lease: Lease, scope: Scope) -> None:
        """A huge shard's owner lists its keys ahead (keys only) and cuts a range off every
        ``range_entries`` keys, publishing it as an item other workers take, until no more than
        that is left: those the owner purges itself. Each cut moves the item's cursor past the
        range in the same compared write, so an owner that takes the item over goes on cutting
        where the last one stopped (docs/purge.md, "Key ranges")."""
        assert self.board is not None
        item, size = lease.item, self.plan.tuning.range_size(self.plan.profile)
        at = item.cursor.get("after") or ""
        counted, edge = 0, None
        async for keys in key_pages(self.io.bulk(self.plan.profile.index_pool), item.shard, at, self.threads,
                                    prefix=scope.prefix or "", page_size=self.plan.tuning.list_page_size):
            for key in keys:
                if edge is not None:  # a key follows the range's last one: the range is cut off
                    rng = await self._board(self.board.cut, lease, at, edge)
                    log.info("purge key range cut", plan=self.plan.plan_id, item=item.n, range=rng.n,
                             after=at, last=edge)
                    at, counted, edge = edge, 0, None
                if key is None:
                    continue  # cls_rgw's special entries: not objects, and no key to cut at
                counted += 1
                if counted >= size and edge is None and key > at:
                    edge = key  # never "" or at the cursor: a key python-rados cut at a NUL byte
        item.cutting = False
        await self._board(self.board.record, lease)

    async def _keep(self, lease: Lease) -> None:
        assert self.board is not None
        await keep_lease(self.board, lease, sleep=self.time.sleep, call=self._board_once)

    def _still_matching(self, scope: Scope) -> Callable[[Entry], bool]:
        """A filtered purge's re-check, just before the delete: each key that can be written
        again in place (no version id, or "null") is HEADed; one that is gone or no longer
        matches (written again since the listing: newer, another size) is kept."""
        b, s3 = self.plan.profile.bucket, self.io.s3

        def still(e: Entry) -> bool:
            if e.get("DeleteMarker") or e.get("VersionId") not in (None, "null"):
                return True  # a listed version id names immutable data (a marker has none to HEAD)
            head = s3.head_object(b, e["Key"], e.get("VersionId"))
            # The object as it is now decides, not its ETag: one written again that still
            # matches (a size filter) is what the purge was asked to delete; the verify step
            # would find it left behind otherwise.
            return head is not None and scope.matches(
                {"LastModified": head["LastModified"], "Size": head.get("ContentLength")})

        return still

    async def _step_gc_process(self, step: GcProcess) -> None:
        await self._gc_if_the_bucket_has_entries(step.gc)
        self._space_free_at = self.time.clock()

    async def _index_stats(self) -> dict[str, Any]:
        """The bucket's stats for the count check before the drop, through the admin API: the
        same document as `radosgw-admin bucket stats` (RGW reads the index shard headers), one
        HTTP request instead of a radosgw-admin process (docs/purge.md, "What limits the direct
        path"). NotFound only when radosgw-admin confirms it: "gone" skips the drop's checks."""
        async def read() -> dict[str, Any]:
            return (await confirmed_bucket_stats(self.plan.profile.bucket, admin_api=self.io.admin_api,
                                                 rgw=self.io.rgw))[0]

        return await self.retry.call("bucket stats", read)

    async def _step_drop_bucket(self, step: DropBucket) -> None:
        p = self.plan.profile
        try:
            stats = await self._index_stats()
        except NotFound:
            stats = None  # an earlier run got past removing the index: finish the removal
        if stats is not None:
            if stats.get("id") != p.bucket_id:
                raise PurgeFailed(f"bucket {p.bucket}", f"its id is now {stats.get('id')}, not {p.bucket_id}: "
                                  "it was re-created; nothing more is removed")
            usage = stats.get("usage", {})
            in_index = int(usage.get("rgw.main", {}).get("num_objects", 0))
            uploads = int(usage.get("rgw.multimeta", {}).get("num_objects", 0))
            if in_index != self.counters.get("index_left", 0) or uploads:
                # The index holds entries we did not account for (an object written before the
                # fence took effect, or stats that drifted): sweep the whole index once more.
                log.warning("purge sweep", bucket=p.bucket, in_index=in_index,
                            expected=self.counters.get("index_left", 0), uploads=uploads)
                self.counters["index_left"] = 0
                if uploads:
                    await self._step_abort_uploads(self.plan.step(AbortUploads))
                await self._step_delete_objects(self.plan.step(DeleteObjects), sweep=True)
                self.ledger.count(sweeps=1)
                stats = await self._index_stats()
                usage = stats.get("usage", {})
                in_index = int(usage.get("rgw.main", {}).get("num_objects", 0))
                uploads = int(usage.get("rgw.multimeta", {}).get("num_objects", 0))
                if in_index != self.counters.get("index_left", 0) or uploads:
                    # Never drop an index that may still point at data: stop, keep the checkpoint.
                    raise PurgeFailed(f"drop bucket {p.bucket}", f"after a sweep the index still counts {in_index} "
                                      f"objects and {uploads} uploads, but {self.counters.get('index_left', 0)} "
                                      "heads were removed; the index was left in place")
        if step.through_rgw:
            return await self._drop_through_rgw(step, bucket_gone=stats is None)
        assert step.entry_rm is not None and step.instance_rm is not None  # DropBucket checks it
        # GC (tails of objects deleted through S3, parts of aborted uploads) is independent of
        # the bucket's metadata: run it alongside.
        gc_task = await self._start_gc(step.gc)
        try:
            shards = [(o, "") for o in p.index_shards]
            rets = await self.io.bulk(p.index_pool).remove_many(shards, window=self._drop_window())
            for (o, _), r in zip(shards, rets):
                check_removed(p.index_pool, o, r)
            await asyncio.gather(self._admin(step.entry_rm, missing_ok=True, by_name=True),
                                 self._admin(step.instance_rm, missing_ok=True))
            await self._sync_owner_stats(step.stats_sync)
        finally:
            await asyncio.gather(gc_task, return_exceptions=True)
        gc_task.result()
        self._space_free_at = self.time.clock()

    def _drop_window(self) -> int:
        """Index shards the drop works on at once: under a cap one at a time (its drop's second
        was a capped purge's worst: docs/purge.md, "What each second held")."""
        return 1 if self.cap.rate > 0 else DROP_SHARDS_AT_ONCE

    async def _start_gc(self, gc: Argv) -> asyncio.Future[None]:
        """The drop's GC check (and run, when needed), beside the drop's other work; under a cap
        before it, so its radosgw-admin process does not start with the drop's others, and its
        failure is raised at once: the index is not touched (beside the drop's work, its error
        is raised where the caller reads the task's result)."""
        task = asyncio.ensure_future(self._gc_if_the_bucket_has_entries(gc))
        if self.cap.rate > 0:
            await asyncio.gather(task, return_exceptions=True)
            task.result()
        return task

    async def _sync_owner_stats(self, args: Argv, *, long: bool = False) -> None:
        """The owner's stats synced after the drop, through the admin API (one request, not a
        radosgw-admin process beside the drop's GC check: docs/purge.md, "The owner's stats");
        with ``args`` (``user stats --sync-stats``) when it gives no clear answer. Either answer
        is the owner's stats as the sync left them: the read-back takes them from here rather
        than start another radosgw-admin process (docs/purge.md, "The end state is read back")."""
        owner = self.plan.profile.owner
        crash_point("owner-sync")

        async def through_api(api: AdminApi) -> dict[str, Any]:
            return {**await api.sync_user_stats(owner), "synced_by": SYNCED_BY_ADMIN_API}

        async def through_cli() -> dict[str, Any] | None:
            # radosgw-admin is the reference for whether the owner exists, read before its sync:
            # Pacific's `user stats --sync-stats` of a missing user exits 0 and records stats for
            # it (docs/purge.md, "The owner's stats").
            await self.io.rgw.user_buckets(owner)
            return owner_stats_of(await self._admin(args, long=long))

        try:
            self._owner_stats, _ = await admin_first(self.io.admin_api, through_api, through_cli, gone="NoSuchUser",
                                                     what=f"sync the stats of {owner}", confirm_gone=True)
        except NotFound as exc:
            if exc.detail != "NoSuchUser":
                raise
            # `bucket list --uid` finds no such user: removed once the bucket was gone (a user
            # who owns a bucket cannot be), or gone before. Nothing to sync; the read-back says
            # so, and neither this run nor a resume fails on it.
            log.warning("purge owner gone", plan=self.plan.plan_id, bucket=self.plan.profile.bucket, owner=owner)
            self._owner_stats = {OWNER_GONE: True}

    async def _gc_if_the_bucket_has_entries(self, gc: Argv) -> None:
        """Every GC run of a purge (the direct drop's, and the GC step after S3 deletes, bucket rm
        or lifecycle). `gc process --include-all` processes every bucket's entries,
        also those not yet due (rgw_gc_obj_min_wait keeps tails for readers still streaming an
        object deleted or overwritten meanwhile), so it runs only when this purge queued tails (S3
        deletes, aborted uploads) or GC already holds objects of this bucket; removing head-only
        objects directly queues nothing (docs/purge.md, "GC at the drop")."""
        if not (self.counters.get("via_s3", 0) or self.counters.get("uploads_aborted", 0)):
            read = await gc_entries(self.plan.profile, rgw=self.io.rgw, bulk=self.io.bulk)
            if not read.entries:
                log.info("purge gc not run", plan=self.plan.plan_id, bucket=self.plan.profile.bucket,
                         why="nothing went to GC and no GC entry holds objects of the bucket", gc_entries=read.total)
                self.ledger.count(gc_not_run=1)
                return
        await self._admin(gc, long=True)

    async def _drop_through_rgw(self, step: DropBucket, *, bucket_gone: bool) -> None:
        """The drop where `metadata rm` keeps the bucket instance (plan.DIRECT_DROP): the index,
        checked above to hold only entries of removed heads, is emptied in place and RGW deletes
        the empty bucket. ``bucket_gone``: an earlier run got past DeleteBucket."""
        p = self.plan.profile
        gc_task = await self._start_gc(step.gc)
        try:
            if not bucket_gone:
                index = self.io.bulk(p.index_pool)
                shards = [(o, "") for o in p.index_shards]
                # Emptying a shard that does not exist would create it: check they all do first.
                sizes = await index.stat_many(shards, window=self._drop_window())
                missing = [o for (o, _), size in zip(shards, sizes) if size is None]
                if missing:
                    raise PurgeFailed(f"{p.index_pool}/{missing[0]}", f"{len(missing)} of {len(shards)} index "
                                      "shards are not where the plan expects them; the index was left in place")
                rets = await index.empty_index_many(shards, window=self._drop_window())
                bad = [(o, r) for (o, _), r in zip(shards, rets) if r != 0]
                if bad:
                    raise PurgeFailed(f"{p.index_pool}/{bad[0][0]} empty", errno.errorcode.get(-bad[0][1], str(bad[0][1])))
                try:
                    await self._s3("DeleteBucket", self.io.s3.delete_bucket, p.bucket)
                except NotFound:
                    pass  # deleted by an earlier run
            await self._sync_owner_stats(step.stats_sync)
        finally:
            await asyncio.gather(gc_task, return_exceptions=True)
        gc_task.result()
        self._space_free_at = self.time.clock()

    async def _step_delete_bucket(self, step: DeleteBucket) -> None:
        b = self.plan.profile.bucket
        for attempt in range(2):
            try:
                await self._s3("DeleteBucket", self.io.s3.delete_bucket, b)
            except NotFound:
                pass  # deleted by an earlier run
            except CephError as exc:
                if exc.detail != "BucketNotEmpty" or attempt:
                    raise
                # Something was written after the listing (before the fence): list again.
                log.warning("purge bucket not empty, listing again", bucket=b)
                await self._step_delete_objects(self.plan.step(DeleteObjects), sweep=True)
                continue
            await asyncio.gather(self._sync_owner_stats(step.stats_sync, long=True), self._admin(step.gc, long=True))
            self._space_free_at = self.time.clock()
            return

    async def _step_prove_head_only(self, step: ProveHeadOnly) -> None:
        p = self.plan.profile
        assert self._data is not None
        if await self.lister.uploads(step.scope):
            raise UsageError(f"--bypass-gc refused: {p.bucket!r} has incomplete multipart uploads, whose parts "
                             "are tails (tracker 73348); use --method auto; nothing was changed")
        pages = self.lister.pages(EVERYTHING, {})
        async for entries, _ in pages:
            objs = [head_oid(p.marker, e["Key"]) for e in entries]
            sizes = await self._data.stat_many(objs, window=self.plan.tuning.rados_ops_in_flight)
            for e, size in zip(entries, sizes):
                if size != e["Size"] or "-" in e.get("ETag", "").strip('"'):
                    await pages.aclose()
                    raise UsageError(f"--bypass-gc refused: object {e['Key'][:80]!r} of {p.bucket!r} has tail "
                                     "objects, which --bypass-gc would delete even if copies in other buckets "
                                     "share them (tracker 73348); use --method auto; nothing was changed")

    async def _step_admin_bucket_rm(self, step: AdminBucketRm) -> None:
        await self._while_polling(self._admin(step.bucket_rm, long=True, by_name=True))
        self._space_free_at = self.time.clock()
        await self._sync_owner_stats(step.stats_sync)

    #: Seconds between progress reads while radosgw-admin works (bucket rm, lc process).
    POLL_S = 2.0

    async def _while_polling(self, work: Awaitable[_T]) -> _T:
        """Run radosgw-admin work, showing progress from the bucket's object count meanwhile.
        The count comes from the admin API: a radosgw-admin process every poll cost ingest
        more than the stock command it watched (docs/purge.md, "`--impact normal`, and a cap's
        work spread finer")."""
        p = self.plan.profile
        task = asyncio.ensure_future(work)
        try:
            while not task.done():
                await asyncio.wait([task], timeout=self.POLL_S)
                if task.done():
                    break
                try:
                    stats = await self.io.admin_api.bucket_stats(p.bucket)
                    left = int(stats.get("usage", {}).get("rgw.main", {}).get("num_objects", 0))
                    size_left = int(stats.get("usage", {}).get("rgw.main", {}).get("size", 0))
                except CephError:
                    continue
                self.counters["objects_deleted"] = max(0, p.num_objects - left)
                self.counters["bytes_deleted"] = max(0, p.size_bytes - size_left)
                self.ledger.progress()
        finally:
            if not task.done():
                # Interrupted: stop the radosgw-admin run too (its runner kills the process) before
                # anything is undone, e.g. an lc process still expiring under the purge's rule.
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        result = await task
        try:
            stats = await self.io.rgw.bucket_stats(p.bucket)
            main = stats.get("usage", {}).get("rgw.main", {})
            self.counters["objects_deleted"] = max(0, p.num_objects - int(main.get("num_objects", 0)))
            self.counters["bytes_deleted"] = max(0, p.size_bytes - int(main.get("size", 0)))
        except NotFound:
            self.counters["objects_deleted"] = p.num_objects
            self.counters["bytes_deleted"] = p.size_bytes
        return result

    async def _step_lifecycle_apply(self, step: LifecycleApply) -> None:
        b = self.plan.profile.bucket
        r = self.plan.request
        if r.larger_than is not None or r.smaller_than is not None:
            # A plan saved before the planner refused this (2026-11-29): its rule is a prefix and an
            # age only, and would expire every object under the prefix whatever its size.
            raise UsageError("this saved lifecycle purge has a size filter its rule does not carry (it would "
                             "expire every object under the prefix): purge again with --method s3")
        if "previous_rules" not in self.state.memo:
            previous = await self._s3("GetBucketLifecycleConfiguration", self.io.s3.get_lifecycle, b)
            self.state.memo["previous_rules"] = [r for r in previous if not str(r.get("ID", "")).startswith(
                f"{lc.RULE_ID_PREFIX}purge-")]
            self.ledger.save(force=True)  # before the change: a crash must still be able to restore them
        merged = lc.merge(self.state.memo["previous_rules"], list(step.rules))
        await self._s3("PutBucketLifecycleConfiguration", self.io.s3.put_lifecycle, b, merged)
        got = await self._s3("GetBucketLifecycleConfiguration", self.io.s3.get_lifecycle, b)
        if not lc.same_rules(got, merged):
            raise PurgeFailed(f"PutBucketLifecycleConfiguration {b}", "the rules read back differ from those put")

    async def _step_lc_process(self, step: LcProcess) -> None:
        # lc process exits 0 even when another LC worker held the bucket: lcrun reads it back.
        await self._while_polling(lcrun.process_now(
            self.io.rgw, self.plan.profile.bucket, timeout_s=self.plan.tuning.long_timeout_s,
            busy_wait_s=self.settings.lc_busy_wait_s, poll_s=self.settings.lc_poll_s))

    async def _step_lifecycle_restore(self, step: LifecycleRestore | None = None) -> None:
        b = self.plan.profile.bucket
        if not await lcrun.put_rules_back(self._s3, self.io.s3, b, self.state.memo.get("previous_rules", [])):
            raise PurgeFailed(f"restore lifecycle of {b}", "the rules read back differ from those before the purge")

    def _lifecycle_window(self) -> tuple[int, int] | None:
        """(lifecycle_apply, lifecycle_restore) step indexes while the purge's expire-everything
        rule may be on the bucket (put, or being put, and not yet taken off), else None."""
        kinds = [type(s) for s in self.plan.steps]
        if LifecycleApply not in kinds or "previous_rules" not in self.state.memo:
            return None
        apply_i, restore_i = kinds.index(LifecycleApply), kinds.index(LifecycleRestore)
        return (apply_i, restore_i) if apply_i <= self.state.step <= restore_i else None

    async def _undo_lifecycle_rule(self) -> None:
        """On any failure or interruption between putting the purge's lifecycle rule on and
        taking it off: put the bucket's previous rules back (bounded, best effort), so RGW's
        own lifecycle does not go on expiring everything under the prefix, new objects too.
        Put back: the checkpoint goes back to the rule's step, so a re-run puts it on again and
        finishes. Not put back: one line names what to run, and the checkpoint stays where it was
        (a re-run goes on and takes the rule off at its step)."""
        window = self._lifecycle_window()
        if window is None:
            return
        apply_i, restore_i = window
        b = self.plan.profile.bucket
        try:
            async with bounded(LIFECYCLE_UNDO_TIMEOUT_S):
                await self._step_lifecycle_restore()
        except (Exception, asyncio.CancelledError) as exc:  # a second interrupt ends the attempt too
            self.state.memo["lifecycle_left_on"] = self._lifecycle_put_back_command()
            log.error(f"the purge's lifecycle rule is still on bucket {b}: RGW goes on expiring with it until the "
                      "rules are put back; run this same purge again (it finishes and puts them back), or run: "
                      f"{self.state.memo['lifecycle_left_on']}", bucket=b, plan=self.plan.plan_id,
                      error=str(exc)[:300] or type(exc).__name__)
            return
        self.state.memo.pop("lifecycle_left_on", None)
        # Failed while taking it off: it is off now, go on after that step; else put it on again.
        self.state.step = restore_i + 1 if self.state.step == restore_i else apply_i
        self.state.cursor = {}
        log.warning(f"purge stopped; the lifecycle rules bucket {b} had before were put back", bucket=b,
                    plan=self.plan.plan_id, rules=[r.get("ID") for r in self.state.memo["previous_rules"]])

    def _lifecycle_put_back_command(self) -> str:
        b = self.plan.profile.bucket
        endpoint = getattr(getattr(getattr(self.io.s3, "client", None), "meta", None), "endpoint_url", None)
        aws = ["aws", *(["--endpoint-url", endpoint] if endpoint else []), "s3api"]
        previous = self.state.memo.get("previous_rules", [])
        if previous:
            return shlex.join([*aws, "put-bucket-lifecycle-configuration", "--bucket", b, "--lifecycle-configuration",
                               json.dumps({"Rules": lc.s3_rules(previous)}, sort_keys=True, default=str)])
        return shlex.join([*aws, "delete-bucket-lifecycle", "--bucket", b])


#: Seconds between two looks at the items: the purge's progress, and a worker waiting on items
#: another process holds.
ITEMS_POLL_S = 1.0


async def keep_lease(board: Board, lease: Lease, *, sleep: Callable[[float], Awaitable[None]],
                     call: Callable[..., Awaitable[Any]]) -> None:
    """Renew ``lease`` a few times within it (``call`` runs a board call on a thread); an outage
    is ridden out while the lease is still valid on our clock, then the item's work stops
    (LeaseLost) before another can take it."""
    while True:
        await sleep(board.lease_s / RENEWALS_PER_LEASE)
        while True:
            try:
                await call(board.renew, lease)
                break
            except LeaseLost:
                raise
            except CephError as exc:
                if not board.valid(lease):
                    raise LeaseLost(f"{board.oid} {lease.item.key}", f"could not renew: {exc}") from None
                await sleep(min(1.0, board.lease_s / 10))


def _added(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {k: a.get(k, 0) + b.get(k, 0) for k in {*a, *b}}


async def _first_failure(tasks: list[asyncio.Future[None]]) -> None:
    """Wait for every task; the first to fail ends the wait with its exception."""
    pending = set(tasks)
    while pending:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_EXCEPTION)
        for t in done:
            t.result()


def batch_keys(pacer: Pacer, cap: RateCap, *, paced: bool) -> int:
    """Keys per DeleteObjects: 1000, or fewer while pacing holds the run back (one batch of
    1,000 deletes is itself a burst that ingest PUTs queue behind), and under a rate cap its
    work per request (``RateCap.chunk``)."""
    keys = 1000 if not paced else max(20, min(1000, int(1000 * pacer.fraction)))
    return cap.chunk(keys)


def s3_limiter(pacer: Pacer, batches_in_flight: int, time_: Time) -> Limiter:
    """DeleteObjects batches in flight, as many as the pacer allows of ``batches_in_flight``."""
    return Limiter(lambda: pacer.limit(batches_in_flight), share=lambda: pacer.share(batches_in_flight),
                   clock=time_.clock, sleep=time_.sleep)


def pacing_probe(pacer: Pacer, settings: Settings, data: BulkObjects, oid: str, threads: Threads,
                 head: Callable[[], Any], time_: Time) -> Probe:
    """The probe of a paced run: a 4 KiB RADOS write to ``oid`` and an S3 request (``head``)
    through RGW, timed together: the OSDs' queue and RGW's, as an ingesting client sees them (a
    RADOS probe alone misses RGW's CPU; docs/purge.md, "Resume, pacing, retries")."""

    async def write() -> None:
        await data.write_full(oid, PROBE_BYTES)
        await threads.run(head, probe=True)

    return Probe(pacer, write, absolute_s=settings.pace_write_latency_s, increase=settings.pace_latency_increase,
                 interval_s=settings.pace_probe_interval_s, clock=time_.clock, sleep=time_.sleep)


@dataclass
class JoinReport:
    """What one joined process did for a purge whose items another runs."""

    plan_id: str
    bucket: str
    workers: int
    counters: dict[str, int]
    elapsed_s: float
    items: int  # items in the purge
    items_done: int  # of them, done when this process left
    rgw_endpoints: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


async def join(plan: Plan, io: PurgeIO, board: Board, *, workers: int, settings: Settings = Settings(),
               on_progress: Callable[[Progress], None] | None = None,
               sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
               spec: dict[str, Any] | None = None) -> JoinReport:
    """Work the items of a running purge (``board``) with ``workers`` workers until every item is
    done; the purge that published them does everything else (the drop, the read-back)."""
    spec = {} if spec is None else spec
    if (plan.tuning.max_objects_per_second > 0 or spec.get("paced") or spec.get("rate_cap") or settings.paced
            or settings.max_objects_per_second > 0):
        raise UsageError(f"purge {plan.plan_id} runs under a rate cap or pacing (its own, or this node's config), "
                         "which each process holds on its own: a joined worker would go past it; nothing was changed")
    ex = PurgeExecutor(plan, io, checkpoint=None, settings=settings, on_progress=on_progress, board=board,
                       workers=workers, sleep=sleep)
    items = len(plan.profile.index_shards)
    try:
        await ex.run_items(plan.step(DeleteObjects))
        try:
            snap = await ex._board(board.read)
            items = len(snap.items)  # key ranges cut from huge shards are items too
            done = sum(1 for i in snap.items if i.state == "done")
        except NoSuchJob:
            done = items  # the purge finished meanwhile and removed its items
    finally:
        ex._close_threads()
    end = ex.time.clock()
    return JoinReport(plan_id=plan.plan_id, bucket=plan.profile.bucket, workers=workers, counters=dict(ex.counters),
                      elapsed_s=round(end - ex.t0, 3), items=items, items_done=done,
                      rgw_endpoints=io.s3.endpoints.report(since=ex._s3_counts, elapsed_s=end - ex.t0))


async def execute(plan: Plan, io: PurgeIO, *, checkpoint: Checkpoint | None, state: State | None = None,
                  settings: Settings = Settings(), on_progress: Callable[[Progress], None] | None = None,
                  board: Board | None = None, workers: int = 1) -> PurgeReport:
    """Run ``plan`` (resuming ``state`` if given) and return the read-back report. ``board``: an
    index-listed direct delete runs as work items there (purge.board), ``workers`` at once here."""
    return await PurgeExecutor(plan, io, checkpoint=checkpoint, state=state, settings=settings,
                               on_progress=on_progress, board=board, workers=workers).run()


#: Each step kind's handler; verify is run apart (it returns the end-state checks).
STEP_HANDLERS: dict[type[Step], Callable[[PurgeExecutor, Any], Awaitable[None]]] = {
    Fence: PurgeExecutor._step_fence,
    FreeWhileFull: PurgeExecutor._step_free_while_full,
    DropLifecycle: PurgeExecutor._step_drop_lifecycle,
    AbortUploads: PurgeExecutor._step_abort_uploads,
    DeleteObjects: PurgeExecutor._step_delete_objects,
    GcProcess: PurgeExecutor._step_gc_process,
    DropBucket: PurgeExecutor._step_drop_bucket,
    DeleteBucket: PurgeExecutor._step_delete_bucket,
    ProveHeadOnly: PurgeExecutor._step_prove_head_only,
    AdminBucketRm: PurgeExecutor._step_admin_bucket_rm,
    LifecycleApply: PurgeExecutor._step_lifecycle_apply,
    LcProcess: PurgeExecutor._step_lc_process,
    LifecycleRestore: PurgeExecutor._step_lifecycle_restore,
}
