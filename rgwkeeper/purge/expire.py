"""``expire``: install lifecycle expiration rules on buckets, run them now, read the result back.

For each bucket: merge rgwkeeper's rules into the bucket's lifecycle configuration (other rules
are kept; the change is made only if the merged rules differ from what is there, and read
back), then run lifecycle for that bucket with ``radosgw-admin lc process --bucket`` instead of
waiting for ``rgw_lifecycle_work_time``, process GC so the space comes back, and check that
no object a ``days`` rule should have expired is still listed.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from rgwkeeper.adapters import radosgw_admin as rgwa
from rgwkeeper.errors import CephError
from rgwkeeper.purge import lifecycle as lc
from rgwkeeper.purge.execute import Check, PurgeIO
from rgwkeeper.purge.plan import check_protected, render_admin
from rgwkeeper.purge.profile import BucketProfile, gather_profile


@dataclass
class ExpirePlan:
    profile: BucketProfile
    rules: list[lc.ExpiryRule]
    existing: list[dict[str, Any]]
    merged: list[dict[str, Any]]
    run_now: bool

    @property
    def changes(self) -> bool:
        return not lc.same_rules(self.existing, self.merged)

    def show(self, argv_of: Any = None) -> list[str]:
        p = self.profile
        lines = [f"expire {p.bucket} (id {p.bucket_id}): {p.num_objects:,} objects, {p.size_bytes:,} B, "
                 f"versioning {p.versioning}, ceph {p.version} ({p.release})"]
        lines += [f"  rule {r.rule_id}: {r.describe()}" for r in self.rules]
        if self.changes:
            lines.append(f"  > S3 PutBucketLifecycleConfiguration bucket={p.bucket} "
                         f"{json.dumps({'Rules': self.merged}, sort_keys=True, default=str)}")
        else:
            lines.append("  the bucket already has these rules: no change")
        if self.run_now:
            lines.append(f"  $ {render_admin(rgwa.lc_process_args(p.bucket), argv_of)}")
            lines.append(f"  $ {render_admin(rgwa.gc_process_args(include_all=True), argv_of)}")
        return lines


@dataclass
class ExpireResult:
    bucket: str
    rules: list[str]
    changed: bool
    ran: bool
    objects_before: int
    objects_after: int
    bytes_before: int
    bytes_after: int
    elapsed_s: float
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.status != "failed" for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


async def plan_expire(bucket: str, rules: list[lc.ExpiryRule], io: PurgeIO, *, protected: list[str],
                      run_now: bool) -> ExpirePlan:
    check_protected(bucket, protected)
    profile = await gather_profile(bucket, rgw=io.rgw, rados=io.rados, admin_api=io.admin_api)
    for r in rules:
        lc.check_release(r, profile.release)
    existing = await asyncio.to_thread(io.s3.get_lifecycle, bucket)
    ours = [s3_rule for r in rules for s3_rule in r.to_s3_rules()]
    return ExpirePlan(profile=profile, rules=rules, existing=existing, merged=lc.merge(existing, ours), run_now=run_now)


async def lc_debug_interval(io: PurgeIO) -> float:
    """rgw_lc_debug_interval as radosgw-admin sees it (mon config database): > 0 makes a
    lifecycle "day" that many seconds (test clusters)."""
    try:
        out = await io.rados.acommand({"prefix": "config get", "who": "client.admin", "key": "rgw_lc_debug_interval"})
        return float(out or 0)
    except (CephError, TypeError, ValueError):
        return 0.0


async def apply_expire(xp: ExpirePlan, io: PurgeIO, *, long_timeout_s: float,
                       clock: Any = time.monotonic) -> ExpireResult:
    t0 = clock()
    b = xp.profile.bucket
    if xp.changes:
        await asyncio.to_thread(io.s3.put_lifecycle, b, xp.merged)
        got = await asyncio.to_thread(io.s3.get_lifecycle, b)
        if not lc.same_rules(got, xp.merged):
            raise CephError(f"PutBucketLifecycleConfiguration {b}", "the rules read back differ from those put")
    checks = [Check("rules installed", "ok", ", ".join(r.rule_id for r in xp.rules))]
    after = xp.profile
    if xp.run_now:
        lc_started = time.time()
        await io.rgw.run(*rgwa.lc_process_args(b), timeout=long_timeout_s)
        await io.rgw.run(*rgwa.gc_process_args(include_all=True), timeout=long_timeout_s)
        after = await gather_profile(b, rgw=io.rgw, rados=io.rados, admin_api=io.admin_api)
        checks += await _check_expired(xp, io, lc_started)
    return ExpireResult(bucket=b, rules=[r.rule_id for r in xp.rules], changed=xp.changes, ran=xp.run_now,
                        objects_before=xp.profile.num_objects, objects_after=after.num_objects,
                        bytes_before=xp.profile.size_bytes, bytes_after=after.size_bytes,
                        elapsed_s=round(clock() - t0, 3), checks=checks)


async def _check_expired(xp: ExpirePlan, io: PurgeIO, now: float) -> list[Check]:
    """Objects a plain ``days`` rule (prefix only) should have expired must be gone. Rules with
    tag or size filters are not checked here (that needs a request per object)."""
    debug = await lc_debug_interval(io)
    checks = []
    for r in xp.rules:
        if r.days is None or r.tags or r.larger_than is not None or r.smaller_than is not None:
            checks.append(Check(f"rule {r.rule_id} ran", "skipped", "tag or size filters are not re-checked"))
            continue

        def left(rule: lc.ExpiryRule = r) -> list[str]:
            return [o["Key"] for o in io.s3.iter_keys(xp.profile.bucket, rule.prefix)
                    if lc.expired(o["LastModified"].timestamp(), rule.days or 0, now, debug_interval_s=debug)]

        remaining = await asyncio.to_thread(left)
        checks.append(Check(f"rule {r.rule_id} ran", "failed" if remaining else "ok",
                            f"{len(remaining)} expired objects still listed, e.g. {remaining[0][:80]!r}"
                            if remaining else f"no object older than {r.days} lifecycle day(s) left under "
                            f"{r.prefix or 'the bucket'}" + (f" (a day is {debug:g} s here)" if debug else "")))
    return checks
