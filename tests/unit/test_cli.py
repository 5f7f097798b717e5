"""The CLI's rendering and its one-line errors (no cluster needed)."""

from __future__ import annotations

import copy
import io
import json
import subprocess
import sys

import pytest
from rich.console import Console

from rgwkeeper.cli.main import cli
from rgwkeeper.cli.common import run_cli
from rgwkeeper.cli.render import group_errors, human_duration, render_status
from rgwkeeper.snapshot import parse
from tests.unit.fakes import FIXTURES, load_fixture


def _render(snap, **kw):
    buf = io.StringIO()
    render_status(snap, console=Console(file=buf, width=140, color_system=None), **kw)
    return buf.getvalue()


def _lines(text):
    return [x.strip("│ ") for x in text.splitlines()]


def test_status_table_shows_fill_spillover_scrub_and_buckets():
    text = _render(parse(load_fixture("observation.json")))
    assert "ceph 16.2.15 (pacific)" in text and "BLUEFS_SPILLOVER" in text
    assert "headroom" in text and "nearfull 85.0%" in text
    assert "BlueFS spillover: 3 of 3 OSDs" in text
    for osd in ("osd.0", "osd.1", "osd.2"):
        assert osd in text
    assert "op queue: wpq" in text
    # Per OSD group: the op queue, no mClock profile under wpq (it ignores it), each option read back.
    assert "osd.0-2: wpq, osd_max_scrubs 1, osd_scrub_load_threshold 0.5, osd_scrub_sleep 0" in _lines(text)
    row = next(line for line in text.splitlines() if "capture-near-limit" in line)
    assert "WARN" in row and "95.0%" in row
    assert "not observed" not in text


def test_errors_are_grouped_per_kind():
    obs = copy.deepcopy(load_fixture("observation.json"))
    obs["errors"] = [{"source": f"osd.{i} config get {o}", "error": f"osd.{i} config get var={o}: error (EACCES)"}
                     for i in (0, 1, 2, 5) for o in ("osd_max_scrubs", "osd_scrub_sleep")]
    obs["errors"].append({"source": "rgw", "error": "not configured"})
    rows = group_errors(parse(obs))
    assert rows == [("4 OSDs (osd.0-2, osd.5) config get", "osd.N config get: error (EACCES)"),
                    ("rgw", "not configured")]
    assert "not observed" in _render(parse(obs))


def test_missing_conf_is_one_line_exit_2(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("CEPH_CONF", raising=False)
    rc = run_cli(cli, ["status", "--conf", str(tmp_path / "nope.conf")])
    err = capsys.readouterr().err
    assert rc == 2
    assert err == f"rgwkeeper: error: ceph.conf {tmp_path / 'nope.conf'} does not exist; pass --conf PATH or set CEPH_CONF\n"


def test_bad_config_file_is_one_line_exit_2(tmp_path, capsys):
    cfg = tmp_path / "rgwkeeper.toml"
    cfg.write_text("[cluster]\ntimeout_s = -1\n")
    rc = run_cli(cli, ["status", "--config", str(cfg)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1
    assert "cluster.timeout_s must be at least 1.0, got -1" in err


def test_unknown_option_is_a_usage_error(capsys):
    rc = run_cli(cli, ["status", "--bogus"])
    assert rc == 2
    assert "No such option '--bogus'" in capsys.readouterr().err


def test_python_dash_m_entry_point():
    proc = subprocess.run([sys.executable, "-m", "rgwkeeper", "--version"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("rgwkeeper, version ")


def test_daemon_panel_shows_overrides_fill_trend_and_db_advice():
    view = {"paused": {"by": "ops@admin1", "reason": "upgrade"},
            "overrides": {"config/osd/osd_scrub_sleep": {"applied": "0.5", "original": None, "holder": "a", "since": 1}},
            "fill_alerts": ["osd.2"], "projected_seconds_to_nearfull": 7200.0,
            "compactions": {"osd.1": {"slow_before": 295305216, "slow_after": 885915648, "cleared": False}},
            "needs_bigger_db_bytes": {"osd.1": 2 << 30}}
    text = _render(parse(load_fixture("observation.json")), daemon=view)
    assert "paused by ops@admin1: upgrade" in text
    assert "osd_scrub_sleep=0.5 (was unset)" in text
    assert "nearfull in about 2.0 h" in text and "alerting: osd.2" in text
    assert "osd.1 compacted: slow 281.6 MiB -> 844.9 MiB (not cleared)" in text
    assert "osd.1 needs a bigger DB device: about 2.0 GiB" in text
    assert "the daemon has not run" in _render(parse(load_fixture("observation.json")))


def test_exit_codes_from_ctx_exit_are_kept():
    import click

    @click.group()
    def g():
        pass

    @g.command()
    @click.pass_context
    def three(ctx):
        ctx.exit(3)

    assert run_cli(g, ["three"]) == 3


def test_every_command_resolves_and_purge_imports_no_load_generator():
    import click

    from rgwkeeper.cli.main import COMMANDS

    ctx = click.Context(cli)
    for name in COMMANDS:
        assert cli.get_command(ctx, name).name == name
    assert cli.get_command(ctx, "no-such") is None
    # A purge started during ingest must not first import numpy, matplotlib and apscheduler
    # (a fresh interpreter: this one has imported everything already).
    code = ("import sys; from rgwkeeper.cli.main import cli; import click; "
            "cli.get_command(click.Context(cli), 'purge'); "
            "print(sorted(m for m in ('numpy', 'matplotlib', 'apscheduler', 'hdrh') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("seconds,text", [
    (0.4, "0 s"), (59.4, "59 s"), (60, "1 min"), (89, "1 min"), (119, "2 min"), (150, "3 min"), (210, "4 min"),
    (3569, "59 min"), (3571, "1 h 00 min"), (3600 + 5 * 60 + 29, "1 h 05 min"), (26 * 3600, "26 h 00 min"),
])
def test_human_duration_rounds_to_the_nearest_minute(seconds, text):
    assert human_duration(seconds) == text


def test_status_groups_osds_by_their_settings_and_shows_the_mclock_profile_where_mclock_runs():
    obs = json.loads((FIXTURES.parent / "tentacle" / "observation.json").read_text())
    template = obs["osd_config"]["0"]
    obs["osd_config"] = {str(i): dict(template) for i in range(400)}
    for i in range(100, 120):
        obs["osd_config"][str(i)].update(osd_op_queue="wpq")
    for i in range(12):  # twelve more groups of one OSD each: the render caps the groups it lists
        obs["osd_config"][str(300 + i)]["osd_max_scrubs"] = str(10 + i)
    for i in (2, 4, 6):  # a group scattered over many ranges is summed up, not listed
        obs["osd_config"][str(i)]["osd_scrub_sleep"] = "0.1"
    buf = io.StringIO()
    render_status(parse(obs), console=Console(file=buf, width=200, color_system=None), bucket_rows=0)
    lines = _lines(buf.getvalue())
    assert ("365 OSDs (osd.0-1, osd.3, osd.5, 3 more ranges): mclock_scheduler, balanced, osd_max_scrubs 3, "
            "osd_scrub_load_threshold 10, osd_scrub_sleep 0 (ignored)") in lines
    assert "osd.100-119: wpq, osd_max_scrubs 3, osd_scrub_load_threshold 10, osd_scrub_sleep 0" in lines
    assert ("osd.2, osd.4, osd.6: mclock_scheduler, balanced, osd_max_scrubs 3, osd_scrub_load_threshold 10, "
            "osd_scrub_sleep 0.1 (ignored)") in lines
    assert "... 7 more groups of settings on 7 OSDs (status --json lists every OSD)" in lines
