"""adapters/connect.py: the one place that builds the adapters from a cluster access."""

from __future__ import annotations

import pytest

from rgwkeeper.access import ClusterAccess
from rgwkeeper.adapters import connect
from rgwkeeper.adapters.connect import IF_CONFIGURED, NONE, REQUIRED, connected, open_adapters
from rgwkeeper.errors import UsageError


def _access(tmp_path, *, endpoint="http://rgw:8080", creds=True):
    path = None
    if creds:
        path = tmp_path / "creds"
        path.write_text('access_key = "AK"\nsecret_key = "s3cr3t"\n')
        path.chmod(0o600)
    return ClusterAccess(tmp_path / "ceph.conf", None, "client.admin", endpoint, path, timeout_s=7)


class _Rados:
    """Stands in for RadosAdapter: records connect and close, talks to nothing."""

    log: list[str] = []

    def __init__(self, access, max_workers=16):
        self.max_workers = max_workers
        _Rados.log.append(f"new {max_workers}")

    def connect(self):
        _Rados.log.append("connect")

    def close(self):
        _Rados.log.append("close")


@pytest.fixture(autouse=True)
def fake_rados(monkeypatch):
    _Rados.log = []
    monkeypatch.setattr(connect, "RadosAdapter", _Rados)


def test_required_rgw_without_an_endpoint_is_refused_before_librados_connects(tmp_path):
    with pytest.raises(UsageError, match="no RGW endpoint"):
        open_adapters(_access(tmp_path, endpoint=None), rgw=REQUIRED)
    with pytest.raises(UsageError, match="no RGW credentials"):
        open_adapters(_access(tmp_path, creds=False), rgw=REQUIRED)
    assert _Rados.log == []


def test_rgw_parts_are_built_when_configured_and_said_missing_otherwise(tmp_path):
    full = open_adapters(_access(tmp_path), rgw=IF_CONFIGURED, rados_workers=32)
    assert full.admin_api is not None and full.s3 is not None and full.rgw_note is None
    assert _Rados.log == ["new 32", "connect"]
    bare = open_adapters(_access(tmp_path, endpoint=None), connect=False)
    assert bare.admin_api is None and bare.s3 is None and "rgw.endpoint" in bare.rgw_note
    skipped = open_adapters(_access(tmp_path), rgw=NONE, connect=False)
    assert skipped.admin_api is None and skipped.s3 is None
    with pytest.raises(ValueError):
        open_adapters(_access(tmp_path), rgw="maybe")


def test_the_block_closes_librados_even_when_it_fails(tmp_path):
    with pytest.raises(RuntimeError):
        with connected(_access(tmp_path), rgw=NONE):
            raise RuntimeError("boom")
    assert _Rados.log == ["new 16", "connect", "close"]


def test_restore_and_pause_never_read_rgw_credentials(tmp_path, monkeypatch):
    """An unreadable RGW credentials file must not stop `rgwkeeper restore` from giving settings
    back: only `plan` (which reads buckets) opens the RGW side."""
    from rgwkeeper.cli import daemon as daemon_cli

    missing = ClusterAccess(tmp_path / "ceph.conf", None, "client.admin", "http://rgw:8080", tmp_path / "gone")
    assert open_adapters(missing, rgw=NONE, connect=False).s3 is None
    with pytest.raises(UsageError):
        open_adapters(missing, rgw=IF_CONFIGURED, connect=False)
    seen = []
    monkeypatch.setattr(daemon_cli, "open_adapters", lambda access, rgw: seen.append(rgw) or (_ for _ in ()).throw(
        RuntimeError("stop here")))
    monkeypatch.setattr(daemon_cli, "load_access", lambda kwargs: (None, missing))
    for rgw in (NONE, IF_CONFIGURED):
        with pytest.raises(RuntimeError):
            with (daemon_cli._Session({}) if rgw == NONE else daemon_cli._Session({}, rgw=rgw)):
                pass
    assert seen == [NONE, IF_CONFIGURED]
