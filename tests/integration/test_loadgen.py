"""rgwkeeper loadgen and verify against the real cluster.

- a fixed-rate run holds its target rate (50 req/s of 4 KiB PUT: this box sustains 150+);
- RGW stopped for 2 s (SIGSTOP inside the container) shows in the latency measured from the
  intended start, in every request it delayed, where service time shows only a few;
- the verdict: PASS for a quiet window (open loop at 30 req/s) and FAIL for an unpaced purge
  of 4,000 objects run as the maintenance (40 req/s); a deep-scrub storm runs through librados
  and is judged;
- the same seed writes the same keys, sizes and bytes.

Tolerances here are wider than the shipped defaults, calibrated on quiet runs (TEST_CONFIG):
this 2-core machine is shared with other engineers' clusters, and a quiet 20 s window of
closed-loop PUT has a per-second CV of 0.15-0.3 (the interval of a median shift is then +-15%
or more; see tests/unit/test_loadgen_analysis.py on a recorded run). The verify tests use an
open loop (its rate is steady) and a p99 limit of +200%; the slow-seconds check counts seconds
over twice the baseline's slowest. Each verify run first waits (at most 180 s) for the host's
I/O "full" pressure to be at most 2%: other tenants' disk bursts stall the whole test cluster.
The quiet run: up to four runs until a PASS; one FAIL with no
PG scrubbed is allowed (a FAIL while PGs were scrubbed is not a control run and is not counted),
a second fails the test. The purge run: anything but FAIL earns one more try.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import boto3
import numpy as np
import pytest

from integration import engine as engine_mod
from integration.cluster import CACHE_DIR, control_dir
from rgwkeeper.access import load_credentials
from rgwkeeper.loadgen import analysis
from rgwkeeper.loadgen.client import S3Client
from rgwkeeper.loadgen.runner import RunHandle, RunSpec, run_load
from rgwkeeper.loadgen.workload import SizeDist, Workload, parse_mix
from tests.integration.test_purge import bucket_stats

# Tolerances calibrated the way docs/loadgen.md tells operators to: quiet runs first. Adjacent
# quiet 20 s windows of the test cluster differ in PUT p99 by up to +129%, and +273% when one of
# its own bursts lands in the window; an unpaced purge makes it +400% to +1104% (re-judged
# verify results of both). So the p99 limit is +200%, not the +100% that judged quiet CI runs FAIL.
# The slow-seconds check keeps counting seconds over twice the baseline's slowest (its threshold
# before the calibration): the +273% burst was one such second, an unpaced purge shows 5-9.
TEST_CONFIG = """
[loadgen]
warmup_s = 3.0
max_rate_drop = 0.30
max_cv_increase = 0.25
max_p99_increase = 2.0
slow_second_increase = 1.0
max_baseline_cv = 0.5
min_window_s = 10.0
min_op_samples = 100
block = 3
"""


def _creds(ceph_cluster):
    return load_credentials(ceph_cluster.credentials_file)


def _first_put(ceph_cluster, bucket):
    """One PUT and its cleanup, so RGW's data pool exists before a measured run starts."""
    c = _creds(ceph_cluster)
    s3 = boto3.client("s3", endpoint_url=ceph_cluster.rgw_endpoint, aws_access_key_id=c.access_key,
                      aws_secret_access_key=c.secret_key, region_name="us-east-1")
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="warm", Body=b"x")
    s3.delete_object(Bucket=bucket, Key="warm")
    s3.delete_bucket(Bucket=bucket)


def _records(data):
    return analysis.records_from_columns(data.columns, data.t0_ns)


@contextlib.contextmanager
def _container(ceph_cluster):
    """The cluster's container through the harness's engine (skip on an external cluster)."""
    engine = engine_mod.find_or_start(CACHE_DIR)
    client = engine.client(timeout=60)
    try:
        cid = ceph_cluster.container_id
        if cid is None:  # a cluster from `python -m integration up`: find it by its run dir
            run_dir = str(Path(ceph_cluster.conf).parent)
            found = [c for c in client.containers.list(filters={"label": engine_mod.LABEL})
                     if c.labels.get("io.rgwkeeper.test.run-dir") == run_dir]
            if not found:
                pytest.skip("needs the containerized cluster (RGW is paused inside its container)")
            cid = found[0].id
        yield client.containers.get(cid)
    finally:
        client.close()
        engine.stop()


# RGW creates its data pool on a cluster's first PUT and every PUT waits behind it (docs/testing.md,
# "The release matrix"): one PUT first, so the window measures the generator only.
def test_fixed_rate_holds_its_target_rate(ceph_cluster, bucket_name):
    _first_put(ceph_cluster, bucket_name + "-warm")
    spec = RunSpec(endpoint=ceph_cluster.rgw_endpoint, rate=50, concurrency=32, workers=2, duration_s=20,
                   workload=Workload(mix=parse_mix("PUT=100"), bucket_prefix=bucket_name, seed=3))
    data = asyncio.run(run_load(spec, _creds(ceph_cluster)))
    rec = _records(data)
    assert len(rec) == 1000  # exactly rate x duration: the schedule does not bend
    window = analysis.run_window(data.stop_s, 3.0)
    summary = analysis.summarize(rec, window)
    assert summary["errors"] == 0
    print(f"fixed rate: {summary['ops_per_s']:.2f} req/s measured over {window.seconds} s, target 50")
    assert summary["ops_per_s"] == pytest.approx(50, rel=0.02), summary
    assert data.workers[0]["cpu_s"] > 0 and data.notes == []


def test_a_paused_rgw_shows_in_latency_from_the_intended_start(ceph_cluster, bucket_name):
    state = control_dir(ceph_cluster)
    if state is None:
        pytest.skip("pausing RGW needs the harness's containerized cluster")
    rgw_pid = int((state / "rgw.pid").read_text())  # signalled by its pid, never by name

    def signal_rgw(sig: str) -> None:
        res = container.exec_run(["bash", "-c", f"kill -{sig} {rgw_pid}"])
        assert res.exit_code == 0, res.output

    with _container(ceph_cluster) as container:
        pause_events = {}

        async def pause_rgw(run: RunHandle) -> None:
            await asyncio.sleep(4)
            pause_events["stop"] = run.now_s()
            try:
                await asyncio.to_thread(signal_rgw, "STOP")
                run.mark("maintenance-start", "radosgw SIGSTOP")
                await asyncio.sleep(2)
            finally:
                await asyncio.to_thread(signal_rgw, "CONT")
                run.mark("maintenance-end", "radosgw SIGCONT")
            pause_events["cont"] = run.now_s()

        spec = RunSpec(endpoint=ceph_cluster.rgw_endpoint, rate=50, concurrency=16, workers=1, duration_s=12,
                       workload=Workload(mix=parse_mix("PUT=100"), bucket_prefix=bucket_name, seed=4))
        try:
            data = asyncio.run(run_load(spec, _creds(ceph_cluster), controller=pause_rgw))
        finally:
            signal_rgw("CONT")
    rec = _records(data)
    ok = analysis.ok_mask(rec)
    assert ok.all() and len(rec) == 600
    latency_s = (rec["end"] - rec["intended"]) / 1e9
    service_s = (rec["end"] - rec["start"]) / 1e9
    paused_for = pause_events["cont"] - pause_events["stop"]
    assert paused_for >= 2.0
    # About 100 requests were due while RGW was stopped; 16 connections were in flight. Every
    # request due more than 1 s before the end of the stop carries over 1 s from its intended
    # start: 50/s x (pause - 1 s), less the docker exec time inside the measured pause (CI once
    # counted 59 for a 2.13 s pause against a fixed 60). Service time alone shows at most the
    # in-flight ones. (A 3 s stop was tried: 32 requests over 1 s by service time, so no.)
    slow = latency_s > 1.0
    print(f"RGW stopped {paused_for:.1f} s: {slow.sum()} requests over 1 s from their intended start, "
          f"{(service_s > 1.0).sum()} by service time; p99 {np.percentile(latency_s, 99):.2f} s vs "
          f"{np.percentile(service_s, 99):.2f} s")
    assert slow.sum() >= 0.8 * spec.rate * (paused_for - 1.0), (slow.sum(), paused_for)
    assert (service_s > 1.0).sum() <= 16 + 2
    s = analysis.summarize(rec, analysis.run_window(data.stop_s, 0))["per_op"]["PUT"]
    assert s["latency_ms"]["p99"] > 1000 and s["latency_ms"]["max"] > 1500
    assert s["start_lag_ms"]["max"] > 1000  # the requests queued behind the stall, counted


def _verify(ceph_cluster, tmp_path, *maintenance, baseline=20, window=20, rate=30, extra=()):
    cfg = tmp_path / "rgwkeeper.toml"
    cfg.write_text(TEST_CONFIG)
    out, plot = tmp_path / "verify.json", tmp_path / "verify.png"
    argv = [sys.executable, "-m", "rgwkeeper", "verify", "--config", str(cfg), "--conf", str(ceph_cluster.conf),
            "--keyring", str(ceph_cluster.keyring), "--rgw-endpoint", ceph_cluster.rgw_endpoint,
            "--rgw-credentials", str(ceph_cluster.credentials_file), "--baseline", str(baseline),
            "--window", str(window), "--mix", "PUT=100", "--rate", str(rate), "--concurrency", "64", "--out", str(out),
            "--plot", str(plot), "--json", "--no-progress", "--keep", *maintenance, *extra]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 3, 4), proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    assert json.loads(out.read_text())["verdict"] == result["verdict"]
    assert plot.stat().st_size > 10_000
    return proc.returncode, result


def _describe(result):
    v = result["verdict"]
    return f"{v['outcome']}: " + "; ".join(c["text"] for c in v["checks"]) + " | " + "; ".join(v["reasons"])


def _wait_no_scrubbing(ceph_cluster, timeout=180.0):
    """A quiet control run needs a quiet cluster: deep scrubs the daemon tests requested can
    still be running (CI: a "quiet" window judged FAIL, PUT p99 14.7 -> 52.3 ms, right after
    them)."""
    deadline = time.monotonic() + timeout
    while True:
        busy = _scrubbing_now(ceph_cluster)
        if not busy:
            return
        assert time.monotonic() < deadline, f"{busy} PGs still scrubbing after {timeout:.0f} s"
        time.sleep(2)


def _io_full_pct() -> float | None:
    """The host's I/O stall: % of the last 10 s in which every task waited for I/O (PSI)."""
    try:
        line = next(x for x in Path("/proc/pressure/io").read_text().splitlines() if x.startswith("full"))
    except (OSError, StopIteration):
        return None
    return float(line.split()[1].split("=")[1])


def _wait_host_calm(max_full_pct=2.0, timeout=180.0):
    """Other tenants' disk bursts stall the whole test cluster: in one clean-clone CI run the
    baseline's per-second PUT p99 reached 386-470 ms and an unpaced purge (FAIL on a calm host)
    was judged PASS, then INCONCLUSIVE; I/O 'full' pressure was 3.5-7.7% in such spells against
    0-2% when calm. Wait (bounded) for a calm host before a run; returns what was last read."""
    deadline = time.monotonic() + timeout
    while True:
        full = _io_full_pct()
        if full is None or full <= max_full_pct or time.monotonic() > deadline:
            return full
        time.sleep(5)


def _scrubbing_now(ceph_cluster) -> int:
    states = ceph_cluster.ceph("pg", "stat")["pg_summary"]["num_pg_by_state"]
    return sum(s["num"] for s in states if "scrubbing" in s["name"])


def _scrub_activity(ceph_cluster, before):
    """PGs scrubbed since ``before`` (stamps changed) or scrubbing now. PGs of pools created
    since (the first PUT creates RGW's data pools) have no earlier stamps and do not count."""
    now = _scrub_stamps(ceph_cluster)
    return sum(now[pg] != before[pg] for pg in now if pg in before) + _scrubbing_now(ceph_cluster)


def _scrub_stamps(ceph_cluster):
    pgs = ceph_cluster.ceph("pg", "dump", "pgs")
    pgs = pgs["pg_stats"] if isinstance(pgs, dict) else pgs
    return {p["pgid"]: (p["last_scrub_stamp"], p["last_deep_scrub_stamp"]) for p in pgs}


class _HostCpu:
    """Busy cores of the whole machine (/proc/stat), once a second, while a run goes on: other
    engineers' clusters share it, and their bursts land in windows at random."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float]] = []  # (seconds after start, busy cores)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _read() -> tuple[int, int]:
        v = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
        return sum(v), v[3] + v[4]  # all jiffies, idle + iowait

    def _run(self) -> None:
        total0, idle0 = self._read()
        while not self._stop.wait(1.0):
            total, idle = self._read()
            busy = 1 - (idle - idle0) / max(total - total0, 1)
            self.samples.append((time.monotonic() - self.t0, busy * (os.cpu_count() or 1)))
            total0, idle0 = total, idle

    def __enter__(self) -> "_HostCpu":
        self.t0 = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def mean(self, start: float, end: float) -> float:
        xs = [b for t, b in self.samples if start <= t < end]
        return sum(xs) / len(xs) if xs else float("nan")


def test_verify_passes_a_quiet_window(ceph_cluster, tmp_path, bucket_name):
    """PASS for a window with no maintenance, and a quiet window rarely judged FAIL.

    The quiet cluster is not stationary: its own bursts (per-second PUT p99 at 94 ms for one
    second, then 25 ms for ten, against 10 ms before) land in a 20 s window at random. Measured on the dev
    cluster, 26 quiet runs judged with TEST_CONFIG: 23 PASS, 2 INCONCLUSIVE, 1 FAIL (p99 +273%,
    that burst); the CI run that failed this test (at a +100% limit) had a quiet run at +129%.
    So one FAIL in a quiet run is allowed, and not counted at all when PGs were scrubbed during
    it (deep scrubs earlier tests requested start after the wait; CI saw +292% with 21 PGs
    scrubbed). A second FAIL, or no PASS in four runs, fails the test."""
    rc, result = _judged_like_a_quiet_window(
        ceph_cluster, "quiet", lambda: _verify(ceph_cluster, tmp_path, "--maintenance", "none",
                                               "--bucket-prefix", bucket_name))
    assert rc == 0
    kinds = [e["kind"] for e in result["events"]]
    assert kinds == ["maintenance-start", "maintenance-end"]
    assert result["windows"]["baseline"]["seconds"] >= 19 and result["windows"]["maintenance"]["seconds"] >= 19


def _judged_like_a_quiet_window(ceph_cluster, what, run_verify):
    """Run ``run_verify`` until a PASS, as the quiet test does: up to four runs, one FAIL with
    no PG scrubbed allowed (a FAIL while PGs were scrubbed is not counted). Returns the PASS."""
    seen, unexplained = [], 0
    for _ in range(4):
        _wait_no_scrubbing(ceph_cluster)
        calm = _wait_host_calm()
        before = _scrub_stamps(ceph_cluster)
        with _HostCpu() as cpu:
            rc, result = run_verify()
        scrubs = _scrub_activity(ceph_cluster, before)
        # Launch to t0 is about 1-2 s; then 3 s of warm-up, 20 s of baseline, 20 s of window.
        busier = cpu.mean(26, 46) - cpu.mean(5, 25)
        outcome = result["verdict"]["outcome"]
        seen.append(f"{_describe(result)} | PGs scrubbed during it: {scrubs}; host busy cores window - "
                    f"baseline {busier:+.2f}; loadavg {Path('/proc/loadavg').read_text().split()[:3]}; "
                    f"host I/O full pressure before {calm}%, after {_io_full_pct()}%")
        unexplained += outcome == "FAIL" and not scrubs
        if unexplained > 1:
            pytest.fail(f"two {what} runs judged FAIL with no PG scrubbed:\n" + "\n".join(seen))
        if outcome == "PASS":
            break
    else:
        pytest.fail(f"no PASS in 4 {what} runs:\n" + "\n".join(seen))
    print(f"{what} verdicts:\n" + "\n".join(seen))
    return rc, result


def _purge_under_load(ceph_cluster, tmp_path, bucket_name, objects, *purge_options):
    """One attempt for _judged_like_a_quiet_window: a fresh bucket of ``objects`` x 4 KiB purged
    (``rgwkeeper purge VICTIM *purge_options``) as verify's maintenance under 40 PUT/s; the
    purge must exit 0 and the bucket be gone."""
    def attempt():
        victim = f"{bucket_name[:36]}-v{uuid.uuid4().hex[:4]}"
        _fill(ceph_cluster, victim, objects, 4096)
        cfg = tmp_path / f"{victim}.toml"
        cfg.write_text(f'[purge]\nstate_dir = "{tmp_path}/state"\n')
        rc, result = _verify(ceph_cluster, tmp_path, "--maintenance-cmd",
                             _purge_cmd(ceph_cluster, victim, *purge_options, "--config", str(cfg)),
                             "--bucket-prefix", bucket_name, rate=40, extra=("--maintenance-timeout", "150"))
        maint = result["maintenance"]
        assert maint["exit_code"] == 0, f"the purge exited {maint['exit_code']}: {maint['stderr_tail']}"
        assert bucket_stats(ceph_cluster, victim) is None  # the purge's own read-back said so too (exit 0)
        return rc, result

    return attempt


def _purge_cmd(ceph_cluster, victim, *options):
    return " ".join([sys.executable, "-m", "rgwkeeper", "purge", victim, "--yes", *options,
                     "--conf", str(ceph_cluster.conf), "--keyring", str(ceph_cluster.keyring),
                     "--rgw-endpoint", ceph_cluster.rgw_endpoint,
                     "--rgw-credentials", str(ceph_cluster.credentials_file)])


def _fill(ceph_cluster, bucket: str, count: int, size: int) -> None:
    async def fill():
        async with S3Client(ceph_cluster.rgw_endpoint, _creds(ceph_cluster), timeout_s=60) as s3:
            await s3.create_bucket(bucket)
            body = bytes(range(256)) * (size // 256)
            sem = asyncio.Semaphore(32)

            async def one(i):
                async with sem:
                    status, _, _ = await s3.put_object(bucket, f"fill/{i:07d}", body)
                    assert status == 200

            await asyncio.gather(*(one(i) for i in range(count)))

    asyncio.run(fill())


def test_verify_fails_an_unpaced_purge(ceph_cluster, tmp_path, bucket_name):
    OBJECTS = 8000  # noqa: N806
    def attempt():
        victim = f"{bucket_name[:36]}-v{uuid.uuid4().hex[:4]}"
        _fill(ceph_cluster, victim, OBJECTS, 4096)
        # rgwkeeper purge --method s3 with its pacing off (the default): DeleteObjects batches in
        # flight compete with the PUTs for RGW's CPU while it runs. The window is 20 s, or the
        # purge's run time if longer; 4,000 objects disturbed only 4-5 of its seconds on a faster
        # machine (rank test p 0.02-0.05, limit 0.01: INCONCLUSIVE in 4 of 4 runs), so 8,000.
        calm = _wait_host_calm()  # after the fill, whose own writes count too
        rc, result = _verify(ceph_cluster, tmp_path, "--maintenance-cmd",
                             _purge_cmd(ceph_cluster, victim, "--method", "s3"), "--bucket-prefix", bucket_name,
                             rate=40, extra=("--maintenance-timeout", "60"))
        return rc, result, f"host I/O full pressure before {calm}%, after {_io_full_pct()}%"

    # A disturbance shorter than the window used to come out INCONCLUSIVE (the bootstrap of the
    # window's p99 sees it in some resamples only); the slow-seconds rank test judges it. Other
    # clusters share this machine, so a run that is not FAIL gets three more tries (a CI run on a
    # busy new machine saw INCONCLUSIVE, PASS, INCONCLUSIVE with baseline p99s of 10-195 ms).
    seen = []
    for _ in range(4):
        rc, result, host = attempt()
        seen.append(f"{_describe(result)} | {host}")
        if result["verdict"]["outcome"] == "FAIL":
            break
    else:
        pytest.fail(f"an unpaced purge of {OBJECTS:,} objects was not judged FAIL in 4 runs:\n" + "\n".join(seen))
    print(f"unpaced purge verdict: {_describe(result)}")
    assert rc == 3
    assert result["events"][0]["kind"] == "maintenance-start"
    assert result["events"][-1]["kind"] == "maintenance-end"
    failed = {c["name"] for c in result["verdict"]["checks"] if c["outcome"] == "FAIL"}
    assert failed & {"median_ops_drop", "p99_increase_PUT", "cv_increase", "slow_seconds_PUT"}


def test_verify_judges_a_paced_capped_purge_like_a_quiet_window(ceph_cluster, tmp_path, bucket_name):
    """The same purge as above (S3, 4 KiB objects, 40 PUT/s of ingest) at `--impact low`, the
    setting docs/purge.md recommends during ingest: a rate cap of 20 objects/s and pacing relative
    to the probe before it (writes at most 30% slower). Ingest under it must be judged as a quiet
    window is: this test is what the level's promise rests on. Measured on the dev cluster: PASS x8 (p99 +48% to +80%, purge 22-39 s for 400
    objects; INCONCLUSIVE x4 while the host's disk was busy, baseline p99 70-977 ms); the cap alone: PASS x7, INCONCLUSIVE x1 (+118%), FAIL x1 (+3598%, 3 slow seconds)."""
    rc, result = _judged_like_a_quiet_window(ceph_cluster, "paced capped purge", _purge_under_load(
        ceph_cluster, tmp_path, bucket_name, 400, "--method", "s3", "--impact", "low"))
    assert rc == 0
    # The purge really ran inside the judged window, at its cap or slower (400 objects, 20/s).
    start, end = (e["t"] for e in result["events"] if e["kind"].startswith("maintenance-"))
    assert end - start >= 19.0, result["events"]


def test_verify_judges_a_normal_impact_purge_like_a_quiet_window(ceph_cluster, tmp_path, bucket_name):
    """`--impact normal` (the stock `bucket rm --purge-objects` inside rgwkeeper's plan and
    read-back) of a whole bucket during 40 PUT/s: what the level promises is ingest judged as a
    quiet window is, as `low` promises at 20 objects/s (docs/purge.md, "Impact levels")."""
    rc, result = _judged_like_a_quiet_window(ceph_cluster, "normal-impact purge", _purge_under_load(
        ceph_cluster, tmp_path, bucket_name, 2000, "--impact", "normal"))
    assert rc == 0
    kinds = [e["kind"] for e in result["events"]]
    assert kinds[0] == "maintenance-start" and kinds[-1] == "maintenance-end", kinds


@pytest.fixture
def rados(cluster_access):
    from rgwkeeper.adapters.rados import RadosAdapter

    with RadosAdapter(cluster_access) as r:
        yield r


@pytest.fixture
def scrub_storm_options(rados):
    """Let every OSD deep-scrub as fast as it can (removed afterwards)."""
    opts = {"osd_max_scrubs": "3", "osd_scrub_sleep": "0", "osd_scrub_load_threshold": "100"}
    for k, v in opts.items():
        rados.command({"prefix": "config set", "who": "osd", "name": k, "value": v})
    yield
    for k in opts:
        rados.command({"prefix": "config rm", "who": "osd", "name": k})


def test_verify_runs_a_deep_scrub_storm(ceph_cluster, tmp_path, bucket_name, scrub_storm_options):
    """The librados path: `osd deep-scrub all` requested every 3 s while load runs, PGs really
    deep-scrubbed, events on the plot, a verdict with its numbers. Not asserted: FAIL. On this
    machine a storm of deep scrubs does not measurably slow PUTs, not with the test cluster's
    few MiB and not with the issue's 4 GiB under a closed loop at 16 in flight (PUT/s even rose;
    docs/loadgen.md). The unpaced purge above is the FAIL case."""
    before = _scrub_stamps(ceph_cluster)
    rc, result = _verify(ceph_cluster, tmp_path, "--maintenance", "deep-scrub", "--scrub-every", "3",
                         "--bucket-prefix", bucket_name, baseline=10, window=12)
    after = _scrub_stamps(ceph_cluster)
    kinds = [e["kind"] for e in result["events"]]
    assert kinds[0] == "maintenance-start" and kinds[-1] == "maintenance-end" and kinds.count("deep-scrub") >= 2
    assert sum(after[pg][1] != before[pg][1] for pg in after if pg in before) >= 1  # PGs deep-scrubbed
    assert result["verdict"]["outcome"] in ("PASS", "FAIL", "INCONCLUSIVE")
    assert rc == {"PASS": 0, "FAIL": 3, "INCONCLUSIVE": 4}[result["verdict"]["outcome"]]
    print(f"deep-scrub storm verdict: {_describe(result)}")


def test_the_seed_reproduces_keys_sizes_and_bytes(ceph_cluster, bucket_name):
    creds = _creds(ceph_cluster)

    def run(prefix: str, seed: int) -> list[dict[str, tuple[int, str]]]:
        workload = Workload(mix=parse_mix("GET=50,PUT=30,LIST=10,DELETE=10"), sizes=SizeDist.parse("loguniform:1KiB-64KiB"),
                            seed=seed, bucket_prefix=prefix, buckets=2, prefixes=3, objects_per_worker=100, guard=16)
        spec = RunSpec(endpoint=ceph_cluster.rgw_endpoint, workload=workload, rate=100, concurrency=16, workers=2,
                       duration_s=3, keep=True)
        data = asyncio.run(run_load(spec, creds))
        assert (_records(data)["status"] < 300).all()

        async def listing():
            async with S3Client(ceph_cluster.rgw_endpoint, creds) as s3:
                out = [await s3.list_keys(b) for b in workload.bucket_names()]
                for b, keys in zip(workload.bucket_names(), out):
                    for i in range(0, len(keys), 1000):
                        await s3.delete_objects(b, list(keys)[i:i + 1000])
                    await s3.delete_bucket(b)
                return out

        return asyncio.run(listing())

    stem = bucket_name[:40]
    first, again = run(f"{stem}-a", 7), run(f"{stem}-b", 7)
    assert sum(len(k) for k in first) > 200
    assert first == again  # same keys, sizes and ETags (MD5 of the bytes) in each bucket
    assert len({etag for keys in first for _, etag in keys.values()}) > 200  # and the bytes differ per object
    sizes = [s for keys in first for s, _ in keys.values()]
    assert min(sizes) >= 1024 and max(sizes) <= 64 * 1024 and len(set(sizes)) > 100
