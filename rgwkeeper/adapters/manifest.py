"""RGW's object manifest, decoded: which RADOS objects hold an object's data.

RGW keeps, on each object's head (``<marker>_<key>`` in the data pool), the xattr
``user.rgw.manifest``: Ceph's binary encoding of ``RGWObjManifest``. Its rules, with the random
prefix RGW picked at upload, name every tail object (``<marker>__shadow_<prefix><n>`` for a single
PUT, ``<marker>__multipart_<key>.<upload>.<part>`` and ``__shadow_..._<part>_<stripe>`` for a
multipart object). RGW's GC walks the manifest with ``RGWObjManifest::obj_iterator``; this module is
a port of that decoding and that walk for the rule-based manifests RGW has written since Firefly,
and nothing more. Whatever it does not know (an explicit manifest from before Firefly, a head
holding data with part rules, a cloud-tiered object, a newer encoding it cannot read, a
truncated or inconsistent one, one naming more RADOS objects than S3's largest object has)
raises :class:`ManifestError`, and the caller leaves that object to RGW. docs/purge.md ("Tails
without GC") says how it is checked against ``bucket radoslist`` on every supported release.
"""
from __future__ import annotations

from dataclasses import dataclass

from rgwkeeper.encoding import DecodeError, Decoder

__all__ = ["ManifestError", "Manifest", "RawObject", "decode_manifest", "head_object", "locations", "tail_objects"]

SHADOW_NS = "shadow"
MULTIPART_NS = "multipart"
# Ceph writes RGWObjManifest v7 (Pacific) and v8 (tier fields, Quincy and later); v8 is the last
# layout this module knows. A newer encoding still decodes if it declares compat <= 8.
_MANIFEST_KNOWN_V = 8
# One object's walk is bounded: 5 TiB (S3's largest object) in 4 MiB stripes is 1,310,720 stripes.
MAX_LOCATIONS = 1_400_000


class ManifestError(DecodeError):
    """The manifest cannot be read, or is of a kind this module does not handle."""


@dataclass(frozen=True)
class RawObject:
    """A RADOS object: its name, its locator (empty for all but escaped head names) and the
    placement rule (``name`` or ``name/STORAGE_CLASS``) whose pool holds it."""
    oid: str
    locator: str
    placement: str


@dataclass(frozen=True)
class _Bucket:
    tenant: str
    name: str
    marker: str
    bucket_id: str
    explicit_pool: str  # a bucket from before placement rules names its pool; empty otherwise


@dataclass(frozen=True)
class _Key:
    name: str
    instance: str
    ns: str


@dataclass(frozen=True)
class _Rule:
    start_part_num: int
    start_ofs: int
    part_size: int
    stripe_max_size: int
    override_prefix: str


@dataclass(frozen=True)
class Manifest:
    obj_size: int
    head_bucket: _Bucket
    head_key: _Key
    head_size: int
    max_head_size: int
    prefix: str
    rules: tuple[tuple[int, _Rule], ...]  # sorted by start offset, as Ceph's std::map
    tail_bucket: _Bucket
    tail_instance: str
    head_placement: str
    tail_placement: str
    tier_type: str


def _pool(r: Decoder) -> str:
    _, end = r.begin("rgw_pool", 10, 10, 3, 3)
    name = r.string()
    ns = r.string()
    r.finish("rgw_pool", end)
    return f"{name}:{ns}" if ns else name


def _bucket(r: Decoder) -> _Bucket:
    _, end = r.begin("rgw_bucket", 10, 10, 3, 3)
    name = r.string()
    marker = r.string()
    bucket_id = r.string()
    tenant = r.string()
    explicit_pool = ""
    if r.boolean():
        explicit_pool = _pool(r)
        _pool(r)  # data extra pool
        _pool(r)  # index pool
    r.finish("rgw_bucket", end)
    return _Bucket(tenant, name, marker, bucket_id, explicit_pool)


def _obj(r: Decoder) -> tuple[_Bucket, _Key]:
    _, end = r.begin("rgw_obj", 7, 6, 3, 3)
    bucket = _bucket(r)
    ns = r.string()
    name = r.string()
    instance = r.string()
    r.finish("rgw_obj", end)  # v7 adds a snapshot id, not part of the name
    return bucket, _Key(name, instance, ns)


def _rule(r: Decoder) -> _Rule:
    v, end = r.begin("RGWObjManifestRule", 2, 1)
    start_part_num = r.u32()
    start_ofs = r.u64()
    part_size = r.u64()
    stripe_max_size = r.u64()
    override_prefix = r.string() if v >= 2 else ""
    r.finish("RGWObjManifestRule", end)
    return _Rule(start_part_num, start_ofs, part_size, stripe_max_size, override_prefix)


def decode_manifest(data: bytes) -> Manifest:
    """Decode the bytes of a head's ``user.rgw.manifest`` xattr."""
    r = Decoder(data, ManifestError)
    v, end = r.begin("RGWObjManifest", _MANIFEST_KNOWN_V, 7, 2, 2)
    obj_size = r.u64()
    if r.count():
        raise ManifestError("an explicit part list (a manifest from before Firefly)")
    if r.boolean():
        raise ManifestError("an explicit manifest (from before Firefly)")
    head_bucket, head_key = _obj(r)
    head_size = r.u64()
    max_head_size = r.u64()
    prefix = r.string()
    rules: dict[int, _Rule] = {}
    for _ in range(r.count()):
        ofs = r.u64()
        rules[ofs] = _rule(r)
    tail_bucket = _bucket(r) if r.boolean() else head_bucket
    tail_instance = r.string() if r.boolean() else head_key.instance
    head_placement = r.string()
    tail_placement = r.string()
    tier_type = r.string() if v >= 8 else ""
    r.finish("RGWObjManifest", end)  # v8's tier config: only for cloud-tiered objects, refused below
    r.done("manifest")
    return Manifest(obj_size, head_bucket, head_key, head_size, max_head_size, prefix,
                    tuple(sorted(rules.items())), tail_bucket, tail_instance, head_placement,
                    tail_placement, tier_type)


def _key_oid(key: _Key) -> str:
    """rgw_obj_key::get_oid: the key's name in RADOS, before the bucket marker."""
    encode_instance = bool(key.instance) and key.instance != "null"
    if not key.ns and not encode_instance:
        return "_" + key.name if key.name.startswith("_") else key.name
    return "_" + key.ns + (":" + key.instance if encode_instance else "") + "_" + key.name


def _raw(bucket: _Bucket, key: _Key, placement: str) -> RawObject:
    """rgw_obj -> rgw_raw_obj: the marker prepended to the name and, for an escaped head name,
    to its locator."""
    if bucket.explicit_pool:
        raise ManifestError(f"bucket {bucket.name!r} names its pool {bucket.explicit_pool!r} (before placement rules)")

    def marked(s: str) -> str:
        return f"{bucket.marker}_{s}" if bucket.marker else s

    locator = marked(key.name) if key.name.startswith("_") and not key.ns else ""
    return RawObject(marked(_key_oid(key)), locator, placement)


def _implicit(m: Manifest, part_id: int, stripe: int, ofs: int, override_prefix: str) -> RawObject:
    """RGWObjManifest::get_implicit_location."""
    name = override_prefix or m.prefix
    if part_id == 0:
        if ofs < m.max_head_size:
            return _raw(m.head_bucket, m.head_key, m.head_placement)
        name += str(stripe)
        ns = SHADOW_NS
    elif stripe == 0:
        name += f".{part_id}"
        ns = MULTIPART_NS
    else:
        name += f".{part_id}_{stripe}"
        ns = SHADOW_NS
    bucket = m.tail_bucket if m.tail_bucket.name else m.head_bucket
    return _raw(bucket, _Key(name, m.tail_instance, ns), m.tail_placement)


def estimated_locations(m: Manifest) -> int:
    """At least how many RADOS objects the walk names: the data past the head in stripes of the
    largest stripe size (a part rule adds one per part), cheap to compute before walking."""
    largest = max((rule.stripe_max_size for _, rule in m.rules), default=0)
    return 1 + max(0, m.obj_size - m.head_size) // largest if largest else 0


def locations(m: Manifest) -> list[RawObject]:
    """Every RADOS object of the object, head first when it holds data: the walk of Ceph's
    ``obj_iterator`` from offset 0 to the object's size (``seek(0)``, then ``operator++``)."""
    if m.tier_type:
        raise ManifestError(f"a {m.tier_type!r} tiered object (its data is not in RADOS)")
    if m.obj_size == 0:
        return []
    if not m.rules:
        raise ManifestError("a manifest without rules")
    starts = [ofs for ofs, _ in m.rules]
    rules = [rule for _, rule in m.rules]
    if starts[0] != 0:
        raise ManifestError(f"a first rule at offset {starts[0]}")
    if m.head_size == 0 and rules[0].start_ofs != 0:  # seek(0) would count parts from a negative offset
        raise ManifestError(f"no head, and a first rule starting at {rules[0].start_ofs}")
    if m.head_size > 0 and (len(rules) > 1 or rules[0].part_size > 0):
        # RGW writes neither; Ceph's own iterator leaves next_rule_iter unset for them.
        raise ManifestError("a head holding data with part rules")
    if any(rule.stripe_max_size == 0 for rule in rules):
        raise ManifestError("a rule with stripe size 0")
    if estimated_locations(m) > MAX_LOCATIONS:
        raise ManifestError(f"more than {MAX_LOCATIONS:,} RADOS objects")

    rule_i = 0
    override = rules[0].override_prefix
    part_id = rules[0].start_part_num
    part_ofs = stripe_ofs = ofs = 0
    out: list[RawObject] = []
    if m.head_size > 0:
        out.append(_raw(m.head_bucket, m.head_key, m.head_placement))
        # operator++ from the head: the first stripe after it is stripe 1 of rule 0
        ofs = stripe_ofs = min(m.head_size, m.obj_size)
        stripe = 1
        if ofs >= m.obj_size:
            return out
        out.append(_implicit(m, part_id, stripe, ofs, override))
    else:
        stripe = 0
        out.append(_implicit(m, part_id, stripe, ofs, override))
    next_i = 1
    while True:
        rule = rules[rule_i]
        stripe_ofs += rule.stripe_max_size
        stripe += 1
        if rule.part_size > 0 and stripe_ofs >= part_ofs + rule.part_size:
            stripe = 0
            part_ofs += rule.part_size
            stripe_ofs = part_ofs
            if next_i < len(rules) and stripe_ofs >= starts[next_i]:
                rule_i = next_i
                next_i += 1
                part_id = rules[rule_i].start_part_num
            else:
                part_id += 1
            rule = rules[rule_i]
        override = rule.override_prefix
        if stripe_ofs >= m.obj_size:
            return out
        ofs = stripe_ofs
        out.append(_implicit(m, part_id, stripe, ofs, override))
        if len(out) > MAX_LOCATIONS:
            raise ManifestError(f"more than {MAX_LOCATIONS:,} RADOS objects")


def head_object(m: Manifest) -> RawObject:
    """The object's head, whether or not it holds data (a multipart object's head holds none)."""
    return _raw(m.head_bucket, m.head_key, m.head_placement)


def tail_objects(m: Manifest) -> list[RawObject]:
    """The object's RADOS objects other than its head: what RGW's GC drops a reference to
    (``update_gc_chain`` skips the head)."""
    head = head_object(m)
    seen: set[tuple[str, str]] = set()
    out: list[RawObject] = []
    for loc in locations(m):
        if (loc.oid, loc.locator) == (head.oid, head.locator) or (loc.oid, loc.locator) in seen:
            continue
        seen.add((loc.oid, loc.locator))
        out.append(loc)
    return out
