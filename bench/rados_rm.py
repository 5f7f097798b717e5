"""Remove a bucket's head objects straight from its data pool at a steady rate: no RGW, no rgwkeeper.

For ``bench.purge_pacing``'s ``rados-host`` and ``rados-cluster`` modes. Each object is stated,
then removed (what the direct purge does to a head-only object), at most ``--in-flight`` objects
at a time, the n-th started no earlier than ``n / --rate`` seconds after the first: one token per
object, not a second's worth at once. The bucket's index is left as it is; the bench's victim
buckets are thrown away with the cluster.

It needs nothing but python3 and python3-rados, so the same file runs under the host's librados
and, through ``docker exec -i CONTAINER python3 - ARGS < bench/rados_rm.py``, under the
cluster's own: is the client library's release part of what ingest notices?

    python3 bench/rados_rm.py --pool P --prefix 'MARKER_fill/' --count N --rate R [--in-flight 1]
        [--stat-ahead] [--conf /etc/ceph/ceph.conf] [--keyring K]

``--stat-ahead``: the stats run in a lane of their own, one at a time, ahead of the removals
(at most 64 objects ahead), and the removals one at a time on the rate's tokens: a stat and a
removal in flight at once, a read beside a write, where the default has one or the other.

Prints one JSON line: objects removed, objects not found, errors, seconds.
"""

from __future__ import annotations

import argparse
import errno
import json
import math
import sys
import threading
import time


def _positive(kind: type) -> object:
    def parse(text: str) -> object:
        value = kind(text)
        if not (math.isfinite(value) and value > 0):
            raise argparse.ArgumentTypeError(f"{text!r}: must be finite and above 0")
        return value
    return parse


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pool", required=True)
    p.add_argument("--prefix", required=True, help="the head objects' name before the 7-digit index: MARKER_fill/")
    p.add_argument("--count", type=_positive(int), required=True)
    p.add_argument("--rate", type=_positive(float), required=True, help="objects per second")
    p.add_argument("--in-flight", type=_positive(int), default=1)
    p.add_argument("--stat-ahead", action="store_true", help="stats in their own lane ahead of the removals")
    p.add_argument("--conf", default="/etc/ceph/ceph.conf")
    p.add_argument("--keyring", default=None)
    args = p.parse_args()

    import rados  # python3-rados of whichever Ceph this runs beside

    cluster = rados.Rados(conffile=args.conf, conf={"keyring": args.keyring} if args.keyring else {})
    cluster.connect(timeout=30)
    slots = threading.Semaphore(args.in_flight)
    lock = threading.Lock()
    counts = {"removed": 0, "missing": 0, "errors": 0}
    io = None
    try:
        io = cluster.open_ioctx(args.pool)

        def count(ret: int) -> None:
            with lock:
                counts["removed" if ret == 0 else "missing" if ret == -errno.ENOENT else "errors"] += 1
            slots.release()

        def stated(name: str, comp: object) -> None:
            ret = comp.get_return_value()  # type: ignore[attr-defined]
            if ret < 0:
                count(ret)
                return
            try:
                io.aio_remove(name, oncomplete=lambda c: count(c.get_return_value()))
            except Exception:  # noqa: BLE001 - counted; the slot must come back or the end waits forever
                count(-errno.EIO)

        t0 = time.monotonic()
        if args.stat_ahead:
            _stat_ahead(io, args, counts)
            seconds = time.monotonic() - t0
            return _done(counts, seconds)
        due = t0
        for i in range(args.count):
            # One token per object, as RateCap: a stall does not turn into a burst that catches up.
            due = max(due, time.monotonic()) + (1 / args.rate if i else 0.0)
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            slots.acquire()
            name = f"{args.prefix}{i:07d}"
            io.aio_stat(name, lambda c, size, mtime, name=name: stated(name, c))
        for _ in range(args.in_flight):
            slots.acquire()
        seconds = time.monotonic() - t0
    finally:
        if io is not None:
            io.close()
        cluster.shutdown()
    return _done(counts, seconds)


def _done(counts: dict[str, int], seconds: float) -> int:
    print(json.dumps({**counts, "seconds": round(seconds, 3)}))
    return 0 if counts["errors"] == 0 and counts["removed"] > 0 else 1


def _stat_ahead(io: object, args: argparse.Namespace, counts: dict[str, int]) -> None:
    """Stats in one thread, one at a time, handing found objects to the removals (this thread),
    one at a time on the rate's tokens."""
    import queue

    import rados

    ahead: queue.Queue = queue.Queue(maxsize=64)
    lock = threading.Lock()

    def count(key: str) -> None:
        with lock:
            counts[key] += 1

    def stats() -> None:
        try:
            for i in range(args.count):
                name = f"{args.prefix}{i:07d}"
                try:
                    io.stat(name)  # type: ignore[attr-defined]
                except rados.ObjectNotFound:
                    count("missing")
                    continue
                except rados.Error:
                    count("errors")
                    continue
                ahead.put(name)
        finally:  # whatever stops this lane, the removals must not wait for it forever
            ahead.put(None)

    lane = threading.Thread(target=stats, daemon=True)
    lane.start()
    due = time.monotonic()
    first = True
    while (name := ahead.get()) is not None:
        due = max(due, time.monotonic()) + (0.0 if first else 1 / args.rate)
        first = False
        wait = due - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        try:
            io.remove_object(name)  # type: ignore[attr-defined]
            count("removed")
        except rados.ObjectNotFound:
            count("missing")
        except rados.Error:
            count("errors")
    lane.join()


if __name__ == "__main__":
    sys.exit(main())
