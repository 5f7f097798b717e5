"""Many buckets: a tenant's set of small buckets deleted the stock way, one bucket at a time,
and as one `rgwkeeper purge --match` job.

For each method, N fresh buckets of M objects each (4 KiB) are written and then deleted by:

- ``stock-rm-loop``: ``radosgw-admin bucket rm --bucket B --purge-objects`` for each bucket in
  turn (what a shell loop over ``bucket list`` does), then ``gc process --include-all``;
- ``stock-s3-loop``: per bucket, list and S3 DeleteObjects 1000 keys at a time, then
  DeleteBucket (``aws s3 rb --force`` in a loop), then ``gc process --include-all``;
- ``rgwkeeper-wK``: ``rgwkeeper purge --match '<prefix>-*' --workers K --yes`` (one process, K
  buckets at once, each with its own plan and end-state read-back), the process's start counted.

The time is until every bucket is gone and its space free. The data pool is listed for each
bucket's marker afterwards: anything left is reported. Ratios are against the faster stock
loop of the same run; the machine is shared and noisy.

    .venv/bin/python -m bench.purge_many [--buckets 20] [--objects 300] [--repeat 2] [--methods ...]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.purge import DATA_POOL, Bench

STOCK = ("stock-rm-loop", "stock-s3-loop")
RGWKEEPER = r"rgwkeeper-w([1-9]|[1-5][0-9]|6[0-4])"


class ManyBench(Bench):
    def buckets(self, tag: str, n: int, objects: int) -> tuple[str, list[str], dict[str, str]]:
        self.n += 1
        prefix = f"bench-many-{tag}-{self.n}-{os.getpid()}"
        names = [f"{prefix}-{i:04d}" for i in range(n)]
        for b in names:
            self.s3.create_bucket(Bucket=b)
        body = b"x" * 4096
        with ThreadPoolExecutor(32) as ex:
            list(ex.map(lambda a: self.s3.put_object(Bucket=a[0], Key=f"obj/{a[1]:06d}", Body=body),
                        [(b, i) for b in names for i in range(objects)]))
        return prefix, names, {b: self.marker(b) for b in names}

    def left(self, markers: dict[str, str]) -> int:
        out = subprocess.run(["rados", *self.base, "-p", DATA_POOL, "ls"], capture_output=True, text=True,
                             timeout=600, check=True).stdout
        return sum(1 for line in out.splitlines() if any(line.startswith(m + "_") for m in markers.values()))

    def rgwkeeper_job(self, prefix: str, workers: int) -> dict[str, Any]:
        cfg = self.workdir / "many.toml"
        cfg.write_text(f'[cluster]\nconf = "{self.info.conf}"\nkeyring = "{self.info.keyring}"\n'
                       f'[rgw]\nendpoints = ["{self.info.rgw_endpoint}"]\n'
                       f'credentials_file = "{self.info.credentials_file}"\n'
                       f'[purge]\nstate_dir = "{self.workdir / "state"}"\ndirect_listing = "index"\n')
        proc = subprocess.run([sys.executable, "-m", "rgwkeeper", "purge", "--config", str(cfg), "--match",
                               f"{prefix}-*", "--workers", str(workers), "--yes", "--json"],
                              capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=3600)
        if proc.returncode != 0:
            raise RuntimeError(f"rgwkeeper purge --match: exit {proc.returncode}: {proc.stderr[-2000:]}")
        doc = json.loads(proc.stdout)
        return {"methods": sorted({o["method"] for o in doc["here"]})}

    def run_method(self, method: str, n: int, objects: int) -> dict[str, Any]:  # type: ignore[override]
        load = os.getloadavg()[0]
        prefix, names, markers = self.buckets(method.replace("-", ""), n, objects)
        row: dict[str, Any] = {"method": method, "buckets": n, "objects": n * objects, "load": round(load, 1)}
        t0 = time.monotonic()
        if method == "stock-rm-loop":
            for b in names:
                self.admin("bucket", "rm", "--bucket", b, "--purge-objects")
        elif method == "stock-s3-loop":
            from bench.s3_one_batch import empty_and_remove

            for b in names:
                empty_and_remove(self.s3, b)
        else:
            m = re.fullmatch(RGWKEEPER, method)
            assert m is not None, method
            row.update(self.rgwkeeper_job(prefix, int(m.group(1))))
        if method in STOCK:
            self.admin("gc", "process", "--include-all")
        row["free_s"] = round(time.monotonic() - t0, 3)
        row["left"] = self.left(markers)
        return row


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--buckets", type=int, default=20)
    p.add_argument("--objects", type=int, default=300, help="4 KiB objects in each bucket")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--methods", default="stock-rm-loop,stock-s3-loop,rgwkeeper-w1,rgwkeeper-w4")
    args = p.parse_args()
    methods = args.methods.split(",")
    bad = [m for m in methods if m not in STOCK and not re.fullmatch(RGWKEEPER, m)]
    if bad:
        p.error(f"unknown method {bad[0]!r}: {', '.join(STOCK)}, rgwkeeper-wK (K buckets at once, 1 to 64)")

    from integration.cluster import ContainerCluster, external_from_env

    rows: list[dict[str, Any]] = []
    with ExitStack() as stack:
        info = external_from_env() or stack.enter_context(ContainerCluster())
        os.environ["PATH"] = info.env()["PATH"]  # the cluster's own radosgw-admin, for stock and rgwkeeper alike
        b = ManyBench(info, Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-many-"))))
        for r in range(args.repeat):
            for m in methods:
                row = b.run_method(m, args.buckets, args.objects)
                print(f"[#{r + 1}] {json.dumps(row)}", file=sys.stderr, flush=True)
                rows.append(row)
    by: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by.setdefault(row["method"], []).append(row)
    free = {m: statistics.median(r["free_s"] for r in rs) for m, rs in by.items()}
    best = min((free[m] for m in STOCK if m in free), default=None)
    print(f"\n{args.buckets} buckets x {args.objects} x 4 KiB, medians of {args.repeat}")
    print(f"  {'method':16} {'free s':>8} {'obj/s':>8} {'x best stock':>13} {'left':>5} {'load':>5}")
    for m, rs in by.items():
        ratio = f"{best / free[m]:13.2f}" if best else f"{'':13}"
        print(f"  {m:16} {free[m]:8.2f} {rs[0]['objects'] / free[m]:8.0f} {ratio} {max(r['left'] for r in rs):5d} "
              f"{statistics.median(r['load'] for r in rs):5.1f}")
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
