"""Leader lease logic with an injected clock and a fake lock: no real sleeps."""

from __future__ import annotations

import asyncio

from rgwkeeper.errors import CephTimeout
from rgwkeeper.leader import LeaderLease


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


class FakeLock:
    """One lock shared by several contenders, expiring on the shared clock."""

    def __init__(self, clock, lease_s):
        self.clock, self.lease_s = clock, lease_s
        self.holder, self.expires = None, 0.0
        self.fail_next = False

    def backend(self, name, stale_of=None):
        lock = self

        class B:
            async def acquire(self, renew):
                if lock.fail_next:
                    lock.fail_next = False
                    raise CephTimeout("lock", "no answer")
                free = lock.holder is None or lock.clock() >= lock.expires
                if free or lock.holder == name:
                    lock.holder, lock.expires = name, lock.clock() + lock.lease_s
                    return True
                return False

            async def break_stale_own(self):
                if stale_of is not None and lock.holder == stale_of:
                    lock.holder = None
                    return True
                return False

            async def release(self):
                if lock.holder == name:
                    lock.holder = None

        return B()


def tick(lease):
    return asyncio.run(lease.tick())


def test_one_leader_at_a_time():
    clock = Clock()
    lock = FakeLock(clock, 30)
    a = LeaderLease(lock.backend("a"), lease_s=30, clock=clock)
    b = LeaderLease(lock.backend("b"), lease_s=30, clock=clock)
    assert tick(a) and not tick(b)
    for _ in range(10):
        clock.t += 10
        assert tick(a) and not tick(b)
        assert a.is_leader() and not b.is_leader()


def test_a_paused_leader_stops_acting_before_it_acts_again():
    clock = Clock()
    lock = FakeLock(clock, 30)
    a = LeaderLease(lock.backend("a"), lease_s=30, clock=clock)
    b = LeaderLease(lock.backend("b"), lease_s=30, clock=clock)
    assert tick(a)
    clock.t += 25  # past lease minus the safety margin (30 - 6): a must not act any more
    assert not a.is_leader()
    clock.t += 10  # the lock has expired; b takes over
    assert tick(b)
    assert not tick(a)  # a resumes: its renewal fails and it stays out
    assert not a.is_leader() and b.is_leader()
    assert a.transitions == ["acquired"]


def test_renewal_failure_drops_leadership():
    clock = Clock()
    lock = FakeLock(clock, 30)
    a = LeaderLease(lock.backend("a"), lease_s=30, clock=clock)
    assert tick(a)
    lock.fail_next = True
    assert not tick(a) and not a.is_leader()
    clock.t += 1
    assert tick(a)  # nobody else took it: renewing works again


def test_restarted_instance_breaks_its_dead_predecessors_lock():
    clock = Clock()
    lock = FakeLock(clock, 30)
    old = LeaderLease(lock.backend("host1-pid1"), lease_s=30, clock=clock)
    assert tick(old)
    new = LeaderLease(lock.backend("host1-pid2", stale_of="host1-pid1"), lease_s=30, clock=clock)
    clock.t += 1
    assert tick(new)  # did not wait for the 30 s lease
    other = LeaderLease(lock.backend("host2"), lease_s=30, clock=clock)
    assert not tick(other)  # but another host cannot break it


def test_release_lets_another_take_over_at_once():
    clock = Clock()
    lock = FakeLock(clock, 30)
    a = LeaderLease(lock.backend("a"), lease_s=30, clock=clock)
    b = LeaderLease(lock.backend("b"), lease_s=30, clock=clock)
    assert tick(a)
    asyncio.run(a.release())
    assert not a.is_leader() and tick(b)


def test_lease_is_kept_while_a_long_pass_acts_and_lost_once_renewal_fails():
    clock = Clock()
    lock = FakeLock(clock, 30)
    lease = LeaderLease(lock.backend("a"), 30, clock=clock)
    assert tick(lease)

    async def fake_sleep(s):  # each renewal interval moves the shared clock on
        clock.t += s
        await asyncio.sleep(0)

    async def long_pass():
        async with lease.kept_during(10, sleep=fake_sleep):
            for _ in range(50):  # 500 s of work on the clock: far past the 30 s lease
                await asyncio.sleep(0)
                if clock.t >= 100:
                    break
            assert clock.t >= 100 and lease.is_leader()  # 100 s on the clock, lease 30 s: renewed all along
            lock.holder, lock.expires = "b", clock.t + 1000  # someone else takes the lock
            for _ in range(10):
                await asyncio.sleep(0)
            assert not lease.is_leader()  # the next renewal failed: no further action starts

    asyncio.run(long_pass())
    assert lease.transitions == ["acquired", "lost"]
