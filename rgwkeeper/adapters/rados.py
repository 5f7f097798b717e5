"""librados adapter: mon, mgr and per-OSD commands as JSON dicts, with a timeout on each.

librados ignores the ``timeout`` argument of its command calls, and its own
``rados_mon_op_timeout``/``rados_osd_op_timeout`` default to 0, which waits forever
(docs/architecture.md). We set both, plus ``client_mount_timeout`` for the connection, and also bound
every call on our side: calls run on a small thread pool (librados is thread-safe) and the
caller waits at most ``timeout`` seconds, so a blocking call never stalls the event loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno
import json
import queue
import threading
import time
from typing import Any, Callable, Iterator, Protocol

import structlog

from rgwkeeper.access import ClusterAccess
from rgwkeeper.aio import bounded
from rgwkeeper.adapters import gc
from rgwkeeper.encoding import enc_bool, enc_string, enc_struct
from rgwkeeper.errors import CephError, CephTimeout, CephUnreachable, CredentialsError, UsageError

log = structlog.get_logger("rgwkeeper.rados")

# The mon forwards mgr commands ("osd df", "osd pool stats", "pg stat") on Pacific (checked
# against 16.2.15), while the mgr refuses mon commands: so every cluster command goes to the mon.


class RadosLike(Protocol):
    def connect(self, timeout: int = 0) -> None: ...
    def shutdown(self) -> None: ...
    def open_ioctx(self, pool: str) -> Any: ...
    def mon_command(self, cmd: str, inbuf: bytes, timeout: int = 0) -> tuple[int, bytes, str]: ...
    def mgr_command(self, cmd: str, inbuf: bytes, timeout: int = 0) -> tuple[int, bytes, str]: ...
    def osd_command(self, osdid: int, cmd: str, inbuf: bytes, timeout: int = 0) -> tuple[int, bytes, str]: ...


def _default_factory(access: ClusterAccess) -> RadosLike:
    import rados  # Debian's python3-rados; imported lazily so unit tests need no librados

    t = str(int(max(1, access.timeout_s)))
    conf = {"rados_mon_op_timeout": t, "rados_osd_op_timeout": t, "client_mount_timeout": t}
    if access.keyring is not None:
        conf["keyring"] = str(access.keyring)
    return rados.Rados(conffile=str(access.conf), name=access.client_name, conf=conf)


#: How long close() waits for calls still running before it shuts librados down.
CLOSE_WAIT_S = 5.0
#: BulkObjects.gc_entries: entries asked for per cls call, the answer buffer (python-rados
#: allocates it whole per call; an answer that does not fit is read again with a buffer 4x
#: larger, up to the last), and the most GC objects RGW keeps (rgw_shards_max()).
GC_PAGE_ENTRIES = 1000
GC_PAGE_BYTES = 1 << 20
GC_MAX_PAGE_BYTES = 64 << 20
GC_MAX_OBJECTS = 65521


class RadosAdapter:
    """One librados connection. Use :meth:`connect` first and :meth:`close` at the end."""

    def __init__(self, access: ClusterAccess, *, factory: Callable[[ClusterAccess], RadosLike] | None = None,
                 max_workers: int = 16) -> None:
        self.access = access
        self._factory = factory or _default_factory
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="rados")
        self._inflight: set[concurrent.futures.Future[Any]] = set()
        self._cluster: RadosLike | None = None

    def submit(self, fn: Callable[..., Any], *args: Any,
               executor: concurrent.futures.Executor | None = None) -> concurrent.futures.Future[Any]:
        """Run a blocking librados call on this adapter's threads (or ``executor``'s), tracked
        until it returns."""
        fut = (executor or self._pool).submit(fn, *args)
        self._inflight.add(fut)
        fut.add_done_callback(self._inflight.discard)
        return fut

    async def drain(self, timeout_s: float) -> bool:
        """Wait until every call already sent has returned. Cancelling the coroutine that awaited
        one does not stop its thread: a `config set` cancelled at shutdown can still land after
        the restore that was meant to undo it, unless the restore waits for it here."""
        pending = list(self._inflight)
        if not pending:
            return True
        _, not_done = await asyncio.to_thread(concurrent.futures.wait, pending, timeout_s)
        return not not_done

    # -- connection ------------------------------------------------------------------------
    def connect(self) -> None:
        fut = self.submit(self._connect_blocking)
        try:
            fut.result(timeout=self.access.timeout_s + 5)
        except concurrent.futures.TimeoutError:
            raise CephUnreachable(
                f"connect to the cluster in {self.access.conf}",
                f"no monitor answered within {self.access.timeout_s:.0f} s; check mon_host and that the mons run",
            ) from None

    def _connect_blocking(self) -> None:
        try:
            import rados
            rados_errors: tuple[type[BaseException], ...] = (rados.Error,)
        except ImportError:  # unit tests with a fake factory
            rados = None  # type: ignore[assignment]
            rados_errors = ()
        try:
            cluster = self._factory(self.access)
            cluster.connect(timeout=int(self.access.timeout_s))
        except rados_errors as exc:  # type: ignore[misc]
            raise _connect_error(exc, self.access) from None
        self._cluster = cluster

    def close(self) -> None:
        # librados must not be shut down under a call still running on another thread (an ioctx
        # close submitted just before, a last omap write): give those a bounded moment first.
        running = [f for f in list(self._inflight) if not f.done()]  # threads shrink the set meanwhile
        if running and self._cluster is not None:
            concurrent.futures.wait(running, timeout=CLOSE_WAIT_S)
        if self._cluster is not None:
            try:
                self._cluster.shutdown()
            finally:
                self._cluster = None
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> "RadosAdapter":
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- commands ----------------------------------------------------------------------------
    def command(self, cmd: dict[str, Any], *, osd: int | None = None, timeout: float | None = None) -> Any:
        """Send one command and return its parsed JSON output (``None`` if it printed nothing)."""
        fut = self.submit(self._command_blocking, cmd, osd)
        t = timeout or self.access.timeout_s
        try:
            return fut.result(timeout=t + 2)
        except concurrent.futures.TimeoutError:
            raise CephTimeout(_describe(cmd, osd), f"no answer within {t:.0f} s") from None

    async def acommand(self, cmd: dict[str, Any], *, osd: int | None = None, timeout: float | None = None,
                       text: bool = False) -> Any:
        """A command's JSON answer; with ``text``, its answer as the text it is (stripped): the mon
        prints a string option's ``config get`` bare even with format=json (20.2.4)."""
        fut = self.submit(self._command_blocking, cmd, osd, text)
        t = timeout or self.access.timeout_s
        try:
            # Not asyncio.wait_for: on 3.11 it drops a cancel (docs/architecture.md, "Bounded waits keep a cancel").
            async with bounded(t + 2):
                return await asyncio.wrap_future(fut)
        except asyncio.TimeoutError:
            raise CephTimeout(_describe(cmd, osd), f"no answer within {t:.0f} s") from None

    def _command_blocking(self, cmd: dict[str, Any], osd: int | None, text: bool = False) -> Any:
        if self._cluster is None:
            raise CephError(_describe(cmd, osd), "not connected")
        body = json.dumps({"format": "json", **cmd})
        t = int(self.access.timeout_s)
        if osd is not None:
            ret, out, outs = self._cluster.osd_command(osd, body, b"", timeout=t)
        else:
            ret, out, outs = self._cluster.mon_command(body, b"", timeout=t)
        if ret != 0:
            cls = CephTimeout if ret == -errno.ETIMEDOUT else CephError
            detail = (outs or "").strip()[:300] or "error"
            if ret == -errno.EACCES:
                detail += f"; {CAPS_HINT if osd is None else OSD_CAPS_HINT}"
            raise cls(_describe(cmd, osd), detail, ret=ret)
        if isinstance(out, bytes):
            out = out.decode("utf-8", errors="replace")
        out = out.strip()
        if text:
            return out
        if not out:
            return None
        try:
            return json.loads(out)
        except json.JSONDecodeError:
            raise CephError(_describe(cmd, osd), f"answer is not JSON: {out[:120]!r}") from None


#: What a refused command says to do (the caps each command needs are measured there).
CAPS_HINT = "the client's cephx caps do not allow it (docs/cluster-access.md lists what each command needs)"
#: An OSD answers `ceph tell` only to a client with osd 'allow *' ('allow rwx' is refused).
OSD_CAPS_HINT = "OSDs answer tell only to a client with osd 'allow *' (docs/cluster-access.md)"


def _describe(cmd: dict[str, Any], osd: int | None) -> str:
    target = f"osd.{osd} " if osd is not None else ""
    extra = " ".join(f"{k}={v}" for k, v in cmd.items() if k not in ("prefix", "format"))
    return f"{target}{cmd.get('prefix', '?')}" + (f" {extra}" if extra else "")


def _connect_error(exc: BaseException, access: ClusterAccess) -> Exception:
    import rados

    who = access.client_name
    keyring = access.keyring or "the keyring ceph.conf names"
    if isinstance(exc, rados.TimedOut):
        return CephUnreachable(
            f"connect to the cluster in {access.conf}",
            f"no monitor answered within {access.timeout_s:.0f} s; check mon_host and that the mons run",
        )
    if isinstance(exc, rados.PermissionDeniedError):
        return CredentialsError(f"cephx authentication as {who} failed with {keyring}; check --name and --keyring")
    if isinstance(exc, rados.ObjectNotFound):
        return CredentialsError(
            f"no usable keyring for {who} ({keyring}); pass --keyring PATH readable by this user"
        )
    if isinstance(exc, rados.IOError):
        # Measured on 16.2.15: a keyring whose key is not valid base64 gives EIO at connect.
        return CredentialsError(
            f"connecting as {who} failed with EIO; the usual cause is a malformed key in {keyring}"
        )
    if isinstance(exc, (rados.InvalidArgumentError,)):
        return CredentialsError(f"ceph.conf {access.conf} or the client name {who} is not valid: {exc}")
    return CephUnreachable(f"connect to the cluster in {access.conf}", str(exc)[:300])


def full_try(ioctx: Any) -> Any:
    """Let this ioctx's operations through on a full cluster (librados' FULL_TRY, what
    ``rados --force-full`` sets): without it every write, a removal too, waits until usage is
    below the full ratio (measured on 16.2.15; docs/purge.md, "Full cluster")."""
    ioctx.set_osdmap_full_try()
    return ioctx


class ObjectStore:
    """Objects, omap and advisory locks in one pool, through a connected RadosAdapter.

    Used for the daemon's journal (an omap object) and its leader lock. Every call runs on
    the adapter's thread pool with the adapter's timeout. The ioctx is full-try: the daemon
    must keep its lock and journal (and so restore what it changed) on a full cluster, and
    these few small omap and lock writes are what Ceph's reserve above the full ratio is for.
    """

    def __init__(self, rados: RadosAdapter, pool: str, *, threads: int = 0) -> None:
        self.rados = rados
        self.pool = pool
        self._ioctx: Any = None
        self._open_lock = threading.Lock()
        #: ``threads`` > 0: calls run on threads of their own, not queued behind the adapter's
        #: other work (a purge's lease renewals behind its page removals).
        self._own = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="rados-store") \
            if threads > 0 else None

    def _run(self, what: str, fn: Callable[[Any], Any]) -> Any:
        def call() -> Any:
            import rados as rados_mod

            try:
                with self._open_lock:  # calls from several threads share one ioctx
                    if self._ioctx is None:
                        if self.rados._cluster is None:
                            raise CephError(what, "not connected")
                        self._ioctx = full_try(self.rados._cluster.open_ioctx(self.pool))  # type: ignore[attr-defined]
                    ioctx = self._ioctx
                return fn(ioctx)
            except rados_mod.ObjectNotFound as exc:
                raise _NotFoundError(f"{self.pool}/{what}", str(exc)[:200], ret=-errno.ENOENT) from None
            except rados_mod.ObjectBusy:
                raise LockBusy(f"{self.pool}/{what}", "held by another client", ret=-errno.EBUSY) from None
            except rados_mod.Error as exc:
                # 16.2.15 raises ObjectExists (EEXIST) for a lock the same locker re-takes without
                # LOCK_FLAG_MAY_RENEW, and a bare rados.OSError with errno 125 (ECANCELED) for
                # a failed omap_cmp: keep the errno so callers can tell them apart.
                code = getattr(exc, "errno", None)
                if code == errno.ECANCELED:
                    raise _CompareFailed(f"{self.pool}/{what}", "compare failed", ret=-code) from None
                raise CephError(f"{self.pool}/{what}", str(exc)[:200], ret=-code if code else None) from None

        fut = self.rados.submit(call, executor=self._own)
        try:
            return fut.result(timeout=self.rados.access.timeout_s + 2)
        except concurrent.futures.TimeoutError:
            raise CephTimeout(f"{self.pool}/{what}", f"no answer within {self.rados.access.timeout_s:.0f} s") from None

    def omap_get_all(self, obj: str) -> dict[str, str]:
        def get(ioctx: Any) -> dict[str, str]:
            import rados as rados_mod

            out: dict[str, str] = {}
            start = ""
            while True:
                with rados_mod.ReadOpCtx() as op:
                    it, ret = ioctx.get_omap_vals(op, start, "", 1000)
                    ioctx.operate_read_op(op, obj)
                    batch = [(k, v) for k, v in it]
                for k, v in batch:
                    out[k] = v.decode(errors="replace") if isinstance(v, bytes) else v
                if len(batch) < 1000:
                    return out
                start = batch[-1][0]

        try:
            return self._run(f"{obj} omap get", get)
        except _NotFoundError:
            return {}

    def omap_get_keys(self, obj: str, keys: list[str]) -> dict[str, str]:
        """The values of ``keys`` that ``obj`` has (a missing object: none)."""
        def get(ioctx: Any) -> dict[str, str]:
            import rados as rados_mod

            with rados_mod.ReadOpCtx() as op:
                it, ret = ioctx.get_omap_vals_by_keys(op, tuple(keys))
                ioctx.operate_read_op(op, obj)
                return {k: v.decode(errors="replace") if isinstance(v, bytes) else v for k, v in it}

        try:
            return self._run(f"{obj} omap get {len(keys)} keys", get)
        except _NotFoundError:
            return {}

    def omap_set(self, obj: str, values: dict[str, str]) -> None:
        def put(ioctx: Any) -> None:
            import rados as rados_mod

            with rados_mod.WriteOpCtx() as op:
                op.new(rados_mod.LIBRADOS_CREATE_IDEMPOTENT)
                ioctx.set_omap(op, tuple(values), tuple(v.encode() for v in values.values()))
                ioctx.operate_write_op(op, obj)

        self._run(f"{obj} omap set", put)

    def omap_remove(self, obj: str, keys: list[str]) -> None:
        def rm(ioctx: Any) -> None:
            import rados as rados_mod

            with rados_mod.WriteOpCtx() as op:
                ioctx.remove_omap_keys(op, tuple(keys))
                ioctx.operate_write_op(op, obj)

        try:
            self._run(f"{obj} omap rm", rm)
        except _NotFoundError:
            pass

    def omap_update_if(self, obj: str, key: str, expected: str, new: str | None) -> bool:
        """In one write op: if ``key`` reads exactly ``expected`` (a missing key reads as ""),
        set it to ``new`` (remove it if None); False, with nothing written, if it did not."""
        if new is None:
            return self._write_if(obj, key, expected, {}, (key,))
        return self._write_if(obj, key, expected, {key: new}, ())

    def omap_set_if(self, obj: str, key: str, expected: str, values: dict[str, str]) -> bool:
        """In one write op: if ``key`` reads exactly ``expected`` (a missing key reads as ""),
        set every key of ``values``; False, with nothing written, if it did not."""
        return self._write_if(obj, key, expected, values, ())

    def _write_if(self, obj: str, key: str, expected: str, values: dict[str, str], remove: tuple[str, ...]) -> bool:
        def cas(ioctx: Any) -> None:
            import rados as rados_mod

            with rados_mod.WriteOpCtx() as op:
                op.omap_cmp(key, expected, rados_mod.LIBRADOS_CMPXATTR_OP_EQ)
                if remove:
                    ioctx.remove_omap_keys(op, remove)
                if values:
                    ioctx.set_omap(op, tuple(values), tuple(v.encode() for v in values.values()))
                ioctx.operate_write_op(op, obj)

        try:
            self._run(f"{obj} omap update {key}", cas)
        except (_CompareFailed, _NotFoundError):
            return False
        return True

    def lock_exclusive(self, obj: str, name: str, cookie: str, desc: str, duration_s: int) -> None:
        """Take or renew an exclusive lock; raises LockBusy if another client holds it."""
        # Always LOCK_FLAG_MAY_RENEW (1): without it cls_lock refuses the same locker with
        # EEXIST, so a renewal retried after a lost reply could never succeed
        # (docs/architecture.md, "Leadership, shutdown and the watchdog").
        self._run(f"{obj} lock {name}", lambda io: io.lock_exclusive(obj, name, cookie, desc, duration_s,
                                                                     LOCK_FLAG_MAY_RENEW))

    def unlock(self, obj: str, name: str, cookie: str) -> None:
        try:
            self._run(f"{obj} unlock {name}", lambda io: io.unlock(obj, name, cookie))
        except (_NotFoundError, CephError):
            pass

    def remove(self, obj: str) -> None:
        """Remove ``obj`` (its omap and locks go with it); gone already is fine."""
        try:
            self._run(f"{obj} remove", lambda io: io.remove_object(obj))
        except _NotFoundError:
            pass

    def write_full(self, obj: str, data: bytes) -> None:
        self._run(f"{obj} write {len(data)} bytes", lambda io: io.write_full(obj, data))

    def read_all(self, obj: str) -> bytes | None:
        """The object's whole data (None if it does not exist)."""
        def read(ioctx: Any) -> bytes:
            size = ioctx.stat(obj)[0]
            return ioctx.read(obj, size) if size else b""

        try:
            return self._run(f"{obj} read", read)
        except _NotFoundError:
            return None

    def watch(self, obj: str, answer: Callable[[bytes], bytes], on_error: Callable[[int], None]) -> Any:
        """Answer every notify sent to ``obj`` with ``answer(payload)`` (called on librados'
        thread: keep it short); ``on_error(errno)`` when librados drops the watch (watch
        again then). Returns the watch; ``close()`` it when done."""
        def callback(notify_id: int, notifier_id: int, watch_id: int, data: bytes) -> bytes:
            try:
                return answer(data)
            except Exception:  # noqa: BLE001 - an exception here would unwind into librados
                return b""

        def error(*args: Any) -> None:  # (err) or (watch id, err), by python-rados version
            with contextlib.suppress(Exception):
                on_error(int(args[-1]) if args else 0)

        return self._run(f"{obj} watch", lambda io: io.watch(obj, callback, error))

    def list_names(self, prefix: str) -> list[str]:
        """Names of the pool's objects that start with ``prefix`` (lists the whole pool: for
        rgwkeeper's own small pool only)."""
        return self._run(f"list {prefix}*", lambda io: sorted(o.key for o in io.list_objects()
                                                              if o.key.startswith(prefix)))

    def notify(self, obj: str, payload: bytes, timeout_s: float) -> tuple[list[bytes], int]:
        """Send ``payload`` to every watcher of ``obj``; (their answers, how many timed out)."""
        done = threading.Event()
        out: dict[str, Any] = {}

        def complete(completion: Any, ret: int, acks: Any, timeouts: Any) -> None:
            out.update(ret=ret, acks=acks or [], timeouts=timeouts or [])
            done.set()

        self._run(f"{obj} notify", lambda io: io.aio_notify(obj, complete, msg=payload.decode(),
                                                            timeout_ms=int(timeout_s * 1000)))
        if not done.wait(timeout_s + self.rados.access.timeout_s):
            raise CephTimeout(f"{self.pool}/{obj} notify", f"no answer within {timeout_s:.0f} s")
        if out["ret"] < 0 and not out["acks"]:
            raise CephError(f"{self.pool}/{obj} notify", f"failed: {errno.errorcode.get(-out['ret'], out['ret'])}",
                            ret=out["ret"])
        return [a[2] for a in out["acks"]], len(out["timeouts"])

    def close(self) -> None:
        if self._ioctx is not None:
            ioctx, self._ioctx = self._ioctx, None
            self.rados.submit(ioctx.close, executor=self._own)
        if self._own is not None:
            self._own.shutdown(wait=False)


class _NotFoundError(CephError):
    pass


def ensure_pool(rados: RadosAdapter, pool: str, create: bool) -> None:
    """The rgwkeeper pool (journal, leader lock, purge work items): created with 8 PGs and
    application 'rgwkeeper' when missing and ``create`` (daemon.create_pool)."""
    pools = rados.command({"prefix": "osd pool ls"}) or []
    if pool in pools:
        return
    if not create:
        raise UsageError(f"pool {pool!r} does not exist and daemon.create_pool is false; create it or set daemon.pool")
    rados.command({"prefix": "osd pool create", "pool": pool, "pg_num": 8})
    rados.command({"prefix": "osd pool application enable", "pool": pool, "app": "rgwkeeper"})
    log.info("created pool", pool=pool)


class _CompareFailed(CephError):
    """An ``omap_cmp`` in a write op did not hold (ECANCELED): nothing was written."""


#: cls_lock's flag: the same locker (client and cookie) may take its own lock again.
LOCK_FLAG_MAY_RENEW = 1


class LockBusy(CephError):
    """An advisory lock is held by another client."""


def _rados_errors() -> tuple[type[BaseException], type[BaseException]]:
    """(rados.Error, rados.ObjectNotFound), or placeholders when librados is not installed
    (unit tests with a fake cluster)."""
    try:
        import rados as rados_mod
    except ImportError:  # pragma: no cover - python3-rados is a Debian package
        class _Never(Exception):
            pass
        return _Never, _Never
    return rados_mod.Error, rados_mod.ObjectNotFound


def _aio_stat(io: Any, oid: str, cb: Callable[..., None]) -> None:
    io.aio_stat(oid, cb)


def _aio_remove(io: Any, oid: str, cb: Callable[..., None]) -> None:
    io.aio_remove(oid, oncomplete=cb)


class BulkObjects:
    """Many small operations on the objects of one pool, a bounded number in flight (librados aio;
    stats and removals at a window of one as synchronous calls, one after the other, for heads,
    index shards and paced chunks alike).

    Purge uses it to stat and remove RGW head objects directly. Objects are ``(oid, locator)``
    pairs: RGW gives the head of a key that starts with ``_`` a locator (``rados ls`` shows
    ``<marker>___k``, locator ``<marker>__k`` on 16.2.15). The locator is per-ioctx state in librados, so
    those go through a second ioctx under a lock. Every aio op is bounded by
    ``rados_osd_op_timeout`` (set from the access timeout), and every batch as a whole.
    Removals go through ioctxs of their own with full-try set (:func:`full_try`), so they free
    space on a full cluster; nothing else is sent with that flag.
    """

    def __init__(self, rados: RadosAdapter, pool: str) -> None:
        self.rados = rados
        self.pool = pool
        self._ios: dict[tuple[bool, bool], Any] = {}  # (located, full_try) -> ioctx
        self._extra_ios: list[Any] = []  # xattrs_many's, one per reader thread, reused
        self._spare_ios: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._readers: concurrent.futures.ThreadPoolExecutor | None = None
        self._readers_width = 0
        self._retired_readers: list[concurrent.futures.ThreadPoolExecutor] = []
        self._open_lock = threading.Lock()
        self._loc_lock = threading.Lock()

    def _ioctx(self, located: bool, removal: bool = False) -> Any:
        if self.rados._cluster is None:
            raise CephError(self.pool, "not connected")
        with self._open_lock:  # several listings and removals open it from their threads at once
            if (located, removal) not in self._ios:
                io = self.rados._cluster.open_ioctx(self.pool)  # type: ignore[attr-defined]
                self._ios[located, removal] = full_try(io) if removal else io
            return self._ios[located, removal]

    async def _call(self, what: str, fn: Callable[[], Any], timeout: float) -> Any:
        rados_error, not_found = _rados_errors()

        def guarded() -> Any:
            try:
                return fn()
            except not_found as exc:
                raise _NotFoundError(f"{self.pool}/{what}", str(exc)[:200], ret=-errno.ENOENT) from None
            except rados_error as exc:
                raise CephError(f"{self.pool}/{what}", str(exc)[:200]) from None

        fut = self.rados.submit(guarded)
        try:
            # Not asyncio.wait_for: on 3.11 it drops a cancel (docs/architecture.md, "Bounded waits keep a cancel").
            async with bounded(timeout):
                return await asyncio.wrap_future(fut)
        except asyncio.TimeoutError:
            raise CephTimeout(f"{self.pool}/{what}", f"no answer within {timeout:.0f} s") from None

    def _batch_timeout(self, n: int, window: int) -> float:
        t = self.rados.access.timeout_s
        return t * (2 + n / max(1, window))

    def _windowed(self, objs: list[tuple[str, str]], window: int, submit: Callable[..., None],
                  removal: bool = False) -> list[tuple[int, Any]]:
        results: list[tuple[int, Any]] = [(0, None)] * len(objs)
        slots = threading.Semaphore(window)
        wait_s = self.rados.access.timeout_s + 5

        def done(i: int) -> Callable[..., None]:
            def cb(completion: Any, *rest: Any) -> None:
                results[i] = (completion.get_return_value(), rest[0] if rest else None)
                slots.release()
            return cb

        def take() -> None:
            if not slots.acquire(timeout=wait_s):
                raise CephTimeout(f"{self.pool} aio", f"no completion within {wait_s:.0f} s")

        for i, (oid, locator) in enumerate(objs):
            take()
            if locator:
                with self._loc_lock:
                    io = self._ioctx(True, removal)
                    io.set_locator_key(locator)
                    try:
                        submit(io, oid, done(i))
                    finally:
                        io.set_locator_key("")
            else:
                submit(self._ioctx(False, removal), oid, done(i))
        for _ in range(window):
            take()
        return results

    def _one_at_a_time(self, objs: list[tuple[str, str]], call: Callable[[Any, str], Any],
                       submit: Callable[..., None], removal: bool = False) -> list[tuple[int, Any]]:
        """A window of one, answered as ``_windowed`` answers it: (0, what ``call`` returned) or
        (-errno, None) per object. Each object's synchronous ``call`` in turn on this thread:
        librados' own wait wakes it once, where an aio completion's Python callback woke it
        through librados' thread (1.17 times the objects a second at 0.6 times the client CPU:
        docs/purge.md, "One operation at a time, without the callback"). ``rados_osd_op_timeout``
        (set at connect) bounds each call, and ``_call`` the batch. An object with a locator goes
        through ``submit`` (aio) on the located ioctx, whose lock is held only to send it. An error
        without an errno (not an operation's answer) raises."""
        rados_error, _ = _rados_errors()
        out: list[tuple[int, Any]] = []
        for oid, locator in objs:
            if locator:
                out += self._windowed([(oid, locator)], 1, submit, removal)
                continue
            io = self._ioctx(False, removal)
            try:
                out.append((0, call(io, oid)))
            except rados_error as exc:
                if not getattr(exc, "errno", None):
                    raise
                out.append((-exc.errno, None))
        return out

    async def stat_many(self, objs: list[tuple[str, str]], *, window: int) -> list[int | None]:
        """Size of each object, None where it does not exist; other errors raise."""
        def run() -> list[int | None]:
            res = self._one_at_a_time(objs, lambda io, oid: io.stat(oid)[0], _aio_stat) if window == 1 else \
                self._windowed(objs, window, _aio_stat)
            out: list[int | None] = []
            for (ret, size), (oid, _) in zip(res, objs):
                if ret == -errno.ENOENT:
                    out.append(None)
                elif ret < 0:
                    raise CephError(f"{self.pool}/{oid} stat", errno.errorcode.get(-ret, str(ret)), ret=ret)
                else:
                    out.append(int(size))
            return out

        return await self._call(f"stat {len(objs)} objects", run, self._batch_timeout(len(objs), window))

    async def remove_many(self, objs: list[tuple[str, str]], *, window: int) -> list[int]:
        """Remove each object; returns each return code (0, or -ENOENT if it was already gone)."""
        def run() -> list[int]:
            res = self._one_at_a_time(objs, lambda io, oid: io.remove_object(oid), _aio_remove, removal=True) \
                if window == 1 else self._windowed(objs, window, _aio_remove, removal=True)
            return [ret for ret, _ in res]

        return await self._call(f"remove {len(objs)} objects", run, self._batch_timeout(len(objs), window))

    async def empty_index_many(self, objs: list[tuple[str, str]], *, window: int) -> list[int]:
        """Empty each bucket index shard in place, one atomic write op each: its omap (entries and
        header) cleared, then cls_rgw's ``bucket_init_index`` writes the empty header RGW writes for
        a new bucket. Returns each return code. A shard that does not exist is created: stat first."""
        ops: list[Any] = []

        def submit(io: Any, oid: str, cb: Callable[..., None]) -> None:
            op = io.create_write_op()
            ops.append(op)
            io.clear_omap(op)
            op.execute("rgw", "bucket_init_index", b"")
            io.operate_aio_write_op(op, oid, oncomplete=cb)

        def run() -> list[int]:
            try:
                return [ret for ret, _ in self._windowed(objs, window, submit)]
            finally:
                for op in ops:
                    op.release()

        return await self._call(f"empty {len(objs)} index shards", run, self._batch_timeout(len(objs), window))

    async def list_prefix(self, prefix: str, *, max_scanned: int) -> tuple[list[tuple[str, str]], bool]:
        """Objects whose name starts with ``prefix``, by a scan of the whole pool (librados has no
        prefix listing). Stops after ``max_scanned`` objects: returns (found, complete)."""
        def run() -> tuple[list[tuple[str, str]], bool]:
            found: list[tuple[str, str]] = []
            for n, obj in enumerate(self._ioctx(False).list_objects()):
                if n >= max_scanned:
                    return found, False
                if obj.key.startswith(prefix):
                    found.append((obj.key, obj.locator_key or ""))
            return found, True

        return await self._call(f"list {prefix}*", run, self.rados.access.timeout_s * (2 + max_scanned / 2000))

    def _omap_rows(self, oid: str, start: Callable[[Any, Any], tuple[Any, int]]) -> Iterator[tuple[str | None, bytes]]:
        """Run one omap read (``start(ioctx, op)`` adds it to the op) and yield its rows in key
        order. python-rados decodes keys as strict UTF-8: a key it cannot decode (cls_rgw's special
        index entries start with byte 0x80) comes as None, in its place (the iterator has moved
        past it). Blocking: call it from a worker thread."""
        import rados as rados_mod

        with rados_mod.ReadOpCtx() as op:
            it, _ = start(self._ioctx(False), op)
            self._ioctx(False).operate_read_op(op, oid)
            while True:
                try:
                    key, value = next(it)
                except StopIteration:
                    return
                except UnicodeDecodeError:
                    yield None, b""
                    continue
                yield key, value or b""

    async def omap_page(self, oid: str, after: str, max_entries: int, *,
                        prefix: str = "") -> list[tuple[str | None, bytes]]:
        """Up to ``max_entries`` omap entries of ``oid`` after the key ``after`` (and starting with
        ``prefix``, if given), in key order; fewer when the OSD caps a read
        (``osd_max_omap_entries_per_request``), none after the last; None for a key python-rados
        cannot decode."""
        def run() -> list[tuple[str | None, bytes]]:
            return list(self._omap_rows(oid, lambda io, op: io.get_omap_vals(op, after, prefix, max_entries)))

        return await self._call(f"{oid} omap list", run, self.rados.access.timeout_s + 2)

    async def omap_keys_page(self, oid: str, after: str, max_entries: int, *, prefix: str = "") -> list[str | None]:
        """As omap_page, keys only (the values are not read): up to ``max_entries`` keys after
        ``after`` starting with ``prefix``; None for a key python-rados cannot decode."""
        def run() -> list[str | None]:
            out: list[str | None] = []
            # get_omap_keys has no prefix filter: read a page and stop at the first key past it.
            for key, _ in self._omap_rows(oid, lambda io, op: io.get_omap_keys(op, after or prefix, max_entries)):
                if prefix and (key is None or not key.startswith(prefix)):
                    if key is None or key > prefix:
                        break
                    continue
                out.append(key)
            return out

        return await self._call(f"{oid} omap keys", run, self.rados.access.timeout_s + 2)

    async def get_xattr(self, oid: str, name: str, *, locator: str = "") -> bytes | None:
        """One xattr of an object; None if the object or the xattr does not exist."""
        def run() -> bytes | None:
            try:
                import rados as rados_mod
                no_data: tuple[type[BaseException], ...] = (rados_mod.NoData,)
            except (ImportError, AttributeError):  # pragma: no cover
                no_data = ()
            with self._loc_lock:
                io = self._ioctx(True)
                io.set_locator_key(locator)
                try:
                    return io.get_xattr(oid, name)
                except no_data:
                    return None
                finally:
                    io.set_locator_key("")

        try:
            return await self._call(f"{oid} getxattr {name}", run, self.rados.access.timeout_s + 2)
        except _NotFoundError:
            return None

    async def write_full(self, oid: str, data: bytes) -> None:
        await self._call(f"{oid} write", lambda: self._ioctx(False).write_full(oid, data),
                         self.rados.access.timeout_s + 2)

    async def remove(self, oid: str) -> None:
        try:
            await self._call(f"{oid} remove", lambda: self._ioctx(False).remove_object(oid),
                             self.rados.access.timeout_s + 2)
        except _NotFoundError:
            pass

    async def xattrs_many(self, objs: list[tuple[str, str]], *, window: int) -> list[dict[str, bytes] | None]:
        """Every xattr of each object (one read each), None where the object does not exist.
        python-rados has no aio getxattr: ``window`` blocking reads run at once on threads, each
        on an ioctx of its own (the locator is per-ioctx state)."""
        rados_error, not_found = _rados_errors()
        spare = self._spare_ios

        def one(obj: tuple[str, str]) -> dict[str, bytes] | None:
            oid, locator = obj
            try:
                io = spare.get_nowait()
            except queue.Empty:
                io = self._own_ioctx()
            try:
                io.set_locator_key(locator)
                return dict(io.get_xattrs(oid))
            except not_found:
                return None
            except rados_error as exc:
                raise CephError(f"{self.pool}/{oid} getxattrs", str(exc)[:200]) from None
            finally:
                io.set_locator_key("")
                spare.put(io)

        def run() -> list[dict[str, bytes] | None]:
            pool = self._xattr_pool(window)
            slots = threading.Semaphore(max(1, window))  # the pool may be wider (an earlier, wider call)

            def bounded(obj: tuple[str, str]) -> dict[str, bytes] | None:
                with slots:
                    return one(obj)

            return list(pool.map(bounded, objs))

        return await self._call(f"getxattrs of {len(objs)} objects", run, self._batch_timeout(len(objs), window))

    def _xattr_pool(self, window: int) -> concurrent.futures.ThreadPoolExecutor:
        """The reader threads, kept for the object's life (a pool per call would start threads per page)."""
        with self._open_lock:
            if self._readers is None or self._readers_width < window:
                if self._readers is not None:
                    self._retired_readers.append(self._readers)
                    self._readers.shutdown(wait=False)
                self._readers = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, window),
                                                                      thread_name_prefix="rgwkeeper-xattrs")
                self._readers_width = window
            return self._readers

    async def gc_entries(self, namespace: str, count: int, *,
                         keep: Callable[[dict[str, Any]], bool] | None = None) -> gc.GcRead:
        """The entries of RGW's GC that ``keep`` takes (all without it), as ``radosgw-admin gc list
        --include-all`` prints them, with the number of entries read in all. A page is filtered as
        it comes in, so only the kept entries are held. They are read from its ``count`` GC
        objects ``gc.0`` .. ``gc.<count - 1>`` in ``namespace`` of this pool (adapters/gc.py):
        each one's queue and its omap list from before Octopus. RGW creates all
        of them when it starts, so ``gc.0`` must exist (else this is not where RGW keeps GC) and
        ``gc.<count>`` must not (else RGW keeps more than ``count``); either is refused
        (CephError), as is an answer that cannot be decoded, a marker that does not move on, or a
        read that outlasts its budget (it stops itself: no thread is left paging). The calls are
        synchronous, one after the other: python-rados's aio_execute trusts the answer's length
        over its buffer, so an answer larger than the buffer corrupts memory (docs/purge.md, "How
        GC is listed"); the synchronous call says ERANGE, and is sent again with a larger buffer."""
        if not 0 < count <= GC_MAX_OBJECTS:
            raise CephError(f"{self.pool}:{namespace} gc", f"{count} GC objects is out of range (1..{GC_MAX_OBJECTS})")
        rados_error, _ = _rados_errors()
        where = f"{self.pool}:{namespace}"
        budget = self.rados.access.timeout_s * (2 + count / 8)
        deadline = time.monotonic() + budget

        def page(io: Any, oid: str, cls: str, method: str, marker: str) -> tuple[list[dict[str, Any]], str, bool]:
            """One page; ([], "", False) if the object does not exist."""
            size = GC_PAGE_BYTES
            while True:
                if time.monotonic() > deadline:
                    raise CephTimeout(f"{where} gc list", f"not read within {budget:.0f} s")
                try:
                    _, out = io.execute(oid, cls, method, gc.list_op(marker, GC_PAGE_ENTRIES), length=size)
                except rados_error as exc:
                    code = getattr(exc, "errno", None)
                    if code == errno.ERANGE and size < GC_MAX_PAGE_BYTES:
                        size *= 4
                        continue
                    if code == errno.ENOENT and not marker:
                        return [], "", False
                    raise CephError(f"{where}/{oid} {cls}.{method}", str(exc)[:200]) from None
                return gc.decode_list_ret(bytes(out))

        def exists(io: Any, oid: str) -> bool:
            try:
                io.stat(oid)
            except rados_error as exc:
                if getattr(exc, "errno", None) == errno.ENOENT:
                    return False
                raise
            return True

        def run() -> gc.GcRead:
            io = self._own_ioctx()
            total = 0

            def kept(got: list[dict[str, Any]]) -> list[dict[str, Any]]:
                nonlocal total
                total += len(got)
                return got if keep is None else [e for e in got if keep(e)]

            try:
                io.set_namespace(namespace)
                if not exists(io, gc.shard_oid(0)):
                    raise CephError(f"{where}/{gc.shard_oid(0)}", "does not exist: RGW keeps no GC here")
                if exists(io, gc.shard_oid(count)):
                    raise CephError(f"{where}/{gc.shard_oid(count)}", f"exists: RGW keeps more than {count} GC "
                                    "objects (rgw_gc_max_objs)")
                entries: list[dict[str, Any]] = []
                for n in range(count):
                    oid = gc.shard_oid(n)
                    for cls, method in ((gc.QUEUE_CLASS, gc.QUEUE_LIST), (gc.OMAP_CLASS, gc.OMAP_LIST)):
                        got, marker, more = page(io, oid, cls, method, "")
                        entries += kept(got)
                        while more:
                            if not marker:
                                raise CephError(f"{where}/{oid} {cls}.{method}",
                                                "a truncated answer without a marker to go on from")
                            got, following, more = page(io, oid, cls, method, marker)
                            if more and following == marker:
                                raise CephError(f"{where}/{oid} {cls}.{method}",
                                                f"a truncated answer whose marker does not move on ({marker!r})")
                            marker = following
                            entries += kept(got)
                return gc.GcRead(entries, total)
            finally:
                self._close_own(io)

        try:
            return await self._call(f"gc list of {count} GC objects", run, budget + 5)
        except gc.GcDecodeError as exc:
            raise CephError(f"{where} gc", str(exc)) from None

    async def read_pool(self, max_objects: int, *, read_prefix: str = "",
                        max_bytes: int = 1 << 20) -> dict[str, bytes] | None:
        """Every object of this (small) pool, in every namespace: name -> content (namespaced
        names as ``ns/name``); only objects named ``read_prefix...`` are read, the others' content
        is empty (``.rgw.root``'s zones hold their system key, which is not needed). None if
        the pool holds more than ``max_objects`` objects or an object to read is larger than
        ``max_bytes``: not the small pool the caller expected. Anything unexpected is CephError."""
        def run() -> dict[str, bytes] | None:
            import rados

            io = self._own_ioctx()
            try:
                io.set_namespace(rados.LIBRADOS_ALL_NSPACES)
                names = []
                for obj in io.list_objects():
                    names.append((obj.nspace, obj.key, obj.locator_key))
                    if len(names) > max_objects:
                        return None
                out: dict[str, bytes] = {}
                for ns, key, locator in names:
                    data = b""
                    if key.startswith(read_prefix):
                        io.set_namespace(ns)
                        io.set_locator_key(locator or "")
                        size, _ = io.stat(key)
                        if size > max_bytes:
                            return None
                        data = bytes(io.read(key, size)) if size else b""
                    out[f"{ns}/{key}" if ns else key] = data
                return out
            except (CephError, rados.Error):
                raise
            except Exception as exc:  # noqa: BLE001 - e.g. a name that is not UTF-8: the caller asks radosgw-admin
                raise CephError(f"{self.pool} read", f"{type(exc).__name__}: {str(exc)[:160]}") from None
            finally:
                self._close_own(io)

        return await self._call(f"read of the pool's {max_objects} objects at most", run,
                                self._batch_timeout(max_objects, 1))

    def _close_own(self, io: Any) -> None:
        """Close an ioctx of :meth:`_own_ioctx` whose call is done (it is not closed twice)."""
        with self._open_lock:
            if io in self._extra_ios:
                self._extra_ios.remove(io)
        io.close()

    def _own_ioctx(self) -> Any:
        """A new ioctx on the pool, closed with the others (for callers that each need their own)."""
        if self.rados._cluster is None:
            raise CephError(self.pool, "not connected")
        io = self.rados._cluster.open_ioctx(self.pool)  # type: ignore[attr-defined]
        with self._open_lock:
            self._extra_ios.append(io)
        return io

    async def refcount_put_many(self, objs: list[tuple[str, str, bytes]], *, window: int) -> list[int]:
        """Drop one reference from each ``(oid, locator, tag)``, as RGW's GC does for a deleted
        object's tails: cls_refcount ``put`` with the head's tail tag, implicit reference allowed
        (a tail nobody copied holds only RGW's implicit reference, which this drops; a copy's
        explicit reference stays). The OSD removes the object when its last reference goes; a
        second put of the same tag does nothing. Returns each return code (0, or -ENOENT if the
        object was already gone)."""
        ops: list[Any] = []
        tags = iter([tag for _, _, tag in objs])

        def submit(io: Any, oid: str, cb: Callable[..., None]) -> None:
            op = io.create_write_op()
            ops.append(op)
            op.execute("refcount", "put", refcount_put_op(next(tags)))
            io.operate_aio_write_op(op, oid, oncomplete=cb)

        def run() -> list[int]:
            try:  # full-try, as removals: a put that drops the last reference frees space on a full cluster
                return [ret for ret, _ in self._windowed([(o, loc) for o, loc, _ in objs], window, submit,
                                                         removal=True)]
            finally:
                for op in ops:
                    op.release()

        return await self._call(f"refcount put on {len(objs)} objects", run, self._batch_timeout(len(objs), window))

    def close(self) -> None:
        readers = [r for r in (*self._retired_readers, self._readers) if r is not None]
        extra = self._extra_ios

        def close_extra() -> None:
            for r in readers:  # a reader still in get_xattrs (a call that timed out) keeps its ioctx until done
                r.shutdown(wait=True, cancel_futures=True)
            for io in extra:
                io.close()

        for io in self._ios.values():
            self.rados.submit(io.close)
        if readers or extra:
            self.rados.submit(close_extra)
        self._ios = {}
        self._extra_ios = []
        self._spare_ios = queue.SimpleQueue()
        self._readers, self._retired_readers, self._readers_width = None, [], 0


def refcount_put_op(tag: bytes) -> bytes:
    """cls_refcount_put_op, encoded: ENCODE_START(1, 1), the tag (u32 length, bytes), implicit_ref
    true (src/cls/refcount/cls_refcount_ops.h)."""
    return enc_struct(1, 1, enc_string(tag) + enc_bool(True))
