"""A stateful, strict stand-in for one bucket in a Pacific cluster, fed with captured output.

The world starts as ``tests/fixtures/pacific/purge.json`` recorded it (``capture_purge.py``):
the bucket's S3 listing, its RADOS objects with their sizes and locators, its stats, instance
metadata, zone and zonegroup, the GC queue's shape, radosgw-admin's "not found" answers. The
fakes change it the way RGW does (an S3 delete removes the index entry and the head and puts
tails on the GC queue; a head removed with librados leaves its index entry behind; GC drops a
tail unless a copy still references it), refuse any call they do not model, and log every
change so tests can assert on what was done.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import dataclasses
import datetime
import email.utils
import errno
import json
import struct
import threading
import time
import zlib
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from rgwkeeper.access import ClusterAccess
from rgwkeeper.adapters.cephcli import CompletedRun
from rgwkeeper.adapters.endpoints import Endpoints
from rgwkeeper.adapters.gc import GcRead
from rgwkeeper.adapters.radosgw_admin import RadosgwAdmin, zone_layout
from rgwkeeper.adapters.siteconfig import CONFIG_STORE_OPTION, ROOT_CONFIG_DEFAULTS, ROOT_POOL
from rgwkeeper.errors import CephError, CephTimeout, CephUnreachable, NotFound
from rgwkeeper.purge.execute import PurgeIO
from rgwkeeper.purge.layout import head_oid, index_name
from rgwkeeper.adapters.manifest import decode_manifest, tail_objects
from tests.unit.fakes import UnexpectedCall, load_fixture
from tests.unit.manifest_builder import bucket as mb_bucket
from tests.unit.manifest_builder import manifest, multipart, single_put

DATA = "default.rgw.buckets.data"
INDEX = "default.rgw.buckets.index"
EXTRA = "default.rgw.buckets.non-ec"


def captured() -> dict[str, Any]:
    return load_fixture("purge.json")


def _rebased(fx: dict[str, Any]) -> Callable[[str], datetime.datetime]:
    """The capture's times moved so its newest is now, spacing kept: the world is as fresh on
    any day as it was when captured (an age filter must not start matching as the calendar moves)."""
    stamps = [o["LastModified"] for o in fx["list_objects_v2"]["Contents"]]
    stamps += [u["Initiated"] for u in fx["list_multipart_uploads"]["Uploads"]]
    shift = datetime.datetime.now(datetime.timezone.utc) - max(map(datetime.datetime.fromisoformat, stamps))
    return lambda text: datetime.datetime.fromisoformat(text) + shift


def _rgw_root(zone_id: str) -> dict[str, bytes]:
    """The captured .rgw.root with its zone's id replaced by ``zone_id`` (both 36 characters)."""
    fx = load_fixture("gc.json")
    captured = fx["zone_layout"]["zone_get"]["id"]
    assert len(captured) == len(zone_id)

    def swap(b: bytes) -> bytes:
        return b.replace(captured.encode(), zone_id.encode())

    return {k.replace(captured, zone_id): swap(base64.b64decode(v)) for k, v in fx["rgw_root"].items()}


class World:
    """One bucket (``capture-mixed``) and what RGW and RADOS hold for it."""

    def __init__(self, *, page_size: int = 3, extra_plain: int = 0) -> None:
        fx = captured()
        self.fx = fx
        self.page_size = page_size
        self.stats = copy.deepcopy(fx["bucket_stats_mixed"])
        self.bucket = self.stats["bucket"]
        self.marker = self.stats["marker"]
        self.bucket_id = self.stats["id"]
        self.owner = self.stats["owner"]
        self.instance = copy.deepcopy(fx["instance_mixed"])
        self.exists = True
        self.index: dict[str, dict[str, Any]] = {}
        _dt = _rebased(fx)
        for o in fx["list_objects_v2"]["Contents"]:
            self.index[o["Key"]] = {**o, "LastModified": _dt(o["LastModified"])}
        self.pools: dict[str, dict[str, dict[str, Any]]] = {DATA: {}, INDEX: {}, EXTRA: {}}
        for o in fx["rados_objects_mixed"]:
            self.pools[DATA][o["oid"]] = {"size": o["size"], "locator": o["locator"], "refs": 0}
        for n in range(self.stats["num_shards"]):
            self.pools[INDEX][f".dir.{self.bucket_id}.{n}"] = {"size": 0, "locator": "", "refs": 0}
        # The capture deleted "big" and "multi" after listing; the world starts before that.
        self.tails = {
            "big": [o for o in self.pools[DATA] if "__shadow_." in o],
            "multi": [o for o in self.pools[DATA] if "multi." in o],
        }
        for oid in self.tails["big"]:
            self.pools[DATA][oid]["refs"] = 1  # a copy in capture-copies shares them
        #: Each head's xattrs as RGW writes them: its manifest (naming exactly the captured tails)
        #: and its tail tag. ``manifests_readable = False``: every manifest is one the decoder
        #: refuses (an explicit, pre-Firefly one), so objects with tails go through S3.
        self.head_xattrs: dict[str, dict[str, bytes]] = {}
        self.manifests_readable = True
        for key, e in self.index.items():
            self._write_head_xattrs(key, e["Size"])
        self.refcount_puts: list[tuple[str, bytes]] = []
        self.uploads = [{**u, "Initiated": _dt(u["Initiated"])} for u in fx["list_multipart_uploads"]["Uploads"]]
        self.upload_parts = {u["UploadId"]: [o for o in self.pools[DATA] if "__multipart_incomplete" in o]
                             for u in self.uploads}
        for u in self.uploads:
            self.pools[EXTRA][f"{self.marker}__multipart_{u['Key']}.{u['UploadId']}.meta"] = {"size": 0, "locator": "",
                                                                                              "refs": 0}
        now = datetime.datetime.now(datetime.timezone.utc)
        for i in range(extra_plain):
            key = f"extra/{i:05d}"
            self.index[key] = {"Key": key, "Size": 100, "ETag": '"0123456789abcdef0123456789abcdef"',
                               "LastModified": now, "StorageClass": "STANDARD"}
            self.pools[DATA][head_oid(self.marker, key)[0]] = {"size": 100, "locator": "", "refs": 0}
            self._write_head_xattrs(key, 100)
        self.gc: list[dict[str, Any]] = []
        self.quota: dict[str, Any] = copy.deepcopy(self.stats["bucket_quota"])
        self.lifecycle: list[dict[str, Any]] = []
        #: RGW keeps the rules it is given otherwise (None: as given). rules_without_sizes is what
        #: 18.2.7 does: it accepts a size filter and keeps the rule without it (measured).
        self.lifecycle_kept: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None
        self.user_buckets = list(fx["user_buckets"])
        # `bucket list` of every bucket: names RGW holds besides this one (absent from the world:
        # their stats answer NoSuchBucket, as for a bucket deleted since the listing).
        self.all_buckets = [self.bucket]
        self.log: list[str] = []
        self.admin_at_once = 0  # radosgw-admin processes running now, and the most there were at once
        self.admin_most_at_once = 0
        self.user_synced_at = "2020-01-01T00:00:00.000000Z"
        self.sync_prints: str | None = None  # None: what `user stats --sync-stats` printed (captured)
        self.rgw_down_for = 0  # S3 calls that fail as unreachable before RGW answers again
        self.fail_delete_keys: set[str] = set()
        self.metadata_caps = True  # False: the admin user lacks metadata=read
        self.zone_caps = True  # False: the admin user lacks zone=read
        # RGW's GC objects, gc.0 .. gc.<gc_objects - 1> in the zone's gc_pool (captured: 32 on every
        # release); gc_read_fault: what a librados read of them raises (BulkObjects.gc_entries).
        self.gc_objects = 32
        self.gc_objects_in_config: int | None = None  # what the mon's config answers, if not gc_objects
        self.gc_read_fault: Exception | None = None
        # .rgw.root as librados reads it (BulkObjects.read_pool): the realm-less single zone's
        # objects captured on 16.2.15 (tests/fixtures/pacific/gc.json) with this world's zone id;
        # None: the read fails. A world whose zonegroup has more zones holds a realm, as multisite
        # needs.
        self.root_config: dict[str, str] = {}  # root pool / config store options set (else their defaults)
        self.rgw_root: dict[str, bytes] | None = _rgw_root(fx["zone_get"]["id"])
        if len(fx["zonegroup_get"]["zones"]) > 1:
            self.rgw_root["realms.0d0c3f6e-8a3c-4b5e-9a47-3c1bba2f6a11"] = b"\x01"
        # The bucket's lifecycle entry as `lc list` shows it (captured on Reef, where the
        # single-bucket lc process runs), and how many lc process runs find it held by another
        # LC worker (PROCESSING before and after; the run exits 0 having done nothing) or its
        # shard locked (EBUSY, exit 1) before one gets through.
        self.lc_fx = json.loads((Path(__file__).parents[1] / "fixtures/reef/lc.json").read_text())
        self.lc_entry = {**self.lc_fx["lc_list_before_run"][0], "bucket": f":{self.bucket}:{self.marker}"}
        self.lc_held_runs = 0
        self.lc_held_since = email.utils.formatdate(time.time() - 5, usegmt=True)  # the other worker's stamp
        self.lc_busy_runs = 0
        self.lc_crashes = 0  # lc process runs that abort (SIGABRT, Ceph's crash dump) before processing
        self.lc_list_timeouts = 0  # lc list calls right after a crashed lc process that get no answer in time
        self._lc_list_timeouts_now = 0
        self.admin_api_reads: list[str] = []  # every admin API read tried, answered or not
        self.rewrite_on_head: set[str] = set()
        self.tags: dict[str, dict[str, str]] = {}  # key -> its tag set (none: no tags)
        self.retag_on_tagging: dict[str, dict[str, str]] = {}  # key -> tags set between two GetObjectTagging
        self.versions = copy.deepcopy(fx["versions"])
        self.rgw_clock_offset_s = 0.0  # RGW's clock minus this host's (its Date header shows it)
        # Faults: what the next calls of an S3 method raise (None: that call goes through), what
        # lc process raises (its runner's timeout, an interrupt), and an event lc process waits on
        # (so a test can cancel the purge while it runs).
        self.s3_faults: dict[str, list[BaseException | None]] = {}
        self.lc_fault: BaseException | None = None
        self.lc_block: Any = None
        self.rm_block: Any = None  # an asyncio.Event: bucket rm waits for it (a long-running rm)
        #: How the admin API's reads fail: None, "down" (RGW restarting), "busy" (503 SlowDown),
        #: "s3" (the path taken for S3: every read a 404 NoSuchBucket, a bucket called "admin").
        self.admin_api_fault: str | None = None
        #: The same, for the owner's stats sync only ("down", "busy", "s3", "nouser": NoSuchUser, "timeout").
        self.sync_api_fault: str | None = None
        #: The owner removed as soon as the bucket is gone (a user who owns a bucket cannot be):
        #: every read of the user then answers as the release does for no such user (captured).
        self.owner_removed_with_bucket = False
        #: The bucket is another user's and rgwkeeper's RGW user has no admin flag: every S3 call
        #: on it is refused (measured on Pacific 16.2.15 and Tentacle 20.2.4: 403 AccessDenied).
        self.s3_denied = False
        self.s3_access_checks = 0
        self.missing_owner_synced = False  # the removed owner's stats synced all the same (Pacific)
        self.rm_crashes = 0  # bucket rm runs that abort half-way, as 20.2.4's did once in CI
        self.gc_list_fails = 0  # gc list runs that exit 1 (rgw_admin.cc's "failed to list objs")
        #: What a crashed bucket rm leaves: "half" the objects deleted, "all" (the bucket gone),
        #: or "recreated" (half deleted, and the name taken by a new bucket meanwhile; "recreated-s3":
        #: and every admin API read answered on RGW's path for S3, NoSuchBucket).
        self.rm_crash_leaves = "half"
        self.extra_omap: dict[bytes, bytes] = {}  # index entries besides the listed keys' (raw key -> value)
        self.omap_read_cap = 1024  # osd_max_omap_entries_per_request: entries an OSD returns per read

    def _write_head_xattrs(self, key: str, size: int) -> None:
        tails = self.tails.get(key, [])
        if key == "multi":
            prefix = tails[0].split("__multipart_", 1)[1].rsplit(".", 1)[0]
            sizes = [self.pools[DATA][t]["size"] for t in tails if "__multipart_" in t]
            sizes[0] += sum(self.pools[DATA][t]["size"] for t in tails if "__shadow_" in t)
            m = multipart(self.bucket, self.marker, key, prefix, sizes)
        else:
            prefix = tails[0].split("__shadow_", 1)[1].rsplit("_", 1)[0] + "_" if tails else f".{key}-prefix_"
            m = single_put(self.bucket, self.marker, key, size, prefix)
        named = sorted(t.oid for t in tail_objects(decode_manifest(m)))
        assert named == sorted(tails), (key, named, tails)  # the world's manifests name its captured tails
        self.head_xattrs[self.head(key)] = {"user.rgw.manifest": m, "user.rgw.tail_tag": f"tag-{key}\0".encode(),
                                            "user.rgw.idtag": f"id-{key}\0".encode(), "user.rgw.acl": b"..."}

    def add_imported(self, key: str, source_marker: str = "src.9") -> list[str]:
        """An object of this bucket copied from another bucket: its tails carry that bucket's
        marker, hold the source's implicit reference and this object's tag. Returns the tails."""
        prefix = f".{key}-src_"
        tails = [f"{source_marker}__shadow_{prefix}{n}" for n in (1, 2)]
        size = 9 << 20
        self.index[key] = {"Key": key, "Size": size, "ETag": '"0123456789abcdef0123456789abcdef"',
                           "LastModified": datetime.datetime.now(datetime.timezone.utc), "StorageClass": "STANDARD"}
        self.pools[DATA][self.head(key)] = {"size": 4 << 20, "locator": "", "refs": 0}
        for t in tails:
            self.pools[DATA][t] = {"size": 4 << 20, "locator": "", "refs": 1,
                                   "refset": {"": True, f"tag-{key}\0": True}}
        self.tails[key] = tails
        m = manifest(obj_size=size, key=key, prefix=prefix, head_bucket=mb_bucket(self.bucket, self.marker),
                     tail_bucket=mb_bucket("source", source_marker))
        self.head_xattrs[self.head(key)] = {"user.rgw.manifest": m, "user.rgw.tail_tag": f"tag-{key}\0".encode(),
                                            "user.rgw.idtag": f"id-{key}\0".encode()}
        self.stats["usage"]["rgw.main"]["num_objects"] += 1
        return tails

    def index_omap(self, shard: int, shards: int) -> dict[bytes, bytes]:
        """The omap of index shard ``shard`` of ``shards``: every listed key whose name hashes there
        (crc32 here, not RGW's hash), each upload's meta entry, and a bucket-log entry (0x80 key)."""
        if not self.exists:
            return {}
        out: dict[bytes, bytes] = {}
        for key, e in self.index.items():
            name = index_name(key)
            if zlib.crc32(name.encode()) % shards == shard:
                out[name.encode()] = encode_dir_entry(name, e["Size"], e["LastModified"].timestamp(), e["ETag"])
        for u in self.uploads:
            name = f"_multipart_{u['Key']}.{u['UploadId']}.meta"
            if zlib.crc32(name.encode()) % shards == shard:
                out[name.encode()] = encode_dir_entry(name, 0, u["Initiated"].timestamp(), "", category=3)
        out[b"\x800_00000000001.1.2"] = b"\x02\x01\x00\x00\x00\x00"  # a bucket log entry
        out.update({k: v for k, v in self.extra_omap.items() if zlib.crc32(k) % shards == shard})
        return out

    def as_release(self, name: str, version: str) -> "World":
        """The same cluster reporting another release (``versions``), e.g. to exercise code paths
        for what Quincy and later do differently (their lc process runs one bucket, tracker 53430)."""
        def swap(counts: dict[str, int]) -> dict[str, int]:
            return {k.replace("16.2.15", version).replace("pacific", name): v for k, v in counts.items()}
        self.versions = {daemon: swap(counts) for daemon, counts in self.versions.items()}
        return self

    def resharded_in_place(self, gen: int, *, stats_name_it: bool = False, keep_old: bool = False) -> "World":
        """A reshard as Reef and later do it: same bucket id, the index moved to generation ``gen``
        (``.dir.<id>.<gen>.<n>``); Tentacle's bucket stats name the generation, Reef's do not."""
        old = [o for o in self.pools[INDEX] if o.startswith(f".dir.{self.bucket_id}")]
        for n in range(self.stats["num_shards"]):
            self.pools[INDEX][f".dir.{self.bucket_id}.{gen}.{n}"] = {"size": 0, "locator": "", "refs": 0}
        if not keep_old:
            for o in old:
                del self.pools[INDEX][o]
        if stats_name_it:
            self.stats["index_generation"] = gen
        return self

    @property
    def release(self) -> str:
        overall = self.versions.get("overall", {})
        if any("tentacle" in k for k in overall):
            return "tentacle"
        return "pacific" if any("pacific" in k for k in overall) else "newer"

    # -- helpers -----------------------------------------------------------------------------
    def only_head_only_objects(self) -> "World":
        """Drop the objects with tails and the incomplete upload, as if they had been deleted."""
        for key in ("big", "multi"):
            del self.index[key]
            for oid in [self.head(key), *self.tails.pop(key)]:
                self.pools[DATA].pop(oid, None)
        for u in list(self.uploads):
            FakeS3(self).abort_upload(self.bucket, u["Key"], u["UploadId"])
        self.gc_process()
        return self

    def owner_gone(self) -> bool:
        return self.owner_removed_with_bucket and not self.exists

    def current_stats(self) -> dict[str, Any]:
        if not self.exists:
            raise NotFound("bucket stats", "does not exist")
        s = copy.deepcopy(self.stats)
        # As on 16.2.15, rgw.main also counts the parts already uploaded to incomplete uploads.
        parts = [self.pools[DATA][p]["size"] for ps in self.upload_parts.values() for p in ps if p in self.pools[DATA]]
        s["usage"]["rgw.main"]["num_objects"] = len(self.index) + len(parts)
        s["usage"]["rgw.main"]["size"] = sum(e["Size"] for e in self.index.values()) + sum(parts)
        s["usage"]["rgw.multimeta"] = {"num_objects": len(self.uploads), "size": 0}
        s["bucket_quota"] = copy.deepcopy(self.quota)
        return s

    def head(self, key: str) -> str:
        return head_oid(self.marker, key)[0]

    def rados_left(self, pool: str = DATA) -> list[str]:
        return sorted(o for o in self.pools[pool] if o.startswith(self.marker + "_"))

    def s3_delete(self, key: str) -> None:
        if key not in self.index:
            return
        if self.head(key) not in self.pools[DATA]:
            # RGW's delete_obj returns ENOENT early for a missing head and leaves the index
            # entry (S3 still answers success): the reason the direct method drops the index.
            return
        del self.index[key]
        self.pools[DATA].pop(self.head(key))
        tails = self.tails.pop(key, [])
        if tails:
            self.gc.append({"tag": f"tag-{key}\u0000", "time": "2026-01-01T00:00:00+0000",
                            "objs": [{"pool": DATA, "oid": t, "key": "", "instance": ""} for t in tails]})

    def lc_reset(self) -> None:
        """What RGW does to the bucket's lifecycle entry when its rules are put or deleted
        (RGWLC::set_bucket_config, guard_lc_modify): UNINITIAL, never started."""
        self.lc_entry = {**self.lc_fx["lc_list_before_run"][0], "bucket": self.lc_entry["bucket"]}

    def lc_expire(self) -> None:
        """What RGW's lifecycle does for the rules the world models: an expiration date in the past."""
        for rule in self.lifecycle:
            if rule.get("Status") == "Enabled" and "Date" in rule.get("Expiration", {}):
                prefix = rule.get("Filter", {}).get("Prefix", "")
                for key in [k for k in self.index if k.startswith(prefix)]:
                    self.s3_delete(key)

    def gc_process(self) -> None:
        for entry in self.gc:
            for o in entry["objs"]:
                obj = self.pools[o["pool"]].get(o["oid"])
                if obj is None:
                    continue
                if obj["refs"]:
                    obj["refs"] -= 1
                    obj["kept"] = True  # still referenced by a copy: cls_refcount keeps it
                else:
                    del self.pools[o["pool"]][o["oid"]]
        self.gc = []


CRASH_DUMP = """2026-11-27T11:51:02.101+0000 7f3a1c8e4980 -1 *** Caught signal (Aborted) **
 in thread 7f3a1c8e4980 thread_name:radosgw-admin

 ceph version 20.2.4 (0000000000000000000000000000000000000000) tentacle (stable)
 1: /lib/x86_64-linux-gnu/libc.so.6(+0x3fdf0) [0x7f3a1d05bdf0]
 2: gsignal()
 3: abort()
 NOTE: a copy of the executable, or `objdump -rdS <executable>` is needed to interpret this.

--- begin dump of recent events ---
   -1> 2026-11-27T11:51:02.100+0000 7f3a1c8e4980  5 asok(0x55d) register_command
    0> 2026-11-27T11:51:02.101+0000 7f3a1c8e4980 -1 *** Caught signal (Aborted) **
--- end dump of recent events ---
"""


def sync_stamp() -> str:
    """Now, as RGW prints ``last_stats_sync`` (2026-11-28T07:52:13.100323Z)."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


#: Event loop turns a fake radosgw-admin process takes.
PROCESS_TURNS = 8


class FakeRunner:
    """radosgw-admin, as far as purge uses it (strict)."""

    def __init__(self, world: World) -> None:
        self.w = world

    async def __call__(self, argv: Sequence[str], timeout: float) -> CompletedRun:
        """Each call is a process that runs beside the caller's other work (it yields a few times:
        a process takes longer than a mon command or a librados read), and the world counts how
        many ran at once."""
        w = self.w
        w.admin_at_once += 1
        w.admin_most_at_once = max(w.admin_most_at_once, w.admin_at_once)
        try:
            for _ in range(PROCESS_TURNS):
                await asyncio.sleep(0)
            return await self._answer(argv, timeout)
        finally:
            w.admin_at_once -= 1

    async def _answer(self, argv: Sequence[str], timeout: float) -> CompletedRun:
        w = self.w
        assert list(argv[:5]) == ["radosgw-admin", "--conf", argv[2], "--name", "client.admin"], argv
        args = list(argv[5:])
        fmt = "--format=json" in args
        args = [a for a in args if a != "--format=json"]
        w.log.append("radosgw-admin " + " ".join(args))

        def ok(out: Any = None) -> CompletedRun:
            return CompletedRun(tuple(argv), 0, json.dumps(out) if (fmt and out is not None) else "", "", 0.0)

        def missing(name: str) -> CompletedRun:
            m = w.fx[name]
            return CompletedRun(tuple(argv), m["returncode"], m["stdout"], m["stderr"], 0.0)

        def missing_user(name: str) -> CompletedRun:
            m = w.fx["user_missing"][name]
            return CompletedRun(tuple(argv), m["returncode"], m["stdout"], m["stderr"], 0.0)

        match args:
            case ["bucket", "stats", "--bucket", b]:
                if b != w.bucket or not w.exists:  # the world holds one bucket: what radosgw-admin says (captured)
                    m = load_fixture("radosgw-admin.json")["bucket_stats_missing"]
                    return CompletedRun(tuple(argv), m["returncode"], m["stdout"], m["stderr"], 0.0)
                return ok(w.current_stats())
            case ["zone", "get"]:
                return ok(w.fx["zone_get"])
            case ["zonegroup", "get"]:
                return ok(w.fx["zonegroup_get"])
            case ["metadata", "get", key]:
                if key == f"bucket.instance:{w.bucket}:{w.bucket_id}" and w.instance is not None:
                    return ok(w.instance)
                return missing("metadata_get_missing")
            case ["metadata", "rm", key]:
                if key == f"bucket:{w.bucket}" and w.exists:
                    w.exists = False
                    w.user_buckets = [b for b in w.user_buckets if b != w.bucket]
                    return ok()
                if key == f"bucket.instance:{w.bucket}:{w.bucket_id}" and w.instance is not None:
                    if w.release == "tentacle":
                        return ok()  # 20.2.4 reads the instance and removes nothing (ceph PR 53799; measured)
                    w.instance = None
                    return ok()
                return missing("metadata_rm_missing")
            case ["gc", "list", "--include-all"]:
                if w.gc_list_fails:
                    w.gc_list_fails -= 1
                    return CompletedRun(tuple(argv), 1, "", "ERROR: failed to list objs: (110) Connection timed out\n",
                                        0.0)
                return ok(w.gc)
            case ["gc", "process", "--include-all"]:
                w.gc_process()
                return ok()
            case ["user", "stats", "--uid", uid] if uid == w.owner and w.owner_gone():
                return missing_user("user_stats_after_sync" if w.missing_owner_synced else "user_stats")
            case ["user", "stats", "--uid", uid, "--sync-stats"] if uid == w.owner and w.owner_gone():
                done = missing_user("user_stats_sync")
                if done.returncode != 0:
                    return done
                w.missing_owner_synced = True  # Pacific: stats recorded for no user (captured), synced now
                printed = json.loads(done.stdout)
                return dataclasses.replace(done, stdout=done.stdout.replace(printed["last_stats_sync"], sync_stamp()))
            case ["bucket", "list", "--uid", uid] if uid == w.owner and w.owner_gone():
                return missing_user("bucket_list_uid")
            case ["user", "stats", "--uid", uid] if uid == w.owner:
                return ok({**w.fx["user_stats"], "last_stats_sync": w.user_synced_at})
            case ["user", "stats", "--uid", uid, "--sync-stats"] if uid == w.owner:
                w.user_synced_at = sync_stamp()
                # What the release printed (captured), with this sync's time: the stats, with or
                # without --format (its default format is JSON).
                printed = w.sync_prints if w.sync_prints is not None else w.fx["user_stats_sync_stdout"]
                before = json.loads(w.fx["user_stats_sync_stdout"])["last_stats_sync"]
                return CompletedRun(tuple(argv), 0, printed.replace(before, w.user_synced_at), "", 0.0)
            case ["bucket", "list", "--uid", uid] if uid == w.owner:
                return ok(w.user_buckets)
            case ["bucket", "list"]:
                return ok(w.all_buckets)
            case ["bucket", "rm", "--bucket", b, "--purge-objects", *rest] if b == w.bucket:
                if not w.exists:
                    return missing("bucket_rm_missing")  # exits 0: what Ceph's own test expects
                if w.rm_block is not None:
                    await w.rm_block.wait()
                if w.rm_crashes:
                    # Half the objects deleted, then Ceph's signal handler's dump (its shape:
                    # src/global/signal_handler.cc) and the exit a shell or docker exec gives.
                    w.rm_crashes -= 1
                    keys = list(w.index)
                    for key in keys if w.rm_crash_leaves == "all" else keys[: len(keys) // 2]:
                        w.s3_delete(key)
                    if w.rm_crash_leaves == "all":  # crashed at its very end, the bucket removed
                        for u in list(w.uploads):
                            FakeS3(w).abort_upload(b, u["Key"], u["UploadId"])
                        FakeS3(w).delete_bucket(b)
                    elif w.rm_crash_leaves in ("recreated", "recreated-s3"):
                        w.bucket_id = w.bucket_id + "-new"
                        w.stats["id"] = w.bucket_id
                        if w.rm_crash_leaves == "recreated-s3":  # and the admin API now on the path for S3
                            w.admin_api_fault = "s3"
                    return CompletedRun(tuple(argv), 128 + 6, "", CRASH_DUMP, 0.0)
                for u in list(w.uploads):
                    FakeS3(w).abort_upload(b, u["Key"], u["UploadId"])
                for key in list(w.index):
                    if "--bypass-gc" in rest:  # tracker 73348: tails go without their refcounts
                        for t in w.tails.pop(key, []):
                            w.pools[DATA].pop(t, None)
                        w.pools[DATA].pop(w.head(key), None)
                        del w.index[key]
                    else:
                        w.s3_delete(key)
                FakeS3(w).delete_bucket(b)
                return ok()
            case ["lc", "process", "--bucket", b] if b == w.bucket:
                if w.lc_block is not None:
                    await w.lc_block.wait()
                if w.lc_fault is not None:
                    fault, w.lc_fault = w.lc_fault, None
                    raise fault
                if w.lc_crashes:
                    # RGWLC::process_bucket sets the entry PROCESSING (its `started` kept), then
                    # aborts while it lists the bucket: nothing expired, the entry left held.
                    w.lc_crashes -= 1
                    w.lc_entry = {**w.lc_entry, "status": "PROCESSING"}
                    w._lc_list_timeouts_now = w.lc_list_timeouts
                    return CompletedRun(tuple(argv), 128 + 6, "", CRASH_DUMP, 0.0)
                if w.release == "pacific":
                    # 16.2.15 ignores --bucket and runs the first bucket of each lifecycle shard
                    # (measured); this world's bucket is not one of them.
                    return ok()
                if w.lc_busy_runs:
                    w.lc_busy_runs -= 1
                    return CompletedRun(tuple(argv), 1, "", "ERROR: lc processing returned error: (16) Device or "
                                        "resource busy\n", 0.0)
                if w.lc_held_runs:  # RGWLC::process_bucket: "ACTIVE entry", returns 0 having done nothing
                    w.lc_held_runs -= 1
                    if not w.lc_held_runs:  # the other worker finishes after this run; its stamp stays
                        w.lc_entry = {**w.lc_fx["lc_list_after_bucket_run"][0], "bucket": w.lc_entry["bucket"],
                                      "started": w.lc_held_since}
                    return ok()
                started = email.utils.parsedate_to_datetime(w.lc_entry["started"]).timestamp()
                if w.lc_entry.get("status") == "PROCESSING" and time.time() - started < 2 * 86400:
                    return ok()  # RGWLC::process_bucket: an "ACTIVE entry" (a crashed run's, too) is skipped
                w.lc_expire()
                # Reef's single-bucket run: COMPLETE, `started` left as it was (captured).
                w.lc_entry = {**w.lc_fx["lc_list_after_bucket_run"][0], "bucket": w.lc_entry["bucket"],
                              "started": w.lc_entry["started"]}
                return ok()
            case ["lc", "list"]:
                if w._lc_list_timeouts_now:
                    w._lc_list_timeouts_now -= 1
                    raise CephTimeout("radosgw-admin lc list", f"no answer within {timeout:g} s")
                entry = w.lc_entry
                if w.lc_held_runs:  # another worker has it: PROCESSING, started when it began
                    entry = {**entry, "status": "PROCESSING", "started": w.lc_held_since}
                return ok([entry] if w.lifecycle else [])
        raise UnexpectedCall(f"unexpected radosgw-admin call: {list(argv)}")


class FakeS3:
    """rgwkeeper.adapters.s3.S3Adapter's methods, over the world."""

    def __init__(self, world: World) -> None:
        self.w = world
        self.endpoints = Endpoints({"http://rgw:8080": None})  # counts requests as S3Adapter's does

    def _up(self, what: str) -> None:
        def answer(_client: None) -> None:
            if self.w.rgw_down_for > 0:
                self.w.rgw_down_for -= 1
                raise CephUnreachable(what, "cannot connect to the RGW endpoint")

        self.endpoints.call(answer, refused=lambda exc: False)

    def _bucket(self, bucket: str, what: str) -> None:
        if bucket != self.w.bucket or not self.w.exists:
            raise NotFound(f"{what} {bucket}", "NoSuchBucket")
        if self.w.s3_denied:
            raise CephError(f"{what} {bucket}", "AccessDenied")

    def iter_pages(self, bucket: str, prefix: str | None = None, *, start_after: str | None = None,
                   page_size: int = 1000) -> Iterator[list[dict[str, Any]]]:
        self._bucket(bucket, "ListObjectsV2")
        after = start_after or ""
        while True:
            self._up("ListObjectsV2")
            self._fault("iter_pages")
            self.w.log.append(f"S3 ListObjectsV2 after={after!r}")
            keys = sorted(k for k in self.w.index if k > after and (prefix is None or k.startswith(prefix)))
            n = min(self.w.page_size, page_size)
            page = [dict(self.w.index[k]) for k in keys[:n]]
            yield page
            if len(keys) <= n:
                return
            after = page[-1]["Key"]

    def list_delimited(self, bucket: str, prefix: str, delimiter: str = "/",
                       max_keys: int = 1000) -> tuple[list[str], list[str], bool]:
        self._bucket(bucket, "ListObjectsV2")
        self._up("ListObjectsV2")
        self.w.log.append(f"S3 ListObjectsV2 prefix={prefix!r} delimiter={delimiter!r}")
        keys, common = [], []
        for k in sorted(self.w.index):  # S3: a common prefix ends at the first delimiter after the prefix
            if not k.startswith(prefix):
                continue
            cut = k.find(delimiter, len(prefix))
            if cut < 0:
                keys.append(k)
            elif k[:cut + 1] not in common:
                common.append(k[:cut + 1])
        return keys[:max_keys], common[:max_keys], len(keys) + len(common) > max_keys

    def rgw_date(self, bucket: str) -> float:
        """A HeadBucket's Date header: RGW's clock, whole seconds (HTTP dates have no fraction);
        a 404 for a missing bucket carries it too."""
        self._up("HeadBucket")
        self.w.log.append("S3 HeadBucket (Date)")
        return float(int(time.time() + self.w.rgw_clock_offset_s))

    def iter_keys(self, bucket: str, prefix: str | None = None, page_size: int = 1000) -> Iterator[dict[str, Any]]:
        for page in self.iter_pages(bucket, prefix):
            yield from page

    def delete_batch(self, bucket: str, objects: list[dict[str, str]]) -> list[dict[str, Any]]:
        self._bucket(bucket, "DeleteObjects")
        self._up("DeleteObjects")
        self._fault("delete_batch")
        self.w.log.append(f"S3 DeleteObjects {[o['Key'] for o in objects]}")
        errors = []
        for o in objects:
            if o["Key"] in self.w.fail_delete_keys:
                errors.append({"Key": o["Key"], "Code": "AccessDenied"})
            else:
                self.w.s3_delete(o["Key"])
        return errors

    def head_object(self, bucket: str, key: str, version_id: str | None = None) -> dict[str, Any] | None:
        assert version_id in (None, "null"), f"this world has no versions: HeadObject {key} {version_id}"
        self._bucket(bucket, "HeadObject")
        self._up("HeadObject")
        self.w.log.append(f"S3 HeadObject {key}")
        e = self.w.index.get(key)
        if e is None:
            return None
        if key in self.w.rewrite_on_head:  # a client writes the key again between listing and delete
            e["LastModified"] = datetime.datetime.now(datetime.timezone.utc)
        # RGW gives Last-Modified in whole seconds.
        return {"LastModified": e["LastModified"].replace(microsecond=0), "ContentLength": e["Size"], "ETag": e["ETag"]}

    def get_object_tags(self, bucket: str, key: str) -> dict[str, str] | None:
        self._bucket(bucket, "GetObjectTagging")
        self._up("GetObjectTagging")
        self.w.log.append(f"S3 GetObjectTagging {key}")
        if key not in self.w.index:
            return None
        tags = dict(self.w.tags.get(key, {}))
        if key in self.w.retag_on_tagging:  # a client re-tags the key after this read
            self.w.tags[key] = self.w.retag_on_tagging.pop(key)
        return tags

    def iter_uploads(self, bucket: str, prefix: str | None = None) -> Iterator[dict[str, Any]]:
        self._bucket(bucket, "ListMultipartUploads")
        yield from [dict(u) for u in self.w.uploads if prefix is None or u["Key"].startswith(prefix)]

    def abort_upload(self, bucket: str, key: str, upload_id: str) -> None:
        w = self.w
        w.log.append(f"S3 AbortMultipartUpload {key}")
        w.uploads = [u for u in w.uploads if u["UploadId"] != upload_id]
        parts = w.upload_parts.pop(upload_id, [])
        if parts:
            w.gc.append({"tag": f"tag-{upload_id}\u0000", "time": "", "objs": [
                {"pool": DATA, "oid": p, "key": "", "instance": ""} for p in parts]})
        w.pools[EXTRA].pop(f"{w.marker}__multipart_{key}.{upload_id}.meta", None)

    def delete_bucket(self, bucket: str) -> None:
        self._bucket(bucket, "DeleteBucket")
        w = self.w
        if w.index or w.uploads:
            raise CephError(f"DeleteBucket {bucket}", "BucketNotEmpty")
        w.log.append("S3 DeleteBucket")
        w.exists = False
        w.instance = None
        w.user_buckets = [b for b in w.user_buckets if b != bucket]
        for o in list(w.pools[INDEX]):
            if o.startswith(f".dir.{w.bucket_id}"):
                del w.pools[INDEX][o]

    def bucket_exists(self, bucket: str) -> bool:
        if self.w.s3_denied and bucket == self.w.bucket and self.w.exists:
            raise CephError(f"HeadBucket {bucket}", "403")  # a HEAD's 403 has no body to name a code
        return bucket == self.w.bucket and self.w.exists

    def check_list_access(self, bucket: str) -> None:
        self.w.s3_access_checks += 1
        self._bucket(bucket, "ListObjectsV2")
        self._fault("check_list_access")

    def _fault(self, method: str) -> None:
        faults = self.w.s3_faults.get(method)
        if faults:
            fault = faults.pop(0)
            if fault is not None:
                raise fault

    def get_lifecycle(self, bucket: str) -> list[dict[str, Any]]:
        self._bucket(bucket, "GetBucketLifecycleConfiguration")
        self._fault("get_lifecycle")
        return copy.deepcopy(self.w.lifecycle)

    def put_lifecycle(self, bucket: str, rules: list[dict[str, Any]]) -> None:
        self._bucket(bucket, "PutBucketLifecycleConfiguration")
        self._fault("put_lifecycle")
        self.w.log.append(f"S3 PutBucketLifecycleConfiguration {[r['ID'] for r in rules]}")
        kept = self.w.lifecycle_kept
        self.w.lifecycle = copy.deepcopy(kept(rules) if kept is not None else rules)
        self.w.lc_reset()

    def delete_lifecycle(self, bucket: str) -> None:
        self._bucket(bucket, "DeleteBucketLifecycle")
        self._fault("delete_lifecycle")
        self.w.log.append("S3 DeleteBucketLifecycle")
        self.w.lifecycle = []
        self.w.lc_reset()


class FakeBulk:
    """rgwkeeper.adapters.rados.BulkObjects over one pool of the world."""

    def __init__(self, world: World, pool: str) -> None:
        if pool not in world.pools and pool not in (world.fx["zone_get"]["gc_pool"].partition(":")[0], ROOT_POOL):
            raise UnexpectedCall(f"unexpected pool {pool}")
        self.w = world
        self.pool = pool
        self.windows: list[int] = []

    def _obj(self, oid: str, locator: str) -> dict[str, Any] | None:
        o = self.w.pools[self.pool].get(oid)
        if o is not None and o["locator"] != locator:
            return None  # librados looks an object up by its locator: the wrong one finds nothing
        return o

    async def read_pool(self, max_objects: int, *, read_prefix: str = "",
                        max_bytes: int = 1 << 20) -> dict[str, bytes] | None:
        if self.pool != ROOT_POOL:
            raise UnexpectedCall(f"read of every object of {self.pool}")
        if self.w.rgw_root is None:
            raise CephError(f"{ROOT_POOL} list", "EIO")
        self.w.log.append(f"librados read {ROOT_POOL}")
        if len(self.w.rgw_root) > max_objects:
            return None
        return {k: (v if k.split("/")[-1].startswith(read_prefix) else b"") for k, v in self.w.rgw_root.items()}

    async def gc_entries(self, namespace: str, count: int, *,
                         keep: Callable[[dict[str, Any]], bool] | None = None) -> GcRead:
        """The world's GC entries, as BulkObjects.gc_entries reads them from the GC objects: only
        from the zone's gc_pool, and refused as the adapter refuses them when RGW keeps more GC
        objects than ``shards`` (gc.<shards> exists)."""
        pool, _, ns = self.w.fx["zone_get"]["gc_pool"].partition(":")
        if (self.pool, namespace) != (pool, ns):
            raise UnexpectedCall(f"GC read from {self.pool}:{namespace}, not the zone's {pool}:{ns}")
        if self.w.gc_read_fault is not None:
            raise self.w.gc_read_fault
        if count < self.w.gc_objects:
            raise CephError(f"{self.pool}:{namespace}/gc.{count}", f"exists: RGW keeps more than {count} GC objects")
        self.w.log.append("librados gc list")
        return GcRead([copy.deepcopy(e) for e in self.w.gc if keep is None or keep(e)], len(self.w.gc))

    async def stat_many(self, objs: list[tuple[str, str]], *, window: int) -> list[int | None]:
        self.windows.append(window)
        return [None if (o := self._obj(oid, loc)) is None else o["size"] for oid, loc in objs]

    async def remove_many(self, objs: list[tuple[str, str]], *, window: int) -> list[int]:
        self.windows.append(window)
        out = []
        for oid, loc in objs:
            if self._obj(oid, loc) is None:
                out.append(-errno.ENOENT)
            else:
                del self.w.pools[self.pool][oid]
                self.w.log.append(f"rados rm {self.pool}/{oid}")
                out.append(0)
        return out

    async def xattrs_many(self, objs: list[tuple[str, str]], *, window: int) -> list[dict[str, bytes] | None]:
        """Every xattr of each head (the world's: manifest, tags, ACL), None where it is gone. Only
        heads are read: anything else is an unexpected call."""
        self.windows.append(window)
        out: list[dict[str, bytes] | None] = []
        for oid, loc in objs:
            o = self._obj(oid, loc)
            if o is None:
                out.append(None)
                continue
            if self.pool != DATA or oid not in self.w.head_xattrs:
                raise UnexpectedCall(f"getxattrs of {self.pool}/{oid}, not a head")
            x = dict(self.w.head_xattrs[oid])
            if not self.w.manifests_readable:
                x["user.rgw.manifest"] = manifest(explicit=True)
            out.append(x)
        return out

    async def refcount_put_many(self, objs: list[tuple[str, str, bytes]], *, window: int) -> list[int]:
        """cls_refcount put as the OSD runs it (implicit_ref set): a tag already put changes nothing;
        otherwise the tag's own reference goes if the object holds it, else the implicit one; the
        object goes with its last reference; a missing object is ENOENT. A tail starts with RGW's
        implicit reference and one per copy (``refs``). Only tails of this world have references."""
        self.windows.append(window)
        out = []
        for oid, loc, tag in objs:
            o = self._obj(oid, loc)
            if self.pool != DATA or (o is not None and not any(oid in ts for ts in self.w.tails.values())
                                     and "refset" not in o):
                raise UnexpectedCall(f"refcount put on {self.pool}/{oid}, not a tail")
            self.w.refcount_puts.append((oid, tag))
            if o is None:
                out.append(-errno.ENOENT)
                continue
            refs = o.setdefault("refset", {"": True, **{f"copy-{i}\0": True for i in range(o["refs"])}})
            retired = o.setdefault("retired", set())
            key = tag.decode(errors="replace")
            if key not in retired and (key in refs or "" in refs):
                retired.add(key)
                del refs[key if key in refs else ""]
                if refs:
                    o["kept"] = True  # still referenced by a copy: cls_refcount keeps it
                else:
                    del self.w.pools[self.pool][oid]
                    self.w.log.append(f"rados refcount put removed {self.pool}/{oid}")
            out.append(0)
        return out

    async def empty_index_many(self, objs: list[tuple[str, str]], *, window: int) -> list[int]:
        """Like librados, creates a shard that does not exist. The world does not hash keys to
        shards: its index entries go once every shard of the bucket has been emptied."""
        self.windows.append(window)
        if self.pool != INDEX:
            raise UnexpectedCall(f"bucket_init_index on {self.pool}")
        for oid, _ in objs:
            self.w.pools[INDEX][oid] = {"size": 0, "locator": "", "refs": 0, "emptied": True}
            self.w.log.append(f"rados empty index {oid}")
        shards = [o for o in self.w.pools[INDEX] if o.startswith(f".dir.{self.w.bucket_id}")]
        if all(self.w.pools[INDEX][o].get("emptied") for o in shards):
            self.w.index.clear()
        return [0] * len(objs)

    async def omap_page(self, oid: str, after: str, max_entries: int, *,
                        prefix: str = "") -> list[tuple[str | None, bytes]]:
        """An index shard's omap as python-rados reads it (adapters/rados.py, omap_page): the world's
        index entries (each in the shard its name hashes to here), an incomplete upload's meta entry
        and a special entry (key b"\x800_...", undecodable: None) in every shard; sorted bytewise; at
        most ``world.omap_read_cap`` entries a read, as an OSD caps them. Shards answer after a few
        turns of the event loop that differ by shard and position, so they finish out of order."""
        self.windows.append(max_entries)
        if self.pool != INDEX:
            raise UnexpectedCall(f"omap listing of {self.pool}/{oid}")
        shards = sorted(o for o in self.w.pools[INDEX] if o.startswith(f".dir.{self.w.bucket_id}"))
        if oid not in shards:
            raise CephError(f"{INDEX}/{oid} omap list", "No such file or directory", ret=-errno.ENOENT)
        for _ in range(zlib.crc32(f"{oid}/{after}".encode()) % 4):
            await asyncio.sleep(0)
        omap = self.w.index_omap(shards.index(oid), len(shards))
        rows = sorted((k, v) for k, v in omap.items() if k > after.encode() and k.startswith(prefix.encode()))
        page = rows[:min(max_entries, self.w.omap_read_cap)]
        # python-rados reads a key as a C string: a versioned instance's "<name>\0v<n>\0i<id>" shows as
        # "<name>"; a key that is not UTF-8 raises in its iterator, after moving past it.
        return [(None, b"") if k[:1] == b"\x80" else (k.split(b"\0")[0].decode(), v) for k, v in page]

    async def omap_keys_page(self, oid: str, after: str, max_entries: int, *, prefix: str = "") -> list[str | None]:
        """Keys only, as adapters/rados.py reads them: get_omap_keys from ``after`` (or from the
        prefix itself, exclusive, when ``after`` is empty), stopping at the first key past the prefix."""
        self.key_pages = getattr(self, "key_pages", 0) + 1
        if self.pool != INDEX:
            raise UnexpectedCall(f"omap key listing of {self.pool}/{oid}")
        shards = sorted(o for o in self.w.pools[INDEX] if o.startswith(f".dir.{self.w.bucket_id}"))
        if oid not in shards:
            raise CephError(f"{INDEX}/{oid} omap keys", "No such file or directory", ret=-errno.ENOENT)
        await asyncio.sleep(0)
        start = (after or prefix).encode()
        keys = sorted(k for k in self.w.index_omap(shards.index(oid), len(shards)) if k > start)
        out: list[str | None] = []
        for k in keys[:min(max_entries, self.w.omap_read_cap)]:
            if prefix and not k.startswith(prefix.encode()):
                break
            out.append(None if k[:1] == b"\x80" else k.split(b"\0")[0].decode())
        return out

    async def list_prefix(self, prefix: str, *, max_scanned: int) -> tuple[list[tuple[str, str]], bool]:
        objs = self.w.pools[self.pool]
        if len(objs) > max_scanned:
            return [], False
        return [(oid, o["locator"]) for oid, o in sorted(objs.items()) if oid.startswith(prefix)], True

    async def get_xattr(self, oid: str, name: str, *, locator: str = "") -> bytes | None:
        import base64

        o = self.w.pools[self.pool].get(oid)
        if o is None or name != "refcount" or not o.get("kept"):
            return None
        return base64.b64decode(self.w.fx["refcount_shared_tail"]["xattr_b64"])

    async def write_full(self, oid: str, data: bytes) -> None:
        self.w.log.append(f"rados write {self.pool}/{oid}")

    async def remove(self, oid: str) -> None:
        self.w.log.append(f"rados rm {self.pool}/{oid}")

    def close(self) -> None:
        pass


class FakeAdminApi:
    def __init__(self, world: World) -> None:
        self.w = world

    def _fault(self, what: str, fault: str | None = None) -> None:
        self.w.admin_api_reads.append(what)
        fault = fault or self.w.admin_api_fault
        if fault == "down":
            raise CephUnreachable(what, "cannot connect to http://rgw:8080")
        if fault == "busy":
            raise CephError(what, "SlowDown")
        if fault == "s3":
            raise NotFound(what, "NoSuchBucket")
        if fault == "nouser":
            raise NotFound(what, "NoSuchUser")
        if fault == "timeout":
            raise CephTimeout(what, "no answer within 10 s")

    async def set_bucket_quota(self, uid: str, bucket: str, *, max_objects: int, max_size_kb: int,
                               enabled: bool) -> None:
        assert uid == self.w.owner and bucket == self.w.bucket
        self.w.log.append(f"admin API quota max_objects={max_objects}")
        self.w.quota.update(enabled=enabled, max_objects=max_objects, max_size_kb=max_size_kb)

    async def bucket_stats(self, bucket: str) -> dict[str, Any]:
        self._fault(f"GET /admin/bucket?bucket={bucket}")
        if bucket != self.w.bucket or not self.w.exists:
            raise NotFound(f"GET /admin/bucket?bucket={bucket}", "NoSuchBucket")
        self.w.log.append("admin API bucket stats")
        return self.w.current_stats()

    async def user_buckets(self, uid: str) -> list[str]:
        if uid != self.w.owner:
            raise UnexpectedCall(f"unexpected admin API bucket list of {uid!r}")
        self._fault(f"GET /admin/bucket?uid={uid}")
        self.w.log.append("admin API bucket list --uid")
        if self.w.owner_gone():
            return list(self._missing_user("admin_user_buckets", f"GET /admin/bucket?uid={uid}") or [])
        return list(self.w.user_buckets)

    def _missing_user(self, name: str, what: str) -> Any:
        """What the release's admin API answers for a user that does not exist (captured)."""
        m = self.w.fx["user_missing"][name]
        if m["raised"] is None:
            return m["answer"]
        if m["raised"] in ("NoSuchBucket", "NoSuchUser", "NoSuchKey"):  # as AdminApi.request maps them
            raise NotFound(what, m["raised"])
        raise CephError(what, str(m["code"]))

    async def sync_user_stats(self, uid: str) -> dict[str, Any]:
        """The release's captured answer's stats (AdminApi.sync_user_stats keeps only those);
        the sync time moves as radosgw-admin reads it after the API's sync (captured)."""
        if uid != self.w.owner:
            raise UnexpectedCall(f"unexpected admin API user stats sync of {uid!r}")
        self._fault(f"GET /admin/user?uid={uid}&stats=True&sync=True", self.w.sync_api_fault)
        self.w.log.append("admin API user stats sync")
        if self.w.owner_gone():
            self._missing_user("admin_sync", f"GET /admin/user?uid={uid}&stats=True&sync=True")
            raise AssertionError("captured: RGW answers the sync of a missing user with an error")
        self.w.user_synced_at = sync_stamp()
        return {"stats": copy.deepcopy(self.w.fx["admin_user_stats_sync"]["stats"])}

    async def zone_layout(self) -> dict[str, Any]:
        """What AdminApi.zone_layout keeps of RGW's zone parameters: the same dump as `zone get`
        (captured: test_gc_reader checks the two captures agree)."""
        self._fault("GET /admin/config?type=zone")
        if self.w.zone_caps is False:
            raise CephError("GET /admin/config?type=zone", "AccessDenied: the admin user lacks the caps")
        self.w.log.append("admin API zone get")
        return zone_layout(copy.deepcopy(self.w.fx["zone_get"]))

    async def metadata_get(self, section: str, key: str) -> dict[str, Any]:
        self._fault(f"GET /admin/metadata/{section}")
        if self.w.metadata_caps is False:
            raise CephError(f"GET /admin/metadata/{section}", "AccessDenied: the admin user lacks the caps")
        if section == "bucket.instance" and key == f"{self.w.bucket}:{self.w.bucket_id}" and self.w.instance:
            self.w.log.append("admin API metadata get")
            return copy.deepcopy(self.w.instance)
        raise NotFound(f"GET /admin/metadata/{section}", "NoSuchKey")


def float32(x: float) -> float:
    """What the OSDMap stores a ratio as (0.97 reads back as 0.9700000286)."""
    return struct.unpack("f", struct.pack("f", x))[0]


class FakeRados:
    """The mon commands purge sends (strict). ``full`` makes the cluster the captured full one
    (OSD_FULL, POOL_FULL); ``osd set-full-ratio`` changes the OSDMap's ratio as float32, and a
    ratio above the fullest OSD's usage clears the full state, as on the real cluster."""

    def __init__(self, world: World, *, full: bool = False, clears_after: int | None = None,
                 client_name: str = "client.admin", lc_debug_interval: float | None = None) -> None:
        self.w = world
        #: Who radosgw-admin runs as, and rgw_lc_debug_interval in the mon config database for it.
        self.client_name, self.lc_debug_interval = client_name, lc_debug_interval
        #: The mon clears OSD_FULL / POOL_FULL some seconds after usage falls: after this many
        #: health reads (None: never, the cluster stays full).
        self.clears_after = clears_after
        fx = load_fixture("full.json") if full else load_fixture("observation.json")
        self.health, self.osd_dump, self.osd_df = (copy.deepcopy(fx[k]) for k in ("health", "osd_dump", "osd_df"))
        self.sent: list[dict[str, Any]] = []

    #: Calls still running in librados threads when drain() is asked (a test sets it).
    busy_at_drain = False

    async def drain(self, timeout_s: float) -> bool:
        self.sent.append({"prefix": "(drain)"})
        return not self.busy_at_drain

    def set_full_ratio(self, ratio: float) -> None:
        self.osd_dump["full_ratio"] = float32(ratio)
        fullest = max(n["kb_used"] / n["kb"] for n in self.osd_df["nodes"])
        if fullest < ratio:
            self.health["checks"] = {k: v for k, v in self.health["checks"].items() if k not in ("OSD_FULL", "POOL_FULL")}

    async def acommand(self, cmd: dict[str, Any], **kw: Any) -> Any:
        if cmd == {"prefix": "health", "detail": "detail"}:
            if self.clears_after is not None:
                self.clears_after -= 1
                if self.clears_after < 0:
                    self.health["checks"] = {k: v for k, v in self.health["checks"].items()
                                             if k not in ("OSD_FULL", "POOL_FULL")}
            return copy.deepcopy(self.health)
        if cmd == {"prefix": "osd dump"}:
            return copy.deepcopy(self.osd_dump)
        if cmd == {"prefix": "osd df"}:
            return copy.deepcopy(self.osd_df)
        if cmd.get("prefix") == "osd set-full-ratio" and set(cmd) == {"prefix", "ratio"}:
            self.sent.append(cmd)
            self.w.log.append(f"ceph osd set-full-ratio {cmd['ratio']}")
            self.set_full_ratio(float(cmd["ratio"]))
            return None
        if cmd == {"prefix": "versions"}:
            return self.w.versions
        if cmd.get("prefix") == "config get" and cmd.get("key") == "rgw_lc_debug_interval":
            # radosgw-admin sees the option for the cephx client it runs as, not client.admin's.
            if cmd.get("who") != self.client_name:
                raise UnexpectedCall(f"rgw_lc_debug_interval read for {cmd.get('who')}, not {self.client_name}")
            if self.lc_debug_interval is None:
                raise CephError("config get", "ENOENT", ret=-2)  # not set in the mon config database
            return self.lc_debug_interval
        if cmd.get("prefix") == "config get" and cmd.get("key") == "rgw_max_chunk_size":
            return 4194304  # the default: the mon answers an unset option with it (captured on 20.2.4)
        if cmd.get("prefix") == "config get" and cmd.get("key") in ROOT_CONFIG_DEFAULTS:
            if cmd.get("who") != "client.rgw":
                raise UnexpectedCall(f"{cmd.get('key')} read for {cmd.get('who')}, not client.rgw")
            if not kw.get("text"):  # the mon prints a string option bare, even with format=json (20.2.4)
                raise CephError("config get", "answer is not JSON: '.rgw.root'")
            if cmd["key"] in self.w.root_config:
                return self.w.root_config[cmd["key"]]
            if cmd["key"] == CONFIG_STORE_OPTION and self.w.release == "pacific":
                raise CephError("config get", f"unrecognized key '{cmd['key']}'", ret=-2)  # Reef and later (as 16.2.15)
            return ROOT_CONFIG_DEFAULTS[cmd["key"]]
        if cmd.get("prefix") == "config get" and cmd.get("key") == "rgw_gc_max_objs":
            if cmd.get("who") != "client.rgw":
                raise UnexpectedCall(f"rgw_gc_max_objs read for {cmd.get('who')}, not client.rgw")
            return self.w.gc_objects if self.w.gc_objects_in_config is None else self.w.gc_objects_in_config
        raise UnexpectedCall(f"unexpected mon command {cmd}")


def encode_dir_entry(name: str, size: int, mtime_s: float, etag: str, *, exists: bool = True,
                     category: int = 1, stored: int | None = None) -> bytes:
    """An index entry's value as cls_rgw encodes it (rgw_bucket_dir_entry v8, its meta v7), with the
    fields a listing does not need empty; ``stored``: meta.size when RGW compressed the object
    (``size`` is then its accounted_size). The captured entries of every release decode the same
    way (test_index_listing.py)."""
    def string(text: str) -> bytes:
        raw = text.encode()
        return struct.pack("<I", len(raw)) + raw

    def framed(version: int, compat: int, body: bytes) -> bytes:
        return struct.pack("<BBI", version, compat, len(body)) + body

    sec = int(mtime_s)
    meta = framed(7, 3, struct.pack("<BQII", category, size if stored is None else stored, sec, int(round((mtime_s - sec) * 1e9)) % 10**9)
                  + string(etag) + string("owner") + string("Owner") + string("") + struct.pack("<Q", size)
                  + string("") + string("") + b"\x00")
    body = (string(name) + struct.pack("<Q", 1) + bytes([exists]) + meta + struct.pack("<I", 0) + string("")
            + framed(1, 1, b"\x00\x01") + b"\x01" + string("tag") + string("") + struct.pack("<H", 0)
            + struct.pack("<Q", 0))
    return framed(8, 3, body)


def purge_io(world: World, tmp_path: Path) -> tuple[PurgeIO, dict[str, FakeBulk]]:
    access = ClusterAccess(conf=tmp_path / "ceph.conf", keyring=None, client_name="client.admin",
                           rgw_endpoint="http://rgw:8080", rgw_credentials_file=None, timeout_s=5)
    bulks: dict[str, FakeBulk] = {}

    def bulk(pool: str) -> FakeBulk:
        if pool not in bulks:
            bulks[pool] = FakeBulk(world, pool)
        return bulks[pool]

    io = PurgeIO(rgw=RadosgwAdmin(access, runner=FakeRunner(world)), s3=FakeS3(world),  # type: ignore[arg-type]
                 rados=FakeRados(world), bulk=bulk, admin_api=FakeAdminApi(world))  # type: ignore[arg-type]
    return io, bulks


class FakeOsd:
    """Objects with omap and cls_lock exclusive locks as one OSD keeps them, on an injected clock,
    for several RADOS clients (``FakeBoardStore``). As Ceph does: a lock held by another locker
    (client and cookie) is EBUSY even for the same client with another cookie; a lock lasts its
    duration on the OSD's clock and is gone after it; omap_cmp on a missing object fails
    (ENOENT) and a missing key compares as ""; removing an object drops its locks. Faults:
    ``unreachable`` (every call times out, nothing lands) and ``lose_next_write`` (the next
    write lands, its reply is lost)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.omaps: dict[str, dict[str, str]] = {}
        self.locks: dict[tuple[str, str], dict[tuple[str, str], tuple[str, float]]] = {}
        self.unreachable = False
        self.lose_next_write = False
        self.writes: list[tuple[str, str, str]] = []  # (client, obj, what) of every write that landed
        self.lock = threading.RLock()  # one op at a time, as the OSD applies a PG's ops in order

    def live(self, obj: str, name: str) -> dict[tuple[str, str], tuple[str, float]]:
        lockers = self.locks.setdefault((obj, name), {})
        for k, (_, expires) in list(lockers.items()):
            if expires <= self.clock():
                del lockers[k]
        return lockers

    def call(self, what: str) -> None:
        from rgwkeeper.errors import CephTimeout

        if self.unreachable:
            raise CephTimeout(what, "no answer within 10 s")

    def landed(self, client: str, obj: str, what: str) -> None:
        from rgwkeeper.errors import CephTimeout

        self.writes.append((client, obj, what))
        if self.lose_next_write:
            self.lose_next_write = False
            raise CephTimeout(f"{obj} {what}", "no answer within 10 s")


def _serialized(fn: Callable[..., Any]) -> Callable[..., Any]:
    def op(self: "FakeBoardStore", *args: Any, **kwargs: Any) -> Any:
        with self.osd.lock:
            return fn(self, *args, **kwargs)
    return op


class FakeBoardStore:
    """One RADOS client's view of a ``FakeOsd`` (what purge.board needs of ObjectStore). Calls
    come from several threads; each is applied whole, as an OSD applies one op."""

    def __init__(self, osd: FakeOsd, client: str) -> None:
        self.osd = osd
        self.client = client

    @_serialized
    def omap_get_all(self, obj: str) -> dict[str, str]:
        self.osd.call(f"{obj} omap get")
        return dict(self.osd.omaps.get(obj, {}))

    @_serialized
    def omap_get_keys(self, obj: str, keys: list[str]) -> dict[str, str]:
        self.osd.call(f"{obj} omap get keys")
        omap = self.osd.omaps.get(obj, {})
        return {k: omap[k] for k in keys if k in omap}

    @_serialized
    def omap_set(self, obj: str, values: dict[str, str]) -> None:
        self.osd.call(f"{obj} omap set")
        self.osd.omaps.setdefault(obj, {}).update(values)
        self.osd.landed(self.client, obj, "omap set")

    def omap_update_if(self, obj: str, key: str, expected: str, new: str | None) -> bool:
        if new is None:
            raise UnexpectedCall("the board never removes a key")
        return self.omap_set_if(obj, key, expected, {key: new})

    @_serialized
    def omap_set_if(self, obj: str, key: str, expected: str, values: dict[str, str]) -> bool:
        self.osd.call(f"{obj} omap update {key}")
        omap = self.osd.omaps.get(obj)
        if omap is None or omap.get(key, "") != expected:
            return False
        omap.update(values)
        self.osd.landed(self.client, obj, "set spec" if "spec" in values else f"set {sorted(values)[0]}")
        return True

    @_serialized
    def lock_exclusive(self, obj: str, name: str, cookie: str, desc: str, duration_s: int) -> None:
        from rgwkeeper.adapters.rados import LockBusy

        self.osd.call(f"{obj} lock {name}")
        lockers = self.osd.live(obj, name)
        me = (self.client, cookie)
        if any(k != me for k in lockers):
            raise LockBusy(f"{obj} lock {name}", "held by another client")
        lockers[me] = (desc, self.osd.clock() + duration_s)  # may-renew: the same locker renews
        self.osd.omaps.setdefault(obj, {})  # cls_lock creates the object
        self.osd.landed(self.client, obj, f"lock {name}")

    @_serialized
    def unlock(self, obj: str, name: str, cookie: str) -> None:
        if self.osd.unreachable:
            return  # ObjectStore.unlock swallows its errors: the lease then runs out
        self.osd.live(obj, name).pop((self.client, cookie), None)

    @_serialized
    def remove(self, obj: str) -> None:
        self.osd.call(f"{obj} remove")
        self.osd.omaps.pop(obj, None)
        for key in [k for k in self.osd.locks if k[0] == obj]:
            del self.osd.locks[key]

    def holders(self, obj: str, name: str) -> list[str]:
        return [c for (c, _k) in self.osd.live(obj, name)]


def rados_over(cluster: Any) -> Any:
    """A RadosAdapter whose librados cluster is ``cluster`` (a fake with open_ioctx, shutdown)."""
    from rgwkeeper.access import ClusterAccess
    from rgwkeeper.adapters.rados import RadosAdapter

    rados = RadosAdapter(ClusterAccess(conf=None, keyring=None, client_name="client.admin", rgw_endpoint=None,
                                       rgw_credentials_file=None, timeout_s=5))
    rados._cluster = cluster
    return rados


def rules_without_sizes(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rules as RGW 18.2.7 keeps them (measured live): ObjectSizeGreaterThan/LessThan
    dropped from the Filter, and a Filter left with nothing read back as ``Prefix: ""``, that is
    every object in the bucket."""
    out = []
    for r in copy.deepcopy(rules):
        conds = r.pop("Filter", {})
        conds = dict(conds.get("And", conds))
        for size in ("ObjectSizeGreaterThan", "ObjectSizeLessThan"):
            conds.pop(size, None)
        if conds:
            r["Filter"] = conds if len(conds) == 1 else {"And": conds}
        else:
            r["Prefix"] = ""
        out.append(r)
    return out
