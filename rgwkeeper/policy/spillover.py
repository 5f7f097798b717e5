"""BlueFS spillover: compact spilled OSDs one at a time while it is quiet, and say which
OSDs need a bigger DB device.

Spillover (RocksDB metadata on the slow device) made ingest and reads degrade in the 1-
and 10-billion-object studies. ``ceph tell osd.N compact`` can move it back when the DB
device has room; when it does not clear the spillover, the DB device is too small for the
OSD's metadata and the answer is a bigger one. Compaction is I/O heavy, so: one OSD per
pass, only while write load is low, no health check says the cluster is under stress
(Snapshot.load_checks) and the gates are open, and not the same OSD again
within ``min_interval_s``. Key on the ``BLUEFS_SPILLOVER`` code and ``slow_used_bytes``,
never on the health message text. Pure: no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from rgwkeeper.actions import CompactOsd
from rgwkeeper.config import SpilloverSection
from rgwkeeper.snapshot import BLUEFS_SPILLOVER, BluefsUsage, Snapshot
from rgwkeeper.units import write_load_vs

GIB = 1 << 30
#: A compaction "cleared" spillover if slow_used_bytes fell at least this much.
CLEARED_FRACTION = 0.5


@dataclass(frozen=True)
class SpilloverDecision:
    actions: tuple[CompactOsd, ...]
    reason: str
    needs_bigger_db: Mapping[int, int]  # osd -> recommended DB size in bytes


def recommended_db_bytes(b: BluefsUsage, headroom: float) -> int:
    """DB size that would hold all of this OSD's BlueFS data with headroom, rounded up to GiB."""
    need = (b.db_used_bytes + b.slow_used_bytes) * headroom
    return int(math.ceil(need / GIB) * GIB)


def record_outcome(before: BluefsUsage, after: BluefsUsage, at: float) -> dict[str, Any]:
    cleared = after.slow_used_bytes <= before.slow_used_bytes * (1 - CLEARED_FRACTION)
    return {"at": at, "slow_before": before.slow_used_bytes, "slow_after": after.slow_used_bytes,
            "db_used_after": after.db_used_bytes, "cleared": cleared}


def decide(snap: Snapshot, s: SpilloverSection, memory: Mapping[str, Any], *, smoothed_write_ops: float,
           gate_open: bool, now: float) -> SpilloverDecision:
    """``memory`` maps "osd.N" to the outcome of its last compaction (see record_outcome)."""
    spilled = {b.osd_id: b for b in snap.spilled_osds}
    needs = {}
    for osd_id, b in spilled.items():
        last = memory.get(f"osd.{osd_id}")
        if last and not last.get("cleared") and b.slow_used_bytes > 0:
            needs[osd_id] = recommended_db_bytes(b, s.db_headroom)
    if not s.enabled:
        return SpilloverDecision((), "spillover compaction disabled", needs)
    if not spilled:
        return SpilloverDecision((), "no OSD spills over", needs)
    if not gate_open:
        return SpilloverDecision((), f"{len(spilled)} OSD(s) spill over; gates closed", needs)
    if BLUEFS_SPILLOVER not in snap.checks and all(b.slow_used_bytes == 0 for b in spilled.values()):
        return SpilloverDecision((), "no spillover", needs)
    if smoothed_write_ops > s.max_write_ops:
        return SpilloverDecision((), f"{len(spilled)} OSD(s) spill over, but "
                                     f"{write_load_vs(smoothed_write_ops, s.max_write_ops)}: compaction waits", needs)
    if snap.load_checks:
        return SpilloverDecision((), f"{len(spilled)} OSD(s) spill over, but the cluster is not quiet "
                                     f"({', '.join(snap.load_checks)}): compaction waits", needs)
    due = [b for b in spilled.values()
           if now - float((memory.get(f"osd.{b.osd_id}") or {}).get("at", -math.inf)) >= s.min_interval_s]
    if not due:
        return SpilloverDecision((), f"{len(spilled)} OSD(s) spill over; each was compacted within "
                                     f"{s.min_interval_s:.0f} s", needs)
    pick = max(due, key=lambda b: b.slow_used_bytes)
    reason = (f"osd.{pick.osd_id} has {pick.slow_used_bytes / GIB:.2f} GiB on the slow device; compacting it "
              f"(one OSD at a time, write load {smoothed_write_ops:.0f} op/s)")
    return SpilloverDecision((CompactOsd(pick.osd_id, reason),), reason, needs)
