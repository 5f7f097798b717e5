"""Pre-sharding, the daemon's quiet-time reshard and compaction, and fill-triggered expiry,
against the real cluster."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import threading
import time

import pytest

from tests.integration.test_daemon import Daemon, data_pool_write_ops, journal_pool, put_load, wait_for  # noqa: F401
from tests.integration.test_purge import bucket_stats, cli, radosgw_admin

LIMIT = 50  # rgw_max_objs_per_shard for these tests


def _cli(ceph_cluster, *args, timeout=300):
    argv = [sys.executable, "-m", "rgwkeeper", *args, "--conf", str(ceph_cluster.conf), "--keyring",
            str(ceph_cluster.keyring), "--rgw-endpoint", ceph_cluster.rgw_endpoint, "--rgw-credentials",
            str(ceph_cluster.credentials_file)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def _stats(ceph_cluster, bucket):
    out = subprocess.run(["radosgw-admin", "--conf", str(ceph_cluster.conf), "--keyring", str(ceph_cluster.keyring),
                          "bucket", "stats", "--bucket", bucket], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout)


def _reshard_queue(ceph_cluster):
    out = subprocess.run(["radosgw-admin", "--conf", str(ceph_cluster.conf), "--keyring", str(ceph_cluster.keyring),
                          "reshard", "list"], capture_output=True, text=True, timeout=60, check=True)
    return {q["bucket_name"] for q in json.loads(out.stdout or "[]")}


def _ingest(s3, bucket, n, threads, latencies, stop):
    def worker(i):
        for k in range(i, n, threads):
            if stop.is_set():
                return
            t0 = time.perf_counter()
            s3.put_object(Bucket=bucket, Key=f"obj-{k:07d}", Body=b"x" * 1024)
            latencies.append((time.time(), time.perf_counter() - t0))

    ts = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(threads)]
    for t in ts:
        t.start()
    return ts


def _p99(values):
    return statistics.quantiles(values, n=100)[98] if len(values) >= 100 else max(values)


@pytest.mark.releases("tentacle", "reef", "pacific")
def test_presharded_bucket_takes_its_objects_without_a_dynamic_reshard(ceph_cluster, s3, bucket_name, rgw_option,
                                                                       record_property):
    rgw_option("rgw_max_objs_per_shard", str(LIMIT))
    n = 750
    pre, plain = bucket_name, bucket_name[:-1] + "p"
    proc = _cli(ceph_cluster, "preshard", pre, "--expected-objects", str(n), "--json")
    assert proc.returncode == 0, proc.stderr
    planned = json.loads(proc.stdout)
    assert planned["wanted_shards"] == 31  # 750 / (50 x 0.5) = 30 -> the next prime
    assert all(a["ok"] for a in planned["applied"])
    s3.create_bucket(Bucket=plain)  # RGW's default: 11 shards, dynamic reshard past 550 objects

    lat = {pre: [], plain: []}
    seen_shards = {pre: set(), plain: set()}
    queued = {pre: False, plain: False}
    stop = threading.Event()
    threads = [*_ingest(s3, pre, n, 6, lat[pre], stop), *_ingest(s3, plain, n, 6, lat[plain], stop)]

    def watch():
        while not stop.is_set():
            q = _reshard_queue(ceph_cluster)
            for b in (pre, plain):
                queued[b] |= b in q
                seen_shards[b].add(_stats(ceph_cluster, b)["num_shards"])
            time.sleep(1.0)  # a queue entry stays until the 10 s reshard thread takes it

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        for t in threads:
            t.join(300)
        # RGW's bucket-stats sync thread queues the plain bucket once it has passed 550 objects
        # (every rgw_user_quota_bucket_sync_interval: 5 s in the harness, docs/testing.md,
        # "Dynamic resharding in the harness"). Should its reshard thread not have taken the entry
        # by the time it is seen, the queue is processed now, as that thread would.
        wait_for("RGW to queue the plain bucket for a dynamic reshard",
                 lambda: queued[plain] or _stats(ceph_cluster, plain)["num_shards"] > 11, timeout=360, interval=1)
        if _stats(ceph_cluster, plain)["num_shards"] <= 11:
            subprocess.run(["radosgw-admin", "--conf", str(ceph_cluster.conf), "--keyring", str(ceph_cluster.keyring),
                            "reshard", "process"], capture_output=True, text=True, timeout=120, check=True)
        wait_for("dynamic reshard of the plain bucket", lambda: _stats(ceph_cluster, plain)["num_shards"] > 11,
                 timeout=360, interval=2)
    finally:
        stop.set()
        watcher.join(30)
    assert _stats(ceph_cluster, pre)["usage"]["rgw.main"]["num_objects"] == n
    assert seen_shards[pre] == {31} and not queued[pre]
    assert _stats(ceph_cluster, plain)["num_shards"] > 11
    report = {b: {"puts": len(v), "p99_ms": round(_p99([x for _, x in v]) * 1000, 1),
                  "max_ms": round(max(x for _, x in v) * 1000, 1)} for b, v in lat.items()}
    report["plain_shards_seen"] = sorted(seen_shards[plain])
    record_property("reshard_stall", json.dumps(report))
    print(f"\n[preshard] {json.dumps(report)}")


@pytest.mark.parametrize("args, message", [
    (["--expected-objects", "0"], "must be a positive number"),
    (["--expected-objects", "-3"], "must be a positive number"),
    (["--expected-objects", "10000000000000"], "check the number"),
])
def test_bad_preshard_input_changes_nothing(ceph_cluster, s3, bucket_name, args, message):
    proc = _cli(ceph_cluster, "preshard", bucket_name, *args)
    assert proc.returncode == 2 and message in proc.stderr and proc.stderr.count("\n") == 1
    assert bucket_name not in [b["Name"] for b in s3.list_buckets()["Buckets"]]


def test_invalid_bucket_name_changes_nothing(ceph_cluster, s3):
    before = {b["Name"] for b in s3.list_buckets()["Buckets"]}
    proc = _cli(ceph_cluster, "preshard", "Bad_Name&x=1", "--expected-objects", "10")
    assert proc.returncode == 2 and "is not valid" in proc.stderr
    assert {b["Name"] for b in s3.list_buckets()["Buckets"]} == before


def test_daemon_reshards_and_compacts_only_when_quiet(ceph_cluster, s3, bucket_name, rgw_option, tmp_path,
                                                      journal_pool):
    rgw_option("rgw_max_objs_per_shard", "40")
    near, storm = bucket_name, bucket_name[:-1] + "s"
    s3.create_bucket(Bucket=near)
    subprocess.run(["radosgw-admin", "--conf", str(ceph_cluster.conf), "--keyring", str(ceph_cluster.keyring),
                    "bucket", "reshard", "--bucket", near, "--num-shards", "1", "--yes-i-really-mean-it"],
                   check=True, capture_output=True, timeout=60)
    for i in range(37):  # 37 of 40: 92% of the threshold, under RGW's own trigger
        s3.put_object(Bucket=near, Key=f"k{i}", Body=b"x")
    # The storm bucket is pre-sharded wide so it stays far from the threshold itself.
    assert _cli(ceph_cluster, "preshard", storm, "--expected-objects", "40000").returncode == 0
    d = Daemon(ceph_cluster, tmp_path, "quiet", scrub_throttle={"enabled": False},
               daemon={"tick_s": 3.0, "lease_s": 12.0},
               sections={"preshard": {"reshard_at_ratio": 0.9, "max_write_ops": 60.0},
                         "spillover": {"max_write_ops": 60.0, "min_interval_s": 3600.0}})
    try:
        with put_load(s3, storm):
            wait_for("storm seen", lambda: data_pool_write_ops(ceph_cluster) > 200, timeout=60)
            d.start()
            wait_for("passes under load", lambda: len([p for p in d.passes() if p["write_ops"] > 60]) >= 3, timeout=90)
            assert _stats(ceph_cluster, near)["num_shards"] == 1
            assert not [e for e in d.events() if e.get("event") in ("bucket action", "compacted")]
            assert any("waiting for a quiet time" in p["preshard"] for p in d.passes())
        storm_ended = len(d.events())
        wait_for("quiet-time reshard", lambda: _stats(ceph_cluster, near)["num_shards"] > 1, timeout=120)
        wait_for("a compaction", lambda: any(e.get("event") == "compacted" for e in d.events()), timeout=120)
    finally:
        d.stop()
    events = d.events()
    assert all(events.index(e) >= storm_ended for e in events if e.get("event") in ("bucket action", "compacted"))
    assert _stats(ceph_cluster, near)["num_shards"] == 5  # 37 x 2 / 20 -> 4 -> the next prime
    compactions = [e for e in events if e.get("event") == "compacted"]
    for c in compactions:
        assert {"slow_before", "slow_after", "cleared"} <= set(c)
    # One OSD per pass: each pass's line lists at most one compaction.
    assert all(sum("compact" in ch for ch in p["changed"]) <= 1 for p in d.passes())
    print(f"\n[spillover] {[(c['slow_before'], c['slow_after'], c['cleared']) for c in compactions]}")


def test_fill_crossing_the_level_starts_the_configured_expiry(ceph_cluster, s3, bucket_name, tmp_path, journal_pool,
                                                             rgw_option):
    # A lifecycle "day" is 10 s for radosgw-admin (the daemon's lc process), not for RGW's own worker.
    rgw_option("rgw_lc_debug_interval", "10", who="client.admin")
    # Fill is remembered as "expiry started" across runs (by design: once per crossing); a
    # cluster this suite ran on before must be re-armed.
    subprocess.run(["rados", "--conf", str(ceph_cluster.conf), "--keyring", str(ceph_cluster.keyring), "-p",
                    journal_pool, "rmomapkey", "rgwkeeper.control", "fill"], capture_output=True, timeout=60)
    s3.create_bucket(Bucket=bucket_name)
    for i in range(5):
        s3.put_object(Bucket=bucket_name, Key=f"logs/{i}", Body=b"x")
        s3.put_object(Bucket=bucket_name, Key=f"keep/{i}", Body=b"x")
    time.sleep(12)
    d = Daemon(ceph_cluster, tmp_path, "filler", scrub_throttle={"enabled": False},
               # Raw fill here is about 10%: a level of 1% is crossed at once.
               sections={"fill": {"expire_at_ratio": 0.01},
                         "purge": {"lifecycle_rules": [{"bucket": bucket_name, "prefix": "logs/", "days": 1}]}})
    try:
        d.start()
        wait_for("expiry run", lambda: any(e.get("event") == "expiry run" for e in d.events()), timeout=180)
        run = next(e for e in d.events() if e.get("event") == "expiry run")
        # In-process (the purge engine's expire_configured): the run names its buckets, none failed.
        assert run["buckets"] == 1 and run["failed_buckets"] == [] and "error" not in run, \
            d.log_path.read_text()[-2000:]
        keys = lambda: sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket_name).get("Contents", []))  # noqa: E731
        wait_for("logs/ expired", lambda: keys() == [f"keep/{i}" for i in range(5)], timeout=120)
        # Once per crossing: later passes do not run it again.
        wait_for("two more passes", lambda: len(d.passes()) >= 3, timeout=60)
        assert len([e for e in d.events() if e.get("event") == "expiry run"]) == 1
    finally:
        d.stop()


def _shards(cluster, bucket: str) -> tuple[int, int]:
    """(num_shards, min_num_shards) as Tentacle's `bucket layout` reads them."""
    proc = radosgw_admin(cluster, "bucket", "layout", "--bucket", bucket)
    assert proc.returncode == 0, proc.stderr[-2000:]
    normal = json.loads(proc.stdout)["layout"]["current_index"]["layout"]["normal"]
    return normal["num_shards"], normal["min_num_shards"]


# Only Tentacle's dynamic resharding reduces shard counts (rgw_dynamic_resharding_may_reduce).
@pytest.mark.releases("tentacle")
def test_a_presharded_empty_bucket_keeps_its_shards_while_an_ordinary_one_is_reduced(
        ceph_cluster, s3, bucket_name, rgw_option, tmp_path):
    # RGW's bucket stats sync (every rgw_user_quota_bucket_sync_interval: 180 s by default, 5 s in
    # the harness's ceph.conf; over the buckets written since its last pass) queues a reduction when a bucket has under 1,000 objects per shard
    # (min(10,000, rgw_max_objs_per_shard / 100)), down to no fewer than 11 shards; the reshard thread
    # (every rgw_reshard_thread_interval, 10 s in the harness) runs it once
    # rgw_dynamic_resharding_reduction_wait hours (120; its minimum is 0) have passed since it was
    # queued. docs/architecture.md, "Releases"; docs/testing.md, "Dynamic resharding in the harness".
    rgw_option("rgw_dynamic_resharding_reduction_wait", "0")
    pre, plain = bucket_name, bucket_name[:-1] + "p"
    doc = json.loads(cli(ceph_cluster, tmp_path, "preshard", pre, "--expected-objects", "1500",
                         "--objects-per-shard", "50", "--json").stdout)
    assert doc["wanted_shards"] == 31 and all(a["ok"] for a in doc["applied"]), doc
    assert doc["commands"][-1] == f"radosgw-admin bucket set-min-shards --bucket {pre} --num-shards 31"
    assert "tentacle's dynamic resharding reduces" in doc["min_shards"]
    s3.create_bucket(Bucket=plain)
    proc = radosgw_admin(ceph_cluster, "bucket", "reshard", "--bucket", plain, "--num-shards", "31",
                         "--yes-i-really-mean-it")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (_shards(ceph_cluster, pre), _shards(ceph_cluster, plain)) == ((31, 31), (31, 1))
    # One write each puts both buckets in the same stats sync pass; both end empty again.
    for b in (pre, plain):
        s3.put_object(Bucket=b, Key="touch", Body=b"x")
        s3.delete_object(Bucket=b, Key="touch")

    wait_for("RGW reducing the ordinary bucket", lambda: _shards(ceph_cluster, plain)[0] < 31, timeout=360, interval=3)
    assert _shards(ceph_cluster, plain) == (11, 1)
    assert _shards(ceph_cluster, pre) == (31, 31)
    assert bucket_stats(ceph_cluster, pre)["num_shards"] == 31
    if ceph_cluster.log_dir is not None:
        # RGW did consider the pre-sharded bucket in the same pass: the pin is what kept it.
        log = (ceph_cluster.log_dir / "ceph-client.rgw.gw.log").read_text(errors="replace")
        assert f"check_bucket_shards bucket {pre} needs resharding; current num shards 31; new num shards 31" in log
