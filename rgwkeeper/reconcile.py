"""One reconcile pass, as pure planning: gate, then each policy, then what may run now.

Shared by the daemon (which then acts) and ``rgwkeeper plan`` (which prints the commands).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, time as dtime
from typing import Any, Collection, Mapping

from rgwkeeper.actions import Action, RestoreAll
from rgwkeeper.config import Config
from rgwkeeper.journal import Override
from rgwkeeper.policy import fill, gates, scrub, scrub_debt, shards, spillover
from rgwkeeper.snapshot import Snapshot


@dataclass(frozen=True)
class PassPlan:
    gate: gates.GateResult
    scrub: scrub.Decision
    actions: tuple[Action, ...]
    overrides: Mapping[str, Override]
    shards_reason: str = ""
    shard_plans: tuple[shards.ShardPlan, ...] = ()
    spillover: spillover.SpilloverDecision | None = None
    fill: fill.FillDecision | None = None
    memory: Mapping[str, Any] = field(default_factory=dict)
    debt: scrub_debt.DebtDecision | None = None

    def commands(self) -> list[str]:
        out = []
        for a in self.actions:
            if isinstance(a, RestoreAll):
                cmds = [e.restore_command() for _, e in sorted(self.overrides.items())]
                out.extend(cmds or ["(nothing to restore)"])
            else:
                out.append(a.command())
        return out

    def memory_after(self, failed_commands: Collection[str]) -> dict[str, Any]:
        """The memory to keep once the actions ran: a deep-scrub request that failed (the mon
        refused it, or did not answer) is not remembered as requested, so the next pass asks
        again instead of waiting out ``request_timeout_s``."""
        memory = dict(self.memory)
        failed = {a.pgid for a in (self.debt.actions if self.debt else ()) if a.command() in failed_commands}
        if failed and "scrub_debt" in memory:
            memory["scrub_debt"] = scrub_debt.DebtMemory.from_dict(memory["scrub_debt"]).forget(failed).to_dict()
        return memory

    def to_dict(self) -> dict[str, Any]:
        return {
            "gate": {"open": self.gate.open, "reasons": list(self.gate.reasons)},
            "scrub_throttle": {"state": self.scrub.state, "reason": self.scrub.reason,
                               "smoothed_write_ops": self.scrub.memory.ema_write_ops},
            "preshard": {"reason": self.shards_reason,
                         "plans": [{"bucket": p.bucket, "wanted_shards": p.wanted_shards, "reason": p.reason,
                                    "capped_by": p.capped_by, "min_shards": p.min_shards_note}
                                   for p in self.shard_plans]},
            "spillover": None if self.spillover is None else {
                "reason": self.spillover.reason,
                "needs_bigger_db": {f"osd.{k}": v for k, v in self.spillover.needs_bigger_db.items()}},
            "fill": None if self.fill is None else {
                "reason": self.fill.reason, "alerts": dict(self.fill.alerts),
                "projected_seconds_to_nearfull": self.fill.projected_s_to_nearfull},
            "scrub_debt": None if self.debt is None else self.debt.to_dict(),
            "commands": self.commands(),
            "overrides": {k: v.__dict__ for k, v in self.overrides.items()},
        }


def quiet_load(before: scrub.ThrottleMemory, after: scrub.ThrottleMemory, *, now: float, tick_s: float) -> float:
    """The write load the quiet-time work (resharding, compaction, deep-scrub debt) is judged by:
    the larger of this pass's smoothed load and the last pass's, so one low sample is never
    "quiet". A daemon's first pass, or its first after a pause of more than three ticks, has no
    last pass to go by: its load is unknown, and quiet-time work waits a pass
    (docs/architecture.md, "Quiet: two passes, never one sample")."""
    if before.ema_write_ops is None or before.last_sample_at is None or now - before.last_sample_at > 3 * tick_s:
        return math.inf
    return max(before.ema_write_ops, after.ema_write_ops or 0.0)


def plan_pass(snap: Snapshot, cfg: Config, overrides: Mapping[str, Override], control: Mapping[str, Any],
              *, now: float, local_time: dtime, local_now: datetime | None = None) -> PassPlan:
    paused = control.get("paused")
    gate = gates.check(snap, cfg.gates, paused=paused, local_time=local_time)
    before = scrub.ThrottleMemory.from_dict(control.get("scrub_throttle"))
    decision = scrub.decide(snap, cfg.scrub_throttle, before, overrides.keys(), now)
    load = quiet_load(before, decision.memory, now=now, tick_s=cfg.daemon.tick_s)
    shard_plans, shards_reason = _shard_plans(snap, cfg, load, local_now or datetime.now())
    spill = spillover.decide(snap, cfg.spillover, control.get("spillover") or {}, smoothed_write_ops=load,
                             gate_open=gate.open, now=now)
    fill_d = fill.decide(snap, cfg.fill, control.get("fill") or {}, now=now)
    debt = scrub_debt.decide(snap.deep_scrub, cfg.scrub_debt, scrub_debt.DebtMemory.from_dict(control.get("scrub_debt")),
                             throttle_engaged=decision.state in ("engage", "throttled", "holding"),
                             smoothed_write_ops=load, now=now, deep_scrubbing_now=snap.scrub.pgs_deep_scrubbing)
    changes: tuple[Action, ...] = (*decision.actions, *(a for p in shard_plans for a in p.actions),
                                   *spill.actions, *fill_d.actions, *debt.actions)
    if paused:
        # Pause hands control back to the operator: give everything back, change nothing.
        actions: tuple[Action, ...] = (RestoreAll("paused by an operator"),) if overrides else ()
    elif not gate.open:
        # "Not now" blocks new changes; giving settings back is always allowed.
        actions = tuple(a for a in changes if isinstance(a, RestoreAll))
    else:
        actions = changes
    # An expiry not sent (paused, gate closed) is not remembered as started, or it would wait
    # for the next crossing.
    fill_memory = fill_d.memory if all(a in actions for a in fill_d.actions) else {
        **fill_d.memory, "expiry_started": bool((control.get("fill") or {}).get("expiry_started"))}
    memory = {"scrub_throttle": decision.memory.to_dict(), "fill": fill_memory}
    # A request not sent (paused, gate closed) is not remembered as sent.
    memory["scrub_debt"] = (debt.memory if all(a in actions for a in debt.actions) else
                            debt.memory.forget({a.pgid for a in debt.actions})).to_dict()
    return PassPlan(gate=gate, scrub=decision, actions=actions, overrides=dict(overrides), shards_reason=shards_reason,
                shard_plans=tuple(shard_plans), spillover=spill, fill=fill_d, memory=memory, debt=debt)


def _shard_plans(snap: Snapshot, cfg: Config, load: float, local_now: datetime) -> tuple[list[shards.ShardPlan], str]:
    ps = cfg.preshard
    if not ps.daemon_reshards:
        return [], "daemon resharding disabled (preshard.daemon_reshards)"
    target = max(1, int(snap.max_objs_per_shard * ps.target_ratio))
    by_name = {b.bucket: b for b in snap.buckets}
    plans: list[shards.ShardPlan] = []
    reasons = []
    for ingest in ps.plans:
        not_before = ingest.get("not_before")
        if not_before is not None and local_now < datetime.fromisoformat(str(not_before)).replace(tzinfo=None):
            reasons.append(f"ingest plan for {ingest['bucket']} waits until {not_before}")
            continue
        b = by_name.get(ingest["bucket"])
        state = shards.BucketState(exists=b is not None, num_shards=b.num_shards if b else 0,
                                   num_objects=b.num_objects if b else 0,
                                   in_reshard_queue=bool(b and b.in_reshard_queue))
        p = shards.plan_shards(ingest["bucket"], int(ingest["expected_objects"]), state,
                               target_objects_per_shard=target, max_shards=snap.max_dynamic_shards,
                               multisite=snap.multisite, why="ingest plan from the config",
                               release=snap.release)
        if p.actions:
            plans.append(p)
    near, why = shards.approaching(snap, reshard_at_ratio=ps.reshard_at_ratio, growth_factor=ps.growth_factor,
                                   target_ratio=ps.target_ratio, max_write_ops=ps.max_write_ops,
                                   smoothed_write_ops=load, max_shards=snap.max_dynamic_shards,
                                   multisite=snap.multisite)
    plans.extend(p for p in near if p.bucket not in {q.bucket for q in plans})
    return plans, "; ".join([*reasons, why])
