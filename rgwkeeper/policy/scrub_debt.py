"""Deep-scrub debt: pay it back in quiet periods, before PG_NOT_DEEP_SCRUBBED.

A throttle that defers deep scrub must not make PGs miss their deadline. Each PG's deadline
is the point from which Ceph's PG_NOT_DEEP_SCRUBBED check counts it (its last deep-scrub
stamp plus its interval times 1 + ``mon_warn_pg_not_deep_scrubbed_ratio``; see
:func:`rgwkeeper.snapshot.parse_deep_scrub`). While the scrub throttle is not engaged and
the smoothed RGW write load is below ``max_write_ops``, the policy requests deep scrubs of
the PGs within ``horizon_s`` of their deadline, closest deadline (then oldest stamp)
first, keeping at most ``max_in_flight`` PGs deep-scrubbing or requested. A PG requested
is not requested again until its stamp moves or ``request_timeout_s`` passes.

Pure: plain data in (snapshot, config, memory, time), actions and new memory out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Collection, Mapping

from rgwkeeper.actions import DeepScrubPg
from rgwkeeper.config import ScrubDebtSection
from rgwkeeper.snapshot import DeepScrubDeadlines, PgDeepScrub
from rgwkeeper.units import write_load_vs


@dataclass(frozen=True)
class Requested:
    stamp: float  # the PG's last_deep_scrub_stamp when it was requested
    at: float  # when it was requested (wall clock)


@dataclass(frozen=True)
class DebtMemory:
    """PGs requested and not yet deep-scrubbed (persisted in the journal's control object)."""

    requested: Mapping[str, Requested] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"requested": {pg: {"stamp": r.stamp, "at": r.at} for pg, r in sorted(self.requested.items())}}

    def forget(self, pgids: Collection[str]) -> "DebtMemory":
        """Without these PGs: requests that were not sent, or that failed."""
        return DebtMemory({pg: r for pg, r in self.requested.items() if pg not in pgids})

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> "DebtMemory":
        out = {}
        for pg, r in ((d or {}).get("requested") or {}).items():
            try:
                out[str(pg)] = Requested(float(r["stamp"]), float(r["at"]))
            except (KeyError, TypeError, ValueError):
                continue  # a damaged entry only costs one early re-request
        return cls(out)


@dataclass(frozen=True)
class DebtSummary:
    past_deadline: int  # PGs PG_NOT_DEEP_SCRUBBED counts now
    due_within_horizon: int  # PGs within horizon_s of their deadline, not yet past it
    deep_scrubbing: int
    nearest_pgid: str | None
    nearest_deadline: float | None  # epoch seconds
    seconds_to_nearest: float | None  # negative: past it

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class DebtDecision:
    actions: tuple[DeepScrubPg, ...]
    memory: DebtMemory
    summary: DebtSummary | None  # None: deadlines unknown
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"summary": self.summary.to_dict() if self.summary else None, "reason": self.reason,
                "would_request": [{"pgid": a.pgid, "reason": a.reason} for a in self.actions],
                "requested": self.memory.to_dict()["requested"]}


def summarize(d: DeepScrubDeadlines, horizon_s: float, now: float) -> DebtSummary:
    past = sum(1 for p in d.pgs if p.warn_at <= now)
    due = sum(1 for p in d.pgs if now < p.warn_at <= now + horizon_s)
    nearest = d.nearest()
    return DebtSummary(past_deadline=past, due_within_horizon=due,
                       deep_scrubbing=sum(1 for p in d.pgs if p.deep_scrubbing),
                       nearest_pgid=nearest.pgid if nearest else None,
                       nearest_deadline=nearest.warn_at if nearest else None,
                       seconds_to_nearest=nearest.warn_at - now if nearest else None)


def _pending(pg: PgDeepScrub, r: Requested | None, s: ScrubDebtSection, now: float) -> bool:
    """Requested, not deep-scrubbed since, and not timed out."""
    return r is not None and pg.last_deep_scrub_stamp <= r.stamp and now - r.at < s.request_timeout_s


def decide(deadlines: DeepScrubDeadlines | None, s: ScrubDebtSection, memory: DebtMemory, *,
           throttle_engaged: bool, smoothed_write_ops: float, now: float,
           deep_scrubbing_now: int = 0) -> DebtDecision:
    """``deep_scrubbing_now``: PGs deep-scrubbing per ``ceph status`` this pass (the deadlines
    may be an older read; the bound takes the larger count)."""
    if deadlines is None:
        return DebtDecision((), memory, None, "deep-scrub deadlines unknown (not read)")
    by_pg = {p.pgid: p for p in deadlines.pgs}
    # Forget PGs whose stamp moved, that timed out, or that no longer exist.
    kept = {pg: r for pg, r in memory.requested.items() if pg in by_pg and _pending(by_pg[pg], r, s, now)}
    mem = DebtMemory(kept)
    summary = summarize(deadlines, s.horizon_s, now)
    if not s.enabled:
        return DebtDecision((), mem, summary, "scrub debt disabled (scrub_debt.enabled)")
    due = sorted((p for p in deadlines.pgs if p.warn_at <= now + s.horizon_s
                  and not p.deep_scrubbing and p.pgid not in kept),
                 key=lambda p: (p.warn_at, p.last_deep_scrub_stamp, p.pgid))
    if not due:
        return DebtDecision((), mem, summary, f"no PG within {s.horizon_s:.0f} s of its deep-scrub deadline "
                                              "that is not deep-scrubbing or requested already")
    if throttle_engaged:
        return DebtDecision((), mem, summary, f"{len(due)} PG(s) due, but the scrub throttle is engaged")
    if smoothed_write_ops >= s.max_write_ops:
        return DebtDecision((), mem, summary, f"{len(due)} PG(s) due, but smoothed RGW "
                                              f"{write_load_vs(smoothed_write_ops, s.max_write_ops, 'is not below')}")
    in_flight = max(summary.deep_scrubbing, deep_scrubbing_now) + sum(1 for pg in kept if not by_pg[pg].deep_scrubbing)
    room = s.max_in_flight - in_flight
    if room <= 0:
        return DebtDecision((), mem, summary, f"{len(due)} PG(s) due; {in_flight} deep-scrubbing or requested "
                                              f"already (max_in_flight {s.max_in_flight})")
    picked = due[:room]
    actions = tuple(DeepScrubPg(p.pgid, _why(p, now)) for p in picked)
    mem = DebtMemory({**kept, **{p.pgid: Requested(p.last_deep_scrub_stamp, now) for p in picked}})
    return DebtDecision(actions, mem, summary, f"requesting {len(picked)} of {len(due)} PG(s) due "
                                               f"({in_flight} in flight, max_in_flight {s.max_in_flight})")


def _why(p: PgDeepScrub, now: float) -> str:
    left = p.warn_at - now
    when = f"{-left:.0f} s past" if left < 0 else f"{left:.0f} s before"
    return f"deep-scrub debt: {when} PG_NOT_DEEP_SCRUBBED would count it"
