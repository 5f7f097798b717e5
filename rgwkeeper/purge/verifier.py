"""The verifier: a purge's end state, read back. Exit codes are not evidence (``bucket rm``
exits 0 for a bucket that does not exist), so the last step looks: the bucket, its instance
and index shards gone, none of its RADOS objects left (tails still referenced by copies in
other buckets excepted), no GC entry holding them, the owner unlinked and its stats synced;
for a prefix or filtered purge, nothing matching still listed."""

from __future__ import annotations

import asyncio
import errno
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Awaitable, Callable

import structlog

from rgwkeeper.adapters.adminapi import AdminApi
from rgwkeeper.adapters.radosgw_admin import RadosgwAdmin, extract_json
from rgwkeeper.adapters.rados import BulkObjects
from rgwkeeper.errors import CephError, NotFound
from rgwkeeper.purge.layout import bucket_prefix, is_tail, parse_refcount
from rgwkeeper.purge.lister import Lister
from rgwkeeper.purge.plan import Scope, Verify
from rgwkeeper.purge.profile import BucketProfile, admin_first, gc_entries

log = structlog.get_logger("rgwkeeper.purge")


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok, failed, skipped, warning
    detail: str


class Verifier:
    def __init__(self, profile: BucketProfile, *, rgw: RadosgwAdmin, bulk: Callable[[str], BulkObjects], lister: Lister,
                 created_at: float, scan_max_objects: int, admin: AdminApi | None = None) -> None:
        self.p = profile
        self.rgw = rgw
        #: What the admin API serves is read through it: a radosgw-admin process per read, several
        #: at once at the purge's end, was what ingest noticed there (docs/purge.md, "The end state
        #: is read back"). radosgw-admin reads it without the caps, and GC and the owner's sync time.
        self.admin = admin
        self.bulk = bulk
        self.lister = lister
        self.created_at = created_at
        self.scan_max_objects = scan_max_objects

    async def check(self, step: Verify, *, owner_stats: dict[str, Any] | None = None) -> list[Check]:
        """``owner_stats``: the owner's stats as the drop's sync answered them (the admin API's,
        or what ``user stats --sync-stats`` printed: owner_stats_of), read instead of running
        ``user stats`` again."""
        if step.whole_bucket:
            return await self.bucket_gone(owner_stats)
        return await self.scope_empty(step.scope)

    async def bucket_gone(self, owner_stats: dict[str, Any] | None = None) -> list[Check]:
        """Each part is read independently and at once (most are radosgw-admin processes); the
        checks come back in a fixed order."""
        p = self.p
        pools = [x for x in dict.fromkeys((p.data_pool, p.data_extra_pool, *p.class_data_pools)) if x]
        parts = await _all(self._bucket(), self._instance(), self._index(),
                           *(self._one(self.pool_clean(pool)) for pool in pools), self._one(self.gc_clear()),
                           self._owner(owner_stats))
        return [c for part in parts for c in part]

    @staticmethod
    async def _one(check: Awaitable[Check]) -> list[Check]:
        return [await check]

    async def _bucket(self) -> list[Check]:
        p = self.p
        try:
            stats, via = await admin_first(self.admin, lambda api: api.bucket_stats(p.bucket),
                                           lambda: self.rgw.bucket_stats(p.bucket), gone="NoSuchBucket",
                                           what="read-back: bucket stats")
            same = stats.get("id") == p.bucket_id
            return [Check("bucket gone", "failed" if same else "warning",
                          f"{via} bucket stats still answers for it" if same else
                          f"a new bucket of that name exists (id {stats.get('id')})")]
        except NotFound:
            exists = await self.lister.threads.call("HeadBucket", self.lister.s3.bucket_exists, p.bucket)
            return [Check("bucket gone", "failed" if exists else "ok",
                          "S3 HeadBucket still finds it" if exists else
                          "bucket stats: does not exist; S3 HeadBucket: 404")]

    async def _instance(self) -> list[Check]:
        p = self.p
        key = f"{p.bucket}:{p.bucket_id}"
        try:
            await admin_first(self.admin, lambda api: api.metadata_get("bucket.instance", key),
                              lambda: self.rgw.metadata_get(f"bucket.instance:{key}"), gone="NoSuchKey",
                              what="read-back: bucket instance")
            return [Check("bucket instance gone", "failed", f"metadata bucket.instance:{key} still exists")]
        except NotFound:
            return [Check("bucket instance gone", "ok", "no bucket.instance metadata")]

    async def _index(self) -> list[Check]:
        p = self.p
        if p.index_pool and p.index_gen is None:
            return [Check("index shards gone", "warning", "not read back: the bucket's index generation "
                          "was not known (RGW removed its index with the bucket)")]
        if not p.index_pool:
            return []
        shards = p.index_shards
        sizes = await self.bulk(p.index_pool).stat_many([(o, "") for o in shards], window=64)
        left = [o for o, s in zip(shards, sizes) if s is not None]
        return [Check("index shards gone", "failed" if left else "ok",
                      f"{len(left)} of {len(shards)} left, e.g. {left[0]}" if left else
                      f"{len(shards)} shard objects absent from {p.index_pool}")]

    async def _owner(self, synced_stats: dict[str, Any] | None) -> list[Check]:
        p = self.p
        try:
            if synced_stats is None:
                # Not synced by this run (a purge resumed at its read-back): radosgw-admin's
                # `bucket list --uid` (the reference for whether the owner exists) and `user
                # stats` (the one answer that says when the stats were last synced).
                buckets = await self.rgw.user_buckets(p.owner)
                stats = await self.rgw.user_stats(p.owner)
            elif synced_stats.get(OWNER_GONE):
                return self._owner_gone()
            else:
                buckets, _ = await admin_first(
                    self.admin, lambda api: api.user_buckets(p.owner), lambda: self.rgw.user_buckets(p.owner),
                    gone="NoSuchUser", what="read-back: the owner's buckets", confirm_gone=True)
                stats = synced_stats
        except NotFound as exc:
            if exc.detail != "NoSuchUser":  # radosgw-admin's: the API's alone is confirmed first
                raise
            return self._owner_gone()
        owner_stats = stats.get("stats", {})
        by_api = stats.get("synced_by") == SYNCED_BY_ADMIN_API
        synced = _parse_time(stats.get("last_stats_sync"))
        # The admin API's answer carries no sync time: it answered the sync this run asked for
        # (docs/purge.md, "The owner's stats").
        fresh = by_api or (synced is not None and synced >= self.created_at - 1)
        when = ("synced through the admin API after the bucket was deleted" if by_api
                else f"synced {stats.get('last_stats_sync', '?')}")
        return [Check("owner unlinked", "failed" if p.bucket in buckets else "ok",
                      f"{p.owner} still lists {p.bucket}" if p.bucket in buckets else
                      f"bucket list --uid {p.owner}: {len(buckets)} buckets, {p.bucket} not among them"),
                Check("owner stats synced", "ok" if fresh else "warning",
                      f"{p.owner}: {owner_stats.get('num_objects', '?')} objects, {owner_stats.get('size', '?')} B, "
                      f"{when}" + ("" if fresh else " (before the purge)")
                      + (" (as the drop's user stats --sync-stats printed them)"
                         if synced_stats is not None and not by_api else ""))]

    def _owner_gone(self) -> list[Check]:
        """The owner does not exist (radosgw-admin's `bucket list --uid`: could not find user):
        removed once the bucket was gone (a user who owns a bucket cannot be), or gone before.
        No user lists the bucket and there are no stats to sync."""
        p = self.p
        return [Check("owner unlinked", "ok", f"the owner {p.owner} does not exist (bucket list --uid: could not "
                      "find user)"),
                Check("owner stats synced", "warning", f"the owner {p.owner} does not exist: no stats to sync")]

    async def pool_clean(self, pool: str) -> Check:
        p = self.p
        try:
            found, complete = await self.bulk(pool).list_prefix(bucket_prefix(p.marker),
                                                                max_scanned=self.scan_max_objects)
        except CephError as exc:
            if exc.ret != -errno.ENOENT:
                raise
            # RGW creates the data-extra (non-ec) pool on the first multipart upload only.
            return Check(f"no RADOS objects left in {pool}", "ok", "the pool does not exist")
        if not complete:
            return Check(f"no RADOS objects left in {pool}", "skipped",
                         f"the pool has more than {self.scan_max_objects:,} objects "
                         "(purge.verify_scan_max_objects); not scanned")
        leftover, shared = [], []
        for oid, locator in found:
            if not is_tail(oid, p.marker):
                leftover.append(oid)
                continue
            blob = await self.bulk(pool).get_xattr(oid, "refcount", locator=locator)
            refs = parse_refcount(blob).refs if blob else ()
            (shared if refs else leftover).append(oid)
        if leftover:
            return Check(f"no RADOS objects left in {pool}", "failed",
                         f"{len(leftover)} objects of the bucket left, e.g. {leftover[0]}")
        return Check(f"no RADOS objects left in {pool}", "ok",
                     f"none of {p.marker}_*" + (f" except {len(shared)} tail objects still referenced by copies "
                                                f"in other buckets (kept by design), e.g. {shared[0]}" if shared else ""))

    async def gc_clear(self, *, strict: bool = True) -> Check:
        prefix = bucket_prefix(self.p.marker)
        read = await gc_entries(self.p, rgw=self.rgw, bulk=self.bulk)
        ours = read.entries
        if ours:
            return Check("GC processed", "failed" if strict else "warning",
                         f"{len(ours)} GC entries still hold objects of the bucket (space not yet free)")
        return Check("GC processed", "ok", f"no GC entry for {prefix}* ({read.total} entries in all)")

    async def scope_empty(self, scope: Scope) -> list[Check]:
        versions = self.p.versioning != "off"
        remaining = await self.lister.matching(scope, versions=versions)
        what = "versions or delete markers" if versions else "objects"
        checks = [Check(f"no matching {what} left", "failed" if remaining else "ok",
                        f"{len(remaining)} left, e.g. {remaining[0]['Key'][:80]!r}" if remaining else
                        f"none under {scope.prefix or 'the bucket'}")]
        uploads = await self.lister.uploads(scope)
        checks.append(Check("no matching incomplete uploads", "failed" if uploads else "ok",
                            f"{len(uploads)} left" if uploads else "none"))
        # The bucket lives on and others may be deleting in it: GC entries are reported, not failed.
        checks.append(await self.gc_clear(strict=False))
        return checks


#: ``synced_by`` of owner stats the admin API's sync answered (AdminApi.sync_user_stats): its
#: answer has no ``last_stats_sync``, radosgw-admin's has.
SYNCED_BY_ADMIN_API = "admin API"
#: The owner's stats when the drop's sync found no such user (PurgeExecutor._sync_owner_stats).
OWNER_GONE = "owner_gone"


def owner_stats_of(printed: str | None) -> dict[str, Any] | None:
    """The owner's stats in what ``user stats --sync-stats`` printed (the same JSON ``user
    stats`` prints: stats, last_stats_sync); None where it printed something else."""
    try:
        doc = extract_json(printed or "")
    except ValueError:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("stats"), dict) or "last_stats_sync" not in doc:
        return None
    return doc


def _parse_time(text: Any) -> float | None:
    try:
        return datetime.fromisoformat(str(text)).timestamp()
    except ValueError:
        return None


async def _all(*aws: Awaitable[Any]) -> list[Any]:
    """``asyncio.gather``, but the first failure cancels the others before it is raised."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
