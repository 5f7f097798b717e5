"""Load from several hosts: a coordinator and agents that meet in one RADOS object.

The coordinator (``loadgen run --agents N``, ``verify --agents N``) makes the buckets and the
job, ``loadgen.<id>`` in ``daemon.pool``, and watches it. An agent (``loadgen agent --job ID``,
on any host with the cluster's keyring and RGW credentials):

1. takes a free slot ``agent.<k>`` in one compare-and-set write (two agents never share one);
   its workers are ``k*W .. k*W+W-1`` of the fleet's ``N*W``: their own keys and seeds, and one
   open-loop schedule interleaved over all of them at the fleet's rate;
2. measures its clock against the coordinator's (:func:`estimate_offset`): it notifies the job
   object, the coordinator's watch answers with its wall clock. An offset beyond
   ``loadgen.max_clock_skew_ms`` is refused on both sides, in one line;
3. prepares its objects, sets ``ready.<k>``, and starts at the coordinator's ``start`` (a wall
   time on the coordinator's clock, turned into the agent's own monotonic clock by the offset);
4. stops at ``stop``, or at once if the job object is gone or the coordinator's ``beat`` is
   older than ``SILENT_S`` (a coordinator that died does not leave load running);
5. writes its part, ``loadgen.<id>.part.<k>``: per-second series and per-second HDR histograms
   per operation and latency (no raw records), and sets ``done.<k>``.

The coordinator adds the parts (:mod:`analysis`: histograms added, never percentiles averaged)
into the same result JSON a one-host run writes, plus each agent's clock offset and counts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import secrets
import socket
import time
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import structlog

from rgwkeeper.access import ClusterAccess, RgwCredentials
from rgwkeeper.adapters.connect import NONE, open_adapters
from rgwkeeper.adapters.rados import ObjectStore, ensure_pool
from rgwkeeper.errors import CephError, RgwkeeperError, UsageError
from rgwkeeper.loadgen import analysis
from rgwkeeper.loadgen.runner import (Controller, Event, Live, Progress, RunData, RunHandle, RunSpec, make_buckets,
                                      remove_buckets, run_load)
from rgwkeeper.loadgen.workload import SizeDist, Workload
from rgwkeeper.units import check_number

log = structlog.get_logger("rgwkeeper.loadgen.fleet")

FORMAT = 1
#: Seconds between the coordinator's ``start`` and the moment it is published: agents poll
#: every POLL_S, so all of them know the start well before it.
START_LEAD_S = 2.0
POLL_S = 0.1
#: A stop the controller asks for is published this far ahead (agents read it every tick, 0.5 s).
STOP_LEAD_S = 1.5
#: An agent stops its load when the coordinator's beat is this old (the coordinator beats
#: every tick, 0.5 s).
SILENT_S = 15.0
#: Clock pings an agent sends; the one with the shortest round trip is kept.
PINGS = 8
PING_TIMEOUT_S = 5.0

# Fault injection for the tests: an agent whose wall clock is this many ms off (a host whose
# clock is wrong; several processes on one test host share one clock).
SKEW_ENV = "RGWKEEPER_INJECT_CLOCK_SKEW_MS"


def agent_wall_clock() -> Callable[[], int]:
    skew_ns = int(float(os.environ.get(SKEW_ENV) or 0) * 1e6)
    return (lambda: time.time_ns() + skew_ns) if skew_ns else time.time_ns


def job_object(job_id: str) -> str:
    return f"loadgen.{job_id}"


def part_object(job_id: str, slot: int) -> str:
    return f"loadgen.{job_id}.part.{slot}"


def valid_job_id(text: str) -> str:
    if len(text) != 12 or any(c not in "0123456789abcdef" for c in text):
        raise UsageError(f"load job id {text!r} is not one rgwkeeper makes (12 hex digits, as printed by "
                         f"`loadgen run --agents`)")
    return text


# -- clocks -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Offset:
    """The coordinator's wall clock minus this host's, and how sure: the true offset lies within
    ``offset_ns +- rtt_ns/2`` (Cristian's method: the answer was read somewhere in the round trip)."""

    offset_ns: int
    rtt_ns: int

    @property
    def error_ns(self) -> int:
        return self.rtt_ns // 2

    def to_dict(self) -> dict[str, float]:
        return {"offset_ms": round(self.offset_ns / 1e6, 3), "rtt_ms": round(self.rtt_ns / 1e6, 3)}


def estimate_offset(ping: Callable[[], tuple[int, int, int]], pings: int = PINGS) -> Offset:
    """``ping()`` returns (sent, the coordinator's clock, received), the first and last on this
    host's wall clock; the round trip with the shortest time gives the estimate."""
    best: Offset | None = None
    for _ in range(pings):
        sent, theirs, received = ping()
        rtt = received - sent
        if rtt < 0:
            continue  # this host's wall clock stepped during the ping
        est = Offset(theirs - (sent + received) // 2, rtt)
        if best is None or rtt < best.rtt_ns:
            best = est
    if best is None:
        raise CephError("clock check", "every ping saw this host's clock step backwards; try again")
    return best


def check_skew(offset: Offset, bound_s: float, who: str) -> None:
    """Refuse an agent whose clock is off by more than ``bound_s``, or cannot be told that well."""
    off = abs(offset.offset_ns) / 1e9
    if off > bound_s:
        raise UsageError(f"{who}: clock {off:.3f} s off the coordinator's (loadgen.max_clock_skew_ms "
                         f"{bound_s * 1000:g}); sync both hosts' clocks (chrony/NTP) and run again")
    if offset.error_ns / 1e9 > bound_s:
        raise UsageError(f"{who}: the clock check's round trip ({offset.rtt_ns / 1e6:.0f} ms) is too slow to "
                         f"tell the clocks apart within loadgen.max_clock_skew_ms {bound_s * 1000:g}")


# -- the job's spec ------------------------------------------------------------------------------

def spec_to_job(spec: RunSpec, agents: int, max_skew_s: float) -> dict[str, Any]:
    """What an agent needs of the coordinator's run (never endpoints or credentials: each
    agent uses its own host's)."""
    w = spec.workload
    return {"format": FORMAT, "agents": agents, "max_skew_s": max_skew_s,
            "run": {"workload": w.to_dict(), "rate": spec.rate, "concurrency": spec.concurrency,
                    "workers": spec.workers, "duration_s": spec.duration_s,
                    "request_timeout_s": spec.request_timeout_s, "region": spec.region,
                    "skip_prepare": spec.skip_prepare, "keep": spec.keep,
                    "prepare_concurrency": spec.prepare_concurrency, "prepare_timeout_s": spec.prepare_timeout_s}}


def agent_spec(job: dict[str, Any], slot: int, endpoints: tuple[str, ...]) -> RunSpec:
    """Slot ``slot``'s run: the coordinator's, on this host's endpoints, with its worker slice."""
    try:
        if job.get("format") != FORMAT:
            raise ValueError(f"format {job.get('format')!r}")
        r = job["run"]
        wd = r["workload"]
        workload = Workload(mix={k: float(v) for k, v in wd["mix"].items()}, sizes=SizeDist.parse(str(wd["sizes"])),
                            seed=int(wd["seed"]), bucket_prefix=str(wd["bucket_prefix"]), buckets=int(wd["buckets"]),
                            prefixes=int(wd["prefixes"]), objects_per_worker=int(wd["objects_per_worker"]),
                            guard=int(wd["guard"]), list_max_keys=int(wd["list_max_keys"]))
        workers, agents = int(r["workers"]), int(job["agents"])
        return RunSpec(endpoint=endpoints[0], more_endpoints=endpoints[1:], workload=workload, rate=r["rate"],
                       concurrency=int(r["concurrency"]), workers=workers, duration_s=r["duration_s"],
                       request_timeout_s=float(r["request_timeout_s"]), region=str(r["region"]),
                       skip_prepare=bool(r["skip_prepare"]), keep=bool(r["keep"]),
                       prepare_concurrency=int(r["prepare_concurrency"]),
                       prepare_timeout_s=float(r["prepare_timeout_s"]),
                       worker_base=slot * workers, fleet_workers=agents * workers)
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"the load job's spec is not one this rgwkeeper can run ({exc}); run the same "
                         f"rgwkeeper version on every host") from None


# -- the coordinator ----------------------------------------------------------------------------

@dataclass
class AgentInfo:
    slot: int
    host: str = ""
    pid: int = 0
    offset: Offset | None = None
    ready: bool = False
    done: str = ""  # "ok" or "failed: why"
    live: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_omap(cls, slot: int, values: dict[str, str]) -> "AgentInfo":
        a = cls(slot)
        reg = _loads(values.get(f"agent.{slot}", ""))
        if reg:
            a.host, a.pid = str(reg.get("host", "")), int(reg.get("pid", 0))
            if "offset_ns" in reg:
                a.offset = Offset(int(reg["offset_ns"]), int(reg["rtt_ns"]))
        a.ready = f"ready.{slot}" in values
        a.done = values.get(f"done.{slot}", "")
        a.live = _loads(values.get(f"live.{slot}", "")) or {}
        return a

    def who(self) -> str:
        return f"agent {self.slot}" + (f" on {self.host}" if self.host else "")


def _loads(text: str) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        out = json.loads(text)
    except ValueError:
        return None
    return out if isinstance(out, dict) else None


class Coordinator:
    """The coordinator's side of a job: publish, watch, wait, start, beat, stop, collect."""

    def __init__(self, store: ObjectStore, spec: RunSpec, agents: int, max_skew_s: float, *,
                 job_id: str | None = None, wall: Callable[[], int] = time.time_ns,
                 mono: Callable[[], int] = time.monotonic_ns) -> None:
        check_number(agents, "agents", lo=1, hi=1000, integer=True)
        self.store = store
        self.spec = spec
        self.agents = agents
        self.max_skew_s = max_skew_s
        self.job_id = job_id or secrets.token_hex(6)
        self.obj = job_object(self.job_id)
        self.wall, self.mono = wall, mono
        self._watch: Any = None
        self.stop_published = 0

    def publish(self) -> None:
        self.store.omap_set(self.obj, {"spec": json.dumps(spec_to_job(self.spec, self.agents, self.max_skew_s)),
                                       "beat": str(self.wall())})
        self._watch = self.store.watch(self.obj, lambda _payload: str(self.wall()).encode())

    def read(self) -> list[AgentInfo]:
        values = self.store.omap_get_all(self.obj)
        return [AgentInfo.from_omap(k, values) for k in range(self.agents)]

    def beat(self) -> None:
        self.store.omap_set(self.obj, {"beat": str(self.wall())})

    def check(self, agents: list[AgentInfo]) -> None:
        """Refuse the job, in one line, for an agent that failed or whose clock is off."""
        for a in agents:  # a clock is this side's to judge, whatever the agent then reported
            if a.offset is not None:
                check_skew(a.offset, self.max_skew_s, a.who())
        for a in agents:
            if a.done.startswith("failed"):
                raise CephError("load run", f"{a.who()} {a.done}")

    def start(self, duration_s: float | None) -> int:
        """Publish the start (and the stop of a fixed-length run); return t0 on this host's
        monotonic clock."""
        wall, mono = self.wall(), self.mono()
        start = wall + int(START_LEAD_S * 1e9)
        values = {"start": str(start)}
        if duration_s is not None:
            self.stop_published = start + int(duration_s * 1e9)
            values["stop"] = str(self.stop_published)
        self.store.omap_set(self.obj, values)
        return mono + (start - wall)

    def stop_at_mono(self, mono_ns: int) -> None:
        """Publish a stop (never later than one already published)."""
        at = self.wall() + (mono_ns - self.mono())
        if self.stop_published and at >= self.stop_published:
            return
        self.stop_published = at
        self.store.omap_set(self.obj, {"stop": str(at)})

    def read_part(self, slot: int) -> dict[str, Any]:
        raw = self.store.read_all(part_object(self.job_id, slot))
        data = _loads(raw.decode(errors="replace")) if raw else None
        if not data or data.get("format") != FORMAT:
            raise CephError("load run", f"agent {slot} set done but its part is missing or unreadable")
        return data

    def close(self) -> None:
        """Stop answering, and remove the job and its parts (agents still running see it gone
        and stop)."""
        if self._watch is not None:
            try:
                self._watch.close()
            except Exception:  # noqa: BLE001 - best effort on the way out
                pass
            self._watch = None
        for k in range(self.agents):
            self.store.remove(part_object(self.job_id, k))
        self.store.remove(self.obj)


def live_of(agents: list[AgentInfo]) -> Live:
    """The agents' last complete seconds, added, for the progress line."""
    live = Live()
    seconds = [a.live.get("second") for a in agents if a.live.get("second") is not None]
    if seconds:
        sec = min(seconds)
        lat = [a.live.get("p99_ms") for a in agents if a.live.get("second") == sec]
        live.last_second = {"second": sec, "ops": sum(a.live.get("ops", 0) for a in agents if a.live.get("second") == sec),
                            "p99_ms": max((x for x in lat if isinstance(x, (int, float)) and math.isfinite(x)),
                                          default=math.nan)}
    live.errors = sum(int(a.live.get("errors", 0)) for a in agents)
    live.requests = sum(int(a.live.get("requests", 0)) for a in agents)
    return live


# -- the agent ----------------------------------------------------------------------------------

class Agent:
    """An agent's side of a job: join, check the clock, wait for the start, follow the stop,
    and ship the part. Every call blocks (the runner calls the gate's methods on a thread)."""

    def __init__(self, store: ObjectStore, job_id: str, *, wall: Callable[[], int] | None = None,
                 mono: Callable[[], int] = time.monotonic_ns, sleep: Callable[[float], None] = time.sleep) -> None:
        self.store = store
        self.job_id = valid_job_id(job_id)
        self.obj = job_object(job_id)
        self.wall, self.mono, self.sleep = wall or agent_wall_clock(), mono, sleep
        self.slot = -1
        self.job: dict[str, Any] = {}
        self.offset: Offset | None = None
        self.gone = ""  # why the load stopped early, if it did

    def join(self) -> dict[str, Any]:
        values = self.store.omap_get_all(self.obj)
        job = _loads(values.get("spec", ""))
        if job is None:
            raise UsageError(f"no load job {self.job_id} (it ended, or the id is wrong); start agents while "
                             f"`loadgen run --agents` waits for them")
        if "start" in values:
            raise UsageError(f"load job {self.job_id} has started already; an agent joins before the start")
        self.job = job
        me = json.dumps({"host": socket.gethostname(), "pid": os.getpid()})
        for k in range(int(job.get("agents", 0))):
            if self.store.omap_set_if(self.obj, f"agent.{k}", "", {f"agent.{k}": me}):
                self.slot = k
                return job
        raise UsageError(f"load job {self.job_id} has all its {job.get('agents')} agents already")

    def ping(self) -> tuple[int, int, int]:
        sent = self.wall()
        answers, _ = self.store.notify(self.obj, b"clock", PING_TIMEOUT_S)
        received = self.wall()
        if not answers:
            raise CephError("clock check", f"no coordinator answers on load job {self.job_id} (it ended or died)")
        return sent, int(answers[0]), received

    def measure(self) -> Offset:
        """Measure and register this host's clock offset; refuse it beyond the job's bound."""
        self.offset = estimate_offset(self.ping)
        reg = {"host": socket.gethostname(), "pid": os.getpid(), "offset_ns": self.offset.offset_ns,
               "rtt_ns": self.offset.rtt_ns}
        self.store.omap_set(self.obj, {f"agent.{self.slot}": json.dumps(reg)})
        check_skew(self.offset, float(self.job["max_skew_s"]), f"agent {self.slot} on {socket.gethostname()}")
        return self.offset

    def _to_mono(self, coordinator_wall_ns: int) -> int:
        assert self.offset is not None
        return self.mono() + (coordinator_wall_ns - self.offset.offset_ns - self.wall())

    # The runner's StartGate.
    def start_ns(self, timeout_s: float) -> int:
        self.store.omap_set(self.obj, {f"ready.{self.slot}": "1"})
        deadline = time.monotonic() + timeout_s
        while True:
            values = self.store.omap_get_keys(self.obj, ["spec", "start"])
            if "spec" not in values:
                raise CephError("load run", f"load job {self.job_id} ended before it started (the coordinator gave up)")
            if "start" in values:
                return self._to_mono(int(values["start"]))
            if time.monotonic() > deadline:
                raise CephError("load run", f"load job {self.job_id} did not start within {timeout_s:.0f} s")
            self.sleep(POLL_S)

    def stop_ns(self) -> int | None:
        values = self.store.omap_get_keys(self.obj, ["spec", "stop", "beat"])
        if "spec" not in values:
            self.gone = "the load job ended (the coordinator gave up or was stopped)"
            return self.mono()
        assert self.offset is not None
        their_now = self.wall() + self.offset.offset_ns
        if "beat" in values and their_now - int(values["beat"]) > SILENT_S * 1e9:
            self.gone = f"the coordinator has been silent for over {SILENT_S:.0f} s"
            return self.mono()
        return self._to_mono(int(values["stop"])) if "stop" in values else None

    def report_live(self, live: Live) -> None:
        last = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in live.last_second.items()}
        self.store.omap_set(self.obj, {f"live.{self.slot}": json.dumps(
            {**last, "errors": live.errors, "requests": live.requests})})

    def ship(self, data: RunData) -> dict[str, Any]:
        """Write this agent's part and set done; return the part."""
        part = part_of(data, self.slot, socket.gethostname(), self.offset, self.recheck())
        self.store.write_full(part_object(self.job_id, self.slot), json.dumps(part).encode())
        self.store.omap_set(self.obj, {f"done.{self.slot}": "ok"})
        return part

    def recheck(self) -> Offset | None:
        """The offset again at the end (the drift over the run), if the coordinator still answers."""
        try:
            return estimate_offset(self.ping, 3)
        except CephError:
            return None

    def fail(self, why: str) -> None:
        try:
            self.store.omap_set(self.obj, {f"done.{self.slot}": f"failed: {why[:300]}"})
        except CephError:
            pass


def part_of(data: RunData, slot: int, host: str, offset: Offset | None, offset_end: Offset | None) -> dict[str, Any]:
    rec = analysis.records_from_columns(data.columns, data.t0_ns)
    seconds = int(math.floor(data.stop_s))
    return {"format": FORMAT, "slot": slot, "host": host, "stop_s": data.stop_s, "started_at": data.started_at,
            "offset": offset.to_dict() if offset else None, "offset_end": offset_end.to_dict() if offset_end else None,
            "series": analysis.series_to_json(analysis.per_second(rec, seconds)),
            "histograms": analysis.histograms_to_json(analysis.second_histograms(rec, seconds)),
            "workers": data.workers, "parent_cpu_s": data.parent_cpu_s, "notes": data.notes,
            "requests": int(len(rec))}


# -- the merged result ---------------------------------------------------------------------------

@dataclass
class FleetRun:
    """A coordinated run: the agents' parts and what the coordinator saw."""

    job_id: str
    spec: dict[str, Any]
    stop_s: float
    events: list[Any]
    parts: list[dict[str, Any]]
    started_at: str
    notes: list[str]


def merged(run: FleetRun, warmup_s: float, windows: list[analysis.Window] | None = None,
           max_skew_s: float | None = None) -> tuple[dict[str, Any], analysis.Series]:
    """The result JSON of a coordinated run (the same layout as one host's) and its series."""
    seconds = int(math.floor(run.stop_s))
    series = analysis.merge_series([analysis.series_from_json(p["series"]) for p in run.parts], seconds)
    hists = analysis.merge_histograms(analysis.histograms_from_json(p["histograms"]) for p in run.parts)
    workers = [w for p in run.parts for w in p["workers"]]
    notes = list(run.notes)
    agents = []
    for p in sorted(run.parts, key=lambda p: p["slot"]):
        notes.extend(f"agent {p['slot']}: {n}" for n in p["notes"])
        start, end = p.get("offset") or {}, p.get("offset_end") or {}
        drift = None if not start or not end else round(end["offset_ms"] - start["offset_ms"], 3)
        if drift is not None and max_skew_s is not None and abs(drift) > max_skew_s * 1000:
            notes.append(f"agent {p['slot']} on {p['host']}: its clock drifted {drift:.1f} ms against the "
                         f"coordinator's during the run (more than loadgen.max_clock_skew_ms)")
        agents.append({"slot": p["slot"], "host": p["host"], "clock": start or None, "drift_ms": drift,
                       "requests": p["requests"], "stop_s": p["stop_s"]})
    cpu = analysis.client_cpu(sum(w["cpu_s"] for w in workers), sum(p["parent_cpu_s"] for p in run.parts),
                              sum(w["requests"] for w in workers))
    events = [{"t": e.t, "kind": e.kind, "what": e.what, **({"detail": e.detail} if e.detail else {})}
              for e in run.events]
    result = analysis.result_document(series, lambda w: analysis.summarize_merged(series, hists, w),
                                      stop_s=run.stop_s, warmup_s=warmup_s, spec=run.spec, events=events,
                                      client_cpu=cpu, started_at=run.started_at, notes=notes, windows=windows)
    result["rgw_endpoints"] = analysis.endpoint_rates(workers, run.stop_s)
    result["agents"] = {"job": run.job_id, "count": len(run.parts), "each": agents}
    return result, series


# -- the coordinator's run -----------------------------------------------------------------------

#: Seconds an agent may take after the stop: its last requests, its cleanup, its part.
AFTER_STOP_S = 180.0


@contextlib.contextmanager
def job_store(access: ClusterAccess, pool: str, create_pool: bool | None) -> Iterator[ObjectStore]:
    """The pool the job lives in (daemon.pool). ``create_pool`` None (an agent): a missing pool
    means no such job."""
    adapters = open_adapters(access, rgw=NONE)
    try:
        if create_pool is None:
            if pool not in (adapters.rados.command({"prefix": "osd pool ls"}) or []):
                raise UsageError(f"no load job here: the rgwkeeper pool {pool!r} (daemon.pool) does not exist")
        else:
            ensure_pool(adapters.rados, pool, create_pool)
        store = ObjectStore(adapters.rados, pool, threads=2)
        try:
            yield store
        finally:
            store.close()
    finally:
        adapters.close()


async def run_fleet(coord: Coordinator, credentials: RgwCredentials, *, announce: Callable[[str], None],
                    join_timeout_s: float, controller: Controller | None = None,
                    progress: Progress | None = None, tick_s: float = 0.5) -> FleetRun:
    """Run ``coord``'s job: make the buckets, wait for every agent, start them together, stop
    them (at the duration, or when ``controller`` says), and collect their parts."""
    spec = coord.spec
    if spec.duration_s is None and controller is None:
        raise UsageError("a run without a duration needs a controller to stop it")
    created = await make_buckets(spec, credentials)
    events: list[Event] = []
    notes: list[str] = []
    started_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    control_task: asyncio.Task[None] | None = None
    try:
        await asyncio.to_thread(coord.publish)
        announce(coord.job_id)
        deadline = time.monotonic() + join_timeout_s
        while True:
            agents = await asyncio.to_thread(coord.read)
            coord.check(agents)
            if all(a.ready for a in agents):
                break
            if time.monotonic() > deadline:
                waiting = [a.who() for a in agents if not a.ready]
                raise CephError("load run", f"{len(waiting)} of {coord.agents} agents not ready within "
                                f"{join_timeout_s:.0f} s ({', '.join(waiting)}); start each with: "
                                f"rgwkeeper loadgen agent --job {coord.job_id}")
            await asyncio.to_thread(coord.beat)
            await asyncio.sleep(tick_s)
        t0 = await asyncio.to_thread(coord.start, spec.duration_s)
        stop = types.SimpleNamespace(value=0 if spec.duration_s is None else t0 + int(spec.duration_s * 1e9))
        published = stop.value
        handle = RunHandle(t0, stop, events)
        if controller is not None:
            control_task = asyncio.ensure_future(controller(handle))
        while True:
            agents = await asyncio.to_thread(coord.read)
            coord.check(agents)
            if all(a.done == "ok" for a in agents):
                break
            if control_task is not None and control_task.done():
                control_task.result()  # re-raise a controller failure
            if stop.value != published:
                # Far enough ahead that every agent reads it in time: they all stop at the same
                # point of the open-loop schedule.
                stop.value = max(stop.value, time.monotonic_ns() + int(STOP_LEAD_S * 1e9))
                await asyncio.to_thread(coord.stop_at_mono, stop.value)
                published = stop.value
            if progress is not None:
                progress(handle.now_s(), live_of(agents))
            if stop.value and time.monotonic_ns() > stop.value + int((AFTER_STOP_S + 2 * spec.request_timeout_s) * 1e9):
                late = [a.who() for a in agents if a.done != "ok"]
                raise CephError("load run", f"no result from {', '.join(late)} within "
                                f"{AFTER_STOP_S + 2 * spec.request_timeout_s:.0f} s of the stop")
            await asyncio.to_thread(coord.beat)
            await asyncio.sleep(tick_s)
        if control_task is not None:
            await control_task
        parts = [await asyncio.to_thread(coord.read_part, k) for k in range(coord.agents)]
        stop_s = (stop.value - t0) / 1e9
    finally:
        if control_task is not None and not control_task.done():
            control_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await control_task
        await asyncio.to_thread(coord.close)
        notes.extend(await remove_buckets(spec, credentials, created))
    return FleetRun(job_id=coord.job_id, spec={**spec.to_dict(), "agents": coord.agents}, stop_s=stop_s,
                    events=events, parts=parts, started_at=started_at, notes=notes)


async def run_agent(agent: Agent, endpoints: tuple[str, ...], credentials: RgwCredentials,
                    progress: Progress | None = None) -> tuple[RunSpec, RunData, dict[str, Any]]:
    """Join ``agent``'s job, run this host's share, ship the part."""
    job = await asyncio.to_thread(agent.join)
    spec = agent_spec(job, agent.slot, endpoints)
    try:
        await asyncio.to_thread(agent.measure)
        last = [0.0]

        def report(now_s: float, live: Live) -> None:
            if progress is not None:
                progress(now_s, live)
            if now_s - last[0] >= 1.0:
                last[0] = now_s
                with contextlib.suppress(CephError):
                    agent.report_live(live)  # on the loop's thread: one small omap write a second

        data = await run_load(spec, credentials, progress=report, gate=agent)
    except (RgwkeeperError, OSError) as exc:
        await asyncio.to_thread(agent.fail, str(exc))
        raise
    except BaseException:
        await asyncio.to_thread(agent.fail, "interrupted")
        raise
    if agent.gone:
        data.notes.append(f"stopped early: {agent.gone}")
    part = await asyncio.to_thread(agent.ship, data)
    return spec, data, part
