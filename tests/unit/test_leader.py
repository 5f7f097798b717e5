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
