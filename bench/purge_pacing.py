"""Does purge pacing keep ingest deterministic? `rgwkeeper verify` with a purge as maintenance.

For each repeat, unpaced and paced alternate (the order flips every repeat): a victim bucket
is filled with ``--objects`` objects of 4 KiB, then ``rgwkeeper verify`` runs an open-loop PUT
load (``--rate``) into other buckets, a baseline window, then ``rgwkeeper purge VICTIM
--method s3`` as the maintenance while the load goes on, and judges the two windows (the
project's default tolerances, ``config/rgwkeeper.toml``). The only difference between the
modes is pacing: unpaced, none; paced, ``purge.pace_write_latency_ms = --target-ms``,
``purge.pace_latency_increase = --increase`` (a target relative to the probe before the purge)
and ``purge.max_objects_per_second = --max-rate`` (a cap; alone with the other two at 0).

``--modes`` picks what runs, in turn (the order rotates every repeat):

- ``unpaced``, ``paced``: ``rgwkeeper purge`` as above; ``unpaced:N``: with
  ``purge.rados_ops_in_flight = N`` (librados operations in flight on the direct path);
- ``cap:R``, ``cap:R:S`` or ``cap:R:S:N``: ``rgwkeeper purge`` capped at R objects/s, each request
  carrying S seconds of the cap's work (``purge.cap_request_s``, default 0.1; 1 is a second's worth),
  with at most N librados operations in flight (``purge.cap_ops_in_flight`` and
  ``purge.rados_ops_in_flight``; without N the default, 1: one stat or removal at a time; N
  above 1 lets the window widen while the purge falls behind the cap);
- any rgwkeeper mode with ``@nice`` after it (``cap:450@nice``): the purge runs under ``nice -n 19``;
- any rgwkeeper mode with ``@idle`` after it (``cap:450@idle``): the purge runs under ``chrt --idle 0``
  (the SCHED_IDLE CPU policy; util-linux); ``@nice`` and ``@idle`` together are refused;
- any rgwkeeper mode with ``@rare-ckpt`` after it (``cap:450@rare-ckpt``): the purge writes its
  checkpoint (a file write and two fsyncs on the admin node's disk) every 600 s instead of every
  second (``purge.checkpoint_interval_s``);
- any rgwkeeper mode with ``@nogc`` after it (``cap:450@nogc``): the purge process runs with
  Python's cyclic garbage collector off (``gc.disable()`` before rgwkeeper starts): are its
  collections, CPU bursts on the cores the OSDs share, what ingest notices?
- any rgwkeeper mode with ``@noscan`` after it: the end-state check does not scan the data pools
  (``purge.verify_scan_max_objects = 0``; the report says "skipped"): is that scan what ingest
  notices at the purge's end?
- any rgwkeeper mode with ``@nice-admin`` after it: the purge's ``radosgw-admin`` processes run
  under ``nice -n 19`` inside the cluster's container (``@nice`` cannot reach them: ``docker
  exec`` starts them in the container, not as the purge's children); a cluster of the host's
  release, whose radosgw-admin is the host's, is refused;
- any rgwkeeper mode with ``@trace`` after it (needs ``--keep``): the purge logs at debug level
  (every index page, every Ceph CLI process with its duration) into ``purge-MODE-N.log`` beside
  the wall-clock time it started (``.start``); ``python -m bench.timeline DIR`` prints each traced
  run's per-second PUT p99 beside what the purge did in that second;
- any rgwkeeper mode with ``@pageN`` after it (``cap:450@page250``): N keys a listing page
  (``purge.list_page_size``, 1-1000; a capped purge lists about 5 s of its work a page, 1,000 at most);
- any rgwkeeper mode with ``@workersN`` after it (``cap:900@index@workers1``): N work items (index
  shards) at once in the purge's process (``purge.workers``, 1-64; default 4), with ``@index``;
- any rgwkeeper mode with ``@index`` after it (``cap:450@index``): the direct method lists the
  bucket by its index shards with librados (``purge.direct_listing = "index"``), not through RGW;
- ``low``: ``rgwkeeper purge --impact low``; ``normal``: ``rgwkeeper purge --impact normal`` (the
  stock ``bucket rm --purge-objects`` inside rgwkeeper's plan and read-back; ``--method`` not passed);
- ``stock-rm`` or ``stock-rm:N``: ``radosgw-admin bucket rm --purge-objects`` (with
  ``--max-concurrent-ios N``);
- ``stock-s3``: S3 DeleteObjects of 1,000 keys, one request at a time (``bench/s3_one_batch.py``);
- ``list-s3:R`` or ``list-s3:R:P``: no purge, only its listing: the victim listed through S3 at R
  keys/s, P keys a request (default 1,000), deleting nothing (``bench/s3_list.py``); the victim
  stays behind;
- ``list-rados-host:R`` or ``list-rados-host:R:N``: ``list-s3:R`` and ``rados-host:R[:N]`` at
  once, two processes each on its own schedule: the listing and the removals a capped purge
  does, without rgwkeeper's engine between them;
- ``rados-host:R[:N[:A]]`` and ``rados-cluster:R[:N[:A]]``: no RGW and no rgwkeeper: ``bench/rados_rm.py``
  states and removes the victim's head objects from the data pool, R objects/s spread one token per
  object, N at a time (default 1), with the host's librados or, run in the cluster's container, the
  cluster's own (the index is left as it is); A 1: the stats in a lane of their own ahead of the
  removals (``--stat-ahead``: a stat and a removal in flight at once);
- ``quiet``: the control, the same load and windows with no maintenance (``verify
  --maintenance none``), so a purge's verdicts can be set beside what the same ``verify`` says
  of a window in which nothing happened.

``--verify-config`` gives ``verify`` its tolerances (``[loadgen]``), e.g. the ones quiet runs of
the cluster call for (docs/loadgen.md, *Calibrate the limits*). ``--plot F`` draws each run as
purge rate against PUT p99 change, one marker per mode: the frontier.

Reported per run: the verdict, PUT p99 in the baseline and maintenance windows and its change,
the slow seconds, the median ops/s change, how long the purge took, the share of the judged
window it covered, and the purging client's CPU seconds (``bench/cpu_of.py``: its process and
the children it waited for; for ``rados-cluster`` and the stock tool of another release only the
``docker exec`` client, as the rest runs in the cluster's container); then per mode the verdicts,
the median p99 change, the median purge rate and the median client CPU per 1,000 objects.
The judged window is the purge or ``--window``, whichever is longer, so a purge shorter than
``--window`` is judged with quiet seconds after it: that flatters the faster modes. For a fair
frontier pick ``--window`` below the fastest purge's time (every ``window_covered`` then 1).

    .venv/bin/python -m bench.purge_pacing [--method s3|direct|auto] [--objects 4000] [--rate 40]
        [--target-ms 20] [--increase 0.3] [--max-rate 20] [--repeat 2]
        [--modes unpaced,paced,quiet,cap:150,cap:150:1,cap:450@index,low,normal,stock-rm:4,stock-s3]
        [--verify-config F] [--plot F]

Boots the containerized Ceph unless RGWKEEPER_TEST_CEPH_CONF & co name a cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shlex
import statistics
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


def _fill(info: Any, bucket: str, count: int, size: int = 4096) -> None:
    async def go() -> None:
        async with S3Client(info.rgw_endpoint, load_credentials(info.credentials_file), timeout_s=60) as s3:
            await s3.create_bucket(bucket)
            body = bytes(range(256)) * (size // 256)
            sem = asyncio.Semaphore(32)

            async def one(i: int) -> None:
                async with sem:
                    status, _, _ = await s3.put_object(bucket, f"fill/{i:07d}", body)
                    if status != 200:
                        raise SystemExit(f"fill PUT failed with HTTP {status}")

            await asyncio.gather(*(one(i) for i in range(count)))

    asyncio.run(go())


def _cluster_flags(info: Any) -> list[str]:
    return ["--conf", str(info.conf), "--keyring", str(info.keyring), "--rgw-endpoint", info.rgw_endpoint,
            "--rgw-credentials", str(info.credentials_file)]


MODES = ("unpaced", "paced", "quiet", "cap", "low", "normal", "stock-rm", "stock-s3", "rados-host", "rados-cluster",
         "list-s3", "list-rados-host")


RGWKEEPER_MODES = ("unpaced", "paced", "cap", "low")


#: What may follow an rgwkeeper mode: ``@index`` (list by index shard), ``@nice`` (the purge
#: runs under ``nice -n 19``: is it the purge process's own CPU, on a host whose cores the OSDs
#: and RGW share, that costs ingest?) and ``@idle`` (the purge runs under ``chrt --idle 0``, the
#: SCHED_IDLE policy: CPU only when nothing else wants it), ``@rare-ckpt`` (the checkpoint, an fsync
#: on the disk the harness's OSDs share, every 600 s, not every second), ``@nogc`` (Python's cyclic
#: garbage collector off in the purge process), ``@noscan`` (the end-state check scans no pool),
#: ``@nice-admin`` (its radosgw-admin processes under nice in the cluster's container), ``@trace``
#: (debug log and start time kept beside the report, for bench.timeline), ``@pageN`` (N keys a
#: listing page, ``purge.list_page_size``, 1-1000), ``@workersN`` (N work items at once, ``purge.workers``);
#: ``@nice`` and ``@idle``
#: exclude each other.
SUFFIXES = ("index", "nice", "idle", "rare-ckpt", "nogc", "noscan", "nice-admin", "trace")


def suffixes_of(text: str) -> tuple[str, tuple[str, ...]]:
    """``cap:450@index@nice`` -> ("cap:450", ("index", "nice")); each suffix at most once, not @nice with @idle."""
    base, *suffixes = text.split("@")
    if suffixes and (base.split(":")[0] not in RGWKEEPER_MODES or any(x not in SUFFIXES and numbered_of(x) is None
                                                                      for x in suffixes)
                     or len(set(suffixes)) != len(suffixes)):
        raise ValueError(f"mode {text!r}: only {', '.join(RGWKEEPER_MODES)} take @{', @'.join(SUFFIXES)}, "
                         "@pageN (1-1000) and @workersN (1-64), once each")
    keys = [got[0] for got in map(numbered_of, suffixes) if got is not None]
    if len(set(keys)) != len(keys):
        raise ValueError(f"mode {text!r}: one @pageN and one @workersN at most")
    if "nice" in suffixes and "idle" in suffixes:
        raise ValueError(f"mode {text!r}: @nice and @idle exclude each other (pick one CPU policy)")
    return base, tuple(suffixes)


#: Suffixes with a number: ``@pageN`` (``purge.list_page_size``) and ``@workersN`` (``purge.workers``),
#: each with its config key and bounds.
NUMBERED = {"page": ("list_page_size", 1, 1000), "workers": ("workers", 1, 64)}


def numbered_of(suffix: str) -> tuple[str, int] | None:
    """``page250`` -> ("list_page_size", 250), ``workers1`` -> ("workers", 1); None if not one, or out of bounds."""
    for name, (key, low, high) in NUMBERED.items():
        digits = suffix[len(name):] if suffix.startswith(name) else ""
        if digits.isascii() and digits.isdigit() and low <= int(digits) <= high:
            return key, int(digits)
    return None


def page_of(suffix: str) -> int | None:
    """``page250`` -> 250 (keys per listing page, ``purge.list_page_size``, 1-1000); None otherwise."""
    got = numbered_of(suffix)
    return got[1] if got is not None and got[0] == "list_page_size" else None


def listing_of(text: str) -> tuple[str, str]:
    """``cap:450@index`` -> ("cap:450", "index"); without ``@index``, the listing is "s3"."""
    base, suffixes = suffixes_of(text)
    return base, "index" if "index" in suffixes else "s3"


def _seconds(text: str) -> float:
    """A window's length: finite and above 0 (``window_covered`` divides by it)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r}: seconds must be finite and above 0")
    return value


def window_covered(purge_s: float | None, window_s: float) -> float | None:
    """The share of the judged window a purge of ``purge_s`` covered: the judged window is the
    purge or ``--window``, whichever is longer."""
    return round(min(1.0, purge_s / window_s), 2) if purge_s else None


def parse_mode(text: str) -> tuple[str, list[float]]:
    """``cap:150:0.1`` -> ("cap", [150.0, 0.1]); an unknown mode or a bad number is a usage error."""
    kind, *params = listing_of(text)[0].split(":")
    if kind not in MODES:
        raise ValueError(f"unknown mode {text!r}; choose from {', '.join(MODES)}")
    wants = {"cap": (1, 3), "stock-rm": (0, 1), "unpaced": (0, 1), "rados-host": (1, 3),
             "rados-cluster": (1, 3), "list-s3": (1, 2), "list-rados-host": (1, 2)}.get(kind, (0, 0))
    if not wants[0] <= len(params) <= wants[1]:
        raise ValueError(f"mode {text!r}: {kind} takes {wants[0]} to {wants[1]} ':'-separated numbers")
    try:
        numbers = [float(x) for x in params]
    except ValueError:
        raise ValueError(f"mode {text!r}: not a number") from None
    if not all(math.isfinite(x) and x > 0 for x in numbers):
        raise ValueError(f"mode {text!r}: numbers must be finite and above 0")
    counts = (numbers[:1] if kind in ("unpaced", "stock-rm") else numbers[2:] if kind == "cap"
              else numbers[1:] if kind.startswith(("rados-", "list-")) else [])
    if any(x != int(x) for x in counts):
        raise ValueError(f"mode {text!r}: an operation count must be a whole number")
    if kind.startswith("rados-") and len(numbers) > 2 and (numbers[2] != 1 or numbers[1] != 1):
        raise ValueError(f"mode {text!r}: the third number is 1 (stats ahead of the removals, one object "
                         "in flight) or absent")
    return kind, numbers


def _maintenance(info: Any, workdir: Path, mode: str, victim: str, args: argparse.Namespace, n: int) -> list[str]:
    kind, numbers = parse_mode(mode)
    if kind == "quiet":
        return ["--maintenance", "none"]
    if kind == "stock-rm":
        ios = ["--max-concurrent-ios", str(int(numbers[0]))] if numbers else []
        return ["--maintenance-cmd", shlex.join(["radosgw-admin", "--conf", str(info.conf), "--keyring",
                                                 str(info.keyring), "bucket", "rm", "--bucket", victim,
                                                 "--purge-objects", *ios])]
    if kind == "stock-s3":
        return ["--maintenance-cmd", shlex.join([sys.executable, "-m", "bench.s3_one_batch", "--endpoint",
                                                 info.rgw_endpoint, "--credentials", str(info.credentials_file),
                                                 victim])]
    if kind.startswith("rados-"):
        return ["--maintenance-cmd", _rados_rm(info, mode, victim, numbers, args)]
    if kind == "list-s3":
        return ["--maintenance-cmd", _s3_list(info, victim, numbers[0], int(numbers[1]) if len(numbers) > 1 else 1000)]
    if kind == "list-rados-host":
        # Both at once, each on its own schedule; the command fails if either does.
        listing = _s3_list(info, victim, numbers[0], 1000)
        removals = _rados_rm(info, "rados-host", victim, numbers, args)
        return ["--maintenance-cmd", shlex.join(["sh", "-c", f"{listing} & l=$!; {removals}; r=$?; wait $l; "
                                                             "l=$?; exit $((l | r))"])]
    purge_cfg = workdir / f"purge-{mode.replace(':', '_').replace('@', '_')}-{n}.toml"
    pace_ms = args.target_ms if kind == "paced" else 0.0
    increase = args.increase if kind == "paced" else 0.0
    cap = args.max_rate if kind == "paced" else numbers[0] if kind == "cap" else 0.0
    request_s = numbers[1] if kind == "cap" and len(numbers) > 1 else 0.1
    ops = numbers[0] if kind == "unpaced" and numbers else numbers[2] if kind == "cap" and len(numbers) > 2 else None
    in_flight = f"rados_ops_in_flight = {int(ops)}\n" if ops is not None else ""
    if kind == "cap" and ops is not None:  # under a cap the window's most is its own key
        in_flight += f"cap_ops_in_flight = {int(ops)}\n"
    listing = f'direct_listing = "{listing_of(mode)[1]}"\n'
    if "rare-ckpt" in suffixes_of(mode)[1]:
        listing += "checkpoint_interval_s = 600\n"
    if "noscan" in suffixes_of(mode)[1]:
        listing += "verify_scan_max_objects = 0\n"
    for key, value in filter(None, map(numbered_of, suffixes_of(mode)[1])):
        listing += f"{key} = {value}\n"
    purge_cfg.write_text(f'[purge]\nstate_dir = "{workdir / "state"}"\n{in_flight}{listing}' + (
        "" if kind in ("low", "normal") else
        f"pace_write_latency_ms = {pace_ms}\npace_latency_increase = {increase}\npace_probe_interval = 0.5\n"
        f"max_objects_per_second = {cap}\ncap_request_s = {request_s}\n"))
    how = ["--impact", kind] if kind in ("low", "normal") else []
    if kind != "normal":  # normal picks its own method (admin-purge) and refuses another
        how += ["--method", args.method]
    suffixes = suffixes_of(mode)[1]
    nice = ["nice", "-n", "19"] if "nice" in suffixes else ["chrt", "--idle", "0"] if "idle" in suffixes else []
    python = [sys.executable, "-m", "rgwkeeper"] if "nogc" not in suffixes else [
        sys.executable, "-c", "import gc, runpy; gc.disable(); runpy.run_module('rgwkeeper', run_name='__main__')"]
    if "nice-admin" in suffixes:
        nice = ["env", f"PATH={_niced_admin(info, workdir)}{os.pathsep}{os.environ.get('PATH', '')}", *nice]
    trace = "trace" in suffixes
    if trace and not getattr(args, "keep", None):
        raise SystemExit(f"mode {mode}: @trace keeps a log; give --keep DIR")
    cmd = shlex.join([*nice, *python, *(["--log-level", "debug"] if trace else []), "purge", victim, *how, "--yes",
                      "--json", "--config", str(purge_cfg), *_cluster_flags(info)])
    if getattr(args, "keep", None):  # verify discards the command's stdout: keep the purge's report (its steps' times)
        report = shlex.quote(str(purge_cfg.with_suffix(".report.json")))
        if trace:
            start, log = (shlex.quote(str(purge_cfg.with_suffix(x))) for x in (".start", ".log"))
            cmd = shlex.join(["sh", "-c", f"date +%s.%N > {start}; exec {cmd} > {report} 2> {log}"])
        else:
            cmd = shlex.join(["sh", "-c", f"exec {cmd} > {report}"])
    return ["--maintenance-cmd", cmd]


RADOS_RM = Path(__file__).with_name("rados_rm.py")


def _niced_admin(info: Any, workdir: Path) -> Path:
    """A directory holding the cluster's radosgw-admin wrapper with ``nice -n 19`` inside the
    container (the harness's wrapper ends in ``exec docker ... exec CONTAINER radosgw-admin``)."""
    wrapper = info.tools_dir / "radosgw-admin" if info.tools_dir else None
    if wrapper is None or not wrapper.exists():
        raise SystemExit("@nice-admin needs a cluster whose radosgw-admin runs in its container (another release)")
    text = wrapper.read_text()
    if text.count(" radosgw-admin ") != 1:
        raise SystemExit(f"@nice-admin: {wrapper} is not the harness's docker exec wrapper")
    out = workdir / "nice-admin-bin"
    out.mkdir(parents=True, exist_ok=True)
    (out / "radosgw-admin").write_text(text.replace(" radosgw-admin ", " nice -n 19 radosgw-admin "))
    (out / "radosgw-admin").chmod(0o755)
    return out


def _admin_json(*argv: str) -> Any:
    proc = subprocess.run(["radosgw-admin", *argv], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise SystemExit(f"radosgw-admin {' '.join(argv)}: exit {proc.returncode}: {proc.stderr.strip()[-300:]}")
    return json.loads(proc.stdout)


def _s3_list(info: Any, victim: str, rate: float, page: int) -> str:
    """The command line of a listing through S3 alone (bench/s3_list.py)."""
    return shlex.join([sys.executable, "-m", "bench.s3_list", "--endpoint", info.rgw_endpoint, "--credentials",
                       str(info.credentials_file), "--rate", f"{rate:g}", "--page", str(page), victim])


def _rados_rm(info: Any, mode: str, victim: str, numbers: list[float], args: argparse.Namespace) -> str:
    """The command line of a ``rados-host`` or ``rados-cluster`` mode (bench/rados_rm.py)."""
    conn = ["--conf", str(info.conf), "--keyring", str(info.keyring)]
    marker = _admin_json(*conn, "bucket", "stats", "--bucket", victim)["marker"]
    zone = _admin_json(*conn, "zone", "get")
    pool = zone["placement_pools"][0]["val"]["storage_classes"]["STANDARD"]["data_pool"]
    argv = ["--pool", pool, "--prefix", f"{marker}_fill/", "--count", str(args.objects), "--rate", f"{numbers[0]:g}",
            "--in-flight", str(int(numbers[1]) if len(numbers) > 1 else 1),
            *(["--stat-ahead"] if len(numbers) > 2 and numbers[2] else [])]
    if mode.startswith("rados-host"):
        return shlex.join(["/usr/bin/python3", str(RADOS_RM), *argv, *conn])
    if not args.docker_exec:
        raise SystemExit(f"mode {mode}: needs the harness's own cluster (a container to run in)")
    return shlex.join(["sh", "-c", f"exec {shlex.join([*args.docker_exec, 'python3', '-', *argv])} "
                                   f"< {shlex.quote(str(RADOS_RM))}"])


def _run(info: Any, workdir: Path, mode: str, args: argparse.Namespace, n: int) -> dict[str, Any]:
    tag = f"pace-{uuid.uuid4().hex[:6]}"
    victim = f"{tag}-victim"
    if mode != "quiet":
        _fill(info, victim, args.objects)
    out = workdir / f"verify-{mode.replace(':', '_')}-{n}.json"
    maintenance = _maintenance(info, workdir, mode, victim, args, n)
    cpu_file = out.with_suffix(".cpu.json")
    cpu_file.unlink(missing_ok=True)  # a kept directory may hold an earlier invocation's
    if maintenance[0] == "--maintenance-cmd":  # the client's CPU: bench/cpu_of.py
        maintenance = ["--maintenance-cmd", shlex.join([sys.executable, "-m", "bench.cpu_of", str(cpu_file), "--",
                                                        *shlex.split(maintenance[1])])]
    argv = [sys.executable, "-m", "rgwkeeper", "verify", *_cluster_flags(info),
            *(["--config", str(args.verify_config)] if args.verify_config else []), "--baseline", str(args.baseline),
            "--window", str(args.window), "--mix", "PUT=100", "--rate", str(args.rate), "--concurrency", "64",
            "--bucket-prefix", tag, "--objects", "0", *maintenance, "--maintenance-timeout", "600",
            "--out", str(out), "--plot", str(out.with_suffix(".png")), "--json", "--no-progress"]
    t0 = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=args.baseline + args.window + 900)
    if proc.returncode not in (0, 3, 4):
        raise SystemExit(f"verify ({mode}) failed: {proc.stderr.strip()[-800:]}")
    result = json.loads(out.read_text())
    ev = {e["kind"]: e["t"] for e in result["events"] if e["kind"] in ("maintenance-start", "maintenance-end")}
    checks = {c["name"]: c for c in result["verdict"]["checks"]}
    p99 = checks.get("p99_increase_PUT", {})
    rate = checks.get("median_ops_drop", {})
    slow = checks.get("slow_seconds_PUT", {})
    purge_s = round(ev["maintenance-end"] - ev["maintenance-start"], 1) if len(ev) == 2 else None
    cpu_s = json.loads(cpu_file.read_text())["cpu_s"] if cpu_file.exists() else None
    return {"mode": mode, "verdict": result["verdict"]["outcome"],
            "p99_ms_baseline": p99.get("baseline"), "p99_ms_window": p99.get("candidate"),
            "p99_change": p99.get("estimate"), "slow_seconds": slow.get("estimate"),
            "median_ops_drop": rate.get("estimate"), "purge_s": purge_s,
            "objects_per_s": round(args.objects / purge_s, 1) if purge_s and mode != "quiet" else None,
            # The judged window is the purge or --window, whichever is longer: a purge shorter than
            # --window is judged with quiet seconds after it, which flatters the faster modes.
            "window_covered": window_covered(purge_s, args.window) if mode != "quiet" else None,
            # The client's CPU (rgwkeeper's process and its children, the bare script, the stock tool's
            # docker exec client: not what runs inside the cluster's container), per 1,000 objects.
            "client_cpu_s": cpu_s, "client_cpu_s_per_1000": (round(1000 * cpu_s / args.objects, 3)
                                                              if cpu_s is not None and mode != "quiet" else None),
            "wall_s": round(time.monotonic() - t0, 1)}


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    markers = "osD^v<>ph*X"
    for i, mode in enumerate(modes):
        pts = [(r["objects_per_s"] or 0.0, 100 * r["p99_change"]) for r in rows
               if r["mode"] == mode and r["p99_change"] is not None]
        if pts:
            ax.scatter(*zip(*pts), label=mode, marker=markers[i % len(markers)], s=48)
    ax.axhline(0, color="grey", linewidth=0.8)
    ax.set_xlabel("purge rate, objects/s (quiet: 0)")
    ax.set_ylabel("PUT p99 change, maintenance window vs baseline (%)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--objects", type=int, default=4000, help="objects in each victim bucket")
    p.add_argument("--rate", type=float, default=40.0, help="ingest PUT/s (open loop)")
    p.add_argument("--target-ms", type=float, default=20.0, help="purge.pace_write_latency_ms when paced (0: none)")
    p.add_argument("--increase", type=float, default=0.0, help="purge.pace_latency_increase when paced")
    p.add_argument("--max-rate", type=float, default=0.0,
                   help="purge.max_objects_per_second when paced (0: no cap); with --target-ms 0: the cap alone")
    p.add_argument("--baseline", type=_seconds, default=30.0)
    p.add_argument("--window", type=_seconds, default=30.0)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--method", default="s3", choices=["s3", "direct", "auto"], help="the purge's --method")
    p.add_argument("--modes", default="unpaced,paced",
                   help="comma-separated, run in turn: unpaced[:N], paced, cap:R[:S[:N]], low, normal, stock-rm[:N], stock-s3, "
                        "rados-host:R[:N], rados-cluster:R[:N], list-s3:R[:P], list-rados-host:R[:N], "
                        "quiet (no maintenance: the control)")
    p.add_argument("--verify-config", type=Path, default=None,
                   help="a config file whose [loadgen] tolerances verify judges with (default: the project's)")
    p.add_argument("--plot", type=Path, default=None, help="write purge rate vs PUT p99 change, per run, as PNG")
    p.add_argument("--keep", type=Path, default=None,
                   help="keep each run's verify result (per-second series, events) and purge config in this directory")
    args = p.parse_args()
    order = args.modes.split(",")
    for mode in order:
        try:
            parse_mode(mode)
        except ValueError as exc:
            p.error(f"--modes: {exc}")

    from integration.cluster import ContainerCluster, external_from_env

    rows = []
    with ExitStack() as stack:
        info = external_from_env()
        args.docker_exec = None
        if info is None:
            cluster = ContainerCluster()
            info = stack.enter_context(cluster)
            assert cluster.engine is not None and cluster.container_id is not None
            args.docker_exec = ["docker", "-H", cluster.engine.base_url, "exec", "-i", cluster.container_id]
        os.environ["PATH"] = info.env()["PATH"]  # the cluster's own radosgw-admin for the purge
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
        workdir = args.keep.resolve() if args.keep else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-pacing-")))
        for r in range(args.repeat):
            turn = order[r % len(order):] + order[:r % len(order)]  # each mode leads in turn
            for mode in turn:
                row = _run(info, workdir, mode, args, r)
                print(json.dumps(row), file=sys.stderr, flush=True)
                rows.append(row)
    summary = {}
    for mode in order:
        mine = [x for x in rows if x["mode"] == mode]
        changes = [x["p99_change"] for x in mine if x["p99_change"] is not None]
        rates = [x["objects_per_s"] for x in mine if x["objects_per_s"]]
        summary[mode] = {"verdicts": [x["verdict"] for x in mine],
                         "median_p99_change": round(statistics.median(changes), 3) if changes else None,
                         "median_slow_seconds": statistics.median([x["slow_seconds"] for x in mine
                                                                   if x["slow_seconds"] is not None] or [0]),
                         "median_purge_s": statistics.median([x["purge_s"] for x in mine if x["purge_s"] is not None]
                                                             or [0.0]) if mode != "quiet" else None,
                         "median_objects_per_s": statistics.median(rates) if rates else None,
                         "median_client_cpu_s_per_1000": statistics.median(cpus) if (cpus := [
                             x["client_cpu_s_per_1000"] for x in mine if x["client_cpu_s_per_1000"] is not None])
                         else None,
                         "least_window_covered": min((x["window_covered"] for x in mine
                                                      if x["window_covered"] is not None), default=None)}
    print(json.dumps({"method": args.method, "objects": args.objects, "rate": args.rate, "target_ms": args.target_ms,
                      "increase": args.increase, "max_rate": args.max_rate,
                      "summary": summary, "runs": rows}, indent=1))
    if args.plot:
        plot(rows, args.plot, f"{args.objects} x 4 KiB purged under {args.rate:g} PUT/s ({args.method})")


if __name__ == "__main__":
    main()
