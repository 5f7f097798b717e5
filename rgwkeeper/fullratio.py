"""A full cluster: the decision whether work that needs RGW to write may go, and the
operator's usual remedy, a small temporary raise of the full ratio, journaled and given back.

On a full cluster (health OSD_FULL / POOL_FULL) every RADOS write without librados'
full-try flag waits until usage is below the full ratio: RGW's index, GC and metadata
writes, S3 deletes and radosgw-admin's bucket removal included (measured on 16.2.15;
docs/purge.md, "Full cluster"). The remedy is ``ceph osd set-full-ratio R``, delete, set it
back. Here the raise is bounded (``check_raise``), journaled in the daemon's RADOS journal
*before* the change (an ``Override`` of kind "ratio", so ``rgwkeeper restore`` and the daemon
give back what a crashed purge left), and given back on every path, but only while the live
ratio is still the one rgwkeeper set: an operator's later change is never overwritten.

The pure part (``check_raise``, ``plan_lines``; the refusal line is ``FullState.refusal``) is at the top; the acting part talks to the mon
through a RadosAdapter.
"""

from __future__ import annotations

import asyncio
import math
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable

import structlog

from rgwkeeper.adapters.rados import RadosAdapter
from rgwkeeper.errors import CephError, ClusterFull, UsageError
from rgwkeeper.journal import Journal, Override
from rgwkeeper.snapshot import FullState, parse_ratios

log = structlog.get_logger("rgwkeeper.fullratio")

RATIO_KEY = "ratio/full_ratio"
#: How long a give-back waits for librados calls still running (each is bounded by the
#: cluster timeout); past it the raise stays journaled for `rgwkeeper restore`, never lost.
DRAIN_S = 30.0
#: The OSDMap keeps the ratios as float32: 0.97 reads back as 0.9700000286.
RATIO_TOLERANCE = 1e-5


def same_ratio(a: float | str | None, b: float | str | None) -> bool:
    if a is None or b is None:
        return a is b
    return abs(float(a) - float(b)) <= RATIO_TOLERANCE


def ratio_text(ratio: float) -> str:
    """The ratio as an operator types it (0.95, not 0.949999988079071)."""
    return f"{ratio:.6g}"


def set_command(ratio: float | str) -> str:
    return f"ceph osd set-full-ratio {ratio_text(float(ratio))}"


def check_raise_bound(raise_to: float, max_ratio: float) -> None:
    """Refuse a raise that is not finite or above ``max_ratio`` (purge.max_full_ratio), whether or
    not the cluster is full. One line, UsageError."""
    if not math.isfinite(raise_to) or not 0 < raise_to < 1:
        raise UsageError(f"--raise-full-ratio must be a fraction between 0 and 1, got {raise_to}; nothing was changed")
    if raise_to > max_ratio + RATIO_TOLERANCE:
        raise UsageError(f"--raise-full-ratio {ratio_text(raise_to)} is above purge.max_full_ratio "
                         f"{ratio_text(max_ratio)}; nothing was changed")


def check_raise(raise_to: float, state: FullState, max_ratio: float) -> None:
    """Refuse a raise that is not finite, not above the live full ratio, or above ``max_ratio``
    (purge.max_full_ratio). One line, UsageError: nothing is contacted after it."""
    check_raise_bound(raise_to, max_ratio)
    current = state.ratios.full_ratio
    if raise_to <= current + RATIO_TOLERANCE:
        raise UsageError(f"--raise-full-ratio {ratio_text(raise_to)} is not above the live full ratio "
                         f"{ratio_text(current)}; nothing was changed")
    used = state.fullest_used_ratio
    if used is not None and raise_to <= used:
        raise UsageError(f"--raise-full-ratio {ratio_text(raise_to)} would leave osd.{state.fullest_osd} "
                         f"({used:.1%} used) full: choose a ratio above its usage; nothing was changed")


def plan_lines(state: FullState, raise_to: float, pool: str) -> list[str]:
    """The raise and the give-back as a dry run shows them."""
    return [f"full ratio: raised for this run only; journaled first in pool {pool} ({RATIO_KEY}); given back "
            f"after it on every path, if it still reads {ratio_text(raise_to)}:",
            f"  before: $ {set_command(raise_to)}",
            f"  after:  $ {set_command(state.ratios.full_ratio)}"]


# -- acting -------------------------------------------------------------------------------------

async def live_full_ratio(rados: RadosAdapter) -> float:
    return parse_ratios(await rados.acommand({"prefix": "osd dump"})).full_ratio


async def set_full_ratio(rados: RadosAdapter, ratio: float) -> float:
    """Send ``osd set-full-ratio`` and return the ratio read back from the OSDMap."""
    await rados.acommand({"prefix": "osd set-full-ratio", "ratio": float(ratio)})
    return await live_full_ratio(rados)


def not_ours(detail: str) -> bool:
    """Was a give-back refused because someone else changed the ratio since (left on purpose)?"""
    return detail.startswith(LEFT_PREFIX)


LEFT_PREFIX = "full_ratio is "


async def give_back(rados: RadosAdapter, journal: Journal, e: Override, *, force: bool = False
                    ) -> tuple[bool, str]:
    """Put the original full ratio back if the live one is still ours; forget the entry once
    the OSDMap reads the original. Someone else's value is left alone and the entry kept."""
    live = await live_full_ratio(rados)
    if same_ratio(live, e.original_value):
        _forget(journal, e)
        return True, f"full_ratio already {ratio_text(live)}"
    if not force and not same_ratio(live, e.applied_value):
        return False, (f"{LEFT_PREFIX}{ratio_text(live)}, not the {e.applied_value} rgwkeeper set: changed by someone "
                       f"else since; left as it is (the journal entry is kept; the original was {e.original_value})")
    now = await set_full_ratio(rados, float(str(e.original_value)))
    if not same_ratio(now, e.original_value):
        return False, f"full_ratio reads {ratio_text(now)} after {set_command(str(e.original_value))}"
    _forget(journal, e)
    log.info("full ratio given back", full_ratio=ratio_text(now), applied=e.applied_value)
    return True, "restored"


def _forget(journal: Journal, e: Override) -> None:
    """Forget the entry as it stands now: the purge renewed its lease since ``e`` was read, and
    the journal's forget removes only the exact entry it is given (another raise is kept)."""
    for _ in range(2):  # a lease renewal still in flight may change the entry under us: read again once
        current = journal.overrides().get(e.key)
        if current is None or (current.holder, current.applied_value) != (e.holder, e.applied_value):
            return
        if journal.forget(current):
            return


@asynccontextmanager
async def raised(rados: RadosAdapter, journal: Journal, raise_to: float, *, holder: str, lease_s: float,
                 reason: str, wall_clock: Callable[[], float] = time.time) -> AsyncIterator[Override]:
    """Raise the full ratio to ``raise_to`` for the block, journaled first, given back after
    (success, failure, cancellation). The entry's lease is renewed while the block runs, so a
    daemon's restore leaves a running purge's raise alone and gives back a crashed one's."""
    def already(existing: Override | None) -> ClusterFull:
        by = f" (by {existing.holder or '?'}, original {existing.original_value}, set {existing.applied_value})" \
            if existing is not None else ""
        return ClusterFull(f"a raise of the full ratio is already journaled{by}; let that purge finish, or run "
                           "`rgwkeeper restore`, then try again; nothing was changed")

    if RATIO_KEY in journal.overrides():
        raise already(journal.overrides().get(RATIO_KEY))
    live = await live_full_ratio(rados)
    now = wall_clock()
    entry = Override(key=RATIO_KEY, kind="ratio", who="", name="full_ratio", original_present=True,
                     original_value=ratio_text(live), applied_value=ratio_text(raise_to), holder=holder,
                     since=now, lease_until=now + lease_s, reason=reason)
    try:
        # Before the change (a crash must leave the original on record), and only if no other
        # purge journaled a raise meanwhile: a second raise would record our raised value as
        # its "original" and the true one would be lost.
        journal.ensure()
        if not journal.record_new(entry):
            raise already(journal.overrides().get(RATIO_KEY))
    except CephError as exc:
        # Full-try lets an omap write to an existing object through, but a full cluster answers
        # ENOSPC to one that would create the journal object (measured on 16.2.15).
        raise ClusterFull(f"could not journal the raise of the full ratio ({exc}); the journal object must exist "
                          "before the cluster is full (the daemon creates it when it becomes leader): raise the "
                          "ratio by hand; nothing was changed") from None
    renew: asyncio.Task[Any] | None = None
    body_failed = False
    try:
        got = await set_full_ratio(rados, raise_to)
        if not same_ratio(got, raise_to):
            raise CephError(set_command(raise_to), f"full_ratio reads {ratio_text(got)} after the change")
        log.info("full ratio raised", full_ratio=ratio_text(got), original=entry.original_value, reason=reason)
        renew = asyncio.ensure_future(_renew(journal, holder, lease_s, wall_clock))
        yield entry
    except BaseException:
        body_failed = True
        raise
    finally:
        if renew is not None:
            renew.cancel()
            await asyncio.gather(renew, return_exceptions=True)
        # A cancelled or timed-out `osd set-full-ratio` still runs in its librados thread: give
        # back only once it has returned, or the raise could land after the give-back, unrecorded.
        if await rados.drain(DRAIN_S):
            try:
                ok, detail = await give_back(rados, journal, entry)
            except CephError as exc:
                ok, detail = False, str(exc)
        else:
            ok, detail = False, "a librados call was still running; the raise is kept in the journal"
        if not ok:
            log.error("full ratio not given back; run rgwkeeper restore", detail=detail)
            if not body_failed and not not_ours(detail):
                raise CephError("give back the full ratio", f"{detail}; run `rgwkeeper restore` to put "
                                f"{entry.original_value} back")


async def _renew(journal: Journal, holder: str, lease_s: float, wall_clock: Callable[[], float]) -> None:
    while True:
        await asyncio.sleep(lease_s / 3)
        try:
            await asyncio.to_thread(journal.renew, [holder], wall_clock() + lease_s)
        except CephError as exc:
            log.warning("could not renew the full ratio's journal lease", error=str(exc))
