"""S3 lifecycle expiration rules: validated specs, their S3 form, merging, and when RGW expires.

Pure functions. An :class:`ExpiryRule` comes from the command line or from
``purge.lifecycle_rules`` in the config; rgwkeeper's rules carry IDs that start with
``rgwkeeper-`` so they can be merged into a bucket's existing configuration (other rules are
kept untouched) and replaced later.
"""

from __future__ import annotations

import datetime
import fnmatch
import hashlib
import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from rgwkeeper.errors import UsageError
from rgwkeeper.names import validate_bucket, validate_prefix
from rgwkeeper.releases import RELEASES
from rgwkeeper.units import MAX_BYTES, MAX_DURATION_S, check_number, check_text, empty_size_range

RULE_ID_PREFIX = "rgwkeeper-"
DAY_S = 86400
#: The most days a rule may wait (100 years): more is a typo, and RGW keeps days in an int.
MAX_DAYS = MAX_DURATION_S // DAY_S

#: Releases whose RGW knows lifecycle size filters, and whose ``lc process --bucket B`` runs B
#: alone: columns of the release table (rgwkeeper.releases.Release.size_filters, .lc_one_bucket).
SIZE_FILTER_RELEASES = tuple(n for n, r in RELEASES.items() if r.size_filters)
LC_ONE_BUCKET_RELEASES = tuple(n for n, r in RELEASES.items() if r.lc_one_bucket)

_RULE_KEYS = {"bucket", "prefix", "days", "tags", "noncurrent_days", "expired_delete_markers",
              "abort_multipart_days", "larger_than", "smaller_than"}


@dataclass(frozen=True)
class ExpiryRule:
    """One expiration rule. ``bucket`` is a bucket name, or a glob pattern in the config."""

    bucket: str
    prefix: str | None = None
    days: int | None = None  # expire current versions this many days after their last change
    tags: tuple[tuple[str, str], ...] = ()
    noncurrent_days: int | None = None  # expire noncurrent versions this many days after they became so
    expired_delete_markers: bool = False  # remove delete markers that no longer hide any version
    abort_multipart_days: int | None = None  # abort uploads this many days after they started
    larger_than: int | None = None  # bytes (Tentacle only: SIZE_FILTER_RELEASES)
    smaller_than: int | None = None  # bytes (Tentacle only)
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        # For callers of the Python API (rule_problems checks the config's and the command line's).
        for name, lo, hi in (("days", 1, MAX_DAYS), ("noncurrent_days", 1, MAX_DAYS),
                             ("abort_multipart_days", 1, MAX_DAYS), ("larger_than", 0, MAX_BYTES),
                             ("smaller_than", 1, MAX_BYTES)):
            if getattr(self, name) is not None:
                check_number(getattr(self, name), name, lo=lo, hi=hi, integer=True)
        empty = empty_size_range(self.larger_than, self.smaller_than)
        if empty:
            raise UsageError(empty)

    @property
    def rule_id(self) -> str:
        body = {k: v for k, v in asdict(self).items() if k not in ("bucket", "extra")}
        return RULE_ID_PREFIX + hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:12]

    def describe(self) -> str:
        parts = [f"prefix {self.prefix!r}" if self.prefix else "all keys"]
        parts += [f"tag {k}={v}" for k, v in self.tags]
        if self.larger_than is not None:
            parts.append(f"larger than {self.larger_than} B")
        if self.smaller_than is not None:
            parts.append(f"smaller than {self.smaller_than} B")
        acts = []
        if self.days is not None:
            acts.append(f"expire after {self.days} d")
        if self.noncurrent_days is not None:
            acts.append(f"noncurrent versions after {self.noncurrent_days} d")
        if self.expired_delete_markers:
            acts.append("expired delete markers")
        if self.abort_multipart_days is not None:
            acts.append(f"abort uploads after {self.abort_multipart_days} d")
        return f"{', '.join(parts)}: {', '.join(acts)}"

    def selects_size(self, size: int) -> bool:
        """The rule's size filters (S3: strictly greater / strictly less than) pass ``size``."""
        return ((self.larger_than is None or size > self.larger_than)
                and (self.smaller_than is None or size < self.smaller_than))

    def selects_tags(self, tags: Mapping[str, str]) -> bool:
        """The object carries every tag of the rule's filter (S3 And: all of them, exact values)."""
        return all(tags.get(k) == v for k, v in self.tags)

    def _filter(self) -> dict[str, Any]:
        conds: dict[str, Any] = {}
        if self.prefix:
            conds["Prefix"] = self.prefix
        if self.tags:
            conds["Tags"] = [{"Key": k, "Value": v} for k, v in self.tags]
        if self.larger_than is not None:
            conds["ObjectSizeGreaterThan"] = self.larger_than
        if self.smaller_than is not None:
            conds["ObjectSizeLessThan"] = self.smaller_than
        return s3_filter(conds)

    def to_s3_rules(self) -> list[dict[str, Any]]:
        """The S3 rule(s). S3 refuses ExpiredObjectDeleteMarker next to Days in one Expiration,
        so that part becomes a second rule with the same filter."""
        base: dict[str, Any] = {"Status": "Enabled", "Filter": self._filter()}
        main: dict[str, Any] = {"ID": self.rule_id, **base}
        if self.days is not None:
            main["Expiration"] = {"Days": self.days}
        elif self.expired_delete_markers:
            main["Expiration"] = {"ExpiredObjectDeleteMarker": True}
        if self.noncurrent_days is not None:
            main["NoncurrentVersionExpiration"] = {"NoncurrentDays": self.noncurrent_days}
        if self.abort_multipart_days is not None:
            main["AbortIncompleteMultipartUpload"] = {"DaysAfterInitiation": self.abort_multipart_days}
        rules = [main]
        if self.days is not None and self.expired_delete_markers:
            rules.append({"ID": self.rule_id + "-dm", **base, "Expiration": {"ExpiredObjectDeleteMarker": True}})
        return rules


def _positive_int(d: Mapping[str, Any], key: str, problems: list[str], lo: int = 1,
                  hi: int = MAX_DAYS) -> int | None:
    v = d.get(key)
    if v is None:
        return None
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        problems.append(f"{key} must be a whole number from {lo} to {hi:,}, got {v!r}")
        return None
    return v


def _tag_ok(key: str, value: str) -> bool:
    try:
        check_text(key, "tag key")
        if value:
            check_text(value, "tag value")
    except UsageError:
        return False
    return len(key) <= 128 and len(value) <= 256


def rule_problems(d: Mapping[str, Any], *, pattern_ok: bool = True) -> tuple[ExpiryRule | None, list[str]]:
    """Validate one rule given as a dict (a TOML table or the command line's options)."""
    problems: list[str] = []
    unknown = sorted(set(d) - _RULE_KEYS)
    if unknown:
        problems.append(f"unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(_RULE_KEYS))})")
    bucket = d.get("bucket")
    if not isinstance(bucket, str) or not bucket:
        problems.append("bucket must be a bucket name" + (" or glob pattern" if pattern_ok else ""))
    elif not (pattern_ok and any(c in bucket for c in "*?[")):
        try:
            validate_bucket(bucket)
        except UsageError as exc:
            problems.append(str(exc))
    prefix = d.get("prefix")
    if prefix is not None:
        try:
            validate_prefix(prefix)
        except UsageError as exc:
            problems.append(str(exc))
    tags: list[tuple[str, str]] = []
    raw_tags = d.get("tags") or {}
    if not isinstance(raw_tags, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw_tags.items()):
        problems.append("tags must be a table of strings, e.g. {tier = \"scratch\"}")
    elif not all(_tag_ok(k, v) for k, v in raw_tags.items()):
        problems.append("tag keys must be 1 to 128 characters and values at most 256 (S3's limits), "
                        "without surrounding whitespace or control characters")
    else:
        tags = sorted(raw_tags.items())
    days = _positive_int(d, "days", problems)
    noncurrent = _positive_int(d, "noncurrent_days", problems)
    abort = _positive_int(d, "abort_multipart_days", problems)
    larger = _positive_int(d, "larger_than", problems, lo=0, hi=MAX_BYTES)
    smaller = _positive_int(d, "smaller_than", problems, hi=MAX_BYTES)
    dm = d.get("expired_delete_markers", False)
    if not isinstance(dm, bool):
        problems.append(f"expired_delete_markers must be true or false, got {dm!r}")
        dm = False
    if days is None and noncurrent is None and abort is None and not dm:
        problems.append("the rule does nothing: give days, noncurrent_days, abort_multipart_days or "
                        "expired_delete_markers")
    empty = empty_size_range(larger, smaller)
    if empty:
        problems.append(empty)
    if abort is not None and (tags or larger is not None or smaller is not None):
        problems.append("abort_multipart_days cannot be combined with tags or size filters (S3 filters "
                        "uploads by prefix only)")
    if problems:
        return None, problems
    return ExpiryRule(bucket=bucket, prefix=prefix, days=days, tags=tuple(tags), noncurrent_days=noncurrent,
                      expired_delete_markers=dm, abort_multipart_days=abort, larger_than=larger,
                      smaller_than=smaller), []


def parse_rule(d: Mapping[str, Any], *, pattern_ok: bool = True) -> ExpiryRule:
    rule, problems = rule_problems(d, pattern_ok=pattern_ok)
    if rule is None:
        raise UsageError("lifecycle rule: " + "; ".join(problems))
    return rule


def check_release(rule: ExpiryRule, release: str) -> None:
    if (rule.larger_than is not None or rule.smaller_than is not None) and release not in SIZE_FILTER_RELEASES:
        raise UsageError(f"lifecycle size filters need Tentacle; this cluster runs {release}, whose RGW "
                         "rejects them or drops them from the rule (docs/purge.md, \"Lifecycle\"): use "
                         "`rgwkeeper purge --larger-than/--smaller-than`, which filters the listing")


def matching_rules(rules: list[ExpiryRule], bucket: str) -> list[ExpiryRule]:
    return [r for r in rules if fnmatch.fnmatchcase(bucket, r.bucket)]


def s3_filter(f: Mapping[str, Any]) -> dict[str, Any]:
    """A rule's Filter as S3 spells it, tags sorted. RGW 16.2.15 reads ``And: {Prefix, Tags:
    [one]}`` back as ``{Prefix, Tag}`` without the And (measured; S3 clients refuse to put
    that back) and sorts the Tags of an And by key."""
    conds = dict(f.get("And", f))
    tags = list(conds.pop("Tags", []) or []) + ([conds.pop("Tag")] if "Tag" in conds else [])
    tags = sorted(({"Key": t["Key"], "Value": t["Value"]} for t in tags), key=lambda t: (t["Key"], t["Value"]))
    if tags:
        conds["Tags"] = tags
    if conds.get("Prefix") == "" and len(conds) > 1:
        conds.pop("Prefix")
    if len(conds) > 1 or len(tags) > 1:
        return {"And": conds}
    if tags:
        return {"Tag": tags[0]}
    return conds or {"Prefix": ""}


def s3_rules(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rules as read back from RGW, their Filter spelled so that they can be put back (s3_filter)."""
    return [{**r, "Filter": s3_filter(r["Filter"])} if "Filter" in r else r for r in rules]


def merge(existing: list[dict[str, Any]], ours: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The bucket's rules with ours added or replaced by ID; rules that are not ours are kept
    in their order, before ours, as they are but for the spelling of their Filter (s3_rules)."""
    our_ids = {r["ID"] for r in ours}
    return s3_rules([r for r in existing if r.get("ID") not in our_ids]) + ours


def same_rules(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    """Compare as RGW reads them back: by ID, ignoring order, the empty Prefix RGW adds, how
    it spells a Filter (s3_filter), and an expiration Date given as text but read back (by
    boto3) as a datetime."""
    def when(value: Any) -> Any:
        if isinstance(value, datetime.datetime):
            return value.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        return value

    def norm(rules: list[dict[str, Any]]) -> dict[str, str]:
        out = {}
        for r in rules:
            r = dict(r)
            if r.get("Prefix") == "" and "Filter" in r:
                r.pop("Prefix")
            if "Filter" in r:
                r["Filter"] = s3_filter(r["Filter"])
            if "Date" in r.get("Expiration", {}):
                r["Expiration"] = {**r["Expiration"], "Date": when(r["Expiration"]["Date"])}
            out[r.get("ID", "")] = json.dumps(r, sort_keys=True, default=str)
        return out
    return norm(a) == norm(b)


def expired(mtime_s: float, days: int, now_s: float, *, debug_interval_s: float = 0) -> bool:
    """Would RGW's lifecycle expire an object last modified at ``mtime_s`` with ``Days: days``?

    RGW (rgw_lc.cc, obj_has_expired) counts from midnight UTC today; with
    rgw_lc_debug_interval > 0 a "day" is that many seconds, counted from now.
    """
    if debug_interval_s > 0:
        return now_s - mtime_s >= days * debug_interval_s
    midnight = math.floor(now_s / DAY_S) * DAY_S
    return midnight - mtime_s >= days * DAY_S


def purge_rule(prefix: str | None, older_than_s: float | None, plan_id: str) -> list[dict[str, Any]]:
    """The one-off rule the ``lifecycle`` purge method installs: everything under the prefix,
    older than whole days, or at once through an expiration date in the past. (Incomplete
    uploads are aborted by a separate step: DaysAfterInitiation cannot say "now".)"""
    if older_than_s is None:
        expiration: dict[str, Any] = {"Date": "2000-01-01T00:00:00Z"}
    else:
        expiration = {"Days": int(older_than_s // DAY_S)}
    return [{"ID": f"{RULE_ID_PREFIX}purge-{plan_id}", "Status": "Enabled", "Filter": {"Prefix": prefix or ""},
             "Expiration": expiration}]
