"""Leader election across admin nodes with a renewed RADOS exclusive lock.

The leader takes ``lock_exclusive`` on one object for ``lease_s`` seconds and renews it
every tick. Before acting it checks that its lease is still valid on its *own monotonic
clock*, measured from just before the renewal was sent: a leader that was paused (SIGSTOP,
a VM freeze) past its lease finds, when it resumes, that its clock has moved on and stops
acting before it acts again (ceph-nvmeof #1965 is the incident this prevents), even before
it learns whether another node took the lock.

Every take and renewal goes with cls_lock's may-renew flag: the same locker re-taking its
lock without it gets EEXIST, so a renewal retried after one that failed (its reply lost)
would fail until the lease ran out and another node took over mid-load.

A restarted daemon on the same host (same instance id) is a new RADOS client, so the lock
its dead predecessor held would block it until expiry; a local flock guarantees that
predecessor is gone, so the lock it left is broken instead, but only when the lock's
description names this very host (another host may run a daemon with the same instance id).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import AsyncIterator, Awaitable, Callable, Protocol

from rgwkeeper.errors import CephError

LOCK_NAME = "leader"
#: Stop acting this fraction of the lease before it ends (clock skew, slow calls).
SAFETY_MARGIN = 0.2


class LockBackend(Protocol):
    async def acquire(self) -> bool:
        """Take or renew the lock for lease_s (always with the may-renew flag); False if
        another locker holds it."""

    async def break_stale_own(self) -> bool:
        """Break a lock left by a dead predecessor with our instance id on this host; True if broken."""

    async def release(self) -> None: ...


@dataclass
class LeaderLease:
    backend: LockBackend
    lease_s: float
    clock: Callable[[], float] = time.monotonic
    held: bool = False
    valid_until: float = 0.0
    transitions: list[str] = field(default_factory=list)
    #: Why the last tick could not reach the lock (None: it answered, yes or no).
    last_error: CephError | None = None

    async def tick(self) -> bool:
        """Acquire or renew. Returns True if we are leader after this call."""
        was = self.held and self.is_leader()
        t0 = self.clock()
        self.last_error = None
        ok: bool | None
        try:
            ok = await self.backend.acquire()
            if not ok and not self.held and await self.backend.break_stale_own():
                ok = await self.backend.acquire()
        except CephError as exc:
            # Outcome unknown (a lost reply, a mon election): the lease we had stays ours until
            # it runs out on our clock, and the next tick retries (with the may-renew flag).
            self.last_error = exc
            ok = None
        if ok:
            self.held = True
            self.valid_until = t0 + self.lease_s
        elif ok is False or not self.is_leader():
            self.held = False
            self.valid_until = 0.0
        now = self.is_leader()
        if now != was:
            self.transitions.append("acquired" if now else "lost")
        return now

    @contextlib.asynccontextmanager
    async def kept_during(self, every_s: float, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
                          ) -> AsyncIterator[None]:
        """Renew the lease every ``every_s`` while the block runs: a pass whose actions take
        longer than the lease (a large bucket's reshard) must not lose it to the calendar
        while it is still working. A renewal without an answer is retried at the next
        interval; renewal stops once the lease is lost. The executor checks :meth:`is_leader`
        before every change, so no further change starts after that."""
        async def renew() -> None:
            while True:
                await sleep(every_s)
                if not await self.tick():
                    return

        task = asyncio.create_task(renew())
        try:
            yield
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def is_leader(self) -> bool:
        """May we act now? False once the lease (minus a margin) has run out on our clock."""
        return self.held and self.clock() < self.valid_until - SAFETY_MARGIN * self.lease_s

    async def release(self) -> None:
        if self.held:
            try:
                await self.backend.release()
            finally:
                self.held = False
                self.valid_until = 0.0
