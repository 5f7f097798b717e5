"""A child process for asyncio code, run without asyncio's subprocess machinery.

``asyncio.create_subprocess_exec`` is not safe to cancel on the Python releases rgwkeeper runs on
(3.11 to 3.13): a cancel that lands while it connects the child's pipes (``asyncio.run``'s
teardown after an error, a SIGTERM, a sibling's failure in a gather) can leave the caller waiting
forever for an exit that is never delivered, or close the loop with the child still running
(cpython#125502, cpython#103847, cpython#133536; docs/architecture.md, "Child processes"). Here
the child is started with ``subprocess.Popen`` and a thread of its own waits for it; the event
loop only waits on a future that thread settles. A cancel or timeout then has one thing to do:
signal the child and wait, bounded, for that thread to see it gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import threading
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import structlog

log = structlog.get_logger(__name__)

PIPE = subprocess.PIPE
DEVNULL = subprocess.DEVNULL

#: After SIGKILL, the longest a stopped run waits for its child to be reaped.
KILL_WAIT_S = 10.0


@dataclass(frozen=True)
class ChildExit:
    returncode: int
    stdout: bytes
    stderr: bytes
    timed_out: bool  # killed at the timeout; returncode is then the kill's


async def run_child(argv: Sequence[str], timeout_s: float, *, stdout: int = PIPE, cancel_grace_s: float = 0.0,
                    preexec_fn: Callable[[], Any] | None = None) -> ChildExit:
    """Run argv (no shell, stdin from /dev/null, stderr captured) and wait for it.

    At ``timeout_s`` the child is killed and reaped, and the exit has ``timed_out``. If the
    caller is cancelled, the child gets SIGTERM, then SIGKILL after ``cancel_grace_s``, and
    CancelledError is raised once it is gone, even if cancelled again meanwhile (a second
    Ctrl-C, asyncio.run's teardown). OSError if it cannot be started (no such binary).
    """
    loop = asyncio.get_running_loop()
    proc = subprocess.Popen(list(argv), stdin=DEVNULL, stdout=stdout, stderr=PIPE, preexec_fn=preexec_fn)
    done: asyncio.Future[tuple[bytes, bytes]] = loop.create_future()
    threading.Thread(target=_communicate, args=(proc, loop, done), name=f"child-{proc.pid}", daemon=True).start()
    try:
        out, err = await asyncio.wait_for(asyncio.shield(done), timeout_s)
    except asyncio.TimeoutError:
        await _stop(proc, done, 0.0)
        out, err = _output(done)
        return ChildExit(_code(proc), out, err, timed_out=True)
    except asyncio.CancelledError:
        # The caller stopped (SIGTERM, Ctrl-C): a child left running would go on changing the
        # cluster (an lc process expiring under a rule being taken off) after we are gone. SIGTERM
        # first, so a child rgwkeeper (the daemon's expire) cleans up too; then SIGKILL.
        await _stop(proc, done, cancel_grace_s)
        raise
    return ChildExit(_code(proc), out, err, timed_out=False)


def _communicate(proc: subprocess.Popen[bytes], loop: asyncio.AbstractEventLoop,
                 done: asyncio.Future[tuple[bytes, bytes]]) -> None:
    """The child's own thread: read its output to the end, reap it, settle ``done`` on the loop."""
    try:
        out, err = proc.communicate()
        outcome: tuple[bytes, bytes] | BaseException = (out or b"", err or b"")
    except BaseException as exc:  # noqa: BLE001 - handed to the waiting coroutine
        outcome = exc
    with contextlib.suppress(RuntimeError):  # the loop closed: only after the SIGKILL wait gave up (logged)
        loop.call_soon_threadsafe(_settle, done, outcome)


def _settle(done: asyncio.Future[tuple[bytes, bytes]], outcome: tuple[bytes, bytes] | BaseException) -> None:
    if done.done():
        return
    if isinstance(outcome, BaseException):
        done.set_exception(outcome)
    else:
        done.set_result(outcome)


def _output(done: asyncio.Future[tuple[bytes, bytes]]) -> tuple[bytes, bytes]:
    if done.done() and not done.cancelled() and done.exception() is None:
        return done.result()
    return b"", b""


def _code(proc: subprocess.Popen[bytes]) -> int:
    return proc.returncode if proc.returncode is not None else -1


async def _stop(proc: subprocess.Popen[bytes], done: asyncio.Future[Any], grace_s: float) -> None:
    """SIGTERM (none with no grace), then SIGKILL after ``grace_s``: the child is reaped when this
    returns, whatever further cancels arrive meanwhile (the caller re-raises the cancel)."""
    if grace_s > 0:
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        if await _despite_cancel(done, grace_s):
            return
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    if not await _despite_cancel(done, KILL_WAIT_S):
        log.error("a stopped child has not exited after SIGKILL", pid=proc.pid)


async def _despite_cancel(fut: asyncio.Future[Any], timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for ``fut`` even if this task is cancelled meanwhile (only while
    cleaning up after a cancel, which the caller then re-raises). True if it finished."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not fut.done():
        left = deadline - loop.time()
        if left <= 0:
            return False
        with contextlib.suppress(asyncio.CancelledError, asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(fut), left)
    return True
