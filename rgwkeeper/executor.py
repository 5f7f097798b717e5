"""The executor: applies actions, journals originals first, reads every change back.

For each override it records what was there before (from the mon config database or the
OSDMap flags) in the RADOS journal *before* changing anything, so a crash between the two
leaves a journal entry that restores a value that was never changed (harmless), never a
change without its original. Exit codes and "success" replies are not evidence: after each
change the mon config database (or OSDMap) is read back, and the effective value is read
from every up OSD (``ceph tell osd.N config get``), because mClock reverts locked options
after ``config set`` reports success (docs/architecture.md).
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timezone
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Collection, Iterable, Mapping, Protocol

import structlog

from rgwkeeper.aio import bounded
from rgwkeeper.actions import (Action, CompactOsd, CreateBucket, DeepScrubPg, RemoveConfig, ReshardBucket, RestoreAll,
                               RunExpire, SetConfig, SetFlag, SetMinShards, UnsetFlag)
from rgwkeeper.adapters.rados import RadosAdapter
from rgwkeeper.adapters.cephcli import CephCli
from rgwkeeper.adapters.radosgw_admin import RadosgwAdmin
from rgwkeeper.adapters.s3 import S3Adapter
from rgwkeeper.errors import CephError, RgwkeeperError
from rgwkeeper.journal import Journal, Override

log = structlog.get_logger("rgwkeeper.executor")

READBACK_TIMEOUT_S = 10.0  # OSDs pick up mon config changes asynchronously
#: The longest one long action (reshard, compaction, expiry run) may take.
LONG_TIMEOUT_S = 3600.0


class NotLeader(RgwkeeperError):
    """This instance is not (or no longer) the leader: it must not act."""


@dataclass(frozen=True)
class ActionResult:
    command: str
    ok: bool
    detail: str
    effective: Mapping[int, str] = field(default_factory=dict)
    changed: bool = True  # False: the setting already had this value; nothing was sent
    data: Mapping[str, Any] = field(default_factory=dict)  # e.g. a compaction's before/after
    #: For a restore: restored | forgotten (nothing left to give back) | left (changed by
    #: someone else, kept in the journal) | failed | would-restore (dry run).
    status: str = ""


def same_value(a: str | None, b: str | None) -> bool:
    """Ceph prints 0.5 as "0.500000" from an OSD and "0.5" from the mon: compare as numbers."""
    if a is None or b is None:
        return a is b
    try:
        return float(a) == float(b)
    except ValueError:
        return a.strip().lower() == b.strip().lower()


def _is_original(e: Override, present: bool, value: str | None) -> bool:
    return present == e.original_present and (not present or same_value(value, e.original_value))


def _not_ours(e: Override, present: bool, value: str | None) -> str:
    """One line for a setting someone changed after rgwkeeper set it."""
    put_back = f"puts back {e.original_value}" if e.original_present else "removes it"
    return (f"{e.who}/{e.name} is {value if present else 'unset'} now, not the {e.applied_value} rgwkeeper set: "
            f"left as it is and kept in the journal; rgwkeeper restore --force {put_back}")


class ExpiryReport(Protocol):
    """What one run of the configured expiry rules did (``rgwkeeper.purge.ExpiryOutcome``)."""

    def per_bucket(self) -> dict[str, bool]: ...

    def problem(self) -> str | None: ...


#: Runs the configured expiry rules now, in-process; given the full ratio to raise to on a full
#: cluster (None: refuse there). Built by the daemon from its cluster access (daemon/service.py).
ExpireRunner = Callable[[float | None], Awaitable[ExpiryReport]]


class Executor:
    def __init__(self, rados: RadosAdapter, journal: Journal, *, holder: str, lease_s: float,
                 may_act: Callable[[], bool] = lambda: True, wall_clock: Callable[[], float] = time.time,
                 readback_timeout_s: float = READBACK_TIMEOUT_S, rgw: RadosgwAdmin | None = None,
                 s3: S3Adapter | None = None, ceph_cli: CephCli | None = None,
                 expire: ExpireRunner | None = None,
                 long_timeout_s: float = LONG_TIMEOUT_S, on_progress: Callable[[], None] = lambda: None) -> None:
        self.rgw = rgw
        self.s3 = s3
        self.ceph_cli = ceph_cli
        self.expire = expire
        self.long_timeout_s = long_timeout_s
        self.rados = rados
        self.journal = journal
        self.holder = holder
        self.lease_s = lease_s
        self.may_act = may_act
        self.wall_clock = wall_clock
        self.readback_timeout_s = readback_timeout_s
        self.on_progress = on_progress  # told before each action: the watchdog's proof of progress

    # -- reads -----------------------------------------------------------------------------
    async def mon_config(self, who: str, name: str) -> tuple[bool, str | None]:
        """Is ``name`` set for exactly section ``who`` (no mask) in the mon config database?"""
        dump = await self.rados.acommand({"prefix": "config dump"}) or []
        for e in dump:
            if e.get("section") == who and e.get("name") == name and not e.get("mask"):
                return True, str(e.get("value"))
        return False, None

    async def flags(self) -> set[str]:
        dump = await self.rados.acommand({"prefix": "osd dump"})
        return set(dump.get("flags_set") or str(dump.get("flags", "")).split(","))

    async def up_osds(self) -> list[int]:
        dump = await self.rados.acommand({"prefix": "osd dump"})
        return [o["osd"] for o in dump.get("osds", []) if o.get("up") == 1]

    async def effective(self, name: str, osds: Iterable[int]) -> dict[int, str]:
        async def one(osd: int) -> tuple[int, str | None]:
            try:
                out = await self.rados.acommand({"prefix": "config get", "var": name}, osd=osd)
                return osd, str(out.get(name)) if isinstance(out, dict) else None
            except CephError:
                return osd, None

        pairs = await asyncio.gather(*(one(o) for o in osds))
        return {o: v for o, v in pairs if v is not None}

    async def _await_effective(self, name: str, want: str | None, osds: list[int]) -> tuple[bool, dict[int, str]]:
        """Poll the OSDs until all report ``want`` (None: no check) or the read-back timeout."""
        deadline = time.monotonic() + self.readback_timeout_s
        while True:
            values = await self.effective(name, osds)
            ok = len(values) == len(osds) and (want is None or all(same_value(v, want) for v in values.values()))
            if ok or time.monotonic() >= deadline:
                return ok, values
            await asyncio.sleep(0.5)

    # -- acting ----------------------------------------------------------------------------------
    def _check_leader(self) -> None:
        if not self.may_act():
            raise NotLeader("leadership lost (lease expired on this node's clock); not acting")

    async def apply(self, actions: Iterable[Action]) -> list[ActionResult]:
        results: list[ActionResult] = []
        for action in actions:
            self.on_progress()
            if isinstance(action, RestoreAll):
                results.extend(await self.restore())
            elif isinstance(action, SetConfig):
                results.append(await self._set_config(action))
            elif isinstance(action, SetFlag):
                results.append(await self._set_flag(action))
            elif isinstance(action, (CreateBucket, ReshardBucket, SetMinShards)):
                results.append(await self._bucket(action))
            elif isinstance(action, CompactOsd):
                results.append(await self._compact(action))
            elif isinstance(action, RunExpire):
                results.append(await self._expire(action))
            elif isinstance(action, DeepScrubPg):
                results.append(await self._deep_scrub(action))
            elif isinstance(action, (RemoveConfig, UnsetFlag)):
                raise RgwkeeperError(f"{action.command()}: policies give settings back with RestoreAll only")
        return results

    def _entry(self, a: SetConfig | SetFlag, kind: str, who: str, name: str, present: bool, value: str | None,
               applied: str, previous: Override | None) -> Override:
        now = self.wall_clock()
        if previous is not None:  # keep the first original: never journal our own value as "original"
            return Override(**{**previous.__dict__, "applied_value": applied, "holder": self.holder,
                               "lease_until": now + self.lease_s})
        return Override(key=a.key, kind=kind, who=who, name=name, original_present=present,
                        original_value=value, applied_value=applied, holder=self.holder, since=now,
                        lease_until=now + self.lease_s, reason=a.reason)

    async def _set_config(self, a: SetConfig) -> ActionResult:
        self._check_leader()
        previous = self.journal.overrides().get(a.key)
        present, value = await self.mon_config(a.who, a.name)
        if previous is None and present and same_value(value, a.value):
            return ActionResult(a.command(), True, f"already {value} (set by someone else); not journaled",
                                changed=False)
        if previous is not None and not (present and same_value(value, previous.applied_value)) \
                and not _is_original(previous, present, value):
            # Someone set a third value since: theirs now, not re-asserted (restore leaves it too).
            return ActionResult(a.command(), False, _not_ours(previous, present, value), changed=False, status="left")
        self.journal.record(self._entry(a, "config", a.who, a.name, present, value, a.value, previous), previous)
        changed = not (present and same_value(value, a.value))
        if changed:
            self._check_leader()
            await self.rados.acommand(a.mon_command())
        now_present, now_value = await self.mon_config(a.who, a.name)
        if not (now_present and same_value(now_value, a.value)):
            return ActionResult(a.command(), False, f"mon config database reads {now_value!r} after config set")
        osds = await self.up_osds() if a.who == "osd" else []
        ok, eff = await self._await_effective(a.name, a.value, osds)
        detail = "effective on all up OSDs" if ok else (
            "not effective on " + ", ".join(f"osd.{o}={v}" for o, v in sorted(eff.items()) if not same_value(v, a.value))
            + " (an osd.N-level setting overrides it, or mClock reverted it)")
        if changed:
            log.info("override applied", command=a.command(), ok=ok, reason=a.reason)
        return ActionResult(a.command(), ok, detail, eff, changed=changed)

    async def _set_flag(self, a: SetFlag) -> ActionResult:
        self._check_leader()
        previous = self.journal.overrides().get(a.key)
        flags = await self.flags()
        already = a.flag in flags
        if previous is None and already:
            return ActionResult(a.command(), True, "flag already set by someone else; not journaled", changed=False)
        self.journal.record(self._entry(a, "flag", "", a.flag, already, None, "set", previous), previous)
        if not already:
            self._check_leader()
            await self.rados.acommand(a.mon_command())
            log.info("override applied", command=a.command(), reason=a.reason)
        ok = a.flag in await self.flags()
        return ActionResult(a.command(), ok, "set in the OSDMap" if ok else "not in the OSDMap after osd set",
                            changed=not already)

    async def _bucket(self, a: CreateBucket | ReshardBucket | SetMinShards) -> ActionResult:
        from rgwkeeper import sharding
        from rgwkeeper.policy.shards import ShardPlan

        self._check_leader()
        if self.rgw is None:
            return ActionResult(a.command(), False, "no radosgw-admin runner configured")
        plan = ShardPlan(a.bucket, not isinstance(a, CreateBucket), 0, getattr(a, "num_shards", 0), (a,), a.reason)
        try:
            (done,) = await sharding.apply(plan, self.rgw, self.s3, reshard_timeout_s=self.long_timeout_s)
        except CephError as exc:
            return ActionResult(a.command(), False, str(exc))
        log.info("bucket action", command=a.command(), ok=done.ok, detail=done.detail, reason=a.reason)
        return ActionResult(a.command(), done.ok, done.detail)

    async def _bluefs(self, osd: int) -> Any:
        from rgwkeeper.snapshot import parse_bluefs

        perf = await self.rados.acommand({"prefix": "perf dump", "logger": "bluefs"}, osd=osd)
        return parse_bluefs({str(osd): perf})[0]

    async def _compact(self, a: CompactOsd) -> ActionResult:
        from rgwkeeper.policy.spillover import record_outcome

        self._check_leader()
        if self.ceph_cli is None:
            return ActionResult(a.command(), False, "no ceph CLI runner configured")
        before = await self._bluefs(a.osd_id)
        try:
            # Through the ceph CLI with its own long timeout: librados's osd op timeout
            # (the short per-call one) would cut a compaction of a big DB short.
            await self.ceph_cli.run("tell", f"osd.{a.osd_id}", "compact", timeout=self.long_timeout_s)
        except CephError as exc:
            return ActionResult(a.command(), False, str(exc))
        after = await self._bluefs(a.osd_id)
        outcome = record_outcome(before, after, self.wall_clock())
        detail = (f"slow_used_bytes {before.slow_used_bytes} -> {after.slow_used_bytes} "
                  f"({'cleared' if outcome['cleared'] else 'not cleared: the DB device is too small'})")
        log.info("compacted", command=a.command(), **outcome)
        return ActionResult(a.command(), True, detail, data={"osd": a.osd_id, **outcome})

    async def _deep_scrub(self, a: DeepScrubPg) -> ActionResult:
        """Only a request: the PG's stamp moving (seen in later snapshots) is the read-back."""
        self._check_leader()
        try:
            await self.rados.acommand(a.mon_command())
        except CephError as exc:
            return ActionResult(a.command(), False, str(exc))
        return ActionResult(a.command(), True, "requested", data={"pgid": a.pgid})

    async def _expire(self, a: RunExpire) -> ActionResult:
        self._check_leader()
        if self.expire is None:
            return ActionResult(a.command(), False, "expiry needs the RGW endpoint and credentials (rgw.endpoint)")
        try:
            # Bounded like every long action, or the watchdog would see a wedged pass; cancelling
            # stops a running lc process and gives a raised full ratio back.
            async with bounded(self.long_timeout_s):
                report = await self.expire(a.raise_full_ratio)
        except asyncio.TimeoutError:
            log.warning("expiry run", command=a.command(), reason=a.reason, timed_out_s=self.long_timeout_s)
            return ActionResult(a.command(), False, f"not finished within {self.long_timeout_s:g} s: cancelled; "
                                "the next crossing of fill.expire_at_ratio runs it again")
        except RgwkeeperError as exc:  # refused (a full cluster, no rules) or Ceph failed: one line
            log.warning("expiry run", command=a.command(), reason=a.reason, error=str(exc))
            return ActionResult(a.command(), False, str(exc))
        per_bucket = report.per_bucket()
        failed = [b for b, ok in per_bucket.items() if not ok]
        problem = report.problem()
        ok = not failed and problem is None
        if failed:
            # Some buckets expired and some did not: say which, so a partial run is not read
            # as either "done" or "nothing happened".
            detail = (f"partial: {len(failed)} of {len(per_bucket)} buckets failed ({', '.join(failed)})"
                      + (f": {problem}" if problem else ""))
        else:
            detail = problem or f"expired {len(per_bucket)} bucket(s)"
        (log.info if ok else log.warning)("expiry run", command=a.command(), reason=a.reason,
                                          buckets=len(per_bucket), failed_buckets=failed)
        return ActionResult(a.command(), ok, detail,
                            data={"expire_buckets": len(per_bucket), "expire_failed": failed} if per_bucket else {})

    async def restore(self, *, holders: Collection[str] | None = None, dry_run: bool = False,
                      force: bool = False) -> list[ActionResult]:
        """Give back every journaled override (of ``holders`` only, if given), each on its own.

        Only what is still ours is put back: a value someone changed since rgwkeeper set it is
        left, and its entry kept, unless ``force``. One entry's failure never stops the others;
        every entry gets a result (restored, forgotten, left, failed). The daemon never forces.
        """
        try:
            entries = self.journal.overrides()
        except CephError as exc:
            return [ActionResult("read the override journal", False, str(exc), status="failed")]
        results = []
        for key, e in sorted(entries.items()):
            if holders is not None and e.holder not in holders:
                continue
            if dry_run:
                results.append(ActionResult(e.restore_command(), True, f"would restore (applied {e.applied_value})",
                                            status="would-restore"))
                continue
            self.on_progress()
            try:
                r = await self._restore_one(e, force)
            except CephError as exc:
                r = ActionResult(e.restore_command(), False, str(exc), status="failed")
            (log.info if r.ok else log.warning)("override " + r.status, key=key, command=r.command, detail=r.detail)
            results.append(r)
        return results

    async def _restore_one(self, e: Override, force: bool) -> ActionResult:
        # One restorer per entry kind; an entry of a kind this version does not know (written
        # by a newer rgwkeeper) is reported and kept.
        restorers: dict[str, Callable[[Override, bool], Awaitable[ActionResult]]] = {
            "config": self._restore_config,
            "flag": self._restore_flag,
            "ratio": self._restore_ratio,
        }
        restorer = restorers.get(e.kind)
        if restorer is None:
            return ActionResult(e.restore_command(), False, f"unknown entry kind {e.kind!r} (written by a newer "
                                "rgwkeeper?): left as it is and kept in the journal", status="left")
        return await restorer(e, force)

    def _forgotten(self, e: Override, detail: str) -> ActionResult:
        """The original is in place already: drop the entry (if it is still the one we read)."""
        kept = "" if self.journal.forget(e) else "; the journal entry had changed meanwhile and is kept"
        return ActionResult(e.restore_command(), True, detail + kept, changed=False, status="forgotten")

    def _forget_restored(self, e: Override, eff: Mapping[int, str]) -> ActionResult:
        try:
            forgot = self.journal.forget(e)
        except CephError as exc:
            return ActionResult(e.restore_command(), False, f"restored, but its journal entry could not be removed "
                                f"({exc}); the next restore finds the original in place and removes it", eff,
                                status="failed")
        detail = "restored" if forgot else ("restored; the journal entry had changed meanwhile (another rgwkeeper "
                                            "recorded it again) and is kept")
        return ActionResult(e.restore_command(), True, detail, eff, status="restored")

    async def _restore_flag(self, e: Override, force: bool) -> ActionResult:
        # A flag has no value to compare: while it is set, nobody can tell who set it. Set
        # before rgwkeeper, or unset since by someone else, there is nothing of ours to give back.
        if e.original_present:
            return self._forgotten(e, f"{e.name} was set before rgwkeeper set it: left set")
        if e.name not in await self.flags():
            return self._forgotten(e, f"{e.name} is already unset (by someone else): nothing to give back")
        await self.rados.acommand(UnsetFlag(e.name).mon_command())
        if e.name in await self.flags():
            return ActionResult(e.restore_command(), False, "flag still set after osd unset", status="failed")
        return self._forget_restored(e, {})

    async def _restore_config(self, e: Override, force: bool) -> ActionResult:
        present, value = await self.mon_config(e.who, e.name)
        if _is_original(e, present, value):
            return self._forgotten(e, f"{e.who}/{e.name} is {value if present else 'unset'} already, the original")
        if not force and not (present and same_value(value, e.applied_value)):
            return ActionResult(e.restore_command(), False, _not_ours(e, present, value), changed=False, status="left")
        if e.original_present:
            await self.rados.acommand(SetConfig(e.who, e.name, str(e.original_value)).mon_command())
        else:
            await self.rados.acommand(RemoveConfig(e.who, e.name).mon_command())
        present, value = await self.mon_config(e.who, e.name)
        if not _is_original(e, present, value):
            return ActionResult(e.restore_command(), False, f"mon config database reads {value!r} after restore",
                                status="failed")
        osds = await self.up_osds() if e.who == "osd" else []
        want = e.original_value if e.original_present else None
        _, eff = await self._await_effective(e.name, want, osds)
        return self._forget_restored(e, eff)

    async def drop_lost_flags(self) -> list[str]:
        """Forget flag entries whose flag is no longer set: someone else unset it, so it is not
        ours any more, and a later manual set must never be cleared by rgwkeeper's restore.
        Returns the flags dropped. Run by the leader on every pass."""
        entries = [e for e in self.journal.overrides().values() if e.kind == "flag"]
        if not entries:
            return []
        flags = await self.flags()
        dropped = []
        for e in entries:
            if e.name not in flags and self.journal.forget(e):
                log.warning("flag unset by someone else while rgwkeeper held it: no longer ours", flag=e.name,
                            holder=e.holder)
                dropped.append(e.name)
        return dropped
    async def _restore_ratio(self, e: Override, force: bool) -> ActionResult:
        """A full ratio a purge raised: given back only if the live ratio is still the one it set,
        and not while the purge that raised it still renews its lease (it gives it back itself)."""
        from rgwkeeper import fullratio

        if e.holder != self.holder and e.lease_until > self.wall_clock():
            until = datetime.fromtimestamp(e.lease_until, timezone.utc).strftime("%H:%M:%S UTC")
            return ActionResult(e.restore_command(), True, f"held by {e.holder} (a running purge) until its lease "
                                f"ends at {until}; it gives the ratio back itself, or run restore again after "
                                "that", changed=False, status="held")
        ok, detail = await fullratio.give_back(self.rados, self.journal, e, force=force)
        status = "restored" if ok else ("left" if fullratio.not_ours(detail) else "failed")
        return ActionResult(e.restore_command(), ok, detail, status=status)
