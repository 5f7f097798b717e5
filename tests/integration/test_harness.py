"""The harness really runs Ceph: S3 writes land in RADOS, spillover is real, failures are clean."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from integration import engine as engine_mod
from integration.cluster import CACHE_DIR, LABEL, ClusterInfo, ClusterOptions, ContainerCluster
from integration.errors import HarnessError


def test_s3_object_lands_in_the_rados_data_pool(ceph_cluster, s3, bucket_name):
    import rados

    body = b"rgwkeeper-harness-" + bucket_name.encode() * 10
    s3.create_bucket(Bucket=bucket_name)
    s3.put_object(Bucket=bucket_name, Key="probe/object-1", Body=body)

    cluster = rados.Rados(conffile=str(ceph_cluster.conf), name="client.admin",
                          conf={"keyring": str(ceph_cluster.keyring), "rados_osd_op_timeout": "20",
                                "rados_mon_op_timeout": "20", "client_mount_timeout": "20"})
    cluster.connect()
    try:
        ioctx = cluster.open_ioctx("default.rgw.buckets.data")
        try:
            # RGW names a head object <bucket marker>_<key>; small objects live in the head.
            heads = [o.key for o in ioctx.list_objects() if o.key.endswith("_probe/object-1")]
            data = [ioctx.read(k, length=len(body) + 16) for k in heads]
        finally:
            ioctx.close()
    finally:
        cluster.shutdown()
    assert body in data


# Only Pacific reports BLUEFS_SPILLOVER on the harness's 128 MiB DB files (docs/testing.md).
@pytest.mark.releases("pacific")
def test_bluefs_spillover_is_seen_from_the_host(ceph_cluster):
    if ceph_cluster.external:
        pytest.skip("spillover is a property of the containerized cluster's 128 MiB DB devices")
    health = ceph_cluster.ceph("health", "detail")
    assert "BLUEFS_SPILLOVER" in health["checks"]
    assert health["checks"]["BLUEFS_SPILLOVER"]["summary"]["count"] == 3


@pytest.mark.releases("tentacle", "reef", "pacific")
def test_the_cluster_and_its_radosgw_admin_are_its_release(ceph_cluster):
    """The matrix really runs each release, and radosgw-admin on PATH is the cluster's own."""
    versions = ceph_cluster.ceph("versions")
    assert all(f" {ceph_cluster.release} " in v for v in versions["overall"]), versions
    version = subprocess.run(["radosgw-admin", "--version"], capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and f" {ceph_cluster.release} " in version.stdout, version.stdout + version.stderr


def test_host_radosgw_admin_reaches_the_cluster(ceph_cluster):
    proc = subprocess.run(
        ["radosgw-admin", "--conf", str(ceph_cluster.conf), "--keyring", str(ceph_cluster.keyring),
         "user", "info", "--uid", "rgwkeeper-admin"], capture_output=True, text=True, timeout=60, check=True)
    caps = {c["type"]: c["perm"] for c in json.loads(proc.stdout)["caps"]}
    assert caps["buckets"] == "*" and caps["usage"] == "*"


def test_a_failed_bootstrap_names_the_step_and_log_and_leaves_nothing(ceph_cluster):
    if ceph_cluster.external:
        pytest.skip("exercises the container harness")
    cluster = ContainerCluster(ClusterOptions(fail_at_step="osds"))
    with pytest.raises(HarnessError) as exc:
        cluster.start()
    msg = str(exc.value)
    assert msg.startswith("cluster bootstrap failed:") and '"osds"' in msg
    assert "\n" not in msg
    log = exc.value.log
    assert log is not None and log.exists() and "injected failure at osds" in log.read_text()
    # No container of that run is left, and only its logs remain on disk.
    eng = engine_mod.find_or_start(CACHE_DIR)
    try:
        client = eng.client()
        left = [c for c in client.containers.list(all=True, filters={"label": LABEL})
                if c.labels.get("io.rgwkeeper.test.run-dir") == str(cluster.run_dir)]
        client.close()
    finally:
        eng.stop()
    assert left == []
    assert not (cluster.run_dir / "cluster" / "data").exists()
    remaining = {p.name for p in (cluster.run_dir / "cluster").iterdir()}
    assert remaining == {"log"}


def test_a_ceph_error_that_prints_the_key_does_not_carry_it(tmp_path, monkeypatch):
    """A Pacific client given a Tentacle keyring prints the key in its error (docs/testing.md,
    "Tentacle"); the harness's error text must not. Needs no cluster: a stand-in `ceph`."""
    key = "AgC+jgRrKpALNCAAg97ZbWT5nXsFlyUSXxo+kZupnLz+E3Tm+XUq594GlB4="
    fake = tmp_path / "bin" / "ceph"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho \"auth: error parsing file k: error setting modifier for [client.admin] "
                    f"type=key val={key}: Malformed input\" >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    info = ClusterInfo(conf=tmp_path / "ceph.conf", keyring=tmp_path / "k", rgw_endpoint="http://127.0.0.1:9",
                       credentials_file=tmp_path / "creds", external=True)
    with pytest.raises(RuntimeError) as exc:
        info.ceph("osd", "stat")
    assert "Malformed input" in str(exc.value) and key not in str(exc.value) and key[:16] not in str(exc.value)


def test_an_rgw_that_dies_is_recorded_and_started_again(ceph_cluster, s3, bucket_name, request):
    """The harness's watch on RGW: a crash (here a SIGKILL) is recorded with the end of RGW's
    log and RGW is started again, so the test it happened in can fail saying so and the tests
    after it still have an RGW."""
    import time

    from integration.cluster import control_dir
    from integration.rgw_watch import rgw_deaths

    state = control_dir(ceph_cluster)
    if state is None:
        pytest.skip("only the harness's own cluster watches its RGW")
    request.node.expects_rgw_death = True
    before = len(rgw_deaths(state))
    pid = (state / "rgw.pid").read_text().strip()
    engine = engine_mod.find_or_start(CACHE_DIR)
    try:
        subprocess.run(["docker", "-H", engine.base_url, "exec", ceph_cluster.container_id, "kill", "-KILL", pid],
                       check=True, capture_output=True, timeout=60)
    finally:
        engine.stop()
    deadline = time.monotonic() + 90
    while len(rgw_deaths(state)) == before or (state / "rgw.pid").read_text().strip() == pid:
        assert time.monotonic() < deadline, "the harness did not see RGW end"
        time.sleep(0.2)
    died_pid, log = rgw_deaths(state)[before]
    assert died_pid == pid and log.exists() and log.stat().st_size > 0
    assert log.read_text().splitlines()[0].endswith(": signal KILL")  # how it ended, from its exit status
    while True:
        try:
            s3.create_bucket(Bucket=bucket_name)
            break
        except Exception:  # noqa: BLE001 - RGW still starting: connection refused
            assert time.monotonic() < deadline, "RGW did not answer again"
            time.sleep(0.5)
    assert s3.head_bucket(Bucket=bucket_name)["ResponseMetadata"]["HTTPStatusCode"] == 200

