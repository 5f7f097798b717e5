"""RGW Admin Ops API adapter, on top of rgwadmin's signing and error mapping.

rgwadmin builds query strings by ``%`` formatting without URL-encoding (a bucket called
``x&purge-objects=true`` would add a parameter; docs/architecture.md), so we never use its
query-building helpers: every path is built here with ``urlencode`` from validated values
and passed to ``RGWAdmin.request``.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Sequence
from urllib.parse import urlencode, urlsplit

import requests
import urllib3.exceptions
import rgwadmin
import rgwadmin.exceptions as rgwexc

from rgwkeeper.access import RgwCredentials
from rgwkeeper.adapters.endpoints import Endpoints
from rgwkeeper.errors import CephError, CephTimeout, CephUnreachable, NotFound, UsageError
from rgwkeeper.names import validate_bucket

AdminFactory = Callable[..., Any]


def _refused(exc: BaseException) -> bool:
    """The request never reached RGW: no connection was made (refused, unreachable, or none within
    the timeout). A connection reset after the request went out, or a read timeout, is not this:
    the request may have run."""
    if isinstance(exc, requests.ConnectTimeout):
        return True
    if not isinstance(exc, requests.ConnectionError) or isinstance(exc, requests.Timeout):
        return False
    reason = getattr(exc.args[0], "reason", None) if exc.args else None  # urllib3's MaxRetryError
    return isinstance(reason, urllib3.exceptions.NewConnectionError)


class AdminApi:
    """The admin API of one RGW endpoint, or of several of one zone (``endpoint`` a list): each
    request goes to the least busy, and to the next one if it cannot connect."""

    def __init__(self, endpoint: str | Sequence[str], credentials: RgwCredentials, *, timeout_s: float,
                 admin_entry: str = "admin", factory: AdminFactory = rgwadmin.RGWAdmin) -> None:
        urls = [endpoint] if isinstance(endpoint, str) else list(endpoint)
        clients = {}
        for url in urls:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise UsageError(f"RGW endpoint {url!r} is not an http(s) URL like http://rgw1:8080")
            clients[url] = factory(
                access_key=credentials.access_key, secret_key=credentials.secret_key,
                server=parts.netloc, secure=parts.scheme == "https", timeout=timeout_s,
                pool_connections=True,
            )
        self.endpoints: Endpoints[Any] = Endpoints(clients)
        self.endpoint = urls[0]
        self._entry = admin_entry
        self.timeout_s = timeout_s

    def path(self, resource: str, params: dict[str, str]) -> str:
        """The request path with every parameter URL-encoded (also what a dry run prints)."""
        return f"/{self._entry}/{resource}?{urlencode({'format': 'json', **params})}"

    def request(self, method: str, resource: str, params: dict[str, str]) -> Any:
        path = self.path(resource, params)
        what = f"{method.upper()} {path}"
        try:
            return self.endpoints.call(lambda rgw: rgw.request(method, path), refused=_refused)
        except (rgwexc.NoSuchBucket, rgwexc.NoSuchUser, rgwexc.NoSuchKey) as exc:
            raise NotFound(what, type(exc).__name__) from None
        except rgwexc.AccessDenied:
            raise CephError(what, "AccessDenied: the admin user lacks the caps for this "
                                  "(needs buckets=*; users=read; usage=read; metadata=read; zone=read)") from None
        except rgwexc.ServerDown:
            raise CephUnreachable(what, "RGW answered with an error that has no body") from None
        except rgwexc.RGWAdminException as exc:
            raise CephError(what, str(exc.code)) from None
        except requests.Timeout:
            raise CephTimeout(what, f"no answer within {self.timeout_s:.0f} s") from None
        except requests.ConnectionError:
            urls = self.endpoints.urls
            raise CephUnreachable(what, f"cannot connect to {urls[0]}" if len(urls) == 1 else
                                  f"cannot connect to any of {', '.join(urls)}") from None

    async def arequest(self, method: str, resource: str, params: dict[str, str]) -> Any:
        return await asyncio.to_thread(self.request, method, resource, params)

    # -- queries ---------------------------------------------------------------------------------
    async def buckets_with_stats(self) -> list[dict[str, Any]]:
        """Every bucket with its stats, in one call (GET /admin/bucket?stats=True)."""
        return await self.arequest("get", "bucket", {"stats": "True"}) or []

    async def bucket_stats(self, bucket: str) -> dict[str, Any]:
        return await self.arequest("get", "bucket", {"bucket": validate_bucket(bucket), "stats": "True"})

    async def user_info(self, uid: str) -> dict[str, Any]:
        return await self.arequest("get", "user", {"uid": uid})

    async def user_buckets(self, uid: str) -> list[str]:
        """Names of the buckets linked to a user (``GET /admin/bucket?uid=U``, caps buckets=read):
        what ``radosgw-admin bucket list --uid U`` prints."""
        from rgwkeeper.adapters.radosgw_admin import validate_uid

        return list(await self.arequest("get", "bucket", {"uid": validate_uid(uid)}) or [])

    async def zone_layout(self) -> dict[str, Any]:
        """The zone's placement pools and GC pool (radosgw_admin.zone_layout) from ``GET
        /admin/config?type=zone`` (caps zone=read): the zone parameters ``radosgw-admin zone get``
        prints. Only the layout is returned: the answer also holds the zone's system key."""
        from rgwkeeper.adapters.radosgw_admin import zone_layout

        zone = await self.arequest("get", "config", {"type": "zone"})
        if not isinstance(zone, dict) or not isinstance(zone.get("placement_pools"), list):
            raise CephError("GET /admin/config?type=zone", "the answer holds no placement pools")
        return zone_layout(zone)

    # -- changes ---------------------------------------------------------------------------------
    async def sync_user_stats(self, uid: str) -> dict[str, Any]:
        """``GET /admin/user?uid=U&stats=True&sync=True`` (caps users=read): RGW resyncs the
        user's stats from each of their buckets, as ``radosgw-admin user stats --uid U
        --sync-stats`` does (the same rgw_user_sync_all_stats, which also records the sync time),
        then reads them. Only the stats are returned: the rest of the answer is the user's
        record, access and secret keys included, and must go no further."""
        from rgwkeeper.adapters.radosgw_admin import validate_uid

        info = await self.arequest("get", "user", {"uid": validate_uid(uid), "stats": "True", "sync": "True"})
        stats = info.get("stats") if isinstance(info, dict) else None
        if not isinstance(stats, dict) or not all(type(stats.get(k)) is int for k in ("num_objects", "size")):
            raise CephError(f"GET /admin/user?uid={uid}&stats=True&sync=True", "the answer holds no stats")
        return {"stats": stats}

    @staticmethod
    def bucket_quota_params(uid: str, bucket: str, *, max_objects: int, max_size_kb: int,
                            enabled: bool) -> dict[str, str]:
        """Parameters of ``PUT /admin/bucket?quota`` (RGW reads them from the query string when
        the request has no body); also what a dry run prints."""
        from rgwkeeper.adapters.radosgw_admin import validate_uid

        return {"quota": "", "uid": validate_uid(uid), "bucket": validate_bucket(bucket),
                "max-objects": str(int(max_objects)), "max-size-kb": str(int(max_size_kb)),
                "enabled": "true" if enabled else "false"}

    async def set_bucket_quota(self, uid: str, bucket: str, *, max_objects: int, max_size_kb: int,
                               enabled: bool) -> None:
        await self.arequest("put", "bucket", self.bucket_quota_params(
            uid, bucket, max_objects=max_objects, max_size_kb=max_size_kb, enabled=enabled))

    async def metadata_get(self, section: str, key: str) -> dict[str, Any]:
        """``GET /admin/metadata/<section>?key=...`` (caps metadata=read): the same document as
        ``radosgw-admin metadata get <section>:<key>``."""
        from rgwkeeper.adapters.radosgw_admin import validate_metadata_key

        validate_metadata_key(f"{section}:{key}")
        return await self.arequest("get", f"metadata/{section}", {"key": key})
