"""``rgwkeeper``: the command line."""

from __future__ import annotations

import sys

import click

from rgwkeeper import __version__
from rgwkeeper import logs
from rgwkeeper.cli.common import run_cli
from rgwkeeper.cli.daemon import daemon, pause, plan, restore, resume
from rgwkeeper.cli.loadgen import loadgen, verify
from rgwkeeper.cli.preshard import preshard
from rgwkeeper.cli.purge import expire, purge
from rgwkeeper.cli.status import status


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="rgwkeeper")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default=None,
              help="log level [default: info for the daemon, warning otherwise]; logs go to stderr "
                   "(the daemon's to stdout, for journald), reports to stdout")
def cli(log_level: str | None) -> None:
    """Keeps a large Ceph RGW cluster fast while it fills."""
    if log_level:
        logs.setup(log_level, remember=True)
    else:
        logs.setup("warning")


cli.add_command(status)
cli.add_command(daemon)
cli.add_command(plan)
cli.add_command(restore)
cli.add_command(pause)
cli.add_command(resume)
cli.add_command(preshard)
cli.add_command(loadgen)
cli.add_command(verify)
cli.add_command(purge)
cli.add_command(expire)


def main(argv: list[str] | None = None) -> None:
    sys.exit(run_cli(cli, argv))
