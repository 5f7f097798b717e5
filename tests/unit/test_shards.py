"""Shard planning: primes, never shrinking, queues, limits, and the daemon's quiet-time reshard."""

from __future__ import annotations

import copy

import pytest

from rgwkeeper.actions import CreateBucket, ReshardBucket, SetMinShards
from rgwkeeper.policy.shards import BucketState, approaching, is_prime, next_prime, plan_shards, shards_for
from rgwkeeper.snapshot import parse
from tests.unit.fakes import load_fixture


def test_primes():
    assert [n for n in range(30) if is_prime(n)] == [2, 3, 5, 7, 11, 13, 17, 19, 23, 29]
    assert next_prime(24) == 29 and next_prime(29) == 29 and next_prime(0) == 2
    assert shards_for(1_000_000_000, 50_000) == 20011  # 20,000 -> the next prime


def plan(expected, state, **kw):
    args = {"target_objects_per_shard": 50_000, "max_shards": 1999, "multisite": False, **kw}
    return plan_shards("ingest", expected, state, **args)


def test_new_bucket_is_created_then_resharded():
    p = plan(3_000_000, BucketState(exists=False))
    assert p.wanted_shards == 61 and p.actions == (CreateBucket("ingest", p.actions[0].reason),
                                                   ReshardBucket("ingest", 61, p.actions[1].reason))
    assert p.commands() == ["s3 CreateBucket ingest", "radosgw-admin bucket reshard --bucket ingest --num-shards 61"]


def test_existing_bucket_is_resharded_up_and_never_down():
    assert plan(3_000_000, BucketState(exists=True, num_shards=11)).actions == (ReshardBucket("ingest", 61, "pre-shard before ingest"),)
    p = plan(3_000_000, BucketState(exists=True, num_shards=101))
    assert p.actions == () and "never shrinks" in p.reason


@pytest.mark.parametrize("state", [BucketState(exists=True, num_shards=11, in_reshard_queue=True),
                                   BucketState(exists=True, num_shards=11, resharding=True)])
def test_never_touch_a_bucket_being_resharded(state):
    p = plan(3_000_000, state)
    assert p.actions == () and "resharding or in RGW's reshard queue" in p.reason


def test_limits_cap_the_plan_and_say_so():
    p = plan(10**11, BucketState(exists=False))
    assert p.wanted_shards == 1999 and "capped at 1999" in p.capped_by
    p = plan(3_000_000, BucketState(exists=True, num_shards=11), multisite=True)
    assert p.actions == () and "multisite" in p.reason


def _snap(ratio_objects, write_ops=0.0):
    obs = copy.deepcopy(load_fixture("observation.json"))
    for b in obs["buckets"]:
        if b["bucket"] == "capture-near-limit":
            b["usage"]["rgw.main"]["num_objects"] = ratio_objects
    for p in obs["pool_stats"]:
        if p["pool_name"] == "default.rgw.buckets.data":
            p["client_io_rate"] = {"write_op_per_sec": write_ops}
    return parse(obs)  # limit 40 objects per shard, 1 shard


def test_daemon_reshards_a_bucket_near_the_threshold_only_when_quiet():
    kw = dict(reshard_at_ratio=0.75, growth_factor=2.0, target_ratio=0.5, max_write_ops=1000, max_shards=1999,
              multisite=False)
    plans, why = approaching(_snap(32), smoothed_write_ops=10, **kw)
    assert [p.actions for p in plans] == [(ReshardBucket("capture-near-limit", 5, plans[0].actions[0].reason),)]
    assert "80%" in plans[0].actions[0].reason
    plans, why = approaching(_snap(32), smoothed_write_ops=5000, **kw)
    assert plans == [] and "waiting for a quiet time" in why
    plans, why = approaching(_snap(20), smoothed_write_ops=10, **kw)
    assert plans == [] and "no bucket near" in why


# -- keeping the shard count: Tentacle's dynamic resharding may reduce an empty bucket --------

PIN = "radosgw-admin bucket set-min-shards --bucket ingest --num-shards 61"


def test_on_tentacle_the_plan_pins_the_minimum_after_creating_or_resharding():
    p = plan(3_000_000, BucketState(exists=False), release="tentacle")
    assert p.commands() == ["s3 CreateBucket ingest", "radosgw-admin bucket reshard --bucket ingest --num-shards 61",
                            PIN]
    assert "tentacle's dynamic resharding reduces" in p.min_shards_note
    p = plan(3_000_000, BucketState(exists=True, num_shards=11, min_num_shards=1), release="tentacle")
    assert p.commands()[-1] == PIN and isinstance(p.actions[-1], SetMinShards)


def test_on_tentacle_a_bucket_with_enough_shards_gets_its_missing_pin_and_no_second_one():
    p = plan(3_000_000, BucketState(exists=True, num_shards=101, min_num_shards=1), release="tentacle")
    assert p.commands() == [PIN] and "never shrinks" in p.reason
    p = plan(3_000_000, BucketState(exists=True, num_shards=101, min_num_shards=61), release="tentacle")
    assert p.actions == () and p.min_shards_note.startswith("minimum already pinned at 61")


@pytest.mark.parametrize("release", ["pacific", "reef", "squid"])
def test_before_tentacle_nothing_more_is_done_and_the_plan_says_why(release):
    p = plan(3_000_000, BucketState(exists=False), release=release)
    assert [type(a) for a in p.actions] == [CreateBucket, ReshardBucket]
    assert p.min_shards_note == f"{release}: RGW's dynamic resharding never reduces shard counts; no minimum to pin"


def test_an_unknown_release_is_not_pinned_and_the_plan_says_so():
    p = plan(3_000_000, BucketState(exists=False), release="unknown")
    assert [type(a) for a in p.actions] == [CreateBucket, ReshardBucket]
    assert "not in rgwkeeper's table" in p.min_shards_note and "set-min-shards" in p.min_shards_note


def test_a_reshard_of_a_filling_bucket_is_not_pinned():
    p = plan(3_000_000, BucketState(exists=True, num_shards=11))
    assert p.actions == (ReshardBucket("ingest", 61, "pre-shard before ingest"),) and p.min_shards_note is None
