"""What each Ceph release does differently, where rgwkeeper's decisions depend on it.

One row per release, named as ``ceph versions`` names it (rgwkeeper.snapshot.parse_release).
Pure data: no I/O. docs/architecture.md, "Releases", says where each fact was checked.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Release:
    name: str
    major: int
    shard_reduction: bool
    """RGW's dynamic resharding may *reduce* a bucket's shard count
    (``rgw_dynamic_resharding_may_reduce``, after ``rgw_dynamic_resharding_reduction_wait``)."""
    min_shards: bool
    """``radosgw-admin bucket set-min-shards`` exists, and ``bucket layout`` shows the pin as
    ``layout.current_index.layout.normal.min_num_shards``."""
    direct_drop: str | None
    """How the direct purge drops a bucket whose heads are gone (rgwkeeper.purge.plan.DIRECT_DROP):
    "metadata-rm", "empty-index", or None where the direct method was not verified."""


RELEASES: dict[str, Release] = {r.name: r for r in (
    #        name        major  shard_reduction  min_shards  direct_drop
    Release("pacific",   16,    False,           False,      "metadata-rm"),
    Release("quincy",    17,    False,           False,      None),
    Release("reef",      18,    False,           False,      "metadata-rm"),
    Release("squid",     19,    False,           False,      None),
    Release("tentacle",  20,    True,            True,       "empty-index"),
)}


def release(name: str) -> Release | None:
    """The row for ``name`` (e.g. "tentacle"), or None for a release this table does not know."""
    return RELEASES.get(name)
