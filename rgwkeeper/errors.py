"""Typed errors. ``str()`` of any of them is one line an operator can act on, never a secret.

User mistakes (bad config, bad name, unreadable keyring) and cluster trouble (unreachable,
timed out, a command refused) are separate classes so the CLI can print one line and exit
non-zero without a traceback, while programming errors still show their traceback.
"""

from __future__ import annotations

import errno as errno_mod
import signal as signal_mod
from typing import Sequence

#: Exit codes of the CLI.
EXIT_OK = 0
EXIT_CLUSTER = 1  # the cluster refused, timed out or is unreachable
EXIT_USAGE = 2  # the operator's input was wrong (click uses 2 for usage errors too)


class RgwkeeperError(Exception):
    """Base of every error the CLI reports as one line."""

    exit_code = EXIT_CLUSTER


class UsageError(RgwkeeperError):
    """The operator's input was wrong; nothing was changed."""

    exit_code = EXIT_USAGE


class ConfigError(UsageError):
    """A config file field is missing, of the wrong type or out of bounds."""


class CredentialsError(UsageError):
    """A keyring or credentials file is missing, unreadable or too open."""


class InvalidName(UsageError):
    """A bucket name or prefix that RGW would reject or reinterpret."""


class CephError(RgwkeeperError):
    """Ceph answered with an error, or did not answer.

    ``request`` is what was asked (a mon command's prefix, an argv, a URL path without
    credentials); ``detail`` is what came back, trimmed.
    """

    def __init__(self, request: str, detail: str, *, ret: int | None = None) -> None:
        self.request = request
        self.detail = detail
        self.ret = ret
        code = ""
        if ret is not None and ret != 0:
            name = errno_mod.errorcode.get(abs(ret), str(abs(ret)))
            code = f" ({name})"
        super().__init__(f"{request}: {detail}{code}")

    @property
    def errno_name(self) -> str | None:
        if self.ret is None:
            return None
        return errno_mod.errorcode.get(abs(self.ret))


class ClusterFull(RgwkeeperError):
    """The cluster is full (OSD_FULL / POOL_FULL) and the work needs RGW to write; nothing was changed."""


class CephUnreachable(CephError):
    """No monitor answered within the timeout."""


class CephTimeout(CephError):
    """A command was sent but not answered within its timeout."""


class CommandFailed(CephError):
    """A Ceph CLI tool (ceph, rados, radosgw-admin) exited non-zero.

    A tool that crashed (an assert or a signal: ``signal_name`` is set) is told apart from one
    that refused: its last line is the end of Ceph's crash dump, so the line shown is the
    assert or the signal instead."""

    def __init__(self, argv: Sequence[str], exit_code: int, stderr: str) -> None:
        self.argv = list(argv)
        self.exit_code_seen = exit_code
        self.stderr = stderr
        self.signal_name = _crash_signal(exit_code, stderr)
        shown = _without_access(argv)
        request = " ".join(shown[:8]) + (" ..." if len(shown) > 8 else "")
        if self.signal_name is not None:
            detail = f"crashed with {self.signal_name} (exit {exit_code}): {_crash_line(stderr) or 'no error text'}"
        elif exit_code < 0:  # stopped from outside (an operator, the OOM killer, a service stop): not a crash
            detail = f"killed by {_signal_name(-exit_code)} (exit {exit_code}): {_last_line(stderr) or 'no error text'}"
        else:
            detail = f"exit {exit_code}: {_last_line(stderr) or 'no error text'}"
        super().__init__(request, detail)


#: Options every Ceph tool is given for cluster access (adapters/cephcli.py); their values
#: say nothing about what failed, so a failure names the tool and its command instead.
_ACCESS_OPTIONS = frozenset({"--conf", "--name", "--keyring", "-c", "-n", "-k"})

#: What Ceph's signal handler and asserts print (src/global/signal_handler.cc, src/common/assert.cc),
#: the line that says most about the cause first.
_CRASH_MARKERS = ("FAILED ceph_assert", "ceph_abort", "terminate called", "*** Caught signal")


def _without_access(argv: Sequence[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
        elif i and arg in _ACCESS_OPTIONS:
            skip = True
        else:
            out.append(arg)
    return out


#: Signals a process raises on itself when it fails (an assert aborts; a bad access faults).
#: SIGTERM, SIGINT and SIGKILL come from outside: whoever sent them wanted the tool stopped.
_CRASH_SIGNALS = frozenset({signal_mod.SIGABRT, signal_mod.SIGSEGV, signal_mod.SIGBUS, signal_mod.SIGILL,
                            signal_mod.SIGFPE, signal_mod.SIGTRAP})


def _crash_signal(exit_code: int, stderr: str) -> str | None:
    """The signal a tool crashed with: a negative returncode (run directly) that is a crash
    signal, or 128+N from a shell or ``docker exec`` when Ceph's crash dump is in stderr
    (radosgw-admin's own exit codes are error numbers modulo 256 and reach that range too)."""
    if exit_code < 0:
        number = -exit_code
    elif 128 < exit_code <= 128 + 64 and any(m in stderr for m in _CRASH_MARKERS):
        number = exit_code - 128
    else:
        return None
    return _signal_name(number) if number in _CRASH_SIGNALS else None


def _signal_name(number: int) -> str:
    try:
        return signal_mod.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _crash_line(stderr: str, limit: int = 300) -> str:
    """The crash's cause: the failed assert if there is one, else the signal line."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for marker in _CRASH_MARKERS:
        for ln in lines:
            if marker in ln:  # the signal line starts with a time stamp and a thread id
                return (ln[ln.index(marker):] if marker.startswith("***") else ln)[:limit]
    return _last_line(stderr, limit)


class NotFound(CephError):
    """The thing asked about does not exist (a bucket, a user)."""


def _last_line(text: str, limit: int = 300) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:limit] if lines else ""
