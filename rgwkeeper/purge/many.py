"""Many buckets as one purge job: one work item per bucket, in RADOS, that any admin node works.

The job is a board (purge.board) like a bucket's: ``purge.<job id>`` in the rgwkeeper pool,
whose spec says ``kind = "buckets"`` and holds the filters every bucket is purged with, and
whose items are the buckets (an item's ``shard`` is the bucket's name). A worker takes a
bucket under a lease, renews it while the bucket's own purge runs, and mirrors that purge's
checkpoint into the item at every save (``MirroredCheckpoint``): the plan once, in
``plan.<n>``, and the step, cursor, counters and memo in the item. A worker on any node that
takes the bucket over after the first one died resumes that plan at that step, as a local
checkpoint would; the local file is a cache of the item. Each bucket gets its own end-state
read-back; the job is done when every bucket is, and is removed then.

The job id is the hash of the filters and the bucket source (the list, or the patterns):
running the same command again, on this node or another, works the same job.
docs/purge.md, "Many buckets as one job".
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import fnmatch
import hashlib
import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Awaitable, Callable, Iterable, Mapping, Sequence

import structlog

from rgwkeeper.errors import CephError, InvalidName, RgwkeeperError, UsageError
from rgwkeeper.names import bucket_pattern_problem, validate_bucket
from rgwkeeper.purge.board import DONE, Board, Lease, LeaseLost, NoSuchJob, Snapshot
from rgwkeeper.purge.checkpoint import Checkpoint, State
from rgwkeeper.purge.execute import PurgeReport, keep_lease
from rgwkeeper.purge.plan import Plan, PurgeRequest

log = structlog.get_logger("rgwkeeper.purge.many")

KIND = "buckets"
#: More buckets than this in one job is refused: split the list or narrow the pattern.
MAX_BUCKETS = 50_000  # three omap keys each: under osd_deep_scrub_large_omap_object_key_threshold (200,000)
#: The filters a job's buckets share: every PurgeRequest field but the bucket.
FILTERS = ("prefix", "method", "older_than_s", "larger_than", "smaller_than")


def filters_of(request: PurgeRequest) -> dict[str, Any]:
    d = asdict(request)
    return {k: d[k] for k in FILTERS}


def request_for(filters: Mapping[str, Any], bucket: str) -> PurgeRequest:
    return PurgeRequest(bucket=bucket, **{k: filters.get(k) for k in FILTERS if k != "method"},
                        method=filters.get("method") or "auto")


def job_id(filters: Mapping[str, Any], source: str) -> str:
    """12 hex digits from the filters and where the buckets came from: the same command, the same job."""
    body = json.dumps({"filters": {k: filters.get(k) for k in FILTERS}, "source": source}, sort_keys=True)
    return hashlib.sha256(f"buckets/{body}".encode()).hexdigest()[:12]


def list_source(names: Sequence[str]) -> str:
    return "list:" + hashlib.sha256("\n".join(sorted(set(names))).encode()).hexdigest()[:16]


def pattern_source(patterns: Sequence[str]) -> str:
    return "match:" + ",".join(sorted(set(patterns)))


def parse_list(text: str, where: str) -> list[str]:
    """Bucket names, one per line (blank lines and ``#`` comments skipped), each validated:
    one bad name refuses the whole list, naming its line."""
    names: list[str] = []
    for n, line in enumerate(text.splitlines(), 1):
        name = line.split("#", 1)[0].strip()
        if not name:
            continue
        try:
            validate_bucket(name)
        except InvalidName as exc:
            raise InvalidName(f"{where} line {n}: {exc}") from None
        names.append(name)
    return _checked(list(dict.fromkeys(names)), f"{where} names no bucket")


def check_patterns(patterns: Iterable[str]) -> list[str]:
    out = []
    for p in patterns:
        if not p or p != p.strip() or any(c in p for c in "/\\\n\t ") or len(p) > 63:
            raise UsageError(f"--match {p!r} is not a bucket name pattern: up to 63 characters of a bucket name and "
                             "* ? [..]; no spaces or slashes")
        problem = bucket_pattern_problem(p)
        if problem:
            raise UsageError(f"--match {problem}")
        out.append(p)
    return out


def select(patterns: Sequence[str], listed: Iterable[str], protected: Sequence[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """The buckets of ``listed`` (``radosgw-admin bucket list``) that match a pattern, and those
    skipped with why: protected ones, and names rgwkeeper cannot purge by name (a tenant's
    ``tenant/bucket``)."""
    chosen, skipped = [], []
    for b in sorted(set(listed)):
        if not any(fnmatch.fnmatchcase(b, p) for p in patterns):
            continue
        try:
            validate_bucket(b)
        except InvalidName:
            skipped.append((b, "not a bucket rgwkeeper purges by name (a tenant's bucket is tenant/name)"))
            continue
        hit = next((p for p in protected if fnmatch.fnmatchcase(b, p)), None)
        if hit is not None:
            skipped.append((b, f"protected (purge.protected_buckets pattern {hit!r})"))
            continue
        chosen.append(b)
    return _checked(chosen, f"no bucket matches {', '.join(patterns)}" + (
        f" that is not skipped ({len(skipped)} skipped)" if skipped else "")), skipped


def _checked(names: list[str], empty: str) -> list[str]:
    if not names:
        raise UsageError(f"{empty}; nothing was changed")
    if len(names) > MAX_BUCKETS:
        raise UsageError(f"{len(names):,} buckets is more than one job takes ({MAX_BUCKETS:,}); split them into "
                         "several lists or narrower patterns (nothing was changed)")
    return names


def spec_for(filters: Mapping[str, Any], source: str, buckets: Sequence[str], *, job: str, lease_s: int,
             created: float) -> dict[str, Any]:
    return {"kind": KIND, "plan_id": job, "created": created, "lease_s": lease_s,
            "plan": {"filters": {k: filters.get(k) for k in FILTERS}, "source": source, "buckets": len(buckets)}}


def is_many(snap: Snapshot) -> bool:
    return snap.spec.get("kind") == KIND


def filters_differences(mine: Mapping[str, Any], theirs: Mapping[str, Any]) -> list[str]:
    return [f"{k}: {mine.get(k)!r} here, {theirs.get(k)!r} in the job" for k in FILTERS if mine.get(k) != theirs.get(k)]


# -- a bucket's checkpoint, mirrored into its item -------------------------------------------------

def plan_key(n: int) -> str:
    return f"plan.{n:06d}"


class MirroredCheckpoint(Checkpoint):
    """The bucket's local checkpoint, and at every save the same state (without the plan, which
    is in ``plan.<n>``) in its item, compared against the lease in the same write: a worker that
    lost the bucket writes nothing more there (LeaseLost).

    The RADOS write runs on a thread of its own, in order, so a slow OSD does not stall the
    event loop (and with it every lease's renewal); its failure is raised by the next save, and
    ``flush`` waits for the last one before the bucket is recorded done."""

    def __init__(self, local: Checkpoint, board: Board, lease: Lease, plan_id: str) -> None:
        super().__init__(local.path, local.lock_path)
        self.board, self.lease, self.plan_id = board, lease, plan_id
        self._writer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="mirror")
        self._last: concurrent.futures.Future[None] | None = None
        self._error: BaseException | None = None

    def save(self, state: State) -> None:
        self._raise_if_failed()
        super().save(state)
        self.lease.item.cursor = {"plan_id": self.plan_id,
                                  "state": json.loads(json.dumps({k: v for k, v in state.__dict__.items() if k != "plan"},
                                                                 default=str))}
        self.lease.item.counters = {k: int(v) for k, v in state.counters.items()
                                    if k in ("objects_deleted", "bytes_deleted")}
        self._last = self._writer.submit(self._write)

    def _write(self) -> None:
        if self._error is not None:
            return
        try:
            self.board.record(self.lease)
        except BaseException as exc:  # noqa: BLE001 - kept for the caller's thread
            self._error = exc

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error

    def flush(self) -> None:
        """Wait for the last mirror write (blocking: run it on a thread); raise its failure."""
        if self._last is not None:
            self._last.result()
        self._raise_if_failed()

    def close(self) -> None:
        self._writer.shutdown(wait=False, cancel_futures=True)


def mirrored_state(item_cursor: Mapping[str, Any], plan: Plan) -> State | None:
    raw = item_cursor.get("state")
    if not isinstance(raw, dict):
        return None
    try:
        return State(plan=plan.to_dict(), **{k: v for k, v in raw.items() if k != "plan"})
    except TypeError as exc:
        raise UsageError(f"the bucket's mirrored checkpoint cannot be read ({exc}); finish it with the rgwkeeper "
                         "version that started it") from None


# -- running the job ------------------------------------------------------------------------------

@dataclass
class BucketOutcome:
    bucket: str
    ok: bool
    plan_id: str = ""
    method: str = ""
    objects_deleted: int = 0
    bytes_deleted: int = 0
    checks_failed: list[str] = field(default_factory=list)
    error: str = ""
    resumed: bool = False
    #: The librados window held this bucket's purge below its rate cap (the report's pacing).
    cap_held_back: bool = False

    def line(self) -> str:
        if self.error:
            return f"{self.bucket}: not purged: {self.error}"
        if self.method == "none":
            return f"{self.bucket}: did not exist, and no purge of it was recorded: nothing to purge"
        head = (f"{self.bucket}: purged ({self.method}, purge {self.plan_id}): {self.objects_deleted:,} objects"
                + (", resumed" if self.resumed else "")
                + (", below its rate cap with purge.cap_ops_in_flight operations in flight" if self.cap_held_back else ""))
        return head if self.ok else head + "; end state not clean: " + "; ".join(self.checks_failed)


@dataclass
class ManyReport:
    job_id: str
    buckets: int
    outcomes: list[BucketOutcome]
    done: int  # buckets done in the job (by any worker), when this worker stopped
    elapsed_s: float

    @property
    def ok(self) -> bool:
        return self.done == self.buckets and all(o.ok for o in self.outcomes)

    def to_dict(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "buckets": self.buckets, "done": self.done, "ok": self.ok,
                "elapsed_s": self.elapsed_s, "here": [asdict(o) for o in self.outcomes]}


class Gone(Exception):
    """The bucket does not exist and no purge of it was recorded: nothing to purge."""


#: One bucket's purge, given its item under lease: what the library's prepare/run do, bound by
#: the caller (rgwkeeper.purge.run_many) so this module needs no adapters.
RunBucket = Callable[[Lease], Awaitable[tuple[PurgeReport, bool]]]


async def work(board: Board, run_bucket: RunBucket, *, slots: int,
               call: Callable[..., Awaitable[Any]] | None = None,
               sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
               on_bucket: Callable[[BucketOutcome], None] | None = None,
               clock: Callable[[], float] = time.monotonic) -> ManyReport:
    """Take buckets of the job and purge them, ``slots`` at once, until every bucket is done or
    the only ones left failed here (each is tried once per run; its error is in its item for
    ``--status``, and running the command again tries it again). Buckets other workers hold are
    waited for, and taken over when their leases run out."""
    call = call or (lambda fn, *a: asyncio.to_thread(fn, *a))
    t0 = clock()
    outcomes: list[BucketOutcome] = []
    failed: set[int] = set()
    busy: set[int] = set()

    async def renew_and_touch(fn: Callable[..., Any], lease: Lease) -> None:
        # Each renewal also records the item, so --status sees a live bucket whose purge is in a
        # long step (an index-shard delete, GC) as running, not stalled.
        await call(fn, lease)
        await call(board.record, lease)

    async def one(lease: Lease) -> None:
        n, bucket = lease.item.n, lease.item.shard
        keeper = asyncio.ensure_future(keep_lease(board, lease, sleep=sleep, call=renew_and_touch))
        job = asyncio.ensure_future(run_bucket(lease))
        try:
            done, _ = await asyncio.wait({job, keeper}, return_when=asyncio.FIRST_COMPLETED)
            if keeper in done:  # lost the lease: stop the bucket's purge before the next owner starts
                job.cancel()
                await asyncio.gather(job, return_exceptions=True)
                keeper.result()  # raises LeaseLost
            report, resumed = job.result()
        except Gone:
            out = BucketOutcome(bucket, True, method="none", error="")
            lease.item.cursor = {"result": {"ok": True, "gone": True}}
            out = await record_done(lease, out)
        except LeaseLost as exc:  # another worker has it now: not ours to count as failed
            board.let_go(lease)
            failed.add(n)
            log.warning("purge job bucket taken over", bucket=bucket, error=str(exc)[:200])
            return
        except (RgwkeeperError, CephError) as exc:
            out = BucketOutcome(bucket, False, plan_id=str(lease.item.cursor.get("plan_id", "")), error=str(exc)[:300])
            await record_failed(lease, out.error)
        else:
            c = report.counters
            out = BucketOutcome(bucket, report.ok, plan_id=report.plan_id, method=report.method,
                                objects_deleted=int(c.get("objects_deleted", 0)), bytes_deleted=int(c.get("bytes_deleted", 0)),
                                checks_failed=[f"{x.name}: {x.detail}" for x in report.checks if x.status == "failed"],
                                resumed=resumed, cap_held_back=bool(report.pacing.get("cap_held_back_by_window")))
            lease.item.counters = {"objects_deleted": out.objects_deleted, "bytes_deleted": out.bytes_deleted}
            if report.ok:
                lease.item.cursor = {"plan_id": report.plan_id, "result": {"ok": True, "method": report.method,
                                                                           "checks": len(report.checks)}}
                out = await record_done(lease, out)
            else:
                await record_failed(lease, "; ".join(out.checks_failed)[:300])
        finally:
            for t in (job, keeper):
                t.cancel()
            await asyncio.gather(job, keeper, return_exceptions=True)
            busy.discard(n)
        outcomes.append(out)
        if on_bucket is not None:
            on_bucket(out)

    async def record_failed(lease: Lease, error: str) -> None:
        """Keep the bucket's error in its item for --status and let it go at once (not left to
        run out): the next run takes it again; this one does not."""
        failed.add(lease.item.n)
        lease.item.cursor = {**lease.item.cursor, "error": error}
        try:
            await call(board.record, lease)
            await call(board.release, lease)
        except (CephError, LeaseLost):
            board.let_go(lease)

    async def record_done(lease: Lease, out: BucketOutcome) -> BucketOutcome:
        """Record the bucket done; a bucket purged and checked whose record cannot be written is
        said so (its purge, taken again, finds its checkpoint done or the bucket gone)."""
        try:
            await call(board.finish, lease)
        except (CephError, LeaseLost) as exc:
            board.let_go(lease)
            failed.add(lease.item.n)
            return dataclasses.replace(out, ok=False, error=f"purged, but its item could not be recorded done: {exc}")
        return out

    running: set[asyncio.Future[None]] = set()
    try:
        while True:
            try:
                while len(running) < slots:
                    lease = await call(board.take, frozenset(failed | busy))
                    if lease is None:
                        break
                    busy.add(lease.item.n)
                    running.add(asyncio.ensure_future(one(lease)))
                snap = await call(board.read)
            except NoSuchJob:  # another worker finished the job and removed it
                if running:
                    await asyncio.wait(running)
                    for f in running:
                        f.result()
                    running = set()
                break
            left = [i.n for i in snap.items if i.state != DONE and i.n not in failed]
            if not left and not running:
                break
            if running:
                finished, running = await asyncio.wait(running, timeout=min(5.0, board.lease_s / 3),
                                                       return_when=asyncio.FIRST_COMPLETED)
                for f in finished:
                    f.result()
            else:  # the rest is held by other workers: wait for them, or for their leases to run out
                await sleep(min(5.0, board.lease_s / 3))
    finally:
        for f in running:
            f.cancel()
        await asyncio.gather(*running, return_exceptions=True)
    try:
        snap = await call(board.read)
        done = sum(1 for i in snap.items if i.state == DONE)
        total = len(snap.items)
    except NoSuchJob:  # another worker finished the job and removed it
        done = total = len(outcomes)
    return ManyReport(job_id=board.job_id, buckets=total, outcomes=outcomes, done=done,
                      elapsed_s=round(clock() - t0, 3))


def view(snap: Snapshot, *, now: float) -> dict[str, Any]:
    """The job for ``purge --status``: each bucket's state (done, running, stalled, waiting,
    failed), its own purge id and objects, and the job's counts."""
    lease_s = float(snap.spec.get("lease_s", 30))
    rows = []
    for i in snap.items:
        ago = max(0.0, now - i.updated) if i.updated else None
        error = str(i.cursor.get("error", "")) if isinstance(i.cursor, dict) else ""
        state = i.state if i.state == DONE else "waiting" if not i.takes else \
            "running" if ago is not None and ago <= lease_s and not error else "failed" if error else "stalled"
        mirrored = i.cursor.get("state") if isinstance(i.cursor.get("state"), dict) else {}
        rows.append({"bucket": i.shard, "state": state, "purge_id": i.cursor.get("plan_id"), "worker": i.worker,
                     "takes": i.takes, "step": mirrored.get("step"),
                     "objects_deleted": i.counters.get("objects_deleted", 0), "error": error or None,
                     "last_record_s_ago": round(ago, 1) if ago is not None else None})
    by_state = {k: sum(1 for r in rows if r["state"] == k) for k in ("done", "running", "stalled", "waiting", "failed")}
    elapsed = max(0.0, now - float(snap.spec.get("created", now)))
    done = by_state["done"]
    rate = done / elapsed if elapsed > 0 else 0.0
    return {"kind": KIND, "filters": snap.spec["plan"].get("filters", {}), "source": snap.spec["plan"].get("source"),
            "buckets": rows, "by_state": by_state, "counters": snap.counters(), "elapsed_s": round(elapsed, 1),
            "buckets_per_s": round(rate, 3),
            "eta_s": round((len(rows) - done) / rate, 1) if rate > 0 and done < len(rows) else None,
            "lease_s": lease_s}
