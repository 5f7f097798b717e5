"""Every number, size, duration and name a command takes: non-finite, overflowing, empty or padded
input is one line, exit 2, and nothing is contacted (no config resolution into cluster access,
no librados connect, no S3 or admin request)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rgwkeeper import logs
from rgwkeeper import purge as purge_api
from rgwkeeper.adapters.rados import RadosAdapter
from rgwkeeper.cli import daemon as daemon_cli
from rgwkeeper.cli import loadgen as loadgen_cli
from rgwkeeper.cli import preshard as preshard_cli
from rgwkeeper.cli import purge as purge_cli
from rgwkeeper.cli import status as status_cli
from rgwkeeper.cli.common import run_cli
from rgwkeeper.cli.main import cli


@pytest.fixture
def reached(monkeypatch):
    """Every way a command gets to the cluster, replaced by a recorder that fails the command."""
    calls: list[str] = []

    def recorder(name):
        def record(*args, **kwargs):
            calls.append(name)
            raise AssertionError(f"{name} was reached")

        return record

    for mod in (purge_cli, loadgen_cli, status_cli, preshard_cli, daemon_cli):
        monkeypatch.setattr(mod, "load_access", recorder(f"{mod.__name__}.load_access"))
    monkeypatch.setattr(loadgen_cli, "_rgw", recorder("loadgen._rgw"))
    monkeypatch.setattr(loadgen_cli, "run_load", recorder("loadgen.run_load"))
    monkeypatch.setattr(purge_api, "open_io", recorder("purge.open_io"))
    monkeypatch.setattr(RadosAdapter, "connect", recorder("RadosAdapter.connect"))
    monkeypatch.delenv("RGWKEEPER_CONFIG", raising=False)
    yield calls
    logs.setup("warning", stream=sys.__stderr__)


RESULT = str(Path(__file__).resolve().parents[1] / "fixtures" / "loadgen" / "quiet-put.json")

BAD = [
    # purge: the filters that decide what is deleted
    ["purge", "b12", "--older-than", "nan"],
    ["purge", "b12", "--older-than", "NaNd"],
    ["purge", "b12", "--older-than", "inf"],
    ["purge", "b12", "--older-than", "1e400"],
    ["purge", "b12", "--older-than", ""],
    ["purge", "b12", "--older-than", "0"],
    ["purge", "b12", "--older-than", "200y"],
    ["purge", "b12", "--larger-than", "infK"],
    ["purge", "b12", "--larger-than", "1e400K"],
    ["purge", "b12", "--larger-than", "64K"],
    # purge: work items
    ["purge", "b12", "--join", "xyz"],
    ["purge", "b12", "--join", "0123456789AB"],
    ["purge", "b12", "--join", "../../etc/pa"],
    ["purge", "--status", "0123"],
    ["purge", "b12", "--join", "0123456789ab", "--dry-run"],
    ["purge", "b12", "--join", "0123456789ab", "--max-rate", "5"],
    ["purge", "b12", "--workers", "0"],
    ["purge", "b12", "--workers", "nan"],
    ["purge", "b12", "--workers", "65"],
    ["purge", "b12", "--workers", "1e400"],
    ["purge", "b12", "--workers", " 4"],
    ["purge", "b12", "--workers", ""],
    ["purge", "--status", " 0123456789ab"],
    ["purge", "--status", "0123456789ab "],
    ["purge", "--status", ""],
    ["purge", "bad name", "--status", "0123456789ab"],
    ["purge"],
    ["purge", "b12", "--larger-than", ""],
    ["purge", "b12", "--larger-than", "99999999999TiB"],
    ["purge", "b12", "--smaller-than", "nan"],
    ["purge", "b12", "--smaller-than", "-1"],
    ["purge", "b12", "--raise-full-ratio", "nan"],
    ["purge", "b12", "--raise-full-ratio", "inf"],
    ["purge", "b12", "--raise-full-ratio", "1"],
    ["purge", "b12", "--raise-full-ratio", " 0.96"],
    ["expire", "b12", "--days", "1", "--raise-full-ratio", "0"],
    ["purge", "b12", "--max-rate", "nan"],
    ["purge", "b12", "--max-rate", "inf"],
    ["purge", "b12", "--max-rate", "1e400"],
    ["purge", "b12", "--max-rate", ""],
    ["purge", "b12", "--impact", "low", "--max-rate", "5"],
    ["purge", "b12", "--impact", "gentle"],
    ["expire", "b12", "--days", "1", "--impact", ""],
    ["purge", "b12", "--timeout", "nan"],
    ["purge", "b12", "--timeout", "inf"],
    ["purge", "b12", "--timeout", " 5"],
    ["purge", "b12", "--prefix", ""],
    ["purge", "b12\n"],
    ["purge", "b12", "--name", ""],
    ["purge", "b12", "--id", " admin"],
    # an unset shell variable: "" used to mean the default cluster, or the current directory
    ["purge", "b12", "--conf", ""],
    ["purge", "b12", "--keyring", ""],
    ["purge", "b12", "--rgw-credentials", ""],
    ["purge", "b12", "--config", ""],
    # expire
    ["expire", "b12", "--days", "nan"],
    ["expire", "b12", "--days", "1e400"],
    ["expire", "b12", "--days", "99999999999999999999"],
    ["expire", "b12", "--days", "0"],
    ["expire", "b12", "--days", " 5"],
    ["expire", "b12", "--noncurrent-days", "inf"],
    ["expire", "b12", "--abort-multipart-days", "-1"],
    ["expire", "b12", "--days", "1", "--larger-than", "1M"],
    ["expire", "b12", "--days", "1", "--smaller-than", "nan"],
    # status, preshard, the daemon's commands
    ["status", "--buckets", "nan"],
    ["status", "--buckets", "1e400"],
    ["status", "--buckets", ""],
    ["status", "--timeout", "nan"],
    ["preshard", "b12", "-N", "nan"],
    ["preshard", "b12", "-N", "1e400"],
    ["preshard", "b12", "-N", "99999999999999999999999"],
    ["preshard", "b12", "-N", ""],
    ["preshard", "b12", "-N", "1000", "--objects-per-shard", "inf"],
    ["plan", "--timeout", "nan"],
    ["restore", "--holder", ""],
    ["restore", "--holder", "node1\n"],
    ["pause", "--reason", "deploy\nrgwkeeper: fake line"],
    ["pause", "--reason", "x" * 301],  # kept in the journal, shown on one line
    ["daemon", "--timeout", "1e400"],
    # loadgen run and verify
    ["loadgen", "run", "--rate", "nan"],
    ["loadgen", "run", "--rate", "inf"],
    ["loadgen", "run", "--concurrency", "1e400"],
    ["loadgen", "run", "--workers", "nan"],
    ["loadgen", "run", "--buckets", ""],
    ["loadgen", "run", "--prefixes", "inf"],
    ["loadgen", "run", "--objects", "-1"],
    ["loadgen", "run", "--seed", "nan"],
    ["loadgen", "run", "--seed", "99999999999999999999999"],
    ["loadgen", "run", "--warmup", "nan"],
    ["loadgen", "run", "--duration", "nan"],
    ["loadgen", "run", "--duration", "inf"],
    ["loadgen", "run", "--size", "4K"],
    ["loadgen", "run", "--size", "nan"],
    ["loadgen", "run", "--size", "4KiB=nan,1MiB=1"],
    ["loadgen", "run", "--mix", "PUT=nan"],
    ["loadgen", "run", "--mix", "PUT=inf"],
    ["loadgen", "run", "--bucket-prefix", ""],
    ["loadgen", "run", "--bucket-prefix", "Loud"],
    ["loadgen", "run", "--region", ""],
    ["loadgen", "run", "--rgw-endpoint", ""],
    ["loadgen", "run", "--rgw-credentials", ""],
    ["loadgen", "run", "--out", ""],
    ["loadgen", "compare", "--config", "", RESULT, RESULT],
    # load from several hosts
    ["loadgen", "run", "--agents", "0"],
    ["loadgen", "run", "--agents", "nan"],
    ["loadgen", "run", "--agents", "1001"],
    ["loadgen", "run", "--agents", "1e400"],
    ["loadgen", "run", "--agents", " 2"],
    ["loadgen", "run", "--agents", ""],
    ["verify", "--maintenance", "none", "--agents", "inf"],
    ["loadgen", "agent", "--job", ""],
    ["loadgen", "agent", "--job", "0123456789AB"],
    ["loadgen", "agent", "--job", "0123456789ab "],
    ["loadgen", "agent", "--job", "../../etc/pa"],
    ["loadgen", "agent"],
    ["loadgen", "run", "--agents", "2", "--raw", "records.csv"],
    ["verify", "--maintenance", "none", "--agents", "2", "--raw", "records.csv"],
    # many buckets as one job
    ["purge", "b12", "--match", "b1*"],
    ["purge", "--match", "b1*", "--buckets-from", "list.txt"],
    ["purge", "--match", "a/b"],
    ["purge", "--match", ""],
    ["purge", "--match", " b1*"],
    ["purge", "--match", "b1*", "--raise-full-ratio", "0.96"],
    ["purge", "--match", "b1*", "--join", "0123456789ab"],
    ["purge", "--match", "b1*", "--older-than", "nan"],
    ["purge", "--buckets-from", "/nonexistent/rgwkeeper-list"],
    ["purge", "--match", "b1*", "--method", "lifecycle"],
    ["purge"],
    ["verify", "--maintenance", "none", "--baseline", "nan"],
    ["verify", "--maintenance", "none", "--window", "inf"],
    ["verify", "--maintenance", "none", "--scrub-every", "nan"],
    ["verify", "--maintenance", "none", "--maintenance-timeout", "1e400"],
    ["verify", "--maintenance", "none", "--rate", "nan"],
    ["verify", "--maintenance", "none", "--size", "1M"],
    # an empty bucket name was taken for "no bucket given" and replaced by a placeholder name
    ["purge", "", "--dry-run"],
    ["purge", "--join", "0123456789ab", ""],
    # size filters no object can match
    ["purge", "b12", "--smaller-than", "0"],
    ["purge", "b12", "--larger-than", "10", "--smaller-than", "5"],
    ["purge", "b12", "--larger-than", "10", "--smaller-than", "11"],
    ["expire", "b12", "--days", "1", "--larger-than", "10", "--smaller-than", "11"],
    # a command line that cannot be split into words
    ["verify", "--maintenance-cmd", "'x"],
    ["verify", "--maintenance-cmd", "a\\"],
]


@pytest.mark.parametrize("args", BAD, ids=[" ".join(map(repr, a)) for a in BAD])
def test_bad_input_is_one_line_exit_2_and_nothing_is_contacted(reached, capsys, args):
    rc = run_cli(cli, args)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.count("\n") == 1 and err.startswith("rgwkeeper: error: ") and "Traceback" not in err, err
    assert reached == []


def test_nan_age_never_reaches_the_confirmation(reached, capsys):
    # It used to: "About to purge b12 (older than nans)", and then every object matched.
    rc = run_cli(cli, ["purge", "b12", "--older-than", "nan", "--yes"])
    err = capsys.readouterr().err
    assert rc == 2 and "nans" not in err and "About to purge" not in err
    assert reached == []


def test_the_ambiguous_size_names_both_spellings(reached, capsys):
    run_cli(cli, ["purge", "b12", "--larger-than", "64K"])
    err = capsys.readouterr().err
    assert "write 64KiB (65,536 bytes) or 64KB (64,000 bytes)" in err and "--larger-than" in err


def test_good_input_gets_as_far_as_the_cluster(reached, capsys):
    # The recorder is reached: the refusals above come from the input, not from the fixture.
    with pytest.raises(AssertionError, match="load_access was reached"):
        run_cli(cli, ["purge", "b12", "--older-than", "7d", "--larger-than", "64KiB", "--timeout", "5"])
    assert reached == ["rgwkeeper.cli.purge.load_access"]


def test_a_bucket_list_with_a_bad_name_names_its_line_and_contacts_nothing(reached, capsys, tmp_path):
    listing = tmp_path / "list.txt"
    listing.write_text("good-bucket\n\nBad_Bucket\n")
    rc = run_cli(cli, ["purge", "--buckets-from", str(listing), "--yes"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and f"{listing} line 3: bucket name 'Bad_Bucket'" in err, err
    assert reached == []


def test_a_pause_reason_at_the_limit_gets_as_far_as_the_cluster(reached, capsys):
    with pytest.raises(AssertionError, match="load_access was reached"):
        run_cli(cli, ["pause", "--reason", "x" * 300])
    assert reached == ["rgwkeeper.cli.daemon.load_access"]
