"""The release-dependent paths against Tentacle (Debian sid's packages, 20.2.4 when measured),
on a third containerized cluster started for this module only.

The tests are test_purge's and test_status's own, collected here with this module's
`ceph_cluster`; radosgw-admin is Tentacle's, run inside the cluster's container
(`ClusterInfo.tools_dir`, put first on PATH for every test here, so test_status's direct calls
get it too). rgwkeeper itself talks to the cluster through the host's Pacific librados and
`ceph` CLI, as an operator's admin node that was not upgraded would. Against an operator's
cluster (RGWKEEPER_TEST_CEPH_CONF) this module is skipped, and so reported.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
from typing import Any, Callable, Iterator

import pytest

from integration.cluster import ClusterInfo
from integration.pytest_plugin import release_cluster
from tests.integration import test_purge, test_status
from tests.integration.test_daemon import wait_for
from tests.integration.test_purge import bucket_stats, cli, fill, radosgw_admin
from tests.integration.test_purge import (  # noqa: F401 - collected again, on Tentacle
    test_expire_by_prefix_deletes_exactly_the_matching_objects,
    test_expire_by_tag_deletes_exactly_the_tagged_objects,
    test_purge_by_prefix_through_lifecycle_restores_the_rules,
    test_versioned_bucket_with_delete_markers_and_uploads_is_purged_through_rgw,
)
from tests.integration.test_status import (  # noqa: F401 - collected again, on Tentacle
    test_a_bucket_near_the_lowered_shard_limit_is_flagged,
    test_fill_matches_ceph_df,
)


@pytest.fixture(scope="module")
def ceph_cluster() -> Iterator[ClusterInfo]:
    """This module's cluster: Tentacle, booted beside the session's Pacific one."""
    yield from release_cluster("sid", "Tentacle")


@pytest.fixture(autouse=True)
def _tentacle_radosgw_admin_first(ceph_cluster: ClusterInfo, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", ceph_cluster.env()["PATH"])


def _tentacle_copy(test: Callable[..., Any]) -> Callable[..., Any]:
    """The same test under its own name, with its parametrize marks only: marking the imported
    function itself would mark it in its own module (on Pacific) too."""

    @functools.wraps(test, updated=())
    def on_tentacle(*args: Any, **kwargs: Any) -> Any:
        return test(*args, **kwargs)

    for mark in getattr(test, "pytestmark", []):
        if mark.name == "parametrize":
            on_tentacle = pytest.mark.parametrize(*mark.args, **mark.kwargs)(on_tentacle)
    return on_tentacle


# The direct method on Tentacle drops the bucket another way than on Pacific and Reef
# (plan.DIRECT_DROP: its index emptied in place, then S3 DeleteBucket; docs/purge.md).
test_direct_purge_of_a_mixed_bucket_leaves_nothing_and_copies_read_back = _tentacle_copy(
    test_purge.test_direct_purge_of_a_mixed_bucket_leaves_nothing_and_copies_read_back)
test_interrupted_purge_resumes_to_completion = _tentacle_copy(test_purge.test_interrupted_purge_resumes_to_completion)
test_a_rate_capped_purge_finishes_clean_at_its_cap = _tentacle_copy(
    test_purge.test_a_rate_capped_purge_finishes_clean_at_its_cap)


def test_the_cluster_and_its_radosgw_admin_are_tentacle(ceph_cluster):
    versions = ceph_cluster.ceph("versions")
    assert all(" tentacle " in v for v in versions["overall"]), versions
    version = subprocess.run(["radosgw-admin", "--version"], capture_output=True, text=True, timeout=60,
                             env=ceph_cluster.env())
    assert version.returncode == 0 and " tentacle " in version.stdout, version.stdout + version.stderr


def test_spillover_is_reported_on_exactly_the_osds_health_detail_names(ceph_cluster):
    """test_status's check without its Pacific expectation: with the same 128 MiB DB files
    Tentacle reports no BLUEFS_SPILLOVER right after start (measured), Pacific on every OSD."""
    health = ceph_cluster.ceph("health", "detail")
    check = health["checks"].get("BLUEFS_SPILLOVER")
    named = sorted(int(m) for d in (check or {}).get("detail", [])
                   for m in re.findall(r"osd\.(\d+) spilled over", d["message"]))
    snap = test_status._status_json(ceph_cluster)
    assert snap["derived"]["spilled_osds"] == named
    assert ("BLUEFS_SPILLOVER" in snap["checks"]) == bool(named)


def test_the_plan_on_tentacle_names_its_release_and_allows_lifecycle(ceph_cluster, s3, bucket_name, tmp_path):
    b = bucket_name
    s3.create_bucket(Bucket=b)
    fill(s3, b, 5, size=512, prefix="tmp/")
    doc = json.loads(cli(ceph_cluster, tmp_path, "purge", b, "--dry-run", "--json").stdout)
    assert doc["profile"]["release"] == "tentacle" and doc["method"] == "direct"
    # Tentacle's drop (plan.DIRECT_DROP): the index emptied in place, then RGW deletes the bucket.
    assert any("rgw.bucket_init_index" in c for c in doc["commands"]), doc["commands"]
    assert f"S3 DeleteBucket bucket={b}" in doc["commands"]
    assert not any("metadata rm" in c for c in doc["commands"]), doc["commands"]
    doc = json.loads(cli(ceph_cluster, tmp_path, "purge", b, "--prefix", "tmp/", "--method", "lifecycle",
                         "--dry-run", "--json").stdout)
    assert doc["method"] == "lifecycle"
    assert any("lc process --bucket" in c for c in doc["commands"]), doc["commands"]
    assert bucket_stats(ceph_cluster, b)["usage"]["rgw.main"]["num_objects"] == 5  # a dry run


def _shards(cluster: ClusterInfo, bucket: str) -> tuple[int, int]:
    """(num_shards, min_num_shards) as Tentacle's `bucket layout` reads them."""
    proc = radosgw_admin(cluster, "bucket", "layout", "--bucket", bucket)
    assert proc.returncode == 0, proc.stderr[-2000:]
    normal = json.loads(proc.stdout)["layout"]["current_index"]["layout"]["normal"]
    return normal["num_shards"], normal["min_num_shards"]


def test_a_presharded_empty_bucket_keeps_its_shards_while_an_ordinary_one_is_reduced(
        ceph_cluster, s3, bucket_name, rgw_option, tmp_path):
    # RGW's bucket stats sync (every rgw_user_quota_bucket_sync_interval, 180 s, over the buckets
    # written since its last pass) queues a reduction when a bucket has under 1,000 objects per shard
    # (min(10,000, rgw_max_objs_per_shard / 100)), down to no fewer than 11 shards; the reshard thread
    # (every rgw_reshard_thread_interval, 10 s in the harness) runs it once
    # rgw_dynamic_resharding_reduction_wait hours (120; its minimum is 0) have passed since it was
    # queued. All three are read at runtime; the sync thread's current wait still runs out first.
    # docs/architecture.md, "Releases".
    rgw_option("rgw_dynamic_resharding_reduction_wait", "0")
    rgw_option("rgw_user_quota_bucket_sync_interval", "10")
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
