"""``rgwkeeper status``: fill, spillover, scrub and the buckets nearest a reshard."""

from __future__ import annotations

import asyncio
from typing import Any, Mapping

import click

from rgwkeeper.access import ClusterAccess
from rgwkeeper.adapters.connect import connected
from rgwkeeper.adapters.rados import ObjectStore, RadosAdapter
from rgwkeeper.cli.common import cluster_options, emit_json, load_access
from rgwkeeper.cli.render import render_status
from rgwkeeper.config import Config
from rgwkeeper.observe import collect_raw
from rgwkeeper.errors import CephError
from rgwkeeper.journal import Journal
from rgwkeeper.policy import scrub, scrub_debt
from rgwkeeper.policy.fill import projected_seconds
from rgwkeeper.policy.spillover import recommended_db_bytes
from rgwkeeper.snapshot import Snapshot, parse
from rgwkeeper.units import FiniteInt


def take_snapshot(cfg: Config, access: ClusterAccess) -> tuple[Snapshot, dict[str, Any]]:
    """Connect, observe once, parse. RGW parts are skipped (and said so) if not configured."""
    with connected(access) as adapters:
        raw = asyncio.run(collect_raw(adapters, cfg))
        if adapters.rgw_note:
            raw["errors"].append({"source": "rgw", "error": f"{adapters.rgw_note}: bucket sharding not shown"})
        snap = parse(raw, data_pools=cfg.rgw.data_pools, shard_warning_ratio=cfg.rgw.shard_warning_ratio)
        try:
            raw["daemon"] = daemon_view(adapters.rados, cfg, snap)
        except CephError as exc:
            raw["daemon"] = None
            raw["errors"].append({"source": "daemon journal", "error": str(exc)})
    return snap, raw


def daemon_view(rados: RadosAdapter, cfg: Config, snap: Snapshot) -> dict[str, Any] | None:
    """What the daemon keeps in RADOS: overrides, pause, fill trend, compaction outcomes."""
    if cfg.daemon.pool not in (rados.command({"prefix": "osd pool ls"}) or []):
        return None
    store = ObjectStore(rados, cfg.daemon.pool)
    try:
        journal = Journal(store)
        overrides, control = journal.overrides(), journal.control()
    finally:
        store.close()
    fill_mem = control.get("fill") or {}
    compactions = control.get("spillover") or {}
    bluefs = {f"osd.{b.osd_id}": b for b in snap.bluefs}
    needs = {k: recommended_db_bytes(bluefs[k], cfg.spillover.db_headroom) for k, v in compactions.items()
             if not v.get("cleared") and k in bluefs and bluefs[k].slow_used_bytes > 0}
    return {
        "paused": control.get("paused"),
        "overrides": {k: {"applied": e.applied_value, "original": e.original_value if e.original_present else None,
                          "holder": e.holder, "since": e.since} for k, e in overrides.items()},
        "fill_alerts": [k for k, on in (fill_mem.get("alerts") or {}).items() if on],
        "projected_seconds_to_nearfull": projected_seconds(fill_mem.get("samples") or [], snap.ratios.nearfull_ratio),
        "compactions": compactions,
        "needs_bigger_db_bytes": needs,
        "smoothed_write_ops": (control.get("scrub_throttle") or {}).get("ema_write_ops"),
        "scrub_debt_memory": control.get("scrub_debt"),
        "scrub_throttled": bool(set(overrides) & scrub.owned_keys(cfg.scrub_throttle)),
    }


def debt_view(snap: Snapshot, cfg: Config, daemon: Mapping[str, Any] | None) -> dict[str, Any]:
    """The scrub debt and what the daemon would request now (with the daemon's memory)."""
    d = daemon or {}
    return scrub_debt.decide(snap.deep_scrub, cfg.scrub_debt, scrub_debt.DebtMemory.from_dict(d.get("scrub_debt_memory")),
                             throttle_engaged=bool(d.get("scrub_throttled")),
                             smoothed_write_ops=float(d.get("smoothed_write_ops") or snap.rgw_io.write_op_per_sec),
                             now=snap.taken_at).to_dict()


@click.command()
@cluster_options
@click.option("--json", "as_json", is_flag=True, help="print the whole snapshot as JSON")
@click.option("--buckets", "bucket_rows", type=FiniteInt(0, 10_000), default=10, show_default=True,
              help="how many buckets nearest a reshard to list")
def status(as_json: bool, bucket_rows: int, **kwargs: Any) -> None:
    """Show cluster fill, BlueFS spillover, scrub state and bucket index sharding."""
    cfg, access = load_access(kwargs)
    snap, raw = take_snapshot(cfg, access)
    debt = debt_view(snap, cfg, raw.get("daemon"))
    if as_json:
        out = snap.to_dict()
        out["collect_seconds"] = raw.get("collect_seconds")
        out["daemon"] = raw.get("daemon")
        out["scrub_debt"] = debt
        emit_json(out)
    else:
        render_status(snap, bucket_rows=bucket_rows, daemon=raw.get("daemon"), debt=debt)
