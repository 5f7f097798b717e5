"""Pinning a pre-sharded bucket's minimum shard count (Tentacle), and reading it back, against a
strict fake radosgw-admin fed with output captured from Tentacle 20.2.4
(tests/fixtures/tentacle/bucket-layout.json) and from Pacific 16.2.15's client."""

from __future__ import annotations

import asyncio
import json
from typing import Sequence

import pytest
from click.testing import CliRunner

from rgwkeeper import sharding
from rgwkeeper.access import ClusterAccess
from rgwkeeper.actions import SetMinShards
from rgwkeeper.adapters.rados import RadosAdapter
from rgwkeeper.adapters.cephcli import CompletedRun
from rgwkeeper.adapters.radosgw_admin import RadosgwAdmin
from rgwkeeper.cli.main import cli
from rgwkeeper.adapters import connect
from rgwkeeper.errors import CephError
from rgwkeeper.policy.shards import ShardPlan
from tests.unit.fakes import FIXTURES, FakeRados, UnexpectedCall

TENTACLE = FIXTURES.parent / "tentacle"
CAPTURED = json.loads((TENTACLE / "bucket-layout.json").read_text())


def _run(name: str, argv: Sequence[str]) -> CompletedRun:
    c = CAPTURED[name]
    return CompletedRun(tuple(argv), c["returncode"], c["stdout"], c["stderr"], 0.0)


class TentacleBuckets:
    """radosgw-admin for buckets that exist (name -> shards), the way Tentacle's answers: `bucket
    layout` shows what `set-min-shards` last wrote; an unknown bucket or 0 shards fail as captured.
    ``pin_takes=False`` is a set-min-shards that exits 0 and changes nothing. ``client="pacific"``
    answers as Pacific's radosgw-admin does to both verbs. Anything else fails the test."""

    def __init__(self, buckets: dict[str, int], *, pin_takes: bool = True, client: str = "tentacle") -> None:
        self.min_shards = {b: 1 for b in buckets}
        self.pin_takes = pin_takes
        self.client = client
        self.calls: list[tuple[str, ...]] = []

    async def __call__(self, argv: Sequence[str], timeout: float) -> CompletedRun:
        args = tuple(argv[argv.index("--name") + 2:])
        self.calls.append(args)
        if args[:2] == ("bucket", "layout") and len(args) == 5 and args[4] == "--format=json":
            if self.client == "pacific":
                return _run("bucket_layout_pacific_client", argv)
            bucket = args[3]
            if bucket not in self.min_shards:
                return _run("bucket_layout_missing", argv)
            doc = json.loads(CAPTURED["bucket_layout_pinned"]["stdout"])
            doc["layout"]["current_index"]["layout"]["normal"]["min_num_shards"] = self.min_shards[bucket]
            return CompletedRun(tuple(argv), 0, json.dumps(doc, indent=4), "", 0.0)
        if args[:2] == ("bucket", "set-min-shards") and len(args) == 6:
            if self.client == "pacific":
                return _run("set_min_shards_pacific_client", argv)
            bucket, n = args[3], int(args[5])
            if n < 1:
                return _run("set_min_shards_zero", argv)
            if bucket not in self.min_shards:
                return _run("set_min_shards_missing", argv)
            if self.pin_takes:
                self.min_shards[bucket] = n
            return _run("set_min_shards", argv)
        raise UnexpectedCall(f"unexpected radosgw-admin call: {list(argv)}")


def _access(tmp_path) -> ClusterAccess:
    conf = tmp_path / "ceph.conf"
    conf.write_text("[global]\n")
    return ClusterAccess(conf=conf, keyring=None, client_name="client.admin", rgw_endpoint=None,
                         rgw_credentials_file=None, timeout_s=5)


def _apply(tmp_path, world: TentacleBuckets, action: SetMinShards):
    plan = ShardPlan(action.bucket, True, 31, action.num_shards, (action,), "pre-shard before ingest")
    return asyncio.run(sharding.apply(plan, RadosgwAdmin(_access(tmp_path), runner=world), None))


def test_the_captured_layouts_read_as_pinned_and_not():
    assert sharding.min_num_shards(json.loads(CAPTURED["bucket_layout_pinned"]["stdout"])) == 31
    assert sharding.min_num_shards(json.loads(CAPTURED["bucket_layout_new"]["stdout"])) == 1
    with pytest.raises(CephError, match="min_num_shards"):
        sharding.min_num_shards({"layout": {"current_index": {"layout": {"type": "Normal"}}}})


def test_a_pin_is_set_and_read_back(tmp_path):
    world = TentacleBuckets({"ingest": 31})
    (done,) = _apply(tmp_path, world, SetMinShards("ingest", 31))
    assert done.ok and done.detail == "bucket layout reads min_num_shards 31"
    assert world.calls == [("bucket", "set-min-shards", "--bucket", "ingest", "--num-shards", "31"),
                           ("bucket", "layout", "--bucket", "ingest", "--format=json")]


def test_a_pin_that_exits_0_and_changes_nothing_is_a_failure(tmp_path):
    (done,) = _apply(tmp_path, TentacleBuckets({"ingest": 31}, pin_takes=False), SetMinShards("ingest", 31))
    assert not done.ok and done.detail == "bucket layout reads min_num_shards 1, wanted 31"


def test_a_pin_refused_by_radosgw_admin_is_a_failure_with_its_reason(tmp_path):
    (done,) = _apply(tmp_path, TentacleBuckets({"ingest": 31}), SetMinShards("ingest", 0))
    assert not done.ok and done.detail == "exit 234: ERROR: --num-shards must be at least 1"


def test_an_older_radosgw_admin_is_named_as_the_reason(tmp_path):
    (done,) = _apply(tmp_path, TentacleBuckets({"ingest": 31}, client="pacific"), SetMinShards("ingest", 31))
    assert not done.ok and "radosgw-admin is older than the cluster" in done.detail
    world = TentacleBuckets({"ingest": 31}, client="pacific")
    with pytest.raises(CephError, match="older than the cluster"):
        asyncio.run(sharding.read_min_num_shards(RadosgwAdmin(_access(tmp_path), runner=world), "ingest"))


def _preshard_cli(tmp_path, monkeypatch, release_fixture: str, world: TentacleBuckets, *args: str):
    obs = json.loads((FIXTURES.parent / release_fixture / "observation.json").read_text())
    rados = FakeRados()
    rados.expect({"prefix": "config get", "who": "client.rgw", "key": "rgw_max_objs_per_shard"}, 100000)
    rados.expect({"prefix": "config get", "who": "client.rgw", "key": "rgw_max_dynamic_shards"}, 1999)
    rados.expect({"prefix": "versions"}, obs["versions"])
    monkeypatch.setattr(connect, "RadosAdapter", lambda access, **kw: RadosAdapter(access, factory=lambda a: rados))
    zonegroup = (FIXTURES.parent / release_fixture / "zonegroup-get.json").read_text()
    missing = json.loads((FIXTURES.parent / release_fixture / "radosgw-admin.json").read_text())["bucket_stats_missing"]

    async def runner(argv: Sequence[str], timeout: float) -> CompletedRun:
        args = tuple(argv[argv.index("--name") + 2:])
        if args == ("zonegroup", "get", "--format=json"):
            return CompletedRun(tuple(argv), 0, zonegroup, "", 0.0)
        if args == ("bucket", "stats", "--bucket", "ingest", "--format=json"):
            return CompletedRun(tuple(argv), missing["returncode"], missing["stdout"], missing["stderr"], 0.0)
        return await world(argv, timeout)

    monkeypatch.setattr(connect, "RadosgwAdmin", lambda access: RadosgwAdmin(access, runner=runner))
    conf = tmp_path / "ceph.conf"
    conf.write_text("[global]\n")
    # Through the group, as an operator runs it: its log setup keeps debug events out of the output.
    return CliRunner().invoke(cli, ["preshard", "ingest", "-N", "3000000", "--conf", str(conf), *args])


def test_the_dry_run_on_tentacle_shows_the_exact_pin_command(tmp_path, monkeypatch):
    world = TentacleBuckets({})
    out = _preshard_cli(tmp_path, monkeypatch, "tentacle", world, "--dry-run")
    assert out.exit_code == 0, out.output
    assert out.output.splitlines()[-1] == \
        "  would run: radosgw-admin bucket set-min-shards --bucket ingest --num-shards 61"
    assert "  minimum shards: pin the minimum at 61 shards: tentacle's dynamic resharding" in out.output
    assert world.calls == []  # a dry run changes nothing


def test_the_dry_run_on_reef_pins_nothing_and_says_why_in_one_line(tmp_path, monkeypatch):
    world = TentacleBuckets({})
    out = _preshard_cli(tmp_path, monkeypatch, "reef", world, "--dry-run", "--json")
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["min_shards"] == "reef: RGW's dynamic resharding never reduces shard counts; no minimum to pin"
    assert not any("set-min-shards" in c for c in doc["commands"]) and world.calls == []


def test_the_daemons_executor_applies_a_pin_and_reads_it_back(tmp_path):
    from rgwkeeper.executor import Executor
    from rgwkeeper.journal import Journal, MemoryStore

    world = TentacleBuckets({"ingest-dec": 53})
    access = _access(tmp_path)
    ex = Executor(RadosAdapter(access, factory=lambda a: FakeRados()), Journal(MemoryStore()), holder="admin1",
                  lease_s=90, rgw=RadosgwAdmin(access, runner=world))
    (result,) = asyncio.run(ex.apply([SetMinShards("ingest-dec", 53, "ingest plan from the config")]))
    assert result.ok and result.detail == "bucket layout reads min_num_shards 53"
    assert world.min_shards == {"ingest-dec": 53}
