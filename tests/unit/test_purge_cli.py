"""`rgwkeeper purge` / `expire` on the command line: one-line refusals before anything is sent,
confirmation only on a terminal, dry run output and the JSON summary (adapters faked)."""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import signal
import sys
from pathlib import Path

import pytest

from rgwkeeper import logs
from rgwkeeper import purge as purge_api
from rgwkeeper.cli.common import run_cli
from rgwkeeper.cli.main import cli
from rgwkeeper.errors import CephError
from tests.unit.purge_fakes import World, purge_io


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A config, a ceph.conf and credentials on disk, and the purge adapters replaced by the
    fake world (so any other network or cluster access would fail the test)."""
    conf = tmp_path / "ceph.conf"
    conf.write_text("[global]\n")
    creds = tmp_path / "creds"
    creds.write_text('access_key = "AK"\nsecret_key = "SK"\n')
    creds.chmod(0o600)
    cfg = tmp_path / "rgwkeeper.toml"
    cfg.write_text(f'[purge]\nstate_dir = "{tmp_path / "state"}"\nprotected_buckets = ["prod-*"]\n')
    world = World()
    io, _ = purge_io(world, tmp_path)
    opened = []
    monkeypatch.setattr(purge_api, "open_io", lambda access, pcfg: opened.append(access) or io)
    monkeypatch.setattr(purge_api, "close_io", lambda io: None)
    monkeypatch.setattr("rgwkeeper.cli.purge.sys.stdin.isatty", lambda: False)
    flags = ["--config", str(cfg), "--conf", str(conf), "--rgw-endpoint", "http://rgw:8080",
             "--rgw-credentials", str(creds)]
    yield world, flags, opened
    # The CLI points logging at the captured stderr, which pytest closes after the test.
    logs.setup("warning", stream=sys.__stderr__)


@pytest.mark.parametrize("args, message", [
    (["x&purge-objects=true"], "is not valid"),
    (["--", "-abc"], "starts with '-'"),
    (["good-bucket", "--prefix", "a b"], "contains ' '"),
    (["good-bucket", "--prefix", "50%"], "contains '%'"),
    (["good-bucket", "--older-than", "soon"], "not like 30s"),
    (["prod-main"], "is protected"),
    (["good-bucket", "--max-rate", "-5"], "--max-rate"),
    # Was taken on a cluster that is not full ("not used"), and the purge went on.
    (["capture-mixed", "--raise-full-ratio", "0.98", "--yes"], "0.98 is above purge.max_full_ratio 0.97"),
    (["expire", "capture-mixed", "--days", "1", "--raise-full-ratio", "0.98", "--yes"],
     "0.98 is above purge.max_full_ratio 0.97"),
    (["capture-mixed", "--name", "client.", "--yes"], "cephx name 'client.' (from --name, --id or cluster.name) is not a client name"),
    (["capture-mixed", "--id", "a b", "--yes"], "cephx name 'client.a b' (from --name, --id or cluster.name) is not"),
    (["--match", "PROD*", "--yes"], "pattern 'PROD*' can match no bucket name"),
])
def test_refused_before_anything_is_sent(env, capsys, args, message):
    world, flags, opened = env
    command = ["expire", *flags, *args[1:]] if args[0] == "expire" else ["purge", *flags, *args]
    rc = run_cli(cli, command)
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and message in err and "Traceback" not in err
    assert opened == [] and world.log == []


def test_no_terminal_and_no_yes_refuses_without_changing_anything(env, capsys):
    world, flags, _ = env
    before = json.dumps(world.current_stats(), sort_keys=True)
    rc = run_cli(cli, ["purge", *flags, "capture-mixed"])
    err = capsys.readouterr().err
    assert rc == 2 and err == ("rgwkeeper: error: not confirmed: no terminal to ask on; pass --yes to purge "
                               "without asking (nothing was changed)\n")
    assert json.dumps(world.current_stats(), sort_keys=True) == before


def test_missing_bucket_is_an_error(env, capsys):
    world, flags, _ = env
    world.exists = False
    rc = run_cli(cli, ["purge", *flags, "capture-mixed", "--yes"])
    assert rc == 2 and "bucket 'capture-mixed' does not exist" in capsys.readouterr().err


def test_dry_run_prints_the_plan_and_changes_nothing(env, capsys, tmp_path):
    world, flags, _ = env
    before = (json.dumps(world.current_stats(), sort_keys=True), sorted(world.pools["default.rgw.buckets.data"]))
    assert run_cli(cli, ["purge", *flags, "capture-mixed", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "method: direct (chosen automatically)" in out and "dry run: nothing was changed" in out
    assert "$ radosgw-admin --conf" in out and "> S3 DeleteBucket bucket=capture-mixed" in out
    assert (json.dumps(world.current_stats(), sort_keys=True), sorted(world.pools["default.rgw.buckets.data"])) == before
    assert not (tmp_path / "state").exists()
    assert run_cli(cli, ["purge", *flags, "capture-mixed", "--dry-run", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["dry_run"] is True and doc["method"] == "direct" and len(doc["commands"]) > 5


def test_max_rate_is_shown_in_the_dry_run_and_kept_by_the_purge(env, capsys):
    world, flags, _ = env
    assert run_cli(cli, ["purge", *flags, "capture-mixed", "--dry-run", "--max-rate", "25"]) == 0
    out = capsys.readouterr().out
    assert "rate cap: at most 25 objects/s" in out
    # The step says how the cap shapes its requests, beside the widths it has without one.
    assert "(under the cap of 25 objects/s: requests of 2)" in out
    assert run_cli(cli, ["purge", *flags, "capture-mixed", "--dry-run"]) == 0
    assert "under the cap" not in capsys.readouterr().out
    assert run_cli(cli, ["purge", *flags, "capture-mixed", "--dry-run", "--json", "--max-rate", "25"]) == 0
    assert json.loads(capsys.readouterr().out)["max_objects_per_second"] == 25.0
    assert run_cli(cli, ["purge", *flags, "capture-mixed", "--yes", "--json", "--max-rate", "1000"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is True and doc["pacing"]["max_objects_per_second"] == 1000.0 and not world.exists
    # Whether the window held the purge back depends on how fast this machine runs the fake's
    # work (a request's slot here is 0.1 s): only that it was judged, on every timed request.
    pacing = doc["pacing"]
    assert pacing["cap_ops_in_flight"] == 1 and pacing["cap_requests_timed"] > 0
    assert isinstance(pacing["cap_held_back_by_window"], bool)


def test_cap_ops_in_flight_from_the_config_is_shown_in_the_dry_run_and_kept_by_the_purge(env, capsys):
    world, flags, _ = env
    cfg = Path(flags[flags.index("--config") + 1])
    cfg.write_text(cfg.read_text().replace("[purge]\n", "[purge]\ncap_ops_in_flight = 4\n"))
    assert run_cli(cli, ["purge", *flags, "capture-mixed", "--dry-run", "--max-rate", "25"]) == 0
    out = capsys.readouterr().out
    assert "(4 ops in flight)" in out and "(256 ops in flight)" not in out
    assert run_cli(cli, ["purge", *flags, "capture-mixed", "--dry-run"]) == 0
    assert "(256 ops in flight)" in capsys.readouterr().out  # without a cap, rados_ops_in_flight
    assert run_cli(cli, ["purge", *flags, "capture-mixed", "--yes", "--json", "--max-rate", "1000"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is True and doc["pacing"]["cap_ops_in_flight"] == 4 and not world.exists


def test_an_s3_purge_under_a_cap_reports_no_librados_window(env, capsys):
    world, flags, _ = env
    assert run_cli(cli, ["purge", *flags, "capture-mixed", "--method", "s3", "--yes", "--json", "--max-rate",
                         "1000"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is True and doc["method"] == "s3" and doc["pacing"]["max_objects_per_second"] == 1000.0
    assert not any(k.startswith("cap_") for k in doc["pacing"]), doc["pacing"]


def test_a_cap_not_reached_is_one_line_of_the_summary_and_a_reached_one_is_silent():
    from rgwkeeper.cli.render import cap_line

    pacing = {"max_objects_per_second": 900.0, "cap_ops_in_flight": 1, "cap_requests_timed": 110,
              "cap_requests_slow": 104, "cap_held_back_by_window": True}
    assert cap_line(pacing) == (
        "the cap of 900 objects/s was not reached: 104 of 110 requests took longer than their slot with 1 librados "
        "operation in flight; raise purge.cap_ops_in_flight to go faster, at more ingest impact (docs/purge.md, "
        "\"One operation at a time under a cap\")")
    assert cap_line({**pacing, "cap_ops_in_flight": 4}).count("4 librados operations in flight") == 1
    assert cap_line({**pacing, "cap_held_back_by_window": False}) is None
    assert cap_line({**pacing, "cap_held_back_by_window": None}) is None  # no capped request was timed
    assert cap_line({"max_objects_per_second": None}) is None  # no cap


def test_impact_low_is_shown_with_its_cap_and_pacing_and_kept_by_the_purge(env, capsys):
    world, flags, _ = env
    assert run_cli(cli, ["purge", *flags, "capture-mixed", "--dry-run", "--impact", "low"]) == 0
    out = capsys.readouterr().out
    assert "impact low: at most 20 objects/s, writes paced to at most 30% above" in out
    assert "rate cap: at most 20 objects/s" in out
    assert run_cli(cli, ["purge", *flags, "capture-mixed", "--dry-run", "--json", "--impact", "low"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["impact"] == "low" and doc["max_objects_per_second"] == 20.0
    assert run_cli(cli, ["purge", *flags, "capture-mixed", "--yes", "--json", "--impact", "max"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is True and doc["pacing"]["max_objects_per_second"] is None and not world.exists
    assert "cap_held_back_by_window" not in doc["pacing"]


def test_impact_normal_purges_the_whole_bucket_with_bucket_rm_and_refuses_a_prefix(env, capsys):
    world, flags, opened = env
    assert run_cli(cli, ["purge", *flags, "capture-mixed", "--dry-run", "--impact", "normal"]) == 0
    out = capsys.readouterr().out
    assert "method: admin-purge" in out and "impact normal: the whole bucket with radosgw-admin bucket rm" in out
    assert "radosgw-admin --conf" in out and "bucket rm --bucket capture-mixed --purge-objects" in out
    assert "rate cap" not in out
    assert run_cli(cli, ["purge", *flags, "capture-mixed", "--yes", "--json", "--impact", "normal"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is True and doc["method"] == "admin-purge" and not world.exists
    assert any("bucket rm --bucket capture-mixed --purge-objects" in line for line in world.log)


def test_a_bucket_rm_that_crashes_once_is_run_again_and_the_purge_finishes(env, capsys):
    world, flags, opened = env
    world.rm_crashes = 1
    assert run_cli(cli, ["purge", *flags, "capture-mixed", "--yes", "--json", "--impact", "normal"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is True and not world.exists and not world.index
    assert sum("bucket rm --bucket capture-mixed" in line for line in world.log) == 2


def test_a_bucket_rm_that_crashes_twice_fails_in_one_line_naming_the_crash_and_a_rerun_finishes(env, capsys):
    world, flags, opened = env
    world.rm_crashes = 2
    assert run_cli(cli, ["purge", *flags, "capture-mixed", "--yes", "--impact", "normal"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("rgwkeeper: error: "), err
    assert ("radosgw-admin bucket rm --bucket capture-mixed --purge-objects: crashed with SIGABRT (exit 134): "
            "*** Caught signal (Aborted) **") in err[-1], err
    assert "--keyring" not in err[-1] and "end dump" not in err[-1]
    assert world.exists and world.index  # half-way: the rerun resumes it
    assert run_cli(cli, ["purge", *flags, "capture-mixed", "--yes", "--impact", "normal"]) == 0
    assert not world.exists and not world.index


def test_a_bucket_rm_that_crashed_after_the_bucket_was_gone_is_not_run_again(env, capsys):
    world, flags, opened = env
    world.rm_crashes, world.rm_crash_leaves = 1, "all"
    assert run_cli(cli, ["purge", *flags, "capture-mixed", "--yes", "--json", "--impact", "normal"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True and not world.exists
    assert sum("bucket rm --bucket capture-mixed" in line for line in world.log) == 1


@pytest.mark.parametrize("leaves", ["recreated", "recreated-s3"])
def test_a_bucket_rm_that_crashed_is_not_run_again_on_a_bucket_re_created_under_its_name(env, capsys, leaves):
    world, flags, opened = env
    world.rm_crashes, world.rm_crash_leaves = 1, leaves
    assert run_cli(cli, ["purge", *flags, "capture-mixed", "--yes", "--impact", "normal"]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "re-created meanwhile; nothing more was removed" in err and world.bucket_id in err, err
    assert sum("bucket rm --bucket capture-mixed" in line for line in world.log) == 1


def test_impact_normal_with_a_filter_or_another_method_is_one_line_and_sends_nothing(env, capsys):
    world, flags, opened = env
    for extra, said in ((["--prefix", "plain/"], "purges whole buckets only"),
                        (["--method", "direct"], "--method direct beside it is ambiguous")):
        assert run_cli(cli, ["purge", *flags, "capture-mixed", "--yes", "--impact", "normal", *extra]) == 2
        err = capsys.readouterr().err
        assert said in err and err.count("\n") == 1 and "Traceback" not in err
    assert opened == [] and world.exists and world.log == []
    # expire deletes from a listing where it is not lc process: the level is not offered there.
    assert run_cli(cli, ["expire", *flags, "capture-mixed", "--days", "1", "--impact", "normal", "--yes"]) == 2
    assert "'normal' is not one of 'low', 'max'" in capsys.readouterr().err
    # Nor from the config, where this release's expiry deletes from a listing (Pacific: no lc process --bucket).
    cfg = Path(flags[flags.index("--config") + 1])
    cfg.write_text(cfg.read_text() + 'impact = "normal"\n')
    assert run_cli(cli, ["expire", *flags, "capture-mixed", "--days", "1", "--yes"]) == 2
    err = capsys.readouterr().err
    assert "this expiry deletes from a listing: give it low or max" in err and err.count("\n") == 1
    assert world.lifecycle == [] and world.exists


def test_a_configured_impact_with_its_own_keys_is_refused_before_anything_is_sent(env, capsys):
    world, flags, opened = env
    cfg = Path(flags[flags.index("--config") + 1])
    cfg.write_text(cfg.read_text() + 'impact = "max"\nmax_objects_per_second = 25.0\n')
    rc = run_cli(cli, ["purge", *flags, "capture-mixed", "--yes"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "purge.impact = 'max'" in err
    assert "purge.max_objects_per_second" in err and opened == [] and world.exists
    # The command line is explicit: it wins over the config's keys.
    assert run_cli(cli, ["purge", *flags, "capture-mixed", "--dry-run", "--json", "--impact", "low"]) == 0
    assert json.loads(capsys.readouterr().out)["max_objects_per_second"] == 20.0


def test_impact_low_with_a_method_it_cannot_hold_is_refused_before_any_change(env, capsys):
    world, flags, _ = env
    before = json.dumps(world.current_stats(), sort_keys=True)
    assert run_cli(cli, ["purge", *flags, "capture-mixed", "--yes", "--method", "admin-purge",
                         "--impact", "low"]) == 2
    err = capsys.readouterr().err
    assert "--impact low applies to the direct and s3 methods" in err
    assert json.dumps(world.current_stats(), sort_keys=True) == before and world.exists


def test_max_rate_with_a_method_it_cannot_hold_is_refused_before_any_change(env, capsys):
    world, flags, _ = env
    before = json.dumps(world.current_stats(), sort_keys=True)
    for extra in ([], ["--dry-run"]):
        assert run_cli(cli, ["purge", *flags, "capture-mixed", "--yes", "--method", "admin-purge",
                             "--max-rate", "25", *extra]) == 2
        err = capsys.readouterr().err
        assert "--max-rate applies to the direct and s3 methods" in err and "Traceback" not in err
    assert json.dumps(world.current_stats(), sort_keys=True) == before and world.exists


def test_a_configured_cap_that_does_not_apply_is_noted_not_reported(env, capsys):
    world, flags, _ = env
    cfg = Path(flags[flags.index("--config") + 1])
    cfg.write_text(cfg.read_text() + "max_objects_per_second = 25.0\n")
    assert run_cli(cli, ["purge", *flags, "capture-mixed", "--dry-run", "--json", "--method", "admin-purge"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["max_objects_per_second"] is None
    assert "purge.max_objects_per_second (25) does not apply to method admin-purge" in out.err


@pytest.mark.parametrize("rate", ["nan", "inf", "0.001", "-1"])
def test_max_rate_must_be_a_usable_finite_number(env, capsys, rate):
    world, flags, _ = env
    assert run_cli(cli, ["purge", *flags, "capture-mixed", "--yes", "--max-rate", rate]) == 2
    err = capsys.readouterr().err
    assert "--max-rate" in err and "Traceback" not in err and world.exists


def test_purge_with_yes_prints_a_json_summary(env, capsys, tmp_path):
    world, flags, _ = env
    assert run_cli(cli, ["purge", *flags, "capture-mixed", "--yes", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is True and doc["method"] == "direct" and doc["counters"]["objects_deleted"] == 6
    assert {c["status"] for c in doc["checks"]} == {"ok"}
    assert not world.exists
    assert list((tmp_path / "state").iterdir()) == []  # verified clean: no checkpoint left to resume


def test_expire_needs_rules_and_validates_them(env, capsys):
    world, flags, _ = env
    assert run_cli(cli, ["expire", *flags, "capture-mixed"]) == 2
    assert "no lifecycle rules" in capsys.readouterr().err
    assert run_cli(cli, ["expire", *flags, "capture-mixed", "--tag", "novalue"]) == 2
    assert "not KEY=VALUE" in capsys.readouterr().err
    assert run_cli(cli, ["expire", *flags, "--days", "3"]) == 2
    assert "rule options need a BUCKET" in capsys.readouterr().err
    assert world.log == []


def test_expire_dry_run_shows_the_merged_rules(env, capsys):
    world, flags, _ = env
    world.lifecycle = [{"ID": "theirs", "Status": "Enabled", "Filter": {"Prefix": "x/"}, "Expiration": {"Days": 30}}]
    assert run_cli(cli, ["expire", *flags, "capture-mixed", "--prefix", "plain/", "--days", "2", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "expire after 2 d" in out and '"ID": "theirs"' in out
    # Pacific: lc process cannot run one bucket, rgwkeeper applies the rule from a listing.
    assert "lc process --bucket capture-mixed" not in out and "tracker 53430" in out
    assert "ListObjectsV2 bucket=capture-mixed prefix='plain/', then HeadObject and DeleteObjects" in out
    assert world.lifecycle[0]["ID"] == "theirs" and len(world.lifecycle) == 1
    world.as_release("reef", "18.2.4")
    assert run_cli(cli, ["expire", *flags, "capture-mixed", "--prefix", "plain/", "--days", "2", "--dry-run"]) == 0
    assert "radosgw-admin --conf" in capsys.readouterr().out.split("lc process --bucket capture-mixed")[0]
    assert not any(line.startswith(("S3 Put", "S3 Delete", "S3 Abort", "radosgw-admin lc process")) for line in world.log)


def _age(world, key, days):
    world.index[key]["LastModified"] = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=days)


def test_expire_on_pacific_deletes_what_lifecycle_would_and_rechecks_each_key(env, capsys):
    world, flags, _ = env
    _age(world, "plain/0", 10)
    _age(world, "plain/1", 10)
    world.rewrite_on_head = {"plain/1"}  # written again after the listing: lifecycle would keep it too
    assert run_cli(cli, ["expire", *flags, "capture-mixed", "--prefix", "plain/", "--days", "2", "--yes",
                         "--json"]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    assert result["changed"] and result["ran"] and result["ok"], result["checks"]
    assert [r["Filter"] for r in world.lifecycle] == [{"Prefix": "plain/"}]  # installed for RGW's own runs
    assert "plain/0" not in world.index and {"plain/1", "plain/2"} <= set(world.index)
    applied = next(c for c in result["checks"] if c["name"].endswith("applied now"))
    assert applied["detail"] == "1 objects expired through S3 deletes, 1 rewritten since the listing kept"
    assert "S3 DeleteObjects ['plain/0']" in world.log
    assert not any("lc process" in line for line in world.log)


def test_expire_on_pacific_applies_a_tag_filter_by_each_objects_tags_now(env, capsys):
    world, flags, _ = env
    for key in ("plain/0", "plain/1", "plain/2"):
        _age(world, key, 10)
    world.tags = {"plain/0": {"tier": "scratch", "team": "a"}, "plain/1": {"tier": "scratch"},
                  "plain/2": {"tier": "gold"}}
    world.retag_on_tagging = {"plain/1": {"tier": "gold"}}  # re-tagged after the listing: keep it
    assert run_cli(cli, ["expire", *flags, "capture-mixed", "--prefix", "plain/", "--days", "2", "--tag",
                         "tier=scratch", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "older than 2 lifecycle day(s) carrying tier=scratch (GetObjectTagging of each old enough" in out, out
    assert "left to RGW" not in out and not any("GetObjectTagging" in line for line in world.log)
    assert run_cli(cli, ["expire", *flags, "capture-mixed", "--prefix", "plain/", "--days", "2", "--tag",
                         "tier=scratch", "--yes", "--json"]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    assert result["ok"], result["checks"]
    assert [r["Filter"] for r in world.lifecycle] == [
        {"And": {"Prefix": "plain/", "Tags": [{"Key": "tier", "Value": "scratch"}]}}]
    assert "plain/0" not in world.index and {"plain/1", "plain/2"} <= set(world.index)
    applied = next(c for c in result["checks"] if c["name"].endswith("applied now"))
    assert applied["detail"] == "1 objects expired through S3 deletes, 1 rewritten since the listing kept"
    ran = next(c for c in result["checks"] if c["name"].endswith(" ran"))
    assert ran["status"] == "ok" and "with tier=scratch" in ran["detail"]  # read back by tags, not skipped
    assert "S3 DeleteObjects ['plain/0']" in world.log
    assert not any(c["name"].endswith("left to RGW") for c in result["checks"])


def test_expire_read_back_fails_when_a_tagged_object_it_should_have_expired_is_left(env, capsys):
    world, flags, _ = env
    world.as_release("reef", "18.2.4")  # lc process runs the bucket; here it expires nothing
    _age(world, "plain/0", 10)
    world.tags = {"plain/0": {"tier": "scratch"}}
    assert run_cli(cli, ["expire", *flags, "capture-mixed", "--prefix", "plain/", "--days", "2", "--tag",
                         "tier=scratch", "--yes", "--json"]) == 1
    (result,) = json.loads(capsys.readouterr().out)
    ran = next(c for c in result["checks"] if c["name"].endswith(" ran"))
    assert ran["status"] == "failed" and "'plain/0'" in ran["detail"]


def test_expire_on_pacific_leaves_what_a_listing_cannot_decide_to_rgw(env, capsys):
    world, flags, _ = env
    assert run_cli(cli, ["expire", *flags, "capture-mixed", "--noncurrent-days", "3", "--yes", "--json"]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    (left,) = [c for c in result["checks"] if c["name"].endswith("left to RGW")]
    assert left["status"] == "skipped" and "noncurrent versions" in left["detail"] and "53430" in left["detail"]
    assert not any(line.startswith(("S3 DeleteObjects", "radosgw-admin lc process")) for line in world.log)


def test_expire_on_newer_releases_runs_lc_process_for_the_bucket(env, capsys):
    world, flags, _ = env
    world.as_release("reef", "18.2.4")
    assert run_cli(cli, ["expire", *flags, "capture-mixed", "--prefix", "plain/", "--days", "2", "--yes",
                         "--json"]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    assert result["changed"] and result["ran"] and result["ok"]
    assert "radosgw-admin lc process --bucket capture-mixed" in world.log


def _with_busy_wait(flags, seconds):
    cfg = flags[flags.index("--config") + 1]
    with open(cfg, "a") as f:
        f.write(f"lc_busy_wait_s = {seconds}\n")


def test_expire_runs_lc_again_when_another_worker_held_the_bucket(env, capsys):
    world, flags, _ = env
    _with_busy_wait(flags, 0.5)
    world.as_release("reef", "18.2.4")
    world.lc_held_runs = 2  # RGW's own LC worker has the entry: lc process exits 0, does nothing
    assert run_cli(cli, ["expire", *flags, "capture-mixed", "--prefix", "plain/", "--days", "2", "--yes",
                         "--json"]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    assert result["ok"] and world.log.count("radosgw-admin lc process --bucket capture-mixed") == 3
    (lc_check,) = [c for c in result["checks"] if c["name"] == "lc process"]
    assert "after 2 skipped run(s)" in lc_check["detail"] and "PROCESSING" in lc_check["detail"]


def test_expire_says_which_bucket_lc_never_reached(env, capsys):
    world, flags, _ = env
    _with_busy_wait(flags, 0.2)
    world.as_release("reef", "18.2.4")
    world.lc_held_runs = 1000
    assert run_cli(cli, ["expire", *flags, "capture-mixed", "--prefix", "plain/", "--days", "2", "--yes"]) == 1
    out, err = capsys.readouterr()
    assert "[failed] lc process:" in out and "PROCESSING since" in out and "lc_busy_wait" in out
    assert err.endswith("\nrgwkeeper: error: expire: 1 bucket(s) failed a check (see above): capture-mixed "
                        "(lc process)\n")  # after a warning per skipped run
    assert "gc process" not in " ".join(world.log)  # nothing after a run that never happened


def _config_rules(flags, *rules):
    cfg = Path(flags[flags.index("--config") + 1])
    cfg.write_text(cfg.read_text() + "".join(f"[[purge.lifecycle_rules]]\n{r}\n" for r in rules))


def test_expire_of_every_bucket_goes_on_past_one_that_fails_and_reports_each(env, capsys):
    world, flags, _ = env
    _config_rules(flags, 'bucket = "*"\nprefix = "plain/"\ndays = 2')
    _age(world, "plain/0", 10)
    # An old bucket whose name rgwkeeper refuses (uppercase, '_'), and one deleted since the listing;
    # both sort before the bucket that can be expired.
    world.all_buckets = ["Legacy_Upper", "aa-gone", world.bucket]
    assert run_cli(cli, ["expire", *flags, "--dry-run", "--json"]) == 1
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert [(d["bucket"], d.get("ok", True)) for d in doc] == [
        ("capture-mixed", True), ("Legacy_Upper", False), ("aa-gone", False)]
    assert not any(line.startswith("S3 Put") for line in world.log)
    assert run_cli(cli, ["expire", *flags, "--yes", "--json"]) == 1
    out, err = capsys.readouterr()
    doc = {d["bucket"]: d for d in json.loads(out)}
    assert doc["capture-mixed"]["ok"] and "plain/0" not in world.index  # the good bucket was expired
    assert doc["Legacy_Upper"] == {"bucket": "Legacy_Upper", "ok": False, "stage": "plan",
                                   "error": doc["Legacy_Upper"]["error"]}
    assert "not valid" in doc["Legacy_Upper"]["error"] and "does not exist" in doc["aa-gone"]["error"]
    lines = err.strip().splitlines()
    assert lines[0].startswith("rgwkeeper: Legacy_Upper: not expired (plan failed): ")
    assert lines[1].startswith("rgwkeeper: aa-gone: not expired (plan failed): ")
    assert lines[-1] == ("rgwkeeper: error: expire: 2 bucket(s) not expired (see above): Legacy_Upper (plan), "
                         "aa-gone (plan)")
    assert "Traceback" not in err


def test_expire_of_every_bucket_reports_a_bucket_whose_step_failed(env, capsys, monkeypatch):
    world, flags, _ = env
    _config_rules(flags, 'bucket = "capture-*"\ndays = 2')
    from tests.unit.purge_fakes import FakeS3

    def refuse(self, bucket, rules):
        raise CephError(f"PutBucketLifecycleConfiguration {bucket}", "InternalError")

    monkeypatch.setattr(FakeS3, "put_lifecycle", refuse)
    assert run_cli(cli, ["expire", *flags, "--yes"]) == 1
    out, err = capsys.readouterr()
    assert "rgwkeeper: capture-mixed: not expired (apply failed): PutBucketLifecycleConfiguration capture-mixed: " \
           "InternalError" in err
    assert err.endswith("rgwkeeper: error: expire: 1 bucket(s) not expired (see above): capture-mixed (apply)\n")
    # A bucket named on the command line fails as before: its error is the command's.
    assert run_cli(cli, ["expire", *flags, "capture-mixed", "--yes"]) == 1
    # The PUT may have run before RGW failed it: the bucket's configuration is put back and read back.
    assert capsys.readouterr().err == ("rgwkeeper: error: PutBucketLifecycleConfiguration capture-mixed: "
                                       "InternalError; the bucket had no rules before, and has none again\n")


def test_a_size_filter_on_a_versioned_bucket_is_refused_before_any_change(env, capsys):
    world, flags, _ = env
    world.instance["data"]["bucket_info"]["flags"] |= 0x2  # BUCKET_VERSIONED
    for extra in (["--yes"], ["--dry-run"]):
        assert run_cli(cli, ["purge", *flags, "capture-mixed", "--larger-than", "4KiB", *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "versioning enabled" in err and "older version again" in err
    assert not any(line.startswith(("S3 Delete", "S3 Put", "admin API quota", "rados rm")) for line in world.log)
    assert "plain/1" in world.index


def _add_key(world, key, *, hours_ago=0.0):
    """A head-only object written ``hours_ago`` on this host's clock."""
    from rgwkeeper.purge.layout import head_oid

    world.index[key] = {"Key": key, "Size": 100, "ETag": '"0123456789abcdef0123456789abcdef"',
                        "LastModified": datetime.datetime.now(datetime.timezone.utc)
                        - datetime.timedelta(hours=hours_ago), "StorageClass": "STANDARD"}
    world.pools["default.rgw.buckets.data"][head_oid(world.marker, key)[0]] = {"size": 100, "locator": "", "refs": 0}


def test_dry_run_and_confirmation_show_every_name_a_prefix_reaches(env, capsys, monkeypatch):
    world, flags, _ = env
    _add_key(world, "plain2/x")
    _add_key(world, "plain.old")
    assert run_cli(cli, ["purge", *flags, "capture-mixed", "--prefix", "plain", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "prefix 'plain' matches keys under: 'plain.old', 'plain/', 'plain2/'" in out
    assert "WARNING: prefix 'plain' does not end a path segment" in out and "(e.g. 'plain/')" in out
    assert run_cli(cli, ["purge", *flags, "capture-mixed", "--prefix", "plain", "--dry-run", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["prefix_scope"] == {"prefix": "plain", "continuations": [".old", "/", "2/"], "complete": True,
                                   "ambiguous": True}
    assert run_cli(cli, ["purge", *flags, "capture-mixed", "--prefix", "plain/", "--dry-run"]) == 0
    assert "WARNING" not in capsys.readouterr().out
    # On a terminal the confirmation shows it before asking.
    monkeypatch.setattr("rgwkeeper.cli.purge.sys.stdin.isatty", lambda: True)
    monkeypatch.setattr("rgwkeeper.cli.purge.click.prompt", lambda *a, **k: "no")
    assert run_cli(cli, ["purge", *flags, "capture-mixed", "--prefix", "plain"]) == 2
    err = capsys.readouterr().err
    assert "WARNING: prefix 'plain' does not end a path segment" in err and "not confirmed" in err
    assert {"plain2/x", "plain.old", "plain/0"} <= set(world.index)
    assert not any(line.startswith(("S3 Delete", "S3 HeadObject")) for line in world.log)


def test_age_is_measured_on_rgws_clock_not_this_hosts(env, capsys, monkeypatch):
    world, flags, _ = env
    world.rgw_clock_offset_s = -7200.0  # RGW's clock is two hours behind this host's
    _add_key(world, "logs/recent", hours_ago=3)  # stamped by RGW one hour ago (its clock)
    _add_key(world, "logs/old", hours_ago=5)  # three hours ago on RGW's clock
    assert run_cli(cli, ["purge", *flags, "capture-mixed", "--prefix", "logs/", "--older-than", "2h", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "on RGW's clock (its Date header read " in out and "s ahead of RGW's and is not used" in out
    monkeypatch.setattr("rgwkeeper.cli.purge.sys.stdin.isatty", lambda: True)
    monkeypatch.setattr("rgwkeeper.cli.purge.click.prompt", lambda *a, **k: "no")
    assert run_cli(cli, ["purge", *flags, "capture-mixed", "--prefix", "logs/", "--older-than", "2h"]) == 2
    assert "on RGW's clock" in capsys.readouterr().err
    monkeypatch.setattr("rgwkeeper.cli.purge.sys.stdin.isatty", lambda: False)
    assert run_cli(cli, ["purge", *flags, "capture-mixed", "--prefix", "logs/", "--older-than", "2h", "--yes",
                         "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] and doc["clock"]["source"] == "rgw" and 7199 < doc["clock"]["skew_s"] <= 7201
    assert "logs/recent" in world.index and "logs/old" not in world.index


class _Sigterm(Exception):
    pass


@pytest.fixture
def sigterm_guard():
    """A SIGTERM the code under test does not handle fails the test instead of killing pytest."""
    def guard(signum, frame):
        raise _Sigterm("SIGTERM reached Python's default handling")

    old = signal.signal(signal.SIGTERM, guard)
    yield
    signal.signal(signal.SIGTERM, old)


class _SigtermThenWait:
    """lc process receives SIGTERM while it runs (the operator's `kill`, systemd stopping a unit)."""

    async def wait(self):
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.Event().wait()


def test_sigterm_during_a_lifecycle_purge_puts_the_rules_back_and_a_rerun_finishes(env, capsys, sigterm_guard):
    world, flags, _ = env
    world.as_release("reef", "18.2.4")
    keep = {"ID": "keep-a-week", "Status": "Enabled", "Filter": {"Prefix": ""},
            "NoncurrentVersionExpiration": {"NoncurrentDays": 7}}
    world.lifecycle = [dict(keep)]
    world.lc_block = _SigtermThenWait()
    args = ["purge", *flags, "capture-mixed", "--prefix", "plain/", "--method", "lifecycle", "--yes"]
    assert run_cli(cli, args) == 143
    err = capsys.readouterr().err
    assert err.endswith("rgwkeeper: error: terminated (SIGTERM); run the same command again to resume from its "
                        "checkpoint\n") and "Traceback" not in err
    assert world.lifecycle == [keep] and {"plain/0", "plain/1", "plain/2"} <= set(world.index)
    world.lc_block = None
    assert run_cli(cli, args) == 0
    assert world.lifecycle == [keep] and not {"plain/0", "plain/1", "plain/2"} & set(world.index)


def test_expire_measures_lifecycle_days_on_rgws_clock(env, capsys):
    world, flags, _ = env
    world.rgw_clock_offset_s = -2 * 86400.0  # RGW's clock two days behind this host's
    _age(world, "plain/0", 3.5)  # 1.5 days old on RGW's clock: not yet 2 lifecycle days
    _age(world, "plain/1", 5.5)  # 3.5 days on RGW's clock
    assert run_cli(cli, ["expire", *flags, "capture-mixed", "--prefix", "plain/", "--days", "2", "--dry-run"]) == 0
    assert "on RGW's clock" in capsys.readouterr().out
    assert run_cli(cli, ["expire", *flags, "capture-mixed", "--prefix", "plain/", "--days", "2", "--yes",
                         "--json"]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    assert result["ok"], result["checks"]
    assert "plain/0" in world.index and "plain/1" not in world.index


def _prom(path: Path) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.parser import text_string_to_metric_families
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(path.read_text()) for s in f.samples}


def _value(metrics, name, **labels):
    hits = [v for (n, ls), v in metrics.items() if n == name and all((k, v2) in ls for k, v2 in labels.items())]
    assert len(hits) == 1, (name, labels, metrics)
    return hits[0]


def test_a_purge_writes_its_progress_for_node_exporter_and_ends_not_running(env, capsys, tmp_path, monkeypatch):
    import rgwkeeper.purge.textfile as textfile
    world, flags, _ = env
    prom = tmp_path / "textfile" / "rgwkeeper-purge.prom"
    prom.parent.mkdir()
    seen = []  # the file as a scrape would read it, at each write
    real = textfile.write_to_textfile

    def write(path, registry):
        real(path, registry)
        seen.append(_prom(Path(path)))

    monkeypatch.setattr(textfile, "write_to_textfile", write)
    assert run_cli(cli, ["purge", *flags, "capture-mixed", "--yes", "--json", "--metrics-textfile", str(prom)]) == 0
    doc = json.loads(capsys.readouterr().out)
    first, last = seen[0], _prom(prom)
    assert _value(first, "rgwkeeper_purge_running", bucket="capture-mixed") == 1  # written before any change
    assert any(v == 1 for m in seen for (n, ls), v in m.items()  # and while it deleted
               if n == "rgwkeeper_purge_running" and ("step", "delete_objects") in ls)
    assert _value(last, "rgwkeeper_purge_running", bucket="capture-mixed") == 0
    assert _value(last, "rgwkeeper_purge_failed", plan=doc["plan_id"], method="direct") == 0
    assert _value(last, "rgwkeeper_purge_objects_deleted") == doc["counters"]["objects_deleted"] == 6
    assert _value(last, "rgwkeeper_purge_last_progress_timestamp_seconds") > 1.7e9


def test_a_purge_that_stops_says_so_in_its_metrics_file(env, tmp_path):
    world, flags, _ = env
    world.fail_delete_keys = {"big"}
    prom = tmp_path / "purge.prom"
    assert run_cli(cli, ["purge", *flags, "capture-mixed", "--yes", "--method", "s3",
                         "--metrics-textfile", str(prom)]) == 1
    last = _prom(prom)
    assert _value(last, "rgwkeeper_purge_failed") == 1 and _value(last, "rgwkeeper_purge_running") == 0


@pytest.mark.parametrize("path, message", [
    ("relative.prom", "must be an absolute path"),
    ("/tmp/purge.txt", "must be a file name ending in .prom"),
    ("/nonexistent-dir/purge.prom", "cannot write the purge metrics textfile /nonexistent-dir/purge.prom"),
])
def test_a_metrics_file_that_cannot_be_used_is_one_line_and_changes_nothing(env, capsys, path, message):
    world, flags, _ = env
    assert run_cli(cli, ["purge", *flags, "capture-mixed", "--yes", "--metrics-textfile", path]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert world.exists and not any(line.startswith(("S3 Delete", "rados rm", "S3 PutBucket")) for line in world.log)


def test_a_filtered_s3_purge_listing_by_index_shows_its_items_and_the_join_command_with_its_filters(env, capsys,
                                                                                                    tmp_path):
    world, flags, _ = env
    cfg = Path(flags[1])
    cfg.write_text(cfg.read_text().replace("[purge]\n", '[purge]\ndirect_listing = "index"\n'))
    rc = run_cli(cli, ["purge", *flags, world.bucket, "--prefix", "extra/", "--older-than", "7d", "--method", "s3",
                       "--workers", "3", "--dry-run"])
    out = capsys.readouterr().out
    assert rc == 0, out
    [line] = [ln for ln in out.splitlines() if ln.startswith("work items:")]
    assert "3 at once here" in line
    join = line.split("with: ", 1)[1]
    assert join.startswith(f"rgwkeeper purge {world.bucket} --prefix extra/ --older-than 604800s --method s3 --join ")
    # What it prints parses back into the same request: the join compares them.
    args = join.split()[2:]
    ctx = cli.get_command(None, "purge").make_context("purge", [*flags, *args])
    assert (ctx.params["prefix"], ctx.params["older_than"], ctx.params["method"]) == ("extra/", 604800, "s3")
    assert not any(line.startswith(("S3 Delete", "rados rm")) for line in world.log)


def test_a_capped_purge_listing_by_index_shows_one_item_at_a_time_whatever_its_workers(env, capsys):
    world, flags, _ = env
    cfg = Path(flags[1])
    cfg.write_text(cfg.read_text().replace("[purge]\n", '[purge]\ndirect_listing = "index"\n'))
    argv = ["purge", *flags, world.bucket, "--prefix", "extra/", "--method", "s3", "--workers", "3", "--dry-run"]
    assert run_cli(cli, [*argv, "--max-rate", "100"]) == 0
    [line] = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("work items:")]
    assert "1 at once here (one at a time under the rate cap);" in line
    assert run_cli(cli, [*argv, "--max-rate", "100", "--json"]) == 0
    items = json.loads(capsys.readouterr().out)["work_items"]
    assert (items["workers"], items["items_at_once"]) == (3, 1)
    assert run_cli(cli, [*argv, "--json"]) == 0
    items = json.loads(capsys.readouterr().out)["work_items"]
    assert (items["workers"], items["items_at_once"]) == (3, 3)
    assert not any(line.startswith(("S3 Delete", "rados rm")) for line in world.log)


@pytest.mark.parametrize("older_than_s", [604800.0, 1.5, 1e-05, 123456.789])
def test_the_printed_join_command_gives_the_same_age_back(older_than_s):
    from rgwkeeper.cli.purge import join_command
    from rgwkeeper.purge.plan import PurgeRequest
    from rgwkeeper.units import parse_duration

    cmd = join_command(PurgeRequest("logs", prefix="2026/", older_than_s=older_than_s, method="s3"), "0123456789ab")
    given = cmd.split("--older-than ", 1)[1].split()[0]
    assert parse_duration(given) == older_than_s, cmd
