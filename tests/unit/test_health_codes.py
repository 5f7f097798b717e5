"""Is the cluster quiet? Health codes classified in one table (rgwkeeper.releases.HEALTH_CODES),
fed with the checks real Pacific, Reef and Tentacle clusters raise: a release's configuration or
security warnings never hold quiet work back, and its stress checks always do."""

from __future__ import annotations

import copy
import io
import json

import pytest
from rich.console import Console

from rgwkeeper import releases
from rgwkeeper.actions import CompactOsd, ReshardBucket
from rgwkeeper.cli.render import render_status
from rgwkeeper.config import SpilloverSection
from rgwkeeper.policy import spillover
from rgwkeeper.policy.shards import approaching
from rgwkeeper.snapshot import parse
from tests.unit.fakes import FIXTURES

GIB = 1 << 30


def observation(release: str) -> dict:
    return json.loads((FIXTURES.parent / release / "observation.json").read_text())


def with_check(obs: dict, code: str, *, muted: bool = False, severity: str = "HEALTH_WARN") -> dict:
    """``obs`` with one more check, shaped as `ceph health detail -f json` shapes it."""
    obs = copy.deepcopy(obs)
    obs["health"]["checks"][code] = {"severity": severity, "muted": muted, "detail": [],
                                     "summary": {"message": f"{code} raised", "count": 1}}
    obs["health"]["status"] = "HEALTH_WARN"
    return obs


def spilled(obs: dict) -> dict:
    obs = copy.deepcopy(obs)
    for perf in obs["osd_bluefs"].values():
        perf.setdefault("bluefs", perf)["slow_used_bytes"] = 2 * GIB
    return obs


def near_reshard(obs: dict) -> dict:
    obs = copy.deepcopy(obs)
    limit = int(obs["rgw_limit"]["rgw_max_objs_per_shard"])
    for b in obs["buckets"]:
        b["num_shards"] = 1
        b["usage"].setdefault("rgw.main", {})["num_objects"] = limit - 1
    return obs


def test_the_checks_each_captured_release_raises_at_rest_are_classified_and_not_load():
    raised = {r: set(observation(r)["health"]["checks"]) for r in ("pacific", "reef", "tentacle")}
    assert raised == {"pacific": {"BLUEFS_SPILLOVER"}, "reef": {"MGR_MODULE_DEPENDENCY"},
                      "tentacle": {"AUTH_INSECURE_CLIENT_KEY_TYPE", "AUTH_INSECURE_KEYS_ALLOWED",
                                   "AUTH_INSECURE_KEYS_CREATABLE"}}
    for release in raised:
        snap = parse(observation(release))
        assert snap.health_status == "HEALTH_WARN" and snap.load_checks == ()


@pytest.mark.parametrize("code", ["SLOW_OPS", "BLUESTORE_SLOW_OP_ALERT", "OSD_DOWN", "PG_DEGRADED",
                                  "DB_DEVICE_STALLED_READ_ALERT", "OSD_HOST_DOWN", "PG_AVAILABILITY"])
def test_stress_checks_are_load_even_when_muted(code):
    assert parse(with_check(observation("tentacle"), code)).load_checks == (code,)
    assert parse(with_check(observation("tentacle"), code, muted=True)).load_checks == (code,)


def test_a_check_rgwkeeper_does_not_know_is_load_until_an_operator_mutes_it():
    obs = with_check(observation("tentacle"), "OSD_SOMETHING_NEW_IN_UMBRELLA")
    assert parse(obs).load_checks == ("OSD_SOMETHING_NEW_IN_UMBRELLA",)
    muted = with_check(observation("tentacle"), "OSD_SOMETHING_NEW_IN_UMBRELLA", muted=True)
    assert parse(muted).load_checks == ()


def test_the_cve_key_type_errors_are_security_not_load_although_their_severity_is_error():
    obs = with_check(observation("tentacle"), "AUTH_INSECURE_SERVICE_KEY_TYPE", severity="HEALTH_ERR")
    assert parse(with_check(obs, "AUTH_INSECURE_SERVICE_TICKETS", severity="HEALTH_ERR")).load_checks == ()


SPILL = SpilloverSection(max_write_ops=1000, min_interval_s=3600)


def test_a_tentacle_cluster_whose_only_warnings_are_auth_insecure_is_quiet_enough_to_compact():
    d = spillover.decide(parse(spilled(observation("tentacle"))), SPILL, {}, smoothed_write_ops=10,
                         gate_open=True, now=100.0)
    assert [type(a) for a in d.actions] == [CompactOsd]


@pytest.mark.parametrize("release, code", [("tentacle", "BLUESTORE_SLOW_OP_ALERT"), ("reef", "BLUESTORE_SLOW_OP_ALERT"),
                                           ("pacific", "SLOW_OPS"), ("tentacle", "OSD_DOWN")])
def test_compaction_waits_while_a_stress_check_is_raised_even_at_low_write_load(release, code):
    d = spillover.decide(parse(spilled(with_check(observation(release), code))), SPILL, {}, smoothed_write_ops=10,
                         gate_open=True, now=100.0)
    assert d.actions == () and f"not quiet ({code})" in d.reason


KW = dict(reshard_at_ratio=0.75, growth_factor=2.0, target_ratio=0.5, max_write_ops=1000, max_shards=1999,
          multisite=False)


def test_a_bucket_near_the_threshold_is_resharded_on_a_quiet_tentacle_and_waits_under_a_slow_op_alert():
    plans, _ = approaching(parse(near_reshard(observation("tentacle"))), smoothed_write_ops=10, **KW)
    assert plans and isinstance(plans[0].actions[0], ReshardBucket)
    plans, why = approaching(parse(near_reshard(with_check(observation("tentacle"), "BLUESTORE_SLOW_OP_ALERT"))),
                             smoothed_write_ops=10, **KW)
    assert plans == [] and "not quiet (BLUESTORE_SLOW_OP_ALERT)" in why and "waiting for a quiet time" in why


def _status_text(obs: dict) -> str:
    buf = io.StringIO()
    render_status(parse(obs), console=Console(file=buf, width=200, color_system=None), bucket_rows=0)
    return buf.getvalue()


def test_status_says_which_warnings_are_load_related():
    line = next(x for x in _status_text(observation("tentacle")).splitlines() if x.startswith("health: "))
    assert line == ("health: quiet (no load-related check); not load: security AUTH_INSECURE_CLIENT_KEY_TYPE, "
                    "AUTH_INSECURE_KEYS_ALLOWED, AUTH_INSECURE_KEYS_CREATABLE")
    obs = with_check(with_check(observation("reef"), "BLUESTORE_SLOW_OP_ALERT"), "NEW_CODE")
    line = next(x for x in _status_text(obs).splitlines() if x.startswith("health: "))
    assert line == ("health: load (not quiet): BLUESTORE_SLOW_OP_ALERT, NEW_CODE (NEW_CODE unclassified: counted as "
                    "load until muted); not load: software MGR_MODULE_DEPENDENCY")
    d = parse(obs).to_dict()["derived"]
    assert d["load_checks"] == ["BLUESTORE_SLOW_OP_ALERT", "NEW_CODE"]
    assert d["health_kinds"] == {"MGR_MODULE_DEPENDENCY": "not-load", "BLUESTORE_SLOW_OP_ALERT": "load",
                                 "NEW_CODE": "load"}


def test_the_table_is_one_row_per_code_and_names_releases_it_knows():
    for code, row in releases.HEALTH_CODES.items():
        assert row.code == code and row.kind in (releases.LOAD, releases.NOT_LOAD) and row.about
        assert row.since in releases.RELEASES
    assert releases.HEALTH_CODES["BLUESTORE_SLOW_OP_ALERT"].since == "reef"
    assert releases.HEALTH_CODES["AUTH_INSECURE_KEYS_ALLOWED"].kind == releases.NOT_LOAD


@pytest.mark.parametrize("release", ["reef", "tentacle"])
def test_a_captured_bluestore_slow_op_alert_is_load_and_the_warnings_beside_it_are_not(release):
    # tests/fixtures/capture_health.py: every BlueStore op made slow for a moment on a real cluster.
    obs = observation(release)
    obs["health"] = json.loads((FIXTURES.parent / release / "health-slow-op-alert.json").read_text())
    snap = parse(obs)
    assert snap.load_checks == ("BLUESTORE_SLOW_OP_ALERT",)
    assert snap.checks["BLUESTORE_SLOW_OP_ALERT"].count >= 1
    assert set(snap.checks) - {"BLUESTORE_SLOW_OP_ALERT"} <= {
        c for c, h in releases.HEALTH_CODES.items() if h.kind == releases.NOT_LOAD}
    d = spillover.decide(parse(spilled(obs)), SPILL, {}, smoothed_write_ops=10, gate_open=True, now=100.0)
    assert d.actions == () and "not quiet (BLUESTORE_SLOW_OP_ALERT)" in d.reason
