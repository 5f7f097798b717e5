"""Prometheus metrics of the daemon, on their own registry."""

from __future__ import annotations

from typing import Any, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from rgwkeeper.config import parse_host_port
from rgwkeeper.errors import UsageError
from rgwkeeper.snapshot import Snapshot


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.leader = Gauge("rgwkeeper_leader", "1 if this instance holds the leader lock", registry=r)
        self.paused = Gauge("rgwkeeper_paused", "1 if an operator paused rgwkeeper", registry=r)
        self.ticks = Counter("rgwkeeper_ticks", "Reconcile passes by outcome", ["outcome"], registry=r)
        self.cluster_reachable = Gauge("rgwkeeper_cluster_reachable", "1 if the last reconcile pass ended "
                                       "without error (mons and the leader lock answered), else 0", registry=r)
        self.tick_seconds = Histogram("rgwkeeper_tick_seconds", "Duration of a reconcile pass", registry=r,
                                      buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60))
        self.overrides = Gauge("rgwkeeper_overrides", "Settings currently overridden by rgwkeeper", registry=r)
        self.actions = Counter("rgwkeeper_actions", "Actions applied, by result", ["result"], registry=r)
        self.gate_open = Gauge("rgwkeeper_gate_open", "1 if the gates allow changes now", registry=r)
        self.scrub_throttled = Gauge("rgwkeeper_scrub_throttled", "1 while deep scrub is throttled", registry=r)
        self.rgw_write_ops = Gauge("rgwkeeper_rgw_write_ops", "Client write op/s on the RGW data pools", ["kind"],
                                   registry=r)
        self.raw_used_ratio = Gauge("rgwkeeper_raw_used_ratio", "Raw capacity used, fraction", registry=r)
        self.nearfull_headroom = Gauge("rgwkeeper_nearfull_headroom_ratio", "nearfull_ratio minus raw used", registry=r)
        self.osd_used_ratio = Gauge("rgwkeeper_osd_used_ratio", "Per-OSD capacity used, fraction", ["osd"], registry=r)
        self.slow_used = Gauge("rgwkeeper_bluefs_slow_used_bytes", "BlueFS bytes on the slow device (spillover)",
                               ["osd"], registry=r)
        self.db_used = Gauge("rgwkeeper_bluefs_db_used_bytes", "BlueFS bytes on the DB device", ["osd"], registry=r)
        self.fill_alert = Gauge("rgwkeeper_fill_alert", "1 while raw or an OSD is within fill.warn_margin of "
                                "nearfull", ["scope"], registry=r)
        self.projected_nearfull = Gauge("rgwkeeper_projected_seconds_to_nearfull",
                                        "Projected seconds until raw fill reaches nearfull (NaN: not filling)",
                                        registry=r)
        self.needs_db_bytes = Gauge("rgwkeeper_recommended_db_bytes", "DB device size that would hold an OSD's "
                                    "BlueFS data, for OSDs whose spillover compaction did not clear", ["osd"],
                                    registry=r)
        self.pgs_deep_scrubbing = Gauge("rgwkeeper_pgs_deep_scrubbing", "PGs deep-scrubbing", registry=r)
        self.pgs_deep_scrub_due = Gauge("rgwkeeper_pgs_deep_scrub_due", "PGs past their PG_NOT_DEEP_SCRUBBED point "
                                        "(past) or within scrub_debt.horizon_s of it (horizon)", ["kind"], registry=r)
        self.deep_scrub_deadline = Gauge("rgwkeeper_seconds_to_deep_scrub_deadline", "Seconds until the nearest "
                                         "PG's PG_NOT_DEEP_SCRUBBED point (negative: past; NaN: unknown)", registry=r)

        self.expiry_running = Gauge("rgwkeeper_expiry_running", "1 while the fill-triggered expiry runs",
                                    registry=r)
        self.expiry_runs = Counter("rgwkeeper_expiry_runs", "Fill-triggered expiry runs, by result (ok, partial: "
                                   "some buckets failed, failed: refused, timed out or every bucket failed)",
                                   ["result"], registry=r)
        self.expiry_buckets = Counter("rgwkeeper_expiry_buckets", "Buckets the fill-triggered expiry ran, by "
                                      "result (expired, failed)", ["result"], registry=r)

    def observe_expiry(self, per_bucket: Mapping[str, bool] | None, problem: str | None) -> None:
        """One expiry run's outcome; ``per_bucket`` None: it never got to the buckets."""
        per_bucket = per_bucket or {}
        failed = sum(1 for ok in per_bucket.values() if not ok)
        self.expiry_buckets.labels("expired").inc(len(per_bucket) - failed)
        self.expiry_buckets.labels("failed").inc(failed)
        whole = per_bucket and not failed and problem is None
        self.expiry_runs.labels("ok" if whole else "partial" if 0 < failed < len(per_bucket) else "failed").inc()

    def observe_debt(self, summary: Any) -> None:
        """From a scrub_debt.DebtSummary (None: deadlines unknown)."""
        self.pgs_deep_scrub_due.labels("past").set(summary.past_deadline if summary else float("nan"))
        self.pgs_deep_scrub_due.labels("horizon").set(summary.due_within_horizon if summary else float("nan"))
        left = summary.seconds_to_nearest if summary else None
        self.deep_scrub_deadline.set(left if left is not None else float("nan"))

    def observe_spillover(self, needs_bigger_db: Mapping[int, int]) -> None:
        """The OSDs whose spillover compaction did not clear, now: an OSD that cleared (or left
        the cluster) loses its series, so an alert on it resolves."""
        self.needs_db_bytes.clear()
        for osd, size in needs_bigger_db.items():
            self.needs_db_bytes.labels(str(osd)).set(size)

    def serve(self, address: str) -> None:
        parsed = parse_host_port(address)
        if parsed is None:
            raise UsageError(f"metrics address {address!r} is not host:port with a port from 1 to 65535")
        start_http_server(parsed[1], addr=parsed[0], registry=self.registry)

    def observe(self, snap: Snapshot, smoothed_write_ops: float | None) -> None:
        self.raw_used_ratio.set(snap.raw.used_ratio)
        self.nearfull_headroom.set(snap.headroom_to_nearfull)
        for o in snap.osds:
            self.osd_used_ratio.labels(str(o.osd_id)).set(o.used_ratio)
        for b in snap.bluefs:
            self.slow_used.labels(str(b.osd_id)).set(b.slow_used_bytes)
            self.db_used.labels(str(b.osd_id)).set(b.db_used_bytes)
        self.rgw_write_ops.labels("now").set(snap.rgw_io.write_op_per_sec)
        if smoothed_write_ops is not None:
            self.rgw_write_ops.labels("smoothed").set(smoothed_write_ops)
        self.pgs_deep_scrubbing.set(snap.scrub.pgs_deep_scrubbing)
