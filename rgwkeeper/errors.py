"""Typed errors. ``str()`` of any of them is one line an operator can act on, never a secret.

User mistakes (bad config, bad name, unreadable keyring) and cluster trouble (unreachable,
timed out, a command refused) are separate classes so the CLI can print one line and exit
non-zero without a traceback, while programming errors still show their traceback.
"""

from __future__ import annotations

import errno as errno_mod
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
    """A Ceph CLI tool (ceph, rados, radosgw-admin) exited non-zero."""

    def __init__(self, argv: Sequence[str], exit_code: int, stderr: str) -> None:
        self.argv = list(argv)
        self.exit_code_seen = exit_code
        self.stderr = stderr
        tail = _last_line(stderr) or "no error text"
        super().__init__(" ".join(argv[:6]) + (" ..." if len(argv) > 6 else ""),
                         f"exit {exit_code}: {tail}")


class NotFound(CephError):
    """The thing asked about does not exist (a bucket, a user)."""


def _last_line(text: str, limit: int = 300) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:limit] if lines else ""
