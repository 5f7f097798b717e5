"""Under a rate cap the head deleter keeps the cap with as few librados operations in flight as
it takes, up to ``CapWindow.most`` (purge.cap_ops_in_flight): one at a time on a cluster fast
enough for it, more while the cap's schedule runs late if allowed. By default one at a time
only: a cap it cannot reach so is counted as held back by the window, never missed silently."""

from __future__ import annotations

import asyncio
import math

import pytest

from rgwkeeper.purge.checkpoint import Ledger, State
from rgwkeeper.purge.deleters import CapWindow, HeadDeleter
from rgwkeeper.purge.layout import head_oid
from rgwkeeper.purge.pacing import RateCap

MARKER = "zone.4139.3"


class SlowPool:
    """stat_many/remove_many that take ``op_s`` per operation, ``window`` of them at a time, on a
    fake clock; the heads exist until removed (a second removal answers ENOENT, as RADOS does)."""

    def __init__(self, clock: list[float], op_s: float, keys: list[str]) -> None:
        self.clock = clock
        self.op_s = op_s
        self.heads = {head_oid(MARKER, k)[0]: 100 for k in keys}
        self.windows: list[int] = []

    def _take_time(self, n: int, window: int) -> None:
        assert window >= 1
        self.windows.append(window)
        self.clock[0] += math.ceil(n / window) * self.op_s

    async def stat_many(self, objs, *, window):
        self._take_time(len(objs), window)
        return [self.heads.get(oid) for oid, _ in objs]

    async def remove_many(self, objs, *, window):
        self._take_time(len(objs), window)
        return [0 if self.heads.pop(oid, None) is not None else -2 for oid, _ in objs]


def _purge(op_s: float, *, rate: float = 450.0, objects: int = 4500, most: int = 256, cap_most: int | None = 256,
           with_stats: bool = False):
    clock = [0.0]

    async def sleep(s: float) -> None:
        assert s >= 0
        clock[0] += s

    keys = [f"fill/{i:07d}" for i in range(objects)]
    pool = SlowPool(clock, op_s, keys)
    cap = RateCap(rate, clock=lambda: clock[0], sleep=sleep)
    ledger = Ledger(State(plan={}), None, interval_s=1.0, clock=lambda: clock[0])
    heads = HeadDeleter(pool, pool="data", marker=MARKER, head_chunk_bytes=4 << 20, window=most, pacer=None,
                        cap=cap, ledger=ledger,
                        **({"cap_window": CapWindow(most=cap_most)} if cap_most is not None else {}))
    entries = [{"Key": k, "Size": 100, "ETag": '"abc"'} for k in keys]
    left = asyncio.run(heads.remove(entries, sweep=False))
    assert left == [] and pool.heads == {}
    assert ledger.counters["direct_removed"] == objects
    if with_stats:
        return clock[0], pool.windows, heads.cap_stats
    return clock[0], pool.windows


def test_a_fast_cluster_gets_one_operation_at_a_time_and_the_cap():
    # 0.5 ms an operation: a request of 45 stats and 45 removals takes 45 ms of its 100 ms slot.
    took, windows = _purge(0.0005)
    assert set(windows) == {1}
    assert 4500 / took == pytest.approx(450, rel=0.02)


@pytest.mark.parametrize("op_s", [0.003, 0.02])
def test_a_slow_cluster_gets_as_many_in_flight_as_keep_the_cap(op_s):
    # 3 ms an operation: one at a time, a request of 45 takes 270 ms of a 100 ms slot (167/s);
    # 20 ms: 1.8 s (25/s). The window widens until the cap holds, and no further than needed;
    # the widening costs a few slow requests at the start (4 s at 20 ms), hence a long purge.
    took, windows = _purge(op_s, objects=45000)
    one_at_a_time = 1 / (2 * op_s)
    assert 45000 / took >= 0.9 * 450 > 2 * one_at_a_time
    needed = 2 * 45 * op_s / 0.1  # operations in flight a 100 ms slot needs
    assert max(windows) <= 4 * needed and max(windows[-20:]) >= needed / 2


def test_the_window_never_passes_the_configured_one():
    took, windows = _purge(0.02, most=4)
    assert max(windows) == 4
    assert 4500 / took < 450  # the operator's bound wins over the cap: the report shows the rate


def test_by_default_one_operation_at_a_time_even_behind_the_cap_and_the_window_is_said_to_hold_it_back():
    took, windows, stats = _purge(0.003, objects=4500, cap_most=None, with_stats=True)
    assert set(windows) == {1}
    assert 4500 / took == pytest.approx(1 / (2 * 0.003), rel=0.05)  # one stat and one removal at a time
    # 45 objects a request: 270 ms of work for a 100 ms slot, every one of the 100.
    assert (stats.requests, stats.slow, stats.held_back()) == (100, 100, True)


def test_a_cap_reached_one_at_a_time_is_not_held_back():
    took, windows, stats = _purge(0.0005, cap_most=None, with_stats=True)
    assert set(windows) == {1} and (stats.requests, stats.slow, stats.held_back()) == (100, 0, False)


def test_a_request_slow_below_its_most_is_not_counted_against_the_window():
    # 20 ms an operation: at 1 and 2 in flight every request is slow, but only those at the
    # most (2) are the window's doing; the first one, at 1, widens it.
    took, windows, stats = _purge(0.02, objects=900, cap_most=2, with_stats=True)
    assert max(windows) == 2 and windows[:2] == [1, 1]
    assert stats.requests == 20 and stats.slow == 19 and stats.held_back()


def test_no_capped_request_says_nothing_about_the_window():
    assert CapWindow().held_back() is None


def test_the_window_is_never_wider_than_the_configured_one_whatever_cap_most_says():
    took, windows, stats = _purge(0.02, most=2, cap_most=8, with_stats=True)
    assert max(windows) == 2 and stats.held_back()


def test_without_a_cap_the_configured_window_is_used_throughout():
    clock = [0.0]
    keys = [f"fill/{i:07d}" for i in range(300)]
    pool = SlowPool(clock, 0.001, keys)
    ledger = Ledger(State(plan={}), None, interval_s=1.0, clock=lambda: clock[0])
    heads = HeadDeleter(pool, pool="data", marker=MARKER, head_chunk_bytes=4 << 20, window=64, pacer=None,
                        cap=RateCap(0), ledger=ledger)
    asyncio.run(heads.remove([{"Key": k, "Size": 100, "ETag": '"e"'} for k in keys], sweep=False))
    assert set(pool.windows) == {64}


def test_the_cap_says_how_late_and_how_early_each_take_came():
    clock = [0.0]

    async def sleep(s: float) -> None:
        clock[0] += s

    cap = RateCap(100.0, clock=lambda: clock[0], sleep=sleep)
    late_s, waited_s = asyncio.run(cap.take(10))  # the first: on time, its slot 0.0-0.1
    assert (late_s, waited_s) == (0.0, 0.0)
    clock[0] = 0.25
    late_s, waited_s = asyncio.run(cap.take(10))  # its slot started at 0.1: 0.15 s late
    assert late_s == pytest.approx(0.15) and waited_s == 0.0
    late_s, waited_s = asyncio.run(cap.take(10))  # the next slot starts at 0.35: waits 0.1 s
    assert late_s == 0.0 and waited_s == pytest.approx(0.1)


def test_paced_and_capped_the_pacers_chunks_keep_the_caps_window_and_are_not_timed():
    # --impact low is a cap and pacing: the pacer's chunks used to take their width from
    # rados_ops_in_flight (256: a request's stats all at once), not from the cap's window.
    from rgwkeeper.purge.pacing import Limiter, Pacer

    clock = [0.0]

    async def sleep(s: float) -> None:
        clock[0] += s

    keys = [f"fill/{i:07d}" for i in range(450)]
    pool = SlowPool(clock, 0.0005, keys)
    pacer = Pacer(0.02)  # at full share: limit(256) is 256
    heads = HeadDeleter(pool, pool="data", marker=MARKER, head_chunk_bytes=4 << 20, window=256, pacer=pacer,
                        cap=RateCap(45.0, clock=lambda: clock[0], sleep=sleep),
                        ledger=Ledger(State(plan={}), None, interval_s=1.0, clock=lambda: clock[0]),
                        limiter=Limiter(lambda: 1, clock=lambda: clock[0], sleep=sleep))
    asyncio.run(heads.remove([{"Key": k, "Size": 100, "ETag": '"e"'} for k in keys], sweep=False))
    assert pool.heads == {} and set(pool.windows) == {1}
    assert heads.cap_stats.requests == 0 and heads.cap_stats.held_back() is None  # pacing's pauses are not the window's
