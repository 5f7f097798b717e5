"""`rgwkeeper status` against the real cluster, through the real CLI."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest


def _status(ceph_cluster, *extra, timeout=120, env=None):
    argv = [sys.executable, "-m", "rgwkeeper", "status", "--conf", str(ceph_cluster.conf),
            "--keyring", str(ceph_cluster.keyring), "--rgw-endpoint", ceph_cluster.rgw_endpoint,
            "--rgw-credentials", str(ceph_cluster.credentials_file), *extra]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)


def _status_json(ceph_cluster):
    proc = _status(ceph_cluster, "--json", "--timeout", "30")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.releases("tentacle", "reef", "pacific")
def test_spillover_is_reported_on_exactly_the_osds_health_detail_names(ceph_cluster):
    health = ceph_cluster.ceph("health", "detail")
    check = health["checks"].get("BLUEFS_SPILLOVER")
    # The test reads Ceph's human text to get an independent answer; rgwkeeper itself
    # uses perf dump numbers and the check's code.
    named = sorted(int(m) for d in (check or {}).get("detail", [])
                   for m in re.findall(r"osd\.(\d+) spilled over", d["message"]))
    snap = _status_json(ceph_cluster)
    assert snap["derived"]["spilled_osds"] == named
    assert ("BLUEFS_SPILLOVER" in snap["checks"]) == bool(named)
    if not ceph_cluster.external and ceph_cluster.release == "pacific":
        # With the harness's 128 MiB DB files Pacific reports spillover on every OSD right after
        # start; Reef and Tentacle report none (docs/testing.md).
        assert named == [0, 1, 2]


@pytest.mark.releases("tentacle", "reef", "pacific")
def test_fill_matches_ceph_df(ceph_cluster):
    snap = _status_json(ceph_cluster)
    df = ceph_cluster.ceph("df")
    assert snap["raw"]["total_bytes"] == df["stats"]["total_bytes"]
    assert snap["derived"]["raw_used_ratio"] == pytest.approx(df["stats"]["total_used_raw_ratio"], abs=0.01)
    assert {p["name"] for p in snap["pools"]} == {p["name"] for p in df["pools"]}
    dump = ceph_cluster.ceph("osd", "dump")
    assert snap["ratios"]["nearfull_ratio"] == pytest.approx(dump["nearfull_ratio"])


@pytest.mark.releases("tentacle", "reef", "pacific")
def test_a_bucket_near_the_lowered_shard_limit_is_flagged(ceph_cluster, s3, bucket_name, rgw_option):
    rgw_option("rgw_max_objs_per_shard", "20")
    near, small = bucket_name, bucket_name[:-1] + "s"
    for b in (near, small):
        s3.create_bucket(Bucket=b)
        subprocess.run(["radosgw-admin", "--conf", str(ceph_cluster.conf), "--keyring", str(ceph_cluster.keyring),
                        "bucket", "reshard", "--bucket", b, "--num-shards", "1", "--yes-i-really-mean-it"],
                       check=True, capture_output=True, timeout=60)
    for i in range(19):
        s3.put_object(Bucket=near, Key=f"k{i:03d}", Body=b"x")
    s3.put_object(Bucket=small, Key="k", Body=b"x")
    snap = _status_json(ceph_cluster)
    buckets = {b["bucket"]: b for b in snap["buckets"]}
    assert snap["max_objs_per_shard"] == 20
    assert buckets[near]["objects_per_shard"] == 19 and buckets[near]["fill_status"] == "WARN"
    assert buckets[small]["fill_status"] == "OK"
    # The human table shows the bucket's row with its status.
    text = _status(ceph_cluster, "--buckets", "10000", env={**os.environ, "COLUMNS": "200"}).stdout
    row = next(line for line in text.splitlines() if f" {near} " in line)
    assert "WARN" in row and "95.0%" in row


def test_unreachable_mon_is_one_line_within_the_timeout(ceph_cluster, tmp_path):
    conf = tmp_path / "ceph.conf"
    text = ceph_cluster.conf.read_text()
    conf.write_text(re.sub(r"mon_host = .*", "mon_host = v2:127.0.0.1:9", text))
    t0 = time.monotonic()
    proc = _status(ceph_cluster, "--conf", str(conf), "--timeout", "3")
    elapsed = time.monotonic() - t0
    assert proc.returncode == 1
    assert proc.stderr.strip().count("\n") == 0
    assert "no monitor answered within 3 s" in proc.stderr
    assert "Traceback" not in proc.stderr
    # Bounded, not a benchmark: without our timeouts librados would wait forever.
    assert elapsed < 30


def test_missing_keyring_is_one_line_and_exit_2(ceph_cluster, tmp_path):
    proc = _status(ceph_cluster, "--keyring", str(tmp_path / "none.keyring"))
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"rgwkeeper: error: keyring {tmp_path / 'none.keyring'} does not exist; pass --keyring PATH"


@pytest.mark.releases("tentacle", "reef", "pacific")
def test_status_shows_each_osds_op_queue_and_profile_and_which_checks_mean_load(ceph_cluster):
    from rgwkeeper import releases

    snap = _status_json(ceph_cluster)
    row = releases.behaviour(snap["release"])
    osds = [o["osd"] for o in ceph_cluster.ceph("osd", "dump")["osds"] if o["up"] == 1]
    per_osd = snap["derived"]["settings_by_osd"]
    assert sorted(int(o) for o in per_osd) == sorted(osds)
    for osd in osds:
        # The mgr's view of what each OSD runs, an answer independent of rgwkeeper's `tell ... config get`.
        shown = {o["name"]: o["value"] for o in ceph_cluster.ceph("config", "show-with-defaults", f"osd.{osd}")}
        assert per_osd[str(osd)]["osd_op_queue"] == shown["osd_op_queue"] == row.default_op_queue
        assert per_osd[str(osd)]["osd_mclock_profile"] == shown["osd_mclock_profile"]
    assert snap["derived"]["osd_settings"][0]["osds"] == sorted(osds)  # defaults everywhere: one group
    text = _status(ceph_cluster, "--buckets", "0", env={**os.environ, "COLUMNS": "200"}).stdout
    first, last = min(osds), max(osds)
    if row.default_op_queue == "mclock_scheduler":
        assert f"osd.{first}-{last}: mclock_scheduler, {per_osd[str(first)]['osd_mclock_profile']}," in text
    else:
        assert f"osd.{first}-{last}: wpq, osd_max_scrubs" in text and "balanced" not in text

    # Every check this release raises is in rgwkeeper's table, and status says which ones mean load.
    health = ceph_cluster.ceph("health", "detail")
    kinds = snap["derived"]["health_kinds"]
    for code in health["checks"]:
        assert code in releases.HEALTH_CODES, f"{snap['release']} raises {code}, which rgwkeeper does not classify"
    assert set(kinds) <= set(releases.HEALTH_CODES)
    health_line = next(line for line in text.splitlines() if line.startswith("health: "))
    for code, kind in kinds.items():
        assert (kind == releases.LOAD) == (code in snap["derived"]["load_checks"]) and code in health_line
    if snap["release"] == "tentacle":
        # The test cluster's client.admin keeps an aes key for the host's Pacific client.
        assert {"AUTH_INSECURE_CLIENT_KEY_TYPE", "AUTH_INSECURE_KEYS_ALLOWED"} <= set(kinds)
        assert kinds["AUTH_INSECURE_CLIENT_KEY_TYPE"] == releases.NOT_LOAD
    # BLUESTORE_SLOW_OP_ALERT comes with its options: Reef 18.2.5 and later have them, Pacific not.
    has_slow_op_alert = _config_help_exists(ceph_cluster, "bluestore_slow_ops_warn_lifetime")
    assert has_slow_op_alert == (row.major >= releases.RELEASES[releases.HEALTH_CODES[
        "BLUESTORE_SLOW_OP_ALERT"].since].major)


def _config_help_exists(ceph_cluster, option):
    try:
        ceph_cluster.ceph("config", "help", option)
    except RuntimeError as exc:
        assert "ENOENT" in str(exc) or "not" in str(exc).lower(), exc
        return False
    return True


# Tentacle only: rgwkeeper classifies the code, not the release; that Reef raises only codes
# rgwkeeper classifies is checked above on every release (the alert's own run took 75 s).
def test_a_real_bluestore_slow_op_alert_makes_status_say_not_quiet(ceph_cluster, s3, bucket_name, rgw_option):
    from rgwkeeper import releases

    snap = _status_json(ceph_cluster)
    if not _config_help_exists(ceph_cluster, "bluestore_slow_ops_warn_lifetime"):
        pytest.skip(f"{snap['release']} has no BLUESTORE_SLOW_OP_ALERT (Reef 18.2.5 and later)")
    # Every BlueStore op counts as slow, and a slow op is remembered for 20 s only: the alert
    # comes at once and is gone again before the next test.
    rgw_option("bluestore_slow_ops_warn_lifetime", "20", who="osd")
    rgw_option("bluestore_log_op_age", "0.000001", who="osd")
    s3.create_bucket(Bucket=bucket_name)
    deadline = time.monotonic() + 90
    while "BLUESTORE_SLOW_OP_ALERT" not in ceph_cluster.ceph("health", "detail")["checks"]:
        assert time.monotonic() < deadline, "no BLUESTORE_SLOW_OP_ALERT within 90 s"
        s3.put_object(Bucket=bucket_name, Key=f"k{time.monotonic_ns()}", Body=b"x" * 4096)
        time.sleep(2)
    snap = _status_json(ceph_cluster)
    assert "BLUESTORE_SLOW_OP_ALERT" in snap["derived"]["load_checks"]
    assert snap["derived"]["health_kinds"]["BLUESTORE_SLOW_OP_ALERT"] == releases.LOAD
    text = _status(ceph_cluster, "--buckets", "0", env={**os.environ, "COLUMNS": "200"}).stdout
    assert re.search(r"^health: load \(not quiet\): [A-Z_, ]*BLUESTORE_SLOW_OP_ALERT", text, re.M), text
    # Leave the cluster as found: ops are fast again, and the alert ages out within its lifetime.
    ceph_cluster.ceph("config", "rm", "osd", "bluestore_log_op_age")
    deadline = time.monotonic() + 120
    while "BLUESTORE_SLOW_OP_ALERT" in ceph_cluster.ceph("health", "detail")["checks"]:
        assert time.monotonic() < deadline, "BLUESTORE_SLOW_OP_ALERT still raised 120 s after ops were fast again"
        time.sleep(3)
