"""A purge at scale (issue 16's proof): 100,000 objects over 37 index shards, purged as work
items by 3 worker processes against 2 RGWs, one of them killed with SIGKILL half-way; each shard
of about 2,700 keys is cut into key ranges of 1,000 (purge.range_entries) by the worker that takes it.

The bucket is filled by rgwkeeper's own load generator (its prepare phase, --keep); how long
the test takes is in docs/testing.md ("The scale test and the slowest tests").

What it checks, beside a clean end:
- the item states in RADOS stay consistent while the workers run: read every half second with
  `purge --status --json`, no item is ever done and then not done again, or gone once seen;
  its takes and its counters never go down; the objects deleted never exceed the bucket's;
  a range names a shard's item and holds at most 1,000 objects;
- the killed worker's items are taken over and nothing is counted twice: the items it held
  (read with --status while it is stopped, just before the SIGKILL) are taken again by a live
  worker, whose log says so (takes 2); the purge reports exactly the bucket's objects deleted.
  The logs, not the watcher, prove the takeover: the takeover comes after the dead worker's
  lease runs out, when the others have finished everything else, so the taken-over item is
  often the last one, done and its board removed between two reads of the watcher;
- nothing outside the bucket is touched: a copy of one of its objects in another bucket reads
  back byte for byte.
"""

from __future__ import annotations

import json
import os
import signal
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.integration.test_purge import (ITEMS_POOL, assert_nothing_left, bucket_stats, cli_argv,
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
    logs: list[Path] = []
    # The config is written once (cli_argv writes it): a process reading it while another call
    # rewrote it could read it half-written.
    prefix = cli_argv(ceph_cluster, tmp_path, "purge", config=config)
    prefix[prefix.index("rgwkeeper") + 1:prefix.index("rgwkeeper") + 1] = ["--log-level", "info"]  # items taken

    def start(*args: str, endpoint: str | None = None) -> subprocess.Popen:
        argv = [*prefix, b, *args, "--workers", "1", "--yes", "--json"]
        if endpoint:
            argv[argv.index("--rgw-endpoint") + 1] = endpoint
        out, err = tmp_path / f"purge-{len(logs)}.out", tmp_path / f"purge-{len(logs)}.err"
        logs.append(err)
        # Files, not pipes: a pipe nobody reads until the end fills and stalls its worker.
        with out.open("w") as o, err.open("w") as e:
            return subprocess.Popen(argv, stdout=o, stderr=e, stdin=subprocess.DEVNULL, start_new_session=True,
                                    env=ceph_cluster.env())

    purge = start()
    procs = [purge]
    seen: dict[int, tuple[str, int, int]] = {}  # item -> (state, takes, deleted) last seen
    lock = threading.Lock()  # seen and problems: the watcher writes them while the test reads
    problems: list[str] = []
    stop = threading.Event()
    held: list[int] = []
    try:
        job = _job_from_stderr(purge, logs[0])

        def status() -> dict | None:
            st = subprocess.run([*prefix, "--status", job, "--json"], capture_output=True, text=True, timeout=240,
                                stdin=subprocess.DEVNULL, env=ceph_cluster.env())
            return json.loads(st.stdout) if st.returncode == 0 else None

        # The purge prints its id before its fence; a join started before it publishes its items
        # would find none and be refused.
        deadline = time.monotonic() + 300
        while status() is None:
            assert time.monotonic() < deadline and purge.poll() is None, logs[0].read_text()[-2000:]
            time.sleep(0.5)
        joins = [start("--join", job, endpoint=second_rgw), start("--join", job)]
        procs += joins

        def watch() -> None:
            while not stop.is_set():
                try:
                    doc = status()
                    if doc is not None:
                        with lock:
                            _check_consistent(doc, seen, n, problems)
                except Exception as exc:  # noqa: BLE001 - a watcher that dies silently checks nothing
                    with lock:
                        problems.append(f"the status watcher failed: {exc!r}")
                    return
                time.sleep(0.5)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        victim = joins[0]
        deadline = time.monotonic() + 600
        while True:
            with lock:
                if sum(d for _, _, d in seen.values()) >= n // 2:
                    break
            assert time.monotonic() < deadline and victim.poll() is None, "the purge did not get half-way"
            time.sleep(0.5)
        held = _kill_holding(victim, status, deadline)
        out = _finish(purge, logs[0], timeout=900)
        _finish(joins[1], logs[2], timeout=300)
        stop.set()
        watcher.join(60)
        assert not watcher.is_alive(), "the status watcher did not stop"
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
    # Every item the killed worker held is taken over by a live one (its second take, or later).
    retaken = {e["item"] for e in _events(logs[0], logs[2]) if e.get("event") == "purge item taken"
               and e.get("takes", 0) >= 2}
    assert set(held) <= retaken, (held, sorted(retaken), logs[1].read_text()[-2000:])
    assert sum(1 for i in seen if i >= 1_000_000) >= SHARDS, sorted(seen)  # every shard cut at least once
    assert bucket_stats(ceph_cluster, b) is None
    assert_nothing_left(ceph_cluster, marker)
    assert s3.get_object(Bucket=copies, Key="c")["Body"].read() == original


def _job_from_stderr(proc: subprocess.Popen, err: Path) -> str:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        for line in err.read_text().splitlines(keepends=True):
            m = re.search(r"--join ([0-9a-f]{12})\b", line)
            if m and line.endswith("\n"):  # a whole line: the process may be writing it now
                return m.group(1)
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    raise AssertionError(f"the purge printed no --join command: {err.read_text()[-2000:]}")


def _kill_holding(victim: subprocess.Popen, status, deadline: float) -> list[int]:
    """SIGKILL the victim while it holds at least one item: stopped first (SIGSTOP), so the
    status read then is what it holds when killed; a victim between items (or one that holds
    nothing yet) is let go on and tried again. The items it held."""
    name = f"{socket.gethostname()}:{victim.pid}"
    while True:
        assert time.monotonic() < deadline and victim.poll() is None, "the victim never held an item"
        os.killpg(victim.pid, signal.SIGSTOP)
        doc = status()
        held = [i["item"] for i in (doc or {}).get("items", []) if i["worker"] == name and i["state"] != "done"]
        if held:
            os.killpg(victim.pid, signal.SIGKILL)  # holding these items' leases
            victim.wait()
            return held
        os.killpg(victim.pid, signal.SIGCONT)
        time.sleep(0.5)


def _finish(proc: subprocess.Popen, err: Path, *, timeout: float) -> str:
    proc.wait(timeout=timeout)
    assert proc.returncode == 0, err.read_text()[-3000:]
    return err.with_suffix(".out").read_text()


def _events(*logs: Path) -> list[dict]:
    """The JSON log events of these stderr files (lines that are not JSON skipped)."""
    events = []
    for path in logs:
        for line in path.read_text().splitlines():
            try:
                events.append(json.loads(line))
            except ValueError:
                continue
    return events


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
