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
