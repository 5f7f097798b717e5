"""The override journal: every setting the daemon changed, with what was there before.

Kept in RADOS (omap of one object in the daemon's pool) so that a restart, another admin
node, or ``rgwkeeper restore`` can put back exactly what was there. Each entry carries its
holder and a lease (wall-clock expiry) that the leader renews every tick.

The control object holds operator state (pause) and the policies' memory (smoothed load,
when a throttle started), so a new leader continues rather than starts from scratch.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Protocol

JOURNAL_OBJECT = "rgwkeeper.journal"
CONTROL_OBJECT = "rgwkeeper.control"
LEADER_OBJECT = "rgwkeeper.leader"


@dataclass(frozen=True)
class Override:
    """One setting the daemon changed. ``original_present`` False means "was not set"."""

    key: str  # "config/osd/osd_scrub_sleep", "flag/nodeep-scrub" or "ratio/full_ratio"
    kind: str  # "config", "flag" or "ratio" (an OSDMap fill ratio; values are strings like "0.95")
    who: str  # config section ("osd"), or "" for flags
    name: str  # option name, or the flag
    original_present: bool
    original_value: str | None
    applied_value: str
    holder: str
    since: float  # wall clock, seconds
    lease_until: float  # wall clock, seconds
    reason: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Override":
        # Ignore fields a newer rgwkeeper added, so mixed versions read each other's entries.
        data = json.loads(text)
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})

    def restore_command(self) -> str:
        """The exact ceph command that gives the original back."""
        if self.kind == "flag":
            return "(flag was already set before; leave it)" if self.original_present else f"ceph osd unset {self.name}"
        if self.kind == "ratio":
            return f"ceph osd set-{self.name.replace('_', '-')} {self.original_value}"
        if self.original_present:
            return f"ceph config set {self.who} {self.name} {self.original_value}"
        return f"ceph config rm {self.who} {self.name}"


class KeyValueStore(Protocol):
    def omap_get_all(self, obj: str) -> dict[str, str]: ...
    def omap_set(self, obj: str, values: dict[str, str]) -> None: ...
    def omap_remove(self, obj: str, keys: list[str]) -> None: ...


class Journal:
    def __init__(self, store: KeyValueStore) -> None:
        self.store = store

    # -- overrides ---------------------------------------------------------------------------
    def ensure(self) -> None:
        """Create the journal object if it is missing. On a full cluster an omap write to an
        existing object still goes through (full-try) but creating one gets ENOSPC, so it must
        exist before the cluster fills up (docs/purge.md, "Full cluster")."""
        self.store.omap_set(JOURNAL_OBJECT, {})

    def overrides(self) -> dict[str, Override]:
        return {k: Override.from_json(v) for k, v in self.store.omap_get_all(JOURNAL_OBJECT).items()}

    def record(self, entry: Override) -> None:
        self.store.omap_set(JOURNAL_OBJECT, {entry.key: entry.to_json()})

    def forget(self, key: str) -> None:
        self.store.omap_remove(JOURNAL_OBJECT, [key])

    def renew(self, holder: str, lease_until: float) -> int:
        """Extend the lease of every entry this holder owns; returns how many."""
        mine = {k: v for k, v in self.overrides().items() if v.holder == holder}
        if mine:
            self.store.omap_set(JOURNAL_OBJECT, {
                k: Override(**{**asdict(v), "lease_until": lease_until}).to_json() for k, v in mine.items()})
        return len(mine)

    # -- control: pause and policy memory -------------------------------------------------------
    def control(self) -> dict[str, Any]:
        return {k: json.loads(v) for k, v in self.store.omap_get_all(CONTROL_OBJECT).items()}

    def set_control(self, key: str, value: Any) -> None:
        self.store.omap_set(CONTROL_OBJECT, {key: json.dumps(value, sort_keys=True)})

    def clear_control(self, key: str) -> None:
        self.store.omap_remove(CONTROL_OBJECT, [key])

    def paused(self) -> dict[str, Any] | None:
        return self.control().get("paused")


class MemoryStore:
    """An in-memory KeyValueStore for unit tests and dry runs."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, str]] = {}

    def omap_get_all(self, obj: str) -> dict[str, str]:
        return dict(self.objects.get(obj, {}))

    def omap_set(self, obj: str, values: dict[str, str]) -> None:
        self.objects.setdefault(obj, {}).update(values)

    def omap_remove(self, obj: str, keys: list[str]) -> None:
        for k in keys:
            self.objects.get(obj, {}).pop(k, None)
