"""The seeded workload: sizes, mixes, keys and payloads reproduce from the seed."""

from __future__ import annotations

import collections
import random

import pytest

from rgwkeeper.errors import InvalidName, UsageError
from rgwkeeper.loadgen.workload import (DEFAULT_MIX, POOL_SLACK, SizeDist, Workload, WorkerPlan, object_size,
                                        parse_mix)


def _requests(workload, worker=0, n=2000):
    plan = WorkerPlan(workload, worker)
    prepared = list(plan.prepare())
    return prepared, [plan.next() for _ in range(n)], plan


def test_sizes_and_their_units():
    assert object_size("4KiB") == 4096
    assert object_size("1MB") == 1_000_000
    assert object_size("512") == 512
    assert object_size("1.5 MiB") == 1572864
    for bad in ("4XB", "", "-1", "6GiB", "1K", "nan", "infKiB"):
        with pytest.raises(UsageError):
            object_size(bad)


def test_mix_parsing_keeps_positive_weights():
    assert parse_mix(DEFAULT_MIX) == {"GET": 70, "PUT": 20, "LIST": 5, "DELETE": 5}
    assert parse_mix("put=1, get=0") == {"PUT": 1}
    for bad in ("HEAD=5", "PUT", "PUT=-1", "GET=0", "PUT=1,PUT=2", "PUT=nan", "PUT=inf", "PUT=1e400",
                "GET=nan,PUT=1"):
        with pytest.raises(UsageError):
            parse_mix(bad)


@pytest.mark.parametrize("text,check", [
    ("4KiB", lambda s: s == {4096}),
    ("uniform:1KiB-2KiB", lambda s: min(s) >= 1024 and max(s) <= 2048 and len(s) > 100),
    ("loguniform:1KiB-1MiB", lambda s: min(s) >= 1024 and max(s) <= 1 << 20 and len(s) > 100),
    ("4KiB=90,1MiB=10", lambda s: s == {4096, 1 << 20}),
])
def test_size_distributions(text, check):
    dist = SizeDist.parse(text)
    rng = random.Random(3)
    assert check({dist.draw(rng) for _ in range(2000)})


def test_weighted_sizes_follow_their_weights():
    rng = random.Random(5)
    dist = SizeDist.parse("4KiB=90,1MiB=10")
    counts = collections.Counter(dist.draw(rng) for _ in range(10_000))
    assert 0.87 < counts[4096] / 10_000 < 0.93


def test_bad_distributions_are_usage_errors():
    for bad in ("uniform:1KiB", "uniform:2KiB-1KiB", "4KiB=x", "4KiB=0"):
        with pytest.raises(UsageError):
            SizeDist.parse(bad)


def test_the_seed_reproduces_keys_sizes_order_and_payloads():
    w = Workload(mix=parse_mix(DEFAULT_MIX), sizes=SizeDist.parse("loguniform:1KiB-64KiB"), seed=42,
                 buckets=3, prefixes=5, objects_per_worker=300)
    a = _requests(w)
    b = _requests(Workload(**{**w.__dict__}))
    assert a[0] == b[0] and a[1] == b[1]
    assert w.payload_pool() == Workload(**{**w.__dict__}).payload_pool()
    other = _requests(Workload(**{**w.__dict__, "seed": 43}))
    assert other[0] != a[0]
    assert len(w.payload_pool()) == 64 * 1024 + POOL_SLACK


def test_workers_own_disjoint_keys_and_spread_over_buckets_and_prefixes():
    w = Workload(seed=1, buckets=3, prefixes=4, objects_per_worker=200)
    keys = {}
    for worker in (0, 1):
        prepared, _, _ = _requests(w, worker, 0)
        keys[worker] = {(r.bucket, r.key) for r in prepared}
        assert {r.bucket for r in prepared} == set(w.bucket_names())
        assert {r.key.split("/")[0] for r in prepared} == {"p000", "p001", "p002", "p003"}
    assert not keys[0] & keys[1]


def test_mix_proportions_and_op_semantics():
    w = Workload(mix=parse_mix(DEFAULT_MIX), seed=7, objects_per_worker=1000, guard=16)
    prepared, reqs, plan = _requests(w, n=20_000)
    counts = collections.Counter(r.op for r in reqs)
    assert abs(counts["GET"] / 20_000 - 0.70) < 0.02
    assert abs(counts["PUT"] / 20_000 - 0.20) < 0.02
    assert plan.substituted == 0
    # Replaying the plan: GET only reads live keys outside the guard, DELETE takes the oldest.
    live = [r.key for r in prepared]
    sizes = {r.key: r.size for r in prepared}
    for r in reqs:
        if r.op == "PUT":
            live.append(r.key)
            sizes[r.key] = r.size
        elif r.op == "DELETE":
            assert r.key == live.pop(0)
        elif r.op == "GET":
            i = live.index(r.key)
            assert w.guard <= i < len(live) - w.guard
            assert r.size == sizes[r.key]
        else:
            assert r.op == "LIST" and r.key.startswith("p") and r.key.endswith("/")
    assert [o.key for o in plan.live_objects()] == live


def test_too_few_objects_turns_reads_into_writes_and_counts_them():
    w = Workload(mix=parse_mix("GET=100"), objects_per_worker=10, guard=8)
    _, reqs, plan = _requests(w, n=20)
    assert reqs[0].op == "PUT" and plan.substituted > 0
    assert collections.Counter(r.op for r in reqs)["PUT"] == plan.substituted


def test_bucket_names_are_validated():
    with pytest.raises(InvalidName):
        Workload(bucket_prefix="Bad_Name")
    with pytest.raises(UsageError):
        Workload(buckets=0)
