"""One reconcile pass, as pure planning: gate, then each policy, then what may run now.

Shared by the daemon (which then acts) and ``rgwkeeper plan`` (which prints the commands).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import time as dtime
from typing import Any, Mapping

from rgwkeeper.actions import Action, RestoreAll
from rgwkeeper.config import Config
from rgwkeeper.journal import Override
from rgwkeeper.policy import gates, scrub
from rgwkeeper.snapshot import Snapshot


@dataclass(frozen=True)
class Plan:
    gate: gates.GateResult
    scrub: scrub.Decision
    actions: tuple[Action, ...]
    overrides: Mapping[str, Override]

    def commands(self) -> list[str]:
        out = []
        for a in self.actions:
            if isinstance(a, RestoreAll):
                cmds = [e.restore_command() for _, e in sorted(self.overrides.items())]
                out.extend(cmds or ["(nothing to restore)"])
            else:
                out.append(a.command())
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "gate": {"open": self.gate.open, "reasons": list(self.gate.reasons)},
            "scrub_throttle": {"state": self.scrub.state, "reason": self.scrub.reason,
                               "smoothed_write_ops": self.scrub.memory.ema_write_ops},
            "commands": self.commands(),
            "overrides": {k: v.__dict__ for k, v in self.overrides.items()},
        }


def plan(snap: Snapshot, cfg: Config, overrides: Mapping[str, Override], control: Mapping[str, Any],
         *, now: float, local_time: dtime) -> Plan:
    paused = control.get("paused")
    gate = gates.check(snap, cfg.gates, paused=paused, local_time=local_time)
    decision = scrub.decide(snap, cfg.scrub_throttle, scrub.ThrottleMemory.from_dict(control.get("scrub_throttle")),
                            overrides.keys(), now)
    if paused:
        # Pause hands control back to the operator: give everything back, change nothing.
        actions: tuple[Action, ...] = (RestoreAll("paused by an operator"),) if overrides else ()
    elif not gate.open:
        # "Not now" blocks new changes; giving settings back is always allowed.
        actions = tuple(a for a in decision.actions if isinstance(a, RestoreAll))
    else:
        actions = decision.actions
    return Plan(gate=gate, scrub=decision, actions=actions, overrides=dict(overrides))
