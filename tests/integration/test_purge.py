"""`rgwkeeper purge` and `expire` against the real cluster, read back with independent tools
(the host's `rados`/`radosgw-admin` CLIs and boto3), never with rgwkeeper's own adapters.

No test asserts a speed: the machine is shared (bench/purge.py measures).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

DATA_POOL = "default.rgw.buckets.data"
EXTRA_POOL = "default.rgw.buckets.non-ec"


# -- helpers --------------------------------------------------------------------------------------

def cli_argv(cluster, tmp_path: Path, *args: str, config: str = "") -> list[str]:
    cfg = tmp_path / "rgwkeeper.toml"
    cfg.write_text(f'[purge]\nstate_dir = "{tmp_path / "state"}"\n{config}')
    return [sys.executable, "-m", "rgwkeeper", args[0], "--config", str(cfg), "--conf", str(cluster.conf),
            "--keyring", str(cluster.keyring), "--rgw-endpoint", cluster.rgw_endpoint,
            "--rgw-credentials", str(cluster.credentials_file), "--timeout", "30", *args[1:]]


def cli(cluster, tmp_path: Path, *args: str, config: str = "", timeout: float = 240,
        check: bool = True) -> subprocess.CompletedProcess:
    argv = cli_argv(cluster, tmp_path, *args, config=config)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                          env=cluster.env())
    if check and proc.returncode != 0:
        raise AssertionError(f"rgwkeeper {' '.join(args)}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
    return proc


def radosgw_admin(cluster, *args: str) -> Any:
    proc = subprocess.run(["radosgw-admin", "--conf", str(cluster.conf), "--keyring", str(cluster.keyring),
                           *args], capture_output=True, text=True, timeout=120, env=cluster.env())
    return proc


def bucket_stats(cluster, bucket: str) -> dict[str, Any] | None:
    proc = radosgw_admin(cluster, "bucket", "stats", "--bucket", bucket)
    if proc.returncode != 0:
        return None
    return json.loads(proc.stdout)


def owner_stats(cluster, uid: str) -> dict[str, Any]:
    """``radosgw-admin user stats`` without a sync: the stats and when they were last synced."""
    proc = radosgw_admin(cluster, "user", "stats", "--uid", uid)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def rados_ls(cluster, pool: str, prefix: str) -> list[str]:
    proc = subprocess.run(["rados", "--conf", str(cluster.conf), "--keyring", str(cluster.keyring), "-p", pool, "ls"],
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0 and "error opening pool" in proc.stderr and "(2)" in proc.stderr:
        return []  # RGW creates the non-EC pool with the first multipart upload
    proc.check_returncode()
    return sorted(line.split("\t")[0] for line in proc.stdout.splitlines() if line.startswith(prefix))


def fill(s3, bucket: str, n: int, size: int = 1024, prefix: str = "obj/") -> None:
    body = b"x" * size
    with ThreadPoolExecutor(32) as ex:
        list(ex.map(lambda i: s3.put_object(Bucket=bucket, Key=f"{prefix}{i:06d}", Body=body), range(n)))


def multipart(s3, bucket: str, key: str, parts: list[bytes], complete: bool = True) -> str:
    up = s3.create_multipart_upload(Bucket=bucket, Key=key)
    etags = [s3.upload_part(Bucket=bucket, Key=key, UploadId=up["UploadId"], PartNumber=i + 1, Body=p)["ETag"]
             for i, p in enumerate(parts)]
    if complete:
        s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=up["UploadId"], MultipartUpload={
            "Parts": [{"PartNumber": i + 1, "ETag": e} for i, e in enumerate(etags)]})
    return up["UploadId"]


def gc_process(cluster) -> None:
    assert radosgw_admin(cluster, "gc", "process", "--include-all").returncode == 0


def assert_nothing_left(cluster, marker: str) -> None:
    for pool in (DATA_POOL, EXTRA_POOL):
        assert rados_ls(cluster, pool, marker + "_") == [], pool


def drop_copies_then_nothing_left(cluster, s3, copies: str, marker: str) -> None:
    """Tails still referenced by copies may stay; once the copies are gone too, nothing may."""
    for o in s3.list_objects_v2(Bucket=copies).get("Contents", []):
        s3.delete_object(Bucket=copies, Key=o["Key"])
    s3.delete_bucket(Bucket=copies)
    gc_process(cluster)
    assert_nothing_left(cluster, marker)


def mixed_bucket_with_copies(cluster, s3, b: str, copies: str) -> tuple[bytes, str]:
    """Bucket ``b``: 21 head-only objects, one with tails, a multipart object and a pending upload;
    ``copies`` shares the tails of two of them. Returns (the big object's bytes, b's marker)."""
    s3.create_bucket(Bucket=b)
    s3.create_bucket(Bucket=copies)
    fill(s3, b, 20, size=4096)
    s3.put_object(Bucket=b, Key="_leading-underscore", Body=b"u" * 10)
    big = os.urandom(9 << 20)  # a head and tails
    s3.put_object(Bucket=b, Key="big", Body=big)
    multipart(s3, b, "multi", [b"a" * (5 << 20), b"b" * 1000])
    multipart(s3, b, "pending", [b"c" * 1000], complete=False)
    s3.copy_object(Bucket=copies, Key="big", CopySource={"Bucket": b, "Key": "big"})
    s3.copy_object(Bucket=copies, Key="multi", CopySource={"Bucket": b, "Key": "multi"})
    s3.copy_object(Bucket=copies, Key="small", CopySource={"Bucket": b, "Key": "obj/000001"})
    # And the other way: an object of ``b`` whose tails are another bucket's (named with its marker).
    s3.put_object(Bucket=copies, Key="origin", Body=big[::-1])
    s3.copy_object(Bucket=b, Key="imported", CopySource={"Bucket": copies, "Key": "origin"})
    return big, bucket_stats(cluster, b)["marker"]


def assert_only_shared_tails_left_and_copies_read_back(cluster, s3, b: str, copies: str, big: bytes,
                                                       marker: str) -> None:
    assert bucket_stats(cluster, b) is None
    assert b not in [x["Name"] for x in s3.list_buckets()["Buckets"]]
    left = rados_ls(cluster, DATA_POOL, marker + "_")
    assert left and all("__shadow_" in o or "__multipart_" in o for o in left)  # only tails copies share
    assert rados_ls(cluster, EXTRA_POOL, marker + "_") == []
    # The copies read back byte for byte (tracker 73348 destroyed them with --bypass-gc).
    assert s3.get_object(Bucket=copies, Key="big")["Body"].read() == big
    got = s3.get_object(Bucket=copies, Key="multi")["Body"].read()
    assert hashlib.md5(got).hexdigest() == hashlib.md5(b"a" * (5 << 20) + b"b" * 1000).hexdigest()
    assert s3.get_object(Bucket=copies, Key="small")["Body"].read() == b"x" * 4096
    assert s3.get_object(Bucket=copies, Key="origin")["Body"].read() == big[::-1]
    drop_copies_then_nothing_left(cluster, s3, copies, marker)


# -- whole-bucket purges ----------------------------------------------------------------------------

@pytest.mark.releases("tentacle", "reef", "pacific")
@pytest.mark.parametrize("listing, capped", [("s3", []), ("index", []), ("index", ["--max-rate", "1000"])],
                         ids=["s3", "index", "index-capped"])
def test_direct_purge_of_a_mixed_bucket_leaves_nothing_and_copies_read_back(ceph_cluster, s3, bucket_name, tmp_path,
                                                                             listing, capped):
    """Listed through S3, or by its index shards with librados (purge.direct_listing); a key whose
    first character is not ASCII sorts after cls_rgw's special index entries. Capped, the heads
    are stated and removed one at a time with synchronous calls (the key that starts with '_'
    through the located ioctx), the tails' references put as without a cap."""
    b, copies = bucket_name, bucket_name + "-copies"
    big, marker = mixed_bucket_with_copies(ceph_cluster, s3, b, copies)
    s3.put_object(Bucket=b, Key="\u00fcber/\u65e5\u672c", Body=b"n" * 100)
    owner = bucket_stats(ceph_cluster, b)["owner"]
    synced_before = owner_stats(ceph_cluster, owner)["last_stats_sync"]

    doc = json.loads(cli(ceph_cluster, tmp_path, "purge", b, "--yes", "--json", *capped,
                         config=f'direct_listing = "{listing}"\n').stdout)

    assert doc["ok"] and doc["method"] == "direct", doc["checks"]
    if capped:
        assert doc["pacing"]["cap_ops_in_flight"] == 1 and doc["pacing"]["cap_requests_timed"] >= 1, doc["pacing"]
    # The owner's stats were synced through the admin API, and RGW recorded that sync.
    check = {c["name"]: c for c in doc["checks"]}["owner stats synced"]
    assert check["status"] == "ok" and check["detail"].endswith("synced through the admin API after the bucket was deleted"), check
    assert owner_stats(ceph_cluster, owner)["last_stats_sync"] > synced_before
    c = doc["counters"]
    # Every object went with librados: 22 head-only, and big, multi and imported by their tails
    # (2 + 3 + 2), each tail losing this bucket's reference as RGW's GC drops it.
    assert (c["direct_removed"], c.get("via_s3", 0), c["uploads_aborted"]) == (25, 0, 1), c
    assert (c["direct_with_tails"], c["tails_released"]) == (3, 7), c
    assert "sweeps" not in c, c  # the listing found every object: the index's own count agreed
    assert_only_shared_tails_left_and_copies_read_back(ceph_cluster, s3, b, copies, big, marker)


@pytest.mark.releases("tentacle", "reef", "pacific")
def test_a_direct_purge_killed_between_the_tails_and_their_heads_resumes_and_copies_read_back(
        ceph_cluster, s3, bucket_name, tmp_path):
    """SIGKILL once the tails lost this bucket's references and before their heads went: the
    rerun reads the same manifests, puts the same tags again (cls_refcount retires a tag, so
    nothing changes) and finishes; the copies in the other bucket still read back."""
    b, copies = bucket_name, bucket_name + "-copies"
    big, marker = mixed_bucket_with_copies(ceph_cluster, s3, b, copies)
    argv = cli_argv(ceph_cluster, tmp_path, "purge", b, "--yes")
    proc = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=240,
                          env={**ceph_cluster.env(), "RGWKEEPER_INJECT_CRASH_AT": "tails-released"})
    assert proc.returncode == -signal.SIGKILL, f"exit {proc.returncode}: {proc.stderr[-2000:]}"
    assert rados_ls(ceph_cluster, DATA_POOL, f"{marker}_big")  # the head outlived its tails' puts

    doc = json.loads(cli(ceph_cluster, tmp_path, "purge", b, "--yes", "--json").stdout)

    assert doc["ok"] and doc["method"] == "direct" and doc["resumed"] == 1, doc["checks"]
    assert_only_shared_tails_left_and_copies_read_back(ceph_cluster, s3, b, copies, big, marker)


@pytest.mark.releases("tentacle", "reef", "pacific")
def test_the_manifest_decoder_names_every_rados_object_radoslist_names(ceph_cluster, cluster_access, s3, bucket_name):
    """The direct purge releases tails by the head's manifest: for each object of
    tests/fixtures/capture_manifest.py (tails, multipart with striped parts, a '_' key, copies
    within and across buckets), the head and tails rgwkeeper.adapters.manifest names, read
    through the purge's own librados reader, are exactly what `bucket radoslist` (RGW's walk) names."""
    import asyncio

    from rgwkeeper.adapters.manifest import decode_manifest, head_object, tail_objects
    from rgwkeeper.adapters.rados import BulkObjects, RadosAdapter
    from rgwkeeper.purge.layout import MANIFEST_XATTR, head_oid
    from tests.fixtures import capture_manifest as cm

    names = {cm.BUCKET: bucket_name, cm.COPIES: bucket_name + "-copies"}
    cm.build(s3, names[cm.BUCKET], names[cm.COPIES])
    with RadosAdapter(cluster_access) as rados:
        data = BulkObjects(rados, DATA_POOL)
        try:
            for template, bucket in names.items():
                marker = bucket_stats(ceph_cluster, bucket)["marker"]
                keys = cm.keys_of(template)
                found = asyncio.run(data.xattrs_many([head_oid(marker, k) for k in keys], window=4))
                named: list[str] = []
                for key, xattrs in zip(keys, found):
                    assert xattrs is not None and MANIFEST_XATTR in xattrs, key
                    m = decode_manifest(xattrs[MANIFEST_XATTR])
                    assert (head_object(m).oid, head_object(m).locator) == head_oid(marker, key), key
                    named += [head_object(m).oid, *(t.oid for t in tail_objects(m))]
                proc = radosgw_admin(ceph_cluster, "bucket", "radoslist", "--bucket", bucket)
                assert proc.returncode == 0, proc.stderr[-2000:]
                # As sets: a copy within the bucket shares its source's tails, and Pacific's radoslist
                # prints the first object of a part uploaded twice once more (16.2.15).
                assert set(named) == set(proc.stdout.split()), bucket
        finally:
            data.close()


@pytest.mark.releases("tentacle", "reef", "pacific")
def test_the_gc_reader_lists_what_gc_list_lists(ceph_cluster, cluster_access, s3, bucket_name):
    """A purge reads GC with librados (BulkObjects.gc_entries), not `radosgw-admin gc list
    --include-all`: with a deleted tailed object, a deleted multipart object and an aborted upload
    queued (not due for rgw_gc_obj_min_wait), both list the bucket's entries alike, and every
    entry; told of fewer GC objects than RGW keeps, the reader refuses."""
    import asyncio

    from rgwkeeper.adapters.rados import BulkObjects, RadosAdapter
    from rgwkeeper.errors import CephError
    from rgwkeeper.purge.layout import holds_objects_of

    b = bucket_name
    s3.create_bucket(Bucket=b)
    s3.put_object(Bucket=b, Key="tailed", Body=os.urandom(9 << 20))
    for key, complete in (("multi", True), ("aborted", False)):
        upload = s3.create_multipart_upload(Bucket=b, Key=key)["UploadId"]
        etag = s3.upload_part(Bucket=b, Key=key, UploadId=upload, PartNumber=1, Body=os.urandom(6 << 20))["ETag"]
        if complete:
            s3.complete_multipart_upload(Bucket=b, Key=key, UploadId=upload,
                                         MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]})
        else:
            s3.abort_multipart_upload(Bucket=b, Key=key, UploadId=upload)
    s3.delete_objects(Bucket=b, Delete={"Objects": [{"Key": "tailed"}, {"Key": "multi"}]})
    marker = bucket_stats(ceph_cluster, b)["marker"]
    shards = int(ceph_cluster.ceph("config", "get", "client.rgw", "rgw_gc_max_objs"))

    def keyed(entries: list[dict[str, Any]], *, ours: bool) -> list[tuple[Any, ...]]:
        return sorted((e["tag"], tuple(sorted(o["oid"] for o in e["objs"]))) for e in entries
                      if not ours or any(o["oid"].startswith(marker + "_") for o in e["objs"]))

    with RadosAdapter(cluster_access) as rados:
        log = BulkObjects(rados, "default.rgw.log")
        try:
            got = asyncio.run(log.gc_entries("gc", shards))
            read = got.entries
            ours_only = asyncio.run(log.gc_entries("gc", shards, keep=holds_objects_of(marker)))
            assert keyed(ours_only.entries, ours=False) == keyed(read, ours=True)
            proc = radosgw_admin(ceph_cluster, "gc", "list", "--include-all")
            assert proc.returncode == 0, proc.stderr[-2000:]
            listed = json.loads(proc.stdout)
            assert len(keyed(read, ours=True)) == 3 and keyed(read, ours=True) == keyed(listed, ours=True)
            # Every entry gc list printed was read first (RGW's GC may take a due one of an
            # earlier test between the two reads, never add one: nothing is deleted meanwhile).
            assert set(keyed(listed, ours=False)) <= set(keyed(read, ours=False))
            # The filtered read counted every entry, not only the bucket's (none was added since).
            assert len(listed) <= ours_only.total <= got.total and got.total == len(read)
            with pytest.raises(CephError, match=f"gc.{shards - 1}: exists"):
                asyncio.run(log.gc_entries("gc", shards - 1))
        finally:
            log.close()


@pytest.mark.releases("tentacle", "reef", "pacific")
def test_the_plan_reads_zone_and_zonegroup_as_radosgw_admin_prints_them(ceph_cluster, cluster_access):
    """The plan reads the zone through the admin API (GET /admin/config?type=zone) and the
    zonegroup's zones from .rgw.root with librados, not with `zone get` and `zonegroup get`
    processes: both give what those print, on every release."""
    import asyncio

    from rgwkeeper.adapters.adminapi import AdminApi
    from rgwkeeper.adapters.radosgw_admin import zone_layout
    from rgwkeeper.adapters.rados import BulkObjects, RadosAdapter
    from rgwkeeper.adapters.siteconfig import MAX_ROOT_OBJECTS, ROOT_POOL, the_single_zone

    api = AdminApi(cluster_access.rgw_endpoint, cluster_access.rgw_credentials(), timeout_s=20)

    zone = radosgw_admin(ceph_cluster, "zone", "get")
    zonegroup = radosgw_admin(ceph_cluster, "zonegroup", "get")
    assert zone.returncode == 0 and zonegroup.returncode == 0, (zone.stderr[-1000:], zonegroup.stderr[-1000:])
    assert asyncio.run(api.zone_layout()) == zone_layout(json.loads(zone.stdout))
    with RadosAdapter(cluster_access) as rados:
        root = BulkObjects(rados, ROOT_POOL)
        try:
            objects = asyncio.run(root.read_pool(MAX_ROOT_OBJECTS))
        finally:
            root.close()
    assert objects and [the_single_zone(objects)] == [z["id"] for z in json.loads(zonegroup.stdout)["zones"]]
    assert the_single_zone(objects) == json.loads(zone.stdout)["id"]


@pytest.mark.releases("tentacle", "reef", "pacific")
def test_a_direct_purges_plan_starts_no_radosgw_admin_process(ceph_cluster, cluster_access, s3, bucket_name):
    """On the harness's realm-less single zone, with the documented caps, the plan reads every
    thing it needs without a radosgw-admin process: this release's mon answers the root pool and
    config store options as their defaults (rgw_config_store unknown on Pacific), so .rgw.root
    is read; and its profile is what radosgw-admin says."""
    import asyncio

    from rgwkeeper.adapters.adminapi import AdminApi
    from rgwkeeper.adapters.cephcli import subprocess_runner
    from rgwkeeper.adapters.rados import BulkObjects, RadosAdapter
    from rgwkeeper.adapters.radosgw_admin import RadosgwAdmin
    from rgwkeeper.purge.profile import gather_profile

    s3.create_bucket(Bucket=bucket_name)
    fill(s3, bucket_name, 3, size=512)
    started: list[str] = []

    async def runner(argv, timeout):
        started.append(" ".join(argv[5:]))
        return await subprocess_runner(argv, timeout)

    api = AdminApi(cluster_access.rgw_endpoint, cluster_access.rgw_credentials(), timeout_s=20)
    with RadosAdapter(cluster_access) as rados:
        pools: dict[str, BulkObjects] = {}

        def bulk(pool: str) -> BulkObjects:
            return pools.setdefault(pool, BulkObjects(rados, pool))

        try:
            prof = asyncio.run(gather_profile(bucket_name, rgw=RadosgwAdmin(cluster_access, runner=runner),
                                              rados=rados, admin_api=api, bulk=bulk))
        finally:
            for b in pools.values():
                b.close()
    assert started == [], started
    zone = json.loads(radosgw_admin(ceph_cluster, "zone", "get").stdout)
    assert prof.zones == 1 and prof.gc_pool == zone["gc_pool"] and prof.gc_objects == 32
    assert prof.data_pool == DATA_POOL and prof.num_objects == 3


@pytest.mark.releases("tentacle", "reef", "pacific")
def test_impact_normal_purges_a_mixed_bucket_with_bucket_rm_and_copies_read_back(ceph_cluster, s3, bucket_name,
                                                                                 tmp_path):
    """`--impact normal` is the stock `bucket rm --purge-objects` inside rgwkeeper's plan, GC run
    and read-back: the same bucket as above, nothing of it left, copies elsewhere intact."""
    b, copies = bucket_name, bucket_name + "-copies"
    big, marker = mixed_bucket_with_copies(ceph_cluster, s3, b, copies)

    doc = json.loads(cli(ceph_cluster, tmp_path, "purge", b, "--impact", "normal", "--yes", "--json").stdout)

    assert doc["ok"] and doc["method"] == "admin-purge", doc["checks"]
    assert doc["pacing"]["max_objects_per_second"] is None
    assert_only_shared_tails_left_and_copies_read_back(ceph_cluster, s3, b, copies, big, marker)


@pytest.mark.releases("tentacle", "reef", "pacific")
def test_a_direct_purge_that_queued_nothing_leaves_other_buckets_gc_entries_until_due(ceph_cluster, s3, bucket_name,
                                                                                     tmp_path):
    """`gc process --include-all` would free another bucket's tails before rgw_gc_obj_min_wait, which
    keeps them for readers still streaming the deleted object: a purge that sent nothing to GC
    does not run it."""
    b, other = bucket_name, bucket_name + "-other"
    s3.create_bucket(Bucket=b)
    s3.create_bucket(Bucket=other)
    fill(s3, b, 20, size=4096)
    s3.put_object(Bucket=other, Key="big", Body=os.urandom(9 << 20))
    other_marker = bucket_stats(ceph_cluster, other)["marker"]
    s3.delete_object(Bucket=other, Key="big")  # its tails wait in GC

    def others_entries() -> list[Any]:
        proc = radosgw_admin(ceph_cluster, "gc", "list", "--include-all")
        assert proc.returncode == 0, proc.stderr[-2000:]
        return [e for e in json.loads(proc.stdout)
                if any(o["oid"].startswith(other_marker + "_") for o in e.get("objs", []))]

    waiting = others_entries()
    assert waiting
    doc = json.loads(cli(ceph_cluster, tmp_path, "purge", b, "--yes", "--json").stdout)

    assert doc["ok"] and doc["method"] == "direct", doc["checks"]
    assert doc["counters"]["gc_not_run"] == 1 and doc["counters"].get("via_s3", 0) == 0  # zero counters are left out
    assert bucket_stats(ceph_cluster, b) is None
    assert others_entries() == waiting
    assert rados_ls(ceph_cluster, DATA_POOL, other_marker + "_")  # the tails are still there
    s3.delete_bucket(Bucket=other)
    gc_process(ceph_cluster)
    assert_nothing_left(ceph_cluster, other_marker)


@pytest.mark.releases("tentacle", "reef", "pacific")
def test_versioned_bucket_with_delete_markers_and_uploads_is_purged_through_rgw(ceph_cluster, s3, bucket_name,
                                                                              tmp_path):
    b, copies = bucket_name, bucket_name + "-copies"
    s3.create_bucket(Bucket=b)
    s3.create_bucket(Bucket=copies)
    s3.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Enabled"})
    for i in range(3):
        s3.put_object(Bucket=b, Key="doc", Body=f"version {i}".encode())
    v1 = os.urandom(6 << 20)
    s3.put_object(Bucket=b, Key="big", Body=v1)
    s3.put_object(Bucket=b, Key="big", Body=b"smaller second version")
    s3.put_object(Bucket=b, Key="gone", Body=b"x")
    s3.delete_object(Bucket=b, Key="gone")  # a delete marker
    multipart(s3, b, "multi", [b"m" * (5 << 20), b"n" * 10])
    multipart(s3, b, "pending", [b"p" * 100], complete=False)
    first_big = next(v for v in s3.list_object_versions(Bucket=b, Prefix="big")["Versions"] if not v["IsLatest"])
    s3.copy_object(Bucket=copies, Key="old-big", CopySource={"Bucket": b, "Key": "big",
                                                             "VersionId": first_big["VersionId"]})
    marker = bucket_stats(ceph_cluster, b)["marker"]

    doc = json.loads(cli(ceph_cluster, tmp_path, "purge", b, "--yes", "--json").stdout)

    assert doc["ok"] and doc["method"] == "s3", doc["checks"]
    assert doc["counters"]["delete_markers_deleted"] == 1 and doc["counters"]["uploads_aborted"] == 1
    assert bucket_stats(ceph_cluster, b) is None
    assert s3.get_object(Bucket=copies, Key="old-big")["Body"].read() == v1
    assert rados_ls(ceph_cluster, EXTRA_POOL, marker + "_") == []
    drop_copies_then_nothing_left(ceph_cluster, s3, copies, marker)


def test_dry_run_changes_nothing(ceph_cluster, s3, bucket_name, tmp_path):
    b = bucket_name
    s3.create_bucket(Bucket=b)
    fill(s3, b, 10)
    multipart(s3, b, "pending", [b"c" * 100], complete=False)
    rule = {"ID": "theirs", "Status": "Enabled", "Filter": {"Prefix": "tmp/"}, "Expiration": {"Days": 30}}
    s3.put_bucket_lifecycle_configuration(Bucket=b, LifecycleConfiguration={"Rules": [rule]})
    before = bucket_stats(ceph_cluster, b)
    marker = before["marker"]
    objects_before = rados_ls(ceph_cluster, DATA_POOL, marker + "_")

    for args in (["--dry-run"], ["--dry-run", "--json"], ["--dry-run", "--prefix", "obj/", "--older-than", "1s"]):
        out = cli(ceph_cluster, tmp_path, "purge", b, *args).stdout
        assert ("metadata rm bucket:" in out or "DeleteObjects" in out), out

    after = bucket_stats(ceph_cluster, b)
    for volatile in ("mtime",):
        before.pop(volatile, None)
        after.pop(volatile, None)
    assert after == before
    assert rados_ls(ceph_cluster, DATA_POOL, marker + "_") == objects_before
    assert s3.get_bucket_lifecycle_configuration(Bucket=b)["Rules"][0]["ID"] == "theirs"
    assert len(s3.list_multipart_uploads(Bucket=b).get("Uploads", [])) == 1
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize("method, config", [
    ("s3", "s3_batches_in_flight = 1\nlist_page_size = 100\ncheckpoint_interval = 0\n"),
    ("direct", "rados_ops_in_flight = 1\nlist_page_size = 100\ncheckpoint_interval = 0\n"),
], ids=["s3", "direct"])
@pytest.mark.releases("tentacle", "reef", "pacific")
def test_interrupted_purge_resumes_to_completion(ceph_cluster, s3, bucket_name, tmp_path, method, config):
    killed_then_resumed(ceph_cluster, s3, bucket_name, tmp_path, method, config)


ITEMS_POOL = "rgwkeeper-test"  # the daemon tests' pool (daemon.pool): the work items live there


def test_a_purge_run_as_work_items_survives_a_killed_worker_and_is_finished_by_a_join(ceph_cluster, s3,
                                                                                     bucket_name, tmp_path):
    """Index-listed, the delete runs as work items in RADOS (one per index shard, and key ranges
    of 100 keys that a shard's owner cuts off a shard of about 200: purge.range_entries). The
    purge kills itself (SIGKILL) after twelve records (cuts, then pages) with its leases held;
    `purge --join ID` from another process takes every other item, waits out the dead worker's
    leases, takes its items over from their last recorded page or cut, and finishes; `--status`
    shows it all from a third; the purge, run again, finds the items done, drops the bucket with
    counts that agree, and removes the items. Tentacle only, for the suite's time: it passed on
    Reef and Pacific too (2026-11-27, before key ranges), and the mixed-bucket test above runs the
    items (pool, leases, records, removal) on every release."""
    b, copies = bucket_name, bucket_name + "-copies"
    s3.create_bucket(Bucket=b)
    s3.create_bucket(Bucket=copies)
    resharded = radosgw_admin(ceph_cluster, "bucket", "reshard", "--bucket", b, "--num-shards", "3",
                              "--yes-i-really-mean-it")
    assert resharded.returncode == 0, resharded.stderr
    fill(s3, b, 600, size=512)
    s3.copy_object(Bucket=copies, Key="c", CopySource={"Bucket": b, "Key": "obj/000007"})
    stats = bucket_stats(ceph_cluster, b)
    marker = stats["marker"]
    assert stats["num_shards"] == 3  # 600 objects: at least twice range_entries a shard, so shards are cut
    config = ('direct_listing = "index"\nlist_page_size = 10\nitem_lease_s = 5\nrados_ops_in_flight = 1\n'
              f'range_entries = 100\n[daemon]\npool = "{ITEMS_POOL}"\n')
    argv = cli_argv(ceph_cluster, tmp_path, "purge", b, "--workers", "2", "--yes", "--json", config=config)
    # Records count cuts too (at most 3 a shard here): after 12, pages of objects have been recorded.
    env = {**ceph_cluster.env(), "RGWKEEPER_INJECT_CRASH_AFTER_RECORDS": "12"}
    proc = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, env=env, timeout=240)
    assert proc.returncode == -signal.SIGKILL, f"exit {proc.returncode}: {proc.stderr[-2000:]}"
    (cp_file,) = (tmp_path / "state").glob(f"{b}.*.json")
    job = json.loads(cp_file.read_text())["plan"]["plan_id"]
    assert f"--join {job}" in proc.stderr  # the purge says how to join it

    before = json.loads(cli(ceph_cluster, tmp_path, "purge", "--status", job, "--json", config=config).stdout)
    taken = [i for i in before["items"] if i["state"] != "done" and i["takes"]]
    assert taken and 0 < before["counters"]["objects_deleted"] < 600, before["by_state"]
    differs = cli(ceph_cluster, tmp_path, "purge", b, "--prefix", "obj/", "--join", job, "--yes", config=config,
                  check=False)
    assert differs.returncode == 2 and "prefix: 'obj/' here, None in the purge" in differs.stderr
    unknown = cli(ceph_cluster, tmp_path, "purge", b, "--join", "0123456789ab", "--yes", config=config, check=False)
    assert unknown.returncode == 2 and "no purge '0123456789ab'" in unknown.stderr, unknown.stderr[-500:]

    joined = json.loads(cli(ceph_cluster, tmp_path, "purge", b, "--join", job, "--workers", "2", "--yes", "--json",
                            config=config).stdout)
    assert joined["items_done"] == joined["items"] >= len(before["items"]), joined  # ranges may be cut meanwhile
    after = json.loads(cli(ceph_cluster, tmp_path, "purge", "--status", job, "--json", config=config).stdout)
    assert after["by_state"]["done"] == len(after["items"])
    by_n = {i["item"]: i for i in after["items"]}
    assert all(by_n[i["item"]]["takes"] == 2 for i in taken)  # taken over, not started again
    ranges = [i for i in after["items"] if i["range_of"] is not None]
    assert ranges and all(by_n[r["range_of"]]["range_of"] is None for r in ranges), after["items"]
    assert all(r["objects_deleted"] == 100 for r in ranges), ranges  # a range is 100 keys, each counted once
    assert after["counters"]["objects_deleted"] == 600  # each page counted once, with its cursor

    doc = json.loads(cli(ceph_cluster, tmp_path, "purge", b, "--yes", "--json", config=config).stdout)
    assert doc["ok"] and doc["resumed"] == 1, doc["checks"]
    assert doc["counters"]["objects_deleted"] == 600 and "sweeps" not in doc["counters"], doc["counters"]
    assert bucket_stats(ceph_cluster, b) is None
    assert_nothing_left(ceph_cluster, marker)
    assert s3.get_object(Bucket=copies, Key="c")["Body"].read() == b"x" * 512  # outside the bucket: untouched
    gone = cli(ceph_cluster, tmp_path, "purge", "--status", job, config=config, check=False)
    assert gone.returncode == 2 and f"no purge {job!r}" in gone.stderr  # a verified purge removes its items


def test_a_prefix_purge_through_s3_runs_as_work_items_and_leaves_the_rest_of_the_bucket(ceph_cluster, s3,
                                                                                        bucket_name, tmp_path):
    """A prefix purge cannot use the direct method; with the s3 method and listing by index shard
    it still runs as work items (each shard listed from the prefix, S3 DeleteObjects): exact
    counts, every item done and then removed, and the keys outside the prefix all read back."""
    b = bucket_name
    s3.create_bucket(Bucket=b)
    fill(s3, b, 300, size=256, prefix="obj/")
    fill(s3, b, 40, size=256, prefix="keep/")
    config = f'direct_listing = "index"\nlist_page_size = 20\n[daemon]\npool = "{ITEMS_POOL}"\n'
    doc = json.loads(cli(ceph_cluster, tmp_path, "purge", b, "--prefix", "obj/", "--method", "s3", "--workers", "3",
                         "--yes", "--json", config=config).stdout)
    assert doc["ok"], doc["checks"]
    assert doc["counters"]["objects_deleted"] == 300, doc["counters"]
    left = s3.list_objects_v2(Bucket=b)
    assert sorted(o["Key"] for o in left.get("Contents", [])) == [f"keep/{i:06d}" for i in range(40)]
    assert s3.get_object(Bucket=b, Key="keep/000039")["Body"].read() == b"x" * 256
    job = doc["plan_id"]
    gone = cli(ceph_cluster, tmp_path, "purge", "--status", job, config=config, check=False)
    assert gone.returncode == 2 and f"no purge {job!r}" in gone.stderr  # verified: its items removed


def another_users_bucket(cluster, bucket: str, n: int = 50) -> str:
    """A user of its own (not rgwkeeper's RGW user) and a bucket of ``n`` objects it owns; its uid."""
    import boto3
    from botocore.config import Config

    uid = f"{bucket}-owner"
    made = radosgw_admin(cluster, "user", "create", "--uid", uid, "--display-name", uid)
    assert made.returncode == 0, made.stderr
    key = json.loads(made.stdout)["keys"][0]
    owner_s3 = boto3.client("s3", endpoint_url=cluster.rgw_endpoint, aws_access_key_id=key["access_key"],
                            aws_secret_access_key=key["secret_key"], region_name="default",
                            config=Config(s3={"addressing_style": "path"}))
    owner_s3.create_bucket(Bucket=bucket)
    fill(owner_s3, bucket, n, size=256)
    return uid


@pytest.mark.releases("tentacle", "reef", "pacific")
def test_another_users_bucket_that_s3_may_not_reach_is_refused_with_nothing_changed(ceph_cluster, bucket_name,
                                                                                   tmp_path):
    """rgwkeeper's RGW user has admin caps, not the admin flag: S3 answers it 403 for another
    user's bucket. The purge said so only at its first S3 call, the bucket fenced by then; now
    the plan is refused in one line; a user with the admin flag purges it (direct)."""
    b = bucket_name
    uid = another_users_bucket(ceph_cluster, b)
    try:
        quota_before = bucket_stats(ceph_cluster, b)["bucket_quota"]
        marker = bucket_stats(ceph_cluster, b)["marker"]
        for extra in (["--dry-run"], ["--yes"]):
            proc = cli(ceph_cluster, tmp_path, "purge", b, *extra, check=False)
            assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
            line = proc.stderr.strip().splitlines()[-1]
            assert f"may not reach bucket {b!r} through S3" in line and "--method admin-purge" in line, line
            assert line.endswith("nothing was changed")
        # expire reads and writes the bucket's lifecycle rules through S3: the same refusal.
        proc = cli(ceph_cluster, tmp_path, "expire", b, "--days", "1", "--yes", check=False)
        assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
        line = proc.stderr.strip().splitlines()[-1]
        assert f"may not reach bucket {b!r} through S3" in line and line.endswith("nothing was changed"), line
        stats = bucket_stats(ceph_cluster, b)
        assert stats["bucket_quota"] == quota_before  # not fenced
        assert stats["usage"]["rgw.main"]["num_objects"] == 50
        assert not list((tmp_path / "state").glob(f"{b}.*.json"))

        # The same purge by a user that has the admin flag as well (docs/cluster-access.md).
        keeper = f"{b}-keeper"
        made = radosgw_admin(ceph_cluster, "user", "create", "--uid", keeper, "--display-name", keeper, "--admin",
                             "--caps", "buckets=*;users=read;usage=read;metadata=read;zone=read")
        assert made.returncode == 0, made.stderr
        key = json.loads(made.stdout)["keys"][0]
        creds = tmp_path / "keeper.credentials"
        creds.write_text(f'access_key = "{key["access_key"]}"\nsecret_key = "{key["secret_key"]}"\n')
        creds.chmod(0o600)
        argv = [a if a != str(ceph_cluster.credentials_file) else str(creds)
                for a in cli_argv(ceph_cluster, tmp_path, "purge", b, "--yes", "--json")]
        assert str(creds) in argv
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL,
                              env=ceph_cluster.env())
        assert proc.returncode == 0, proc.stderr[-3000:]
        doc = json.loads(proc.stdout)
        assert doc["ok"] and doc["method"] == "direct", doc["checks"]
        assert bucket_stats(ceph_cluster, b) is None
        assert_nothing_left(ceph_cluster, marker)
    finally:
        radosgw_admin(ceph_cluster, "user", "rm", "--uid", uid, "--purge-data")
        radosgw_admin(ceph_cluster, "user", "rm", "--uid", f"{b}-keeper")


def users_uid_objects(cluster, uid: str) -> list[str]:
    """The objects of ``uid`` in the meta pool's users.uid namespace (e.g. ``uid.buckets``, where
    the user's stats are kept)."""
    proc = subprocess.run(["rados", "--conf", str(cluster.conf), "--keyring", str(cluster.keyring), "-p",
                           "default.rgw.meta", "-N", "users.uid", "ls"], capture_output=True, text=True, timeout=120,
                          env=cluster.env())
    assert proc.returncode == 0, proc.stderr
    return sorted(o for o in proc.stdout.split() if o.startswith(uid))


@pytest.mark.releases("tentacle", "reef", "pacific")
@pytest.mark.parametrize("killed_at", ["owner-sync", "before-step:verify"])
def test_a_purge_resumed_after_its_owner_was_removed_finishes_with_a_warning(ceph_cluster, bucket_name, tmp_path,
                                                                             killed_at):
    """A purge killed (SIGKILL) after it removed the bucket, either as the owner's stats sync
    begins or before its read-back; its owner then removed (a user who owns a bucket cannot
    be); then the same command again: it finishes, and the read-back warns that the owner does
    not exist and there are no stats to sync. It failed before, after the bucket was gone, and
    so did every resume. Nothing is written for the missing user (Pacific's `user stats
    --sync-stats` would record stats for it). The bucket is another user's, so the purge is
    `admin-purge`, which needs no S3 ("Buckets of other users" in docs/purge.md)."""
    b = bucket_name
    uid = another_users_bucket(ceph_cluster, b)
    try:
        argv = cli_argv(ceph_cluster, tmp_path, "purge", b, "--method", "admin-purge", "--yes")
        proc = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=240,
                              env={**ceph_cluster.env(), "RGWKEEPER_INJECT_CRASH_AT": killed_at})
        assert proc.returncode == -signal.SIGKILL, f"exit {proc.returncode}: {proc.stderr[-2000:]}"
        assert bucket_stats(ceph_cluster, b) is None
        (cp_file,) = (tmp_path / "state").glob(f"{b}.*.json")
        removed = radosgw_admin(ceph_cluster, "user", "rm", "--uid", uid)
        assert removed.returncode == 0, removed.stderr
        assert radosgw_admin(ceph_cluster, "user", "info", "--uid", uid).returncode != 0
        left_by_user_rm = users_uid_objects(ceph_cluster, uid)

        doc = json.loads(cli(ceph_cluster, tmp_path, "purge", b, "--method", "admin-purge", "--yes",
                             "--json").stdout)
        assert users_uid_objects(ceph_cluster, uid) == left_by_user_rm
    finally:
        radosgw_admin(ceph_cluster, "user", "rm", "--uid", uid, "--purge-data")

    assert doc["ok"] and doc["resumed"] == 1, doc["checks"]
    checks = {c["name"]: c for c in doc["checks"]}
    assert checks["owner stats synced"]["status"] == "warning", checks
    assert checks["owner stats synced"]["detail"] == f"the owner {uid} does not exist: no stats to sync"
    assert checks["owner unlinked"]["status"] == "ok"
    assert not cp_file.exists()  # verified clean: nothing left to resume


def killed_then_resumed(ceph_cluster, s3, b: str, tmp_path: Path, method: str, config: str) -> None:
    """A purge killed with SIGKILL right after its second page's checkpoint, then the same command
    again: it resumes from that checkpoint, finishes, and nothing is left."""
    s3.create_bucket(Bucket=b)
    fill(s3, b, 600, size=512)
    marker = bucket_stats(ceph_cluster, b)["marker"]
    cfg = tmp_path / "rgwkeeper.toml"
    cfg.write_text(f'[purge]\nstate_dir = "{tmp_path / "state"}"\n{config}')
    argv = [sys.executable, "-m", "rgwkeeper", "purge", "--config", str(cfg), "--conf", str(ceph_cluster.conf),
            "--keyring", str(ceph_cluster.keyring), "--rgw-endpoint", ceph_cluster.rgw_endpoint,
            "--rgw-credentials", str(ceph_cluster.credentials_file), b, "--method", method, "--yes"]
    # The purge kills itself (SIGKILL: no cleanup at all) right after its second page's checkpoint
    # reaches the disk: polling the file from here lost that race to a fast direct purge in CI.
    env = {**ceph_cluster.env(), "RGWKEEPER_INJECT_CRASH_AFTER_CURSORS": "2"}
    proc = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, env=env, timeout=240)
    assert proc.returncode == -signal.SIGKILL, f"exit {proc.returncode}: {proc.stderr[-2000:]}"
    (cp_file,) = (tmp_path / "state").glob(f"{b}.*.json")
    cursor = json.loads(cp_file.read_text())["cursor"]
    assert cursor, "killed after a checkpoint with a cursor"
    stats = bucket_stats(ceph_cluster, b)
    assert stats is not None and stats["usage"].get("rgw.main", {}).get("num_objects", 0) > 0  # really interrupted

    doc = json.loads(cli(ceph_cluster, tmp_path, "purge", b, "--method", method, "--yes", "--json",
                         config=config).stdout)

    assert doc["ok"] and doc["resumed"] == 1, doc["checks"]
    assert bucket_stats(ceph_cluster, b) is None
    assert_nothing_left(ceph_cluster, marker)


def purge_through_an_rgw_restart(cluster, tmp_path: Path, argv: list[str], bucket: str,
                                 restart_rgw) -> tuple[int, str, str]:
    """Run the purge ``argv``; once its checkpoint has a cursor (mid-listing), restart the
    cluster's first RGW (down 3 s). Its exit code, stdout and stderr."""
    err = tmp_path / "stderr"
    with open(err, "w") as err_f:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err_f, stdin=subprocess.DEVNULL, text=True,
                                env=cluster.env())
        try:
            deadline = time.monotonic() + 120
            while not any(json.loads(f.read_text() or "{}").get("cursor")
                          for f in (tmp_path / "state").glob(f"{bucket}.*.json")):
                assert proc.poll() is None and time.monotonic() < deadline, "no first page before the restart"
                time.sleep(0.05)
            restart_rgw(down_s=3)  # the purge is mid-listing: its next requests meet a closed port
            out, _ = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
    return proc.returncode, out, err.read_text()


@pytest.mark.parametrize("how", [["--method", "s3"], ["--method", "direct", "--max-rate", "200"]],
                         ids=["s3", "direct-capped"])
def test_purge_rides_out_an_rgw_restart_and_finishes(ceph_cluster, s3, bucket_name, tmp_path, restart_rgw, how):
    b = bucket_name
    s3.create_bucket(Bucket=b)
    fill(s3, b, 1000, size=256)
    marker = bucket_stats(ceph_cluster, b)["marker"]
    config = "s3_batches_in_flight = 1\nlist_page_size = 20\ncheckpoint_interval = 0\nrgw_retry = 120\n"
    cfg = tmp_path / "rgwkeeper.toml"
    cfg.write_text(f'[purge]\nstate_dir = "{tmp_path / "state"}"\n{config}')
    argv = [sys.executable, "-m", "rgwkeeper", "purge", "--config", str(cfg), "--conf", str(ceph_cluster.conf),
            "--keyring", str(ceph_cluster.keyring), "--rgw-endpoint", ceph_cluster.rgw_endpoint,
            "--rgw-credentials", str(ceph_cluster.credentials_file), b, *how, "--yes", "--json"]
    rc, out, stderr = purge_through_an_rgw_restart(ceph_cluster, tmp_path, argv, b, restart_rgw)
    assert rc == 0, stderr[-3000:]
    assert "purge retrying" in stderr, "the purge never met the restart"
    doc = json.loads(out)
    assert doc["ok"] and doc["resumed"] == 0 and doc["method"] == how[1], doc["checks"]
    if "--max-rate" in how:  # the cap held across the restart: never faster than 200/s
        assert doc["pacing"]["max_objects_per_second"] == 200.0 and doc["elapsed_s"] >= 1000 / 200
    assert bucket_stats(ceph_cluster, b) is None
    assert_nothing_left(ceph_cluster, marker)


def test_pacing_slows_the_purge_when_writes_are_slower_than_the_target(ceph_cluster, s3, bucket_name, tmp_path):
    b = bucket_name
    s3.create_bucket(Bucket=b)
    fill(s3, b, 200, size=512)
    # A target no write can meet: the purge must back off to its floor, and still finish.
    doc = json.loads(cli(ceph_cluster, tmp_path, "purge", b, "--yes", "--json",
                         config="pace_write_latency_ms = 0.001\npace_probe_interval = 0.1\n").stdout)
    assert doc["ok"] and doc["pacing"]["samples"] >= 1
    assert doc["pacing"]["min_concurrency_fraction"] < 1.0
    assert bucket_stats(ceph_cluster, b) is None


@pytest.mark.releases("tentacle", "reef", "pacific")
@pytest.mark.parametrize("method", ["s3", "direct"])
def test_a_rate_capped_purge_finishes_clean_at_its_cap(ceph_cluster, s3, bucket_name, tmp_path, method):
    b = bucket_name
    s3.create_bucket(Bucket=b)
    fill(s3, b, 60, size=512)
    marker = bucket_stats(ceph_cluster, b)["marker"]
    doc = json.loads(cli(ceph_cluster, tmp_path, "purge", b, "--method", method, "--max-rate", "20", "--yes",
                         "--json").stdout)
    assert doc["ok"], doc["checks"]
    assert doc["counters"]["objects_deleted"] == 60 and doc["pacing"]["max_objects_per_second"] == 20.0
    # The cap's own guarantee, not a speed: 60 objects in slots of 20 a second (the first at
    # once) keep the delete step busy for 2 s at least.
    assert doc["step_s"]["delete_objects"] >= 2.0, doc["step_s"]
    if method == "direct":  # one head at a time by default, its requests timed against their slots
        p = doc["pacing"]
        assert p["cap_ops_in_flight"] == 1 and p["cap_requests_timed"] >= 1, p
        # Judged (True or False, not None) on the timed requests; which one depends on the host's
        # speed, so it is not asserted.
        assert isinstance(p["cap_held_back_by_window"], bool), p
    else:
        assert "cap_held_back_by_window" not in doc["pacing"]  # no librados window on the s3 method
    assert bucket_stats(ceph_cluster, b) is None
    assert_nothing_left(ceph_cluster, marker)


def test_age_filtered_purge_deletes_exactly_the_old_objects(ceph_cluster, s3, bucket_name, tmp_path):
    """--prefix with --older-than, through S3: the listing decides, and each match is HEADed
    again before its batch. Against the real RGW that re-check must keep nothing that did not
    change (its ETags and mtimes are compared with the listing's: plain and multipart)."""
    s3.create_bucket(Bucket=bucket_name)
    fill(s3, bucket_name, 6, prefix="age/")
    multipart(s3, bucket_name, "age/mp", [b"m" * (5 << 20), b"n" * 1024])
    fill(s3, bucket_name, 2, prefix="keep/")
    time.sleep(5)  # the cutoff is whole seconds, rounded down: up to 1 s less of age reaches it
    s3.put_object(Bucket=bucket_name, Key="age/000001", Body=b"written again")  # now new: kept
    s3.put_object(Bucket=bucket_name, Key="age/new", Body=b"new")
    proc = cli(ceph_cluster, tmp_path, "purge", bucket_name, "--prefix", "age/", "--older-than", "3s",
               "--method", "s3", "--yes", "--json")
    report = json.loads(proc.stdout)
    assert report["ok"], report["checks"]
    left = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket_name).get("Contents", []))
    assert left == ["age/000001", "age/new", "keep/000000", "keep/000001"]
    assert s3.get_object(Bucket=bucket_name, Key="age/000001")["Body"].read() == b"written again"
    assert report["counters"]["objects_deleted"] == 6 and not report["counters"].get("kept_rewritten")


def test_user_mistakes_are_one_line_and_change_nothing(ceph_cluster, s3, bucket_name, tmp_path):
    missing = cli(ceph_cluster, tmp_path, "purge", bucket_name + "-missing", "--yes", check=False)
    assert missing.returncode == 2
    assert missing.stderr == f"rgwkeeper: error: bucket '{bucket_name}-missing' does not exist; nothing was changed\n"
    s3.create_bucket(Bucket=bucket_name)
    s3.put_object(Bucket=bucket_name, Key="k", Body=b"v")
    for args, config in (([bucket_name, "--yes"], f'protected_buckets = ["{bucket_name[:4]}*"]\n'),
                         ([bucket_name], ""),  # no terminal, no --yes
                         ([bucket_name, "--prefix", "a&b=c", "--yes"], "")):
        proc = cli(ceph_cluster, tmp_path, "purge", *args, config=config, check=False)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert s3.get_object(Bucket=bucket_name, Key="k")["Body"].read() == b"v"
    assert bucket_stats(ceph_cluster, bucket_name)["bucket_quota"]["enabled"] is False


def test_the_plan_shows_rgws_clock_and_every_name_a_prefix_reaches(ceph_cluster, s3, bucket_name, tmp_path):
    b = bucket_name
    s3.create_bucket(Bucket=b)
    for key in ("logs/a", "logs/b/c", "logs2/x", "logs.old", "keep"):
        s3.put_object(Bucket=b, Key=key, Body=b"v")
    doc = json.loads(cli(ceph_cluster, tmp_path, "purge", b, "--prefix", "logs", "--older-than", "1h",
                         "--dry-run", "--json").stdout)
    # RGW runs on this host here: its Date header and this host's clock agree to a few seconds.
    assert doc["clock"]["source"] == "rgw" and abs(doc["clock"]["skew_s"]) < 5, doc["clock"]
    assert abs(doc["cutoff_s"] - (doc["clock"]["rgw_s"] - 3600)) < 1e-6
    assert doc["prefix_scope"] == {"prefix": "logs", "continuations": [".old", "/", "2/"], "complete": True,
                                   "ambiguous": True}
    text = cli(ceph_cluster, tmp_path, "purge", b, "--prefix", "logs/", "--dry-run").stdout
    assert "prefix 'logs/' matches keys under: 'logs/a', 'logs/b/'" in text and "WARNING" not in text


def test_a_size_filter_on_a_versioned_bucket_is_refused(ceph_cluster, s3, bucket_name, tmp_path):
    b = bucket_name
    s3.create_bucket(Bucket=b)
    s3.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Enabled"})
    s3.put_object(Bucket=b, Key="doc", Body=b"old and small")
    s3.put_object(Bucket=b, Key="doc", Body=b"new and large" * 1000)
    proc = cli(ceph_cluster, tmp_path, "purge", b, "--larger-than", "1KiB", "--yes", check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "versioning enabled" in proc.stderr, proc.stderr
    assert s3.get_object(Bucket=b, Key="doc")["Body"].read() == b"new and large" * 1000
    assert len(s3.list_object_versions(Bucket=b)["Versions"]) == 2


# -- lifecycle ------------------------------------------------------------------------------------

@pytest.mark.releases("tentacle", "reef", "pacific")
def test_expire_by_prefix_deletes_exactly_the_matching_objects(ceph_cluster, s3, bucket_name, tmp_path, rgw_option):
    rgw_option("rgw_lc_debug_interval", "1", who="client.admin")  # a lifecycle "day" is 1 s for lc process
    b = bucket_name
    s3.create_bucket(Bucket=b)
    theirs = {"ID": "theirs", "Status": "Enabled", "Filter": {"Prefix": "archive/"}, "Expiration": {"Days": 3650}}
    s3.put_bucket_lifecycle_configuration(Bucket=b, LifecycleConfiguration={"Rules": [theirs]})
    fill(s3, b, 12, prefix="logs/")
    fill(s3, b, 5, prefix="logs-2/")  # shares the characters "logs" but not the prefix "logs/"
    fill(s3, b, 5, prefix="keep/")
    multipart(s3, b, "logs/unfinished", [b"u" * 100], complete=False)
    multipart(s3, b, "keep/unfinished", [b"u" * 100], complete=False)
    time.sleep(2.5)

    doc = json.loads(cli(ceph_cluster, tmp_path, "expire", b, "--prefix", "logs/", "--days", "1",
                         "--abort-multipart-days", "1", "--yes", "--json").stdout)

    (result,) = doc
    assert result["ok"] and result["changed"] and result["ran"], result
    assert [u["Key"] for u in s3.list_multipart_uploads(Bucket=b).get("Uploads", [])] == ["keep/unfinished"]
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=b).get("Contents", [])}
    assert not any(k.startswith("logs/") for k in keys)
    assert {k for k in keys if k.startswith("logs-2/")} == {f"logs-2/{i:06d}" for i in range(5)}
    assert {k for k in keys if k.startswith("keep/")} == {f"keep/{i:06d}" for i in range(5)}
    ids = {r["ID"] for r in s3.get_bucket_lifecycle_configuration(Bucket=b)["Rules"]}
    assert "theirs" in ids and any(i.startswith("rgwkeeper-") for i in ids)  # installed next to theirs


def test_expire_of_every_configured_bucket_goes_on_past_one_that_fails(ceph_cluster, s3, bucket_name, tmp_path,
                                                                      rgw_option):
    """What the daemon's fill-triggered expiry runs: one bucket's failure is reported, the others expire."""
    rgw_option("rgw_lc_debug_interval", "1", who="client.admin")
    good, sized = bucket_name + "-a", bucket_name + "-b"
    for b in (good, sized):
        s3.create_bucket(Bucket=b)
        fill(s3, b, 3, prefix="logs/")
    time.sleep(2.5)
    # Before Tentacle no lifecycle size filter is taken: the rule for `sized` fails its release check.
    rules = (f'lifecycle_rules = [{{bucket = "{bucket_name}-*", prefix = "logs/", days = 1}}, '
             f'{{bucket = "{sized}", larger_than = 10, days = 1}}]\n')
    proc = cli(ceph_cluster, tmp_path, "expire", "--yes", "--json", config=rules, check=False)
    from rgwkeeper.lifecycle import SIZE_FILTER_RELEASES

    if ceph_cluster.release in SIZE_FILTER_RELEASES:  # size filters are taken: nothing fails
        assert proc.returncode == 0 and all(d["ok"] for d in json.loads(proc.stdout)), proc.stderr
        return
    assert proc.returncode == 1, proc.stderr
    doc = {d["bucket"]: d for d in json.loads(proc.stdout)}
    assert doc[good]["ok"] and doc[sized] == {"bucket": sized, "ok": False, "stage": "plan",
                                              "error": doc[sized]["error"]}
    assert f"size filters need Tentacle; this cluster runs {ceph_cluster.release}" in doc[sized]["error"]
    assert f"rgwkeeper: {sized}: not expired (plan failed): " in proc.stderr
    assert s3.list_objects_v2(Bucket=good).get("KeyCount", 0) == 0  # expired all the same
    assert s3.list_objects_v2(Bucket=sized)["KeyCount"] == 3


@pytest.mark.releases("tentacle", "reef", "pacific")
def test_expire_by_tag_deletes_exactly_the_tagged_objects(ceph_cluster, s3, bucket_name, tmp_path, rgw_option):
    """A tag filter is decided by each object's tags on RGW (GetObjectTagging), on Pacific too."""
    rgw_option("rgw_lc_debug_interval", "1", who="client.admin")
    b = bucket_name
    s3.create_bucket(Bucket=b)
    tagging = {"scratch": "tier=scratch", "both": "tier=scratch&team=a", "gold": "tier=gold", "bare": ""}
    for kind, tags in tagging.items():
        for i in range(3):
            s3.put_object(Bucket=b, Key=f"t/{kind}-{i}", Body=b"x" * 64, Tagging=tags)
    s3.put_object(Bucket=b, Key="other/scratch", Body=b"y", Tagging="tier=scratch")  # outside the prefix
    time.sleep(2.5)

    doc = json.loads(cli(ceph_cluster, tmp_path, "expire", b, "--prefix", "t/", "--days", "1", "--tag",
                         "tier=scratch", "--yes", "--json").stdout)

    (result,) = doc
    assert result["ok"] and result["ran"], result
    ran = next(c for c in result["checks"] if c["name"].endswith(" ran"))
    assert ran["status"] == "ok" and "with tier=scratch" in ran["detail"], ran
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=b).get("Contents", [])}
    assert keys == {f"t/{kind}-{i}" for kind in ("gold", "bare") for i in range(3)} | {"other/scratch"}


@pytest.mark.releases("tentacle", "reef", "pacific")
def test_expire_by_size_takes_exactly_the_large_objects_or_is_refused_before_any_change(ceph_cluster, s3, bucket_name,
                                                                                        tmp_path, rgw_option):
    """Reef 18.2.7 accepts a lifecycle size filter and keeps the rule without it: its lifecycle
    then expires every object under the rule (measured; docs/purge.md, "Size filters"). Pacific
    rejects the filter. So a size-filtered rule is refused there before anything is put, and
    where RGW keeps it (Tentacle) exactly the objects above the size go."""
    from rgwkeeper.lifecycle import SIZE_FILTER_RELEASES

    rgw_option("rgw_lc_debug_interval", "1", who="client.admin")
    b = bucket_name
    s3.create_bucket(Bucket=b)
    small, large = {f"logs/small-{i}" for i in range(3)}, {f"logs/large-{i}" for i in range(3)}
    for key in sorted(small | large):
        s3.put_object(Bucket=b, Key=key, Body=b"x" * (10 if key in small else 5000))
    time.sleep(2.5)
    proc = cli(ceph_cluster, tmp_path, "expire", b, "--prefix", "logs/", "--days", "1", "--larger-than", "1KiB",
               "--yes", "--json", check=False)
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=b).get("Contents", [])}
    if ceph_cluster.release in SIZE_FILTER_RELEASES:
        assert proc.returncode == 0 and all(d["ok"] for d in json.loads(proc.stdout)), proc.stderr
        assert keys == small
        (rule,) = s3.get_bucket_lifecycle_configuration(Bucket=b)["Rules"]
        assert rule["Filter"] == {"And": {"Prefix": "logs/", "ObjectSizeGreaterThan": 1024}}, rule
        return
    assert proc.returncode != 0 and f"size filters need Tentacle; this cluster runs {ceph_cluster.release}" in \
        proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert keys == small | large
    with pytest.raises(ClientError, match="NoSuchLifecycleConfiguration"):
        s3.get_bucket_lifecycle_configuration(Bucket=b)


def bucket_with_their_rule(s3, b: str) -> None:
    """A bucket with a lifecycle rule of its own, which a lifecycle purge must leave as it was."""
    s3.create_bucket(Bucket=b)
    theirs = {"ID": "theirs", "Status": "Enabled", "Filter": {"Prefix": "archive/"}, "Expiration": {"Days": 3650}}
    s3.put_bucket_lifecycle_configuration(Bucket=b, LifecycleConfiguration={"Rules": [theirs]})


@pytest.mark.releases("tentacle", "reef", "pacific")
def test_purge_by_prefix_through_lifecycle_restores_the_rules(ceph_cluster, s3, bucket_name, tmp_path):
    b = bucket_name
    bucket_with_their_rule(s3, b)
    fill(s3, b, 10, prefix="tmp/")
    fill(s3, b, 4, prefix="tmpx/")
    multipart(s3, b, "tmp/pending", [b"z" * 100], complete=False)

    proc = cli(ceph_cluster, tmp_path, "purge", b, "--prefix", "tmp/", "--method", "lifecycle", "--yes", "--json",
               check=False)

    if release(ceph_cluster) == "pacific":
        # 16.2.15's lc process ignores --bucket and runs one bucket per lifecycle shard (measured):
        # the method is refused, with the way out, and nothing is touched.
        assert proc.returncode == 2 and "tracker 53430" in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
        keys = {o["Key"] for o in s3.list_objects_v2(Bucket=b).get("Contents", [])}
        assert len(keys) == 14 and len(s3.list_multipart_uploads(Bucket=b).get("Uploads", [])) == 1
        assert [r["ID"] for r in s3.get_bucket_lifecycle_configuration(Bucket=b)["Rules"]] == ["theirs"]
        return
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0 and doc["ok"], doc["checks"]
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=b).get("Contents", [])}
    assert keys == {f"tmpx/{i:06d}" for i in range(4)}
    assert s3.list_multipart_uploads(Bucket=b).get("Uploads", []) == []
    assert [r["ID"] for r in s3.get_bucket_lifecycle_configuration(Bucket=b)["Rules"]] == ["theirs"]


def release(cluster) -> str:
    return "pacific" if " pacific " in json.dumps(cluster.ceph("versions")) else "later"


# -- what differs per release -------------------------------------------------------------------

@pytest.mark.releases("tentacle", "reef")
def test_the_plan_names_its_release_and_allows_lifecycle(ceph_cluster, s3, bucket_name, tmp_path):
    b = bucket_name
    s3.create_bucket(Bucket=b)
    fill(s3, b, 5, size=512, prefix="tmp/")
    doc = json.loads(cli(ceph_cluster, tmp_path, "purge", b, "--dry-run", "--json").stdout)
    assert doc["method"] == "direct" and doc["profile"]["release"] == ceph_cluster.release
    # The drop on every release (plan.DIRECT_DROP): the index emptied in place, then RGW deletes the bucket.
    assert any("rgw.bucket_init_index" in c for c in doc["commands"]), doc["commands"]
    assert f"S3 DeleteBucket bucket={b}" in doc["commands"]
    assert not any("metadata rm" in c for c in doc["commands"]), doc["commands"]
    doc = json.loads(cli(ceph_cluster, tmp_path, "purge", b, "--prefix", "tmp/", "--method", "lifecycle",
                         "--dry-run", "--json").stdout)
    assert doc["method"] == "lifecycle"
    assert any("lc process --bucket" in c for c in doc["commands"]), doc["commands"]
    assert bucket_stats(ceph_cluster, b)["usage"]["rgw.main"]["num_objects"] == 5  # a dry run


# Quincy and later run the bucket's lifecycle itself (`lc process --bucket`, tracker 53430);
# Pacific works from a listing, which test_purge_by_prefix_through_lifecycle_restores_the_rules covers.
@pytest.mark.releases("tentacle", "reef")
def test_an_interrupted_lifecycle_purge_puts_the_rules_back_and_a_rerun_finishes(ceph_cluster, s3, bucket_name,
                                                                                tmp_path):
    """SIGTERM while the purge's expire-everything rule is on the bucket: the rules the bucket had
    are back when the command has exited, and the same command again finishes the purge."""
    b = bucket_name
    bucket_with_their_rule(s3, b)
    fill(s3, b, 30, prefix="tmp/")
    fill(s3, b, 3, prefix="keep/")

    def rule_ids() -> list[str]:
        return [r["ID"] for r in s3.get_bucket_lifecycle_configuration(Bucket=b)["Rules"]]

    args = ("purge", b, "--prefix", "tmp/", "--method", "lifecycle", "--yes")
    proc = subprocess.Popen(cli_argv(ceph_cluster, tmp_path, *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, env=ceph_cluster.env())
    try:
        deadline = time.monotonic() + 120
        while not any(i.startswith("rgwkeeper-purge-") for i in rule_ids()):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate(timeout=10)
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err
    assert err.endswith("rgwkeeper: error: terminated (SIGTERM); run the same command again to resume from its "
                        "checkpoint\n"), err
    assert rule_ids() == ["theirs"]

    cli(ceph_cluster, tmp_path, *args)
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=b).get("Contents", [])}
    assert keys == {f"keep/{i:06d}" for i in range(3)}
    assert rule_ids() == ["theirs"]


INDEX_POOL = "default.rgw.buckets.index"


@pytest.mark.releases("tentacle", "reef", "pacific")
def test_direct_purge_of_a_resharded_bucket_removes_its_current_index_shards(ceph_cluster, s3, bucket_name,
                                                                              tmp_path):
    # Reef and later reshard in place: the new shards are .dir.<id>.<gen>.<n>, same bucket id
    # (Pacific gives the bucket a new id instead); the direct drop must find them either way.
    b = bucket_name
    s3.create_bucket(Bucket=b)
    fill(s3, b, 40, size=2048)
    resharded = radosgw_admin(ceph_cluster, "bucket", "reshard", "--bucket", b, "--num-shards", "7",
                              "--yes-i-really-mean-it")
    assert resharded.returncode == 0, resharded.stderr
    stats = bucket_stats(ceph_cluster, b)
    assert stats["num_shards"] == 7
    shards = rados_ls(ceph_cluster, INDEX_POOL, f".dir.{stats['id']}.")
    assert len(shards) == 7, shards  # only the current generation's shards are left after a reshard

    doc = json.loads(cli(ceph_cluster, tmp_path, "purge", b, "--method", "direct", "--yes", "--json").stdout)

    assert doc["ok"] and doc["method"] == "direct", doc["checks"]
    assert doc["counters"]["direct_removed"] == 40
    assert bucket_stats(ceph_cluster, b) is None
    assert rados_ls(ceph_cluster, INDEX_POOL, f".dir.{stats['id']}") == []
    assert_nothing_left(ceph_cluster, stats["marker"])
