"""A child process for asyncio code, run without asyncio's subprocess machinery.

``asyncio.create_subprocess_exec`` is not safe to cancel on Python 3.11, the admin node's
Python in bookworm, and on other releases before the fix of cpython#103847 (PR 140805): a
cancel that lands while it connects the child's pipes (``asyncio.run``'s teardown after an
error, a SIGTERM, a sibling's failure in a gather) can leave the caller waiting forever for an
exit that is never delivered, or let the loop close with the child still running
(cpython#125502; docs/architecture.md, "Child processes"). Here the child is started with
``subprocess.Popen`` and a thread of its own reads its output and reaps it; the loop learns of
the exit from a pidfd it watches (a second thread waiting with ``WNOWAIT`` where the kernel has
no pidfds). A cancel or timeout signals the child (through the pidfd, so a pid reused after the
child was reaped is never signalled), reaps it once it has exited, and waits, bounded, for its
output to close.
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

from rgwkeeper.aio import wait_despite_cancel

log = structlog.get_logger(__name__)

PIPE = subprocess.PIPE
DEVNULL = subprocess.DEVNULL

#: After SIGKILL, the longest a stopped run waits for its child to exit.
KILL_WAIT_S = 10.0
#: Once a stopped child has exited, the longest its run waits for its output to close: a process
#: the child started in the background may hold it open.
OUTPUT_WAIT_S = 2.0

_popen = subprocess.Popen  # the one place a child is started (the unit tests record it)


@dataclass(frozen=True)
class ChildExit:
    returncode: int  # -N: ended by signal N (-9: the timeout's kill, unless it exited first)
    stdout: bytes
    stderr: bytes
    timed_out: bool  # stopped at the timeout


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
            # asyncio.wait, not wait_for: on 3.11 wait_for drops a cancel that lands in the turn
            # its future settles.
            done, _ = await asyncio.wait({child.output}, timeout=timeout_s)
        except asyncio.CancelledError:
            # The caller stopped (SIGTERM, Ctrl-C): a child left running would go on changing the
            # cluster (an lc process expiring under a rule being taken off) after we are gone.
            # SIGTERM first, so a child rgwkeeper (the daemon's expire) cleans up too; then SIGKILL.
            await child.stop(cancel_grace_s)
            raise
        if not done:
            if await child.stop(0.0):
                raise asyncio.CancelledError()
            return ChildExit(child.returncode(), *child.output_so_far(), timed_out=True)
        out, err = child.output.result()
        return ChildExit(child.returncode(), out, err, timed_out=False)
    finally:
        child.close()


class _Child:
    """One started child: the thread that reads and reaps it, and how the loop learns it exited."""

    def __init__(self, argv: Sequence[str], stdout: int, preexec_fn: Callable[[], Any] | None) -> None:
        self.loop = asyncio.get_running_loop()
        self.proc = _popen(list(argv), stdin=DEVNULL, stdout=stdout, stderr=PIPE, preexec_fn=preexec_fn)
        self.exited: asyncio.Future[None] = self.loop.create_future()
        self.output: asyncio.Future[tuple[bytes, bytes]] = self.loop.create_future()
        self.pidfd = _pidfd(self.proc.pid)
        try:
            if self.pidfd is not None:
                # A pidfd reads ready once its process has exited.
                self.loop.add_reader(self.pidfd, self._pidfd_ready)
            else:
                _thread(f"child-{self.proc.pid}-exit", _wait_exit, self.proc, self.loop, self.exited)
            _thread(f"child-{self.proc.pid}", _communicate, self.proc, self.loop, self.output)
        except BaseException:  # nothing reads or reaps it: it must not outlive this call
            self.proc.kill()
            self.proc.wait()
            for pipe in (self.proc.stdout, self.proc.stderr):
                if pipe is not None:
                    pipe.close()
            self.close()
            raise

    def _pidfd_ready(self) -> None:
        self._unwatch()
        if not self.exited.done():
            self.exited.set_result(None)

    def _unwatch(self) -> None:
        if self.pidfd is not None:
            self.loop.remove_reader(self.pidfd)

    def returncode(self) -> int:
        code = self.proc.returncode if self.proc.returncode is not None else self.proc.poll()
        return code if code is not None else -1

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
        """SIGTERM (none with no grace), then SIGKILL after ``grace_s``; once the child has
        exited it is reaped here (its output may stay open) and its output is waited for, up to
        OUTPUT_WAIT_S, unless the caller is cancelled. Every wait is bounded, and one that gives
        up is logged. True if the caller was cancelled meanwhile (the caller raises it)."""
        cancelled = False
        gone = False
        if grace_s > 0:
            self.signal(signal.SIGTERM)
            gone, c = await wait_despite_cancel(self.exited, grace_s)
            cancelled |= c
        if not gone:
            self.signal(signal.SIGKILL)
            gone, c = await wait_despite_cancel(self.exited, KILL_WAIT_S)
            cancelled |= c
        if not gone:
            log.error("a stopped child has not exited after SIGKILL", pid=self.proc.pid)
            return cancelled
        self.proc.poll()  # reaped now, even if a process it started holds its output open
        if cancelled:  # the child is gone and the caller wants out: its output is not waited for
            return True
        try:
            await asyncio.wait({self.output}, timeout=OUTPUT_WAIT_S)
        except asyncio.CancelledError:
            return True
        if not self.output.done():
            # Its reading thread and pipes stay until that process closes them.
            log.warning("a stopped child exited but its output is still open: a process it started holds it",
                        pid=self.proc.pid)
        return False

    def close(self) -> None:
        if self.pidfd is not None:
            self._unwatch()
            os.close(self.pidfd)
            self.pidfd = None


def _pidfd(pid: int) -> int | None:
    """A pidfd for the child where the kernel has them (Linux 5.3 and later), else None."""
    with contextlib.suppress(AttributeError, OSError):
        return os.pidfd_open(pid)
    return None


def _thread(name: str, target: Callable[..., None], *args: Any) -> None:
    threading.Thread(target=target, args=args, name=name, daemon=True).start()


def _wait_exit(proc: subprocess.Popen[bytes], loop: asyncio.AbstractEventLoop, done: asyncio.Future[None]) -> None:
    """Without a pidfd, a thread of the child's own: wait for it to exit, leaving it to be
    reaped by ``_communicate`` or ``stop`` (ECHILD: one of them did already)."""
    with contextlib.suppress(ChildProcessError):
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
    _settle(loop, done, None)


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
