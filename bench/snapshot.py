"""Snapshot speed.

1. Live: one full rgwkeeper snapshot (cluster commands, per-OSD perf dump and config get in
   parallel, all bucket stats in one admin API call) against the stock way of getting the
   same data: the `ceph` CLI one command at a time, `ceph tell osd.N ...` per OSD and option,
   `radosgw-admin bucket stats` for all buckets.
2. Synthetic: :func:`rgwkeeper.snapshot.parse` on generated observations of 1,000 OSDs and
   10,000 buckets, scaled 1x, 4x and 16x, to show it is linear.

    .venv/bin/python -m bench.snapshot [--repeat 5] [--synthetic-only]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import statistics
import subprocess
import time
from contextlib import ExitStack
from typing import Any

from rgwkeeper.config import Config
from rgwkeeper.snapshot import parse
from tests.unit.fakes import load_fixture


def synthetic(n_osds: int, n_buckets: int) -> dict[str, Any]:
    base = load_fixture("observation.json")
    raw = copy.deepcopy(base)
    osd0 = base["osd_dump"]["osds"][0]
    node0 = base["osd_df"]["nodes"][0]
    raw["osd_dump"]["osds"] = [{**osd0, "osd": i} for i in range(n_osds)]
    raw["osd_df"]["nodes"] = [{**node0, "id": i, "name": f"osd.{i}", "kb_used": node0["kb_used"] + i}
                              for i in range(n_osds)]
    perf = base["osd_bluefs"]["0"]
    raw["osd_bluefs"] = {str(i): {"bluefs": {**perf["bluefs"], "slow_used_bytes": (i % 3) * 1024}}
                         for i in range(n_osds)}
    conf = base["osd_config"]["0"]
    raw["osd_config"] = {str(i): dict(conf) for i in range(n_osds)}
    b0 = base["buckets"][0]
    raw["buckets"] = [{**b0, "bucket": f"bucket-{i:06d}", "num_shards": 11,
                       "usage": {"rgw.main": {**b0["usage"]["rgw.main"], "num_objects": i * 97}}}
                      for i in range(n_buckets)]
    raw["reshard_queue"] = [{"tenant": "", "bucket_name": f"bucket-{i:06d}"} for i in range(0, n_buckets, 50)]
    return raw


def time_parse(raw: dict[str, Any], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        parse(raw)
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def bench_synthetic(repeat: int) -> dict[str, Any]:
    rows = []
    for scale in (1, 4, 16):
        raw = synthetic(1000 * scale, 10_000 * scale)
        t = time_parse(raw, repeat)
        rows.append({"scale": scale, "osds": 1000 * scale, "buckets": 10_000 * scale, "parse_ms": round(t * 1000, 1)})
    base = rows[0]["parse_ms"]
    for r in rows:
        r["ms_per_1x"] = round(r["parse_ms"] / r["scale"], 1)
        r["ratio_to_1x"] = round(r["parse_ms"] / base, 2)
    return {"synthetic_parse": rows}


def _ceph(info, *args: str) -> str:
    return subprocess.run(["ceph", "--conf", str(info.conf), "--keyring", str(info.keyring), "--format", "json", *args],
                          capture_output=True, text=True, check=True, timeout=60).stdout


def stock_sequential(info, osd_ids: list[int], buckets: list[str], options: list[str]) -> None:
    for cmd in (["status"], ["health", "detail"], ["df"], ["osd", "dump"], ["osd", "df"],
                ["osd", "pool", "stats"], ["versions"], ["config", "get", "client.rgw", "rgw_max_objs_per_shard"]):
        json.loads(_ceph(info, *cmd))
    for osd in osd_ids:
        json.loads(_ceph(info, "tell", f"osd.{osd}", "perf", "dump", "bluefs"))
        for opt in options:
            _ceph(info, "tell", f"osd.{osd}", "config", "get", opt)
    subprocess.run(["radosgw-admin", "--conf", str(info.conf), "--keyring", str(info.keyring), "bucket", "stats"],
                   capture_output=True, check=True, timeout=120)
    subprocess.run(["radosgw-admin", "--conf", str(info.conf), "--keyring", str(info.keyring), "reshard", "list"],
                   capture_output=True, check=True, timeout=120)


def bench_live(info, repeat: int) -> dict[str, Any]:
    from rgwkeeper.access import ClusterAccess
    from rgwkeeper.cli.status import take_snapshot

    access = ClusterAccess(conf=info.conf, keyring=info.keyring, client_name="client.admin",
                           rgw_endpoint=info.rgw_endpoint, rgw_credentials_file=info.credentials_file, timeout_s=20)
    cfg = Config()
    ours, stock = [], []
    snap = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        snap, raw = take_snapshot(cfg, access)
        ours.append(time.perf_counter() - t0)
    assert snap is not None
    osd_ids = [o.osd_id for o in snap.osds]
    for _ in range(repeat):
        t0 = time.perf_counter()
        stock_sequential(info, osd_ids, [b.bucket for b in snap.buckets], cfg.observe.scrub_options)
        stock.append(time.perf_counter() - t0)
    m_ours, m_stock = statistics.median(ours), statistics.median(stock)
    return {"live": {"osds": len(osd_ids), "buckets": len(snap.buckets),
                     "rgwkeeper_snapshot_s": round(m_ours, 3), "ceph_cli_sequential_s": round(m_stock, 3),
                     "speedup": round(m_stock / m_ours, 1), "samples": repeat}}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--synthetic-only", action="store_true")
    args = p.parse_args()
    out = bench_synthetic(args.repeat)
    if not args.synthetic_only:
        from integration.cluster import ContainerCluster, external_from_env

        with ExitStack() as stack:
            info = external_from_env() or stack.enter_context(ContainerCluster())
            out.update(bench_live(info, args.repeat))
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
