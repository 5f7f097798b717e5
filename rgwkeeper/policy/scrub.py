"""Deep-scrub throttle under heavy RGW PUT load.

Deep scrub started at a high rate during very high PUT rates cut PUT and GET sharply in
the 10-billion-object study. When the smoothed client write op/s on the RGW data pools
rises above ``high_write_ops`` the policy throttles scrub with the levers that the running
release and op queue honour and that were measured to help there (``rgwkeeper.releases.
SCRUB_LEVERS``, docs/architecture.md "Deep-scrub levers per release"), and gives back exactly
what was there once load has stayed below ``low_write_ops`` for ``hold_s``. Where no lever
helps (mClock already protects client I/O), it says so and changes nothing. mClock reverts
locked options after ``config set`` reports success, which is why the executor reads values
back from the OSDs.

Deep scrub is never deferred without bound: past ``max_defer_s`` of continuous throttle,
as soon as PG_NOT_DEEP_SCRUBBED is raised, or once a PG is within
``release_before_deadline_s`` of the point that check would count it, scrub is given back
and not throttled again for ``cooldown_s``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any, Iterable, Mapping

from rgwkeeper import releases
from rgwkeeper.actions import Action, RestoreAll, SetConfig, SetFlag
from rgwkeeper.config import ScrubThrottleSection
from rgwkeeper.snapshot import PG_NOT_DEEP_SCRUBBED, Snapshot

#: Journal keys this policy owns (so restores and "is throttled" are about its own overrides):
#: every lever of every release, so a throttle set before an upgrade is still given back.
OWNED_NAMES = tuple(dict.fromkeys(("osd_scrub_sleep", "osd_max_scrubs", "osd_scrub_load_threshold",
                                   "osd_mclock_profile", *releases.SCRUB_LEVER_OPTIONS)))


@dataclass(frozen=True)
class ThrottleMemory:
    """What the policy remembers between passes (persisted in the journal's control object)."""

    ema_write_ops: float | None = None
    last_sample_at: float | None = None
    throttled_since: float | None = None
    below_low_since: float | None = None
    forced_release_at: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> "ThrottleMemory":
        if not d:
            return cls()
        return cls(**{k: d.get(k) for k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class Decision:
    actions: tuple[Action, ...]
    memory: ThrottleMemory
    state: str  # idle | engage | throttled | holding | release | forced-release | cooldown | nothing-to-throttle
    reason: str


def smooth(memory: ThrottleMemory, sample: float, now: float, time_constant_s: float) -> float:
    """Exponential moving average with a time constant, correct for uneven tick spacing."""
    if memory.ema_write_ops is None or memory.last_sample_at is None or time_constant_s <= 0:
        return sample
    dt = max(0.0, now - memory.last_sample_at)
    alpha = 1.0 - math.exp(-dt / time_constant_s)
    return memory.ema_write_ops + alpha * (sample - memory.ema_write_ops)


def lever_choice(snap: Snapshot) -> dict[str, releases.ScrubLevers]:
    """The levers for each op queue the OSDs run (the release's default queue if none answered)."""
    queues = snap.scrub.op_queues or (releases.default_op_queue(snap.release),)
    return {q: releases.scrub_levers(snap.release, q) for q in queues}


def lever_values(s: ScrubThrottleSection) -> dict[str, str | None]:
    """Each lever's throttled value from the config (None: the config leaves it alone)."""
    return {"osd_scrub_sleep": _num(s.scrub_sleep),
            "osd_scrub_load_threshold": None if s.load_threshold is None else _num(s.load_threshold),
            "osd_max_scrubs": str(s.max_scrubs),
            "osd_mclock_profile": s.mclock_profile}


def desired_overrides(snap: Snapshot, s: ScrubThrottleSection) -> tuple[SetConfig | SetFlag, ...]:
    """The settings a throttle holds on this snapshot's release and op queues: only levers the
    release table keeps there, so nothing the running release ignores or has removed is set."""
    wanted = list(dict.fromkeys(lever for row in lever_choice(snap).values() for lever in row.levers))
    values = lever_values(s)
    why = "deep scrub throttled under RGW write load"
    out: list[SetConfig | SetFlag] = []
    for lever in wanted:
        if lever == "nodeep-scrub":
            continue  # last, after the options
        if values.get(lever) is not None:
            out.append(SetConfig("osd", lever, str(values[lever]), why))
    if s.set_nodeep_scrub_flag and "nodeep-scrub" in wanted:
        out.append(SetFlag("nodeep-scrub", why))
    return tuple(out)


def nothing_to_throttle(snap: Snapshot) -> str | None:
    """Why no lever is used on this release (None when some lever is)."""
    choice = lever_choice(snap)
    if any(row.levers for row in choice.values()):
        return None
    return "; ".join(f"{q} on {snap.release}: {row.why}" for q, row in choice.items())


def levers_line(snap: Snapshot) -> str:
    """``osd_mclock_profile, osd_max_scrubs (mclock_scheduler on tentacle: why)``, for status."""
    return "; ".join(f"{', '.join(row.levers) or 'none'} ({q} on {snap.release}: {row.why})"
                     for q, row in lever_choice(snap).items())


def _num(x: float) -> str:
    return f"{x:g}"


def owned_keys(s: ScrubThrottleSection) -> set[str]:
    keys = {f"config/osd/{n}" for n in OWNED_NAMES}
    keys.add("flag/nodeep-scrub")
    return keys


def is_throttled(override_keys: Iterable[str], s: ScrubThrottleSection) -> bool:
    """Does the journal hold any of this policy's overrides (whatever lever the release uses)?"""
    return bool(set(override_keys) & owned_keys(s))


def deadline_near(snap: Snapshot, s: ScrubThrottleSection, now: float) -> str | None:
    """Why scrub must not be held back: a PG within release_before_deadline_s of the point
    where PG_NOT_DEEP_SCRUBBED counts it (None: none is, or deadlines were not read)."""
    nearest = snap.deep_scrub.nearest() if snap.deep_scrub is not None else None
    if nearest is None or s.release_before_deadline_s <= 0 or nearest.warn_at - now > s.release_before_deadline_s:
        return None
    return (f"pg {nearest.pgid} is {nearest.warn_at - now:.0f} s from PG_NOT_DEEP_SCRUBBED "
            f"(release_before_deadline_s {s.release_before_deadline_s:.0f}): deep scrub must run")


def decide(snap: Snapshot, s: ScrubThrottleSection, memory: ThrottleMemory,
           active_override_keys: Iterable[str], now: float) -> Decision:
    """One pass of the throttle. ``active_override_keys`` comes from the journal (the truth)."""
    sample = snap.rgw_io.write_op_per_sec
    ema = smooth(memory, sample, now, s.smoothing_s)
    mem = replace(memory, ema_write_ops=ema, last_sample_at=now)
    throttled = is_throttled(active_override_keys, s)
    load = f"smoothed RGW write load {ema:.0f} op/s (now {sample:.0f})"

    if not s.enabled:
        if throttled:
            return Decision((RestoreAll("scrub throttle disabled in the config"),), replace(mem, throttled_since=None,
                            below_low_since=None), "release", "scrub throttle disabled")
        return Decision((), mem, "idle", "scrub throttle disabled")

    idle_why = nothing_to_throttle(snap)
    if idle_why is not None:
        if throttled:  # set by an older rgwkeeper, or before an upgrade: give it back
            return Decision((RestoreAll(idle_why),), replace(mem, throttled_since=None, below_low_since=None),
                            "release", idle_why)
        return Decision((), replace(mem, throttled_since=None, below_low_since=None), "nothing-to-throttle",
                        f"{load}; {idle_why}")

    near = deadline_near(snap, s, now)
    overdue = PG_NOT_DEEP_SCRUBBED in snap.checks or near is not None
    if throttled:
        since = mem.throttled_since if mem.throttled_since is not None else now
        mem = replace(mem, throttled_since=since)
        forced = None
        if overdue:
            forced = near or "PG_NOT_DEEP_SCRUBBED is raised: deep scrub must run"
        elif now - since >= s.max_defer_s:
            forced = f"throttled for {now - since:.0f} s, past max_defer_s {s.max_defer_s:.0f} s"
        if forced:
            return Decision((RestoreAll(forced),), replace(mem, throttled_since=None, below_low_since=None,
                                                           forced_release_at=now), "forced-release", forced)
        if ema < s.low_write_ops:
            below = mem.below_low_since if mem.below_low_since is not None else now
            mem = replace(mem, below_low_since=below)
            if now - below >= s.hold_s:
                reason = f"{load} below {s.low_write_ops:.0f} for {now - below:.0f} s"
                return Decision((RestoreAll(reason),), replace(mem, throttled_since=None, below_low_since=None),
                                "release", reason)
            return Decision(desired_overrides(snap, s), mem, "holding",
                            f"{load} below {s.low_write_ops:.0f} for {now - below:.0f} of {s.hold_s:.0f} s")
        # Keep the throttle; re-assert it in case the op queue changed or someone edited a value.
        return Decision(desired_overrides(snap, s), replace(mem, below_low_since=None), "throttled",
                        f"{load} at or above low watermark {s.low_write_ops:.0f}")

    mem = replace(mem, throttled_since=None, below_low_since=None)
    if ema <= s.high_write_ops:
        return Decision((), mem, "idle", f"{load} at or below high watermark {s.high_write_ops:.0f}")
    if overdue:
        return Decision((), mem, "idle", f"{load} is high, but {near or 'PG_NOT_DEEP_SCRUBBED is raised'}: "
                                          "not throttling")
    if mem.forced_release_at is not None and now - mem.forced_release_at < s.cooldown_s:
        left = s.cooldown_s - (now - mem.forced_release_at)
        return Decision((), mem, "cooldown", f"{load} is high, but scrub was given back by force; "
                                              f"{left:.0f} s of cooldown left")
    return Decision(desired_overrides(snap, s), replace(mem, throttled_since=now), "engage",
                    f"{load} above high watermark {s.high_write_ops:.0f}")
