"""Run one bucket's lifecycle now, and make sure it really ran.

``radosgw-admin lc process --bucket B`` exits 0 without touching the bucket when another
lifecycle worker holds the bucket's entry: RGWLC::process_bucket returns early on an "ACTIVE
entry" (status PROCESSING, started less than two lifecycle days ago), and a worker that cannot
take the shard lock returns EBUSY. RGW's own LC thread holds entries during
``rgw_lifecycle_work_time`` (all the time when ``rgw_lc_debug_interval`` > 0). Used from Quincy
on only: Pacific's lc process ignores ``--bucket`` altogether (tracker 53430; see expire.py).

So the bucket's entry (``radosgw-admin lc list``) is read before and after each run. The
single-bucket path (``RGWLC::process_bucket``) sets the entry PROCESSING, runs the bucket, then
COMPLETE (FAILED if the bucket's run failed); unlike the all-shards path it never stamps
``started``. Measured on Reef 18.2.7: after a run that expired the bucket's objects the entry
read ``COMPLETE`` with ``started`` still 1 Jan 1970. A run counts when the entry was not
PROCESSING before it (another worker's "ACTIVE entry", which makes it return at once) and reads
COMPLETE after it, or when ``started`` moved past the run's start (RGW's own worker processed it
since). Otherwise: wait, run again, until ``busy_wait_s`` has passed.
"""

from __future__ import annotations

import asyncio
import email.utils
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import structlog

from rgwkeeper import lifecycle as lc
from rgwkeeper.adapters import radosgw_admin as rgwa
from rgwkeeper.errors import CephError, CommandFailed

log = structlog.get_logger(__name__)


class LifecycleBusy(CephError):
    """Another lifecycle worker kept the bucket's entry for longer than we were willing to wait."""


@dataclass
class LcRun:
    runs: int = 0
    skipped: list[str] = field(default_factory=list)  # why each run that did nothing did nothing
    crashes: int = 0  # runs that crashed (an assert or a fault): one is run again (_after_crash)

    def describe(self) -> str:
        if not self.skipped:
            return f"lc process ran ({self.runs} run)"
        return f"lc process ran after {len(self.skipped)} skipped run(s): {self.skipped[-1]}"


def entry_for(entries: list[dict[str, Any]], bucket: str, tenant: str = "") -> dict[str, Any] | None:
    """The bucket's entry in ``lc list`` (its "bucket" is ``tenant:name:marker``)."""
    head = f"{tenant}:{bucket}:"
    return next((e for e in entries if str(e.get("bucket", "")).startswith(head)), None)


def started_s(entry: dict[str, Any]) -> float | None:
    """``started`` as Unix seconds ("Sun, 22 Nov 2026 05:39:36 GMT"; 1970 for a bucket never run)."""
    try:
        return email.utils.parsedate_to_datetime(str(entry.get("started"))).timestamp()
    except (TypeError, ValueError):
        return None


# RGW takes a PROCESSING entry for a live run for two lifecycle days after its start (a day, or
# rgw_lc_debug_interval); older, or never stamped (1970: left by a killed single-bucket run,
# which never stamps), it clears it and runs the bucket (RGWLC::expired_session).
STALE_PROCESSING_S = 2 * 86400


def stale_after(lc_debug_interval_s: float) -> float:
    """How long RGW holds a PROCESSING entry: two lifecycle days (rgw_lc_debug_interval > 0 makes
    a day that many seconds)."""
    return 2 * lc_debug_interval_s if lc_debug_interval_s > 0 else STALE_PROCESSING_S


def held_by_another(entry: dict[str, Any] | None, now: float, stale_s: float = STALE_PROCESSING_S) -> bool:
    if entry is None or entry.get("status") != "PROCESSING":
        return False
    started = started_s(entry)
    return started is not None and now - started < stale_s


def ran_since(before: dict[str, Any] | None, after: dict[str, Any] | None, t0: float,
              stale_s: float = STALE_PROCESSING_S) -> tuple[bool, str]:
    """Did a run started at ``t0`` process the bucket, judging by its entry before and after?
    And if not, why. A run that processed it and failed raises."""
    if after is None:
        # No entry (left): no lifecycle configuration, or the bucket is gone; nothing was held.
        return True, ""
    started = started_s(after)
    # ``started`` has whole seconds; only a run through all shards (RGW's own worker) stamps it.
    if started is not None and started >= int(t0):
        return True, ""
    held = held_by_another(before, t0, stale_s)
    if not held and after.get("status") == "COMPLETE":
        return True, ""
    if not held and after.get("status") == "FAILED":
        raise CephError("lc process", "the bucket's lifecycle run failed (lc list: FAILED); the RGW log "
                        "(debug_rgw 5, 'RGWLC::process_bucket') says why")
    # PROCESSING: another worker has it. UNINITIAL: RGW's worker reset the shard for a new
    # lifecycle day (bucket_lc_prepare) meanwhile; run again to be sure.
    if held:
        return False, f"another LC worker had its lifecycle entry (PROCESSING since {before.get('started')})"  # type: ignore[union-attr]
    return False, f"its lifecycle entry is {after.get('status')} since {after.get('started')} (another LC worker)"


#: What to do when a crashed run left the bucket's entry held (process_now's ``held_hint``).
PURGE_HELD_HINT = "purge with --method direct or s3 instead, or wait"


async def _after_crash(rgw: rgwa.RadosgwAdmin, bucket: str, crash: CommandFailed, result: LcRun, now: float,
                       stale_s: float, held_hint: str) -> None:
    """A crashed ``lc process`` (docs/operations.md, "Known crashes of Tentacle 20.2.4") runs once
    more, but only if it did not leave the bucket's entry held: the single-bucket path sets it
    PROCESSING before it lists the bucket, and a crash leaves it so. With ``started`` never
    stamped (1970, as PutBucketLifecycle leaves it) or old, RGW clears it and runs the bucket;
    with a recent ``started`` (RGW's own worker ran the bucket lately) RGW, its own worker too,
    skips the bucket for two lifecycle days after it, and every run would look like another
    worker's hold. A second crash fails."""
    if result.crashes:
        raise crash
    result.crashes += 1
    try:
        after = entry_for(await rgw.json(*rgwa.lc_list_args()) or [], bucket)
    except CephError as exc:  # unknown: the next run's own read-back judges it
        log.warning("lc process crashed; its entry not read", bucket=bucket, crash=crash.detail, error=str(exc)[:200])
        return
    if after is not None and held_by_another(after, now, stale_s):
        raise CephError(crash.request, f"{crash.detail}; it left the bucket's lifecycle entry PROCESSING since "
                        f"{after.get('started')}, which RGW's lifecycle skips (its own worker too) for two "
                        f"lifecycle days after that: {held_hint}")
    log.warning("lc process crashed, running it again", bucket=bucket, crash=crash.detail, entry=after)


async def process_now(rgw: rgwa.RadosgwAdmin, bucket: str, *, timeout_s: float, busy_wait_s: float,
                      poll_s: float | None = None, stale_s: float = STALE_PROCESSING_S,
                      held_hint: str = PURGE_HELD_HINT, clock: Callable[[], float] = time.time,
                      sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> LcRun:
    """Run ``lc process --bucket`` until a run really processes the bucket (read back).
    ``stale_s``: how long RGW holds a PROCESSING entry (stale_after); ``held_hint``: what to do
    when a crashed run left the entry held."""
    result = LcRun()
    if poll_s is None:
        poll_s = min(2.0, busy_wait_s / 10)
    deadline = clock() + busy_wait_s
    while True:
        before = entry_for(await rgw.json(*rgwa.lc_list_args()) or [], bucket)
        t0 = clock()
        result.runs += 1
        try:
            await rgw.run(*rgwa.lc_process_args(bucket), timeout=timeout_s)
        except CommandFailed as exc:
            if exc.signal_name is not None:
                await _after_crash(rgw, bucket, exc, result, clock(), stale_s, held_hint)
                ran, why = False, f"lc process crashed: {exc.detail}"
            elif "(16)" in exc.stderr or "busy" in exc.stderr.lower():  # EBUSY: another worker has the shard lock
                ran, why = False, "another LC worker holds the lock on its lifecycle shard"
            else:
                raise
        else:
            after = entry_for(await rgw.json(*rgwa.lc_list_args()) or [], bucket)
            ran, why = ran_since(before, after, t0, stale_s)
        if ran:
            return result
        result.skipped.append(why)
        if why.startswith("lc process crashed"):
            # The one run after a crash is not cut short by the wait, which is for other
            # workers' holds: a crashed run on a big bucket may itself outlast it.
            await sleep(poll_s)
            continue
        log.warning("lc process skipped the bucket", bucket=bucket, reason=why, run=result.runs)
        if clock() + poll_s > deadline:
            raise LifecycleBusy(f"lc process --bucket {bucket}",
                                f"{why}, for more than {busy_wait_s:g} s (purge.lc_busy_wait_s); that worker "
                                "applies the rules itself, or rerun once `radosgw-admin lc list` shows it COMPLETE")
        await sleep(poll_s)


async def put_rules_back(call: Callable[..., Awaitable[Any]], s3: Any, bucket: str,
                         previous: list[dict[str, Any]]) -> bool:
    """Give ``bucket`` the lifecycle rules it had before (``previous``; none: no configuration at
    all) and read them back; whether they read back the same. ``call(what, fn, *args)`` makes
    one S3 call (the purge's, with its retries; expiry's, on a thread)."""
    if previous:
        await call("PutBucketLifecycleConfiguration", s3.put_lifecycle, bucket, lc.s3_rules(previous))
    else:
        await call("DeleteBucketLifecycle", s3.delete_lifecycle, bucket)
    got = await call("GetBucketLifecycleConfiguration", s3.get_lifecycle, bucket)
    return lc.same_rules(got, previous)
