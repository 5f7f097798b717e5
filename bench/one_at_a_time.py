"""One object at a time, a stat then a removal: rgwkeeper's two client paths at a window of one.

What a capped direct purge does to each head-only object (one operation in flight), on the same
cluster in the same run, rounds alternating:

- ``aio``: ``BulkObjects._windowed`` at a window of one, the path used before 2026-11-29: each
  operation's aio completion runs a Python callback on librados' thread, which wakes the
  calling thread for the next one;
- ``sync``: ``BulkObjects.stat_many`` / ``remove_many`` at a window of one: synchronous calls in
  turn, librados' own wait.

Each round writes ``--objects`` 4 KiB objects into a scratch pool, waits 2 s, then stats and
removes them in requests of 120 (a request's stats, then its removals, as the purge does). No
RGW and no ingest: this isolates the client's cost per object; ``bench.purge_pacing`` measures
the purge beside ingest and the stock tool.

    python -m bench.one_at_a_time [--objects 3000] [--rounds 6]

Without ``RGWKEEPER_TEST_CEPH_CONF`` it starts a cluster in a container (as the tests do).
Prints a JSON line per round, then the medians and the ratio sync / aio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import sys
import threading
import time
from contextlib import ExitStack

REQUEST = 120
POOL = "bench-one-at-a-time"


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _fill(io: object, names: list[str]) -> None:
    data = b"x" * 4096
    slots = threading.Semaphore(64)
    for n in names:
        slots.acquire()
        io.aio_write_full(n, data, oncomplete=lambda c: slots.release())  # type: ignore[attr-defined]
    for _ in range(64):
        slots.acquire()


def _aio(bulk: object, objs: list[tuple[str, str]]) -> None:
    for k in range(0, len(objs), REQUEST):
        part = objs[k:k + REQUEST]
        stats = bulk._windowed(part, 1, lambda io, oid, cb: io.aio_stat(oid, cb))  # type: ignore[attr-defined]
        removed = bulk._windowed(part, 1, lambda io, oid, cb: io.aio_remove(oid, oncomplete=cb),  # type: ignore[attr-defined]
                                 removal=True)
        if any(ret for ret, _ in stats + removed):
            raise SystemExit("a stat or removal failed")


def _sync(bulk: object, objs: list[tuple[str, str]]) -> None:
    async def run() -> None:
        for k in range(0, len(objs), REQUEST):
            part = objs[k:k + REQUEST]
            if None in await bulk.stat_many(part, window=1) or any(await bulk.remove_many(part, window=1)):  # type: ignore[attr-defined]
                raise SystemExit("a stat or removal failed")

    asyncio.run(run())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--objects", type=int, default=3000)
    p.add_argument("--rounds", type=int, default=6)
    args = p.parse_args()
    if not (0 < args.objects <= 1_000_000 and 0 < args.rounds <= 100):
        p.error("--objects 1 to 1,000,000 and --rounds 1 to 100")

    from integration.cluster import ContainerCluster, external_from_env
    from rgwkeeper.access import ClusterAccess
    from rgwkeeper.adapters.rados import BulkObjects, RadosAdapter

    rows: list[dict[str, object]] = []
    with ExitStack() as stack:
        info = external_from_env() or stack.enter_context(ContainerCluster())
        access = ClusterAccess(conf=info.conf, keyring=info.keyring, client_name="client.admin",
                               rgw_endpoint=None, rgw_credentials_file=None, timeout_s=30)
        adapter = RadosAdapter(access)
        adapter.connect()
        stack.callback(adapter.close)
        cluster = adapter._cluster
        if POOL not in cluster.list_pools():  # type: ignore[union-attr]
            cluster.create_pool(POOL)  # type: ignore[union-attr]
        io = cluster.open_ioctx(POOL)  # type: ignore[union-attr]
        stack.callback(io.close)
        bulk = BulkObjects(adapter, POOL)
        for r in range(args.rounds):
            for mode, fn in (("aio", _aio), ("sync", _sync)) if r % 2 == 0 else (("sync", _sync), ("aio", _aio)):
                names = [f"{mode}{r}-{i}" for i in range(args.objects)]
                _fill(io, names)
                time.sleep(2)
                t0, c0 = time.monotonic(), _cpu()
                fn(bulk, [(n, "") for n in names])
                dt, dc = time.monotonic() - t0, _cpu() - c0
                row = {"mode": mode, "round": r, "objects_per_s": round(args.objects / dt, 1),
                       "client_cpu_s_per_1000": round(dc / args.objects * 1000, 3)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    med = {m: statistics.median(float(r["objects_per_s"]) for r in rows if r["mode"] == m)  # type: ignore[arg-type]
           for m in ("aio", "sync")}
    cpu = {m: statistics.median(float(r["client_cpu_s_per_1000"]) for r in rows if r["mode"] == m)  # type: ignore[arg-type]
           for m in ("aio", "sync")}
    print(json.dumps({"median_objects_per_s": med, "median_client_cpu_s_per_1000": cpu,
                      "ratio_sync_to_aio": round(med["sync"] / med["aio"], 3)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
