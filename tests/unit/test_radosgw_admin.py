"""The Ceph CLI runner and radosgw-admin on it: argv, JSON in noisy output, errors, timeouts."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import signal

import pytest

from rgwkeeper.access import ClusterAccess
from rgwkeeper.adapters.cephcli import CephCli, extract_json, subprocess_runner
from rgwkeeper.adapters.radosgw_admin import RadosgwAdmin
from rgwkeeper.errors import CephTimeout, CommandFailed, InvalidName, NotFound
from tests.unit.fakes import FIXTURES, FakeRunner, UnexpectedCall, load_fixture

CAPTURED = load_fixture("radosgw-admin.json")


def _access(tmp_path, keyring=True):
    return ClusterAccess(conf=tmp_path / "ceph.conf", keyring=(tmp_path / "k") if keyring else None,
                         client_name="client.rgwkeeper", rgw_endpoint=None, rgw_credentials_file=None, timeout_s=5)


def test_argv_is_a_list_with_conf_name_and_keyring(tmp_path):
    rgw = RadosgwAdmin(_access(tmp_path))
    assert rgw.argv("bucket", "stats") == [
        "radosgw-admin", "--conf", str(tmp_path / "ceph.conf"), "--name", "client.rgwkeeper",
        "--keyring", str(tmp_path / "k"), "bucket", "stats"]
    assert "--keyring" not in RadosgwAdmin(_access(tmp_path, keyring=False)).argv()


@pytest.mark.parametrize("binary", ["ceph", "rados"])
def test_ceph_and_rados_run_with_the_same_access_and_their_own_name(tmp_path, binary):
    cli = CephCli(_access(tmp_path), binary)
    assert cli.argv("-p", "pool", "lock", "info") == [
        binary, "--conf", str(tmp_path / "ceph.conf"), "--name", "client.rgwkeeper",
        "--keyring", str(tmp_path / "k"), "-p", "pool", "lock", "info"]


def test_only_radosgw_admin_reads_its_exit_codes_as_not_found(tmp_path):
    # exit 2 with "(2)" is radosgw-admin's "no such bucket"; from ceph or rados it is a failed command.
    runner = FakeRunner().expect(["x"], returncode=2, stderr="failure: (2) No such file or directory")
    with pytest.raises(NotFound):
        asyncio.run(RadosgwAdmin(_access(tmp_path), runner=runner).run("x"))
    with pytest.raises(CommandFailed) as exc:
        asyncio.run(CephCli(_access(tmp_path), "rados", runner=runner).run("x"))
    assert not isinstance(exc.value, NotFound) and exc.value.argv[0] == "rados"


def test_extract_json_skips_log_noise():
    doc = {"bucket": "b", "num_shards": 11}
    noisy = "2026-11-22T02:49:40.754+0000 7f00 -1 WARNING: something\n" + json.dumps(doc, indent=2) + "\ntrailing log\n"
    assert extract_json(noisy) == doc
    assert extract_json("[]") == []
    assert extract_json("") is None
    with pytest.raises(ValueError):
        extract_json("no json here")


def test_bucket_stats_parses_captured_output(tmp_path):
    stats = CAPTURED["bucket_stats_capture_small"]
    runner = FakeRunner().expect(["bucket", "stats", "--bucket", "capture-small", "--format=json"], json.dumps(stats, indent=4))
    out = asyncio.run(RadosgwAdmin(_access(tmp_path), runner=runner).bucket_stats("capture-small"))
    assert out["num_shards"] == 1 and out["usage"]["rgw.main"]["num_objects"] == 5


def test_missing_bucket_is_not_found(tmp_path):
    # Captured from 16.2.15: exit 210 and "failure: (2002) Unknown error 2002".
    m = CAPTURED["bucket_stats_missing"]
    runner = FakeRunner().expect(["bucket", "stats", "--bucket", "does-not-exist", "--format=json"],
                                 m["stdout"], returncode=m["returncode"], stderr=m["stderr"])
    with pytest.raises(NotFound):
        asyncio.run(RadosgwAdmin(_access(tmp_path), runner=runner).bucket_stats("does-not-exist"))


def test_other_failures_keep_argv_exit_and_stderr(tmp_path):
    runner = FakeRunner().expect(["reshard", "list", "--format=json"], "", returncode=13,
                                 stderr="2026 something\nfailure: (13) Permission denied\n")
    with pytest.raises(CommandFailed) as exc:
        asyncio.run(RadosgwAdmin(_access(tmp_path), runner=runner).reshard_list())
    e = exc.value
    assert e.exit_code_seen == 13 and e.argv[-3:] == ["reshard", "list", "--format=json"]
    assert "Permission denied" in str(e) and "\n" not in str(e)


def test_invalid_bucket_never_runs(tmp_path):
    runner = FakeRunner()
    with pytest.raises(InvalidName):
        asyncio.run(RadosgwAdmin(_access(tmp_path), runner=runner).bucket_stats("x&purge-objects=true"))
    assert runner.calls == []


def test_strict_runner_rejects_unexpected_calls(tmp_path):
    with pytest.raises(UnexpectedCall):
        asyncio.run(RadosgwAdmin(_access(tmp_path), runner=FakeRunner()).reshard_list())


def test_real_subprocess_is_killed_at_the_timeout():
    with pytest.raises(CephTimeout, match="killed"):
        asyncio.run(subprocess_runner(["sleep", "30"], 0.2))


def test_real_subprocess_output():
    out = asyncio.run(subprocess_runner(["sh", "-c", "echo '{\"a\": 1}'; echo err >&2; exit 3"], 5))
    assert (out.returncode, out.stdout.strip(), out.stderr.strip()) == (3, '{"a": 1}', "err")


def test_a_cancelled_run_kills_its_process(tmp_path):
    # SIGTERM or Ctrl-C cancel the caller: the child (an lc process, a bucket rm) must not go
    # on changing the cluster after rgwkeeper has stopped.
    pid_file = tmp_path / "pid"

    async def cancel_while_running():
        task = asyncio.create_task(subprocess_runner(["sh", "-c", f"echo $$ > {pid_file}; exec sleep 30"], 60))
        while not pid_file.exists() or not pid_file.read_text().strip():
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_while_running())
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)


_ARGV = ["radosgw-admin", "--conf", "/etc/ceph/ceph.conf", "--name", "client.admin", "--keyring", "/k",
         "bucket", "rm", "--bucket", "b", "--purge-objects"]
_ASSERT = ("/build/ceph-20.2.4/src/rgw/driver/rados/rgw_bucket.cc: In function 'f' thread 7f time t\n"
           "/build/ceph-20.2.4/src/rgw/driver/rados/rgw_bucket.cc: 240: FAILED ceph_assert(r == 0)\n"
           "2026-11-27T11:51:02.101+0000 7f3a1c8e4980 -1 *** Caught signal (Aborted) **\n"
           "--- begin dump of recent events ---\n--- end dump of recent events ---\n")


@pytest.mark.parametrize("code, stderr, signal_name, shown", [
    (-6, _ASSERT, "SIGABRT", "240: FAILED ceph_assert(r == 0)"),  # run directly: the returncode is -N
    (134, _ASSERT, "SIGABRT", "240: FAILED ceph_assert(r == 0)"),  # through a shell or docker exec
    (139, "x -1 *** Caught signal (Segmentation fault) **\n--- end dump of recent events ---\n",
     "SIGSEGV", ": crashed with SIGSEGV (exit 139): *** Caught signal (Segmentation fault) **"),
    (-11, "", "SIGSEGV", "crashed with SIGSEGV (exit -11): no error text"),
    # Stopped from outside (an operator, the OOM killer, a service stop): not a crash, never run again.
    (-9, "", None, "killed by SIGKILL (exit -9): no error text"),
    (-15, "", None, "killed by SIGTERM (exit -15): no error text"),
    (137, "", None, "exit 137: no error text"),
    # A crash dump in stderr does not make a kill from outside a crash: the signal decides.
    (-15, "x -1 *** Caught signal (Terminated) **\n", None, "killed by SIGTERM (exit -15)"),
    (143, "x -1 *** Caught signal (Terminated) **\n", None, "exit 143: x -1 *** Caught signal (Terminated) **"),
    # radosgw-admin's own exits are error numbers modulo 256: 2200 % 256 = 152 is not a signal.
    (152, "ERROR: something refused\n", None, "exit 152: ERROR: something refused"),
    (210, "failure: (2002) Unknown error 2002\n", None, "exit 210: failure: (2002) Unknown error 2002"),
])
def test_a_crashed_tool_is_told_apart_from_a_refusal_and_named_by_its_command(code, stderr, signal_name, shown):
    exc = CommandFailed(_ARGV, code, stderr)
    assert exc.signal_name == signal_name
    assert str(exc).startswith("radosgw-admin bucket rm --bucket b --purge-objects: ")
    assert shown in str(exc) and "/k" not in str(exc) and "end dump" not in str(exc)


@pytest.mark.parametrize("release", ["pacific", "reef", "tentacle"])
def test_bucket_list_of_a_user_that_does_not_exist_is_not_found_as_no_such_user(tmp_path, release):
    # The reference for whether a purge's owner exists (captured: purge.json's "user_missing").
    m = json.loads((FIXTURES.parent / release / "purge.json").read_text())["user_missing"]["bucket_list_uid"]
    runner = FakeRunner().expect(["bucket", "list", "--uid", "gone", "--format=json"], m["stdout"],
                                 returncode=m["returncode"], stderr=m["stderr"])
    with pytest.raises(NotFound) as exc:
        asyncio.run(RadosgwAdmin(_access(tmp_path), runner=runner).user_buckets("gone"))
    assert exc.value.detail == "NoSuchUser"


@pytest.mark.parametrize("release", ["pacific", "reef", "tentacle"])
def test_user_stats_is_not_the_reference_for_whether_a_user_exists(tmp_path, release):
    # `user stats` reads the user's stats object ("not been initialized or does not exist"), and
    # Pacific's sync of a missing user exits 0, recording stats for no user (captured).
    m = json.loads((FIXTURES.parent / release / "purge.json").read_text())["user_missing"]
    runner = FakeRunner().expect(["user", "stats", "--uid", "gone", "--format=json"], m["user_stats"]["stdout"],
                                 returncode=m["user_stats"]["returncode"], stderr=m["user_stats"]["stderr"])
    with pytest.raises(CommandFailed):
        asyncio.run(RadosgwAdmin(_access(tmp_path), runner=runner).user_stats("gone"))
    assert (m["user_stats_sync"]["returncode"] == 0) == (release == "pacific")


def test_an_exit_code_alone_is_not_no_such_user(tmp_path):
    runner = FakeRunner().expect(["bucket", "list", "--uid", "u", "--format=json"], "", returncode=254,
                                 stderr="ERROR: failed to list buckets: (2) No such file or directory\n")
    with pytest.raises(CommandFailed):
        asyncio.run(RadosgwAdmin(_access(tmp_path), runner=runner).user_buckets("u"))



def test_a_run_cancelled_twice_still_kills_a_child_that_ignores_sigterm(tmp_path):
    # A second cancel (a second Ctrl-C, asyncio.run's teardown) must not cut the grace short and
    # leave the child running (it ignores SIGTERM here, as a radosgw-admin busy in librados may).
    pid_file = tmp_path / "pid"

    async def cancel_twice():
        task = asyncio.create_task(subprocess_runner(
            ["sh", "-c", f"trap '' TERM; echo $$ > {shlex.quote(str(pid_file))}; while :; do sleep 0.05; done"], 60,
            cancel_grace_s=0.5))
        for _ in range(500):
            if pid_file.exists() and pid_file.read_text().strip():
                break
            await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    try:
        asyncio.run(cancel_twice())
        with pytest.raises(ProcessLookupError):
            os.kill(int(pid_file.read_text()), 0)
    finally:
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
