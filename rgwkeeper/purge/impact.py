"""Ingest-impact levels: what an operator picks instead of a rate cap and a pacing target.

``low`` is the setting `rgwkeeper verify` judged like a quiet window (ingest under the purge not
told apart from ingest without it): a cap of 20 objects/s and writes paced to at most 30% above
the latency the probe saw before the purge. The test suite judges it on every run
(tests/integration/test_loadgen.py); the figures are in docs/purge.md, "Impact levels".
``normal`` purges a whole bucket with the stock tool, ``radosgw-admin bucket rm
--purge-objects`` (method ``admin-purge``), inside rgwkeeper's plan, GC run and read-back: measured
beside rgwkeeper's own engine, the stock tool's steady deletes were gentler on ingest at the same
rate and faster at the same impact (docs/purge.md, "Impact levels"). It needs a whole bucket;
expiry, which deletes from a listing, takes ``low`` or ``max``.
``max`` is as fast as the method goes: no cap, no pacing. Empty means the config's own
``max_objects_per_second`` and ``pace_*`` keys, as before the levels existed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from rgwkeeper.config import PurgeSection
from rgwkeeper.errors import UsageError
from rgwkeeper.purge.plan import PurgeRequest


@dataclass(frozen=True)
class ImpactLevel:
    name: str
    #: 0: no cap.
    max_objects_per_second: float
    #: Relative pacing target (0.3: writes at most 30% slower than before the purge); 0: no pacing.
    pace_latency_increase: float
    pace_probe_interval_s: float
    #: What it means, for the plan, the confirmation and --help.
    summary: str
    #: The method the level purges a whole bucket with ("": whatever --method or auto picks).
    method: str = ""


LEVELS = {
    "low": ImpactLevel("low", 20.0, 0.3, 0.5,
                       "at most 20 objects/s, writes paced to at most 30% above their latency before the purge: "
                       "`rgwkeeper verify` judged ingest under it like a quiet window (docs/purge.md, "
                       "\"Impact levels\")"),
    "normal": ImpactLevel("normal", 0.0, 0.0, 1.0,
                          "the whole bucket with radosgw-admin bucket rm --purge-objects: the stock tool's steady "
                          "deletes, gentler on ingest than rgwkeeper's own at the same rate (docs/purge.md, "
                          "\"Impact levels\")", method="admin-purge"),
    "max": ImpactLevel("max", 0.0, 0.0, 1.0, "as fast as the method goes: no rate cap, no pacing"),
}
#: The levels of deletes from a listing (expire, prefix purges): those without a method of their own.
LISTING_LEVELS = tuple(name for name, lv in LEVELS.items() if not lv.method)

#: The keys a level sets; a config that sets a level and any of these is ambiguous.
LEVEL_KEYS = ("max_objects_per_second", "pace_latency_increase", "pace_write_latency_ms", "pace_probe_interval_s")


def resolve(purge_cfg: PurgeSection, impact: str | None = None, *, max_rate: float | None = None) -> PurgeSection:
    """``[purge]`` with the impact level applied: ``impact`` (the command line) or else
    ``purge.impact``; ``max_rate`` (--max-rate) instead of a level. Ambiguity is refused, never
    resolved silently: a level with --max-rate, or ``purge.impact`` with the keys it sets."""
    if impact is not None and max_rate is not None:
        raise UsageError("give --impact or --max-rate, not both (--impact low is a rate cap and a pacing target)")
    if max_rate is not None:
        return dataclasses.replace(purge_cfg, max_objects_per_second=max_rate, impact="")
    level = impact if impact is not None else purge_cfg.impact
    if not level:
        return purge_cfg
    if impact is None:
        defaults = PurgeSection()
        set_too = [k for k in LEVEL_KEYS if getattr(purge_cfg, k) != getattr(defaults, k)]
        if set_too:
            raise UsageError(f"purge.impact = {level!r} sets the rate cap and pacing; the config also sets "
                             f"{', '.join('purge.' + k for k in set_too)}: keep one or the other")
    if level not in LEVELS:
        raise UsageError(f"impact must be one of {', '.join(LEVELS)}, got {level!r}")
    lv = LEVELS[level]
    return dataclasses.replace(purge_cfg, impact=level, max_objects_per_second=lv.max_objects_per_second,
                               pace_latency_increase=lv.pace_latency_increase, pace_write_latency_ms=0.0,
                               pace_probe_interval_s=lv.pace_probe_interval_s)


def describe(purge_cfg: PurgeSection) -> str | None:
    """One line for the plan and the confirmation, when a level is in force."""
    return f"impact {purge_cfg.impact}: {LEVELS[purge_cfg.impact].summary}" if purge_cfg.impact else None


def request_for(purge_cfg: PurgeSection, request: PurgeRequest) -> PurgeRequest:
    """The request as the level in force runs it: a level with a method of its own (normal)
    purges whole buckets with it; a filter, or another --method, beside it is refused."""
    lv = LEVELS.get(purge_cfg.impact)
    if lv is None or not lv.method:
        return request
    if not request.whole_bucket:
        raise UsageError(f"impact {lv.name} runs radosgw-admin bucket rm, which purges whole buckets only; with "
                         f"--prefix or an age or size filter give --impact {' or '.join(LISTING_LEVELS)}, or "
                         "--max-rate (nothing was changed)")
    if request.method not in ("auto", lv.method):
        raise UsageError(f"impact {lv.name} purges with method {lv.method}; --method {request.method} beside it "
                         "is ambiguous: drop one (nothing was changed)")
    return dataclasses.replace(request, method=lv.method)


def check_listing(purge_cfg: PurgeSection) -> None:
    """For expiry that deletes from a listing (Pacific): a level with a method of its own
    (normal: whole buckets with bucket rm) does not say how fast to go there."""
    lv = LEVELS.get(purge_cfg.impact)
    if lv is not None and lv.method:
        raise UsageError(f"impact {lv.name} runs radosgw-admin bucket rm on whole buckets; this expiry deletes "
                         f"from a listing: give it {' or '.join(LISTING_LEVELS)} (expire --impact, or "
                         "fill.expire_impact for the daemon); nothing was changed")
