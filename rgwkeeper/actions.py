"""Actions a policy asks for. Each is plain data that renders itself as the exact command.

The executor sends :meth:`mon_command` (a JSON dict, never a string built by hand); a dry
run prints :meth:`command`, the equivalent ``ceph`` CLI line an operator could paste.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any, ClassVar, Union


@dataclass(frozen=True)
class SetConfig:
    """``ceph config set WHO NAME VALUE`` (mon config database)."""

    who: str
    name: str
    value: str
    reason: str = ""

    @property
    def key(self) -> str:
        return f"config/{self.who}/{self.name}"

    def mon_command(self) -> dict[str, Any]:
        return {"prefix": "config set", "who": self.who, "name": self.name, "value": self.value}

    def command(self) -> str:
        return shlex.join(["ceph", "config", "set", self.who, self.name, self.value])


@dataclass(frozen=True)
class RemoveConfig:
    """``ceph config rm WHO NAME``: back to what ceph.conf or the default says."""

    who: str
    name: str
    reason: str = ""

    @property
    def key(self) -> str:
        return f"config/{self.who}/{self.name}"

    def mon_command(self) -> dict[str, Any]:
        return {"prefix": "config rm", "who": self.who, "name": self.name}

    def command(self) -> str:
        return shlex.join(["ceph", "config", "rm", self.who, self.name])


@dataclass(frozen=True)
class _FlagAction:
    flag: str
    reason: str = ""

    verb: ClassVar[str] = ""

    @property
    def key(self) -> str:
        return f"flag/{self.flag}"

    def mon_command(self) -> dict[str, Any]:
        return {"prefix": f"osd {self.verb}", "key": self.flag}

    def command(self) -> str:
        return shlex.join(["ceph", "osd", self.verb, self.flag])


@dataclass(frozen=True)
class SetFlag(_FlagAction):
    """``ceph osd set FLAG`` (e.g. nodeep-scrub)."""

    verb: ClassVar[str] = "set"


@dataclass(frozen=True)
class UnsetFlag(_FlagAction):
    """``ceph osd unset FLAG``."""

    verb: ClassVar[str] = "unset"


@dataclass(frozen=True)
class RestoreAll:
    """Give back every override the journal holds, exactly as it was before."""

    reason: str = ""

    key = "restore"

    def command(self) -> str:
        return "rgwkeeper restore"


@dataclass(frozen=True)
class DeepScrubPg:
    """``ceph pg deep-scrub PGID``: ask the PG's primary to deep-scrub it now (it changes no
    setting, so nothing is journaled or given back)."""

    pgid: str
    reason: str = ""

    @property
    def key(self) -> str:
        return f"pg/{self.pgid}/deep-scrub"

    def mon_command(self) -> dict[str, Any]:
        return {"prefix": "pg deep-scrub", "pgid": self.pgid}

    def command(self) -> str:
        return shlex.join(["ceph", "pg", "deep-scrub", self.pgid])


Override = Union[SetConfig, SetFlag]
Action = Union[SetConfig, RemoveConfig, SetFlag, UnsetFlag, RestoreAll, DeepScrubPg]


@dataclass(frozen=True)
class CreateBucket:
    """S3 CreateBucket as the RGW admin user."""

    bucket: str
    reason: str = ""

    @property
    def key(self) -> str:
        return f"bucket/{self.bucket}/create"

    def command(self) -> str:
        return f"s3 CreateBucket {shlex.quote(self.bucket)}"


@dataclass(frozen=True)
class _BucketShardsAction:
    bucket: str
    num_shards: int
    reason: str = ""

    verb: ClassVar[str] = ""

    @property
    def key(self) -> str:
        return f"bucket/{self.bucket}/{self.verb}"

    def args(self) -> list[str]:
        return ["bucket", self.verb, "--bucket", self.bucket, "--num-shards", str(self.num_shards)]

    def command(self) -> str:
        return shlex.join(["radosgw-admin", *self.args()])


@dataclass(frozen=True)
class ReshardBucket(_BucketShardsAction):
    """``radosgw-admin bucket reshard --bucket B --num-shards N``."""

    verb: ClassVar[str] = "reshard"


@dataclass(frozen=True)
class SetMinShards(_BucketShardsAction):
    """``radosgw-admin bucket set-min-shards --bucket B --num-shards N`` (Tentacle on): the count
    below which RGW's dynamic resharding will not reduce the bucket."""

    verb: ClassVar[str] = "set-min-shards"


@dataclass(frozen=True)
class CompactOsd:
    """``ceph tell osd.N compact``: RocksDB compaction, which can move spilled data back."""

    osd_id: int
    reason: str = ""

    @property
    def key(self) -> str:
        return f"osd/{self.osd_id}/compact"

    def command(self) -> str:
        return f"ceph tell osd.{self.osd_id} compact"


@dataclass(frozen=True)
class RunExpire:
    """Run the configured expiry rules now, in-process; the same as ``rgwkeeper expire --yes`` (the
    command shown), on a full cluster with ``--raise-full-ratio`` (fill.expire_raise_full_ratio)."""

    reason: str = ""
    raise_full_ratio: float | None = None

    key = "expire"

    def args(self) -> list[str]:
        extra = ["--raise-full-ratio", f"{self.raise_full_ratio:.6g}"] if self.raise_full_ratio is not None else []
        return ["expire", "--yes", "--json", *extra]

    def command(self) -> str:
        return shlex.join(["rgwkeeper", *self.args()])
