"""adapters.child: child processes that a cancel cannot strand, with real processes."""

from __future__ import annotations

import asyncio
import os
import shlex
import subprocess
import sys
import textwrap
import time
import types

import pytest

from rgwkeeper.adapters.child import DEVNULL, run_child
from rgwkeeper.loadgen.runner import RunHandle
from rgwkeeper.loadgen.verify import Maintenance

# The caller's loop ends 0 to 5 iterations after the run started: asyncio.run's teardown then
# cancels it, and everything it started, while it is still starting the child. With
# asyncio.create_subprocess_exec this hung for good at 0 to 4 on Python 3.11 (cpython#125502);
# a hang here is a TimeoutExpired, not a stuck test session.
_TEARDOWN = textwrap.dedent("""
    import asyncio, sys, threading
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
        left = [t.name for t in threading.enumerate() if t.name.startswith("child-")]
        print(turns, "children still waited on:", left, flush=True)
""")


def test_a_run_cut_off_by_the_loops_end_while_starting_stops_its_child_and_returns():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", _TEARDOWN], capture_output=True, text=True, timeout=90, env=env)
    assert proc.returncode == 0, proc.stderr
    # Every loop ended with its child reaped (its thread done), in well under the child's 30 s.
    assert proc.stdout.splitlines() == [f"{n} children still waited on: []" for n in range(6)], proc.stdout
    assert time.monotonic() - t0 < 6 * 30
    # Nothing was reaped after its loop had closed ("Loop ... that handles pid ... is closed").
    assert proc.stderr == "", proc.stderr


def test_a_run_past_its_timeout_is_killed_and_reaped(tmp_path):
    pid_file = tmp_path / "pid"

    async def run():
        return await run_child(["sh", "-c", f"echo $$ > {shlex.quote(str(pid_file))}; exec sleep 30"], 0.5)

    done = asyncio.run(run())
    assert done.timed_out and done.returncode == -9, done
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)


def test_output_exit_code_and_a_missing_binary():
    done = asyncio.run(run_child(["sh", "-c", "echo out; echo err >&2; exit 4"], 10))
    assert (done.returncode, done.stdout, done.stderr, done.timed_out) == (4, b"out\n", b"err\n", False)
    quiet = asyncio.run(run_child(["sh", "-c", "echo out"], 10, stdout=DEVNULL))
    assert (quiet.returncode, quiet.stdout) == (0, b"")
    with pytest.raises(FileNotFoundError):
        asyncio.run(run_child(["/nonexistent/radosgw-admin"], 10))


def test_a_cancel_sends_sigterm_first_and_waits_for_the_child(tmp_path):
    # A child that cleans up on SIGTERM (a child rgwkeeper saving its checkpoint) gets to.
    marker = tmp_path / "cleaned"
    script = f"trap 'echo cleaned > {shlex.quote(str(marker))}; exit 0' TERM; while :; do sleep 0.05; done"

    async def cancel_soon():
        task = asyncio.create_task(run_child(["sh", "-c", script], 60, cancel_grace_s=5))
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_soon())
    assert marker.read_text() == "cleaned\n"


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
    assert m.exit_code == -9 and "killed after 0.5 s" in m.stderr_tail
    assert run.events[-1].detail == {"exit_code": -9}


def test_verify_maintenance_command_that_cannot_start_is_a_usage_error():
    from rgwkeeper.errors import UsageError

    with pytest.raises(UsageError, match="cannot run maintenance command '/nonexistent/purge'"):
        asyncio.run(_maintenance(["/nonexistent/purge"], 30).control(_handle()))
