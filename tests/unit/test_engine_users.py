"""The harness's Docker engine is stopped only by the last session that uses it: a session
between two clusters (importing the next release's image) has no container, and another
session's stop used to cut its import off (integration/engine.py)."""

from __future__ import annotations

import os
import subprocess

from integration import engine as engine_mod


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def test_a_live_other_user_is_seen_and_a_gone_one_is_forgotten(tmp_path):
    users = tmp_path / "users"
    engine_mod.register_user(users)
    assert not engine_mod.other_users(users)  # only this process
    (users / str(os.getppid())).touch()
    gone = users / str(_dead_pid())
    gone.touch()
    assert engine_mod.other_users(users)
    assert not gone.exists()
    assert not engine_mod.other_users(tmp_path / "none")


def test_stop_leaves_the_engine_to_a_session_that_still_uses_it(tmp_path, monkeypatch):
    users = tmp_path / "users"
    terminated = []
    monkeypatch.setattr(engine_mod, "_terminate_pid", lambda pid, timeout: terminated.append(pid))
    monkeypatch.setattr(engine_mod.Engine, "_others_running", lambda self: False)  # no container anywhere
    monkeypatch.setattr(engine_mod, "_SHARED", None)

    def engine():
        engine_mod.register_user(users)
        return engine_mod.Engine(base_url="unix:///nonexistent", owned=True, pid=12345,
                                 lock_path=tmp_path / "engine.lock", users_dir=users)

    (users / str(os.getppid())).parent.mkdir(parents=True, exist_ok=True)
    (users / str(os.getppid())).touch()  # another live session, between two clusters
    engine().stop()
    assert terminated == [] and not (users / str(os.getpid())).exists()
    (users / str(os.getppid())).unlink()  # that session is done
    engine().stop()
    assert terminated == [12345]
