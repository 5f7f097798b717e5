"""``rgwkeeper daemon``, ``plan``, ``restore``, ``pause``, ``resume``."""

from __future__ import annotations

import asyncio
import getpass
import socket
import sys
import time
from datetime import datetime
from typing import Any

import click

from rgwkeeper import logs
from rgwkeeper.adapters.connect import IF_CONFIGURED, NONE, open_adapters
from rgwkeeper.adapters.rados import ObjectStore
from rgwkeeper.cli.common import cluster_options, emit_json, load_access
from rgwkeeper.cli.render import debt_lines
from rgwkeeper.daemon import service
from rgwkeeper.executor import Executor
from rgwkeeper.hostid import host_identity
from rgwkeeper.journal import Journal, MemoryStore, holder_name, own_holders
from rgwkeeper.observe import snapshot
from rgwkeeper.reconcile import plan_pass
from rgwkeeper.units import Text


class _Session:
    """Connect, open the journal (read-only if the pool does not exist yet), close."""

    def __init__(self, kwargs: dict[str, Any], *, rgw: str = NONE) -> None:
        self.cfg, self.access = load_access(kwargs)
        self.rgw = rgw  # only `plan` reads buckets; restore and pause never need RGW's credentials
        self.store: ObjectStore | None = None

    def __enter__(self) -> "_Session":
        self.adapters = open_adapters(self.access, rgw=self.rgw)
        self.rados = self.adapters.rados
        pools = self.rados.command({"prefix": "osd pool ls"}) or []
        if self.cfg.daemon.pool in pools:
            self.store = ObjectStore(self.rados, self.cfg.daemon.pool)
            self.journal = Journal(self.store)
        else:
            self.journal = Journal(MemoryStore())  # nothing was ever journaled
        return self

    def __exit__(self, *exc: object) -> None:
        if self.store is not None:
            self.store.close()
        self.adapters.close()

    def executor(self) -> Executor:
        holder = holder_name(self.cfg.daemon.instance_id or socket.gethostname(), host_identity())
        return Executor(self.rados, self.journal, holder=holder, lease_s=self.cfg.daemon.lease_s)


@click.command()
@cluster_options
def daemon(**kwargs: Any) -> None:
    """Run the reconciler service (systemd: Type=notify). Stops on SIGTERM, restoring overrides."""
    cfg, access = load_access(kwargs)
    logs.setup(logs.explicit_level() or "info", stream=sys.stdout)
    code = asyncio.run(service.run(cfg, access))
    raise SystemExit(code)


@click.command()
@cluster_options
@click.option("--json", "as_json", is_flag=True, help="print the plan as JSON")
def plan(as_json: bool, **kwargs: Any) -> None:
    """Show what one reconcile pass would do now, as the exact commands. Changes nothing."""
    with _Session(kwargs, rgw=IF_CONFIGURED) as s:
        snap, _ = asyncio.run(snapshot(s.adapters, s.cfg))
        now = datetime.now()
        p = plan_pass(snap, s.cfg, s.journal.overrides(), s.journal.control(), now=time.time(),
                      local_time=now.time(), local_now=now)
    if as_json:
        emit_json(p.to_dict())
        return
    click.echo(f"gate: {p.gate}")
    click.echo(f"scrub throttle: {p.scrub.state}: {p.scrub.reason}")
    for line in debt_lines(p.debt.to_dict() if p.debt else None):
        click.echo(line)
    click.echo(f"pre-sharding: {p.shards_reason}")
    for sp in p.shard_plans:
        click.echo(f"  {sp.bucket}: {sp.reason}" + (f" ({sp.capped_by})" if sp.capped_by else ""))
        if sp.min_shards_note:
            click.echo(f"    minimum shards: {sp.min_shards_note}")
    if p.spillover is not None:
        click.echo(f"spillover: {p.spillover.reason}")
        for osd, size in sorted(p.spillover.needs_bigger_db.items()):
            click.echo(f"  osd.{osd} needs a bigger DB device: about {size / (1 << 30):.0f} GiB "
                       "(compaction did not clear its spillover)")
    if p.fill is not None:
        eta = p.fill.projected_s_to_nearfull
        alerting = [k for k, v in p.fill.alerts.items() if v]
        click.echo(f"fill: {p.fill.reason}" + (f"; nearfull in about {eta / 3600:.1f} h" if eta else "")
                   + (f"; alerting: {', '.join(alerting)}" if alerting else ""))
    if p.overrides:
        click.echo("overridden now:")
        for k, e in sorted(p.overrides.items()):
            click.echo(f"  {k} = {e.applied_value} (was {'unset' if not e.original_present else e.original_value}; "
                       f"holder {e.holder})")
    click.echo("commands:" if p.commands() else "commands: none")
    for c in p.commands():
        click.echo(f"  {c}")


@click.command()
@cluster_options
@click.option("--dry-run", is_flag=True, help="print the commands that would restore, change nothing")
@click.option("--holder", type=Text(), help="only overrides of this holder (INSTANCE@HOST, as `plan` shows it; default: all)")
@click.option("--own", is_flag=True, help="only overrides made by this node (daemon.instance_id or the hostname, on "
                                          "this host); what the systemd unit runs after the daemon stops")
@click.option("--force", is_flag=True, help="also put back settings someone changed after rgwkeeper set them "
                                            "(without it they are left as they are and kept in the journal)")
@click.option("--json", "as_json", is_flag=True)
def restore(dry_run: bool, holder: str | None, own: bool, force: bool, as_json: bool, **kwargs: Any) -> None:
    """Put back every setting the daemon overrode, exactly as it was, and verify it.

    Only what is still rgwkeeper's: a setting changed since by someone else is left and its
    journal entry kept (one line says so), unless --force. Exit 1 if any entry failed or was left."""
    if holder and own:
        raise click.UsageError("give --holder or --own, not both")
    with _Session(kwargs) as s:
        holders = {holder} if holder else None
        if own:
            holders = own_holders(s.cfg.daemon.instance_id or socket.gethostname(), host_identity())
        results = asyncio.run(s.executor().restore(holders=holders, dry_run=dry_run, force=force))
    if as_json:
        emit_json([{"command": r.command, "ok": r.ok, "status": r.status, "detail": r.detail} for r in results])
    else:
        if not results:
            click.echo("nothing to restore")
        for r in results:
            click.echo(f"{r.status:<13} {r.command}  ({r.detail})")
    # "held": a running purge's raise, not given back yet: exit 1 so a runbook does not read it as done.
    if any(not r.ok or r.status == "held" for r in results):
        raise SystemExit(1)


#: A pause's reason is kept in the journal and shown on one line of status and plan.
MAX_REASON = 300


@click.command()
@cluster_options
@click.option("--reason", type=Text(empty_ok=True, max_len=MAX_REASON), default="",
              help=f"why, shown by plan, status and the daemon's logs (at most {MAX_REASON} characters)")
def pause(reason: str, **kwargs: Any) -> None:
    """Hand control back to the operator: the daemon restores its overrides and changes nothing."""
    with _Session(kwargs) as s:
        if s.store is None:
            raise click.ClickException(f"pool {s.cfg.daemon.pool!r} does not exist: the daemon has never run")
        s.journal.set_control("paused", {"by": f"{getpass.getuser()}@{socket.gethostname()}", "at": time.time(),
                                         "reason": reason})
    click.echo("paused: the leader restores its overrides on its next pass; run rgwkeeper resume to undo")


@click.command()
@cluster_options
def resume(**kwargs: Any) -> None:
    """Let the daemon act again after rgwkeeper pause."""
    with _Session(kwargs) as s:
        if s.store is None:
            raise click.ClickException(f"pool {s.cfg.daemon.pool!r} does not exist: the daemon has never run")
        s.journal.clear_control("paused")
    click.echo("resumed")
