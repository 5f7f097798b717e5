"""The GC reader (adapters/gc.py, BulkObjects.gc_entries) against GC objects captured from each
release (tests/fixtures/*/gc.json): the entries it decodes from the cls answers are exactly those
``radosgw-admin gc list --include-all`` prints; malformed answers raise GcDecodeError, never
anything else; paging, an answer larger than the buffer and RGW keeping more GC objects than it
was told are handled the way librados answers them (ENOENT, ERANGE)."""

from __future__ import annotations

import asyncio
import base64
import errno
import json
import random
from pathlib import Path
from typing import Any, Callable

import pytest

from rgwkeeper.access import ClusterAccess
from rgwkeeper.adapters import gc, siteconfig
from rgwkeeper.adapters import rados as rados_adapter
from rgwkeeper.encoding import Decoder, enc_bool, enc_string, enc_struct, enc_u32
from rgwkeeper.adapters.rados import BulkObjects, RadosAdapter
from rgwkeeper.errors import CephError

FIXTURES = Path(__file__).parent.parent / "fixtures"
RELEASES = sorted(p.parent.name for p in FIXTURES.glob("*/gc.json"))


def capture(release: str) -> dict[str, Any]:
    return json.loads((FIXTURES / release / "gc.json").read_text())


def pages(fx: dict[str, Any]) -> list[bytes]:
    return [base64.b64decode(b) for shard in fx["pages"].values() for b in shard.values()]


def comparable(entries: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """An entry as both sources print it: the time to the second (radosgw-admin prints microseconds)."""
    return sorted((e["tag"], e["time"][:19], tuple((o["pool"], o["oid"], o["key"], o["instance"]) for o in e["objs"]))
                  for e in entries)


def test_every_release_of_the_matrix_has_a_capture() -> None:
    assert RELEASES == ["pacific", "reef", "tentacle"]


@pytest.mark.parametrize("release", RELEASES)
def test_the_decoded_pages_are_what_gc_list_prints(release: str) -> None:
    fx = capture(release)
    decoded = []
    for raw in pages(fx):
        entries, marker, truncated = gc.decode_list_ret(raw)
        assert not truncated and len(entries) < fx["page_entries"]
        decoded += entries
    assert fx["gc_list_include_all"], "the capture holds entries"
    assert comparable(decoded) == comparable(fx["gc_list_include_all"])
    # The capture's deletes and aborted upload are there, with the objects of the bucket.
    ours = [e for e in decoded if any(o["oid"].startswith(fx["marker"] + "_") for o in e["objs"])]
    assert len(ours) >= 3


@pytest.mark.parametrize("release", RELEASES)
def test_the_admin_apis_zone_is_the_zone_radosgw_admin_prints(release: str) -> None:
    """AdminApi.zone_layout (GET /admin/config?type=zone) and `zone get` agree on every release:
    the fakes answer the one with the other's capture."""
    z = capture(release)["zone_layout"]
    assert z["admin_api"] == z["zone_get"]
    assert z["admin_api"]["gc_pool"] == capture(release)["gc_pool"] == "default.rgw.log:gc"
    assert z["admin_api"]["placement"]["default-placement"]["data_pool"] == "default.rgw.buckets.data"


def test_the_list_op_is_cls_rgw_gc_list_op_v2() -> None:
    assert gc.list_op("", 100) == bytes([2, 1, 9, 0, 0, 0]) + b"\0\0\0\0" + b"d\0\0\0" + b"\0"
    assert gc.list_op("1/2", 7, expired_only=True)[6:] == b"\3\0\0\0" + b"1/2" + b"\7\0\0\0" + b"\1"
    for bad in (0, -1, 2**32):
        with pytest.raises(ValueError):
            gc.list_op("", bad)


@pytest.mark.parametrize("release", RELEASES)
def test_every_truncation_and_corruption_is_a_decode_error_or_a_whole_answer(release: str) -> None:
    raw = max(pages(capture(release)), key=len)
    whole = gc.decode_list_ret(raw)
    for n in range(len(raw)):
        with pytest.raises(gc.GcDecodeError):
            gc.decode_list_ret(raw[:n])
    with pytest.raises(gc.GcDecodeError, match="bytes after"):
        gc.decode_list_ret(raw + b"\0")
    rnd = random.Random(7)
    for _ in range(2000):
        b = bytearray(raw)
        for _ in range(rnd.randint(1, 4)):
            b[rnd.randrange(len(b))] = rnd.randrange(256)
        try:
            entries, marker, truncated = gc.decode_list_ret(bytes(b))
        except gc.GcDecodeError:
            continue
        assert isinstance(entries, list) and isinstance(marker, str) and isinstance(truncated, bool)
    assert whole[0]


# -- BulkObjects.gc_entries over a librados that answers as librados does ------------------------

def entry(n: int, objs: int = 1, name_len: int = 20) -> dict[str, Any]:
    return {"tag": f"tag-{n}\0", "time": "2026-11-28T23:33:31",
            "objs": [{"pool": "default.rgw.buckets.data", "oid": f"m.1__shadow_{n}_{i}".ljust(name_len, "x"),
                      "key": "", "instance": ""} for i in range(objs)]}


def encode_ret(entries: list[dict[str, Any]], marker: str, truncated: bool) -> bytes:
    def obj(o: dict[str, str]) -> bytes:
        key = enc_struct(1, 1, enc_string(o["oid"]) + enc_string(o["instance"]))
        return enc_struct(2, 1, enc_string(o["pool"]) + enc_string(o["oid"]) + enc_string(o["key"]) + key)

    def info(e: dict[str, Any]) -> bytes:
        chain = enc_struct(1, 1, enc_u32(len(e["objs"])) + b"".join(obj(o) for o in e["objs"]))
        return enc_struct(1, 1, enc_string(e["tag"]) + chain + enc_u32(1_795_908_811) + enc_u32(0))

    return enc_struct(2, 1, enc_u32(len(entries)) + b"".join(info(e) for e in entries) + enc_string(marker)
                      + enc_bool(truncated))


class RadosError(Exception):
    def __init__(self, msg: str, errno: int) -> None:
        super().__init__(msg)
        self.errno = errno


class GcIoctx:
    """GC objects: ``queues`` and ``omaps`` map a GC object to its entries, served ``max`` at a
    time from the marker (the entry's index); an answer larger than the caller's buffer is
    ERANGE, a missing object ENOENT (as librados' rados_exec and stat answer)."""

    def __init__(self, queues: dict[str, list[dict[str, Any]]], omaps: dict[str, list[dict[str, Any]]]) -> None:
        self.queues, self.omaps = queues, omaps
        self.namespace = ""
        self.calls: list[tuple[str, str, str, int]] = []

    def set_namespace(self, ns: str) -> None:
        self.namespace = ns

    def stat(self, oid: str) -> tuple[int, float]:
        assert self.namespace == "gc"
        if oid in self.queues:
            return 10, 0.0
        raise RadosError(f"stat {oid}", errno.ENOENT)

    def execute(self, oid: str, cls: str, method: str, data: bytes, length: int = 8192) -> tuple[int, bytes]:
        assert self.namespace == "gc"
        store = {(gc.QUEUE_CLASS, gc.QUEUE_LIST): self.queues, (gc.OMAP_CLASS, gc.OMAP_LIST): self.omaps}[cls, method]
        if oid not in self.queues:
            raise RadosError(f"exec {oid}", errno.ENOENT)
        op = Decoder(data)
        _, end = op.begin("cls_rgw_gc_list_op", 2, 2)
        marker, max_entries, expired_only = op.string(), op.u32(), op.boolean()
        op.finish("cls_rgw_gc_list_op", end)
        op.done("op")
        assert not expired_only, "include-all: entries not yet due too"
        self.calls.append((oid, method, marker, length))
        items = store.get(oid, [])
        start = int(marker or 0)
        chunk = items[start:start + max_entries]
        more = start + max_entries < len(items)
        out = encode_ret(chunk, str(start + max_entries) if more else "", more)
        if len(out) > length:
            raise RadosError("Ioctx.read: failed to read", errno.ERANGE)
        return len(out), out

    def close(self) -> None:
        pass


class GcCluster:
    def __init__(self, io: GcIoctx) -> None:
        self.io = io

    def connect(self, timeout: int = 0) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def open_ioctx(self, pool: str) -> GcIoctx:
        assert pool == "default.rgw.log"
        return self.io


def read(tmp_path: Path, io: GcIoctx, shards: int, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    return read_kept(tmp_path, io, shards, monkeypatch).entries


def read_kept(tmp_path: Path, io: GcIoctx, shards: int, monkeypatch: pytest.MonkeyPatch,
              keep: Callable[[dict[str, Any]], bool] | None = None) -> gc.GcRead:
    monkeypatch.setattr(rados_adapter, "_rados_errors", lambda: (RadosError, KeyError))
    access = ClusterAccess(conf=tmp_path / "ceph.conf", keyring=None, client_name="client.admin",
                           rgw_endpoint=None, rgw_credentials_file=None, timeout_s=5)
    r = RadosAdapter(access, factory=lambda a: GcCluster(io))  # type: ignore[arg-type,return-value]
    r.connect()
    try:
        return asyncio.run(BulkObjects(r, "default.rgw.log").gc_entries("gc", shards, keep=keep))
    finally:
        r.close()


def test_pages_an_answer_too_large_for_the_buffer_and_legacy_omap_entries_are_all_read(tmp_path, monkeypatch):
    queues = {f"gc.{n}": [] for n in range(8)}
    queues["gc.3"] = [entry(n) for n in range(2500)]  # three pages
    queues["gc.5"] = [entry(10_000, objs=12_000, name_len=120)]  # one entry of ~2 MiB: larger than the buffer
    omaps = {"gc.6": [entry(2000), entry(2001)]}  # queued before Octopus
    io = GcIoctx(queues, omaps)
    got = read(tmp_path, io, 8, monkeypatch)
    assert comparable(got) == comparable(queues["gc.3"] + queues["gc.5"] + omaps["gc.6"])
    assert [c[2] for c in io.calls if c[0] == "gc.3" and c[1] == gc.QUEUE_LIST] == ["", "1000", "2000"]
    sizes = [c[3] for c in io.calls if c[0] == "gc.5" and c[1] == gc.QUEUE_LIST]
    assert sizes[0] == rados_adapter.GC_PAGE_BYTES and sizes[-1] > sizes[0] and len(sizes) >= 2


def test_only_the_entries_the_filter_keeps_are_returned_and_every_entry_is_counted(tmp_path, monkeypatch):
    """A purge asks for its own bucket's entries: the others are dropped page by page, not held
    (a cluster after a mass delete holds millions), and the total still counts them."""
    queues = {f"gc.{n}": [] for n in range(4)}
    queues["gc.1"] = [entry(n) for n in range(2500)]  # three pages
    queues["gc.2"] = [entry(n) for n in range(2500, 2510)]
    omaps = {"gc.3": [entry(9000), entry(9001)]}
    ours = {7, 1500, 2503, 9001}  # in the first page, the second, another object, the omap
    got = read_kept(tmp_path, GcIoctx(queues, omaps), 4, monkeypatch,
                    keep=lambda e: int(e["tag"].split("-")[1].rstrip("\0")) in ours)
    assert sorted(int(e["tag"].split("-")[1].rstrip("\0")) for e in got.entries) == sorted(ours)
    assert got.total == 2512


def test_more_gc_objects_than_it_was_told_is_refused_and_fewer_are_nothing(tmp_path, monkeypatch):
    queues = {f"gc.{n}": [entry(n)] for n in range(8)}
    with pytest.raises(CephError, match="gc.6: exists: RGW keeps more than 6 GC objects"):
        read(tmp_path, GcIoctx(queues, {}), 6, monkeypatch)
    assert len(read(tmp_path, GcIoctx(queues, {}), 12, monkeypatch)) == 8  # gc.8 .. gc.11: ENOENT, nothing


def test_no_gc_0_is_not_where_rgw_keeps_gc_and_is_refused(tmp_path, monkeypatch):
    """RGW creates every GC object when it starts: none at all means another pool or namespace,
    which must not pass for an empty GC."""
    with pytest.raises(CephError, match="gc.0: does not exist: RGW keeps no GC here"):
        read(tmp_path, GcIoctx({}, {}), 32, monkeypatch)


class Paging(GcIoctx):
    """gc.1's queue answers its pages as ``answer(marker)`` says: (entries, next marker, truncated)."""

    def __init__(self, queues, answer):
        super().__init__(queues, {})
        self.answer = answer

    def execute(self, oid, cls, method, data, length=8192):
        if oid != "gc.1" or method != gc.QUEUE_LIST:
            return super().execute(oid, cls, method, data, length)
        op = Decoder(data)
        _, end = op.begin("cls_rgw_gc_list_op", 2, 2)
        marker = op.string()
        self.calls.append((oid, method, marker, length))
        result = self.answer(marker)
        if isinstance(result, int):
            raise RadosError("exec", result)
        out = encode_ret(*result)
        return len(out), out


@pytest.mark.parametrize("answer, why", [
    (lambda m: ([entry(1)], "7/100", True), "a truncated answer whose marker does not move on"),
    (lambda m: ([entry(1)], "", True), "a truncated answer without a marker to go on from"),
    (lambda m: ([entry(1)], "7/100", True) if not m else errno.ENOENT, "gc.1 rgw_gc.rgw_gc_queue_list_entries"),
    (lambda m: errno.EINVAL, "gc.1 rgw_gc.rgw_gc_queue_list_entries"),  # not a queue (omap GC from before Octopus)
])
def test_a_page_that_cannot_be_followed_is_refused_not_looped_on(tmp_path, monkeypatch, answer, why):
    queues = {f"gc.{n}": [] for n in range(4)}
    io = Paging(queues, answer)
    with pytest.raises(CephError, match=why):
        read(tmp_path, io, 4, monkeypatch)
    assert len([c for c in io.calls if c[0] == "gc.1"]) <= 2


def test_an_answer_that_cannot_be_decoded_or_an_osd_error_is_a_ceph_error(tmp_path, monkeypatch):
    class Garbled(GcIoctx):
        def execute(self, oid: str, cls: str, method: str, data: bytes, length: int = 8192) -> tuple[int, bytes]:
            n, out = super().execute(oid, cls, method, data, length)
            return n, out[:-3] if oid == "gc.1" else out

    class Failing(GcIoctx):
        def execute(self, oid: str, cls: str, method: str, data: bytes, length: int = 8192) -> tuple[int, bytes]:
            if oid == "gc.2":
                raise RadosError("exec", errno.EIO)
            return super().execute(oid, cls, method, data, length)

    queues = {f"gc.{n}": [entry(n)] for n in range(4)}
    with pytest.raises(CephError, match="default.rgw.log:gc gc: cls_rgw_gc_list_ret of 139 bytes with 136 left"):
        read(tmp_path, Garbled(queues, {}), 4, monkeypatch)
    with pytest.raises(CephError, match="gc.2"):
        read(tmp_path, Failing(queues, {}), 4, monkeypatch)
    with pytest.raises(CephError, match="out of range"):
        read(tmp_path, GcIoctx(queues, {}), 0, monkeypatch)


# -- the zonegroup's zones from .rgw.root (adapters/siteconfig.py) -------------------------------

def rgw_root(release: str) -> dict[str, bytes]:
    return {k: base64.b64decode(v) for k, v in capture(release)["rgw_root"].items()}


@pytest.mark.parametrize("release", RELEASES)
def test_the_zonegroups_zones_are_what_zonegroup_get_prints(release: str) -> None:
    """Pacific and Reef keep two zonegroups (default zonegroups made twice at first start, as
    captured): every one holds the one zone, so the answer is that zone whichever RGW uses."""
    fx = capture(release)
    root = rgw_root(release)
    zone_id = fx["zone_layout"]["admin_api"]["id"]
    assert fx["zonegroup_get_zones"] == [zone_id]
    groups = [data for name, data in root.items() if name.startswith(siteconfig.ZONEGROUP_PREFIX)]
    assert groups and all(siteconfig.zonegroup_zone_ids(g) == [zone_id] for g in groups)
    assert siteconfig.zones_if_single(root, zone_id) == [zone_id]


def second_zone(group: bytes, zone_id: str) -> bytes:
    """The zonegroup with its one zone's entry twice, the second under another id (what `zonegroup
    add` of a second zone makes of the map: two entries)."""
    r = Decoder(group)
    _, _ = r.begin("RGWZoneGroup", 6, 1)
    for _ in range(2):
        r.string()
    r.boolean()
    for _ in range(r.count()):
        r.string()
    r.string()
    count_at = r.pos
    assert r.u32() == 1
    key_at = r.pos
    assert r.string() == zone_id
    _, zend = r.begin("RGWZone", 20, 1)
    zone = group[r.pos - 6:zend]
    other = enc_string("00000000-0000-0000-0000-000000000002") + zone
    body = group[6:count_at] + enc_u32(2) + group[key_at:zend] + other + group[zend:]
    return bytes(group[:2]) + enc_u32(len(body)) + body


@pytest.mark.parametrize("release", RELEASES)
def test_anything_but_a_realmless_single_zone_is_left_to_radosgw_admin(release: str) -> None:
    root = rgw_root(release)
    zone_id = capture(release)["zone_layout"]["admin_api"]["id"]
    group = next(n for n in root if n.startswith(siteconfig.ZONEGROUP_PREFIX))
    two = {**root, group: second_zone(root[group], zone_id)}
    assert siteconfig.zonegroup_zone_ids(two[group]) == [zone_id, "00000000-0000-0000-0000-000000000002"]
    for objects, zone in (
        (two, zone_id),  # a second zone in one zonegroup
        ({**root, "realms.1234": b"x"}, zone_id),  # a realm: RGW reads the period's zonegroup
        ({**root, "default.realm": b"x"}, zone_id),
        ({**root, "periods.1234.1": b"x"}, zone_id),
        ({**root, "region_info.default": b"x"}, zone_id),  # a legacy region
        ({**root, "ns/zone_info.x": b"x"}, zone_id),  # an object in a namespace: not known
        ({**root, group: root[group][:-1]}, zone_id),  # cannot be decoded
        ({n: d for n, d in root.items() if not n.startswith(siteconfig.ZONEGROUP_PREFIX)}, zone_id),  # no zonegroup
        (root, "another-zone"),  # the zonegroups' zone is not the zone RGW serves
        (root, ""),
        ({}, zone_id),
        ({**root, **{f"zone_names.z{i}": b"" for i in range(siteconfig.MAX_ROOT_OBJECTS)}}, zone_id),
    ):
        assert siteconfig.zones_if_single(objects, zone) is None


@pytest.mark.parametrize("release", RELEASES)
def test_every_truncation_of_a_zonegroup_is_a_decode_error(release: str) -> None:
    root = rgw_root(release)
    group = next(d for n, d in root.items() if n.startswith(siteconfig.ZONEGROUP_PREFIX))
    for n in range(len(group)):
        with pytest.raises(siteconfig.SiteConfigError):
            siteconfig.zonegroup_zone_ids(group[:n])
