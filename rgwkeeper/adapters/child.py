"""A child process for asyncio code, run without asyncio's subprocess machinery.

``asyncio.create_subprocess_exec`` is not safe to cancel on Python 3.11, the admin node's
Python in bookworm, and on other releases before the fix of cpython#103847 (PR 140805): a
cancel that lands while it connects the child's pipes (``asyncio.run``'s teardown after an
error, a SIGTERM, a sibling's failure in a gather) can leave the caller waiting forever for an
exit that is never delivered, or let the loop close with the child still running
(cpython#125502; docs/architecture.md, "Child processes"). Here the child is started with
``subprocess.Popen``; one thread reads its output and reaps it, another waits for its exit
without reaping it (``waitid`` with ``WNOWAIT``). The event loop only waits on futures those
threads settle. A cancel or timeout signals the child (through a pidfd where the kernel has
them, so a reaped child's pid reused by another process is never signalled) and waits, bounded,
for it to exit and for its output to close.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import threading
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import structlog

log = structlog.get_logger(__name__)

PIPE = subprocess.PIPE
DEVNULL = subprocess.DEVNULL

#: After SIGKILL, the longest a stopped run waits for its child to exit.
KILL_WAIT_S = 10.0
#: Once a stopped child has exited, the longest its run waits for its output to close: a process
#: the child started in the background may hold it open.
OUTPUT_WAIT_S = 2.0


@dataclass(frozen=True)
class ChildExit:
    returncode: int  # -N: ended by signal N
    stdout: bytes
    stderr: bytes
    timed_out: bool  # killed at the timeout; returncode is then the kill's


async def run_child(argv: Sequence[str], timeout_s: float, *, stdout: int = PIPE, cancel_grace_s: float = 0.0,
                    preexec_fn: Callable[[], Any] | None = None) -> ChildExit:
    """Run argv (no shell, stdin from /dev/null, stderr captured) and wait for it.

    At ``timeout_s`` the child is killed, and the exit has ``timed_out`` (a cancel that comes
    meanwhile is raised once the child is gone). If the caller is cancelled, the child gets
    SIGTERM, then SIGKILL after ``cancel_grace_s`` (at once with none), and CancelledError is
    raised once it has exited, even if cancelled again meanwhile (a second Ctrl-C,
    asyncio.run's teardown). OSError if it cannot be started (no such binary).
    """
    child = _Child(argv, stdout, preexec_fn)
    try:
        try:
            out, err = await asyncio.wait_for(asyncio.shield(child.output), timeout_s)
        except asyncio.TimeoutError:
            if await child.stop(0.0):
                raise asyncio.CancelledError() from None
            return ChildExit(child.returncode(), *child.output_so_far(), timed_out=True)
        except asyncio.CancelledError:
            # The caller stopped (SIGTERM, Ctrl-C): a child left running would go on changing the
            # cluster (an lc process expiring under a rule being taken off) after we are gone.
            # SIGTERM first, so a child rgwkeeper (the daemon's expire) cleans up too; then SIGKILL.
            await child.stop(cancel_grace_s)
            raise
        return ChildExit(child.returncode(), out, err, timed_out=False)
    finally:
        child.close()


class _Child:
    """One started child, its two threads and the futures they settle on the loop."""

    def __init__(self, argv: Sequence[str], stdout: int, preexec_fn: Callable[[], Any] | None) -> None:
        loop = asyncio.get_running_loop()
        self.proc = subprocess.Popen(list(argv), stdin=DEVNULL, stdout=stdout, stderr=PIPE, preexec_fn=preexec_fn)
        self.pidfd = _pidfd(self.proc.pid)
        self.exited: asyncio.Future[int | None] = loop.create_future()
        self.output: asyncio.Future[tuple[bytes, bytes]] = loop.create_future()
        try:
            for name, target, fut in ((f"child-{self.proc.pid}-exit", _wait_exit, self.exited),
                                      (f"child-{self.proc.pid}", _communicate, self.output)):
                threading.Thread(target=target, args=(self.proc, loop, fut), name=name, daemon=True).start()
        except BaseException:  # no thread to reap it: it must not outlive this call
            self.proc.kill()
            self.proc.wait()
            self.close()
            raise

    def returncode(self) -> int:
        if self.proc.returncode is not None:
            return self.proc.returncode
        if self.exited.done() and not self.exited.cancelled() and self.exited.exception() is None:
            code = self.exited.result()
            if code is not None:
                return code
        return -1

    def output_so_far(self) -> tuple[bytes, bytes]:
        if self.output.done() and not self.output.cancelled() and self.output.exception() is None:
            return self.output.result()
        return b"", b""

    def signal(self, sig: int) -> None:
        """``sig`` to the child, unless it has exited (never to a pid the kernel has reused)."""
        if self.exited.done():
            return
        with contextlib.suppress(ProcessLookupError):
            if self.pidfd is not None:
                signal.pidfd_send_signal(self.pidfd, sig)
            else:
                self.proc.send_signal(sig)

    async def stop(self, grace_s: float) -> bool:
        """SIGTERM (none with no grace), then SIGKILL after ``grace_s``; returns once the child
        has exited and its output closed, or the bounded waits gave up (logged). True if the
        caller was cancelled meanwhile (the caller raises it)."""
        cancelled = False
        if grace_s > 0:
            self.signal(signal.SIGTERM)
            gone, c = await _despite_cancel(self.exited, grace_s)
            cancelled |= c
        else:
            gone = False
        if not gone:
            self.signal(signal.SIGKILL)
            gone, c = await _despite_cancel(self.exited, KILL_WAIT_S)
            cancelled |= c
        if not gone:
            log.error("a stopped child has not exited after SIGKILL", pid=self.proc.pid)
            return cancelled
        closed, c = await _despite_cancel(self.output, OUTPUT_WAIT_S)
        if not closed:
            log.warning("a stopped child exited but its output is still open: a process it started holds it",
                        pid=self.proc.pid)
        return cancelled | c

    def close(self) -> None:
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None


def _pidfd(pid: int) -> int | None:
    """A pidfd for the child where the kernel has them (Linux 5.3 and later), else None."""
    with contextlib.suppress(AttributeError, OSError):
        return os.pidfd_open(pid)
    return None


def _wait_exit(proc: subprocess.Popen[bytes], loop: asyncio.AbstractEventLoop, done: asyncio.Future[int | None]
               ) -> None:
    """A thread of the child's own: wait for it to exit, leaving it for ``_communicate`` to reap.
    The exit code (-N for signal N), or None if it was reaped already."""
    code: int | None | BaseException
    try:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
        assert info is not None  # None only with WNOHANG
        code = info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
    except ChildProcessError:
        code = None
    except BaseException as exc:  # noqa: BLE001 - handed to the waiting coroutine
        code = exc
    _settle(loop, done, code)


def _communicate(proc: subprocess.Popen[bytes], loop: asyncio.AbstractEventLoop,
                 done: asyncio.Future[tuple[bytes, bytes]]) -> None:
    """A thread of the child's own: read its output to the end, then reap it."""
    try:
        out, err = proc.communicate()
        outcome: tuple[bytes, bytes] | BaseException = (out or b"", err or b"")
    except BaseException as exc:  # noqa: BLE001 - handed to the waiting coroutine
        outcome = exc
    _settle(loop, done, outcome)


def _settle(loop: asyncio.AbstractEventLoop, fut: asyncio.Future[Any], outcome: Any) -> None:
    def settle() -> None:
        if fut.done():
            return
        if isinstance(outcome, BaseException):
            fut.set_exception(outcome)
        else:
            fut.set_result(outcome)
    # The loop closed: its run gave up waiting (logged), or its caller abandoned it.
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(settle)


async def _despite_cancel(fut: asyncio.Future[Any], timeout_s: float) -> tuple[bool, bool]:
    """Wait up to ``timeout_s`` for ``fut`` even if this task is cancelled meanwhile (only while
    stopping a child). (whether it finished, whether a cancel came)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    cancelled = False
    while not fut.done():
        left = deadline - loop.time()
        if left <= 0:
            return False, cancelled
        try:
            await asyncio.wait_for(asyncio.shield(fut), left)
        except asyncio.CancelledError:
            cancelled = True
        except asyncio.TimeoutError:
            pass
        except Exception:  # noqa: BLE001 - the future's own error: it is done
            pass
    return True, cancelled
