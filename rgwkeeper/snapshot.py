"""One snapshot of the cluster: frozen dataclasses named the way Ceph names things.

:func:`parse` turns a raw observation (the JSON of each command, as gathered by
:mod:`rgwkeeper.observe` or loaded from a fixture) into a :class:`Snapshot`. It does no I/O
and is linear in the number of OSDs and buckets (see ``bench/snapshot.py``).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping

from rgwkeeper.releases import LOAD, health_kind

# Health codes rgwkeeper acts on or reports; the full set of checks is kept regardless.
BLUEFS_SPILLOVER = "BLUEFS_SPILLOVER"
OSD_NEARFULL = "OSD_NEARFULL"
OSD_BACKFILLFULL = "OSD_BACKFILLFULL"
OSD_FULL = "OSD_FULL"
POOL_NEARFULL = "POOL_NEARFULL"
POOL_FULL = "POOL_FULL"
#: Health codes that mean writes are blocked: the OSDs refuse every op without librados'
#: full-try flag until usage is below the full ratio (docs/purge.md, "Full cluster").
FULL_CODES = (OSD_FULL, POOL_FULL)
OSDMAP_FLAGS = "OSDMAP_FLAGS"
PG_NOT_DEEP_SCRUBBED = "PG_NOT_DEEP_SCRUBBED"

RGW_DEFAULT_MAX_OBJS_PER_SHARD = 100_000  # rgw_max_objs_per_shard's default

_RELEASE_RE = re.compile(r"ceph version (\S+) \([0-9a-f]+\) (\w+)")


@dataclass(frozen=True, slots=True)
class FullRatios:
    """The OSDMap's fill thresholds (fractions of raw capacity)."""

    nearfull_ratio: float
    backfillfull_ratio: float
    full_ratio: float


@dataclass(frozen=True, slots=True)
class FullState:
    """Is the cluster full (writes blocked), where, and how far from each ratio.

    Keyed on the health codes OSD_FULL / POOL_FULL; which OSDs and pools are full comes from
    the OSDMap (an OSD's state and a pool's flags say "full"), never from the checks' text.
    """

    codes: tuple[str, ...]  # OSD_FULL / POOL_FULL, as present in health detail
    full_osds: tuple[int, ...]
    full_pools: tuple[str, ...]
    ratios: FullRatios
    fullest_osd: int | None
    fullest_used_ratio: float | None  # from `osd df`; None when it was not read

    @property
    def full(self) -> bool:
        # POOL_FULL is raised for a pool at its quota too, on a healthy cluster: that is not a
        # full cluster (its flags read full,full_quota; parse_full_state leaves it out).
        return "OSD_FULL" in self.codes or ("POOL_FULL" in self.codes and bool(self.full_pools))

    def where(self) -> str:
        """``osd.1 full; pools a, b full; fullest osd.1 19.2% used (full_ratio 8.0%)``."""
        r = self.ratios
        parts = []
        if self.full_osds:
            parts.append(", ".join(f"osd.{o}" for o in self.full_osds) + " full")
        if self.full_pools:
            shown = ", ".join(self.full_pools[:4]) + (f" and {len(self.full_pools) - 4} more"
                                                       if len(self.full_pools) > 4 else "")
            parts.append(f"pool(s) {shown} full")
        if self.fullest_osd is not None and self.fullest_used_ratio is not None:
            parts.append(f"fullest osd.{self.fullest_osd} {self.fullest_used_ratio:.1%} used against nearfull "
                         f"{r.nearfull_ratio:.1%} / backfillfull {r.backfillfull_ratio:.1%} / full {r.full_ratio:.1%}")
        else:
            parts.append(f"full_ratio {r.full_ratio:.1%}")
        return "; ".join(parts)

    def describe(self) -> str:
        return f"the cluster is full ({', '.join(self.codes)}): {self.where()}"

    def advice(self) -> str:
        return ("writes wait until usage is below the full ratio: free space with `rgwkeeper purge BUCKET "
                "--raise-full-ratio R` (a small temporary raise, journaled and given back), or raise it "
                "yourself with `ceph osd set-full-ratio R`, delete, and set it back")

    def refusal(self, what: str, remedy: str = "rerun with --raise-full-ratio R (at most purge.max_full_ratio) "
                "to raise it for this run and give it back after") -> str:
        """The one line a purge or expiry refused on a full cluster prints."""
        return (f"{what} refused: {self.describe()}; RGW cannot write (index, GC, metadata) until usage is below "
                f"the full ratio: {remedy}, or run `ceph osd set-full-ratio R` yourself; nothing was changed")

    def to_dict(self) -> dict[str, Any]:
        return {"full": self.full, "codes": list(self.codes), "full_osds": list(self.full_osds),
                "full_pools": list(self.full_pools), "ratios": asdict(self.ratios),
                "fullest_osd": self.fullest_osd, "fullest_used_ratio": self.fullest_used_ratio,
                "summary": self.describe() if self.full else "not full",
                "advice": self.advice() if self.full else None}


def parse_ratios(osd_dump: Mapping[str, Any]) -> FullRatios:
    return FullRatios(nearfull_ratio=float(osd_dump["nearfull_ratio"]),
                      backfillfull_ratio=float(osd_dump["backfillfull_ratio"]),
                      full_ratio=float(osd_dump["full_ratio"]))


def parse_full_state(health: Mapping[str, Any], osd_dump: Mapping[str, Any],
                     osd_df: Mapping[str, Any] | None = None) -> FullState:
    """The full state from ``health detail``, ``osd dump`` and (optionally) ``osd df``. Pure."""
    codes = tuple(c for c in FULL_CODES if c in (health.get("checks") or {}))
    full_osds = tuple(sorted(int(o["osd"]) for o in osd_dump.get("osds", []) if "full" in (o.get("state") or ())))
    full_pools = tuple(p["pool_name"] for p in osd_dump.get("pools", [])
                       if "full" in (flags := str(p.get("flags_names", "")).split(",")) and "full_quota" not in flags)
    fullest = max(((int(n["id"]), int(n.get("kb_used", 0)) / int(n["kb"])) for n in (osd_df or {}).get("nodes", [])
                   if int(n.get("kb", 0) or 0) > 0), key=lambda x: x[1], default=None)
    return FullState(codes=codes, full_osds=full_osds, full_pools=full_pools, ratios=parse_ratios(osd_dump),
                     fullest_osd=fullest[0] if fullest else None, fullest_used_ratio=fullest[1] if fullest else None)


@dataclass(frozen=True, slots=True)
class RawFill:
    total_bytes: int
    total_used_raw_bytes: int
    total_avail_bytes: int

    @property
    def used_ratio(self) -> float:
        return self.total_used_raw_bytes / self.total_bytes if self.total_bytes else 0.0


@dataclass(frozen=True, slots=True)
class PoolFill:
    pool_id: int
    name: str
    stored_bytes: int
    objects: int
    bytes_used: int
    percent_used: float  # a fraction 0..1, as `ceph df` reports it despite the name
    max_avail_bytes: int
    applications: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class OsdUtilization:
    osd_id: int
    up: bool
    in_: bool
    kb: int
    kb_used: int
    utilization: float  # percent, as `ceph osd df` reports it
    pgs: int

    @property
    def used_ratio(self) -> float:
        return self.kb_used / self.kb if self.kb else 0.0


@dataclass(frozen=True, slots=True)
class BluefsUsage:
    """BlueFS space of one OSD (``ceph tell osd.N perf dump bluefs``)."""

    osd_id: int
    db_total_bytes: int
    db_used_bytes: int
    slow_used_bytes: int

    @property
    def spilled_over(self) -> bool:
        return self.slow_used_bytes > 0


@dataclass(frozen=True, slots=True)
class HealthCheck:
    code: str
    severity: str
    summary: str
    count: int
    detail: tuple[str, ...]
    muted: bool


@dataclass(frozen=True, slots=True)
class ClientIo:
    pool: str
    write_op_per_sec: float
    write_bytes_sec: float
    read_op_per_sec: float
    read_bytes_sec: float


@dataclass(frozen=True, slots=True)
class ScrubState:
    pgs_total: int
    pgs_scrubbing: int  # shallow scrubs in progress
    pgs_deep_scrubbing: int
    noscrub: bool
    nodeep_scrub: bool
    #: op queue in force on each OSD that answered: "wpq" or "mclock_scheduler".
    op_queue_by_osd: Mapping[int, str]
    #: Effective option values read from each OSD: {option: {osd_id: value}}.
    effective_options: Mapping[str, Mapping[int, str]]

    @property
    def op_queues(self) -> tuple[str, ...]:
        return tuple(sorted(set(self.op_queue_by_osd.values())))

    def settings_by_osd(self) -> dict[int, dict[str, str]]:
        """{osd_id: {option: effective value}}, options in name order."""
        out: dict[int, dict[str, str]] = {}
        for name, per_osd in sorted(self.effective_options.items()):
            for osd_id, value in per_osd.items():
                out.setdefault(osd_id, {})[name] = value
        return dict(sorted(out.items()))

    def setting_groups(self) -> tuple[tuple[tuple[int, ...], dict[str, str]], ...]:
        """OSDs with identical effective values, one group each, the largest group first: a cluster
        of hundreds of OSDs shows as a few lines."""
        groups: dict[tuple[tuple[str, str], ...], list[int]] = {}
        for osd_id, values in self.settings_by_osd().items():
            groups.setdefault(tuple(values.items()), []).append(osd_id)
        return tuple((tuple(ids), dict(values)) for values, ids in
                     sorted(groups.items(), key=lambda g: (-len(g[1]), g[1][0])))


@dataclass(frozen=True, slots=True)
class BucketShards:
    """A bucket's index sharding and how close it is to dynamic resharding."""

    bucket: str
    tenant: str
    owner: str
    num_objects: int
    size_bytes: int
    num_shards: int
    objects_per_shard: int
    fill_ratio: float  # objects_per_shard / max_objs_per_shard
    fill_status: str  # "OK", "WARN" (>= warning ratio), "OVER" (>= 100%): radosgw-admin's words
    in_reshard_queue: bool


@dataclass(frozen=True, slots=True)
class PgHealth:
    """What the gates look at before any change."""

    pgs_total: int
    pgs_inactive: int  # in a state without "active" (peering, unknown, down, incomplete...)
    degraded_ratio: float  # fraction of object copies degraded, from the pgmap
    misplaced_ratio: float


@dataclass(frozen=True, slots=True)
class PgDeepScrub:
    """One PG's deep-scrub deadline, the way the PG_NOT_DEEP_SCRUBBED check computes it."""

    pgid: str
    last_deep_scrub_stamp: float  # epoch seconds; 0.0: never deep-scrubbed
    deep_scrubbing: bool  # its state has scrubbing+deep now
    interval_s: float  # the pool's deep_scrub_interval if > 0, else osd_deep_scrub_interval
    warn_at: float  # epoch seconds from which PG_NOT_DEEP_SCRUBBED counts it


#: How many PGs ``Snapshot.to_dict`` (``status --json``) lists, nearest deadline first.
DEEP_SCRUB_PGS_LISTED = 50


@dataclass(frozen=True, slots=True)
class DeepScrubDeadlines:
    """Every PG's deep-scrub deadline (``pg dump pgs``, pool options, the mgr's settings)."""

    pgs: tuple[PgDeepScrub, ...]
    osd_deep_scrub_interval: float
    warn_ratio: float  # mon_warn_pg_not_deep_scrubbed_ratio; 0 turns the health check off

    def nearest(self) -> PgDeepScrub | None:
        return min(self.pgs, key=lambda p: (p.warn_at, p.pgid), default=None)


@dataclass(frozen=True, slots=True)
class ObserveError:
    source: str
    error: str


@dataclass(frozen=True, slots=True)
class Snapshot:
    taken_at: float
    fsid: str
    release: str  # e.g. "pacific"
    version: str  # e.g. "16.2.15"
    versions: Mapping[str, Mapping[str, int]]
    health_status: str
    checks: Mapping[str, HealthCheck]
    ratios: FullRatios
    raw: RawFill
    pools: tuple[PoolFill, ...]
    osds: tuple[OsdUtilization, ...]
    bluefs: tuple[BluefsUsage, ...]
    rgw_data_pools: tuple[str, ...]
    rgw_io: ClientIo
    scrub: ScrubState
    max_objs_per_shard: int
    max_objs_per_shard_source: str
    buckets: tuple[BucketShards, ...]
    pg_health: PgHealth = field(default=PgHealth(0, 0, 0.0, 0.0))
    max_dynamic_shards: int = 1999  # rgw_max_dynamic_shards
    multisite: bool = False  # the zonegroup has more than one zone
    errors: tuple[ObserveError, ...] = field(default=())
    full: FullState | None = None  # None only for snapshots built by hand
    deep_scrub: DeepScrubDeadlines | None = None  # None: not read (or unreadable: see errors)

    # -- derived views ---------------------------------------------------------------------
    @property
    def headroom_to_nearfull(self) -> float:
        """Raw capacity fraction left before the nearfull ratio (negative: past it)."""
        return self.ratios.nearfull_ratio - self.raw.used_ratio

    @property
    def fullest_osd(self) -> OsdUtilization | None:
        return max(self.osds, key=lambda o: o.used_ratio, default=None)

    @property
    def spilled_osds(self) -> tuple[BluefsUsage, ...]:
        return tuple(b for b in self.bluefs if b.spilled_over)

    def has_check(self, code: str) -> bool:
        return code in self.checks

    @property
    def load_checks(self) -> tuple[str, ...]:
        """Health codes raised now that mean the cluster is under stress (rgwkeeper.releases.HEALTH_CODES;
        an unknown code counts unless muted). Empty: the health checks allow calling it quiet."""
        return tuple(sorted(c.code for c in self.checks.values() if health_kind(c.code, muted=c.muted) == LOAD))

    def buckets_nearest_reshard(self, limit: int = 10) -> tuple[BucketShards, ...]:
        return tuple(sorted(self.buckets, key=lambda b: b.fill_ratio, reverse=True)[:limit])

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["derived"] = {
            "raw_used_ratio": self.raw.used_ratio,
            "headroom_to_nearfull": self.headroom_to_nearfull,
            "fullest_osd": self.fullest_osd.osd_id if self.fullest_osd else None,
            "fullest_osd_used_ratio": self.fullest_osd.used_ratio if self.fullest_osd else None,
            "spilled_osds": [b.osd_id for b in self.spilled_osds],
            "op_queues": list(self.scrub.op_queues),
            "health_kinds": {c.code: health_kind(c.code, muted=c.muted) for c in self.checks.values()},
            "load_checks": list(self.load_checks),
            "osd_settings": [{"osds": list(ids), "settings": values} for ids, values in self.scrub.setting_groups()],
            "settings_by_osd": self.scrub.settings_by_osd(),
        }
        out["full"] = self.full.to_dict() if self.full is not None else None
        if self.deep_scrub is not None:  # a cluster has tens of thousands of PGs: list the nearest only
            nearest = sorted(self.deep_scrub.pgs, key=lambda p: (p.warn_at, p.pgid))[:DEEP_SCRUB_PGS_LISTED]
            out["deep_scrub"]["pgs"] = [asdict(p) for p in nearest]
            out["deep_scrub"]["pgs_total"] = len(self.deep_scrub.pgs)
        return _jsonable(out)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


# -- parsing -------------------------------------------------------------------------------
def parse(raw: Mapping[str, Any], *, data_pools: Iterable[str] = (), shard_warning_ratio: float = 0.9) -> Snapshot:
    """Build a Snapshot from a raw observation. Pure: no I/O, no clock."""
    osd_dump = raw["osd_dump"]
    release, version = parse_release(raw.get("versions") or {})
    pools_meta = {p["pool"]: p for p in osd_dump.get("pools", [])}
    rgw_pools = tuple(data_pools) or tuple(
        p["pool_name"] for p in pools_meta.values()
        if "rgw" in (p.get("application_metadata") or {}) and p["pool_name"].endswith(".buckets.data")
    )
    limit, limit_source = _shard_limit(raw.get("rgw_limit"))
    errors = [ObserveError(e["source"], e["error"]) for e in raw.get("errors", [])]
    deadlines = None
    if raw.get("pg_deep_scrub") is not None:
        try:
            deadlines = parse_deep_scrub(raw["pg_deep_scrub"], osd_dump)
        except (KeyError, TypeError, ValueError) as exc:
            errors.append(ObserveError("pg dump pgs (deep-scrub deadlines)", f"unreadable answer: {exc!r}"[:300]))
    return Snapshot(
        taken_at=float(raw.get("taken_at", 0.0)),
        fsid=osd_dump.get("fsid", raw["status"].get("fsid", "")),
        release=release,
        version=version,
        versions={k: dict(v) for k, v in (raw.get("versions") or {}).items()},
        health_status=raw["health"].get("status", "UNKNOWN"),
        checks=parse_checks(raw["health"]),
        ratios=parse_ratios(osd_dump),
        raw=_raw_fill(raw["df"]["stats"]),
        pools=tuple(_pool_fill(p, pools_meta.get(p["id"], {})) for p in raw["df"].get("pools", [])),
        osds=parse_osds(osd_dump, raw.get("osd_df") or {}),
        bluefs=parse_bluefs(raw.get("osd_bluefs") or {}),
        rgw_data_pools=rgw_pools,
        rgw_io=parse_client_io(raw.get("pool_stats") or [], rgw_pools),
        scrub=parse_scrub(raw["status"], osd_dump, raw.get("osd_config") or {}),
        max_objs_per_shard=limit,
        max_objs_per_shard_source=limit_source,
        buckets=parse_buckets(raw.get("buckets") or [], raw.get("reshard_queue") or [], limit, shard_warning_ratio),
        pg_health=parse_pg_health(raw["status"]),
        max_dynamic_shards=int((raw.get("reshard_limits") or {}).get("rgw_max_dynamic_shards") or 1999),
        multisite=int((raw.get("reshard_limits") or {}).get("zonegroup_zones") or 1) > 1,
        errors=tuple(errors),
        full=parse_full_state(raw["health"], osd_dump, raw.get("osd_df")),
        deep_scrub=deadlines,
    )


def parse_release(versions: Mapping[str, Any]) -> tuple[str, str]:
    """The oldest release running anywhere (what limits behaviour), e.g. ("pacific", "16.2.15")."""
    found = []
    for key in (versions.get("overall") or {}):
        m = _RELEASE_RE.match(key)
        if m:
            found.append((tuple(int(x) for x in re.findall(r"\d+", m.group(1))[:3]), m.group(2), m.group(1)))
    if not found:
        return "unknown", "unknown"
    _, name, version = min(found)
    return name, version


def parse_checks(health: Mapping[str, Any]) -> dict[str, HealthCheck]:
    out = {}
    for code, c in (health.get("checks") or {}).items():
        summary = c.get("summary") or {}
        out[code] = HealthCheck(
            code=code, severity=c.get("severity", ""), summary=summary.get("message", ""),
            count=int(summary.get("count", 0) or 0),
            detail=tuple(d.get("message", "") for d in c.get("detail") or ()),
            muted=bool(c.get("muted", False)),
        )
    return out


def _raw_fill(stats: Mapping[str, Any]) -> RawFill:
    return RawFill(
        total_bytes=int(stats["total_bytes"]),
        total_used_raw_bytes=int(stats.get("total_used_raw_bytes", stats.get("total_used_bytes", 0))),
        total_avail_bytes=int(stats["total_avail_bytes"]),
    )


def _pool_fill(p: Mapping[str, Any], meta: Mapping[str, Any]) -> PoolFill:
    s = p["stats"]
    return PoolFill(
        pool_id=int(p["id"]), name=p["name"], stored_bytes=int(s.get("stored", 0)),
        objects=int(s.get("objects", 0)), bytes_used=int(s.get("bytes_used", 0)),
        percent_used=float(s.get("percent_used", 0.0)), max_avail_bytes=int(s.get("max_avail", 0)),
        applications=tuple(sorted((meta.get("application_metadata") or {}).keys())),
    )


def parse_osds(osd_dump: Mapping[str, Any], osd_df: Mapping[str, Any]) -> tuple[OsdUtilization, ...]:
    state = {o["osd"]: o for o in osd_dump.get("osds", [])}
    out = []
    for n in osd_df.get("nodes", []):
        st = state.get(n["id"], {})
        out.append(OsdUtilization(
            osd_id=int(n["id"]), up=st.get("up") == 1, in_=st.get("in") == 1,
            kb=int(n.get("kb", 0)), kb_used=int(n.get("kb_used", 0)),
            utilization=float(n.get("utilization", 0.0)), pgs=int(n.get("pgs", 0)),
        ))
    return tuple(out)


def parse_bluefs(per_osd: Mapping[str, Any]) -> tuple[BluefsUsage, ...]:
    out = []
    for osd_id, perf in per_osd.items():
        b = perf.get("bluefs", perf)
        out.append(BluefsUsage(
            osd_id=int(osd_id), db_total_bytes=int(b.get("db_total_bytes", 0)),
            db_used_bytes=int(b.get("db_used_bytes", 0)), slow_used_bytes=int(b.get("slow_used_bytes", 0)),
        ))
    return tuple(sorted(out, key=lambda b: b.osd_id))


def parse_client_io(pool_stats: Iterable[Mapping[str, Any]], pools: Iterable[str]) -> ClientIo:
    wanted = set(pools)
    w_op = w_b = r_op = r_b = 0.0
    for p in pool_stats:
        if p.get("pool_name") in wanted:
            io = p.get("client_io_rate") or {}
            w_op += float(io.get("write_op_per_sec", 0))
            w_b += float(io.get("write_bytes_sec", 0))
            r_op += float(io.get("read_op_per_sec", 0))
            r_b += float(io.get("read_bytes_sec", 0))
    return ClientIo(pool=",".join(sorted(wanted)), write_op_per_sec=w_op, write_bytes_sec=w_b,
                    read_op_per_sec=r_op, read_bytes_sec=r_b)


def parse_scrub(status: Mapping[str, Any], osd_dump: Mapping[str, Any],
                osd_config: Mapping[str, Mapping[str, Any]]) -> ScrubState:
    pgmap = status.get("pgmap") or {}
    scrubbing = deep = 0
    for s in pgmap.get("pgs_by_state", []):
        states = s["state_name"].split("+")
        if "scrubbing" in states:
            if "deep" in states:
                deep += int(s["count"])
            else:
                scrubbing += int(s["count"])
    flags = set(osd_dump.get("flags_set") or str(osd_dump.get("flags", "")).split(","))
    options: dict[str, dict[int, str]] = {}
    for osd_id, opts in osd_config.items():
        for name, value in opts.items():
            options.setdefault(name, {})[int(osd_id)] = str(value)
    return ScrubState(
        pgs_total=int(pgmap.get("num_pgs", 0)), pgs_scrubbing=scrubbing, pgs_deep_scrubbing=deep,
        noscrub="noscrub" in flags, nodeep_scrub="nodeep-scrub" in flags,
        op_queue_by_osd=dict(options.get("osd_op_queue", {})),
        effective_options=options,
    )


def parse_pg_health(status: Mapping[str, Any]) -> PgHealth:
    pgmap = status.get("pgmap") or {}
    inactive = sum(int(s["count"]) for s in pgmap.get("pgs_by_state", [])
                   if "active" not in s["state_name"].split("+"))
    return PgHealth(
        pgs_total=int(pgmap.get("num_pgs", 0)), pgs_inactive=inactive,
        degraded_ratio=float(pgmap.get("degraded_ratio", 0.0) or 0.0),
        misplaced_ratio=float(pgmap.get("misplaced_ratio", 0.0) or 0.0),
    )


def _shard_limit(raw: Mapping[str, Any] | None) -> tuple[int, str]:
    if not raw:
        return RGW_DEFAULT_MAX_OBJS_PER_SHARD, "default (could not be read)"
    value = raw.get("rgw_max_objs_per_shard")
    if isinstance(value, dict):  # `config get` may answer {"rgw_max_objs_per_shard": N}
        value = value.get("rgw_max_objs_per_shard")
    try:
        return int(value), str(raw.get("source", "mon config database"))
    except (TypeError, ValueError):
        return RGW_DEFAULT_MAX_OBJS_PER_SHARD, "default (could not be read)"


def parse_buckets(stats: Iterable[Mapping[str, Any]], reshard_queue: Iterable[Mapping[str, Any]],
                  max_objs_per_shard: int, warning_ratio: float) -> tuple[BucketShards, ...]:
    queued = {(q.get("tenant", ""), q.get("bucket_name", "")) for q in reshard_queue}
    out = []
    for b in stats:
        usage = (b.get("usage") or {}).get("rgw.main") or {}
        num_objects = int(usage.get("num_objects", 0))
        shards = int(b.get("num_shards", 0) or 0)
        # num_shards 0 means an unsharded index: a single shard object.
        per_shard = num_objects // max(shards, 1)
        ratio = per_shard / max_objs_per_shard if max_objs_per_shard else 0.0
        status = "OVER" if ratio >= 1.0 else "WARN" if ratio >= warning_ratio else "OK"
        tenant = b.get("tenant", "") or ""
        out.append(BucketShards(
            bucket=b["bucket"], tenant=tenant, owner=str(b.get("owner", "")), num_objects=num_objects,
            size_bytes=int(usage.get("size", 0)), num_shards=shards, objects_per_shard=per_shard,
            fill_ratio=ratio, fill_status=status, in_reshard_queue=(tenant, b["bucket"]) in queued,
        ))
    return tuple(out)


def parse_stamp(stamp: str) -> float:
    """A pg_stat_t stamp to epoch seconds: ``2026-11-23T22:16:18.123456+0000`` (Pacific on),
    ``0.000000`` for never. A stamp without a zone is taken as UTC."""
    text = str(stamp).strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):  # utime_t printed as seconds: the zero stamp
        return float(text)
    when = datetime.fromisoformat(text)
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp()


def _setting(value: Any, name: str) -> float:
    if isinstance(value, dict):  # `config get` may answer {"name": value}
        value = value.get(name)
    return float(value)


def parse_deep_scrub(raw: Mapping[str, Any], osd_dump: Mapping[str, Any]) -> DeepScrubDeadlines:
    """Deadlines from ``{"pgs": <pg dump pgs>, "osd_deep_scrub_interval": ..., "warn_ratio": ...}``.
    Raises ValueError/KeyError/TypeError on an answer that is not what Ceph prints."""
    default_interval = _setting(raw["osd_deep_scrub_interval"], "osd_deep_scrub_interval")
    ratio = _setting(raw["warn_ratio"], "mon_warn_pg_not_deep_scrubbed_ratio")
    if default_interval <= 0 or ratio < 0:
        raise ValueError(f"osd_deep_scrub_interval {default_interval} / warn ratio {ratio} out of range")
    pool_interval = {int(p["pool"]): float((p.get("options") or {}).get("deep_scrub_interval") or 0)
                     for p in osd_dump.get("pools", [])}
    dump = raw["pgs"]
    stats = dump["pg_stats"] if isinstance(dump, dict) else dump  # Pacific on wraps the list
    if not isinstance(stats, list):
        raise ValueError("pg_stats is not a list")
    out = []
    for pg in stats:
        pgid = str(pg["pgid"])
        interval = pool_interval.get(int(pgid.split(".", 1)[0]), 0.0)
        if interval <= 0:
            interval = default_interval
        stamp = parse_stamp(pg["last_deep_scrub_stamp"])
        # PGMap::get_health_checks (src/mon/PGMap.cc; held against 16.2 and 20.2 in
        # tests/integration/test_scrub_debt.py): counted once the stamp is older than
        # now - (ratio * interval + interval), the interval the pool's if > 0.
        out.append(PgDeepScrub(pgid=pgid, last_deep_scrub_stamp=stamp,
                               deep_scrubbing={"scrubbing", "deep"} <= set(str(pg.get("state", "")).split("+")),
                               interval_s=interval, warn_at=stamp + interval * (1.0 + ratio)))
    return DeepScrubDeadlines(pgs=tuple(sorted(out, key=lambda p: p.pgid)), osd_deep_scrub_interval=default_interval,
                              warn_ratio=ratio)
