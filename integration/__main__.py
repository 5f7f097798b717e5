"""Command line for the harness.

    python -m integration up [--info-file F]   boot a cluster, print how to reach it, wait for
                                               SIGINT/SIGTERM, then tear everything down
    python -m integration demo [--out DIR]     boot, show the daemon, a purge and its verdict, tear down
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
            "RGWKEEPER_TEST_RGW2_ENDPOINT": info.rgw2_endpoint,
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
    from integration import demo

    return demo.main(Path(args.out), args.objects, args.shard_limit, args.purge_objects)


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
    d.add_argument("--purge-objects", type=int, default=2000, help="objects in the bucket the demo purges")
    d.add_argument("--out", default="rgwkeeper-demo", help="directory for the files the demo writes")
    b = sub.add_parser("bench-start")
    b.add_argument("-n", type=int, default=3)
    args = p.parse_args()
    return {"up": _up, "demo": _demo, "bench-start": _bench_start}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
