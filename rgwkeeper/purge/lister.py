"""The listers: a bucket's keys (or versions) and incomplete uploads, page by page, each page
with where a listing resumes after it; the next page is fetched while the caller works. The
Lister asks RGW (S3); the IndexLister reads the bucket's index shards with librados."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any, AsyncIterator, Callable, Mapping, Sequence

import structlog

from rgwkeeper.adapters.rados import BulkObjects
from rgwkeeper.adapters.s3 import S3Adapter
from rgwkeeper.purge.layout import CATEGORY_MULTIMETA, index_name, parse_dir_entry
from rgwkeeper.purge.plan import SHARDS_AT_ONCE, Scope
from rgwkeeper.purge.runtime import PurgeFailed, Threads

log = structlog.get_logger(__name__)

Entry = dict[str, Any]  # one listed key or version: Key, Size, LastModified, ETag, VersionId...
Cursor = dict[str, Any]  # {"start_after": key} or {"key_marker", "version_marker"} or {"end": True}


class Lister:
    """Listings of one bucket. ``page_size(filtered)`` says how many keys a page asks for
    (a paced or capped run lists smaller pages; a filtered one keeps them large, since few keys
    may match)."""

    def __init__(self, s3: S3Adapter, bucket: str, threads: Threads, *,
                 page_size: Callable[[bool], int] = lambda filtered: 1000) -> None:
        self.s3 = s3
        self.bucket = bucket
        self.threads = threads
        self.page_size = page_size

    async def pages(self, scope: Scope, cursor: Mapping[str, Any], *, versions: bool = False,
                    filtered: bool = False) -> AsyncIterator[tuple[list[Entry], Cursor]]:
        """Pages under ``scope.prefix`` from ``cursor`` on. A listing that fails (RGW restarting)
        is retried from the last page it returned: a generator that raised is finished."""
        done = object()
        listing: dict[str, Any] = {"it": None, "resume": dict(cursor)}
        b = self.bucket

        def next_page() -> Any:
            if listing["it"] is None:
                r = listing["resume"]
                size = self.page_size(filtered)
                listing["it"] = (
                    self.s3.iter_version_pages(b, scope.prefix, key_marker=r.get("key_marker"),
                                               version_marker=r.get("version_marker"), page_size=size)
                    if versions else self.s3.iter_pages(b, scope.prefix, start_after=r.get("start_after"),
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
            log.debug("purge s3 page", bucket=b, entries=len(entries))
            return entries, resume

        def fetch() -> asyncio.Future[Any]:
            return asyncio.ensure_future(self.threads.retry.call("list", lambda: self.threads.run(next_page)))

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

    async def matching(self, scope: Scope, *, versions: bool) -> list[Entry]:
        """Every listed key (or version and delete marker) ``scope`` matches, in one go."""

        def left() -> list[Entry]:
            if versions:
                return [e for entries, _ in self.s3.iter_version_pages(self.bucket, scope.prefix)
                        for e in entries if scope.matches(e)]
            return [e for entries in self.s3.iter_pages(self.bucket, scope.prefix) for e in entries
                    if scope.matches(e)]

        return await self.threads.call("list", left)

    async def uploads(self, scope: Scope) -> list[Entry]:
        """Incomplete multipart uploads under ``scope.prefix``, started before its cutoff."""
        cutoff = scope.cutoff_s

        def listing() -> list[Entry]:
            return [u for u in self.s3.iter_uploads(self.bucket, scope.prefix)
                    if cutoff is None or u["Initiated"].timestamp() < cutoff]

        return await self.threads.call("ListMultipartUploads", listing)


#: A key after every index key python-rados cannot decode: cls_rgw's special entries start with
#: byte 0x80, and "\u0080" is b"\xc2\x80" in UTF-8 (layout.py, parse_dir_entry).
AFTER_SPECIAL = "\u0080"


def past(key: str | None, last: str) -> bool:
    """Whether an omap key python-rados read (None: one it could not decode, whose first byte is
    0x80) comes after ``last`` in the OSD's bytewise order. Decoded keys compare as their UTF-8
    bytes do; a 0x80 key comes after ``last`` exactly when ``last`` starts with an ASCII byte."""
    if key is None:
        return last.encode()[0] < 0x80
    return key > last


def undecodable_name(keys: list[str | None]) -> bool:
    """Whether a key python-rados could not decode (None) comes before a key that starts with an
    ASCII character in one page: then it is not one of cls_rgw's 0x80 entries, which sort after
    every ASCII key, but an object name Python cannot decode, and key ranges cannot place it."""
    seen = False
    for k in keys:
        if k is None:
            seen = True
        elif seen and k < "\u0080":
            return True
    return False


def refuse_undecodable(shard: str, keys: Sequence[str | None]) -> None:
    """Stop a key range's listing at a name :func:`undecodable_name` finds."""
    if undecodable_name(keys):
        raise PurgeFailed(f"list index {shard}", "an object name python-rados cannot decode sits among the keys: "
                          "a key range cannot place it; set purge.range_entries = 0")


def page_end(shard: str, keys: Sequence[str | None], after: str, remedy: str) -> str:
    """The key the shard's next page starts after: the page's last key python-rados decoded, or
    past the 0x80 special entries the page ended among (which have no name here). A listing that
    would not move on stops with ``remedy``."""
    last = next((k for k in reversed(keys) if k is not None), after)
    if keys and keys[-1] is None and last < AFTER_SPECIAL:
        last = AFTER_SPECIAL
    if last <= after:
        raise PurgeFailed(f"list index {shard}", f"the listing does not move on after {after!r}: its keys "
                          f"cannot be read whole through python-rados; {remedy}")
    return last


async def key_pages(index: BulkObjects, shard: str, after: str, threads: Threads, *, prefix: str = "",
                    page_size: int = 1000) -> AsyncIterator[list[str | None]]:
    """The keys of one index shard after ``after`` (under ``prefix``), a page at a time, keys
    only (no entries read): what a huge shard's owner lists ahead to cut it into key ranges."""
    prefix = index_name(prefix) if prefix else ""
    while True:
        keys = await threads.retry.call(
            "list index keys", lambda: index.omap_keys_page(shard, after, page_size, prefix=prefix))
        if not keys:
            return
        refuse_undecodable(shard, keys)
        last = page_end(shard, keys, after, "set purge.range_entries = 0")
        yield keys
        after = last


class IndexLister:
    """Listings of one bucket by its index shards, read with librados (RGW is not asked), several
    shards at once. A page is one shard's next entries; its cursor holds every shard's position
    after the pages handed out so far (``{"shards": [after, ...]}``, None for a finished shard), so
    a checkpoint of the cursor of the last page done resumes every shard where it stood.

    Only plain entries of objects that exist become listing entries (Key, Size, ETag,
    LastModified): writes in progress, an upload's meta entry and cls_rgw's special entries
    (versions, the bucket log) are skipped. What guards against a skipped object is the purge's
    count check before the drop, which sweeps through S3 when the index counts more than was
    removed (docs/purge.md, "Listing by index shard")."""

    def __init__(self, index: BulkObjects, shards: list[str], threads: Threads, *,
                 page_size: Callable[[bool], int] = lambda filtered: 1000, last: str = "") -> None:
        self.index = index
        self.shards = shards
        self.threads = threads
        self.page_size = page_size
        #: A key range's end (board.Item.last): each shard's listing ends after this key.
        self.last = last

    @staticmethod
    def fresh(cursor: Mapping[str, Any], shards: int) -> bool:
        """Whether ``cursor`` is one this lister can resume from (not an S3 listing's)."""
        return not cursor or len(cursor.get("shards") or []) == shards

    async def pages(self, scope: Scope, cursor: Mapping[str, Any], *, versions: bool = False,
                    filtered: bool = False) -> AsyncIterator[tuple[list[Entry], Cursor]]:
        if versions:
            raise ValueError("an index listing has no versions; list them through S3")
        at: list[str | None] = list(cursor.get("shards") or [""] * len(self.shards))
        if len(at) != len(self.shards):
            raise PurgeFailed("list index", f"the checkpoint's cursor has {len(at)} shards, the plan "
                              f"{len(self.shards)}; move the checkpoint away to start over")
        prefix = index_name(scope.prefix) if scope.prefix else ""
        size = self.page_size(filtered)

        async def fetch(i: int, after: str) -> tuple[int, list[Entry], str | None]:
            # The OSD starts a prefix listing at the prefix itself when it comes after ``after``.
            rows = await self.threads.retry.call(
                "list index", lambda: self.index.omap_page(self.shards[i], after, size, prefix=prefix))
            log.debug("purge index page", shard=self.shards[i], rows=len(rows))
            if not rows:
                return i, [], None  # only an empty page ends a shard: the OSD may answer fewer than asked
            entries, keys = [], [k for k, _ in rows]
            if self.last:
                refuse_undecodable(self.shards[i], keys)
            for key, value in rows:
                if self.last and past(key, self.last):
                    return i, entries, None  # the range ends here: what follows is another item's
                if key is None:
                    continue
                try:
                    e = parse_dir_entry(value)
                except ValueError as exc:
                    raise PurgeFailed(f"list index {self.shards[i]}", f"entry {key!r}: {exc}") from None
                # A versioned instance's key is "<name>\0v<n>\0i<instance>": python-rados reads keys as C
                # strings, so it shows "<name>"; the entry's own name tells them apart.
                if e.name == key and e.exists and e.s3_key is not None and e.category != CATEGORY_MULTIMETA:
                    entries.append({"Key": e.s3_key, "Size": e.size, "ETag": e.etag,
                                    "LastModified": datetime.datetime.fromtimestamp(e.mtime_s, datetime.timezone.utc)})
            return i, entries, page_end(self.shards[i], keys, after, "use direct_listing = 's3'")

        waiting = [i for i, a in enumerate(at) if a is not None]
        running: dict[asyncio.Future[Any], int] = {}
        try:
            while waiting or running:
                while waiting and len(running) < SHARDS_AT_ONCE:
                    i = waiting.pop(0)
                    running[asyncio.ensure_future(fetch(i, at[i] or ""))] = i
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for fut in done:
                    del running[fut]
                    i, entries, after = fut.result()
                    at[i] = after
                    if after is not None:
                        waiting.append(i)
                    yield [e for e in entries if scope.matches(e)], {"shards": list(at)}
        finally:
            for fut in running:
                fut.cancel()
            await asyncio.gather(*running, return_exceptions=True)
