"""Pytest fixtures for tests that need a real Ceph.

- ``ceph_cluster`` (session): the containerized cluster, booted once; or an existing one
  named by ``RGWKEEPER_TEST_CEPH_CONF`` & co. If it cannot start, the run stops with one
  line naming the step and the log file, and nothing is left running.
- ``cluster_access``: a :class:`rgwkeeper.access.ClusterAccess` for it.
- ``bucket_name``: a fresh, valid bucket name per test.
- ``s3``: a boto3 client as the admin user.
- ``rgw_option``: set an option in the mon config database for one test (for every client,
  or for ``who``, e.g. ``client.admin``).
- ``restart_rgw``: ``restart_rgw(down_s=3)`` stops the cluster's RGW and starts it again
  (the harness's own cluster only; skipped, and so reported, against an operator's cluster).
"""

from __future__ import annotations

import itertools
import os
import signal
import uuid
from typing import Any, Callable, Iterator

import pytest

from integration.cluster import ClusterInfo, ClusterOptions, ContainerCluster, control_dir, external_from_env
from integration.cluster import restart_rgw as _restart_rgw
from integration.errors import HarnessError

_counter = itertools.count(1)


def _sigterm_to_exit(signum: int, frame: Any) -> None:
    # Turn SIGTERM into what Ctrl-C gives: pytest ends the session and runs the session
    # finalizers, which remove the container and stop the engine. (A bare SIGTERM ends the
    # process with no cleanup; SystemExit would only fail the test that is running.)
    raise KeyboardInterrupt


@pytest.fixture(scope="session")
def ceph_cluster() -> Iterator[ClusterInfo]:
    try:
        external = external_from_env()
    except HarnessError as exc:
        pytest.exit(f"integration harness: {exc}", returncode=3)
    if external is not None:
        yield external
        return
    yield from booted_cluster(ClusterOptions(), "cluster")


def booted_cluster(options: ClusterOptions, what: str, *, fatal: bool = True) -> Iterator[ClusterInfo]:
    """Boot a containerized cluster for a fixture, stop it afterwards, also on SIGTERM. If it
    cannot start: ``fatal`` ends the session, else the fixture's tests error (one line)."""
    previous = signal.signal(signal.SIGTERM, _sigterm_to_exit)
    cluster = ContainerCluster(options)
    try:
        info = cluster.start()
    except HarnessError as exc:
        signal.signal(signal.SIGTERM, previous)
        if not fatal:
            pytest.fail(f"integration harness: {what}: {exc}", pytrace=False)
        pytest.exit(f"integration harness: {what}: {exc}", returncode=3)
    try:
        print(f"\n[harness] {what} ready in {cluster.timings.get('total_s', 0):.1f} s "
              f"({', '.join(f'{k}={v:.1f}' for k, v in cluster.timings.items())})")
        yield info
    finally:
        cluster.stop()
        signal.signal(signal.SIGTERM, previous)


def release_cluster(suite: str, release: str) -> Iterator[ClusterInfo]:
    """A module's own cluster of another release (e.g. ``"trixie", "Reef"``), booted beside the
    session's; skipped, and so reported, when the suite runs against an operator's cluster."""
    if os.environ.get("RGWKEEPER_TEST_CEPH_CONF"):
        pytest.skip(f"the {release} tests boot their own cluster; RGWKEEPER_TEST_CEPH_CONF names an external one")
    yield from booted_cluster(ClusterOptions(suite=suite), f"{release} cluster", fatal=False)


@pytest.fixture
def cluster_access(ceph_cluster: ClusterInfo) -> Any:
    from rgwkeeper.access import ClusterAccess

    return ClusterAccess(
        conf=ceph_cluster.conf, keyring=ceph_cluster.keyring, client_name="client.admin",
        rgw_endpoint=ceph_cluster.rgw_endpoint, rgw_credentials_file=ceph_cluster.credentials_file,
        timeout_s=20.0,
    )


@pytest.fixture
def bucket_name(request: pytest.FixtureRequest) -> str:
    stem = "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:30].strip("-")
    return f"t{next(_counter)}-{stem}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def s3(ceph_cluster: ClusterInfo) -> Any:
    import boto3
    from botocore.config import Config

    access, secret = ceph_cluster.credentials()
    return boto3.client(
        "s3", endpoint_url=ceph_cluster.rgw_endpoint, aws_access_key_id=access,
        aws_secret_access_key=secret, region_name="default",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 3},
                      max_pool_connections=32),
    )


@pytest.fixture
def rgw_option(ceph_cluster: ClusterInfo) -> Iterator[Callable[..., None]]:
    """Set an option in the mon config database, for every client (RGW and radosgw-admin) or
    for ``who`` (e.g. ``client.admin``: radosgw-admin and rgwkeeper only); removed afterwards."""
    touched: list[tuple[str, str]] = []

    def setter(name: str, value: str, who: str = "client") -> None:
        ceph_cluster.ceph("config", "set", who, name, value)
        touched.append((who, name))

    yield setter
    for who, name in touched:
        ceph_cluster.ceph("config", "rm", who, name)


@pytest.fixture
def restart_rgw(ceph_cluster: ClusterInfo) -> Callable[..., None]:
    if control_dir(ceph_cluster) is None:
        pytest.skip("restarting RGW needs the harness's containerized cluster, not an external one")

    def restart(down_s: float = 3.0) -> None:
        _restart_rgw(ceph_cluster, down_s=down_s)

    return restart


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("RGWKEEPER_SKIP_INTEGRATION") == "1":
        skip = pytest.mark.skip(reason="RGWKEEPER_SKIP_INTEGRATION=1")
        for item in items:
            if "integration" in item.keywords:
                item.add_marker(skip)
