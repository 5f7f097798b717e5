"""The integration harness's release matrix (integration/pytest_plugin.py), run on a stand-in
``ceph_cluster`` that records its boots instead of booting Ceph."""

from __future__ import annotations

import json

import pytest

pytest_plugins = ["pytester"]

CONFTEST = '''
import json, os, pytest
from integration.cluster import ClusterInfo

BOOTS = []
LIVE = []

@pytest.fixture(scope="session")
def ceph_cluster(request):
    release = request.param
    LIVE.append(release)
    BOOTS.append((release, len(LIVE)))
    yield release
    LIVE.remove(release)
    with open(os.environ["BOOT_LOG"], "w") as f:
        json.dump(BOOTS, f)
'''

TESTS = '''
import pytest

@pytest.mark.releases("tentacle", "reef", "pacific")
def test_everywhere(ceph_cluster):
    pass

def test_default_only(ceph_cluster):
    assert ceph_cluster == "tentacle"

@pytest.mark.releases("pacific")
def test_pacific_only(ceph_cluster):
    assert ceph_cluster == "pacific"

@pytest.mark.releases("reef", "pacific")
@pytest.mark.parametrize("method", ["s3", "direct"])
def test_with_params(ceph_cluster, method):
    assert not (ceph_cluster == "reef" and method == "direct")

@pytest.mark.releases("tentacle", "pacific")
def test_second(ceph_cluster):
    pass

def test_no_cluster():
    pass
'''


@pytest.fixture
def matrix_run(pytester, monkeypatch, tmp_path):
    for var in ("RGWKEEPER_TEST_RELEASE", "RGWKEEPER_TEST_DEBIAN_SUITE", "RGWKEEPER_TEST_CEPH_CONF"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("BOOT_LOG", str(tmp_path / "boots.json"))
    monkeypatch.setenv("RGWKEEPER_TEST_MATRIX_JSON", str(tmp_path / "matrix.json"))
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_matrix=TESTS)

    def run(*args):
        result = pytester.runpytest("-p", "integration.pytest_plugin", "-v", *args)
        boots = json.loads((tmp_path / "boots.json").read_text()) if (tmp_path / "boots.json").exists() else []
        doc = json.loads((tmp_path / "matrix.json").read_text()) if (tmp_path / "matrix.json").exists() else None
        return result, boots, doc

    return run


def test_each_release_runs_its_tests_on_one_cluster_booted_once(matrix_run):
    result, boots, doc = matrix_run()
    result.assert_outcomes(passed=11, failed=1)
    # Grouped by release: each boots once, and never two at a time.
    assert sorted(r for r, _ in boots) == ["pacific", "reef", "tentacle"]
    assert all(live == 1 for _, live in boots)
    result.stdout.fnmatch_lines([
        "*test_everywhere?tentacle? PASSED*", "*test_with_params?reef-direct? FAILED*",
        "*release matrix*", "tentacle: 3 passed, 0 failed, 0 error, 0 skipped",
        "reef: 2 passed, 1 failed, 0 error, 0 skipped", "pacific: 5 passed, 0 failed, 0 error, 0 skipped",
        "per test (tentacle, reef, pacific):",
    ])
    assert doc["default"] == "tentacle" and doc["releases"] == ["tentacle", "reef", "pacific"]
    assert doc["tests"]["test_matrix.py::test_everywhere"] == dict.fromkeys(("tentacle", "reef", "pacific"), "passed")
    assert doc["tests"]["test_matrix.py::test_with_params[direct]"] == {"reef": "failed", "pacific": "passed"}
    assert doc["tests"]["test_matrix.py::test_default_only"] == {"tentacle": "passed"}
    assert "test_matrix.py::test_no_cluster" not in doc["tests"]


def test_one_release_deselects_the_others(matrix_run, monkeypatch):
    monkeypatch.setenv("RGWKEEPER_TEST_RELEASE", "pacific")
    result, boots, doc = matrix_run()
    # Unmarked tests run on the chosen release; tests marked only for others are deselected.
    result.assert_outcomes(passed=6, failed=1, deselected=5)
    assert boots == [["pacific", 1]]
    assert doc["releases"] == ["pacific"]
    assert doc["tests"]["test_matrix.py::test_default_only"] == {"pacific": "failed"}  # it asserts Tentacle


def test_the_older_suite_variable_still_chooses(matrix_run, monkeypatch):
    monkeypatch.setenv("RGWKEEPER_TEST_DEBIAN_SUITE", "trixie")
    result, boots, _ = matrix_run("-k", "everywhere")
    result.assert_outcomes(passed=1, deselected=11)
    assert boots == [["reef", 1]]


def test_an_unknown_release_is_one_line(matrix_run, monkeypatch):
    monkeypatch.setenv("RGWKEEPER_TEST_RELEASE", "squid")
    result, boots, _ = matrix_run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR and boots == []
    result.stderr.fnmatch_lines(["*RGWKEEPER_TEST_RELEASE*names 'squid'*tentacle, reef, pacific*"])
