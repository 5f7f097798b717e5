"""A cancel (SIGTERM, Ctrl-C, the daemon's shutdown) is never dropped by a bounded wait, and a
bounded wait in cleanup after a cancel still times out (docs/architecture.md, "Bounded waits
keep a cancel").

On Python 3.11 ``asyncio.wait_for`` returns the result, and drops the cancel, when the cancel
lands in the loop turn its future completes: a purge told to stop by SIGTERM as one of its
librados calls answered went on purging. And 3.11's ``asyncio.timeout`` raises CancelledError,
not TimeoutError, when it expires in a task that caught a cancel before.
"""

from __future__ import annotations

import ast
import asyncio
import concurrent.futures
import sys
from pathlib import Path
from typing import Any, Awaitable, Callable

import pytest

from rgwkeeper.access import ClusterAccess
from rgwkeeper.adapters.rados import BulkObjects, RadosAdapter
from rgwkeeper.aio import bounded
from rgwkeeper.errors import CephTimeout

PACKAGE = Path(__file__).resolve().parents[2] / "rgwkeeper"


_UNBOUNDED = {"wait_for", "timeout", "timeout_at", "timeouts"}


def _asyncio_names(tree: ast.AST) -> set[str]:
    """The names a module binds to asyncio or one of its submodules (``import asyncio as aio``)."""
    names = {"asyncio"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.asname or a.name.split(".")[0] for a in node.names if a.name.split(".")[0] == "asyncio"}
    return names


def _root(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def test_every_bounded_wait_in_the_package_is_bounded():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = str(path.relative_to(PACKAGE.parent))
        tree = ast.parse(path.read_text(), where)
        asyncio_names = _asyncio_names(tree)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr in _UNBOUNDED and _root(node) in asyncio_names
                    and not (where == "rgwkeeper/aio.py" and node.attr == "timeout")):
                found.append(f"{where}:{node.lineno}: .{node.attr}")
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "asyncio":
                found += [f"{where}:{node.lineno}: from {node.module} import {a.name}" for a in node.names
                          if a.name in _UNBOUNDED]
    assert found == [], f"use rgwkeeper.aio.bounded: {found}"


def test_the_source_check_sees_each_way_of_writing_it(tmp_path, monkeypatch):
    for line in ("asyncio.wait_for(x, 1)", "import asyncio as aio\naio.timeout(1)", "asyncio.tasks.wait_for(x, 1)",
                 "from asyncio import timeout", "from asyncio.tasks import wait_for"):
        (tmp_path / "rgwkeeper").mkdir(exist_ok=True)
        (tmp_path / "rgwkeeper" / "m.py").write_text(line + "\n")
        monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "rgwkeeper")
        with pytest.raises(AssertionError, match="use rgwkeeper.aio.bounded"):
            test_every_bounded_wait_in_the_package_is_bounded()


def _in_task_that_caught_a_cancel(body: Callable[[], Awaitable[str]]) -> str:
    """``body``'s outcome, run as cleanup in a task that has caught a cancel (Ctrl-C, SIGTERM)."""
    async def task() -> str:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            return await body()
        return "never cancelled"

    async def main() -> str:
        t = asyncio.create_task(task())
        await asyncio.sleep(0)
        t.cancel()
        return await t

    return asyncio.run(main())


def test_bounded_times_out_in_cleanup_after_a_cancel():
    async def cleanup() -> str:
        try:
            async with bounded(0.05):
                await asyncio.sleep(3600)
        except TimeoutError:
            return "timed out"
        except asyncio.CancelledError:
            return "cancelled"
        return "finished"

    assert _in_task_that_caught_a_cancel(cleanup) == "timed out"


def test_bounded_lets_a_second_cancel_through_cleanup():
    async def main() -> str:
        async def task() -> str:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                async with bounded(3600):
                    await asyncio.sleep(3600)
            return "went on"

        t = asyncio.create_task(task())
        for _ in range(2):  # a Ctrl-C, then a second one during the cleanup
            await asyncio.sleep(0)
            t.cancel()
        try:
            return await t
        except asyncio.CancelledError:
            return "cancelled"

    assert asyncio.run(main()) == "cancelled"


def test_bounded_in_cleanup_passes_on_a_cancel_that_lands_with_its_deadline():
    # Counted from entry: a cancel from elsewhere, at the deadline, is still a cancel.
    async def main() -> str:
        async def task() -> str:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                try:
                    async with bounded(0.05) as b:
                        when = b.when()
                        assert when is not None
                        asyncio.get_running_loop().call_at(when, me.cancel)
                        await asyncio.sleep(3600)
                except TimeoutError:
                    return "timed out"
            return "went on"

        me = asyncio.create_task(task())
        await asyncio.sleep(0)
        me.cancel()
        try:
            return await me
        except asyncio.CancelledError:
            return "cancelled"

    assert asyncio.run(main()) == "cancelled"


def test_a_bounded_block_is_entered_once():
    async def main() -> None:
        b = bounded(1)
        async with b:
            pass
        async with b:
            pass

    with pytest.raises(RuntimeError, match="entered once"):
        asyncio.run(main())


def test_bounded_is_a_timeout_and_passes_a_cancel_on():
    async def wait(limit_s: float) -> str:
        try:
            async with bounded(limit_s):
                await asyncio.sleep(3600)
        except TimeoutError:
            return "timed out"
        return "finished"

    async def main() -> tuple[str, str]:
        t = asyncio.create_task(wait(3600))
        await asyncio.sleep(0)
        t.cancel()
        try:
            other = await t
        except asyncio.CancelledError:
            other = "cancelled"
        return await wait(0.05), other

    assert asyncio.run(main()) == ("timed out", "cancelled")


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


def test_a_mon_command_in_cleanup_after_a_cancel_times_out_as_a_timeout(tmp_path):
    # A full ratio given back after Ctrl-C, to a mon that does not answer: CephTimeout, which the
    # give-back reports ("run rgwkeeper restore"), not a CancelledError that skips the report.
    adapter = _adapter(tmp_path)
    adapter.submit = lambda *a, **k: concurrent.futures.Future()  # type: ignore[method-assign]

    async def give_back() -> str:
        try:
            await adapter.acommand({"prefix": "osd set-full-ratio", "ratio": 0.95}, timeout=0.01)
        except CephTimeout:
            return "CephTimeout"
        except asyncio.CancelledError:
            return "cancelled"
        return "answered"

    try:
        assert _in_task_that_caught_a_cancel(give_back) == "CephTimeout"
    finally:
        adapter.close()
