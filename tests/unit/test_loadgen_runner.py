"""The runner's schedule with an injected clock: open loop keeps intended start times, closed
loop measures service time; a stalled request shows up in every request it delayed."""

from __future__ import annotations

import asyncio
import heapq

import numpy as np

from rgwkeeper.loadgen.analysis import RECORD_DTYPE, latency_summary
from rgwkeeper.errors import CephError, CephTimeout
from rgwkeeper.loadgen.runner import Recorder, RunSpec, _cleanup, drive
from rgwkeeper.loadgen.workload import FIELDS, TYPECODES, Request, Workload, WorkerPlan, parse_mix

MS = 1_000_000


class VirtualTime:
    """Virtual time for coroutines: ``sleep`` waits until the clock reaches its wake-up time,
    and the clock jumps to the earliest wake-up once every coroutine is waiting."""

    def __init__(self) -> None:
        self.now = 0
        self._sleepers: list[tuple[int, int, asyncio.Future[None]]] = []
        self._seq = 0

    def clock(self) -> int:
        return self.now

    async def sleep(self, seconds: float) -> None:
        fut = asyncio.get_running_loop().create_future()
        self._seq += 1
        heapq.heappush(self._sleepers, (self.now + int(seconds * 1e9), self._seq, fut))
        await fut

    async def run(self, coro):
        task = asyncio.ensure_future(coro)
        while not task.done():
            for _ in range(20):  # let everything runnable run until it waits again
                await asyncio.sleep(0)
            if self._sleepers and not task.done():
                wake, _, fut = heapq.heappop(self._sleepers)
                self.now = max(self.now, wake)
                fut.set_result(None)
        return task.result()


def _records(rec: Recorder) -> np.ndarray:
    from array import array

    cols = [array(t, b) for t, b in zip(TYPECODES, rec.take() or [b""] * 7)]
    out = np.zeros(len(cols[0]), dtype=RECORD_DTYPE)
    for name, col in zip(FIELDS, cols):
        out[name] = col
    return out


def _run(*, rate, stall_at=None, stall_ms=2000, service_ms=50, duration_s=10, in_flight=1, worker=0, workers=1):
    vt = VirtualTime()
    plan = WorkerPlan(Workload(mix=parse_mix("PUT=100"), seed=1), worker)
    calls = []

    async def execute(req):
        calls.append(req)
        await vt.sleep((stall_ms if len(calls) == stall_at else service_ms) / 1000)
        return 200, vt.now, req.size

    rec = Recorder()
    issued = asyncio.run(vt.run(drive(plan, execute, rec, t0=0, in_flight=in_flight,
                                      stop_at=lambda: duration_s * 1000 * MS, rate=rate, worker=worker,
                                      workers=workers, clock=vt.clock, sleep=vt.sleep)))
    return issued, _records(rec)


def test_open_loop_issues_exactly_rate_times_duration_at_their_intended_times():
    issued, r = _run(rate=10)
    assert issued == len(r) == 100
    assert list(r["intended"]) == [i * 100 * MS for i in range(100)]
    assert (r["start"] == r["intended"]).all()  # nothing was late
    assert ((r["end"] - r["start"]) == 50 * MS).all()


def test_a_stall_counts_in_every_request_it_delayed():
    """The coordinated-omission check: one 2 s stall at 10 req/s delays the next ~20 requests."""
    issued, r = _run(rate=10, stall_at=10)
    assert issued == 100
    latency_ms = (r["end"] - r["intended"]) / MS
    service_ms = (r["end"] - r["start"]) / MS
    late = latency_ms > 60
    # Request 10 took 2 s. The 19 scheduled while it ran started late, and so did the 19
    # scheduled while that backlog drained (20/s served against 10/s arriving): each carries
    # its wait, so 39 of 100 requests are slow, where service time shows one.
    assert late.sum() == 39
    assert sorted(service_ms)[-2] == 50  # service time alone hides all but the one
    assert latency_summary(latency_ms * 1000)["p90"] > 1000
    assert abs(latency_summary(service_ms * 1000)["p90"] - 50) < 0.1  # HDR: 3 significant digits
    # Intended starts never move, whatever happened.
    assert list(r["intended"]) == [i * 100 * MS for i in range(100)]


def test_workers_interleave_their_slots():
    _, r0 = _run(rate=10, worker=0, workers=2)
    _, r1 = _run(rate=10, worker=1, workers=2)
    assert len(r0) == len(r1) == 50
    merged = sorted(np.concatenate([r0["intended"], r1["intended"]]).tolist())
    assert merged == [i * 100 * MS for i in range(100)]


def test_closed_loop_measures_from_the_actual_start():
    issued, r = _run(rate=None, stall_at=5, duration_s=3, in_flight=1)
    assert (r["intended"] == r["start"]).all()
    # One connection: 4 x 50 ms, one 2 s stall, then 50 ms each until the 3 s stop.
    assert issued == len(r) == 4 + 1 + 16
    service_ms = (r["end"] - r["intended"]) / MS
    assert sorted(service_ms)[-2] == 50  # closed loop: the stall is one slow request


def test_stop_set_while_the_scheduler_sleeps_ends_the_run():
    vt = VirtualTime()
    plan = WorkerPlan(Workload(mix=parse_mix("PUT=100"), seed=1), 0)
    stop = [1 << 62]

    async def execute(req):
        await vt.sleep(0.01)
        if vt.now >= 400 * MS:  # the stop comes while the scheduler waits for slot 5 (500 ms)
            stop[0] = 480 * MS
        return 200, vt.now, req.size

    rec = Recorder()
    asyncio.run(vt.run(drive(plan, execute, rec, t0=0, in_flight=1, stop_at=lambda: stop[0], rate=10,
                             clock=vt.clock, sleep=vt.sleep)))
    assert len(_records(rec)) == 5


def test_run_spec_splits_concurrency_over_workers():
    spec = RunSpec(endpoint="http://h:1", workload=Workload(), concurrency=7, workers=3)
    assert [spec.in_flight(i) for i in range(3)] == [3, 2, 2]
    assert spec.mode == "closed" and RunSpec(endpoint="x", workload=Workload(), rate=5).mode == "open"


def test_the_collector_tells_a_worker_that_finished_from_one_that_died():
    import multiprocessing as mp

    from rgwkeeper.loadgen.runner import Cleaned, Done, _Collector

    ends = [mp.Pipe(duplex=False) for _ in range(3)]
    collector = _Collector([r for r, _ in ends], 3)
    collector.start()
    (_, w0), (_, w1), (_, w2) = ends
    w0.send(Done(0, 1, 0.0, 0))
    w0.send(Cleaned(0, 0, 0))
    w0.close()  # worker 0 is finished and gone while the others still work
    w1.send(Done(1, 1, 0.0, 0))
    w1.close()  # worker 1 died before it cleaned up
    for _ in range(500):  # the thread reads in the background; bounded wait for it
        if collector.failure:
            break
        collector.join(0.01)
    collector.stop()
    assert collector.failure == "worker 1 exited unexpectedly"
    assert collector.done == [{"worker": 0, "requests": 1, "cpu_s": 0.0, "substituted": 0, "endpoints": {}},
                              {"worker": 1, "requests": 1, "cpu_s": 0.0, "substituted": 0, "endpoints": {}}]
    assert collector.cleaned == [{"worker": 0, "objects": 0, "failed": 0}]
    w2.close()


class _FlakyDeletes:
    """DeleteObjects that times out ``fail_first`` times per batch, then succeeds; strict about
    anything else."""

    def __init__(self, fail_first: int, error: type[CephError] = CephTimeout):
        self.fail_first, self.error = fail_first, error
        self.calls: list[tuple[str, int]] = []

    async def delete_objects(self, bucket: str, keys: list[str]) -> int:
        self.calls.append((bucket, len(keys)))
        if sum(1 for b, n in self.calls if (b, n) == (bucket, len(keys))) <= self.fail_first:
            raise self.error(f"DeleteObjects {bucket}", "no answer within 30 s")
        return 0


def _objects(n: int, bucket: str = "b") -> list[Request]:
    return [Request("PUT", bucket, f"k{i}", 1) for i in range(n)]


def test_cleanup_sends_a_timed_out_batch_again():
    s3 = _FlakyDeletes(fail_first=1)
    assert asyncio.run(_cleanup(s3, _objects(1500), in_flight=2, pause_s=0)) == 0
    assert sorted(s3.calls) == [("b", 500), ("b", 500), ("b", 1000), ("b", 1000)]


def test_cleanup_counts_a_batch_that_never_succeeds():
    s3 = _FlakyDeletes(fail_first=5)
    assert asyncio.run(_cleanup(s3, _objects(1200), in_flight=1, tries=3, pause_s=0)) == 1200
    assert len(s3.calls) == 6


def test_cleanup_does_not_resend_a_batch_rgw_refused():
    s3 = _FlakyDeletes(fail_first=5, error=CephError)  # e.g. HTTP 403: sending it again changes nothing
    assert asyncio.run(_cleanup(s3, _objects(1200), in_flight=1, pause_s=0)) == 1200
    assert len(s3.calls) == 2
