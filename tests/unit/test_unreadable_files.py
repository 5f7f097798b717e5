"""Config, credentials and ceph.conf the service user cannot read: one line, exit 2, no traceback.

The tests run as root, who reads everything; so each case runs in a forked child that drops
to uid/gid 65534 (nobody) first, as the daemon runs as its own user (docs/operations.md).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

import pytest

from rgwkeeper import config
from rgwkeeper.access import load_credentials, resolve
from rgwkeeper.cli.common import run_cli
from rgwkeeper.cli.main import cli
from rgwkeeper.errors import CredentialsError

NOBODY = 65534


def as_service_user(fn: Callable[[], Any]) -> tuple[str, str]:
    """Run ``fn`` as an unprivileged user: ("ok", repr(result)) or (exception class, its text)."""
    if os.geteuid() != 0:  # already unprivileged: the permission bits apply as they are
        try:
            return "ok", repr(fn())
        except Exception as exc:  # noqa: BLE001 - the class is the result
            return type(exc).__name__, str(exc)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            try:
                out = ("ok", repr(fn()))
            except BaseException as exc:  # noqa: BLE001
                out = (type(exc).__name__, str(exc))
            os.write(w, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    kind, text = json.loads(data)
    return kind, text


@pytest.fixture
def open_dir():
    """A directory every user may enter (pytest's tmp_path sits in a 0700 one)."""
    d = Path(tempfile.mkdtemp(prefix="rgwkeeper-test-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d)


@pytest.fixture
def locked_dir(open_dir):
    """/etc/rgwkeeper as the old install steps made it: root:root 0750."""
    d = open_dir / "etc-rgwkeeper"
    d.mkdir()
    d.chmod(0o750)
    return d


def _write(path: Path, data: bytes, mode: int) -> Path:
    path.write_bytes(data)
    path.chmod(mode)
    return path


def test_config_in_a_directory_the_user_cannot_enter(locked_dir):
    p = _write(locked_dir / "rgwkeeper.toml", b"[daemon]\ntick_s = 30\n", 0o644)
    kind, text = as_service_user(lambda: config.load(p))
    assert kind == "ConfigError", text
    assert f"cannot read config file {p}: permission denied (cannot enter directory {locked_dir})" in text
    assert "\n" not in text


def test_default_config_in_a_directory_the_user_cannot_enter_is_not_taken_for_missing(locked_dir, monkeypatch):
    # Path.exists() raised PermissionError here (a traceback and a restart loop); treating the file as
    # missing instead would run the daemon on defaults nobody chose.
    p = _write(locked_dir / "rgwkeeper.toml", b"", 0o644)
    monkeypatch.setattr(config, "DEFAULT_CONFIG_PATH", p)
    kind, text = as_service_user(lambda: config.load(None))
    assert kind == "ConfigError" and "permission denied" in text, text


def test_a_missing_default_config_still_means_defaults(tmp_path, monkeypatch):
    monkeypatch.setattr(config, "DEFAULT_CONFIG_PATH", tmp_path / "rgwkeeper.toml")
    assert config.load(None) == config.Config()


def test_unreadable_config_file(open_dir):
    p = _write(open_dir / "rgwkeeper.toml", b"", 0o600)
    kind, text = as_service_user(lambda: config.load(p))
    assert kind == "ConfigError" and f"cannot read config file {p}: permission denied" in text, text


def test_config_that_is_not_utf8(tmp_path):
    p = _write(tmp_path / "rgwkeeper.toml", b'[daemon]\npool = "r\xe9gw"\n', 0o644)
    with pytest.raises(config.ConfigError, match=r"is not valid UTF-8 \(byte 18\)"):
        config.load(p)


def test_config_that_is_a_directory(tmp_path):
    with pytest.raises(config.ConfigError, match="is a directory"):
        config.load(tmp_path)


def test_the_command_line_says_it_in_one_line_exit_2(locked_dir):
    p = _write(locked_dir / "rgwkeeper.toml", b"", 0o644)

    def run() -> tuple[int, str]:
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            rc = run_cli(cli, ["status", "--config", str(p)])
        return rc, err.getvalue()

    kind, text = as_service_user(run)
    assert kind == "ok", text
    rc, err = eval(text)  # the repr of (int, str)
    assert rc == 2 and err.count("\n") == 1 and "permission denied" in err and "Traceback" not in err, err


def _creds(path: Path, data: bytes = b'access_key = "AK"\nsecret_key = "s3cr3t-value"\n') -> Path:
    return _write(path, data, 0o600)


def test_credentials_in_a_directory_the_user_cannot_enter(locked_dir):
    p = _creds(locked_dir / "rgw-admin.credentials")
    os.chown(p, NOBODY, NOBODY)  # owned by the service user, as the install steps now say
    kind, text = as_service_user(lambda: load_credentials(p))
    assert kind == "CredentialsError", text
    assert f"permission denied (cannot enter directory {locked_dir})" in text


def test_credentials_that_are_not_utf8(tmp_path):
    p = _creds(tmp_path / "creds", b'access_key = "AK"\nsecret_key = "s3cr3t-\xff"\n')
    with pytest.raises(CredentialsError) as exc:
        load_credentials(p)
    assert "not valid UTF-8 (byte 39)" in str(exc.value) and "s3cr3t" not in str(exc.value)


def test_credentials_that_are_a_directory(tmp_path):
    d = tmp_path / "creds"
    d.mkdir(mode=0o700)
    with pytest.raises(CredentialsError, match="is a directory"):
        load_credentials(d)


def test_ceph_conf_in_a_directory_the_user_cannot_enter(locked_dir):
    conf = _write(locked_dir / "ceph.conf", b"[global]\n", 0o644)
    kind, text = as_service_user(lambda: resolve(conf=str(conf)))
    assert kind == "CredentialsError" and "cannot read ceph.conf" in text and "cannot enter directory" in text, text
