"""What the planner needs to know about one bucket and its cluster, as a frozen dataclass.

:func:`parse_profile` is pure (fed captured radosgw-admin JSON in the unit tests);
:func:`gather_profile` reads it from the cluster, in parallel where the calls are independent
(one at a time under a purge's rate cap).
"""

from __future__ import annotations

import asyncio
import errno
from dataclasses import asdict, dataclass, replace
from typing import Any, Awaitable, Callable, Mapping, TypeVar

import structlog

from rgwkeeper.adapters.adminapi import AdminApi
from rgwkeeper.adapters.gc import GcRead
from rgwkeeper.adapters.rados import BulkObjects, RadosAdapter
from rgwkeeper.adapters.radosgw_admin import RadosgwAdmin
from rgwkeeper.adapters.siteconfig import (CONFIG_STORE_OPTION, MAX_ROOT_OBJECTS, ROOT_CONFIG_DEFAULTS, ROOT_POOL,
                                            ZONEGROUP_PREFIX, the_single_zone, zones_if_single)
from rgwkeeper.errors import CephError, CephTimeout, CephUnreachable, NotFound, UsageError
from rgwkeeper.names import validate_bucket
from rgwkeeper.purge.layout import holds_objects_of, index_shard_oids
from rgwkeeper.snapshot import parse_release

log = structlog.get_logger(__name__)
T = TypeVar("T")

#: rgw_max_chunk_size's default: the most data RGW keeps in an object's head (the first
#: RADOS object, ``<marker>_<key>``); anything past it goes to tail objects.
DEFAULT_HEAD_CHUNK_BYTES = 4 << 20

#: Index generations probed for a bucket whose stats do not name its generation (before
#: Tentacle): each reshard on Reef and later starts the next one (docs/purge.md, "Index generations").
INDEX_GENERATIONS_PROBED = 64

# RGWBucketFlags (rgw_common.h): the bits of bucket_info.flags a purge cares about.
BUCKET_VERSIONED = 0x2
BUCKET_VERSIONS_SUSPENDED = 0x4
BUCKET_OBJ_LOCK_ENABLED = 0x20


class NoSuchBucket(UsageError):
    """The bucket does not exist (radosgw-admin's own ``bucket rm`` exits 0 for that)."""


@dataclass(frozen=True)
class BucketProfile:
    bucket: str
    bucket_id: str
    marker: str  # prefix of the bucket's RADOS objects: <marker>_<key>, <marker>__shadow_...
    owner: str
    num_shards: int
    placement_rule: str
    num_objects: int  # rgw.main: objects (and versions) in the index
    size_bytes: int  # rgw.main logical size
    incomplete_uploads: int  # rgw.multimeta entries: one per incomplete multipart upload
    versioning: str  # "off", "enabled", "suspended" (suspended buckets still hold versions)
    object_lock: bool
    has_lifecycle: bool
    indexless: bool
    resharding: bool
    data_pool: str
    index_pool: str
    data_extra_pool: str
    zones: int  # zones in the zonegroup; more than one means multisite replication
    release: str
    version: str
    head_chunk_bytes: int = DEFAULT_HEAD_CHUNK_BYTES
    # Data pools of the placement's other storage classes: tails of objects moved there
    # (lifecycle transitions) live in them while the head stays in data_pool.
    class_data_pools: tuple[str, ...] = ()
    # The index generation whose shards hold the bucket's index; None: not known (the stats do
    # not name it and the shards were not found under exactly one generation).
    index_gen: int | None = 0
    # RGW's GC objects: the zone's gc_pool (pool:namespace) and rgw_gc_max_objs; "" / 0: not
    # known, and GC is listed with radosgw-admin (gc_entries).
    gc_pool: str = ""
    gc_objects: int = 0

    @property
    def mean_object_bytes(self) -> float:
        return self.size_bytes / self.num_objects if self.num_objects else 0.0

    @property
    def index_shards(self) -> list[str]:
        """The current index generation's shard objects (ValueError if the generation is unknown)."""
        if self.index_gen is None:
            raise ValueError(f"the index generation of bucket {self.bucket} is not known")
        return index_shard_oids(self.bucket_id, self.num_shards, self.index_gen)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "BucketProfile":
        # A checkpoint written before index_gen was recorded meant generation 0.
        return cls(**{**d, "class_data_pools": tuple(d.get("class_data_pools", ()))})


def parse_profile(stats: Mapping[str, Any], instance: Mapping[str, Any], placement: Mapping[str, Any],
                  zones: list[str], versions: Mapping[str, Any],
                  head_chunk_bytes: int | None = None, *, gc_pool: str = "", gc_objects: int | None = None) -> BucketProfile:
    """Combine ``bucket stats``, ``metadata get bucket.instance:B:ID``, the zone's placement
    pools, the zonegroup's zones and ``ceph versions`` into a profile."""
    info = instance.get("data", {}).get("bucket_info", {})
    attrs = {a.get("key") for a in instance.get("data", {}).get("attrs", [])}
    flags = int(info.get("flags", 0))
    usage = stats.get("usage", {})
    main = usage.get("rgw.main", {})
    rule = info.get("placement_rule") or stats.get("placement_rule") or "default-placement"
    pools = placement.get(rule.split("/")[0], {})
    explicit = info.get("bucket", {}).get("explicit_placement", {}) or {}
    release, version = parse_release(versions)
    if flags & BUCKET_VERSIONS_SUSPENDED:
        versioning = "suspended"
    elif flags & BUCKET_VERSIONED:
        versioning = "enabled"
    else:
        versioning = "off"
    return BucketProfile(
        bucket=stats["bucket"],
        bucket_id=stats["id"],
        marker=stats["marker"],
        owner=stats["owner"],
        num_shards=int(stats.get("num_shards", info.get("num_shards", 0))),
        placement_rule=rule,
        num_objects=int(main.get("num_objects", 0)),
        size_bytes=int(main.get("size", 0)),
        incomplete_uploads=int(usage.get("rgw.multimeta", {}).get("num_objects", 0)),
        versioning=versioning,
        object_lock=bool(flags & BUCKET_OBJ_LOCK_ENABLED) or "user.rgw.object-lock" in attrs,
        has_lifecycle="user.rgw.lc" in attrs,
        indexless=int(info.get("index_type", 0)) != 0,
        resharding=int(info.get("reshard_status", 0)) != 0,
        # Buckets created before placement rules carry their pools in explicit_placement.
        data_pool=explicit.get("data_pool") or pools.get("data_pool", ""),
        index_pool=explicit.get("index_pool") or pools.get("index_pool", ""),
        data_extra_pool=explicit.get("data_extra_pool") or pools.get("data_extra_pool", ""),
        zones=max(1, len(zones)),
        release=release,
        version=version,
        head_chunk_bytes=head_chunk_bytes or DEFAULT_HEAD_CHUNK_BYTES,
        class_data_pools=tuple(x for x in pools.get("class_data_pools", ()) if x != pools.get("data_pool")),
        # Tentacle's bucket stats name the generation; earlier releases' do not (resolved by a probe).
        index_gen=int(stats["index_generation"]) if "index_generation" in stats else None,
        gc_pool=gc_pool,
        gc_objects=gc_objects or 0,
    )


async def admin_first(admin_api: AdminApi | None, through_api: Callable[[AdminApi], Awaitable[T]],
                      through_cli: Callable[[], Awaitable[T]], *, gone: str, what: str,
                      confirm_gone: bool = False, unreachable_fails: bool = False) -> tuple[T, str]:
    """One read (``what``, for the log), through the admin API when there is one; else, and
    whenever the API does not give a clear answer (caps lacking, RGW restarting or busy, a 404
    other than ``gone``), through radosgw-admin, which reads RADOS without RGW and is the
    reference. NotFound from radosgw-admin is raised; from the API only when its error is
    ``gone`` (the captured NoSuchBucket / NoSuchKey), and with ``confirm_gone`` not even then:
    RGW's path for S3 answers NoSuchBucket to everything, so where "gone" would skip a safety
    check radosgw-admin confirms it. With ``unreachable_fails``, an RGW that does not answer at
    all (CephUnreachable, CephTimeout) is raised instead: where the work needs RGW next anyway,
    failing at once says so in one line and leaves nothing behind. Returns (answer, source)."""
    if admin_api is not None:
        try:
            return await through_api(admin_api), "admin API"
        except NotFound as exc:
            if exc.detail == gone and not confirm_gone:
                raise
            why: CephError = exc
        except CephError as exc:
            if unreachable_fails and isinstance(exc, (CephUnreachable, CephTimeout)):
                raise
            why = exc
        log.info("read through radosgw-admin, not the admin API", what=what, why=str(why)[:200])
    return await through_cli(), "radosgw-admin"


async def gc_entries(p: BucketProfile, *, rgw: RadosgwAdmin,
                     bulk: Callable[[str], BulkObjects] | None) -> GcRead:
    """The GC entries that hold RADOS objects of the bucket, as ``radosgw-admin gc list
    --include-all`` prints them, and how many entries GC held in all: read with librados from the
    zone's GC objects (BulkObjects.gc_entries: milliseconds, where the process takes 0.1-0.8 s,
    and only the bucket's entries are kept in memory) when the plan knows where they are; through
    radosgw-admin, the reference, when it does not, or when that read fails or finds more GC
    objects than RGW is configured with (docs/purge.md, "GC at the drop")."""
    ours = holds_objects_of(p.marker)
    if bulk is not None and p.gc_pool and p.gc_objects > 0:
        pool, _, namespace = p.gc_pool.partition(":")
        try:
            return await bulk(pool).gc_entries(namespace, p.gc_objects, keep=ours)
        except CephError as exc:
            log.info("gc list through radosgw-admin, not librados", why=str(exc)[:200])
    listed = await rgw.gc_list(include_all=True)
    return GcRead([e for e in listed if ours(e)], len(listed))


async def confirmed_bucket_stats(bucket: str, *, admin_api: AdminApi | None, rgw: RadosgwAdmin,
                                 unreachable_fails: bool = False) -> tuple[dict[str, Any], str]:
    """The bucket's stats (and where they came from) for a check that "gone" would skip:
    NotFound only when radosgw-admin confirms it (admin_first's ``confirm_gone``)."""
    return await admin_first(admin_api, lambda api: api.bucket_stats(bucket), lambda: rgw.bucket_stats(bucket),
                             gone="NoSuchBucket", what=f"bucket stats {bucket}", confirm_gone=True,
                             unreachable_fails=unreachable_fails)


async def bucket_id_now(bucket: str, *, admin_api: AdminApi | None, rgw: RadosgwAdmin) -> str | None:
    """The id of the bucket the name holds now; None if no bucket has the name (confirmed by
    radosgw-admin). What a purge checks before it goes on by name (S3 deletes, bucket rm)."""
    try:
        stats, _ = await confirmed_bucket_stats(bucket, admin_api=admin_api, rgw=rgw)
    except NotFound:
        return None
    return stats.get("id")


async def gather_profile(bucket: str, *, rgw: RadosgwAdmin, rados: RadosAdapter,
                         admin_api: AdminApi | None = None,
                         bulk: Callable[[str], BulkObjects] | None = None,
                         one_at_a_time: bool = False) -> BucketProfile:
    """Read a bucket's profile; :class:`NoSuchBucket` if it does not exist.

    With the admin API, the bucket's stats and instance and the zone come from RGW over HTTP
    (tens of ms) instead of radosgw-admin processes (each 0.15-1 s here); the zonegroup, which
    the API does not serve on every release, from .rgw.root with librados (``bulk``) where
    that answers (a realm-less single zone), else from radosgw-admin meanwhile (after the
    others with ``one_at_a_time``). Without the metadata=read or zone=read cap, that read goes
    through radosgw-admin (docs/purge.md, "The plan's reads").
    With ``bulk`` (librados on a pool), an index generation the stats do not name is probed.
    ``one_at_a_time`` (a capped purge, beside ingest): the reads one after the other, so two
    radosgw-admin processes never start together (docs/purge.md, "The plan's reads").
    """
    validate_bucket(bucket)

    async def rgw_option(key: str) -> int | None:
        """An RGW option as the mon's config database answers for client.rgw (its default if
        unset); None if it cannot be read. Only hints: the per-object checks decide, and the GC
        reader checks the count it is given (BulkObjects.gc_entries)."""
        try:
            out = await rados.acommand({"prefix": "config get", "who": "client.rgw", "key": key})
        except Exception:  # noqa: BLE001 - a hint only
            return None
        try:
            return int(out) if out is not None else None
        except (TypeError, ValueError):
            return None

    async def stats_and_instance() -> tuple[dict[str, Any], dict[str, Any]]:
        # "Gone" is confirmed: it lets an unfinished purge of the name resume without the check
        # that the name still holds the bucket it began on (purge.prepare). An RGW that does not
        # answer fails the plan at once: every purge needs it next (the fence, S3).
        stats, via = await confirmed_bucket_stats(bucket, admin_api=admin_api, rgw=rgw, unreachable_fails=True)
        key = f"{bucket}:{stats['id']}"
        instance, _ = await admin_first(admin_api if via == "admin API" else None,  # one timeout, not two
                                        lambda api: api.metadata_get("bucket.instance", key),
                                        lambda: rgw.metadata_get(f"bucket.instance:{key}"), gone="NoSuchKey",
                                        what=f"metadata get bucket.instance:{key}")
        return stats, instance

    async def site() -> tuple[dict[str, Any], list[str]]:
        """The zone's layout (admin API, else radosgw-admin) and its zonegroup's zones: from
        .rgw.root where that answers for a realm-less single zone, the zone RGW serves
        (siteconfig.zones_if_single), else from `radosgw-admin zonegroup get`."""
        async def root() -> dict[str, bytes] | None:
            if bulk is None or not await root_is_the_config_store():
                return None
            try:
                return await bulk(ROOT_POOL).read_pool(MAX_ROOT_OBJECTS, read_prefix=ZONEGROUP_PREFIX)
            except CephError as exc:
                log.info("zonegroup read through radosgw-admin, not librados", why=str(exc)[:200])
                return None

        async def zone() -> dict[str, Any]:
            layout, _ = await admin_first(admin_api, lambda api: api.zone_layout(), rgw.zone_layout,
                                          gone="", what="zone get")
            return layout

        if one_at_a_time:
            layout, objects = await zone(), await root()
            zones = zones_if_single(objects, layout["id"]) if objects else None
            return layout, zones if zones is not None else await rgw.zonegroup_zones()

        zone_task = asyncio.ensure_future(zone())
        try:
            objects = await root()
            if not objects or the_single_zone(objects) is None:  # zonegroup get beside the zone read, as before
                zones = await rgw.zonegroup_zones()
                return await zone_task, zones
            layout = await zone_task
        finally:
            if not zone_task.done():
                zone_task.cancel()
                await asyncio.gather(zone_task, return_exceptions=True)
        zones = zones_if_single(objects, layout["id"])
        return layout, zones if zones is not None else await rgw.zonegroup_zones()

    async def root_is_the_config_store() -> bool:
        """RGW keeps its realm, zonegroup and zone configuration in .rgw.root: the root pool
        options are at their default and the config store (Reef and later) is RADOS. As the mon's
        config database answers for client.rgw (an override only in an RGW host's ceph.conf is
        not seen here, nor by radosgw-admin on this host)."""
        async def option(key: str) -> str | None:
            try:
                # Text: the mon prints a string option bare, even with format=json (20.2.4).
                out = await rados.acommand({"prefix": "config get", "who": "client.rgw", "key": key}, text=True)
            except CephError as exc:
                # An option this release does not know (rgw_config_store before Reef): its default.
                return ROOT_CONFIG_DEFAULTS[key] if exc.ret == -errno.ENOENT and key == CONFIG_STORE_OPTION else None
            # An empty root pool option is RGW's default pool too (RGWZoneGroup::get_pool).
            return ROOT_POOL if out == "" and key != CONFIG_STORE_OPTION else out

        got = await asyncio.gather(*(option(k) for k in ROOT_CONFIG_DEFAULTS))
        differs = {k: v for k, v in zip(ROOT_CONFIG_DEFAULTS, got) if v != ROOT_CONFIG_DEFAULTS[k]}
        if differs:
            log.info("zonegroup read through radosgw-admin, not librados", why=f"not the default config store: {differs}")
        return not differs

    reads: list[Callable[[], Awaitable[Any]]] = [
        stats_and_instance, site,
        lambda: rados.acommand({"prefix": "versions"}), lambda: rgw_option("rgw_max_chunk_size"),
        lambda: rgw_option("rgw_gc_max_objs")]
    try:
        if one_at_a_time:
            results = [await read() for read in reads]
        else:
            results = list(await asyncio.gather(*(read() for read in reads)))
        (stats, instance), (layout, zones), versions, chunk, gc_objects = results
    except NotFound:
        raise NoSuchBucket(f"bucket {bucket!r} does not exist") from None
    profile = parse_profile(stats, instance, layout["placement"], zones, versions or {}, chunk,
                            gc_pool=layout["gc_pool"], gc_objects=gc_objects)
    if bulk is not None:
        profile = await probe_index_generation(profile, bulk(profile.index_pool) if profile.index_pool else None)
    return profile


async def probe_index_generation(p: BucketProfile, index: BulkObjects | None) -> BucketProfile:
    """Settle ``index_gen`` by statting shard 0 of generations 0..INDEX_GENERATIONS_PROBED-1:
    exactly one must exist, else it stays None (and the direct method is refused)."""
    if p.index_gen is not None or p.indexless:
        return p
    if p.num_shards <= 0:
        return replace(p, index_gen=0)  # an unsharded index is .dir.<id>, whatever its generation
    if index is None:
        return p
    gens = range(INDEX_GENERATIONS_PROBED)
    sizes = await index.stat_many([(index_shard_oids(p.bucket_id, 1, g)[0], "") for g in gens], window=64)
    found = [g for g, size in zip(gens, sizes) if size is not None]
    return replace(p, index_gen=found[0]) if len(found) == 1 else p
