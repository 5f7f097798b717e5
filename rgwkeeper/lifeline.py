"""Children that end with the process that started them.

A child of a killed rgwkeeper (a load generator's worker, `verify`'s maintenance command) would
otherwise live on as an orphan of init: seen here, workers of a killed load generator kept
sending PUTs for half an hour. Linux's ``PR_SET_PDEATHSIG`` has the kernel signal the child when
its parent dies, which needs no cooperation from a parent killed with SIGKILL.
"""
from __future__ import annotations

import contextlib
import ctypes
import os

__all__ = ["die_with_parent"]

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(sig: int, parent: int) -> None:
    """In the child, before it does anything else: receive ``sig`` when its parent dies. A
    parent that died before this took effect (the child was re-parented already: ``parent``,
    its pid as the parent knew it, is no longer ``getppid()``) ends the child at once. Where
    prctl is missing (not Linux) the child simply does not get the signal."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)
