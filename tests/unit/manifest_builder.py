"""RGW object manifests built field by field in Ceph's encoding (what
rgwkeeper.adapters.manifest decodes), for tests: the layouts the captures hold, and the malformed
and unknown ones no capture has."""

from __future__ import annotations

import struct

MiB = 1 << 20


def s(text: str) -> bytes:
    b = text.encode()
    return struct.pack("<I", len(b)) + b


def framed(v: int, compat: int, body: bytes) -> bytes:
    return bytes([v, compat]) + struct.pack("<I", len(body)) + body


def bucket(name: str = "b", marker: str = "m.1", explicit: bool = False) -> bytes:
    body = s(name) + s(marker) + s(marker) + s("")
    body += b"\x01" + framed(10, 10, s("pool") + s("")) * 3 if explicit else b"\x00"
    return framed(10, 10, body)


def rule(start_part: int, start_ofs: int, part_size: int, stripe: int, override: str = "") -> bytes:
    return framed(2, 1, struct.pack("<IQQQ", start_part, start_ofs, part_size, stripe) + s(override))


def manifest(*, obj_size: int = 9 << 20, head_size: int = 4 << 20, max_head: int = 4 << 20,
             rules: list[tuple[int, bytes]] | None = None, v: int = 8, compat: int = 6, explicit: bool = False,
             parts: int = 0, tier: str = "", key: str = "k", prefix: str = ".p_", tail_bucket: bytes | None = None,
             head_bucket: bytes | None = None, tail: bytes = b"", placement: str = "default-placement") -> bytes:
    rules = [(0, rule(0, max_head, 0, 4 << 20))] if rules is None else rules
    obj = framed(6, 6, (head_bucket or bucket()) + s("") + s(key) + s(""))
    body = struct.pack("<Q", obj_size) + struct.pack("<I", parts) + (b"\x01" if explicit else b"\x00")
    body += obj + struct.pack("<QQ", head_size, max_head) + s(prefix)
    body += struct.pack("<I", len(rules)) + b"".join(struct.pack("<Q", o) + r for o, r in rules)
    body += (b"\x01" + tail_bucket) if tail_bucket else b"\x00"
    body += b"\x00" + s("default-placement") + s(placement)
    if v >= 8:
        body += s(tier) + (framed(1, 1, b"") if tier else b"")
    return framed(v, compat, body + tail)


STRIPE = 4 * MiB  # rgw_max_chunk_size and rgw_obj_stripe_size, RGW's defaults


def single_put(bucket_name: str, marker: str, key: str, size: int, prefix: str,
               placement: str = "default-placement") -> bytes:
    """What RGW writes for a single PUT of ``size`` bytes: a head of up to 4 MiB, then tails
    ``__shadow_<prefix><n>`` of 4 MiB."""
    return manifest(obj_size=size, head_size=min(size, STRIPE), max_head=STRIPE, key=key, prefix=prefix,
                    rules=[(0, rule(0, STRIPE, 0, STRIPE))], head_bucket=bucket(bucket_name, marker),
                    placement=placement)


def multipart(bucket_name: str, marker: str, key: str, prefix: str, part_sizes: list[int]) -> bytes:
    """What RGW writes for a completed multipart upload: no head data, one rule per run of parts
    of one size, each part ``__multipart_<prefix>.<n>`` then ``__shadow_<prefix>.<n>_<m>`` stripes."""
    rules: list[tuple[int, bytes]] = []
    ofs = 0
    for n, size in enumerate(part_sizes, 1):
        if n == 1 or size != part_sizes[n - 2]:
            rules.append((ofs, rule(n, ofs, size, STRIPE)))
        ofs += size
    return manifest(obj_size=ofs, head_size=0, max_head=0, key=key, prefix=prefix, rules=rules,
                    head_bucket=bucket(bucket_name, marker))
