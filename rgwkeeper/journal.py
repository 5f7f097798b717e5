"""The override journal: every setting the daemon changed, with what was there before.

Kept in RADOS (omap of one object in the daemon's pool) so that a restart, another admin
node, or ``rgwkeeper restore`` can put back exactly what was there. Each entry carries its
holder and a lease (wall-clock expiry) that the leader renews every tick.

Every change to an existing entry is conditional: one RADOS write op compares the entry
with what was read (``omap_cmp``) and changes it only if it is still the same, so a
``restore`` racing a new leader can never delete the entry that leader just wrote
(docs/architecture.md, "Restore and ownership").

A holder is ``instance_id@host`` (:func:`holder_name`): two hosts given the same
``instance_id`` still tell their entries apart. Older versions wrote the bare instance id.

The control object holds operator state (pause) and the policies' memory (smoothed load,
when a throttle started), so a new leader continues rather than starts from scratch.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Callable, Collection, Protocol

from rgwkeeper.errors import CephError

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


def holder_name(instance_id: str, host: str) -> str:
    """The journal holder (and lock description) of one daemon: instance id and host identity."""
    return f"{instance_id}@{host}"


def own_holders(instance_id: str, host: str) -> frozenset[str]:
    """The holders that are this node's: ``instance_id@host``, and the bare instance id that
    versions before host identity wrote (the host whose instance id it is may restore those;
    docs/architecture.md)."""
    return frozenset({holder_name(instance_id, host), instance_id})


class JournalConflict(CephError):
    """A journal entry changed between our read and our conditional write."""


class KeyValueStore(Protocol):
    def omap_get_all(self, obj: str) -> dict[str, str]: ...
    def omap_set(self, obj: str, values: dict[str, str]) -> None: ...
    def omap_remove(self, obj: str, keys: list[str]) -> None: ...

    def omap_update_if(self, obj: str, key: str, expected: str, new: str | None) -> bool:
        """In one write op: if ``key``'s value is exactly ``expected`` (a missing key reads as ""),
        set it to ``new`` (remove it if None) and return True; else change nothing, return False."""


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

    def record(self, entry: Override, previous: Override | None = None) -> None:
        """Write ``entry``; if it replaces ``previous`` (what we read), only while that is unchanged."""
        if previous is None:
            self.store.omap_set(JOURNAL_OBJECT, {entry.key: entry.to_json()})
        elif not self.store.omap_update_if(JOURNAL_OBJECT, entry.key, previous.to_json(), entry.to_json()):
            raise JournalConflict(f"journal {entry.key}", "changed by another rgwkeeper since it was read; not acting")

    def record_new(self, entry: Override) -> bool:
        """Write ``entry`` only if its key is absent (a missing key compares as ""), in one write
        op; False if another rgwkeeper journaled that key first. The object must exist (ensure)."""
        return self.store.omap_update_if(JOURNAL_OBJECT, entry.key, "", entry.to_json())

    def forget(self, entry: Override) -> bool:
        """Remove ``entry`` only if it is still exactly what was read; False if it changed
        (another rgwkeeper recorded it again) or is already gone."""
        return self.store.omap_update_if(JOURNAL_OBJECT, entry.key, entry.to_json(), None)

    def renew(self, holders: Collection[str], lease_until: float) -> int:
        """Extend the lease of every entry these holders own, each only if unchanged since read;
        returns how many were renewed."""
        renewed = 0
        for k, v in self.overrides().items():
            if v.holder in holders:
                new = Override(**{**asdict(v), "lease_until": lease_until})
                renewed += self.store.omap_update_if(JOURNAL_OBJECT, k, v.to_json(), new.to_json())
        return renewed

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
    """An in-memory KeyValueStore for unit tests and dry runs, failing the way RADOS fails.

    ``write_error``: every write raises it (a full cluster, a lost mon) until set back to
    None. ``before_write(obj, key)``: called before each conditional write, so a test can
    change the entry in between, as a racing leader would; the compare then fails exactly as
    ``omap_cmp`` does (ECANCELED: nothing written)."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, str]] = {}
        self.write_error: CephError | None = None
        self.before_write: Callable[[str, str], None] | None = None

    def omap_get_all(self, obj: str) -> dict[str, str]:
        return dict(self.objects.get(obj, {}))

    def _writable(self) -> None:
        if self.write_error is not None:
            raise self.write_error

    def omap_set(self, obj: str, values: dict[str, str]) -> None:
        self._writable()
        self.objects.setdefault(obj, {}).update(values)

    def omap_remove(self, obj: str, keys: list[str]) -> None:
        self._writable()
        for k in keys:
            self.objects.get(obj, {}).pop(k, None)

    def omap_update_if(self, obj: str, key: str, expected: str, new: str | None) -> bool:
        self._writable()
        if self.before_write is not None:
            self.before_write(obj, key)
        if obj not in self.objects:
            return False  # ENOENT: the whole object is gone
        values = self.objects[obj]
        if values.get(key, "") != expected:
            return False
        if new is None:
            values.pop(key, None)
        else:
            values[key] = new
        return True
