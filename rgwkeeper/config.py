"""The rgwkeeper TOML config: dataclasses whose every field documents itself.

Each field carries ``doc`` (with units), and optionally ``min``/``max``/``choices`` in its
metadata. :func:`load` checks every field and reports *all* bad fields, one line each, in a
single :class:`ConfigError`; unknown keys are errors too (a typo must not silently fall
back to a default). ``config/rgwkeeper.toml`` is the documented example and is tested to
load and to list every field.
"""

from __future__ import annotations

import dataclasses
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rgwkeeper.access import ClusterDefaults
from rgwkeeper.errors import ConfigError

DEFAULT_CONFIG_PATH = Path("/etc/rgwkeeper/rgwkeeper.toml")


def opt(default: Any, doc: str, **bounds: Any) -> Any:
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"doc": doc, **bounds})
    return field(default=default, metadata={"doc": doc, **bounds})


@dataclass(frozen=True)
class ClusterSection:
    """How to reach the Ceph cluster (command-line flags override these)."""

    conf: str | None = opt(None, "Path of ceph.conf. Default: $CEPH_CONF, then /etc/ceph/ceph.conf.")
    keyring: str | None = opt(None, "Path of the cephx keyring. Default: what ceph.conf names.")
    name: str = opt("client.admin", "cephx client name, client.ID.")
    timeout: float = opt(
        10.0,
        "Seconds to wait for any one Ceph call (mon/mgr/OSD command, radosgw-admin, admin API) "
        "and for the initial connection. librados's own defaults (0) wait forever.",
        min=1.0, max=600.0,
    )


@dataclass(frozen=True)
class RgwSection:
    """How to reach RGW."""

    endpoint: str | None = opt(None, "RGW S3/admin endpoint URL, e.g. http://rgw1:8080.")
    credentials_file: str | None = opt(
        None, "TOML file with access_key and secret_key of a user with admin caps "
        "(buckets=*; users=read; usage=read; metadata=read). Must be mode 0600."
    )
    data_pools: list[str] = opt(
        [], "RGW data pools whose client I/O counts as RGW write load. Empty: every pool "
        "with the rgw application whose name ends in .buckets.data."
    )
    max_objs_per_shard: int | None = opt(
        None, "Objects per bucket index shard at which RGW reshards dynamically. Empty: read "
        "rgw_max_objs_per_shard from the mon config database (who=client.rgw).",
        min=1, max=100_000_000,
    )
    shard_warning_ratio: float = opt(
        0.9, "Fraction of max_objs_per_shard at which a bucket is flagged WARN "
        "(RGW's own rgw_shard_warning_threshold is 90%).", min=0.1, max=1.0,
    )


@dataclass(frozen=True)
class ObserveSection:
    """What a snapshot gathers."""

    osd_parallelism: int = opt(
        32, "Per-OSD calls (perf dump, config get) in flight at once.", min=1, max=1024
    )
    scrub_options: list[str] = opt(
        ["osd_op_queue", "osd_max_scrubs", "osd_scrub_sleep", "osd_scrub_load_threshold",
         "osd_mclock_profile"],
        "OSD options whose effective values are read from every OSD (ceph tell osd.N config get).",
    )


@dataclass(frozen=True)
class Config:
    cluster: ClusterSection = field(default_factory=ClusterSection)
    rgw: RgwSection = field(default_factory=RgwSection)
    observe: ObserveSection = field(default_factory=ObserveSection)

    def cluster_defaults(self) -> ClusterDefaults:
        return ClusterDefaults(
            conf=self.cluster.conf, keyring=self.cluster.keyring, name=self.cluster.name,
            rgw_endpoint=self.rgw.endpoint, rgw_credentials_file=self.rgw.credentials_file,
            timeout_s=self.cluster.timeout,
        )


SECTIONS: dict[str, type] = {"cluster": ClusterSection, "rgw": RgwSection, "observe": ObserveSection}


def load(path: Path | None, *, required: bool = False) -> Config:
    """Load and validate a config file; ``None`` or a missing default path gives defaults."""
    if path is None:
        if not DEFAULT_CONFIG_PATH.exists():
            return Config()
        path = DEFAULT_CONFIG_PATH
    elif not path.exists():
        raise ConfigError(f"config file {path} does not exist; pass --config PATH or create it")
    try:
        raw = tomllib.loads(path.read_text())
    except PermissionError:
        raise ConfigError(f"cannot read config file {path}: permission denied") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    return parse(raw, source=str(path))


def parse(raw: dict[str, Any], source: str = "config") -> Config:
    problems: list[str] = []
    sections: dict[str, Any] = {}
    for key in raw:
        if key not in SECTIONS:
            problems.append(f"{source}: unknown section [{key}] (known: {', '.join(SECTIONS)})")
    for name, cls in SECTIONS.items():
        values = raw.get(name, {})
        if not isinstance(values, dict):
            problems.append(f"{source}: {name} must be a table [{name}]")
            continue
        sections[name] = _parse_section(cls, name, values, source, problems)
    if problems:
        raise ConfigError("; ".join(problems) if len(problems) == 1 else
                          f"{len(problems)} problems: " + "; ".join(problems))
    return Config(**sections)


def _parse_section(cls: type, name: str, values: dict[str, Any], source: str, problems: list[str]) -> Any:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        f = fields.get(key)
        if f is None:
            problems.append(f"{source}: unknown key {name}.{key} (known: {', '.join(fields)})")
            continue
        err = _check(hints[key], f.metadata, value)
        if err:
            problems.append(f"{source}: {name}.{key} {err}")
        else:
            kwargs[key] = float(value) if hints[key] in (float, float | None) and isinstance(value, int) else value
    return cls(**kwargs)


def _type_ok(tp: Any, value: Any) -> bool:
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        return any(_type_ok(t, value) for t in typing.get_args(tp))
    if tp is type(None):
        return value is None
    if origin is list:
        (item,) = typing.get_args(tp)
        return isinstance(value, list) and all(_type_ok(item, v) for v in value)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, tp)


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        return " or ".join(_type_name(t) for t in typing.get_args(tp) if t is not type(None))
    if origin is list:
        return f"a list of {_type_name(typing.get_args(tp)[0])}"
    return {str: "a string", int: "an integer", float: "a number", bool: "true or false"}.get(tp, str(tp))


def _check(tp: Any, meta: Any, value: Any) -> str | None:
    if not _type_ok(tp, value):
        return f"must be {_type_name(tp)}, got {value!r}"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        lo, hi = meta.get("min"), meta.get("max")
        if lo is not None and value < lo:
            return f"must be at least {lo}, got {value}"
        if hi is not None and value > hi:
            return f"must be at most {hi}, got {value}"
    choices = meta.get("choices")
    if choices is not None and value not in choices:
        return f"must be one of {', '.join(map(str, choices))}, got {value!r}"
    return None


def describe() -> list[tuple[str, str, Any]]:
    """Every field as (section.key, doc, default), for docs and tests."""
    out = []
    for name, cls in SECTIONS.items():
        for f in dataclasses.fields(cls):
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
            out.append((f"{name}.{f.name}", f.metadata["doc"], default))
    return out
