"""``rgwkeeper purge`` and ``rgwkeeper expire``: bulk delete and lifecycle expiration."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import shlex
import signal
import sys
import time
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from rgwkeeper import config as config_mod
from rgwkeeper import fullratio
from rgwkeeper import purge as purge_api
from rgwkeeper.adapters.connect import NONE, connected
from rgwkeeper.cli.common import cluster_options, emit_json, load_access
from rgwkeeper.cli.render import cap_line, endpoints_line, human_duration, render_items, render_job
from rgwkeeper.errors import RgwkeeperError, UsageError
from rgwkeeper.names import validate_bucket
from rgwkeeper import lifecycle as lc
from rgwkeeper.purge.execute import PurgeFailed, PurgeReport
from rgwkeeper.purge.expire import BucketFailure, ExpireResult, expiry_problem, plan_expiry
from rgwkeeper.purge.plan import METHODS, RATE_CAPPED_METHODS, PurgeRequest, check_protected, rate_cap_for
from rgwkeeper.units import (MAX_PURGE_RATE, MIN_PURGE_RATE, Duration, FiniteFloat, FiniteInt, Size, human_bytes,
                             rate_cap_ok)


#: The bucket a request is built with when none was given (several buckets, or a join of a job):
#: it validates the filters only and is never sent anywhere.
_NO_BUCKET = "rgwkeeper-no-bucket"


def _confirm(lines: list[str], expected: str, yes: bool) -> None:
    """Ask on the terminal for ``expected`` (the bucket's name); with no terminal and no --yes,
    refuse at once (never wait for input)."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise UsageError("not confirmed: no terminal to ask on; pass --yes to purge without asking "
                         "(nothing was changed)")
    for line in lines:
        click.echo(line, err=True)
    answer = click.prompt(f"Type {expected!r} to go on", err=True, default="", show_default=False)
    if answer.strip() != expected:
        raise UsageError("not confirmed; nothing was changed")


class _Bar:
    """rich progress on stderr: objects (of the bucket's count), objects/s, bytes freed, ETA."""

    def __init__(self, enabled: bool) -> None:
        console = Console(stderr=True)
        self.progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"), TextColumn("{task.fields[freed]}"),
            TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
            console=console, disable=not (enabled and console.is_terminal), transient=False)
        self.task = self.progress.add_task("purge", total=None, rate="", freed="")
        self.t0 = time.monotonic()

    def __enter__(self) -> "_Bar":
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def update(self, p: purge_api.Progress) -> None:
        elapsed = max(time.monotonic() - self.t0, 1e-6)
        self.progress.update(self.task, description=p.step, completed=p.objects_done,
                             total=max(p.objects_total, p.objects_done) or None,
                             rate=f"{p.objects_done / elapsed:,.0f} obj/s",
                             freed=f"{human_bytes(p.bytes_done)} freed")


def _check_rate(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    if value is not None and not rate_cap_ok(value):
        raise click.BadParameter(f"must be 0 (no cap) or a number of objects a second from {MIN_PURGE_RATE} "
                                 f"to {MAX_PURGE_RATE:g}, got {value}")
    return value


class Terminated(RgwkeeperError):
    """SIGTERM stopped the command after its cleanup ran."""

    exit_code = 128 + signal.SIGTERM


def _check_full_ratio(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    if value is not None and not (math.isfinite(value) and 0 < value < 1):
        raise click.BadParameter(f"must be a fraction between 0 and 1 (e.g. 0.96), got {value}")
    return value


_RAISE_HELP = ("on a full cluster (OSD_FULL / POOL_FULL), raise the full ratio to this for the run (at most "
               "purge.max_full_ratio), journaled first and given back after it; without it a full cluster "
               "refuses at once")


def _full_lines(prepared: purge_api.Prepared, pool: str) -> list[str]:
    full = prepared.full
    if full is None or not full.full:
        return []
    lines = [f"cluster: {full.describe()}"]
    if prepared.raise_full_ratio is not None:
        lines += fullratio.plan_lines(full, prepared.raise_full_ratio, pool)
    return lines


def _check_job_id(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not purge_api.valid_job_id(value):
        raise click.BadParameter(f"{value!r} is not a purge id: 12 hex digits, as `rgwkeeper purge` prints it")
    return value


def _check_textfile(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    problem = config_mod.textfile_problem(value) if value is not None else None
    if problem:
        raise click.BadParameter(problem)
    return value


def _run_async(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``asyncio.run``, with SIGTERM cancelling the work as Ctrl-C does: a purge then saves its
    checkpoint and puts back what it must (a lifecycle purge's rule) before the process ends,
    instead of dying where it stood."""
    async def main() -> Any:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        terminated: list[bool] = []
        loop.add_signal_handler(signal.SIGTERM, lambda: (terminated.append(True), task.cancel()))
        try:
            return await fn(*args, **kwargs)
        except asyncio.CancelledError:
            if terminated:
                raise Terminated("terminated (SIGTERM); run the same command again to resume from its "
                                 "checkpoint") from None
            raise
        finally:
            loop.remove_signal_handler(signal.SIGTERM)

    return asyncio.run(main())


@click.command()
@cluster_options
@click.argument("bucket", required=False)
@click.option("--prefix", help="only keys that start with this")
@click.option("--older-than", type=Duration(),
              help="only objects last modified longer ago than this: 30s, 15m, 12h, 7d (docs/commands.md)")
@click.option("--larger-than", type=Size(), help="only objects larger than this: 4096, 64KiB, 4MB (docs/commands.md)")
@click.option("--smaller-than", type=Size(), help="only objects smaller than this (same units)")
@click.option("--method", type=click.Choice(METHODS), default="auto", show_default=True,
              help="how to delete (docs/purge.md); auto explains its choice in the plan")
@click.option("--max-rate", type=FiniteFloat(0, MAX_PURGE_RATE), default=None, callback=_check_rate,
              help="delete at most this many objects a second (s3 and direct methods; 0: no cap) "
                   "[default: purge.max_objects_per_second]")
@click.option("--impact", type=click.Choice(tuple(purge_api.impact.LEVELS)), default=None,
              help="ingest impact: low (at most 20 objects/s, writes paced: judged like a quiet window by "
                   "rgwkeeper verify), normal (whole buckets with radosgw-admin bucket rm --purge-objects, the "
                   "stock tool's steady deletes) or max (no cap, no pacing); not with --max-rate "
                   "[default: purge.impact]")
@click.option("--raise-full-ratio", type=FiniteFloat(0, 1), default=None, callback=_check_full_ratio, help=_RAISE_HELP)
@click.option("--metrics-textfile", callback=_check_textfile, default=None,
              help="write progress as Prometheus metrics to this .prom file while the purge runs, for node "
                   "exporter's textfile collector [default: purge.metrics_textfile]")
@click.option("--workers", type=FiniteInt(1, 64), default=None,
              help="work items (index shards) run at once by this process, with purge.direct_listing = 'index' "
                   "(the direct method, or the s3 method on an unversioned bucket); one under a rate cap "
                   "[default: purge.workers]")
@click.option("--join", "join_id", callback=_check_job_id, default=None, metavar="ID",
              help="add workers to the running purge ID (printed when it starts) with the same BUCKET and filters")
@click.option("--status", "status_id", callback=_check_job_id, default=None, metavar="ID",
              help="show the work items of purge ID: done, running, objects, rate and ETA; changes nothing")
@click.option("--match", "patterns", multiple=True, metavar="PATTERN",
              help="purge every bucket whose name matches this glob (repeatable), as one job of one work item per "
                   "bucket; protected buckets are skipped")
@click.option("--buckets-from", metavar="FILE",
              help="purge the buckets named in FILE (one per line, '-' for stdin) as one job of one work item per "
                   "bucket")
@click.option("--dry-run", is_flag=True, help="print the plan and the exact commands; change nothing")
@click.option("--yes", "-y", is_flag=True, help="do not ask for confirmation")
@click.option("--json", "as_json", is_flag=True, help="print the plan (dry run) or the summary as JSON on stdout")
def purge(bucket: str | None, prefix: str | None, older_than: float | None, larger_than: int | None,
          smaller_than: int | None, method: str, max_rate: float | None, impact: str | None,
          raise_full_ratio: float | None, metrics_textfile: str | None, workers: int | None,
          join_id: str | None, status_id: str | None, patterns: tuple[str, ...], buckets_from: str | None,
          dry_run: bool, yes: bool, as_json: bool, **kwargs: Any) -> None:
    """Delete a bucket, or the objects under a prefix / older than an age, and check the result.

    Resumable: run the same command again after an interruption and it continues from its
    checkpoint (purge.state_dir). Listing by index shard (purge.direct_listing = 'index'), the
    delete runs as work items in RADOS that other admin nodes can join (--join ID).
    """
    if status_id is not None:
        if bucket is not None:
            validate_bucket(bucket)
        return _status(status_id, bucket, as_json, kwargs)
    many = bool(patterns) or buckets_from is not None
    if patterns and buckets_from is not None:
        raise UsageError("give --match or --buckets-from, not both")
    if many and bucket is not None:
        raise UsageError("give a BUCKET, or --match / --buckets-from for several, not both")
    if bucket is None and not many and join_id is None:
        raise UsageError("give the BUCKET to purge, --match PATTERN or --buckets-from FILE for several (or --status "
                         "ID to see a running purge)")
    # Validate everything the operator typed before anything is sent anywhere.
    request = PurgeRequest(
        bucket=bucket if bucket is not None else _NO_BUCKET, prefix=prefix, method=method,
        older_than_s=older_than, larger_than=larger_than, smaller_than=smaller_than)
    if impact is not None and max_rate is not None:
        raise UsageError("give --impact or --max-rate, not both (--impact low is a rate cap and a pacing target)")
    if join_id is not None:
        given = [f for f, v in (("--max-rate", max_rate), ("--impact", impact), ("--dry-run", dry_run or None),
                                ("--raise-full-ratio", raise_full_ratio), ("--match", patterns or None),
                                ("--buckets-from", buckets_from)) if v is not None]
        if given:
            raise UsageError(f"--join runs the purge's own plan: {', '.join(given)} cannot be given with it")
        if bucket is None:
            return _join_many(join_id, request, workers, yes, as_json, kwargs)
        return _join(join_id, request, workers, yes, as_json, kwargs)
    if many:
        if method == "lifecycle":
            raise UsageError("--method lifecycle: not in a job of several buckets (a worker that loses a bucket "
                             "mid-run would put its rules back under the next owner); for rules over many buckets "
                             "use rgwkeeper expire (nothing was changed)")
        given = [f for f, v in (("--raise-full-ratio", raise_full_ratio), ("--metrics-textfile", metrics_textfile))
                 if v is not None]
        if given:
            raise UsageError(f"{', '.join(given)}: not with several buckets yet; purge them one by one "
                             "(nothing was changed)")
        return _purge_many(patterns, buckets_from, request, impact=impact, max_rate=max_rate, workers=workers,
                           dry_run=dry_run, yes=yes, as_json=as_json, kwargs=kwargs)
    assert bucket is not None
    cfg, access = load_access(kwargs)
    purge_cfg = purge_api.impact.resolve(cfg.purge, impact, max_rate=max_rate)
    request = purge_api.impact.request_for(purge_cfg, request)
    impact_line = purge_api.impact.describe(purge_cfg)
    check_protected(bucket, purge_cfg.protected_buckets)
    if raise_full_ratio is not None:
        fullratio.check_raise_bound(raise_full_ratio, cfg.purge.max_full_ratio)
    io = purge_api.open_io(access, purge_cfg)
    try:
        store = purge_api.CheckpointStore(Path(cfg.purge.state_dir))
        prepared = _run_async(purge_api.prepare, request, io, purge_cfg=purge_cfg, store=store,
                              raise_full_ratio=raise_full_ratio)
        plan = prepared.plan
        if raise_full_ratio is not None and prepared.raise_full_ratio is None:
            click.echo("rgwkeeper: note: the cluster is not full; --raise-full-ratio is not used", err=True)
        full_lines = _full_lines(prepared, cfg.daemon.pool)
        items = purge_api.uses_items(plan)
        if workers is not None and not items:
            raise UsageError("--workers applies to a purge that lists by index shard (purge.direct_listing = "
                             "'index'; the direct method, or the s3 method on an unversioned bucket); this one is "
                             f"method {plan.method}" + (" listing through S3" if plan.method in ("direct", "s3") else "")
                             + (f" on a bucket with versioning {plan.profile.versioning}"
                                if plan.method == "s3" and plan.profile.versioning != "off" else "")
                             + " (nothing was changed)")
        workers = workers or purge_cfg.workers
        cap = purge_cfg.max_objects_per_second
        rate = rate_cap_for(plan.method, cap)
        capped = rate > 0
        at_once = purge_api.items_at_once(workers, rate)
        items_line = (f"work items: {len(plan.profile.index_shards)} (one per index shard) in RADOS object "
                      f"{cfg.daemon.pool}/purge.{plan.plan_id}, {at_once} at once here"
                      + (" (one at a time under the rate cap)" if at_once < workers else "")
                      + f"; add workers from another admin node with: {join_command(request, plan.plan_id)}"
                      ) if items else ""
        for note in prepared.ignored:
            click.echo(f"rgwkeeper: note: not resuming {note}", err=True)
        if cap > 0 and not capped:
            if impact is not None and purge_cfg.impact != "max":
                raise UsageError(f"--impact {impact} applies to the {' and '.join(RATE_CAPPED_METHODS)} methods; "
                                 f"method {plan.method} runs at RGW's own pace: choose another --method or drop "
                                 "--impact (nothing was changed)")
            if max_rate is not None:
                raise UsageError(f"--max-rate applies to the {' and '.join(RATE_CAPPED_METHODS)} methods; method "
                                 f"{plan.method} runs at RGW's own pace: choose another --method or drop "
                                 "--max-rate (nothing was changed)")
            click.echo(f"rgwkeeper: note: purge.max_objects_per_second ({cap:g}) does not apply to method "
                       f"{plan.method}: it runs at RGW's own pace", err=True)
        if dry_run:
            if as_json:
                raise_to = prepared.raise_full_ratio
                emit_json({"dry_run": True, "resuming": prepared.resuming, **plan.to_dict(),
                           "work_items": {"pool": cfg.daemon.pool, "object": f"purge.{plan.plan_id}",
                                          "items": len(plan.profile.index_shards), "workers": workers,
                                          "items_at_once": at_once}
                           if items else None,
                           "commands": plan.commands(io.rgw.argv), "max_objects_per_second": cap if capped else None,
                           "impact": purge_cfg.impact or None,
                           "full": prepared.full.to_dict() if prepared.full else None,
                           "full_ratio_commands": [fullratio.set_command(raise_to),
                                                   fullratio.set_command(prepared.full.ratios.full_ratio)]
                           if raise_to is not None and prepared.full else []})
            else:
                if prepared.resuming:
                    click.echo(f"resuming at step {prepared.state.step + 1} (checkpoint {prepared.checkpoint.path})")  # type: ignore[union-attr]
                click.echo("\n".join([*full_lines, *plan.show(io.rgw.argv)]))
                if items_line:
                    click.echo(items_line)
                if impact_line:
                    click.echo(impact_line)
                if capped:
                    click.echo(f"rate cap: at most {cap:g} objects/s")
                click.echo("dry run: nothing was changed")
            return
        p = plan.profile
        lines = [f"About to purge {p.bucket} ({request.describe()}) with method {plan.method}:",
                 f"  bucket holds {p.num_objects:,} objects, {human_bytes(p.size_bytes)}, "
                 f"{p.incomplete_uploads} incomplete uploads; owner {p.owner}"]
        lines += [f"  {n}" for n in plan.notes()]  # the clock, what the prefix reaches, the size rule
        if prepared.resuming:
            lines.append(f"  resuming an interrupted purge at step {prepared.state.step + 1}")  # type: ignore[union-attr]
        if capped:
            # The time only for a new purge of a whole bucket: a filter or a resume deletes an
            # unknown part of num_objects.
            whole = request.whole_bucket and not prepared.resuming
            lines.append(f"  at most {cap:g} objects/s" +
                         (f": about {human_duration(p.num_objects / cap)}" if whole else ""))
        if impact_line:
            lines.append(f"  {impact_line}")
        if items_line:
            lines.append(f"  {items_line}")
        lines += [f"  {line}" for line in full_lines]
        with purge_api.ratio_journal(io, cfg.daemon.pool, prepared.raise_full_ratio) as journal, \
                contextlib.ExitStack() as stack:
            _confirm(lines, p.bucket, yes)
            board = stack.enter_context(purge_api.open_board(
                io.rados, plan.plan_id, pool=cfg.daemon.pool, lease_s=purge_cfg.item_lease_s,
                create_pool=cfg.daemon.create_pool, workers=at_once)) if items else None
            if items_line:
                click.echo(f"rgwkeeper: purge {plan.plan_id}: {items_line}", err=True)
            with _Bar(enabled=True) as bar:
                textfile = metrics_textfile or purge_cfg.metrics_textfile
                report = _run_async(purge_api.run, prepared, io, purge_cfg=purge_cfg, on_progress=bar.update,
                                    journal=journal, holder=purge_api.holder_name(), lease_s=cfg.daemon.lease_s,
                                    textfile=Path(textfile) if textfile else None, board=board, workers=workers)
    finally:
        purge_api.close_io(io)
    _report(report, as_json, plan)
    if not report.ok:
        failed = [c for c in report.checks if c.status == "failed"]
        raise PurgeFailed(f"purge {bucket}", "the end state is not clean: " +
                          "; ".join(f"{c.name}: {c.detail}" for c in failed))


def join_command(request: PurgeRequest, job_id: str) -> str:
    """The command line that joins purge ``job_id``: its bucket and filters, as given."""
    argv = ["rgwkeeper", "purge", request.bucket]
    if request.prefix is not None:
        argv += ["--prefix", request.prefix]
    if request.older_than_s is not None:
        s = request.older_than_s
        argv += ["--older-than", f"{int(s)}s" if float(s).is_integer() else f"{Decimal(repr(s)):f}s"]
    if request.larger_than is not None:
        argv += ["--larger-than", str(request.larger_than)]
    if request.smaller_than is not None:
        argv += ["--smaller-than", str(request.smaller_than)]
    if request.method != "auto":
        argv += ["--method", request.method]
    return " ".join(shlex.quote(a) for a in [*argv, "--join", job_id])


def _join(job_id: str, request: PurgeRequest, workers: int | None, yes: bool, as_json: bool,
          kwargs: dict[str, Any]) -> None:
    """``purge BUCKET --join ID``: this node's workers on a running purge's items."""
    cfg, access = load_access(kwargs)
    check_protected(request.bucket, cfg.purge.protected_buckets)
    io = purge_api.open_io(access, cfg.purge)
    try:
        n = workers or cfg.purge.workers
        with purge_api.open_board(io.rados, job_id, pool=cfg.daemon.pool, lease_s=cfg.purge.item_lease_s,
                                  workers=n) as board:
            snap = purge_api.read_to_join(board)
            done = sum(1 for i in snap.items if i.state == "done")
            _confirm([f"About to join purge {job_id} of bucket {request.bucket}: {done} of {len(snap.items)} work "
                      f"items done; {n} workers here delete what the items they take list"], request.bucket, yes)
            with _Bar(enabled=True) as bar:
                report = _run_async(purge_api.join, board, request, io, purge_cfg=cfg.purge, workers=n,
                                    on_progress=bar.update)
    finally:
        purge_api.close_io(io)
    if as_json:
        emit_json(report.to_dict())
        return
    c = report.counters
    click.echo(f"joined purge {report.plan_id} of {report.bucket} with {report.workers} workers: "
               f"{c.get('objects_deleted', 0):,} objects, {human_bytes(c.get('bytes_deleted', 0))} deleted here in "
               f"{report.elapsed_s:.1f} s; {report.items_done} of {report.items} items done (the purge that "
               "started them drops the bucket and checks the end state)")
    line = endpoints_line(report.rgw_endpoints)
    if line:
        click.echo("  " + line)


def _status(job_id: str, bucket: str | None, as_json: bool, kwargs: dict[str, Any]) -> None:
    """``purge --status ID``: the work items as they stand, from any node."""
    cfg, access = load_access(kwargs)
    with connected(access, rgw=NONE) as ca:
        snap, is_many = purge_api.job_status(ca.rados, cfg.daemon.pool, job_id)
    if is_many:
        job = purge_api.many.view(snap, now=time.time())
        if bucket is not None and bucket not in {r["bucket"] for r in job["buckets"]}:
            raise UsageError(f"purge job {job_id} does not purge bucket {bucket!r}")
        if as_json:
            emit_json({"job_id": job_id, **job})
        else:
            click.echo("\n".join(render_job(job_id, job)))
        return
    view = purge_api.items_view(snap, now=time.time())
    if bucket is not None and bucket != view["bucket"]:
        raise UsageError(f"purge {job_id} purges bucket {view['bucket']!r}, not {bucket!r}")
    if as_json:
        emit_json({"plan_id": job_id, **view})
        return
    click.echo("\n".join(render_items(job_id, view)))


def _report(report: PurgeReport, as_json: bool, plan: purge_api.Plan) -> None:
    if as_json:
        scope = plan.to_dict()
        emit_json({**report.to_dict(), "clock": scope["clock"], "prefix_scope": scope["prefix_scope"]})
        return
    c = report.counters
    deleted = c.get("objects_deleted", 0)
    rate = deleted / report.space_free_s if report.space_free_s else 0
    click.echo(f"purged {report.bucket} ({report.method}): {deleted:,} objects, "
               f"{human_bytes(c.get('bytes_deleted', 0))}; space free after {report.space_free_s:.1f} s "
               f"({rate:,.0f} objects/s), verified after {report.elapsed_s:.1f} s"
               + (f"; resumed {report.resumed}x" if report.resumed else ""))
    detail = {k: v for k, v in c.items() if k not in ("objects_deleted", "bytes_deleted") and v}
    if detail:
        click.echo("  " + ", ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in sorted(detail.items())))
    line = endpoints_line(report.rgw_endpoints)
    if line:
        click.echo("  " + line)
    line = cap_line(report.pacing)
    if line:
        click.echo("  " + line)
    for check in report.checks:
        click.echo(f"  [{check.status}] {check.name}: {check.detail}")


@click.command()
@cluster_options
@click.argument("bucket", required=False)
@click.option("--prefix", help="rule applies to keys that start with this")
@click.option("--days", type=FiniteInt(1, lc.MAX_DAYS),
              help="expire current objects this many days after their last change")
@click.option("--noncurrent-days", type=FiniteInt(1, lc.MAX_DAYS), help="expire noncurrent versions after this many days")
@click.option("--expired-delete-markers", is_flag=True, help="remove delete markers that hide no version any more")
@click.option("--abort-multipart-days", type=FiniteInt(1, lc.MAX_DAYS), help="abort uploads this many days after they started")
@click.option("--tag", "tags", multiple=True, help="KEY=VALUE; only objects with this tag (repeatable)")
@click.option("--larger-than", type=Size(), help="only objects larger than this: 64KiB, 4MB (Tentacle only)")
@click.option("--smaller-than", type=Size(), help="only objects smaller than this (Tentacle only)")
@click.option("--no-run", is_flag=True, help="install the rules only; RGW applies them in rgw_lifecycle_work_time")
@click.option("--impact", type=click.Choice(purge_api.impact.LISTING_LEVELS), default=None,
              help="where expiry deletes from a listing (Pacific): low or max, as for purge [default: purge.impact]")
@click.option("--raise-full-ratio", type=FiniteFloat(0, 1), default=None, callback=_check_full_ratio, help=_RAISE_HELP)
@click.option("--dry-run", is_flag=True, help="print the rules and commands; change nothing")
@click.option("--yes", "-y", is_flag=True, help="do not ask for confirmation")
@click.option("--json", "as_json", is_flag=True, help="print the result as JSON on stdout")
def expire(bucket: str | None, prefix: str | None, days: int | None, noncurrent_days: int | None,
           expired_delete_markers: bool, abort_multipart_days: int | None, tags: tuple[str, ...],
           larger_than: int | None, smaller_than: int | None, no_run: bool, impact: str | None,
           raise_full_ratio: float | None, dry_run: bool, yes: bool, as_json: bool, **kwargs: Any) -> None:
    """Install S3 lifecycle expiration rules and run them now (radosgw-admin lc process --bucket).

    Rules come from the options (for BUCKET), or from purge.lifecycle_rules in the config
    (for BUCKET, or for every bucket their patterns match).
    """
    given = {"prefix": prefix, "days": days, "noncurrent_days": noncurrent_days,
             "abort_multipart_days": abort_multipart_days,
             "expired_delete_markers": expired_delete_markers or None,
             "larger_than": larger_than, "smaller_than": smaller_than,
             "tags": _tags(tags) or None}
    given = {k: v for k, v in given.items() if v is not None}
    cli_rule = None
    if given:
        if bucket is None:
            raise UsageError("rule options need a BUCKET")
        cli_rule = lc.parse_rule({"bucket": bucket, **given}, pattern_ok=False)
    elif bucket is not None:
        lc.parse_rule({"bucket": bucket, "days": 1}, pattern_ok=False)  # validates the name only
    cfg, access = load_access(kwargs)
    if raise_full_ratio is not None:
        fullratio.check_raise_bound(raise_full_ratio, cfg.purge.max_full_ratio)
    purge_cfg = purge_api.impact.resolve(cfg.purge, impact)
    config_rules = [lc.parse_rule(r) for r in cfg.purge.lifecycle_rules]
    if bucket is not None:
        check_protected(bucket, cfg.purge.protected_buckets)
    if cli_rule is None and not config_rules:
        raise UsageError("no lifecycle rules: give rule options (--days, --noncurrent-days, ...) or set "
                         "purge.lifecycle_rules in the config")
    io = purge_api.open_io(access, cfg.purge)
    failures: list[BucketFailure] = []
    try:
        full = _run_async(purge_api.full_gate, io, "expire", raise_full_ratio, cfg.purge.max_full_ratio)
        raise_to = raise_full_ratio if full.full else None
        if dry_run and raise_to is not None and not as_json:
            click.echo("\n".join([f"cluster: {full.describe()}", *fullratio.plan_lines(full, raise_to, cfg.daemon.pool)]))
        with purge_api.ratio_journal(io, cfg.daemon.pool, None if dry_run else raise_to) as journal:
            results = _run_async(_expire_all, bucket, cli_rule, config_rules, io, cfg, no_run=no_run,
                                 dry_run=dry_run, yes=yes, as_json=as_json,
                                 failures=failures, purge_cfg=purge_cfg,
                                 raised=purge_api.raised_for(io, journal, raise_to, "expire",
                                                             holder=purge_api.holder_name(),
                                                             lease_s=cfg.daemon.lease_s))
    finally:
        purge_api.close_io(io)
    if dry_run:
        _raise_if_failed([], failures)
        return
    if as_json:
        emit_json([r.to_dict() for r in results] + [f.to_dict() for f in failures])
    else:
        for r in results:
            click.echo(f"{r.bucket}: rules {'installed' if r.changed else 'already there'} "
                       f"({', '.join(r.rules)})" + (f"; lc process: objects {r.objects_before:,} -> "
                                                    f"{r.objects_after:,}, {human_bytes(r.bytes_before)} -> "
                                                    f"{human_bytes(r.bytes_after)} in {r.elapsed_s:.1f} s"
                                                    if r.ran else "; not run now (--no-run)"))
            for c in r.checks:
                click.echo(f"  [{c.status}] {c.name}: {c.detail}")
    _raise_if_failed(results, failures)


def _raise_if_failed(results: list[ExpireResult], failures: list[BucketFailure]) -> None:
    problem = expiry_problem(results, failures)
    if problem:
        raise PurgeFailed("expire", problem)


def _tags(tags: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for t in tags:
        k, sep, v = t.partition("=")
        if not sep or not k:
            raise UsageError(f"--tag {t!r} is not KEY=VALUE")
        out[k] = v
    return out


async def _expire_all(bucket: str | None, cli_rule: lc.ExpiryRule | None, config_rules: list[lc.ExpiryRule],
                      io: purge_api.PurgeIO, cfg: config_mod.Config, *, no_run: bool, dry_run: bool, yes: bool,
                      as_json: bool, failures: list[BucketFailure], purge_cfg: config_mod.PurgeSection,
                      raised: Any = None) -> list[ExpireResult]:
    """Plan, confirm and apply (the library's plan_expiry and apply_expiry); a failed bucket is
    said on stderr as it happens, and the others go on."""
    def said(f: BucketFailure) -> None:
        click.echo(f.line(), err=True)

    planned = await plan_expiry(io, bucket=bucket, cli_rule=cli_rule, config_rules=config_rules,
                                protected=cfg.purge.protected_buckets, run_now=not no_run, on_failure=said)
    failures[:] = planned.failures
    for b, why in planned.skipped:
        click.echo(f"rgwkeeper: skipping {b}: {why}", err=True)
    plans = planned.plans
    if any(x.by_listing for x in plans):
        purge_api.impact.check_listing(purge_cfg)
    if dry_run:
        if as_json:
            emit_json([{"bucket": x.profile.bucket, "rules": x.merged, "changes": x.changes,
                        "run_now": x.run_now} for x in plans] + [f.to_dict() for f in failures])
        else:
            for x in plans:
                click.echo("\n".join(x.show(io.rgw.argv)))
            click.echo("dry run: nothing was changed")
        return []
    lines = ["About to install expiration rules (and run them now):" if not no_run else
             "About to install expiration rules:"]
    for x in plans:
        lines.append(f"  {x.profile.bucket}: {x.profile.num_objects:,} objects, {human_bytes(x.profile.size_bytes)}; "
                     + "; ".join(r.describe() for r in x.rules))
    if not plans:
        return []
    impact_line = purge_api.impact.describe(purge_cfg)
    if impact_line and any(x.by_listing for x in plans):
        lines.append(f"  {impact_line} (where it deletes from a listing)")
    _confirm(lines, plans[0].profile.bucket if len(plans) == 1 else f"{len(plans)} buckets", yes)
    async with raised or contextlib.nullcontext():
        results = await purge_api.apply_expiry_with(planned, io, purge_cfg, one_bucket=bucket is not None,
                                                     on_failure=said)
    failures[:] = planned.failures
    return results


# -- many buckets as one job (purge.many) ---------------------------------------------------------

def _many_names(patterns: tuple[str, ...], buckets_from: str | None) -> tuple[list[str] | None, list[str]]:
    """What the operator typed: a list of names (from a file, or '-' for stdin) or patterns,
    validated before anything is contacted."""
    if buckets_from is not None:
        try:
            text = sys.stdin.read() if buckets_from == "-" else Path(buckets_from).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"--buckets-from {buckets_from}: cannot be read ({type(exc).__name__}: "
                             f"{getattr(exc, 'strerror', None) or exc}); nothing was changed") from None
        return purge_api.many.parse_list(text, "--buckets-from " + ("stdin" if buckets_from == "-" else buckets_from)), []
    return None, purge_api.many.check_patterns(patterns)


def many_join_command(filters: dict[str, Any], job_id: str) -> str:
    """The command line that joins job ``job_id``: its filters, no bucket."""
    argv = shlex.split(join_command(purge_api.many.request_for(filters, _NO_BUCKET), job_id))
    return " ".join(shlex.quote(a) for a in argv[:2] + argv[3:])  # rgwkeeper purge [bucket] ...


def _purge_many(patterns: tuple[str, ...], buckets_from: str | None, request: PurgeRequest, *,
                impact: str | None, max_rate: float | None, workers: int | None, dry_run: bool, yes: bool,
                as_json: bool, kwargs: dict[str, Any]) -> None:
    """``purge --match PATTERN`` / ``purge --buckets-from FILE``: one job of one item per bucket."""
    names, patterns_ = _many_names(patterns, buckets_from)
    cfg, access = load_access(kwargs)
    purge_cfg = purge_api.impact.resolve(cfg.purge, impact, max_rate=max_rate)
    # The method an impact level implies is the job's, recorded for every node that takes a bucket.
    request = purge_api.impact.request_for(purge_cfg, request)
    filters = purge_api.many.filters_of(request)
    skipped: list[tuple[str, str]] = []
    if names is not None:
        for b in names:  # a protected name in a list is refused, not skipped: the operator named it
            check_protected(b, purge_cfg.protected_buckets)
        source = purge_api.many.list_source(names)
    else:
        source = purge_api.many.pattern_source(patterns_)
    job = purge_api.many.job_id(filters, source)
    slots = workers or purge_cfg.workers
    cap = purge_cfg.max_objects_per_second
    if cap > 0 and slots > 1:  # each bucket's purge holds its own cap: share the job's between them
        if cap / slots < MIN_PURGE_RATE:
            raise UsageError(f"a rate cap of {cap:g} objects/s shared by {slots} buckets at once is below "
                             f"{MIN_PURGE_RATE}/s each: lower --workers or raise the cap (nothing was changed)")
        purge_cfg = dataclasses.replace(purge_cfg, max_objects_per_second=cap / slots)
    io = purge_api.open_io(access, purge_cfg)
    try:
        # First: on a full cluster even the bucket listing waits (radosgw-admin bucket list).
        _run_async(purge_api.job_full_gate, io,
                   f"{len(names)} buckets" if names is not None else f"the buckets matching {' '.join(patterns_)}")
        store = purge_api.CheckpointStore(Path(cfg.purge.state_dir))
        try:  # read-only: nothing (not even the pool) is created before the confirmation
            existing, is_many = purge_api.job_status(io.rados, cfg.daemon.pool, job) if not dry_run else (None, True)
        except purge_api.NoSuchJob:
            existing, is_many = None, True
        if not is_many:
            raise UsageError(f"purge.{job} holds a purge of one bucket, not this job; nothing was changed")
        with contextlib.ExitStack() as stack:
            if existing is not None:
                # The job as it was published, resumed: its buckets, not what the pattern matches now
                # (a bucket it already purged is gone from the listing).
                names = [i.shard for i in existing.items]
            elif names is None:
                listed = _run_async(io.rgw.json, "bucket", "list") or []
                names, skipped = purge_api.many.select(patterns_, listed, purge_cfg.protected_buckets)
            for b, why in skipped:
                click.echo(f"rgwkeeper: skipping {b}: {why}", err=True)
            if dry_run:
                return _many_dry_run(names, filters, io, purge_cfg, store, job, skipped, as_json)
            done = sum(1 for i in existing.items if i.state == "done") if existing else 0
            shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
            lines = [f"About to purge {len(names)} buckets ({request.describe()}, method {request.method}, each with "
                     f"its own plan and end-state check): {shown}",
                     f"  job {job} in RADOS object {cfg.daemon.pool}/purge.{job}, {slots} buckets at once here; add "
                     f"workers from another admin node with: {many_join_command(filters, job)}"]
            if existing is not None:
                lines.append(f"  resuming job {job}: {done} of {len(names)} buckets done")
            if skipped:
                lines.append(f"  skipped: {len(skipped)} (protected, or not purgeable by name)")
            impact_line = purge_api.impact.describe(purge_cfg)
            if impact_line:
                lines.append(f"  {impact_line}")
            if cap > 0:
                lines.append(f"  at most {cap:g} objects/s in all here ({cap / slots:g}/s for each of {slots} buckets at "
                             "once); other nodes cannot join a capped job")
            _confirm(lines, f"{len(names)} buckets", yes)
            board = stack.enter_context(purge_api.open_board(io.rados, job, pool=cfg.daemon.pool,
                                                             lease_s=purge_cfg.item_lease_s,
                                                             create_pool=cfg.daemon.create_pool, workers=slots))
            settings = purge_api.settings_from(purge_cfg)
            board.publish(purge_api.many.spec_for(filters, source, names, job=job, lease_s=board.lease_s,
                                                  created=time.time()), names,
                          run={"rate_cap": cap, "paced": settings.paced})
            click.echo(f"rgwkeeper: purge job {job}: {len(names)} buckets; join with: "
                       f"{many_join_command(filters, job)}", err=True)
            report = _run_many(board, io, purge_cfg, store, cfg.daemon.pool, slots, as_json)
    finally:
        purge_api.close_io(io)
    _many_report(report, as_json)


def _run_many(board: purge_api.Board, io: purge_api.PurgeIO, purge_cfg: config_mod.PurgeSection,
              store: purge_api.CheckpointStore, pool: str, slots: int, as_json: bool) -> Any:
    def said(o: purge_api.many.BucketOutcome) -> None:
        if not as_json:
            click.echo(o.line(), err=not o.ok)
    return _run_async(purge_api.run_many, board, io, purge_cfg=purge_cfg, store=store, pool=pool, slots=slots,
                      on_bucket=said)


def _many_dry_run(names: list[str], filters: dict[str, Any], io: purge_api.PurgeIO,
                  purge_cfg: config_mod.PurgeSection, store: purge_api.CheckpointStore, job: str,
                  skipped: list[tuple[str, str]], as_json: bool) -> None:
    plans, problems = [], []
    for b in names:
        try:
            plans.append(_run_async(purge_api.prepare, purge_api.many.request_for(filters, b), io,
                                    purge_cfg=purge_cfg, store=store).plan)
        except RgwkeeperError as exc:
            problems.append((b, str(exc)))
    if as_json:
        emit_json({"dry_run": True, "job_id": job, "plans": [{**p.to_dict(), "commands": p.commands(io.rgw.argv)}
                                                             for p in plans],
                   "not_planned": [{"bucket": b, "why": w} for b, w in problems],
                   "skipped": [{"bucket": b, "why": w} for b, w in skipped]})
    else:
        click.echo(f"purge job {job}: {len(names)} buckets, each with its own plan:")
        for p in plans:
            click.echo("\n".join(p.show(io.rgw.argv)))
        for b, w in problems:
            click.echo(f"{b}: cannot be planned: {w}")
        click.echo("dry run: nothing was changed")
    if problems:
        raise UsageError(f"{len(problems)} of {len(names)} buckets cannot be planned (listed above); nothing was changed")


def _many_report(report: Any, as_json: bool) -> None:
    if as_json:
        emit_json(report.to_dict())
    else:
        deleted = sum(o.objects_deleted for o in report.outcomes)
        click.echo(f"purge job {report.job_id}: {report.done} of {report.buckets} buckets done; here "
                   f"{len(report.outcomes)} buckets, {deleted:,} objects in {report.elapsed_s:.1f} s")
    if not report.ok:
        failed = [o for o in report.outcomes if not o.ok]
        raise PurgeFailed(f"purge job {report.job_id}", f"{report.buckets - report.done} of {report.buckets} buckets "
                          "not done" + (f" ({len(failed)} failed here, listed above)" if failed else
                                        " (held by other workers)")
                          + f"; see rgwkeeper purge --status {report.job_id}, and run the same command again to retry")


def _join_many(job_id: str, request: PurgeRequest, workers: int | None, yes: bool, as_json: bool,
               kwargs: dict[str, Any]) -> None:
    """``purge --join ID`` of a job of many buckets: this node's workers take its buckets."""
    cfg, access = load_access(kwargs)
    io = purge_api.open_io(access, cfg.purge)
    try:
        slots = workers or cfg.purge.workers
        with purge_api.open_board(io.rados, job_id, pool=cfg.daemon.pool, lease_s=cfg.purge.item_lease_s,
                                  workers=slots) as board:
            snap = purge_api.read_to_join(board)
            if not purge_api.many.is_many(snap):
                raise UsageError(f"purge {job_id} purges one bucket ({snap.spec['plan']['profile']['bucket']}): give "
                                 "that BUCKET with --join")
            theirs = snap.spec["plan"]["filters"]
            differ = purge_api.many.filters_differences(purge_api.many.filters_of(request), theirs)
            if differ:
                raise UsageError(f"--join {job_id}: this command line differs from the job's: {'; '.join(differ)}; "
                                 f"join with: {many_join_command(theirs, job_id)} (nothing was changed)")
            if snap.spec.get("rate_cap") or snap.spec.get("paced") or cfg.purge.max_objects_per_second > 0 \
                    or purge_api.settings_from(cfg.purge).paced:
                raise UsageError(f"purge job {job_id} runs under a rate cap or pacing (its own, or this node's config), "
                                 "which each process holds on its own: a joined worker would go past it; nothing was "
                                 "changed")
            board.lease_s = int(snap.spec["lease_s"])
            done = sum(1 for i in snap.items if i.state == "done")
            _confirm([f"About to join purge job {job_id}: {done} of {len(snap.items)} buckets done; {slots} buckets "
                      "at once here"], f"{len(snap.items)} buckets", yes)
            report = _run_many(board, io, cfg.purge, purge_api.CheckpointStore(Path(cfg.purge.state_dir)),
                               cfg.daemon.pool, slots, as_json)
    finally:
        purge_api.close_io(io)
    _many_report(report, as_json)
