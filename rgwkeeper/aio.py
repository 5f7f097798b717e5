"""Waits that keep a cancel: ``bounded`` (a deadline that never drops a cancel and still times
out in cleanup) and ``wait_despite_cancel`` (cleanup that a cancel must not cut short).

Two faults of Python 3.11's asyncio, both met by rgwkeeper (docs/architecture.md, "Bounded waits
keep a cancel"):

- ``asyncio.wait_for`` returns its future's result, and drops the cancel, when the cancel lands
  in the loop turn the future completes: a SIGTERM was lost and a purge went on purging.
- ``asyncio.timeout`` (3.11) turns its expiry into TimeoutError only when its task has no other
  cancel outstanding, counted from zero, not from when it was entered (fixed in 3.12). In cleanup
  that runs after a caught cancel (a full ratio given back after Ctrl-C), an expired wait then
  raises CancelledError, past the ``except`` that reports what was left undone.
"""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any


class bounded:
    """``async with bounded(seconds):``, as ``asyncio.timeout``: the block is cancelled at the
    deadline and TimeoutError raised in its place, also in a task that caught a cancel before
    (its count taken on entry); a cancel from anyone else goes on up as CancelledError."""

    def __init__(self, delay_s: float) -> None:
        self._delay_s = delay_s
        self._timeout: asyncio.Timeout | None = None
        self._task: asyncio.Task[object] | None = None
        self._before = 0

    async def __aenter__(self) -> bounded:
        if self._timeout is not None:
            raise RuntimeError("a bounded() block is entered once")
        self._task = asyncio.current_task()
        if self._task is None:
            raise RuntimeError("bounded() must be used inside a task")
        self._before = self._task.cancelling()
        self._timeout = asyncio.timeout(self._delay_s)  # the deadline counts from here
        await self._timeout.__aenter__()
        return self

    def when(self) -> float | None:
        """The deadline, on the loop's clock (None before the block is entered)."""
        return self._timeout.when() if self._timeout is not None else None

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> bool | None:
        assert self._timeout is not None and self._task is not None
        handled = await self._timeout.__aexit__(exc_type, exc, tb)  # raises TimeoutError where 3.11 gets it right
        if (self._timeout.expired() and exc_type is not None and issubclass(exc_type, asyncio.CancelledError)
                and self._task.cancelling() <= self._before):
            raise TimeoutError from None  # only this deadline's cancel was outstanding
        return handled


async def wait_despite_cancel(fut: asyncio.Future[Any], timeout_s: float) -> tuple[bool, bool]:
    """Wait up to ``timeout_s`` for ``fut`` even if this task is cancelled meanwhile, for cleanup
    that must not be cut short (a child process being stopped): (whether it finished, whether a
    cancel came, which the caller raises). ``fut`` is never cancelled."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    cancelled = False
    while not fut.done():
        left = deadline - loop.time()
        if left <= 0:
            return False, cancelled
        try:
            await asyncio.wait({fut}, timeout=left)  # never drops a cancel, never cancels fut
        except asyncio.CancelledError:
            cancelled = True
    return True, cancelled
