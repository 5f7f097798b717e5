"""A purge at scale (issue 16's proof): 100,000 objects over 37 index shards, purged as work
items by 3 worker processes against 2 RGWs, one of them killed with SIGKILL half-way; each shard
of about 2,700 keys is cut into key ranges of 1,000 (purge.range_entries) by the worker that takes it.

The bucket is filled by rgwkeeper's own load generator (its prepare phase, --keep). The whole
test took 190 s on this 2-core machine (2026-11-27, before key ranges).

What it checks, beside a clean end:
- the item states in RADOS stay consistent while the workers run: read every half second with
  `purge --status --json`, no item is ever done and then not done again, or gone once seen;
  its takes and its counters never go down; the objects deleted never exceed the bucket's;
  a range names a shard's item and holds at most 1,000 objects;
- the killed worker's items are taken over (takes 2) and nothing is counted twice: the purge
  reports exactly the bucket's objects deleted;
- nothing outside the bucket is touched: a copy of one of its objects in another bucket reads
  back byte for byte.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.integration.test_purge import (ITEMS_POOL, assert_nothing_left, bucket_stats, cli, cli_argv,
                                          radosgw_admin)

OBJECTS = 100_000
SHARDS = 37

RANGE = 1000


def _fill(ceph_cluster, tmp_path, bucket: str) -> None:
    """OBJECTS objects of 1 KiB under bucket (loadgen's keys, PUT only, kept)."""
    cfg = tmp_path / "fill.toml"
    cfg.write_text("[loadgen]\nwarmup_s = 0\n")
    prefix = bucket.rsplit("-", 1)[0]
    workers, per_worker = 2, OBJECTS // 2
    # --objects writes them before the start barrier (prepare); a 1 s run then adds a few more.
    argv = [sys.executable, "-m", "rgwkeeper", "loadgen", "run", "--config", str(cfg), "--rgw-endpoint",
            ceph_cluster.rgw_endpoint, "--rgw-credentials", str(ceph_cluster.credentials_file), "--mix", "GET=100",
            "--objects", str(workers * per_worker), "--workers", str(workers), "--concurrency", "64", "--size", "1KiB",
            "--bucket-prefix", prefix, "--duration", "1", "--keep", "--no-progress", "--json"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_100k_objects_purged_by_3_workers_on_2_rgws_with_one_killed_half_way(ceph_cluster, s3, bucket_name,
                                                                             tmp_path, second_rgw):
    prefix = bucket_name
    b, copies = f"{prefix}-000", f"{prefix}-copies"
    s3.create_bucket(Bucket=b)
    reshard = radosgw_admin(ceph_cluster, "bucket", "reshard", "--bucket", b, "--num-shards", str(SHARDS),
                            "--yes-i-really-mean-it")
    assert reshard.returncode == 0, reshard.stderr[-1000:]
    _fill(ceph_cluster, tmp_path, b)
    stats = bucket_stats(ceph_cluster, b)
    n = stats["usage"]["rgw.main"]["num_objects"]
    assert n >= OBJECTS and stats["num_shards"] >= 32, (n, stats["num_shards"])
    key = s3.list_objects_v2(Bucket=b, MaxKeys=1)["Contents"][0]["Key"]
    s3.create_bucket(Bucket=copies)
    s3.copy_object(Bucket=copies, Key="c", CopySource={"Bucket": b, "Key": key})
    original = s3.get_object(Bucket=b, Key=key)["Body"].read()
    marker = stats["marker"]

    config = (f'direct_listing = "index"\nitem_lease_s = 10\nrange_entries = {RANGE}\n'
              f'[daemon]\npool = "{ITEMS_POOL}"\n')
    purge = subprocess.Popen(cli_argv(ceph_cluster, tmp_path, "purge", b, "--workers", "1", "--yes", "--json",
                                      config=config),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    procs = [purge]
    seen: dict[int, tuple[str, int, int]] = {}  # item -> (state, takes, deleted) last seen
    problems: list[str] = []
    stop = threading.Event()
    try:
        job = _job_from_stderr(purge)

        def join(endpoint: str) -> subprocess.Popen:
            argv = cli_argv(ceph_cluster, tmp_path, "purge", b, "--join", job, "--workers", "1", "--yes", "--json",
                            config=config)
            argv[argv.index("--rgw-endpoint") + 1] = endpoint
            return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    start_new_session=True)

        joins = [join(second_rgw), join(ceph_cluster.rgw_endpoint)]
        procs += joins

        def watch() -> None:
            while not stop.is_set():
                st = cli(ceph_cluster, tmp_path, "purge", "--status", job, "--json", config=config, check=False)
                if st.returncode == 0:
                    _check_consistent(json.loads(st.stdout), seen, n, problems)
                time.sleep(0.5)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        victim = joins[0]
        deadline = time.monotonic() + 600
        while sum(d for _, _, d in seen.values()) < n // 2:
            assert time.monotonic() < deadline and victim.poll() is None, "the purge did not get half-way"
            time.sleep(0.5)
        os.killpg(victim.pid, signal.SIGKILL)  # holding its items' leases
        victim.wait()
        out, err = purge.communicate(timeout=900)
        assert purge.returncode == 0, err[-3000:]
        joins[1].communicate(timeout=300)
        stop.set()
        watcher.join(30)
    finally:
        stop.set()
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    assert not problems, problems[:10]
    doc = json.loads(out)
    assert doc["ok"], doc["checks"]
    assert doc["counters"]["objects_deleted"] == n, doc["counters"]  # each page counted once
    assert any(takes >= 2 for _, takes, _ in seen.values()), "no item of the killed worker was taken over"
    assert sum(1 for i in seen if i >= 1_000_000) >= SHARDS, sorted(seen)  # every shard cut at least once
    assert bucket_stats(ceph_cluster, b) is None
    assert_nothing_left(ceph_cluster, marker)
    assert s3.get_object(Bucket=copies, Key="c")["Body"].read() == original


def _job_from_stderr(proc: subprocess.Popen) -> str:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if "--join " in line:
            return line.split("--join ", 1)[1].split()[0]
        if not line and proc.poll() is not None:
            break
    raise AssertionError("the purge printed no --join command")


def _check_consistent(status: dict, seen: dict[int, tuple[str, int, int]], n: int, problems: list[str]) -> None:
    total = 0
    now = {item["item"] for item in status["items"]}
    if set(seen) - now:
        problems.append(f"items {sorted(set(seen) - now)[:5]} seen before are gone")
    for item in status["items"]:
        i, state, takes, deleted = item["item"], item["state"], item["takes"], item["objects_deleted"]
        total += deleted
        if state not in ("done", "running", "stalled", "waiting"):
            problems.append(f"item {i}: state {state!r}")
        if item["range_of"] is not None and (item["range_of"] not in now or item["range_of"] >= 1_000_000
                                             or deleted > RANGE):
            problems.append(f"item {i}: a range of {item['range_of']} with {deleted} objects")
        before = seen.get(i)
        if before is not None:
            was, took, had = before
            if was == "done" and state != "done":
                problems.append(f"item {i}: done, then {state}")
            if takes < took or deleted < had:
                problems.append(f"item {i}: takes {took}->{takes}, deleted {had}->{deleted}")
        seen[i] = (state, takes, deleted)
    if total > n:
        problems.append(f"{total} objects counted deleted of {n}")
