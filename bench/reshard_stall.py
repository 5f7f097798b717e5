"""The write stall of a dynamic reshard, next to a pre-sharded bucket, with the load generator's p99.

Two open-loop PUT loads (``rgwkeeper loadgen run``, latency timed from each request's intended
start, so a stall shows in full) run at the same time and rate: one into a bucket RGW creates
with its default shard count (11 on Pacific), one into a bucket ``rgwkeeper preshard`` sized
for the whole ingest. ``rgw_max_objs_per_shard`` is lowered so that the plain bucket crosses
RGW's threshold (shards x limit) early in the run. RGW notices that from its cached bucket
stats (``rgw_bucket_quota_ttl``, 600 s by default), so at test size its own check queues the
reshard minutes late; the bench therefore queues it at ``--queue-at`` seconds with
``radosgw-admin reshard add`` (the same queue, with the shard count RGW's check would ask
for: twice the objects over the limit, the next prime), and RGW's reshard thread
(``rgw_reshard_thread_interval``, 10 s on the test cluster) reshards the bucket while it is
written, as a dynamic reshard does. The plain bucket's shard count is polled every 0.5 s to
place the reshard in time.

Reported, per bucket and in the same run: PUT p99 and max over the whole run, errors, the
worst per-second p99 from 2 s before the reshard was queued to the end of the run and before
that, with the second it happened; and the ratio plain / pre-sharded of each. Latency counts
from each request's intended start and is binned by when the request ended, so a stall shows
in the seconds its blocked requests complete, after the reshard itself. On Pacific a reshard
blocks writes to that bucket while it copies the index, so the stall grows with the number of
objects at the time of the reshard; at this size it is small, which is reported as measured.

    .venv/bin/python -m bench.reshard_stall [--rate 60] [--duration 120] [--limit 100] [--queue-at 60]

Boots the containerized Ceph unless RGWKEEPER_TEST_CEPH_CONF & co name a cluster.
"""

from __future__ import annotations

import argparse
import calendar
import json
import math
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from rgwkeeper.policy.shards import next_prime

DEFAULT_SHARDS = 11  # what RGW gives a new bucket on Pacific (rgw_override_bucket_index_max_shards = 0)


def _admin(info: Any, *args: str) -> Any:
    out = subprocess.run(["radosgw-admin", "--conf", str(info.conf), "--keyring", str(info.keyring), *args],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    return json.loads(out) if out.strip() else None


def _rgwkeeper(*args: str, workdir: Path) -> list[str]:
    cfg = workdir / "rgwkeeper.toml"
    if not cfg.exists():
        cfg.write_text("[loadgen]\nwarmup = 0.0\n")
    return [sys.executable, "-m", "rgwkeeper", args[0], *args[1:], "--config", str(cfg)]


def _loadgen_argv(info: Any, prefix: str, out: Path, rate: float, duration: float, workdir: Path) -> list[str]:
    return _rgwkeeper("loadgen", "run", "--rgw-endpoint", info.rgw_endpoint, "--rgw-credentials",
                      str(info.credentials_file), "--mix", "PUT=100", "--size", "1KiB", "--rate", str(rate),
                      "--concurrency", "64", "--duration", str(duration), "--objects", "0", "--buckets", "1",
                      "--workers", "1", "--warmup", "0", "--bucket-prefix", prefix, "--out", str(out),
                      "--no-progress", workdir=workdir)


def _p99_series(result: dict[str, Any]) -> list[float | None]:
    return result["series"]["ops"]["PUT"]["p99_ms"]


def _summary(result: dict[str, Any], window: tuple[int, int]) -> dict[str, Any]:
    p99 = _p99_series(result)
    lo, hi = window
    inside = [(v, i) for i, v in enumerate(p99) if v is not None and lo <= i < hi]
    outside = [(v, i) for i, v in enumerate(p99) if v is not None and not lo <= i < hi]
    run = result["windows"]["run"]["per_op"]["PUT"]
    worst_in, worst_out = max(inside, default=(None, None)), max(outside, default=(None, None))
    return {"puts": run["requests"] - run["errors"], "errors": run["errors"], "p99_ms": run["latency_ms"]["p99"],
            "max_ms": run["latency_ms"]["max"],
            "worst_second_p99_ms_from_reshard": worst_in[0], "at_s": worst_in[1],
            "worst_second_p99_ms_before": worst_out[0], "before_at_s": worst_out[1],
            "errors_per_second": {i: e for i, e in enumerate(result["series"]["ops"]["PUT"]["errors"]) if e}}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rate", type=float, default=60.0, help="PUT/s into each bucket")
    p.add_argument("--duration", type=float, default=120.0)
    p.add_argument("--queue-at", type=float, default=60.0, help="seconds into the run the reshard is queued")
    p.add_argument("--limit", type=int, default=100, help="rgw_max_objs_per_shard during the run")
    p.add_argument("--plot", type=Path, help="write a PNG of per-second PUT p99 of both buckets here")
    args = p.parse_args()
    expected = int(args.rate * args.duration * 1.2)

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    from integration.cluster import ContainerCluster, external_from_env

    with ExitStack() as stack:
        info = external_from_env() or stack.enter_context(ContainerCluster())
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-reshard-")))
        tag = uuid.uuid4().hex[:6]
        plain, pre = f"stall-{tag}-plain", f"stall-{tag}-pre"
        info.ceph("config", "set", "client", "rgw_max_objs_per_shard", str(args.limit))
        stack.callback(info.ceph, "config", "rm", "client", "rgw_max_objs_per_shard")
        made = subprocess.run(_rgwkeeper("preshard", f"{pre}-000", "--expected-objects", str(expected),
                                         "--conf", str(info.conf), "--keyring", str(info.keyring),
                                         "--rgw-endpoint", info.rgw_endpoint, "--rgw-credentials",
                                         str(info.credentials_file), "--json", workdir=workdir),
                              capture_output=True, text=True, timeout=300)
        if made.returncode:
            raise SystemExit(f"preshard failed: {made.stderr.strip()}")
        pre_shards = json.loads(made.stdout)["wanted_shards"]
        log(f"threshold of the plain bucket: {DEFAULT_SHARDS} x {args.limit} = {DEFAULT_SHARDS * args.limit} "
            f"objects; pre-sharded bucket: {pre_shards} shards for {expected:,}")

        shards_seen: list[tuple[float, int]] = []
        stop = threading.Event()

        def watch() -> None:
            while not stop.is_set():
                try:
                    shards_seen.append((time.time(), int(_admin(info, "bucket", "stats", "--bucket",
                                                                f"{plain}-000")["num_shards"])))
                except (subprocess.CalledProcessError, TypeError, KeyError):
                    pass  # not created yet
                time.sleep(0.5)

        outs = {plain: workdir / "plain.json", pre: workdir / "pre.json"}
        procs = {b: subprocess.Popen(_loadgen_argv(info, b, outs[b], args.rate, args.duration, workdir),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                 for b in (plain, pre)}
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        time.sleep(args.queue_at)
        objects = int(_admin(info, "bucket", "stats", "--bucket", f"{plain}-000")["usage"]["rgw.main"]["num_objects"])
        new_shards = next_prime(max(DEFAULT_SHARDS + 1, 2 * objects // args.limit))
        subprocess.run(["radosgw-admin", "--conf", str(info.conf), "--keyring", str(info.keyring), "reshard", "add",
                        "--bucket", f"{plain}-000", "--num-shards", str(new_shards)], check=True, timeout=120,
                       capture_output=True)
        log(f"queued the reshard of {plain}-000 at {objects:,} objects: {DEFAULT_SHARDS} -> {new_shards} shards")
        try:
            for b, proc in procs.items():
                _, err = proc.communicate(timeout=args.duration + 600)
                if proc.returncode:
                    raise SystemExit(f"loadgen into {b} failed: {err.strip()[-500:]}")
        finally:
            stop.set()
            watcher.join(10)
            for proc in procs.values():
                if proc.poll() is None:
                    proc.kill()
        results = {b: json.loads(outs[b].read_text()) for b in (plain, pre)}
        resharded = next((t for t, n in shards_seen if n > DEFAULT_SHARDS), None)
        final_shards = shards_seen[-1][1] if shards_seen else None

    report: dict[str, Any] = {"rate_per_bucket": args.rate, "duration_s": args.duration,
                              "reshard_queued_at_s": args.queue_at, "plain_objects_at_queue": objects,
                              "rgw_max_objs_per_shard": args.limit, "pre_shards": pre_shards,
                              "plain_shards_after": final_shards}
    if resharded is None:
        report["note"] = "the plain bucket was not resharded during the run: raise --duration or lower --limit"
        window = (0, 0)
    else:
        t0 = calendar.timegm(time.strptime(results[plain]["started_at"], "%Y-%m-%dT%H:%M:%SZ"))
        at = resharded - t0
        report["reshard_seen_at_s"] = round(at, 1)
        window = (max(0, math.floor(args.queue_at) - 2), len(_p99_series(results[plain])))
    report["plain"] = _summary(results[plain], window)
    report["presharded"] = _summary(results[pre], window)

    def ratio(key: str) -> float | None:
        a, b = report["plain"][key], report["presharded"][key]
        return round(a / b, 2) if a and b else None

    report["ratio_plain_over_presharded"] = {k: ratio(k) for k in (
        "p99_ms", "max_ms", "worst_second_p99_ms_from_reshard", "worst_second_p99_ms_before")}
    report["per_second_p99_ms"] = {"plain": _p99_series(results[plain]), "presharded": _p99_series(results[pre])}
    if args.plot:
        _plot(report, args.plot)
    print(json.dumps(report, indent=1))


def _plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 3.6))
    for name, label in (("plain", "RGW default shards, resharded dynamically"),
                        ("presharded", f"rgwkeeper preshard ({report['pre_shards']} shards)")):
        ys = [v if v is not None else float("nan") for v in report["per_second_p99_ms"][name]]
        ax.plot(range(len(ys)), ys, label=label, drawstyle="steps-post")
    ax.axvline(report["reshard_queued_at_s"], color="grey", linestyle="--", label="reshard queued")
    if "reshard_seen_at_s" in report:
        ax.axvline(report["reshard_seen_at_s"], color="black", linestyle=":", label="new shard count seen")
    ax.set_yscale("log")
    ax.set_xlabel("seconds into the run")
    ax.set_ylabel("PUT p99 per second, ms (log)")
    ax.set_title(f"{report['rate_per_bucket']:g} PUT/s into each bucket, open loop; "
                 f"{report.get('plain_objects_at_queue', 0):,} objects at the reshard")
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


if __name__ == "__main__":
    main()
