"""bench/purge_pacing.py's modes: each parsed, each bad one refused before a cluster boots."""

import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench.purge_pacing import _maintenance, parse_mode


def test_modes_parse_to_their_kind_and_numbers():
    assert parse_mode("cap:150:0.1") == ("cap", [150.0, 0.1])
    assert parse_mode("cap:20") == ("cap", [20.0])
    assert parse_mode("stock-rm") == ("stock-rm", []) and parse_mode("stock-rm:4") == ("stock-rm", [4.0])
    assert parse_mode("quiet") == ("quiet", []) and parse_mode("low") == ("low", [])
    assert parse_mode("unpaced:32") == ("unpaced", [32.0])
    assert parse_mode("normal") == ("normal", [])
    assert parse_mode("cap:450@index") == ("cap", [450.0])
    assert parse_mode("cap:450@nice@index") == ("cap", [450.0])


def test_at_nice_runs_the_purge_under_nice_and_nothing_else(tmp_path):
    info = SimpleNamespace(conf=Path("/c"), keyring=Path("/k"), rgw_endpoint="http://127.0.0.1:1",
                           credentials_file=Path("/cred"))
    args = SimpleNamespace(method="direct", target_ms=0.0, increase=0.0, max_rate=0.0)
    niced = shlex.split(_maintenance(info, tmp_path, "cap:450@nice", "victim", args, 0)[1])
    plain = shlex.split(_maintenance(info, tmp_path, "cap:450", "victim", args, 0)[1])
    assert niced[:3] == ["nice", "-n", "19"] and niced[3:6] == plain[:3] and plain[0] != "nice"
    idle = shlex.split(_maintenance(info, tmp_path, "cap:450@idle", "victim", args, 0)[1])
    assert idle[:3] == ["chrt", "--idle", "0"] and idle[3:6] == plain[:3] and "nice" not in idle


def test_at_index_lists_the_index_for_rgwkeeper_modes_only(tmp_path):
    info = SimpleNamespace(conf=Path("/c"), keyring=Path("/k"), rgw_endpoint="http://127.0.0.1:1",
                           credentials_file=Path("/cred"))
    args = SimpleNamespace(method="direct", target_ms=0.0, increase=0.0, max_rate=0.0)
    for mode, listing in (("cap:450@index", "index"), ("cap:450", "s3"), ("unpaced@index", "index")):
        argv = shlex.split(_maintenance(info, tmp_path, mode, "victim", args, 0)[1])
        assert f'direct_listing = "{listing}"' in Path(argv[argv.index("--config") + 1]).read_text(), mode


def test_normal_runs_the_level_without_a_method_and_low_keeps_it(tmp_path):
    info = SimpleNamespace(conf=Path("/c"), keyring=Path("/k"), rgw_endpoint="http://127.0.0.1:1",
                           credentials_file=Path("/cred"))
    args = SimpleNamespace(method="direct", target_ms=0.0, increase=0.0, max_rate=0.0)
    normal = shlex.split(_maintenance(info, tmp_path, "normal", "victim", args, 0)[1])
    low = shlex.split(_maintenance(info, tmp_path, "low", "victim", args, 0)[1])
    assert normal[normal.index("--impact") + 1] == "normal" and "--method" not in normal
    assert low[low.index("--impact") + 1] == "low" and low[low.index("--method") + 1] == "direct"
    cfg = Path(normal[normal.index("--config") + 1]).read_text()
    assert "max_objects_per_second" not in cfg  # a level with its own keys would be refused


@pytest.mark.parametrize("bad", ["cap", "cap:nan", "cap:inf", "cap:-1", "cap:0", "cap:1:2:3", "cap:x", "bogus",
                                 "stock-s3:1", "quiet:1", "normal:1", "unpaced:1:2", "",
                                 "normal@index", "stock-rm@index", "cap:1@s3", "cap:1@index@index", "stock-rm@nice",
                                 "cap:1@nice@nice", "quiet@nice", "cap:1@", "cap:1@nice@idle", "cap:1@idle@idle",
                                 "stock-rm@idle", "quiet@idle"])
def test_a_bad_mode_is_refused(bad):
    with pytest.raises(ValueError, match="mode"):
        parse_mode(bad)
