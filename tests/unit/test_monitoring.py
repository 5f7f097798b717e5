"""The shipped Prometheus alert rules and Grafana dashboard: the rules valid (`promtool check
rules`), each alert firing when it should and not before (`promtool test rules`,
tests/fixtures/alerts), every metric they and the dashboard read exported by the daemon under
that name, and every exported metric on the dashboard. promtool comes from Debian's prometheus
package, which scripts/setup-host.sh installs."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from rgwkeeper.daemon.metrics import Metrics
from rgwkeeper.purge.textfile import ProgressTextfile

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "config/prometheus/rgwkeeper-alerts.yml"
RULE_TESTS = ROOT / "tests/fixtures/alerts/rgwkeeper-alerts.test.yml"


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.fail("promtool not found: run scripts/setup-host.sh (Debian package prometheus)")
    return subprocess.run([tool, *args], capture_output=True, text=True, timeout=120, cwd=ROOT)


def _alerts() -> list[dict]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r]


def test_the_rules_pass_promtool_check():
    out = _promtool("check", "rules", str(RULES))
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(_alerts())} rules found" in out.stdout


def test_each_alert_fires_when_it_should_and_not_before():
    out = _promtool("test", "rules", str(RULE_TESTS))
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_alert_has_a_test_that_expects_it_to_fire():
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fired = {t["alertname"] for group in tests for t in group["alert_rule_test"] if t["exp_alerts"]}
    quiet = {t["alertname"] for group in tests for t in group["alert_rule_test"] if not t["exp_alerts"]}
    names = {a["alert"] for a in _alerts()}
    assert names - fired == set(), "alerts never tested firing"
    assert names - quiet == set(), "alerts never tested staying quiet"


def _exported() -> set[str]:
    """Metric family names: the daemon's, and a purge's progress file's."""
    purge = ProgressTextfile(Path("/nonexistent/purge.prom"), bucket="b", plan="p", method="direct")
    return {m.name for registry in (Metrics().registry, purge.registry) for m in registry.collect()}


def test_the_rules_read_only_metrics_rgwkeeper_exports():
    exported = _exported()
    for alert in _alerts():
        used = set(re.findall(r"\brgwkeeper_[a-z_]+", alert["expr"]))
        if alert["alert"] == "RgwkeeperDown":
            assert alert["expr"].startswith('up{job="rgwkeeper"}')  # Prometheus's own series
            continue
        assert used, alert["alert"]
        # A labelled metric has no sample until a label is set: its family name counts.
        missing = {m for m in used if m not in exported and m.removesuffix("_total") not in exported}
        assert not missing, f"{alert['alert']} reads metrics rgwkeeper does not export: {missing}"


def test_an_osd_whose_spillover_cleared_loses_its_series_so_the_alert_resolves():
    m = Metrics()

    def series() -> dict[str, float]:
        return {s.labels["osd"]: s.value for f in m.registry.collect() if f.name == "rgwkeeper_recommended_db_bytes"
                for s in f.samples}

    m.observe_spillover({2: 8 << 30, 5: 4 << 30})
    assert series() == {"2": 8 << 30, "5": 4 << 30}
    m.observe_spillover({5: 4 << 30})  # osd.2's compaction cleared it (before: its 8 GiB stayed)
    assert series() == {"5": 4 << 30}


DASHBOARD = ROOT / "config/grafana/rgwkeeper-dashboard.json"


def _panel_queries() -> list[tuple[str, str]]:
    dash = json.loads(DASHBOARD.read_text())
    return [(f"{p['title']} {t['refId']}", t["expr"]) for p in dash["panels"] for t in p["targets"]]


def test_every_dashboard_query_is_valid_promql(tmp_path):
    # promtool parses expressions only inside rule files: each query becomes a recording rule.
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"rgwkeeper_dashboard:q{i}", "expr": expr} for i, (_, expr) in enumerate(_panel_queries())]}]}
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump(rules))
    out = _promtool("check", "rules", str(path))
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_dashboard_shows_every_metric_rgwkeeper_exports_and_nothing_else():
    exported = _exported()
    shown = set()
    for where, expr in _panel_queries():
        used = {re.sub(r"_(total|bucket|sum|count)$", "", m) for m in re.findall(r"\brgwkeeper_[a-z_]+", expr)}
        assert used and used <= exported, f"{where}: {used - exported} not exported"
        shown |= used
    assert exported - shown == set(), "metrics without a panel"
