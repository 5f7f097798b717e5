"""``rgwkeeper``: the command line."""

from __future__ import annotations

import importlib
import sys

import click

from rgwkeeper import __version__
from rgwkeeper import logs
from rgwkeeper.cli.common import run_cli

# Each command is imported when it runs: a purge during ingest should not first spend a second
# of CPU importing the daemon's scheduler and the load generator's numpy and matplotlib (on
# this 2-core box that second shows in ingest p99; `rgwkeeper purge` imports in 0.5 s, not 0.8 s).
COMMANDS = {
    "status": "rgwkeeper.cli.status:status",
    "daemon": "rgwkeeper.cli.daemon:daemon",
    "plan": "rgwkeeper.cli.daemon:plan",
    "restore": "rgwkeeper.cli.daemon:restore",
    "pause": "rgwkeeper.cli.daemon:pause",
    "resume": "rgwkeeper.cli.daemon:resume",
    "preshard": "rgwkeeper.cli.preshard:preshard",
    "loadgen": "rgwkeeper.cli.loadgen:loadgen",
    "verify": "rgwkeeper.cli.loadgen:verify",
    "purge": "rgwkeeper.cli.purge:purge",
    "expire": "rgwkeeper.cli.purge:expire",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, attr = COMMANDS[name].split(":")
        cmd = getattr(importlib.import_module(module), attr)
        assert isinstance(cmd, click.Command)
        return cmd


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
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


def main(argv: list[str] | None = None) -> None:
    sys.exit(run_cli(cli, argv))
