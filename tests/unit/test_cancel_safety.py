"""A cancel (SIGTERM, Ctrl-C, the daemon's shutdown) is never dropped by a bounded wait.

On Python 3.11 ``asyncio.wait_for`` returns the result, and drops the cancel, when the cancel
lands in the loop turn its future completes (docs/architecture.md, "Child processes"): a
purge told to stop by SIGTERM as one of its librados calls answered went on purging.
"""

from __future__ import annotations

import ast
import asyncio
import concurrent.futures
from pathlib import Path
from typing import Any, Awaitable, Callable

import pytest

from rgwkeeper.access import ClusterAccess
from rgwkeeper.adapters.rados import BulkObjects, RadosAdapter

PACKAGE = Path(__file__).resolve().parents[2] / "rgwkeeper"


def test_no_module_bounds_a_wait_with_wait_for():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Attribute) and node.attr == "wait_for" and isinstance(node.value, ast.Name)
                    and node.value.id == "asyncio"):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert found == [], f"asyncio.wait_for drops a cancel on 3.11; use `async with asyncio.timeout(...)`: {found}"


class _NoCluster:
    """Nothing may reach librados here: the calls under test are answered by the test."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"librados was reached: {name}")


def _adapter(tmp_path) -> RadosAdapter:
    access = ClusterAccess(conf=tmp_path / "ceph.conf", keyring=None, client_name="client.admin",
                           rgw_endpoint=None, rgw_credentials_file=None, timeout_s=5)
    return RadosAdapter(access, factory=lambda a: _NoCluster())  # type: ignore[arg-type,return-value]


def _cancel_as_it_answers(adapter: RadosAdapter, call: Callable[[], Awaitable[Any]], wrapped: list[Any]) -> str:
    """Run ``call`` with librados' answer and a cancel landing in the same loop turn."""
    answer: concurrent.futures.Future[Any] = concurrent.futures.Future()
    adapter.submit = lambda *a, **k: answer  # type: ignore[method-assign]

    async def main() -> str:
        task = asyncio.create_task(call())
        async with asyncio.timeout(10):
            while answer not in wrapped:  # the call has sent its request and waits for it
                await asyncio.sleep(0)
        for _ in range(3):
            await asyncio.sleep(0)
        answer.set_result({"answered": True})  # its copy into the loop is now scheduled
        asyncio.get_running_loop().call_soon(task.cancel)  # and the cancel right behind it
        try:
            return f"returned {await task!r}"
        except asyncio.CancelledError:
            return "cancelled"

    return asyncio.run(main())


@pytest.fixture
def wrapped(monkeypatch):
    """The concurrent futures the code under test waits on (asyncio.wrap_future's sources)."""
    sources: list[Any] = []
    real = asyncio.wrap_future

    def wrap(fut: Any, *, loop: Any = None) -> Any:
        sources.append(fut)
        return real(fut, loop=loop)

    monkeypatch.setattr(asyncio, "wrap_future", wrap)
    return sources


def test_a_mon_command_cancelled_as_it_answers_is_cancelled(tmp_path, wrapped):
    adapter = _adapter(tmp_path)
    try:
        call = lambda: adapter.acommand({"prefix": "versions"})  # noqa: E731
        assert _cancel_as_it_answers(adapter, call, wrapped) == "cancelled"
    finally:
        adapter.close()


def test_a_bulk_librados_call_cancelled_as_it_answers_is_cancelled(tmp_path, wrapped):
    adapter = _adapter(tmp_path)
    bulk = BulkObjects(adapter, "data")
    try:
        call = lambda: bulk.stat_many([("a", "")], window=1)  # noqa: E731
        assert _cancel_as_it_answers(adapter, call, wrapped) == "cancelled"
    finally:
        adapter.close()
