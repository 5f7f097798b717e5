"""Fill: alerts with hysteresis against the OSDMap's nearfull ratio, raw and per OSD, the
projected time to nearfull, and the trigger for the configured expiry.

One OSD reaching nearfull blocks writes to its PGs before the average does, so the fullest
OSD is watched as well as raw fill. The 10-billion-object test saw GET fall 30% past 80%
fill; the 1-billion test saw writes degrade near 90%. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from rgwkeeper.actions import RunExpire
from rgwkeeper.config import FillSection
from rgwkeeper.snapshot import Snapshot

MAX_SAMPLES = 120


@dataclass(frozen=True)
class FillDecision:
    actions: tuple[RunExpire, ...]
    alerts: Mapping[str, bool]  # "raw", "osd.N" -> alerting
    raised: tuple[str, ...]  # newly raised this pass
    cleared: tuple[str, ...]
    projected_s_to_nearfull: float | None
    memory: dict[str, Any]
    reason: str


def _alert(prev: bool, used: float, nearfull: float, s: FillSection) -> bool:
    on_at = nearfull - s.warn_margin
    return used >= on_at if not prev else used >= on_at - s.hysteresis


def projected_seconds(samples: list[list[float]], nearfull: float) -> float | None:
    """Least-squares fill rate over the samples [(t, used_ratio)] -> seconds until nearfull."""
    if len(samples) < 2:
        return None
    n = len(samples)
    mt = sum(t for t, _ in samples) / n
    mu = sum(u for _, u in samples) / n
    var = sum((t - mt) ** 2 for t, _ in samples)
    if var == 0:
        return None
    slope = sum((t - mt) * (u - mu) for t, u in samples) / var  # ratio per second
    current = samples[-1][1]
    if current >= nearfull:
        return 0.0
    if slope <= 0:
        return None
    return (nearfull - current) / slope


def decide(snap: Snapshot, s: FillSection, memory: Mapping[str, Any], *, now: float) -> FillDecision:
    nearfull = snap.ratios.nearfull_ratio
    prev = dict(memory.get("alerts", {}))
    alerts = {"raw": _alert(bool(prev.get("raw")), snap.raw.used_ratio, nearfull, s)}
    for o in snap.osds:
        key = f"osd.{o.osd_id}"
        alerts[key] = _alert(bool(prev.get(key)), o.used_ratio, nearfull, s)
    raised = tuple(k for k, v in alerts.items() if v and not prev.get(k))
    cleared = tuple(k for k, v in alerts.items() if not v and prev.get(k))
    samples = [x for x in memory.get("samples", []) if now - x[0] <= s.rate_window_s]
    samples.append([now, snap.raw.used_ratio])
    samples = samples[-MAX_SAMPLES:]
    eta = projected_seconds(samples, nearfull)

    actions: tuple[RunExpire, ...] = ()
    expiring = bool(memory.get("expiry_started"))
    reason = f"raw {snap.raw.used_ratio:.1%} used, nearfull at {nearfull:.1%}"
    full = snap.full if snap.full is not None and snap.full.full else None
    if s.expire_at_ratio is not None:
        if not expiring and snap.raw.used_ratio >= s.expire_at_ratio and full and s.expire_raise_full_ratio is None:
            # Expiry needs RGW to write (lifecycle rules, index, GC): on a full cluster it would
            # wait until killed. Not started, so it runs once the cluster is below full again.
            reason += "; " + full.refusal("the configured expiry", "set fill.expire_raise_full_ratio to let the "
                                     "daemon raise the full ratio for it")
        elif not expiring and snap.raw.used_ratio >= s.expire_at_ratio:
            raise_to = s.expire_raise_full_ratio if full else None
            actions = (RunExpire(f"raw fill {snap.raw.used_ratio:.1%} crossed {s.expire_at_ratio:.1%}",
                                 raise_full_ratio=raise_to),)
            expiring = True
            reason += f"; starting the configured expiry (crossed {s.expire_at_ratio:.1%})" + (
                f" with the full ratio raised to {raise_to:.6g}: {full.describe()}" if full else "")
        elif expiring and snap.raw.used_ratio < s.expire_at_ratio - s.hysteresis:
            expiring = False  # re-arm once fill has dropped clear of the level
    mem = {"alerts": alerts, "samples": samples, "expiry_started": expiring}
    return FillDecision(actions, alerts, raised, cleared, eta, mem, reason)
