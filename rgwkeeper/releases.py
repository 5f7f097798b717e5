"""What each Ceph release does differently, where rgwkeeper's decisions depend on it.

One row per release, named as ``ceph versions`` names it (rgwkeeper.snapshot.parse_release),
and one row per health code, saying whether it means "the cluster is under stress: not quiet".
Pure data: no I/O. docs/architecture.md, "Releases", says where each fact was checked.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Release:
    name: str
    major: int
    shard_reduction: bool
    """RGW's dynamic resharding may *reduce* a bucket's shard count
    (``rgw_dynamic_resharding_may_reduce``, after ``rgw_dynamic_resharding_reduction_wait``)."""
    min_shards: bool
    """``radosgw-admin bucket set-min-shards`` exists, and ``bucket layout`` shows the pin as
    ``layout.current_index.layout.normal.min_num_shards``."""
    direct_drop: str | None
    """How the direct purge drops a bucket whose heads are gone (rgwkeeper.purge.plan.DIRECT_DROP):
    "metadata-rm", "empty-index", or None where the direct method was not verified."""
    lc_one_bucket: bool = False
    """``radosgw-admin lc process --bucket B`` processes bucket B alone (tracker 53430, Quincy).
    Measured on 16.2.15: --bucket is ignored, every lifecycle shard is run once and only the
    first bucket of each shard is processed; rgwkeeper then applies the rules from a listing."""
    size_filters: bool = False
    """RGW keeps and applies ObjectSizeGreaterThan / ObjectSizeLessThan in lifecycle filters.
    Measured: 20.2.4 keeps them and expires by size; 18.2.7 accepts the rule, drops the size
    from it and expires every object under it (docs/purge.md, "Lifecycle"); 16.2.15 rejects
    it with MalformedXML. Squid is not measured: the safe choice."""
    default_op_queue: str | None = None
    """``osd_op_queue`` an OSD runs unless configured otherwise (mClock from Quincy on)."""
    direct_tails: bool = False
    """The direct purge releases objects with tails itself: the head's manifest names the tails
    (rgwkeeper.adapters.manifest, checked against ``bucket radoslist``) and each loses the
    object's reference by cls_refcount put, as RGW's GC does; copies in other buckets were read
    back byte for byte afterwards (docs/purge.md, "Tails without GC")."""


RELEASES: dict[str, Release] = {r.name: r for r in (
    #        name        major  shard_reduction  min_shards  direct_drop    lc_one_bucket  size_filters  default_op_queue    direct_tails
    Release("pacific",   16,    False,           False,      "empty-index", False,         False,        "wpq",              True),
    Release("quincy",    17,    False,           False,      None,          True,          False,        "mclock_scheduler", False),
    Release("reef",      18,    False,           False,      "empty-index", True,          False,        "mclock_scheduler", True),
    Release("squid",     19,    False,           False,      None,          True,          False,        "mclock_scheduler", False),
    Release("tentacle",  20,    True,            True,       "empty-index", True,          True,         "mclock_scheduler", True),
)}

#: A release the table does not know (a future one, or ``ceph versions`` that names none) gets the
#: safe choice in every column: no direct purge (nor its tails), rules applied by rgwkeeper from a listing, no size
#: filters, no shard pin (the plan says to pin by hand), op queue read from the OSDs only.
UNKNOWN = Release("unknown", 0, False, False, None, False, False, None, False)


def behaviour(name: str) -> Release:
    """The row for ``name``, or :data:`UNKNOWN` (the safe choices) for a release not in the table."""
    return RELEASES.get(name, UNKNOWN)


# -- health codes: is the cluster quiet? ----------------------------------------------------------
LOAD = "load"
"""The cluster is under stress (slow, failing, recovering, rebalancing): not quiet."""
NOT_LOAD = "not-load"
"""Configuration, security, software, capacity or scrub debt: says nothing about load. rgwkeeper's
own policies read some of these (BLUEFS_SPILLOVER, PG_NOT_DEEP_SCRUBBED, OSD_FULL) by code."""


@dataclass(frozen=True)
class HealthCode:
    code: str
    kind: str  # LOAD or NOT_LOAD
    about: str  # what it is about, in a word: slow, failure, recovery, security, config, capacity, ...
    since: str = "pacific"
    """The first release in :data:`RELEASES` that raises it ("pacific": every supported release)."""


def _codes(kind: str, about: str, names: str, since: str = "pacific") -> tuple[HealthCode, ...]:
    return tuple(HealthCode(n, kind, about, since) for n in names.split())


#: Every health code rgwkeeper classifies (doc/rados/operations/health-checks.rst of each release,
#: and what our Pacific, Reef and Tentacle clusters raised). A code not here counts as LOAD unless
#: an operator muted it (``ceph health mute CODE``): a release's new check is never taken as quiet.
HEALTH_CODES: dict[str, HealthCode] = {h.code: h for h in (
    *_codes(LOAD, "slow", "SLOW_OPS OSD_SLOW_PING_TIME_BACK OSD_SLOW_PING_TIME_FRONT PG_SLOW_SNAP_TRIMMING"),
    # Latched: raised for bluestore_slow_ops_warn_lifetime (a day by default) after one slow op.
    *_codes(LOAD, "slow", "BLUESTORE_SLOW_OP_ALERT", "reef"),
    *_codes(LOAD, "slow", "DB_DEVICE_STALLED_READ_ALERT BLOCK_DEVICE_STALLED_READ_ALERT "
                          "WAL_DEVICE_STALLED_READ_ALERT", "squid"),
    *_codes(LOAD, "failure", "OSD_DOWN OSD_HOST_DOWN OSD_CHASSIS_DOWN OSD_RACK_DOWN OSD_ROW_DOWN "
                             "OSD_DATACENTER_DOWN OSD_ROOT_DOWN MON_DOWN MON_NETSPLIT MGR_DOWN "
                             "PG_AVAILABILITY OBJECT_UNFOUND"),
    *_codes(LOAD, "recovery", "PG_DEGRADED OBJECT_MISPLACED PG_RECOVERY_FULL PG_BACKFILL_FULL"),
    *_codes(NOT_LOAD, "security", "AUTH_INSECURE_GLOBAL_ID_RECLAIM AUTH_INSECURE_GLOBAL_ID_RECLAIM_ALLOWED "
                                  "AUTH_BAD_CAPS"),
    # CVE-2025-30156: keys and tickets of the aes type (Squid 19.2.6, Tentacle 20.2.4); two are HEALTH_ERR.
    *_codes(NOT_LOAD, "security", "AUTH_INSECURE_CLIENT_KEY_TYPE AUTH_INSECURE_SERVICE_KEY_TYPE "
                                  "AUTH_INSECURE_SERVICE_TICKETS AUTH_INSECURE_KEYS_ALLOWED "
                                  "AUTH_INSECURE_KEYS_CREATABLE AUTH_INSECURE_ROTATING_SERVICE_KEY_TYPE "
                                  "AUTH_EMERGENCY_CIPHERS_SET", "squid"),
    *_codes(NOT_LOAD, "software", "MGR_MODULE_DEPENDENCY MGR_MODULE_ERROR DAEMON_OLD_VERSION RECENT_CRASH "
                                  "RECENT_MGR_MODULE_CRASH TELEMETRY_CHANGED DASHBOARD_DEBUG"),
    *_codes(NOT_LOAD, "config", "MON_CLOCK_SKEW MON_MSGR2_NOT_ENABLED OSD_ORPHAN OSD_OUT_OF_ORDER_FULL "
                                "OSDMAP_FLAGS OSD_FLAGS OLD_CRUSH_TUNABLES OLD_CRUSH_STRAW_CALC_VERSION "
                                "OSD_NO_SORTBITWISE OSD_NO_DOWN_OUT_INTERVAL CACHE_POOL_NO_HIT_SET TOO_FEW_PGS "
                                "POOL_TOO_FEW_PGS TOO_MANY_PGS POOL_TOO_MANY_PGS POOL_PG_NUM_NOT_POWER_OF_TWO "
                                "POOL_TARGET_SIZE_BYTES_OVERCOMMITTED POOL_HAS_TARGET_SIZE_BYTES_AND_RATIO "
                                "TOO_FEW_OSDS SMALLER_PGP_NUM MANY_OBJECTS_PER_PG POOL_APP_NOT_ENABLED "
                                "POOL_NO_REDUNDANCY BLUESTORE_LEGACY_STATFS BLUESTORE_NO_PER_POOL_OMAP "
                                "BLUESTORE_NO_PER_PG_OMAP BLUESTORE_DISK_SIZE_MISMATCH BLUESTORE_NO_COMPRESSION"),
    *_codes(NOT_LOAD, "config", "OSD_FILESTORE", "quincy"),
    *_codes(NOT_LOAD, "capacity", "OSD_NEARFULL OSD_BACKFILLFULL OSD_FULL POOL_NEARFULL POOL_FULL MON_DISK_LOW "
                                  "MON_DISK_CRIT MON_DISK_BIG BLUEFS_SPILLOVER BLUEFS_AVAILABLE_SPACE BLUEFS_LOW_SPACE "
                                  "BLUESTORE_FRAGMENTATION LARGE_OMAP_OBJECTS CACHE_POOL_NEAR_FULL"),
    *_codes(NOT_LOAD, "capacity", "BLUESTORE_FREE_FRAGMENTATION", "squid"),
    *_codes(NOT_LOAD, "device", "DEVICE_HEALTH DEVICE_HEALTH_IN_USE DEVICE_HEALTH_TOOMANY "
                                "BLUESTORE_SPURIOUS_READ_ERRORS"),
    *_codes(NOT_LOAD, "scrub", "PG_NOT_SCRUBBED PG_NOT_DEEP_SCRUBBED OSD_SCRUB_ERRORS PG_DAMAGED "
                               "OSD_TOO_MANY_REPAIRS"),
)}


def health_kind(code: str, *, muted: bool = False) -> str:
    """LOAD or NOT_LOAD. An unknown code is LOAD (it may be a newer release's stress check) unless
    an operator muted it; a known LOAD code stays LOAD when muted (muting silences, the load remains)."""
    known = HEALTH_CODES.get(code)
    if known is not None:
        return known.kind
    return NOT_LOAD if muted else LOAD


def release(name: str) -> Release | None:
    """The row for ``name`` (e.g. "tentacle"), or None for a release this table does not know."""
    return RELEASES.get(name)


# -- deep-scrub throttle levers -------------------------------------------------------------------
#
# Which levers the scrub throttle (rgwkeeper.policy.scrub) uses, per release and op queue: only
# levers the release honours and that were measured to lower PUT p99 during a deep-scrub storm
# (bench/scrub_levers.py; figures in docs/architecture.md, "Deep-scrub levers per release"). A
# lever is an OSD option (set for section osd, its value from [scrub_throttle]) or "nodeep-scrub",
# the OSDMap flag (only with scrub_throttle.set_nodeep_scrub_flag). A row without levers means
# nothing measured helps there: the throttle says why and changes nothing.

WPQ_LEVERS = ("osd_scrub_sleep", "osd_scrub_load_threshold", "osd_max_scrubs", "nodeep-scrub")
NO_LEVER_HELPED = ("measured on {version}: no lever lowered PUT p99 during a deep-scrub storm beyond the noise, "
                   "so mClock is left to schedule scrub; nothing to throttle (docs/architecture.md, "
                   "\"Deep-scrub levers per release\")")


@dataclass(frozen=True)
class ScrubLevers:
    levers: tuple[str, ...]
    why: str
    """Why these levers (or none), as ``plan`` and ``status`` show it."""
    measured: bool = True
    """Chosen by measurement on this release (False: inferred from the rows that were)."""


SCRUB_LEVERS: dict[tuple[str, str], ScrubLevers] = {
    #  (release, osd_op_queue)
    ("pacific", "wpq"): ScrubLevers(WPQ_LEVERS, "wpq honours scrub sleep, load threshold and max scrubs"),
    # Measured (docs/architecture.md, "Deep-scrub levers per release"): osd_scrub_sleep set in the
    # mon reads back 0 from every OSD (`config show`: source "override", mClock's); the profile,
    # a custom best-effort limit, osd_max_scrubs 1, smaller chunks and the flag lowered PUT p99
    # during a deep-scrub storm no more than the runs without an effective lever did.
    ("reef", "mclock_scheduler"): ScrubLevers((), NO_LEVER_HELPED.format(version="18.2.7")),
    ("tentacle", "mclock_scheduler"): ScrubLevers((), NO_LEVER_HELPED.format(version="20.2.4")),
    ("pacific", "mclock_scheduler"): ScrubLevers(
        ("osd_mclock_profile", "osd_max_scrubs", "nodeep-scrub"), "Pacific's mClock (not its default)", False),
}


def default_op_queue(release_name: str) -> str:
    """The op queue a release runs when no OSD said (mClock is the default from Quincy on)."""
    return behaviour(release_name).default_op_queue or "wpq"


def scrub_levers(release_name: str, op_queue: str) -> ScrubLevers:
    """The levers for ``release_name`` on ``op_queue``. Not in the table: wpq's levers on wpq
    (every release honours them there); on mClock, the levers every measured mClock row has."""
    row = SCRUB_LEVERS.get((release_name, op_queue))
    if row is not None:
        return row
    if op_queue != "mclock_scheduler":
        return ScrubLevers(WPQ_LEVERS, f"{op_queue} on {release_name}: wpq's levers", False)
    rows = [r for (_, q), r in SCRUB_LEVERS.items() if q == op_queue and r.measured]
    common = tuple(lever for lever in rows[0].levers if all(lever in r.levers for r in rows)) if rows else ()
    return ScrubLevers(common, f"mClock on {release_name}, not measured: the levers every measured mClock "
                               "release has", False)


#: Every OSD option a row may set: the scrub throttle owns these keys in the journal.
SCRUB_LEVER_OPTIONS = tuple(dict.fromkeys(
    lever for row in SCRUB_LEVERS.values() for lever in row.levers if lever.startswith("osd_")))
