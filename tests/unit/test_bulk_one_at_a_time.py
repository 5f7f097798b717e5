"""BulkObjects with a window of one: synchronous librados calls in turn, answering what the aio
path answered for each object (sizes, return codes, ENOENT); an object with a locator still goes
through aio on the located ioctx, its locator set and reset; full-try on removals; errors that
are not an operation's answer raise. A wider window stays on aio. The fake ioctx fails every
call it does not expect."""

from __future__ import annotations

import asyncio
import errno
from types import SimpleNamespace

import pytest

from rgwkeeper.access import ClusterAccess
from rgwkeeper.adapters.rados import BulkObjects, RadosAdapter
from rgwkeeper.errors import CephError

rados = pytest.importorskip("rados")


class StrictIoctx:
    """Objects by (locator, oid) with sizes. ``sync`` says which style of call is allowed; a
    call of the other style fails the test. A removal without full-try fails it too, as it
    would wait on a full cluster."""

    def __init__(self, objects: dict[tuple[str, str], int], sync: bool, log: list[str]) -> None:
        self.objects = objects
        self.sync = sync
        self.log = log
        self.full_try = False
        self.locator = ""

    def set_osdmap_full_try(self):
        self.full_try = True

    def set_locator_key(self, key):
        self.locator = key

    def _key(self, oid):
        return (self.locator, oid)

    def _allowed(self, sync):
        # At a window of one only an object with a locator goes through aio.
        expected = self.sync and not self.locator
        if sync != expected:
            raise AssertionError(f"{'a synchronous' if sync else 'an aio'} call was not expected")

    def _fail(self, oid):
        if oid == "eio":
            raise rados.IOError("RADOS I/O error", errno.EIO)
        if oid == "noerrno":
            raise rados.IoctxStateError("RADOS ioctx not open")

    def stat(self, oid):
        self._allowed(True)
        self.log.append(f"stat {self.locator}/{oid}")
        self._fail(oid)
        if self._key(oid) not in self.objects:
            raise rados.ObjectNotFound(f"RADOS object not found (stat {oid})", errno.ENOENT)
        return self.objects[self._key(oid)], 0.0

    def remove_object(self, oid):
        self._allowed(True)
        assert self.full_try, "a removal without full-try"
        self.log.append(f"remove {self.locator}/{oid}")
        self._fail(oid)
        if self.objects.pop(self._key(oid), None) is None:
            raise rados.ObjectNotFound(f"RADOS object not found (remove {oid})", errno.ENOENT)
        return True

    def aio_stat(self, oid, cb):
        self._allowed(False)
        self.log.append(f"aio_stat {self.locator}/{oid}")
        size = self.objects.get(self._key(oid))
        cb(SimpleNamespace(get_return_value=lambda: 0 if size is not None else -errno.ENOENT), size or 0, 0)

    def aio_remove(self, oid, oncomplete):
        self._allowed(False)
        self.log.append(f"aio_remove {self.locator}/{oid}")
        ret = 0 if self.objects.pop(self._key(oid), None) is not None else -errno.ENOENT
        oncomplete(SimpleNamespace(get_return_value=lambda: ret))

    def close(self):
        pass


class Cluster:
    def __init__(self, objects, sync):
        self.objects = objects
        self.sync = sync
        self.log: list[str] = []
        self.ioctxs: list[StrictIoctx] = []

    def connect(self, timeout=0):
        pass

    def shutdown(self):
        pass

    def open_ioctx(self, pool):
        if pool != "data":
            raise rados.ObjectNotFound(f"RADOS pool {pool} not found", errno.ENOENT)
        io = StrictIoctx(self.objects, self.sync, self.log)
        self.ioctxs.append(io)
        return io


@pytest.fixture
def bulk(tmp_path, request):
    sync = request.param
    cluster = Cluster({("", "a"): 10, ("", "b"): 20, ("loc", "_k"): 30}, sync)
    access = ClusterAccess(conf=tmp_path / "ceph.conf", keyring=None, client_name="client.admin",
                           rgw_endpoint=None, rgw_credentials_file=None, timeout_s=5)
    r = RadosAdapter(access, factory=lambda a: cluster)
    r.connect()
    try:
        yield BulkObjects(r, "data"), cluster
    finally:
        r.close()


@pytest.mark.parametrize("bulk, window", [(True, 1), (False, 4)], indirect=["bulk"])
def test_a_window_of_one_answers_what_the_aio_path_answers(bulk, window):
    data, cluster = bulk
    objs = [("a", ""), ("gone", ""), ("_k", "loc"), ("b", "")]
    assert asyncio.run(data.stat_many(objs, window=window)) == [10, None, 30, 20]
    assert asyncio.run(data.remove_many(objs, window=window)) == [0, -errno.ENOENT, 0, 0]
    assert cluster.objects == {}
    # The locator is set for its object only, and reset after it.
    assert all(io.locator == "" for io in cluster.ioctxs)
    prefix = "" if window == 1 else "aio_"
    assert cluster.log == [f"{prefix}stat /a", f"{prefix}stat /gone", "aio_stat loc/_k", f"{prefix}stat /b",
                           f"{prefix}remove /a", f"{prefix}remove /gone", "aio_remove loc/_k",
                           f"{prefix}remove /b"]


@pytest.mark.parametrize("bulk", [True], indirect=True)
def test_a_window_of_one_raises_on_an_error_other_than_a_missing_object(bulk):
    data, cluster = bulk
    with pytest.raises(CephError, match="data/eio stat.*EIO"):
        asyncio.run(data.stat_many([("a", ""), ("eio", ""), ("b", "")], window=1))
    assert cluster.log == ["stat /a", "stat /eio", "stat /b"]  # the batch is answered whole, as with aio
    # A removal's error is its answer, for the caller to judge (check_removed stops the purge).
    assert asyncio.run(data.remove_many([("eio", ""), ("a", "")], window=1)) == [-errno.EIO, 0]


@pytest.mark.parametrize("bulk", [True], indirect=True)
def test_an_error_that_is_no_operations_answer_raises_and_a_missing_pool_is_not_a_missing_object(bulk):
    data, cluster = bulk
    with pytest.raises(CephError, match="ioctx not open"):
        asyncio.run(data.remove_many([("noerrno", "")], window=1))
    # Before, a missing pool's ENOENT read as every head already gone, so nothing was removed and
    # the purge went on as if it had been.
    other = BulkObjects(data.rados, "no-such-pool")
    for call in (other.stat_many, other.remove_many):
        with pytest.raises(CephError, match="no-such-pool"):
            asyncio.run(call([("a", "")], window=1))
    assert cluster.objects[("", "a")] == 10
