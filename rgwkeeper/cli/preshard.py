"""``rgwkeeper preshard BUCKET --expected-objects N``."""

from __future__ import annotations

import asyncio
from typing import Any

import click

from rgwkeeper.adapters.connect import NONE, REQUIRED, connected, open_adapters
from rgwkeeper.cli.common import cluster_options, emit_json, load_access
from rgwkeeper.errors import UsageError
from rgwkeeper.names import validate_bucket
from rgwkeeper import releases, sharding
from rgwkeeper.policy.shards import plan_shards
from rgwkeeper.units import FiniteInt

#: rgw.max_objs_per_shard's own bound in the config.
MAX_OBJS_PER_SHARD = 100_000_000

#: More objects than any bucket could hold at RGW's shard ceiling: surely a typo.
ABSURD_OBJECTS = 10**12


def _expected(value: int) -> int:
    if value <= 0:
        raise UsageError(f"--expected-objects must be a positive number of objects, got {value}")
    if value > ABSURD_OBJECTS:
        raise UsageError(f"--expected-objects {value:,} is more than {ABSURD_OBJECTS:,}; check the number")
    return value


@click.command()
@cluster_options
@click.argument("bucket")
@click.option("--expected-objects", "-N", type=FiniteInt(), required=True, help="objects the bucket will hold")
@click.option("--objects-per-shard", type=FiniteInt(1, MAX_OBJS_PER_SHARD), default=None,
              help="target objects per shard [default: preshard.target_ratio of rgw_max_objs_per_shard]")
@click.option("--dry-run", is_flag=True, help="print the plan and the exact commands; change nothing")
@click.option("--json", "as_json", is_flag=True)
def preshard(bucket: str, expected_objects: int, objects_per_shard: int | None, dry_run: bool, as_json: bool,
             **kwargs: Any) -> None:
    """Create or reshard BUCKET to a prime shard count before a big ingest."""
    validate_bucket(bucket)
    _expected(expected_objects)
    cfg, access = load_access(kwargs)
    with connected(access, rgw=NONE) as adapters:
        rgw, rados = adapters.radosgw_admin, adapters.rados
        limits = asyncio.run(sharding.read_limits(rados, rgw, cfg.rgw.max_objs_per_shard))
        target = objects_per_shard or max(1, int(limits.max_objs_per_shard * cfg.preshard.target_ratio))
        row = releases.release(limits.release)
        state = asyncio.run(sharding.read_bucket_state(rgw, bucket, min_shards=bool(row and row.min_shards)))
        plan = plan_shards(bucket, expected_objects, state, target_objects_per_shard=target,
                           max_shards=limits.max_dynamic_shards, multisite=limits.multisite,
                           release=limits.release)
        applied = None
        if not dry_run and plan.actions:
            # A bucket that does not exist yet is created through S3.
            s3 = None if state.exists else open_adapters(access, rgw=REQUIRED, connect=False).s3
            applied = asyncio.run(sharding.apply(plan, rgw, s3))
    if as_json:
        emit_json(sharding.plan_to_dict(plan, applied))
    else:
        click.echo(f"{bucket}: {plan.reason}")
        if plan.capped_by:
            click.echo(f"  note: {plan.capped_by}")
        if plan.min_shards_note:
            click.echo(f"  minimum shards: {plan.min_shards_note}")
        for c in plan.commands():
            click.echo(f"  {'would run' if dry_run else 'run'}: {c}")
        for a in applied or []:
            click.echo(f"  {'ok  ' if a.ok else 'FAIL'} {a.command} ({a.detail})")
    if applied and not all(a.ok for a in applied):
        raise SystemExit(1)
