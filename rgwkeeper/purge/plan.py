"""The purge planner: a bucket's profile + the cluster's release + what was asked -> a Plan.

Pure: no I/O. A plan is a list of steps; each step shows the exact radosgw-admin argv, S3
calls and librados operations it will run, so a dry run is the plan printed. The method
choice comes with its reasons, and with the reason each other method was not chosen.

Methods:

``direct``
    Whole bucket, unversioned, single zone. Objects proven head-only (all their data in the
    head ``<marker>_<key>``: size within the head chunk, single-part ETag, and the head's RADOS
    size equal to the object's size) are removed with librados aio, many in flight; every
    other object (tails, multipart) goes through RGW (S3 DeleteObjects), whose GC drops tail
    references properly, so tails shared with copies in other buckets survive (tracker 73348).
    Then the index shards are removed (as ``bi purge`` does), the bucket's metadata dropped with
    ``radosgw-admin metadata rm`` and the owner's stats resynced.
``s3``
    List once; S3 DeleteObjects in 1000-key batches, several in flight (versions and delete
    markers too on versioned buckets); abort incomplete uploads; process GC so space returns.
``admin-purge`` / ``admin-purge-bypass-gc``
    ``radosgw-admin bucket rm --purge-objects [--bypass-gc] [--max-concurrent-ios N]``. With
    --bypass-gc only after a read-only proof that no object has tails (tracker 73348).
``lifecycle``
    An S3 lifecycle rule run now with ``radosgw-admin lc process --bucket``, then the bucket's
    previous rules put back.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import math
import shlex
from urllib.parse import urlencode
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Callable, ClassVar, Mapping, Sequence, TypeVar

from rgwkeeper.adapters import radosgw_admin as rgwa
from rgwkeeper.adapters.adminapi import AdminApi
from rgwkeeper.errors import CephError, RgwkeeperError, UsageError
from rgwkeeper.names import validate_bucket, validate_prefix
from rgwkeeper.lifecycle import DAY_S, LC_ONE_BUCKET_RELEASES, purge_rule
from rgwkeeper.purge.layout import XATTR_THREADS
from rgwkeeper.purge.profile import BucketProfile
from rgwkeeper.purge.scope import PrefixScope, RgwClock, iso_utc
from rgwkeeper.releases import RELEASES, behaviour
from rgwkeeper.units import MAX_BYTES, MAX_DURATION_S, check_number, empty_size_range, human_bytes

METHODS = ("auto", "direct", "s3", "admin-purge", "admin-purge-bypass-gc", "lifecycle")
#: Methods whose requests rgwkeeper sends itself, so purge.max_objects_per_second can hold them;
#: radosgw-admin bucket rm and lc process run at RGW's own pace.
RATE_CAPPED_METHODS = ("direct", "s3")


def rate_cap_for(method: str, cap: float) -> float:
    """The cap a purge by ``method`` holds: ``cap``, or 0 where RGW sets the pace."""
    return cap if method in RATE_CAPPED_METHODS else 0.0

#: How the direct method drops the bucket once its heads are gone, by release: "empty-index"
#: empties each index shard in place and has RGW delete the then empty bucket (S3 DeleteBucket),
#: on every verified release since 2026-11-28 (from Tentacle `metadata rm bucket.instance:...`
#: reads the instance and removes nothing: ceph PR 53799; RGWBucketInstanceMetadataHandler::remove
#: in src/rgw/driver/rados/rgw_bucket.cc). "metadata-rm" (remove the index shards, then `metadata
#: rm` the entrypoint and the instance: Pacific's and Reef's drop before that) is kept for plans
#: saved then, which resume with it. docs/purge.md, "Dropping the bucket".
DIRECT_DROP = {r.name: r.direct_drop for r in RELEASES.values() if r.direct_drop is not None}

#: Releases on which the head object naming (<marker>_<key>, locator for keys starting
#: with "_") and the bucket drop of the direct method were checked against a real cluster
#: (16.2.15, 18.2.7 and 20.2.4: the release matrix of tests/integration/test_purge.py). Elsewhere
#: the planner falls back to S3 and says why.
DIRECT_VERIFIED_RELEASES = tuple(DIRECT_DROP)

#: Releases whose purge methods bench/purge has compared side by side (docs/purge.md, "Measured").
BENCHED_RELEASES = ("pacific", "reef", "tentacle")


class NotNow(RgwkeeperError):
    """The bucket cannot be purged safely at the moment (e.g. it is being resharded); retry later."""


@dataclass(frozen=True)
class PurgeRequest:
    """What the operator (or the daemon) asked for."""

    bucket: str
    prefix: str | None = None
    older_than_s: float | None = None  # only objects last modified more than this long ago
    larger_than: int | None = None  # bytes, strictly larger
    smaller_than: int | None = None  # bytes, strictly smaller
    method: str = "auto"

    def __post_init__(self) -> None:
        validate_bucket(self.bucket)
        if self.prefix is not None:
            validate_prefix(self.prefix)
        if self.method not in METHODS:
            raise UsageError(f"unknown method {self.method!r}; choose one of {', '.join(METHODS)}")
        _check_filters(self)

    @property
    def whole_bucket(self) -> bool:
        return self.prefix is None and self.older_than_s is None and self.larger_than is None \
            and self.smaller_than is None

    def key(self) -> str:
        """Identity of the request for checkpoints: the same command resumes the same plan."""
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:12]

    def describe(self) -> str:
        parts = [f"prefix {self.prefix!r}" if self.prefix else "whole bucket"]
        if self.older_than_s is not None:
            parts.append(f"older than {_duration(self.older_than_s)}")
        if self.larger_than is not None:
            parts.append(f"larger than {self.larger_than} B")
        if self.smaller_than is not None:
            parts.append(f"smaller than {self.smaller_than} B")
        return ", ".join(parts)


def _check_filters(r: PurgeRequest) -> None:
    """The filters as numbers, for callers of the Python API (the CLI's parsers check the text):
    a NaN cutoff would match every object, so nothing non-finite or out of range gets through."""
    if r.older_than_s is not None:
        check_number(r.older_than_s, "older_than_s", lo=0, hi=MAX_DURATION_S, unit=" s")
        if r.older_than_s == 0:
            raise UsageError("older_than_s must be above 0 s")
    for name, lo in (("larger_than", 0), ("smaller_than", 1)):  # smaller than 0 B: nothing
        if getattr(r, name) is not None:
            check_number(getattr(r, name), name, lo=lo, hi=MAX_BYTES, integer=True, unit=" bytes")
    empty = empty_size_range(r.larger_than, r.smaller_than)
    if empty:
        raise UsageError(empty)


DIRECT_LISTINGS = ("s3", "index")
#: Index shards an index listing reads at once (lister.IndexLister).
SHARDS_AT_ONCE = 4


#: At most about this many key-range items in one purge: a bigger bucket gets bigger ranges.
MAX_RANGES = 5000


@dataclass(frozen=True)
class Tuning:
    """Concurrency and timeouts (from ``[purge]`` in the config)."""

    s3_batches_in_flight: int = 8
    rados_ops_in_flight: int = 256
    max_concurrent_ios: int | None = None
    long_timeout_s: float = 21600.0
    list_page_size: int = 1000  # keys per listing page; a checkpoint follows each finished page
    #: The rate cap the run holds (0: none) and the objects each of its requests carries
    #: (execute.Settings and pacing.RateCap enforce them; here they are for the dry run).
    max_objects_per_second: float = 0.0
    cap_objects_per_request: int = 0
    #: Under the cap, the most librados operations in flight (purge.cap_ops_in_flight; for the dry run).
    cap_ops_in_flight: int = 1
    #: How the direct method lists: "s3" (ListObjectsV2) or "index" (the index shards, librados).
    #: Part of the plan, so a resumed purge lists as it started (its cursor is that listing's).
    direct_listing: str = "s3"
    #: Keys per key-range work item cut from a huge index shard (0: shards are never cut).
    range_entries: int = 0

    def __post_init__(self) -> None:
        if self.direct_listing not in DIRECT_LISTINGS:
            raise UsageError(f"direct_listing must be one of {', '.join(DIRECT_LISTINGS)}, got {self.direct_listing!r}")
        if isinstance(self.range_entries, bool) or not isinstance(self.range_entries, int) or self.range_entries < 0:
            raise UsageError(f"range_entries must be a whole number of keys, 0 or more, got {self.range_entries!r}")
        check_number(self.cap_ops_in_flight, "cap_ops_in_flight", lo=1, integer=True)

    def head_ops_in_flight(self) -> int:
        """librados operations in flight on the direct path: under a cap, at most its own most."""
        if self.max_objects_per_second > 0:
            return min(self.rados_ops_in_flight, self.cap_ops_in_flight)
        return self.rados_ops_in_flight

    def range_size(self, p: BucketProfile) -> int:
        """Keys per range: ``range_entries``, or more for a bucket so large that its ranges would
        be more than MAX_RANGES items (every take reads the whole board)."""
        return max(self.range_entries, -(-p.num_objects // MAX_RANGES))

    def cuts_shards(self, p: BucketProfile) -> bool:
        """Whether the shards' items cut key ranges: the index shards are expected to hold at
        least twice the range size each (RGW spreads keys evenly over them), and no rate cap:
        under one a process works one item at a time and no other may join, so nobody would
        take the ranges, and cutting would list a whole shard ahead for nothing."""
        shards = len(p.index_shards) if p.index_gen is not None else 0
        return (self.range_entries > 0 and shards > 0 and self.max_objects_per_second <= 0
                and p.num_objects >= 2 * self.range_size(p) * shards)

    def cut_calls(self, p: BucketProfile) -> tuple[str, ...]:
        """The listing ahead that cuts key ranges, for the dry run's calls (none if not cut)."""
        if not self.cuts_shards(p):
            return ()
        return (f"librados {p.index_pool}: omap keys only of {_span(p.index_shards)}, {self.list_page_size} a "
                f"call, each shard by the worker that takes it; every {self.range_size(p):,} keys, a range item "
                "written with the shard's cursor (omap_cmp on its lease)",)

    def items_listing(self, p: BucketProfile) -> str:
        """How a listing by index shard is cut into work items, for the plan's text."""
        cut = (f"; each shard, expected to hold about {p.num_objects // len(p.index_shards):,} entries, is cut "
               f"into ranges of {self.range_size(p):,} keys by the worker that takes it, each range a work item "
               "of its own" if self.cuts_shards(p) else "")
        return (f"list the {len(p.index_shards)} index shards with librados, each shard a work item kept in "
                f"RADOS (several at once, any admin node may join){cut}")

    def capped(self, what: str) -> str:
        """`` (under the cap of R objects/s: <what> of N)`` or nothing."""
        if self.max_objects_per_second <= 0:
            return ""
        return f" (under the cap of {self.max_objects_per_second:g} objects/s: {what} of {self.cap_objects_per_request})"


Argv = tuple[str, ...]  # a radosgw-admin argv tail (rgwkeeper.adapters.radosgw_admin builds them)


@dataclass(frozen=True)
class Scope:
    """Which objects a step reaches: under a prefix, last modified before a cutoff (epoch
    seconds, on RGW's clock), within a size range (bytes, strict). Empty: every object."""

    prefix: str | None = None
    cutoff_s: float | None = None
    larger_than: int | None = None
    smaller_than: int | None = None

    @property
    def filtered(self) -> bool:
        """An age or size filter decided from a listing (a key written since may no longer match)."""
        return self.cutoff_s is not None or self.larger_than is not None or self.smaller_than is not None

    def matches(self, entry: Mapping[str, Any]) -> bool:
        """Does a listing entry (or a HEAD's LastModified and Size) fall in the scope's filters?"""
        # The listing asked for the prefix already; a destructive path checks it once more.
        key = entry.get("Key")
        if self.prefix and key is not None and not key.startswith(self.prefix):
            return False
        if self.cutoff_s is not None and entry["LastModified"].timestamp() >= self.cutoff_s:
            return False
        size = entry.get("Size")
        if (self.larger_than is not None or self.smaller_than is not None) and size is None:
            return False  # a delete marker has no size: a size filter leaves it alone
        if self.larger_than is not None and size <= self.larger_than:
            return False
        if self.smaller_than is not None and size >= self.smaller_than:
            return False
        return True


EVERYTHING = Scope()


@dataclass(frozen=True, kw_only=True)
class Step:
    """One step of a plan: what it does (``summary``) and every call it makes, as shown in the
    dry run. One subclass per kind, with its parameters as typed fields; the executor
    dispatches on the class (``execute.STEP_HANDLERS``)."""

    kind: ClassVar[str] = ""
    summary: str
    calls: tuple[str, ...] = ()  # S3 and librados calls, as they will be made

    @property
    def admin(self) -> tuple[Argv, ...]:
        """The radosgw-admin argv tails the step runs, in this order."""
        return ()

    def to_dict(self) -> dict[str, Any]:
        params: dict[str, Any] = {}
        for f in fields(self):
            if f.name in ("summary", "calls"):
                continue
            value = getattr(self, f.name)
            if isinstance(value, Scope):
                params.update(asdict(value))  # flat: prefix, cutoff_s, larger_than, smaller_than
            elif f.name in self._argv_fields():
                params[f.name] = list(value) if value is not None else None
            else:
                params[f.name] = value
        return {"kind": self.kind, "summary": self.summary, "admin": [list(a) for a in self.admin],
                "calls": list(self.calls), "params": params}

    @classmethod
    def _argv_fields(cls) -> tuple[str, ...]:
        """The step's radosgw-admin argv fields, in the order they run (and were once stored)."""
        return ()

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> "Step":
        try:
            cls = STEP_TYPES[d["kind"]]
        except KeyError:
            raise ValueError(f"unknown step kind {d.get('kind')!r}") from None
        params = dict(d.get("params") or {})
        argvs = cls._argv_fields()
        if argvs and not all(n in params for n in argvs):
            # A checkpoint written before steps were typed kept only the argv list, in run order.
            legacy = [tuple(a) for a in d.get("admin", [])]
            params.update(cls._legacy_argvs(legacy, params))
        kw: dict[str, Any] = {}
        for f in fields(cls):
            if f.name in ("summary", "calls"):
                continue
            if f.name == "scope":
                kw["scope"] = Scope(**{k: params.get(k) for k in ("prefix", "cutoff_s", "larger_than",
                                                                   "smaller_than")})
            elif f.name in argvs:
                kw[f.name] = tuple(params[f.name]) if params.get(f.name) is not None else None
            elif f.name == "rules":
                kw["rules"] = tuple(params.get("rules") or ())
            elif f.name in params:
                kw[f.name] = params[f.name]
        return cls(summary=d["summary"], calls=tuple(d.get("calls", ())), **kw)

    @classmethod
    def _legacy_argvs(cls, admin: list[Argv], params: Mapping[str, Any]) -> dict[str, Any]:
        return dict(zip(cls._argv_fields(), admin))


@dataclass(frozen=True, kw_only=True)
class Fence(Step):
    """A bucket quota of 0 objects and 0 bytes: nothing new lands while the bucket is purged."""

    kind: ClassVar[str] = "fence"
    owner: str


@dataclass(frozen=True, kw_only=True)
class FreeWhileFull(Step):
    """On a full cluster: remove head-only objects with librados full-try, then wait for usage
    to fall below the full ratio for at most ``wait_s``."""

    kind: ClassVar[str] = "free_while_full"
    wait_s: float


@dataclass(frozen=True, kw_only=True)
class DropLifecycle(Step):
    kind: ClassVar[str] = "drop_lifecycle"


@dataclass(frozen=True, kw_only=True)
class AbortUploads(Step):
    kind: ClassVar[str] = "abort_uploads"
    scope: Scope = EVERYTHING


@dataclass(frozen=True, kw_only=True)
class DeleteObjects(Step):
    """List once and delete: ``direct`` removes proven head-only objects with librados and sends
    the rest to S3; ``s3`` sends everything to S3 DeleteObjects. ``recheck``: HEAD each key again
    right before its batch (the scope has an age or size filter)."""

    kind: ClassVar[str] = "delete_objects"
    scope: Scope = EVERYTHING
    strategy: str = "s3"  # "s3" | "direct"
    versions: bool = False
    recheck: bool = False
    #: direct: the placement rule whose objects with tails are released with librados (manifest,
    #: cls_refcount put, head); empty: they go through S3 (a plan from before, or a release
    #: where that was not verified: Release.direct_tails).
    tails_placement: str = ""

    def __post_init__(self) -> None:
        if self.strategy not in ("s3", "direct"):
            raise ValueError(f"delete_objects strategy {self.strategy!r}")


@dataclass(frozen=True, kw_only=True)
class GcProcess(Step):
    kind: ClassVar[str] = "gc_process"
    gc: Argv

    @property
    def admin(self) -> tuple[Argv, ...]:
        return (self.gc,)

    @classmethod
    def _argv_fields(cls) -> tuple[str, ...]:
        return ("gc",)


@dataclass(frozen=True, kw_only=True)
class DeleteBucket(Step):
    """S3 DeleteBucket of the emptied bucket, then the owner's stats resynced and GC run."""

    kind: ClassVar[str] = "delete_bucket"
    stats_sync: Argv
    gc: Argv

    @property
    def admin(self) -> tuple[Argv, ...]:
        return (self.stats_sync, self.gc)

    @classmethod
    def _argv_fields(cls) -> tuple[str, ...]:
        return ("stats_sync", "gc")


@dataclass(frozen=True, kw_only=True)
class DropBucket(Step):
    """The direct method's drop. ``through_rgw``: the index shards are emptied in place and RGW
    deletes the empty bucket (DIRECT_DROP "empty-index"); else the shards are removed and the
    entrypoint and instance dropped with ``metadata rm`` (``entry_rm``, ``instance_rm``)."""

    kind: ClassVar[str] = "drop_bucket"
    owner: str
    through_rgw: bool = False
    entry_rm: Argv | None = None
    instance_rm: Argv | None = None
    stats_sync: Argv
    gc: Argv

    def __post_init__(self) -> None:
        if self.through_rgw != (self.entry_rm is None and self.instance_rm is None) or \
                (self.entry_rm is None) != (self.instance_rm is None):
            raise ValueError("drop_bucket: metadata rm argvs go with through_rgw=False, and only with it")

    @property
    def admin(self) -> tuple[Argv, ...]:
        return tuple(a for a in (self.entry_rm, self.instance_rm, self.stats_sync, self.gc) if a is not None)

    @classmethod
    def _argv_fields(cls) -> tuple[str, ...]:
        return ("entry_rm", "instance_rm", "stats_sync", "gc")

    @classmethod
    def _legacy_argvs(cls, admin: list[Argv], params: Mapping[str, Any]) -> dict[str, Any]:
        if params.get("drop") == "empty-index":  # stored as {"drop": "empty-index"}, admin (sync, gc)
            return {"through_rgw": True, "entry_rm": None, "instance_rm": None,
                    **dict(zip(("stats_sync", "gc"), admin))}
        return dict(zip(cls._argv_fields(), admin))


@dataclass(frozen=True, kw_only=True)
class ProveHeadOnly(Step):
    """Read-only proof for --bypass-gc: no object has tails and no upload is pending."""

    kind: ClassVar[str] = "prove_head_only"
    scope: Scope = EVERYTHING


@dataclass(frozen=True, kw_only=True)
class AdminBucketRm(Step):
    kind: ClassVar[str] = "admin_bucket_rm"
    bucket_rm: Argv
    stats_sync: Argv

    @property
    def admin(self) -> tuple[Argv, ...]:
        return (self.bucket_rm, self.stats_sync)

    @classmethod
    def _argv_fields(cls) -> tuple[str, ...]:
        return ("bucket_rm", "stats_sync")


@dataclass(frozen=True, kw_only=True)
class LifecycleApply(Step):
    """Add the purge's expiration rule (``rules``, which carry the plan id) to the bucket's own."""

    kind: ClassVar[str] = "lifecycle_apply"
    prefix: str | None = None
    older_than_s: float | None = None
    rules: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True, kw_only=True)
class LcProcess(Step):
    kind: ClassVar[str] = "lc_process"
    lc: Argv

    @property
    def admin(self) -> tuple[Argv, ...]:
        return (self.lc,)

    @classmethod
    def _argv_fields(cls) -> tuple[str, ...]:
        return ("lc",)


@dataclass(frozen=True, kw_only=True)
class LifecycleRestore(Step):
    kind: ClassVar[str] = "lifecycle_restore"


@dataclass(frozen=True, kw_only=True)
class Verify(Step):
    """Read the end state back: the bucket gone (``whole_bucket``), or nothing in scope left."""

    kind: ClassVar[str] = "verify"
    scope: Scope = EVERYTHING
    whole_bucket: bool = False


STEP_TYPES: dict[str, type[Step]] = {c.kind: c for c in (
    Fence, FreeWhileFull, DropLifecycle, AbortUploads, DeleteObjects, GcProcess, DeleteBucket, DropBucket,
    ProveHeadOnly, AdminBucketRm, LifecycleApply, LcProcess, LifecycleRestore, Verify)}

_S = TypeVar("_S", bound=Step)


@dataclass(frozen=True)
class Plan:
    request: PurgeRequest
    profile: BucketProfile
    method: str
    reasons: tuple[str, ...]  # why this method
    rejected: tuple[tuple[str, str], ...]  # (method, why not)
    steps: tuple[Step, ...]
    cutoff_s: float | None  # absolute: objects modified before this (epoch seconds) are purged
    created_at: float
    tuning: Tuning
    clock: RgwClock | None = None  # the clock the age cutoff was taken on (with --older-than)
    prefix_scope: PrefixScope | None = None  # what the prefix matches besides one name (with --prefix)

    def step(self, kind: type[_S]) -> _S:
        """The plan's first step of this kind (a sweep runs it again)."""
        for s in self.steps:
            if isinstance(s, kind):
                return s
        raise LookupError(f"plan {self.plan_id} has no {kind.kind} step")

    def has(self, kind: type[Step]) -> bool:
        return any(isinstance(s, kind) for s in self.steps)

    @property
    def plan_id(self) -> str:
        return hashlib.sha256(f"{self.profile.bucket_id}/{self.request.key()}/{self.created_at}".encode()).hexdigest()[:12]

    def commands(self, argv_of: Callable[..., Sequence[str]] | None = None) -> list[str]:
        """Every command and call, in order, as it will run."""
        out = []
        for step in self.steps:
            out.extend(render_admin(a, argv_of) for a in step.admin)
            out.extend(step.calls)
        return out

    def show(self, argv_of: Callable[..., Sequence[str]] | None = None) -> list[str]:
        p = self.profile
        lines = [
            f"purge plan {self.plan_id}: bucket {p.bucket} (id {p.bucket_id}), {self.request.describe()}",
            f"  bucket: {p.num_objects:,} objects, {human_bytes(p.size_bytes)} (mean {human_bytes(p.mean_object_bytes)}), "
            f"{p.incomplete_uploads} incomplete uploads, versioning {p.versioning}, owner {p.owner}, "
            f"{p.num_shards} index shards, data pool {p.data_pool}",
            f"  cluster: ceph {p.version} ({p.release}), {p.zones} zone(s) in the zonegroup, "
            f"head chunk {human_bytes(p.head_chunk_bytes)}",
            *(f"  {n}" for n in self.notes()),
            f"method: {self.method}" + (" (chosen automatically)" if self.request.method == "auto" else " (asked for)"),
        ]
        lines += [f"  why: {r}" for r in self.reasons]
        lines += [f"  not {m}: {why}" for m, why in self.rejected]
        lines.append("steps:")
        for i, step in enumerate(self.steps, 1):
            lines.append(f"  {i}. {step.summary}")
            lines += [f"     $ {render_admin(a, argv_of)}" for a in step.admin]
            lines += [f"     > {c}" for c in step.calls]
        return lines

    def notes(self) -> list[str]:
        """What the filters reach, for the dry run and the confirmation: the clock the age is
        measured on, what the prefix matches, how a size filter applies."""
        out = []
        if self.cutoff_s is not None:
            out.append(f"age: objects last modified before {iso_utc(self.cutoff_s)}, on "
                       + (self.clock.describe() if self.clock else "this host's clock (RGW's was not read)"))
        if self.prefix_scope is not None:
            out += self.prefix_scope.describe()
        if self.request.larger_than is not None or self.request.smaller_than is not None:
            out.append("size: object by object (versioning off: a key has one version; refused on versioned "
                       "buckets, where it would bring an older version back)")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"plan_id": self.plan_id, "request": asdict(self.request), "profile": self.profile.to_dict(),
                "method": self.method, "reasons": list(self.reasons),
                "rejected": [list(r) for r in self.rejected], "steps": [s.to_dict() for s in self.steps],
                "cutoff_s": self.cutoff_s, "created_at": self.created_at, "tuning": asdict(self.tuning),
                "clock": self.clock.to_dict() if self.clock else None,
                "prefix_scope": self.prefix_scope.to_dict() if self.prefix_scope else None}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Plan":
        return cls(request=PurgeRequest(**d["request"]), profile=BucketProfile.from_dict(d["profile"]),
                   method=d["method"], reasons=tuple(d["reasons"]),
                   rejected=tuple((m, w) for m, w in d["rejected"]),
                   steps=tuple(Step.from_dict(s) for s in d["steps"]), cutoff_s=d["cutoff_s"],
                   created_at=d["created_at"], tuning=Tuning(**d["tuning"]),
                   clock=RgwClock.from_dict(d["clock"]) if d.get("clock") else None,
                   prefix_scope=PrefixScope.from_dict(d["prefix_scope"]) if d.get("prefix_scope") else None)


def render_admin(args: Sequence[str], argv_of: Callable[..., Sequence[str]] | None = None) -> str:
    return shlex.join(argv_of(*args) if argv_of else ["radosgw-admin", *args])


# -- the decision -------------------------------------------------------------------------------

def check_protected(bucket: str, patterns: Sequence[str]) -> None:
    for pat in patterns:
        if fnmatch.fnmatchcase(bucket, pat):
            raise UsageError(f"bucket {bucket!r} is protected (purge.protected_buckets pattern {pat!r}); "
                             "nothing was changed")


def s3_refused(exc: CephError) -> bool:
    """RGW refused rgwkeeper's S3 user (403: HeadBucket has no body to name it, other calls say
    AccessDenied): another user's bucket, reached without the admin flag (docs/cluster-access.md)."""
    return exc.detail in ("403", "AccessDenied")


def no_s3_access(bucket: str, owner: str, call: str, other_way: str = "") -> UsageError:
    """The one line for a bucket rgwkeeper's RGW user may not reach through S3 (s3_refused)."""
    return UsageError(f"rgwkeeper's RGW user may not reach bucket {bucket!r} through S3 ({call}: 403; its owner is "
                      f"{owner!r}): give that user the admin flag (radosgw-admin user modify --uid <its uid> --admin)"
                      f"{other_way}; nothing was changed")


def listable_by_index(p: BucketProfile) -> bool:
    """Whether an s3 purge may list ``p`` by index shard: plain entries in a known index (not
    versioned, not indexless, the index generation known)."""
    return p.versioning == "off" and not p.indexless and p.index_gen is not None


def refusal(method: str, profile: BucketProfile, request: PurgeRequest) -> str | None:
    """Why ``method`` must not be used here, or None if it may."""
    p = profile
    if method == "direct":
        if not request.whole_bucket:
            return ("it removes heads and then drops the whole bucket index; a partial purge would leave "
                    "index entries without heads")
        if p.versioning != "off":
            return (f"versioning is {p.versioning}: versions live behind an object logical head (OLH) in "
                    "the index, which only RGW keeps consistent")
        if p.zones > 1:
            return (f"the zonegroup has {p.zones} zones: RADOS removals are not replicated (no bucket index "
                    "log entries), so other zones would keep the objects")
        if p.indexless:
            return "the bucket is indexless: there is no index to list heads from"
        if p.index_gen is None:
            return (f"its index shards were not found under exactly one index generation (.dir.{p.bucket_id}"
                    ".<gen>.<shard>), so the drop could not name them all")
        if p.release not in DIRECT_VERIFIED_RELEASES:
            return (f"the RADOS head layout and metadata removal were verified on "
                    f"{', '.join(DIRECT_VERIFIED_RELEASES)} only; this cluster runs {p.release}")
        return None
    if method in ("admin-purge", "admin-purge-bypass-gc"):
        if not request.whole_bucket:
            return "radosgw-admin bucket rm removes whole buckets only"
        if method == "admin-purge-bypass-gc" and p.versioning != "off":
            return ("--bypass-gc deletes tail objects without their reference counts (tracker 73348); "
                    "on a versioned bucket there is no cheap proof that no version has shared tails")
        return None
    if method == "lifecycle":
        if p.release not in LC_ONE_BUCKET_RELEASES:
            return (f"radosgw-admin lc process cannot run one bucket on {p.release} (it ignores --bucket and "
                    "runs the first bucket of each lifecycle shard; tracker 53430, fixed in Quincy): use "
                    "--method s3, or `rgwkeeper expire` to leave it to RGW's lifecycle worker")
        if request.older_than_s is not None and (request.older_than_s % DAY_S or request.older_than_s < DAY_S):
            return "lifecycle counts whole days: give --older-than as a whole number of days (Nd)"
        if request.larger_than is not None or request.smaller_than is not None:
            # The purge's one-off rule (lifecycle.purge_rule) is a prefix and an age only: with a
            # size filter it would expire every object under the prefix.
            return ("the lifecycle method's rule carries no size filter (it would expire every object under "
                    "the prefix): use --method s3, or `rgwkeeper expire --larger-than/--smaller-than` on Tentacle")
        if request.whole_bucket and p.versioning != "off":
            return ("on a versioned bucket expiration only adds delete markers; noncurrent versions go at "
                    "the earliest a day later")
        return None
    return None


def versioned_size_filter_refusal(profile: BucketProfile, request: PurgeRequest) -> str | None:
    """A size filter picks versions one by one: on a versioned (or suspended) bucket it would
    delete a large current version and keep an older small one, and the key would serve that
    old data again (docs/purge.md, "Filters"). Refused for every method."""
    if profile.versioning == "off" or (request.larger_than is None and request.smaller_than is None):
        return None
    return (f"--larger-than/--smaller-than refused: bucket {profile.bucket!r} has versioning "
            f"{profile.versioning}, and a size filter deletes versions one by one, so a key whose large "
            "current version goes would show an older version again; purge by --prefix/--older-than "
            "(every version), or use a lifecycle rule; nothing was changed")


def choose(profile: BucketProfile, request: PurgeRequest) -> tuple[str, list[str], list[tuple[str, str]]]:
    """(method, reasons, rejected) for ``request.method == "auto"``."""
    p = profile
    rejected: list[tuple[str, str]] = []
    unbenched = ("" if p.release in BENCHED_RELEASES else
                 f" (compared on {', '.join(BENCHED_RELEASES)}; not on {p.release})")
    if request.whole_bucket:
        why_not_direct = refusal("direct", p, request)
        if why_not_direct is None and p.mean_object_bytes > p.head_chunk_bytes and not behaviour(p.release).direct_tails:
            why_not_direct = (f"the mean object size {human_bytes(p.mean_object_bytes)} is above the head chunk "
                              f"{human_bytes(p.head_chunk_bytes)}: most objects have tails, which must go "
                              "through RGW anyway")
        admin_why = ("radosgw-admin bucket rm --purge-objects removes objects one at a time in one process: "
                     f"slower than S3 batches in every comparison (docs/purge.md, \"Measured\"){unbenched}")
        bypass_why = ("--bypass-gc deletes tails without their reference counts, which destroys copies in other "
                      "buckets on releases without the fix of tracker 73348; used only when asked for")
        if why_not_direct is None:
            tails_reason = (
                "objects with tails and multipart objects are removed with librados too: each head's manifest "
                "names its tails, and each tail loses this object's reference by cls_refcount put, as RGW's GC "
                "does, so tails shared with copies in other buckets keep theirs (tracker 73348); incomplete "
                "uploads, and any object whose manifest it does not read, go through RGW"
                if behaviour(p.release).direct_tails else
                "objects with tails, multipart objects and incomplete uploads still go through RGW "
                "(S3 DeleteObjects + GC), so tails shared with copies in other buckets keep their "
                "references (tracker 73348)")
            reasons = [
                f"{p.num_objects:,} objects of mean size {human_bytes(p.mean_object_bytes)} (head chunk "
                f"{human_bytes(p.head_chunk_bytes)}): "
                + ("head-only objects" if p.mean_object_bytes > p.head_chunk_bytes else
                   "most are head-only, and head-only objects")
                + " are removed directly from the data pool with librados, close to the RADOS removal floor "
                "instead of RGW's per-request cost",
                tails_reason,
                "single zone, versioning off, release verified: the bucket index and metadata can be "
                "dropped after the heads are gone",
            ]
            rejected += [("s3", "RGW's per-request CPU limits it far below the RADOS removal floor "
                                f"(docs/purge.md, \"Measured\"){unbenched}"),
                         ("admin-purge", admin_why), ("admin-purge-bypass-gc", bypass_why)]
            return "direct", reasons, rejected
        reasons = ["S3 DeleteObjects in 1000-key batches, several in flight, then GC processed: the fastest "
                   f"safe stock path in every comparison{unbenched}, and tails keep their reference counts"]
        rejected += [("direct", why_not_direct), ("admin-purge", admin_why), ("admin-purge-bypass-gc", bypass_why)]
        return "s3", reasons, rejected
    reasons = ["a listing filtered exactly (prefix, age to the second, size), deleted with S3 DeleteObjects "
               "batches; checkpointed, so an interrupted run resumes"]
    rejected.append(("direct", refusal("direct", p, request) or ""))
    rejected.append(("lifecycle", refusal("lifecycle", p, request) or
                     "runs at RGW's own pace inside lc process; chosen only when asked (--method lifecycle)"))
    return "s3", reasons, rejected


def plan(profile: BucketProfile, request: PurgeRequest, *, tuning: Tuning = Tuning(),
         protected: Sequence[str] = (), now: float, clock: RgwClock | None = None,
         prefix_scope: PrefixScope | None = None) -> Plan:
    """Decide how to purge; raise UsageError (refused) or NotNow (retry later).

    ``now`` is the time on the clock that stamped the objects: ``clock.rgw_s`` when RGW's
    clock was read (:mod:`rgwkeeper.purge.scope`)."""
    p = profile
    check_protected(p.bucket, protected)
    if p.bucket != request.bucket:
        raise ValueError("profile and request name different buckets")
    if p.object_lock:
        raise UsageError(f"bucket {p.bucket!r} has S3 Object Lock enabled: purging it would break retention; "
                         "nothing was changed")
    size_refusal = versioned_size_filter_refusal(p, request)
    if size_refusal is not None:
        raise UsageError(size_refusal)
    if p.resharding:
        raise NotNow(f"bucket {p.bucket!r} is being resharded; retry when `radosgw-admin reshard status` "
                     "shows it done")
    if request.method == "auto":
        method, reasons, rejected = choose(p, request)
    else:
        why = refusal(request.method, p, request)
        if why is not None:
            raise UsageError(f"method {request.method} cannot purge {p.bucket!r}: {why}; nothing was changed")
        method, reasons, rejected = request.method, ["asked for with --method"], []
    # Whole seconds, rounded down: RGW's HEAD gives Last-Modified in whole seconds, and a key
    # written again just after a fractional cutoff would HEAD as older than it (docs/purge.md,
    # "Filters: what they reach").
    cutoff = float(math.floor(now - request.older_than_s)) if request.older_than_s is not None else None
    steps = _steps(method, p, request, tuning, cutoff)
    draft = Plan(request=request, profile=p, method=method, reasons=tuple(reasons), rejected=tuple(rejected),
                 steps=(), cutoff_s=cutoff, created_at=now, tuning=tuning, clock=clock, prefix_scope=prefix_scope)
    # The lifecycle rule's ID carries the plan id, which depends on everything else.
    steps = [_with_plan_id(s, draft.plan_id) for s in steps]
    return Plan(**{**draft.__dict__, "steps": tuple(steps)})


def free_first(plan: Plan, wait_s: float) -> Plan:
    """The direct plan for a full cluster: first remove head-only objects with librados
    full-try (removals free space while RGW's own writes wait), then wait up to ``wait_s`` for
    usage to fall below the full ratio; the usual steps follow (docs/purge.md, "Full cluster")."""
    if plan.method != "direct":
        raise ValueError("only the direct method can free space on a full cluster without RGW")
    p = plan.profile
    step = FreeWhileFull(summary="the cluster is full: remove head-only objects directly with librados full-try (what `rados rm "
                "--force-full` does), then wait for usage to fall below the full ratio before anything that needs "
                "RGW to write; if it does not, stop here (rerun with --raise-full-ratio R to finish)",
                calls=(f"S3 ListObjectsV2 bucket={p.bucket} MaxKeys={plan.tuning.list_page_size}",
                       f"librados {p.data_pool} (full-try): stat {p.marker}_<key> of head-only objects and remove "
                       "each whose size equals the object's",
                       f"ceph health detail / osd dump / osd df every few seconds, for at most {wait_s:.0f} s: "
                       "OSD_FULL and POOL_FULL gone"),
                wait_s=wait_s)
    return Plan(**{**plan.__dict__, "steps": (step, *plan.steps)})


def _with_plan_id(step: Step, plan_id: str) -> Step:
    if not isinstance(step, LifecycleApply):
        return step
    rules = purge_rule(step.prefix, step.older_than_s, plan_id)
    return replace(step, rules=tuple(rules),
                   calls=(f"S3 GetBucketLifecycleConfiguration, then PutBucketLifecycleConfiguration with the "
                          f"bucket's rules plus {json.dumps(rules)}",))


def _steps(method: str, p: BucketProfile, r: PurgeRequest, t: Tuning, cutoff: float | None) -> list[Step]:
    b = p.bucket
    marker = p.marker
    scope = Scope(r.prefix, cutoff, r.larger_than, r.smaller_than)
    listing = "ListObjectVersions" if p.versioning != "off" else "ListObjectsV2"
    quota = AdminApi.bucket_quota_params(p.owner, b, max_objects=0, max_size_kb=0, enabled=True)
    fence = Fence(summary="fence writes: a bucket quota of 0 objects and 0 bytes, so nothing new lands in "
                 "the bucket while it is purged (RGW answers QuotaExceeded at once; deletes still work)",
                  calls=(f"admin API PUT /admin/bucket?{urlencode(quota)}",), owner=p.owner)
    aborts = AbortUploads(summary="abort incomplete multipart uploads" + (f" under {r.prefix!r}" if r.prefix else "")
                  + (" started before the cutoff" if cutoff else "") + " (their parts go to GC)",
                  calls=(f"S3 ListMultipartUploads bucket={b}" + (f" prefix={r.prefix}" if r.prefix else "")
                         + ", then AbortMultipartUpload for each",), scope=scope)
    gc = GcProcess(summary=_GC_WHEN_NEEDED[0].upper() + _GC_WHEN_NEEDED[1:], calls=(_gc_when_needed_call(p),),
                   gc=rgwa.gc_process_args(include_all=True))
    verify = Verify(summary="read the end state back" + (
        ": bucket gone, its index shards and RADOS objects gone from the pools (tails still referenced by "
        "copies elsewhere are kept and named), no GC entries left, owner's stats synced"
        if r.whole_bucket else ": nothing matching left under the prefix (objects, versions, uploads)"),
        calls=_verify_calls(p, r), scope=scope, whole_bucket=r.whole_bucket)
    # An age or size filter decided from the listing: a key written again since then (unversioned,
    # or the "null" version of a suspended bucket) is another object, which the filter may not
    # match. Each such key is HEADed again right before its batch (RGW's lifecycle re-checks the
    # mtime the same way); a listed version id of a versioned bucket names immutable data.
    filtered = scope.filtered
    # Listing by index shard needs plain entries: a versioned bucket's versions live behind OLH
    # entries that only RGW lists (docs/purge.md, "Listing by index shard").
    s3_items = t.direct_listing == "index" and listable_by_index(p)
    s3_listing = t.items_listing(p) if s3_items else f"list once ({listing})"
    s3_delete = DeleteObjects(
        summary=f"{s3_listing}, delete in 1000-key S3 DeleteObjects batches, {t.s3_batches_in_flight} in flight"
        + t.capped("batches") + (" (every version and delete marker)" if p.versioning != "off" else ""),
        calls=(*(t.cut_calls(p) if s3_items else ()),
               (f"librados {p.index_pool}: omap list {_span(p.index_shards)}" + (f" from {r.prefix!r}" if r.prefix else "")
                + f", {t.list_page_size} entries a page (plain entries of existing objects)") if s3_items else
               f"S3 {listing} bucket={b}" + (f" prefix={r.prefix}" if r.prefix else "") + f" MaxKeys={t.list_page_size}",
               *((f"S3 HeadObject bucket={b} of each match just before its batch (versionId=null where "
                    "listed so): a key written again since the listing that no longer matches (newer, another size) is kept",)
                 if filtered else ()),
               f"S3 DeleteObjects bucket={b} Quiet=true, up to 1000 keys each, {t.s3_batches_in_flight} in flight"),
        scope=scope, strategy="s3", versions=p.versioning != "off", recheck=filtered)
    delete_bucket = DeleteBucket(summary="delete the now empty bucket (RGW unlinks it from its owner), then, at "
                         "the same time, resync the owner's stats (DeleteBucket leaves them as they were) and "
                         "process GC including entries not yet due (rgw_gc_obj_min_wait is 2 h by default), so "
                         "the tails' space really comes back",
                                 stats_sync=rgwa.user_stats_sync_args(p.owner),
                                 gc=rgwa.gc_process_args(include_all=True),
                                 calls=(f"S3 DeleteBucket bucket={b}", _stats_sync_call(p.owner)))
    steps: list[Step] = []
    if method == "direct":
        steps.append(fence)
        if p.has_lifecycle:
            steps.append(DropLifecycle(summary="remove the bucket's lifecycle configuration first, so RGW's "
                                       "lifecycle list keeps no entry for a bucket that is about to be gone",
                                       calls=(f"S3 DeleteBucketLifecycle bucket={b}",)))
        steps.append(aborts)
        by_index = t.direct_listing == "index"
        listing = t.items_listing(p) if by_index else "list once (ListObjectsV2)"
        tails = p.placement_rule.split("/")[0] if behaviour(p.release).direct_tails else ""
        tail_calls = (
            f"librados {p.data_pool}: for the others, read {marker}_<key>'s xattrs ({XATTR_THREADS} at once); "
            f"where its manifest names tails in placement {tails!r}: cls_refcount put on each tail with the "
            "head's user.rgw.tail_tag (what RGW's GC does: a tail a copy still references stays), then "
            f"remove the head ({t.head_ops_in_flight()} ops in flight)",) if tails else ()
        steps.append(DeleteObjects(
            summary=f"{listing}; remove head-only objects from {p.data_pool} with librados "
            f"({t.head_ops_in_flight()} ops in flight); "
            + ("objects with tails too: each tail's reference dropped as RGW's GC drops it, then the head; "
               "anything else" if tails else "everything else")
            + f" with S3 DeleteObjects ({t.s3_batches_in_flight} batches in flight)" + t.capped("requests"),
            calls=(*(t.cut_calls(p) if by_index else ()),
                   (f"librados {p.index_pool}: omap list {_span(p.index_shards)}, {t.list_page_size} entries a "
                    "page (plain entries of existing objects)") if by_index else
                   f"S3 ListObjectsV2 bucket={b} MaxKeys={t.list_page_size}",
                   f"librados {p.data_pool}: stat {marker}_<key> for objects of at most "
                   f"{p.head_chunk_bytes} B with a single-part ETag; remove it where its size equals the "
                   "object's (all data in the head: no tail to share)",
                   *tail_calls,
                   f"S3 DeleteObjects bucket={b} Quiet=true for the {'rest' if tails else 'others'} (tails go "
                   "to GC with their reference counts)"),
            scope=scope, strategy="direct", versions=False, tails_placement=tails))
        shards = p.index_shards
        drop = DropBucket(
            summary="drop the bucket: its index shards (only entries of removed heads are left), then its entrypoint "
            "(which unlinks it from the owner) and instance, then resync the owner's stats; meanwhile " + _GC_WHEN_NEEDED,
            entry_rm=rgwa.metadata_rm_args(f"bucket:{b}"),
            instance_rm=rgwa.metadata_rm_args(f"bucket.instance:{b}:{p.bucket_id}"),
            stats_sync=rgwa.user_stats_sync_args(p.owner), gc=rgwa.gc_process_args(include_all=True),
            calls=(_drop_count_check(p),
                   f"librados {p.index_pool}: remove {shards[0]}" + (f" .. {shards[-1]}" if len(shards) > 1 else "")
                   + " (what radosgw-admin bi purge does, without a process per call)", _stats_sync_call(p.owner),
                   _gc_when_needed_call(p)),
            owner=p.owner)
        steps.append(_empty_index_drop(p, shards) if DIRECT_DROP.get(p.release) == "empty-index" else drop)
    elif method == "s3":
        if r.whole_bucket:
            steps.append(fence)
        steps += [aborts, s3_delete]
        steps.append(delete_bucket if r.whole_bucket else gc)
    elif method in ("admin-purge", "admin-purge-bypass-gc"):
        bypass = method == "admin-purge-bypass-gc"
        if bypass:
            # The proof comes first: it only reads, so a refusal leaves everything as it was.
            steps.append(ProveHeadOnly(
                summary="read-only proof that no object has tails and no upload is pending: "
                "--bypass-gc deletes tails without their reference counts (tracker 73348)",
                calls=(f"S3 ListObjectsV2 bucket={b}; librados stat {marker}_<key>: size must equal the "
                       "object's; S3 ListMultipartUploads must be empty",),
                scope=scope))
            steps.append(fence)
        steps.append(AdminBucketRm(
            summary="remove the bucket and its objects inside radosgw-admin"
            + (" (tails removed at once, bypassing GC)" if bypass else "") + "; it exits 0 even when the "
            "bucket does not exist, so the end state is read back; then resync the owner's stats",
            bucket_rm=rgwa.bucket_rm_args(b, purge_objects=True, bypass_gc=bypass,
                                          max_concurrent_ios=t.max_concurrent_ios),
            stats_sync=rgwa.user_stats_sync_args(p.owner), calls=(_stats_sync_call(p.owner),)))
        if not bypass:
            steps.append(gc)
    elif method == "lifecycle":
        if r.whole_bucket:
            steps.append(fence)
        steps.append(aborts)
        steps.append(LifecycleApply(summary="add an expiration rule for what is to be purged to the bucket's "
                          "lifecycle configuration (its other rules are kept); if the purge stops for any "
                          f"reason (an error, a timeout, Ctrl-C, SIGTERM) before step {len(steps) + 3} is done, "
                          "the previous rules are put back at once",
                                    prefix=r.prefix, older_than_s=r.older_than_s))
        steps.append(LcProcess(summary="run lifecycle for this bucket now instead of waiting for "
                               "rgw_lifecycle_work_time", lc=rgwa.lc_process_args(b)))
        steps.append(LifecycleRestore(summary="put the bucket's previous lifecycle configuration back",
                                      calls=("S3 PutBucketLifecycleConfiguration with the rules read before (or "
                                 "DeleteBucketLifecycle if there were none)",)))
        steps.append(delete_bucket if r.whole_bucket else gc)
    else:  # pragma: no cover - METHODS is checked in PurgeRequest
        raise ValueError(method)
    steps.append(verify)
    return steps


#: Every GC run of a purge (execute.PurgeExecutor._gc_if_the_bucket_has_entries): the direct drop's and
#: the GcProcess step's.
_GC_WHEN_NEEDED = ("if objects went through S3 or uploads were aborted, process GC, including entries not yet due "
              "(rgw_gc_obj_min_wait is 2 h by default), so tails' space really comes back; else run it only if "
              "GC lists entries holding objects of the bucket (`gc process --include-all` processes every "
              "bucket's entries early)")


def _gc_list_call(p: BucketProfile) -> str:
    """How a purge lists GC (profile.gc_entries)."""
    if not (p.gc_pool and p.gc_objects > 0):
        return "radosgw-admin gc list --include-all"
    pool, _, ns = p.gc_pool.partition(":")
    return (f"librados {pool}" + (f" namespace {ns}" if ns else "") + f": gc.{p.gc_objects} must not exist, then "
            f"exec rgw_gc.rgw_gc_queue_list_entries and rgw.gc_list on gc.0 .. gc.{p.gc_objects - 1}, including "
            "entries not yet due (radosgw-admin gc list --include-all if that read fails)")


def _gc_when_needed_call(p: BucketProfile) -> str:
    return (_gc_list_call(p) + ", unless objects went through S3 or uploads were aborted: the gc process above "
            "runs only if it lists entries holding objects of the bucket")


def _empty_index_drop(p: BucketProfile, shards: Sequence[str]) -> DropBucket:
    """The direct method's drop where `metadata rm` keeps the bucket instance (DIRECT_DROP)."""
    return DropBucket(
        summary="drop the bucket: empty its index shards in place (only entries of removed heads are left), then "
        "delete the empty bucket through RGW, which unlinks it from the owner and removes its entrypoint, "
        "instance and index shards, then "
        "resync the owner's stats; meanwhile " + _GC_WHEN_NEEDED,
        stats_sync=rgwa.user_stats_sync_args(p.owner), gc=rgwa.gc_process_args(include_all=True),
        calls=(_drop_count_check(p),
               f"librados {p.index_pool}: on {shards[0]}" + (f" .. {shards[-1]}" if len(shards) > 1 else "")
               + ", one write op each: clear the omap, then exec rgw.bucket_init_index (the empty index RGW "
               "writes for a new bucket)",
               f"S3 DeleteBucket bucket={p.bucket}", _stats_sync_call(p.owner), _gc_when_needed_call(p)),
        owner=p.owner, through_rgw=True)


def _stats_sync_call(owner: str) -> str:
    """How the owner's stats are resynced (PurgeExecutor._sync_owner_stats)."""
    return (f"the owner's stats resynced: admin API GET /admin/user?uid={owner}&stats=True&sync=True (the "
            "radosgw-admin user stats --sync-stats above only when the API gives no clear answer, after "
            f"radosgw-admin bucket list --uid {owner} finds the user; a user that no longer exists is a warning)")


def _drop_count_check(p: BucketProfile) -> str:
    return (f"before dropping: admin API GET /admin/bucket?bucket={p.bucket}&stats=True (radosgw-admin bucket stats "
            "when RGW gives no clear answer, and to confirm a bucket the API says is gone) must count only the "
            "index entries of heads removed directly; otherwise sweep the index again")


def _verify_calls(p: BucketProfile, r: PurgeRequest) -> tuple[str, ...]:
    if r.whole_bucket:
        return (f"admin API GET /admin/bucket?bucket={p.bucket}&stats=True and GET /admin/metadata/bucket.instance?"
                f"key={p.bucket}:{p.bucket_id} must say they do not exist (radosgw-admin bucket stats and metadata "
                "get when the caps lack or RGW does not answer); S3 HeadBucket 404",
                f"librados {p.index_pool}: stat {_span(p.index_shards)} -> ENOENT" if p.index_gen is not None else
                f"librados {p.index_pool}: (index generation not known: RGW's own removal of the index is "
                "not read back)",
                f"librados {p.data_pool} and {p.data_extra_pool}: no object named {p.marker}_* left, except "
                "tails whose refcount xattr still holds references from copies",
                _gc_list_call(p) + ": no entry for those objects",
                f"the owner's stats as the drop's sync answered them (when they were synced; radosgw-admin "
                f"user stats --uid {p.owner} if this run did not sync them); "
                f"admin API GET /admin/bucket?uid={p.owner} does not name it")
    listing = "ListObjectVersions" if p.versioning != "off" else "ListObjectsV2"
    return (f"S3 {listing} bucket={p.bucket}" + (f" prefix={r.prefix}" if r.prefix else "")
            + ": nothing matching left",
            f"S3 ListMultipartUploads bucket={p.bucket}" + (f" prefix={r.prefix}" if r.prefix else "")
            + ": nothing matching left",
            _gc_list_call(p) + ": no entry for the bucket's objects")


def _span(names: Sequence[str]) -> str:
    return names[0] + (f" .. {names[-1]}" if len(names) > 1 else "")


def _duration(s: float) -> str:
    for unit, n in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= n and s % n == 0:
            return f"{int(s // n)}{unit}"
    return f"{s:g}s"
