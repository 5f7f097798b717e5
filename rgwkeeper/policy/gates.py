"""Gates: may the daemon make changes right now? If not, say why ("not now")."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import time as dtime
from typing import Any, Mapping

from rgwkeeper.config import GatesSection
from rgwkeeper.snapshot import Snapshot


@dataclass(frozen=True)
class GateResult:
    open: bool
    reasons: tuple[str, ...]

    def __str__(self) -> str:
        return "ok" if self.open else "not now: " + "; ".join(self.reasons)


def in_window(window: str, local: dtime) -> bool:
    """``"22:00-06:00"`` contains ``local``? Windows may wrap midnight; start is inclusive."""
    start_s, end_s = window.split("-")
    start = dtime(int(start_s[:2]), int(start_s[3:]))
    end = dtime(int(end_s[:2]), int(end_s[3:]))
    if start <= end:
        return start <= local < end
    return local >= start or local < end


def check(snap: Snapshot, settings: GatesSection, *, paused: Mapping[str, Any] | None, local_time: dtime) -> GateResult:
    reasons = []
    if paused:
        who = paused.get("by", "an operator")
        why = f" ({paused['reason']})" if paused.get("reason") else ""
        reasons.append(f"paused by {who}{why}; run rgwkeeper resume")
    pg = snap.pg_health
    if pg.pgs_inactive > settings.max_inactive_pgs:
        reasons.append(f"{pg.pgs_inactive} PGs inactive (limit {settings.max_inactive_pgs})")
    if pg.degraded_ratio > settings.max_degraded_ratio:
        reasons.append(f"{pg.degraded_ratio:.1%} of objects degraded (limit {settings.max_degraded_ratio:.1%})")
    if settings.maintenance_window and not in_window(settings.maintenance_window, local_time):
        reasons.append(f"outside the maintenance window {settings.maintenance_window} "
                       f"(local time {local_time.strftime('%H:%M')})")
    return GateResult(open=not reasons, reasons=tuple(reasons))
