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
from tests.integration.test_purge import bucket_stats, cli, fill
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
