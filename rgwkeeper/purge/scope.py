"""What a filtered purge will reach, read before it is planned: RGW's clock and what a prefix
matches besides the "directory" it names.

Age: RGW stamps ``LastModified`` with its own clock, so an object's age is measured on that
clock. A purge with ``--older-than`` reads RGW's ``Date`` header (one HeadBucket) and takes its
cutoff from it; this host's clock is only reported (the skew), never used for the cutoff.

Prefix: S3 prefixes match characters, not path segments: ``logs`` also matches ``logs2/`` and
``logs.old``. One ListObjectsV2 page with ``Delimiter=/`` shows the distinct continuations after
the prefix (``/``, ``2/``, ``.old``) without reading the objects under them, and the plan warns
when the prefix stops inside a segment and more than one continuation exists.

:class:`RgwClock` and :class:`PrefixScope` are plain data (a plan carries them into its
checkpoint); :func:`read_rgw_clock` and :func:`read_prefix_scope` are the reads.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Mapping

from rgwkeeper.adapters.s3 import S3Adapter

#: A prefix ending in one of these ends a path segment (``logs/``, ``2026-``, ``date=``): its
#: continuations are the segment's contents, not other names.
DELIMITER_LIKE = "/-_.:="
#: Continuations shown in the dry run and the confirmation (all of them go to --json).
SHOWN_CONTINUATIONS = 5
#: Keys and common prefixes in the one listing page read (bounded: one request).
SCOPE_PAGE_KEYS = 1000
#: Above this skew (seconds) the dry run says this host's clock differs from RGW's.
SKEW_NOTE_S = 30.0


def iso_utc(epoch_s: float) -> str:
    return datetime.datetime.fromtimestamp(epoch_s, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class RgwClock:
    """RGW's clock as its ``Date`` header gave it, and this host's clock at that moment."""

    rgw_s: float  # the Date header: whole seconds, so the cutoff errs early (deletes less)
    local_s: float  # this host's clock halfway through the request

    @property
    def skew_s(self) -> float:
        """How far this host's clock is ahead of RGW's (negative: behind)."""
        return self.local_s - self.rgw_s

    def describe(self) -> str:
        skew = self.skew_s
        if abs(skew) <= SKEW_NOTE_S:
            host = f"this host's clock agrees within {SKEW_NOTE_S:g} s"
        else:
            host = (f"this host's clock is {abs(skew):,.0f} s {'ahead of' if skew > 0 else 'behind'} RGW's "
                    "and is not used")
        return f"RGW's clock (its Date header read {iso_utc(self.rgw_s)}; {host})"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "source": "rgw", "skew_s": round(self.skew_s, 3)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "RgwClock":
        return cls(rgw_s=float(d["rgw_s"]), local_s=float(d["local_s"]))


@dataclass(frozen=True)
class PrefixScope:
    """The distinct continuations after a prefix in one delimited listing page."""

    prefix: str
    continuations: tuple[str, ...]  # in listing order; "" is a key equal to the prefix itself
    complete: bool  # False: the page was full, more continuations may follow

    @property
    def ends_segment(self) -> bool:
        return self.prefix[-1:] in DELIMITER_LIKE

    @property
    def ambiguous(self) -> bool:
        """The prefix stops inside a name and matches more than one name."""
        return not self.ends_segment and len(self.continuations) > 1

    def describe(self) -> list[str]:
        shown = [repr(self.prefix + c) + ("" if c else " (the key itself)")
                 for c in self.continuations[:SHOWN_CONTINUATIONS]]
        more = len(self.continuations) - len(shown)
        if not self.continuations:
            lines = [f"prefix {self.prefix!r} matches nothing now"]
        else:
            lines = [f"prefix {self.prefix!r} matches keys under: {', '.join(shown)}"
                     + (f" and {more:,} more" if more else "")
                     + ("" if self.complete else f" (first {SCOPE_PAGE_KEYS:,} listed)")]
        if self.ambiguous:
            example = f" (e.g. {self.prefix + '/'!r})" if "/" in self.continuations else ""
            lines.append(f"WARNING: prefix {self.prefix!r} does not end a path segment, and S3 matches it against "
                         f"the start of every key: the purge reaches all {len(self.continuations):,}"
                         + ("" if self.complete else "+") + " of these; end the prefix with a delimiter"
                         f"{example} to purge under one of them only")
        return lines

    def to_dict(self) -> dict[str, Any]:
        return {"prefix": self.prefix, "continuations": list(self.continuations), "complete": self.complete,
                "ambiguous": self.ambiguous}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "PrefixScope":
        return cls(prefix=d["prefix"], continuations=tuple(d["continuations"]), complete=bool(d["complete"]))


def prefix_scope(prefix: str, keys: list[str], common_prefixes: list[str], truncated: bool) -> PrefixScope:
    """Pure: the continuations a ``Delimiter=/`` listing of ``prefix`` shows."""
    seen: dict[str, None] = {}
    for name in [*common_prefixes, *keys]:
        if name.startswith(prefix):
            seen.setdefault(name[len(prefix):], None)
    ordered = sorted(seen)  # S3 lists in key order; keys and common prefixes come apart
    return PrefixScope(prefix=prefix, continuations=tuple(ordered), complete=not truncated)


async def read_rgw_clock(s3: S3Adapter, bucket: str, *, clock: Callable[[], float] = time.time) -> RgwClock:
    """RGW's Date header from a HeadBucket, with this host's clock halfway through the request."""
    before = clock()
    rgw_s = await asyncio.to_thread(s3.rgw_date, bucket)
    after = clock()
    return RgwClock(rgw_s=rgw_s, local_s=(before + after) / 2)


async def read_prefix_scope(s3: S3Adapter, bucket: str, prefix: str) -> PrefixScope:
    """One ``ListObjectsV2 Delimiter=/`` page under ``prefix`` (read-only, one request)."""
    keys, common, truncated = await asyncio.to_thread(s3.list_delimited, bucket, prefix, "/", SCOPE_PAGE_KEYS)
    return prefix_scope(prefix, keys, common, truncated)
