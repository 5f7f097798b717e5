"""``rgwkeeper loadgen run|compare`` and ``rgwkeeper verify``: load, and the determinism verdict.

Exit codes of ``verify`` and ``loadgen compare``: 0 PASS, 3 FAIL, 4 INCONCLUSIVE (1 and 2
keep their meaning: the cluster failed us, the operator's input was wrong).
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import json
import math
import shlex
import time
from pathlib import Path
from typing import Any, Callable

import click
import structlog
from rich.console import Console
from rich.table import Table

from rgwkeeper import config as config_mod
from rgwkeeper.access import RgwCredentials, check_endpoints, load_credentials, read_text
from rgwkeeper.cli.common import ceph_options, cluster_options, emit_json, load_access
from rgwkeeper.cli.render import endpoints_line
from rgwkeeper.errors import UsageError
from rgwkeeper.loadgen import analysis
from rgwkeeper.loadgen.fleet import Agent, Coordinator, job_store, merged, run_agent, run_fleet, valid_job_id
from rgwkeeper.loadgen.runner import Live, RunSpec, default_workers, run_load
from rgwkeeper.loadgen.verify import (MAINTENANCE_KINDS, FleetSetup, Maintenance, result_of, tolerances,
                                      verify_run)
from rgwkeeper.loadgen.workload import DEFAULT_MIX, OPS, SizeDist, Workload, parse_mix
from rgwkeeper.names import validate_bucket
from rgwkeeper.units import MAX_INT, FiniteFloat, FiniteInt, FilePath, Text

log = structlog.get_logger("rgwkeeper.loadgen")

EXIT_FAIL = 3
EXIT_INCONCLUSIVE = 4
_EXIT = {analysis.PASS: 0, analysis.FAIL: EXIT_FAIL, analysis.INCONCLUSIVE: EXIT_INCONCLUSIVE}


# -- options ------------------------------------------------------------------------------------

def _checked(parse: Callable[[str], Any]) -> Callable[[click.Context, click.Parameter, str], str]:
    """A click callback that refuses what ``parse`` refuses, before anything is contacted; the
    text goes on unchanged (the workload is built from it once the config is read)."""
    def check(ctx: click.Context, param: click.Parameter, value: str) -> str:
        try:
            parse(value)
        except UsageError as exc:
            raise click.BadParameter(str(exc)) from None
        return value

    return check


def load_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The workload and how it is driven (shared by ``loadgen run`` and ``verify``)."""
    options = [
        click.option("--mix", default=DEFAULT_MIX, show_default=True, callback=_checked(parse_mix),
                     help="operation weights, e.g. PUT=100 or GET=70,PUT=20,LIST=5,DELETE=5"),
        click.option("--size", "size_text", default="4KiB", show_default=True, callback=_checked(SizeDist.parse),
                     help="object size: 4KiB, uniform:1KiB-1MiB, loguniform:1KiB-64MiB or 4KiB=90,1MiB=10"),
        click.option("--rate", type=FiniteFloat(0.001, 1_000_000), default=None,
                     help="open loop: requests/s of all workers together, each timed from its intended "
                          "start [default: closed loop]"),
        click.option("--concurrency", type=FiniteInt(1, 100_000), default=16, show_default=True,
                     help="closed loop: requests in flight; open loop: the most in flight before "
                          "requests queue (their wait still counts)"),
        click.option("--workers", type=FiniteInt(1, 256), default=None,
                     help="worker processes [default: loadgen.workers, else one per core]"),
        click.option("--buckets", type=FiniteInt(1, 10_000), default=1, show_default=True,
                     help="buckets the keys are spread over"),
        click.option("--prefixes", type=FiniteInt(1, 1_000_000), default=4, show_default=True,
                     help="key prefixes per bucket (LIST lists one)"),
        click.option("--bucket-prefix", type=Text(), default="rgwkeeper-loadgen", show_default=True,
                     callback=_checked(lambda p: validate_bucket(f"{p}-000")),
                     help="bucket names are PREFIX-000, PREFIX-001, ..."),
        click.option("--objects", type=FiniteInt(0, 100_000_000), default=1000, show_default=True,
                     help="objects written before the start for GET, LIST and DELETE to use (all workers)"),
        click.option("--seed", type=FiniteInt(-MAX_INT, MAX_INT), default=1, show_default=True,
                     help="same seed, same keys, sizes, payloads and operation order"),
        click.option("--skip-prepare", is_flag=True,
                     help="the objects are there already (a --keep run with the same seed and --workers)"),
        click.option("--keep", is_flag=True, help="leave the objects and buckets in place afterwards"),
        click.option("--warmup", type=FiniteFloat(0, 3600), default=None,
                     help="seconds trimmed from the start [default: loadgen.warmup_s, 5]"),
        click.option("--region", type=Text(), default="default", show_default=True, help="SigV4 region"),
        click.option("--out", "out_path", type=FilePath(dir_okay=False, path_type=Path),
                     help="write the result JSON here"),
        click.option("--plot", "plot_path", type=FilePath(dir_okay=False, path_type=Path),
                     help="write a PNG of ops/s and p99 over time here"),
        click.option("--raw", "raw_path", type=FilePath(dir_okay=False, path_type=Path),
                     help="write every request's raw record here (CSV)"),
        click.option("--no-progress", is_flag=True, help="no live progress line"),
        click.option("--json", "as_json", is_flag=True, help="print the result as JSON"),
    ]
    for o in reversed(options):
        fn = o(fn)
    return fn


def _rgw(cfg: config_mod.Config, endpoints: tuple[str, ...], credentials: str | None) -> tuple[tuple[str, ...], RgwCredentials]:
    endpoints = endpoints or tuple(cfg.rgw.endpoints) or ((cfg.rgw.endpoint,) if cfg.rgw.endpoint else ())
    creds = credentials or cfg.rgw.credentials_file
    if not endpoints:
        raise UsageError("no RGW endpoint: set rgw.endpoint in the config or pass --rgw-endpoint URL")
    if not creds:
        raise UsageError("no RGW credentials: set rgw.credentials_file in the config or pass --rgw-credentials FILE")
    return check_endpoints(endpoints), load_credentials(Path(creds))


def _spec(cfg: config_mod.Config, endpoints: tuple[str, ...], o: dict[str, Any], duration_s: float | None) -> RunSpec:
    workers = o["workers"] or cfg.loadgen.workers or default_workers()
    workers = min(workers, o["concurrency"])
    mix = parse_mix(o["mix"])
    per_worker_in_flight = math.ceil(o["concurrency"] / workers)
    needs_objects = any(op in mix for op in ("GET", "DELETE", "LIST"))
    objects = math.ceil(o["objects"] / workers) if needs_objects else 0
    workload = Workload(mix=mix, sizes=SizeDist.parse(o["size_text"]), seed=o["seed"],
                        bucket_prefix=o["bucket_prefix"], buckets=o["buckets"], prefixes=o["prefixes"],
                        objects_per_worker=objects, guard=max(8, per_worker_in_flight))
    return RunSpec(endpoint=endpoints[0], more_endpoints=endpoints[1:], workload=workload, rate=o["rate"], concurrency=o["concurrency"],
                   workers=workers, duration_s=duration_s, request_timeout_s=cfg.loadgen.request_timeout_s,
                   region=o["region"], skip_prepare=o["skip_prepare"], keep=o["keep"])


# -- progress line ------------------------------------------------------------------------------

@contextlib.contextmanager
def progress_line(enabled: bool, total_s: float | None) -> Any:
    """A live line on stderr (a terminal only): elapsed, ops/s, p99 and errors of the last second."""
    console = Console(stderr=True)
    if not enabled or not console.is_terminal:
        last = [0.0]

        def quiet(now_s: float, live: Live) -> None:
            if now_s - last[0] >= 10:
                last[0] = now_s
                log.info("loadgen_progress", t=round(now_s, 1), **live.last_second, errors=live.errors)

        yield quiet
        return
    from rich.live import Live as RichLive
    from rich.text import Text

    with RichLive(Text(""), console=console, transient=True, refresh_per_second=4) as rich_live:
        def update(now_s: float, live: Live) -> None:
            s = live.last_second
            of = f" / {total_s:.0f} s" if total_s else " s"
            p99 = s.get("p99_ms", math.nan)
            rich_live.update(Text(
                f"loadgen {max(0.0, now_s):6.1f}{of}   ops/s {s.get('ops', 0):>7}   "
                f"p99 {'-' if math.isnan(p99) else f'{p99:.1f} ms':>10}   errors {live.errors}"))

        yield update


# -- glue: a run's data to its result ----------------------------------------------------------

def _write_raw(rec: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["op", "status", "size", "intended_ns", "start_ns", "first_byte_ns", "end_ns"])
        for r in rec.tolist():
            w.writerow([OPS[r[0]], *r[1:]])


def _write_outputs(result: dict[str, Any], series: Any, rec: Any, o: dict[str, Any], title: str,
                   windows: list[dict[str, Any]] = ()) -> None:  # type: ignore[assignment]
    if o.get("out_path"):
        o["out_path"].parent.mkdir(parents=True, exist_ok=True)
        o["out_path"].write_text(json.dumps(result, indent=1, sort_keys=True))
        result.setdefault("files", {})["json"] = str(o["out_path"])
    if o.get("raw_path"):
        _write_raw(rec, o["raw_path"])
        result.setdefault("files", {})["raw"] = str(o["raw_path"])
    if o.get("plot_path"):
        from rgwkeeper.loadgen.plot import plot_run

        plot_run(series, o["plot_path"], title=title, events=result["events"], windows=windows,
                 warmup_s=result["warmup_s"])
        result.setdefault("files", {})["plot"] = str(o["plot_path"])


# -- rendering ----------------------------------------------------------------------------------

def _ms(d: dict[str, float] | None, key: str) -> str:
    return "-" if not d else f"{d[key]:.1f}"


def render_summary(summary: dict[str, Any], console: Console, title: str) -> None:
    t = Table(title=title, title_justify="left", box=None, pad_edge=False)
    for col in ("op", "reqs", "errs", "ops/s", "MiB/s", "p50", "p90", "p99", "p99.9", "max", "svc p99",
                "lag p99"):
        t.add_column(col, justify="left" if col == "op" else "right")
    for op, s in summary["per_op"].items():
        lat = s["latency_ms"]
        t.add_row(op, str(s["requests"]), str(s["errors"]), f"{s['ops_per_s']:.1f}",
                  f"{s['bytes_per_s'] / 2**20:.2f}", _ms(lat, "p50"), _ms(lat, "p90"), _ms(lat, "p99"),
                  _ms(lat, "p99.9"), _ms(lat, "max"), _ms(s["service_ms"], "p99"), _ms(s["start_lag_ms"], "p99"))
    t.add_row("all", str(summary["requests"]), str(summary["errors"]), f"{summary['ops_per_s']:.1f}",
              "", "", "", "", "", "", "", "")
    console.print(t)


def render_run(result: dict[str, Any], console: Console) -> None:
    spec = result["spec"]
    mode = (f"open loop at {spec['rate']:g} req/s (max {spec['concurrency']} in flight)" if spec["rate"]
            else f"closed loop, {spec['concurrency']} in flight")
    run = result["windows"]["run"]
    workers = f"{spec['workers']} workers" + (f" on each of {spec['agents']} agents" if spec.get("agents") else "")
    console.print(f"{mode}, {workers}, mix {spec['workload']['mix']}, size "
                  f"{spec['workload']['sizes']}, seed {spec['workload']['seed']}; measured "
                  f"{run['window']['start']}-{run['window']['end']} s of {result['stop_s']:.1f} s "
                  f"(warm-up {result['warmup_s']:g} s trimmed)")
    render_summary(run, console, "latency in ms from the intended start (svc: from the actual start; lag: "
                                 "start - intended), successful requests")
    r = result["rates"]["run"]
    if r["median"] is not None:
        console.print(f"ops/s per second: median {r['median']:.1f}, CV {r['cv'] if r['cv'] is not None else '-'}")
    c = result["client"]
    if c["cpu_ms_per_request"] is not None:
        console.print(f"client CPU: {c['cpu_ms_per_request']:.3f} ms per request "
                      f"({c['worker_cpu_s'] + c['parent_cpu_s']:.2f} s for {c['requests']} requests)")
    line = endpoints_line(result.get("rgw_endpoints", []))
    if line:
        console.print(line, highlight=False)
    fleet = result.get("agents")
    if fleet:
        each = "; ".join(
            f"{a['slot']} on {a['host']}: {a['requests']} requests, clock "
            + (f"{a['clock']['offset_ms']:+.1f} ms (+-{a['clock']['rtt_ms'] / 2:.1f})" if a.get("clock") else "-")
            for a in fleet["each"])
        console.print(f"agents ({fleet['count']}, job {fleet['job']}): {each}", highlight=False)
    for n in result["notes"]:
        console.print(f"note: {n}")
    for kind, path in result.get("files", {}).items():
        console.print(f"{kind}: {path}")


def render_verdict(v: dict[str, Any], console: Console) -> None:
    style = {"PASS": "bold green", "FAIL": "bold red", "INCONCLUSIVE": "bold yellow"}[v["outcome"]]
    console.print(f"VERDICT: [{style}]{v['outcome']}[/]")
    for c in v["checks"]:
        console.print(f"  {c['outcome']:<12} {c['text']}")
    for r in v["reasons"]:
        console.print(f"  - {r}")


def agents_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--agents", type=FiniteInt(1, 1000), default=None,
        help="load from N agents on other hosts, coordinated through RADOS (daemon.pool): --rate is the "
             "fleet's, --workers, --concurrency and --objects each agent's; start each with "
             "`rgwkeeper loadgen agent --job ID`")(fn)


# -- commands -----------------------------------------------------------------------------------

@click.group()
def loadgen() -> None:
    """S3 load generator (open or closed loop) and run comparison."""


@loadgen.command("run")
@click.option("--config", "config_path", type=FilePath(dir_okay=False, path_type=Path), envvar="RGWKEEPER_CONFIG",
              help="rgwkeeper TOML config [default: $RGWKEEPER_CONFIG, then /etc/rgwkeeper/rgwkeeper.toml if present]")
@click.option("--rgw-endpoint", type=Text(), multiple=True,
              help="RGW endpoint URL; repeat it for several RGWs of one zone, which share the load "
                   "[default: rgw.endpoint(s) in the config]")
@click.option("--rgw-credentials", type=Text(), help="file with access_key and secret_key, mode 0600 "
                                        "[default: rgw.credentials_file in the config]")
@click.option("--duration", type=FiniteFloat(1, 86400), default=30, show_default=True,
              help="seconds of load after the start barrier")
@agents_option
@ceph_options
@load_options
def run_cmd(config_path: Path | None, rgw_endpoint: tuple[str, ...], rgw_credentials: str | None, duration: float,
            agents: int | None, **o: Any) -> None:
    """Put load on RGW and report ops/s and latency percentiles per operation.

    With --agents N the load comes from N agents (`rgwkeeper loadgen agent --job ID` on each
    load host); this command coordinates them through RADOS and reports their merged run.
    """
    ceph = {k: o.pop(k) for k in ("conf", "keyring", "name", "client_id", "timeout")}
    if agents is None:
        cfg = config_mod.load(config_path)
        endpoints, creds = _rgw(cfg, rgw_endpoint, rgw_credentials)
        spec = _spec(cfg, endpoints, o, duration)
        warmup = o["warmup"] if o["warmup"] is not None else cfg.loadgen.warmup_s
        with progress_line(not o["no_progress"], duration) as progress:
            data = asyncio.run(run_load(spec, creds, progress=progress))
        result, series, rec = result_of(data, warmup)
        title = f"rgwkeeper loadgen run ({spec.mode} loop) {data.started_at}"
    else:
        _no_raw_with_agents(o)
        cfg, access = load_access({"config_path": config_path, "rgw_endpoint": rgw_endpoint,
                                   "rgw_credentials": rgw_credentials, **ceph})
        creds = access.rgw_credentials()
        spec = _spec(cfg, access.require_rgw_endpoints(), o, duration)
        warmup = o["warmup"] if o["warmup"] is not None else cfg.loadgen.warmup_s
        with job_store(access, cfg.daemon.pool, cfg.daemon.create_pool) as store:
            coord = Coordinator(store, spec, agents, cfg.loadgen.max_clock_skew_ms / 1000,
                                join_timeout_s=cfg.loadgen.agents_timeout_s)
            with progress_line(not o["no_progress"], duration) as progress:
                run = asyncio.run(run_fleet(coord, creds, announce=_announce(agents), progress=progress))
        result, series = merged(run, warmup, max_skew_s=coord.max_skew_s)
        rec = None
        title = f"rgwkeeper loadgen run ({spec.mode} loop, {agents} agents) {run.started_at}"
    _write_outputs(result, series, rec, o, title)
    if o["as_json"]:
        emit_json(result)
    else:
        render_run(result, Console())


def _no_raw_with_agents(o: dict[str, Any]) -> None:
    if o.get("raw_path"):
        raise UsageError("--raw with --agents: raw records stay on each agent's host; give --raw to "
                         "`rgwkeeper loadgen agent` instead")


def _announce(agents: int) -> Callable[[str], None]:
    def say(job_id: str) -> None:
        click.echo(f"load job {job_id}: waiting for {agents} agent(s); on each load host run: "
                   f"rgwkeeper loadgen agent --job {job_id}", err=True)
        log.info("loadgen_job_published", job=job_id, agents=agents)

    return say


@loadgen.command("agent")
@cluster_options
@click.option("--job", "job_id", required=True, type=Text(), callback=_checked(valid_job_id),
              help="the load job's id, as `loadgen run --agents` or `verify --agents` printed it")
@click.option("--out", "out_path", type=FilePath(dir_okay=False, path_type=Path),
              help="write this agent's own result JSON here")
@click.option("--raw", "raw_path", type=FilePath(dir_okay=False, path_type=Path),
              help="write every request this agent made, raw (CSV), here")
@click.option("--no-progress", is_flag=True, help="no live progress line")
@click.option("--json", "as_json", is_flag=True, help="print this agent's own result as JSON")
def agent_cmd(job_id: str, **o: Any) -> None:
    """Join a load job from this host: run its share of the load when the coordinator starts it.

    The workload, rate and duration are the coordinator's; RGW endpoints and credentials are
    this host's own (config or flags). The coordinator reports the merged run; this prints
    this agent's share.
    """
    cfg, access = load_access(o)
    endpoints, creds = access.require_rgw_endpoints(), access.rgw_credentials()
    with job_store(access, cfg.daemon.pool, None) as store:
        agent = Agent(store, job_id)
        with progress_line(not o["no_progress"], None) as progress:
            spec, data, _ = asyncio.run(run_agent(agent, endpoints, creds, progress=progress))
    result, series, rec = result_of(data, cfg.loadgen.warmup_s)
    result["agent"] = {"job": job_id, "slot": agent.slot, "workers": [spec.worker_base, spec.worker_base + spec.workers - 1],
                       "clock": agent.offset.to_dict() if agent.offset else None}
    _write_outputs(result, series, rec, {**o, "plot_path": None}, f"rgwkeeper loadgen agent {agent.slot}")
    if o["as_json"]:
        emit_json(result)
    else:
        console = Console()
        console.print(f"agent {agent.slot} of load job {job_id} (workers {spec.worker_base}.."
                      f"{spec.worker_base + spec.workers - 1}; clock "
                      f"{agent.offset.offset_ns / 1e6 if agent.offset else 0:+.1f} ms against the coordinator's)")
        render_run(result, console)


@loadgen.command("compare")
@click.option("--config", "config_path", type=FilePath(dir_okay=False, path_type=Path), envvar="RGWKEEPER_CONFIG",
              help="rgwkeeper TOML config (the [loadgen] tolerances)")
@click.argument("baseline", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("candidate", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="print the verdict as JSON")
def compare_cmd(config_path: Path | None, baseline: Path, candidate: Path, as_json: bool) -> None:
    """Compare two result JSONs (run A as the baseline, run B as the candidate)."""
    cfg = config_mod.load(config_path)
    loaded = []
    for path in (baseline, candidate):
        try:
            data = json.loads(read_text(path, "result file", error=UsageError), parse_constant=_no_constant)
            loaded.append(analysis.load_result(data, path.name))
        except (ValueError, KeyError, TypeError, IndexError, OverflowError) as exc:
            raise UsageError(f"{path} is not a usable result: {exc}") from None
    (bs, bw), (cs, cw) = loaded
    bw = analysis.Window("baseline", bw.start, bw.end)
    cw = analysis.Window("candidate", cw.start, cw.end)
    verdict = analysis.compare(bs, bw, cs, cw, tolerances(cfg.loadgen))
    out = {"baseline": str(baseline), "candidate": str(candidate), "verdict": verdict.to_dict()}
    if as_json:
        emit_json(out)
    else:
        console = Console()
        console.print(f"baseline {baseline} vs candidate {candidate}")
        render_verdict(out["verdict"], console)
    raise SystemExit(_EXIT[verdict.outcome])


def _no_constant(name: str) -> None:
    # Python's json reads NaN and Infinity, which no result rgwkeeper writes holds.
    raise ValueError(f"{name} is not a number a result holds")


@click.command()
@cluster_options
@click.option("--baseline", "baseline_s", type=FiniteFloat(1, 86400), default=60, show_default=True,
              help="seconds of load before maintenance starts (after the warm-up)")
@click.option("--window", "window_s", type=FiniteFloat(1, 86400), default=60, show_default=True,
              help="seconds of load measured from the maintenance start (longer if the command runs longer)")
@click.option("--maintenance", type=click.Choice(MAINTENANCE_KINDS), default=None,
              help="deep-scrub: `ceph osd deep-scrub all` through librados; none: a quiet control run")
@click.option("--maintenance-cmd", help="a command to run as the maintenance, split like a shell would "
                                        "but run without one (argv), e.g. 'radosgw-admin bucket rm --bucket B "
                                        "--purge-objects'")
@click.option("--scrub-every", type=FiniteFloat(1, 3600), default=None,
              help="deep-scrub: request it again every N seconds of the window (a scrub storm)")
@click.option("--maintenance-timeout", type=FiniteFloat(1, 604800), default=3600, show_default=True,
              help="seconds the maintenance command may run before it is killed (the window is judged "
                   "anyway, and cannot PASS)")
@agents_option
@load_options
def verify(baseline_s: float, window_s: float, maintenance: str | None, maintenance_cmd: str | None,
           scrub_every: float | None, maintenance_timeout: float, agents: int | None, **o: Any) -> None:
    """Run load, start maintenance while it runs, and judge whether the load noticed: PASS/FAIL/INCONCLUSIVE.

    With --agents N the load comes from N agents on other hosts (`rgwkeeper loadgen agent
    --job ID`); the maintenance runs here and the verdict judges their merged run.
    """
    if agents is not None:
        _no_raw_with_agents(o)
    if (maintenance is None) == (maintenance_cmd is None):
        raise UsageError("give exactly one of --maintenance deep-scrub|none and --maintenance-cmd 'ARGV'")
    try:
        argv = shlex.split(maintenance_cmd) if maintenance_cmd else []
    except ValueError as exc:  # an unclosed quote, a trailing backslash
        raise UsageError(f"--maintenance-cmd cannot be split into words ({exc}): close its quotes") from None
    if maintenance_cmd is not None and not argv:
        raise UsageError("--maintenance-cmd is empty")
    cfg, access = load_access(o)
    endpoints = access.require_rgw_endpoints()
    creds = access.rgw_credentials()
    warmup = o["warmup"] if o["warmup"] is not None else cfg.loadgen.warmup_s
    spec = _spec(cfg, endpoints, o, None)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    o["out_path"] = o["out_path"] or Path(f"rgwkeeper-verify-{stamp}.json")
    o["plot_path"] = o["plot_path"] or Path(f"rgwkeeper-verify-{stamp}.png")
    start_at = warmup + baseline_s
    maint = Maintenance(start_at=start_at, window_s=window_s, kind=maintenance or "cmd", argv=argv,
                        access=access, scrub_every=scrub_every, timeout_s=maintenance_timeout)
    with contextlib.ExitStack() as stack:
        fleet = None
        if agents is not None:
            store = stack.enter_context(job_store(access, cfg.daemon.pool, cfg.daemon.create_pool))
            fleet = FleetSetup(Coordinator(store, spec, agents, cfg.loadgen.max_clock_skew_ms / 1000,
                                           join_timeout_s=cfg.loadgen.agents_timeout_s), _announce(agents))
        progress = stack.enter_context(progress_line(not o["no_progress"], None))
        done = asyncio.run(verify_run(spec, creds, maint, warmup_s=warmup, tol=tolerances(cfg.loadgen),
                                      progress=progress, fleet=fleet))
    result, windows = done.result, done.windows
    _write_outputs(result, done.series, done.records, o, f"rgwkeeper verify: {maint.describe()} - {done.outcome}",
                   windows=[{"name": w.name, "start": w.start, "end": w.end} for w in windows])
    if o["as_json"]:
        emit_json(result)
    else:
        console = Console()
        render_run(result, console)
        for w in windows:
            render_summary(result["windows"][w.name], console, f"{w.name} window {w.start}-{w.end} s")
        render_verdict(result["verdict"], console)
    raise SystemExit(_EXIT[done.outcome])
