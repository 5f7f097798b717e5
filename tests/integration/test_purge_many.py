"""Many buckets as one purge job (`purge --match` / `--buckets-from`), on a real cluster: a worker
killed mid-bucket, the job joined from another admin node (another state directory), the dead
worker's bucket taken over from its mirrored checkpoint, every bucket's own end-state check, a
protected bucket and a copy outside the job untouched. Tentacle in the suite (the job is
release-independent: each bucket's purge is the one-bucket purge the release matrix covers);
all three tests passed on Reef and Pacific too (2026-11-27, 68 s and 62 s with the boot)."""

from __future__ import annotations

import json
import re
import signal
import subprocess

import pytest

from tests.integration.test_purge import (ITEMS_POOL, assert_nothing_left, bucket_stats, cli, cli_argv,
                                          fill)

pytestmark = pytest.mark.integration

CONFIG = ('direct_listing = "index"\nlist_page_size = 10\nitem_lease_s = 5\nrados_ops_in_flight = 1\n'
          'protected_buckets = ["*-keep"]\n'
          f'[daemon]\npool = "{ITEMS_POOL}"\n')


def test_a_job_of_buckets_survives_a_killed_worker_and_is_finished_by_a_join_from_another_node(
        ceph_cluster, s3, bucket_name, tmp_path):
    base = bucket_name[:40]
    job_buckets = [f"{base}-p-{c}" for c in "abc"]
    kept, copies = f"{base}-p-keep", f"{base}-copies"
    for b in [*job_buckets, kept, copies]:
        s3.create_bucket(Bucket=b)
    for b in job_buckets:
        fill(s3, b, 200, size=512)
    fill(s3, kept, 5, size=512)
    s3.copy_object(Bucket=copies, Key="c", CopySource={"Bucket": job_buckets[0], "Key": "obj/000007"})
    markers = {b: bucket_stats(ceph_cluster, b)["marker"] for b in job_buckets}

    # The dry run plans each bucket and changes nothing.
    dry = json.loads(cli(ceph_cluster, tmp_path, "purge", "--match", f"{base}-p-*", "--dry-run", "--json",
                         config=CONFIG).stdout)
    assert sorted(p["profile"]["bucket"] for p in dry["plans"]) == job_buckets
    assert [s["bucket"] for s in dry["skipped"]] == [kept]
    assert all(bucket_stats(ceph_cluster, b) for b in job_buckets)

    # One worker, one bucket at a time; it kills itself (SIGKILL) after 3 page records of its first bucket.
    argv = cli_argv(ceph_cluster, tmp_path, "purge", "--match", f"{base}-p-*", "--workers", "1", "--yes", "--json",
                    config=CONFIG)
    env = {**ceph_cluster.env(), "RGWKEEPER_INJECT_CRASH_AFTER_RECORDS": "3"}
    proc = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, env=env, timeout=240)
    assert proc.returncode == -signal.SIGKILL, f"exit {proc.returncode}: {proc.stderr[-2000:]}"
    assert f"skipping {kept}: protected (purge.protected_buckets pattern" in proc.stderr
    job = re.search(r"purge job ([0-9a-f]{12}): 3 buckets; join with: rgwkeeper purge --join \1", proc.stderr).group(1)

    status = json.loads(cli(ceph_cluster, tmp_path, "purge", "--status", job, "--json", config=CONFIG).stdout)
    rows = {r["bucket"]: r for r in status["buckets"]}
    assert set(rows) == set(job_buckets)
    held = rows[job_buckets[0]]
    assert held["state"] in ("running", "stalled") and held["purge_id"] and held["takes"] == 1, held
    # The bucket's own purge (its index shards as work items) shows how far it got.
    inner = json.loads(cli(ceph_cluster, tmp_path, "purge", "--status", held["purge_id"], "--json",
                           config=CONFIG).stdout)
    assert inner["bucket"] == job_buckets[0] and 0 < inner["counters"]["objects_deleted"] < 200, inner

    # Another admin node: its own state directory, so only RADOS tells it where the dead one stood.
    other = tmp_path / "other-node"
    other.mkdir()
    differs = cli(ceph_cluster, other, "purge", "--prefix", "x/", "--join", job, "--yes", config=CONFIG, check=False)
    assert differs.returncode == 2 and "prefix: 'x/' here, None in the job" in differs.stderr, differs.stderr[-500:]
    one = cli(ceph_cluster, other, "purge", job_buckets[0], "--join", job, "--yes", config=CONFIG, check=False)
    assert one.returncode == 2 and "a job of several buckets" in one.stderr, one.stderr[-500:]

    joined = json.loads(cli(ceph_cluster, other, "purge", "--join", job, "--workers", "2", "--yes", "--json",
                            config=CONFIG).stdout)
    assert joined["ok"] and joined["done"] == joined["buckets"] == 3, joined
    here = {o["bucket"]: o for o in joined["here"]}
    assert set(here) == set(job_buckets)
    taken_over = here[job_buckets[0]]
    assert taken_over["resumed"] and taken_over["plan_id"] == held["purge_id"], taken_over  # the same plan, resumed
    assert all(not o["resumed"] for b, o in here.items() if b != job_buckets[0])

    for b in job_buckets:
        assert bucket_stats(ceph_cluster, b) is None
        assert_nothing_left(ceph_cluster, markers[b])
    assert bucket_stats(ceph_cluster, kept)["usage"]["rgw.main"]["num_objects"] == 5  # protected: untouched
    assert s3.get_object(Bucket=copies, Key="c")["Body"].read() == b"x" * 512  # outside the job: untouched
    gone = cli(ceph_cluster, tmp_path, "purge", "--status", job, config=CONFIG, check=False)
    assert gone.returncode == 2 and f"no purge {job!r}" in gone.stderr  # a finished job removes its items


def test_a_list_of_buckets_is_one_job_and_a_protected_name_in_it_refuses_the_whole_list(ceph_cluster, s3,
                                                                                         bucket_name, tmp_path):
    base = bucket_name[:40]
    real, missing, kept = f"{base}-l-a", f"{base}-l-never", f"{base}-l-keep"
    for b in (real, kept):
        s3.create_bucket(Bucket=b)
        fill(s3, b, 30, size=256)
    listing = tmp_path / "buckets.txt"
    listing.write_text(f"# to purge\n{real}\n{missing}\n{kept}\n")
    refused = cli(ceph_cluster, tmp_path, "purge", "--buckets-from", str(listing), "--yes", config=CONFIG, check=False)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert f"bucket {kept!r} is protected" in refused.stderr
    assert bucket_stats(ceph_cluster, real)["usage"]["rgw.main"]["num_objects"] == 30  # nothing was changed

    listing.write_text(f"{real}\n{missing}\n")
    # The job's cap is shared by the buckets it purges at once, and refused where a share is too small.
    small = cli(ceph_cluster, tmp_path, "purge", "--buckets-from", str(listing), "--max-rate", "0.015", "--workers",
                "2", "--yes", config=CONFIG, check=False)
    assert small.returncode == 2 and "below 0.01/s each: lower --workers" in small.stderr, small.stderr
    # A listed name that does not exist is a failure (a typo must not read as done); the rest goes on.
    done = cli(ceph_cluster, tmp_path, "purge", "--buckets-from", str(listing), "--yes", config=CONFIG, check=False)
    assert done.returncode == 1, done.stderr[-1000:]
    assert f"{real}: purged (direct, purge " in done.stdout
    assert f"{missing}: not purged: bucket {missing!r} does not exist" in done.stderr
    assert "1 of 2 buckets done" in done.stdout and "1 of 2 buckets not done (1 failed here" in done.stderr
    assert bucket_stats(ceph_cluster, real) is None
    assert bucket_stats(ceph_cluster, kept)["usage"]["rgw.main"]["num_objects"] == 30


def test_the_same_job_started_on_two_admin_nodes_at_once_purges_each_bucket_once(ceph_cluster, s3, bucket_name,
                                                                                  tmp_path):
    """Two admin nodes (two processes, two state directories) run the same `--match` command at
    the same moment: one job id, so both work one job; every bucket is purged by exactly one of
    them and both end ok."""
    base = bucket_name[:40]
    job_buckets = [f"{base}-t-{c}" for c in "abcd"]
    for b in job_buckets:
        s3.create_bucket(Bucket=b)
        fill(s3, b, 100, size=256)
    nodes = [tmp_path / "node-1", tmp_path / "node-2"]
    procs = []
    for node in nodes:
        node.mkdir()
        argv = cli_argv(ceph_cluster, node, "purge", "--match", f"{base}-t-*", "--workers", "2", "--yes", "--json",
                        config=CONFIG)
        procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      stdin=subprocess.DEVNULL, env=ceph_cluster.env()))
    docs = []
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err[-2000:]
        docs.append(json.loads(out))
    assert docs[0]["job_id"] == docs[1]["job_id"]
    purged = [o["bucket"] for d in docs for o in d["here"]]
    assert sorted(purged) == job_buckets, docs  # each bucket once, by one node or the other
    assert all(o["ok"] and o["objects_deleted"] == 100 for d in docs for o in d["here"])
    for b in job_buckets:
        assert bucket_stats(ceph_cluster, b) is None


def test_a_job_of_buckets_rides_out_an_rgw_restart_and_finishes(ceph_cluster, s3, bucket_name, tmp_path,
                                                                restart_rgw):
    """RGW restarts (down 3 s) while a job purges its first bucket through S3: that bucket's
    purge retries until RGW answers again, and the job goes on to the next bucket and ends ok,
    every bucket gone and nothing of them left in RADOS."""
    from tests.integration.test_purge import purge_through_an_rgw_restart

    base = bucket_name[:40]
    job_buckets = [f"{base}-r-{c}" for c in "ab"]
    for b in job_buckets:
        s3.create_bucket(Bucket=b)
        fill(s3, b, 500, size=256)
    markers = {b: bucket_stats(ceph_cluster, b)["marker"] for b in job_buckets}
    config = ('s3_batches_in_flight = 1\nlist_page_size = 20\ncheckpoint_interval_s = 0\nrgw_retry_s = 120\n'
              f'[daemon]\npool = "{ITEMS_POOL}"\n')
    argv = cli_argv(ceph_cluster, tmp_path, "purge", "--match", f"{base}-r-*", "--method", "s3", "--workers", "1",
                    "--yes", "--json", config=config)
    # Once a bucket's checkpoint has a cursor (mid-listing), RGW is restarted under it.
    rc, out, stderr = purge_through_an_rgw_restart(ceph_cluster, tmp_path, argv, f"{base}-r-*", restart_rgw)
    assert rc == 0, stderr[-3000:]
    assert "purge retrying" in stderr, "the job never met the restart"
    doc = json.loads(out)
    assert doc["ok"] and doc["done"] == doc["buckets"] == 2, doc
    assert sorted(o["bucket"] for o in doc["here"]) == job_buckets
    assert all(o["ok"] and o["objects_deleted"] == 500 for o in doc["here"]), doc["here"]
    for b in job_buckets:
        assert bucket_stats(ceph_cluster, b) is None
        assert_nothing_left(ceph_cluster, markers[b])
