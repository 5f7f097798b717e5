"""The deleters: one sends S3 DeleteObjects batches (re-checking each key first when asked),
the other removes objects with librados: the heads of objects whose head holds all their data,
and, where the release allows, objects with tails (each tail's reference dropped as RGW's GC
drops it, then the head). Both count what they did in the run's ledger and honour its rate cap
and pacing."""

from __future__ import annotations

import asyncio
import errno
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import structlog

from rgwkeeper.adapters.manifest import (Manifest, ManifestError, RawObject, decode_manifest, estimated_locations,
                                         head_object, tail_objects)
from rgwkeeper.adapters.rados import BulkObjects
from rgwkeeper.adapters.s3 import S3Adapter
from rgwkeeper.purge.checkpoint import Ledger, crash_point
from rgwkeeper.purge.layout import ID_TAG_XATTR, MANIFEST_XATTR, TAIL_TAG_XATTR, XATTR_THREADS, head_oid
from rgwkeeper.purge.lister import Entry
from rgwkeeper.purge.pacing import Limiter, Pacer, RateCap
from rgwkeeper.purge.runtime import PurgeFailed, Threads

log = structlog.get_logger("rgwkeeper.purge")

RADOS_CHUNK_WINDOWS = 8  # a paced librados step works in chunks of 8 windows, then may pause
#: Under a cap: a request that starts later than this share of its slot widens the window.
CAP_LATE_SHARE = 0.1
#: Under a cap: a request that waited at least this share of its slot narrows it.
CAP_EARLY_SHARE = 0.5
RECHECK_IN_FLIGHT = 16  # re-check calls in flight (all batches together) before their deletes

#: An object whose tails this run releases: (its entry, its head (oid, locator), its manifest,
#: the tag its tails' references are put with).
Tailed = tuple[Entry, tuple[str, str], Manifest, bytes]
#: Tails put, and their heads removed, per round: bounds the memory and the write ops held for
#: a page of very large objects (a 5 TiB object has 1.3 million tails).
TAILS_PER_ROUND = 20_000
#: RGW's appendable objects carry it; their manifests are not in the captures: through S3.
APPEND_XATTR = "user.rgw.append_part_num"

#: A blocking check of one listed entry just before its delete (a HEAD, perhaps its tags):
#: True if it is still to be deleted. Keys written again since the listing are kept.
StillDue = Callable[[Entry], bool]


def chunks(items: list[Any], n: int) -> list[list[Any]]:
    return [items[i:i + n] for i in range(0, len(items), n)]


class S3Deleter:
    """DeleteObjects batches of one bucket. ``strict``: a refused key stops the run
    (PurgeFailed); otherwise refused keys are counted as ``keys_refused`` and the run goes on."""

    def __init__(self, s3: S3Adapter, bucket: str, threads: Threads, ledger: Ledger, cap: RateCap, *,
                 strict: bool = True, recheck_slots: asyncio.Semaphore | None = None) -> None:
        self.s3 = s3
        self.bucket = bucket
        self.threads = threads
        self.ledger = ledger
        self.cap = cap
        self.strict = strict
        # For the whole run, not per batch (a run that makes a deleter per page passes its own).
        self._recheck_slots = recheck_slots or asyncio.Semaphore(RECHECK_IN_FLIGHT)

    async def start(self, chunk: list[Entry], limiter: Limiter, still: StillDue | None = None) -> asyncio.Task[None]:
        """Wait for a slot in flight, then for the cap's time slot, and send one DeleteObjects.
        The cap comes second: a batch that waited for its time slot while every slot in flight
        was busy would leave together with the next one."""
        started = await limiter.acquire()
        try:
            await self.cap.take(len(chunk))
        except BaseException:
            await limiter.release()
            raise
        limiter.restart(started)  # the cap's wait is not busy time: pacing pauses after busy time
        return asyncio.create_task(self._batch(chunk, limiter, still))

    async def _recheck(self, chunk: list[Entry], still: StillDue) -> list[Entry]:
        async def one(e: Entry) -> bool:
            async with self._recheck_slots:
                return await self.threads.call("HeadObject", still, e)

        keep = await asyncio.gather(*(one(e) for e in chunk))
        if not all(keep):
            self.ledger.count(kept_rewritten=len(chunk) - sum(keep))
        return [e for e, k in zip(chunk, keep) if k]

    async def _batch(self, chunk: list[Entry], limiter: Limiter, still: StillDue | None) -> None:
        """One DeleteObjects request; the caller acquired ``limiter``, released here."""
        try:
            if still is not None:
                chunk = await self._recheck(chunk, still)
            objects = [{"Key": e["Key"], **({"VersionId": e["VersionId"]} if e.get("VersionId") else {})}
                       for e in chunk]
            errors = await self.threads.call("DeleteObjects", self.s3.delete_batch, self.bucket, objects) \
                if objects else []
        finally:
            await limiter.release()
        if errors and self.strict:
            first = errors[0]
            raise PurgeFailed(f"DeleteObjects {self.bucket}", f"{len(errors)} of {len(chunk)} keys refused, e.g. "
                                f"{first.get('Key')!r}: {first.get('Code')}")
        refused = {e.get("Key") for e in errors}
        done = [e for e in chunk if e["Key"] not in refused]
        markers = sum(1 for e in done if e.get("DeleteMarker"))
        self.ledger.count(objects_deleted=len(done) - markers, delete_markers_deleted=markers, via_s3=len(done),
                          bytes_deleted=sum(e.get("Size", 0) for e in done),
                          **({"keys_refused": len(chunk) - len(done)} if errors else {}))

    async def abort_uploads(self, uploads: list[Entry], limiter: Limiter) -> None:
        async def abort(u: Entry) -> None:
            async with limiter:
                await self.threads.call("AbortMultipartUpload", self.s3.abort_upload, self.bucket, u["Key"],
                                        u["UploadId"])

        await asyncio.gather(*(abort(u) for u in uploads))
        self.ledger.count(uploads_aborted=len(uploads))


@dataclass
class CapWindow:
    """Under a rate cap, the most librados operations in flight a run's head deleters may widen
    to (purge.cap_ops_in_flight, never past rados_ops_in_flight), and what it cost them: their
    capped requests, and those whose own librados work (stats, reads, removals; not the wait for
    the slot) took longer than the request's slot with the window at its most. One per run,
    shared by its head deleters (a work item's each)."""

    most: int = 1
    requests: int = 0
    slow: int = 0

    def held_back(self) -> bool | None:
        """Whether the window held the purge below its cap: most requests took longer than their
        slot at the widest window allowed. None: no capped request was timed (no head removed
        under a cap, or paced: pacing's pauses are not the window's)."""
        return None if self.requests == 0 else 2 * self.slow >= self.requests


class HeadDeleter:
    """Removes, with librados, the heads of objects whose head holds all their data (one RADOS
    object, nothing in GC) and, given ``tails_placement``, objects with tails: their heads'
    manifests name the tails, each tail loses this object's reference (cls_refcount put with the
    head's tail tag, what RGW's GC does: a copy's reference stays), then the head goes. The rest
    (a manifest it cannot read, tails in another placement) goes back to the caller for S3. ``window``: librados
    operations in flight; when paced, they go in chunks at the pacer's window with its pauses
    between chunks (one page of 1,000 removals at full speed hurt ingest on one core). Under a
    rate cap the most is ``cap_window.most`` (never past ``window``): a request's stats and
    removals go one at a time, and the window doubles while requests come late for the cap's
    schedule and halves while they wait half their slot or more, so the cap is kept with as few
    in flight as it takes (a request's operations all at once were what ingest noticed:
    docs/purge.md, "What each second held"). The most is 1 by default: a second operation in
    flight bought little rate for much ingest impact (docs/purge.md, "One operation at a time
    under a cap"); ``cap_window`` counts the requests the window held back."""

    def __init__(self, data: BulkObjects, *, pool: str, marker: str, head_chunk_bytes: int, window: int,
                 pacer: Pacer | None, cap: RateCap, ledger: Ledger, limiter: Limiter | None = None,
                 tails_placement: str | None = None, cap_window: CapWindow | None = None) -> None:
        self.data = data
        #: The bucket's placement rule when this run releases tails itself (the release allows it),
        #: else None: objects with tails then go back to the caller for S3.
        self.tails_placement = tails_placement
        self.pool = pool
        self.marker = marker
        self.head_chunk_bytes = head_chunk_bytes
        self.window = window
        self.pacer = pacer
        self.cap = cap
        self.ledger = ledger
        self._limiter = limiter
        self._cap_window = 1
        self.cap_stats = cap_window or CapWindow()
        self._cap_most = max(1, min(window, self.cap_stats.most))

    def _window(self) -> int:
        return self._cap_window if self.cap.rate > 0 else self.window

    def _follow_the_cap(self, n: int, late_s: float, waited_s: float) -> None:
        """After a capped request of ``n`` took its slot (``late_s`` past its start, or having
        waited ``waited_s`` for it): widen if it came late, narrow if it waited."""
        slot = n / self.cap.rate
        before = self._cap_window
        if late_s > CAP_LATE_SHARE * slot:
            self._cap_window = min(self._cap_most, self._cap_window * 2)
        elif waited_s >= CAP_EARLY_SHARE * slot:
            self._cap_window = max(1, self._cap_window // 2)
        if self._cap_window != before:
            log.debug("purge librados window", was=before, now=self._cap_window, late_ms=round(late_s * 1000, 1))

    def _time_the_cap(self, n: int, work_s: float) -> None:
        """Count a capped request whose librados work took ``work_s``: slow if that passed its
        slot with the window at its most (more in flight was what it lacked). Not when paced."""
        if self.pacer is not None:
            return
        self.cap_stats.requests += 1
        if work_s > n / self.cap.rate and self._cap_window >= self._cap_most:
            self.cap_stats.slow += 1

    async def many(self, op: Callable[..., Awaitable[list[Any]]], objs: list[Any], *, most: int = 0) -> list[Any]:
        """``op(objs, window=...)`` (stat_many, remove_many, ...) at the configured window (under a cap,
        the one that follows the cap), or paced; never wider than ``most`` if given."""
        base = self._window()
        if self.pacer is None or self._limiter is None:
            return await op(objs, window=min(base, most or base))
        out: list[Any] = []
        while len(out) < len(objs):
            window = min(self.pacer.limit(base), most or base)
            async with self._limiter:  # one chunk at a time across the pages in flight
                out.extend(await op(objs[len(out):len(out) + window * RADOS_CHUNK_WINDOWS], window=window))
        return out

    async def head_only(self, entries: list[Entry]) -> tuple[list[tuple[Entry, Any]], int, list[Entry]]:
        """(entries whose head holds all their data, with the head's oid; heads already gone;
        the entries that must go through S3)."""
        candidates, others = [], []
        for e in entries:
            single_part = "-" not in e.get("ETag", "-").strip('"')
            (candidates if e["Size"] <= self.head_chunk_bytes and single_part else others).append(e)
        if not candidates:
            return [], 0, others
        objs = [head_oid(self.marker, e["Key"]) for e in candidates]
        sizes = await self.many(self.data.stat_many, objs)
        remove, gone = [], 0
        for e, obj, size in zip(candidates, objs, sizes):
            if size is None:
                gone += 1  # removed by an earlier, interrupted run: its index entry is still there
            elif size == e["Size"]:
                remove.append((e, obj))
            else:
                others.append(e)  # compressed, encrypted with padding, or tails: RGW must do it
        return remove, gone, others

    async def with_tails(self, entries: list[Entry]) -> tuple[list[Tailed], int, list[Entry]]:
        """(entries whose tails this run releases, with their heads, manifests and tags; heads
        already gone; the entries that must go through S3). Only with ``tails_placement``. The
        manifests are decoded here; their tails are named later, a round at a time (_release)."""
        if self.tails_placement is None or not entries:
            return [], 0, entries
        heads = [head_oid(self.marker, e["Key"]) for e in entries]
        found = await self.many(self.data.xattrs_many, heads, most=XATTR_THREADS)
        tailed: list[Tailed] = []
        gone = 0
        others: list[Entry] = []
        for e, head, xattrs in zip(entries, heads, found):
            if xattrs is None:
                gone += 1  # removed by an earlier, interrupted run, after its tails: its index entry is still there
                continue
            fits = self._fits(e, head, xattrs)
            if fits is None:
                others.append(e)
            else:
                tailed.append((e, head, *fits))
        return tailed, gone, others

    def _fits(self, e: Entry, head: tuple[str, str], xattrs: dict[str, bytes]) -> tuple[Manifest, bytes] | None:
        """(manifest, tag) of an object whose tails this run may release, or None if RGW must
        delete it: no manifest or tag, an appendable object, a manifest the decoder refuses,
        one naming another head, or tails in another placement or storage class."""
        tag = xattrs.get(TAIL_TAG_XATTR) or xattrs.get(ID_TAG_XATTR)
        if MANIFEST_XATTR not in xattrs or not tag or APPEND_XATTR in xattrs:
            log.debug("purge: no manifest or tag, or appendable: through S3", key=e["Key"])
            return None
        try:
            m = decode_manifest(xattrs[MANIFEST_XATTR])
            own = head_object(m)
        except ManifestError as exc:
            log.debug("purge: manifest not handled, through S3", key=e["Key"], why=str(exc))
            return None
        rule = self.tails_placement or ""
        if (own.oid, own.locator) != head or (m.obj_size > m.head_size and
                                              m.tail_placement not in (rule, f"{rule}/STANDARD")):
            log.debug("purge: head or tail placement not this bucket's, through S3", key=e["Key"])
            return None
        return m, tag

    async def _release(self, tailed: list[Tailed], plain: list[tuple[str, str]]) -> tuple[list[Tailed], list[Entry]]:
        """Put each tail's reference, then remove the heads, a round of at most TAILS_PER_ROUND
        tails at a time (an object larger than that is a round of its own); the first round's
        removals also take ``plain``, the heads of head-only objects. Returns (the objects done,
        the entries whose manifest the walk refused: through S3)."""
        done: list[Tailed] = []
        refused: list[Entry] = []
        rounds: list[list[Tailed]] = [[]]  # one round, maybe empty: the plain heads go in it
        weight = 0
        for t in tailed:
            n = estimated_locations(t[2])
            if rounds[-1] and weight + n > TAILS_PER_ROUND:
                rounds.append([])
                weight = 0
            rounds[-1].append(t)
            weight += n
        for group in rounds:
            walked = await asyncio.to_thread(_walk, group) if group else []  # a large manifest's walk is CPU work
            tails: list[tuple[str, str, bytes]] = []
            ok: list[Tailed] = []
            for t, named in zip(group, walked):
                if isinstance(named, ManifestError):
                    log.debug("purge: manifest not handled, through S3", key=t[0]["Key"], why=str(named))
                    refused.append(t[0])
                    continue
                ok.append(t)
                tails += [(o.oid, o.locator, t[3]) for o in named]
            # Tails first, then heads: a run stopped in between finds the head and its manifest
            # again, and a second put of the same tag changes nothing (cls_refcount retires it).
            rets = await self.many(self.data.refcount_put_many, tails) if tails else []
            missing = 0
            for (oid, _, _), ret in zip(tails, rets):
                check_removed(self.pool, oid, ret, what="refcount put")
                missing += ret == -errno.ENOENT
            if missing:
                log.info("purge: tails already gone (an earlier run released them, or they never existed)",
                         missing=missing, of=len(tails))
            if tails:
                crash_point("tails-released")  # tests only: killed between the puts and their heads
            objs = [*plain, *(t[1] for t in ok)]
            plain = []
            rets = await self.many(self.data.remove_many, objs) if objs else []
            for obj, ret in zip(objs, rets):
                check_removed(self.pool, obj[0], ret)
            self.ledger.count(tails_released=len(tails) - missing, **({"tails_missing": missing} if missing else {}))
            done += ok
        return done, refused

    async def remove(self, entries: list[Entry], *, sweep: bool) -> list[Entry]:
        """Remove head-only objects and, with ``tails_placement``, objects with tails; return the
        entries that must go through S3.
        In a sweep, heads already gone were counted as deleted by the first pass. Under a rate
        cap, each of its requests stats its own objects just before removing them, so the
        reads are spread as the removals are (not a page of stats at once)."""
        if self.cap.rate <= 0:
            return await self._remove(entries, sweep=sweep)
        others: list[Entry] = []
        for part in chunks(entries, self.cap.chunk(len(entries))):
            others.extend(await self._remove(part, sweep=sweep))
        return others

    async def _remove(self, entries: list[Entry], *, sweep: bool) -> list[Entry]:
        clock = self.cap.clock
        t0 = clock()
        remove, gone, others = await self.head_only(entries)
        tailed, tailed_gone, others = await self.with_tails(others)
        work_s = clock() - t0
        gone += tailed_gone
        if not remove and not tailed and not gone:
            return others
        n = len(remove) + len(tailed)
        # Capped, ``entries`` already holds one request's worth (remove()); tails ride with their objects.
        late_s, waited_s = await self.cap.take(n)
        capped = self.cap.rate > 0 and n > 0
        if capped:
            self._follow_the_cap(n, late_s, waited_s)
        t1 = clock()
        done, refused = await self._release(tailed, [o for _, o in remove])
        if capped:
            self._time_the_cap(n, work_s + clock() - t1)
        others += refused
        removed = [e for e, _ in remove] + [t[0] for t in done]
        removed_bytes = sum(e["Size"] for e in removed)
        self.ledger.count(index_left=len(removed) + gone, direct_removed=len(removed),
                          **({"direct_with_tails": len(done)} if done else {}))
        if not sweep:
            self.ledger.count(objects_deleted=len(removed) + gone, bytes_deleted=removed_bytes)
        elif removed:
            self.ledger.count(objects_deleted=len(removed), bytes_deleted=removed_bytes)
        return others


def _walk(group: list[Tailed]) -> list[list[RawObject] | ManifestError]:
    """Each object's tails, or why its manifest cannot be walked (on a worker thread)."""
    out: list[list[RawObject] | ManifestError] = []
    for _, _, m, _ in group:
        try:
            out.append(tail_objects(m))
        except ManifestError as exc:
            out.append(exc)
    return out


def check_removed(pool: str, oid: str, ret: int, *, what: str = "remove") -> None:
    """A librados removal's return code: done, or already gone; anything else stops the run."""
    if ret not in (0, -errno.ENOENT):
        raise PurgeFailed(f"{pool}/{oid} {what}", errno.errorcode.get(-ret, str(ret)), ret=ret)
