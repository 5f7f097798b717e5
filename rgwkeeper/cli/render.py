"""Rich rendering of a snapshot: what an operator scans in a few seconds."""

from __future__ import annotations

import re
from typing import Any, Mapping

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from rgwkeeper.policy import scrub as scrub_policy
from rgwkeeper.releases import HEALTH_CODES, LOAD, health_kind
from rgwkeeper.snapshot import Snapshot
from rgwkeeper.units import human_bytes

_STATUS_STYLE = {"HEALTH_OK": "green", "HEALTH_WARN": "yellow", "HEALTH_ERR": "red"}
_OSD_RE = re.compile(r"osd\.\d+")
_OPTION_RE = re.compile(r"config get \S+")
_VAR_RE = re.compile(r" var=[^:\s]+")
_FILL_STYLE = {"OK": "green", "WARN": "yellow", "OVER": "red"}


def human_duration(seconds: float) -> str:
    """1 h 05 min, 12 min, 40 s; minutes to the nearest (119 s is 2 min)."""
    s = int(seconds + 0.5)
    if s < 60:
        return f"{s} s"
    m = int(s / 60 + 0.5)  # halves up: round() takes them to even (150 s would be 2 min, 210 s 4)
    return f"{m} min" if m < 60 else f"{m // 60} h {m % 60:02d} min"


def pct(x: float) -> str:
    return f"{x * 100:.1f}%"


def _ratio_style(used: float, nearfull: float) -> str:
    if used >= nearfull:
        return "red"
    if used >= nearfull - 0.05:
        return "yellow"
    return "green"


def render_status(snap: Snapshot, *, bucket_rows: int = 10, console: Console | None = None,
                  daemon: Mapping[str, Any] | None = None, debt: Mapping[str, Any] | None = None) -> None:
    console = console or Console()
    header = Text.assemble(
        ("cluster ", "bold"), snap.fsid, "  ",
        (f"ceph {snap.version} ({snap.release})", "cyan"), "  ",
        (snap.health_status, _STATUS_STYLE.get(snap.health_status, "white")),
    )
    if snap.checks:
        header.append("  " + " ".join(sorted(snap.checks)), style="yellow")
    console.print(header)
    if snap.checks:
        console.print(health_line(snap))
    if snap.full is not None and snap.full.full:
        console.print(Panel(Group(Text(snap.full.describe(), style="bold red"), Text("what to do: " + snap.full.advice())),
                            title="FULL: writes are blocked", title_align="left", border_style="red"))
    console.print(_fill(snap))
    console.print(_spillover(snap))
    console.print(_scrub(snap, debt))
    if bucket_rows:
        console.print(_buckets(snap, bucket_rows))
    console.print(_daemon(daemon))
    if snap.errors:
        t = Table(title="not observed", title_justify="left", show_header=True, header_style="bold red")
        t.add_column("source", overflow="fold")
        t.add_column("error", overflow="fold")
        for source, error in group_errors(snap):
            t.add_row(source, error)
        console.print(t)


def health_line(snap: Snapshot) -> Text:
    """Which raised checks mean load (not quiet) and which say nothing about it (releases.HEALTH_CODES)."""
    load = snap.load_checks
    other: dict[str, list[str]] = {}
    for c in sorted(snap.checks.values(), key=lambda c: c.code):
        if health_kind(c.code, muted=c.muted) != LOAD:
            about = HEALTH_CODES[c.code].about if c.code in HEALTH_CODES else "muted, unclassified"
            other.setdefault(about, []).append(c.code)
    line = Text("health: ")
    if load:
        unknown = [c for c in load if c not in HEALTH_CODES]
        line.append("load (not quiet): " + ", ".join(load), style="bold red")
        if unknown:
            line.append(f" ({', '.join(unknown)} unclassified: counted as load until muted)", style="red")
    else:
        line.append("quiet (no load-related check)", style="green")
    if other:
        line.append("; not load: " + "; ".join(f"{about} {', '.join(codes)}" for about, codes in other.items()))
    return line


def _daemon(view: Mapping[str, Any] | None) -> Panel:
    if view is None:
        return Panel(Text("no journal: the daemon has not run against this cluster"), title="daemon", title_align="left")
    lines = []
    if view.get("paused"):
        p = view["paused"]
        lines.append(Text(f"paused by {p.get('by')}" + (f": {p['reason']}" if p.get("reason") else ""), style="yellow"))
    ov = view.get("overrides") or {}
    if ov:
        lines.append(Text("overriding: " + ", ".join(
            f"{k.split('/')[-1]}={v['applied']} (was {v['original'] if v['original'] is not None else 'unset'})"
            for k, v in sorted(ov.items())), style="yellow"))
    else:
        lines.append(Text("no settings overridden", style="green"))
    eta = view.get("projected_seconds_to_nearfull")
    lines.append(Text("raw fill: " + (f"nearfull in about {eta / 3600:.1f} h at the recent rate" if eta
                                      else "not rising over the recent window")
                      + (f"; alerting: {', '.join(view['fill_alerts'])}" if view.get("fill_alerts") else "")))
    for osd, outcome in sorted((view.get("compactions") or {}).items()):
        lines.append(Text(f"{osd} compacted: slow {human_bytes(outcome.get('slow_before', 0))} -> "
                          f"{human_bytes(outcome.get('slow_after', 0))}"
                          + (" (cleared)" if outcome.get("cleared") else " (not cleared)")))
    for osd, size in sorted((view.get("needs_bigger_db_bytes") or {}).items()):
        lines.append(Text(f"{osd} needs a bigger DB device: about {human_bytes(size)}", style="red"))
    return Panel(Group(*lines), title="daemon", title_align="left")


def group_errors(snap: Snapshot) -> list[tuple[str, str]]:
    """One row per kind of failure: 3 OSDs refusing 6 calls each is one line, not 18."""
    groups: dict[tuple[str, str], set[str]] = {}
    for e in snap.errors:
        osds = set(_OSD_RE.findall(e.source))
        source = _OPTION_RE.sub("config get", _OSD_RE.sub("osd.N", e.source))
        error = _VAR_RE.sub("", _OSD_RE.sub("osd.N", e.error))
        key = (source, error)
        groups.setdefault(key, set()).update(osds)
    rows = []
    for (source, error), osds in groups.items():
        if osds:
            ids = sorted(int(o.split(".")[1]) for o in osds)
            source = source.replace("osd.N", f"{len(ids)} OSD{'s' if len(ids) != 1 else ''} ({_id_ranges(ids)})")
        rows.append((source, error))
    return rows


def _id_ranges(ids: list[int]) -> str:
    parts, start, prev = [], ids[0], ids[0]
    for i in ids[1:] + [None]:  # type: ignore[list-item]
        if i is not None and i == prev + 1:
            prev = i
            continue
        parts.append(f"osd.{start}" if start == prev else f"osd.{start}-{prev}")
        if i is not None:
            start = prev = i
    return ", ".join(parts)


def _fill(snap: Snapshot) -> Panel:
    r = snap.ratios
    used = snap.raw.used_ratio
    lines = [
        Text.assemble(
            "raw ", (pct(used), _ratio_style(used, r.nearfull_ratio)),
            f" used ({human_bytes(snap.raw.total_used_raw_bytes)} of {human_bytes(snap.raw.total_bytes)}), ",
            (f"{pct(snap.headroom_to_nearfull)} headroom", "bold"),
            f" to nearfull {pct(r.nearfull_ratio)}; backfillfull {pct(r.backfillfull_ratio)}, full {pct(r.full_ratio)}",
        )
    ]
    fullest = snap.fullest_osd
    if fullest is not None:
        lines.append(Text.assemble(
            "fullest OSD ", (f"osd.{fullest.osd_id}", "bold"), " ",
            (pct(fullest.used_ratio), _ratio_style(fullest.used_ratio, r.nearfull_ratio)),
            f" ({pct(r.nearfull_ratio - fullest.used_ratio)} to nearfull; one nearfull OSD limits the cluster)",
        ))
    io = snap.rgw_io
    lines.append(Text(
        f"RGW data pool{'s' if len(snap.rgw_data_pools) != 1 else ''} "
        f"{', '.join(snap.rgw_data_pools) or '(none found)'}: "
        f"{io.write_op_per_sec:.0f} write op/s, {human_bytes(io.write_bytes_sec)}/s written, "
        f"{io.read_op_per_sec:.0f} read op/s"
    ))
    pools = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    for col, just in (("pool", "left"), ("stored", "right"), ("objects", "right"), ("used", "right"), ("max avail", "right")):
        pools.add_column(col, justify=just)  # type: ignore[arg-type]
    for p in sorted(snap.pools, key=lambda p: p.stored_bytes, reverse=True)[:8]:
        pools.add_row(p.name, human_bytes(p.stored_bytes), f"{p.objects:,}", pct(p.percent_used),
                      human_bytes(p.max_avail_bytes))
    return Panel(Group(*lines, pools), title="fill", title_align="left")


def _spillover(snap: Snapshot) -> Panel:
    spilled = snap.spilled_osds
    flagged = snap.has_check("BLUEFS_SPILLOVER")
    if not snap.bluefs:
        body: Text | Table = Text("no OSD answered perf dump bluefs", style="red")
    elif not spilled:
        body = Text(f"no spillover on {len(snap.bluefs)} OSDs", style="green")
    else:
        body = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
        for col in ("osd", "slow used", "db used", "db total", "db used %"):
            body.add_column(col, justify="left" if col == "osd" else "right")
        for b in sorted(spilled, key=lambda b: b.slow_used_bytes, reverse=True):
            body.add_row(f"osd.{b.osd_id}", Text(human_bytes(b.slow_used_bytes), style="yellow"),
                         human_bytes(b.db_used_bytes), human_bytes(b.db_total_bytes),
                         pct(b.db_used_bytes / b.db_total_bytes) if b.db_total_bytes else "-")
    title = f"BlueFS spillover: {len(spilled)} of {len(snap.bluefs)} OSDs" + (" (BLUEFS_SPILLOVER)" if flagged else "")
    return Panel(body, title=title, title_align="left")


def debt_lines(debt: Mapping[str, Any] | None) -> list[str]:
    """The scrub debt in a few lines (status and plan)."""
    if not debt:
        return []
    s = debt.get("summary")
    if not s:
        return [f"deep-scrub debt: {debt['reason']}"]
    lines = [f"deep-scrub debt: {s['past_deadline']} PGs past their PG_NOT_DEEP_SCRUBBED point, "
             f"{s['due_within_horizon']} due within the horizon, {s['deep_scrubbing']} deep-scrubbing"]
    if s["nearest_pgid"] is not None:
        left = s["seconds_to_nearest"]
        lines.append(f"  nearest: pg {s['nearest_pgid']}, "
                     + (f"{human_duration(-left)} past it" if left < 0 else f"in {human_duration(left)}"))
    lines.append(f"  now: {debt['reason']}")
    lines.extend(f"  would request: ceph pg deep-scrub {r['pgid']} ({r['reason']})" for r in debt["would_request"])
    return lines


def _scrub(snap: Snapshot, debt: Mapping[str, Any] | None = None) -> Panel:
    s = snap.scrub
    flags = [f for f, on in (("noscrub", s.noscrub), ("nodeep-scrub", s.nodeep_scrub)) if on]
    lines = [Text.assemble(
        f"{s.pgs_deep_scrubbing} PGs deep-scrubbing, {s.pgs_scrubbing} scrubbing, of {s.pgs_total}; flags: ",
        (", ".join(flags) or "none", "yellow" if flags else "green"),
        "; op queue: ", (", ".join(s.op_queues) or "unknown", "cyan"),
    )]
    lines.append(Text(f"throttle levers: {scrub_policy.levers_line(snap)}"))
    groups = s.setting_groups()
    for ids, values in groups[:SETTING_GROUPS_SHOWN]:
        lines.append(Text(f"  {_osd_set(ids)}: {osd_settings_text(values)}"))
    if len(groups) > SETTING_GROUPS_SHOWN:
        rest = sum(len(ids) for ids, _ in groups[SETTING_GROUPS_SHOWN:])
        lines.append(Text(f"  ... {len(groups) - SETTING_GROUPS_SHOWN} more groups of settings on {rest} OSDs "
                          "(status --json lists every OSD)", style="yellow"))
    if snap.has_check("PG_NOT_DEEP_SCRUBBED"):
        lines.append(Text(f"PG_NOT_DEEP_SCRUBBED: {snap.checks['PG_NOT_DEEP_SCRUBBED'].summary}", style="red"))
    lines.extend(Text(line) for line in debt_lines(debt))
    return Panel(Group(*lines), title="scrub", title_align="left")


SETTING_GROUPS_SHOWN = 8
_RANGES_SHOWN = 3


def _osd_set(ids: tuple[int, ...]) -> str:
    """``osd.0-2``; a scattered group as ``212 OSDs (osd.0-99, osd.120-199, osd.210-220, 4 more ranges)``."""
    ranges = _id_ranges(list(ids)).split(", ")
    if len(ranges) <= _RANGES_SHOWN:
        return ", ".join(ranges)
    return f"{len(ids)} OSDs ({', '.join(ranges[:_RANGES_SHOWN])}, {len(ranges) - _RANGES_SHOWN} more ranges)"


def osd_settings_text(values: Mapping[str, str]) -> str:
    """``mclock_scheduler, balanced, osd_max_scrubs 3, osd_scrub_sleep 0 (ignored)``: the op queue,
    the mClock profile where mClock runs (wpq ignores it), then each option read back."""
    queue = values.get("osd_op_queue", "op queue unknown")
    mclock = queue == "mclock_scheduler"
    parts = [queue]
    if mclock and "osd_mclock_profile" in values:
        parts.append(values["osd_mclock_profile"])
    for name, value in values.items():
        if name in ("osd_op_queue", "osd_mclock_profile"):
            continue
        # mClock ignores osd_scrub_sleep (docs/architecture.md, "Releases").
        parts.append(f"{name} {_short_number(value)}" + (" (ignored)" if mclock and name == "osd_scrub_sleep" else ""))
    return ", ".join(parts)


def _short_number(value: str) -> str:
    """``10.000000`` (how `config get` prints a float) as ``10``; anything else unchanged."""
    try:
        return f"{float(value):g}" if "." in value else value
    except ValueError:
        return value


def _buckets(snap: Snapshot, rows: int) -> Panel:
    nearest = snap.buckets_nearest_reshard(rows)
    title = (f"buckets nearest a dynamic reshard: {len(snap.buckets)} buckets, rgw_max_objs_per_shard "
             f"{snap.max_objs_per_shard:,} ({snap.max_objs_per_shard_source})")
    if not nearest:
        return Panel(Text("no buckets"), title=title, title_align="left")
    t = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    t.add_column("bucket", overflow="fold", min_width=24)
    for col in ("objects", "shards", "obj/shard", "of limit", "status", "queued"):
        t.add_column(col, justify="left" if col == "status" else "right", no_wrap=True)
    for b in nearest:
        name = f"{b.tenant}/{b.bucket}" if b.tenant else b.bucket
        t.add_row(name, f"{b.num_objects:,}", str(b.num_shards), f"{b.objects_per_shard:,}", pct(b.fill_ratio),
                  Text(b.fill_status, style=_FILL_STYLE[b.fill_status]), "yes" if b.in_reshard_queue else "")
    return Panel(t, title=title, title_align="left")


def endpoints_line(ends: list[dict[str, Any]]) -> str | None:
    """Each RGW endpoint's share of a run's requests, on one line; None for one endpoint."""
    if len(ends) < 2:
        return None
    return "RGW endpoints: " + "; ".join(
        f"{e['endpoint']} {e['requests']:,} requests ({e['per_s'] or 0:,.1f}/s"
        + (f", {e['failures']:,} could not connect)" if e["failures"] else ")") for e in ends)


def cap_line(pacing: Mapping[str, Any]) -> str | None:
    """A line when the librados window held a purge below its rate cap (most of its requests took
    longer than their slot with the window at its most); else None."""
    if not pacing.get("cap_held_back_by_window"):
        return None
    most = pacing["cap_ops_in_flight"]
    return (f"the cap of {pacing['max_objects_per_second']:g} objects/s was not reached: "
            f"{pacing['cap_requests_slow']:,} of {pacing['cap_requests_timed']:,} requests took longer than their "
            f"slot with {most} librados operation{'s' if most != 1 else ''} in flight; raise purge.cap_ops_in_flight "
            "to go faster, at more ingest impact (docs/purge.md, \"One operation at a time under a cap\")")


#: Items listed by ``purge --status`` besides the counts: those not done, first ones first.
ITEM_ROWS = 20


def render_items(job_id: str, view: Mapping[str, Any]) -> list[str]:
    """``rgwkeeper purge --status ID`` as text."""
    st, c = view["by_state"], view["counters"]
    deleted = c.get("objects_deleted", 0)
    total = view["objects_total"]
    of = f" of {total:,}" if total else ""
    eta = f"; about {human_duration(view['eta_s'])} left" if view["eta_s"] is not None else ""
    lines = [f"purge {job_id} of bucket {view['bucket']} (id {view['bucket_id']}): {st['done']} of "
             f"{len(view['items'])} work items done, {st['running']} running, {st['stalled']} stalled, "
             f"{st['waiting']} waiting",
             f"  objects deleted: {deleted:,}{of}, {human_bytes(c.get('bytes_deleted', 0))}; "
             f"{view['objects_per_s']:,.0f}/s over {human_duration(view['elapsed_s'])}{eta}"]
    if st["stalled"]:
        lines.append(f"  stalled: no record within the {view['lease_s']:.0f} s lease; another worker takes such an "
                     "item over when its lease runs out")
    open_items = [i for i in view["items"] if i["state"] != "done"]
    for i in open_items[:ITEM_ROWS]:
        ago = f", last record {i['last_record_s_ago']:.0f} s ago" if i["last_record_s_ago"] is not None else ""
        what = (f"{i['shard']} keys up to {i['range_last']!r} (a range of item {i['range_of']})"
                if i.get("range_of") is not None else i["shard"] + (" (cutting key ranges)" if i.get("cutting") and i["takes"] else ""))
        lines.append(f"  item {i['item']:>5} {what}: {i['state']}"
                     + (f" by {i['worker']} (taken {i['takes']}x){ago}, {i['objects_deleted']:,} objects"
                        if i["takes"] else ""))
    if len(open_items) > ITEM_ROWS:
        lines.append(f"  ... and {len(open_items) - ITEM_ROWS} more not done")
    return lines


def render_job(job_id: str, view: Mapping[str, Any]) -> list[str]:
    """``rgwkeeper purge --status ID`` of a job of many buckets, as text."""
    st, c = view["by_state"], view["counters"]
    f = {k: v for k, v in view["filters"].items() if v is not None and not (k == "method" and v == "auto")}
    eta = f"; about {human_duration(view['eta_s'])} left" if view["eta_s"] is not None else ""
    lines = [f"purge job {job_id} of {len(view['buckets'])} buckets ({view['source']}"
             + (", " + ", ".join(f"{k} {v!r}" for k, v in sorted(f.items())) if f else ", whole buckets") + "): "
             f"{st['done']} done, {st['running']} running, {st['stalled']} stalled, {st['failed']} failed, "
             f"{st['waiting']} waiting",
             f"  objects deleted: {c.get('objects_deleted', 0):,}, {human_bytes(c.get('bytes_deleted', 0))}; "
             f"over {human_duration(view['elapsed_s'])}{eta}"]
    if st["stalled"]:
        lines.append(f"  stalled: no record within the {view['lease_s']:.0f} s lease; another worker takes such a "
                     "bucket over when its lease runs out and resumes its purge where it stood")
    open_rows = [r for r in view["buckets"] if r["state"] != "done"]
    for r in open_rows[:ITEM_ROWS]:
        ago = f", last record {r['last_record_s_ago']:.0f} s ago" if r["last_record_s_ago"] is not None else ""
        lines.append(f"  {r['bucket']}: {r['state']}"
                     + (f" by {r['worker']} (taken {r['takes']}x){ago}, purge {r['purge_id']}, step {r['step']}, "
                        f"{r['objects_deleted']:,} objects" if r["takes"] else "")
                     + (f": {r['error']}" if r["error"] else ""))
    if len(open_rows) > ITEM_ROWS:
        lines.append(f"  ... and {len(open_rows) - ITEM_ROWS} more not done")
    return lines
