"""``rgwkeeper loadgen compare`` on recorded results, and the usage errors of run and verify."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rgwkeeper.cli.common import run_cli
from rgwkeeper.cli.main import cli
from rgwkeeper.loadgen import analysis

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "loadgen" / "quiet-put.json"


def _run(args, capsys):
    try:
        rc = run_cli(cli, args)
    except SystemExit as exc:  # verdict exit codes
        rc = exc.code
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture
def results(tmp_path):
    data = json.loads(FIXTURE.read_text())
    slowed = json.loads(FIXTURE.read_text())
    series = analysis.series_from_json(slowed["series"])
    series.ops["PUT"].ok = (series.ops["PUT"].ok * 0.5).astype(np.int64)
    slowed["series"] = analysis.series_to_json(series)
    cfg = tmp_path / "rgwkeeper.toml"
    cfg.write_text("[loadgen]\nmax_rate_drop = 0.25\nmax_p99_increase = 1.0\n")
    paths = {}
    for name, d in (("a", data), ("slow", slowed)):
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(json.dumps(d))
    return cfg, paths


def test_compare_same_run_passes_exit_0(results, capsys):
    cfg, p = results
    rc, out, _ = _run(["loadgen", "compare", "--config", str(cfg), str(p["a"]), str(p["a"])], capsys)
    assert rc == 0
    assert "VERDICT: PASS" in out and "median ops/s" in out


def test_compare_halved_rate_fails_exit_3_with_json(results, capsys):
    cfg, p = results
    rc, out, _ = _run(["loadgen", "compare", "--config", str(cfg), "--json", str(p["a"]), str(p["slow"])], capsys)
    assert rc == 3
    verdict = json.loads(out)["verdict"]
    assert verdict["outcome"] == "FAIL"
    drop = next(c for c in verdict["checks"] if c["name"] == "median_ops_drop")
    assert drop["outcome"] == "FAIL" and 0.4 < drop["estimate"] < 0.6


def test_compare_with_default_tolerances_says_inconclusive_exit_4(results, capsys):
    """The recorded quiet run is too noisy (CV 0.16 over 20 s) to rule out a 10% drop."""
    _, p = results
    rc, out, _ = _run(["loadgen", "compare", "--config", str(p["a"].parent / "none.toml"), str(p["a"]),
                       str(p["a"])], capsys)
    assert rc == 2  # a named config file that does not exist is a usage error
    defaults = p["a"].parent / "defaults.toml"
    defaults.write_text("")  # the shipped defaults, whatever /etc/rgwkeeper holds on this machine
    rc, out, _ = _run(["loadgen", "compare", "--config", str(defaults), str(p["a"]), str(p["a"])], capsys)
    assert rc == 4 and "VERDICT: INCONCLUSIVE" in out and "cannot tell from baseline noise" in out


def test_compare_refuses_a_file_that_is_not_a_result(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"hello": 1}))
    rc, _, err = _run(["loadgen", "compare", str(bad), str(bad)], capsys)
    assert rc == 2 and "is not an rgwkeeper loadgen result" in err and err.count("\n") == 1


def _tampered(data, path):
    series = data["series"]
    if path == "seconds":
        series["seconds"] = 10**12  # was a 10**12 x 400 array allocated up front
    elif path == "nan":
        series["ops"]["PUT"]["ok"][0] = float("nan")
    elif path == "index":
        series["ops"]["PUT"]["hist"][0] = [[10**6, 1]]  # an IndexError traceback
    elif path == "overflow":
        series["ops"]["PUT"]["ok"][0] = 10**30  # an OverflowError traceback
    elif path == "window":
        data["windows"]["run"]["window"]["end"] = float("inf")
    return data


@pytest.mark.parametrize("how", ["seconds", "nan", "index", "overflow", "window"])
def test_compare_refuses_a_tampered_result_in_one_line(tmp_path, capsys, how):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(_tampered(json.loads(FIXTURE.read_text()), how)))
    rc, _, err = _run(["loadgen", "compare", str(bad), str(FIXTURE)], capsys)
    assert rc == 2 and err.count("\n") == 1 and "is not a usable result" in err, err


def test_verify_needs_exactly_one_maintenance(capsys, tmp_path):
    rc, _, err = _run(["verify", "--conf", str(tmp_path / "x.conf")], capsys)
    assert rc == 2 and "give exactly one of --maintenance" in err
    rc, _, err = _run(["verify", "--maintenance", "none", "--maintenance-cmd", "true"], capsys)
    assert rc == 2 and "give exactly one of --maintenance" in err


def test_run_without_an_endpoint_or_with_a_bad_mix_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("RGWKEEPER_CONFIG", raising=False)
    cfg = tmp_path / "empty.toml"
    cfg.write_text("")
    rc, _, err = _run(["loadgen", "run", "--config", str(cfg)], capsys)
    assert rc == 2 and err == ("rgwkeeper: error: no RGW endpoint: set rgw.endpoint in the config or pass "
                               "--rgw-endpoint URL\n")
    creds = tmp_path / "c"
    creds.write_text('access_key = "a"\nsecret_key = "s3cr3t"\n')
    creds.chmod(0o600)
    rc, _, err = _run(["loadgen", "run", "--config", str(cfg), "--rgw-endpoint", "http://127.0.0.1:1",
                       "--rgw-credentials", str(creds), "--mix", "HEAD=1"], capsys)
    assert rc == 2 and "unknown operation 'HEAD'" in err and "s3cr3t" not in err


def test_maintenance_argv_is_redacted_where_shown_or_saved():
    from rgwkeeper.loadgen.verify import redact_argv

    argv = ["tool", "--secret-key", "abc", "--password=xyz", "--keyring", "/etc/k", "--access-key", "AK", "-v"]
    assert redact_argv(argv) == ["tool", "--secret-key", "[redacted]", "--password=[redacted]", "--keyring",
                                 "/etc/k", "--access-key", "[redacted]", "-v"]


@pytest.mark.parametrize("endpoint", ["http://rgw:99999", "http://rgw:http", "rgw:8080", "http://AK:s3cr3t@rgw:8080",
                                      "http://rgw:8080/admin?x=1"])
def test_a_bad_endpoint_is_one_line_before_any_request(tmp_path, capsys, monkeypatch, endpoint):
    import rgwkeeper.cli.loadgen as loadgen_cli

    reached = []
    monkeypatch.setattr(loadgen_cli, "run_load", lambda *a, **k: reached.append(a))
    monkeypatch.delenv("RGWKEEPER_CONFIG", raising=False)
    creds = tmp_path / "creds"
    creds.write_text('access_key = "a"\nsecret_key = "s3cr3t"\n')
    creds.chmod(0o600)
    rc, _, err = _run(["loadgen", "run", "--rgw-endpoint", endpoint, "--rgw-credentials", str(creds)], capsys)
    assert rc == 2 and err.count("\n") == 1 and "RGW endpoint" in err and "s3cr3t" not in err, err
    assert reached == []


def test_several_endpoints_reach_the_run_and_a_repeated_one_is_refused(tmp_path, capsys, monkeypatch):
    import rgwkeeper.cli.loadgen as loadgen_cli

    specs = []

    async def fake_run_load(spec, creds, **kw):
        specs.append(spec)
        raise loadgen_cli.UsageError("stop here")

    monkeypatch.setattr(loadgen_cli, "run_load", fake_run_load)
    monkeypatch.delenv("RGWKEEPER_CONFIG", raising=False)
    creds = tmp_path / "creds"
    creds.write_text('access_key = "a"\nsecret_key = "s3cr3t"\n')
    creds.chmod(0o600)
    a, b = "http://rgw1:8080", "http://rgw2:8080"
    rc, _, err = _run(["loadgen", "run", "--rgw-endpoint", a, "--rgw-endpoint", b, "--rgw-credentials", str(creds),
                       "--no-progress"], capsys)
    assert rc == 2 and "stop here" in err
    assert specs[0].endpoints == (a, b)
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[rgw]\nendpoints = ["{a}", "{b}"]\n')
    _run(["loadgen", "run", "--config", str(cfg), "--rgw-credentials", str(creds), "--no-progress"], capsys)
    assert specs[1].endpoints == (a, b)
    rc, _, err = _run(["loadgen", "run", "--rgw-endpoint", a, "--rgw-endpoint", a + "/", "--rgw-credentials",
                       str(creds)], capsys)
    assert rc == 2 and "given twice" in err and len(specs) == 2


def test_each_endpoints_share_of_the_load_is_added_over_workers_and_shown_in_one_line():
    from rgwkeeper.cli.render import endpoints_line
    from rgwkeeper.loadgen import analysis

    workers = [{"endpoints": {"http://a:1": [30, 1], "http://b:1": [50, 0]}},
               {"endpoints": {"http://a:1": [20, 0], "http://b:1": [60, 0]}}]
    ends = analysis.endpoint_rates(workers, 10.0)
    assert ends == [{"endpoint": "http://a:1", "requests": 50, "failures": 1, "per_s": 5.0},
                    {"endpoint": "http://b:1", "requests": 110, "failures": 0, "per_s": 11.0}]
    assert endpoints_line(ends) == ("RGW endpoints: http://a:1 50 requests (5.0/s, 1 could not connect); "
                                    "http://b:1 110 requests (11.0/s)")
    assert endpoints_line(ends[:1]) is None
