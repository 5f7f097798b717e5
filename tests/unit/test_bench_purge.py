"""bench/purge.py's CPU accounting (read from a /proc laid out as Linux does) and its methods."""

import re

import pytest

from bench.purge import RGWKEEPER_METHOD, _TICK, cpu_now, cpu_per_k


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
