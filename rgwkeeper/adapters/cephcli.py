"""Ceph's command-line tools (``ceph``, ``rados``, ``radosgw-admin``): one runner for all.

argv lists only (no shell), the cluster access's conf, name and keyring on every call, a
timeout on every call, and JSON taken out of noisy stdout. The process runner is injected, so
unit tests use a strict fake fed with output captured from a real cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Sequence

import structlog

from rgwkeeper.access import ClusterAccess
from rgwkeeper.errors import CephError, CephTimeout, CommandFailed

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class CompletedRun:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    duration_s: float


Runner = Callable[[Sequence[str], float], Awaitable[CompletedRun]]


CANCEL_GRACE_S = 5.0  # a cancelled run's child gets this long after SIGTERM before SIGKILL
#: After SIGKILL, the longest a cancelled run waits for its child to be reaped.
KILL_WAIT_S = 10.0


async def subprocess_runner(argv: Sequence[str], timeout: float, *, cancel_grace_s: float = CANCEL_GRACE_S
                            ) -> CompletedRun:
    """Run argv (no shell), kill it at the timeout; if cancelled, SIGTERM, then SIGKILL after
    ``cancel_grace_s``: a cancelled run raises CancelledError once its child is gone, even if
    cancelled again meanwhile (a second Ctrl-C, asyncio.run's teardown)."""
    t0 = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        raise CephTimeout(" ".join(argv[:6]), f"no answer within {timeout:.0f} s (killed)") from None
    except asyncio.CancelledError:
        # The caller stopped (SIGTERM, Ctrl-C): a child left running would go on changing the
        # cluster (an lc process expiring under a rule being taken off) after we are gone. SIGTERM
        # first, so a child rgwkeeper (the daemon's expire) cleans up too; then SIGKILL.
        await _stop(proc, cancel_grace_s)
        raise
    return CompletedRun(tuple(argv), proc.returncode or 0, out.decode(errors="replace"),
                        err.decode(errors="replace"), time.monotonic() - t0)


async def _stop(proc: asyncio.subprocess.Process, grace_s: float) -> None:
    """SIGTERM, then SIGKILL after ``grace_s``; the child is gone when this returns, whatever
    further cancels arrive meanwhile (the caller re-raises the cancel)."""
    with contextlib.suppress(ProcessLookupError):
        proc.terminate()
    exited = asyncio.ensure_future(proc.wait())
    if not await _despite_cancel(exited, grace_s):
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        if not await _despite_cancel(exited, KILL_WAIT_S):
            log.error("a cancelled run's child has not exited after SIGKILL", pid=proc.pid)


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


def extract_json(text: str) -> Any:
    """Parse the JSON document in ``text``, skipping log lines printed before or after it."""
    stripped = text.strip()
    if not stripped:
        return None
    try:
        return json.loads(stripped)
    except json.JSONDecodeError:
        pass
    decoder = json.JSONDecoder()
    pos = 0
    for line in text.splitlines(keepends=True):
        first = line.lstrip()[:1]
        if first in ("{", "["):
            start = pos + (len(line) - len(line.lstrip()))
            try:
                value, _ = decoder.raw_decode(text, start)
                return value
            except json.JSONDecodeError:
                pass
        pos += len(line)
    raise ValueError(f"no JSON document in output ({stripped[:80]!r}...)")


class CephCli:
    """One of Ceph's command-line tools, run with this cluster access."""

    def __init__(self, access: ClusterAccess, binary: str, *, runner: Runner = subprocess_runner) -> None:
        self.access = access
        self.binary = binary
        self._runner = runner

    def argv(self, *args: str) -> list[str]:
        """The exact argv a call runs (also what a dry run prints)."""
        base = [self.binary, "--conf", str(self.access.conf), "--name", self.access.client_name]
        if self.access.keyring is not None:
            base += ["--keyring", str(self.access.keyring)]
        return base + list(args)

    async def run(self, *args: str, timeout: float | None = None) -> CompletedRun:
        argv = self.argv(*args)
        t0 = time.monotonic()
        log.debug("ceph cli start", binary=self.binary, args=list(args[:4]))
        result = await self._runner(argv, timeout or self.access.timeout_s)
        log.debug("ceph cli done", binary=self.binary, args=list(args[:4]), exit=result.returncode,
                  ms=round((time.monotonic() - t0) * 1000, 1))
        if result.returncode != 0:
            raise CommandFailed(argv, result.returncode, result.stderr)
        return result

    async def json(self, *args: str, timeout: float | None = None) -> Any:
        result = await self.run(*args, "--format=json", timeout=timeout)
        try:
            return extract_json(result.stdout)
        except ValueError as exc:
            raise CephError(" ".join(args[:4]), str(exc)) from None
