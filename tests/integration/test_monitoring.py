"""The shipped alert rules against the real thing: a Prometheus (Debian's package, its binary
run by the test and stopped by PID) scrapes a daemon on the containerized cluster, and a fill
alert fires when the nearfull ratio is lowered under the cluster's usage and resolves when it is
put back."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.integration.test_daemon import _free_port, daemons, journal_pool, wait_for  # noqa: F401 - fixtures

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "config/prometheus/rgwkeeper-alerts.yml"


class Prometheus:
    def __init__(self, tmp_path: Path, targets: list[str], rules: Path) -> None:
        self.port = _free_port()
        cfg = tmp_path / "prometheus.yml"
        cfg.write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(rules)],
            "scrape_configs": [{"job_name": "rgwkeeper", "static_configs": [{"targets": targets}]}]}))
        binary = shutil.which("prometheus")
        if binary is None:
            pytest.fail("prometheus not found: run scripts/setup-host.sh (Debian package prometheus)")
        self.log = open(tmp_path / "prometheus.log", "wb")
        self.proc = subprocess.Popen([binary, f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                      f"--web.listen-address=127.0.0.1:{self.port}"],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        wait_for("prometheus ready", self._ready, timeout=60, interval=0.5)

    def _get(self, path: str) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
            return json.loads(r.read().decode())

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"prometheus exited {self.proc.returncode}; see {self.log.name}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def query(self, expr: str) -> list[dict]:
        return self._get("/api/v1/query?query=" + urllib.request.quote(expr))["data"]["result"]

    def alerts(self, name: str) -> list[dict]:
        return [a for a in self._get("/api/v1/alerts")["data"]["alerts"] if a["labels"]["alertname"] == name]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@pytest.fixture
def prometheus(tmp_path):
    started: list[Prometheus] = []

    def start(targets: list[str], rules: Path) -> Prometheus:
        started.append(Prometheus(tmp_path, targets, rules))
        return started[-1]

    yield start
    for p in started:
        p.stop()


def _rules_without_waits(tmp_path: Path) -> Path:
    """The shipped rules, each alert's `for:` set to 0s: the expressions are what is tested here,
    and their durations are unit-tested with promtool."""
    path = tmp_path / "rgwkeeper-alerts.yml"
    path.write_text(re.sub(r"(?m)^(\s+)for: \S+$", r"\1for: 0s", RULES.read_text()))
    return path


def _raw_used(ceph_cluster) -> float:
    return ceph_cluster.ceph("df")["stats"]["total_used_raw_ratio"]


def test_a_real_prometheus_sees_the_fill_alert_fire_and_resolve(ceph_cluster, journal_pool, daemons, prometheus,
                                                                 tmp_path):
    port = _free_port()
    d = daemons("watched", daemon={"metrics_address": f"127.0.0.1:{port}", "lease_s": 30.0}).start()
    wait_for("a reconcile pass", d.passes, timeout=90)
    prom = prometheus([f"127.0.0.1:{port}"], _rules_without_waits(tmp_path))
    wait_for("the daemon scraped as leader", lambda: prom.query('rgwkeeper_leader{job="rgwkeeper"} == 1'),
             timeout=60)
    assert prom.alerts("RgwkeeperFillNearNearfull") == []
    assert prom.alerts("RgwkeeperNoLeader") == [] and prom.alerts("RgwkeeperDown") == []
    nearfull = ceph_cluster.ceph("osd", "dump")["nearfull_ratio"]
    # Within fill.warn_margin (0.05) of the ratio: the daemon raises its raw fill alert.
    low = round(_raw_used(ceph_cluster) + 0.03, 4)
    try:
        ceph_cluster.ceph("osd", "set-nearfull-ratio", f"{low:.4f}")
        fired = wait_for("RgwkeeperFillNearNearfull firing for raw", lambda: [
            a for a in prom.alerts("RgwkeeperFillNearNearfull")
            if a["state"] == "firing" and a["labels"].get("scope") == "raw"], timeout=120, interval=1)
        assert fired[0]["annotations"]["summary"] == "raw is within fill.warn_margin of the nearfull ratio"
    finally:
        ceph_cluster.ceph("osd", "set-nearfull-ratio", f"{nearfull:.4f}")
    wait_for("RgwkeeperFillNearNearfull resolved", lambda: not prom.alerts("RgwkeeperFillNearNearfull"),
             timeout=120, interval=1)
    assert any(e.get("event") == "fill alert cleared" for e in d.events())
