"""How RGW lays a bucket out in RADOS (checked on 16.2.15), as pure functions.

- An object's head is ``<marker>_<key>`` in the data pool. A key that starts with ``_`` is
  escaped to ``<marker>__<key>`` and gets the locator ``<marker>_<key>`` (rgw_obj_key::get_oid;
  ``rados ls`` shows ``<marker>___k`` with locator ``<marker>__k`` for key ``_k``).
- Tails are ``<marker>__shadow_...`` (data past the head chunk; ``__shadow:<instance>_...`` for a
  version) and ``<marker>__multipart_...`` (parts); a copy in another bucket shares them, counted in their ``refcount`` xattr
  (cls_refcount). An upload's meta object ``<marker>__multipart_<key>.<id>.meta`` lives in
  the data_extra (non-ec) pool.
- Index shards are ``.dir.<bucket id>.<shard>`` in the index pool (``.dir.<bucket id>`` when
  the bucket has no shards). From Reef a reshard keeps the bucket id and starts a new index
  generation: its shards are ``.dir.<bucket id>.<gen>.<shard>`` (docs/purge.md, "Index generations").
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

# A tail of a versioned object carries its instance: <marker>__shadow:<instance>_<prefix>_<n>
# (rgw_obj_key::get_oid with a namespace and an instance; seen on 16.2.15). Versioned heads
# are <marker>__:<instance>_<key> and are not tails.
TAIL_MARKERS = ("__shadow_", "__multipart_", "__shadow:", "__multipart:")


def head_oid(marker: str, key: str) -> tuple[str, str]:
    """(oid, locator) of the head of a plain (unversioned) object."""
    if key.startswith("_"):
        return f"{marker}__{key}", f"{marker}_{key}"
    return f"{marker}_{key}", ""


def bucket_prefix(marker: str) -> str:
    """Every RADOS object of the bucket's data starts with this (markers contain no '_')."""
    return f"{marker}_"


def gc_entries_of(entries: list[dict[str, Any]], marker: str) -> list[dict[str, Any]]:
    """The entries of ``radosgw-admin gc list`` that hold RADOS objects of the bucket."""
    prefix = bucket_prefix(marker)
    return [e for e in entries if any(str(o.get("oid", "")).startswith(prefix) for o in e.get("objs", []))]


def is_tail(oid: str, marker: str) -> bool:
    rest = oid[len(marker):]
    return any(rest.startswith(t) for t in TAIL_MARKERS)


def index_shard_oids(bucket_id: str, num_shards: int, gen: int = 0) -> list[str]:
    """The index shard objects of one index generation (RGW's get_bucket_index_object)."""
    if num_shards <= 0:
        return [f".dir.{bucket_id}"]
    base = f".dir.{bucket_id}.{gen}" if gen else f".dir.{bucket_id}"
    return [f"{base}.{n}" for n in range(num_shards)]


@dataclass(frozen=True)
class Refcount:
    refs: tuple[str, ...]  # tags holding a reference (an empty tag is the object's own first write)
    retired: tuple[str, ...]  # tags that dropped theirs


def parse_refcount(blob: bytes) -> Refcount:
    """Decode cls_refcount's ``obj_refcount`` xattr: ENCODE_START(2, 1) header, then
    map<string, bool> refs, then (v2) set<string> retired_refs."""
    def u32(off: int) -> tuple[int, int]:
        return struct.unpack_from("<I", blob, off)[0], off + 4

    def string(off: int) -> tuple[str, int]:
        n, off = u32(off)
        raw = blob[off:off + n]
        if len(raw) != n:
            raise ValueError("refcount xattr is truncated")
        return raw.decode("utf-8", errors="replace").rstrip("\x00"), off + n

    try:
        version = blob[0]
        off = 6  # struct_v, struct_compat, u32 length
        count, off = u32(off)
        refs = []
        for _ in range(count):
            tag, off = string(off)
            live = blob[off]
            off += 1
            if live:
                refs.append(tag)
        retired = []
        if version >= 2 and off < len(blob):
            count, off = u32(off)
            for _ in range(count):
                tag, off = string(off)
                retired.append(tag)
    except (IndexError, struct.error) as exc:
        raise ValueError(f"refcount xattr cannot be decoded: {exc}") from None
    return Refcount(tuple(refs), tuple(retired))
