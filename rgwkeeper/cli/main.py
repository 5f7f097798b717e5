"""``rgwkeeper``: the command line."""

from __future__ import annotations

import sys

import click

from rgwkeeper import __version__
from rgwkeeper import logs
from rgwkeeper.cli.common import run_cli
from rgwkeeper.cli.status import status


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="rgwkeeper")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="warning",
              show_default=True, help="log level (logs go to stderr; reports to stdout)")
def cli(log_level: str) -> None:
    """Keeps a large Ceph RGW cluster fast while it fills."""
    logs.setup(log_level)


cli.add_command(status)


def main(argv: list[str] | None = None) -> None:
    sys.exit(run_cli(cli, argv))
