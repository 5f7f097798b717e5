"""``rgwkeeper status``: fill, spillover, scrub and the buckets nearest a reshard."""

from __future__ import annotations

import asyncio
from typing import Any

import click

from rgwkeeper.access import ClusterAccess
from rgwkeeper.adapters.adminapi import AdminApi
from rgwkeeper.adapters.rados import RadosAdapter
from rgwkeeper.adapters.radosgw_admin import RadosgwAdmin
from rgwkeeper.cli.common import cluster_options, emit_json, load_access
from rgwkeeper.cli.render import render_status
from rgwkeeper.config import Config
from rgwkeeper.observe import Adapters, collect_raw
from rgwkeeper.snapshot import Snapshot, parse


def take_snapshot(cfg: Config, access: ClusterAccess) -> tuple[Snapshot, dict[str, Any]]:
    """Connect, observe once, parse. RGW parts are skipped (and said so) if not configured."""
    admin_api = None
    rgw_note = None
    if access.rgw_endpoint and access.rgw_credentials_file:
        admin_api = AdminApi(access.rgw_endpoint, access.rgw_credentials(), timeout_s=access.timeout_s)
    else:
        rgw_note = "RGW endpoint or credentials not configured: bucket sharding not shown"
    rados = RadosAdapter(access)
    rados.connect()
    try:
        adapters = Adapters(rados=rados, radosgw_admin=RadosgwAdmin(access), admin_api=admin_api)
        raw = asyncio.run(collect_raw(adapters, cfg))
    finally:
        rados.close()
    if rgw_note:
        raw["errors"].append({"source": "rgw", "error": rgw_note})
    snap = parse(raw, data_pools=cfg.rgw.data_pools, shard_warning_ratio=cfg.rgw.shard_warning_ratio)
    return snap, raw


@click.command()
@cluster_options
@click.option("--json", "as_json", is_flag=True, help="print the whole snapshot as JSON")
@click.option("--buckets", "bucket_rows", type=click.IntRange(0, 10_000), default=10, show_default=True,
              help="how many buckets nearest a reshard to list")
def status(as_json: bool, bucket_rows: int, **kwargs: Any) -> None:
    """Show cluster fill, BlueFS spillover, scrub state and bucket index sharding."""
    cfg, access = load_access(kwargs)
    snap, raw = take_snapshot(cfg, access)
    if as_json:
        out = snap.to_dict()
        out["collect_seconds"] = raw.get("collect_seconds")
        emit_json(out)
    else:
        render_status(snap, bucket_rows=bucket_rows)
