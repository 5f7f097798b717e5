"""Bucket index sharding: how many shards a bucket needs, and when to reshard it ahead of RGW.

RGW reshards a bucket dynamically when objects per index shard pass
``rgw_max_objs_per_shard`` (100,000 by default), and writes to that bucket block while it
runs (a 20 M-object bucket on Squid: over 4 minutes of 504s, ceph.io 2026). Pre-sharding
before a big ingest, or resharding while write load is low, keeps that off the peak.
Prime shard counts are customary (they spread the hash of object names more evenly).
From Tentacle, dynamic resharding may also *reduce* a bucket whose index looks too big for its
objects, so a bucket pre-sharded before its ingest, still empty, is shrunk back unless its
minimum shard count is pinned (docs/architecture.md, "Releases").
Pure: no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rgwkeeper import releases
from rgwkeeper.actions import CreateBucket, ReshardBucket, SetMinShards
from rgwkeeper.snapshot import BucketShards, Snapshot
from rgwkeeper.units import write_load_vs

#: RGW's hard ceiling on a bucket's shard count (rgw_max_shards in the source, 65521, a prime).
RGW_MAX_SHARDS = 65521


def is_prime(n: int) -> bool:
    if n < 2:
        return False
    if n % 2 == 0:
        return n == 2
    r = math.isqrt(n)
    return all(n % d for d in range(3, r + 1, 2))


def next_prime(n: int) -> int:
    n = max(2, n)
    while not is_prime(n):
        n += 1
    return n


def shards_for(expected_objects: int, target_objects_per_shard: int) -> int:
    """The smallest prime shard count that keeps ``expected_objects`` under the target."""
    return next_prime(math.ceil(expected_objects / target_objects_per_shard))


@dataclass(frozen=True)
class ShardPlan:
    bucket: str
    exists: bool
    current_shards: int
    wanted_shards: int
    actions: tuple[CreateBucket | ReshardBucket | SetMinShards, ...]
    reason: str
    capped_by: str | None = None
    min_shards_note: str | None = None
    """Whether and why the plan pins the bucket's minimum shard count (one line), when it was asked to."""

    def commands(self) -> list[str]:
        return [a.command() for a in self.actions]


@dataclass(frozen=True)
class BucketState:
    """What the planner needs to know about one bucket (read by the caller)."""

    exists: bool
    num_shards: int = 0
    num_objects: int = 0
    in_reshard_queue: bool = False
    resharding: bool = False
    min_num_shards: int | None = None  # the pinned minimum; None when not read (before Tentacle)


def plan_shards(bucket: str, expected_objects: int, state: BucketState, *, target_objects_per_shard: int,
                max_shards: int, multisite: bool, why: str = "pre-shard before ingest",
                release: str | None = None) -> ShardPlan:
    """Create or reshard ``bucket`` so ``expected_objects`` fit under the target per shard.

    Never shrinks a bucket; never touches one that is resharding or queued for it; says when
    a limit (``rgw_max_dynamic_shards``/RGW's maximum, or multisite) caps the plan.

    ``release`` (the cluster's, for pre-shard and ingest plans) asks for the shard count to be
    kept: where RGW may reduce it, the plan pins the bucket's minimum at the planned count;
    elsewhere ``min_shards_note`` says why nothing more is needed. None for a reshard of a
    bucket that is filling up, which RGW has no reason to reduce.
    """
    wanted = shards_for(expected_objects, target_objects_per_shard)
    capped = None
    if wanted > max_shards:
        capped = (f"{wanted} shards would be needed for {expected_objects:,} objects at "
                  f"{target_objects_per_shard:,} per shard; capped at {max_shards} (rgw_max_dynamic_shards); "
                  f"expect {math.ceil(expected_objects / max_shards):,} objects per shard")
        wanted = max_shards if is_prime(max_shards) else _prev_prime(max_shards)
    current = state.num_shards if state.exists else 0
    if state.exists and (state.resharding or state.in_reshard_queue):
        return ShardPlan(bucket, True, current, wanted, (),
                         "already resharding or in RGW's reshard queue: not touching it", capped)
    if state.exists and current >= wanted:
        pin, note = _pin_min_shards(bucket, wanted, state.min_num_shards, release, why)
        if pin and state.min_num_shards is None:
            # Its minimum was not read (the daemon's snapshot has no `bucket layout`): a bucket
            # sharded earlier may be pinned already, so leave it rather than pin on every pass.
            pin, note = None, None
        return ShardPlan(bucket, True, current, wanted, (pin,) if pin else (),
                         f"has {current} shards, enough for {expected_objects:,} objects (never shrinks)", capped, note)
    if multisite and state.exists:
        # Pacific cannot reshard a bucket in a multisite zonegroup without breaking sync; from
        # Reef it can once every zone enables the zonegroup feature "resharding", which rgwkeeper
        # does not read yet: not resharding is the safe choice on every release.
        return ShardPlan(bucket, True, current, wanted, (),
                         "zonegroup has several zones: rgwkeeper does not reshard under multisite (Pacific cannot; "
                         "Reef and later need the zonegroup feature \"resharding\" on every zone)", capped)
    actions: list[CreateBucket | ReshardBucket | SetMinShards] = []
    if not state.exists:
        actions.append(CreateBucket(bucket, reason=why))
    actions.append(ReshardBucket(bucket, wanted, reason=why))
    # A manual reshard keeps the bucket's old minimum (1 unless pinned): pin after it
    # (docs/architecture.md, "Releases").
    pin, note = _pin_min_shards(bucket, wanted, state.min_num_shards, release, why)
    if pin:
        actions.append(pin)
    verb = "create with" if not state.exists else f"reshard from {current} to"
    return ShardPlan(bucket, state.exists, current, wanted, tuple(actions),
                     f"{verb} {wanted} shards for {expected_objects:,} objects "
                     f"({target_objects_per_shard:,} per shard)", capped, note)


def _pin_min_shards(bucket: str, wanted: int, pinned: int | None, release: str | None,
                    why: str) -> tuple[SetMinShards | None, str | None]:
    """The pin that keeps RGW from reducing ``bucket`` below ``wanted``, and the plan's line on it."""
    if release is None:
        return None, None
    row = releases.release(release)
    if row is None:
        return None, (f"release {release!r} is not in rgwkeeper's table: minimum shard count not pinned; "
                      f"if RGW there may reduce shards, run `radosgw-admin bucket set-min-shards` by hand")
    if not row.shard_reduction:
        return None, f"{row.name}: RGW's dynamic resharding never reduces shard counts; no minimum to pin"
    if not row.min_shards:
        return None, f"{row.name}: RGW may reduce shard counts and has no set-min-shards to prevent it"
    if pinned is not None and pinned >= wanted:
        return None, f"minimum already pinned at {pinned} shards ({row.name} may otherwise reduce it)"
    return (SetMinShards(bucket, wanted, reason=f"{why}; keep RGW from reducing it before the ingest"),
            f"pin the minimum at {wanted} shards: {row.name}'s dynamic resharding reduces an empty bucket's "
            f"shards (rgw_dynamic_resharding_may_reduce)")


def _prev_prime(n: int) -> int:
    while n > 2 and not is_prime(n):
        n -= 1
    return n


def approaching(snap: Snapshot, *, reshard_at_ratio: float, growth_factor: float, target_ratio: float,
                max_write_ops: float, smoothed_write_ops: float, max_shards: int, multisite: bool,
                limit: int = 1) -> tuple[list[ShardPlan], str]:
    """Buckets nearing the dynamic-reshard threshold, resharded now only while load is low."""
    near = [b for b in snap.buckets if b.fill_ratio >= reshard_at_ratio]
    if not near:
        return [], "no bucket near the dynamic-reshard threshold"
    if smoothed_write_ops > max_write_ops:
        names = ", ".join(b.bucket for b in near[:5])
        return [], (f"{len(near)} bucket(s) near the threshold ({names}), but "
                    f"{write_load_vs(smoothed_write_ops, max_write_ops)}: waiting for a quiet time")
    if snap.load_checks:
        return [], (f"{len(near)} bucket(s) near the threshold, but the cluster is not quiet "
                    f"({', '.join(snap.load_checks)}): waiting for a quiet time")
    target = max(1, int(snap.max_objs_per_shard * target_ratio))
    plans = []
    for b in sorted(near, key=lambda b: b.fill_ratio, reverse=True):
        p = plan_shards(b.bucket, int(b.num_objects * growth_factor), _state(b), target_objects_per_shard=target,
                        max_shards=max_shards, multisite=multisite,
                        why=f"{b.objects_per_shard:,} objects per shard is {b.fill_ratio:.0%} of the "
                            f"dynamic-reshard threshold; resharding while write load is low")
        if p.actions:
            plans.append(p)
        if len(plans) >= limit:
            break
    return plans, f"{len(near)} bucket(s) near the threshold; {len(plans)} to reshard now"


def _state(b: BucketShards) -> BucketState:
    return BucketState(exists=True, num_shards=b.num_shards, num_objects=b.num_objects,
                       in_reshard_queue=b.in_reshard_queue)
