"""A real one-host Ceph cluster (mon, mgr, BlueStore OSDs, RGW) in a container.

The container runs ``bootstrap.sh`` with host networking on free loopback ports; all its
state and logs live in a run directory on the host, which the harness deletes afterwards.
The host reaches the cluster with the ceph.conf, keyring and RGW credentials file the
harness writes out, so librados, the host's ``ceph``/``radosgw-admin`` and boto3 all work.

``RGWKEEPER_TEST_CEPH_CONF`` (with ``RGWKEEPER_TEST_KEYRING``, ``RGWKEEPER_TEST_RGW_ENDPOINT``
and ``RGWKEEPER_TEST_RGW_CREDENTIALS``) points the same suite at an existing cluster.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import time
import tomllib
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Mapping

import docker
import docker.errors

from integration import engine as engine_mod
from integration import image as image_mod
from integration.errors import HarnessError

CACHE_DIR = Path(os.environ.get("RGWKEEPER_TEST_CACHE", "/var/cache/rgwkeeper-test"))
RUN_ROOT = Path(os.environ.get("RGWKEEPER_TEST_RUN_ROOT", "/var/tmp/rgwkeeper-test"))
BOOTSTRAP_SCRIPT = Path(__file__).with_name("bootstrap.sh")
LABEL = engine_mod.LABEL
OWNER_LABEL = engine_mod.OWNER_LABEL
RGW_ADMIN_UID = "rgwkeeper-admin"

BOOTSTRAP_TIMEOUT_S = 240.0
HEALTHY_TIMEOUT_S = 180.0
CONTAINER_STOP_TIMEOUT_S = 10

# Options every test cluster gets. Pool size 1 on one host; loopback only; 8 PGs a pool
# without the autoscaler so PG counts are predictable; short RGW housekeeping intervals so
# resharding happens at test speed.
BASE_OPTIONS: dict[str, dict[str, str]] = {
    "global": {
        "auth_cluster_required": "cephx",
        "auth_service_required": "cephx",
        "auth_client_required": "cephx",
        "public_addr": "127.0.0.1",
        "cluster_addr": "127.0.0.1",
        "ms_bind_ipv6": "false",
        "osd_pool_default_size": "1",
        "osd_pool_default_min_size": "1",
        "osd_pool_default_pg_num": "8",
        "osd_pool_default_pgp_num": "8",
        "osd_pool_default_pg_autoscale_mode": "off",
        "osd_crush_chooseleaf_type": "0",
        "mon_allow_pool_size_one": "true",
        "mon_allow_pool_delete": "true",
        "mon_max_pg_per_osd": "500",
        "mon_warn_on_pool_no_redundancy": "false",
        "auth_allow_insecure_global_id_reclaim": "false",
        "mon_data_avail_warn": "2",
        "mon_data_avail_crit": "1",
        "rados_mon_op_timeout": "30",
        "rados_osd_op_timeout": "30",
    },
    "mon": {"log_file": "/cluster/log/$cluster-$name.log"},
    "mgr": {"log_file": "/cluster/log/$cluster-$name.log"},
    "osd": {
        "log_file": "/cluster/log/$cluster-$name.log",
        "osd_objectstore": "bluestore",
        "bluestore_block_create": "true",
        # A separate, small DB device: with 128 MiB, BLUEFS_SPILLOVER is reported on every
        # OSD right after start on Pacific (not on Reef or Tentacle; docs/testing.md), a real
        # signal to test against. The file must not be called block.db inside the OSD dir
        # (BlueStore makes that a symlink).
        "bluestore_block_db_path": "/var/lib/ceph/osd/$cluster-$id/db.img",
        "bluestore_block_db_create": "true",
        "osd_memory_target": str(1 << 30),
        "bluestore_fsck_on_mkfs": "false",
        # Reef 18.2.5 and later keep BLUESTORE_SLOW_OP_ALERT raised for a day after one slow op, and
        # rgwkeeper waits for quiet while it is (docs/testing.md); this shared machine has slow ops.
        # Pacific does not know the option and ignores it.
        "bluestore_slow_ops_warn_lifetime": "60",
        # Each BlueStore device reserves bdev_aio_max_queue_depth (1024) of the host's fs.aio-max-nr
        # (65536 on Debian): a few clusters at once used it up and OSD mkfs failed with EAGAIN.
        "bdev_aio_max_queue_depth": "128",
    },
    "client.rgw.gw": {
        "log_file": "/cluster/log/$cluster-$name.log",
        "rgw_enable_usage_log": "true",
        "rgw_reshard_thread_interval": "10",
        # RGW queues a bucket for a dynamic reshard from its bucket-stats sync thread, every
        # rgw_user_quota_bucket_sync_interval (180 s by default): tests of resharding would wait
        # that long for the queue entry (docs/testing.md, "Dynamic resharding in the harness").
        "rgw_user_quota_bucket_sync_interval": "5",
        # No rgw_lc_debug_interval here: with it RGW's own lifecycle worker runs non-stop, holds
        # the lc shard locks, and radosgw-admin lc process waits 5 s per busy lock
        # (bucket_lc_post) or skips the bucket (measured: 50 s per lc process with 40 buckets).
        # Tests that need short lifecycle days set it for client.admin (radosgw-admin) only.
    },
}


@dataclass(frozen=True)
class ClusterOptions:
    """What the test cluster looks like. Sizes are bytes."""

    num_osds: int = 3
    osd_block_size: int = 4 << 30
    osd_db_size: int = 128 << 20
    #: Extra ceph.conf options, ``{section: {name: value}}``, merged over BASE_OPTIONS.
    extra: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    #: Make bootstrap.sh fail at this step (tests of the harness's own failure handling).
    fail_at_step: str = ""
    #: The Debian suite whose Ceph packages the image holds (bookworm: Pacific; trixie: Reef;
    #: sid: Tentacle).
    suite: str = field(default_factory=lambda: image_mod.SUITE)

    @property
    def foreign_release(self) -> bool:
        """Not the host's Ceph release: the host's radosgw-admin is not this cluster's."""
        return self.suite != image_mod.HOST_SUITE

    def conf_sections(self) -> dict[str, dict[str, str]]:
        sections = {k: dict(v) for k, v in BASE_OPTIONS.items()}
        sections["osd"]["bluestore_block_size"] = str(self.osd_block_size)
        sections["osd"]["bluestore_block_db_size"] = str(self.osd_db_size)
        for section, opts in self.extra.items():
            sections.setdefault(section, {}).update(opts)
        return sections


@dataclass(frozen=True)
class ClusterInfo:
    """How the host reaches the cluster. Secrets stay in ``credentials_file``."""

    conf: Path
    keyring: Path
    rgw_endpoint: str
    credentials_file: Path
    external: bool
    fsid: str = ""
    log_dir: Path | None = None
    container_id: str | None = None
    #: Put first on PATH for the cluster's own radosgw-admin (run inside its container) when
    #: its release is not the host's: radosgw-admin runs lc process, GC and bucket removal in
    #: its own process, so it must be the cluster's release (tracker 53430 lives there).
    tools_dir: Path | None = None
    #: The Ceph release the cluster runs ("tentacle", "reef", "pacific"), as the test matrix
    #: names it; empty where not known.
    release: str = ""
    #: Where a second RGW of the same zone answers while second_rgw() runs it; empty where the
    #: cluster has none to start (an external cluster).
    rgw2_endpoint: str = ""

    def env(self) -> dict[str, str]:
        """The environment for a subprocess that talks to this cluster (PATH for tools_dir)."""
        env = dict(os.environ)
        if self.tools_dir is not None:
            env["PATH"] = f"{self.tools_dir}{os.pathsep}{env.get('PATH', '')}"
        return env

    def credentials(self) -> tuple[str, str]:
        data = tomllib.loads(self.credentials_file.read_text())
        return data["access_key"], data["secret_key"]

    def ceph(self, *args: str, timeout: float = 60.0) -> object:
        """Run the host's ``ceph`` CLI against this cluster and parse its JSON output."""
        argv = ["ceph", "--conf", str(self.conf), "--keyring", str(self.keyring),
                "--connect-timeout", "20", "--format", "json", *args]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)  # noqa: S603
        if proc.returncode != 0:
            stderr = _redact_keys(proc.stderr.strip()[-500:])
            raise RuntimeError(f"{' '.join(args)}: exit {proc.returncode}: {stderr}")
        out = proc.stdout.strip()
        return json.loads(out) if out else None


# A client that cannot parse its keyring prints the key: "... type=key val=AQ...==: Malformed input".
_KEY_TEXT = re.compile(r"(\bval=|\bkey\s*=\s*)[A-Za-z0-9+/=]{16,}")


def _redact_keys(text: str) -> str:
    return _KEY_TEXT.sub(r"\1<redacted>", text)


def restart_rgw(info: ClusterInfo, *, down_s: float = 3.0, timeout: float = 120.0) -> None:
    """Stop the cluster's RGW, keep it down ``down_s`` seconds, start it again, and return once
    S3 answers. Only for the harness's own cluster (its bootstrap.sh serves the request)."""
    state = control_dir(info)
    if state is None:
        raise HarnessError("rgw restart", "only the harness's containerized cluster can restart its RGW")
    done = state / "rgw-restarted"
    done.unlink(missing_ok=True)
    (state / "rgw-restart").write_text(f"{down_s:g}\n")
    deadline = time.monotonic() + timeout
    while not done.exists():
        if time.monotonic() > deadline:
            raise HarnessError("rgw restart", f"RGW did not come back within {timeout:.0f} s",
                               info.log_dir / "bootstrap.log" if info.log_dir else None)
        time.sleep(0.2)
    _wait_s3(info.rgw_endpoint, "rgw restart", deadline)


def _wait_s3(endpoint: str, what: str, deadline: float) -> None:
    """Until RGW answers S3 at ``endpoint`` (an error answer too)."""
    while True:
        try:
            urllib.request.urlopen(endpoint, timeout=5).close()
            return
        except urllib.error.HTTPError:
            return  # RGW answered (403 for an anonymous request is an answer)
        except OSError:
            if time.monotonic() > deadline:
                raise HarnessError(what, f"S3 does not answer at {endpoint}") from None
            time.sleep(0.2)


def _request_and_wait(info: ClusterInfo, what: str, request: str, done: str, timeout: float) -> float:
    """Ask bootstrap.sh for ``request`` (a file in its state directory) and wait for ``done``;
    the deadline left."""
    state = control_dir(info)
    if state is None or not info.rgw2_endpoint:
        raise HarnessError(what, "only the harness's containerized cluster has a second RGW to start")
    (state / done).unlink(missing_ok=True)
    (state / request).write_text("1\n")
    deadline = time.monotonic() + timeout
    while not (state / done).exists():
        if time.monotonic() > deadline:
            raise HarnessError(what, f"no answer from the cluster within {timeout:.0f} s",
                               info.log_dir / "bootstrap.log" if info.log_dir else None)
        time.sleep(0.2)
    return deadline


@contextlib.contextmanager
def second_rgw(info: ClusterInfo, *, timeout: float = 120.0) -> Iterator[str]:
    """Run a second RGW of the cluster's zone (client.rgw.gw2, no GC or lifecycle threads) for a
    block; yields its endpoint. bootstrap.sh starts it and stops it by its pid file."""
    deadline = _request_and_wait(info, "second rgw start", "rgw2-start", "rgw2-started", timeout)
    try:
        _wait_s3(info.rgw2_endpoint, "second rgw start", deadline)
        yield info.rgw2_endpoint
    finally:
        _request_and_wait(info, "second rgw stop", "rgw2-stop", "rgw2-stopped", timeout)




def control_dir(info: ClusterInfo) -> Path | None:
    """The state directory bootstrap.sh watches, if this is a cluster the harness started
    (here or through ``python -m integration up``)."""
    if info.log_dir is None:
        return None
    state = info.log_dir.parent / "state"
    return state if (state / "ready").exists() else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def render_conf(sections: Mapping[str, Mapping[str, str]]) -> str:
    out = []
    for section, opts in sections.items():
        out.append(f"[{section}]")
        out.extend(f"{k} = {v}" for k, v in opts.items())
        out.append("")
    return "\n".join(out)


def external_from_env() -> ClusterInfo | None:
    conf = os.environ.get("RGWKEEPER_TEST_CEPH_CONF")
    if not conf:
        return None
    missing = [v for v in ("RGWKEEPER_TEST_KEYRING", "RGWKEEPER_TEST_RGW_ENDPOINT",
                           "RGWKEEPER_TEST_RGW_CREDENTIALS") if not os.environ.get(v)]
    if missing:
        raise HarnessError("external cluster", f"RGWKEEPER_TEST_CEPH_CONF is set but {', '.join(missing)} is not")
    keyring = Path(os.environ["RGWKEEPER_TEST_KEYRING"])
    # A cluster started by `python -m integration up` keeps its logs and control files next
    # to its keyring: found, the RGW restart hook works for it too.
    own = (keyring.parent / "state" / "ready").exists() and (keyring.parent / "log").is_dir()
    return ClusterInfo(
        conf=Path(conf),
        keyring=keyring,
        rgw_endpoint=os.environ["RGWKEEPER_TEST_RGW_ENDPOINT"],
        credentials_file=Path(os.environ["RGWKEEPER_TEST_RGW_CREDENTIALS"]),
        external=True,
        log_dir=keyring.parent / "log" if own else None,
        tools_dir=_tools_dir_from_env(),
        rgw2_endpoint=os.environ.get("RGWKEEPER_TEST_RGW2_ENDPOINT", "") if own else "",
    )


def _tools_dir_from_env() -> Path | None:
    value = os.environ.get("RGWKEEPER_TEST_TOOLS_DIR")
    if not value:
        return None
    if not (Path(value) / "radosgw-admin").exists():
        # Silently falling back to the host's radosgw-admin would run another release.
        raise HarnessError("external cluster", f"RGWKEEPER_TEST_TOOLS_DIR={value} has no radosgw-admin "
                           "(the `python -m integration up` that wrote it has ended?)")
    return Path(value)


class ContainerCluster:
    """Start, wait for and tear down one containerized cluster. Use as a context manager."""

    def __init__(self, options: ClusterOptions | None = None, run_root: Path = RUN_ROOT,
                 cache_dir: Path = CACHE_DIR) -> None:
        self.options = options or ClusterOptions()
        self.cache_dir = cache_dir
        suffix = f"-{self.options.suite}" if self.options.foreign_release else ""
        self.run_dir = run_root / f"run-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}{suffix}"
        self.engine: engine_mod.Engine | None = None
        self.client: docker.DockerClient | None = None
        self.container_id: str | None = None
        self.info: ClusterInfo | None = None
        self.timings: dict[str, float] = {}

    # -- lifecycle -----------------------------------------------------------------------
    def __enter__(self) -> ClusterInfo:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> ClusterInfo:
        t0 = time.monotonic()
        self._failed = False
        try:
            self.engine = engine_mod.find_or_start(self.cache_dir)
            self.timings["engine_s"] = time.monotonic() - t0
            self.client = self.engine.client(timeout=900)
            _sweep_stale(self.client, self.run_dir.parent)
            _sweep_old_failed_runs(self.run_dir.parent)
            t1 = time.monotonic()
            image = image_mod.ensure_image(self.client, self.cache_dir, self.options.suite)
            self.timings["image_s"] = time.monotonic() - t1
            t2 = time.monotonic()
            self.info = self._run_container(image)
            self.timings["cluster_s"] = time.monotonic() - t2
            self.timings["total_s"] = time.monotonic() - t0
            return self.info
        except BaseException:
            self._failed = True
            self.stop()
            raise

    def stop(self) -> None:
        """Remove the container (by id), the run directory, and the engine if we started it."""
        try:
            if self.client is not None and self.container_id is not None:
                with contextlib.suppress(docker.errors.NotFound):
                    c = self.client.containers.get(self.container_id)
                    with contextlib.suppress(docker.errors.APIError):
                        c.kill()
                    c.remove(force=True, v=True)
                self.container_id = None
            if os.environ.get("RGWKEEPER_TEST_KEEP_RUN_DIR") == "1":
                pass
            elif getattr(self, "_failed", False):
                # Keep the daemon logs the error message names; drop the OSD data.
                for child in self.run_dir.glob("*"):
                    if child.name != "cluster":
                        _remove(child)
                for child in (self.run_dir / "cluster").glob("*"):
                    if child.name != "log":
                        _remove(child)
            else:
                shutil.rmtree(self.run_dir, ignore_errors=True)
        finally:
            if self.client is not None:
                self.client.close()
                self.client = None
            if self.engine is not None:
                self.engine.stop()
                self.engine = None

    # -- the container -------------------------------------------------------------------
    def _run_container(self, image: str) -> ClusterInfo:
        cdir = self.run_dir / "cluster"
        (cdir / "log").mkdir(parents=True, exist_ok=True)
        (cdir / "state").mkdir(parents=True, exist_ok=True)
        fsid = str(uuid.uuid4())
        mon_port, rgw_port, rgw2_port = _free_port(), _free_port(), _free_port()
        while len({mon_port, rgw_port, rgw2_port}) < 3:
            rgw_port, rgw2_port = _free_port(), _free_port()
        sections = self.options.conf_sections()
        sections["global"] = {"fsid": fsid, "mon_host": f"v2:127.0.0.1:{mon_port}", **sections["global"]}
        sections["client.rgw.gw"]["rgw_frontends"] = f"beast endpoint=127.0.0.1:{rgw_port}"
        # The second RGW (started on demand, second_rgw()) serves requests only, as operators run
        # client-facing RGWs: GC and lifecycle stay with the first, so tests without it see one.
        sections["client.rgw.gw2"] = {
            "log_file": "/cluster/log/$cluster-$name.log",
            "rgw_frontends": f"beast endpoint=127.0.0.1:{rgw2_port}",
            "rgw_enable_gc_threads": "false",
            "rgw_enable_lc_threads": "false",
        }
        (cdir / "ceph.conf").write_text(render_conf(sections))
        (cdir / "params.env").write_text(
            f"MON_PORT={mon_port}\nRGW_PORT={rgw_port}\nRGW2_PORT={rgw2_port}\nNUM_OSDS={self.options.num_osds}\n"
            f"FSID={fsid}\nRGW_ADMIN_UID={RGW_ADMIN_UID}\nFAIL_AT_STEP={self.options.fail_at_step}\n"
        )
        shutil.copyfile(BOOTSTRAP_SCRIPT, cdir / "bootstrap.sh")
        boot_log = cdir / "log" / "bootstrap.log"

        assert self.client is not None
        try:
            container = self.client.containers.run(
                image,
                ["/bin/bash", "/cluster/bootstrap.sh"],
                detach=True,
                network_mode="host",
                volumes={str(cdir): {"bind": "/cluster", "mode": "rw"}},
                labels={LABEL: "1", OWNER_LABEL: str(os.getpid()), "io.rgwkeeper.test.run-dir": str(self.run_dir)},
                name=f"rgwkeeper-test-{self.run_dir.name}",
                init=True,
            )
        except docker.errors.APIError as exc:
            raise HarnessError("container start", str(exc.explanation), boot_log) from None
        self.container_id = container.id

        deadline = time.monotonic() + BOOTSTRAP_TIMEOUT_S
        state = cdir / "state"
        while not (state / "ready").exists():
            container.reload()
            running = container.status in ("created", "running")
            # Read the failure marker after the status: a script that failed and exited
            # between two polls has written it by the time the container is seen exited.
            if (state / "failed").exists():
                raise HarnessError("cluster bootstrap", (state / "failed").read_text().strip(), boot_log)
            step = (state / "step").read_text().strip() if (state / "step").exists() else "?"
            if not running:
                raise HarnessError("cluster bootstrap", f"container {container.status} at step \"{step}\"", boot_log)
            if time.monotonic() > deadline:
                raise HarnessError("cluster bootstrap", f"still at step \"{step}\" after {BOOTSTRAP_TIMEOUT_S:.0f} s", boot_log)
            time.sleep(0.3)

        host_conf = self.run_dir / "ceph.conf"
        keyring = cdir / "ceph.client.admin.keyring"
        host_conf.write_text(render_conf({
            "global": {
                "fsid": fsid,
                "mon_host": f"v2:127.0.0.1:{mon_port}",
                "rados_mon_op_timeout": "30",
                "rados_osd_op_timeout": "30",
                "client_mount_timeout": "30",
                "log_to_file": "false",
            },
            "client.admin": {"keyring": str(keyring)},
        }))
        creds = self.run_dir / "rgw-admin.credentials"
        user = json.loads((cdir / "rgw-admin-user.json").read_text())
        key = next(k for k in user["keys"] if k["user"] == RGW_ADMIN_UID)
        fd = os.open(creds, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f'access_key = "{key["access_key"]}"\nsecret_key = "{key["secret_key"]}"\n')
        (cdir / "rgw-admin-user.json").unlink()

        info = ClusterInfo(
            conf=host_conf, keyring=keyring, rgw_endpoint=f"http://127.0.0.1:{rgw_port}",
            rgw2_endpoint=f"http://127.0.0.1:{rgw2_port}",
            credentials_file=creds, external=False, fsid=fsid, log_dir=cdir / "log",
            container_id=container.id,
            tools_dir=self._write_tools(container.id) if self.options.foreign_release else None,
            release=image_mod.release_of(self.options.suite),
        )
        wait_healthy(info, self.options.num_osds, HEALTHY_TIMEOUT_S)
        return info

    def _write_tools(self, container_id: str) -> Path:
        """radosgw-admin as the cluster's release: the same argv, run in its container, whose
        /etc/ceph holds its own conf and admin keyring (the host's --conf/--keyring paths are
        dropped; nothing secret is in argv)."""
        assert self.engine is not None
        tools = self.run_dir / "bin"
        tools.mkdir(parents=True, exist_ok=True)
        script = tools / "radosgw-admin"
        script.write_text(
            "#!/bin/bash\n"
            "args=(); skip=0\n"
            'for a in "$@"; do\n'
            "  if ((skip)); then skip=0; continue; fi\n"
            '  case "$a" in --conf|--keyring|-c|-k) skip=1; continue;; --conf=*|--keyring=*) continue;; esac\n'
            '  args+=("$a")\n'
            "done\n"
            # No -i: radosgw-admin reads no input. A killed wrapper (a timeout) leaves the
            # radosgw-admin inside running until it ends; teardown removes the container.
            f'exec docker -H {shlex.quote(self.engine.base_url)} exec {container_id} radosgw-admin "${{args[@]}}"\n')
        script.chmod(0o755)
        return tools


def wait_healthy(info: ClusterInfo, num_osds: int, timeout: float) -> None:
    """All OSDs up and in, all PGs active+clean, S3 answers; else fail naming what is missing."""
    import boto3  # local: the harness module is imported by tools that do not need boto3
    from botocore.config import Config

    deadline = time.monotonic() + timeout
    last = "nothing checked yet"
    log = info.log_dir / "bootstrap.log" if info.log_dir else None
    access, secret = info.credentials()
    s3 = boto3.client(
        "s3", endpoint_url=info.rgw_endpoint, aws_access_key_id=access, aws_secret_access_key=secret,
        region_name="default", config=Config(connect_timeout=5, read_timeout=10, retries={"max_attempts": 1}),
    )
    while time.monotonic() < deadline:
        try:
            osd = info.ceph("osd", "stat", timeout=30)
            if not (osd["num_osds"] == num_osds == osd["num_up_osds"] == osd["num_in_osds"]):
                last = f"OSDs up/in {osd['num_up_osds']}/{osd['num_in_osds']} of {num_osds}"
            else:
                pgs = info.ceph("pg", "stat", timeout=30)
                by_state = {s["name"]: s["num"] for s in pgs["pg_summary"]["num_pg_by_state"]}
                total = pgs["pg_summary"]["num_pgs"]
                if total == 0 or by_state.get("active+clean", 0) != total:
                    last = f"PGs not all active+clean: {by_state}"
                else:
                    s3.list_buckets()
                    return
        except Exception as exc:  # noqa: BLE001 - keep polling until the deadline
            last = f"{type(exc).__name__}: {str(exc)[:300]}"
        time.sleep(1.0)
    raise HarnessError("cluster health", f"not ready after {timeout:.0f} s ({last})", log)


def _sweep_stale(client: docker.DockerClient, run_root: Path) -> None:
    """Remove test containers (by id) whose owning process is gone, and their run dirs."""
    for c in client.containers.list(all=True, filters={"label": LABEL}):
        owner = c.labels.get(OWNER_LABEL, "")
        if owner.isdigit() and _alive(int(owner)):
            continue
        run_dir = c.labels.get("io.rgwkeeper.test.run-dir")
        with contextlib.suppress(docker.errors.APIError):
            c.remove(force=True, v=True)
        if run_dir and Path(run_dir).parent == run_root:
            shutil.rmtree(run_dir, ignore_errors=True)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _sweep_old_failed_runs(run_root: Path, max_age_s: float = 7 * 86400) -> None:
    now = time.time()
    for d in run_root.glob("run-*"):
        with contextlib.suppress(OSError):
            if now - d.stat().st_mtime > max_age_s:
                shutil.rmtree(d, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
