"""The release table: every release rgwkeeper is tested on has a row, found by the name
`ceph versions` gives, and only Tentacle's RGW may reduce shard counts."""

from __future__ import annotations

import json

import pytest

from rgwkeeper import releases
from rgwkeeper.snapshot import parse_release
from tests.unit.fakes import FIXTURES


@pytest.mark.parametrize("fixtures, name, reduces", [
    ("pacific", "pacific", False),
    ("reef", "reef", False),
    ("tentacle", "tentacle", True),
])
def test_the_release_a_captured_cluster_reports_has_its_row(fixtures, name, reduces):
    versions = json.loads((FIXTURES.parent / fixtures / "observation.json").read_text())["versions"]
    row = releases.release(parse_release(versions)[0])
    assert row is not None and row.name == name
    assert (row.shard_reduction, row.min_shards) == (reduces, reduces)


def test_rows_are_in_release_order_and_unknown_names_have_none():
    majors = [r.major for r in releases.RELEASES.values()]
    assert majors == sorted(majors) and len(set(majors)) == len(majors)
    assert [n for n, r in releases.RELEASES.items() if r.shard_reduction] == ["tentacle"]
    assert releases.release("unknown") is None and releases.release("Tentacle") is None


# Every column, read for every release: (shard_reduction, min_shards, direct_drop, lc_one_bucket, size_filters,
# default_op_queue). Pacific, Reef and Tentacle are measured here; Quincy and Squid from their docs.
TABLE = {
    "pacific": (False, False, "empty-index", False, False, "wpq"),
    "quincy": (False, False, None, True, False, "mclock_scheduler"),
    "reef": (False, False, "empty-index", True, False, "mclock_scheduler"),  # 18.2.7 drops a size filter
    "squid": (False, False, None, True, False, "mclock_scheduler"),  # size filters not measured: the safe choice
    "tentacle": (True, True, "empty-index", True, True, "mclock_scheduler"),
}


@pytest.mark.parametrize("name", sorted(TABLE))
def test_each_release_reads_as_its_row(name):
    r = releases.behaviour(name)
    assert r.name == name
    assert (r.shard_reduction, r.min_shards, r.direct_drop, r.lc_one_bucket, r.size_filters,
            r.default_op_queue) == TABLE[name]


@pytest.mark.parametrize("name", ["umbrella", "unknown", ""])
def test_a_release_the_table_does_not_know_gets_the_safe_choice_in_every_column(name):
    r = releases.behaviour(name)
    assert r is releases.UNKNOWN
    assert (r.shard_reduction, r.min_shards, r.direct_drop, r.lc_one_bucket, r.size_filters,
            r.default_op_queue) == (False, False, None, False, False, None)


def test_unparseable_versions_get_the_unknown_row():
    assert releases.behaviour(parse_release({"overall": {"something else": 3}})[0]) is releases.UNKNOWN


def test_the_purge_planners_release_lists_are_the_tables_columns():
    from rgwkeeper import lifecycle
    from rgwkeeper.purge import plan

    assert lifecycle.SIZE_FILTER_RELEASES == ("tentacle",)
    assert lifecycle.LC_ONE_BUCKET_RELEASES == ("quincy", "reef", "squid", "tentacle")
    assert plan.DIRECT_VERIFIED_RELEASES == ("pacific", "reef", "tentacle")


@pytest.mark.parametrize("fixtures", ["pacific", "reef", "tentacle"])
def test_the_op_queue_a_captured_cluster_runs_is_its_rows_default(fixtures):
    obs = json.loads((FIXTURES.parent / fixtures / "observation.json").read_text())
    row = releases.behaviour(parse_release(obs["versions"])[0])
    assert {o["osd_op_queue"] for o in obs["osd_config"].values()} == {row.default_op_queue}
