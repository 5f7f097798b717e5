"""Run a workload: worker processes, one start barrier, raw records streamed to a collector.

Prepare / Start / Cleanup, as warp does it:

1. The parent creates the buckets, then starts ``workers`` processes (forked when the
   parent has no other thread, else spawned, so none inherits a lock held by a librados
   thread). Each worker writes its share of the objects GET
   and DELETE need, then waits on one barrier with the others and the parent. The last to
   arrive stamps the common start time ``t0`` (CLOCK_MONOTONIC is system-wide, so every
   process reads the same clock).
2. **Open loop** (``rate`` set): request ``n`` of worker ``w`` is *intended* to start at
   ``t0 + (n * workers + w) / rate``, whatever happened to earlier requests. A scheduler
   hands each request to a free connection at its intended time; when none is free (the
   server stalls) it waits, and its latency is still measured from the intended start, so
   a stall shows up in every request it delayed, not only in the few that were in flight
   (no coordinated omission; HdrHistogram calls this the expected-interval correction).
   **Closed loop** (``rate`` unset): ``concurrency`` requests in flight, each starting when
   the previous one ends; its latency is service time (the intended start is the start).
3. Every request becomes one raw record (op, status, size, intended start, start, first
   byte, end), batched and sent to the parent every ``FLUSH_S`` seconds over a pipe. The
   parent collects them, keeps a live view for the progress line, and calls a controller
   every tick (``verify`` starts maintenance from there and marks events).
4. Workers delete what their plan wrote (unless ``keep``), and the parent deletes the
   buckets it created.

Time is injected into :func:`drive` (``clock``, ``sleep``) so its scheduling is tested
without real waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import multiprocessing as mp
import multiprocessing.connection
import os
import signal
import threading
import time
from array import array
from dataclasses import asdict, dataclass, field
from typing import Any, Awaitable, Callable, Protocol

import structlog

from rgwkeeper.access import RgwCredentials
from rgwkeeper.aio import bounded
from rgwkeeper.errors import CephError, CephTimeout, CephUnreachable, RgwkeeperError, UsageError
from rgwkeeper.lifeline import die_with_parent
from rgwkeeper.loadgen.client import S3Clients, S3Ops, is_ok
from rgwkeeper.loadgen.client import run as run_loop
from rgwkeeper.loadgen.workload import FIELDS, OP_CODES, TYPECODES, Request, Workload, WorkerPlan
from rgwkeeper.units import check_number, check_text

log = structlog.get_logger("rgwkeeper.loadgen")
CLEANUP_IN_FLIGHT = 8  # DeleteObjects batches in flight for the cleanup of all workers together

#: Seconds between two record batches sent by a worker.
FLUSH_S = 0.25
#: Lead between the barrier and t0, so every process is scheduled before its first request.
START_LEAD_NS = 50_000_000
_NEVER = 1 << 62


@dataclass(frozen=True)
class RunSpec:
    """One load run. Times in seconds, rates in requests per second (all workers together)."""

    endpoint: str
    workload: Workload
    #: Open loop at this rate; None: closed loop.
    rate: float | None = None
    #: Closed loop: requests in flight. Open loop: the most in flight before requests queue.
    concurrency: int = 16
    workers: int = 1
    #: None: run until the controller calls ``stop()`` (``verify``).
    duration_s: float | None = 30.0
    request_timeout_s: float = 30.0
    region: str = "default"
    #: The objects are already there (an earlier run with the same seed and workers).
    skip_prepare: bool = False
    keep: bool = False
    prepare_concurrency: int = 16
    prepare_timeout_s: float = 600.0
    #: Further RGW endpoints of the same zone: requests spread over all (the least busy first).
    more_endpoints: tuple[str, ...] = ()
    #: One agent of several (``loadgen agent``): its workers are ``worker_base`` on of
    #: ``fleet_workers`` in all, ``rate`` is the whole fleet's and the open-loop schedule is
    #: interleaved over every agent's workers; the buckets are the coordinator's to create.
    worker_base: int = 0
    fleet_workers: int = 0

    @property
    def endpoints(self) -> tuple[str, ...]:
        return (self.endpoint, *self.more_endpoints)

    def __post_init__(self) -> None:
        check_number(self.workers, "workers", lo=1, hi=256, integer=True)
        check_number(self.concurrency, "concurrency", lo=1, hi=100_000, integer=True)
        if self.concurrency < self.workers:
            raise UsageError(f"need at least one worker and one request in flight per worker "
                             f"(workers {self.workers}, concurrency {self.concurrency})")
        if self.rate is not None:
            check_number(self.rate, "rate", lo=0.001, hi=1_000_000, unit=" requests/s")
        if self.duration_s is not None:
            check_number(self.duration_s, "duration", lo=1, hi=86400, unit=" s")
        check_number(self.request_timeout_s, "request_timeout_s", lo=0.001, hi=600, unit=" s")
        check_number(self.prepare_concurrency, "prepare_concurrency", lo=1, hi=10_000, integer=True)
        check_number(self.prepare_timeout_s, "prepare_timeout_s", lo=1, hi=86400, unit=" s")
        check_text(self.region, "region")
        check_number(self.worker_base, "worker_base", lo=0, hi=1_000_000, integer=True)
        check_number(self.fleet_workers, "fleet_workers", lo=0, hi=1_000_000, integer=True)
        if self.fleet_workers and self.worker_base + self.workers > self.fleet_workers:
            raise UsageError(f"workers {self.worker_base}..{self.worker_base + self.workers - 1} are not among "
                             f"the fleet's {self.fleet_workers}")

    @property
    def in_fleet(self) -> bool:
        return self.fleet_workers > 0

    def global_worker(self, index: int) -> int:
        return self.worker_base + index

    @property
    def mode(self) -> str:
        return "open" if self.rate is not None else "closed"

    def in_flight(self, worker: int) -> int:
        """This worker's share of ``concurrency`` (the shares add up to it)."""
        return self.concurrency // self.workers + (1 if worker < self.concurrency % self.workers else 0)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["workload"] = self.workload.to_dict()
        d["mode"] = self.mode
        return d


class Recorder:
    """Raw records as columns (array of machine ints: cheap to append and to ship)."""

    def __init__(self) -> None:
        self.cols = [array(t) for t in TYPECODES]
        self.count = 0

    def add(self, op: int, status: int, size: int, intended: int, start: int, first_byte: int, end: int) -> None:
        c = self.cols
        c[0].append(op)
        c[1].append(status)
        c[2].append(size)
        c[3].append(intended)
        c[4].append(start)
        c[5].append(first_byte)
        c[6].append(end)
        self.count += 1

    def take(self) -> list[bytes] | None:
        if not len(self.cols[0]):
            return None
        out = [c.tobytes() for c in self.cols]
        self.cols = [array(t) for t in TYPECODES]
        return out


Execute = Callable[[Request], Awaitable[tuple[int, int, int]]]


async def drive(plan: WorkerPlan, execute: Execute, recorder: Recorder, *, t0: int, in_flight: int,
                stop_at: Callable[[], int], rate: float | None = None, worker: int = 0, workers: int = 1,
                clock: Callable[[], int] = time.monotonic_ns,
                sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> int:
    """Issue the plan's requests until ``stop_at()`` (ns, same clock); return how many ran.

    Open loop when ``rate`` is set: request ``n`` is intended at ``t0 + (n*workers+worker)/rate``
    and recorded with that intended start even when it had to wait for a free slot.
    """
    issued = 0

    async def run_one(intended: int, req: Request) -> None:
        nonlocal issued
        start = clock()
        status, first_byte, size = await execute(req)
        end = clock()
        recorder.add(OP_CODES[req.op], status, size, intended if intended else start, start,
                     first_byte or end, end)
        issued += 1

    if rate is None:
        async def closed_loop() -> None:
            while clock() < stop_at():
                await run_one(0, plan.next())

        await asyncio.gather(*(closed_loop() for _ in range(in_flight)))
        return issued

    queue: asyncio.Queue[tuple[int, Request] | None] = asyncio.Queue()

    async def connection() -> None:
        while (item := await queue.get()) is not None:
            await run_one(*item)

    conns = [asyncio.ensure_future(connection()) for _ in range(in_flight)]
    try:
        interval_ns = 1e9 / rate
        n = 0
        while True:
            intended = t0 + int((n * workers + worker) * interval_ns)
            if intended >= stop_at():
                break
            delay = intended - clock()
            if delay > 0:
                await sleep(delay / 1e9)
                if intended >= stop_at():  # stopped while we slept
                    break
            queue.put_nowait((intended, plan.next()))
            n += 1
        for _ in conns:
            queue.put_nowait(None)
        await asyncio.gather(*conns)
    finally:
        for c in conns:
            c.cancel()
    return issued


# -- the worker process -------------------------------------------------------------------------

def _stamp_start(t0: Any, stop: Any, duration_ns: int | None) -> None:
    # Runs in whichever process reaches the barrier last, before any is released. An agent's
    # start was set before the barrier (the coordinator's start time on this host's clock).
    t0.value = t0.value or time.monotonic_ns() + START_LEAD_NS
    if duration_ns is not None and not stop.value:
        stop.value = t0.value + duration_ns


def _die_with_parent() -> None:
    """The kernel kills this worker when its parent dies (SIGKILL leaves it no time to stop us)."""
    # The pid the parent had when it started us: if it died while we were still importing,
    # we have already been re-parented and getppid() alone would not tell. (Workers are forked
    # or spawned by the load generator itself; under a forkserver the parent would be the server.)
    spawner = mp.parent_process()
    die_with_parent(signal.SIGKILL, spawner.pid if spawner is not None else os.getppid())


def _worker_main(spec: RunSpec, index: int, credentials: RgwCredentials, conn: Any, barrier: Any,
                 t0: Any, stop_at: Any) -> None:
    # The parent handles Ctrl-C and tells workers to stop through ``stop_at``.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Forked from inside the parent's event loop: forget that loop (Python 3.11 does not at
    # fork) and its signal wake-up fd, then run our own.
    asyncio.events._set_running_loop(None)
    signal.set_wakeup_fd(-1)
    _die_with_parent()
    try:
        run_loop(_worker(spec, index, credentials, conn, barrier, t0, stop_at))
    except BaseException as exc:  # noqa: BLE001 - report any failure to the parent, then exit
        barrier.abort()
        msg = str(exc) if isinstance(exc, RgwkeeperError) else f"{type(exc).__name__}: {str(exc)[:200]}"
        try:
            conn.send(WorkerFailed(index, msg))
        except OSError:
            pass
    finally:
        conn.close()


async def _worker(spec: RunSpec, index: int, credentials: RgwCredentials, conn: Any, barrier: Any,
                  t0_value: Any, stop_value: Any) -> None:
    plan = WorkerPlan(spec.workload, spec.global_worker(index))
    pool = memoryview(spec.workload.payload_pool())
    in_flight = spec.in_flight(index)
    async with S3Clients(spec.endpoints, credentials, region=spec.region, timeout_s=spec.request_timeout_s,
                         connections=max(in_flight, spec.prepare_concurrency)) as s3:

        async def execute(req: Request) -> tuple[int, int, int]:
            if req.op == "PUT":
                return await s3.put_object(req.bucket, req.key, pool[req.offset:req.offset + req.size])
            if req.op == "GET":
                return await s3.get_object(req.bucket, req.key)
            if req.op == "LIST":
                return await s3.list_objects(req.bucket, req.key, spec.workload.list_max_keys)
            return await s3.delete_object(req.bucket, req.key)

        prepared = list(plan.prepare())
        prepare_errors = 0 if spec.skip_prepare else await _prepare(execute, prepared, spec.prepare_concurrency)
        conn.send(Ready(index, len(prepared), prepare_errors))
        await asyncio.to_thread(barrier.wait, spec.prepare_timeout_s)
        t0 = t0_value.value
        now = time.monotonic_ns()
        if t0 > now:
            await asyncio.sleep((t0 - now) / 1e9)

        recorder = Recorder()
        done = asyncio.Event()

        async def flusher() -> None:
            while not done.is_set():
                try:
                    async with bounded(FLUSH_S):
                        await done.wait()
                except asyncio.TimeoutError:
                    pass
                batch = recorder.take()
                if batch:
                    conn.send(Records(index, batch))

        flush_task = asyncio.ensure_future(flusher())
        cpu0 = time.process_time()
        counts0 = s3.pool.counts()
        try:
            issued = await drive(plan, execute, recorder, t0=t0, in_flight=in_flight,
                                 stop_at=lambda: stop_value.value or _NEVER, rate=spec.rate,
                                 worker=spec.global_worker(index), workers=spec.fleet_workers or spec.workers)
        finally:
            cpu = time.process_time() - cpu0
            done.set()
            await flush_task
        counts = s3.pool.counts()
        conn.send(Done(index, issued, cpu, plan.substituted,
                       {url: [n - counts0[url][0], f - counts0[url][1]] for url, (n, f) in counts.items()}))
        cleanup_failed = 0 if spec.keep else await _cleanup(s3, plan.live_objects(),
                                                             max(1, CLEANUP_IN_FLIGHT // spec.workers))
        conn.send(Cleaned(index, len(plan.live_objects()), cleanup_failed))


async def _prepare(execute: Execute, requests: list[Request], concurrency: int) -> int:
    sem = asyncio.Semaphore(concurrency)
    errors = 0

    async def one(req: Request) -> None:
        nonlocal errors
        async with sem:
            status, _, _ = await execute(req)
            if not is_ok(status):
                errors += 1
                if errors == 1:
                    log.warning("prepare_put_failed", bucket=req.bucket, status=status)

    await asyncio.gather(*(one(r) for r in requests))
    return errors


async def _cleanup(s3: S3Ops, objects: list[Request], in_flight: int = CLEANUP_IN_FLIGHT, tries: int = 3,
                   pause_s: float = 2.0) -> int:
    """DeleteObjects in batches of 1000, ``in_flight`` batches at once (several in flight are
    faster than one: docs/purge.md; the caller splits them between its workers). A batch that
    timed out or found RGW unreachable is sent again after a pause (deleting a deleted key
    succeeds): after a run beside a deep scrub, batches outlived the request timeout while RGW
    went on deleting them (docs/loadgen.md). Other errors are counted at once."""
    batches = []
    by_bucket: dict[str, list[str]] = {}
    for obj in objects:
        by_bucket.setdefault(obj.bucket, []).append(obj.key)
    for bucket, keys in by_bucket.items():
        batches.extend((bucket, keys[i:i + 1000]) for i in range(0, len(keys), 1000))
    sem = asyncio.Semaphore(in_flight)

    async def one(bucket: str, keys: list[str]) -> int:
        async with sem:
            for attempt in range(tries):
                try:
                    return await s3.delete_objects(bucket, keys)
                except CephError as e:
                    if attempt == tries - 1 or not isinstance(e, (CephTimeout, CephUnreachable)):
                        log.warning("cleanup_batch_failed", bucket=bucket, keys=len(keys), error=str(e))
                        break
                    await asyncio.sleep(pause_s)
            return len(keys)

    return sum(await asyncio.gather(*(one(b, k) for b, k in batches)))


# -- the parent: start, collect, control ----------------------------------------------------------

@dataclass
class Event:
    """Something that happened during a run, at ``t`` seconds after t0 (maintenance start...)."""

    t: float
    kind: str
    what: str
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunData:
    """What a run produced: raw record columns (times in ns after t0) and what surrounded them."""

    spec: dict[str, Any]
    columns: dict[str, bytes]  # name -> one column as machine ints (workload.FIELDS / TYPECODES)
    t0_ns: int  # CLOCK_MONOTONIC at the start; record times are on the same clock
    stop_s: float
    events: list[Event]
    workers: list[dict[str, Any]]
    parent_cpu_s: float
    started_at: str
    notes: list[str]


class Live:
    """The collector's running view, read by the progress line (thread-safe enough: ints)."""

    def __init__(self) -> None:
        self.requests = 0
        self.errors = 0
        self.last_second: dict[str, float] = {}
        self._seconds: dict[int, list[int]] = {}  # second -> latencies (us) of requests ending in it
        self._ok: dict[int, int] = {}

    def add(self, status: array, intended: array, end: array, t0: int) -> None:
        for st, it, en in zip(status, intended, end):
            sec = (en - t0) // 1_000_000_000
            self.requests += 1
            if 200 <= st < 300:
                self._seconds.setdefault(sec, []).append((en - it) // 1000)
                self._ok[sec] = self._ok.get(sec, 0) + 1
            else:
                self.errors += 1

    def roll(self, now_s: float) -> None:
        """Publish the last complete second (batches arrive up to FLUSH_S late)."""
        sec = int(now_s - FLUSH_S) - 1
        if sec < 0:
            return
        lat = sorted(self._seconds.get(sec, []))
        p99 = lat[min(len(lat) - 1, math.ceil(0.99 * len(lat)) - 1)] / 1000 if lat else float("nan")
        self.last_second = {"second": sec, "ops": self._ok.get(sec, 0), "p99_ms": p99}
        for old in [s for s in self._seconds if s < sec - 2]:
            del self._seconds[old]


class RunHandle:
    """What a controller may do during a run: read the time, mark events, stop the load."""

    def __init__(self, t0_ns: int, stop_value: Any, events: list[Event]) -> None:
        self.t0_ns = t0_ns
        self._stop = stop_value
        self.events = events

    def now_s(self) -> float:
        return (time.monotonic_ns() - self.t0_ns) / 1e9

    def mark(self, kind: str, what: str, **detail: Any) -> Event:
        ev = Event(round(self.now_s(), 3), kind, what, detail)
        self.events.append(ev)
        log.info("loadgen_event", kind=kind, what=what, t=ev.t, **detail)
        return ev

    def stop(self, after_s: float = 0.0) -> None:
        """Stop issuing requests ``after_s`` seconds from now (never later than already set)."""
        at = time.monotonic_ns() + int(after_s * 1e9)
        if self._stop.value == 0 or at < self._stop.value:
            self._stop.value = at


Controller = Callable[[RunHandle], Awaitable[None]]
Progress = Callable[[float, Live], None]


class StartGate(Protocol):
    """An agent's run starts and stops when its coordinator says (``loadgen.fleet``). Both
    block (they run on a thread) and give times on this host's CLOCK_MONOTONIC, in ns."""

    def start_ns(self, timeout_s: float) -> int:
        """Called once every worker is prepared: when the load starts."""

    def stop_ns(self) -> int | None:
        """Called every tick of the run: when the load stops, once known."""

    def check(self) -> None:
        """Called about once a second while the workers prepare: raise to stop the run."""


async def run_load(spec: RunSpec, credentials: RgwCredentials, *, controller: Controller | None = None,
                   progress: Progress | None = None, tick_s: float = 0.5, gate: StartGate | None = None) -> RunData:
    """Prepare, run and clean up one load run; ``controller`` runs as a task once load starts."""
    if spec.duration_s is None and controller is None and gate is None:
        raise UsageError("a run without a duration needs a controller to stop it")
    notes: list[str] = []
    # An agent's buckets are its coordinator's, made before the agents came.
    created = [] if spec.in_fleet else await make_buckets(spec, credentials)

    # fork when nothing else runs in this process (no thread can hold a lock the child would
    # inherit): the workers then start without importing anything, about 0.3 s of CPU less
    # each on the 2-core box; spawn otherwise.
    ctx = mp.get_context("fork" if threading.active_count() == 1 else "spawn")
    t0 = ctx.Value("q", 0, lock=False)
    stop_value = ctx.Value("q", 0, lock=False)
    duration_ns = None if spec.duration_s is None else int(spec.duration_s * 1e9)
    barrier = ctx.Barrier(spec.workers + 1, action=functools.partial(_stamp_start, t0, stop_value, duration_ns))
    conns, procs = [], []
    for i in range(spec.workers):
        parent_end, child_end = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_worker_main, name=f"rgwkeeper-loadgen-{i}", daemon=True,
                        args=(spec, i, credentials, child_end, barrier, t0, stop_value))
        p.start()
        child_end.close()
        conns.append(parent_end)
        procs.append(p)

    collector = _Collector(conns, spec.workers)
    collector.start()
    events: list[Event] = []
    started_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    control_task: asyncio.Task[None] | None = None
    try:
        if gate is not None:
            await asyncio.to_thread(_wait_ready, collector, spec.prepare_timeout_s, gate.check)
            t0.value = await asyncio.to_thread(gate.start_ns, spec.prepare_timeout_s)
            if duration_ns is not None:
                stop_value.value = t0.value + duration_ns
        await asyncio.to_thread(_wait_barrier, barrier, spec.prepare_timeout_s, collector)
        collector.t0 = t0.value
        cpu0 = time.process_time()
        handle = RunHandle(t0.value, stop_value, events)
        if controller is not None:
            control_task = asyncio.ensure_future(controller(handle))
        while not collector.all_done():
            if collector.failure:
                raise CephError("load run", collector.failure)
            if control_task is not None and control_task.done():
                control_task.result()  # re-raise a controller failure
            if gate is not None and (at := await asyncio.to_thread(gate.stop_ns)) is not None:
                stop_value.value = min(stop_value.value or at, at)
            now_s = handle.now_s()
            collector.live.roll(now_s)
            if progress is not None:
                progress(now_s, collector.live)
            if stop_value.value and time.monotonic_ns() > stop_value.value + int((spec.request_timeout_s + 10) * 1e9):
                raise CephError("load run", "workers did not finish within the request timeout after the stop")
            await asyncio.sleep(tick_s)
        parent_cpu = time.process_time() - cpu0
        if control_task is not None:
            await control_task
        stop_s = (stop_value.value - t0.value) / 1e9
        await asyncio.to_thread(collector.wait_cleaned, 120.0 + spec.request_timeout_s)
    finally:
        stop_value.value = stop_value.value or time.monotonic_ns()
        if control_task is not None and not control_task.done():
            control_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await control_task
        barrier.abort()
        for p in procs:
            await asyncio.to_thread(p.join, 5)
            if p.is_alive():
                p.terminate()
                await asyncio.to_thread(p.join, 5)
        collector.stop()
        notes.extend(left_note(b) for b in await remove_buckets(spec, credentials, created))

    for w in collector.cleaned:
        if w["failed"]:
            notes.append(f"cleanup could not delete {w['failed']} objects")
    substituted = sum(w.get("substituted", 0) for w in collector.done)
    if substituted:
        notes.append(f"{substituted} GET/DELETE were turned into PUT: too few live objects (raise --objects)")
    if collector.prepare_errors:
        notes.append(f"{collector.prepare_errors} prepare PUTs failed")
    return RunData(spec=spec.to_dict(), columns=collector.columns(), t0_ns=collector.t0, stop_s=stop_s, events=events,
                   workers=sorted(collector.done, key=lambda w: w["worker"]), parent_cpu_s=parent_cpu,
                   started_at=started_at, notes=notes)


async def make_buckets(spec: RunSpec, credentials: RgwCredentials) -> list[str]:
    """Create the workload's buckets that are missing; return those it created."""
    async with S3Clients(spec.endpoints, credentials, region=spec.region, timeout_s=spec.request_timeout_s) as s3:
        return [b for b in spec.workload.bucket_names() if await s3.create_bucket_if_missing(b)]


async def remove_buckets(spec: RunSpec, credentials: RgwCredentials, created: list[str]) -> list[str]:
    """Remove the buckets a run created (unless it keeps them); return those left (not empty)."""
    if not created or spec.keep:
        return []
    async with S3Clients(spec.endpoints, credentials, region=spec.region, timeout_s=spec.request_timeout_s) as s3:
        return [b for b in created if not await s3.delete_bucket(b)]


def left_note(bucket: str) -> str:
    return f"bucket {bucket} was not empty after cleanup; left in place"


def _wait_ready(collector: "_Collector", timeout: float, check: Callable[[], None]) -> None:
    deadline = time.monotonic() + timeout
    checked = time.monotonic()
    while collector.ready < collector.workers:
        if time.monotonic() - checked >= 1.0:
            check()
            checked = time.monotonic()
        if collector.failure:
            raise CephError("prepare", collector.failure)
        if time.monotonic() > deadline:
            raise CephError("prepare", f"workers not ready within {timeout:.0f} s (prepare too slow or a worker died)")
        time.sleep(0.05)


def _wait_barrier(barrier: Any, timeout: float, collector: "_Collector") -> None:
    try:
        barrier.wait(timeout)
    except threading.BrokenBarrierError:
        # Give the worker's error message a moment to arrive through its pipe.
        deadline = time.monotonic() + 2
        while not collector.failure and time.monotonic() < deadline:
            time.sleep(0.05)
        raise CephError("prepare", collector.failure or
                        f"workers not ready within {timeout:.0f} s (prepare too slow or a worker died)") from None


# -- what a worker tells the parent, over its pipe (pickled) ------------------------------------

@dataclass(frozen=True)
class Ready:
    """Prepared (its share of the objects GET and DELETE need written); waiting on the barrier."""

    worker: int
    prepared: int
    prepare_errors: int


@dataclass(frozen=True)
class Records:
    """A batch of raw records: one bytes column per field (``TYPECODES``)."""

    worker: int
    columns: list[bytes]


@dataclass(frozen=True)
class Done:
    """The load phase is over for this worker."""

    worker: int
    requests: int
    cpu_s: float
    substituted: int
    #: Load-phase requests and connection failures per RGW endpoint: {url: [requests, failures]}.
    endpoints: dict[str, list[int]] = field(default_factory=dict)


@dataclass(frozen=True)
class Cleaned:
    """The worker deleted what it wrote (``failed`` deletes did not go through)."""

    worker: int
    objects: int
    failed: int


@dataclass(frozen=True)
class WorkerFailed:
    worker: int
    error: str


WorkerMessage = Ready | Records | Done | Cleaned | WorkerFailed


def _stats(msg: Done | Cleaned) -> dict[str, Any]:
    return asdict(msg)  # {"worker": N, ...}: what RunData.workers and the cleanup summary carry


class _Collector(threading.Thread):
    """Reads every worker's pipe: record batches, readiness, completion, errors."""

    def __init__(self, conns: list[Any], workers: int) -> None:
        super().__init__(name="loadgen-collector", daemon=True)
        self.conns = list(conns)
        self.workers = workers
        self.batches: list[list[bytes]] = []
        self.live = Live()
        self.t0 = 0
        self.done: list[dict[str, Any]] = []
        self.cleaned: list[dict[str, Any]] = []
        self.prepare_errors = 0
        self.ready = 0
        self.failure: str | None = None
        self._stopping = threading.Event()
        self._cleaned_evt = threading.Event()

    def run(self) -> None:
        open_conns = list(self.conns)
        while open_conns and not self._stopping.is_set():
            for c in mp.connection.wait(open_conns, timeout=0.2):
                try:
                    msg = c.recv()
                except (EOFError, OSError):
                    open_conns.remove(c)
                    index = self.conns.index(c)
                    # A worker closes its pipe when it exits: fine after its last message.
                    finished = any(w["worker"] == index for w in self.cleaned)
                    if not finished and not self.failure and not self._stopping.is_set():
                        self.failure = f"worker {index} exited unexpectedly"
                    continue
                self._handle(msg)
        self._cleaned_evt.set()

    def _handle(self, msg: WorkerMessage) -> None:
        if isinstance(msg, Records):
            self.batches.append(msg.columns)
            cols = [array(t) for t in TYPECODES]
            for col, raw in zip(cols, msg.columns):
                col.frombytes(raw)
            self.live.add(cols[1], cols[3], cols[6], self.t0)
        elif isinstance(msg, Ready):
            self.prepare_errors += msg.prepare_errors
            self.ready += 1
        elif isinstance(msg, Done):
            self.done.append(_stats(msg))
        elif isinstance(msg, Cleaned):
            self.cleaned.append(_stats(msg))
            if len(self.cleaned) == self.workers:
                self._cleaned_evt.set()
        elif isinstance(msg, WorkerFailed):
            self.failure = self.failure or f"worker {msg.worker}: {msg.error}"
        else:
            self.failure = self.failure or f"unknown message from a worker: {type(msg).__name__}"

    def all_done(self) -> bool:
        return len(self.done) == self.workers

    def wait_cleaned(self, timeout: float) -> None:
        self._cleaned_evt.wait(timeout)

    def stop(self) -> None:
        self._stopping.set()
        self.join(5)

    def columns(self) -> dict[str, bytes]:
        """Every batch joined per column; times made relative to t0."""
        out = {}
        for i, (name, tc) in enumerate(zip(FIELDS, TYPECODES)):
            col = array(tc)
            for b in self.batches:
                col.frombytes(b[i])
            out[name] = col.tobytes()
        return out


def default_workers() -> int:
    """One worker process per core (os.sched_getaffinity: the cores this process may use)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)
