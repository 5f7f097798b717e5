"""What every part of a purge or an expiry shares: time (a clock and a sleep, which tests
inject), the one retry policy for calls that find RGW or the cluster unreachable, and the
threads blocking S3 calls run on."""

from __future__ import annotations

import asyncio
import functools
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, TypeVar

import structlog

from rgwkeeper.errors import CephError, CephTimeout, CephUnreachable

log = structlog.get_logger("rgwkeeper.purge")
_T = TypeVar("_T")

class PurgeFailed(CephError):
    """A step failed or the end state is not what it must be; the checkpoint says where."""


RETRY_FIRST_DELAY_S = 0.5
RETRY_MAX_DELAY_S = 10.0


@dataclass(frozen=True)
class Time:
    """The clock and the sleep a run uses; a test passes its own and never waits."""

    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep


@dataclass(frozen=True)
class Retry:
    """Retry a call while RGW or the cluster is unreachable (an RGW restart, a mon election),
    backing off from 0.5 s to 10 s, for at most ``budget_s``. ``before_retry(what)`` runs
    before each retry and may raise to stop retrying (a full cluster: waiting does not help)."""

    budget_s: float
    time: Time = Time()
    before_retry: Callable[[str], Awaitable[None]] | None = None

    async def call(self, what: str, fn: Callable[[], Awaitable[_T]]) -> _T:
        deadline = self.time.clock() + self.budget_s
        delay = RETRY_FIRST_DELAY_S
        while True:
            try:
                return await fn()
            except (CephUnreachable, CephTimeout) as exc:
                if self.before_retry is not None:
                    await self.before_retry(what)
                if self.time.clock() + delay > deadline:
                    raise
                log.warning("purge retrying", what=what, error=str(exc), delay_s=delay)
                await self.time.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_DELAY_S)


class Threads:
    """The run's own threads for blocking S3 calls, sized for its widest fan-out (asyncio's
    default pool has 6 on 2 cores: 16 re-check HEADs would queue there, and the pacing probe
    behind them, timing rgwkeeper's queue rather than the cluster's). The probe has its own."""

    def __init__(self, workers: int, retry: Retry) -> None:
        self.retry = retry
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="rgwkeeper-purge")
        self._probe_pool = ThreadPoolExecutor(1, thread_name_prefix="rgwkeeper-purge-probe")

    async def run(self, fn: Callable[..., _T], *args: Any, probe: bool = False, **kwargs: Any) -> _T:
        pool = self._probe_pool if probe else self._pool
        return await asyncio.get_running_loop().run_in_executor(pool, functools.partial(fn, *args, **kwargs))

    async def call(self, what: str, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """``fn(*args, **kwargs)`` on a thread, retried by the run's policy."""
        return await self.retry.call(what, lambda: self.run(fn, *args, **kwargs))

    def close(self) -> None:
        for pool in (self._pool, self._probe_pool):
            pool.shutdown(wait=False, cancel_futures=True)
