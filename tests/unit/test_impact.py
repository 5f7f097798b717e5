"""Impact levels (rgwkeeper/purge/impact.py): what each sets, and ambiguity refused."""

from __future__ import annotations

import dataclasses

import pytest

from rgwkeeper.config import Config, PurgeSection
from rgwkeeper.errors import UsageError
from rgwkeeper.purge import impact, settings_from
from rgwkeeper.purge.plan import PurgeRequest


def test_low_is_the_setting_verify_judged_like_a_quiet_window():
    s = settings_from(impact.resolve(PurgeSection(), "low"))
    assert (s.max_objects_per_second, s.pace_latency_increase, s.pace_probe_interval_s) == (20.0, 0.3, 0.5)
    assert s.paced and s.pace_write_latency_s == 0.0


def test_max_turns_cap_and_pacing_off_even_where_the_config_set_them():
    cfg = dataclasses.replace(PurgeSection(), max_objects_per_second=5.0, pace_latency_increase=0.5)
    s = settings_from(impact.resolve(cfg, "max"))
    assert s.max_objects_per_second == 0.0 and not s.paced


def test_no_level_leaves_the_config_as_it_is():
    cfg = dataclasses.replace(PurgeSection(), max_objects_per_second=5.0)
    assert impact.resolve(cfg) == cfg
    assert impact.resolve(cfg, max_rate=7.0).max_objects_per_second == 7.0
    assert impact.describe(cfg) is None


@pytest.mark.parametrize("cfg, level, rate, message", [
    (PurgeSection(), "low", 5.0, "give --impact or --max-rate, not both"),
    (dataclasses.replace(PurgeSection(), impact="low", max_objects_per_second=5.0), None, None,
     "purge.impact = 'low' sets the rate cap and pacing; the config also sets purge.max_objects_per_second"),
    (dataclasses.replace(PurgeSection(), impact="max", pace_write_latency_ms=40.0), None, None,
     "also sets purge.pace_write_latency_ms"),
    (PurgeSection(), "gentle", None, "impact must be one of low, normal, max"),
])
def test_ambiguity_is_refused(cfg, level, rate, message):
    with pytest.raises(UsageError, match=message):
        impact.resolve(cfg, level, max_rate=rate)


def test_the_daemons_expiry_is_low_by_default():
    cfg = Config()
    resolved = impact.resolve(cfg.purge, cfg.fill.expire_impact or None)
    assert resolved.impact == "low" and resolved.max_objects_per_second == 20.0


def test_the_daemons_expiry_runs_at_its_configured_impact(tmp_path, monkeypatch):
    import asyncio

    from rgwkeeper import purge as purge_api
    from rgwkeeper.config import load
    from tests.unit.purge_fakes import World, purge_io

    io, _ = purge_io(World(), tmp_path)
    seen = []

    async def apply(planned, io, purge_cfg, **kw):
        seen.append(purge_cfg)
        return []

    monkeypatch.setattr(purge_api, "apply_expiry_with", apply)
    rules = 'lifecycle_rules = [{ bucket = "*", days = 1 }]\n'
    for body, cap in ((f"[purge]\n{rules}", 20.0),
                      (f'[fill]\nexpire_impact = "max"\n[purge]\n{rules}', 0.0),
                      (f'[fill]\nexpire_impact = ""\n[purge]\n{rules}max_objects_per_second = 7.0\n', 7.0)):
        cfg_file = tmp_path / "rgwkeeper.toml"
        cfg_file.write_text(body)
        asyncio.run(purge_api.expire_configured(io, load(cfg_file), raise_full_ratio=None, journal=None, holder="d"))
        assert seen[-1].max_objects_per_second == cap, body


def test_normal_purges_a_whole_bucket_with_the_stock_tool_and_nothing_else():
    cfg = impact.resolve(PurgeSection(), "normal")
    s = settings_from(cfg)
    assert s.max_objects_per_second == 0.0 and not s.paced  # bucket rm goes at RGW's own pace
    assert impact.request_for(cfg, PurgeRequest("bkt")).method == "admin-purge"
    assert impact.request_for(cfg, PurgeRequest("bkt", method="admin-purge")).method == "admin-purge"
    assert "radosgw-admin bucket rm --purge-objects" in impact.describe(cfg)
    with pytest.raises(UsageError, match="purges whole buckets only; with --prefix or an age or size filter "
                                         "give --impact low or max"):
        impact.request_for(cfg, PurgeRequest("bkt", prefix="logs/"))
    with pytest.raises(UsageError, match="--method direct beside it is ambiguous"):
        impact.request_for(cfg, PurgeRequest("bkt", method="direct"))
    # The other levels leave the method to --method or auto.
    for level in ("low", "max"):
        assert impact.request_for(impact.resolve(PurgeSection(), level), PurgeRequest("bkt", prefix="x/")).method == "auto"


def test_expiry_from_a_listing_refuses_a_level_with_a_method_of_its_own():
    with pytest.raises(UsageError, match="this expiry deletes from a listing: give it low or max"):
        impact.check_listing(impact.resolve(PurgeSection(), "normal"))
    impact.check_listing(impact.resolve(PurgeSection(), "low"))
    assert impact.LISTING_LEVELS == ("low", "max")


def test_a_config_whose_fill_expiry_would_inherit_normal_is_refused_at_load():
    from rgwkeeper.config import ConfigError, parse

    with pytest.raises(ConfigError, match="fill.expire_impact is empty, so the fill-triggered expiry would take "
                                          "purge.impact = 'normal'"):
        parse({"purge": {"impact": "normal"}, "fill": {"expire_impact": ""}})
    assert parse({"purge": {"impact": "normal"}}).fill.expire_impact == "low"


def test_prepare_applies_the_level_for_a_library_caller(tmp_path):
    """The daemon and other callers of the purge API get what the CLI gets: normal's own method,
    and a prefix beside it refused before anything is read."""
    import asyncio

    from rgwkeeper import purge as purge_api
    from rgwkeeper.purge.checkpoint import CheckpointStore
    from tests.unit.purge_fakes import World, purge_io

    w = World()
    io, _ = purge_io(w, tmp_path)
    cfg = dataclasses.replace(impact.resolve(PurgeSection(), "normal"), protected_buckets=[])
    store = CheckpointStore(tmp_path / "state")
    with pytest.raises(UsageError, match="purges whole buckets only"):
        asyncio.run(purge_api.prepare(PurgeRequest(w.bucket, prefix="plain/"), io, purge_cfg=cfg, store=store))
    assert w.log == []
    prepared = asyncio.run(purge_api.prepare(PurgeRequest(w.bucket), io, purge_cfg=cfg, store=store))
    assert prepared.plan.method == "admin-purge"
