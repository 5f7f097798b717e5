"""``expire``: install lifecycle expiration rules on buckets, run them now, read the result back.

For each bucket: merge rgwkeeper's rules into the bucket's lifecycle configuration (other rules
are kept; the change is made only if the merged rules differ from what is there, and read
back), then run lifecycle for that bucket with ``radosgw-admin lc process --bucket`` instead of
waiting for ``rgw_lifecycle_work_time``, process GC so the space comes back, and check that
no object a ``days`` rule should have expired is still listed.

On Pacific ``lc process --bucket`` cannot run one bucket (measured on 16.2.15: ``--bucket``
is ignored, every lifecycle shard is run once and only the first bucket of each shard is
processed; the single-bucket path came with tracker 53430, Quincy). There the parts of the
rules that can be decided from a listing are applied now by rgwkeeper itself, as RGW's
lifecycle would: current objects older than ``days`` lifecycle days (and, for a rule with a
tag filter, carrying all its tags: one GetObjectTagging per old-enough object) get an S3
delete (a delete marker on a versioned bucket, as lifecycle expiration does), each re-checked
with a HEAD (and its tags read again) just before, as RGW's lifecycle checks the object again
too; incomplete uploads older than ``abort_multipart_days`` are aborted. Noncurrent versions
and delete markers are left to RGW's own lifecycle worker (its work window), and the result
says so. On every release the result is read back the same way: no object the rule selects
(prefix, age, tags, size) may still be listed.
"""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

import structlog

from rgwkeeper.aio import bounded
from rgwkeeper.adapters import radosgw_admin as rgwa
from rgwkeeper.errors import CephError, RgwkeeperError, UsageError
from rgwkeeper.purge import lcrun
from rgwkeeper import lifecycle as lc
from rgwkeeper.purge.checkpoint import Ledger, State
from rgwkeeper.purge.deleters import RECHECK_IN_FLIGHT, S3Deleter, chunks
from rgwkeeper.purge.execute import (LIFECYCLE_UNDO_TIMEOUT_S, Check, PurgeIO, Settings, batch_keys, pacing_probe,
                                     s3_limiter)
from rgwkeeper.purge.lister import Lister
from rgwkeeper.purge.pacing import RateCap, run_pacer
from rgwkeeper.purge.plan import Scope, Tuning, check_protected, no_s3_access, render_admin, s3_refused
from rgwkeeper.purge.runtime import Retry, Threads, Time
from rgwkeeper.purge.profile import BucketProfile, gather_profile
from rgwkeeper.purge.scope import read_rgw_clock

log = structlog.get_logger("rgwkeeper.purge")


def now_by_listing(rule: lc.ExpiryRule) -> list[str]:
    """The parts of a rule rgwkeeper applies from a listing where lc process cannot run one bucket."""
    if rule.larger_than is not None or rule.smaller_than is not None:
        return []  # size filters need Tentacle (check_release), where lc process runs one bucket
    return (["days"] if rule.days is not None else []) + \
        (["abort_multipart_days"] if rule.abort_multipart_days is not None else [])


def left_to_rgw(rule: lc.ExpiryRule) -> list[str]:
    done = now_by_listing(rule)
    parts = {"days": rule.days is not None, "noncurrent versions": rule.noncurrent_days is not None,
             "expired delete markers": rule.expired_delete_markers,
             "abort_multipart_days": rule.abort_multipart_days is not None}
    return [k for k, present in parts.items() if present and k not in done]


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

    @property
    def by_listing(self) -> bool:
        """Run now by rgwkeeper from a listing (Pacific), not by ``lc process --bucket``."""
        return self.run_now and self.profile.release not in lc.LC_ONE_BUCKET_RELEASES

    def show(self, argv_of: Callable[..., Sequence[str]] | None = None) -> list[str]:
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
            lines.append("  ages (run now and the read-back) on RGW's clock: the Date header of a HeadBucket "
                         "when it runs, not this host's clock")
        if self.by_listing:
            lines.append(f"  run now by rgwkeeper: `lc process --bucket` cannot run one bucket on {p.release} "
                         "(tracker 53430)")
            for r in self.rules:
                if "days" in now_by_listing(r):
                    tagged = (f"carrying {', '.join(f'{k}={v}' for k, v in r.tags)} (GetObjectTagging of "
                              "each old enough, again before its delete) ") if r.tags else ""
                    lines.append(f"  > S3 ListObjectsV2 bucket={p.bucket} prefix={r.prefix or ''!r}, then HeadObject "
                                 f"and DeleteObjects (1000 keys a request) of objects older than {r.days} "
                                 f"lifecycle day(s) {tagged}".rstrip())
                if "abort_multipart_days" in now_by_listing(r):
                    lines.append(f"  > S3 ListMultipartUploads bucket={p.bucket} prefix={r.prefix or ''!r}, then "
                                 f"AbortMultipartUpload of uploads started over {r.abort_multipart_days} day(s) ago")
                if left_to_rgw(r):
                    lines.append(f"  rule {r.rule_id}: {', '.join(left_to_rgw(r))} left to RGW's lifecycle "
                                 "worker (rgw_lifecycle_work_time)")
            lines.append(f"  $ {render_admin(rgwa.gc_process_args(include_all=True), argv_of)}")
        elif self.run_now:
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
        try:
            lc.check_release(r, profile.release)
        except UsageError as exc:
            raise UsageError(f"{exc}{await _left_before(bucket, r, io)}") from None
    try:
        existing = await asyncio.to_thread(io.s3.get_lifecycle, bucket)
    except CephError as exc:
        if not s3_refused(exc):
            raise
        raise no_s3_access(bucket, profile.owner, "GetBucketLifecycleConfiguration") from None
    ours = [s3_rule for r in rules for s3_rule in r.to_s3_rules()]
    return ExpirePlan(profile=profile, rules=rules, existing=existing, merged=lc.merge(existing, ours), run_now=run_now)


async def lc_debug_interval(io: PurgeIO) -> float:
    """rgw_lc_debug_interval as radosgw-admin sees it (mon config database, for the cephx client
    it runs as): > 0 makes a lifecycle "day" that many seconds (test clusters)."""
    try:
        out = await io.rados.acommand({"prefix": "config get", "who": io.rgw.access.client_name,
                                       "key": "rgw_lc_debug_interval"})
        return float(out or 0)
    except (CephError, TypeError, ValueError):
        return 0.0


async def _left_before(bucket: str, rule: lc.ExpiryRule, io: PurgeIO) -> str:
    """A refused size-filtered rule may already be on the bucket: rgwkeeper before 2026-11-29 put
    it on Reef, whose RGW kept it without the size (docs/purge.md, "Lifecycle"). Its ID is
    the rule's own (a hash of the rule), so it is found by that; "" if it is not there."""
    try:
        held = await asyncio.to_thread(io.s3.get_lifecycle, bucket)
    except CephError:
        return ""
    if not any(r.get("ID") == rule.rule_id for r in held):
        return ""
    return (f"; the bucket already holds rule {rule.rule_id}, put by an earlier rgwkeeper: if it reads back "
            "without its size filter it expires every object it names: take it off the bucket's lifecycle "
            "configuration")


async def _put_back(xp: ExpirePlan, io: PurgeIO) -> str:
    """After a put whose rules read back otherwise: give the bucket its rules from before, so
    RGW's lifecycle does not go on with rules nobody asked for; say how that went."""
    async def call(_what: str, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.to_thread(fn, *args)

    try:
        same = await lcrun.put_rules_back(call, io.s3, xp.profile.bucket, xp.existing)
    except CephError as exc:
        return (f"putting back the bucket's rules from before failed too ({exc}): check them with "
                "GetBucketLifecycleConfiguration")
    if not same:
        return ("the bucket's rules from before were put back but read back otherwise: check them with "
                "GetBucketLifecycleConfiguration")
    return ("the bucket's rules from before were put back" if xp.existing
            else "the bucket had no rules before, and has none again")


async def _put_back_bounded(xp: ExpirePlan, io: PurgeIO) -> str:
    """``_put_back`` within LIFECYCLE_UNDO_TIMEOUT_S, as the lifecycle purge bounds its own. An
    interrupt (a cancel) is not swallowed: it ends the put-back and goes on up."""
    try:
        async with bounded(LIFECYCLE_UNDO_TIMEOUT_S):
            return await _put_back(xp, io)
    except asyncio.TimeoutError:
        return ("putting back the bucket's rules from before got no answer in time: check them with "
                "GetBucketLifecycleConfiguration")


async def apply_expire(xp: ExpirePlan, io: PurgeIO, *, long_timeout_s: float, busy_wait_s: float = 300.0,
                       lc_poll_s: float | None = None, settings: Settings = Settings(), tuning: Tuning = Tuning(),
                       time_: Time = Time()) -> ExpireResult:
    """Install ``xp``'s rules and, if asked, run them now and read the result back. ``settings``
    and ``tuning`` (``[purge]``) rule the run from a listing: retries, batches in flight, the
    rate cap and pacing."""
    clock = time_.clock
    t0 = clock()
    b = xp.profile.bucket
    if xp.changes:
        # The daemon plans every bucket before it applies them one by one: rules changed since the
        # plan would be overwritten by its merge, and by a put-back of the rules read then.
        if not lc.same_rules(await asyncio.to_thread(io.s3.get_lifecycle, b), xp.existing):
            raise RgwkeeperError(f"{b}: its lifecycle rules changed since the plan; nothing was put: run expire "
                                 "again")
        try:
            await asyncio.to_thread(io.s3.put_lifecycle, b, xp.merged)
            got = await asyncio.to_thread(io.s3.get_lifecycle, b)
        except asyncio.CancelledError:
            # Not put back: the PUT's thread may still be running, and would land after a put-back.
            log.error(f"expire of {b} interrupted while its rules were put: they may be on the bucket, not read "
                      "back; run expire again to check them", bucket=b)
            raise
        except CephError as exc:
            # The PUT may have run (an answer lost): not left unchecked. The same kind of error
            # (unreachable, timeout) goes on up, with what the put-back found.
            said = await _put_back_bounded(xp, io)
            kind = type(exc) if type(exc).__init__ is CephError.__init__ else CephError
            raise kind(exc.request, f"{exc.detail}; {said}", ret=exc.ret) from None
        if not lc.same_rules(got, xp.merged):
            raise CephError(f"PutBucketLifecycleConfiguration {b}",
                            f"the rules read back differ from those put; {await _put_back_bounded(xp, io)}")
    checks = [Check("rules installed", "ok", ", ".join(r.rule_id for r in xp.rules))]
    after = xp.profile
    if xp.run_now:
        # Ages on RGW's clock, which stamped LastModified and runs RGW's own lifecycle (purge.scope).
        lc_started = (await read_rgw_clock(io.s3, b)).rgw_s
        debug = await lc_debug_interval(io)
        ran = True
        if xp.by_listing:
            checks += await _apply_by_listing(xp, io, lc_started, debug, settings=settings, tuning=tuning,
                                              time_=time_)
        else:
            try:
                run = await lcrun.process_now(io.rgw, b, timeout_s=long_timeout_s, busy_wait_s=busy_wait_s,
                                              poll_s=lc_poll_s, stale_s=lcrun.stale_after(debug),
                                              held_hint="run expire again after that")
                checks.append(Check("lc process", "ok", run.describe()))
            except lcrun.LifecycleBusy as exc:
                checks.append(Check("lc process", "failed", exc.detail))  # the next bucket still gets its turn
                ran = False
        if ran:
            await io.rgw.run(*rgwa.gc_process_args(include_all=True), timeout=long_timeout_s)
            after = await gather_profile(b, rgw=io.rgw, rados=io.rados, admin_api=io.admin_api)
            checks += await _check_expired(xp, io, lc_started, debug)
    return ExpireResult(bucket=b, rules=[r.rule_id for r in xp.rules], changed=xp.changes, ran=xp.run_now,
                        objects_before=xp.profile.num_objects, objects_after=after.num_objects,
                        bytes_before=xp.profile.size_bytes, bytes_after=after.size_bytes,
                        elapsed_s=round(clock() - t0, 3), checks=checks)


class ListingExpiry:
    """Where ``lc process`` cannot run one bucket: a rule's listing-decidable parts applied by
    rgwkeeper, with the purge's parts: its lister (pages, retried from the last page), its S3
    deleter (batches in flight, each key re-checked just before its delete, the rate cap
    ``purge.max_objects_per_second``), its retry policy and, with ``pace_*`` set, its pacer and
    probe. There is no checkpoint: the listing decides from RGW's state when it runs, so a run
    started again after a crash finds everything still due, and a resume cursor would skip
    keys before it that became due since."""

    def __init__(self, xp: ExpirePlan, io: PurgeIO, *, settings: Settings, tuning: Tuning, time_: Time) -> None:
        p = xp.profile
        self.xp, self.io, self.settings, self.time = xp, io, settings, time_
        self.ledger = Ledger(State(plan={}), None, interval_s=settings.checkpoint_interval_s, clock=time_.clock)
        self.cap = RateCap(settings.max_objects_per_second, clock=time_.clock, sleep=time_.sleep,
                           request_s=settings.cap_request_s)
        self.threads = Threads(tuning.s3_batches_in_flight + RECHECK_IN_FLIGHT + 2,
                               Retry(settings.rgw_retry_s, time_))
        page = tuning.list_page_size
        self.lister = Lister(io.s3, p.bucket, self.threads, page_size=lambda filtered: page)
        self.deleter = S3Deleter(io.s3, p.bucket, self.threads, self.ledger, self.cap, strict=False)
        self.pacer = run_pacer(settings.pace_write_latency_s, paced=settings.paced, widest=tuning.s3_batches_in_flight)
        self.limiter = s3_limiter(self.pacer, tuning.s3_batches_in_flight, time_)
        self.probe_oid = f"rgwkeeper.expire.probe.{p.bucket_id}"
        self.probe = None if not settings.paced or not p.data_pool else pacing_probe(
            self.pacer, settings, io.bulk(p.data_pool), self.probe_oid, self.threads,
            lambda: io.s3.bucket_exists(p.bucket), time_)

    async def __aenter__(self) -> ListingExpiry:
        if self.probe is not None:
            await self.probe.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            if self.probe is not None:
                await self.probe.stop()
                await self.io.bulk(self.xp.profile.data_pool).remove(self.probe_oid)  # type: ignore[arg-type]
        finally:
            self.threads.close()

    async def expire_current(self, rule: lc.ExpiryRule, now: float, debug: float) -> tuple[int, int, int]:
        """Delete the current objects ``rule``'s days expire at ``now``: (deleted, kept because
        written or re-tagged since the listing, refused by RGW)."""
        b, s3 = self.xp.profile.bucket, self.io.s3
        before = dict(self.ledger.counters)

        def due(e: dict[str, Any]) -> bool:
            return rule.selects_size(e["Size"]) and lc.expired(e["LastModified"].timestamp(), rule.days or 0, now,
                                                               debug_interval_s=debug)

        def still_due(e: dict[str, Any]) -> bool:
            head = s3.head_object(b, e["Key"])  # rewritten since the listing: keep it (RGW checks too)
            if head is None or not lc.expired(head["LastModified"].timestamp(), rule.days or 0, now,
                                              debug_interval_s=debug):
                return False
            if not rule.tags:
                return True
            tags = s3.get_object_tags(b, e["Key"])  # re-tagged since the listing: decide by the tags now
            return tags is not None and rule.selects_tags(tags)

        tasks: list[asyncio.Task[None]] = []
        try:
            async for entries, _ in self.lister.pages(Scope(prefix=rule.prefix), {}, filtered=True):
                aged = [e for e in entries if due(e)]
                if rule.tags and aged:
                    aged = await self._tagged(aged, rule)
                for chunk in chunks(aged, batch_keys(self.pacer, self.cap, paced=self.settings.paced)):
                    tasks.append(await self.deleter.start(chunk, self.limiter, still_due))
                for t in [t for t in tasks if t.done()]:
                    t.result()  # a batch that failed stops the run here
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        c = self.ledger.counters
        return tuple(c.get(k, 0) - before.get(k, 0)  # type: ignore[return-value]
                     for k in ("objects_deleted", "kept_rewritten", "keys_refused"))

    async def _tagged(self, entries: list[dict[str, Any]], rule: lc.ExpiryRule) -> list[dict[str, Any]]:
        slots = asyncio.Semaphore(RECHECK_IN_FLIGHT)

        async def one(e: dict[str, Any]) -> bool:
            async with slots:
                tags = await self.threads.call("GetObjectTagging", self.io.s3.get_object_tags,
                                               self.xp.profile.bucket, e["Key"])
            return tags is not None and rule.selects_tags(tags)

        keep = await asyncio.gather(*(one(e) for e in entries))
        return [e for e, k in zip(entries, keep) if k]

    async def abort_old_uploads(self, rule: lc.ExpiryRule, now: float, debug: float) -> int:
        old = [u for u in await self.lister.uploads(Scope(prefix=rule.prefix))
               if lc.expired(u["Initiated"].timestamp(), rule.abort_multipart_days or 0, now, debug_interval_s=debug)]
        await self.deleter.abort_uploads(old, self.limiter)
        return len(old)


async def _apply_by_listing(xp: ExpirePlan, io: PurgeIO, now: float, debug: float, *, settings: Settings,
                            tuning: Tuning, time_: Time) -> list[Check]:
    """What lifecycle would do now for the rules' listing-decidable parts (see the module doc)."""
    checks = []
    async with ListingExpiry(xp, io, settings=settings, tuning=tuning, time_=time_) as run:
        for r in xp.rules:
            parts = now_by_listing(r)
            if "days" in parts:
                deleted, kept, refused = await run.expire_current(r, now, debug)
                checks.append(Check(f"rule {r.rule_id} applied now", "failed" if refused else "ok",
                                    f"{deleted:,} objects expired through S3 deletes"
                                    + (f", {kept:,} rewritten since the listing kept" if kept else "")
                                    + (f", {refused:,} deletes refused" if refused else "")))
            if "abort_multipart_days" in parts:
                aborted = await run.abort_old_uploads(r, now, debug)
                checks.append(Check(f"rule {r.rule_id} uploads aborted now", "ok", f"{aborted:,} incomplete uploads"))
            if left_to_rgw(r):
                checks.append(Check(f"rule {r.rule_id} left to RGW", "skipped",
                                    f"{', '.join(left_to_rgw(r))}: RGW's lifecycle worker applies them in "
                                    f"rgw_lifecycle_work_time (lc process cannot run one bucket on "
                                    f"{xp.profile.release}, tracker 53430)"))
    return checks


def _expired_keys(io: PurgeIO, bucket: str, rule: lc.ExpiryRule, now: float, debug: float,
                  threads: int = 16) -> list[str]:
    """Keys the rule's ``days`` expire at ``now``: under its prefix, old enough, of a size its
    size filters pass and, with a tag filter, carrying its tags (a GetObjectTagging each, only
    for keys old enough). Blocking: a listing."""
    aged = [o["Key"] for o in io.s3.iter_keys(bucket, rule.prefix)
            if rule.selects_size(o["Size"])
            and lc.expired(o["LastModified"].timestamp(), rule.days or 0, now, debug_interval_s=debug)]
    if not rule.tags or not aged:
        return aged
    with ThreadPoolExecutor(threads) as pool:
        tags = list(pool.map(lambda k: io.s3.get_object_tags(bucket, k), aged))
    return [k for k, t in zip(aged, tags) if t is not None and rule.selects_tags(t)]


async def _check_expired(xp: ExpirePlan, io: PurgeIO, now: float, debug: float) -> list[Check]:
    """Objects a ``days`` rule should have expired (prefix, age, size and tag filters) must be gone."""
    checks = []
    for r in xp.rules:
        if r.days is None:
            continue  # no current-version expiration to look for
        remaining = await asyncio.to_thread(_expired_keys, io, xp.profile.bucket, r, now, debug)
        checks.append(Check(f"rule {r.rule_id} ran", "failed" if remaining else "ok",
                            f"{len(remaining)} expired objects still listed, e.g. {remaining[0][:80]!r}"
                            if remaining else f"no object older than {r.days} lifecycle day(s) left under "
                            f"{r.prefix or 'the bucket'}" + "".join(f" with {k}={v}" for k, v in r.tags)
                            + (f" (a day is {debug:g} s here)" if debug else "")))
    return checks


# -- several buckets: what `rgwkeeper expire` and the daemon's fill-triggered expiry run -------

@dataclass(frozen=True)
class BucketFailure:
    """A bucket that an expiry over every configured bucket could not plan or apply; the others
    still get their turn."""

    bucket: str
    stage: str  # "plan" (profile, release check, rules read) or "apply"
    error: str

    def line(self) -> str:
        return f"rgwkeeper: {self.bucket}: not expired ({self.stage} failed): {self.error}"

    def to_dict(self) -> dict[str, Any]:
        return {"bucket": self.bucket, "ok": False, "stage": self.stage, "error": self.error}


@dataclass
class ExpiryPlans:
    """The buckets an expiry will change, and those it will not (skipped: protected; failed)."""

    plans: list[ExpirePlan]
    skipped: list[tuple[str, str]] = field(default_factory=list)
    failures: list[BucketFailure] = field(default_factory=list)


def expiry_targets(bucket: str | None, cli_rule: lc.ExpiryRule | None, config_rules: list[lc.ExpiryRule],
                   names: list[str]) -> dict[str, list[lc.ExpiryRule]]:
    """Bucket -> the rules to install: ``cli_rule`` on ``bucket``, or the configured rules on
    ``bucket`` or on every listed bucket they match. Refuses (UsageError) when none matches."""
    if bucket is not None:
        targets = {bucket: [cli_rule] if cli_rule else lc.matching_rules(config_rules, bucket)}
    else:
        targets = {b: lc.matching_rules(config_rules, b) for b in sorted(names)}
    targets = {b: rules for b, rules in targets.items() if rules}
    if not targets:
        raise UsageError("no bucket matches the configured lifecycle rules" if bucket is None else
                         f"no configured lifecycle rule matches {bucket!r}")
    return targets


async def plan_expiry(io: PurgeIO, *, bucket: str | None, cli_rule: lc.ExpiryRule | None,
                      config_rules: list[lc.ExpiryRule], protected: list[str], run_now: bool,
                      on_failure: Callable[[BucketFailure], None] | None = None) -> ExpiryPlans:
    """Plan the expiry of ``bucket``, or of every bucket the configured rules match. For one named
    bucket any problem is raised; over every bucket a bucket that cannot be planned is recorded
    (and passed to ``on_failure`` as it happens) and the others go on: one bad bucket must not
    stop the daemon's fill-triggered expiry of all the rest."""
    names = [] if bucket is not None else (await io.rgw.json("bucket", "list") or [])
    out = ExpiryPlans(plans=[])
    for b, rules in expiry_targets(bucket, cli_rule, config_rules, names).items():
        try:
            check_protected(b, protected)
        except UsageError as exc:
            if bucket is not None:
                raise
            out.skipped.append((b, str(exc)))
            continue
        try:
            out.plans.append(await plan_expire(b, rules, io, protected=protected, run_now=run_now))
        except RgwkeeperError as exc:
            if bucket is not None:
                raise
            out.failures.append(BucketFailure(b, "plan", str(exc)))
            if on_failure is not None:
                on_failure(out.failures[-1])
    return out


async def apply_expiry(plans: ExpiryPlans, io: PurgeIO, *, long_timeout_s: float, busy_wait_s: float,
                       one_bucket: bool, on_failure: Callable[[BucketFailure], None] | None = None,
                       settings: Settings = Settings(), tuning: Tuning = Tuning()) -> list[ExpireResult]:
    """Apply each plan in turn; over every bucket a bucket that fails is recorded in
    ``plans.failures`` and the next one still gets its turn."""
    results = []
    for x in plans.plans:
        try:
            results.append(await apply_expire(x, io, long_timeout_s=long_timeout_s, busy_wait_s=busy_wait_s,
                                               settings=settings, tuning=tuning))
        except RgwkeeperError as exc:
            if one_bucket:
                raise
            plans.failures.append(BucketFailure(x.profile.bucket, "apply", str(exc)))
            if on_failure is not None:
                on_failure(plans.failures[-1])
    return results


def expiry_problem(results: list[ExpireResult], failures: list[BucketFailure]) -> str | None:
    """One line naming every bucket that failed a check or was not expired; None if none."""
    bad = [r for r in results if not r.ok]
    parts = []
    if bad:
        parts.append(f"{len(bad)} bucket(s) failed a check (see above): "
                     + ", ".join(f"{r.bucket} ({next(c.name for c in r.checks if c.status == 'failed')})"
                                 for r in bad))
    if failures:
        parts.append(f"{len(failures)} bucket(s) not expired (see above): "
                     + ", ".join(f"{f.bucket} ({f.stage})" for f in failures))
    return "; ".join(parts) or None
