"""Gather one raw observation of the cluster, in parallel, through the adapters.

The result is a plain dict of the JSON each command returned (the same shape the fixtures
under ``tests/fixtures/`` hold), which :func:`rgwkeeper.snapshot.parse` turns into a
:class:`~rgwkeeper.snapshot.Snapshot` without any I/O. Cluster-wide commands must all
answer; per-OSD and per-bucket parts that fail (a down OSD, RGW unreachable) are recorded
under ``errors`` with what was asked, so a report shows the gap instead of hiding it.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from rgwkeeper.adapters.adminapi import AdminApi
from rgwkeeper.adapters.rados import RadosAdapter
from rgwkeeper.adapters.radosgw_admin import RadosgwAdmin
from rgwkeeper.config import Config
from rgwkeeper.errors import CephError

if TYPE_CHECKING:
    from rgwkeeper.snapshot import FullState, Snapshot

CLUSTER_COMMANDS: dict[str, dict[str, Any]] = {
    "status": {"prefix": "status"},
    "health": {"prefix": "health", "detail": "detail"},
    "df": {"prefix": "df"},
    "osd_dump": {"prefix": "osd dump"},
    "osd_df": {"prefix": "osd df"},
    "pool_stats": {"prefix": "osd pool stats"},
    "versions": {"prefix": "versions"},
}


class Adapters(Protocol):
    """What a snapshot reads through: ``adapters.connect.ClusterAdapters`` (tests pass fakes)."""

    @property
    def rados(self) -> RadosAdapter: ...

    @property
    def radosgw_admin(self) -> RadosgwAdmin | None: ...

    @property
    def admin_api(self) -> AdminApi | None: ...


@dataclass
class DeepScrubCache:
    """The last read of the deep-scrub deadlines, reused for ``scrub_debt.read_every_s``: on a
    cluster of tens of thousands of PGs ``pg dump pgs`` is tens of MB of JSON."""

    answers: dict[str, Any] | None = None
    read_at: float | None = None  # monotonic


async def collect_raw(adapters: Adapters, config: Config, *,
                      deep_scrub_cache: DeepScrubCache | None = None) -> dict[str, Any]:
    t0 = time.monotonic()
    raw: dict[str, Any] = {"taken_at": time.time(), "errors": []}
    errors: list[dict[str, str]] = raw["errors"]

    names = list(CLUSTER_COMMANDS)
    results = await asyncio.gather(*(adapters.rados.acommand(CLUSTER_COMMANDS[n]) for n in names))
    raw.update(zip(names, results))

    async def guarded(source: str, coro: Any) -> Any:
        try:
            return await coro
        except CephError as exc:
            errors.append({"source": source, "error": str(exc)})
            return None

    up_osds = [o["osd"] for o in raw["osd_dump"].get("osds", []) if o.get("up") == 1]
    sem = asyncio.Semaphore(config.observe.osd_parallelism)

    async def per_osd(osd_id: int, cmd: dict[str, Any]) -> Any:
        async with sem:
            return await adapters.rados.acommand(cmd, osd=osd_id)

    async def osd_info(osd_id: int) -> tuple[int, Any, dict[str, Any]]:
        perf_task = guarded(f"osd.{osd_id} perf dump bluefs",
                            per_osd(osd_id, {"prefix": "perf dump", "logger": "bluefs"}))
        opt_tasks = [guarded(f"osd.{osd_id} config get {name}",
                             per_osd(osd_id, {"prefix": "config get", "var": name}))
                     for name in config.observe.scrub_options]
        perf, *opts = await asyncio.gather(perf_task, *opt_tasks)
        merged: dict[str, Any] = {}
        for o in opts:
            if isinstance(o, dict):
                merged.update(o)
        return osd_id, perf, merged

    async def rgw_limit() -> Any:
        if config.rgw.max_objs_per_shard is not None:
            return {"rgw_max_objs_per_shard": config.rgw.max_objs_per_shard, "source": "config"}
        out = await adapters.rados.acommand(
            {"prefix": "config get", "who": "client.rgw", "key": "rgw_max_objs_per_shard"})
        return {"rgw_max_objs_per_shard": out, "source": "mon config database (client.rgw)"}

    async def reshard_limits() -> Any:
        out: dict[str, Any] = {"rgw_max_dynamic_shards": await adapters.rados.acommand(
            {"prefix": "config get", "who": "client.rgw", "key": "rgw_max_dynamic_shards"})}
        if adapters.radosgw_admin is not None:
            zonegroup = await adapters.radosgw_admin.json("zonegroup", "get")
            out["zonegroup_zones"] = len((zonegroup or {}).get("zones", []))
        return out

    tasks: list[Any] = [asyncio.gather(*(osd_info(i) for i in up_osds)), guarded("rgw_max_objs_per_shard", rgw_limit()),
                        guarded("reshard limits (rgw_max_dynamic_shards, zonegroup)", reshard_limits()),
                        guarded("pg dump pgs (deep-scrub deadlines)",
                                _deadlines(adapters.rados, config.scrub_debt.read_every_s, deep_scrub_cache))
                        if config.scrub_debt.enabled else _none()]
    if adapters.admin_api is not None:
        tasks.append(guarded("admin API GET /admin/bucket?stats=True", adapters.admin_api.buckets_with_stats()))
    reshard_list = adapters.radosgw_admin is not None and not _full(raw)
    if reshard_list:
        tasks.append(guarded("radosgw-admin reshard list", adapters.radosgw_admin.reshard_list()))  # type: ignore[union-attr]
    elif adapters.radosgw_admin is not None:
        # Measured on 16.2.15: on a full cluster `reshard list` waits for a write until killed,
        # while zonegroup get and the admin API's bucket stats answer (docs/purge.md, "Full cluster").
        errors.append({"source": "radosgw-admin reshard list",
                       "error": "not run: the cluster is full and it would wait for a write"})
    osd_results, limit, reshard, deadlines, *rest = await asyncio.gather(*tasks)

    raw["osd_bluefs"] = {str(i): perf for i, perf, _ in osd_results if perf is not None}
    raw["osd_config"] = {str(i): opts for i, _, opts in osd_results if opts}
    raw["rgw_limit"] = limit
    raw["reshard_limits"] = reshard
    raw["pg_deep_scrub"] = deadlines
    raw["buckets"] = rest[0] if adapters.admin_api is not None else None
    raw["reshard_queue"] = rest[-1] if reshard_list else None
    raw["collect_seconds"] = round(time.monotonic() - t0, 3)
    return raw


#: What PG_NOT_DEEP_SCRUBBED is computed from. The check runs in the mgr with the mgr's
#: settings (PGMap::get_health_checks), so they are read for who=mgr.
DEEP_SCRUB_COMMANDS: dict[str, dict[str, Any]] = {
    "pgs": {"prefix": "pg dump", "dumpcontents": ["pgs"]},
    "osd_deep_scrub_interval": {"prefix": "config get", "who": "mgr", "key": "osd_deep_scrub_interval"},
    "warn_ratio": {"prefix": "config get", "who": "mgr", "key": "mon_warn_pg_not_deep_scrubbed_ratio"},
}


async def deep_scrub_deadlines(rados: RadosAdapter) -> dict[str, Any]:
    """Every PG's last deep-scrub stamp and the settings that make its deadline (three reads;
    ``pg dump pgs`` is about 2.3 KiB of JSON per PG)."""
    names = list(DEEP_SCRUB_COMMANDS)
    answers = await asyncio.gather(*(rados.acommand(DEEP_SCRUB_COMMANDS[n]) for n in names))
    return dict(zip(names, answers))


async def _deadlines(rados: RadosAdapter, every_s: float, cache: DeepScrubCache | None) -> dict[str, Any]:
    if cache is not None and cache.answers is not None and cache.read_at is not None \
            and time.monotonic() - cache.read_at < every_s:
        return cache.answers
    answers = await deep_scrub_deadlines(rados)
    if cache is not None:
        cache.answers, cache.read_at = answers, time.monotonic()
    return answers


async def _none() -> None:
    return None


def _full(raw: dict[str, Any]) -> bool:
    from rgwkeeper.snapshot import parse_full_state

    return parse_full_state(raw["health"], raw["osd_dump"]).full


async def read_full_state(rados: RadosAdapter) -> "FullState":
    """Is the cluster full? Three mon reads, which answer normally on a full cluster."""
    from rgwkeeper.snapshot import parse_full_state

    health, osd_dump, osd_df = await asyncio.gather(
        rados.acommand(CLUSTER_COMMANDS["health"]), rados.acommand(CLUSTER_COMMANDS["osd_dump"]),
        rados.acommand(CLUSTER_COMMANDS["osd_df"]))
    return parse_full_state(health, osd_dump, osd_df)


async def snapshot(adapters: Adapters, config: Config, *,
                   deep_scrub_cache: DeepScrubCache | None = None) -> tuple["Snapshot", dict[str, Any]]:
    """Collect and parse one snapshot."""
    from rgwkeeper.snapshot import parse

    raw = await collect_raw(adapters, config, deep_scrub_cache=deep_scrub_cache)
    snap = parse(raw, data_pools=config.rgw.data_pools, shard_warning_ratio=config.rgw.shard_warning_ratio)
    return snap, raw
