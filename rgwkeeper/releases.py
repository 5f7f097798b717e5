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


# -- deep-scrub throttle levers -------------------------------------------------------------------
#
# Which levers the scrub throttle (rgwkeeper.policy.scrub) uses, per release and op queue: only
# levers the release honours and that were measured to lower PUT p99 during a deep-scrub storm
# (bench/scrub_levers.py; figures in docs/architecture.md, "Deep-scrub levers per release"). A
# lever is an OSD option (set for section osd, its value from [scrub_throttle]) or "nodeep-scrub",
# the OSDMap flag (only with scrub_throttle.set_nodeep_scrub_flag). A row without levers means
# nothing measured helps there: the throttle says why and changes nothing.

WPQ_LEVERS = ("osd_scrub_sleep", "osd_scrub_load_threshold", "osd_max_scrubs", "nodeep-scrub")
NO_LEVER_HELPED = ("measured on {version}: no lever lowered PUT p99 during a deep-scrub storm beyond the noise, "
                   "so mClock is left to schedule scrub; nothing to throttle")


@dataclass(frozen=True)
class ScrubLevers:
    levers: tuple[str, ...]
    why: str
    """Why these levers (or none), as ``plan`` and ``status`` show it."""
    measured: bool = True
    """Chosen by measurement on this release (False: inferred from the rows that were)."""


SCRUB_LEVERS: dict[tuple[str, str], ScrubLevers] = {
    #  (release, osd_op_queue)
    ("pacific", "wpq"): ScrubLevers(WPQ_LEVERS, "wpq honours scrub sleep, load threshold and max scrubs"),
    # Measured (docs/architecture.md, "Deep-scrub levers per release"): osd_scrub_sleep set in the
    # mon reads back 0 from every OSD (`config show`: source "override", mClock's); the profile,
    # a custom best-effort limit, osd_max_scrubs 1, smaller chunks and the flag lowered PUT p99
    # during a deep-scrub storm no more than the runs without an effective lever did.
    ("reef", "mclock_scheduler"): ScrubLevers((), NO_LEVER_HELPED.format(version="18.2.7")),
    ("tentacle", "mclock_scheduler"): ScrubLevers((), NO_LEVER_HELPED.format(version="20.2.4")),
    ("pacific", "mclock_scheduler"): ScrubLevers(
        ("osd_mclock_profile", "osd_max_scrubs", "nodeep-scrub"), "Pacific's mClock (not its default)", False),
}


def default_op_queue(release_name: str) -> str:
    """The op queue a release runs when no OSD said (mClock is the default from Quincy on)."""
    row = release(release_name)
    return "mclock_scheduler" if row is not None and row.major >= 17 else "wpq"


def scrub_levers(release_name: str, op_queue: str) -> ScrubLevers:
    """The levers for ``release_name`` on ``op_queue``. Not in the table: wpq's levers on wpq
    (every release honours them there); on mClock, the levers every measured mClock row has."""
    row = SCRUB_LEVERS.get((release_name, op_queue))
    if row is not None:
        return row
    if op_queue != "mclock_scheduler":
        return ScrubLevers(WPQ_LEVERS, f"{op_queue} on {release_name}: wpq's levers", False)
    rows = [r for (_, q), r in SCRUB_LEVERS.items() if q == op_queue and r.measured]
    common = tuple(lever for lever in rows[0].levers if all(lever in r.levers for r in rows)) if rows else ()
    return ScrubLevers(common, f"mClock on {release_name}, not measured: the levers every measured mClock "
                               "release has", False)


#: Every OSD option a row may set: the scrub throttle owns these keys in the journal.
SCRUB_LEVER_OPTIONS = tuple(dict.fromkeys(
    lever for row in SCRUB_LEVERS.values() for lever in row.levers if lever.startswith("osd_")))
