import pytest


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "/tests/integration/" in str(item.fspath):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(autouse=True)
def _cluster_radosgw_admin_first(request, monkeypatch):
    """Tests that run radosgw-admin themselves get the cluster's own (its release's, run in its
    container) where it is not the host's Pacific, as rgwkeeper's own calls do through PATH.
    Only for tests that use the cluster: the others boot none."""
    if "ceph_cluster" in request.fixturenames:
        monkeypatch.setenv("PATH", request.getfixturevalue("ceph_cluster").env()["PATH"])


def rgw_deaths(state):
    """(pid, host path of the log tail) for each RGW end the cluster did not ask for."""
    died = state / "rgw-died"
    out = []
    for line in (died.read_text().splitlines() if died.exists() else []):
        _, pid, log = line.split(" ", 2)
        out.append((pid, state.parent / "log" / log.rsplit("/", 1)[-1]))
    return out


@pytest.fixture(autouse=True)
def _rgw_must_not_die(request):
    """A test during which the cluster's RGW ended without being asked (a crash) fails, with
    the end of RGW's log; the harness has started RGW again for the tests after it
    (integration/bootstrap.sh). Only the harness's own cluster can tell."""
    if "ceph_cluster" not in request.fixturenames:
        yield
        return
    from integration.cluster import control_dir

    state = control_dir(request.getfixturevalue("ceph_cluster"))
    before = len(rgw_deaths(state)) if state is not None else 0
    yield
    if state is None or getattr(request.node, "expects_rgw_death", False):
        return
    new = rgw_deaths(state)[before:]
    if new:
        pid, log = new[0]
        tail = log.read_text(errors="replace")[-3000:] if log.exists() else "(no log kept)"
        pytest.fail(f"RGW (pid {pid}) ended during this test without being asked to; the harness started it "
                    f"again. End of its log ({log}):\n{tail}", pytrace=False)
