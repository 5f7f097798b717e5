"""A load generator worker dies with its parent, even when the parent is SIGKILLed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

PARENT = r"""
import multiprocessing as mp, sys, time
from rgwkeeper.loadgen.runner import _die_with_parent

def child():
    _die_with_parent()
    print("armed", flush=True)
    time.sleep(120)

if __name__ == "__main__":
    p = mp.get_context("spawn").Process(target=child)
    p.start()
    print(p.pid, flush=True)
    time.sleep(120)
"""


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split()[2] != "Z"


def test_worker_dies_when_its_parent_is_killed(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        assert parent.stdout.readline().strip() == "armed"  # the child has called prctl
        assert _alive(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(child)
    finally:
        if parent.poll() is None:
            parent.kill()
