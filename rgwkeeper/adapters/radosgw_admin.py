"""radosgw-admin adapter: the Ceph CLI runner (adapters/cephcli.py) plus radosgw-admin's queries.

radosgw-admin exits 0 for some commands on a bucket
that does not exist (``bucket rm``; Ceph's own test expects it), so exit codes are not
evidence: callers that change anything read the state back.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from rgwkeeper.access import ClusterAccess
from rgwkeeper.adapters.cephcli import CephCli, CompletedRun, Runner, extract_json, subprocess_runner
from rgwkeeper.errors import CephError, CommandFailed, InvalidName, NotFound
from rgwkeeper.names import validate_bucket

__all__ = ["RadosgwAdmin", "CompletedRun", "Runner", "extract_json", "subprocess_runner"]


# radosgw-admin exits with the error code modulo 256: ENOENT is 2, and RGW's own
# ERR_NO_SUCH_BUCKET (2002) shows as exit 210 with "failure: (2002) Unknown error 2002"
# (captured from 16.2.15 in tests/fixtures/pacific/radosgw-admin.json).
_NOT_FOUND_CODES = ("(2)", "(2002)")


def _is_not_found(returncode: int, stderr: str) -> bool:
    return returncode in (2, 2002 % 256) and any(c in stderr for c in _NOT_FOUND_CODES)


class RadosgwAdmin(CephCli):
    """radosgw-admin: the generic runner, with its not-found exit codes and its queries."""

    def __init__(self, access: ClusterAccess, *, runner: Runner = subprocess_runner) -> None:
        super().__init__(access, "radosgw-admin", runner=runner)

    async def run(self, *args: str, timeout: float | None = None) -> CompletedRun:
        try:
            return await super().run(*args, timeout=timeout)
        except CommandFailed as exc:
            if _is_not_found(exc.exit_code_seen, exc.stderr):
                raise NotFound(" ".join(args[:4]), "does not exist", ret=-2) from None
            raise

    # -- read-only queries used by the snapshot ---------------------------------------------
    async def reshard_list(self) -> list[dict[str, Any]]:
        out = await self.json("reshard", "list")
        return out or []

    async def bucket_stats(self, bucket: str) -> dict[str, Any]:
        return await self.json("bucket", "stats", "--bucket", validate_bucket(bucket))

    async def bucket_limit_check(self) -> list[dict[str, Any]]:
        return await self.json("bucket", "limit", "check") or []

    # -- reads used by purge ----------------------------------------------------------------
    async def metadata_get(self, key: str) -> dict[str, Any]:
        """``metadata get bucket:B`` or ``bucket.instance:B:ID``; NotFound if absent (exit 2)."""
        return await self.json("metadata", "get", validate_metadata_key(key))

    async def gc_list(self, *, include_all: bool = True) -> list[dict[str, Any]]:
        """GC entries: ``[{"tag", "time", "objs": [{"pool", "oid", "key", "instance"}]}]``."""
        args = ("gc", "list") + (("--include-all",) if include_all else ())
        return await self.json(*args) or []

    async def zone_placement(self) -> dict[str, dict[str, Any]]:
        """Placement id -> {index_pool, data_extra_pool, data_pool (STANDARD)} of this zone."""
        return zone_layout(await self.json("zone", "get"))["placement"]

    async def zone_layout(self) -> dict[str, Any]:
        """The zone's placement pools and GC pool (:func:`zone_layout`), from ``zone get``."""
        return zone_layout(await self.json("zone", "get"))

    async def zonegroup_zones(self) -> list[str]:
        """Names of the zones in this zonegroup (more than one means multisite replication)."""
        zg = await self.json("zonegroup", "get")
        return [z.get("name", "") for z in (zg or {}).get("zones", [])]

    async def user_stats(self, uid: str, *, sync: bool = False) -> dict[str, Any]:
        args = ("user", "stats", "--uid", validate_uid(uid)) + (("--sync-stats",) if sync else ())
        return await self.json(*args)

    async def user_buckets(self, uid: str) -> list[str]:
        """Names of the buckets linked to a user (``bucket list --uid``); NotFound "NoSuchUser"
        if the user does not exist. It reads the user's record, writes nothing and prints no
        keys: the reference for whether a user exists. (`user stats` reads the user's stats
        object, which Pacific's `user stats --sync-stats` creates even for a missing user.)"""
        try:
            return await self.json("bucket", "list", "--uid", validate_uid(uid)) or []
        except CommandFailed as exc:
            # Exit 254 (-ENOENT) and "could not find user" on every release (captured:
            # tests/fixtures/<release>/purge.json, "user_missing").
            if exc.exit_code_seen == 254 and "could not find user" in exc.stderr:
                raise NotFound(f"bucket list --uid {uid}", "NoSuchUser", ret=-2) from None
            raise


# -- argv builders for changes -------------------------------------------------------------
# Pure functions, so a plan can show the exact command before anything runs (dry run) and
# the executor runs the same tuple with RadosgwAdmin.run(*args).

_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._~-]{0,254}$")
_UID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,254}$")


def validate_bucket_id(bucket_id: str) -> str:
    if not isinstance(bucket_id, str) or not _ID_RE.match(bucket_id):
        raise InvalidName(f"bucket id {bucket_id[:80]!r} is not a bucket instance id like <zone id>.<n>.<n>")
    return bucket_id


def validate_uid(uid: str) -> str:
    if not isinstance(uid, str) or not _UID_RE.match(uid):
        raise InvalidName(f"user id {uid[:80]!r} is not a plain RGW uid (tenants are not supported)")
    return uid


def validate_metadata_key(key: str) -> str:
    section, _, rest = key.partition(":")
    if section == "bucket":
        validate_bucket(rest)
    elif section == "bucket.instance":
        name, _, bucket_id = rest.partition(":")
        validate_bucket(name)
        validate_bucket_id(bucket_id)
    else:
        raise InvalidName(f"metadata key {key[:80]!r} is not bucket:NAME or bucket.instance:NAME:ID")
    return key


def bucket_rm_args(bucket: str, *, purge_objects: bool = True, bypass_gc: bool = False,
                   max_concurrent_ios: int | None = None) -> tuple[str, ...]:
    args: tuple[str, ...] = ("bucket", "rm", "--bucket", validate_bucket(bucket))
    if purge_objects:
        args += ("--purge-objects",)
    if bypass_gc:
        args += ("--bypass-gc",)
    if max_concurrent_ios is not None:
        args += (f"--max-concurrent-ios={int(max_concurrent_ios)}",)
    return args


def gc_process_args(*, include_all: bool = True) -> tuple[str, ...]:
    return ("gc", "process") + (("--include-all",) if include_all else ())


def lc_process_args(bucket: str) -> tuple[str, ...]:
    return ("lc", "process", "--bucket", validate_bucket(bucket))


def lc_list_args() -> tuple[str, ...]:
    """Every bucket's lifecycle entry: ``[{"bucket": "tenant:name:marker", "started", "status"}]``."""
    return ("lc", "list")


def metadata_rm_args(key: str) -> tuple[str, ...]:
    return ("metadata", "rm", validate_metadata_key(key))


def user_stats_sync_args(uid: str) -> tuple[str, ...]:
    return ("user", "stats", "--uid", validate_uid(uid), "--sync-stats")


def zone_layout(zone: Mapping[str, Any] | None) -> dict[str, Any]:
    """What rgwkeeper needs of a zone's parameters (``radosgw-admin zone get``, or the admin API's
    ``GET /admin/config?type=zone``): ``placement`` (placement id -> {index_pool,
    data_extra_pool, data_pool (STANDARD), storage_classes, class_data_pools}), ``gc_pool``
    (``pool:namespace``) and the zone's ``id``. The parameters also hold the zone's ``system_key`` (a secret in
    multisite setups): nothing else is kept, and nothing of the raw answer is logged."""
    if not isinstance(zone, Mapping) or not isinstance(zone.get("placement_pools", []), list):
        raise CephError("zone parameters", "not a zone's parameters (no list of placement pools)")
    out: dict[str, dict[str, Any]] = {}
    for p in zone.get("placement_pools", []):
        val = p.get("val") if isinstance(p, Mapping) else None
        classes = val.get("storage_classes", {}) if isinstance(val, Mapping) else None
        if not isinstance(p, Mapping) or not isinstance(p.get("key"), str) or not isinstance(classes, Mapping) or \
                not all(isinstance(c, Mapping) for c in classes.values()):
            raise CephError("zone parameters", "a placement pool entry of another shape")
        out[p["key"]] = {
            "index_pool": val.get("index_pool", ""),
            "data_extra_pool": val.get("data_extra_pool", ""),
            "data_pool": classes.get("STANDARD", {}).get("data_pool", ""),
            "storage_classes": sorted(classes),
            "class_data_pools": sorted({c.get("data_pool", "") for c in classes.values()} - {""}),
        }
    gc_pool, zone_id = (zone.get(k, "") for k in ("gc_pool", "id"))
    return {"placement": out, "gc_pool": gc_pool if isinstance(gc_pool, str) else "",
            "id": zone_id if isinstance(zone_id, str) else ""}
