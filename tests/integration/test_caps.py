"""The least-privilege cephx profile of docs/cluster-access.md, measured: a client with exactly
the caps that page gives runs every command that talks to the cluster, and the one cap that
looks wider than needed (`osd 'allow *'`) is shown to be needed."""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from integration.waits import wait_for
from tests.integration.test_daemon import POOL
from tests.integration.test_purge import bucket_stats, fill

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "cluster-access.md"


def documented_caps() -> list[str]:
    """The cap arguments of the page's `ceph auth get-or-create client.rgwkeeper` command."""
    text = DOC.read_text()
    m = re.search(r"```sh\n(ceph auth get-or-create client\.rgwkeeper .*?)\n```", text, re.S)
    assert m, f"{DOC} has no ceph auth get-or-create client.rgwkeeper block"
    argv = shlex.split(m.group(1).replace("\\\n", " "))
    caps = argv[argv.index("client.rgwkeeper") + 1:argv.index("-o")]
    assert len(caps) % 2 == 0 and set(caps[::2]) <= {"mon", "mgr", "osd"}, caps
    return caps


def make_client(cluster, name: str, caps: list[str], keyring: Path) -> None:
    """Create ``name`` with ``caps``, its key made by the host's ceph-authtool and imported, as
    docs/cluster-access.md says for an admin node older than the cluster: a Tentacle mon makes
    aes256k keys, which the host's Pacific clients cannot read (docs/testing.md)."""
    cap_args = [a for kind, spec in zip(caps[::2], caps[1::2]) for a in ("--cap", kind, spec)]
    keyring.unlink(missing_ok=True)
    subprocess.run(["ceph-authtool", "--create-keyring", str(keyring), "--gen-key", "-n", name, *cap_args],
                   check=True, capture_output=True, timeout=30)
    keyring.chmod(0o600)
    cluster.ceph("auth", "import", "-i", str(keyring))


class Client:
    """A cephx client made for one test, its keyring where the host's tools and (on a release
    that is not the host's) the cluster container's radosgw-admin both find it."""

    def __init__(self, cluster, tmp_path: Path, caps: list[str]) -> None:
        self.cluster = cluster
        self.name = f"client.rgwk-caps-{uuid.uuid4().hex[:6]}"
        # /cluster is the container's /etc/ceph: radosgw-admin there finds ceph.<name>.keyring.
        where = cluster.log_dir.parent if cluster.log_dir is not None else tmp_path
        self.keyring = where / f"ceph.{self.name}.keyring"
        make_client(cluster, self.name, caps, self.keyring)
        self.config = tmp_path / f"{self.name}.toml"
        self.config.write_text(
            f'[cluster]\nname = "{self.name}"\nkeyring = "{self.keyring}"\nconf = "{cluster.conf}"\ntimeout_s = 30.0\n'
            f'[rgw]\nendpoint = "{cluster.rgw_endpoint}"\ncredentials_file = "{cluster.credentials_file}"\n'
            f'[daemon]\ntick_s = 2.0\nlease_s = 20.0\npool = "{POOL}"\ninstance_id = "caps"\n'
            f'state_dir = "{tmp_path / "daemon"}"\nmetrics_address = ""\n'
            f'[purge]\nstate_dir = "{tmp_path / "purge"}"\n'
            f'[spillover]\nenabled = false\n')

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "rgwkeeper", args[0], "--config", str(self.config), *args[1:]]

    def run(self, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(*args), capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, env=self.cluster.env())

    def ok(self, *args: str) -> subprocess.CompletedProcess:
        proc = self.run(*args)
        assert proc.returncode == 0, f"rgwkeeper {' '.join(args)} as {self.name}: exit {proc.returncode}\n" \
                                     f"{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
        return proc

    def remove(self) -> None:
        self.cluster.ceph("auth", "del", self.name)
        self.keyring.unlink(missing_ok=True)


@pytest.fixture
def client_with(ceph_cluster, tmp_path):
    made = []

    def make(caps):
        c = Client(ceph_cluster, tmp_path, caps)
        made.append(c)
        return c

    yield make
    for c in made:
        c.remove()


@pytest.mark.releases("tentacle", "pacific")
def test_every_command_runs_with_the_documented_least_privilege_caps(ceph_cluster, s3, bucket_name, tmp_path,
                                                                     client_with, rgw_option):
    c = client_with(documented_caps())
    rgw_option("rgw_lc_debug_interval", "1", who=c.name)  # a lifecycle "day" is 1 s for its lc process

    status = json.loads(c.ok("status", "--json").stdout)
    assert status["errors"] == [], status["errors"]
    assert len(status["bluefs"]) == len(status["osds"]) > 0 and status["scrub"]["effective_options"]
    c.ok("plan")

    pre = f"{bucket_name}-pre"
    c.ok("preshard", pre, "--expected-objects", "2000000", "--objects-per-shard", "100000", "--json")
    assert bucket_stats(ceph_cluster, pre) is not None

    direct, viaS3, aged = (f"{bucket_name}-{k}" for k in ("direct", "s3", "lc"))
    for b in (direct, viaS3, aged):
        s3.create_bucket(Bucket=b)
        fill(s3, b, 40, size=256)
    assert json.loads(c.ok("purge", direct, "--method", "direct", "--yes", "--json").stdout)["ok"]
    assert json.loads(c.ok("purge", viaS3, "--method", "s3", "--yes", "--json").stdout)["ok"]
    assert bucket_stats(ceph_cluster, direct) is None and bucket_stats(ceph_cluster, viaS3) is None
    time.sleep(2.5)  # two lifecycle "days"
    (expired,) = json.loads(c.ok("expire", aged, "--prefix", "obj/", "--days", "1", "--yes", "--json").stdout)
    assert expired["ok"], expired
    assert not s3.list_objects_v2(Bucket=aged).get("Contents")
    c.ok("purge", pre, "--yes", "--json")

    # The daemon: creates its pool, takes its lock, journals, runs passes (deep-scrub debt and
    # the throttle's decision included), and stops cleanly.
    log = tmp_path / "daemon.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(c.argv("daemon"), stdout=out, stderr=subprocess.STDOUT, env=ceph_cluster.env())
        try:
            wait_for("two passes", lambda: log.read_text().count('"event": "reconciled"') >= 2
                     or proc.poll() is not None, timeout=120)
            assert proc.poll() is None, log.read_text()[-3000:]
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(60) == 0, log.read_text()[-3000:]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    events = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    assert not [e for e in events if e.get("level") in ("error", "critical")], events
    c.ok("pause")
    c.ok("resume")
    c.ok("restore")


@pytest.mark.releases("tentacle", "pacific")
def test_osd_allow_rwx_is_not_enough_for_status(ceph_cluster, tmp_path, client_with):
    """The one cap wider than rwx, shown to be needed: with osd 'allow rwx' every OSD refuses
    tell, and status says so (per OSD, with the cap to add) instead of showing spillover."""
    caps = documented_caps()
    caps[caps.index("osd") + 1] = "allow rwx"
    proc = client_with(caps).ok("status", "--json")
    status = json.loads(proc.stdout)
    assert status["bluefs"] == [] and status["scrub"]["effective_options"] == {}, status["bluefs"]
    refused = [e for e in status["errors"] if e["source"].startswith("osd.")]
    assert refused and all("(EACCES)" in e["error"] and "osd 'allow *'" in e["error"] for e in refused), refused
