"""The daemon's SIGTERM path (daemon.service._serve) with a pass that runs a real child process.

Found by CI on Pacific: a SIGTERM that arrived while a pass was spawning radosgw-admin (a few
milliseconds of each pass) left the daemon waiting until its hard exit, and nothing was
restored. Shutdown cancelled every task, and one of them was asyncio's own spawn, which then
never returned (CPython gh-103847). Children are now started by adapters.child, and shutdown
still cancels only the pass.
"""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any

import structlog
import structlog.testing

from rgwkeeper.adapters.cephcli import subprocess_runner
from rgwkeeper.config import parse as parse_config
from rgwkeeper.daemon import service

MARKER = "29.0417"  # the child's argv, to find it in /proc


def _children() -> list[int]:
    """This process's children that run the marked child (other runs on the host are not ours)."""
    pids = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            ppid = int(next(line for line in (proc / "status").read_text().splitlines()
                            if line.startswith("PPid:")).split()[1])
            if ppid == os.getpid() and MARKER.encode() in (proc / "cmdline").read_bytes().split(b"\0"):
                pids.append(int(proc.name))
        except (OSError, StopIteration, ValueError):
            continue
    return pids


class Rados:
    async def drain(self, timeout_s: float) -> bool:
        return True


class Svc:
    """What _serve uses of a Service: a pass that spawns a child and is told to stop ``yields``
    loop turns after it started the spawn."""

    def __init__(self, yields: int) -> None:
        self.cfg = parse_config({"daemon": {"tick_s": 60.0, "lease_s": 180.0, "shutdown_timeout_s": 30.0}})
        self.instance_id = "t"
        self.shutdown = asyncio.Event()
        self.rados = Rados()
        self.pass_task: asyncio.Task[Any] | None = None
        self.yields = yields
        self.stopped_with: float | None = None

    async def tick(self) -> None:
        self.pass_task = asyncio.current_task()
        run = asyncio.ensure_future(subprocess_runner(["sleep", MARKER], 60))
        for _ in range(self.yields):
            await asyncio.sleep(0)
        self.shutdown.set()
        await run

    def watchdog_ok(self, now: float) -> bool:
        return True

    def monotonic(self) -> float:
        return 0.0

    async def stop(self, budget_s: float) -> None:
        self.stopped_with = budget_s


def test_sigterm_while_a_pass_spawns_a_child_stops_the_pass_restores_and_exits(monkeypatch):
    monkeypatch.setattr(service, "_hard_exit_timer", inert_timer)
    for yields in range(12):
        svc = Svc(yields)
        loop = NoSignals()
        result: list[int] = []
        # The loop runs in a thread of its own, so that a shutdown that never ends fails this test
        # instead of hanging it (and a shutdown that cancels every task cannot reach the test's).
        runner = threading.Thread(target=lambda: result.append(loop.run_until_complete(service._serve(svc))),
                                  daemon=True)
        runner.start()
        runner.join(25)
        assert not runner.is_alive(), f"shutdown never finished (told to stop {yields} loop turns into the spawn)"
        loop.close()
        assert result == [0]
        assert svc.pass_task is not None and svc.pass_task.done()  # stopped, not given up on
        assert svc.stopped_with is not None and svc.stopped_with > 0  # the restore ran, with time left
        assert _children() == []


class NoSignals(asyncio.SelectorEventLoop):
    """Signal handlers can be set in the main thread only; the test sets shutdown itself."""

    def add_signal_handler(self, sig: int, callback: Any, *args: Any) -> None:
        pass


class SlowToStop(Svc):
    """A pass whose clean-up after the cancel takes ``cleanup_s`` (an expiry giving back a raised
    full ratio), with no child process."""

    def __init__(self, cleanup_s: float, shutdown_timeout_s: float) -> None:
        super().__init__(0)
        self.cfg = parse_config({"daemon": {"tick_s": 60.0, "lease_s": 180.0,
                                            "shutdown_timeout_s": shutdown_timeout_s}})
        self.cleanup_s = cleanup_s
        self.cleaned_up = False

    async def tick(self) -> None:
        self.pass_task = asyncio.current_task()
        self.shutdown.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            await asyncio.sleep(self.cleanup_s)
            self.cleaned_up = True
            raise


def _serve_logged(svc: Svc) -> tuple[int, list[dict[str, Any]]]:
    loop = NoSignals()
    try:
        with structlog.testing.capture_logs() as logs:
            rc = loop.run_until_complete(service._serve(svc))  # type: ignore[arg-type]
    finally:  # a pass _serve gave up on is ended here, so nothing outlives the test
        left = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for t in left:
            t.cancel()
        if left:
            loop.run_until_complete(asyncio.wait(left))
        loop.close()
    return rc, logs


def inert_timer(*args: Any) -> threading.Timer:
    """The hard exit, disarmed: a hang must fail a test, not end pytest (and never keep it alive)."""
    t = threading.Timer(3600, lambda: None)
    t.daemon = True
    return t


def test_a_pass_slow_to_stop_is_waited_for_after_the_restore(monkeypatch):
    monkeypatch.setattr(service, "_hard_exit_timer", inert_timer)
    monkeypatch.setattr(service, "CANCEL_WAIT_S", 0.1)
    svc = SlowToStop(cleanup_s=0.5, shutdown_timeout_s=30.0)
    rc, logs = _serve_logged(svc)
    events = [e["event"] for e in logs]
    assert rc == 0 and svc.stopped_with is not None
    assert "the running pass did not stop when cancelled; restoring anyway" in events
    assert svc.cleaned_up and svc.pass_task is not None and svc.pass_task.done()
    assert not [e for e in events if e.startswith("the cancelled pass still runs at exit")]


def test_a_pass_that_outlives_the_budget_is_reported_in_one_line_at_exit(monkeypatch):
    monkeypatch.setattr(service, "_hard_exit_timer", inert_timer)
    monkeypatch.setattr(service, "CANCEL_WAIT_S", 0.1)
    svc = SlowToStop(cleanup_s=3600, shutdown_timeout_s=1.0)
    rc, logs = _serve_logged(svc)
    assert rc == 0 and svc.stopped_with is not None and not svc.cleaned_up
    assert [e for e in logs if e["event"].startswith("the cancelled pass still runs at exit") and
            "rgwkeeper restore" in e["event"]]
