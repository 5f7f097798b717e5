"""Pacing: slow a purge down when client write latency rises, speed it up again when it falls.

The signal is a probe every ``pace_probe_interval_s``: a 4 KiB ``write_full`` of one object in
the bucket's data pool, then an S3 HeadBucket through RGW, timed together end to end. The
write queues behind the purge's own removals on the same OSDs, the HEAD behind its S3 deletes
in RGW, so together they see what an ingesting client sees.

The controller is multiplicative both ways on a fraction of the configured concurrency: above
the target it halves, at or below it it grows by a quarter. Below one request in flight the
fraction becomes a duty cycle (pauses between requests), down to ``MIN_SHARE`` of one request.
Why these choices (the floor, multiplicative growth, no dead band), with the measurements:
docs/purge.md, "Resume, pacing, retries". Time is injected, so tests drive it without sleeping.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable

import structlog

from rgwkeeper.aio import bounded
from rgwkeeper.units import MAX_PURGE_RATE, MIN_PURGE_RATE, check_number, rate_cap_ok
from rgwkeeper.errors import UsageError

log = structlog.get_logger("rgwkeeper.purge")

MIN_SHARE = 0.05  # the slowest a paced purge gets: one request busy 5% of the time
GROWTH = 1.25  # per fast probe; halving per slow one
# A paced run starts at 1% of its concurrency (2 of 256 librados ops; S3: one batch busy 8%
# of the time) and grows while probes stay fast: starting higher hurts ingest before the first
# probes come back slow (docs/purge.md, "Resume, pacing, retries").
PACED_START_FRACTION = 0.01


@dataclass
class Pacer:
    target_s: float  # 0: pacing off
    min_fraction: float = 1e-4
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
        else:  # no dead band: with a relative target (1.3x the probe before) 80% of it was noise
            self.fraction = min(1.0, self.fraction * GROWTH)
        self.min_fraction_seen = min(self.min_fraction_seen, self.fraction)
        if self.fraction != before:
            log.debug("purge pacing", latency_ms=round(self.smoothed_s * 1000, 2),
                     target_ms=round(self.target_s * 1000, 2), fraction=float(f"{self.fraction:.3g}"))

    def limit(self, configured: int) -> int:
        return max(1, int(configured * self.fraction))

    def share(self, configured: int) -> float:
        """Requests in flight the pacer wants, unrounded: below 1 it wants pauses between them."""
        return max(MIN_SHARE, configured * self.fraction)

    def duty(self, configured: int) -> float:
        """The busy fraction of ``limit(configured)`` requests in flight: 1 unless the pacer wants
        less than one request in flight."""
        return min(1.0, self.share(configured) / self.limit(configured))


def run_pacer(target_s: float, *, paced: bool, widest: int) -> Pacer:
    """A run's pacer: at full concurrency when not paced; paced, from PACED_START_FRACTION down to
    where ``widest`` (the most requests in flight the run's paths allow) is at MIN_SHARE: halving
    further slows nothing and only delays recovery (S3 at 8 batches floors at 0.00625)."""
    pacer = Pacer(target_s, fraction=PACED_START_FRACTION if paced else 1.0)
    pacer.min_fraction = min(pacer.fraction, MIN_SHARE / widest)
    return pacer


class Limiter:
    """A semaphore whose size follows the pacer: ``acquire`` waits while ``limit()`` are in flight.

    With ``share`` (the pacer's unrounded wish) below 1, one request in flight is still too
    much: after each request ``acquire`` also waits out a pause that keeps the busy fraction at
    ``share`` (a request of 0.3 s at share 0.25 is followed by 0.9 s of nothing): one batch
    always in flight is still too much for ingest (docs/purge.md, "Resume, pacing, retries").
    """

    def __init__(self, limit: Callable[[], int], share: Callable[[], float] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self._limit = limit
        self._share = share
        self._clock = clock
        self._sleep = sleep
        self._in_flight = 0
        self._started: list[float] = []
        self._not_before = 0.0
        self._cond = asyncio.Condition()

    async def acquire(self) -> list[float]:
        """Take a slot; returns its start time, which :meth:`restart` may move."""
        while True:
            async with self._cond:
                await self._cond.wait_for(lambda: self._in_flight < self._limit())
                wait = self._not_before - self._clock()
                if wait <= 0:
                    self._in_flight += 1
                    started = [self._clock()]
                    self._started.append(started)
                    return started
            await self._sleep(wait)

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def not_before(self) -> float:
        """When (on the limiter's clock) the next request may start after a pause."""
        return self._not_before

    def restart(self, started: list[float]) -> None:
        """The request of this slot starts only now (it waited for something else, e.g. the
        rate cap, while holding the slot): that wait is not busy time to pause after."""
        started[0] = self._clock()

    async def release(self) -> None:
        async with self._cond:
            self._in_flight -= 1
            now = self._clock()
            held = now - self._started.pop(0)[0] if self._started else 0.0
            share = self._share() if self._share is not None else 1.0
            if 0 < share < 1:
                self._not_before = max(self._not_before, now + held * (1 / share - 1))
            self._cond.notify_all()

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc: object) -> None:
        await self.release()

    async def drain(self) -> None:
        async with self._cond:
            await self._cond.wait_for(lambda: self._in_flight == 0)


#: Under a cap, the seconds of the cap's work one request carries (purge.cap_request_s).
CAP_REQUEST_S = 0.1


class RateCap:
    """At most ``rate`` objects a second (0: no cap), in whole requests.

    ``take(n)`` reserves n/rate seconds of the schedule and waits for the start of its slot, so
    requests leave evenly spaced and the average never passes the cap. A request carries
    ``request_s`` of the cap's work (:meth:`chunk`): small requests often rather than a second's
    worth at once (docs/purge.md, "The frontier"). A cap gives the operator
    a rate he chooses and a purge time he knows in advance, and it disturbed ingest less than
    the probe-driven pacer choosing its own rate (docs/purge.md, "Resume, pacing, retries").
    """

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep, *,
                 request_s: float = CAP_REQUEST_S) -> None:
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not rate_cap_ok(rate):
            raise UsageError(f"a rate cap must be 0 (none) or a finite number of objects a second from "
                             f"{MIN_PURGE_RATE:g} to {MAX_PURGE_RATE:g}; got {rate!r}")
        check_number(request_s, "cap_request_s", lo=0.01, hi=10.0)
        self.rate = rate
        self.request_s = request_s
        self._clock = clock
        self._sleep = sleep
        self._next: float | None = None  # when the next slot starts
        #: The clock the slots are kept on (a deleter times its own work on it).
        self.clock = clock

    def chunk(self, n: int) -> int:
        """Objects per request under the cap: ``request_s`` of its work (at least one), at most ``n``."""
        return max(1, n) if self.rate <= 0 else max(1, min(n, int(self.rate * self.request_s)))

    async def take(self, n: int) -> tuple[float, float]:
        """Wait for the slot of ``n`` objects; returns (how far past the start of its slot this take
        came, 0 when on time or early: a purge that comes late keeps coming late, so it is behind
        the cap's schedule; how long it waited for its slot). Per take, not kept on the cap: its
        takers share it, and another would overwrite them while this one sleeps."""
        if self.rate <= 0 or n <= 0:
            return 0.0, 0.0
        now = self._clock()
        late = 0.0 if self._next is None else max(0.0, now - self._next)
        start = now if self._next is None else max(now, self._next)
        waited = start - now
        self._next = start + n / self.rate  # reserved before waiting: no other take can use it
        if start > now:
            await self._sleep(start - now)
        return late, waited


async def time_probe(write: Callable[[], Awaitable[None]],
                     clock: Callable[[], float] = time.monotonic) -> float | None:
    """Seconds one probe took, or None if it failed (logged; never a reason to stop a purge)."""
    t0 = clock()
    try:
        await write()
    except Exception as exc:  # noqa: BLE001 - e.g. a pool at its quota
        log.warning("purge pacing probe failed", error=str(exc))
        return None
    return clock() - t0


async def probe_loop(pacer: Pacer, write: Callable[[], Awaitable[None]], *, interval_s: float,
                     stop: asyncio.Event, clock: Callable[[], float] = time.monotonic) -> None:
    """Time one probe write every ``interval_s`` until ``stop`` is set; a failed probe counts as
    a slow one."""
    while not stop.is_set():
        took = await time_probe(write, clock)
        pacer.observe(max(pacer.target_s * 2, 1.0) if took is None else took, clock())
        try:
            async with bounded(interval_s):
                await stop.wait()
        except asyncio.TimeoutError:
            pass


BEFORE_PROBES, BEFORE_PROBE_GAP_S = 9, 0.1  # a paced run's first probes, before any change
MIN_TARGET_S = 1e-4


class Probe:
    """A paced run's probe: what a write costs before the first change (its target), then a
    probe every ``interval_s`` that drives ``pacer`` until :meth:`stop`.

    ``absolute_s``: a latency target; ``increase``: a target relative to the median probe
    before the run (x (1 + increase)). With both, the lower one holds; an absolute target
    below what a probe costs before the run means the run crawls at its floor."""

    def __init__(self, pacer: Pacer, write: Callable[[], Awaitable[None]], *, absolute_s: float, increase: float,
                 interval_s: float, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.pacer = pacer
        self.write = write
        self.absolute_s = absolute_s
        self.increase = increase
        self.interval_s = interval_s
        self.before_s: float | None = None
        self._clock = clock
        self._sleep = sleep
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self._measure_target()
        self._task = asyncio.create_task(probe_loop(self.pacer, self.write, interval_s=self.interval_s,
                                                    stop=self._stop, clock=self._clock))

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    async def _measure_target(self) -> None:
        samples = []
        for _ in range(BEFORE_PROBES):
            took = await time_probe(self.write, self._clock)
            if took is not None:
                samples.append(took)
            await self._sleep(BEFORE_PROBE_GAP_S)
        if not samples:
            # No reference: an absolute target still works; a relative one has nothing to be
            # relative to, and the run goes at its slowest pace.
            log.warning("purge pacing: no probe answered before the purge; an absolute target is kept, "
                        "a relative one runs the purge at its slowest pace")
            self.pacer.target_s = self.absolute_s or MIN_TARGET_S
            return
        before = self.before_s = max(statistics.median(samples), MIN_TARGET_S)
        targets = [t for t in (self.absolute_s, before * (1 + self.increase) if self.increase > 0 else 0.0) if t > 0]
        self.pacer.target_s = min(targets)
        log.info("purge pacing target", before_ms=round(before * 1000, 2), target_ms=round(self.pacer.target_s * 1000, 2))
        if self.pacer.target_s < before:
            log.warning("purge pacing target below what a probe write costs before the purge: it will run at "
                        "its slowest", before_ms=round(before * 1000, 2), target_ms=round(self.pacer.target_s * 1000, 2))
