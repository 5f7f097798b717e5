"""Options every command shares, and the error handling that keeps user mistakes to one line."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Any, Callable

import click

from rgwkeeper import config as config_mod
from rgwkeeper.access import ClusterAccess, resolve
from rgwkeeper.errors import EXIT_USAGE, RgwkeeperError
from rgwkeeper.units import FiniteFloat, FilePath, Text


def ceph_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--conf, --keyring, --name/--id, --timeout: how to reach the cluster with librados."""
    options = [
        click.option("-c", "--conf", type=Text(), help="ceph.conf [default: $CEPH_CONF, then /etc/ceph/ceph.conf]"),
        click.option("-k", "--keyring", type=Text(), help="cephx keyring [default: the one ceph.conf names]"),
        click.option("-n", "--name", type=Text(), help="cephx client name, e.g. client.rgwkeeper [default: client.admin]"),
        click.option("-i", "--id", "client_id", type=Text(), help="cephx client id (the part after 'client.')"),
        click.option("--timeout", type=FiniteFloat(1, 600), help="seconds per Ceph call, 1 to 600 [default: 10]"),
    ]
    for o in reversed(options):
        fn = o(fn)
    return fn


def cluster_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--config, --conf, --keyring, --name/--id, --rgw-endpoint, --rgw-credentials, --timeout."""
    fn = ceph_options(fn)
    options = [
        click.option("--config", "config_path", type=FilePath(dir_okay=False, path_type=Path),
                     envvar="RGWKEEPER_CONFIG",
                     help="rgwkeeper TOML config [default: $RGWKEEPER_CONFIG, then /etc/rgwkeeper/rgwkeeper.toml if present]"),
        click.option("--rgw-endpoint", type=Text(), multiple=True,
                     help="RGW endpoint URL; repeat it for several RGWs of one zone, which share the requests "
                          "[default: rgw.endpoint(s) in the config]"),
        click.option("--rgw-credentials", type=Text(), help="file with access_key and secret_key, mode 0600 "
                                               "[default: rgw.credentials_file in the config]"),
    ]
    for o in reversed(options):
        fn = o(fn)
    return fn


def load_access(kwargs: dict[str, Any]) -> tuple[config_mod.Config, ClusterAccess]:
    """Pop the shared options from a command's kwargs and resolve them."""
    cfg = config_mod.load(kwargs.pop("config_path", None))
    access = resolve(
        conf=kwargs.pop("conf", None), keyring=kwargs.pop("keyring", None), name=kwargs.pop("name", None),
        client_id=kwargs.pop("client_id", None), rgw_endpoint=kwargs.pop("rgw_endpoint", None) or None,
        rgw_credentials=kwargs.pop("rgw_credentials", None), timeout_s=kwargs.pop("timeout", None),
        config_defaults=cfg.cluster_defaults(),
    )
    return cfg, access


def emit_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, sort_keys=True, default=str)
    sys.stdout.write("\n")


def run_cli(group: click.Group, args: list[str] | None = None) -> int:
    """Run the click group; print rgwkeeper and usage errors as one line, no traceback."""
    try:
        # With standalone_mode=False click returns (not raises) the code of ctx.exit(N).
        rc = group.main(args=args, prog_name="rgwkeeper", standalone_mode=False)
        return rc if isinstance(rc, int) else 0
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        click.echo(f"rgwkeeper: error: {exc.format_message()}", err=True)
        return exc.exit_code if exc.exit_code else EXIT_USAGE
    except click.exceptions.Abort:
        click.echo("rgwkeeper: aborted", err=True)
        return 130
    except RgwkeeperError as exc:
        click.echo(f"rgwkeeper: error: {exc}", err=True)
        return exc.exit_code
    except KeyboardInterrupt:
        click.echo("rgwkeeper: interrupted", err=True)
        return 130


def wraps_async(fn: Callable[..., Any]) -> Callable[..., Any]:
    import asyncio

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return asyncio.run(fn(*args, **kwargs))

    return wrapper
