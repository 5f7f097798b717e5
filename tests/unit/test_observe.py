"""collect_raw against strict fakes fed with the captured observation."""

from __future__ import annotations

import asyncio
import dataclasses
import errno

import pytest

from rgwkeeper.access import ClusterAccess
from rgwkeeper.adapters.adminapi import AdminApi
from rgwkeeper.adapters.rados import RadosAdapter
from rgwkeeper.adapters.radosgw_admin import RadosgwAdmin
from rgwkeeper.access import RgwCredentials
from rgwkeeper.config import Config
from rgwkeeper.errors import CephError
from rgwkeeper.adapters.connect import ClusterAdapters
from rgwkeeper.observe import collect_raw
from rgwkeeper.snapshot import parse
from tests.unit.fakes import FIXTURES, FakeRGWAdmin, FakeRunner, UnexpectedCall, load_fixture, rados_from_observation
import json


@pytest.fixture
def obs():
    return load_fixture("observation.json")


def _access(tmp_path):
    conf = tmp_path / "ceph.conf"
    conf.write_text("[global]\n")
    return ClusterAccess(conf=conf, keyring=None, client_name="client.admin", rgw_endpoint="http://rgw:8080",
                         rgw_credentials_file=None, timeout_s=5)


def _adapters(tmp_path, fake_rados, obs):
    access = _access(tmp_path)
    rados = RadosAdapter(access, factory=lambda a: fake_rados)
    rados.connect()
    runner = FakeRunner().expect(["reshard", "list", "--format=json"], json.dumps(obs["reshard_queue"]))
    runner.expect(["zonegroup", "get", "--format=json"], (FIXTURES / "zonegroup-get.json").read_text())
    admin = FakeRGWAdmin()
    admin.expect("get", "/admin/bucket?format=json&stats=True", obs["buckets"])
    api = AdminApi("http://rgw:8080", RgwCredentials("AK", "SK"), timeout_s=5, factory=lambda **kw: admin)
    return ClusterAdapters(access=access, rados=rados, radosgw_admin=RadosgwAdmin(access, runner=runner),
                           admin_api=api), admin, runner


def test_collect_raw_reproduces_the_capture(tmp_path, obs):
    cfg = Config()
    fake = rados_from_observation(obs, cfg.observe.scrub_options)
    adapters, admin, runner = _adapters(tmp_path, fake, obs)
    try:
        raw = asyncio.run(collect_raw(adapters, cfg))
    finally:
        adapters.rados.close()
    assert raw["errors"] == []
    for key in ("status", "health", "df", "osd_dump", "osd_df", "pool_stats", "versions",
                "osd_bluefs", "osd_config", "buckets", "reshard_queue", "reshard_limits"):
        assert raw[key] == obs[key], key
    assert parse(raw).to_dict()["derived"] == parse(obs).to_dict()["derived"]
    # Every PG's deep-scrub deadline, from one `pg dump pgs` and the mgr's two settings.
    assert raw["pg_deep_scrub"] == load_fixture("deep-scrub.json")["pg_deep_scrub"]
    assert parse(raw).deep_scrub is not None
    # Every per-OSD call went to an OSD that is up, and each OSD got its perf dump.
    perf_osds = sorted(osd for osd, c in fake.calls if c["prefix"] == "perf dump")
    assert perf_osds == [0, 1, 2]
    assert admin.calls == [("get", "/admin/bucket?format=json&stats=True")]
    assert fake.shut_down


def test_a_failing_osd_is_recorded_not_hidden(tmp_path, obs):
    cfg = Config()
    fake = rados_from_observation(obs, cfg.observe.scrub_options)
    fake.expect({"prefix": "perf dump", "logger": "bluefs"}, None, osd=1, ret=-errno.ETIMEDOUT, outs="timed out")
    adapters, _, _ = _adapters(tmp_path, fake, obs)
    try:
        raw = asyncio.run(collect_raw(adapters, cfg))
    finally:
        adapters.rados.close()
    assert sorted(raw["osd_bluefs"]) == ["0", "2"]
    assert [e["source"] for e in raw["errors"]] == ["osd.1 perf dump bluefs"]
    assert "ETIMEDOUT" in raw["errors"][0]["error"]
    snap = parse(raw)
    assert [b.osd_id for b in snap.bluefs] == [0, 2]
    assert snap.errors[0].source == "osd.1 perf dump bluefs"


def test_a_refused_tell_says_which_cap_is_missing(tmp_path, obs):
    """Measured on 16.2.15: with osd 'allow rwx' every OSD refuses tell with EACCES."""
    cfg = Config()
    fake = rados_from_observation(obs, cfg.observe.scrub_options)
    fake.expect({"prefix": "perf dump", "logger": "bluefs"}, None, osd=2, ret=-errno.EACCES, outs="")
    adapters, _, _ = _adapters(tmp_path, fake, obs)
    try:
        raw = asyncio.run(collect_raw(adapters, cfg))
    finally:
        adapters.rados.close()
    (error,) = raw["errors"]
    assert error["source"] == "osd.2 perf dump bluefs"
    assert "(EACCES)" in error["error"] and "osd 'allow *'" in error["error"], error


def test_cluster_wide_command_failure_raises(tmp_path, obs):
    cfg = Config()
    fake = rados_from_observation(obs, cfg.observe.scrub_options)
    fake.expect({"prefix": "df"}, None, ret=-errno.EACCES, outs="access denied")
    adapters, _, _ = _adapters(tmp_path, fake, obs)
    try:
        with pytest.raises(CephError, match="df: access denied; the client's cephx caps do not allow it"):
            asyncio.run(collect_raw(adapters, cfg))
    finally:
        adapters.rados.close()


def test_strict_fake_rejects_unexpected_commands(tmp_path, obs):
    fake = rados_from_observation(obs, Config().observe.scrub_options)
    rados = RadosAdapter(_access(tmp_path), factory=lambda a: fake)
    rados.connect()
    try:
        with pytest.raises(UnexpectedCall):
            rados.command({"prefix": "osd set", "key": "noscrub"})
    finally:
        rados.close()


def test_configured_shard_limit_skips_the_mon_lookup(tmp_path, obs):
    from rgwkeeper.config import parse as parse_config

    cfg = parse_config({"rgw": {"max_objs_per_shard": 500}})
    fake = rados_from_observation(obs, cfg.observe.scrub_options)
    adapters, _, _ = _adapters(tmp_path, fake, obs)
    try:
        raw = asyncio.run(collect_raw(adapters, cfg))
    finally:
        adapters.rados.close()
    assert raw["rgw_limit"] == {"rgw_max_objs_per_shard": 500, "source": "config"}
    assert not any(c.get("key") == "rgw_max_objs_per_shard" for _, c in fake.calls)


def test_the_daemon_reads_the_deep_scrub_deadlines_at_most_every_read_every_s(tmp_path, obs):
    from rgwkeeper.observe import DEEP_SCRUB_COMMANDS, DeepScrubCache

    cfg = Config()
    fake = rados_from_observation(obs, cfg.observe.scrub_options)
    adapters, _, _ = _adapters(tmp_path, fake, obs)
    cache = DeepScrubCache()
    dumps = lambda: sum(1 for _, c in fake.calls if c["prefix"] == "pg dump")  # noqa: E731
    try:
        first = asyncio.run(collect_raw(adapters, cfg, deep_scrub_cache=cache))
        second = asyncio.run(collect_raw(adapters, cfg, deep_scrub_cache=cache))
        assert dumps() == 1 and second["pg_deep_scrub"] == first["pg_deep_scrub"]
        cache.read_at -= cfg.scrub_debt.read_every_s  # as if read_every_s had passed
        asyncio.run(collect_raw(adapters, cfg, deep_scrub_cache=cache))
        assert dumps() == 2
        # Without a cache (plan, status) every call reads; with the policy off nothing does.
        asyncio.run(collect_raw(adapters, cfg))
        assert dumps() == 3
        off = dataclasses.replace(cfg, scrub_debt=dataclasses.replace(cfg.scrub_debt, enabled=False))
        raw = asyncio.run(collect_raw(adapters, off))
        assert dumps() == 3 and raw["pg_deep_scrub"] is None
    finally:
        adapters.rados.close()
    assert {json.dumps(c, sort_keys=True) for c in DEEP_SCRUB_COMMANDS.values()} <= \
        {json.dumps({k: v for k, v in c.items() if k != "format"}, sort_keys=True) for _, c in fake.calls}
