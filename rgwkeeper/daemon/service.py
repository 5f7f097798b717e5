"""The reconciler service: ``rgwkeeper daemon``.

The loop is a few lines, the way Ceph's mgr modules keep it: every tick, renew the leader
lock; if leader, observe, gate, plan, act, read back, report; then wait. SIGTERM sets the
shutdown event; the leader restores its overrides (bounded by ``shutdown_timeout_s``), and
a hard timer backs up the graceful exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import io
import os
import signal
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import structlog
from apscheduler.schedulers.asyncio import AsyncIOScheduler

from rgwkeeper import reconcile
from rgwkeeper.access import ClusterAccess, check_private
from rgwkeeper.adapters.rados import LockBusy, ObjectStore, RadosAdapter, ensure_pool
from rgwkeeper.adapters.cephcli import CANCEL_GRACE_S, CephCli
from rgwkeeper.adapters.connect import ClusterAdapters, open_adapters
from rgwkeeper.aio import bounded
from rgwkeeper.config import Config
from rgwkeeper.daemon import sdnotify
from rgwkeeper.daemon.metrics import Metrics
from rgwkeeper.errors import CephError, RgwkeeperError, UsageError
from rgwkeeper.executor import LONG_TIMEOUT_S, Executor, ExpireRunner, ExpiryReport, NotLeader
from rgwkeeper.hostid import host_identity
from rgwkeeper.journal import LEADER_OBJECT, Journal, holder_name, own_holders
from rgwkeeper.leader import LOCK_NAME, LeaderLease
from rgwkeeper.locks import try_flock
from rgwkeeper.observe import DeepScrubCache, snapshot
from rgwkeeper.policy.scrub import ThrottleMemory, is_throttled

if TYPE_CHECKING:  # boto3 is imported only when RGW credentials are configured
    from rgwkeeper.adapters.s3 import S3Adapter

log = structlog.get_logger("rgwkeeper.daemon")


class RadosLockBackend:
    """The leader lock: ``lock_exclusive`` on one object of the daemon's pool.

    Its description names the instance id and this host (``rgwkeeper ID@HOST``), so a stale
    lock is broken only when it provably came from a daemon on this host, and its cookie names
    the daemon's PID, so a lock whose daemon still runs here is never broken."""

    def __init__(self, store: Any, rados_cli: CephCli, *, instance_id: str, host: str, lease_s: float,
                 alive: Callable[[str], int | None] | None = None) -> None:
        self.store = store
        self.cli = rados_cli
        self.description = f"rgwkeeper {holder_name(instance_id, host)}"
        # A new cookie per process: a restarted daemon is a different locker.
        self.cookie = f"{instance_id}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.lease_s = lease_s
        self.alive = alive or live_holder_pid
        self._warned: set[str] = set()

    async def acquire(self) -> bool:
        try:
            await asyncio.to_thread(self.store.lock_exclusive, LEADER_OBJECT, LOCK_NAME, self.cookie,
                                    self.description, int(self.lease_s))
            return True
        except LockBusy:
            return False

    async def break_stale_own(self) -> bool:
        """Break a lock a dead predecessor with our instance id on this host left: same description
        (instance id and host), other cookie, and the PID in that cookie no longer an rgwkeeper
        process. The flock in daemon.state_dir keeps a second daemon from sharing ours; one with
        another state_dir and our instance id is found by its PID and left alone (breaking its
        lock on every tick would make both leaders in turn). A lock from another host, or from a
        version without the host in its description, is left to expire."""
        info = await self.cli.json("-p", self.store.pool, "lock", "info", LEADER_OBJECT, LOCK_NAME)
        for locker in (info or {}).get("lockers", []):
            if locker.get("description") == self.description and locker.get("cookie") != self.cookie:
                pid = self.alive(str(locker.get("cookie", "")))
                if pid is not None:
                    if locker["cookie"] not in self._warned:
                        self._warned.add(locker["cookie"])
                        log.error("another rgwkeeper daemon with this instance id runs on this host; its lock "
                                  "is left and this one stays standby: give each daemon its own daemon.instance_id",
                                  pid=pid, locker=locker["name"])
                    return False
                await self.cli.run("-p", self.store.pool, "lock", "break", LEADER_OBJECT, LOCK_NAME,
                                   locker["name"], "--lock-cookie", locker["cookie"])
                log.warning("broke the leader lock left by a previous instance on this host",
                            locker=locker["name"])
                return True
        return False

    async def release(self) -> None:
        await asyncio.to_thread(self.store.unlock, LEADER_OBJECT, LOCK_NAME, self.cookie)


def live_holder_pid(cookie: str) -> int | None:
    """The PID in a lock cookie (``INSTANCE-PID-RANDOM``) if that process still runs here and is
    rgwkeeper (a PID reused by another program is not it), else None."""
    parts = cookie.rsplit("-", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return None
    try:
        argv = Path(f"/proc/{int(parts[1])}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    return int(parts[1]) if any(b"rgwkeeper" in a for a in argv) else None


def instance_lock(state_dir: Path, instance_id: str) -> int:
    """One daemon per instance id on this host; it also proves a predecessor is dead."""
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        return try_flock(state_dir / f"{instance_id}.lock",
                         f"another rgwkeeper daemon with instance id {instance_id!r} runs on this host")
    except OSError as exc:
        raise UsageError(f"cannot use daemon.state_dir {state_dir}: {exc.strerror}") from None


def expiry_runner(cfg: Config, access: ClusterAccess, journal: Journal,
                  metrics: Metrics | None = None) -> ExpireRunner | None:
    """The fill-triggered expiry, in-process: the purge engine's ``expire_configured`` on adapters
    opened for the run and closed after it; a raise of the full ratio is journaled in the daemon's
    own journal; ``metrics`` shows it running and counts its outcome. None without an RGW
    endpoint and credentials (expiry needs S3)."""
    if not (access.rgw_endpoint and access.rgw_credentials_file):
        return None

    async def run(raise_full_ratio: float | None) -> ExpiryReport:
        from rgwkeeper import purge as purge_api  # boto3 only when expiry runs

        report = None
        if metrics is not None:
            metrics.expiry_running.set(1)
        try:
            io = await asyncio.to_thread(purge_api.open_io, access, cfg.purge)
            try:
                report = await purge_api.expire_configured(io, cfg, raise_full_ratio=raise_full_ratio,
                                                           journal=journal, holder=purge_api.holder_name())
                return report
            finally:
                await asyncio.to_thread(purge_api.close_io, io)
        finally:
            if metrics is not None:
                metrics.expiry_running.set(0)
                metrics.observe_expiry(report.per_bucket() if report else None,
                                       report.problem() if report else "not run")

    return run


@dataclass
class Service:
    cfg: Config
    access: ClusterAccess
    rados: RadosAdapter
    journal: Journal
    lease: LeaderLease
    adapters: ClusterAdapters
    metrics: Metrics
    instance_id: str
    wall_clock: Callable[[], float] = time.time
    shutdown: asyncio.Event = field(default_factory=asyncio.Event)
    s3: S3Adapter | None = None
    host: str = field(default_factory=host_identity)
    monotonic: Callable[[], float] = time.monotonic
    #: Monotonic time of the last sign of progress: a pass started, an action started, a pass ended.
    last_progress_at: float = field(default_factory=time.monotonic)
    pass_running: bool = False
    #: The task of the pass running now (None between passes): shutdown cancels it, and only it.
    pass_task: asyncio.Task[Any] | None = None
    failed_passes_in_a_row: int = 0
    deep_scrub_cache: DeepScrubCache = field(default_factory=DeepScrubCache)

    @property
    def holder(self) -> str:
        return holder_name(self.instance_id, self.host)

    def progress(self) -> None:
        self.last_progress_at = self.monotonic()

    def executor(self) -> Executor:
        return Executor(self.rados, self.journal, holder=self.holder, lease_s=self.cfg.daemon.lease_s,
                        may_act=self.lease.is_leader, wall_clock=self.wall_clock, rgw=self.adapters.radosgw_admin,
                        s3=self.s3, ceph_cli=CephCli(self.access, "ceph"),
                        expire=expiry_runner(self.cfg, self.access, self.journal, self.metrics),
                        on_progress=self.progress)

    def watchdog_ok(self, now: float) -> bool:
        return watchdog_ok(now, pass_running=self.pass_running, last_progress_at=self.last_progress_at,
                           tick_s=self.cfg.daemon.tick_s, call_timeout_s=self.access.timeout_s)

    async def tick(self) -> None:
        t0 = time.monotonic()
        self.pass_task = asyncio.current_task()
        self.pass_running = True
        self.progress()
        structlog.contextvars.bind_contextvars(tick=uuid.uuid4().hex[:8])
        failure = None
        try:
            outcome = await self._tick()
            self.metrics.ticks.labels(outcome).inc()
        except NotLeader as exc:
            self.metrics.ticks.labels("lost-leadership").inc()
            log.warning("stopped acting", reason=str(exc))
        except RgwkeeperError as exc:
            self.metrics.ticks.labels("error").inc()
            failure = str(exc)
        except Exception as exc:  # noqa: BLE001 - a bug must not kill the loop; it is logged with its traceback
            self.metrics.ticks.labels("crash").inc()
            failure = f"crash: {exc!r}"
            log.exception("reconcile pass crashed")
        finally:
            # A pass that ends, even with an error, is progress: the watchdog keeps the daemon
            # alive through a mon outage, and the outage is reported on every pass instead.
            self.failed_passes_in_a_row = self.failed_passes_in_a_row + 1 if failure else 0
            self.metrics.cluster_reachable.set(0 if failure else 1)
            if failure:
                log.error("reconcile pass failed", error=failure, failed_passes_in_a_row=self.failed_passes_in_a_row)
            self.pass_running = False
            self.pass_task = None
            self.progress()
            self.metrics.tick_seconds.observe(time.monotonic() - t0)
            structlog.contextvars.unbind_contextvars("tick")

    async def _tick(self) -> str:
        was_leader = self.lease.is_leader()
        leader = await self.lease.tick()
        self.metrics.leader.set(1 if leader else 0)
        if was_leader and not leader:
            log.warning("lost leadership; not acting")
        if self.lease.last_error is not None:  # no answer from the lock: report it, act on nothing
            raise self.lease.last_error
        if not leader:
            log.info("standby", instance=self.instance_id)
            return "standby"
        ex = self.executor()
        if not was_leader:
            # The journal object must exist before the cluster is full: then creating it gets
            # ENOSPC while writes to it still go through (docs/purge.md, "Full cluster").
            with contextlib.suppress(CephError):
                self.journal.ensure()
            # A new leader gives back whatever a previous leader (or our own killed
            # predecessor) left, then decides afresh from what it observes.
            results = await ex.restore()
            # Start the load average afresh from what is observed now: a smoothed value
            # carried over from a dead leader would re-apply what was just given back. Keep
            # when scrub was last given back by force, so restarts cannot defer it forever.
            old = ThrottleMemory.from_dict(self.journal.control().get("scrub_throttle"))
            self.journal.set_control("scrub_throttle", ThrottleMemory(forced_release_at=old.forced_release_at).to_dict())
            log.info("became leader", instance=self.instance_id, holder=self.holder,
                     restored=[r.command for r in results if r.status == "restored"],
                     failed=[f"{r.command}: {r.detail}" for r in results if not r.ok])
        await ex.drop_lost_flags()
        snap, _raw = await snapshot(self.adapters, self.cfg, deep_scrub_cache=self.deep_scrub_cache)
        overrides = self.journal.overrides()
        control = self.journal.control()
        local_now = datetime.now()
        plan = reconcile.plan_pass(snap, self.cfg, overrides, control, now=self.wall_clock(),
                              local_time=local_now.time(), local_now=local_now)
        self.metrics.observe(snap, plan.scrub.memory.ema_write_ops)
        self.metrics.gate_open.set(1 if plan.gate.open else 0)
        self.metrics.observe_debt(plan.debt.summary if plan.debt else None)
        self.metrics.paused.set(1 if control.get("paused") else 0)
        if not self.lease.is_leader():
            raise NotLeader("lease ran out while observing; not acting")
        async with self.lease.kept_during(self.cfg.daemon.lease_s / 3):
            results = await ex.apply(plan.actions)
        for key, value in plan.memory_after({r.command for r in results if not r.ok}).items():
            self.journal.set_control(key, value)
        compactions = {f"osd.{r.data['osd']}": {k: v for k, v in r.data.items() if k != "osd"}
                       for r in results if r.data.get("osd") is not None}
        if compactions:
            self.journal.set_control("spillover", {**(control.get("spillover") or {}), **compactions})
        if plan.fill is not None:
            for scope in plan.fill.raised:
                log.warning("fill alert raised", scope=scope, reason=plan.fill.reason)
            for scope in plan.fill.cleared:
                log.info("fill alert cleared", scope=scope)
            for scope, on in plan.fill.alerts.items():
                self.metrics.fill_alert.labels(scope).set(1 if on else 0)
            self.metrics.projected_nearfull.set(plan.fill.projected_s_to_nearfull
                                                if plan.fill.projected_s_to_nearfull is not None else float("nan"))
        if plan.spillover is not None:
            self.metrics.observe_spillover(plan.spillover.needs_bigger_db)
        self.journal.renew({self.holder}, self.wall_clock() + self.cfg.daemon.lease_s)
        now_overrides = self.journal.overrides()
        self.metrics.overrides.set(len(now_overrides))
        # Any lever counts: on mClock releases the profile may be the only one (releases.SCRUB_LEVERS).
        self.metrics.scrub_throttled.set(1 if is_throttled(now_overrides, self.cfg.scrub_throttle) else 0)
        for r in results:
            self.metrics.actions.labels("ok" if r.ok else "failed").inc()
        # One canonical line per pass.
        log.info("reconciled", gate=str(plan.gate), scrub_state=plan.scrub.state, scrub_reason=plan.scrub.reason,
                 preshard=plan.shards_reason, spillover=plan.spillover.reason if plan.spillover else None,
                 fill=plan.fill.reason if plan.fill else None,
                 scrub_debt=plan.debt.reason if plan.debt else None,
                 write_ops=round(snap.rgw_io.write_op_per_sec, 1),
                 smoothed_write_ops=round(plan.scrub.memory.ema_write_ops or 0.0, 1),
                 changed=[r.command for r in results if r.changed],
                 failed=[f"{r.command}: {r.detail}" for r in results if not r.ok],
                 overrides=sorted(now_overrides))
        return "acted" if any(r.changed for r in results) else "idle"

    async def stop(self, budget_s: float) -> None:
        """Give back this node's overrides if leader (never by force), then release the lock.
        The restore is bounded by ``budget_s``."""
        try:
            if self.lease.is_leader():
                async with bounded(max(1.0, budget_s)):
                    results = await self.executor().restore(holders=own_holders(self.instance_id, self.host))
                log.info("restored before exit", restored=[r.command for r in results if r.status == "restored"],
                         failed=[f"{r.command}: {r.detail}" for r in results if not r.ok])
        except (asyncio.TimeoutError, CephError) as exc:
            log.error("could not restore every override before exit; run rgwkeeper restore", error=str(exc))
        finally:
            with contextlib.suppress(CephError):
                await self.lease.release()


#: The hard-exit timer fires this long after shutdown_timeout_s (the unit's TimeoutStopSec
#: must leave room for both: tests/unit/test_daemon_parts.py checks it).
HARD_EXIT_MARGIN_S = 15.0


def watchdog_ok(now: float, *, pass_running: bool, last_progress_at: float, tick_s: float,
                call_timeout_s: float) -> bool:
    """May the watchdog be pinged? Yes while the loop is alive: passes start and end (also
    with an error: a mon outage must not make systemd restart the daemon over and over).
    No when a pass is wedged, with no progress far past the longest any one step may take
    (a long action, or a few Ceph calls), or when passes stopped being started at all."""
    if pass_running:
        return now - last_progress_at < LONG_TIMEOUT_S + 4 * call_timeout_s + 60
    return now - last_progress_at < 2 * tick_s + 60


#: How long shutdown waits for a cancelled pass to stop before it restores anyway (capped at a
#: third of shutdown_timeout_s, but never below a child process's SIGTERM grace and a second).
CANCEL_WAIT_S = 10.0


def cancel_wait_s(budget_s: float) -> float:
    return min(CANCEL_WAIT_S, max(budget_s / 3, CANCEL_GRACE_S + 1))


def _stacks() -> str:
    """Every task's stack: a stuck pass waits on a task of its own, further down."""
    out = io.StringIO()
    for task in asyncio.all_tasks():
        if task is not asyncio.current_task():
            task.print_stack(file=out)
    return out.getvalue()


def _hard_exit_timer(seconds: float, phase: Callable[[], str]) -> threading.Timer:
    def die() -> None:
        try:
            log.error("graceful shutdown took too long; exiting", after_s=seconds, stuck_at=phase())
            # Where each thread was, for the bug report: a graceful exit that hangs is a bug.
            faulthandler.dump_traceback(all_threads=True)
        finally:  # no stderr to write to must not keep the process alive
            os._exit(1)

    t = threading.Timer(seconds, die)
    t.daemon = True
    return t


async def run(cfg: Config, access: ClusterAccess) -> int:
    """Start the daemon; returns the exit code."""
    # Credentials must be private files, or the daemon refuses to start.
    if access.keyring is not None:
        check_private(access.keyring, "keyring")
    if access.rgw_credentials_file:
        access.rgw_credentials()  # refused at start (private, readable), not at the first bucket read
    instance_id = cfg.daemon.instance_id or socket.gethostname()
    lock_fd = instance_lock(Path(cfg.daemon.state_dir), instance_id)

    adapters = open_adapters(access, connect=False)
    rados = adapters.rados
    await asyncio.to_thread(rados.connect)
    store: ObjectStore | None = None
    try:
        await asyncio.to_thread(ensure_pool, rados, cfg.daemon.pool, cfg.daemon.create_pool)
        store = ObjectStore(rados, cfg.daemon.pool)
        journal = Journal(store)
        host = host_identity()
        lease = LeaderLease(RadosLockBackend(store, CephCli(access, "rados"), instance_id=instance_id,
                                             host=host, lease_s=cfg.daemon.lease_s),
                            lease_s=cfg.daemon.lease_s)
        metrics = Metrics()
        if cfg.daemon.metrics_address:
            try:
                metrics.serve(cfg.daemon.metrics_address)
            except OSError as exc:
                raise UsageError(f"cannot serve metrics on {cfg.daemon.metrics_address}: {exc.strerror}") from None
        svc = Service(cfg=cfg, access=access, rados=rados, journal=journal, lease=lease, adapters=adapters,
                      metrics=metrics, instance_id=instance_id, s3=adapters.s3, host=host)
        return await _serve(svc)
    finally:
        if store is not None:
            store.close()
        adapters.close()
        os.close(lock_fd)


async def _serve(svc: Service) -> int:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, svc.shutdown.set)
    scheduler = AsyncIOScheduler()
    scheduler.add_job(svc.tick, "interval", seconds=svc.cfg.daemon.tick_s, id="reconcile",
                      next_run_time=datetime.now(), max_instances=1, coalesce=True,
                      misfire_grace_time=int(svc.cfg.daemon.tick_s))
    watchdog = sdnotify.watchdog_interval_s()
    if watchdog:
        def ping() -> None:
            # Only while the loop makes progress: a wedged pass must let systemd restart us.
            if svc.watchdog_ok(svc.monotonic()):
                sdnotify.notify("WATCHDOG=1")
        scheduler.add_job(ping, "interval", seconds=watchdog, id="watchdog")
    scheduler.start()
    sdnotify.notify("READY=1")
    log.info("started", instance=svc.instance_id, tick_s=svc.cfg.daemon.tick_s, lease_s=svc.cfg.daemon.lease_s,
             pool=svc.cfg.daemon.pool, metrics=svc.cfg.daemon.metrics_address or None)
    await svc.shutdown.wait()
    sdnotify.notify("STOPPING=1")
    # Drain, restore and release share shutdown_timeout_s; the hard exit backs them up.
    budget_s = svc.cfg.daemon.shutdown_timeout_s
    deadline = time.monotonic() + budget_s
    phase = ["cancelling the running pass"]
    timer = _hard_exit_timer(budget_s + HARD_EXIT_MARGIN_S, lambda: phase[0])
    timer.start()
    log.info("stopping")
    scheduler.shutdown(wait=False)
    # Cancel the pass still running: the executor journals before it changes anything, so an
    # interrupted change leaves at worst an entry that restores a value never changed. Only the
    # pass: its own tasks stop with it (docs/architecture.md, "Only the pass is cancelled").
    running = svc.pass_task
    if running is not None and not running.done():
        running.cancel()
        _, stuck = await asyncio.wait({running}, timeout=cancel_wait_s(budget_s))
        if stuck:
            log.error("the running pass did not stop when cancelled; restoring anyway", stacks=_stacks())
    # A cancelled librados call still runs in its thread: wait for it, or the restore below
    # could be overtaken by a `config set` sent just before (CI: a setting left behind).
    phase[0] = "waiting for librados calls in flight"
    if not await svc.rados.drain(min(30.0, budget_s / 2)):
        log.warning("librados calls still running at shutdown; restoring anyway")
    phase[0] = "restoring overrides"
    await svc.stop(deadline - time.monotonic())
    if running is not None and not running.done():
        # Its own clean-up (an expiry giving back a raised full ratio) may still finish in time.
        phase[0] = "waiting for the cancelled pass"
        await asyncio.wait({running}, timeout=max(0.0, deadline - time.monotonic()))
        if not running.done():
            log.error("the cancelled pass still runs at exit: what it had changed and not given back is in the "
                      "journal; run rgwkeeper restore, or the next daemon start restores it")
    # The timer stays armed until the process exits: closing the adapters and asyncio.run's
    # own teardown (which cancels every task left) come after this and must not hang either.
    phase[0] = "closing the cluster connection"
    log.info("stopped")
    return 0
