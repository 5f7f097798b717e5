"""Pre-sharding and resharding: read a bucket's state, apply a ShardPlan, read it back.

The plan itself is pure (rgwkeeper.policy.shards); this module does the I/O through the
adapters. After a reshard the shard count is read back from ``bucket stats``, after pinning a
minimum it is read back from ``bucket layout``: radosgw-admin's exit code alone proves nothing.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from rgwkeeper.actions import CreateBucket, ReshardBucket, SetMinShards
from rgwkeeper.adapters.rados import RadosAdapter
from rgwkeeper.adapters.radosgw_admin import RadosgwAdmin
from rgwkeeper.adapters.s3 import S3Adapter
from rgwkeeper.errors import CephError, CommandFailed, NotFound
from rgwkeeper.names import validate_bucket
from rgwkeeper.policy.shards import RGW_MAX_SHARDS, BucketState, ShardPlan
from rgwkeeper.snapshot import parse_release

RESHARD_TIMEOUT_S = 3600.0  # a manual reshard of a big bucket copies its whole index


@dataclass(frozen=True)
class Limits:
    max_objs_per_shard: int
    max_dynamic_shards: int
    multisite: bool
    release: str  # the oldest running anywhere, e.g. "tentacle" (what decides whether RGW may reduce shards)


async def read_limits(rados: RadosAdapter, rgw: RadosgwAdmin, configured_max_objs: int | None) -> Limits:
    async def conf(name: str, default: int) -> int:
        try:
            return int(await rados.acommand({"prefix": "config get", "who": "client.rgw", "key": name}))
        except (CephError, TypeError, ValueError):
            return default

    max_objs = configured_max_objs or await conf("rgw_max_objs_per_shard", 100_000)
    max_dyn = await conf("rgw_max_dynamic_shards", 1999)
    zonegroup = await rgw.json("zonegroup", "get")
    zones = (zonegroup or {}).get("zones", [])
    release, _ = parse_release(await rados.acommand({"prefix": "versions"}) or {})
    return Limits(max_objs, min(max_dyn, RGW_MAX_SHARDS), len(zones) > 1, release)


async def read_min_num_shards(rgw: RadosgwAdmin, bucket: str) -> int:
    try:
        layout = await rgw.json("bucket", "layout", "--bucket", bucket)
    except CommandFailed as exc:
        raise _older_client(exc) from None
    return min_num_shards(layout)


def _older_client(exc: CommandFailed) -> CephError:
    # radosgw-admin before Tentacle has neither `bucket layout` nor `set-min-shards`: it prints
    # "Unrecognized argument", then its usage, whose last line says nothing (docs/architecture.md,
    # "Releases").
    if "Unrecognized argument" in exc.stderr:
        return CephError(exc.request, "this radosgw-admin is older than the cluster (no bucket layout or "
                                      "set-min-shards); run rgwkeeper where the cluster's release is installed")
    return exc


def min_num_shards(layout: dict[str, Any]) -> int:
    """The pinned minimum from ``radosgw-admin bucket layout`` (1 when never pinned)."""
    try:
        return int(layout["layout"]["current_index"]["layout"]["normal"]["min_num_shards"])
    except (KeyError, TypeError, ValueError):
        raise CephError("bucket layout", "no layout.current_index.layout.normal.min_num_shards in its output") from None


async def read_bucket_state(rgw: RadosgwAdmin, bucket: str, *, min_shards: bool = False) -> BucketState:
    """``min_shards``: also read the pinned minimum (``bucket layout``, Tentacle on)."""
    validate_bucket(bucket)
    try:
        stats = await rgw.bucket_stats(bucket)
    except NotFound:
        return BucketState(exists=False)
    queue = await rgw.reshard_list()
    status = await rgw.json("reshard", "status", "--bucket", bucket) or []
    resharding = any(s.get("reshard_status") not in ("not-resharding", "none", 0, None) for s in status)
    return BucketState(
        exists=True, num_shards=int(stats.get("num_shards", 0) or 0),
        num_objects=int(((stats.get("usage") or {}).get("rgw.main") or {}).get("num_objects", 0)),
        in_reshard_queue=any(q.get("bucket_name") == bucket for q in queue), resharding=resharding,
        min_num_shards=await read_min_num_shards(rgw, bucket) if min_shards else None,
    )


@dataclass(frozen=True)
class Applied:
    command: str
    ok: bool
    detail: str


async def apply(plan: ShardPlan, rgw: RadosgwAdmin, s3: S3Adapter | None,
                reshard_timeout_s: float = RESHARD_TIMEOUT_S) -> list[Applied]:
    out: list[Applied] = []
    for a in plan.actions:
        if isinstance(a, CreateBucket):
            if s3 is None:
                raise CephError(a.command(), "no RGW endpoint/credentials to create the bucket with")
            await asyncio.to_thread(s3.create_bucket, a.bucket)
            ok = await asyncio.to_thread(s3.bucket_exists, a.bucket)
            out.append(Applied(a.command(), ok, "created" if ok else "not found after CreateBucket"))
            if not ok:
                return out
        elif isinstance(a, ReshardBucket):
            await rgw.run(*a.args(), timeout=reshard_timeout_s)
            stats = await rgw.bucket_stats(a.bucket)
            got = int(stats.get("num_shards", 0) or 0)
            out.append(Applied(a.command(), got == a.num_shards,
                               f"bucket stats reads {got} shards" + ("" if got == a.num_shards else
                                                                     f", wanted {a.num_shards}")))
        elif isinstance(a, SetMinShards):
            out.append(await _set_min_shards(a, rgw))
    return out


async def _set_min_shards(a: SetMinShards, rgw: RadosgwAdmin) -> Applied:
    try:
        await rgw.run(*a.args())
    except CommandFailed as exc:
        return Applied(a.command(), False, _older_client(exc).detail)
    got = await read_min_num_shards(rgw, a.bucket)
    return Applied(a.command(), got == a.num_shards,
                   f"bucket layout reads min_num_shards {got}" + ("" if got == a.num_shards else
                                                                   f", wanted {a.num_shards}"))


def plan_to_dict(plan: ShardPlan, applied: list[Applied] | None = None) -> dict[str, Any]:
    return {
        "bucket": plan.bucket, "exists": plan.exists, "current_shards": plan.current_shards,
        "wanted_shards": plan.wanted_shards, "reason": plan.reason, "capped_by": plan.capped_by,
        "min_shards": plan.min_shards_note,
        "commands": plan.commands(),
        "applied": [a.__dict__ for a in applied] if applied is not None else None,
    }
