"""The release-dependent purge paths against Reef (Debian trixie's packages, 18.2.7 when
measured), on a second containerized cluster started for this module only.

Pacific's `radosgw-admin lc process --bucket` ignores `--bucket` (tracker 53430), so there
`expire` and `purge --method lifecycle` work from a listing; from Quincy on they run the
bucket's lifecycle now and read its `lc list` entry back. That read-back was written from the
source and unit-tested only until this module ran it against Reef: the single-bucket run never
stamps `started` (only the all-shards run does), so every real run was taken for one skipped
by another LC worker. The direct method's head layout and metadata removal are checked here on
Reef as well (it is refused on releases where they were not).

The tests are test_purge's own, collected here with this module's `ceph_cluster`; radosgw-admin
is Reef's, run inside the cluster's container (`ClusterInfo.tools_dir`). Against an operator's
cluster (RGWKEEPER_TEST_CEPH_CONF) this module is skipped, and so reported.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from typing import Iterator

import pytest

from integration.cluster import ClusterInfo
from integration.pytest_plugin import release_cluster
from tests.integration.test_purge import bucket_stats, bucket_with_their_rule, cli, cli_argv, fill
from tests.integration.test_purge import (  # noqa: F401 - collected again, on Reef
    test_direct_purge_of_a_mixed_bucket_leaves_nothing_and_copies_read_back,
    test_expire_by_prefix_deletes_exactly_the_matching_objects,
    test_expire_by_tag_deletes_exactly_the_tagged_objects,
    test_interrupted_purge_resumes_to_completion,
    test_purge_by_prefix_through_lifecycle_restores_the_rules,
    test_versioned_bucket_with_delete_markers_and_uploads_is_purged_through_rgw,
)


@pytest.fixture(scope="module")
def ceph_cluster() -> Iterator[ClusterInfo]:
    """This module's cluster: Reef, booted beside the session's Pacific one."""
    yield from release_cluster("trixie", "Reef")


def test_the_cluster_and_its_radosgw_admin_are_reef(ceph_cluster):
    versions = ceph_cluster.ceph("versions")
    assert all(" reef " in v for v in versions["overall"]), versions
    version = subprocess.run(["radosgw-admin", "--version"], capture_output=True, text=True, timeout=60,
                             env=ceph_cluster.env())
    assert version.returncode == 0 and " reef " in version.stdout, version.stdout + version.stderr


def test_the_plan_on_reef_names_its_release_and_allows_lifecycle(ceph_cluster, s3, bucket_name, tmp_path):
    b = bucket_name
    s3.create_bucket(Bucket=b)
    fill(s3, b, 5, size=512, prefix="tmp/")
    doc = json.loads(cli(ceph_cluster, tmp_path, "purge", b, "--dry-run", "--json").stdout)
    assert doc["method"] == "direct" and doc["profile"]["release"] == "reef"
    assert any("not measured on reef" in r for r in [*doc["reasons"], *(w for _, w in doc["rejected"])])
    doc = json.loads(cli(ceph_cluster, tmp_path, "purge", b, "--prefix", "tmp/", "--method", "lifecycle",
                         "--dry-run", "--json").stdout)
    assert doc["method"] == "lifecycle"
    assert any("lc process --bucket" in c for c in doc["commands"]), doc["commands"]
    assert bucket_stats(ceph_cluster, b)["usage"]["rgw.main"]["num_objects"] == 5  # a dry run


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
