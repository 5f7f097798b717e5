"""What a load run asks for: operation mix, object sizes, keys and payloads, all from a seed.

Pure: no I/O, no clock. The same :class:`Workload` and worker index give the same sequence
of requests (operation, bucket, key, size, payload offset) in any process, on any run, so a
run can be repeated exactly, and objects written by one run can be read by the next one
with the same seed (``--skip-prepare``).

Each worker owns its keys (the worker index is part of the key), so workers never race
each other. Within a worker, the live objects form a queue: a PUT appends a new key, a
DELETE removes the oldest, a GET picks among the live ones (a LIST lists a prefix). GET never
picks one of the ``guard`` newest or oldest keys, so it does not race the PUT still writing
its key or the DELETE removing it, as long as fewer than ``guard`` requests of a worker are
in flight (a GET that does race answers 404 and counts as an error).
"""

from __future__ import annotations

import bisect
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Iterator

from rgwkeeper.errors import UsageError
from rgwkeeper.names import validate_bucket
from rgwkeeper.units import MAX_INT, check_number, parse_number, parse_size

OPS = ("GET", "PUT", "LIST", "DELETE")
#: Operation codes in raw records (a byte each).
OP_CODES = {name: i for i, name in enumerate(OPS)}
#: A raw record's columns and their array typecodes: op code, HTTP status (or the client's
#: connection-error/timeout code), bytes moved, then four CLOCK_MONOTONIC times in ns.
FIELDS = ("op", "status", "size", "intended", "start", "first_byte", "end")
TYPECODES = ("B", "H", "q", "q", "q", "q", "q")

#: The seed studies' mixed run (COSBench): GET 70%, PUT 20%, LIST 5%, DELETE 5%.
DEFAULT_MIX = "GET=70,PUT=20,LIST=5,DELETE=5"

MAX_OBJECT_SIZE = 5 * 1024**3  # S3's single-PUT limit
#: The largest weight of an operation or a size: weights are relative, so more is a typo.
MAX_WEIGHT = 1e9


def object_size(text: str) -> int:
    """One object size by the project's rule (rgwkeeper.units), at most S3's single-PUT limit."""
    return parse_size(text, what="object size", max_bytes=MAX_OBJECT_SIZE)


def parse_mix(text: str) -> dict[str, float]:
    """``GET=70,PUT=20,LIST=5,DELETE=5`` -> weights (any positive numbers; normalized later)."""
    mix: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, weight = part.partition("=")
        name = name.strip().upper()
        if name not in OPS:
            raise UsageError(f"bad mix {text!r}: unknown operation {name!r} (use {', '.join(OPS)})")
        try:
            w = parse_number(weight.strip(), "weight", lo=0, hi=MAX_WEIGHT)
        except UsageError:
            raise UsageError(f"bad mix {text!r}: {part!r} needs a weight from 0 to {MAX_WEIGHT:g}, "
                             f"e.g. {name}=20") from None
        if name in mix:
            raise UsageError(f"bad mix {text!r}: each operation may be given once")
        mix[name] = w
    if not mix or sum(mix.values()) <= 0:
        raise UsageError(f"bad mix {text!r}: give at least one operation with a positive weight")
    return {k: v for k, v in mix.items() if v > 0}


@dataclass(frozen=True)
class SizeDist:
    """Object sizes: ``fixed``, ``uniform`` (lo..hi), ``loguniform`` (lo..hi, as warp's
    ``--obj.randsize``) or ``choice`` (weighted sizes)."""

    kind: str
    sizes: tuple[int, ...]
    weights: tuple[float, ...] = ()

    @classmethod
    def parse(cls, text: str) -> "SizeDist":
        """``4KiB``, ``uniform:1KiB-1MiB``, ``loguniform:1KiB-64MiB``, ``4KiB=90,1MiB=10``."""
        kind, sep, rest = text.partition(":")
        if sep and kind in ("uniform", "loguniform"):
            lo_s, dash, hi_s = rest.partition("-")
            if not dash:
                raise UsageError(f"bad size distribution {text!r}: use {kind}:LOW-HIGH")
            lo, hi = object_size(lo_s), object_size(hi_s)
            if not 0 < lo <= hi:
                raise UsageError(f"bad size distribution {text!r}: need 0 < LOW <= HIGH")
            return cls(kind, (lo, hi))
        if "=" in text:
            pairs = [p.split("=", 1) for p in text.split(",") if p.strip()]
            if any(len(p) != 2 for p in pairs):
                raise UsageError(f"bad size distribution {text!r}: use SIZE=WEIGHT,...")
            sizes = tuple(object_size(s.strip()) for s, _ in pairs)
            weights = tuple(parse_number(w.strip(), f"size distribution {text!r}: weight", lo=0, hi=MAX_WEIGHT)
                            for _, w in pairs)
            return cls("choice", sizes, weights)
        return cls("fixed", (object_size(text),))

    def __post_init__(self) -> None:
        if self.kind not in ("fixed", "uniform", "loguniform", "choice") or not self.sizes:
            raise UsageError(f"size distribution {self.kind!r} with sizes {self.sizes} is not one SizeDist makes")
        for size in self.sizes:
            check_number(size, "object size", lo=0, hi=MAX_OBJECT_SIZE, integer=True, unit=" bytes")
        for w in self.weights:
            check_number(w, "size weight", lo=0, hi=MAX_WEIGHT)
        if self.kind == "choice" and (len(self.weights) != len(self.sizes) or sum(self.weights) <= 0):
            raise UsageError("a size choice needs one weight per size, not all 0")

    @property
    def max_size(self) -> int:
        return max(self.sizes)

    def describe(self) -> str:
        if self.kind == "fixed":
            return str(self.sizes[0])
        if self.kind == "choice":
            return ",".join(f"{s}={w:g}" for s, w in zip(self.sizes, self.weights))
        return f"{self.kind}:{self.sizes[0]}-{self.sizes[1]}"

    def draw(self, rng: random.Random) -> int:
        if self.kind == "fixed":
            return self.sizes[0]
        if self.kind == "uniform":
            return rng.randint(self.sizes[0], self.sizes[1])
        if self.kind == "loguniform":
            lo, hi = self.sizes
            return min(hi, max(lo, int(lo * (hi / lo) ** rng.random())))
        cum = _cumulative(self.weights)
        return self.sizes[bisect.bisect_right(cum, rng.random() * cum[-1])]


def _cumulative(weights: tuple[float, ...]) -> list[float]:
    out, total = [], 0.0
    for w in weights:
        total += w
        out.append(total)
    return out


@dataclass(frozen=True)
class Workload:
    """Everything that decides which requests a run makes. Sizes in bytes."""

    mix: dict[str, float] = field(default_factory=lambda: parse_mix(DEFAULT_MIX))
    sizes: SizeDist = field(default_factory=lambda: SizeDist("fixed", (4096,)))
    seed: int = 1
    bucket_prefix: str = "rgwkeeper-loadgen"
    buckets: int = 1
    prefixes: int = 1
    #: Objects each worker writes before the start barrier, for GET, LIST and DELETE to use.
    objects_per_worker: int = 0
    #: Keys at each end of a worker's live queue that GET leaves alone (see the module doc).
    guard: int = 64
    list_max_keys: int = 100

    def __post_init__(self) -> None:
        for op, w in self.mix.items():
            if op not in OPS:
                raise UsageError(f"unknown operation {op!r} in the mix (use {', '.join(OPS)})")
            check_number(w, f"mix weight of {op}", lo=0, hi=MAX_WEIGHT)
        if sum(self.mix.values()) <= 0:
            raise UsageError("the mix needs at least one operation with a positive weight")
        check_number(self.seed, "seed", lo=-MAX_INT, hi=MAX_INT, integer=True)
        check_number(self.buckets, "buckets", lo=1, hi=10_000, integer=True)
        check_number(self.prefixes, "prefixes", lo=1, hi=1_000_000, integer=True)
        check_number(self.objects_per_worker, "objects_per_worker", lo=0, hi=100_000_000, integer=True)
        check_number(self.guard, "guard", lo=0, hi=1_000_000, integer=True)
        check_number(self.list_max_keys, "list_max_keys", lo=1, hi=1000, integer=True)
        for name in self.bucket_names():
            validate_bucket(name)

    def bucket_names(self) -> list[str]:
        return [f"{self.bucket_prefix}-{i:03d}" for i in range(self.buckets)]

    def needs_objects(self) -> bool:
        return any(op in self.mix for op in ("GET", "DELETE"))

    def payload_pool(self) -> bytes:
        """Incompressible bytes every payload is a slice of (same seed, same bytes)."""
        return random.Random(f"payload/{self.seed}").randbytes(self.sizes.max_size + POOL_SLACK)

    def to_dict(self) -> dict[str, object]:
        return {"mix": dict(self.mix), "sizes": self.sizes.describe(), "seed": self.seed,
                "bucket_prefix": self.bucket_prefix, "buckets": self.buckets, "prefixes": self.prefixes,
                "objects_per_worker": self.objects_per_worker, "guard": self.guard,
                "list_max_keys": self.list_max_keys}


#: Payloads start at a seeded offset in [0, POOL_SLACK) of the pool, so objects of one size differ.
POOL_SLACK = 64 * 1024


@dataclass(frozen=True, slots=True)
class Request:
    op: str
    bucket: str
    key: str  # for LIST: the prefix listed
    size: int  # bytes sent (PUT) or expected (GET); 0 otherwise
    offset: int = 0  # PUT payload offset in the pool


class WorkerPlan:
    """The request sequence of one worker. Iterate :meth:`prepare` first, then :meth:`next`."""

    def __init__(self, workload: Workload, worker: int) -> None:
        self.w = workload
        self.worker = worker
        self._rng = random.Random(f"ops/{workload.seed}/{worker}")
        self._seq = 0
        self._live: deque[Request] = deque()
        self._buckets = workload.bucket_names()
        ops = list(workload.mix)
        self._ops = ops
        self._cum = _cumulative(tuple(workload.mix[o] for o in ops))
        #: Operations the plan turned into PUT because too few objects were live.
        self.substituted = 0

    def _new_key(self) -> Request:
        rng = self._rng
        bucket = self._buckets[rng.randrange(len(self._buckets))]
        prefix = rng.randrange(self.w.prefixes)
        size = self.w.sizes.draw(rng)
        key = f"p{prefix:03d}/w{self.worker:03d}-{self._seq:010d}"
        self._seq += 1
        req = Request("PUT", bucket, key, size, rng.randrange(POOL_SLACK))
        self._live.append(req)
        return req

    def prepare(self) -> Iterator[Request]:
        for _ in range(self.w.objects_per_worker):
            yield self._new_key()

    def live_objects(self) -> list[Request]:
        """The objects this worker's plan has written and not deleted (for cleanup)."""
        return list(self._live)

    def next(self) -> Request:
        rng = self._rng
        op = self._ops[bisect.bisect_right(self._cum, rng.random() * self._cum[-1])]
        if op == "PUT":
            return self._new_key()
        if op == "LIST":
            bucket = self._buckets[rng.randrange(len(self._buckets))]
            return Request("LIST", bucket, f"p{rng.randrange(self.w.prefixes):03d}/", 0)
        guard = self.w.guard
        n = len(self._live)
        if n <= 2 * guard:
            # Too few objects to pick one safely: write one instead, and count it.
            self.substituted += 1
            return self._new_key()
        if op == "DELETE":
            # The oldest key: it left the GET range at least ``guard`` requests ago.
            victim = self._live.popleft()
            return Request("DELETE", victim.bucket, victim.key, 0)
        obj = self._live[guard + rng.randrange(n - 2 * guard)]
        return Request("GET", obj.bucket, obj.key, obj.size)
