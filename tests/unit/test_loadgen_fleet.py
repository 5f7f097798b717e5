"""Load from several hosts (rgwkeeper.loadgen.fleet): slots, clocks, start and stop, over a
strict fake of the one RADOS object the coordinator and its agents share.

The fake is ``FakeOsd`` (purge_fakes) plus what a load job needs: watch/notify (a notify with
no watcher gets no answer, as librados returns no acks), whole-object writes and reads. Each
party has its own clocks: an agent's wall clock may be off the coordinator's by any amount,
and the time a notify spends on the wire is injected.
"""

from __future__ import annotations

import itertools
import json
import random

import pytest

from rgwkeeper.errors import CephError, CephTimeout, UsageError
from rgwkeeper.loadgen import fleet
from rgwkeeper.loadgen.runner import RunSpec
from rgwkeeper.loadgen.workload import SizeDist, Workload, parse_mix
from tests.unit.purge_fakes import FakeBoardStore, FakeOsd, UnexpectedCall, rados_over

S = 1_000_000_000


class Clock:
    """True time (ns) that only the test moves; a party reads it with its own offset."""

    def __init__(self) -> None:
        self.now = 1_800_000_000 * S
        self.ticks = iter(())  # ns each reading takes, as on a real host: never quite the same

    def _read(self) -> int:
        self.now += next(self.ticks, 0)
        return self.now

    def wall(self, off_ns: int = 0):
        return lambda: self._read() + off_ns

    def mono(self, base_ns: int):
        return lambda: self._read() - 1_800_000_000 * S + base_ns

    def sleep(self, s: float) -> None:
        self.now += int(s * S)


class FakeJobStore(FakeBoardStore):
    """A client of the fake OSD that can also watch, notify, list and write whole objects. As
    librados: a notify with no watcher gets no answer, every watcher's answer comes back (a
    `rados watch` answers with nothing), and a watch on a missing object fails (ENOENT)."""

    def __init__(self, osd: FakeOsd, client: str, clock: Clock, one_way_ns: int = 200_000) -> None:
        super().__init__(osd, client)
        self.clock = clock
        self.one_way_ns = one_way_ns
        self.data: dict[str, bytes] = osd.__dict__.setdefault("data", {})
        self.watches = osd.__dict__.setdefault("watches", {})

    def watch(self, obj, answer, on_error):
        self.osd.call(f"{obj} watch")
        if obj not in self.osd.omaps:
            raise CephError(f"{obj} watch", "[errno 2] No such file or directory")
        entry = [answer, on_error]
        self.watches.setdefault(obj, []).append(entry)

        class W:
            def close(w):
                if entry in self.watches.get(obj, []):
                    self.watches[obj].remove(entry)
        return W()

    def notify(self, obj, payload, timeout_s):
        self.osd.call(f"{obj} notify")
        self.clock.now += self.one_way_ns
        answers = [a[0](payload) for a in self.watches.get(obj, [])]
        self.clock.now += self.one_way_ns
        return answers, 0

    def write_full(self, obj, data):
        self.osd.call(f"{obj} write")
        self.data[obj] = data

    def read_all(self, obj):
        self.osd.call(f"{obj} read")
        return self.data.get(obj)

    def list_names(self, prefix):
        self.osd.call(f"list {prefix}")
        return sorted(n for n in {*self.osd.omaps, *self.data} if n.startswith(prefix))

    def remove(self, obj):
        super().remove(obj)
        self.data.pop(obj, None)
        self.watches.pop(obj, None)

    def close(self):
        raise UnexpectedCall("the store is closed by whoever opened it")


def _spec(**kw) -> RunSpec:
    w = Workload(mix=parse_mix("PUT=80,GET=20"), sizes=SizeDist.parse("uniform:1KiB-8KiB"), seed=7,
                 objects_per_worker=10, guard=8)
    return RunSpec(endpoint="http://gw1:8080", workload=w, rate=60.0, concurrency=4, workers=2, duration_s=8.0, **kw)


@pytest.fixture
def job():
    clock = Clock()
    osd = FakeOsd(lambda: clock.now / S)
    coord_store = FakeJobStore(osd, "coordinator", clock)
    coord = fleet.Coordinator(coord_store, _spec(), agents=2, max_skew_s=0.05, join_timeout_s=60, wall=clock.wall(),
                              mono=clock.mono(5 * S))
    coord.publish()

    def agent(skew_ns=0, one_way_ns=200_000, *, ready=False):
        """An agent of the job; ``ready``: it has joined and measured its clock."""
        store = FakeJobStore(osd, f"agent{skew_ns}", clock, one_way_ns)
        a = fleet.Agent(store, coord.job_id, wall=clock.wall(skew_ns), mono=clock.mono(77 * S), sleep=clock.sleep)
        if ready:
            a.join()
            a.measure()
        return a

    return clock, osd, coord, agent


# -- slots and the spec each agent runs -----------------------------------------------------------

def test_each_agent_gets_its_own_slot_and_worker_slice_of_the_coordinators_run(job):
    _, _, coord, agent = job
    a, b, late = agent(), agent(), agent()
    specs = []
    for x in (a, b):
        j = x.join()
        specs.append(fleet.agent_spec(j, x.slot, ("http://gw2:8080",)))
    assert (a.slot, b.slot) == (0, 1)
    assert [(s.worker_base, s.workers, s.fleet_workers) for s in specs] == [(0, 2, 4), (2, 2, 4)]
    for s in specs:  # the coordinator's workload and rate, this host's endpoint
        assert s.workload == coord.spec.workload and s.rate == 60.0 and s.duration_s == 8.0
        # Prepared early, its workers wait for the other agents as long as the coordinator does.
        assert s.prepare_timeout_s == coord.spec.prepare_timeout_s + 60
        assert s.endpoints == ("http://gw2:8080",)
    with pytest.raises(UsageError, match="has all its 2 agents already"):
        late.join()


def test_an_agent_cannot_join_a_job_that_does_not_exist_or_has_started(job):
    clock, osd, coord, agent = job
    a = agent()
    a.job_id, a.obj = "0123456789ab", fleet.job_object("0123456789ab")
    with pytest.raises(UsageError, match="no load job 0123456789ab"):
        a.join()
    coord.start(8.0)
    with pytest.raises(UsageError, match="has started already"):
        agent().join()


def test_a_spec_from_another_version_is_refused_in_one_line():
    with pytest.raises(UsageError, match="not one this rgwkeeper can run"):
        fleet.agent_spec({"format": 99, "run": {}}, 0, ("http://gw:80",))
    with pytest.raises(UsageError, match="not one this rgwkeeper can run"):
        fleet.agent_spec({"format": 1, "agents": 2, "run": {"workload": {}}}, 0, ("http://gw:80",))


@pytest.mark.parametrize("bad", ["", "0123456789aB", "0123456789a", "0123456789abc", "../etc/passw", "012345 789ab"])
def test_job_ids_are_checked_before_anything_is_contacted(bad):
    with pytest.raises(UsageError, match="12 hex digits"):
        fleet.valid_job_id(bad)


# -- clocks ---------------------------------------------------------------------------------------

def test_the_offset_is_measured_through_the_watch_and_kept_within_half_the_round_trip(job):
    _, _, coord, agent = job
    a = agent(skew_ns=-23_000_000)  # this host's clock is 23 ms behind the coordinator's
    a.join()
    off = a.measure()
    assert abs(off.offset_ns - 23_000_000) <= off.error_ns and off.rtt_ns == 400_000
    [reg] = [x for x in coord.read() if x.slot == a.slot]
    assert reg.offset == off and reg.host


def test_the_shortest_round_trip_gives_the_estimate():
    # (sent, theirs, received) with the agent 1 s behind: a slow, lopsided ping would say 1.4 s.
    pings = iter([(5 * S, 6 * S + 1_000_000, 5 * S + 2_000_000), (0, 1_000_000_000 + 900_000_000, 1_000_000_000),
                  (9 * S, 9 * S, 8 * S)])  # the last: this host's clock stepped back
    off = fleet.estimate_offset(lambda: next(pings), pings=3)
    assert off == fleet.Offset(1 * S, 2_000_000)


@pytest.mark.parametrize("skew_ms", [2500, -51])
def test_an_agent_whose_clock_is_far_off_is_refused_by_itself_and_by_the_coordinator(job, skew_ms):
    _, _, coord, agent = job
    a = agent(skew_ns=skew_ms * 1_000_000)
    a.join()
    with pytest.raises(UsageError, match=r"clock .* off the coordinator's .*sync both hosts' clocks") as refused:
        a.measure()
    a.fail(str(refused.value))  # as run_agent does: the coordinator still names the clock, as a usage error
    with pytest.raises(UsageError, match=f"agent {a.slot} on .*: clock {abs(skew_ms) / 1000:.3f} s off"):
        coord.check(coord.read())


def test_a_round_trip_too_slow_to_tell_the_clocks_apart_is_refused(job):
    _, _, _, agent = job
    a = agent(one_way_ns=60_000_000)  # 120 ms round trips: +-60 ms, more than the 50 ms bound
    a.join()
    with pytest.raises(UsageError, match="round trip .* too slow"):
        a.measure()


def test_with_no_coordinator_watching_the_clock_check_says_so(job):
    _, _, coord, agent = job
    a = agent()
    a.join()
    coord._watch.close()
    with pytest.raises(CephError, match="no coordinator answers"):
        a.measure()


# -- start and stop ------------------------------------------------------------------------------

def test_the_start_and_stop_land_on_the_agents_own_monotonic_clock_whatever_its_wall_clock(job):
    clock, _, coord, agent = job
    a = agent(skew_ns=30_000_000)  # 30 ms ahead: within the bound, and corrected
    a.join()
    a.measure()
    rng = random.Random(3)
    clock.ticks = (rng.randrange(1, 200) for _ in itertools.count())
    t0_coord = coord.start(8.0)
    t0_agent = a.start_ns(timeout_s=10)
    # Both mean the same true instant: START_LEAD_S from now, each on its own monotonic clock.
    assert abs((t0_coord - 5 * S) - (t0_agent - 77 * S)) <= a.offset.error_ns
    stop = a.stop_ns()
    assert stop - t0_agent == 8 * S  # exactly: start and stop converted with one base (no lost last second)
    assert json.loads(json.dumps(fleet.spec_to_job(coord.spec, 2, 0.05, 60)))["run"]["rate"] == 60.0


def test_a_stop_is_published_only_when_earlier_than_the_one_already_set(job):
    clock, osd, coord, _ = job
    t0 = coord.start(8.0)
    first = osd.omaps[coord.obj]["stop"]
    coord.stop_at_mono(t0 + 20 * S)
    assert osd.omaps[coord.obj]["stop"] == first
    coord.stop_at_mono(t0 + 3 * S)
    assert int(osd.omaps[coord.obj]["stop"]) == int(first) - 5 * S


def test_an_agent_waits_for_the_start_and_gives_up_if_the_job_ends_or_never_starts(job):
    clock, osd, coord, agent = job
    a = agent(ready=True)
    with pytest.raises(CephError, match="did not start within 3 s"):
        a.start_ns(timeout_s=3)
    assert "ready.0" in osd.omaps[coord.obj]
    coord.close()
    with pytest.raises(fleet.JobGone, match="has ended"):
        a.start_ns(timeout_s=3)
    assert coord.obj not in osd.omaps  # its "ready" write did not bring the object back


def test_an_agent_stops_at_once_when_the_coordinator_goes_silent_or_removes_the_job(job):
    clock, osd, coord, agent = job
    a = agent(skew_ns=40_000_000)  # 40 ms ahead: a beat is judged on the coordinator's time
    a.join()
    a.measure()
    coord.start(None)  # verify: the stop comes later
    coord.beat()
    assert a.stop_ns() is None and not a.gone
    clock.now += int(fleet.SILENT_S * S) - 20_000_000
    assert a.stop_ns() is None, "a beat 14.98 s old (coordinator's time) is not silence"
    clock.now += 2 * S
    assert a.stop_ns() == a.mono() and "silent" in a.gone
    coord.beat()
    a.gone = ""
    assert a.stop_ns() is None
    coord.close()
    assert a.stop_ns() == a.mono() and "ended" in a.gone


def test_a_failed_agent_fails_the_coordinators_run_in_one_line(job):
    _, _, coord, agent = job
    a = agent()
    a.join()
    a.fail("prepare: 3 PUTs failed")
    with pytest.raises(CephError, match="agent 0 on .* failed: prepare: 3 PUTs failed"):
        coord.check(coord.read())


def test_the_coordinator_removes_the_job_and_every_part_when_it_ends(job):
    _, osd, coord, agent = job
    a = agent()
    a.join()
    a.store.write_full(fleet.part_object(coord.job_id, 0, 0), b"{}")
    coord.close()
    assert coord.obj not in osd.omaps and not osd.data


def test_nothing_an_agent_writes_after_the_job_ended_brings_the_object_back(job):
    clock, osd, coord, agent = job
    a = agent(ready=True)
    coord.close()
    a.fail("interrupted")  # swallowed: nobody is there to read it
    with pytest.raises(fleet.JobGone):
        a.start_ns(timeout_s=3)
    with pytest.raises(fleet.JobGone):
        a.beat_once()
    with pytest.raises(fleet.JobGone):
        a.ship(_data())
    assert coord.obj not in osd.omaps and not osd.data, (osd.omaps.get(coord.obj), list(osd.data))


def _data(stop_s=8.0):
    from rgwkeeper.loadgen.runner import RunData
    return RunData(spec={}, columns={}, t0_ns=0, stop_s=stop_s, events=[], workers=[], parent_cpu_s=0.0,
                   started_at="2026-11-27T00:00:00Z", notes=[])


def test_a_part_is_shipped_in_chunks_and_read_back_whole(job, monkeypatch):
    _, osd, coord, agent = job
    monkeypatch.setattr(fleet, "CHUNK_BYTES", 64)
    a = agent(ready=True)
    shipped = a.ship(_data())
    [info] = [x for x in coord.read() if x.slot == a.slot]
    n = int(info.done.split()[1])
    assert n > 1 and len([k for k in osd.data if k.startswith(f"{coord.obj}.part.{a.slot}.")]) == n
    assert coord.read_part(info) == json.loads(json.dumps(shipped))
    osd.data[fleet.part_object(coord.job_id, a.slot, 1)] = b"garbage"
    with pytest.raises(fleet.DamagedJob, match="not a value rgwkeeper writes"):
        coord.read_part(info)
    coord.close()
    assert not osd.data


@pytest.mark.parametrize("key, value, message", [
    ("agent.0", json.dumps({"host": "h", "pid": 1, "offset_ns": "NaN", "rtt_ns": 1}), "offset_ns"),
    ("agent.0", json.dumps({"host": "h", "pid": "one"}), "pid"),
    ("agent.0", "{", "agent.0"),
    ("done.0", "maybe", "done.0"),
])
def test_a_damaged_value_in_the_job_fails_the_coordinator_in_one_line(job, key, value, message):
    _, osd, coord, _ = job
    osd.omaps[coord.obj][key] = value
    with pytest.raises(fleet.DamagedJob, match=f"{message}.*not a value rgwkeeper writes"):
        coord.read()


def test_a_garbled_heartbeat_is_ignored_for_progress_and_a_sound_one_is_added(job):
    _, osd, coord, _ = job
    osd.omaps[coord.obj]["alive.0"] = json.dumps({"at": 5, "second": 3, "ops": "lots"})
    osd.omaps[coord.obj]["alive.1"] = json.dumps({"at": 5, "second": 3, "ops": 7, "errors": 1, "requests": 9,
                                                  "p99_ms": None})
    live = fleet.live_of(coord.read())
    assert live.last_second["ops"] == 7 and live.errors == 1 and live.requests == 9


@pytest.mark.parametrize("field, value, message", [
    ("agents", 10**9, "agents"), ("agents", "two", "agents"), ("max_skew_s", None, "max_skew_s"),
    ("max_skew_s", 1e9, "max_skew_s"), ("join_timeout_s", -1, "join_timeout_s"),
])
def test_an_agent_refuses_a_job_spec_it_cannot_trust_before_taking_a_slot(job, field, value, message):
    _, osd, coord, agent = job
    spec = json.loads(osd.omaps[coord.obj]["spec"])
    spec[field] = value
    osd.omaps[coord.obj]["spec"] = json.dumps(spec)
    with pytest.raises(fleet.DamagedJob, match=message):
        agent().join()
    assert not any(k.startswith("agent.") for k in osd.omaps[coord.obj])


def test_only_a_clock_reading_counts_as_the_coordinators_answer(job):
    _, osd, coord, agent = job
    a = agent()
    a.join()
    # Another client watches the job object too (`rados watch`): it answers with nothing.
    osd.watches[coord.obj].insert(0, [lambda _p: b"", lambda _e: None])
    assert a.measure().rtt_ns == 400_000


def test_a_dropped_watch_is_watched_again_at_the_next_beat(job):
    _, osd, coord, agent = job
    [(_, on_error)] = osd.watches[coord.obj]
    osd.watches[coord.obj].clear()  # librados dropped it
    on_error(-107)
    coord.beat()
    a = agent()
    a.join()
    assert a.measure().offset_ns == 0


def test_an_agent_waiting_for_the_start_gives_up_when_the_coordinator_goes_silent(job):
    clock, _, coord, agent = job
    a = agent(ready=True)
    with pytest.raises(CephError, match="silent for over 15 s"):
        a.start_ns(timeout_s=3600)  # the fake clock moves POLL_S a poll: no real waiting


def test_the_coordinator_fails_on_an_agent_that_went_silent_and_tolerates_a_slow_answer(job):
    clock, osd, coord, agent = job
    a = agent(ready=True)
    a.beat_once()
    coord.check(coord.read())
    clock.now += int(16 * S)
    with pytest.raises(CephError, match="agent 0 on .* has been silent for 16 s"):
        coord.check(coord.read())
    # The agent's stop poll: one timeout is no reason to stop; SILENT_S of them is.
    coord.start(None)
    coord.beat()
    assert a.stop_ns() is None
    osd.unreachable = True
    assert a.stop_ns() is None and not a.gone
    clock.now += int(16 * S)
    assert a.stop_ns() == a.mono() and "has not answered" in a.gone


def test_stale_jobs_of_a_killed_coordinator_are_removed_and_live_ones_kept(job):
    clock, osd, coord, agent = job
    store = coord.store
    store.omap_set("loadgen.aaaaaaaaaaaa", {"spec": "{}", "beat": str(clock.now - 2 * 3600 * S)})
    store.write_full("loadgen.aaaaaaaaaaaa.part.0.0", b"x")
    assert fleet.remove_stale_jobs(store, clock.now) == ["aaaaaaaaaaaa"]
    assert coord.obj in osd.omaps and "loadgen.aaaaaaaaaaaa" not in osd.omaps and not osd.data


def _run_data(rec, stop_s):
    from array import array

    from rgwkeeper.loadgen.runner import RunData
    from rgwkeeper.loadgen.workload import FIELDS, TYPECODES
    columns = {name: array(tc, rec[name].tolist()).tobytes() for name, tc in zip(FIELDS, TYPECODES)}
    return RunData(spec={}, columns=columns, t0_ns=0, stop_s=stop_s, events=[], workers=[], parent_cpu_s=0.0,
                   started_at="2026-11-27T00:00:00Z", notes=[])


def test_the_merged_run_notes_an_agent_that_stopped_early_and_refuses_a_damaged_part():
    from tests.unit.test_loadgen_analysis import synth

    parts = [fleet.part_of(_run_data(synth([30] * 10, seed=1), 10.0), 0, "h0", fleet.Offset(0, 1000), None),
             fleet.part_of(_run_data(synth([30] * 6, seed=2), 6.5), 1, "h1", None, None)]
    run = fleet.FleetRun(job_id="0123456789ab", spec={}, stop_s=10.0, events=[], parts=parts,
                         started_at="2026-11-27T00:00:00Z", notes=[])
    result, series = fleet.merged(run, warmup_s=0)
    assert any("agent 1 on h1 stopped at 6.5 s, before the run's 10.0 s" in n for n in result["notes"])
    assert series.ops["PUT"].ok.tolist() == [60] * 6 + [30] * 4
    parts[1]["histograms"]["PUT"]["latency_ms"]["2"] = ["bm90IGhkcg=="]
    with pytest.raises(CephError, match="an agent's part is not one this rgwkeeper reads"):
        fleet.merged(run, warmup_s=0)


def test_an_abort_stops_agents_waiting_or_running_and_they_may_still_report(job):
    _, osd, coord, agent = job
    waiting, running = agent(), agent()
    for a in (waiting, running):
        a.join()
        a.measure()
    coord.abort("load run: agent 9 has been silent for 16 s")
    with pytest.raises(CephError, match="the coordinator stopped load job .*: load run: agent 9"):
        waiting.start_ns(timeout_s=10)
    assert running.stop_ns() == running.mono() and "stopped the run" in running.gone
    running.fail("stopped early")  # the job is still there: the coordinator reads why
    assert [x.done for x in coord.read()][running.slot] == "failed: stopped early"


# -- after the second review ---------------------------------------------------------------------

def test_an_agent_cut_off_right_after_the_start_stops_after_silent_s(job):
    clock, osd, coord, agent = job
    a = agent(ready=True)
    coord.start(None)
    a.start_ns(timeout_s=10)
    osd.unreachable = True  # from the first poll of the run on
    assert a.stop_ns() is None and not a.gone
    clock.now += int(16 * S)
    assert a.stop_ns() == a.mono() and "has not answered" in a.gone


def test_failed_pings_are_tried_again_and_too_few_good_ones_fail(job):
    _, osd, coord, agent = job
    a = agent()
    a.join()
    real = a.store.notify
    fails = iter([True, True, False, True, False, False, False, False, False, False, False, False, False])

    def flaky(obj, payload, timeout_s):
        if next(fails, False):
            raise CephTimeout(f"{obj} notify", "no answer within 5 s")
        return real(obj, payload, timeout_s)

    a.store.notify = flaky
    assert a.measure().rtt_ns == 400_000
    a.store.notify = lambda *_: (_ for _ in ()).throw(CephTimeout("notify", "no answer within 5 s"))
    with pytest.raises(CephTimeout):
        a.measure()


def test_an_agent_preparing_stops_on_an_abort_a_removed_job_or_a_silent_coordinator(job):
    clock, osd, coord, agent = job
    a = agent(ready=True)
    a.check()  # all well
    clock.now += int(16 * S)
    with pytest.raises(CephError, match="silent for over 15 s"):
        a.check()
    coord.beat()
    coord.abort("load run: interrupted")
    with pytest.raises(CephError, match="stopped load job .*: load run: interrupted"):
        a.check()
    coord.close()
    with pytest.raises(fleet.JobGone):
        a.check()


def test_a_start_learnt_late_is_noted(job):
    clock, osd, coord, agent = job
    a = agent(ready=True)
    coord.start(8.0)
    clock.now += int(3 * S)  # the start was 2 s ahead: read 1 s after it
    a.start_ns(timeout_s=10)
    assert a.notes and "learnt the start 1.0 s after it" in a.notes[0]


def test_parts_whose_job_is_gone_are_removed_with_the_stale_jobs(job):
    clock, osd, coord, _ = job
    coord.store.write_full("loadgen.bbbbbbbbbbbb.part.0.0", b"x")
    coord.store.write_full(fleet.part_object(coord.job_id, 0, 0), b"live")
    assert fleet.remove_stale_jobs(coord.store, clock.now) == []
    assert list(osd.data) == [fleet.part_object(coord.job_id, 0, 0)]  # the live job's part stays


def test_the_stop_in_force_is_what_the_coordinator_counts_its_run_to(job):
    _, _, coord, _ = job
    t0 = coord.start(8.0)
    assert coord.stop_at_mono(t0 + 20 * S) == t0 + 8 * S  # a later stop is not published
    assert coord.stop_at_mono(t0 + 5 * S) == t0 + 5 * S


def test_an_omap_value_that_is_not_utf8_reads_as_damaged_not_as_a_traceback():
    import rados as rados_mod  # noqa: F401 - python3-rados: the adapter builds its ops with it

    from rgwkeeper.adapters.rados import ObjectStore

    class Ioctx:
        def get_omap_vals_by_keys(self, op, keys):
            return iter([("spec", b"\xff\xfe{")]), 0

        def get_omap_vals(self, op, start, prefix, n):
            return iter([("agent.0", b"\xff{")]), 0

        def operate_read_op(self, op, obj):
            pass

        def set_osdmap_full_try(self):  # what full_try calls (the store writes on a full cluster)
            pass

        def close(self):
            pass

    class Cluster:
        def open_ioctx(self, pool):
            return Ioctx()

        def shutdown(self):
            pass

    rados = rados_over(Cluster())
    store = ObjectStore(rados, "rgwkeeper")
    try:
        assert store.omap_get_keys("loadgen.x", ["spec"])["spec"].endswith("{")
        with pytest.raises(fleet.DamagedJob, match="agent.0"):
            fleet.AgentInfo.from_omap("loadgen.x", 0, store.omap_get_all("loadgen.x"))
    finally:
        store.close()
        rados.close()
