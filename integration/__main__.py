"""Command line for the harness.

    python -m integration up [--info-file F]   boot a cluster, print how to reach it, wait for
                                               SIGINT/SIGTERM, then tear everything down
    python -m integration demo                 boot, write sample buckets, run rgwkeeper status, tear down
    python -m integration bench-start [-n N]   measure start to ready N times (warm start)
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from pathlib import Path

from integration.cluster import ContainerCluster
from integration.errors import HarnessError


def _up(args: argparse.Namespace) -> int:
    stop = threading.Event()

    def on_signal(*_: object) -> None:
        # While booting, end the boot (start() tears down what it made); once up, end the wait.
        if not booted.is_set():
            raise KeyboardInterrupt
        stop.set()

    booted = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    cluster = ContainerCluster()
    try:  # stop() is safe to repeat: start() already stops what it made if it fails
        try:
            info = cluster.start()
        except HarnessError as exc:
            print(f"integration: {exc}", file=sys.stderr)
            return 3
        except KeyboardInterrupt:
            print("integration: interrupted while booting; nothing left running", file=sys.stderr)
            return 130
        booted.set()
        env = {
            "RGWKEEPER_TEST_CEPH_CONF": str(info.conf),
            "RGWKEEPER_TEST_KEYRING": str(info.keyring),
            "RGWKEEPER_TEST_RGW_ENDPOINT": info.rgw_endpoint,
            "RGWKEEPER_TEST_RGW_CREDENTIALS": str(info.credentials_file),
            **({"RGWKEEPER_TEST_TOOLS_DIR": str(info.tools_dir)} if info.tools_dir else {}),
        }
        text = "".join(f"export {k}={v}\n" for k, v in env.items())
        if args.info_file:
            Path(args.info_file).write_text(text)
        print(text + f"# ready in {cluster.timings['total_s']:.1f} s; Ctrl-C or SIGTERM tears it down", flush=True)
        stop.wait()
    finally:
        cluster.stop()
    return 0


def _demo(args: argparse.Namespace) -> int:
    """Boot, write a few buckets, run `rgwkeeper status` (table and JSON summary), tear down."""
    import os
    import subprocess

    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(SystemExit(143)))
    cluster = ContainerCluster()
    try:
        print("demo: booting a containerized Ceph (mon, mgr, 3 BlueStore OSDs, RGW) ...", flush=True)
        try:
            info = cluster.start()
        except HarnessError as exc:
            print(f"demo: {exc}", file=sys.stderr)
            return 3
        print(f"demo: ready in {cluster.timings['total_s']:.1f} s; writing sample buckets", flush=True)
        # A lowered reshard threshold so the bucket table has something to flag at demo size.
        info.ceph("config", "set", "client", "rgw_max_objs_per_shard", str(args.shard_limit))
        _fill_buckets(info, args.objects)
        flags = ["--conf", str(info.conf), "--keyring", str(info.keyring), "--rgw-endpoint", info.rgw_endpoint,
                 "--rgw-credentials", str(info.credentials_file)]
        rgwkeeper = [sys.executable, "-m", "rgwkeeper"]
        print(f"\n$ rgwkeeper status {' '.join(flags)}", flush=True)
        subprocess.run([*rgwkeeper, "status", *flags], check=True, env={**os.environ, "COLUMNS": "100"})
        out = subprocess.run([*rgwkeeper, "status", "--json", *flags], check=True, capture_output=True, text=True)
        snap = json.loads(out.stdout)
        print("\n$ rgwkeeper status --json | (summary)")
        print(json.dumps({"health": snap["health_status"], "release": snap["release"],
                          **snap["derived"], "collect_seconds": snap["collect_seconds"],
                          "buckets": {b["bucket"]: b["fill_status"] for b in snap["buckets"]}}, indent=1))
        return 0
    finally:
        cluster.stop()
        print("demo: cluster removed", flush=True)


def _fill_buckets(info, objects: int) -> None:
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

    import boto3
    from botocore.config import Config

    access, secret = info.credentials()
    s3 = boto3.client("s3", endpoint_url=info.rgw_endpoint, aws_access_key_id=access,
                      aws_secret_access_key=secret, region_name="default",
                      config=Config(s3={"addressing_style": "path"}, max_pool_connections=16))
    plan = {"ingest-2026-11": objects, "logs": objects // 4, "archive": 3}
    for bucket, n in plan.items():
        s3.create_bucket(Bucket=bucket)
        # One index shard so the demo's small buckets approach the lowered limit.
        subprocess.run(["radosgw-admin", "--conf", str(info.conf), "--keyring", str(info.keyring), "bucket",
                        "reshard", "--bucket", bucket, "--num-shards", "1", "--yes-i-really-mean-it"],
                       check=True, capture_output=True, timeout=60)
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda i, b=bucket: s3.put_object(Bucket=b, Key=f"obj/{i:06d}", Body=b"x" * 4096),
                          range(n)))


def _bench_start(args: argparse.Namespace) -> int:
    results = []
    for _ in range(args.n):
        cluster = ContainerCluster()
        t0 = time.monotonic()
        try:
            cluster.start()
            results.append({"ready_s": round(time.monotonic() - t0, 2),
                            **{k: round(v, 2) for k, v in cluster.timings.items()}})
        finally:
            cluster.stop()
    print(json.dumps(results, indent=1))
    return 0


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m integration")
    sub = p.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up")
    up.add_argument("--info-file")
    d = sub.add_parser("demo")
    d.add_argument("--objects", type=int, default=200, help="objects in the largest sample bucket")
    d.add_argument("--shard-limit", type=int, default=220, help="rgw_max_objs_per_shard for the demo")
    b = sub.add_parser("bench-start")
    b.add_argument("-n", type=int, default=3)
    args = p.parse_args()
    return {"up": _up, "demo": _demo, "bench-start": _bench_start}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
