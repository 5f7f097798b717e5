"""Polling with a deadline, for the harness, the demo and the integration tests."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def wait_for(what: str, predicate: Callable[[], T], timeout: float = 60.0, interval: float = 0.5,
             error: type[Exception] = AssertionError) -> T:
    """The predicate's first truthy value; ``error`` naming ``what`` once ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise error(f"timed out after {timeout:.0f} s waiting for {what}")
