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
