"""A purge's work items in RADOS: one object per purge, ``purge.<plan id>`` in the rgwkeeper pool
(daemon.pool), that any admin node reaches. Its omap holds the purge's spec and one entry per
item (an index shard to list and purge, its cursor, its counters, its state); an item is taken
under a cls_lock lease named after it, so a worker on any node can run it, and a worker that dies
or stops renewing loses it when the lease runs out (on the OSD's clock, so a host whose clock
is off neither keeps nor loses a lease early).

Progress is written only by the item's current owner: ``owner.<n>`` holds the cookie of the
lease that took it, and every record compares it in the same write op (omap_cmp). A worker
whose lease was taken over gets a failed compare, stops that item and writes nothing more; the
new owner reads the item after it set ``owner.<n>``, so it resumes from the last page the old one
recorded. docs/purge.md, "Work items in RADOS".
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping, Protocol

from rgwkeeper.adapters.rados import LockBusy
from rgwkeeper.errors import CephError, UsageError

FORMAT = 1
SPEC_KEY = "spec"
#: What the latest run of the purge set (lease, rate cap, pacing): rewritten at every start, so
#: a join follows the run it joins, not the first one.
RUN_KEY = "run"
#: A lease read from the board must be within these (seconds).
LEASE_RANGE = (3, 3600)
#: Stop using a lease this fraction of it before it runs out (slow calls, the OSD's clock).
SAFETY_MARGIN = 0.25
#: The lease is renewed this many times within it.
RENEWALS_PER_LEASE = 3

TODO, DONE = "todo", "done"
#: A key range cut from item ``n`` is item ``n + RANGE_STRIDE * k`` (k = 1, 2, ...): numbered per
#: parent, so owners of different shards cutting at once never pick the same number (RGW's shard
#: count stays below 65,536), and sorted after every shard's own item.
RANGE_STRIDE = 1_000_000

# Fault injection for the kill-and-take-over tests (as checkpoint.CRASH_ENV): the process kills
# itself (SIGKILL, nothing released) right after its N-th record of a page with a cursor.
CRASH_ENV = "RGWKEEPER_INJECT_CRASH_AFTER_RECORDS"


def board_oid(job_id: str) -> str:
    return f"purge.{job_id}"


class BoardStore(Protocol):
    """What the board needs of RADOS (adapters.rados.ObjectStore)."""

    def omap_get_all(self, obj: str) -> dict[str, str]: ...
    def omap_get_keys(self, obj: str, keys: list[str]) -> dict[str, str]: ...
    def omap_set(self, obj: str, values: dict[str, str]) -> None: ...
    def omap_update_if(self, obj: str, key: str, expected: str, new: str | None) -> bool: ...
    def omap_set_if(self, obj: str, key: str, expected: str, values: dict[str, str]) -> bool: ...
    def lock_exclusive(self, obj: str, name: str, cookie: str, desc: str, duration_s: int) -> None: ...
    def unlock(self, obj: str, name: str, cookie: str) -> None: ...
    def remove(self, obj: str) -> None: ...


class NoSuchJob(UsageError):
    """No purge with this id has work items in the pool."""


class LeaseLost(CephError):
    """Another worker took the item (our lease ran out or could not be renewed in time)."""


@dataclass
class Item:
    n: int
    shard: str
    state: str = TODO
    cursor: dict[str, Any] = field(default_factory=dict)  # {"after": key} within the shard
    counters: dict[str, int] = field(default_factory=dict)
    worker: str = ""  # the last worker that took it
    takes: int = 0  # how many times it was taken: more than 1 is a takeover or a resume
    updated: float = 0.0  # wall clock of its last record, for status only
    #: A key range of the shard: its keys after ``cursor["after"]`` up to ``last`` (inclusive, a
    #: key as python-rados reads it); "" for the rest of the shard.
    last: str = ""
    of: int = -1  # the item this range was cut from; -1 for a shard's own item
    #: A shard's own item that may still cut key ranges off its front (a huge shard): its owner
    #: lists ahead and publishes them before it purges what is left (docs/purge.md, "Key ranges").
    cutting: bool = False
    cuts: int = 0  # ranges cut so far: the next one is numbered from it

    @property
    def key(self) -> str:
        return f"item.{self.n:06d}"

    def range_item(self, after: str, last: str) -> "Item":
        """The next range cut from this item: keys after ``after`` up to ``last``."""
        return Item(self.n + RANGE_STRIDE * (self.cuts + 1), self.shard, cursor={"after": after} if after else {},
                    last=last, of=self.n)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, default=str)  # a mirrored memo may hold a rule's datetime

    @classmethod
    def from_json(cls, raw: str) -> "Item":
        return cls(**json.loads(raw))


@dataclass
class Snapshot:
    """The board as read at one moment."""

    spec: dict[str, Any]
    items: list[Item]
    owners: dict[int, str]  # item -> the cookie of the lease that last took it

    @property
    def done(self) -> bool:
        return all(i.state == DONE for i in self.items)

    def counters(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for i in self.items:
            for k, v in i.counters.items():
                out[k] = out.get(k, 0) + v
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"spec": self.spec, "items": [asdict(i) for i in self.items], "counters": self.counters()}


@dataclass
class Lease:
    """One item held by this worker: valid on our own monotonic clock until ``valid_until``."""

    item: Item
    cookie: str
    valid_until: float
    closed: bool = False  # released or finished: a renewal still on its way must not take it again
    #: A cut whose write failed without saying whether it landed (a lost reply): the next try
    #: reads the item first instead of writing the range again over what others did with it.
    cut_unsure: bool = False
    #: Held by a renewal's lock call and by the release: a renewal that started before the
    #: release cannot land after it (and lock the item again for a whole lease).
    guard: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)


class Board:
    """The work items of one purge. Every method blocks (RADOS calls): run them on a thread."""

    def __init__(self, store: BoardStore, job_id: str, *, worker: str, lease_s: int,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        if lease_s < 3:
            raise ValueError("a work item's lease must be at least 3 s")
        self.store = store
        self.job_id = job_id
        self.oid = board_oid(job_id)
        self.worker = worker
        self.lease_s = int(lease_s)
        self.clock = clock
        self.wall = wall
        self._crash_after = int(os.environ.get(CRASH_ENV) or 0)
        self._records = 0
        #: Items whose lock this process's workers hold now (set before owner.<n> is, so a worker
        #: that finds nothing to take can tell its siblings' items from other processes').
        self.holding: set[int] = set()

    # -- the spec and the items ---------------------------------------------------------------
    def publish(self, spec: Mapping[str, Any], shards: list[str], run: Mapping[str, Any] | None = None, *,
                cutting: bool = False) -> bool:
        """Create the items, one per shard (``cutting``: each may cut key ranges off itself),
        unless this purge has them already (a resumed run: they are kept as they stand), and
        write this run's ``run`` fields (they override the spec's). True if created now."""
        body = json.dumps({"format": FORMAT, **spec}, sort_keys=True)
        self.store.omap_set(self.oid, {RUN_KEY: json.dumps(dict(run or {}), sort_keys=True)})
        items = {i.key: i.to_json() for i in (Item(n, s, cutting=cutting) for n, s in enumerate(shards))}
        if self.store.omap_set_if(self.oid, SPEC_KEY, "", {SPEC_KEY: body, **items}):
            return True
        have = [i.shard for i in self.read().items if i.of < 0]
        if have != shards:
            raise CephError(self.oid, f"holds items of {len(have)} other index shards than the plan's {len(shards)}; "
                            "nothing was changed")
        return False

    def read(self) -> Snapshot:
        raw = self.store.omap_get_all(self.oid)
        if SPEC_KEY not in raw:
            raise NoSuchJob(f"no purge {self.job_id!r} has work items in the rgwkeeper pool: check the id "
                            "(rgwkeeper purge prints it when it starts) and daemon.pool; a purge that "
                            "finished removed its items")
        try:
            spec = json.loads(raw[SPEC_KEY])
            if spec.pop("format", None) != FORMAT:
                raise UsageError(f"purge {self.job_id}'s work items are in another format; finish it with the "
                                 "rgwkeeper version that started it")
            items = sorted((Item.from_json(v) for k, v in raw.items() if k.startswith("item.")), key=lambda i: i.n)
            owners = {int(k.split(".", 1)[1]): v for k, v in raw.items() if k.startswith("owner.")}
            spec.update(json.loads(raw.get(RUN_KEY) or "{}"))
            missing = [k for k in ("plan_id", "plan", "created", "lease_s") if k not in spec]
            if missing:
                raise KeyError(missing[0])
            lease = spec["lease_s"]
            if isinstance(lease, bool) or not isinstance(lease, (int, float)) or \
                    not LEASE_RANGE[0] <= lease <= LEASE_RANGE[1]:
                raise ValueError(f"lease_s {lease!r} is not {LEASE_RANGE[0]} to {LEASE_RANGE[1]} seconds")
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise UsageError(f"{self.oid} in the rgwkeeper pool does not hold readable work items "
                             f"({type(exc).__name__}: {str(exc)[:80]}); it was not written by rgwkeeper purge, "
                             "or by another version") from None
        return Snapshot(spec=spec, items=items, owners=owners)

    def left(self, ns: list[int]) -> list[int]:
        """Of items ``ns``, those not done: one read of their keys only, cheap to repeat while
        waiting on a few items of a purge with thousands."""
        raw = self.store.omap_get_keys(self.oid, [SPEC_KEY, *(f"item.{n:06d}" for n in ns)])
        if SPEC_KEY not in raw:
            raise NoSuchJob(f"no purge {self.job_id!r} has work items in the rgwkeeper pool (a purge that "
                            "finished removed its items)")
        try:
            return [n for n in ns if Item.from_json(raw[f"item.{n:06d}"]).state != DONE]
        except (KeyError, ValueError, TypeError) as exc:
            raise UsageError(f"{self.oid}: item {exc} cannot be read") from None

    # -- leases -------------------------------------------------------------------------------
    def take(self, skip: frozenset[int] = frozenset()) -> Lease | None:
        """Take an item that is not done and that no live lease holds; None if there is none now."""
        snap = self.read()
        for item in snap.items:
            if item.state == DONE or item.n in skip:
                continue
            cookie = uuid.uuid4().hex
            t0 = self.clock()
            try:
                self.store.lock_exclusive(self.oid, item.key, cookie, self.worker, self.lease_s)
            except LockBusy:
                continue
            self.holding.add(item.n)
            try:
                # Only the lease holder writes owner.<n>: set it, then read the item as it stands
                # now (a previous owner may have recorded a page until this moment).
                owner_key = f"owner.{item.n}"
                if not self.store.omap_update_if(self.oid, owner_key, snap.owners.get(item.n, ""), cookie):
                    self._unlock(item.n, cookie)
                    continue
                now = self.read()
                current = next((i for i in now.items if i.n == item.n), None)
                if current is None or current.state == DONE:
                    self._unlock(item.n, cookie)
                    continue
                lease = Lease(current, cookie, self._valid_from(t0))
                current.takes += 1
                current.worker = self.worker
                try:
                    self.record(lease)
                except LeaseLost:  # the take itself was slow past the lease: leave the item to it
                    self._unlock(item.n, cookie)
                    continue
            except BaseException:
                self.holding.discard(item.n)
                try:  # best effort: else the lock, if it landed, holds the item a whole lease
                    self.store.unlock(self.oid, item.key, cookie)
                except Exception:  # noqa: BLE001 - the error being raised is the one to report
                    pass
                raise
            return lease
        return None

    def _unlock(self, n: int, cookie: str) -> None:
        self.store.unlock(self.oid, f"item.{n:06d}", cookie)
        self.holding.discard(n)

    def _valid_from(self, t0: float) -> float:
        return t0 + self.lease_s * (1 - SAFETY_MARGIN)

    def valid(self, lease: Lease) -> bool:
        return self.clock() < lease.valid_until

    def renew(self, lease: Lease) -> None:
        """Renew the lease (cls_lock with may-renew). LeaseLost if another worker holds it."""
        if not self.valid(lease):
            raise LeaseLost(f"{self.oid} {lease.item.key}", "the lease ran out before it was renewed")
        with lease.guard:
            if lease.closed:
                return
            t0 = self.clock()
            try:
                self.store.lock_exclusive(self.oid, lease.item.key, lease.cookie, self.worker, self.lease_s)
            except LockBusy:
                raise LeaseLost(f"{self.oid} {lease.item.key}", "taken over by another worker") from None
            lease.valid_until = self._valid_from(t0)

    def record(self, lease: Lease, *also: Item) -> None:
        """Write the item (its cursor, counters, state) while we still own it; LeaseLost if not.
        ``also``: new items written in the same compared op (key ranges cut from it)."""
        if not self.valid(lease):
            raise LeaseLost(f"{self.oid} {lease.item.key}", "the lease ran out before the record")
        lease.item.updated = self.wall()
        values = {i.key: i.to_json() for i in also}
        values[lease.item.key] = lease.item.to_json()
        if not self.store.omap_set_if(self.oid, f"owner.{lease.item.n}", lease.cookie, values):
            raise LeaseLost(f"{self.oid} {lease.item.key}", "taken over by another worker")
        if self._crash_after and lease.item.cursor.get("after"):
            self._records += 1
            if self._records >= self._crash_after:
                os.kill(os.getpid(), signal.SIGKILL)

    def cut(self, lease: Lease, after: str, last: str) -> Item:
        """Publish the range of keys after ``after`` up to ``last`` as a new item, and move this
        item's cursor past it, in one compared write: a worker that takes the item over resumes
        cutting after the last range published, never cuts one twice. LeaseLost if not ours."""
        item = lease.item
        rng = item.range_item(after, last)
        if lease.cut_unsure:
            # Did the last try land? Only this lease writes the item, so what it holds is ours;
            # writing the range again would reset it, and another worker may have taken it since.
            raw = self.store.omap_get_keys(self.oid, [item.key, f"owner.{item.n}"])
            if raw.get(f"owner.{item.n}") != lease.cookie:
                raise LeaseLost(f"{self.oid} {item.key}", "taken over by another worker")
            stored = Item.from_json(raw[item.key])
            lease.cut_unsure = False
            if stored.cuts == item.cuts + 1 and stored.cursor == {"after": last}:
                item.cursor, item.cuts = stored.cursor, stored.cuts
                return rng  # it landed
        before = (dict(item.cursor), item.cuts)
        item.cursor, item.cuts = {"after": last}, item.cuts + 1
        try:
            self.record(lease, rng)
        except LeaseLost:
            item.cursor, item.cuts = before
            raise
        except BaseException:
            item.cursor, item.cuts = before  # not known to be written: the next try reads the item first
            lease.cut_unsure = True
            raise
        return rng

    def value(self, key: str) -> str | None:
        """Another key of the board (not an item's): one read of that key only."""
        return self.store.omap_get_keys(self.oid, [key]).get(key)

    def record_value(self, lease: Lease, key: str, value: str) -> None:
        """Write ``key`` beside the item while we still own it (compared as a record is); LeaseLost if not."""
        if not self.valid(lease):
            raise LeaseLost(f"{self.oid} {lease.item.key}", f"the lease ran out before {key} was written")
        if not self.store.omap_set_if(self.oid, f"owner.{lease.item.n}", lease.cookie, {key: value}):
            raise LeaseLost(f"{self.oid} {lease.item.key}", "taken over by another worker")

    def finish(self, lease: Lease) -> None:
        lease.item.state = DONE
        self.record(lease)
        self.release(lease)

    def release(self, lease: Lease) -> None:
        with lease.guard:
            lease.closed = True
            self._unlock(lease.item.n, lease.cookie)

    def let_go(self, lease: Lease) -> None:
        """Stop counting a lost lease as ours (another worker holds the item, or will)."""
        lease.closed = True
        self.holding.discard(lease.item.n)

    def discard(self) -> None:
        """Remove the items: the purge is done and verified."""
        self.store.remove(self.oid)
