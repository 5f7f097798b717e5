"""The lister: a bucket's keys (or versions) and incomplete uploads, page by page, each page
with where a listing resumes after it; the next page is fetched while the caller works."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Callable, Mapping

from rgwkeeper.adapters.s3 import S3Adapter
from rgwkeeper.purge.plan import Scope
from rgwkeeper.purge.runtime import Threads

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
