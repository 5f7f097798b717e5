"""Pacing: slow a purge down when client write latency rises, speed it up again when it falls.

The signal is a probe: a 4 KiB ``write_full`` of one object in the bucket's data pool every
``pace_probe_interval_s``, timed end to end. It queues behind the purge's own removals on the
same OSDs, so it sees what an ingesting client sees. The controller is AIMD on a fraction of
the configured concurrency: above the target it halves, below 80% of it it grows by a tenth.
Time is injected, so tests drive it without sleeping.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable

import structlog

log = structlog.get_logger("rgwkeeper.purge")


@dataclass
class Pacer:
    target_s: float  # 0: pacing off
    min_fraction: float = 0.02
    fraction: float = 1.0
    samples: list[tuple[float, float]] = field(default_factory=list)  # (when, latency)
    smoothed_s: float | None = None
    min_fraction_seen: float = 1.0

    def observe(self, latency_s: float, now: float) -> None:
        self.samples.append((now, latency_s))
        del self.samples[:-1000]
        # A short moving average: one slow write is noise, three are a trend.
        self.smoothed_s = latency_s if self.smoothed_s is None else 0.5 * self.smoothed_s + 0.5 * latency_s
        if not self.target_s:
            return
        before = self.fraction
        if self.smoothed_s > self.target_s:
            self.fraction = max(self.min_fraction, self.fraction / 2)
        elif self.smoothed_s < 0.8 * self.target_s:
            self.fraction = min(1.0, self.fraction + 0.1)
        self.min_fraction_seen = min(self.min_fraction_seen, self.fraction)
        if self.fraction != before:
            log.info("purge pacing", latency_ms=round(self.smoothed_s * 1000, 2),
                     target_ms=round(self.target_s * 1000, 2), fraction=round(self.fraction, 3))

    def limit(self, configured: int) -> int:
        return max(1, int(configured * self.fraction))


class Limiter:
    """A semaphore whose size follows the pacer: ``acquire`` waits while ``limit()`` are in flight."""

    def __init__(self, limit: Callable[[], int]) -> None:
        self._limit = limit
        self._in_flight = 0
        self._cond = asyncio.Condition()

    async def acquire(self) -> None:
        async with self._cond:
            await self._cond.wait_for(lambda: self._in_flight < self._limit())
            self._in_flight += 1

    async def release(self) -> None:
        async with self._cond:
            self._in_flight -= 1
            self._cond.notify_all()

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc: object) -> None:
        await self.release()

    async def drain(self) -> None:
        async with self._cond:
            await self._cond.wait_for(lambda: self._in_flight == 0)


async def probe_loop(pacer: Pacer, write: Callable[[], Awaitable[None]], *, interval_s: float,
                     stop: asyncio.Event, clock: Callable[[], float] = time.monotonic) -> None:
    """Time one probe write every ``interval_s`` until ``stop`` is set."""
    while not stop.is_set():
        t0 = clock()
        try:
            await write()
        except Exception as exc:  # noqa: BLE001 - a failed probe is a slow one, not a reason to stop
            log.warning("purge pacing probe failed", error=str(exc))
            pacer.observe(max(pacer.target_s * 2, 1.0), clock())
        else:
            pacer.observe(clock() - t0, clock())
        try:
            await asyncio.wait_for(stop.wait(), interval_s)
        except asyncio.TimeoutError:
            pass
