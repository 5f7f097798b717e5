"""bench/purge_pacing.py's modes: each parsed, each bad one refused before a cluster boots."""

import json
import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest

import bench.purge_pacing as pacing
from bench.purge_pacing import _maintenance, parse_mode


def test_modes_parse_to_their_kind_and_numbers():
    assert parse_mode("cap:150:0.1") == ("cap", [150.0, 0.1])
    assert parse_mode("cap:20") == ("cap", [20.0])
    assert parse_mode("cap:450:0.1:1") == ("cap", [450.0, 0.1, 1.0])
    assert parse_mode("rados-host:450") == ("rados-host", [450.0])
    assert parse_mode("rados-cluster:450:2") == ("rados-cluster", [450.0, 2.0])
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
    nogc = shlex.split(_maintenance(info, tmp_path, "cap:450@nogc", "victim", args, 0)[1])
    assert nogc[1] == "-c" and "gc.disable()" in nogc[2] and plain[1:3] == ["-m", "rgwkeeper"]
    assert nogc[3:nogc.index("--config")] == plain[3:plain.index("--config")]
    idle = shlex.split(_maintenance(info, tmp_path, "cap:450@idle", "victim", args, 0)[1])
    assert idle[:3] == ["chrt", "--idle", "0"] and idle[3:6] == plain[:3] and "nice" not in idle


def test_at_index_lists_the_index_for_rgwkeeper_modes_only(tmp_path):
    info = SimpleNamespace(conf=Path("/c"), keyring=Path("/k"), rgw_endpoint="http://127.0.0.1:1",
                           credentials_file=Path("/cred"))
    args = SimpleNamespace(method="direct", target_ms=0.0, increase=0.0, max_rate=0.0)
    for mode, listing in (("cap:450@index", "index"), ("cap:450", "s3"), ("unpaced@index", "index")):
        argv = shlex.split(_maintenance(info, tmp_path, mode, "victim", args, 0)[1])
        assert f'direct_listing = "{listing}"' in Path(argv[argv.index("--config") + 1]).read_text(), mode


def test_cap_with_a_count_sets_the_operations_in_flight_and_without_one_leaves_the_default(tmp_path):
    info = SimpleNamespace(conf=Path("/c"), keyring=Path("/k"), rgw_endpoint="http://127.0.0.1:1",
                           credentials_file=Path("/cred"))
    args = SimpleNamespace(method="direct", target_ms=0.0, increase=0.0, max_rate=0.0)

    def cfg(mode: str) -> str:
        argv = shlex.split(_maintenance(info, tmp_path, mode, "victim", args, 0)[1])
        return Path(argv[argv.index("--config") + 1]).read_text()

    one = cfg("cap:450:0.1:1")
    assert "rados_ops_in_flight = 1\n" in one and "max_objects_per_second = 450.0" in one
    assert "cap_ops_in_flight = 1\n" in one and "cap_ops_in_flight = 256\n" in cfg("cap:450:0.1:256")
    assert "cap_request_s = 0.1" in one
    assert "ops_in_flight" not in cfg("cap:450:0.1") and "rados_ops_in_flight = 8\n" in cfg("unpaced:8")
    assert "cap_ops_in_flight" not in cfg("unpaced:8")
    assert "checkpoint_interval_s = 600\n" in cfg("cap:450:0.1:1@rare-ckpt")
    assert "checkpoint_interval" not in one and "verify_scan_max_objects" not in one
    assert "verify_scan_max_objects = 0\n" in cfg("cap:450@noscan")


def test_rados_modes_remove_the_victims_heads_with_the_host_or_the_cluster_client(tmp_path, monkeypatch):
    info = SimpleNamespace(conf=Path("/c"), keyring=Path("/k"), rgw_endpoint="http://127.0.0.1:1",
                           credentials_file=Path("/cred"))
    args = SimpleNamespace(method="direct", target_ms=0.0, increase=0.0, max_rate=0.0, objects=10000,
                           docker_exec=["docker", "-H", "unix:///e.sock", "exec", "-i", "cid"])
    asked = []
    zone = {"placement_pools": [{"key": "default-placement", "val": {
        "storage_classes": {"STANDARD": {"data_pool": "default.rgw.buckets.data"}}}}]}

    def admin(*argv):
        asked.append(argv)
        return {"marker": "abc.1234.5"} if "stats" in argv else zone
    monkeypatch.setattr(pacing, "_admin_json", admin)
    host = shlex.split(_maintenance(info, tmp_path, "rados-host:450", "victim", args, 0)[1])
    assert host[:2] == ["/usr/bin/python3", str(pacing.RADOS_RM)]
    tail = ["--pool", "default.rgw.buckets.data", "--prefix", "abc.1234.5_fill/", "--count", "10000",
            "--rate", "450"]
    assert host[2:2 + len(tail)] == tail and host[host.index("--in-flight") + 1] == "1"
    assert "--stat-ahead" not in host
    assert "--stat-ahead" in shlex.split(_maintenance(info, tmp_path, "rados-host:450:1:1", "victim", args, 0)[1])
    assert host[-4:] == ["--conf", "/c", "--keyring", "/k"]
    assert ("--conf", "/c", "--keyring", "/k", "bucket", "stats", "--bucket", "victim") in asked
    sh = shlex.split(_maintenance(info, tmp_path, "rados-cluster:450:2", "victim", args, 0)[1])
    assert sh[:2] == ["sh", "-c"]
    inner = shlex.split(sh[2])
    assert inner[:8] == ["exec", "docker", "-H", "unix:///e.sock", "exec", "-i", "cid", "python3"]
    assert inner[-2:] == ["<", str(pacing.RADOS_RM)] and inner[inner.index("--in-flight") + 1] == "2"
    assert "--keyring" not in inner  # in the container, its own /etc/ceph
    both = shlex.split(_maintenance(info, tmp_path, "list-rados-host:450:2", "victim", args, 0)[1])
    assert both[:2] == ["sh", "-c"]
    listing, rest = both[2].split(" & l=$!; ")
    removals, waits = rest.split("; r=$?; ")
    assert shlex.split(listing)[1:3] == ["-m", "bench.s3_list"] and shlex.split(listing)[-1] == "victim"
    assert shlex.split(removals)[:2] == ["/usr/bin/python3", str(pacing.RADOS_RM)]
    assert "--in-flight 2" in removals and "--rate 450" in removals and "--rate 450" in listing
    assert waits == "wait $l; l=$?; exit $((l | r))"
    args.docker_exec = None
    with pytest.raises(SystemExit, match="container"):
        _maintenance(info, tmp_path, "rados-cluster:450", "victim", args, 0)


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


@pytest.mark.parametrize("bad", ["cap", "cap:nan", "cap:inf", "cap:-1", "cap:0", "cap:1:2:3:4", "cap:1:0.1:1.5", "unpaced:2.5", "stock-rm:0.5", "cap:x", "bogus",
                                 "stock-s3:1", "quiet:1", "normal:1", "unpaced:1:2", "",
                                 "normal@index", "stock-rm@index", "cap:1@s3", "cap:1@index@index", "stock-rm@nice",
                                 "cap:1@nice@nice", "quiet@nice", "cap:1@", "cap:1@nice@idle", "cap:1@idle@idle",
                                 "stock-rm@idle", "quiet@idle", "rados-host", "rados-host:1:2:3", "rados-host:1:1:1:1", "rados-host:1:1:0.5", "rados-host:900:2:1",
                                 "rados-cluster:450:1.5", "rados-host:450@nice", "rados-cluster:inf", "stock-rm@rare-ckpt",
                                 "cap:1@rare-ckpt@rare-ckpt", "stock-rm@nice-admin", "cap:1@page0",
                                 "cap:1@page1001", "cap:1@page", "cap:1@page2.5", "cap:1@page١٢",
                                 "cap:1@page10@page20", "stock-rm@page10", "cap:1@workers0", "cap:1@workers65",
                                 "cap:1@workers1@workers2", "stock-rm@workers1", "cap:1@workers", "list-s3", "list-s3:1:2:3",
                                 "list-s3:450:2.5", "list-s3:inf", "list-s3:450@trace",
                                 "list-rados-host", "list-rados-host:1:2:3", "list-rados-host:450:1.5"])
def test_a_bad_mode_is_refused(bad):
    with pytest.raises(ValueError, match="mode"):
        parse_mode(bad)


def test_nice_admin_runs_the_clusters_radosgw_admin_under_nice_inside_its_container(tmp_path):
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "radosgw-admin").write_text('#!/bin/bash\nexec docker -H unix:///e.sock exec cid radosgw-admin "$@"\n')
    info = SimpleNamespace(conf=Path("/c"), keyring=Path("/k"), rgw_endpoint="http://127.0.0.1:1",
                           credentials_file=Path("/cred"), tools_dir=tools)
    args = SimpleNamespace(method="direct", target_ms=0.0, increase=0.0, max_rate=0.0)
    (tmp_path / "w").mkdir()
    argv = shlex.split(_maintenance(info, tmp_path / "w", "cap:450@nice-admin", "victim", args, 0)[1])
    assert argv[0] == "env" and argv[1].startswith(f"PATH={tmp_path / 'w' / 'nice-admin-bin'}:")
    niced = (tmp_path / "w" / "nice-admin-bin" / "radosgw-admin").read_text()
    assert 'exec cid nice -n 19 radosgw-admin "$@"' in niced
    plain = shlex.split(_maintenance(info, tmp_path / "w", "cap:450", "victim", args, 0)[1])
    assert plain[0] != "env" and argv[2:argv.index("--config")] == plain[:plain.index("--config")]
    info.tools_dir = None
    with pytest.raises(SystemExit, match="container"):
        _maintenance(info, tmp_path / "w", "cap:450@nice-admin", "victim", args, 0)


def test_at_trace_keeps_a_debug_log_and_the_start_time_and_timeline_places_the_events(tmp_path, capsys):
    from bench import timeline

    info = SimpleNamespace(conf=Path("/c"), keyring=Path("/k"), rgw_endpoint="http://127.0.0.1:1",
                           credentials_file=Path("/cred"))
    args = SimpleNamespace(method="direct", target_ms=0.0, increase=0.0, max_rate=0.0, keep=None)
    with pytest.raises(SystemExit, match="--keep"):
        _maintenance(info, tmp_path, "cap:450@trace", "victim", args, 0)
    args.keep = tmp_path
    argv = shlex.split(_maintenance(info, tmp_path, "cap:450@trace", "victim", args, 0)[1])
    assert argv[:2] == ["sh", "-c"]
    inner = argv[2]
    start = tmp_path / "purge-cap_450_trace-0.start"
    assert inner.startswith(f"date +%s.%N > {start}; exec ") and inner.endswith(f"2> {start.with_suffix('.log')}")
    purge = shlex.split(inner.split("; exec ", 1)[1])
    assert purge[purge.index("--log-level") + 1] == "debug" and purge.index("--log-level") < purge.index("purge")
    plain = shlex.split(_maintenance(info, tmp_path, "cap:450", "victim", args, 0)[1])
    assert "--log-level" not in plain[2] and "date" not in plain[2]
    # A run: the purge started at wall 1000.0 = t 25.0; its drop at wall 1004.3 falls in second 29.
    verify = {"events": [{"kind": "maintenance-start", "t": 25.0}, {"kind": "maintenance-end", "t": 29.9}],
              "stop_s": 31.0, "verdict": {"outcome": "FAIL"},
              "maintenance": {"argv": argv},
              "windows": {"baseline": {"window": {"start": 5, "end": 25}}},
              "series": {"ops": {"PUT": {"p99_ms": [8.0] * 29 + [40.0, 9.0]}}}}
    (tmp_path / "verify-cap_450@trace-0.json").write_text(json.dumps(verify))
    start.write_text("1000.000000000\n")
    stamp = "1970-01-01T00:16:44.300000Z"  # 1004.3 s after the epoch
    start.with_suffix(".log").write_text(
        json.dumps({"event": "purge step", "step": "drop_bucket", "timestamp": stamp}) + "\nnot json\n"
        + json.dumps({"event": "ceph cli done", "args": ["gc", "list"], "ms": 120.4, "timestamp": stamp}) + "\n"
        + json.dumps({"event": "purge checkpoint saved", "bytes": 812, "timestamp": stamp}) + "\n"
        + json.dumps({"event": "purge item recorded", "item": 3, "timestamp": stamp}) + "\n")
    timeline.main([str(tmp_path)])
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "== verify-cap_450@trace-0.json FAIL"
    row = next(line for line in out if line.startswith("  29"))
    assert "40.0*" in row and "[drop_bucket] <gc list 120ms ckpt item recorded 3" in row
    assert next(line for line in out if line.startswith("  28")).rstrip().endswith("8.0")
    (tmp_path / "verify-cap_450@trace-0.json").unlink()
    with pytest.raises(SystemExit, match="no traced run"):
        timeline.main([str(tmp_path)])


def test_at_page_sets_the_listing_page_size(tmp_path):
    info = SimpleNamespace(conf=Path("/c"), keyring=Path("/k"), rgw_endpoint="http://127.0.0.1:1",
                           credentials_file=Path("/cred"))
    args = SimpleNamespace(method="direct", target_ms=0.0, increase=0.0, max_rate=0.0)
    for mode, line in (("cap:450@page250", "list_page_size = 250\n"), ("cap:450@index@page1", "list_page_size = 1\n"),
                       ("cap:450@index@workers1", "workers = 1\n"), ("cap:450@workers64@page9", "workers = 64\n"),
                       ("cap:450@workers64@page9", "list_page_size = 9\n")):
        argv = shlex.split(_maintenance(info, tmp_path, mode, "victim", args, 0)[1])
        assert line in Path(argv[argv.index("--config") + 1]).read_text(), mode
    argv = shlex.split(_maintenance(info, tmp_path, "cap:450", "victim", args, 0)[1])
    assert "list_page_size" not in Path(argv[argv.index("--config") + 1]).read_text()
    assert "workers" not in Path(argv[argv.index("--config") + 1]).read_text()


def test_list_s3_lists_at_its_rate_and_deletes_nothing(tmp_path):
    from bench import s3_list

    info = SimpleNamespace(conf=Path("/c"), keyring=Path("/k"), rgw_endpoint="http://127.0.0.1:1",
                           credentials_file=Path("/cred"))
    args = SimpleNamespace(method="direct", target_ms=0.0, increase=0.0, max_rate=0.0)
    assert parse_mode("list-s3:450") == ("list-s3", [450.0]) and parse_mode("list-s3:450:250") == ("list-s3", [450.0, 250.0])
    argv = shlex.split(_maintenance(info, tmp_path, "list-s3:450:250", "victim", args, 0)[1])
    assert argv[1:3] == ["-m", "bench.s3_list"] and argv[argv.index("--rate") + 1] == "450"
    assert argv[argv.index("--page") + 1] == "250" and argv[-1] == "victim"

    class S3:
        def __init__(self):
            self.calls = []

        def list_objects_v2(self, **kw):
            self.calls.append((now[0], kw))
            start = int(kw.get("ContinuationToken", "0"))
            keys = [{"Key": f"k{i}"} for i in range(start, min(start + kw["MaxKeys"], 950))]
            more = start + kw["MaxKeys"] < 950
            now[0] += 0.05 if len(self.calls) != 2 else 3.0  # the second request is slow
            return {"Contents": keys, "IsTruncated": more, **({"NextContinuationToken": str(start + 200)} if more else {})}

        def __getattr__(self, name):
            raise AssertionError(f"a listing calls nothing else, got {name}")

    now = [0.0]

    def sleep(s):
        assert s > 0
        now[0] += s

    s3 = S3()
    assert s3_list.list_at(s3, "victim", 400.0, 200, clock=lambda: now[0], sleep=sleep) == 950
    starts = [t for t, _ in s3.calls]
    # Every 0.5 s (200 keys at 400/s); after the slow one, the next at once, then 0.5 s apart again.
    assert starts == pytest.approx([0.0, 0.5, 3.5, 4.0, 4.5])
    assert all(kw["MaxKeys"] == 200 and kw["Bucket"] == "victim" for _, kw in s3.calls)


@pytest.mark.parametrize("rate", ["nan", "inf", "-1", "0", "1e400", " 450", "450 ", "", "x"])
def test_s3_list_refuses_a_bad_rate_in_one_line_with_exit_2(rate, capsys):
    from bench import s3_list

    with pytest.raises(SystemExit) as exc:
        s3_list.main(["--endpoint", "http://127.0.0.1:1", "--credentials", "/nonexistent", "--rate", rate, "b"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith("a finite number above 0")


def test_window_covered_is_the_purges_share_of_the_judged_window():
    from bench.purge_pacing import window_covered

    assert window_covered(14.0, 20.0) == 0.7
    assert window_covered(31.0, 20.0) == 1.0  # a longer purge is its own window
    assert window_covered(None, 20.0) is None and window_covered(0.0, 20.0) is None


@pytest.mark.parametrize("bad", ["0", "-1", "nan", "inf", "x"])
def test_a_window_of_no_length_is_refused(bad):
    import argparse

    from bench.purge_pacing import _seconds

    with pytest.raises(argparse.ArgumentTypeError):
        _seconds(bad)
