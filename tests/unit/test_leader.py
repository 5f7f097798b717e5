"""Leader lease logic with an injected clock, over the real lock backend and ObjectStore, with
cls_lock's behaviour faked at the librados boundary (tests/unit/fakes.FakeLockCluster): no real sleeps."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from rgwkeeper.access import ClusterAccess
from rgwkeeper.adapters.rados import ObjectStore, RadosAdapter
from rgwkeeper.adapters.cephcli import CephCli
from rgwkeeper.daemon.service import RadosLockBackend
from rgwkeeper.leader import LeaderLease
from tests.unit.fakes import FakeLockCluster, load_fixture


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def osd(clock):
    return FakeLockCluster(clock)


@pytest.fixture
def contender(osd, clock, tmp_path):
    """contender(client_no, instance_id, host) -> a LeaderLease over its own RADOS connection."""
    opened = []

    def make(n, instance_id="a", host="host1", lease_s=30, alive=lambda cookie: None):
        access = ClusterAccess(conf=Path(tmp_path / "c"), keyring=None, client_name="client.admin",
                               rgw_endpoint=None, rgw_credentials_file=None, timeout_s=5)
        rados = RadosAdapter(access, factory=lambda a: osd.client(n))
        rados.connect()
        opened.append(rados)
        backend = RadosLockBackend(ObjectStore(rados, "rgwkeeper"),
                                   CephCli(access, "rados", runner=osd.rados_runner),
                                   instance_id=instance_id, host=host, lease_s=lease_s, alive=alive)
        return LeaderLease(backend, lease_s=lease_s, clock=clock)

    yield make
    for r in opened:
        r.close()


def tick(lease):
    return asyncio.run(lease.tick())


def test_the_fake_lock_answers_like_cls_lock(osd, contender):
    import rados

    osd.lock("client.1", "o", "leader", "c1", "d", 30, 0)
    with pytest.raises(rados.ObjectExists):  # same locker, no may-renew flag
        osd.lock("client.1", "o", "leader", "c1", "d", 30, 0)
    osd.lock("client.1", "o", "leader", "c1", "d", 30, 1)
    with pytest.raises(rados.ObjectBusy):  # another locker, flag or not
        osd.lock("client.2", "o", "leader", "c2", "d", 30, 1)
    info = json.loads(asyncio.run(osd.rados_runner(["rados", "lock", "info", "o", "leader"], 5)).stdout)
    assert info.keys() == load_fixture("rados-lock-info.json").keys()
    assert info["lockers"][0].keys() == load_fixture("rados-lock-info.json")["lockers"][0].keys()


def test_one_leader_at_a_time(clock, contender):
    a, b = contender(1, "a"), contender(2, "b")
    assert tick(a) and not tick(b)
    for _ in range(10):
        clock.t += 10
        assert tick(a) and not tick(b)
        assert a.is_leader() and not b.is_leader()


def test_a_paused_leader_stops_acting_before_it_acts_again(clock, contender):
    a, b = contender(1, "a"), contender(2, "b")
    assert tick(a)
    clock.t += 25  # past lease minus the safety margin (30 - 6): a must not act any more
    assert not a.is_leader()
    clock.t += 10  # the lock has expired; b takes over
    assert tick(b)
    assert not tick(a)  # a resumes: its renewal fails and it stays out
    assert not a.is_leader() and b.is_leader()
    assert a.transitions == ["acquired"]


def test_a_renewal_whose_reply_was_lost_is_retried_and_keeps_the_lease(clock, osd, contender):
    # The renewal reached the OSD but its reply never came back: the lock is still ours, and
    # the retry must renew it (cls_lock refuses the same locker without LOCK_FLAG_MAY_RENEW).
    a, b = contender(1, "a"), contender(2, "b")
    assert tick(a)
    clock.t += 10
    osd.lose_next_reply = True
    assert tick(a) and a.last_error is not None  # no answer: the lease we had still runs
    for _ in range(6):  # well past the 30 s lease: the retries kept it
        clock.t += 10
        assert tick(a) and a.last_error is None, a.last_error
        assert not tick(b)
    assert a.transitions == ["acquired"]  # never lost, so never "became leader" (and restored) again


def test_a_leader_whose_renewals_go_unanswered_past_its_lease_stops(clock, osd, contender):
    a = contender(1, "a")
    assert tick(a)
    osd.unreachable = True
    clock.t += 10
    assert tick(a)  # 10 s into a 30 s lease: still leader on its own clock
    clock.t += 15
    assert not tick(a) and not a.is_leader() and not a.held


def test_restarted_instance_on_the_same_host_breaks_its_dead_predecessors_lock(clock, osd, contender):
    old = contender(1, "a", host="host1")
    assert tick(old)
    new = contender(2, "a", host="host1")  # a new RADOS client and cookie, same instance id and host
    clock.t += 1
    assert tick(new)  # did not wait for the 30 s lease
    assert [(c, d) for c, _, d in osd.holders()] == [("client.2", "rgwkeeper a@host1")]


def test_same_instance_id_on_another_host_never_breaks_the_lock(clock, osd, contender):
    first = contender(1, "a", host="host1")
    assert tick(first)
    twin = contender(2, "a", host="host2")  # a copied config: same instance id, other host
    clock.t += 1
    assert not tick(twin)
    assert [c for c, _, _ in osd.holders()] == ["client.1"]
    assert tick(first)  # the first keeps renewing undisturbed


def test_a_lock_from_a_version_without_the_host_is_left_to_expire(clock, osd, contender):
    osd.lock("client.9", "rgwkeeper.leader", "leader", "a-1-x", "rgwkeeper a", 30, 1)
    new = contender(2, "a", host="host1")
    assert not tick(new)
    clock.t += 31
    assert tick(new)


def test_another_instance_cannot_break_it(clock, contender):
    assert tick(contender(1, "a"))
    clock.t += 1
    assert not tick(contender(2, "other"))


def test_release_lets_another_take_over_at_once(contender):
    a, b = contender(1, "a"), contender(2, "b")
    assert tick(a)
    asyncio.run(a.release())
    assert not a.is_leader() and tick(b)


def test_lease_is_kept_while_a_long_pass_acts_and_lost_once_renewal_fails(clock, osd, contender):
    lease = contender(1, "a")
    assert tick(lease)

    async def fake_sleep(s):  # each renewal interval moves the shared clock on
        clock.t += s
        await asyncio.sleep(0)

    async def long_pass():
        async with lease.kept_during(10, sleep=fake_sleep):
            for _ in range(50):  # 500 s of work on the clock: far past the 30 s lease
                await asyncio.sleep(0.001)
                if clock.t >= 100:
                    break
            assert clock.t >= 100 and lease.is_leader()  # 100 s on the clock, lease 30 s: renewed all along
            osd.lockers.clear()
            osd.lock("client.2", "rgwkeeper.leader", "leader", "b", "rgwkeeper b@h", 1000, 1)  # someone else took it
            for _ in range(50):
                await asyncio.sleep(0.001)
                if not lease.is_leader():
                    break
            assert not lease.is_leader()  # the next renewal failed: no further action starts

    asyncio.run(long_pass())
    assert lease.transitions == ["acquired", "lost"]


def test_a_live_daemon_with_the_same_instance_id_on_this_host_keeps_its_lock(clock, osd, contender):
    # A second daemon with our instance id but another daemon.state_dir (the flock cannot see
    # it): breaking its lock on every tick would make both leaders in turn.
    first = contender(1, "a", host="host1")
    assert tick(first)
    live = {first.backend.cookie: 4242}
    second = contender(2, "a", host="host1", alive=live.get)
    for _ in range(3):
        clock.t += 10
        assert tick(first) and not tick(second)
    assert [c for c, _, _ in osd.holders()] == ["client.1"]
    del live[first.backend.cookie]  # the first daemon died without releasing: now it is broken
    assert tick(second)
    assert [c for c, _, _ in osd.holders()] == ["client.2"]


def test_the_pid_in_a_lock_cookie_is_a_live_holder_only_while_it_is_an_rgwkeeper_process():
    import subprocess
    import sys

    from rgwkeeper.daemon.service import live_holder_pid

    named = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "rgwkeeper", "daemon"])
    other = subprocess.Popen(["sleep", "60"])
    try:
        assert live_holder_pid(f"a-b-{named.pid}-0a1b2c3d") == named.pid  # instance ids may hold dashes
        assert live_holder_pid(f"a-{other.pid}-0a1b2c3d") is None  # the PID is another program's now
        named.kill()
        named.wait()
        assert live_holder_pid(f"a-{named.pid}-0a1b2c3d") is None  # gone
        assert live_holder_pid("a-notapid-0a1b2c3d") is None and live_holder_pid("odd") is None
    finally:
        for p in (named, other):
            p.kill()
            p.wait()
