"""bench/cpu_of.py: the CPU a command and its waited-for children used, and the command's status."""

from __future__ import annotations

import json
import signal
import sys

from bench.cpu_of import main


def test_counts_a_grandchild_s_cpu_and_passes_the_status_on(tmp_path) -> None:
    out = tmp_path / "cpu.json"
    # The work is in a grandchild: its CPU reaches the wrapper only through the child's reaping.
    code = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'sum(range(20_000_000))']); sys.exit(3)"
    assert main([str(out), "--", sys.executable, "-c", code]) == 3
    got = json.loads(out.read_text())
    assert got["cpu_s"] >= 0.1  # summing 20 million integers takes far more than a tenth of a second
    assert abs(got["cpu_s"] - (got["user_s"] + got["system_s"])) <= 0.002  # each rounded on its own


def test_a_command_killed_by_a_signal_exits_128_plus_it(tmp_path) -> None:
    out = tmp_path / "cpu.json"
    assert main([str(out), "--", sys.executable, "-c", "import os; os.kill(os.getpid(), 9)"]) == 128 + signal.SIGKILL
    assert out.exists()


def test_usage_without_the_separator(tmp_path, capsys) -> None:
    assert main([str(tmp_path / "cpu.json"), "true"]) == 2
    assert "usage" in capsys.readouterr().err
    assert not (tmp_path / "cpu.json").exists()


def test_a_term_sent_to_the_wrapper_reaches_the_command_and_the_cpu_is_still_written(tmp_path) -> None:
    import subprocess
    import time
    from pathlib import Path

    out = tmp_path / "cpu.json"
    ready = tmp_path / "ready"
    code = (f"import pathlib, signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(7)); "
            f"pathlib.Path({str(ready)!r}).touch(); time.sleep(60)")
    root = Path(__file__).resolve().parents[2]
    wrapper = subprocess.Popen([sys.executable, "-m", "bench.cpu_of", str(out), "--", sys.executable, "-c", code],
                               cwd=root)
    deadline = time.monotonic() + 30
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    wrapper.send_signal(signal.SIGTERM)
    assert wrapper.wait(timeout=30) == 7  # the command's own exit: it got the TERM and ended
    assert json.loads(out.read_text())["cpu_s"] >= 0


def test_the_command_dies_with_a_killed_wrapper(tmp_path) -> None:
    import os
    import subprocess
    import time
    from pathlib import Path

    pid_file = tmp_path / "pid"
    code = f"import os, pathlib, time; pathlib.Path({str(pid_file)!r}).write_text(str(os.getpid())); time.sleep(60)"
    root = Path(__file__).resolve().parents[2]
    wrapper = subprocess.Popen([sys.executable, "-m", "bench.cpu_of", str(tmp_path / "cpu.json"), "--",
                                sys.executable, "-c", code], cwd=root)
    deadline = time.monotonic() + 30
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.02)
    child = int(pid_file.read_text())
    wrapper.kill()
    wrapper.wait(timeout=30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                break  # dead, not yet reaped by whoever inherited it
        except FileNotFoundError:
            break
        time.sleep(0.02)
    else:
        os.kill(child, signal.SIGKILL)
        raise AssertionError("the command outlived its killed wrapper")
