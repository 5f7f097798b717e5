"""`./scripts/demo.sh`: rgwkeeper's main job on a containerized Ceph, one step at a time.

1. boot the cluster, write sample buckets, `rgwkeeper status`;
2. start the daemon; put PUT load on RGW (`rgwkeeper loadgen run`) and request a deep scrub of
   the data pool; the daemon throttles scrub: its `plan`, the override journal and the levers
   read back from every OSD;
3. the load stops: the daemon gives everything back (`ceph config dump` equal to before), then
   stops on SIGTERM;
4. `rgwkeeper purge` of a sample bucket runs under `rgwkeeper verify`: the verdict and its plot;
5. the files it wrote, and what to run on your own cluster.

Every rgwkeeper step runs the real CLI as a subprocess, as an operator would. A step that does
not show what it should ends the demo with one line saying which, exit 1.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from integration.cluster import ClusterInfo, ContainerCluster
from integration import waits
from integration.errors import HarnessError

TICK_S = 2.0
#: The demo's write thresholds sit well below what loadgen's PUTs reach on a small machine, so
#: the throttle engages within a few passes of the load starting.
HIGH_WRITE_OPS = 40.0
LOW_WRITE_OPS = 20.0
HOLD_S = 6.0
LOAD_S = 45.0
PURGE_BUCKET = "demo-purge"


class DemoFailed(Exception):
    """A step did not show what it should; the message is the one line printed."""


def say(step: str, text: str) -> None:
    print(f"\n== {step}: {text}", flush=True)


def show(argv: list[str]) -> None:
    print("$ " + " ".join(shlex.quote(a) for a in argv), flush=True)


def wait_for(what: str, predicate: Callable[[], Any], timeout: float) -> Any:
    return waits.wait_for(what, predicate, timeout, interval=1.0, error=DemoFailed)


class Demo:
    def __init__(self, info: ClusterInfo, out: Path, objects: int, purge_objects: int) -> None:
        self.info = info
        self.out = out.resolve()  # the config's state directories must be absolute
        self.objects = objects
        self.purge_objects = purge_objects
        self.config = out / "rgwkeeper.toml"
        self.rgwkeeper = [sys.executable, "-m", "rgwkeeper"]
        self.env = {**info.env(), "COLUMNS": "100", "RGWKEEPER_CONFIG": str(self.config)}
        self.daemon: subprocess.Popen[bytes] | None = None
        #: False on a release whose op queue leaves the daemon nothing to throttle (mClock).
        self.throttled = True

    # -- helpers ---------------------------------------------------------------------------------

    def run(self, *args: str, check: bool = True, echo: bool = True, ok: tuple[int, ...] = (0,)) -> str:
        """One rgwkeeper command (the config comes from $RGWKEEPER_CONFIG); its output printed."""
        show(["rgwkeeper", *args])
        proc = subprocess.run([*self.rgwkeeper, *args], capture_output=True, text=True, env=self.env, check=False)
        if echo:
            print(proc.stdout, end="", flush=True)
        if check and proc.returncode not in ok:
            last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise DemoFailed(f"rgwkeeper {args[0]} exited {proc.returncode}: {last}")
        return proc.stdout

    def config_dump(self) -> dict[tuple[str, str], str]:
        return {(e["section"], e["name"]): e["value"] for e in self.info.ceph("config", "dump")}

    def passes(self) -> list[dict[str, Any]]:
        out = []
        for line in (self.out / "daemon.log").read_text().splitlines():
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if event.get("event") == "reconciled":
                out.append(event)
        return out

    def write_config(self, metrics_port: int) -> None:
        i = self.info
        self.config.write_text(f"""# Written by the demo: rgwkeeper against the demo's containerized Ceph.
[cluster]
conf = "{i.conf}"
keyring = "{i.keyring}"

[rgw]
endpoint = "{i.rgw_endpoint}"
credentials_file = "{i.credentials_file}"

[daemon]
instance_id = "demo"
tick_s = {TICK_S}
lease_s = 30.0
state_dir = "{self.out / 'state'}"
metrics_address = "127.0.0.1:{metrics_port}"

[scrub_throttle]
high_write_ops = {HIGH_WRITE_OPS}
low_write_ops = {LOW_WRITE_OPS}
smoothing_s = 2.0
hold_s = {HOLD_S}

[spillover]
enabled = false

[preshard]
daemon_reshards = false

[purge]
state_dir = "{self.out / 'purge'}"
""")

    # -- the steps -------------------------------------------------------------------------------

    def sample_buckets(self, shard_limit: int) -> None:
        say("1/5", "sample buckets, and what `rgwkeeper status` sees of the cluster")
        # A lowered reshard threshold so the bucket table has something to flag at demo size.
        self.info.ceph("config", "set", "client", "rgw_max_objs_per_shard", str(shard_limit))
        s3 = self.info_s3()
        for bucket, n in {"ingest-2026-11": self.objects, "logs": self.objects // 4, "archive": 3,
                          PURGE_BUCKET: self.purge_objects}.items():
            s3.create_bucket(Bucket=bucket)
            if bucket != PURGE_BUCKET:
                # One index shard so the demo's small buckets approach the lowered limit.
                subprocess.run(["radosgw-admin", "--conf", str(self.info.conf), "--keyring", str(self.info.keyring),
                                "bucket", "reshard", "--bucket", bucket, "--num-shards", "1",
                                "--yes-i-really-mean-it"], check=True, capture_output=True, timeout=60,
                               env=self.info.env())
            with ThreadPoolExecutor(16) as pool:
                list(pool.map(lambda k, b=bucket: s3.put_object(Bucket=b, Key=f"obj/{k:06d}", Body=b"x" * 4096),
                              range(n)))
        self.run("status")

    def info_s3(self) -> Any:
        import boto3
        from botocore.config import Config

        access, secret = self.info.credentials()
        return boto3.client("s3", endpoint_url=self.info.rgw_endpoint, aws_access_key_id=access,
                            aws_secret_access_key=secret, region_name="default",
                            config=Config(s3={"addressing_style": "path"}, max_pool_connections=16))

    def throttle(self) -> dict[tuple[str, str], str]:
        say("2/5", "the daemon under heavy PUT load while the data pool is deep-scrubbed")
        before = self.config_dump()
        argv = [*self.rgwkeeper, "daemon"]
        show(["rgwkeeper", "daemon", ">", "daemon.log", "&"])
        with open(self.out / "daemon.log", "ab") as log:
            self.daemon = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        # The sample buckets' writes linger in the pool's rate for a few passes: start the load
        # once the daemon sees the cluster quiet, so what it does next is the load's doing.
        quiet = wait_for("a pass that sees the cluster quiet", lambda: next(
            (i for i, p in enumerate(self.passes()) if p["gate"] == "ok" and p["write_ops"] < LOW_WRITE_OPS
             and not p["overrides"]), None), timeout=180)
        first = self.passes()[quiet]
        print(f"daemon: gate {first['gate']}, scrub throttle {first['scrub_state']}: {first['scrub_reason']}",
              flush=True)
        load_argv = ["loadgen", "run", "--duration", str(LOAD_S), "--mix", "PUT=100", "--concurrency", "16",
                     "--bucket-prefix", "demo-load", "--no-progress", "--out", str(self.out / "load.json")]
        show(["rgwkeeper", *load_argv, "&"])
        load = subprocess.Popen([*self.rgwkeeper, *load_argv], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                env=self.env, text=True)
        try:
            wait_for(f"the daemon to see more than {HIGH_WRITE_OPS:.0f} write op/s",
                     lambda: any(p["write_ops"] > HIGH_WRITE_OPS for p in self.passes()[quiet:]), timeout=60)
            pgs = self.info.ceph("pg", "ls-by-pool", "default.rgw.buckets.data")
            pgs = pgs["pg_stats"] if isinstance(pgs, dict) else pgs
            print(f"$ ceph pg deep-scrub PGID   # each of the data pool's {len(pgs)} PGs", flush=True)
            for pg in pgs:
                self.info.ceph("pg", "deep-scrub", pg["pgid"])
            if first["scrub_state"] == "nothing-to-throttle":
                self.nothing_to_throttle(quiet)
            else:
                self.engaged(quiet)
        finally:
            out, _ = load.communicate(timeout=LOAD_S + 120)
        say("2/5", "the load that was running (rgwkeeper loadgen run)")
        print(out, end="", flush=True)
        return before

    def engaged(self, quiet: int) -> None:
        """wpq: the throttle engages; its plan, the journal and the levers on every OSD."""
        engaged = wait_for("the throttle to engage", lambda: next(
            (p for p in self.passes()[quiet:] if p["scrub_state"] == "engage" and p["changed"]), None), timeout=60)
        print(f"daemon: {engaged['scrub_reason']}; changed: {', '.join(engaged['changed'])}", flush=True)
        # The pass after: every lever is in the journal and re-asserted.
        wait_for("a pass holding the throttle", lambda: any(
            p["scrub_state"] == "throttled" for p in self.passes()[quiet:]), timeout=60)
        plan = json.loads(self.run("plan", "--json", echo=False))
        self.run("plan")
        overrides = plan["overrides"]
        if not overrides:
            raise DemoFailed("the daemon engaged but its journal holds no override")
        self.read_back(overrides)

    def nothing_to_throttle(self, quiet: int) -> None:
        """mClock releases where no lever was measured to help: the daemon watches and leaves
        scrub to mClock; the demo shows that it changed nothing while the load ran."""
        def loaded() -> list[dict[str, Any]]:
            return [p for p in self.passes()[quiet:] if p["write_ops"] > HIGH_WRITE_OPS]

        seen = wait_for("three passes under the load", lambda: len(loaded()) >= 3 and loaded(), timeout=60)
        if any(p["changed"] or p["overrides"] for p in seen):
            raise DemoFailed("the daemon changed a setting on a release where it has nothing to throttle")
        print(f"daemon: {seen[-1]['write_ops']:.0f} write op/s, deep scrub requested: changed nothing, as it "
              "should here (RGWKEEPER_TEST_RELEASE=pacific ./scripts/demo.sh shows the throttle on wpq)", flush=True)
        self.run("plan")
        self.throttled = False

    def read_back(self, overrides: dict[str, dict[str, Any]]) -> None:
        osds = [o["osd"] for o in self.info.ceph("osd", "dump")["osds"] if o["up"]]
        print("levers read back from the OSDs (`ceph tell osd.N config get NAME`):", flush=True)
        for e in overrides.values():
            if e["kind"] != "config":
                continue
            seen = {o: self.info.ceph("tell", f"osd.{o}", "config", "get", e["name"])[e["name"]] for o in osds}
            same = all(_same(v, e["applied_value"]) for v in seen.values())
            print(f"  {e['name']}: set {e['applied_value']}, OSDs report "
                  f"{', '.join(f'osd.{o}={v}' for o, v in seen.items())}  {'ok' if same else 'DIFFERENT'}", flush=True)
            if not same:
                raise DemoFailed(f"{e['name']} is not {e['applied_value']} on every OSD")

    def give_back(self, before: dict[tuple[str, str], str]) -> None:
        say("3/5", "the load stopped: the daemon gives everything back, then stops on SIGTERM")
        released = self.throttled and wait_for("the throttle to be released",
                            lambda: next((p for p in reversed(self.passes())
                                          if p["scrub_state"] == "release" and not p["overrides"]), None),
                            timeout=120)
        if released:
            print(f"daemon: {released['scrub_reason']}", flush=True)
        after = wait_for("`ceph config dump` to equal the one before", lambda: (d := self.config_dump()) == before
                         and d, timeout=30)
        print(f"$ ceph config dump   # {len(after)} entries, equal to the dump taken before the daemon started",
              flush=True)
        self.run("restore", "--dry-run")
        assert self.daemon is not None
        show(["kill", "-TERM", str(self.daemon.pid)])
        self.daemon.send_signal(signal.SIGTERM)
        code = self.daemon.wait(60)
        if code != 0:
            raise DemoFailed(f"the daemon exited {code} on SIGTERM (see {self.out / 'daemon.log'})")
        print("daemon: exited 0", flush=True)

    def purge_under_verify(self) -> None:
        say("4/5", f"a purge of {PURGE_BUCKET} ({self.purge_objects} objects) under steady PUT load, judged")
        self.run("purge", PURGE_BUCKET, "--dry-run")
        purge = (f"{sys.executable} -m rgwkeeper purge {PURGE_BUCKET} --yes "
                 f"--metrics-textfile {self.out / 'rgwkeeper-purge.prom'}")
        # verify exits 0 PASS, 3 FAIL, 4 INCONCLUSIVE: each is a result to show, not a failed demo.
        self.run("verify", "--baseline", "15", "--window", "20", "--rate", "40", "--mix", "PUT=100",
                 "--concurrency", "8", "--bucket-prefix", "demo-verify", "--no-progress",
                 "--maintenance-cmd", purge, "--out", str(self.out / "verify.json"),
                 "--plot", str(self.out / "verify.png"), ok=(0, 3, 4))
        left = self.info_s3().list_objects_v2(Bucket=PURGE_BUCKET) if self._bucket_exists() else {}
        if left.get("KeyCount"):
            raise DemoFailed(f"{PURGE_BUCKET} still holds objects after the purge")
        print(f"{PURGE_BUCKET}: gone (S3 HeadBucket: 404)", flush=True)

    def _bucket_exists(self) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.info_s3().head_bucket(Bucket=PURGE_BUCKET)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchBucket"):
                return False
            raise
        return True

    def files(self) -> None:
        say("5/5", f"what the demo wrote in {self.out}, and what to run on your own cluster")
        for p in sorted(self.out.iterdir()):
            if p.is_file():
                print(f"  {p.name:<24} {_what(p.name)}")
        print("""
On your own cluster (docs/operations.md installs and configures it):
  rgwkeeper status                                     fill, spillover, shard pressure, scrub
  rgwkeeper plan                                       what the daemon would do now, as commands
  systemctl enable --now rgwkeeper                     the daemon (systemd/rgwkeeper.service)
  rgwkeeper preshard BUCKET --expected-objects N       before a big ingest
  rgwkeeper purge BUCKET --dry-run                     the exact commands, then run it without --dry-run
  rgwkeeper verify --maintenance deep-scrub            does your ingest notice scrub?""", flush=True)

    def stop_daemon(self) -> None:
        if self.daemon is not None and self.daemon.poll() is None:
            self.daemon.send_signal(signal.SIGTERM)
            try:
                self.daemon.wait(60)
            except subprocess.TimeoutExpired:
                self.daemon.kill()
                self.daemon.wait()


def _same(a: str, b: str) -> bool:
    try:
        return float(a) == float(b)
    except ValueError:
        return str(a) == str(b)


_WHAT = {"rgwkeeper.toml": "the config every step used (docs/operations.md documents each key)",
         "daemon.log": "the daemon's structured log, one JSON event per line (journald gets the same)",
         "load.json": "the PUT load's result: ops/s and latency percentiles per operation",
         "verify.json": "the purge's verdict with the baseline and maintenance windows",
         "verify.png": "ops/s and p99 over time, the purge's window marked",
         "rgwkeeper-purge.prom": "the purge's last progress, as node exporter's textfile collector reads it"}


def _what(name: str) -> str:
    return _WHAT.get(name, "")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main(out: Path, objects: int, shard_limit: int, purge_objects: int) -> int:
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(SystemExit(143)))
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    cluster = ContainerCluster()
    demo: Demo | None = None
    t0 = time.monotonic()
    try:
        print("demo: booting a containerized Ceph (mon, mgr, 3 BlueStore OSDs, RGW) ...", flush=True)
        try:
            info = cluster.start()
        except HarnessError as exc:
            print(f"demo: {exc}", file=sys.stderr)
            return 3
        print(f"demo: {info.release or 'ceph'} ready in {cluster.timings['total_s']:.1f} s", flush=True)
        demo = Demo(info, out, objects, purge_objects)
        demo.write_config(_free_port())
        demo.sample_buckets(shard_limit)
        before = demo.throttle()
        demo.give_back(before)
        demo.purge_under_verify()
        demo.files()
        print(f"\ndemo: done in {time.monotonic() - t0:.0f} s", flush=True)
        return 0
    except DemoFailed as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 1
    finally:
        if demo is not None:
            demo.stop_daemon()
        cluster.stop()
        print("demo: cluster removed", flush=True)
