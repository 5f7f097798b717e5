"""The pure parts of purge: RADOS layout, profile parsing, the planner's choices, lifecycle rules.

Fed with output captured from 16.2.15 (tests/fixtures/pacific/purge.json, capture_purge.py).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re

import pytest

from rgwkeeper.adapters.radosgw_admin import RadosgwAdmin
from rgwkeeper.errors import InvalidName, UsageError
from rgwkeeper import lifecycle as lc
from rgwkeeper import releases
from rgwkeeper.purge import plan as purge_plan
from rgwkeeper.releases import behaviour
from rgwkeeper.purge.layout import bucket_prefix, head_oid, index_shard_oids, is_tail, parse_refcount
from rgwkeeper.purge.plan import (EVERYTHING, STEP_TYPES, DeleteObjects, DropBucket, NotNow, Plan, PurgeRequest,
                                  Scope, Step, Tuning, Verify, plan, refusal, render_admin)
from rgwkeeper.purge.profile import parse_profile
from tests.unit.fakes import load_fixture
from tests.unit.purge_fakes import captured

FX = captured()
NOW = 1_800_000_000.0


def _placement() -> dict:
    from rgwkeeper.adapters.radosgw_admin import RadosgwAdmin as _R  # noqa: F401 - same parse as the adapter

    out = {}
    for p in FX["zone_get"]["placement_pools"]:
        v = p["val"]
        out[p["key"]] = {"index_pool": v["index_pool"], "data_extra_pool": v["data_extra_pool"],
                         "data_pool": v["storage_classes"]["STANDARD"]["data_pool"]}
    return out


def mixed(**changes):
    zones = [z["name"] for z in FX["zonegroup_get"]["zones"]]
    p = parse_profile(FX["bucket_stats_mixed"], FX["instance_mixed"], _placement(), zones, FX["versions"])
    assert p.index_gen is None  # Pacific's stats do not name it: gather_profile probes (index_gen 0 here)
    return dataclasses.replace(p, **{"index_gen": 0, **changes})


def versioned():
    zones = [z["name"] for z in FX["zonegroup_get"]["zones"]]
    return parse_profile(FX["bucket_stats_versioned"], FX["instance_versioned"], _placement(), zones, FX["versions"])


# -- layout ---------------------------------------------------------------------------------------

def test_head_names_match_what_rados_lists():
    marker = FX["bucket_stats_mixed"]["marker"]
    listed = {o["oid"]: o["locator"] for o in FX["rados_objects_mixed"]}
    for key in ("plain/0", "plain/2", "_underscore", "big"):
        oid, locator = head_oid(marker, key)
        assert listed[oid] == locator, key
    assert head_oid(marker, "_underscore")[1] == f"{marker}__underscore"  # a locator only for '_' keys
    tails = [o for o in listed if is_tail(o, marker)]
    assert len(tails) == 6 and all("__shadow_" in t or "__multipart_" in t for t in tails)
    assert not is_tail(head_oid(marker, "_shadow_x")[0], marker)  # an escaped key is a head, not a tail
    assert bucket_prefix(marker) == marker + "_"


def test_index_shard_names():
    assert index_shard_oids("z.1.2", 3) == [".dir.z.1.2.0", ".dir.z.1.2.1", ".dir.z.1.2.2"]
    assert index_shard_oids("z.1.2", 0) == [".dir.z.1.2"]
    assert index_shard_oids("z.1.2", 2, gen=4) == [".dir.z.1.2.4.0", ".dir.z.1.2.4.1"]  # Reef's in-place reshard
    assert index_shard_oids("z.1.2", 0, gen=4) == [".dir.z.1.2"]


def test_refcount_of_a_tail_shared_with_a_copy():
    # Right after the copy: the original's own (implicit, empty-tag) reference and the copy's.
    rc = parse_refcount(base64.b64decode(FX["refcount_shared_tail"]["xattr_b64"]))
    assert rc.refs[0] == "" and len(rc.refs) == 2 and rc.refs[1].startswith(FX["zone_get"]["id"])
    assert "\x00" not in rc.refs[1] and rc.retired == ()
    # After the original was deleted and GC ran: only the copy's reference is live.
    after = parse_refcount(base64.b64decode(FX["refcount_shared_tail"]["after_gc_xattr_b64"]))
    assert after.refs == (rc.refs[1],) and len(after.retired) == 1
    with pytest.raises(ValueError):
        parse_refcount(b"\x02\x01\x10\x00\x00\x00\x05\x00\x00\x00\xff\xff\x00\x00")


# -- profile --------------------------------------------------------------------------------------

def test_profile_from_captured_output():
    p = mixed()
    stats = FX["bucket_stats_mixed"]
    assert (p.bucket, p.bucket_id, p.marker, p.owner) == ("capture-mixed", stats["id"], stats["marker"], "rgwkeeper-admin")
    # rgw.main counts the uploaded part of the incomplete upload too: 6 listed objects + 1 part.
    assert len(FX["list_objects_v2"]["Contents"]) == 6
    assert p.num_objects == 7 and p.incomplete_uploads == 1 and p.num_shards == 11
    assert (p.versioning, p.object_lock, p.has_lifecycle, p.indexless, p.resharding) == ("off", False, False, False, False)
    assert (p.data_pool, p.index_pool, p.data_extra_pool) == (
        "default.rgw.buckets.data", "default.rgw.buckets.index", "default.rgw.buckets.non-ec")
    assert (p.release, p.version, p.zones) == ("pacific", "16.2.15", 1)
    v = versioned()
    assert v.versioning == "enabled" and v.has_lifecycle


def test_zone_placement_drops_the_system_key(tmp_path):
    import asyncio

    from rgwkeeper.access import ClusterAccess
    from tests.unit.fakes import FakeRunner

    zone = json.loads(json.dumps(FX["zone_get"]))
    zone["system_key"] = {"access_key": "AK", "secret_key": "SECRET"}
    zone["placement_pools"][0]["val"]["storage_classes"]["COLD"] = {"data_pool": "cold.rgw.buckets.data"}
    runner = FakeRunner().expect(["zone", "get", "--format=json"], json.dumps(zone))
    rgw = RadosgwAdmin(ClusterAccess(conf=tmp_path / "c", keyring=None, client_name="client.admin", rgw_endpoint=None,
                                     rgw_credentials_file=None), runner=runner)
    placement = asyncio.run(rgw.zone_placement())
    assert "SECRET" not in json.dumps(placement)
    assert placement["default-placement"]["data_pool"] == "default.rgw.buckets.data"
    zones = [z["name"] for z in FX["zonegroup_get"]["zones"]]
    p = parse_profile(FX["bucket_stats_mixed"], FX["instance_mixed"], placement, zones, FX["versions"])
    assert p.class_data_pools == ("cold.rgw.buckets.data",)  # scanned too by the end-state check


# -- the planner -----------------------------------------------------------------------------------

def kinds(p: Plan) -> list[str]:
    return [s.kind for s in p.steps]


def test_small_unversioned_bucket_on_pacific_goes_direct_and_says_why():
    p = plan(mixed(size_bytes=6 * 4096), PurgeRequest("capture-mixed"), now=NOW)
    assert p.method == "direct"
    assert kinds(p) == ["fence", "abort_uploads", "delete_objects", "drop_bucket", "verify"]
    text = "\n".join(p.show())
    assert "73348" in text and "head-only" in text
    assert {m for m, _ in p.rejected} == {"s3", "admin-purge", "admin-purge-bypass-gc"}


def test_direct_plan_shows_exact_commands():
    p = plan(mixed(size_bytes=6 * 4096, has_lifecycle=True), PurgeRequest("capture-mixed"), now=NOW)
    prof = p.profile
    cmds = p.commands()
    assert kinds(p)[1] == "drop_lifecycle"
    assert "S3 DeleteBucket bucket=capture-mixed" in cmds and not any("metadata rm" in c for c in cmds)
    assert any(c.startswith(f"librados default.rgw.buckets.index: on .dir.{prof.bucket_id}") for c in cmds)
    assert "radosgw-admin user stats --uid rgwkeeper-admin --sync-stats" in cmds
    assert "radosgw-admin gc process --include-all" in cmds
    assert any(c.startswith("admin API PUT /admin/bucket?quota=&uid=rgwkeeper-admin&bucket=capture-mixed&max-objects=0")
               for c in cmds)
    with_access = p.commands(lambda *a: ["radosgw-admin", "--conf", "/etc/ceph/x.conf", *a])
    assert "radosgw-admin --conf /etc/ceph/x.conf gc process --include-all" in with_access
    # The drop's count check, as the executor reads it: one admin API request, not a process,
    # and radosgw-admin where the API gives no clear answer or says "gone" (confirmed_bucket_stats).
    assert any(c.startswith("before dropping: admin API GET /admin/bucket?bucket=capture-mixed&stats=True "
                            "(radosgw-admin bucket stats when RGW gives no clear answer, and to confirm a bucket "
                            "the API says is gone) must count only the index entries") for c in cmds)


@pytest.mark.parametrize("changes, why", [
    ({"versioning": "enabled"}, "versioning is enabled"),
    ({"versioning": "suspended"}, "versioning is suspended"),
    ({"zones": 2}, "2 zones"),
    ({"release": "quincy"}, "this cluster runs quincy"),
    ({"indexless": True}, "indexless"),
])
def test_auto_falls_back_to_s3_and_says_why(changes, why):
    p = plan(mixed(**changes), PurgeRequest("capture-mixed"), now=NOW)
    assert p.method == "s3"
    assert why in dict(p.rejected)["direct"]
    assert kinds(p) == ["fence", "abort_uploads", "delete_objects", "delete_bucket", "verify"]
    assert "radosgw-admin gc process --include-all" in p.commands()


def test_large_objects_go_direct_where_the_release_releases_tails_and_through_s3_where_not(monkeypatch):
    large = mixed(size_bytes=6 * (8 << 20))
    p = plan(large, PurgeRequest("capture-mixed"), now=NOW)
    assert p.method == "direct" and behaviour(large.release).direct_tails
    step = next(s for s in p.steps if s.kind == "delete_objects")
    assert step.tails_placement == "default-placement"
    assert any("cls_refcount put" in c and "user.rgw.tail_tag" in c for c in step.calls)
    assert any("as RGW's GC does" in r for r in p.reasons)
    monkeypatch.setitem(releases.RELEASES, large.release,
                        dataclasses.replace(releases.RELEASES[large.release], direct_tails=False))
    p = plan(large, PurgeRequest("capture-mixed"), now=NOW)
    assert p.method == "s3" and "above the head chunk" in dict(p.rejected)["direct"]
    direct = plan(large, PurgeRequest("capture-mixed", method="direct"), now=NOW)
    step = next(s for s in direct.steps if s.kind == "delete_objects")
    assert step.tails_placement == "" and not any("cls_refcount put" in c for c in step.calls)


@pytest.mark.parametrize("changes", [{}, {"size_bytes": 6 * (8 << 20)}, {"release": "quincy"}])
def test_reasons_carry_no_rates_from_a_test_machine(changes):
    # An operator reads why a method was chosen; this machine's figures belong in docs/purge.md.
    p = plan(mixed(**changes), PurgeRequest("capture-mixed"), now=NOW)
    said = [*p.reasons, *(why for _, why in p.rejected)]
    assert not [w for w in said if re.search(r"\d+(-\d+)?/s\b", w)], said
    assert any('docs/purge.md, "Measured"' in w for w in said), said
    if changes.get("release") == "quincy":
        assert any("not on quincy" in w for w in said), said


def test_prefix_and_age_purge_uses_an_exact_listing_with_an_absolute_cutoff():
    p = plan(mixed(), PurgeRequest("capture-mixed", prefix="plain/", older_than_s=3600), now=NOW)
    assert p.method == "s3" and p.cutoff_s == NOW - 3600
    assert kinds(p) == ["abort_uploads", "delete_objects", "gc_process", "verify"]  # no fence, no bucket removal
    assert p.steps[1].scope == Scope("plain/", NOW - 3600) and p.steps[1].recheck
    assert "partial purge" in dict(p.rejected)["direct"]


def test_refusals_change_nothing_and_name_the_reason():
    with pytest.raises(UsageError, match="Object Lock"):
        plan(mixed(object_lock=True), PurgeRequest("capture-mixed"), now=NOW)
    with pytest.raises(UsageError, match="protected .* 'capture-\\*'"):
        plan(mixed(), PurgeRequest("capture-mixed"), protected=["prod-*", "capture-*"], now=NOW)
    with pytest.raises(NotNow, match="resharded"):
        plan(mixed(resharding=True), PurgeRequest("capture-mixed"), now=NOW)
    with pytest.raises(UsageError, match="method direct cannot purge .*partial purge"):
        plan(mixed(), PurgeRequest("capture-mixed", prefix="x", method="direct"), now=NOW)
    with pytest.raises(UsageError, match="lc process cannot run one bucket on pacific .*53430.*--method s3"):
        plan(mixed(), PurgeRequest("capture-mixed", prefix="plain/", method="lifecycle"), now=NOW)
    with pytest.raises(UsageError, match="whole number of days"):
        plan(mixed(release="quincy"), PurgeRequest("capture-mixed", older_than_s=3600, method="lifecycle"), now=NOW)
    for release in ("quincy", "reef", "squid", "tentacle"):  # its one-off rule is a prefix and an age only
        for size in ({"larger_than": 10}, {"smaller_than": 10}):
            with pytest.raises(UsageError, match="lifecycle method's rule carries no size filter .*--method s3"):
                plan(mixed(release=release), PurgeRequest("capture-mixed", prefix="plain/", method="lifecycle",
                                                          **size), now=NOW)
    assert "73348" in refusal("admin-purge-bypass-gc", versioned(), PurgeRequest("capture-versioned"))


def test_bypass_gc_plan_proves_head_only_before_changing_anything():
    p = plan(mixed(), PurgeRequest("capture-mixed", method="admin-purge-bypass-gc", ), now=NOW,
             tuning=Tuning(max_concurrent_ios=64))
    assert kinds(p) == ["prove_head_only", "fence", "admin_bucket_rm", "verify"]
    assert "radosgw-admin bucket rm --bucket capture-mixed --purge-objects --bypass-gc --max-concurrent-ios=64" \
        in p.commands()


def test_lifecycle_plan_installs_a_rule_and_puts_the_old_ones_back():
    # Quincy and later: lc process --bucket runs that bucket alone (Pacific refuses, above).
    p = plan(mixed(release="reef"), PurgeRequest("capture-mixed", prefix="plain/", older_than_s=2 * 86400,
                                                 method="lifecycle"), now=NOW)
    assert kinds(p) == ["abort_uploads", "lifecycle_apply", "lc_process", "lifecycle_restore", "gc_process", "verify"]
    assert "before step 4 is done, the previous rules are put back at once" in p.steps[1].summary
    (rule,) = p.steps[1].rules
    assert rule["Filter"] == {"Prefix": "plain/"} and rule["Expiration"] == {"Days": 2}
    assert rule["ID"] == f"rgwkeeper-purge-{p.plan_id}"
    assert "radosgw-admin lc process --bucket capture-mixed" in p.commands()
    whole = plan(mixed(release="reef"), PurgeRequest("capture-mixed", method="lifecycle"), now=NOW)
    assert whole.steps[2].rules[0]["Expiration"] == {"Date": "2000-01-01T00:00:00Z"}
    assert kinds(whole)[-2:] == ["delete_bucket", "verify"]


@pytest.mark.parametrize("release", ["reef", "tentacle"])  # Pacific cannot lc process one bucket
@pytest.mark.parametrize("method", ["direct", "s3", "admin-purge", "admin-purge-bypass-gc", "lifecycle"])
def test_plan_survives_a_round_trip_through_its_checkpoint_form(method, release):
    req = PurgeRequest("capture-mixed", method=method) if method != "s3" else \
        PurgeRequest("capture-mixed", prefix="plain/", older_than_s=60, method="s3")
    p = plan(mixed(release=release), req, now=NOW)
    again = Plan.from_dict(json.loads(json.dumps(p.to_dict())))
    assert again == p and again.plan_id == p.plan_id
    assert [type(s) for s in again.steps] == [type(s) for s in p.steps]


def _legacy(kind, admin=(), **params):
    """A step as checkpoints stored it before steps were typed: a params dict, argvs by position."""
    return {"kind": kind, "summary": kind, "admin": [list(a) for a in admin], "calls": [], "params": params}


def test_a_checkpoint_from_before_typed_steps_still_resumes():
    sync, gc = ("user", "stats", "--uid", "o", "--sync-stats"), ("gc", "process", "--include-all")
    entry, inst = ("metadata", "rm", "bucket:b"), ("metadata", "rm", "bucket.instance:b:1")
    drop = Step.from_dict(_legacy("drop_bucket", (entry, inst, sync, gc), owner="o"))
    assert drop == DropBucket(summary="drop_bucket", owner="o", entry_rm=entry, instance_rm=inst,
                              stats_sync=sync, gc=gc)
    tentacle = Step.from_dict(_legacy("drop_bucket", (sync, gc), owner="o", drop="empty-index"))
    assert tentacle.through_rgw and tentacle.admin == (sync, gc) and tentacle.entry_rm is None
    rm = ("bucket", "rm", "--bucket", "b", "--purge-objects")
    assert Step.from_dict(_legacy("admin_bucket_rm", (rm, sync))).admin == (rm, sync)
    delete = Step.from_dict(_legacy("delete_objects", prefix="p/", cutoff_s=5.0, larger_than=None,
                                    smaller_than=None, strategy="s3", versions=True, recheck=True))
    assert delete == DeleteObjects(summary="delete_objects", scope=Scope("p/", 5.0), strategy="s3", versions=True,
                                   recheck=True)
    with pytest.raises(ValueError, match="unknown step kind 'bi_purge'"):
        Step.from_dict(_legacy("bi_purge"))


def test_every_step_kind_has_one_handler_and_a_bad_step_cannot_be_built():
    from rgwkeeper.purge.execute import STEP_HANDLERS

    assert set(STEP_HANDLERS) | {Verify} == set(STEP_TYPES.values())
    assert all(cls.kind == kind for kind, cls in STEP_TYPES.items())
    sync, gc = ("user", "stats"), ("gc", "process")
    with pytest.raises(ValueError, match="through_rgw"):
        DropBucket(summary="x", owner="o", through_rgw=True, entry_rm=("metadata", "rm", "bucket:b"),
                   instance_rm=("metadata", "rm", "bucket.instance:b:1"), stats_sync=sync, gc=gc)
    with pytest.raises(ValueError, match="through_rgw"):
        DropBucket(summary="x", owner="o", stats_sync=sync, gc=gc)  # neither the metadata rm nor RGW's delete
    with pytest.raises(ValueError, match="strategy"):
        DeleteObjects(summary="x", strategy="rados")


def test_a_scope_matches_by_age_and_size_and_leaves_markers_to_a_size_filter():
    from datetime import datetime, timezone

    at = datetime.fromtimestamp(100, timezone.utc)
    obj = {"LastModified": at, "Size": 10}
    marker = {"LastModified": at}
    assert EVERYTHING.matches(obj) and EVERYTHING.matches(marker) and not EVERYTHING.filtered
    assert Scope(cutoff_s=101).matches(obj) and not Scope(cutoff_s=100).matches(obj)
    assert Scope(larger_than=9).matches(obj) and not Scope(larger_than=10).matches(obj)
    assert Scope(smaller_than=11).matches(obj) and not Scope(smaller_than=10).matches(obj)
    assert Scope(cutoff_s=101).matches(marker) and not Scope(larger_than=0).matches(marker)


def test_request_validation_happens_before_anything_is_sent():
    for bad in ("x&purge-objects=true", "-abc", "UPPER", "a b", "ab"):
        with pytest.raises(InvalidName):
            PurgeRequest(bad)
    for bad in ("a b", "%2e", "-x", "a&b", "tab\there"):
        with pytest.raises(InvalidName):
            PurgeRequest("good-bucket", prefix=bad)
    with pytest.raises(UsageError, match="unknown method"):
        PurgeRequest("good-bucket", method="fast")
    assert PurgeRequest("b12", prefix="p/").key() != PurgeRequest("b12", prefix="q/").key()


@pytest.mark.parametrize("field, value", [
    ("older_than_s", float("nan")), ("older_than_s", float("inf")), ("older_than_s", -1.0), ("older_than_s", 0),
    ("older_than_s", 1e12), ("older_than_s", "7d"), ("larger_than", float("inf")), ("larger_than", 1.5),
    ("larger_than", -1), ("larger_than", 2**63), ("smaller_than", float("nan")), ("smaller_than", True),
])
def test_request_refuses_a_filter_that_is_not_a_finite_number_in_range(field, value):
    # The Python API's own check: a NaN cutoff matched every object (the CLI parsers never make one).
    with pytest.raises(UsageError, match=field) as exc:
        PurgeRequest("good-bucket", prefix="p/", **{field: value})
    assert "\n" not in str(exc.value)


# -- lifecycle rules -------------------------------------------------------------------------------

def test_rules_validate_and_render_as_s3_wants_them():
    r = lc.parse_rule({"bucket": "logs-*", "prefix": "tmp/", "days": 7, "expired_delete_markers": True,
                       "noncurrent_days": 2, "abort_multipart_days": 1})
    main, dm = r.to_s3_rules()
    assert main["Filter"] == {"Prefix": "tmp/"} and main["Expiration"] == {"Days": 7}
    assert main["NoncurrentVersionExpiration"] == {"NoncurrentDays": 2}
    assert main["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 1}
    assert dm["Expiration"] == {"ExpiredObjectDeleteMarker": True} and dm["ID"] == main["ID"] + "-dm"
    assert main["ID"].startswith("rgwkeeper-") and r.rule_id == lc.parse_rule(dict(
        bucket="other", prefix="tmp/", days=7, expired_delete_markers=True, noncurrent_days=2,
        abort_multipart_days=1)).rule_id  # the ID is the rule, not the bucket
    tagged = lc.parse_rule({"bucket": "b12", "days": 1, "tags": {"tier": "scratch"}})
    assert tagged.to_s3_rules()[0]["Filter"] == {"Tag": {"Key": "tier", "Value": "scratch"}}
    both = lc.parse_rule({"bucket": "b12", "days": 1, "prefix": "a/", "tags": {"t": "x"}})
    assert both.to_s3_rules()[0]["Filter"] == {"And": {"Prefix": "a/", "Tags": [{"Key": "t", "Value": "x"}]}}


def test_bad_rules_are_refused_with_every_reason():
    _, problems = lc.rule_problems({"bucket": "x&y", "prefx": "a", "days": 0})
    text = "; ".join(problems)
    assert "unknown key(s) prefx" in text and "days must be a whole number" in text and "not valid" in text
    _, problems = lc.rule_problems({"bucket": "b12", "abort_multipart_days": 1, "tags": {"a": "b"}})
    assert any("cannot be combined" in p for p in problems)
    with pytest.raises(UsageError, match="does nothing"):
        lc.parse_rule({"bucket": "b12"})
    for release in ("pacific", "reef", "squid", "unknown"):
        with pytest.raises(UsageError, match=f"need Tentacle; this cluster runs {release}"):
            lc.check_release(lc.parse_rule({"bucket": "b12", "days": 1, "larger_than": 10}), release)
    lc.check_release(lc.parse_rule({"bucket": "b12", "days": 1, "smaller_than": 10}), "tentacle")


def test_merge_keeps_other_rules_and_compares_as_rgw_reads_back():
    existing = FX["lifecycle_versioned"]["Rules"]
    ours = lc.parse_rule({"bucket": "b12", "days": 3}).to_s3_rules()
    merged = lc.merge(existing, ours)
    assert [r["ID"] for r in merged] == ["keep-a-week", ours[0]["ID"]]
    assert lc.merge(merged, ours) == merged
    assert lc.same_rules(existing, existing) and not lc.same_rules(existing, merged)
    assert lc.same_rules([{**existing[0], "Prefix": ""}], existing)  # RGW adds an empty Prefix on read
    import datetime

    put = lc.purge_rule("tmp/", None, "abc")
    read_back = [{**put[0], "Expiration": {"Date": datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc)}}]
    assert lc.same_rules(read_back, put)  # boto3 parses the Date it reads back


def test_tag_filters_compare_and_merge_as_rgw_spells_them():
    # What RGW 16.2.15 read back for the rules put (captured against the test cluster).
    one = lc.parse_rule({"bucket": "b12", "prefix": "t/", "days": 1, "tags": {"tier": "scratch"}}).to_s3_rules()
    assert one[0]["Filter"] == {"And": {"Prefix": "t/", "Tags": [{"Key": "tier", "Value": "scratch"}]}}
    one_read = [{**one[0], "Filter": {"Prefix": "t/", "Tag": {"Key": "tier", "Value": "scratch"}}}]
    two = lc.parse_rule({"bucket": "b12", "days": 1, "tags": {"tier": "scratch", "team": "a"}}).to_s3_rules()
    two_read = [{**two[0], "Filter": {"And": {"Tags": [{"Key": "team", "Value": "a"},
                                                       {"Key": "tier", "Value": "scratch"}]}}}]
    assert lc.same_rules(one_read, one) and lc.same_rules(two_read, two)
    assert not lc.same_rules(one_read, [{**one[0], "Filter": {"Prefix": "t/"}}])  # the tag counts
    theirs = [{**one_read[0], "ID": "theirs"}]
    merged = lc.merge(theirs, two)
    assert merged[0]["Filter"] == one[0]["Filter"]  # put back as S3 spells it, not as read
    assert lc.same_rules(merged[:1], theirs)
    assert lc.s3_rules(one_read)[0]["Filter"] == one[0]["Filter"]  # what a purge's restore step puts back


def test_when_rgw_expires():
    day = 86400
    midnight = 20000 * day
    # Normal: counted from midnight UTC today, so an object written late yesterday is one day old
    # only after the next midnight.
    assert lc.expired(midnight - 1, 1, midnight + 3600) is False
    assert lc.expired(midnight - day, 1, midnight + 3600) is True
    # rgw_lc_debug_interval = 10: a "day" is 10 s from now.
    assert lc.expired(100, 1, 109, debug_interval_s=10) is False
    assert lc.expired(100, 1, 110, debug_interval_s=10) is True


@pytest.mark.parametrize("release,method", [("pacific", "direct"), ("reef", "direct"), ("quincy", "s3"),
                                            ("squid", "s3"), ("tentacle", "direct")])
def test_direct_only_on_releases_whose_layout_was_checked_on_a_real_cluster(release, method):
    p = plan(mixed(release=release), PurgeRequest("capture-mixed"), now=NOW)
    assert p.method == method
    if method == "s3":
        assert "verified on pacific, reef, tentacle only" in dict(p.rejected)["direct"]


def test_direct_plan_on_tentacle_empties_the_index_and_has_rgw_delete_the_bucket():
    # Tentacle's own captures: on 20.2.4 `metadata rm bucket.instance:...` removes nothing.
    tx = load_fixture("../tentacle/purge.json")
    zones = [z["name"] for z in tx["zonegroup_get"]["zones"]]
    placement = {p["key"]: {"index_pool": p["val"]["index_pool"], "data_extra_pool": p["val"]["data_extra_pool"],
                            "data_pool": p["val"]["storage_classes"]["STANDARD"]["data_pool"]}
                 for p in tx["zone_get"]["placement_pools"]}
    prof = parse_profile(tx["bucket_stats_mixed"], tx["instance_mixed"], placement, zones, tx["versions"])
    assert prof.release == "tentacle"
    p = plan(prof, PurgeRequest(prof.bucket), now=NOW)
    assert p.method == "direct"
    assert kinds(p) == ["fence", "abort_uploads", "delete_objects", "drop_bucket", "verify"]
    drop = p.steps[3]
    assert drop.through_rgw and drop.entry_rm is None and drop.instance_rm is None
    assert [render_admin(a) for a in drop.admin] == [
        f"radosgw-admin user stats --uid {prof.owner} --sync-stats", "radosgw-admin gc process --include-all"]
    shards = index_shard_oids(prof.bucket_id, prof.num_shards)
    assert drop.calls[1] == (f"librados {prof.index_pool}: on {shards[0]} .. {shards[-1]}, one write op each: clear "
                             "the omap, then exec rgw.bucket_init_index (the empty index RGW writes for a new bucket)")
    assert drop.calls[0].startswith(f"before dropping: admin API GET /admin/bucket?bucket={prof.bucket}&stats=True")
    assert drop.calls[2] == f"S3 DeleteBucket bucket={prof.bucket}"
    assert not any("metadata rm" in c for c in p.commands())
    shown = "\n".join(p.show())
    assert "delete the empty bucket through RGW" in shown and f"> S3 DeleteBucket bucket={prof.bucket}" in shown
    # Pacific and Reef drop the same way; the metadata removal they used before is what a plan
    # saved then still holds (its checkpoint resumes: test_purge_execute).
    for release in ("pacific", "reef"):
        other = plan(dataclasses.replace(prof, release=release), PurgeRequest(prof.bucket), now=NOW)
        assert other.steps[3].through_rgw and other.steps[3].calls[2] == f"S3 DeleteBucket bucket={prof.bucket}"
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(purge_plan.DIRECT_DROP, "pacific", "metadata-rm")
        before = plan(dataclasses.replace(prof, release="pacific"), PurgeRequest(prof.bucket), now=NOW)
    assert not before.steps[3].through_rgw and before.steps[3].entry_rm == ("metadata", "rm", f"bucket:{prof.bucket}")
    assert f"radosgw-admin metadata rm bucket.instance:{prof.bucket}:{prof.bucket_id}" in before.commands()


@pytest.mark.parametrize("rule, words", [
    ({"bucket": "b12", "days": 99999999999}, "days must be a whole number from 1 to 36,500"),
    ({"bucket": "b12", "days": 1, "larger_than": 2**63}, "larger_than must be a whole number from 0 to"),
    ({"bucket": "b12", "days": 1, "tags": {"": "x"}}, "tag keys must be 1 to 128 characters"),
    ({"bucket": "b12", "days": 1, "tags": {"tier": "hot\n"}}, "tag keys must be 1 to 128 characters"),
    ({"bucket": "b12", "days": 1, "tags": {"k" * 129: "x"}}, "tag keys must be 1 to 128 characters"),
])
def test_lifecycle_rule_numbers_and_tags_are_bounded(rule, words):
    with pytest.raises(UsageError, match=words):
        lc.parse_rule(rule)


@pytest.mark.parametrize("field, value", [("days", float("nan")), ("days", 0), ("noncurrent_days", 10**9),
                                          ("larger_than", -1), ("smaller_than", float("inf")), ("days", 1.5)])
def test_expiry_rule_objects_check_their_numbers(field, value):
    with pytest.raises(UsageError, match=field):
        lc.ExpiryRule(bucket="b12", **{field: value})


# -- what a filter reaches ------------------------------------------------------------------------

@pytest.mark.parametrize("versioning", ["enabled", "suspended"])
@pytest.mark.parametrize("method, size", [("auto", {"larger_than": 1024}), ("s3", {"smaller_than": 1 << 20}),
                                          ("lifecycle", {"larger_than": 1024})])
def test_a_size_filter_is_refused_on_a_versioned_bucket(versioning, method, size):
    # A size filter picks versions one by one: the large current version would go and an older
    # small one would be served again.
    profile = mixed(versioning=versioning, release="tentacle")
    with pytest.raises(UsageError, match=f"versioning {versioning}.*older version again.*nothing was changed"):
        plan(profile, PurgeRequest("capture-mixed", prefix="plain/", method=method, **size), now=NOW)
    # Age and prefix take whole keys' histories in time order: still allowed.
    assert plan(profile, PurgeRequest("capture-mixed", prefix="plain/", older_than_s=3600), now=NOW).method == "s3"


def test_a_size_filter_on_an_unversioned_bucket_says_how_it_applies():
    p = plan(mixed(), PurgeRequest("capture-mixed", larger_than=1024), now=NOW)
    assert "size: object by object (versioning off" in "\n".join(p.show())


def test_prefix_continuations_and_when_they_are_a_surprise():
    from rgwkeeper.purge.scope import prefix_scope

    s = prefix_scope("logs", keys=["logs", "logs.old"], common_prefixes=["logs/", "logs2/"], truncated=False)
    assert s.continuations == ("", ".old", "/", "2/") and s.ambiguous
    text = "\n".join(s.describe())
    assert "'logs' (the key itself), 'logs.old', 'logs/', 'logs2/'" in text
    assert "WARNING: prefix 'logs' does not end a path segment" in text and "(e.g. 'logs/')" in text
    assert not prefix_scope("logs", [], ["logs/"], False).ambiguous  # one name: what was meant
    assert not prefix_scope("logs/", ["logs/a"], ["logs/b/", "logs/c/"], False).ambiguous
    assert not prefix_scope("2026-", [], ["2026-01/", "2026-02/"], False).ambiguous
    many = prefix_scope("x", [f"x{i:04d}" for i in range(10)], [], truncated=True)
    assert "and 5 more (first 1,000 listed)" in many.describe()[0] and "all 10+ of these" in many.describe()[1]


def test_the_age_cutoff_and_what_the_prefix_reaches_travel_with_the_plan():
    from rgwkeeper.purge.scope import PrefixScope, RgwClock

    clock = RgwClock(rgw_s=NOW, local_s=NOW + 7200.4)
    scope = PrefixScope("plain", ("/", "2/"), complete=True)
    p = plan(mixed(), PurgeRequest("capture-mixed", prefix="plain", older_than_s=3600), now=clock.rgw_s,
             clock=clock, prefix_scope=scope)
    assert p.cutoff_s == NOW - 3600
    text = "\n".join(p.show())
    assert "age: objects last modified before 2027-01-15T07:00:00Z, on RGW's clock (its Date header read " \
           "2027-01-15T08:00:00Z; this host's clock is 7,200 s ahead of RGW's and is not used)" in text
    assert "WARNING: prefix 'plain' does not end a path segment" in text
    doc = json.loads(json.dumps(p.to_dict()))
    assert doc["clock"]["source"] == "rgw" and doc["clock"]["skew_s"] == 7200.4
    assert doc["prefix_scope"] == {"prefix": "plain", "continuations": ["/", "2/"], "complete": True, "ambiguous": True}
    assert Plan.from_dict(doc) == p


def test_rgws_clock_is_read_from_any_answer_it_gives():
    import boto3
    from botocore.stub import Stubber

    from rgwkeeper.adapters.s3 import S3Adapter
    from rgwkeeper.errors import CephError

    client = boto3.client("s3", region_name="default", aws_access_key_id="a", aws_secret_access_key="b",
                          endpoint_url="http://rgw:8080")
    stub = Stubber(client)
    stub.add_response("head_bucket", {"ResponseMetadata": {"HTTPHeaders": {"date": "Mon, 23 Nov 2026 19:26:20 GMT"}}},
                      {"Bucket": "abc"})
    # A bucket that does not exist: RGW's 404 carries its clock as well.
    stub.add_client_error("head_bucket", service_error_code="404", http_status_code=404,
                          response_meta={"HTTPHeaders": {"date": "Mon, 23 Nov 2026 19:26:21 GMT"}})
    stub.add_response("head_bucket", {}, {"Bucket": "abc"})  # no Date header: refused, not guessed
    with stub:
        s3 = S3Adapter(client)
        assert (s3.rgw_date("abc"), s3.rgw_date("abc")) == (1795461980.0, 1795461981.0)
        with pytest.raises(CephError, match="no usable Date header"):
            s3.rgw_date("abc")


def test_the_s3_access_check_lists_one_key_and_names_rgws_refusal():
    import boto3
    from botocore.stub import Stubber

    from rgwkeeper.adapters.s3 import S3Adapter
    from rgwkeeper.errors import CephError, NotFound
    from rgwkeeper.purge.plan import s3_refused

    client = boto3.client("s3", region_name="default", aws_access_key_id="a", aws_secret_access_key="b",
                          endpoint_url="http://rgw:8080")
    stub = Stubber(client)
    stub.add_response("list_objects_v2", {"KeyCount": 0}, {"Bucket": "abc", "MaxKeys": 1})
    for code, status in (("AccessDenied", 403), ("SignatureDoesNotMatch", 403), ("NoSuchBucket", 404)):
        stub.add_client_error("list_objects_v2", service_error_code=code, http_status_code=status,
                              expected_params={"Bucket": "abc", "MaxKeys": 1})
    with stub:
        s3 = S3Adapter(client)
        s3.check_list_access("abc")
        with pytest.raises(CephError) as denied:
            s3.check_list_access("abc")
        assert s3_refused(denied.value)
        with pytest.raises(CephError) as bad_key:
            s3.check_list_access("abc")
        assert not s3_refused(bad_key.value) and bad_key.value.detail == "SignatureDoesNotMatch"
        with pytest.raises(NotFound):
            s3.check_list_access("abc")


def test_the_age_cutoff_is_whole_seconds_rounded_down_as_rgw_heads_last_modified():
    # RGW's HEAD gives Last-Modified in whole seconds: with a cutoff at X.7, a key written again
    # at X.8 (newer than the cutoff) would HEAD as X and pass the re-check.
    p = plan(mixed(), PurgeRequest("capture-mixed", prefix="plain/", older_than_s=3600), now=NOW + 0.7)
    assert p.cutoff_s == NOW - 3600 and float(p.cutoff_s).is_integer()
    import datetime
    written_again = datetime.datetime.fromtimestamp(NOW - 3600 + 0.8, datetime.timezone.utc)
    head = {"LastModified": written_again.replace(microsecond=0), "Size": 1}
    assert not p.steps[1].scope.matches(head)


def test_a_scope_never_matches_a_key_outside_its_prefix_whatever_the_listing_returned():
    import datetime
    old = datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc)
    scope = Scope("plain/", NOW)
    assert scope.matches({"Key": "plain/1", "LastModified": old, "Size": 1})
    assert not scope.matches({"Key": "plainly", "LastModified": old, "Size": 1})
    assert not scope.matches({"Key": "other/plain/1", "LastModified": old, "Size": 1})


@pytest.mark.parametrize("change", [{"index_gen": None}, {"indexless": True}, {"versioning": "suspended"}])
def test_an_s3_purge_lists_by_index_only_a_plain_known_index(change):
    from rgwkeeper import purge as purge_api
    from rgwkeeper.purge.plan import Tuning

    p = plan(mixed(**change), PurgeRequest("capture-mixed", prefix="plain/", method="s3"), now=NOW,
             tuning=Tuning(direct_listing="index"))
    assert not purge_api.uses_items(p)
    assert not any(c.startswith("librados") for s in p.steps for c in s.calls if isinstance(s, DeleteObjects))


def test_the_dry_run_says_the_read_back_takes_the_owners_stats_from_the_drops_sync():
    p = plan(mixed(size_bytes=6 * 4096), PurgeRequest("capture-mixed"), now=NOW)
    text = "\n".join(p.show())
    owner = p.profile.owner
    assert "the owner's stats as the drop's sync answered them" in text
    assert f"radosgw-admin user stats --uid {owner} if this run did not sync them" in text


@pytest.mark.parametrize("method", ["direct", "s3", "admin-purge", "admin-purge-bypass-gc"])
@pytest.mark.parametrize("release", ["pacific", "tentacle"])
def test_the_dry_run_shows_the_owners_stats_sync_through_the_admin_api_and_its_fallback(method, release):
    p = plan(mixed(size_bytes=6 * 4096, release=release), PurgeRequest("capture-mixed", method=method), now=NOW)
    text = "\n".join(p.show())
    owner = p.profile.owner
    api = f"admin API GET /admin/user?uid={owner}&stats=True&sync=True"
    assert text.count(api) == 1
    # The fallback's argv is shown in the same step, above the API's call.
    step = next(s for s in p.steps if getattr(s, "stats_sync", None))
    assert step.stats_sync == ("user", "stats", "--uid", owner, "--sync-stats") and any(api in c for c in step.calls)
