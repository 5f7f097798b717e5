"""The harness's RGW watch on the test side (integration/rgw_watch.py), run on a stand-in
``ceph_cluster`` whose tests write the records integration/bootstrap.sh writes when RGW dies."""

from __future__ import annotations

import json

import pytest

from integration import rgw_watch

pytest_plugins = ["pytester"]

CONFTEST = '''
import os, pytest
from pathlib import Path
from types import SimpleNamespace

RUN = Path(os.environ["STAND_IN_RUN"])


@pytest.fixture(scope="session")
def ceph_cluster(request):
    (RUN / "cluster" / "state").mkdir(parents=True, exist_ok=True)
    (RUN / "cluster" / "log").mkdir(parents=True, exist_ok=True)
    (RUN / "cluster" / "state" / "ready").touch()
    yield SimpleNamespace(log_dir=RUN / "cluster" / "log")


def die():
    """What bootstrap.sh records when RGW ends unasked."""
    state = RUN / "cluster" / "state"
    died = state / "rgw-died"
    n = len(died.read_text().splitlines()) + 1 if died.exists() else 1
    log = RUN / "cluster" / "log" / f"rgw-died-{n}.log"
    log.write_text("rgw pid 7 ended without being asked to: signal ABRT\\n"
                   "--- lines that may say why ---\\nFAILED ceph_assert(r == 0)\\n"
                   "--- end of its log ---\\n" + "x" * 3000 + "\\nthe last line\\n")
    with died.open("a") as f:
        f.write(f"1 7 /cluster/log/{log.name}\\n")


def attempt(name):
    counter = RUN / f"attempts-{name}"
    n = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(n))
    return n
'''

TESTS = '''
import pytest
from conftest import attempt, die


@pytest.fixture(scope="module")
def needs_rgw(ceph_cluster):
    if attempt("module-fixture") == 1:
        die()
        raise ConnectionRefusedError("RGW is not there")
    return "up"


def test_dies_once_while_the_call_fails(ceph_cluster):
    if attempt("once") == 1:
        die()
        raise ConnectionRefusedError("connection refused")


def test_dies_in_both_attempts(ceph_cluster):
    die()


def test_fails_without_a_death(ceph_cluster):
    assert attempt("plain") == 0


def test_kills_rgw_itself(ceph_cluster, request):
    request.node.expects_rgw_death = True
    die()


def test_a_fixture_met_the_dead_rgw(needs_rgw):
    assert needs_rgw == "up"


def test_without_the_cluster():
    pass
'''


def test_a_test_during_which_rgw_died_runs_again_once_and_is_listed(pytester, monkeypatch, tmp_path):
    for var in ("RGWKEEPER_TEST_RELEASE", "RGWKEEPER_TEST_DEBIAN_SUITE", "RGWKEEPER_TEST_CEPH_CONF"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("STAND_IN_RUN", str(tmp_path / "run-1"))
    monkeypatch.setenv("RGWKEEPER_TEST_MATRIX_JSON", str(tmp_path / "matrix.json"))
    monkeypatch.setattr(rgw_watch, "RUN_ROOT", tmp_path / "root")
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_watch=TESTS)

    result = pytester.runpytest("-p", "integration.pytest_plugin", "-p", "integration.rgw_watch", "-v", "-p",
                                "no:cacheprovider")

    outcomes = result.parseoutcomes()
    # Run again and passed: the failing call and the death; the fixture whose setup met the dead RGW.
    # Failed: a second death (at teardown, after a passing call), and a failure with no death.
    assert (outcomes.get("passed"), outcomes.get("failed"), outcomes.get("errors")) == (5, 1, 1)
    # Set aside: each first attempt once (its call; the fixture's attempt, its failed setup).
    assert outcomes.get("rerun") == 3
    result.stdout.fnmatch_lines([
        "*test_dies_once_while_the_call_fails?tentacle? RERUN*",
        "*test_dies_once_while_the_call_fails?tentacle? PASSED*",
        "*test_a_fixture_met_the_dead_rgw?tentacle? RERUN*",
        "*test_a_fixture_met_the_dead_rgw?tentacle? PASSED*",
    ])
    # The second death fails the test, with how RGW ended and the lines that say why.
    result.stdout.fnmatch_lines(["*ERROR at teardown of test_dies_in_both_attempts*",
                                 "*RGW (pid 7) ended during this test without being asked to*",
                                 "*signal ABRT*", "*FAILED ceph_assert(r == 0)*", "*the last line*"])
    doc = json.loads((tmp_path / "matrix.json").read_text())
    assert doc["tests"]["test_watch.py::test_dies_once_while_the_call_fails"] == {"tentacle": "passed"}
    assert doc["tests"]["test_watch.py::test_dies_in_both_attempts"] == {"tentacle": "error"}
    assert doc["tests"]["test_watch.py::test_fails_without_a_death"] == {"tentacle": "failed"}
    assert doc["tests"]["test_watch.py::test_kills_rgw_itself"] == {"tentacle": "passed"}
    assert [(r["test"], r["why"].split("(")[0]) for r in doc["reruns"]] == [
        (f"test_watch.py::{name}", "RGW died during its first attempt ")
        for name in ("test_a_fixture_met_the_dead_rgw", "test_dies_in_both_attempts",
                     "test_dies_once_while_the_call_fails")]
    assert all("signal ABRT" in r["why"] for r in doc["reruns"])
    assert doc["per_release"]["tentacle"]["reruns"] == 3
    result.stdout.fnmatch_lines(["tentacle: 3 passed, 1 failed, 1 error, 0 skipped, 3 run again*",
                                 "run again on tentacle: test_watch.py::test_dies_once_while_the_call_fails: "
                                 "RGW died during its first attempt (pid 7, signal ABRT; record: rgw-died-1.log)"])
    # Each record is kept under the run root, whole; the run directory goes at teardown.
    kept = sorted(p.name for p in (tmp_path / "root" / "rgw-deaths").iterdir())
    assert kept and all(name.startswith("run-1-rgw-died-") for name in kept)
    assert (tmp_path / "root" / "rgw-deaths" / kept[0]).read_text().endswith("the last line\n")
