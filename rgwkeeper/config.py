"""The rgwkeeper TOML config: dataclasses whose every field documents itself.

Each field carries ``doc`` (with units), and optionally ``min``/``max``/``choices`` in its
metadata. :func:`load` checks every field and reports *all* bad fields, one line each, in a
single :class:`ConfigError`; unknown keys are errors too (a typo must not silently fall
back to a default). ``config/rgwkeeper.toml`` is the documented example and is tested to
load and to list every field.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from rgwkeeper.access import ClusterDefaults, endpoint_problem, endpoints_problem, read_text
from rgwkeeper.errors import ConfigError, UsageError
from rgwkeeper.lifecycle import rule_problems
from rgwkeeper.names import bucket_pattern_problem
from rgwkeeper.units import MAX_OPS_IN_FLIGHT, MAX_PURGE_RATE, MIN_PURGE_RATE, check_text, rate_cap_ok

DEFAULT_CONFIG_PATH = Path("/etc/rgwkeeper/rgwkeeper.toml")
#: The bound of every op/s threshold: far beyond any cluster, so a larger number is a typo.
MAX_OPS = 1e9

log = structlog.get_logger("rgwkeeper.config")


def textfile_problem(path: str) -> str | None:
    """Why ``path`` cannot be a metrics file for node exporter's textfile collector, or None."""
    if not path.startswith("/"):
        return f"must be an absolute path, got {path!r}"
    if not path.endswith(".prom") or path.endswith("/.prom"):
        return f"must be a file name ending in .prom (node exporter reads only those), got {path!r}"
    return None


#: The smallest key range a huge index shard is cut into (purge.range_entries): each is an omap
#: entry of the purge's board and a lease of its own.
MIN_RANGE_ENTRIES = 100


def opt(default: Any, doc: str, **bounds: Any) -> Any:
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"doc": doc, **bounds})
    return field(default=default, metadata={"doc": doc, **bounds})


@dataclass(frozen=True)
class ClusterSection:
    """How to reach the Ceph cluster (command-line flags override these)."""

    conf: str | None = opt(None, "Path of ceph.conf. Default: $CEPH_CONF, then /etc/ceph/ceph.conf.")
    keyring: str | None = opt(None, "Path of the cephx keyring. Default: what ceph.conf names.")
    name: str = opt("client.admin", "cephx client name, client.ID.")
    timeout_s: float = opt(
        10.0,
        "Seconds to wait for any one Ceph call (mon/mgr/OSD command, radosgw-admin, admin API) "
        "and for the initial connection. librados's own defaults (0) wait forever.",
        min=1.0, max=600.0,
    )


@dataclass(frozen=True)
class RgwSection:
    """How to reach RGW."""

    endpoint: str | None = opt(None, "RGW S3/admin endpoint URL, e.g. http://rgw1:8080.")
    endpoints: list[str] = opt(
        [], "Several RGW endpoints of the same zone instead of one endpoint, e.g. "
        "[\"http://rgw1:8080\", \"http://rgw2:8080\"]: each S3 and admin API request goes to the one with "
        "the fewest requests in flight, and to the next if it cannot connect."
    )
    credentials_file: str | None = opt(
        None, "TOML file with access_key and secret_key of a user with admin caps "
        "(buckets=*; users=read; usage=read; metadata=read; zone=read). Must be mode 0600."
    )
    data_pools: list[str] = opt(
        [], "RGW data pools whose client I/O counts as RGW write load. Empty: every pool "
        "with the rgw application whose name ends in .buckets.data."
    )
    max_objs_per_shard: int | None = opt(
        None, "Objects per bucket index shard at which RGW reshards dynamically. Empty: read "
        "rgw_max_objs_per_shard from the mon config database (who=client.rgw).",
        min=1, max=100_000_000,
    )
    shard_warning_ratio: float = opt(
        0.9, "Fraction of max_objs_per_shard at which a bucket is flagged WARN "
        "(RGW's own rgw_shard_warning_threshold is 90%).", min=0.1, max=1.0,
    )


@dataclass(frozen=True)
class ObserveSection:
    """What a snapshot gathers."""

    osd_parallelism: int = opt(
        32, "Per-OSD calls (perf dump, config get) in flight at once.", min=1, max=1024
    )
    scrub_options: list[str] = opt(
        ["osd_op_queue", "osd_max_scrubs", "osd_scrub_sleep", "osd_scrub_load_threshold",
         "osd_mclock_profile"],
        "OSD options whose effective values are read from every OSD (ceph tell osd.N config get).",
    )


@dataclass(frozen=True)
class DaemonSection:
    """The reconciler service."""

    tick_s: float = opt(30.0, "Seconds between reconcile passes (observe, gate, plan, act, read back).",
                        min=1.0, max=3600.0)
    pool: str = opt("rgwkeeper", "RADOS pool holding the override journal and the leader lock.")
    create_pool: bool = opt(True, "Create the pool (8 PGs, application 'rgwkeeper') if it does not exist.")
    lease_s: float = opt(
        90.0, "Leader lock and override lease, seconds. A leader that cannot renew within this stops "
        "acting; a standby takes over after it and restores the overrides.", min=5.0, max=3600.0)
    instance_id: str | None = opt(None, "This node's identity in the lock and journal (with the host's "
                                  "identity appended: INSTANCE@HOST): 1 to 64 letters, digits, '.', '_' or '-'. "
                                  "Default: the hostname.")
    state_dir: str = opt("/run/rgwkeeper", "Local directory for the single-instance lock file (an absolute path).")
    metrics_address: str = opt("127.0.0.1:9877", "host:port (or [IPv6]:port) for the Prometheus /metrics endpoint, "
                               "port 1 to 65535; empty to disable.", empty_ok=True)
    shutdown_timeout_s: float = opt(30.0, "On SIGTERM, the longest the daemon spends finishing the calls "
                                    "in flight, restoring overrides and releasing the lock before it exits anyway "
                                    "(a hard exit follows 15 s later). At most 120: the systemd unit's "
                                    "TimeoutStopSec=150 must leave room for both.", min=1.0, max=120.0)


@dataclass(frozen=True)
class GatesSection:
    """When the daemon may make changes at all. Restoring overrides is always allowed."""

    max_inactive_pgs: int = opt(0, "Most PGs not active at which rgwkeeper still changes settings.", min=0,
                                max=10_000_000)
    max_degraded_ratio: float = opt(0.05, "Largest fraction of degraded objects at which rgwkeeper still "
                                    "changes settings.", min=0.0, max=1.0)
    maintenance_window: str | None = opt(
        None, "Local time window HH:MM-HH:MM (may wrap midnight; start and end differ) outside which no "
        "change is made. Unset: always.")


@dataclass(frozen=True)
class ScrubThrottleSection:
    """Deep-scrub throttling under heavy RGW PUT load."""

    enabled: bool = opt(True, "Run the scrub throttle policy.")
    high_write_ops: float = opt(
        20000.0, "Smoothed client write op/s on the RGW data pools (as `ceph osd pool stats` counts them) "
        "above which deep scrub is throttled. Measured on Pacific: one small S3 PUT counts as about 10 "
        "write ops there (each xattr of the head object is one), so 20000 is about 2000 PUT/s.", min=0.0,
        max=MAX_OPS)
    low_write_ops: float = opt(10000.0, "Smoothed write op/s below which (for hold_s) the throttle is "
                               "released. Must be below high_write_ops.", min=0.0, max=MAX_OPS)
    smoothing_s: float = opt(60.0, "Time constant of the moving average of write op/s, seconds.",
                             min=0.0, max=3600.0)
    hold_s: float = opt(300.0, "Seconds load must stay under low_write_ops before scrub is given back.",
                        min=0.0, max=86400.0)
    max_defer_s: float = opt(21600.0, "Longest continuous throttle, seconds; then scrub is given back "
                             "(and not throttled again for cooldown_s) so deep scrub is never deferred "
                             "without bound.", min=60.0, max=7 * 86400.0)
    cooldown_s: float = opt(3600.0, "After a forced give-back (max_defer_s reached or "
                            "PG_NOT_DEEP_SCRUBBED), seconds before throttling again.", min=0.0, max=7 * 86400.0)
    scrub_sleep: float = opt(0.5, "osd_scrub_sleep while throttled, seconds between scrub chunks, where the "
                             "release table uses it (wpq).", min=0.0, max=10.0)
    max_scrubs: int = opt(1, "osd_max_scrubs while throttled, where the release table uses it (wpq).", min=1,
                          max=16)
    load_threshold: float | None = opt(
        0.05, "osd_scrub_load_threshold while throttled (wpq): no new scheduled scrub starts while the "
        "load average per CPU is above it. Unset: leave it alone.", min=0.0, max=100.0)
    mclock_profile: str = opt("high_client_ops", "osd_mclock_profile while throttled, where the release table "
                              "uses it (mclock_scheduler).",
                              choices=("high_client_ops", "balanced", "high_recovery_ops"))
    set_nodeep_scrub_flag: bool = opt(False, "Also set the nodeep-scrub flag while throttled "
                                      "(stops new scheduled deep scrubs cluster-wide).")
    release_before_deadline_s: float = opt(
        86400.0, "Give scrub back (and do not throttle) once any PG is this close to the point where "
        "PG_NOT_DEEP_SCRUBBED would count it, seconds; 0: only once the check is raised.", min=0.0,
        max=30 * 86400.0)


@dataclass(frozen=True)
class ScrubDebtSection:
    """Deep scrubs the daemon requests in quiet periods, closest deadline first."""

    enabled: bool = opt(True, "Read every PG's deep-scrub deadline (`pg dump pgs`, about 2.3 KiB of JSON per "
                        "PG) and pay deep-scrub debt back in quiet periods.")
    read_every_s: float = opt(
        300.0, "The daemon reads the deadlines at most this often, seconds (0: every pass): on tens of "
        "thousands of PGs `pg dump pgs` is about 70 MB of JSON. Between reads a requested PG counts as in "
        "flight, so at most max_in_flight PGs are requested per read.", min=0.0, max=86400.0)
    horizon_s: float = opt(172800.0, "Request deep scrubs of PGs within this many seconds of their "
                           "PG_NOT_DEEP_SCRUBBED point (or past it).", min=0.0, max=60 * 86400.0)
    max_in_flight: int = opt(2, "At most this many PGs deep-scrubbing at once, counting those already "
                             "deep-scrubbing and those requested that have not started yet.", min=1, max=64)
    max_write_ops: float = opt(10000.0, "Request deep scrubs only while the smoothed client write op/s on the "
                               "RGW data pools is below this (and the scrub throttle is not engaged).",
                               min=0.0, max=MAX_OPS)
    request_timeout_s: float = opt(3600.0, "A PG requested and not deep-scrubbed since (its stamp has not "
                                   "moved) may be requested again after this many seconds.", min=60.0,
                                   max=7 * 86400.0)


@dataclass(frozen=True)
class PreshardSection:
    """Bucket index sharding ahead of RGW's dynamic resharding."""

    target_ratio: float = opt(0.5, "Pre-shard to this fraction of rgw_max_objs_per_shard per shard, so the "
                              "bucket has room to grow past its expected size.", min=0.01, max=1.0)
    reshard_at_ratio: float = opt(0.75, "The daemon reshards a bucket whose objects per shard reach this "
                                  "fraction of rgw_max_objs_per_shard (RGW itself reshards at 1.0).",
                                  min=0.1, max=0.99)
    growth_factor: float = opt(2.0, "When the daemon reshards a bucket, size it for its object count times "
                               "this.", min=1.0, max=100.0)
    max_write_ops: float = opt(5000.0, "The daemon reshards only while the smoothed client write op/s on the "
                               "RGW data pools is below this (a reshard blocks writes to that bucket).", min=0.0,
                               max=MAX_OPS)
    daemon_reshards: bool = opt(True, "Let the daemon reshard buckets nearing the threshold and run "
                                "the ingest plans.")
    plans: list[dict] = opt(
        [], "Ingest plans: tables with bucket, expected_objects and optional not_before (ISO 8601 local "
        "time); the daemon pre-shards each bucket (creating it if needed) once not_before has passed.")


@dataclass(frozen=True)
class PurgeSection:
    """Bulk delete and expiry (``rgwkeeper purge`` and ``expire``)."""

    protected_buckets: list[str] = opt(
        [], "Glob patterns (fnmatch, case-sensitive) of bucket names that purge and expire refuse to touch. "
        "Bucket names are lowercase, so a pattern with a character no name has (an upper-case letter, '_', a "
        "space) outside [...] would protect nothing and is refused.")
    state_dir: str = opt("/var/lib/rgwkeeper/purge", "Local directory of purge checkpoints (one JSON file per "
                         "purge, keyed by bucket name, bucket id and options; an absolute path); an interrupted purge resumes from it.")
    s3_batches_in_flight: int = opt(8, "S3 DeleteObjects requests (1000 keys each) in flight at once.", min=1, max=64)
    rados_ops_in_flight: int = opt(256, "librados stat/remove operations in flight at once for the direct "
                                   "method without a rate cap (under one: cap_ops_in_flight).", min=1,
                                   max=MAX_OPS_IN_FLIGHT)
    list_page_size: int = opt(1000, "Keys per S3 listing page (S3's maximum is 1000); the checkpoint "
                              "advances after each finished page.", min=1, max=1000)
    metrics_textfile: str = opt(
        "", "A file a purge writes its progress to as Prometheus metrics while it runs, for node exporter's "
        "textfile collector: an absolute path ending in .prom in its --collector.textfile.directory. "
        "`rgwkeeper purge --metrics-textfile` overrides it. Empty: none.", empty_ok=True)
    checkpoint_interval_s: float = opt(1.0, "Seconds between checkpoint writes (each one an fsync); a purge "
                                     "resumed after a crash redoes at most this much work.", min=0.0, max=600.0)
    admin_max_concurrent_ios: int | None = opt(
        None, "--max-concurrent-ios for radosgw-admin bucket rm. Unset: radosgw-admin's default (32).",
        min=1, max=4096)
    long_command_timeout_s: float = opt(
        21600.0, "Seconds radosgw-admin bucket rm, lc process and gc process may run before they are killed.",
        min=60.0, max=604800.0)
    pace_write_latency_ms: float = opt(
        0.0, "Target client write latency, milliseconds, measured by a probe every pace_probe_interval_s (a "
        "4 KiB write to the data pool, then an S3 HeadBucket): above it the purge halves its concurrency, at or "
        "below it it speeds up by a quarter; below one request in flight it pauses between requests. "
        "0: no absolute target.", min=0.0, max=60000.0)
    pace_latency_increase: float = opt(
        0.0, "Pacing relative to the cluster's own load: before its first change the purge times nine "
        "probes, and the target is their median times (1 + this), e.g. 0.3 for 30% slower writes at most. "
        "With pace_write_latency_ms also set, the lower target wins. 0: off.", min=0.0, max=100.0)
    pace_probe_interval_s: float = opt(1.0, "Seconds between pacing probes.", min=0.1, max=60.0)
    max_objects_per_second: float = opt(
        0.0, "A hard cap on the objects a purge deletes per second, spread evenly (requests of "
        "cap_request_s worth), for the s3 and direct methods and for `expire` where it deletes from a listing "
        "(Pacific); pacing may go slower still. radosgw-admin and lifecycle methods run at RGW's own speed. `rgwkeeper purge --max-rate` overrides it. 0: no cap, "
        "else at least 0.01.",
        min=0.0, max=1_000_000.0)
    cap_request_s: float = opt(
        0.1, "Under a rate cap, the seconds of the cap's work one request carries: at 150 objects/s, 15 "
        "objects every 0.1 s with at most 15 in flight (DeleteObjects keys, or librados stats and removals). "
        "1.0: a second's worth at once (measured against each other: docs/purge.md, \"The frontier\").",
        min=0.01, max=10.0)
    cap_ops_in_flight: int = opt(
        1, "Under a rate cap, the most librados stat/remove operations in flight for the direct method "
        "(never more than rados_ops_in_flight): the purge starts at one and widens up to this only while "
        "it falls behind the cap. At 1, a cap above what one operation at a time reaches is not reached, "
        "and the purge's summary says so; a second operation in flight bought little rate for much ingest "
        "impact where measured (docs/purge.md, \"One operation at a time under a cap\").", min=1,
        max=MAX_OPS_IN_FLIGHT)
    impact: str = opt(
        "", "Ingest impact level instead of the rate cap and pacing keys: 'low' (at most 20 objects/s, writes "
        "paced to at most 30% above their latency before the purge: the setting `rgwkeeper verify` judged like a "
        "quiet window), 'normal' (whole buckets with radosgw-admin bucket rm --purge-objects, the stock tool's "
        "steady deletes; not for prefix purges or expiry) or 'max' (no cap, no pacing). Empty: "
        "max_objects_per_second and the pace_* keys as given; setting both is refused. `--impact` overrides it.",
        empty_ok=True, choices=("", "low", "normal", "max"))
    direct_listing: str = opt(
        "s3", "How the direct method, and the s3 method on an unversioned bucket (prefix and age purges), list a "
        "bucket: 's3' (ListObjectsV2 through RGW, one ordered listing) or 'index' (the bucket's index shards read "
        "with librados; RGW is not asked). With 'index' each shard is a "
        "work item kept in RADOS (daemon.pool): `workers` of them run at once, and `rgwkeeper purge --join ID` "
        "on another admin node adds workers (docs/purge.md, \"Work items in RADOS\"). Either way, before a direct "
        "purge's drop the index's own count must equal the heads removed, or the purge sweeps through S3 and stops if they "
        "still differ (docs/purge.md, \"Listing by index shard\").",
        choices=("s3", "index"))
    range_entries: int = opt(
        100_000, "With direct_listing 'index': keys per key-range work item cut from a huge index shard. When the "
        "bucket's shards hold at least twice this many entries each (objects / shards) and no rate cap applies, the "
        "worker that takes a "
        "shard lists its keys ahead (keys only) and publishes a range of this many keys at a time as an item any "
        "worker can take, then purges the rest itself; a bucket that would get over 5,000 ranges gets larger ones "
        "(docs/purge.md, \"Key ranges\"). 0: shards are never cut.",
        min=0, max=100_000_000)
    workers: int = opt(4, "Work items (index shards) one process runs at once when direct_listing is 'index'; "
                       "`--workers N` overrides it. Under a rate cap a bucket's purge runs one at a time, whatever "
                       "this says: the cap's head work goes one page at a time anyway, and items that ended together listed "
                       "their next shards at once (docs/purge.md, \"The typical PUT and the slow seconds\"). A "
                       "--match job still purges this many buckets at once, each at its share of the cap.",
                       min=1, max=64)
    item_lease_s: float = opt(
        30.0, "Seconds a worker's lease on a work item lasts (cls_lock, renewed three times within it). A worker "
        "killed or stuck loses its items this long after its last renewal; another worker then resumes them "
        "from their last recorded page.", min=5.0, max=3600.0)
    verify_scan_max_objects: int = opt(
        1_000_000, "The end-state check lists the data pools (librados has no prefix listing) to find "
        "objects left behind; pools with more objects than this are not scanned and the check says so.",
        min=0, max=1_000_000_000)
    rgw_retry_s: float = opt(120.0, "Seconds a purge (and expire's deletes from a listing) keeps retrying while "
                           "RGW or the cluster does not answer (an RGW restart) before it stops; the checkpoint lets a rerun finish it.",
                           min=0.0, max=3600.0)
    lc_busy_wait_s: float = opt(
        300.0, "Seconds `expire` and the lifecycle purge method keep re-running `radosgw-admin lc process "
        "--bucket` while another lifecycle worker (RGW's own, during rgw_lifecycle_work_time) holds the "
        "bucket's lifecycle entry; lc process skips such a bucket and still exits 0. Quincy and later (Pacific "
        "expire works from a listing instead).", min=0.0, max=86400.0)
    max_full_ratio: float = opt(
        0.97, "The highest full ratio `purge --raise-full-ratio` and `expire --raise-full-ratio` may set on a full "
        "cluster (OSD_FULL / POOL_FULL): the raise is journaled, and given back after the run.",
        min=0.5, max=0.99)
    full_wait_s: float = opt(
        60.0, "Seconds a direct purge on a full cluster, after removing head objects with librados' full-try "
        "flag, waits for usage to fall below the full ratio before the steps that need RGW to write; if it "
        "does not, it stops and says what is left.", min=0.0, max=3600.0)
    lifecycle_rules: list[dict] = opt(
        [], "Expiration rules `rgwkeeper expire` installs, each a table: bucket (name or glob), prefix, days, "
        "tags (table), noncurrent_days, expired_delete_markers, abort_multipart_days, larger_than and "
        "smaller_than (bytes; Tentacle only: Reef's RGW drops a size filter from the rule).")


@dataclass(frozen=True)
class SpilloverSection:
    """BlueFS spillover: compaction one OSD at a time while quiet."""

    enabled: bool = opt(True, "Compact OSDs whose BlueFS spills onto the slow device (ceph tell osd.N compact).")
    max_write_ops: float = opt(5000.0, "Compact only while the smoothed client write op/s on the RGW data "
                               "pools is below this.", min=0.0, max=MAX_OPS)
    min_interval_s: float = opt(86400.0, "Do not compact the same OSD again within this many seconds.",
                                min=0.0, max=30 * 86400.0)
    db_headroom: float = opt(1.3, "When compaction does not clear spillover, recommend a DB device of "
                             "(db_used + slow_used) times this, rounded up to GiB.", min=1.0, max=10.0)


@dataclass(frozen=True)
class FillSection:
    """Fill alerts (raw and per OSD) and the expiry trigger."""

    warn_margin: float = opt(0.05, "Alert when raw or any OSD's used fraction reaches the OSDMap's "
                             "nearfull_ratio minus this.", min=0.0, max=0.5)
    hysteresis: float = opt(0.02, "An alert clears only once used is this much below where it was raised.",
                            min=0.0, max=0.2)
    expire_at_ratio: float | None = opt(
        None, "Raw used fraction at which the daemon runs the [purge] lifecycle_rules now (in-process, as "
        "rgwkeeper expire --yes does), once per crossing; above 0. Unset: never.", min=0.0, max=1.0)
    expire_impact: str = opt(
        "low", "Ingest impact level of the fill-triggered expiry where it deletes from a listing (Pacific; "
        "lc process runs at RGW's own pace): 'low', 'max', or empty for purge.impact / the [purge] rate and "
        "pace keys.", empty_ok=True, choices=("", "low", "max"))
    rate_window_s: float = opt(3600.0, "Seconds of fill samples the projected time to nearfull is fitted on.",
                               min=60.0, max=30 * 86400.0)
    expire_raise_full_ratio: float | None = opt(
        None, "On a full cluster (OSD_FULL / POOL_FULL) the fill-triggered expiry needs RGW to write: run it with "
        "`--raise-full-ratio` this value (at most purge.max_full_ratio). Unset: the expiry is refused on a full "
        "cluster and the daemon says so.", min=0.5, max=0.99)


@dataclass(frozen=True)
class LoadgenSection:
    """The load generator and its verdict (``rgwkeeper loadgen``, ``verify``)."""

    workers: int | None = opt(
        None, "Load generator worker processes. Unset: one per core this process may run on.", min=1, max=256)
    request_timeout_s: float = opt(
        30.0, "Seconds one load request may take before it is recorded as a timeout.", min=1.0, max=600.0)
    warmup_s: float = opt(
        5.0, "Seconds trimmed from the start of every run before anything is measured.", min=0.0, max=3600.0)
    max_clock_skew_ms: float = opt(
        50.0, "Load from several hosts (--agents): largest tolerated offset between an agent's clock and "
        "the coordinator's, in ms, measured through RADOS when the agent joins; an agent beyond it is "
        "refused. Seconds are binned on the coordinator's time, so an offset moves requests between "
        "neighbouring seconds.", min=1.0, max=10_000.0)
    agents_timeout_s: float = opt(
        600.0, "Load from several hosts: seconds the coordinator waits for every agent to join and "
        "prepare before it gives up.", min=5.0, max=86400.0)
    max_rate_drop: float = opt(
        0.10, "Verdict: largest tolerated drop of median ops/s, as a fraction of the baseline's "
        "(0.10 = 10%).", min=0.0, max=1.0)
    max_cv_increase: float = opt(
        0.10, "Verdict: largest tolerated increase of the coefficient of variation (stddev/mean) of "
        "per-second ops/s, absolute (0.10 = from 0.05 to 0.15).", min=0.0, max=10.0)
    max_p99_increase: float = opt(
        0.50, "Verdict: largest tolerated increase of each operation's p99 latency, as a fraction "
        "of the baseline's (0.50 = 50% slower).", min=0.0, max=100.0)
    max_errors: int = opt(
        0, "Verdict: failed requests tolerated in the window judged (and in the baseline).", min=0,
        max=1_000_000_000)
    max_baseline_cv: float = opt(
        0.25, "Verdict: above this coefficient of variation of the baseline's per-second ops/s the "
        "verdict is INCONCLUSIVE (baseline too noisy) without judging.", min=0.01, max=10.0)
    min_window_s: float = opt(
        10.0, "Verdict: seconds a window needs (after the warm-up) to be judged at all.", min=2.0, max=86400.0)
    min_op_samples: int = opt(
        200, "Verdict: requests of an operation each window needs before its p99 is judged.", min=10,
        max=1_000_000_000)
    block: int = opt(
        5, "Verdict: seconds per block of the moving-block bootstrap (per-second rates are "
        "correlated over about this long).", min=1, max=600)
    slow_seconds_alpha: float = opt(
        0.01, "Verdict: a window FAILs when this many of its seconds are slower (p99) than the baseline's "
        "slowest second by more than max_p99_increase that windows alike would show it with a probability "
        "below this (a rank test: catches a disturbance shorter than the window). Seconds are correlated, "
        "so the p value is optimistic: a quiet run here reached p = 0.047.", min=0.0001, max=0.5)
    slow_second_increase: float | None = opt(
        None, "Verdict: how much slower than the baseline's slowest second (p99) a window's second must be "
        "to count as slow in the slow-seconds check, as a fraction (1.0 = twice as slow). Unset: "
        "max_p99_increase. Set it apart when quiet runs make you raise max_p99_increase: the baseline's "
        "slowest second already stands for its tail, so this one need not grow with it.", min=0.0, max=100.0)
    confidence: float = opt(
        0.95, "Verdict: confidence level of the bootstrap intervals.", min=0.5, max=0.999)
    resamples: int = opt(
        2000, "Verdict: bootstrap resamples (fixed seed: the same data gives the same verdict).",
        min=100, max=100_000)


@dataclass(frozen=True)
class Config:
    cluster: ClusterSection = field(default_factory=ClusterSection)
    rgw: RgwSection = field(default_factory=RgwSection)
    observe: ObserveSection = field(default_factory=ObserveSection)
    daemon: DaemonSection = field(default_factory=DaemonSection)
    gates: GatesSection = field(default_factory=GatesSection)
    scrub_throttle: ScrubThrottleSection = field(default_factory=ScrubThrottleSection)
    scrub_debt: ScrubDebtSection = field(default_factory=ScrubDebtSection)
    loadgen: LoadgenSection = field(default_factory=LoadgenSection)
    preshard: PreshardSection = field(default_factory=PreshardSection)
    spillover: SpilloverSection = field(default_factory=SpilloverSection)
    fill: FillSection = field(default_factory=FillSection)
    purge: PurgeSection = field(default_factory=PurgeSection)

    def cluster_defaults(self) -> ClusterDefaults:
        return ClusterDefaults(
            conf=self.cluster.conf, keyring=self.cluster.keyring, name=self.cluster.name,
            rgw_endpoint=self.rgw.endpoints or self.rgw.endpoint, rgw_credentials_file=self.rgw.credentials_file,
            timeout_s=self.cluster.timeout_s,
        )


#: Keys renamed to carry their unit: the old name is read, with a warning, for one release.
RENAMED: dict[str, dict[str, str]] = {
    "cluster": {"timeout": "timeout_s"},
    "purge": {"checkpoint_interval": "checkpoint_interval_s", "long_command_timeout": "long_command_timeout_s",
              "pace_probe_interval": "pace_probe_interval_s", "rgw_retry": "rgw_retry_s",
              "lc_busy_wait": "lc_busy_wait_s", "full_wait": "full_wait_s"},
    "loadgen": {"request_timeout": "request_timeout_s", "warmup": "warmup_s", "min_window": "min_window_s"},
}


SECTIONS: dict[str, type] = {
    "cluster": ClusterSection, "rgw": RgwSection, "observe": ObserveSection, "daemon": DaemonSection,
    "gates": GatesSection, "scrub_throttle": ScrubThrottleSection, "scrub_debt": ScrubDebtSection, "preshard": PreshardSection,
    "spillover": SpilloverSection, "fill": FillSection, "purge": PurgeSection,
    "loadgen": LoadgenSection,
}


def load(path: Path | None, *, required: bool = False) -> Config:
    """Load and validate a config file; ``None`` or a missing default path gives defaults."""
    if path is None:
        # Only a missing default file means defaults: one the service user cannot read is an
        # error, or the daemon would run on defaults the operator never chose.
        if not os.path.lexists(DEFAULT_CONFIG_PATH) and _enterable(DEFAULT_CONFIG_PATH.parent):
            return Config()
        path = DEFAULT_CONFIG_PATH
    try:
        raw = tomllib.loads(read_text(path, "config file", hint="pass --config PATH or create it",
                                      error=ConfigError))
    except ValueError as exc:  # TOMLDecodeError, or an integer of over 4300 digits
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    return parse(raw, source=str(path))


def _enterable(directory: Path) -> bool:
    """False when this user cannot look into ``directory`` (or one above it), so cannot tell
    whether a file is there."""
    return all(os.access(d, os.X_OK) for d in (directory, *directory.parents) if os.path.isdir(d))


def parse(raw: dict[str, Any], source: str = "config") -> Config:
    problems: list[str] = []
    sections: dict[str, Any] = {}
    for key in raw:
        if key not in SECTIONS:
            problems.append(f"{source}: unknown section [{key}] (known: {', '.join(SECTIONS)})")
    for name, cls in SECTIONS.items():
        values = raw.get(name, {})
        if not isinstance(values, dict):
            problems.append(f"{source}: {name} must be a table [{name}]")
            continue
        sections[name] = _parse_section(cls, name, values, source, problems)
    if not problems:
        problems.extend(f"{source}: {p}" for p in _cross_checks(sections))
    if problems:
        raise ConfigError("; ".join(problems) if len(problems) == 1 else
                          f"{len(problems)} problems: " + "; ".join(problems))
    return Config(**sections)


# Used with fullmatch: `$` would also match before a final newline.
_INSTANCE_RE = re.compile(r"[A-Za-z0-9._-]{1,64}", re.ASCII)
_WINDOW_RE = re.compile(r"([01]\d|2[0-3]):([0-5]\d)-([01]\d|2[0-3]):([0-5]\d)", re.ASCII)
_HOST_PORT_RE = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[^\s:\[\]]+):([0-9]{1,5})", re.ASCII)


def parse_host_port(address: str) -> tuple[str, int] | None:
    """``host:port`` or ``[IPv6]:port`` -> (host without brackets, port), or None if it is not one
    with a port from 1 to 65535 (a larger one passes a digits check and fails at bind)."""
    m = _HOST_PORT_RE.fullmatch(address)
    if not m or not 1 <= int(m.group(2)) <= 65535:
        return None
    return m.group(1).strip("[]"), int(m.group(2))


def _cross_checks(sections: dict[str, Any]) -> list[str]:
    out = []
    st = sections.get("scrub_throttle")
    if st is not None and st.low_write_ops >= st.high_write_ops:
        out.append(f"scrub_throttle.low_write_ops ({st.low_write_ops}) must be below high_write_ops "
                   f"({st.high_write_ops})")
    g = sections.get("gates")
    if g is not None and g.maintenance_window is not None and not _WINDOW_RE.fullmatch(g.maintenance_window):
        out.append(f"gates.maintenance_window must look like 22:00-06:00, got {g.maintenance_window!r}")
    elif g is not None and g.maintenance_window is not None and len(set(g.maintenance_window.split("-"))) == 1:
        # Start inclusive, end exclusive: a window from 22:00 to 22:00 holds no minute of the day.
        out.append(f"gates.maintenance_window {g.maintenance_window!r} starts where it ends, so the daemon would "
                   "never act: give two different times, or leave it unset for any time of day")
    pu = sections.get("purge")
    if pu is not None and 0 < pu.range_entries < MIN_RANGE_ENTRIES:
        out.append(f"purge.range_entries must be 0 (shards are never cut) or at least {MIN_RANGE_ENTRIES} keys, "
                   f"got {pu.range_entries}: each range is a work item of its own")
    if pu is not None and not rate_cap_ok(pu.max_objects_per_second):
        out.append(f"purge.max_objects_per_second must be 0 (no cap) or at least {MIN_PURGE_RATE}, "
                   f"got {pu.max_objects_per_second}")
    for pattern in pu.protected_buckets if pu is not None else []:
        problem = bucket_pattern_problem(pattern)
        if problem:
            out.append(f"purge.protected_buckets: {problem}")
    if pu is not None and pu.metrics_textfile and textfile_problem(pu.metrics_textfile):
        out.append(f"purge.metrics_textfile {textfile_problem(pu.metrics_textfile)}")
    ps = sections.get("preshard")
    for i, p in enumerate(ps.plans if ps is not None else []):
        out.extend(f"preshard.plans[{i}]: {e}" for e in _plan_errors(p))
    d = sections.get("daemon")
    for key, section in (("daemon.state_dir", d), ("purge.state_dir", pu)):
        if section is not None and not section.state_dir.startswith("/"):
            # Relative to the working directory, a resumed purge would not find its checkpoints.
            out.append(f"{key} must be an absolute path, got {section.state_dir!r}")
    if d is not None and d.instance_id is not None and not _INSTANCE_RE.fullmatch(d.instance_id):
        out.append(f"daemon.instance_id must be 1 to 64 letters, digits, '.', '_' or '-' (it is written "
                   f"INSTANCE@HOST in the lock and journal), got {d.instance_id!r}")
    if d is not None and d.lease_s < 2 * d.tick_s:
        out.append(f"daemon.lease_s ({d.lease_s}) must be at least twice daemon.tick_s ({d.tick_s}) so the "
                   "leader renews it in time")
    if d is not None and d.metrics_address and parse_host_port(d.metrics_address) is None:
        out.append(f"daemon.metrics_address must be host:port with a port from 1 to 65535 (or empty), "
                   f"got {d.metrics_address!r}")
    r = sections.get("rgw")
    if r is not None and r.endpoint is not None and endpoint_problem(r.endpoint):
        out.append(f"rgw.endpoint: {endpoint_problem(r.endpoint)}")
    if r is not None and r.endpoints and endpoints_problem(r.endpoints):
        out.append(f"rgw.endpoints: {endpoints_problem(r.endpoints)}")
    if r is not None and r.endpoints and r.endpoint is not None:
        out.append("rgw.endpoint and rgw.endpoints are both set: keep one (endpoints lists them all)")
    fl = sections.get("fill")
    if fl is not None and fl.expire_at_ratio is not None and fl.expire_at_ratio <= 0:
        out.append(f"fill.expire_at_ratio must be above 0 (every cluster is at least 0% used, so the expiry would "
                   f"run at once), got {fl.expire_at_ratio}; leave it unset for never")
    if fl is not None and pu is not None and not fl.expire_impact and pu.impact == "normal":
        out.append("fill.expire_impact is empty, so the fill-triggered expiry would take purge.impact = 'normal', "
                   "which purges whole buckets only: set fill.expire_impact to 'low' or 'max'")
    if fl is not None and pu is not None and fl.expire_raise_full_ratio is not None \
            and fl.expire_raise_full_ratio > pu.max_full_ratio:
        out.append(f"fill.expire_raise_full_ratio ({fl.expire_raise_full_ratio}) must not be above "
                   f"purge.max_full_ratio ({pu.max_full_ratio})")
    pg = sections.get("purge")
    if pg is not None and pg.lifecycle_rules:
        for i, rule in enumerate(pg.lifecycle_rules):
            out.extend(f"purge.lifecycle_rules[{i}]: {p}" for p in rule_problems(rule)[1])
    return out


def _parse_section(cls: type, name: str, values: dict[str, Any], source: str, problems: list[str]) -> Any:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    values = _renamed(name, values, source, problems)
    for key, value in values.items():
        f = fields.get(key)
        if f is None:
            problems.append(f"{source}: unknown key {name}.{key} (known: {', '.join(fields)})")
            continue
        err = _check(hints[key], f.metadata, value)
        if err:
            problems.append(f"{source}: {name}.{key} {err}")
        else:
            kwargs[key] = float(value) if hints[key] in (float, float | None) and isinstance(value, int) else value
    return cls(**kwargs)


def _renamed(name: str, values: dict[str, Any], source: str, problems: list[str]) -> dict[str, Any]:
    """``values`` with each deprecated key under its new name (a warning each; both given is an error)."""
    out = dict(values)
    for old, new in RENAMED.get(name, {}).items():
        if old not in out:
            continue
        if new in out:
            problems.append(f"{source}: {name}.{old} is the old name of {name}.{new}; keep only {name}.{new}")
            continue
        log.warning(f"{source}: {name}.{old} is deprecated; write {name}.{new} (the old name goes in the next "
                    "release)", key=f"{name}.{old}", use=f"{name}.{new}")
        out[new] = out.pop(old)
    return out


def _plan_errors(p: dict[str, Any]) -> list[str]:
    from datetime import datetime

    from rgwkeeper.errors import InvalidName
    from rgwkeeper.names import validate_bucket

    errors = []
    unknown = set(p) - {"bucket", "expected_objects", "not_before"}
    if unknown:
        errors.append(f"unknown key(s) {', '.join(sorted(unknown))} (known: bucket, expected_objects, not_before)")
    try:
        validate_bucket(p.get("bucket", ""))
    except InvalidName as exc:
        errors.append(str(exc))
    n = p.get("expected_objects")
    if not isinstance(n, int) or isinstance(n, bool) or not 0 < n <= 10**12:
        errors.append(f"expected_objects must be a whole number from 1 to 10^12, got {n!r}")
    if "not_before" in p:
        try:
            datetime.fromisoformat(str(p["not_before"]))
        except ValueError:
            errors.append(f"not_before must be an ISO 8601 time like 2026-12-01T02:00, got {p['not_before']!r}")
    return errors


def _type_ok(tp: Any, value: Any) -> bool:
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        return any(_type_ok(t, value) for t in typing.get_args(tp))
    if tp is type(None):
        return value is None
    if origin is list:
        (item,) = typing.get_args(tp)
        return isinstance(value, list) and all(_type_ok(item, v) for v in value)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, tp)


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        return " or ".join(_type_name(t) for t in typing.get_args(tp) if t is not type(None))
    if origin is list:
        return f"a list of {_type_name(typing.get_args(tp)[0])}"
    return {str: "a string", int: "an integer", float: "a number", bool: "true or false"}.get(tp, str(tp))


def _check(tp: Any, meta: Any, value: Any) -> str | None:
    if not _type_ok(tp, value):
        return f"must be {_type_name(tp)}, got {value!r}"
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number, got {value}"  # TOML allows nan and inf
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        lo, hi = meta.get("min"), meta.get("max")
        if lo is not None and value < lo:
            return f"must be at least {lo}, got {value}"
        if hi is not None and value > hi:
            return f"must be at most {hi}, got {value}"
    for text in (value if isinstance(value, list) else [value]):
        if isinstance(text, str) and not (text == "" and meta.get("empty_ok")):
            try:
                check_text(text, "")
            except UsageError:
                return f"must not be empty or have surrounding whitespace or control characters, got {text!r}"
    choices = meta.get("choices")
    if choices is not None and value not in choices:
        return f"must be one of {', '.join(map(str, choices))}, got {value!r}"
    return None


def describe() -> list[tuple[str, str, Any]]:
    """Every field as (section.key, doc, default), for docs and tests."""
    out = []
    for name, cls in SECTIONS.items():
        for f in dataclasses.fields(cls):
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
            out.append((f"{name}.{f.name}", f.metadata["doc"], default))
    return out
