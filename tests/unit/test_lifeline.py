"""rgwkeeper.lifeline: a child gets the signal it asked for when its parent dies, and a child
whose parent died before it asked ends at once."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import pytest

# The parent starts a child that asks for SIGTERM on its parent's death and records it, then
# waits to be killed.
PARENT = r"""
import functools, os, signal, subprocess, sys, time
from rgwkeeper.lifeline import die_with_parent
child = subprocess.Popen([sys.executable, "-c", sys.argv[1]],
                         preexec_fn=functools.partial(die_with_parent, signal.SIGTERM, os.getpid()))
print(child.pid, flush=True)
time.sleep(120)
"""
CHILD = r"""
import pathlib, signal, sys, time
out = pathlib.Path(sys.argv[1])
signal.signal(signal.SIGTERM, lambda n, f: (out.write_text(str(n)), sys.exit(0)))
out.with_suffix(".ready").touch()
time.sleep(120)
"""


def test_the_child_gets_the_signal_it_asked_for_when_its_parent_is_killed(tmp_path) -> None:
    got = tmp_path / "got"
    child_code = f"import sys; sys.argv[1:] = [{str(got)!r}]\n" + CHILD
    child = 0
    parent = subprocess.Popen([sys.executable, "-c", PARENT, child_code], stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        deadline = time.monotonic() + 30
        while not got.with_suffix(".ready").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        while not (got.exists() and got.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert got.read_text() == str(int(signal.SIGTERM))  # TERM, not KILL: it could say so
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)
        if child and not (got.exists() and got.read_text()):  # it never got the signal: still asleep
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)  # a failed test leaves no sleeper behind


@pytest.mark.parametrize("parent, code, out", [("os.getppid() + 1", 1, ""), ("os.getppid()", 0, "lived\n")])
def test_a_child_whose_parent_is_gone_already_ends_at_once(parent, code, out) -> None:
    """``parent`` not its parent any more: it died and the child was re-parented before prctl."""
    proc = subprocess.run([sys.executable, "-c", "import os, signal; from rgwkeeper.lifeline import die_with_parent; "
                           f"die_with_parent(signal.SIGTERM, {parent}); print('lived')"],
                          capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout) == (code, out), proc.stderr
