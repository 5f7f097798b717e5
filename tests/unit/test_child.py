"""adapters.child: child processes that a cancel cannot strand, with real processes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
import subprocess
import sys
import textwrap
import time
import types

import pytest
import structlog.testing

from rgwkeeper.adapters import child as child_mod
from rgwkeeper.adapters.child import DEVNULL, run_child
from rgwkeeper.loadgen.runner import RunHandle
from rgwkeeper.loadgen.verify import Maintenance

# The caller's loop ends 0 to 5 iterations after the run started: asyncio.run's teardown then
# cancels it, and everything it started, while it is still starting the child. With
# asyncio.create_subprocess_exec this hung for good at 0 to 4 on Python 3.11 (cpython#125502);
# a hang here is a TimeoutExpired, not a stuck test session.
_TEARDOWN = textwrap.dedent("""
    import asyncio, os
    from rgwkeeper.adapters.cephcli import subprocess_runner

    class Boom(Exception):
        pass

    async def main(turns):
        asyncio.get_running_loop().create_task(subprocess_runner(["sleep", "30"], 60, cancel_grace_s=0.5))
        for _ in range(turns):
            await asyncio.sleep(0)
        raise Boom

    for turns in range(6):
        try:
            asyncio.run(main(turns))
        except Boom:
            pass
        try:
            left = os.waitpid(-1, os.WNOHANG)  # a child still running, or exited and not reaped
        except ChildProcessError:
            left = "none"
        print(turns, "children left:", left, flush=True)
""")


@pytest.fixture
def started(monkeypatch):
    """The children run_child starts (the real Popen, recorded)."""
    procs: list[subprocess.Popen[bytes]] = []

    def popen(*args, **kwargs):
        procs.append(subprocess.Popen(*args, **kwargs))
        return procs[-1]

    monkeypatch.setattr(child_mod, "_popen", popen)
    return procs


@pytest.fixture(params=["pidfd", "thread"])
def exit_watch(request, monkeypatch):
    """Both ways the loop learns a child exited: its pidfd, or (a kernel without pidfds) a
    thread waiting with WNOWAIT."""
    if request.param == "thread":
        monkeypatch.setattr(child_mod, "_pidfd", lambda pid: None)
    return request.param


def _reaped(proc: subprocess.Popen[bytes]) -> bool:
    """Gone and reaped: no zombie left, and its exit seen by Popen."""
    try:
        os.waitpid(proc.pid, os.WNOHANG)
    except ChildProcessError:
        return proc.returncode is not None
    return False


def test_a_run_cut_off_by_the_loops_end_while_starting_stops_its_child_and_returns():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-c", _TEARDOWN], capture_output=True, text=True, timeout=90, env=env)
    assert proc.returncode == 0, proc.stderr
    # Every loop ended with its child gone and reaped.
    assert proc.stdout.splitlines() == [f"{n} children left: none" for n in range(6)], proc.stdout
    # Nothing was reaped after its loop had closed ("Loop ... that handles pid ... is closed").
    assert proc.stderr == "", proc.stderr


def test_a_run_past_its_timeout_is_killed_and_reaped(started, exit_watch):
    done = asyncio.run(run_child(["sleep", "30"], 0.5))
    assert done.timed_out and done.returncode == -signal.SIGKILL, done
    assert len(started) == 1 and _reaped(started[0])


def _holds_output(grandchild) -> list[str]:
    """sh that starts a background process holding its output open, then sleeps."""
    return ["sh", "-c", f"sleep 30 & echo $! > {shlex.quote(str(grandchild))}; exec sleep 30"]


def test_a_cancel_during_the_timeouts_stop_is_raised_not_lost(tmp_path, monkeypatch, started, exit_watch):
    # The child is killed at the timeout but its background process holds the output open, so
    # the run waits for it; a cancel then must reach the caller (it used to come back as an
    # ordinary timeout, a CephTimeout through the CLI tools' runner), and the output, of a
    # child that is gone, is not waited for any longer.
    monkeypatch.setattr(child_mod, "OUTPUT_WAIT_S", 30.0)
    grandchild = tmp_path / "grandchild"

    async def cancel_while_stopping():
        task = asyncio.create_task(run_child(_holds_output(grandchild), 0.5))
        while not started or started[0].returncode is None:  # killed and reaped by the stop
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return started[0].returncode

    try:
        with structlog.testing.capture_logs() as logged:
            assert asyncio.run(cancel_while_stopping()) == -signal.SIGKILL
        assert logged == []  # not "output is still open": the wait for it did not run out
    finally:
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(grandchild.read_text()), signal.SIGKILL)


def test_a_child_whose_background_process_holds_its_output_is_reaped_and_returned_at_the_timeout(
        tmp_path, started, exit_watch):
    grandchild = tmp_path / "grandchild"
    try:
        with structlog.testing.capture_logs() as logged:
            done = asyncio.run(run_child(_holds_output(grandchild), 0.5))
        assert done.timed_out and done.returncode == -signal.SIGKILL, done
        assert _reaped(started[0])  # no zombie while the output stays open
        assert [e["event"] for e in logged] == [
            "a stopped child exited but its output is still open: a process it started holds it"]
    finally:
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(grandchild.read_text()), signal.SIGKILL)


def test_output_exit_code_and_a_missing_binary():
    done = asyncio.run(run_child(["sh", "-c", "echo out; echo err >&2; exit 4"], 10))
    assert (done.returncode, done.stdout, done.stderr, done.timed_out) == (4, b"out\n", b"err\n", False)
    quiet = asyncio.run(run_child(["sh", "-c", "echo out"], 10, stdout=DEVNULL))
    assert (quiet.returncode, quiet.stdout) == (0, b"")
    with pytest.raises(FileNotFoundError):
        asyncio.run(run_child(["/nonexistent/radosgw-admin"], 10))


def test_a_cancel_sends_sigterm_first_and_waits_for_the_child(tmp_path, started, exit_watch):
    # A child that cleans up on SIGTERM (a child rgwkeeper saving its checkpoint) gets to.
    ready, marker = tmp_path / "ready", tmp_path / "cleaned"
    script = (f"trap 'sleep 0.3; echo cleaned > {shlex.quote(str(marker))}; exit 0' TERM; "
              f"touch {shlex.quote(str(ready))}; while :; do sleep 0.05; done")

    async def cancel_once_ready():
        task = asyncio.create_task(run_child(["sh", "-c", script], 60, cancel_grace_s=30))
        while not ready.exists():
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # Raised only once the child had cleaned up and exited.
        return marker.read_text(), _reaped(started[0])

    assert asyncio.run(cancel_once_ready()) == ("cleaned\n", True)


def _handle() -> RunHandle:
    return RunHandle(time.monotonic_ns(), types.SimpleNamespace(value=0), [])


def _maintenance(argv: list[str], timeout_s: float) -> Maintenance:
    return Maintenance(start_at=0.0, window_s=0.0, kind="cmd", argv=argv, access=None,  # type: ignore[arg-type]
                       scrub_every=None, timeout_s=timeout_s)


def test_verify_maintenance_command_exit_and_last_stderr_line_are_kept():
    m, run = _maintenance(["sh", "-c", "echo first >&2; echo 'rgwkeeper: error: no' >&2; exit 3"], 30), _handle()
    asyncio.run(m.control(run))
    assert (m.exit_code, m.stderr_tail) == (3, "rgwkeeper: error: no")
    assert [(e.kind, e.what) for e in run.events][-1] == ("maintenance-end", "command exited 3")


def test_verify_maintenance_command_killed_at_its_timeout_is_recorded_not_raised():
    m, run = _maintenance(["sleep", "30"], 0.5), _handle()
    asyncio.run(m.control(run))
    assert m.exit_code == -signal.SIGKILL and "killed after 0.5 s" in m.stderr_tail
    assert run.events[-1].detail == {"exit_code": -signal.SIGKILL}


def test_verify_maintenance_command_that_cannot_start_is_a_usage_error():
    from rgwkeeper.errors import UsageError

    with pytest.raises(UsageError, match="cannot run maintenance command '/nonexistent/purge'"):
        asyncio.run(_maintenance(["/nonexistent/purge"], 30).control(_handle()))


def test_verify_maintenance_command_is_killed_when_the_verify_is_cancelled(tmp_path, started):
    ready = tmp_path / "ready"
    m, run = _maintenance(["sh", "-c", f"trap '' TERM; touch {shlex.quote(str(ready))}; exec sleep 30"], 60), _handle()

    async def cancel_once_started():
        task = asyncio.create_task(m.control(run))
        while not ready.exists():
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return _reaped(started[0]), started[0].returncode

    assert asyncio.run(cancel_once_started()) == (True, -signal.SIGKILL)
