"""How RGW lays a bucket out in RADOS (checked on 16.2.15), as pure functions.

- An object's head is ``<marker>_<key>`` in the data pool. A key that starts with ``_`` is
  escaped to ``<marker>__<key>`` and gets the locator ``<marker>_<key>`` (rgw_obj_key::get_oid;
  ``rados ls`` shows ``<marker>___k`` with locator ``<marker>__k`` for key ``_k``).
- Tails are ``<marker>__shadow_...`` (data past the head chunk; ``__shadow:<instance>_...`` for a
  version) and ``<marker>__multipart_...`` (parts); a copy in another bucket shares them, counted in their ``refcount`` xattr
  (cls_refcount). An upload's meta object ``<marker>__multipart_<key>.<id>.meta`` lives in
  the data_extra (non-ec) pool.
- A head's xattrs name its tails: ``user.rgw.manifest`` (rgwkeeper.adapters.manifest decodes
  it) and the tag RGW's GC drops each tail's reference with, ``user.rgw.tail_tag`` (or, for an
  object written before tail tags, ``user.rgw.idtag``), stored with its trailing NUL.
- Index shards are ``.dir.<bucket id>.<shard>`` in the index pool (``.dir.<bucket id>`` when
  the bucket has no shards). From Reef a reshard keeps the bucket id and starts a new index
  generation: its shards are ``.dir.<bucket id>.<gen>.<shard>`` (docs/purge.md, "Index generations").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from rgwkeeper.encoding import ANY_COMPAT, Decoder

MANIFEST_XATTR, TAIL_TAG_XATTR, ID_TAG_XATTR = "user.rgw.manifest", "user.rgw.tail_tag", "user.rgw.idtag"
XATTR_THREADS = 16  # heads whose xattrs a purge reads at once (python-rados has no aio getxattr)

# A tail of a versioned object carries its instance: <marker>__shadow:<instance>_<prefix>_<n>
# (rgw_obj_key::get_oid with a namespace and an instance; seen on 16.2.15). Versioned heads
# are <marker>__:<instance>_<key> and are not tails.
TAIL_MARKERS = ("__shadow_", "__multipart_", "__shadow:", "__multipart:")


def head_oid(marker: str, key: str) -> tuple[str, str]:
    """(oid, locator) of the head of a plain (unversioned) object."""
    if key.startswith("_"):
        return f"{marker}__{key}", f"{marker}_{key}"
    return f"{marker}_{key}", ""


def index_name(key: str) -> str:
    """The bucket index's name for a plain key (or a prefix of keys): rgw_obj_key::get_index_key_name
    writes one that starts with ``_`` as ``__<key>``."""
    return f"_{key}" if key.startswith("_") else key


def bucket_prefix(marker: str) -> str:
    """Every RADOS object of the bucket's data starts with this (markers contain no '_')."""
    return f"{marker}_"


def holds_objects_of(marker: str) -> Callable[[dict[str, Any]], bool]:
    """Whether an entry of ``radosgw-admin gc list`` holds RADOS objects of the bucket."""
    prefix = bucket_prefix(marker)
    return lambda e: any(str(o.get("oid", "")).startswith(prefix) for o in e.get("objs", []))


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
    r = Decoder(blob, strict_utf8=False)
    try:
        version, _ = r.begin("obj_refcount", ANY_COMPAT, 0)
        refs = []
        for _ in range(r.u32()):
            tag = r.string().rstrip("\x00")
            if r.u8():
                refs.append(tag)
        retired = []
        if version >= 2 and r.pos < len(blob):
            retired = [r.string().rstrip("\x00") for _ in range(r.u32())]
    except ValueError as exc:
        raise ValueError(f"refcount xattr cannot be decoded: {exc}") from None
    return Refcount(tuple(refs), tuple(retired))


#: rgw_bucket_dir_entry_meta's category of an incomplete upload's meta entry (RGWObjCategory::MultiMeta).
CATEGORY_MULTIMETA = 3


@dataclass(frozen=True)
class IndexEntry:
    """One entry of a bucket index shard (cls_rgw's rgw_bucket_dir_entry), the fields a purge needs."""

    name: str  # the index name: an S3 key, escaped or namespaced (see s3_key)
    exists: bool  # False: a write in progress or a deletion not yet completed
    category: int
    size: int  # the object's size as S3 shows it (meta.accounted_size; meta.size is what is stored,
    #            less when RGW compressed the object)
    mtime_s: float
    etag: str

    @property
    def s3_key(self) -> str | None:
        """The S3 key of a plain object, or None for a namespaced entry (an upload's meta object,
        ``_multipart_...``). rgw_obj_key::get_index_key_name writes a key that starts with ``_``
        as ``__<key>`` and a namespaced one as ``_<ns>_<name>``."""
        if not self.name.startswith("_"):
            return self.name
        return self.name[1:] if self.name.startswith("__") else None


def parse_dir_entry(blob: bytes) -> IndexEntry:
    """Decode the value of a plain bucket index entry: rgw_bucket_dir_entry's ENCODE_START header,
    then key.name, ver.epoch (u64), exists (u8) and meta (its own header, then category u8, size
    u64, mtime as u32 seconds and u32 nanoseconds, etag, owner, owner_display_name, content_type,
    and from meta v4 accounted_size u64); the fields after those (pending_map, locator, ver, tag,
    instance, flags, ...) are not needed. The order has not changed since Firefly's struct_v 3
    (cls/rgw/cls_rgw_types.h), and the fixtures of every release check it."""
    r = Decoder(blob, strict_utf8=False)
    try:
        r.begin("rgw_bucket_dir_entry", ANY_COMPAT, 0)
        name = r.string()
        r.u64()
        exists = r.u8() != 0
        meta_v, _ = r.begin("rgw_bucket_dir_entry_meta", ANY_COMPAT, 0)
        category, size = r.u8(), r.u64()
        sec, nsec = r.u32(), r.u32()
        etag = r.string()
        for _ in range(3):  # owner, owner_display_name, content_type
            r.string()
        if meta_v >= 4:
            size = r.u64()
    except ValueError as exc:
        raise ValueError(f"bucket index entry cannot be decoded: {exc}") from None
    return IndexEntry(name=name, exists=exists, category=category, size=size, mtime_s=sec + nsec / 1e9, etag=etag)
