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

from rgwkeeper.adapters import radosgw_admin as rgwa
from rgwkeeper.errors import CephError, CommandFailed

log = structlog.get_logger(__name__)


class LifecycleBusy(CephError):
    """Another lifecycle worker kept the bucket's entry for longer than we were willing to wait."""


@dataclass
class LcRun:
    runs: int = 0
    skipped: list[str] = field(default_factory=list)  # why each run that did nothing did nothing

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


def held_by_another(entry: dict[str, Any] | None, now: float) -> bool:
    if entry is None or entry.get("status") != "PROCESSING":
        return False
    started = started_s(entry)
    return started is not None and now - started < STALE_PROCESSING_S


def ran_since(before: dict[str, Any] | None, after: dict[str, Any] | None, t0: float) -> tuple[bool, str]:
    """Did a run started at ``t0`` process the bucket, judging by its entry before and after?
    And if not, why. A run that processed it and failed raises."""
    if after is None:
        # No entry (left): no lifecycle configuration, or the bucket is gone; nothing was held.
        return True, ""
    started = started_s(after)
    # ``started`` has whole seconds; only a run through all shards (RGW's own worker) stamps it.
    if started is not None and started >= int(t0):
        return True, ""
    held = held_by_another(before, t0)
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


async def process_now(rgw: rgwa.RadosgwAdmin, bucket: str, *, timeout_s: float, busy_wait_s: float,
                      poll_s: float | None = None, clock: Callable[[], float] = time.time,
                      sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> LcRun:
    """Run ``lc process --bucket`` until a run really processes the bucket (read back)."""
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
            after = entry_for(await rgw.json(*rgwa.lc_list_args()) or [], bucket)
            ran, why = ran_since(before, after, t0)
        except CommandFailed as exc:
            if "(16)" not in exc.stderr and "busy" not in exc.stderr.lower():  # EBUSY: another worker has the shard lock
                raise
            ran, why = False, "another LC worker holds the lock on its lifecycle shard"
        if ran:
            return result
        result.skipped.append(why)
        log.warning("lc process skipped the bucket", bucket=bucket, reason=why, run=result.runs)
        if clock() + poll_s > deadline:
            raise LifecycleBusy(f"lc process --bucket {bucket}",
                                f"{why}, for more than {busy_wait_s:g} s (purge.lc_busy_wait_s); that worker "
                                "applies the rules itself, or rerun once `radosgw-admin lc list` shows it COMPLETE")
        await sleep(poll_s)
