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
