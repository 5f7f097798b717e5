"""`rgwkeeper purge` / `expire` on the command line: one-line refusals before anything is sent,
confirmation only on a terminal, dry run output and the JSON summary (adapters faked)."""

from __future__ import annotations

import json
import sys

import pytest

from rgwkeeper import logs
from rgwkeeper import purge as purge_api
from rgwkeeper.cli.common import run_cli
from rgwkeeper.cli.main import cli
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
])
def test_refused_before_anything_is_sent(env, capsys, args, message):
    world, flags, opened = env
    rc = run_cli(cli, ["purge", *flags, *args])
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
    assert "$ radosgw-admin --conf" in out and "metadata rm bucket:capture-mixed" in out
    assert (json.dumps(world.current_stats(), sort_keys=True), sorted(world.pools["default.rgw.buckets.data"])) == before
    assert not (tmp_path / "state").exists()
    assert run_cli(cli, ["purge", *flags, "capture-mixed", "--dry-run", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["dry_run"] is True and doc["method"] == "direct" and len(doc["commands"]) > 5


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
    assert "expire after 2 d" in out and '"ID": "theirs"' in out and "lc process --bucket capture-mixed" in out
    assert world.lifecycle[0]["ID"] == "theirs" and len(world.lifecycle) == 1


def test_expire_installs_and_runs_rules(env, capsys, monkeypatch):
    world, flags, _ = env
    assert run_cli(cli, ["expire", *flags, "capture-mixed", "--prefix", "plain/", "--days", "2", "--yes",
                         "--json"]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    assert result["changed"] and result["ran"] and result["ok"]
    assert [r["Filter"] for r in world.lifecycle] == [{"Prefix": "plain/"}]
    assert "radosgw-admin lc process --bucket capture-mixed" in world.log
