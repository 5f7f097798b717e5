"""Parsing a raw observation into a Snapshot, for each release's capture (tests/fixtures/<release>/:
Pacific 16.2.15, Reef 18.2.7, Tentacle 20.2.4, from the harness's clusters)."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest

from rgwkeeper.snapshot import parse, parse_release
from tests.unit.fakes import FIXTURES, load_fixture


@dataclasses.dataclass(frozen=True)
class Captured:
    """What each release's capture shows (the same harness cluster: 3 OSDs, 128 MiB DB files)."""

    version: str
    checks: frozenset[str]
    spilled_osds: tuple[int, ...]
    op_queue: str
    osd_max_scrubs: str


CAPTURED = {
    # Only Pacific spills over on the 128 MiB DB files; Reef's trixie build lacks mgr module
    # dependencies; Tentacle warns about the Pacific-compatible admin key (docs/testing.md).
    "pacific": Captured("16.2.15", frozenset({"BLUEFS_SPILLOVER"}), (0, 1, 2), "wpq", "1"),
    "reef": Captured("18.2.7", frozenset({"MGR_MODULE_DEPENDENCY"}), (), "mclock_scheduler", "3"),
    "tentacle": Captured("20.2.4", frozenset({"AUTH_INSECURE_CLIENT_KEY_TYPE", "AUTH_INSECURE_KEYS_ALLOWED",
                                              "AUTH_INSECURE_KEYS_CREATABLE"}), (), "mclock_scheduler", "3"),
}


@pytest.fixture(params=sorted(CAPTURED))
def release(request):
    return request.param


@pytest.fixture
def obs(release):
    return load_fixture(f"../{release}/observation.json")


def test_every_captured_release_is_parsed_here():
    assert {d.name for d in FIXTURES.parent.iterdir() if (d / "observation.json").exists()} == set(CAPTURED)


def test_release_and_health(obs, release):
    snap = parse(obs)
    assert (snap.release, snap.version) == (release, CAPTURED[release].version)
    assert snap.health_status == "HEALTH_WARN"
    assert set(snap.checks) == CAPTURED[release].checks
    if "BLUEFS_SPILLOVER" in snap.checks:
        assert snap.checks["BLUEFS_SPILLOVER"].count == 3


def test_fill_uses_osdmap_ratios_and_df(obs):
    snap = parse(obs)
    # The OSDMap stores the ratios as float32: 0.85 comes back as 0.8500000238.
    assert (snap.ratios.nearfull_ratio, snap.ratios.backfillfull_ratio, snap.ratios.full_ratio) == pytest.approx((0.85, 0.9, 0.95))
    stats = obs["df"]["stats"]
    assert snap.raw.total_bytes == stats["total_bytes"]
    assert snap.raw.used_ratio == pytest.approx(stats["total_used_raw_ratio"])
    assert snap.headroom_to_nearfull == pytest.approx(0.85 - stats["total_used_raw_ratio"], abs=1e-6)
    assert {p.name for p in snap.pools} == {p["name"] for p in obs["df"]["pools"]}
    data = next(p for p in snap.pools if p.name == "default.rgw.buckets.data")
    assert data.applications == ("rgw",)


def test_per_osd_fill_and_fullest(obs):
    o = copy.deepcopy(obs)
    o["osd_df"]["nodes"][1]["kb_used"] = int(o["osd_df"]["nodes"][1]["kb"] * 0.87)
    snap = parse(o)
    assert len(snap.osds) == 3 and all(x.up and x.in_ for x in snap.osds)
    assert snap.fullest_osd.osd_id == o["osd_df"]["nodes"][1]["id"]
    assert snap.fullest_osd.used_ratio > snap.ratios.nearfull_ratio


def test_spillover_from_perf_dump(obs, release):
    snap = parse(obs)
    assert tuple(b.osd_id for b in snap.spilled_osds) == CAPTURED[release].spilled_osds
    b0 = snap.bluefs[0]
    assert b0.slow_used_bytes == obs["osd_bluefs"]["0"]["bluefs"]["slow_used_bytes"]
    assert (b0.slow_used_bytes > 0) == bool(CAPTURED[release].spilled_osds)
    assert b0.db_total_bytes == obs["osd_bluefs"]["0"]["bluefs"]["db_total_bytes"] > 0


def test_spillover_where_slow_is_used(obs):
    o = copy.deepcopy(obs)
    o["osd_bluefs"]["1"]["bluefs"]["slow_used_bytes"] = 4096
    assert 1 in [b.osd_id for b in parse(o).spilled_osds]


def test_no_spillover_when_slow_is_empty(obs):
    o = copy.deepcopy(obs)
    for perf in o["osd_bluefs"].values():
        perf["bluefs"]["slow_used_bytes"] = 0
    assert parse(o).spilled_osds == ()


def test_rgw_data_pool_found_by_application_and_name(obs):
    snap = parse(obs)
    assert snap.rgw_data_pools == ("default.rgw.buckets.data",)
    o = copy.deepcopy(obs)
    for p in o["pool_stats"]:
        if p["pool_name"] == "default.rgw.buckets.data":
            p["client_io_rate"] = {"write_op_per_sec": 250, "write_bytes_sec": 1024000, "read_op_per_sec": 7}
        elif p["pool_name"] == "default.rgw.log":
            p["client_io_rate"] = {"write_op_per_sec": 999}
    io = parse(o).rgw_io
    assert (io.write_op_per_sec, io.write_bytes_sec, io.read_op_per_sec) == (250, 1024000, 7)
    assert parse(o, data_pools=["default.rgw.log"]).rgw_io.write_op_per_sec == 999


def test_scrub_state(obs, release):
    snap = parse(obs)
    assert snap.scrub.op_queues == (CAPTURED[release].op_queue,)
    assert snap.scrub.effective_options["osd_max_scrubs"] == dict.fromkeys((0, 1, 2), CAPTURED[release].osd_max_scrubs)
    assert not snap.scrub.noscrub and not snap.scrub.nodeep_scrub
    o = copy.deepcopy(obs)
    o["status"]["pgmap"]["pgs_by_state"] = [
        {"state_name": "active+clean", "count": 30},
        {"state_name": "active+clean+scrubbing+deep", "count": 4},
        {"state_name": "active+clean+scrubbing", "count": 2},
    ]
    o["osd_dump"]["flags_set"] = ["nodeep-scrub", "sortbitwise"]
    s = parse(o).scrub
    assert (s.pgs_deep_scrubbing, s.pgs_scrubbing, s.nodeep_scrub, s.noscrub) == (4, 2, True, False)


def test_buckets_fill_against_the_shard_limit(obs):
    snap = parse(obs)
    assert snap.max_objs_per_shard == 40
    by_name = {b.bucket: b for b in snap.buckets}
    near = by_name["capture-near-limit"]
    assert (near.num_objects, near.num_shards, near.objects_per_shard) == (38, 1, 38)
    assert near.fill_status == "WARN" and near.fill_ratio == pytest.approx(0.95)
    assert by_name["capture-small"].fill_status == "OK"
    nearest = snap.buckets_nearest_reshard(1)[0]
    assert nearest.fill_ratio == max(b.fill_ratio for b in snap.buckets) >= near.fill_ratio


def test_bucket_over_limit_and_queued(obs):
    o = copy.deepcopy(obs)
    o["rgw_limit"] = {"rgw_max_objs_per_shard": 30, "source": "config"}
    o["reshard_queue"] = [{"tenant": "", "bucket_name": "capture-near-limit", "new_num_shards": 3}]
    by_name = {b.bucket: b for b in parse(o).buckets}
    assert by_name["capture-near-limit"].fill_status == "OVER"
    assert by_name["capture-near-limit"].in_reshard_queue
    assert not by_name["capture-small"].in_reshard_queue


def test_unsharded_bucket_counts_as_one_shard(obs):
    o = copy.deepcopy(obs)
    o["buckets"][0]["num_shards"] = 0
    b = next(b for b in parse(o).buckets if b.bucket == o["buckets"][0]["bucket"])
    assert b.objects_per_shard == b.num_objects


def test_unreadable_limit_falls_back_to_default_and_says_so(obs):
    o = copy.deepcopy(obs)
    o["rgw_limit"] = None
    snap = parse(o)
    assert snap.max_objs_per_shard == 100_000
    assert "could not be read" in snap.max_objs_per_shard_source


def test_to_dict_is_json(obs, release):
    d = parse(obs).to_dict()
    text = json.dumps(d)
    assert d["derived"]["spilled_osds"] == list(CAPTURED[release].spilled_osds)
    assert d["scrub"]["effective_options"]["osd_max_scrubs"]["0"] == CAPTURED[release].osd_max_scrubs
    assert "secret" not in text


def test_release_is_the_oldest_running():
    versions = {"overall": {
        "ceph version 17.2.7 (b12291d110049b2f35e32e0de30d70e9a4c060d2) quincy (stable)": 2,
        "ceph version 16.2.15 (618f440892089921c3e944a991122ddc44e60516) pacific (stable)": 1,
    }}
    assert parse_release(versions) == ("pacific", "16.2.15")
    assert parse_release({}) == ("unknown", "unknown")


def test_osds_with_identical_settings_are_one_group_and_every_osd_stays_in_the_json():
    o = copy.deepcopy(load_fixture("observation.json"))
    template = o["osd_config"]["0"]
    o["osd_config"] = {str(i): dict(template) for i in range(300)}
    for i in (7, 8, 9, 200):
        o["osd_config"][str(i)].update(osd_op_queue="mclock_scheduler", osd_mclock_profile="high_client_ops")
    o["osd_config"]["150"]["osd_max_scrubs"] = "2"
    snap = parse(o)
    groups = snap.scrub.setting_groups()
    assert [len(ids) for ids, _ in groups] == [295, 4, 1]
    assert groups[1][0] == (7, 8, 9, 200) and groups[1][1]["osd_mclock_profile"] == "high_client_ops"
    assert groups[2] == ((150,), {**template, "osd_max_scrubs": "2"})
    d = snap.to_dict()["derived"]
    assert len(d["settings_by_osd"]) == 300 and d["settings_by_osd"]["9"]["osd_op_queue"] == "mclock_scheduler"
    assert [g["osds"][:3] for g in d["osd_settings"]] == [[0, 1, 2], [7, 8, 9], [150]]
