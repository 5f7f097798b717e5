"""A full cluster, made full on purpose: the fill ratios are lowered below the fullest OSD's usage
(OSD_FULL, POOL_FULL), and ALWAYS put back afterwards, also when a test fails.

On 16.2.15 the mon raises a full ratio set below backfillfull to backfillfull
(OSD_OUT_OF_ORDER_FULL, "increased"), so all three ratios are lowered, in order.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.integration.test_daemon import POOL, THROTTLE, daemons, journal_pool, mon_db, put_load, wait_for  # noqa: F401

FULL_CODES = {"OSD_FULL", "POOL_FULL"}
FULL_LEASE_S = 24.0


def ratios(ceph_cluster):
    d = ceph_cluster.ceph("osd", "dump")
    return {k: d[f"{k}_ratio"] for k in ("nearfull", "backfillfull", "full")}


def fullest(ceph_cluster):
    return max(n["kb_used"] / n["kb"] for n in ceph_cluster.ceph("osd", "df")["nodes"] if n["kb"])


def codes(ceph_cluster):
    return set(ceph_cluster.ceph("health", "detail").get("checks", {})) & FULL_CODES


def _set(ceph_cluster, order, values):
    for name in order:
        ceph_cluster.ceph("osd", f"set-{name}-ratio", f"{values[name]:.4f}")


def ballast_to(ceph_cluster, used_ratio):
    """Write ballast objects into RGW's data pool until the fullest OSD uses ``used_ratio``. A new
    Tentacle or Reef harness cluster uses about 3% of each OSD; Pacific's more (its 128 MiB DB
    spilled over, docs/testing.md), which is what the lowered ratios below were sized on."""
    with tempfile.NamedTemporaryFile(prefix="rgwkeeper-test-ballast-") as chunk:
        chunk.write(os.urandom(32 << 20))
        chunk.flush()
        _write_ballast(ceph_cluster, chunk.name, used_ratio)


def _write_ballast(ceph_cluster, chunk, used_ratio):
    for _ in range(10):
        used = fullest(ceph_cluster)
        if used >= used_ratio:
            return
        osd_bytes = max(n["kb"] for n in ceph_cluster.ceph("osd", "df")["nodes"]) * 1024
        # The objects spread over the 3 OSDs: write for all of them, a third more for the spread.
        count = max(1, int((used_ratio - used) * osd_bytes * 3 * 1.3 / (32 << 20)) + 1)
        for _ in range(count):
            subprocess.run(["rados", "-c", str(ceph_cluster.conf), "-k", str(ceph_cluster.keyring), "-p",
                            "default.rgw.buckets.data", "put", f"rgwkeeper-test-ballast-{uuid.uuid4().hex}",
                            chunk], check=True, capture_output=True, timeout=120)
        time.sleep(6)  # OSDs report their usage to the mon every 5 s
    raise AssertionError(f"fullest OSD still under {used_ratio} after writing ballast")


@contextlib.contextmanager
def made_full(ceph_cluster, below=0.02):
    """Lower the ratios to just under the fullest OSD's usage until the block ends."""
    original = ratios(ceph_cluster)
    if not ceph_cluster.external:  # never fill an operator's cluster
        ballast_to(ceph_cluster, 0.035 + below)
    full = round(fullest(ceph_cluster) - below, 4)
    assert full > 0.03, f"usage too low to make full: {full}"
    low = {"nearfull": full - 0.01, "backfillfull": full - 0.005, "full": full}
    try:
        _set(ceph_cluster, ("nearfull", "backfillfull", "full"), low)  # lowering: smallest first
        wait_for("OSD_FULL and POOL_FULL", lambda: codes(ceph_cluster) == FULL_CODES, timeout=60, interval=1)
        yield low
    finally:
        _set(ceph_cluster, ("full", "backfillfull", "nearfull"), original)  # raising: largest first
        wait_for("full state cleared", lambda: not codes(ceph_cluster), timeout=60, interval=1)
        # RGW's own view can lag the mon's health: in one CI run (20.2.4) the next test's first
        # PUT and CreateBucket still got InsufficientCapacity after the codes had cleared.
        wait_for("RGW accepts writes again", lambda: rgw_accepts_writes(ceph_cluster), timeout=60, interval=1)


def rgw_accepts_writes(ceph_cluster) -> bool:
    """One write through RGW: a probe bucket and object, removed again. False on InsufficientCapacity."""
    import boto3
    from botocore.config import Config
    from botocore.exceptions import ClientError

    access, secret = ceph_cluster.credentials()
    s3 = boto3.client("s3", endpoint_url=ceph_cluster.rgw_endpoint, aws_access_key_id=access,
                      aws_secret_access_key=secret, region_name="default",
                      config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
    probe = f"full-probe-{uuid.uuid4().hex[:8]}"
    try:
        s3.create_bucket(Bucket=probe)
        s3.put_object(Bucket=probe, Key="probe", Body=b"p")
        s3.delete_object(Bucket=probe, Key="probe")
        s3.delete_bucket(Bucket=probe)
        return True
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "InsufficientCapacity":
            with contextlib.suppress(ClientError):
                s3.delete_bucket(Bucket=probe)
            return False
        raise


def fill_bucket(s3, bucket, n=200, size=4096, big=0):
    s3.create_bucket(Bucket=bucket)
    with ThreadPoolExecutor(16) as ex:
        list(ex.map(lambda i: s3.put_object(Bucket=bucket, Key=f"k{i:05d}", Body=os.urandom(size)), range(n)))
    for i in range(big):
        s3.put_object(Bucket=bucket, Key=f"big{i}", Body=os.urandom(8 << 20))  # tails: RGW must delete them
    time.sleep(6)  # OSDs report their usage to the mon every 5 s


def write_config(ceph_cluster, tmp_path, **purge):
    lines = [f'[cluster]\nconf = "{ceph_cluster.conf}"\nkeyring = "{ceph_cluster.keyring}"\ntimeout_s = 10.0\n',
             f'[rgw]\nendpoint = "{ceph_cluster.rgw_endpoint}"\ncredentials_file = "{ceph_cluster.credentials_file}"\n',
             f'[daemon]\npool = "{POOL}"\n',
             f'[purge]\nstate_dir = "{tmp_path / "purge-state"}"\n' + "".join(f"{k} = {v}\n" for k, v in purge.items())]
    path = tmp_path / "rgwkeeper.toml"
    path.write_text("\n".join(lines))
    return path


def rgwkeeper(config, *args, timeout=300):
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "rgwkeeper", "--log-level", "error", *args, "--config", str(config)],
                          capture_output=True, text=True, timeout=timeout, check=False)
    proc.elapsed = time.monotonic() - t0  # type: ignore[attr-defined]
    print(f"\n[measured] rgwkeeper {' '.join(args)}: exit {proc.returncode} in {proc.elapsed:.1f} s")
    return proc


def journal_ratio_entry(ceph_cluster):
    out = subprocess.run(["rados", "-c", str(ceph_cluster.conf), "-k", str(ceph_cluster.keyring), "-p", POOL,
                          "listomapkeys", "rgwkeeper.journal"], capture_output=True, text=True, timeout=30)
    return "ratio/full_ratio" in out.stdout.split()


def ensure_journal_object(ceph_cluster):
    # What the daemon does when it becomes leader: the object must exist before the cluster is full.
    subprocess.run(["rados", "-c", str(ceph_cluster.conf), "-k", str(ceph_cluster.keyring), "-p", POOL, "create",
                    "rgwkeeper.journal"], capture_output=True, timeout=30, check=False)


def bucket_exists(s3, bucket):
    try:
        s3.head_bucket(Bucket=bucket)
        return True
    except Exception:  # noqa: BLE001 - 404 once it is gone
        return False


def test_status_answers_on_a_full_cluster_and_says_it_is_full(ceph_cluster, tmp_path, s3, bucket_name):
    fill_bucket(s3, bucket_name, n=50)
    config = write_config(ceph_cluster, tmp_path)
    with made_full(ceph_cluster) as low:
        proc = rgwkeeper(config, "status", "--json")
        text = rgwkeeper(config, "status")
    assert proc.returncode == 0, proc.stderr
    full = json.loads(proc.stdout)["full"]
    assert full["full"] and set(full["codes"]) == FULL_CODES and full["full_osds"]
    assert abs(full["ratios"]["full_ratio"] - low["full"]) < 1e-5
    assert full["fullest_used_ratio"] > full["ratios"]["full_ratio"] and "--raise-full-ratio" in full["advice"]
    # The radosgw-admin call that waits on a full cluster was not made (it used to cost a timeout).
    assert "not run: the cluster is full" in proc.stdout
    assert text.returncode == 0 and "FULL: writes are blocked" in text.stdout


def test_purge_that_needs_rgw_refuses_at_once_naming_the_full_state(ceph_cluster, tmp_path, s3, bucket_name):
    fill_bucket(s3, bucket_name, n=50)
    config = write_config(ceph_cluster, tmp_path)
    with made_full(ceph_cluster):
        proc = rgwkeeper(config, "purge", bucket_name, "--method", "s3", "--yes")
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert "OSD_FULL" in proc.stderr and "--raise-full-ratio" in proc.stderr and "nothing was changed" in proc.stderr
    assert len(s3.list_objects_v2(Bucket=bucket_name)["Contents"]) == 50


def test_purge_with_a_raise_frees_space_and_gives_the_ratio_back(ceph_cluster, tmp_path, s3, bucket_name,
                                                                 journal_pool):
    fill_bucket(s3, bucket_name, n=200, big=2)
    ensure_journal_object(ceph_cluster)
    config = write_config(ceph_cluster, tmp_path)
    with made_full(ceph_cluster) as low:
        raise_to = round(fullest(ceph_cluster) + 0.05, 3)
        dry = rgwkeeper(config, "purge", bucket_name, "--raise-full-ratio", str(raise_to), "--dry-run")
        assert dry.returncode == 0, dry.stderr
        assert f"before: $ ceph osd set-full-ratio {raise_to:g}" in dry.stdout
        assert f"after:  $ ceph osd set-full-ratio {low['full']:g}" in dry.stdout
        proc = rgwkeeper(config, "purge", bucket_name, "--raise-full-ratio", str(raise_to), "--yes", "--json")
        after = ratios(ceph_cluster)["full"]
        entry_left = journal_ratio_entry(ceph_cluster)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["ok"] and not bucket_exists(s3, bucket_name)
    assert abs(after - low["full"]) < 1e-5 and not entry_left  # given back, and forgotten


def test_direct_purge_without_a_raise_frees_heads_then_stops_and_a_raise_finishes_it(
        ceph_cluster, tmp_path, s3, bucket_name, journal_pool):
    fill_bucket(s3, bucket_name, n=300, big=1)
    ensure_journal_object(ceph_cluster)
    config = write_config(ceph_cluster, tmp_path, full_wait_s=10.0)
    with made_full(ceph_cluster, below=0.03) as low:
        first = rgwkeeper(config, "purge", bucket_name, "--yes")
        assert first.returncode == 1 and first.stderr.count("\n") == 1, first.stderr[-2000:]
        assert "stopped: removed 300 head-only objects" in first.stderr and "--raise-full-ratio" in first.stderr
        assert bucket_exists(s3, bucket_name)  # nothing RGW writes was attempted
        raise_to = round(fullest(ceph_cluster) + 0.05, 3)
        second = rgwkeeper(config, "purge", bucket_name, "--yes", "--json", "--raise-full-ratio", str(raise_to))
        after = ratios(ceph_cluster)["full"]
    assert second.returncode == 0, second.stderr[-2000:]
    report = json.loads(second.stdout)
    assert report["ok"] and report["resumed"] == 1 and not bucket_exists(s3, bucket_name)
    assert abs(after - low["full"]) < 1e-5


def test_direct_purge_on_a_full_cluster_goes_on_once_its_removals_drop_usage(ceph_cluster, tmp_path, s3,
                                                                              bucket_name):
    # 1 MiB head-only objects (head chunk 4 MiB): their removal with full-try frees about
    # 80 MiB per OSD, far more than the 0.4% (17 MiB) the ratio is set below the fullest OSD.
    fill_bucket(s3, bucket_name, n=240, size=1 << 20)
    config = write_config(ceph_cluster, tmp_path, full_wait_s=120.0)
    with made_full(ceph_cluster, below=0.004):
        proc = rgwkeeper(config, "purge", bucket_name, "--yes", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["ok"] and report["counters"]["freed_while_full"] == 240 and not bucket_exists(s3, bucket_name)
    print(f"[measured] freed while full, then purged: step seconds {report['step_s']}")


def test_a_job_of_buckets_on_a_full_cluster_says_in_one_line_what_to_do_and_changes_nothing(
        ceph_cluster, tmp_path, s3, bucket_name, journal_pool):
    """A job keeps its items in an object it creates, which a full cluster refuses (ENOSPC even
    with full-try), and it has no --raise-full-ratio: it must stop before it touches a bucket and
    say in one line how to go on."""
    base = bucket_name[:40]
    job = [f"{base}-f-{c}" for c in "ab"]
    for b in job:
        fill_bucket(s3, b, n=40)
    config = write_config(ceph_cluster, tmp_path, full_wait_s=10.0)
    with made_full(ceph_cluster, below=0.03):
        proc = rgwkeeper(config, "purge", "--match", f"{base}-f-*", "--yes")
    assert proc.returncode not in (0, -9) and proc.stderr.count("\n") == 1, proc.stderr[-2000:]
    assert "full" in proc.stderr and "one by one" in proc.stderr and "--raise-full-ratio" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    for b in job:
        listed = s3.list_objects_v2(Bucket=b)
        assert listed["KeyCount"] == 40, (b, listed.get("KeyCount"))


@pytest.mark.releases("pacific")  # test_daemon.THROTTLE: wpq's levers; mClock gets others
def test_daemon_keeps_its_lock_on_a_full_cluster_and_restores_at_sigterm(ceph_cluster, s3, bucket_name, daemons,
                                                                         journal_pool):
    # A lease longer than one call's timeout (10 s): a pass that started just before the cluster
    # turned full may wait that long once (measured), which an 8 s lease would not survive.
    d = daemons("fulld", scrub_throttle={"hold_s": 3600.0}, daemon={"lease_s": FULL_LEASE_S}).start()
    wait_for("first pass", d.passes)
    with put_load(s3, bucket_name):
        wait_for("throttle", lambda: any(p["scrub_state"] == "engage" for p in d.passes()), timeout=60)
    wait_for("overrides in the mon", lambda: all(("osd", n) in mon_db(ceph_cluster) for n in THROTTLE), timeout=30)
    try:
        with made_full(ceph_cluster):
            start = len(d.passes())
            t0 = time.monotonic()
            # Without full-try the lock renewal waits, the lease runs out and the daemon stops
            # acting ("lost leadership"), then takes it again and restores everything.
            wait_for("passes on a full cluster", lambda: len(d.passes()) >= start + 5 and
                     time.monotonic() - t0 > 1.5 * FULL_LEASE_S, timeout=180, interval=1)
            # Leadership kept: never lost, and never taken again (which restores everything).
            events = d.events()
            became = [e for e in events if e.get("event") == "became leader"]
            # Standby before the first "became leader" is only a lock an earlier test's daemon left
            # (its lease runs out); after it, standby means the lease was lost.
            first = next(i for i, e in enumerate(events) if e.get("event") == "became leader")
            lost = [e for e in events[first:] if e.get("event") in ("lost leadership; not acting", "standby")]
            assert not lost and len(became) == 1, [(e.get("timestamp"), e.get("event")) for e in d.events()[-40:]]
            d.signal(signal.SIGTERM)
            d.proc.wait(60)
            restored = [e for e in d.events() if e.get("event") == "restored before exit"]
            db = mon_db(ceph_cluster)
    finally:
        d.stop()
    assert restored and restored[-1]["restored"], d.events()[-5:]
    assert not any(("osd", n) in db for n in THROTTLE), db


def test_restore_gives_back_a_ratio_a_crashed_purge_left(ceph_cluster, tmp_path, journal_pool):
    from rgwkeeper.fullratio import RATIO_KEY, ratio_text
    from rgwkeeper.journal import Override

    ensure_journal_object(ceph_cluster)
    config = write_config(ceph_cluster, tmp_path)
    original = ratios(ceph_cluster)["full"]
    raised = round(original + 0.01, 4)
    now = time.time()
    entry = Override(key=RATIO_KEY, kind="ratio", who="", name="full_ratio", original_present=True,
                     original_value=ratio_text(original), applied_value=ratio_text(raised), holder="purge@gone:1",
                     since=now - 100, lease_until=now - 10, reason="purge of a bucket, killed")
    subprocess.run(["rados", "-c", str(ceph_cluster.conf), "-k", str(ceph_cluster.keyring), "-p", POOL,
                    "setomapval", "rgwkeeper.journal", RATIO_KEY, entry.to_json()], check=True, timeout=30)
    try:
        ceph_cluster.ceph("osd", "set-full-ratio", str(raised))  # what the killed purge had set
        dry = rgwkeeper(config, "restore", "--dry-run")
        proc = rgwkeeper(config, "restore")
        after = ratios(ceph_cluster)["full"]
        left = journal_ratio_entry(ceph_cluster)
    finally:
        ceph_cluster.ceph("osd", "set-full-ratio", f"{original:.4f}")
    assert f"ceph osd set-full-ratio {ratio_text(original)}" in dry.stdout
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert abs(after - original) < 1e-5 and not left
