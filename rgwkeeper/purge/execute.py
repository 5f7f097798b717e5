"""The purge executor: runs a Plan's steps with a checkpoint, progress and pacing, then reads
the end state back.

Every step is idempotent from its checkpoint: a listing-driven step records the last key
(or version marker) whose page is fully done, so a killed run resumes after it; heads already
removed show up as ENOENT and count as done; radosgw-admin removals of what is already gone
are accepted. Exit codes are not evidence (``bucket rm`` exits 0 for a bucket that does not
exist): every change is read back, and the last step checks the end state.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import functools
import json
import shlex
import statistics
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from dataclasses import asdict, dataclass, field
from typing import Any, AsyncIterator, Awaitable, Callable, Mapping, TypeVar

import structlog

from rgwkeeper.adapters.adminapi import AdminApi
from rgwkeeper.adapters.rados import BulkObjects, RadosAdapter
from rgwkeeper.adapters.radosgw_admin import RadosgwAdmin
from rgwkeeper.adapters.s3 import S3Adapter
from rgwkeeper.errors import CephError, CephTimeout, ClusterFull, CephUnreachable, NotFound, UsageError
from rgwkeeper.observe import read_full_state
from rgwkeeper import lifecycle as lc
from rgwkeeper.purge import lcrun
from rgwkeeper.purge.checkpoint import Checkpoint, State
from rgwkeeper.purge.layout import bucket_prefix, head_oid, is_tail, parse_refcount
from rgwkeeper.purge.pacing import MIN_SHARE, Limiter, Pacer, RateCap, probe_loop, time_probe
from rgwkeeper.purge.plan import (EVERYTHING, AbortUploads, AdminBucketRm, DeleteBucket, DeleteObjects, DropBucket,
                                  DropLifecycle, Fence, FreeWhileFull, GcProcess, LcProcess, LifecycleApply,
                                  LifecycleRestore, Plan, ProveHeadOnly, Scope, Step, Verify, rate_cap_for)
from rgwkeeper.units import MAX_DURATION_S, check_number, human_bytes

log = structlog.get_logger("rgwkeeper.purge")
# A paced purge starts at 1% of its concurrency (2 of 256 librados ops; S3: one batch busy 8%
# of the time) and grows while probes stay fast: starting higher hurts ingest before the first
# probes come back slow (docs/purge.md, "Resume, pacing, retries").
PACED_START_FRACTION = 0.01
PACED_LIST_PAGE = 200
CAPPED_PAGE_S = 5  # under a rate cap a listing page holds about this many seconds of deletes
CAPPED_PAGE_MIN = 10
RADOS_CHUNK_WINDOWS = 8  # a paced librados step works in chunks of 8 windows, then may pause
BEFORE_PROBES, BEFORE_PROBE_GAP_S = 9, 0.1  # a paced purge's first probes, before any change
MIN_TARGET_S = 1e-4
RECHECK_IN_FLIGHT = 16  # HEADs in flight (all batches together) when a filtered purge re-checks its keys
# Putting a lifecycle purge's previous rules back after a failure or an interrupt: long enough
# for a few S3 round trips, short enough that a stopped purge does not hang.
LIFECYCLE_UNDO_TIMEOUT_S = 30.0
_T = TypeVar("_T")

PROBE_BYTES = b"\0" * 4096
FULL_POLL_S = 2.0  # the mon clears OSD_FULL a few seconds after usage falls (OSDs report every 5 s)


class PurgeFailed(CephError):
    """A step failed or the end state is not what it must be; the checkpoint says where."""


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
    full_wait_s: float = 60.0  # a full cluster: how long to wait for it to fall below full after freeing

    def __post_init__(self) -> None:
        # For callers of the Python API (the config's bounds hold these already): a NaN wait or
        # retry time passes every comparison.
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is not None:
                check_number(value, f.name, lo=0, hi=MAX_DURATION_S if f.name.endswith("_s") else None)

    @property
    def paced(self) -> bool:
        return self.pace_write_latency_s > 0 or self.pace_latency_increase > 0


@dataclass
class Progress:
    step: str
    objects_done: int
    bytes_done: int
    objects_total: int
    bytes_total: int


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok, failed, skipped, warning
    detail: str


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

    @property
    def ok(self) -> bool:
        return all(c.status != "failed" for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ok"] = self.ok
        deleted = self.counters.get("objects_deleted", 0)
        d["objects_per_s"] = round(deleted / self.space_free_s, 1) if self.space_free_s > 0 else None
        return d


def _chunks(items: list[Any], n: int) -> list[list[Any]]:
    return [items[i:i + n] for i in range(0, len(items), n)]


class PurgeExecutor:
    def __init__(self, plan: Plan, io: PurgeIO, *, checkpoint: Checkpoint | None, state: State | None = None,
                 settings: Settings = Settings(), on_progress: Callable[[Progress], None] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.plan = plan
        self.io = io
        self.checkpoint = checkpoint
        self.state = state or State(plan=plan.to_dict())
        self.settings = settings
        self.on_progress = on_progress or (lambda p: None)
        self.clock = clock
        self.pacer = Pacer(settings.pace_write_latency_s, fraction=PACED_START_FRACTION if settings.paced else 1.0)
        cap = rate_cap_for(plan.method, settings.max_objects_per_second)
        if settings.max_objects_per_second > 0 and not cap:
            log.warning("purge rate cap does not apply to this method; it runs at RGW's own pace",
                        method=plan.method, max_objects_per_second=settings.max_objects_per_second)
        self._cap = RateCap(cap, clock=clock, sleep=sleep)
        self._sleep = sleep
        self._before_probe_s: float | None = None
        self.t0 = clock()
        self._last_save = 0.0
        self._step_name = ""
        self._space_free_at: float | None = None
        self._step_s: dict[str, float] = {}
        p = plan.profile
        self._data = io.bulk(p.data_pool) if p.data_pool else None
        n = plan.tuning.rados_ops_in_flight
        self._rados_limiter = Limiter(lambda: 1, share=lambda: self.pacer.duty(n), clock=clock, sleep=sleep)
        # The fraction stops where the widest path this method uses is at MIN_SHARE: halving
        # further slows nothing and only delays recovery (S3 at 8 batches floors at 0.00625).
        widest = n if plan.method == "direct" else plan.tuning.s3_batches_in_flight
        self.pacer.min_fraction = min(self.pacer.fraction, MIN_SHARE / widest)
        # Blocking S3 calls run on the purge's own threads, sized for its widest fan-out:
        # asyncio's default pool has 6 on 2 cores, so 16 re-check HEADs would queue there and
        # the pacing probe behind them (timing rgwkeeper's queue, not the cluster's). The probe
        # has a thread of its own.
        self._pool = ThreadPoolExecutor(plan.tuning.s3_batches_in_flight + RECHECK_IN_FLIGHT + 2,
                                        thread_name_prefix="rgwkeeper-purge")
        self._probe_pool = ThreadPoolExecutor(1, thread_name_prefix="rgwkeeper-purge-probe")
        self._recheck_slots = asyncio.Semaphore(RECHECK_IN_FLIGHT)  # for the whole purge, not per batch

    async def _thread(self, fn: Callable[..., _T], *args: Any, probe: bool = False, **kwargs: Any) -> _T:
        pool = self._probe_pool if probe else self._pool
        return await asyncio.get_running_loop().run_in_executor(pool, functools.partial(fn, *args, **kwargs))

    def _batch_keys(self) -> int:
        """Keys per DeleteObjects: 1000, or fewer while pacing holds the purge back (one batch of
        1,000 deletes is itself a burst that ingest PUTs queue behind)."""
        keys = 1000 if not self.settings.paced else max(20, min(1000, int(1000 * self.pacer.fraction)))
        return self._cap.chunk(keys)

    def _s3_limiter(self) -> Limiter:
        n = self.plan.tuning.s3_batches_in_flight
        return Limiter(lambda: self.pacer.limit(n), share=lambda: self.pacer.share(n), clock=self.clock,
                       sleep=self._sleep)

    async def _rados_many(self, op: Callable[..., Awaitable[list[Any]]],
                          objs: list[tuple[str, str]]) -> list[Any]:
        """``op(objs, window=...)`` (stat_many, remove_many) at the configured window, or, when
        paced, in chunks at the pacer's window with its pauses between chunks: one page of 1,000
        removals at a window of 5 ran at full speed on one core (PUT p99 20 -> 85 ms)."""
        n = self.plan.tuning.rados_ops_in_flight
        if not self.settings.paced:
            return await op(objs, window=n)
        out: list[Any] = []
        while len(out) < len(objs):
            window = self.pacer.limit(n)
            async with self._rados_limiter:  # one chunk at a time across the pages in flight
                out.extend(await op(objs[len(out):len(out) + window * RADOS_CHUNK_WINDOWS], window=window))
        return out

    # -- bookkeeping ------------------------------------------------------------------------
    @property
    def counters(self) -> dict[str, int]:
        return self.state.counters

    def _count(self, **inc: int) -> None:
        for k, v in inc.items():
            self.counters[k] = self.counters.get(k, 0) + v

    def _save(self, force: bool = False) -> None:
        now = self.clock()
        if self.checkpoint is not None and (force or now - self._last_save >= self.settings.checkpoint_interval_s):
            self.checkpoint.save(self.state)
            self._last_save = now

    def _progress(self) -> None:
        p = self.plan.profile
        self.on_progress(Progress(self._step_name, self.counters.get("objects_deleted", 0),
                                  self.counters.get("bytes_deleted", 0), p.num_objects, p.size_bytes))

    async def _retry(self, what: str, fn: Callable[[], Awaitable[Any]]) -> Any:
        """Retry while RGW or the cluster is unreachable (an RGW restart), up to rgw_retry_s."""
        deadline = self.clock() + self.settings.rgw_retry_s
        delay = 0.5
        while True:
            try:
                return await fn()
            except (CephUnreachable, CephTimeout) as exc:
                await self._stop_if_full(what)
                if self.clock() + delay > deadline:
                    raise
                log.warning("purge retrying", what=what, error=str(exc), delay_s=delay)
                await self._sleep(delay)
                delay = min(delay * 2, 10.0)

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
        return await self._retry(what, lambda: self._thread(fn, *args, **kwargs))

    async def _admin(self, args: tuple[str, ...], *, long: bool = False, missing_ok: bool = False) -> None:
        timeout = self.plan.tuning.long_timeout_s if long else None
        try:
            await self.io.rgw.run(*args, timeout=timeout)
        except NotFound:
            if not missing_ok:
                raise

    async def _pace_target(self, probe_once: Callable[[], Awaitable[None]]) -> None:
        """Probe before the first change: what a write costs now, with the cluster's own load.
        With ``pace_latency_increase`` the target is that median times (1 + the increase); an
        absolute ``pace_write_latency_ms`` below it means the purge will crawl at its floor."""
        samples = []
        for _ in range(BEFORE_PROBES):
            took = await time_probe(probe_once, self.clock)
            if took is not None:
                samples.append(took)
            await self._sleep(BEFORE_PROBE_GAP_S)
        if not samples:
            # No reference: an absolute target still works; a relative one has nothing to be
            # relative to, and the purge runs at its slowest pace.
            log.warning("purge pacing: no probe answered before the purge; an absolute target is kept, "
                        "a relative one runs the purge at its slowest pace")
            self.pacer.target_s = self.settings.pace_write_latency_s or MIN_TARGET_S
            return
        before = self._before_probe_s = max(statistics.median(samples), MIN_TARGET_S)
        targets = [t for t in (self.settings.pace_write_latency_s,
                               before * (1 + self.settings.pace_latency_increase)
                               if self.settings.pace_latency_increase > 0 else 0.0) if t > 0]
        self.pacer.target_s = min(targets)
        log.info("purge pacing target", before_ms=round(before * 1000, 2), target_ms=round(self.pacer.target_s * 1000, 2))
        if self.pacer.target_s < before:
            log.warning("purge pacing target below what a probe write costs before the purge: it will run at "
                        "its slowest", before_ms=round(before * 1000, 2), target_ms=round(self.pacer.target_s * 1000, 2))

    # -- the run ------------------------------------------------------------------------------
    async def run(self) -> PurgeReport:
        stop_probe = asyncio.Event()
        probe = None
        probe_once: Callable[[], Awaitable[None]] | None = None
        # On a full cluster without a raise a probe write would wait out its timeout each time
        # (only removals carry full-try): the freeing run is not paced (docs/purge.md, "Full cluster").
        freeing = self.plan.has(FreeWhileFull)
        if freeing and self.settings.paced:
            log.warning("purge pacing off: the cluster is full and probe writes would wait", plan=self.plan.plan_id)
        if self.settings.paced and self._data is not None and not freeing:
            probe_oid = f"rgwkeeper.purge.probe.{self.plan.plan_id}"
            data = self._data

            async def probe_write() -> None:
                # The OSDs' queue (a RADOS write) and RGW's (an S3 request), timed together: a
                # RADOS probe alone misses RGW's CPU (docs/purge.md, "Resume, pacing, retries").
                await data.write_full(probe_oid, PROBE_BYTES)
                await self._thread(self.io.s3.bucket_exists, self.plan.profile.bucket, probe=True)

            probe_once = probe_write

        checks: list[Check] = []
        try:
            if probe_once is not None:
                # Inside the try: an interrupt here still removes the probe object and saves state.
                await self._pace_target(probe_once)
                probe = asyncio.create_task(probe_loop(
                    self.pacer, probe_once, interval_s=self.settings.pace_probe_interval_s, stop=stop_probe,
                    clock=self.clock))
            for i in range(self.state.step, len(self.plan.steps)):
                step = self.plan.steps[i]
                self._step_name = step.kind
                log.info("purge step", plan=self.plan.plan_id, bucket=self.plan.profile.bucket, step=step.kind,
                         index=i + 1, of=len(self.plan.steps))
                started = self.clock()
                if isinstance(step, Verify):
                    self._space_free_at = self._space_free_at or self.clock()
                    checks = await self.verify(step)
                else:
                    await STEP_HANDLERS[type(step)](self, step)
                self._step_s[step.kind] = round(self.clock() - started, 3)
                self.state.step = i + 1
                self.state.cursor = {}
                self._save(force=True)
                self._progress()
        except BaseException as exc:
            if isinstance(exc, UsageError) and self.state.step == 0 and self.checkpoint is not None:
                # Refused by a read-only first step: nothing changed, nothing to resume.
                self.checkpoint.discard()
                raise
            await self._undo_lifecycle_rule()
            self.state.status = "failed" if isinstance(exc, Exception) else "running"
            self.state.error = str(exc)[:500]
            self._save(force=True)
            raise
        finally:
            stop_probe.set()
            if probe is not None:
                await asyncio.gather(probe, return_exceptions=True)
            try:
                if probe_once is not None:
                    await self._data.remove(f"rgwkeeper.purge.probe.{self.plan.plan_id}")  # type: ignore[union-attr]
            finally:
                for pool in (self._pool, self._probe_pool):
                    pool.shutdown(wait=False, cancel_futures=True)
        end = self.clock()
        report = PurgeReport(
            plan_id=self.plan.plan_id, bucket=self.plan.profile.bucket, bucket_id=self.plan.profile.bucket_id,
            method=self.plan.method, request=asdict(self.plan.request), resumed=self.state.resumed,
            counters=dict(self.counters), elapsed_s=round(end - self.t0, 3),
            space_free_s=round((self._space_free_at or end) - self.t0, 3), checks=checks,
            pacing={"target_ms": round(self.pacer.target_s * 1000, 2),
                    "before_probe_ms": round(self._before_probe_s * 1000, 2) if self._before_probe_s else None,
                    "samples": len(self.pacer.samples),
                    "max_probe_ms": round(max((s for _, s in self.pacer.samples), default=0) * 1000, 2),
                    "min_concurrency_fraction": float(f"{self.pacer.min_fraction_seen:.3g}"),
                    "max_objects_per_second": self._cap.rate or None},
            step_s=dict(self._step_s))
        self.state.status = "done" if report.ok else "failed"
        if not report.ok:
            self.state.error = "; ".join(f"{c.name}: {c.detail}" for c in checks if c.status == "failed")[:500]
        self._save(force=True)
        return report

    # -- steps --------------------------------------------------------------------------------
    async def _step_fence(self, step: Fence) -> None:
        b = self.plan.profile.bucket
        await self._retry("set bucket quota", lambda: self.io.admin_api.set_bucket_quota(
            step.owner, b, max_objects=0, max_size_kb=0, enabled=True))
        stats = await self._retry("bucket stats", lambda: self.io.admin_api.bucket_stats(b))
        quota = stats.get("bucket_quota", {})
        if not (quota.get("enabled") and quota.get("max_objects") == 0):
            raise PurgeFailed("fence writes", f"bucket quota reads back as {quota}, not enabled with 0 objects")

    async def _step_free_while_full(self, step: FreeWhileFull) -> None:
        """On a full cluster: remove head-only objects with librados full-try (removals free space
        there; RGW's own writes wait), then wait a bounded time for usage to fall below the full
        ratio before the steps that need RGW to write. Still full: stop, say what is left."""
        p = self.plan.profile
        assert self._data is not None
        freed = freed_bytes = 0
        async for entries, _ in self._pages(EVERYTHING, {}):
            remove, _gone, _others = await self._head_only(entries)
            rets = await self._rados_many(self._data.remove_many, [o for _, o in remove])
            for (e, obj), ret in zip(remove, rets):
                if ret not in (0, -errno.ENOENT):
                    raise PurgeFailed(f"{p.data_pool}/{obj[0]} remove", errno.errorcode.get(-ret, str(ret)), ret=ret)
                if ret == 0:
                    freed, freed_bytes = freed + 1, freed_bytes + e["Size"]
        # Counted as deleted by delete_objects, which finds these heads gone.
        self._count(freed_while_full=freed, bytes_deleted=freed_bytes)
        self._save(force=True)
        wait_s = step.wait_s
        deadline = self.clock() + wait_s
        while True:
            full = await read_full_state(self.io.rados)
            if not full.full:
                log.info("purge: the cluster is below its full ratio again", bucket=p.bucket, freed=freed)
                return
            if self.clock() >= deadline:
                raise ClusterFull(
                    f"purge of {p.bucket!r} stopped: removed {freed:,} head-only objects ({human_bytes(freed_bytes)}) "
                    f"with librados full-try, but after {wait_s:.0f} s {full.describe()}; left: objects with tails, "
                    "the index and the bucket's metadata, which need RGW to write: run the same command with "
                    "--raise-full-ratio R to finish (it resumes from its checkpoint)")
            await self._sleep(min(FULL_POLL_S, max(0.0, deadline - self.clock())))

    async def _step_drop_lifecycle(self, step: DropLifecycle) -> None:
        b = self.plan.profile.bucket
        await self._s3("DeleteBucketLifecycle", self.io.s3.delete_lifecycle, b)
        if await self._s3("GetBucketLifecycleConfiguration", self.io.s3.get_lifecycle, b):
            raise PurgeFailed(f"DeleteBucketLifecycle {b}", "the bucket still has lifecycle rules")

    async def _uploads(self, scope: Scope) -> list[dict[str, Any]]:
        cutoff = scope.cutoff_s

        def listing() -> list[dict[str, Any]]:
            return [u for u in self.io.s3.iter_uploads(self.plan.profile.bucket, scope.prefix)
                    if cutoff is None or u["Initiated"].timestamp() < cutoff]

        return await self._retry("ListMultipartUploads", lambda: self._thread(listing))

    async def _step_abort_uploads(self, step: AbortUploads) -> None:
        b = self.plan.profile.bucket
        uploads = await self._uploads(step.scope)
        limiter = self._s3_limiter()

        async def abort(u: dict[str, Any]) -> None:
            async with limiter:
                await self._s3("AbortMultipartUpload", self.io.s3.abort_upload, b, u["Key"], u["UploadId"])

        await asyncio.gather(*(abort(u) for u in uploads))
        self._count(uploads_aborted=len(uploads))
        left = await self._uploads(step.scope)
        if left:
            raise PurgeFailed(f"AbortMultipartUpload {b}", f"{len(left)} uploads still listed after aborting them")

    # The main loop: list once, page by page (the next page is fetched while this one is
    # worked on), delete, and checkpoint each page once it and every page before it are done.
    async def _step_delete_objects(self, step: DeleteObjects, *, sweep: bool = False) -> None:
        limiter = self._s3_limiter()
        # Head work of up to 3 pages overlaps (one stats while another removes).
        page_slots = asyncio.Semaphore(3)
        pending: deque[tuple[dict[str, Any], list[asyncio.Task[None]]]] = deque()
        try:
            async for entries, resume_at in self._pages(step.scope, self.state.cursor if not sweep else {},
                                                        versions=step.versions, recheck=step.recheck):
                entries = [e for e in entries if step.scope.matches(e)]
                tasks = []
                if step.strategy == "direct":
                    await page_slots.acquire()
                    tasks.append(asyncio.create_task(self._direct_page(entries, page_slots, limiter, sweep)))
                else:
                    for chunk in _chunks(entries, self._batch_keys()):
                        tasks.append(await self._start_batch(chunk, limiter, step.scope if step.recheck else None))
                pending.append((resume_at, tasks))
                await self._settle(pending, block=False, sweep=sweep)
            await self._settle(pending, block=True, sweep=sweep)
        finally:
            for _, tasks in pending:
                for t in tasks:
                    t.cancel()
            await asyncio.gather(*(t for _, ts in pending for t in ts), return_exceptions=True)

    async def _direct_page(self, entries: list[dict[str, Any]], page_slots: asyncio.Semaphore, limiter: Limiter,
                           sweep: bool) -> None:
        try:
            others = await self._remove_heads(entries, sweep=sweep)
        finally:
            page_slots.release()
        batches = []
        for chunk in _chunks(others, self._batch_keys()):
            batches.append(await self._start_batch(chunk, limiter))
        await asyncio.gather(*batches)

    async def _start_batch(self, chunk: list[dict[str, Any]], limiter: Limiter,
                           recheck: Scope | None = None) -> asyncio.Task[None]:
        """Wait for a slot in flight, then for the cap's time slot, and send one DeleteObjects.
        The cap comes second: a batch that waited for its time slot while every slot in flight
        was busy would leave together with the next one."""
        started = await limiter.acquire()
        try:
            await self._cap.take(len(chunk))
        except BaseException:
            await limiter.release()
            raise
        limiter.restart(started)  # the cap's wait is not busy time: pacing pauses after busy time
        return asyncio.create_task(self._s3_batch(chunk, limiter, recheck))

    async def _settle(self, pending: deque[tuple[dict[str, Any], list[asyncio.Task[None]]]], *, block: bool,
                      sweep: bool) -> None:
        while pending:
            resume_at, tasks = pending[0]
            if block:
                await asyncio.gather(*tasks)
            elif not all(t.done() for t in tasks):
                return
            for t in tasks:
                t.result()  # a failed batch stops the purge here, before its page is checkpointed
            pending.popleft()
            if not sweep:
                self.state.cursor = resume_at
                self._save()
            self._progress()

    async def _pages(self, scope: Scope, cursor: Mapping[str, Any], *, versions: bool = False,
                     recheck: bool = False) -> AsyncIterator[tuple[list[dict[str, Any]], dict[str, Any]]]:
        """Pages of the listing with, for each, where a listing resumes after it. The next page is
        fetched while the caller works on this one. A listing that fails (RGW restarting) is
        started again from the last page it returned: a generator that raised is finished."""
        b = self.plan.profile.bucket
        done = object()
        listing: dict[str, Any] = {"it": None, "resume": dict(cursor)}

        def next_page() -> Any:
            if listing["it"] is None:
                r = listing["resume"]
                size = self.plan.tuning.list_page_size
                if self.settings.paced:  # a 1,000-key listing is itself a burst of RGW and index work
                    size = min(size, PACED_LIST_PAGE)
                if self._cap.rate > 0 and not recheck:
                    # Progress and the checkpoint move per page: a few seconds' work. Not with a
                    # filter: few keys may match, and small pages would multiply the listing.
                    size = min(size, max(CAPPED_PAGE_MIN, int(self._cap.rate * CAPPED_PAGE_S)))
                listing["it"] = (
                    self.io.s3.iter_version_pages(b, scope.prefix, key_marker=r.get("key_marker"),
                                                  version_marker=r.get("version_marker"), page_size=size)
                    if versions else self.io.s3.iter_pages(b, scope.prefix, start_after=r.get("start_after"),
                                                           page_size=size))
            try:
                page = next(listing["it"], done)
            except Exception:
                listing["it"] = None
                raise
            if page is done:
                return done
            if versions:
                entries, after = page
                resume = {"key_marker": after[0], "version_marker": after[1]} if after else {"end": True}
            else:
                entries = page
                resume = {"start_after": entries[-1]["Key"]} if entries else dict(listing["resume"])
            listing["resume"] = resume
            return entries, resume

        def fetch() -> asyncio.Future[Any]:
            return asyncio.ensure_future(self._retry("list", lambda: self._thread(next_page)))

        pending = fetch()
        try:
            while True:
                page = await pending
                if page is done:
                    return
                pending = fetch()
                yield page
        finally:
            pending.cancel()
            await asyncio.gather(pending, return_exceptions=True)

    async def _head_only(self, entries: list[dict[str, Any]]) -> tuple[list[tuple[dict[str, Any], Any]], int,
                                                                        list[dict[str, Any]]]:
        """(entries whose head holds all their data, with the head's oid; heads already gone;
        the entries that must go through S3)."""
        p = self.plan.profile
        assert self._data is not None
        candidates, others = [], []
        for e in entries:
            single_part = "-" not in e.get("ETag", "-").strip('"')
            (candidates if e["Size"] <= p.head_chunk_bytes and single_part else others).append(e)
        if not candidates:
            return [], 0, others
        objs = [head_oid(p.marker, e["Key"]) for e in candidates]
        sizes = await self._rados_many(self._data.stat_many, objs)
        remove, gone = [], 0
        for e, obj, size in zip(candidates, objs, sizes):
            if size is None:
                gone += 1  # removed by an earlier, interrupted run: its index entry is still there
            elif size == e["Size"]:
                remove.append((e, obj))
            else:
                others.append(e)  # compressed, encrypted with padding, or tails: RGW must do it
        return remove, gone, others

    async def _remove_heads(self, entries: list[dict[str, Any]], *, sweep: bool) -> list[dict[str, Any]]:
        """Remove the heads of head-only objects; return the entries that must go through S3."""
        p = self.plan.profile
        assert self._data is not None
        remove, gone, others = await self._head_only(entries)
        if not remove and not gone:
            return others
        rets: list[Any] = []
        for chunk in _chunks([o for _, o in remove], self._cap.chunk(len(remove))):
            await self._cap.take(len(chunk))
            rets.extend(await self._rados_many(self._data.remove_many, chunk))
        removed_bytes = 0
        for (e, obj), ret in zip(remove, rets):
            if ret not in (0, -errno.ENOENT):
                raise PurgeFailed(f"{p.data_pool}/{obj[0]} remove", errno.errorcode.get(-ret, str(ret)), ret=ret)
            removed_bytes += e["Size"]
        self._count(index_left=len(remove) + gone, direct_removed=len(remove))
        if not sweep:
            self._count(objects_deleted=len(remove) + gone, bytes_deleted=removed_bytes)
        elif len(remove):
            self._count(objects_deleted=len(remove), bytes_deleted=removed_bytes)
        return others

    async def _recheck(self, chunk: list[dict[str, Any]], scope: Scope) -> list[dict[str, Any]]:
        """The entries of ``chunk`` that still match the filter: each key that can be written
        again in place (no version id, or "null") is HEADed; one that is gone or no longer
        matches (written again since the listing: newer, another size) is left alone and
        counted as ``kept_rewritten``."""
        b = self.plan.profile.bucket

        async def still(e: dict[str, Any]) -> bool:
            if e.get("DeleteMarker") or e.get("VersionId") not in (None, "null"):
                return True  # a listed version id names immutable data (a marker has none to HEAD)
            async with self._recheck_slots:
                head = await self._s3("HeadObject", self.io.s3.head_object, b, e["Key"], e.get("VersionId"))
            # The object as it is now decides, not its ETag: one written again that still
            # matches (a size filter) is what the purge was asked to delete; the verify step
            # would find it left behind otherwise.
            return head is not None and scope.matches(
                {"LastModified": head["LastModified"], "Size": head.get("ContentLength")})

        keep = await asyncio.gather(*(still(e) for e in chunk))
        if not all(keep):
            self._count(kept_rewritten=len(chunk) - sum(keep))
        return [e for e, k in zip(chunk, keep) if k]

    async def _s3_batch(self, chunk: list[dict[str, Any]], limiter: Limiter, recheck: Scope | None = None) -> None:
        """One DeleteObjects request; the caller acquired ``limiter``, released here. ``recheck``:
        each key is HEADed first and kept unless it still falls in this scope."""
        b = self.plan.profile.bucket
        try:
            if recheck is not None:
                chunk = await self._recheck(chunk, recheck)
            objects = [{"Key": e["Key"], **({"VersionId": e["VersionId"]} if e.get("VersionId") else {})}
                       for e in chunk]
            errors = await self._s3("DeleteObjects", self.io.s3.delete_batch, b, objects) if objects else []
        finally:
            await limiter.release()
        if errors:
            first = errors[0]
            raise PurgeFailed(f"DeleteObjects {b}", f"{len(errors)} of {len(chunk)} keys refused, e.g. "
                              f"{first.get('Key')!r}: {first.get('Code')}")
        markers = sum(1 for e in chunk if e.get("DeleteMarker"))
        self._count(objects_deleted=len(chunk) - markers, delete_markers_deleted=markers, via_s3=len(chunk),
                    bytes_deleted=sum(e.get("Size", 0) for e in chunk))

    async def _step_gc_process(self, step: GcProcess) -> None:
        await self._admin(step.gc, long=True)
        self._space_free_at = self.clock()

    async def _index_stats(self) -> dict[str, Any]:
        """The bucket's stats for the count check before the drop, through the admin API: the
        same document as `radosgw-admin bucket stats` (RGW reads the index shard headers), one
        HTTP request instead of a radosgw-admin process (docs/purge.md, "What limits the direct
        path")."""
        return await self._retry("bucket stats", lambda: self.io.admin_api.bucket_stats(self.plan.profile.bucket))

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
                self._count(sweeps=1)
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
        gc_task = asyncio.ensure_future(self._admin(step.gc, long=True))
        try:
            shards = [(o, "") for o in p.index_shards]
            rets = await self.io.bulk(p.index_pool).remove_many(shards, window=64)
            bad = [(o, r) for (o, _), r in zip(shards, rets) if r not in (0, -errno.ENOENT)]
            if bad:
                raise PurgeFailed(f"{p.index_pool}/{bad[0][0]} remove", errno.errorcode.get(-bad[0][1], str(bad[0][1])))
            await asyncio.gather(self._admin(step.entry_rm, missing_ok=True),
                                 self._admin(step.instance_rm, missing_ok=True))
            await self._admin(step.stats_sync)
        finally:
            await asyncio.gather(gc_task, return_exceptions=True)
        gc_task.result()
        self._space_free_at = self.clock()

    async def _drop_through_rgw(self, step: DropBucket, *, bucket_gone: bool) -> None:
        """The drop where `metadata rm` keeps the bucket instance (plan.DIRECT_DROP): the index,
        checked above to hold only entries of removed heads, is emptied in place and RGW deletes
        the empty bucket. ``bucket_gone``: an earlier run got past DeleteBucket."""
        p = self.plan.profile
        gc_task = asyncio.ensure_future(self._admin(step.gc, long=True))
        try:
            if not bucket_gone:
                index = self.io.bulk(p.index_pool)
                shards = [(o, "") for o in p.index_shards]
                # Emptying a shard that does not exist would create it: check they all do first.
                sizes = await index.stat_many(shards, window=64)
                missing = [o for (o, _), size in zip(shards, sizes) if size is None]
                if missing:
                    raise PurgeFailed(f"{p.index_pool}/{missing[0]}", f"{len(missing)} of {len(shards)} index "
                                      "shards are not where the plan expects them; the index was left in place")
                rets = await index.empty_index_many(shards, window=64)
                bad = [(o, r) for (o, _), r in zip(shards, rets) if r != 0]
                if bad:
                    raise PurgeFailed(f"{p.index_pool}/{bad[0][0]} empty", errno.errorcode.get(-bad[0][1], str(bad[0][1])))
                try:
                    await self._s3("DeleteBucket", self.io.s3.delete_bucket, p.bucket)
                except NotFound:
                    pass  # deleted by an earlier run
            await self._admin(step.stats_sync)
        finally:
            await asyncio.gather(gc_task, return_exceptions=True)
        gc_task.result()
        self._space_free_at = self.clock()

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
            await asyncio.gather(self._admin(step.stats_sync, long=True), self._admin(step.gc, long=True))
            self._space_free_at = self.clock()
            return

    async def _step_prove_head_only(self, step: ProveHeadOnly) -> None:
        p = self.plan.profile
        assert self._data is not None
        if await self._uploads(step.scope):
            raise UsageError(f"--bypass-gc refused: {p.bucket!r} has incomplete multipart uploads, whose parts "
                             "are tails (tracker 73348); use --method auto; nothing was changed")
        pages = self._pages(EVERYTHING, {})
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
        await self._while_polling(self._admin(step.bucket_rm, long=True))
        self._space_free_at = self.clock()
        await self._admin(step.stats_sync)

    async def _while_polling(self, work: Awaitable[_T]) -> _T:
        """Run radosgw-admin work, showing progress from the bucket's object count meanwhile."""
        p = self.plan.profile
        task = asyncio.ensure_future(work)
        try:
            while not task.done():
                await asyncio.wait([task], timeout=2.0)
                if task.done():
                    break
                try:
                    stats = await self.io.rgw.bucket_stats(p.bucket)
                    left = int(stats.get("usage", {}).get("rgw.main", {}).get("num_objects", 0))
                    size_left = int(stats.get("usage", {}).get("rgw.main", {}).get("size", 0))
                except CephError:
                    continue
                self.counters["objects_deleted"] = max(0, p.num_objects - left)
                self.counters["bytes_deleted"] = max(0, p.size_bytes - size_left)
                self._progress()
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
        if "previous_rules" not in self.state.memo:
            previous = await self._s3("GetBucketLifecycleConfiguration", self.io.s3.get_lifecycle, b)
            self.state.memo["previous_rules"] = [r for r in previous if not str(r.get("ID", "")).startswith(
                f"{lc.RULE_ID_PREFIX}purge-")]
            self._save(force=True)  # before the change: a crash must still be able to restore them
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
        previous = self.state.memo.get("previous_rules", [])
        if previous:
            await self._s3("PutBucketLifecycleConfiguration", self.io.s3.put_lifecycle, b, lc.s3_rules(previous))
        else:
            await self._s3("DeleteBucketLifecycle", self.io.s3.delete_lifecycle, b)
        got = await self._s3("GetBucketLifecycleConfiguration", self.io.s3.get_lifecycle, b)
        if not lc.same_rules(got, previous):
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
            await asyncio.wait_for(self._step_lifecycle_restore(), LIFECYCLE_UNDO_TIMEOUT_S)
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

    # -- the end state ----------------------------------------------------------------------
    async def verify(self, step: Verify) -> list[Check]:
        if step.whole_bucket:
            return await self._verify_bucket_gone()
        return await self._verify_prefix_empty(step.scope)

    async def _verify_bucket_gone(self) -> list[Check]:
        p = self.plan.profile
        checks: list[Check] = []
        try:
            stats = await self.io.rgw.bucket_stats(p.bucket)
            same = stats.get("id") == p.bucket_id
            checks.append(Check("bucket gone", "failed" if same else "warning",
                                "bucket stats still answers for it" if same else
                                f"a new bucket of that name exists (id {stats.get('id')})"))
        except NotFound:
            exists = await self._retry("HeadBucket", lambda: self._thread(self.io.s3.bucket_exists, p.bucket))
            checks.append(Check("bucket gone", "failed" if exists else "ok",
                                "S3 HeadBucket still finds it" if exists else
                                "radosgw-admin bucket stats: does not exist; S3 HeadBucket: 404"))
        try:
            await self.io.rgw.metadata_get(f"bucket.instance:{p.bucket}:{p.bucket_id}")
            checks.append(Check("bucket instance gone", "failed", f"metadata bucket.instance:{p.bucket}:{p.bucket_id} "
                                "still exists"))
        except NotFound:
            checks.append(Check("bucket instance gone", "ok", "no bucket.instance metadata"))
        if p.index_pool and p.index_gen is None:
            checks.append(Check("index shards gone", "warning", "not read back: the bucket's index generation "
                                "was not known (RGW removed its index with the bucket)"))
        elif p.index_pool:
            shards = p.index_shards
            sizes = await self.io.bulk(p.index_pool).stat_many([(o, "") for o in shards], window=64)
            left = [o for o, s in zip(shards, sizes) if s is not None]
            checks.append(Check("index shards gone", "failed" if left else "ok",
                                f"{len(left)} of {len(shards)} left, e.g. {left[0]}" if left else
                                f"{len(shards)} shard objects absent from {p.index_pool}"))
        pools = [x for x in dict.fromkeys((p.data_pool, p.data_extra_pool, *p.class_data_pools)) if x]
        for pool in pools:
            checks.append(await self._scan_pool(pool))
        checks.append(await self._gc_check())
        buckets = await self.io.rgw.user_buckets(p.owner)
        stats = await self.io.rgw.user_stats(p.owner)
        owner_stats = stats.get("stats", {})
        checks.append(Check("owner unlinked", "failed" if p.bucket in buckets else "ok",
                            f"{p.owner} still lists {p.bucket}" if p.bucket in buckets else
                            f"bucket list --uid {p.owner}: {len(buckets)} buckets, {p.bucket} not among them"))
        synced = _parse_time(stats.get("last_stats_sync"))
        fresh = synced is not None and synced >= self.plan.created_at - 1
        checks.append(Check("owner stats synced", "ok" if fresh else "warning",
                            f"{p.owner}: {owner_stats.get('num_objects', '?')} objects, {owner_stats.get('size', '?')} B, "
                            f"synced {stats.get('last_stats_sync', '?')}" + ("" if fresh else " (before the purge)")))
        return checks

    async def _scan_pool(self, pool: str) -> Check:
        p = self.plan.profile
        try:
            found, complete = await self.io.bulk(pool).list_prefix(bucket_prefix(p.marker),
                                                                 max_scanned=self.settings.verify_scan_max_objects)
        except CephError as exc:
            if exc.ret != -errno.ENOENT:
                raise
            # RGW creates the data-extra (non-ec) pool on the first multipart upload only.
            return Check(f"no RADOS objects left in {pool}", "ok", "the pool does not exist")
        if not complete:
            return Check(f"no RADOS objects left in {pool}", "skipped",
                         f"the pool has more than {self.settings.verify_scan_max_objects:,} objects "
                         "(purge.verify_scan_max_objects); not scanned")
        leftover, shared = [], []
        for oid, locator in found:
            if not is_tail(oid, p.marker):
                leftover.append(oid)
                continue
            blob = await self.io.bulk(pool).get_xattr(oid, "refcount", locator=locator)
            refs = parse_refcount(blob).refs if blob else ()
            (shared if refs else leftover).append(oid)
        if leftover:
            return Check(f"no RADOS objects left in {pool}", "failed",
                         f"{len(leftover)} objects of the bucket left, e.g. {leftover[0]}")
        return Check(f"no RADOS objects left in {pool}", "ok",
                     f"none of {p.marker}_*" + (f" except {len(shared)} tail objects still referenced by copies "
                                                f"in other buckets (kept by design), e.g. {shared[0]}" if shared else ""))

    async def _gc_check(self, *, strict: bool = True) -> Check:
        p = self.plan.profile
        prefix = bucket_prefix(p.marker)
        entries = await self.io.rgw.gc_list(include_all=True)
        ours = [e for e in entries if any(o.get("oid", "").startswith(prefix) for o in e.get("objs", []))]
        if ours:
            return Check("GC processed", "failed" if strict else "warning",
                         f"{len(ours)} GC entries still hold objects of the bucket (space not yet free)")
        return Check("GC processed", "ok", f"no GC entry for {prefix}* ({len(entries)} entries in all)")

    async def _verify_prefix_empty(self, scope: Scope) -> list[Check]:
        p = self.plan.profile
        versions = p.versioning != "off"

        def left() -> list[dict[str, Any]]:
            out = []
            if versions:
                for entries, _ in self.io.s3.iter_version_pages(p.bucket, scope.prefix):
                    out += [e for e in entries if scope.matches(e)]
            else:
                for entries in self.io.s3.iter_pages(p.bucket, scope.prefix):
                    out += [e for e in entries if scope.matches(e)]
            return out

        remaining = await self._retry("list", lambda: self._thread(left))
        what = "versions or delete markers" if versions else "objects"
        checks = [Check(f"no matching {what} left", "failed" if remaining else "ok",
                        f"{len(remaining)} left, e.g. {remaining[0]['Key'][:80]!r}" if remaining else
                        f"none under {scope.prefix or 'the bucket'}")]
        uploads = await self._uploads(scope)
        checks.append(Check("no matching incomplete uploads", "failed" if uploads else "ok",
                            f"{len(uploads)} left" if uploads else "none"))
        # The bucket lives on and others may be deleting in it: GC entries are reported, not failed.
        checks.append(await self._gc_check(strict=False))
        return checks


def _parse_time(text: Any) -> float | None:
    try:
        return datetime.fromisoformat(str(text)).timestamp()
    except ValueError:
        return None


async def execute(plan: Plan, io: PurgeIO, *, checkpoint: Checkpoint | None, state: State | None = None,
                  settings: Settings = Settings(), on_progress: Callable[[Progress], None] | None = None) -> PurgeReport:
    """Run ``plan`` (resuming ``state`` if given) and return the read-back report."""
    return await PurgeExecutor(plan, io, checkpoint=checkpoint, state=state, settings=settings,
                               on_progress=on_progress).run()


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
