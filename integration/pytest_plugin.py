"""Pytest fixtures for tests that need a real Ceph, and the release matrix.

- ``ceph_cluster`` (session, one per release): the containerized cluster of the test's release,
  booted once; or an existing one named by ``RGWKEEPER_TEST_CEPH_CONF`` & co. If it cannot
  start, the run stops with one line naming the step and the log file, and nothing is left
  running.
- ``cluster_access``: a :class:`rgwkeeper.access.ClusterAccess` for it.
- ``bucket_name``: a fresh, valid bucket name per test.
- ``s3``: a boto3 client as the admin user.
- ``rgw_option``: set an option in the mon config database for one test (for every client,
  or for ``who``, e.g. ``client.admin``).
- ``restart_rgw``: ``restart_rgw(down_s=3)`` stops the cluster's RGW and starts it again
  (the harness's own cluster only; skipped, and so reported, against an operator's cluster).

The release matrix (docs/testing.md): a test marked ``@pytest.mark.releases("tentacle", "reef",
"pacific")`` runs once per listed release, on that release's cluster; an unmarked test that uses
the cluster runs on the default release (Tentacle) only. Test ids carry the release
(``test_x[tentacle]``). ``ceph_cluster`` is parametrized per release at session scope, so pytest
orders the tests by release, boots each release's cluster once and stops it before the next one
boots. ``RGWKEEPER_TEST_RELEASE`` (or ``RGWKEEPER_TEST_DEBIAN_SUITE``) makes the session one
release only: its tests run, the other releases' are deselected. Against an external cluster the
session's one release is that cluster's, and tests marked only for other releases are skipped.
At the end, a "release matrix" summary (each test's outcome per release) is printed and written
as JSON to ``RGWKEEPER_TEST_MATRIX_JSON`` (default: ``release-matrix.json`` in the session's
basetemp).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import re
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from integration import image as image_mod
from integration.cluster import ClusterInfo, ClusterOptions, ContainerCluster, control_dir, external_from_env
from integration.cluster import restart_rgw as _restart_rgw
from integration.cluster import second_rgw as _second_rgw
from integration.errors import HarnessError

_counter = itertools.count(1)

#: The releases the matrix knows, in the order the summary shows them.
RELEASES = tuple(image_mod.RELEASE_SUITES)
# Worst first: a test's outcome on a release is the worst of its setup, call and teardown.
_OUTCOME_RANK = {"error": 0, "failed": 1, "passed": 3, "skipped": 2}


@dataclasses.dataclass
class Matrix:
    """The session's releases and what happened on each."""

    #: The release an unmarked test runs on.
    default: str
    #: The releases this session can run: all of RELEASES, or the one the environment or the
    #: external cluster picks.
    available: tuple[str, ...]
    #: Why a release outside ``available`` is not run (for skip reasons and the summary).
    narrowed_by: str = ""
    external: bool = False
    #: nodeid -> (the test's id without its release, release)
    items: dict[str, tuple[str, str]] = dataclasses.field(default_factory=dict)
    #: (test id without release, release) -> outcome
    outcomes: dict[tuple[str, str], str] = dataclasses.field(default_factory=dict)
    #: release -> boot count, seconds up, seconds to boot
    boots: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)
    #: (test id without release, release) -> why its first attempt was set aside and run again
    reruns: dict[tuple[str, str], str] = dataclasses.field(default_factory=dict)

    def record(self, nodeid: str, outcome: str) -> None:
        key = self.items.get(nodeid)
        if key is None:
            return
        old = self.outcomes.get(key)
        if old is None or _OUTCOME_RANK[outcome] < _OUTCOME_RANK[old]:
            self.outcomes[key] = outcome

    def rerun(self, nodeid: str, why: str) -> None:
        """Set aside what the test's attempt so far recorded: it runs again, and says why."""
        key = self.items.get(nodeid)
        if key is not None:
            self.outcomes.pop(key, None)
            self.reruns[key] = why


def note_rerun(config: pytest.Config, nodeid: str, why: str) -> None:
    matrix = config.stash.get(_MATRIX, None)
    if matrix is not None:
        matrix.rerun(nodeid, why)


_MATRIX = pytest.StashKey[Matrix]()


def _matrix(config: pytest.Config) -> Matrix:
    matrix = config.stash.get(_MATRIX, None)
    if matrix is None:
        matrix = config.stash[_MATRIX] = _make_matrix()
    return matrix


def _make_matrix() -> Matrix:
    try:
        external = external_from_env()
    except HarnessError as exc:
        pytest.exit(f"integration harness: {exc}", returncode=3)
    if external is not None:
        from rgwkeeper.snapshot import parse_release

        try:
            release, _ = parse_release(external.ceph("versions"))  # type: ignore[arg-type]
        except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as exc:
            pytest.exit(f"integration harness: external cluster: ceph versions: {exc}", returncode=3)
        return Matrix(default=release, available=(release,), external=True,
                      narrowed_by=f"the external cluster (RGWKEEPER_TEST_CEPH_CONF) runs {release}")
    chosen = image_mod.chosen_release()
    if chosen is None:
        return Matrix(default=image_mod.DEFAULT_RELEASE, available=RELEASES)
    return Matrix(default=chosen, available=(chosen,), narrowed_by=f"this session runs {chosen} only")


def pytest_configure(config: pytest.Config) -> None:
    chosen = image_mod.chosen_release()
    if chosen is not None and chosen not in RELEASES:
        raise pytest.UsageError(f"RGWKEEPER_TEST_RELEASE / RGWKEEPER_TEST_DEBIAN_SUITE names {chosen!r}; "
                                f"the test releases are {', '.join(RELEASES)} (suites "
                                f"{', '.join(image_mod.RELEASE_SUITES.values())})")
    config.addinivalue_line(
        "markers", "releases(*names): run the test once on each named release's cluster "
        "(tentacle, reef, pacific); unmarked integration tests run on the default release only")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "ceph_cluster" not in metafunc.fixturenames:
        return
    mark = metafunc.definition.get_closest_marker("releases")
    matrix = _matrix(metafunc.config)
    wanted = tuple(mark.args) if mark else (matrix.default,)
    unknown = [r for r in wanted if r not in RELEASES]
    if unknown or not wanted:
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: releases{wanted} names no release or an unknown "
                                f"one; the test releases are {', '.join(RELEASES)}")
    if matrix.external:
        # One run on the external cluster: under its own release if the test lists it.
        wanted = (matrix.default,) if matrix.default in wanted else wanted[:1]
    metafunc.parametrize("ceph_cluster", wanted, indirect=True, scope="session", ids=wanted)


def _select_releases(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect (or, against an external cluster, skip) the tests of releases the session does
    not have; remember every other test's release for the summary."""
    matrix = config.stash.get(_MATRIX, None)
    if matrix is None:
        return  # nothing uses the cluster
    keep, deselected = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        release = callspec.params.get("ceph_cluster") if callspec is not None else None
        if release is None:
            keep.append(item)
            continue
        if release not in matrix.available:
            if matrix.external:
                item.add_marker(pytest.mark.skip(reason=f"runs on {release} only; {matrix.narrowed_by}"))
            else:
                deselected.append(item)
                continue
        keep.append(item)
        matrix.items[item.nodeid] = (_without_release(item.nodeid, release), release)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = keep


def _without_release(nodeid: str, release: str) -> str:
    """``m.py::test_x[tentacle-5]`` -> ``m.py::test_x[5]``; ``m.py::test_x[reef]`` -> ``m.py::test_x``."""
    head, bracket, params = nodeid.partition("[")
    if not bracket:
        return nodeid
    rest = re.sub(rf"(^|-){re.escape(release)}(?=-|\]$)", "", params, count=1).lstrip("-")
    return head if rest == "]" else f"{head}[{rest}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    report = yield
    matrix = item.config.stash.get(_MATRIX, None)
    if matrix is not None:
        if report.failed:
            matrix.record(report.nodeid, "failed" if report.when == "call" else "error")
        elif report.skipped:
            matrix.record(report.nodeid, "skipped")
        elif report.when == "call":
            matrix.record(report.nodeid, "passed")
    return report


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    matrix = config.stash.get(_MATRIX, None)
    if matrix is None or not matrix.outcomes:
        return
    doc = matrix_document(matrix)
    path = Path(os.environ.get("RGWKEEPER_TEST_MATRIX_JSON")
                or config._tmp_path_factory.getbasetemp() / "release-matrix.json")  # type: ignore[attr-defined]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    tr = terminalreporter
    tr.section("release matrix")
    for line in summary_lines(doc):
        tr.write_line(line)
    tr.write_line(f"written to {path}")


def matrix_document(matrix: Matrix) -> dict[str, Any]:
    """The summary as data: per release the counts, per test the outcome on each release."""
    tests: dict[str, dict[str, str]] = {}
    for (test, release), outcome in sorted(matrix.outcomes.items()):
        tests.setdefault(test, {})[release] = outcome
    per_release: dict[str, dict[str, Any]] = {}
    for (_, release), outcome in matrix.outcomes.items():
        counts = per_release.setdefault(release, {"passed": 0, "failed": 0, "error": 0, "skipped": 0})
        counts[outcome] += 1
    for (_, release), _why in matrix.reruns.items():
        counts = per_release.setdefault(release, {"passed": 0, "failed": 0, "error": 0, "skipped": 0})
        counts["reruns"] = counts.get("reruns", 0) + 1
    for release, boot in matrix.boots.items():
        per_release.setdefault(release, {}).update(
            {"cluster_boots": int(boot["count"]), "boot_s": round(boot["boot_s"], 1), "up_s": round(boot["up_s"], 1)})
    return {"default": matrix.default, "releases": [r for r in RELEASES if r in per_release],
            "external": matrix.external, "per_release": per_release, "tests": tests,
            "reruns": [{"test": t, "release": r, "why": why} for (t, r), why in sorted(matrix.reruns.items())]}


def summary_lines(doc: dict[str, Any]) -> list[str]:
    releases = doc["releases"]
    out = []
    for release in releases:
        r = doc["per_release"][release]
        boot = (f"; cluster booted {r['cluster_boots']}x ({r['boot_s']:.0f} s to boot, up {r['up_s']:.0f} s)"
                if "cluster_boots" in r else "")
        reruns = f", {r['reruns']} run again" if r.get("reruns") else ""
        out.append(f"{release}: {r.get('passed', 0)} passed, {r.get('failed', 0)} failed, {r.get('error', 0)} error, "
                   f"{r.get('skipped', 0)} skipped{reruns}{boot}")
        if r.get("cluster_boots", 1) > 1:
            out.append(f"  {release}'s cluster was booted more than once: the tests were not grouped by release")
    # Each test that ran on more than one release, and every test that did not pass.
    width = max(len(r) for r in releases)
    shown = {t: o for t, o in doc["tests"].items()
             if len(o) > 1 or any(v not in ("passed", "skipped") for v in o.values())}
    if shown:
        out.append("per test (" + ", ".join(releases) + "):")
    for test, outcomes in shown.items():
        cells = " ".join(f"{outcomes.get(r, '-'):<{max(width, 7)}}" for r in releases)
        out.append(f"  {cells}  {test}")
    for rerun in doc.get("reruns", []):
        out.append(f"run again on {rerun['release']}: {rerun['test']}: {rerun['why']}")
    return out


def _sigterm_to_exit(signum: int, frame: Any) -> None:
    # Turn SIGTERM into what Ctrl-C gives: pytest ends the session and runs the session
    # finalizers, which remove the container and stop the engine. (A bare SIGTERM ends the
    # process with no cleanup; SystemExit would only fail the test that is running.)
    raise KeyboardInterrupt


@pytest.fixture(scope="session")
def ceph_cluster(request: pytest.FixtureRequest) -> Iterator[ClusterInfo]:
    """The cluster of the test's release (its ``releases`` param; see the module's docstring)."""
    matrix = _matrix(request.config)
    release = getattr(request, "param", matrix.default)
    if matrix.external:
        external = external_from_env()
        assert external is not None
        yield dataclasses.replace(external, release=matrix.default)
        return
    boot = matrix.boots.setdefault(release, {"count": 0, "boot_s": 0.0, "up_s": 0.0})
    boot["count"] += 1
    started = time.monotonic()
    clusters = booted_cluster(ClusterOptions(suite=image_mod.suite_of(release)), f"{release} cluster")
    try:
        info = next(clusters)
        boot["boot_s"] += time.monotonic() - started
        yield info
    finally:
        clusters.close()
        boot["up_s"] += time.monotonic() - started


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


@pytest.fixture(scope="module")
def second_rgw(ceph_cluster: ClusterInfo) -> Iterator[str]:
    """A second RGW of the cluster's zone for the tests of a module (its endpoint), stopped after
    them (it takes 20-30 s to start)."""
    if control_dir(ceph_cluster) is None or not ceph_cluster.rgw2_endpoint:
        pytest.skip("a second RGW needs the harness's containerized cluster, not an external one")
    with _second_rgw(ceph_cluster) as endpoint:
        yield endpoint


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _select_releases(config, items)
    if os.environ.get("RGWKEEPER_SKIP_INTEGRATION") == "1":
        skip = pytest.mark.skip(reason="RGWKEEPER_SKIP_INTEGRATION=1")
        for item in items:
            if "integration" in item.keywords:
                item.add_marker(skip)
