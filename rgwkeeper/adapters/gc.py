"""RGW's garbage collector queue, read with librados instead of ``radosgw-admin gc list``.

RGW queues a deleted or overwritten object's tails on ``gc.0`` .. ``gc.<rgw_gc_max_objs - 1>``
in the zone's ``gc_pool`` (``default.rgw.log``, namespace ``gc``). Since Octopus each is a
cls_queue read with cls ``rgw_gc.rgw_gc_queue_list_entries``; entries RGW queued before it moved
to the queue sit in the object's omap, read with cls ``rgw.gc_list`` (``RGWGC::list`` reads
both, the same way). Both calls take a ``cls_rgw_gc_list_op`` and answer a
``cls_rgw_gc_list_ret``, decoded here into the shape ``radosgw-admin gc list`` prints, so one
caller serves both sources (docs/purge.md, "GC at the drop").
"""
from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from rgwkeeper.encoding import DecodeError, Decoder, enc_bool, enc_string, enc_struct, enc_u32

__all__ = ["GcDecodeError", "GcRead", "GC_OBJ_PREFIX", "QUEUE_CLASS", "QUEUE_LIST", "OMAP_CLASS", "OMAP_LIST",
           "decode_list_ret", "list_op", "shard_oid"]

QUEUE_CLASS, QUEUE_LIST = "rgw_gc", "rgw_gc_queue_list_entries"  # src/cls/rgw_gc
OMAP_CLASS, OMAP_LIST = "rgw", "gc_list"  # src/cls/rgw: the omap GC from before Octopus
GC_OBJ_PREFIX = "gc"


class GcDecodeError(DecodeError):
    """A GC list answer that cannot be decoded."""


@dataclass(frozen=True)
class GcRead:
    """What a read of GC kept (the entries its filter took, each as ``radosgw-admin gc list``
    prints it) and how many entries GC held in all. Only the kept ones are held in memory: a
    cluster after a mass delete can hold millions of entries."""
    entries: list[dict[str, Any]]
    total: int


def shard_oid(n: int) -> str:
    """RGWGC's object names: ``gc.<n>``."""
    return f"{GC_OBJ_PREFIX}.{n}"


def list_op(marker: str, max_entries: int, *, expired_only: bool = False) -> bytes:
    """cls_rgw_gc_list_op, ENCODE_START(2, 1): marker, max, expired_only. ``expired_only``
    false lists entries not yet due too (``gc list --include-all``)."""
    if not 0 < max_entries < 2**32:
        raise ValueError(f"max_entries {max_entries} out of range")
    return enc_struct(2, 1, enc_string(marker) + enc_u32(max_entries) + enc_bool(expired_only))


def _time(r: Decoder) -> str:
    """ceph::real_time (u32 seconds, u32 nanoseconds), printed as radosgw-admin prints it to the second."""
    sec, _nsec = r.u32(), r.u32()
    return datetime.datetime.fromtimestamp(sec, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")


def _obj(r: Decoder) -> dict[str, str]:
    """cls_rgw_obj: v1 pool, oid, locator; v2 pool, key name, locator, cls_rgw_obj_key (name, instance)."""
    v, end = r.begin("cls_rgw_obj", 2, 1)
    pool = r.string()
    oid = r.string()
    locator = r.string()
    instance = ""
    if v >= 2:
        _, kend = r.begin("cls_rgw_obj_key", 2, 1)
        r.string()  # the key's name again
        instance = r.string()
        r.finish("cls_rgw_obj_key", kend)
    r.finish("cls_rgw_obj", end)
    return {"pool": pool, "oid": oid, "key": locator, "instance": instance}  # cls_rgw_obj::dump's names


def _entry(r: Decoder) -> dict[str, Any]:
    """cls_rgw_gc_obj_info: tag, chain (cls_rgw_obj_chain: a list of cls_rgw_obj), time."""
    _, end = r.begin("cls_rgw_gc_obj_info", 2, 1)
    tag = r.string()
    _, cend = r.begin("cls_rgw_obj_chain", 2, 1)
    objs = [_obj(r) for _ in range(r.count())]
    r.finish("cls_rgw_obj_chain", cend)
    time = _time(r)
    r.finish("cls_rgw_gc_obj_info", end)
    return {"tag": tag, "time": time, "objs": objs}


def decode_list_ret(data: bytes) -> tuple[list[dict[str, Any]], str, bool]:
    """cls_rgw_gc_list_ret: (entries, next marker, truncated). v1 (the omap list before
    Octopus) has no marker: a truncated v1 answer cannot be followed, and the caller refuses it."""
    r = Decoder(data, GcDecodeError)
    v, end = r.begin("cls_rgw_gc_list_ret", 2, 1)
    entries = [_entry(r) for _ in range(r.count())]
    marker = r.string() if v >= 2 else ""
    truncated = r.boolean()
    r.finish("cls_rgw_gc_list_ret", end)
    r.done("GC list answer")
    return entries, marker, truncated
