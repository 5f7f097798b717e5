"""Bulk delete: the same object set deleted by each stock method and by rgwkeeper's choice.

For each object set (small: 4-64 KiB; large: multi-MiB, half plain PUTs with tails, half
multipart), a fresh bucket is filled with the same seeded sizes and deleted by:

- ``s3-one-batch``: list, S3 DeleteObjects 1000 keys at a time, one request at a time (what
  ``aws s3 rm --recursive`` does), DeleteBucket;
- ``admin-purge``: ``radosgw-admin bucket rm --purge-objects``;
- ``admin-purge-bypass-gc``: the same with ``--bypass-gc`` (unsafe with copies: tracker 73348);
- ``rgwkeeper``: ``rgwkeeper purge``'s automatic choice, through its Python API, plan included;
- ``rgwkeeper-index``: the same with ``purge.direct_listing = "index"`` (the direct method lists
  the index shards with librados instead of ListObjectsV2, each shard a work item in RADOS,
  ``purge.workers`` of them at once); ``rgwkeeper-index-wN``: the same with N workers;
  ``rgwkeeper-index-pN``: the ``rgwkeeper purge`` command in N processes, the purge and N-1
  ``--join``s started as soon as it prints its id, as N admin nodes would (each process's
  start, about a second, counts); any rgwkeeper method with ``-2rgw`` appended: the same over
  two RGWs of the zone (the harness's second RGW is started for the run);
- any in-process rgwkeeper method with ``-capR`` appended: capped at R objects/s
  (``purge.max_objects_per_second``), for the CPU a purge costs at a given rate;
- ``rados-floor``: as many RADOS objects of the same sizes written straight into the data pool
  and removed with ``rados cleanup --prefix`` (its default 16 in flight): what RADOS itself costs.

The time measured is until the bucket is gone *and its space is free*: for methods that
leave tails to RGW's GC, ``radosgw-admin gc process --include-all`` is run and counted (stock
RGW would wait ``rgw_gc_obj_min_wait``, 2 h by default, before even starting; the API-only
time is printed too). After each method the data pool is listed for the bucket's marker:
anything left is reported. The machine is shared and noisy: compare ratios within one run.

CPU: each method's CPU seconds from its start until the space is free, per 1,000 objects, read
from /proc (the cluster's daemons run in a container on this host): the whole host (busy time
in /proc/stat), the OSDs (``ceph-osd``), the RGWs (``radosgw``) and the rest (the purging
client, rgwkeeper in-process or ``radosgw-admin`` with its ``docker exec``, mon, mgr, and
whatever else ran). Where a purge's load on the host lands is what ingest beside it shares.

    .venv/bin/python -m bench.purge [--small 3000] [--small-sizes 4KiB-64KiB] [--large 24] [--repeat 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable

STOCK = ("s3-one-batch", "admin-purge", "admin-purge-bypass-gc")
#: Processes whose CPU is counted apart (/proc/PID/comm), the rest is "other".
DAEMONS = {"ceph-osd": "osd", "radosgw": "rgw"}
_TICK = os.sysconf("SC_CLK_TCK")
#: rgwkeeper, rgwkeeper-index, rgwkeeper-index-wN (N workers), each perhaps with -2rgw (two RGWs).
#: Any in-process one with -capR: capped at R objects/s (purge.max_objects_per_second).
RGWKEEPER_METHOD = r"rgwkeeper(-index(?:-w([1-9]|[1-5][0-9]|6[0-4])|-p([1-8]))?)?(-2rgw)?(?:-cap([1-9][0-9]{0,4}))?"
DATA_POOL = "default.rgw.buckets.data"


def parse_range(text: str) -> tuple[int, int]:
    from rgwkeeper.units import parse_size

    lo, _, hi = text.partition("-")
    return parse_size(lo), parse_size(hi or lo)


def cpu_now(proc: Path = Path("/proc")) -> dict[str, float]:
    """CPU seconds so far: the host's busy time (/proc/stat: user, nice, system, irq, softirq;
    not idle, iowait, nor steal, which is another guest's) and, by DAEMONS, the user + system
    time of their live processes: every one on the host, so run it with no other cluster
    beside it; a daemon that restarts meanwhile makes its delta wrong (low, or negative)."""
    fields = [int(v) for v in (proc / "stat").read_text().splitlines()[0].split()[1:]]
    busy = fields[0] + fields[1] + fields[2] + fields[5] + fields[6]
    out = {"host": busy / _TICK, **{k: 0.0 for k in DAEMONS.values()}}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm, rest = (entry / "stat").read_text().rsplit(")", 1)
        except OSError:
            continue  # gone meanwhile
        kind = DAEMONS.get(comm.split("(", 1)[1])
        if kind is not None:
            f = rest.split()
            out[kind] += (int(f[11]) + int(f[12])) / _TICK
    return out


def cpu_per_k(before: dict[str, float], after: dict[str, float], objects: int) -> dict[str, float]:
    """CPU seconds per 1,000 objects between two cpu_now readings, and the rest ("other")."""
    d = {k: after[k] - before[k] for k in before}
    d["other"] = d["host"] - sum(d[k] for k in DAEMONS.values())
    return {k: round(v * 1000 / max(1, objects), 3) for k, v in d.items()}


def join_to_end(argv: list[str], lead: subprocess.Popen[str], procs: list[subprocess.Popen[str]],
                stop: tuple[threading.Lock, threading.Event], err: Path, *,
                retry_for_s: float = 30.0) -> dict[str, Any]:
    """One ``--join`` to its end: its report. A join that comes before the purge published its
    items is refused with "run --join again": started again (every 0.5 s, for ``retry_for_s``)
    while the purge runs; refused once the purge has ended or past that, it joined nothing (the
    items may be gone already: the refusal says the same). Any other failure fails the run."""
    give_up = time.monotonic() + retry_for_s
    while True:
        with open(err, "w") as err_f:
            with stop[0]:
                if stop[1].is_set():
                    return {}
                proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err_f, text=True,
                                        stdin=subprocess.DEVNULL)
                procs.append(proc)
            out, _ = proc.communicate(timeout=3600)
        if proc.returncode == 0:
            return json.loads(out or "{}")
        text = err.read_text()
        if "run --join again" not in text:
            raise RuntimeError(f"rgwkeeper purge --join: exit {proc.returncode}: {text[-2000:]}")
        if lead.poll() is not None or time.monotonic() > give_up:
            return {}
        time.sleep(0.5)


class Bench:
    def __init__(self, info: Any, workdir: Path) -> None:
        import boto3
        from botocore.config import Config

        self.info = info
        self.workdir = workdir
        access, secret = info.credentials()
        self.s3 = boto3.client("s3", endpoint_url=info.rgw_endpoint, aws_access_key_id=access,
                               aws_secret_access_key=secret, region_name="default",
                               config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 5},
                                             max_pool_connections=64, read_timeout=600))
        self.base = ["--conf", str(info.conf), "--keyring", str(info.keyring)]
        self.n = 0

    # -- tools ---------------------------------------------------------------------------------
    def admin(self, *args: str, timeout: float = 3600) -> str:
        proc = subprocess.run(["radosgw-admin", *self.base, *args], capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"radosgw-admin {' '.join(args)}: exit {proc.returncode}: {proc.stderr[-300:]}")
        return proc.stdout

    def rados_ls(self, prefix: str) -> int:
        out = subprocess.run(["rados", *self.base, "-p", DATA_POOL, "ls"], capture_output=True, text=True,
                             timeout=600, check=True).stdout
        return sum(1 for line in out.splitlines() if line.startswith(prefix))

    def fresh_bucket(self, tag: str) -> str:
        self.n += 1
        name = f"bench-purge-{tag}-{self.n}-{os.getpid()}"
        self.s3.create_bucket(Bucket=name)
        return name

    def fill(self, bucket: str, sizes: list[int], multipart_from: int | None) -> None:
        """Objects obj/000000.. of the given sizes; from index ``multipart_from`` on, multipart
        uploads in 5 MiB parts (the other large ones are single PUTs, with tails past 4 MiB)."""
        def put(i: int) -> None:
            key, size = f"obj/{i:06d}", sizes[i]
            if multipart_from is not None and i >= multipart_from:
                part = 5 << 20
                up = self.s3.create_multipart_upload(Bucket=bucket, Key=key)
                etags = []
                for n, off in enumerate(range(0, size, part), 1):
                    body = b"m" * min(part, size - off)
                    etags.append(self.s3.upload_part(Bucket=bucket, Key=key, UploadId=up["UploadId"], PartNumber=n,
                                                     Body=body)["ETag"])
                self.s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=up["UploadId"], MultipartUpload={
                    "Parts": [{"PartNumber": n, "ETag": e} for n, e in enumerate(etags, 1)]})
            else:
                self.s3.put_object(Bucket=bucket, Key=key, Body=b"x" * size)

        with ThreadPoolExecutor(32) as ex:
            list(ex.map(put, range(len(sizes))))

    def marker(self, bucket: str) -> str:
        return json.loads(self.admin("bucket", "stats", "--bucket", bucket))["marker"]

    # -- methods -------------------------------------------------------------------------------
    def s3_one_batch(self, bucket: str) -> float:
        """Returns when the API work was done; the caller then frees the space (GC)."""
        from bench.s3_one_batch import empty_and_remove

        empty_and_remove(self.s3, bucket)
        return time.monotonic()

    def admin_purge(self, bucket: str, bypass: bool) -> float:
        self.admin("bucket", "rm", "--bucket", bucket, "--purge-objects", *(["--bypass-gc"] if bypass else []))
        return time.monotonic()

    def rgwkeeper(self, bucket: str, listing: str = "s3", workers: int | None = None,
                  more_endpoints: tuple[str, ...] = (), cap: float = 0.0) -> dict[str, Any]:
        from rgwkeeper import config as config_mod
        from rgwkeeper import purge as purge_api
        from rgwkeeper.access import ClusterAccess
        from rgwkeeper.purge.plan import PurgeRequest

        cfg = config_mod.parse({"purge": {"state_dir": str(self.workdir / "state"), "direct_listing": listing,
                                          **({"workers": workers} if workers else {}),
                                          **({"max_objects_per_second": cap} if cap else {})}})
        access = ClusterAccess(conf=self.info.conf, keyring=self.info.keyring, client_name="client.admin",
                               rgw_endpoint=self.info.rgw_endpoint, rgw_credentials_file=self.info.credentials_file,
                               timeout_s=30, rgw_more_endpoints=more_endpoints)
        io = purge_api.open_io(access, cfg.purge)
        try:
            t0 = time.monotonic()
            prepared = asyncio.run(purge_api.prepare(PurgeRequest(bucket), io, purge_cfg=cfg.purge,
                                                     store=purge_api.CheckpointStore(self.workdir / "state")))
            planned = time.monotonic()
            with ExitStack() as stack:
                # As the CLI runs it: an index-listed direct purge works its shards as items in RADOS.
                board = stack.enter_context(purge_api.open_board(
                    io.rados, prepared.plan.plan_id, pool=cfg.daemon.pool, lease_s=cfg.purge.item_lease_s,
                    create_pool=True)) if purge_api.uses_items(prepared.plan) else None
                report = asyncio.run(purge_api.run(prepared, io, purge_cfg=cfg.purge, board=board,
                                                   workers=cfg.purge.workers))
        finally:
            purge_api.close_io(io)
        if not report.ok:
            raise RuntimeError(f"rgwkeeper purge of {bucket} did not verify: {report.checks}")
        return {"method": prepared.plan.method, "plan_s": planned - t0, "free_s": planned - t0 + report.space_free_s,
                "verified_s": planned - t0 + report.elapsed_s, "counters": report.counters, "step_s": report.step_s}

    def rgwkeeper_processes(self, bucket: str, n: int, more_endpoints: tuple[str, ...]) -> dict[str, Any]:
        """``rgwkeeper purge BUCKET`` and n-1 ``--join``s of it, each its own process."""
        cfg = self.workdir / "processes.toml"
        endpoints = [self.info.rgw_endpoint, *more_endpoints]
        cfg.write_text(f'[cluster]\nconf = "{self.info.conf}"\nkeyring = "{self.info.keyring}"\n'
                       f'[rgw]\nendpoints = {json.dumps(endpoints)}\n'
                       f'credentials_file = "{self.info.credentials_file}"\n'
                       f'[purge]\nstate_dir = "{self.workdir / "state"}"\ndirect_listing = "index"\n')
        base = [sys.executable, "-m", "rgwkeeper", "purge", "--config", str(cfg), bucket, "--yes", "--json"]
        err = self.workdir / f"lead-{bucket}.err"
        t0 = time.monotonic()
        with open(err, "w") as err_f:
            lead = subprocess.Popen(base, stdout=subprocess.PIPE, stderr=err_f, text=True, stdin=subprocess.DEVNULL)
            joins: list[subprocess.Popen[str]] = []
            stop = threading.Lock(), threading.Event()  # no join starts once the run is being torn down
            pool = ThreadPoolExecutor(max_workers=max(1, n - 1))
            try:
                deadline = time.monotonic() + 120
                while n > 1 and not (m := re.search(r"--join ([0-9a-f]{12})", err.read_text())):
                    if lead.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"the purge printed no id to join: {err.read_text()[-2000:]}")
                    time.sleep(0.02)
                pending = [pool.submit(join_to_end, [*base, "--join", m.group(1)], lead, joins, stop,
                                       self.workdir / f"join-{bucket}-{i}.err")
                           for i in range(n - 1)] if n > 1 else []
                out, _ = lead.communicate(timeout=3600)
                end = time.monotonic()
                joined = [f.result(timeout=600) for f in pending]
            finally:
                with stop[0]:
                    stop[1].set()
                for p in (lead, *joins):
                    if p.poll() is None:
                        p.kill()
                        p.wait()
                pool.shutdown(wait=True)
        if lead.returncode != 0:
            raise RuntimeError(f"rgwkeeper purge of {bucket}: exit {lead.returncode}: {err.read_text()[-2000:]}")
        report = json.loads(out)
        verified = end - t0
        free = verified - (report["elapsed_s"] - report["space_free_s"])
        return {"method": report["method"], "plan_s": 0.0, "free_s": free, "verified_s": verified,
                "step_s": report["step_s"],
                "per_process": [report["counters"].get("objects_deleted", 0) - sum(
                    j.get("counters", {}).get("objects_deleted", 0) for j in joined)]
                + [j.get("counters", {}).get("objects_deleted", 0) for j in joined]}

    def rados_floor(self, sizes: list[int]) -> dict[str, Any]:
        import rados

        prefix = f"benchmark_data_rgwkeeper_{os.getpid()}_{self.n}_"
        self.n += 1
        cluster = rados.Rados(conffile=str(self.info.conf), conf={"keyring": str(self.info.keyring)})
        cluster.connect(timeout=30)
        try:
            io = cluster.open_ioctx(DATA_POOL)
            done: list[Any] = []
            for i, size in enumerate(sizes):
                done.append(io.aio_write_full(f"{prefix}{i:06d}", b"f" * size))
                if len(done) >= 64:
                    for c in done:
                        c.wait_for_complete()
                    done = []
            for c in done:
                c.wait_for_complete()
            io.close()
        finally:
            cluster.shutdown()
        t0 = time.monotonic()
        subprocess.run(["rados", *self.base, "-p", DATA_POOL, "cleanup", "--prefix", prefix], check=True,
                       capture_output=True, timeout=3600)
        return {"free_s": time.monotonic() - t0, "left": self.rados_ls(prefix)}

    def run_method(self, method: str, tag: str, sizes: list[int], multipart_from: int | None) -> dict[str, Any]:
        load = os.getloadavg()[0]
        if method == "rados-floor":
            return {"method": method, "objects": len(sizes), "load": load, **self.rados_floor(sizes)}
        bucket = self.fresh_bucket(tag)
        self.fill(bucket, sizes, multipart_from)
        marker = self.marker(bucket)
        rados_objects = self.rados_ls(marker + "_")
        row: dict[str, Any] = {"method": method, "objects": len(sizes), "rados_objects": rados_objects, "load": load}
        cpu0 = cpu_now()
        t0 = time.monotonic()
        if method.startswith("rgwkeeper"):
            m = re.fullmatch(RGWKEEPER_METHOD, method)
            assert m is not None, method
            more = (self.info.rgw2_endpoint,) if m.group(4) else ()
            out = (self.rgwkeeper_processes(bucket, int(m.group(3)), more) if m.group(3) else
                   self.rgwkeeper(bucket, "index" if m.group(1) else "s3", int(m.group(2)) if m.group(2) else None,
                                  more, cap=float(m.group(5) or 0)))
            row.update(free_s=out["free_s"], api_s=out["free_s"], verified_s=out["verified_s"],
                       chosen=out["method"], plan_s=round(out["plan_s"], 3), step_s=out["step_s"],
                       **({"per_process": out["per_process"]} if "per_process" in out else {}))
        else:
            api_done = (self.s3_one_batch(bucket) if method == "s3-one-batch"
                        else self.admin_purge(bucket, bypass=method == "admin-purge-bypass-gc"))
            row["api_s"] = api_done - t0
            if method != "admin-purge-bypass-gc":
                self.admin("gc", "process", "--include-all")
            row["free_s"] = time.monotonic() - t0
        row["cpu_s_per_k"] = cpu_per_k(cpu0, cpu_now(), len(sizes))
        row["left"] = self.rados_ls(marker + "_")
        return row


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(r["method"], []).append(r)
    out: dict[str, Any] = {}
    for m, rs in by.items():
        free = statistics.median(r["free_s"] for r in rs)
        out[m] = {"free_s": round(free, 2), "objects_per_s": round(rs[0]["objects"] / free, 1),
                  "left": max(r["left"] for r in rs), "load": round(statistics.median(r["load"] for r in rs), 1)}
        if "api_s" in rs[0]:
            out[m]["api_s"] = round(statistics.median(r["api_s"] for r in rs), 2)
        if "chosen" in rs[0]:
            out[m]["chosen"] = rs[0]["chosen"]
        if "rados_objects" in rs[0]:
            out[m]["rados_objects"] = rs[0]["rados_objects"]
        if "cpu_s_per_k" in rs[0]:
            out[m]["cpu_s_per_k"] = {k: round(statistics.median(r["cpu_s_per_k"][k] for r in rs), 3)
                                     for k in rs[0]["cpu_s_per_k"]}
    stock = [out[m]["objects_per_s"] for m in STOCK if m in out]
    best = max(stock) if stock else None
    floor = out.get("rados-floor", {}).get("objects_per_s")
    for m, v in out.items():
        if best:
            v["x_best_stock"] = round(v["objects_per_s"] / best, 2)
        if floor:
            v["x_rados_floor"] = round(v["objects_per_s"] / floor, 2)
    return out


def run_set(b: Bench, tag: str, sizes: list[int], multipart_from: int | None, methods: list[str],
            repeat: int, log: Callable[[str], None]) -> dict[str, Any]:
    rows = []
    for r in range(repeat):
        for m in methods:
            row = b.run_method(m, tag, sizes, multipart_from)
            log(f"[{tag} #{r + 1}] {m}: {json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in row.items()})}")
            rows.append(row)
    return {"sizes": f"{min(sizes)}-{max(sizes)} B, {len(sizes)} objects, {sum(sizes) / 2**20:.1f} MiB",
            "summary": summarize(rows), "runs": rows}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--small", type=int, default=3000, help="objects in the small set (0: skip)")
    p.add_argument("--small-sizes", default="4KiB-64KiB")
    p.add_argument("--large", type=int, default=24, help="objects in the large set (0: skip)")
    p.add_argument("--large-sizes", default="8MiB-24MiB")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--seed", type=int, default=73348)
    p.add_argument("--methods", default=",".join((*STOCK, "rgwkeeper", "rados-floor")))
    args = p.parse_args()
    methods = args.methods.split(",")
    unknown = [m for m in methods if m not in (*STOCK, "rados-floor") and not re.fullmatch(RGWKEEPER_METHOD, m)
               or re.fullmatch(r"rgwkeeper.*-p\d.*-cap\d+", m)]
    if unknown:
        p.error(f"unknown method {unknown[0]!r}: {', '.join(STOCK)}, rgwkeeper, rgwkeeper-index, "
                "rgwkeeper-index-wN (N workers, 1 to 64), rgwkeeper-index-pN (N processes, 1 to 8), any "
                "rgwkeeper one with -2rgw, any in-process rgwkeeper one with -capR (R objects/s), rados-floor")
    rng = random.Random(args.seed)
    lo, hi = parse_range(args.small_sizes)
    small = [rng.randint(lo, hi) for _ in range(args.small)]
    lo, hi = parse_range(args.large_sizes)
    large = [rng.randint(lo, hi) for _ in range(args.large)]

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    from integration.cluster import ContainerCluster, external_from_env

    import tempfile

    with ExitStack() as stack:
        info = external_from_env() or stack.enter_context(ContainerCluster())
        # The cluster's own radosgw-admin (its release's, run in its container) for the stock
        # methods and for rgwkeeper alike; the host's is Pacific's.
        os.environ["PATH"] = info.env()["PATH"]
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-purge-")))
        b = Bench(info, workdir)
        if any(m.endswith("-2rgw") for m in methods):
            from integration.cluster import second_rgw

            stack.enter_context(second_rgw(info))
        out: dict[str, Any] = {}
        if small:
            out["small"] = run_set(b, "small", small, None, methods, args.repeat, log)
        if large:
            out["large"] = run_set(b, "large", large, len(large) // 2, methods, args.repeat, log)
    for name, res in out.items():
        print(f"\n{name}: {res['sizes']}")
        print(f"  {'method':24} {'free s':>8} {'api s':>8} {'obj/s':>8} {'x best stock':>13} {'x floor':>8} "
              f"{'left':>5} {'load':>5}   CPU s per 1,000 objects: host, osd, rgw, other")
        for m, v in res["summary"].items():
            print(f"  {m + (' (' + v['chosen'] + ')' if 'chosen' in v else ''):24} {v['free_s']:8.2f} "
                  f"{v.get('api_s', v['free_s']):8.2f} {v['objects_per_s']:8.1f} {v.get('x_best_stock', 0):13.2f} "
                  f"{v.get('x_rados_floor', 0):8.2f} {v['left']:5d} {v['load']:5.1f}   "
                  + ", ".join(f"{c:.3f}" for c in (v.get("cpu_s_per_k") or {}).values()))
    print(json.dumps({k: {"sizes": v["sizes"], "summary": v["summary"]} for k, v in out.items()}, indent=1))


if __name__ == "__main__":
    main()
