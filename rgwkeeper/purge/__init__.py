"""Bulk delete and expiry: a pure planner, an executor with checkpoint, pacing and read-back.

The Python API the CLI and the daemon's fill policy call::

    io = open_io(access, cfg.purge)                   # adapters (close_io releases them)
    prepared = await prepare(request, io, purge_cfg=cfg.purge, store=CheckpointStore(path))
    print("\n".join(prepared.plan.show(io.rgw.argv)))  # a dry run is the plan, printed
    report = await run(prepared, io, purge_cfg=cfg.purge)   # checkpointed; report.ok, report.checks

The two pure/effectful halves are also callable alone: ``rgwkeeper.purge.plan.plan(profile,
request, ...)`` and ``rgwkeeper.purge.execute.execute(plan, io, checkpoint=..., ...)``. They are
not re-exported here: a package attribute named like a submodule would hide the submodule.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, AsyncContextManager, Callable, Iterator

import structlog

from rgwkeeper.access import ClusterAccess
from rgwkeeper.adapters.connect import REQUIRED, open_adapters
from rgwkeeper.adapters.rados import BulkObjects, ObjectStore, RadosAdapter, ensure_pool
from rgwkeeper import lifecycle as lc
from rgwkeeper.config import Config, PurgeSection
from rgwkeeper.errors import CephError, ClusterFull, NotFound, UsageError
from rgwkeeper import fullratio
from rgwkeeper.journal import Journal
from rgwkeeper.names import is_job_id
from rgwkeeper.observe import read_full_state
from rgwkeeper.snapshot import FullState
from rgwkeeper.purge import impact
from rgwkeeper.purge import many
from rgwkeeper.purge.board import Board, Lease, NoSuchJob, Snapshot
from rgwkeeper.purge.checkpoint import Checkpoint, CheckpointStore, State
from rgwkeeper.purge.pacing import RateCap
from rgwkeeper.purge.execute import Check, JoinReport, Progress, PurgeFailed, PurgeIO, PurgeReport, Settings
from rgwkeeper.purge.execute import items_at_once
from rgwkeeper.purge.execute import join as _join
from rgwkeeper.purge.execute import execute as _execute
from rgwkeeper.purge.expire import (BucketFailure, ExpireResult, ExpiryPlans, apply_expiry, expiry_problem,
                                    plan_expiry)
from rgwkeeper.purge.plan import NotNow, Plan, PurgeRequest, Tuning, check_protected, listable_by_index
from rgwkeeper.purge.plan import no_s3_access, s3_refused
from rgwkeeper.purge.plan import FreeWhileFull, free_first
from rgwkeeper.purge.plan import plan as _plan
from rgwkeeper.purge.profile import BucketProfile, NoSuchBucket, bucket_id_now, gather_profile
from rgwkeeper.purge.scope import read_prefix_scope, read_rgw_clock
from rgwkeeper.purge.textfile import ProgressTextfile

log = structlog.get_logger("rgwkeeper.purge")

__all__ = ["Board", "JoinReport", "NoSuchJob", "Snapshot", "items_view", "join", "open_board",
           "items_at_once", "job_status", "many", "purge_job_bucket", "resume_prepared", "run_many",
           "read_to_join", "request_differences", "uses_items", "valid_job_id", "worker_name",
           "BucketProfile", "Check", "Checkpoint", "CheckpointStore", "NoSuchBucket", "NotNow", "Plan",
           "Prepared", "Progress", "PurgeFailed", "PurgeIO", "PurgeReport", "PurgeRequest", "Settings", "State",
           "Tuning", "ExpiryOutcome", "apply_expiry_with", "close_io", "expire_configured", "gather_profile", "holder_name", "impact", "open_io",
           "prepare", "raised_for", "ratio_journal", "run", "settings_from", "tuning_from"]


class _BulkPools:
    """One BulkObjects (two ioctxs) per pool, reused for the whole purge."""

    def __init__(self, rados: RadosAdapter) -> None:
        self.rados = rados
        self._pools: dict[str, BulkObjects] = {}

    def __call__(self, pool: str) -> BulkObjects:
        if pool not in self._pools:
            self._pools[pool] = BulkObjects(self.rados, pool)
        return self._pools[pool]

    def close(self) -> None:
        for b in self._pools.values():
            b.close()


def open_io(access: ClusterAccess, purge_cfg: PurgeSection) -> PurgeIO:
    """Connect librados and build the adapters a purge needs (``close_io`` releases them)."""
    ca = open_adapters(access, rgw=REQUIRED, rados_workers=32, s3_pool=max(32, purge_cfg.s3_batches_in_flight * 2))
    assert ca.s3 is not None and ca.admin_api is not None  # REQUIRED builds both or refuses
    return PurgeIO(rgw=ca.radosgw_admin, s3=ca.s3, rados=ca.rados, bulk=_BulkPools(ca.rados), admin_api=ca.admin_api)


def close_io(io: PurgeIO) -> None:
    if isinstance(io.bulk, _BulkPools):
        io.bulk.close()
    io.rados.close()


def tuning_from(purge_cfg: PurgeSection) -> Tuning:
    return Tuning(s3_batches_in_flight=purge_cfg.s3_batches_in_flight,
                  rados_ops_in_flight=purge_cfg.rados_ops_in_flight,
                  max_concurrent_ios=purge_cfg.admin_max_concurrent_ios,
                  long_timeout_s=purge_cfg.long_command_timeout_s, list_page_size=purge_cfg.list_page_size,
                  direct_listing=purge_cfg.direct_listing, range_entries=purge_cfg.range_entries,
                  max_objects_per_second=purge_cfg.max_objects_per_second,
                  cap_ops_in_flight=purge_cfg.cap_ops_in_flight,
                  cap_objects_per_request=RateCap(purge_cfg.max_objects_per_second,
                                                  request_s=purge_cfg.cap_request_s).chunk(1000)
                  if purge_cfg.max_objects_per_second > 0 else 0)


def settings_from(purge_cfg: PurgeSection) -> Settings:
    return Settings(pace_write_latency_s=purge_cfg.pace_write_latency_ms / 1000.0,
                    pace_latency_increase=purge_cfg.pace_latency_increase,
                    pace_probe_interval_s=purge_cfg.pace_probe_interval_s,
                    verify_scan_max_objects=purge_cfg.verify_scan_max_objects,
                    rgw_retry_s=purge_cfg.rgw_retry_s, lc_busy_wait_s=purge_cfg.lc_busy_wait_s,
                    checkpoint_interval_s=purge_cfg.checkpoint_interval_s,
                    max_objects_per_second=purge_cfg.max_objects_per_second,
                    cap_request_s=purge_cfg.cap_request_s, cap_ops_in_flight=purge_cfg.cap_ops_in_flight,
                    full_wait_s=purge_cfg.full_wait_s)


@dataclass
class Prepared:
    plan: Plan
    checkpoint: Checkpoint
    state: State | None  # None: a new purge; else the one being resumed
    ignored: list[str]  # checkpoints not resumed, and why
    full: FullState | None = None  # read before planning
    raise_full_ratio: float | None = None  # the cluster is full and the operator asked for this raise

    @property
    def resuming(self) -> bool:
        return self.state is not None


async def full_gate(io: PurgeIO, what: str, raise_full_ratio: float | None, max_full_ratio: float, *,
                    may_free: bool = False) -> FullState:
    """Read whether the cluster is full (three mon reads that answer when it is) before anything
    else: on a full cluster work that needs RGW to write is refused at once unless a raise of the
    full ratio was asked for, and that raise is checked against its bounds. ``may_free``: the
    caller may still choose the direct method, which frees space without RGW, and decides later."""
    if raise_full_ratio is not None:
        fullratio.check_raise_bound(raise_full_ratio, max_full_ratio)  # before any read: full or not
    full = await read_full_state(io.rados)
    if full.full:
        if raise_full_ratio is None:
            if may_free:
                return full
            raise ClusterFull(full.refusal(what))
        fullratio.check_raise(raise_full_ratio, full, max_full_ratio)
    return full


async def prepare(request: PurgeRequest, io: PurgeIO, *, purge_cfg: PurgeSection, store: CheckpointStore,
                  now: float | None = None, raise_full_ratio: float | None = None) -> Prepared:
    """Resume the unfinished purge this same request left (same bucket instance), or plan anew.

    Read-only: nothing is written (not even the state directory) until :func:`execute`. On a
    full cluster it refuses (ClusterFull) unless ``raise_full_ratio`` is given.
    """
    check_protected(request.bucket, purge_cfg.protected_buckets)
    request = impact.request_for(purge_cfg, request)  # the CLI refuses earlier, before it connects
    # First: "older than 3s" counts from when the command ran, not from after the profile.
    clock = await read_rgw_clock(io.s3, request.bucket) if request.older_than_s is not None else None
    what = f"purge of {request.bucket!r}"
    full = await full_gate(io, what, raise_full_ratio, purge_cfg.max_full_ratio,
                           may_free=request.method in ("auto", "direct"))
    raise_to = raise_full_ratio if full.full else None
    free = full.full and raise_to is None  # only the direct method goes on, freeing space first

    def refuse_unless_it_frees(p: Plan) -> None:
        if free and not p.has(FreeWhileFull):
            raise ClusterFull(full.refusal(what + f" (method {p.method})"))
    try:
        profile: BucketProfile | None = await gather_profile(
            request.bucket, rgw=io.rgw, rados=io.rados, admin_api=io.admin_api, bulk=io.bulk,
            one_at_a_time=purge_cfg.max_objects_per_second > 0)
    except NoSuchBucket:
        profile = None
    ignored: list[str] = []
    for cp, state in store.unfinished(request.bucket):
        old = Plan.from_dict(state.plan)
        if profile is not None and old.profile.bucket_id != profile.bucket_id:
            ignored.append(f"{cp.path}: for an earlier bucket of that name (id {old.profile.bucket_id})")
            continue
        if old.request.key() != request.key():
            raise UsageError(
                f"an unfinished purge of {request.bucket!r} ({old.request.describe()}, method {old.method}) is "
                f"recorded in {cp.path}; run that same command to finish it, or move the file away")
        refuse_unless_it_frees(old)
        if profile is not None:  # a purge the S3 refusal stopped, resumed after the admin flag was given
            await check_s3_access(io, old.method, profile)
        return Prepared(plan=old, checkpoint=cp, state=state, ignored=ignored, full=full, raise_full_ratio=raise_to)
    if profile is None:
        raise NoSuchBucket(f"bucket {request.bucket!r} does not exist; nothing was changed")
    await check_s3_access(io, request.method, profile)
    scope = await read_prefix_scope(io.s3, request.bucket, request.prefix) if request.prefix else None
    if now is None:
        # Ages are measured on the clock that stamped LastModified: RGW's (purge.scope).
        now = clock.rgw_s if clock is not None else time.time()
    new = _plan(profile, request, tuning=tuning_from(purge_cfg), protected=purge_cfg.protected_buckets,
                now=now, clock=clock, prefix_scope=scope)
    if free and new.method == "direct":
        new = free_first(new, purge_cfg.full_wait_s)
    refuse_unless_it_frees(new)
    return Prepared(plan=new, checkpoint=store.for_purge(profile.bucket, profile.bucket_id, request.key()),
                    state=None, ignored=ignored, full=full, raise_full_ratio=raise_to)


async def check_s3_access(io: PurgeIO, method: str, profile: BucketProfile) -> None:
    """Refuse a purge that works through S3 (every method but ``admin-purge``) when rgwkeeper's
    RGW user may not list the bucket there: admin caps grant no S3 access to another user's
    bucket, and the purge would stop at its first S3 call, after the fence (docs/purge.md,
    "Buckets of other users"). One ListObjectsV2 of one key, read-only; an error that is not
    the bucket's (the credentials, the clock, RGW down) is raised as it is."""
    if method == "admin-purge":
        return
    b = profile.bucket
    try:
        await asyncio.to_thread(io.s3.check_list_access, b)
    except NotFound:
        raise UsageError(f"S3 finds no bucket {b!r} though radosgw-admin does (deleted just now?); nothing was "
                         "changed") from None
    except CephError as exc:
        if not s3_refused(exc):
            raise
        raise no_s3_access(b, profile.owner, "ListObjectsV2",
                           ", or purge with --method admin-purge, which needs no S3") from None


async def run(prepared: Prepared, io: PurgeIO, *, purge_cfg: PurgeSection, on_progress: Callable[[Progress], None] | None = None,
              journal: Journal | None = None, holder: str = "", lease_s: float = 90.0,
              textfile: Path | None = None, board: Board | None = None, workers: int = 1) -> PurgeReport:
    """Execute a prepared purge under its checkpoint (lock, resume count, save). With a raise of
    the full ratio prepared, it is journaled in ``journal`` first and given back on every path.
    ``textfile``: progress as Prometheus metrics there, for node exporter (purge.textfile).
    ``board`` (``open_board``): its index-listed delete runs as work items in RADOS, ``workers``
    at once here; other nodes may join (``join``)."""
    metrics = None
    if textfile is not None:
        p = prepared.plan
        metrics = ProgressTextfile(textfile, bucket=p.profile.bucket, plan=p.plan_id, method=p.method)
        metrics.start()
        on_progress = _both(on_progress, metrics.update)
    failed = True
    try:
        if prepared.raise_full_ratio is None:
            report = await _run(prepared, io, purge_cfg=purge_cfg, on_progress=on_progress, board=board,
                                workers=workers)
        elif journal is None:
            raise ValueError("a raise of the full ratio needs the journal")
        else:
            async with fullratio.raised(io.rados, journal, prepared.raise_full_ratio, holder=holder, lease_s=lease_s,
                                        reason=f"purge of {prepared.plan.profile.bucket}"):
                report = await _run(prepared, io, purge_cfg=purge_cfg, on_progress=on_progress, board=board,
                                    workers=workers)
        failed = not report.ok
        return report
    finally:
        if metrics is not None:
            metrics.finish(failed=failed)


def _both(first: Callable[[Progress], None] | None, second: Callable[[Progress], None]) -> Callable[[Progress], None]:
    def both(p: Progress) -> None:
        if first is not None:
            first(p)
        second(p)
    return both


async def _run(prepared: Prepared, io: PurgeIO, *, purge_cfg: PurgeSection,
               on_progress: Callable[[Progress], None] | None = None, board: Board | None = None,
               workers: int = 1) -> PurgeReport:
    store_dir = prepared.checkpoint.path.parent
    CheckpointStore(Path(store_dir)).ensure()
    cp = prepared.checkpoint
    cp.lock()
    try:
        state = prepared.state
        if state is not None:
            state.resumed += 1
            state.status = "running"
            log.info("purge resumed", bucket=prepared.plan.profile.bucket, plan=prepared.plan.plan_id,
                     step=state.step + 1, cursor=state.cursor)
        else:
            state = State(plan=prepared.plan.to_dict())
        cp.save(state)
        report = await _execute(prepared.plan, io, checkpoint=cp, state=state, settings=settings_from(purge_cfg),
                                on_progress=on_progress, board=board, workers=workers)
        if report.ok:
            # Verified clean: nothing to resume. (A failed one keeps its checkpoint and its items.)
            cp.discard()
            cp.lock_path.unlink(missing_ok=True)
            if board is not None:
                try:
                    await asyncio.to_thread(board.discard)
                except CephError as exc:  # the bucket is gone and checked: only the items are left
                    log.warning(f"purge {board.job_id} is done, but its work items could not be removed; remove "
                                f"them with: rados -p <daemon.pool> rm {board.oid}", error=str(exc)[:200])
        return report
    finally:
        cp.unlock()


# -- work items in RADOS: several workers, several nodes ------------------------------------------

def uses_items(plan: Plan) -> bool:
    """Whether the plan's delete runs as work items: it lists by index shard, with the direct
    method, or with the s3 method on an unversioned bucket (a prefix or age purge too)."""
    if plan.tuning.direct_listing != "index":
        return False
    return plan.method == "direct" or (plan.method == "s3" and listable_by_index(plan.profile))


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@contextlib.contextmanager
def open_board(rados: RadosAdapter, job_id: str, *, pool: str, lease_s: float,
               create_pool: bool | None = None, workers: int = 4) -> Iterator[Board]:
    """The work items of purge ``job_id`` in ``pool`` (daemon.pool). ``create_pool``: a new purge
    creates the pool if it is missing and allowed; None (join, status): a missing pool means no
    such purge."""
    if create_pool is None:
        if pool not in (rados.command({"prefix": "osd pool ls"}) or []):
            raise NoSuchJob(f"no purge {job_id!r}: the rgwkeeper pool {pool!r} (daemon.pool) does not exist")
    else:
        ensure_pool(rados, pool, create_pool)
    store = ObjectStore(rados, pool, threads=2 * workers + 4)  # takes, records, renewals: not behind page work
    try:
        yield Board(store, job_id, worker=worker_name(), lease_s=int(lease_s))
    finally:
        store.close()


async def join(board: Board, request: PurgeRequest, io: PurgeIO, *, purge_cfg: PurgeSection, workers: int,
               on_progress: Callable[[Progress], None] | None = None) -> JoinReport:
    """Add ``workers`` workers to the running purge whose items ``board`` holds. ``request`` (this
    command line) must be the purge's own: a difference is refused, named."""
    snap = await asyncio.to_thread(read_to_join, board)
    if many.is_many(snap):
        raise UsageError(f"purge {board.job_id} is a job of several buckets: join it with the same filters and no "
                         "BUCKET (nothing was changed)")
    plan = _stored_plan(board, snap)
    differ = request_differences(request, plan.request)
    if differ:
        raise UsageError(f"--join {board.job_id}: this command line differs from the purge's: {'; '.join(differ)}; "
                         "give the same bucket and filters (nothing was changed)")
    if snap.done:
        raise UsageError(f"purge {board.job_id}: every work item is done already; nothing to join")
    # The same bucket, not one re-created under its name since the purge began (its S3 deletes
    # go by name): the bucket's id must still be the plan's.
    now_id = await bucket_id_now(plan.profile.bucket, admin_api=io.admin_api, rgw=io.rgw)
    if now_id != plan.profile.bucket_id:
        raise UsageError(f"--join {board.job_id}: bucket {plan.profile.bucket!r} is "
                         + (f"now id {now_id}" if now_id else "gone")
                         + f", not the purge's {plan.profile.bucket_id}; nothing was changed")
    board.lease_s = int(snap.spec["lease_s"])  # the purge's lease, whatever this node's config says
    return await _join(plan, io, board, workers=workers, settings=settings_from(purge_cfg), on_progress=on_progress,
                       spec=snap.spec)


def _stored_plan(board: Board, snap: Snapshot) -> Plan:
    try:
        return Plan.from_dict(snap.spec["plan"])
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{board.oid}: its plan cannot be read ({type(exc).__name__}: {str(exc)[:80]}); "
                         "join it with the rgwkeeper version that started it") from None


def request_differences(mine: PurgeRequest, theirs: PurgeRequest) -> list[str]:
    """What differs between two requests, as "NAME: X here, Y in the purge"."""
    a, b = asdict(mine), asdict(theirs)
    return [f"{k}: {a[k]!r} here, {b[k]!r} in the purge" for k in a if a[k] != b[k]]


def read_to_join(board: Board) -> Snapshot:
    """The board a ``--join`` joins. No items may also mean the purge has not published them
    yet: it prints its id (and the join command) before its fence, and publishes after it."""
    try:
        return board.read()
    except NoSuchJob as exc:
        raise NoSuchJob(f"{exc}; a purge started just now publishes its items a moment after it prints its id: "
                        "if it did, run --join again in a few seconds") from None


def valid_job_id(text: str) -> bool:
    """A purge id as Plan.plan_id makes it: 12 lowercase hex digits."""
    return is_job_id(text)


def items_view(snap: Snapshot, *, now: float) -> dict[str, Any]:
    """The work items for ``purge --status``: each item's state, and the purge's objects, rate
    and ETA. An item not done is running while its last record is within a lease, else stalled
    (its worker died or is stuck: another takes it over once the lease runs out)."""
    plan = snap.spec["plan"]
    lease_s = float(snap.spec.get("lease_s", 30))
    counters = snap.counters()
    deleted = counters.get("objects_deleted", 0)
    elapsed = max(0.0, now - float(snap.spec.get("created", now)))
    rate = deleted / elapsed if elapsed > 0 else 0.0
    whole = PurgeRequest(**plan["request"]).whole_bucket
    total = int(plan["profile"]["num_objects"])
    left = max(0, total - deleted) if whole else None
    items = []
    for i in snap.items:
        ago = max(0.0, now - i.updated) if i.updated else None
        state = i.state if i.state == "done" else "waiting" if not i.takes else \
            "running" if ago is not None and ago <= lease_s else "stalled"
        items.append({"item": i.n, "shard": i.shard, "state": state, "worker": i.worker, "takes": i.takes,
                      "range_of": i.of if i.of >= 0 else None, "range_last": i.last or None, "cutting": i.cutting,
                      "objects_deleted": i.counters.get("objects_deleted", 0),
                      "last_record_s_ago": round(ago, 1) if ago is not None else None})
    by_state = {k: sum(1 for i in items if i["state"] == k) for k in ("done", "running", "stalled", "waiting")}
    return {"bucket": plan["profile"]["bucket"], "bucket_id": plan["profile"]["bucket_id"],
            "request": plan["request"], "items": items, "by_state": by_state, "counters": counters,
            "objects_total": total if whole else None, "objects_per_s": round(rate, 1), "elapsed_s": round(elapsed, 1),
            "eta_s": round(left / rate, 1) if left is not None and rate > 0 else None, "lease_s": lease_s}


# -- many buckets as one job (purge.many) ---------------------------------------------------------

async def resume_prepared(plan: Plan, state: State, io: PurgeIO, *, purge_cfg: PurgeSection,
                          store: CheckpointStore) -> Prepared:
    """A purge another worker began, from its plan and its mirrored state (purge.many), under a
    local checkpoint here: the same full-cluster gate as ``prepare``, no new plan."""
    bucket = plan.profile.bucket
    check_protected(bucket, purge_cfg.protected_buckets)
    # The same bucket, not one re-created under its name since (its S3 deletes go by name); a
    # bucket that is gone is the plan's own drop, resumed.
    now_id = await bucket_id_now(bucket, admin_api=io.admin_api, rgw=io.rgw)
    if now_id is not None and now_id != plan.profile.bucket_id:
        raise UsageError(f"bucket {bucket!r} is now id {now_id}, not the id {plan.profile.bucket_id} its purge "
                         f"{plan.plan_id} began on: it was re-created; nothing of it was changed")
    what = f"purge of {bucket!r}"
    full = await full_gate(io, what, None, purge_cfg.max_full_ratio, may_free=plan.method == "direct")
    if full.full and not plan.has(FreeWhileFull):
        raise ClusterFull(full.refusal(what + f" (method {plan.method})"))
    return Prepared(plan=plan, checkpoint=store.for_purge(bucket, plan.profile.bucket_id, plan.request.key()),
                    state=state, ignored=[], full=full)


async def purge_job_bucket(board: Board, lease: Lease, io: PurgeIO, *, filters: dict[str, Any], source: str,
                           purge_cfg: PurgeSection, store: CheckpointStore, pool: str) -> tuple[PurgeReport, bool]:
    """Purge the bucket of job item ``lease`` (purge.many): resume the plan and state its item
    mirrors (a worker before us began it), else prepare it here and record the plan first; the
    checkpoint is mirrored into the item at every save. Returns the report and whether resumed."""
    try:
        return await _purge_job_bucket(board, lease, io, filters=filters, source=source, purge_cfg=purge_cfg,
                                       store=store, pool=pool)
    except ClusterFull as exc:  # the cluster became full during the job: the way on is each bucket alone
        raise ClusterFull(f"{exc} (in a job: {JOB_FULL_REMEDY})") from None


async def _purge_job_bucket(board: Board, lease: Lease, io: PurgeIO, *, filters: dict[str, Any], source: str,
                            purge_cfg: PurgeSection, store: CheckpointStore, pool: str) -> tuple[PurgeReport, bool]:
    n, bucket = lease.item.n, lease.item.shard
    key = many.plan_key(n)
    stored = await asyncio.to_thread(board.value, key)
    if stored and isinstance(lease.item.cursor.get("state"), dict):
        try:
            plan = Plan.from_dict(json.loads(stored))
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(f"{board.oid} {key}: the plan of {bucket!r} cannot be read ({type(exc).__name__}); "
                             "finish it with the rgwkeeper version that started it") from None
        state = many.mirrored_state(lease.item.cursor, plan)
        assert state is not None
        prepared = await resume_prepared(plan, state, io, purge_cfg=purge_cfg, store=store)
    else:
        try:
            prepared = await prepare(many.request_for(filters, bucket), io, purge_cfg=purge_cfg, store=store)
        except NoSuchBucket:
            if source.startswith("list:"):
                raise  # a name the operator listed: a typo must not read as done
            raise many.Gone(bucket) from None
        plan = prepared.plan
        await asyncio.to_thread(board.record_value, lease, key, json.dumps(plan.to_dict(), sort_keys=True, default=str))
    mirrored = many.MirroredCheckpoint(prepared.checkpoint, board, lease, plan.plan_id)
    prepared.checkpoint = mirrored
    try:
        with contextlib.ExitStack() as stack:
            sub = stack.enter_context(open_board(io.rados, plan.plan_id, pool=pool, lease_s=purge_cfg.item_lease_s,
                                                 create_pool=False, workers=1)) if uses_items(plan) else None
            report = await run(prepared, io, purge_cfg=purge_cfg, board=sub, workers=1)
        await asyncio.to_thread(mirrored.flush)
    finally:
        mirrored.close()
    return report, prepared.resuming


#: What a job says on a full cluster: it does not raise the full ratio (one raise, journaled and
#: given back, belongs to one purge), so the way on is each bucket alone.
JOB_FULL_REMEDY = ("a job of several buckets does not raise the full ratio: purge them one by one with "
                   "--raise-full-ratio R (at most purge.max_full_ratio)")


async def job_full_gate(io: PurgeIO, buckets: str) -> None:
    """Before a job does anything (lists buckets, resumes, plans): on a full cluster it is refused
    in one line (``buckets`` names them), since its items live in an object a full cluster will not
    let it create, the bucket listing itself waits, and a job raises no ratio."""
    full = await read_full_state(io.rados)
    if full.full:
        raise ClusterFull(full.refusal(f"purge of {buckets}", remedy=JOB_FULL_REMEDY))


async def run_many(board: Board, io: PurgeIO, *, purge_cfg: PurgeSection, store: CheckpointStore, pool: str,
                   slots: int, on_bucket: Callable[[many.BucketOutcome], None] | None = None) -> many.ManyReport:
    """Work the buckets of job ``board`` (published with ``many.spec_for``), ``slots`` at once
    here; the job's items are removed once every bucket is done."""
    spec = (await asyncio.to_thread(board.read)).spec["plan"]
    filters, source = spec["filters"], str(spec.get("source", ""))

    async def one(lease: Lease) -> tuple[PurgeReport, bool]:
        return await purge_job_bucket(board, lease, io, filters=filters, source=source, purge_cfg=purge_cfg,
                                      store=store, pool=pool)

    report = await many.work(board, one, slots=slots, on_bucket=on_bucket)
    if report.ok:
        try:
            await asyncio.to_thread(board.discard)
        except CephError as exc:
            log.warning(f"purge job {board.job_id} is done, but its items could not be removed; remove them with: "
                        f"rados -p <daemon.pool> rm {board.oid}", error=str(exc)[:200])
    return report


def job_status(rados: RadosAdapter, pool: str, job_id: str) -> tuple[Snapshot, bool]:
    """The items of purge or job ``job_id`` as they stand, and whether it is a job of many buckets."""
    with open_board(rados, job_id, pool=pool, lease_s=30, workers=1) as board:
        snap = board.read()
        if many.is_many(snap):
            return snap, True
        _stored_plan(board, snap)
        return snap, False


# -- the full ratio raised for a run, and the configured expiry the daemon runs in-process --------

def holder_name() -> str:
    """Who a one-shot purge or expiry journals a raise of the full ratio as."""
    return f"purge@{socket.gethostname()}:{os.getpid()}"


@contextlib.contextmanager
def ratio_journal(io: PurgeIO, pool: str, raise_to: float | None) -> Iterator[Journal | None]:
    """The daemon's journal, where a raise of the full ratio is recorded before it is made."""
    if raise_to is None:
        yield None
        return
    if pool not in (io.rados.command({"prefix": "osd pool ls"}) or []):
        raise ClusterFull(f"--raise-full-ratio journals the raise in the daemon's pool {pool!r} (daemon.pool), "
                          "which does not exist: start the daemon once, or raise the ratio by hand; nothing "
                          "was changed")
    store = ObjectStore(io.rados, pool)
    try:
        yield Journal(store)
    finally:
        store.close()


def raised_for(io: PurgeIO, journal: Journal | None, raise_to: float | None, reason: str, *, holder: str,
               lease_s: float) -> AsyncContextManager[Any]:
    """The block a change runs in: the full ratio raised for it (journaled, given back), or nothing."""
    if raise_to is None or journal is None:
        return contextlib.nullcontext()
    return fullratio.raised(io.rados, journal, raise_to, holder=holder, lease_s=lease_s, reason=reason)


@dataclass
class ExpiryOutcome:
    """What one run of the configured expiry rules did, bucket by bucket."""

    results: list[ExpireResult]
    failures: list[BucketFailure]
    skipped: list[tuple[str, str]]

    def per_bucket(self) -> dict[str, bool]:
        return {**{r.bucket: r.ok for r in self.results}, **{f.bucket: False for f in self.failures}}

    def problem(self) -> str | None:
        return expiry_problem(self.results, self.failures)


async def expire_configured(io: PurgeIO, cfg: Config, *, raise_full_ratio: float | None, journal: Journal | None,
                            holder: str) -> ExpiryOutcome:
    """Install and run ``purge.lifecycle_rules`` on every bucket they match, now: the daemon's
    fill-triggered expiry, in-process. A bucket that fails is recorded and the others go on; on a
    full cluster the ratio is raised only with ``raise_full_ratio``, journaled in ``journal``."""
    rules = [lc.parse_rule(r) for r in cfg.purge.lifecycle_rules]
    if not rules:
        raise UsageError("no lifecycle rules: set purge.lifecycle_rules in the config")
    full = await full_gate(io, "expire", raise_full_ratio, cfg.purge.max_full_ratio)
    raise_to = raise_full_ratio if full.full else None
    planned = await plan_expiry(io, bucket=None, cli_rule=None, config_rules=rules,
                                protected=cfg.purge.protected_buckets, run_now=True)
    purge_cfg = impact.resolve(cfg.purge, cfg.fill.expire_impact or None)
    async with raised_for(io, journal, raise_to, "expire", holder=holder, lease_s=cfg.daemon.lease_s):
        results = await apply_expiry_with(planned, io, purge_cfg, one_bucket=False)
    return ExpiryOutcome(results, planned.failures, planned.skipped)


async def apply_expiry_with(planned: ExpiryPlans, io: PurgeIO, purge_cfg: PurgeSection, *, one_bucket: bool,
                            on_failure: Callable[[BucketFailure], None] | None = None) -> list[ExpireResult]:
    """``apply_expiry`` under ``[purge]``: its timeouts, and for a run from a listing its
    retries, batches in flight, rate cap and pacing, as a purge gets them."""
    if any(x.by_listing for x in planned.plans):
        impact.check_listing(purge_cfg)
    return await apply_expiry(planned, io, long_timeout_s=purge_cfg.long_command_timeout_s,
                              busy_wait_s=purge_cfg.lc_busy_wait_s, one_bucket=one_bucket, on_failure=on_failure,
                              settings=settings_from(purge_cfg), tuning=tuning_from(purge_cfg))
