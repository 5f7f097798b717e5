"""Which deep-scrub levers protect PUT latency on a release? `rgwkeeper verify` under a scrub storm.

On one cluster of the release asked for (``--suite``: bookworm Pacific, trixie Reef, sid
Tentacle), the data pool is first filled (``--objects`` of ``--size``) so that a deep scrub of
every PG lasts long enough to overlap the measured window. Then, round after round, each lever
is set, read back from every OSD, and ``rgwkeeper verify --maintenance deep-scrub`` runs: an
open-loop PUT load (``--rate``), a baseline window, then ``ceph osd deep-scrub all`` requested
again every ``--scrub-every`` seconds while the load goes on. The lever is then given back and
the bench waits until no PG is scrubbing before the next run. Every round runs the no-lever
control first and last (the order of the levers rotates each round), so each lever is compared
with controls of the same round on the same cluster.

Reported per lever: PUT p99 in the storm window over PUT p99 in the baseline window of the same
run (``storm/base``), and the storm window's p99 over the median storm p99 of the round's
controls (``vs control``): medians and min-max over rounds. A lever helps when every one of
its ``vs control`` ratios is below the lowest ratio of the runs without an effective lever
(the controls, and levers the OSDs did not read back as set); otherwise the noise is larger
than the effect, and the table says so.

    .venv/bin/python -m bench.scrub_levers --suite sid [--repeat 3] [--levers a,b] [--json-out F]

Boots the containerized Ceph unless RGWKEEPER_TEST_CEPH_CONF & co name a cluster.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.purge_pacing import _cluster_flags, _fill

DATA_POOL = "default.rgw.buckets.data"

#: Lever name -> (config settings for section osd, OSDMap flags). Values follow the throttle's defaults.
LEVERS: dict[str, tuple[dict[str, str], tuple[str, ...]]] = {
    "control": ({}, ()),
    "high_client_ops": ({"osd_mclock_profile": "high_client_ops"}, ()),
    # Scrub items are queued as background best-effort work (PGScrubItem::get_scheduler_class);
    # a custom profile caps that class at a tenth of the OSD's capacity.
    "custom_best_effort_lim": ({"osd_mclock_profile": "custom",
                                "osd_mclock_scheduler_background_best_effort_lim": "0.1",
                                "osd_mclock_scheduler_background_best_effort_wgt": "1",
                                "osd_mclock_scheduler_background_best_effort_res": "0"}, ()),
    "max_scrubs_1": ({"osd_max_scrubs": "1"}, ()),
    "small_chunks": ({"osd_scrub_chunk_min": "1", "osd_scrub_chunk_max": "2"}, ()),
    "scrub_sleep": ({"osd_scrub_sleep": "0.1"}, ()),
    "nodeep_scrub_flag": ({}, ("nodeep-scrub",)),
}


def _up_osds(info: Any) -> list[int]:
    return [o["osd"] for o in info.ceph("osd", "dump")["osds"] if o["up"]]


def effective(info: Any, names: list[str]) -> dict[str, dict[int, str]]:
    return {n: {o: str(info.ceph("tell", f"osd.{o}", "config", "get", n)[n]) for o in _up_osds(info)} for n in names}


def _same(a: str, b: str) -> bool:
    try:
        return float(a) == float(b)
    except ValueError:
        return a == b


def set_lever(info: Any, lever: str) -> dict[str, Any]:
    """Set the lever, then read it back from every OSD (mClock may revert what it locks)."""
    options, flags = LEVERS[lever]
    for name, value in options.items():
        info.ceph("config", "set", "osd", name, value)
    for flag in flags:
        info.ceph("osd", "set", flag)
    time.sleep(2)  # OSDs pick mon config changes up asynchronously
    eff = effective(info, list(options))
    held = all(_same(v, options[n]) for n, per_osd in eff.items() for v in per_osd.values())
    return {"effective": eff, "held": held}


def give_back(info: Any, lever: str) -> None:
    options, flags = LEVERS[lever]
    for name in options:
        info.ceph("config", "rm", "osd", name)
    for flag in flags:
        info.ceph("osd", "unset", flag)


def scrubbing_pgs(info: Any) -> int:
    states = info.ceph("pg", "stat")["pg_summary"]["num_pg_by_state"]
    return sum(s["num"] for s in states if "scrubbing" in s["name"].split("+"))


def wait_quiet(info: Any, timeout_s: float) -> float:
    t0 = time.monotonic()
    while scrubbing_pgs(info) and time.monotonic() - t0 < timeout_s:
        time.sleep(2)
    return round(time.monotonic() - t0, 1)


def row_from_result(result: dict[str, Any], lever: str, rnd: int) -> dict[str, Any]:
    """One run's figures. p99 comes from the windows, not the verdict's checks: a verdict
    that finds the baseline too noisy skips its p99 check, and the bench still wants the number."""
    def p99(window: str) -> float | None:
        lat = ((result["windows"].get(window) or {}).get("per_op", {}).get("PUT") or {}).get("latency_ms")
        return lat["p99"] if lat else None

    checks = {c["name"]: c for c in result["verdict"]["checks"]}
    return {"lever": lever, "round": rnd, "verdict": result["verdict"]["outcome"],
            "p99_ms_baseline": p99("baseline"), "p99_ms_storm": p99("maintenance"),
            "median_ops_drop": checks.get("median_ops_drop", {}).get("estimate")}


def run_once(info: Any, workdir: Path, lever: str, rnd: int, args: argparse.Namespace) -> dict[str, Any]:
    tag = f"scrub-{uuid.uuid4().hex[:6]}"
    waited = wait_quiet(info, args.quiet_timeout)
    lever_state = set_lever(info, lever)
    out = workdir / f"verify-{lever}-{rnd}-{tag}.json"
    argv = [sys.executable, "-m", "rgwkeeper", "verify", *_cluster_flags(info), "--baseline", str(args.baseline),
            "--window", str(args.window), "--mix", "PUT=100", "--rate", str(args.rate), "--concurrency", "64",
            "--bucket-prefix", tag, "--objects", "0", "--maintenance", "deep-scrub", "--scrub-every",
            str(args.scrub_every), "--out", str(out), "--plot", str(out.with_suffix(".png")), "--json",
            "--no-progress"]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=args.baseline + args.window + 600)
        deep_at_end = scrubbing_pgs(info)
    finally:
        give_back(info, lever)
    if proc.returncode not in (0, 3, 4):
        raise SystemExit(f"verify ({lever}) failed: {proc.stderr.strip()[-800:]}")
    return {**row_from_result(json.loads(out.read_text()), lever, rnd), "scrubbing_at_end": deep_at_end,
            "waited_quiet_s": waited, "lever_held": lever_state["held"], "effective": lever_state["effective"]}


def _spread(xs: list[float]) -> dict[str, float | None]:
    if not xs:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": round(statistics.median(xs), 3), "min": round(min(xs), 3), "max": round(max(xs), 3),
            "n": len(xs)}


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per lever: storm/base p99 and storm p99 against the same round's controls."""
    controls: dict[int, float] = {}
    for rnd in {r["round"] for r in rows}:
        storm = [r["p99_ms_storm"] for r in rows if r["round"] == rnd and r["lever"] == "control"
                 and r["p99_ms_storm"]]
        if storm:
            controls[rnd] = statistics.median(storm)
    out: dict[str, Any] = {}
    # A lever the OSDs did not read back as set ran without effect: its runs are controls too.
    control_vs = [r["p99_ms_storm"] / controls[r["round"]] for r in rows
                  if (r["lever"] == "control" or not r["lever_held"]) and r["p99_ms_storm"] and r["round"] in controls]
    for lever in dict.fromkeys(r["lever"] for r in rows):
        mine = [r for r in rows if r["lever"] == lever]
        vs = [r["p99_ms_storm"] / controls[r["round"]] for r in mine if r["p99_ms_storm"] and r["round"] in controls]
        ratio = [r["p99_ms_storm"] / r["p99_ms_baseline"] for r in mine if r["p99_ms_storm"] and r["p99_ms_baseline"]]
        entry = {"runs": len(mine), "storm_over_base": _spread(ratio), "vs_control": _spread(vs),
                 "storm_p99_ms": _spread([r["p99_ms_storm"] for r in mine if r["p99_ms_storm"]]),
                 "lever_held": all(r["lever_held"] for r in mine),
                 "verdicts": [r["verdict"] for r in mine]}
        if lever != "control" and vs and control_vs:
            noise_floor = min(control_vs)
            entry["noise_floor"] = round(noise_floor, 3)
            entry["helps"] = max(vs) < noise_floor and entry["lever_held"]
            entry["noise_larger_than_effect"] = not entry["helps"] and statistics.median(vs) < 1.0
        out[lever] = entry
    return out


def render(release: str, summary: dict[str, Any]) -> str:
    lines = [f"release {release}: PUT p99 during a deep-scrub storm (median [min-max] over rounds)",
             f"{'lever':<24} {'runs':>4} {'storm/base':>22} {'vs control':>22} {'held':>5}  verdict",
             ]
    for lever, e in summary.items():
        def fmt(s: dict[str, Any]) -> str:
            return "-" if s["median"] is None else f"{s['median']:.2f} [{s['min']:.2f}-{s['max']:.2f}]"
        verdict = ("helps" if e.get("helps") else "within noise" if e.get("noise_larger_than_effect")
                   else "no help" if lever != "control" else "")
        lines.append(f"{lever:<24} {e['runs']:>4} {fmt(e['storm_over_base']):>22} {fmt(e['vs_control']):>22} "
                     f"{'yes' if e['lever_held'] else 'NO':>5}  {verdict}")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--suite", default="sid", choices=["bookworm", "trixie", "sid"],
                   help="the release's Debian suite: bookworm Pacific, trixie Reef, sid Tentacle")
    p.add_argument("--levers", default=",".join(x for x in LEVERS if x != "control"))
    p.add_argument("--objects", type=int, default=3000, help="objects filled into the data pool first")
    p.add_argument("--size", type=int, default=128 << 10, help="bytes per filled object")
    p.add_argument("--rate", type=float, default=40.0, help="PUT/s (open loop)")
    p.add_argument("--baseline", type=float, default=20.0)
    p.add_argument("--window", type=float, default=30.0)
    p.add_argument("--scrub-every", type=float, default=10.0)
    p.add_argument("--quiet-timeout", type=float, default=90.0, help="most seconds to wait for scrubs to end")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json-out", type=Path)
    args = p.parse_args()
    levers = [x for x in args.levers.split(",") if x]
    unknown = set(levers) - set(LEVERS)
    if unknown:
        raise SystemExit(f"unknown lever(s) {sorted(unknown)}; known: {sorted(LEVERS)}")

    from integration.cluster import ClusterOptions, ContainerCluster, external_from_env

    rows: list[dict[str, Any]] = []
    with ExitStack() as stack:
        info = external_from_env() or stack.enter_context(ContainerCluster(ClusterOptions(suite=args.suite)))
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-scrub-")))
        versions = info.ceph("versions")["overall"]
        defaults = effective(info, ["osd_op_queue", "osd_mclock_profile", "osd_max_scrubs", "osd_scrub_sleep",
                                    "osd_scrub_chunk_min", "osd_scrub_chunk_max"])
        t0 = time.monotonic()
        _fill(info, f"scrub-fill-{uuid.uuid4().hex[:6]}", args.objects, args.size)
        print(json.dumps({"filled": args.objects, "s": round(time.monotonic() - t0, 1)}), file=sys.stderr, flush=True)
        for rnd in range(args.repeat):
            order = levers[rnd % len(levers):] + levers[:rnd % len(levers)]
            for lever in ["control", *order, "control"]:
                row = run_once(info, workdir, lever, rnd, args)
                print(json.dumps({k: v for k, v in row.items() if k != "effective"}), file=sys.stderr, flush=True)
                rows.append(row)
    summary = summarize(rows)
    release = " ".join(versions)
    doc = {"suite": args.suite, "versions": versions, "defaults": defaults, "date": time.strftime("%Y-%m-%d"),
           "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
           "summary": summary, "runs": rows}
    if args.json_out:
        args.json_out.write_text(json.dumps(doc, indent=1))
    print(json.dumps(doc, indent=1))
    print(render(release, summary), file=sys.stderr)


if __name__ == "__main__":
    main()
