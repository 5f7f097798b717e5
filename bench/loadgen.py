"""Client CPU per request: rgwkeeper's load generator against warp, same RGW, same run.

On a 2-core box every CPU-millisecond the generator spends is taken from the cluster it is
measuring. For each operation (PUT, GET of 4 KiB objects) and each concurrency (16, 64),
both tools run for the same duration against the same bucket layout, one after the other
(the order alternates between repeats), and for each run:

- CPU: user + system time of the tool's whole process tree (``getrusage(RUSAGE_CHILDREN)``
  around the run: worker processes included, start-up and the tool's own report included);
- requests: RGW's own ``req`` counter (``perf dump rgw`` on its admin socket, read inside
  the cluster's container before and after), so both tools are counted by the same party,
  listing and bucket checks included;
- CPU per request = the two divided; the ratio rgwkeeper / warp is printed (below 1: cheaper);
- steady state: the same, sampled between 25% and 85% of the run's duration (the tool's
  process tree from /proc, RGW's counter at the same moments): CPU spent *while* the tool
  loads the cluster, without start-up, preparation and the final report. This is the CPU
  taken from the cluster during the measurement; both numbers are reported.

rgwkeeper also reports its load-phase CPU per request itself (``client.cpu_ms_per_request``),
shown as ``self``; warp has no such number.

warp is not vendored or fetched by this script: build v1.3.1 by hand (docs/loadgen.md) and
pass ``--warp PATH``. Both tools get the credentials through the environment or a 0600 file,
never argv; warp signs with UNSIGNED-PAYLOAD too (``--disable-sha256-payload``), as rgwkeeper does.

    .venv/bin/python -m bench.loadgen --warp /var/tmp/warp-build/warp [--duration 30] [--repeat 1]

Boots the containerized Ceph unless RGWKEEPER_TEST_CEPH_CONF & co name one (it must be one of
the harness's containers: the RGW counter is read inside it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from rgwkeeper.access import load_credentials
from rgwkeeper.loadgen.client import S3Client

OBJECT_SIZE = "4KiB"
GET_OBJECTS = 1000


class RgwCounter:
    """RGW's request counter, read through its admin socket inside the cluster's container."""

    def __init__(self, info: Any) -> None:
        from integration import engine as engine_mod
        from integration.cluster import CACHE_DIR

        self._engine = engine_mod.find_or_start(CACHE_DIR)
        self._client = self._engine.client(timeout=60)
        cid = info.container_id
        if cid is None:
            run_dir = str(Path(info.conf).parent)
            found = [c for c in self._client.containers.list(filters={"label": engine_mod.LABEL})
                     if c.labels.get("io.rgwkeeper.test.run-dir") == run_dir]
            if not found:
                raise SystemExit("bench.loadgen: the cluster must be one of the harness's containers")
            cid = found[0].id
        self._container = self._client.containers.get(cid)

    def requests(self) -> int:
        r = self._container.exec_run(
            ["sh", "-c", "ceph --admin-daemon /var/run/ceph/ceph-client.rgw.gw.*.asok perf dump rgw"])
        if r.exit_code != 0:
            raise SystemExit(f"bench.loadgen: perf dump failed: {r.output.decode()[-300:]}")
        return int(json.loads(r.output)["rgw"]["req"])

    def close(self) -> None:
        self._client.close()
        self._engine.stop()


def _cpu_children() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


_TICK = os.sysconf("SC_CLK_TCK")


def tree_cpu(root: int) -> float:
    """User + system seconds of ``root`` and its live descendants, from /proc."""
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry)
        parents[pid] = int(fields[1])
        cpu[pid] = (int(fields[11]) + int(fields[12])) / _TICK
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += cpu.get(pid, 0.0)
        todo.extend(p for p, pp in parents.items() if pp == pid)
    return total


def measure(argv: list[str], env: dict[str, str], counter: RgwCounter, duration: float,
            timeout: float) -> dict[str, Any]:
    """Whole-process CPU / requests, and steady state: the same between 25% and 85% of the load."""
    req0, cpu0, t0 = counter.requests(), _cpu_children(), time.monotonic()
    # warp writes its benchdata (warp-OP-DATE.json.zst) into its working directory: a scratch one.
    scratch = tempfile.TemporaryDirectory(prefix="bench-loadgen-")
    proc = subprocess.Popen(argv, env=env, cwd=scratch.name, stdout=subprocess.PIPE,  # noqa: S603
                            stderr=subprocess.PIPE, text=True)
    samples = []
    try:
        for at in (0.25, 0.85):
            time.sleep(max(0.0, t0 + at * duration - time.monotonic()))
            c1 = tree_cpu(proc.pid)
            r = counter.requests()
            samples.append(((c1 + tree_cpu(proc.pid)) / 2, r))
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        scratch.cleanup()
    cpu, wall = _cpu_children() - cpu0, time.monotonic() - t0
    requests = counter.requests() - req0
    if proc.returncode != 0:
        raise SystemExit(f"bench.loadgen: {Path(argv[0]).name} {' '.join(argv[1:3])} exited {proc.returncode}: "
                         f"{err.strip()[-500:]}")
    steady_cpu, steady_req = samples[1][0] - samples[0][0], samples[1][1] - samples[0][1]
    return {"cpu_s": round(cpu, 3), "wall_s": round(wall, 2), "requests": requests,
            "cpu_ms_per_request": round(cpu / requests * 1000, 3) if requests else None,
            "steady_cpu_s": round(steady_cpu, 3), "steady_requests": steady_req,
            "steady_cpu_ms_per_request": round(steady_cpu / steady_req * 1000, 3) if steady_req else None,
            "stdout": out}


def warp_argv(warp: str, op: str, info: Any, bucket: str, concurrency: int, duration: int) -> list[str]:
    host = info.rgw_endpoint.split("://", 1)[1]
    common = ["--host", host, "--region", "default", "--bucket", bucket, "--concurrent", str(concurrency),
              "--obj.size", OBJECT_SIZE, "--duration", f"{duration}s", "--noclear", "--disable-sha256-payload",
              "--no-color", "--quiet"]
    if op == "GET":
        return [warp, "get", "--list-existing", *common]
    return [warp, "put", *common]


def rgwkeeper_argv(op: str, info: Any, prefix: str, concurrency: int, duration: float, *,
                   skip_prepare: bool = True) -> list[str]:
    argv = [sys.executable, "-m", "rgwkeeper.loadgen", "run", "--rgw-endpoint", info.rgw_endpoint,
            "--rgw-credentials", str(info.credentials_file), "--mix", f"{op}=100", "--size", OBJECT_SIZE,
            "--concurrency", str(concurrency), "--duration", str(duration), "--bucket-prefix", prefix,
            "--objects", str(GET_OBJECTS), "--keep", "--json", "--no-progress", "--warmup", "0"]
    if op == "GET" and skip_prepare:
        argv.append("--skip-prepare")
    return argv


async def _empty_bucket(info: Any, bucket: str) -> None:
    async with S3Client(info.rgw_endpoint, load_credentials(info.credentials_file), timeout_s=120) as s3:
        if not await s3.bucket_exists(bucket):
            return
        while keys := list(await s3.list_keys(bucket)):
            await asyncio.gather(*(s3.delete_objects(bucket, keys[i:i + 1000]) for i in range(0, len(keys), 1000)))
        await s3.delete_bucket(bucket)


def run(info: Any, warp: str, duration: int, repeat: int, concurrencies: list[int], ops: list[str],
        cleanup: bool = True) -> dict[str, Any]:
    creds = load_credentials(info.credentials_file)
    env = {**os.environ, "WARP_ACCESS_KEY": creds.access_key, "WARP_SECRET_KEY": creds.secret_key}
    counter = RgwCounter(info)
    stem = f"bench-lg-{uuid.uuid4().hex[:6]}"
    buckets: list[str] = []
    rows = []
    try:
        # GET needs objects: rgwkeeper writes them (same seed and workers as the measured runs,
        # so --skip-prepare finds them) and warp reads the same bucket (--list-existing).
        get_prefix = f"{stem}-get"
        buckets.append(f"{get_prefix}-000")
        if "GET" in ops:
            measure(rgwkeeper_argv("GET", info, get_prefix, 16, 1, skip_prepare=False), env, counter, 1, 600)
        for op in ops:
            for conc in concurrencies:
                for r in range(repeat):
                    order = ("rgwkeeper", "warp") if r % 2 == 0 else ("warp", "rgwkeeper")
                    row: dict[str, Any] = {"op": op, "concurrency": conc, "repeat": r, "size": OBJECT_SIZE,
                                           "duration_s": duration}
                    for tool in order:
                        if op == "GET":
                            prefix = get_prefix
                        else:
                            prefix = f"{stem}-{tool[0]}{op.lower()}{conc}-{r}"
                            buckets.append(f"{prefix}-000" if tool == "rgwkeeper" else prefix)
                        argv = (rgwkeeper_argv(op, info, prefix, conc, duration) if tool == "rgwkeeper" else
                                warp_argv(warp, op, info, f"{prefix}-000" if op == "GET" else prefix, conc, duration))
                        m = measure(argv, env, counter, duration, duration * 4 + 300)
                        out = m.pop("stdout")
                        if tool == "rgwkeeper":
                            m["self_cpu_ms_per_request"] = json.loads(out)["client"]["cpu_ms_per_request"]
                        row[tool] = m
                    row["ratio"] = round(row["rgwkeeper"]["cpu_ms_per_request"] / row["warp"]["cpu_ms_per_request"], 2)
                    row["steady_ratio"] = round(row["rgwkeeper"]["steady_cpu_ms_per_request"] /
                                                row["warp"]["steady_cpu_ms_per_request"], 2)
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr, flush=True)
    finally:
        counter.close()
        for b in buckets if cleanup else ():
            asyncio.run(_empty_bucket(info, b))
    return {"rows": rows, "machine": {"cores": os.cpu_count(), "load_avg_at_end": os.getloadavg()}}


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.loadgen")
    p.add_argument("--warp", required=True, help="a warp binary (v1.3.1 built by hand; see docs/loadgen.md)")
    p.add_argument("--duration", type=int, default=30, help="seconds of load per tool and case")
    p.add_argument("--repeat", type=int, default=1, help="runs per case (the tools' order alternates)")
    p.add_argument("--concurrency", type=int, nargs="+", default=[16, 64])
    p.add_argument("--ops", nargs="+", default=["PUT", "GET"], choices=["PUT", "GET"])
    p.add_argument("--no-cleanup", action="store_true",
                   help="leave the objects (minutes saved on a throwaway cluster: ~50k 4 KiB objects a run)")
    args = p.parse_args()
    if not os.access(args.warp, os.X_OK):
        raise SystemExit(f"bench.loadgen: {args.warp} is not an executable")
    from integration.cluster import ContainerCluster, external_from_env

    with ExitStack() as stack:
        info = external_from_env() or stack.enter_context(ContainerCluster())
        out = run(info, args.warp, args.duration, args.repeat, args.concurrency, args.ops,
                  cleanup=not args.no_cleanup)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
