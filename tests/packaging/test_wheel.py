"""rgwkeeper installed as an operator installs it (docs/operations.md, "Install"): a wheel built
with `python -m build`, installed into a fresh venv that sees Debian's python3-rados, run from
outside the source tree. Needs the package index (PyPI or the host's pip.conf mirror)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import rgwkeeper

ROOT = Path(__file__).resolve().parents[2]


def run(argv: list[str], **kw) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900, **kw)
    assert proc.returncode == 0, f"{argv}: exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """bin/ of a fresh venv with the wheel built from this checkout installed."""
    tmp = tmp_path_factory.mktemp("wheel")
    # setuptools writes build/ and *.egg-info into the source tree: build from a copy of it.
    src = tmp / "src"
    files = run(["git", "-C", str(ROOT), "ls-files", "-z"]).stdout.split("\0")
    for f in filter(None, files):
        if (ROOT / f).is_file():
            (src / f).parent.mkdir(parents=True, exist_ok=True)
            (src / f).write_bytes((ROOT / f).read_bytes())
    run([sys.executable, "-m", "build", "--wheel", "--outdir", str(tmp / "dist"), str(src)])
    wheels = list((tmp / "dist").glob("rgwkeeper-*.whl"))
    assert len(wheels) == 1, wheels
    venv = tmp / "venv"
    run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", str(venv)])
    run([str(venv / "bin/python"), "-m", "pip", "install", "-q", str(wheels[0])])
    return venv / "bin"


def test_the_wheel_installs_and_runs_from_a_fresh_venv(installed, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    version = run([str(installed / "rgwkeeper"), "--version"], cwd=tmp_path, env=env)
    assert version.stdout.strip() == f"rgwkeeper, version {rgwkeeper.__version__}"
    where = run([str(installed / "python"), "-c", "import rgwkeeper, rados; print(rgwkeeper.__file__)"],
                cwd=tmp_path, env=env)
    assert where.stdout.strip().startswith(str(installed.parent)), where.stdout  # the wheel's copy, not the tree
    helped = run([str(installed / "rgwkeeper"), "purge", "--help"], cwd=tmp_path, env=env)
    assert "--dry-run" in helped.stdout


def test_shell_completion_from_the_installed_command(installed, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    script = run([str(installed / "rgwkeeper")], cwd=tmp_path, env={**env, "_RGWKEEPER_COMPLETE": "bash_source"})
    assert "_rgwkeeper_completion" in script.stdout and "complete " in script.stdout
    words = run([str(installed / "rgwkeeper")], cwd=tmp_path,
                env={**env, "_RGWKEEPER_COMPLETE": "bash_complete", "COMP_WORDS": "rgwkeeper pu", "COMP_CWORD": "1"})
    assert "plain,purge" in words.stdout.splitlines(), words.stdout
    opts = run([str(installed / "rgwkeeper")], cwd=tmp_path,
               env={**env, "_RGWKEEPER_COMPLETE": "bash_complete", "COMP_WORDS": "rgwkeeper purge --dry",
                    "COMP_CWORD": "2"})
    assert "plain,--dry-run" in opts.stdout.splitlines(), opts.stdout
