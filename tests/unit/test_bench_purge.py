"""bench/purge.py's CPU accounting (read from a /proc laid out as Linux does) and its methods."""

import re
import subprocess
import sys
import threading

import pytest

from bench.purge import RGWKEEPER_METHOD, _TICK, cpu_now, cpu_per_k, join_to_end


def _proc(root, stat_line, procs):
    (root / "stat").write_text(f"{stat_line}\ncpu0 1 2 3 4\nintr 1\n")
    for pid, comm, utime, stime in procs:
        d = root / str(pid)
        d.mkdir()
        # pid (comm) state ppid ... utime is the 14th field, stime the 15th
        rest = ["S", "1"] + ["0"] * 9 + [str(utime), str(stime)] + ["0"] * 5
        d.joinpath("stat").write_text(f"{pid} ({comm}) {' '.join(rest)}\n")
    (root / "self").mkdir()  # not a pid: skipped


def test_cpu_now_counts_host_busy_time_and_each_daemon_by_name(tmp_path):
    # user nice system idle iowait irq softirq steal: busy = all but idle, iowait and steal
    _proc(tmp_path, f"cpu  {_TICK * 3} 0 {_TICK} {_TICK * 50} {_TICK * 7} 0 {_TICK} {_TICK * 4} 0 0",
          [(10, "ceph-osd", _TICK, _TICK), (11, "ceph-osd", _TICK * 2, 0), (12, "radosgw", _TICK, 0),
           (13, "radosgw-admin", _TICK * 9, 0), (14, "python3 (x)", _TICK * 4, 0)])
    assert cpu_now(tmp_path) == {"host": 5.0, "osd": 4.0, "rgw": 1.0}


def test_cpu_per_k_is_per_thousand_objects_and_the_rest_is_other():
    before = {"host": 10.0, "osd": 2.0, "rgw": 1.0}
    after = {"host": 16.0, "osd": 5.0, "rgw": 2.0}
    assert cpu_per_k(before, after, 2000) == {"host": 3.0, "osd": 1.5, "rgw": 0.5, "other": 1.0}


@pytest.mark.parametrize("method, cap", [("rgwkeeper-cap450", "450"), ("rgwkeeper-index-cap20", "20"),
                                         ("rgwkeeper", None)])
def test_a_cap_is_part_of_an_rgwkeeper_method(method, cap):
    m = re.fullmatch(RGWKEEPER_METHOD, method)
    assert m is not None and m.group(5) == cap
    assert re.fullmatch(RGWKEEPER_METHOD, "rgwkeeper-cap0") is None


def _script(tmp_path, name, body):
    path = tmp_path / name
    path.write_text(body)
    return [sys.executable, str(path)]


def _lead(running):
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)" if running else "pass"])


REFUSE_TWICE = """
import json, pathlib, sys
n = pathlib.Path(sys.argv[0]).with_suffix(".count")
k = int(n.read_text()) if n.exists() else 0
n.write_text(str(k + 1))
if k < 2:
    sys.exit("rgwkeeper: no purge abc has work items yet: a purge started just now publishes them a moment "
             "after it prints its id, run --join again in a few seconds")
print(json.dumps({"counters": {"objects_deleted": 7}}))
"""


def test_a_join_refused_before_the_items_exist_is_started_again_while_the_purge_runs(tmp_path):
    lead = _lead(running=True)
    procs = []
    try:
        got = join_to_end(_script(tmp_path, "j.py", REFUSE_TWICE), lead, procs,
                                     (threading.Lock(), threading.Event()), tmp_path / "j.err")
    finally:
        lead.kill()
        lead.wait()
    assert got == {"counters": {"objects_deleted": 7}} and len(procs) == 3


def test_a_join_refused_after_the_purge_ended_joined_nothing(tmp_path):
    lead = _lead(running=False)
    lead.wait()  # reaped
    procs = []
    got = join_to_end(_script(tmp_path, "j.py", REFUSE_TWICE), lead, procs,
                                 (threading.Lock(), threading.Event()), tmp_path / "j.err")
    assert got == {} and len(procs) == 1


def test_a_join_refused_past_its_retry_time_joined_nothing(tmp_path):
    lead = _lead(running=True)
    procs = []
    try:
        got = join_to_end(_script(tmp_path, "j.py", REFUSE_TWICE), lead, procs,
                          (threading.Lock(), threading.Event()), tmp_path / "j.err", retry_for_s=0.0)
    finally:
        lead.kill()
        lead.wait()
    assert got == {} and len(procs) == 1


def test_a_join_that_fails_otherwise_fails_the_run(tmp_path):
    lead = _lead(running=True)
    try:
        with pytest.raises(RuntimeError, match="exit 3: .*boom"):
            join_to_end(_script(tmp_path, "j.py", "import sys; sys.stderr.write('boom'); sys.exit(3)"),
                                   lead, [], (threading.Lock(), threading.Event()), tmp_path / "j.err")
    finally:
        lead.kill()
        lead.wait()


def test_no_join_starts_once_the_run_is_torn_down(tmp_path):
    stop = (threading.Lock(), threading.Event())
    stop[1].set()
    procs = []
    lead = _lead(running=False)
    lead.wait()
    assert join_to_end(_script(tmp_path, "j.py", REFUSE_TWICE), lead, procs, stop, tmp_path / "j.err") == {}
    assert procs == []
