"""Host-local exclusive locks (flock): one daemon per instance id, one purge per bucket.

The kernel drops an flock when its holder dies, however it dies, so a lock that can be taken
also proves that the previous holder is gone.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from rgwkeeper.errors import UsageError


def try_flock(path: Path, busy: str) -> int:
    """An open fd holding an exclusive flock on ``path`` (created 0600); ``UsageError(busy)`` if
    another process holds it. Closing the fd releases it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise UsageError(f"{busy} (lock {path})") from None
    return fd
