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
import threading
import time
import types
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, TypeVar

import structlog

from rgwkeeper.access import ClusterAccess, RgwCredentials
from rgwkeeper.adapters.connect import NONE, open_adapters
from rgwkeeper.adapters.rados import ObjectStore, ensure_pool
from rgwkeeper.errors import CephError, CephTimeout, CephUnreachable, RgwkeeperError, UsageError
from rgwkeeper.loadgen import analysis
from rgwkeeper.loadgen.runner import (Controller, Event, Live, Progress, RunData, RunHandle, RunSpec, left_note,
                                      make_buckets, remove_buckets, run_load)
from rgwkeeper.loadgen.workload import SizeDist, Workload
from rgwkeeper.names import is_job_id
from rgwkeeper.units import check_number

log = structlog.get_logger("rgwkeeper.loadgen.fleet")
_T = TypeVar("_T")

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


def part_object(job_id: str, slot: int, chunk: int) -> str:
    return f"loadgen.{job_id}.part.{slot}.{chunk}"


def valid_job_id(text: str) -> str:
    if not is_job_id(text):
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


def estimate_offset(ping: Callable[[], tuple[int, int, int]], pings: int = PINGS, *, need: int = 3) -> Offset:
    """``ping()`` returns (sent, the coordinator's clock, received), the first and last on this
    host's wall clock; the round trip with the shortest time gives the estimate. A ping that
    fails (the coordinator re-arming its watch, a slow watcher's ETIMEDOUT) is tried again, up to
    twice as many tries; fewer than ``need`` good ones fail with the last error."""
    best: Offset | None = None
    good, last_error = 0, None
    for _ in range(2 * pings):
        if good == pings:
            break
        try:
            sent, theirs, received = ping()
        except CephError as exc:
            last_error = exc
            continue
        good += 1
        rtt = received - sent
        if rtt < 0:
            continue  # this host's wall clock stepped during the ping
        est = Offset(theirs - (sent + received) // 2, rtt)
        if best is None or rtt < best.rtt_ns:
            best = est
    if best is None or good < need:
        if last_error is not None:
            raise last_error
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

def spec_to_job(spec: RunSpec, agents: int, max_skew_s: float, join_timeout_s: float) -> dict[str, Any]:
    """What an agent needs of the coordinator's run (never endpoints or credentials: each
    agent uses its own host's)."""
    w = spec.workload
    return {"format": FORMAT, "agents": agents, "max_skew_s": max_skew_s, "join_timeout_s": join_timeout_s,
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
                       # Prepared early, an agent's workers wait for the others as long as the
                       # coordinator does.
                       prepare_timeout_s=min(86400.0, float(r["prepare_timeout_s"]) + float(job["join_timeout_s"])),
                       worker_base=slot * workers, fleet_workers=agents * workers)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise UsageError(f"the load job's spec is not one this rgwkeeper can run ({exc}); run the same "
                         f"rgwkeeper version on every host") from None


# -- values read back from RADOS -----------------------------------------------------------------

class DamagedJob(CephError):
    """A value in the job object that rgwkeeper did not write (damaged, or another version's)."""

    def __init__(self, obj: str, what: str, raw: Any) -> None:
        super().__init__(obj, f"{what} is {str(raw)[:40]!r}, not a value rgwkeeper writes (a damaged job object, or "
                              "another rgwkeeper version's: run the same version on every host)")


class JobGone(CephError):
    """The job object is gone: the coordinator ended (or gave up) and removed it."""


def _int(obj: str, what: str, raw: Any, lo: int, hi: int) -> int:
    """An integer as rgwkeeper writes it (decimal text, or a JSON int), within [lo, hi]."""
    try:
        if isinstance(raw, bool) or not isinstance(raw, (int, str)):
            raise ValueError
        value = int(raw)
    except ValueError:
        raise DamagedJob(obj, what, raw) from None
    if not lo <= value <= hi:
        raise DamagedJob(obj, what, raw)
    return value


def _number(obj: str, what: str, raw: Any, lo: float, hi: float) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not math.isfinite(raw) or not lo <= raw <= hi:
        raise DamagedJob(obj, what, raw)
    return float(raw)


#: Bounds of what rgwkeeper writes: clock readings (ns since the epoch, up to the year 2262),
#: offsets and round trips (a day), pids, agents.
_NS, _DAY_NS, _PID, MAX_AGENTS = 2**63 - 1, 86_400 * 10**9, 2**31, 1000


# -- the coordinator ----------------------------------------------------------------------------

@dataclass
class AgentInfo:
    slot: int
    host: str = ""
    pid: int = 0
    offset: Offset | None = None
    ready: bool = False
    done: str = ""  # "" | "ok <chunks>" | "failed: why"
    #: The agent's last heartbeat: "at" (its estimate of the coordinator's clock) and its last
    #: complete second (for the progress line).
    alive: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_omap(cls, obj: str, slot: int, values: dict[str, str]) -> "AgentInfo":
        a = cls(slot)
        raw = values.get(f"agent.{slot}", "")
        if raw:
            reg = _loads(raw)
            if reg is None:
                raise DamagedJob(obj, f"agent.{slot}", raw)
            a.host = str(reg.get("host", ""))[:255]
            a.pid = _int(obj, f"agent.{slot} pid", reg.get("pid", 0), 0, _PID)
            if "offset_ns" in reg:
                a.offset = Offset(_int(obj, f"agent.{slot} offset_ns", reg["offset_ns"], -_DAY_NS, _DAY_NS),
                                  _int(obj, f"agent.{slot} rtt_ns", reg.get("rtt_ns"), 0, _DAY_NS))
        a.ready = f"ready.{slot}" in values
        a.done = values.get(f"done.{slot}", "")[:400]
        if a.done and not (a.done.startswith("failed: ") or a.done.startswith("ok ")):
            raise DamagedJob(obj, f"done.{slot}", a.done)
        alive = _loads(values.get(f"alive.{slot}", "")) or {}
        try:
            a.alive = {"at": _int(obj, "at", alive.get("at"), 0, _NS)} if alive else {}
            if alive.get("second") is not None:
                a.alive.update(second=_int(obj, "second", alive["second"], 0, 10**9),
                               ops=_int(obj, "ops", alive.get("ops", 0), 0, 10**12),
                               errors=_int(obj, "errors", alive.get("errors", 0), 0, 10**12),
                               requests=_int(obj, "requests", alive.get("requests", 0), 0, 10**15))
                p99 = alive.get("p99_ms")
                a.alive["p99_ms"] = _number(obj, "p99_ms", p99, 0, 1e9) if p99 is not None else math.nan
        except DamagedJob:
            a.alive = {}  # progress only: a garbled heartbeat is as good as none
        return a

    def who(self) -> str:
        return f"agent {self.slot}" + (f" on {self.host}" if self.host else "")


def _loads(text: str) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        out = json.loads(text, parse_constant=lambda c: None)  # NaN and Infinity: no value rgwkeeper writes
    except ValueError:
        return None
    return out if isinstance(out, dict) else None


class Coordinator:
    """The coordinator's side of a job: publish, watch, wait, start, beat, stop, collect."""

    def __init__(self, store: ObjectStore, spec: RunSpec, agents: int, max_skew_s: float, *,
                 job_id: str | None = None, join_timeout_s: float = 600.0, wall: Callable[[], int] = time.time_ns,
                 mono: Callable[[], int] = time.monotonic_ns) -> None:
        check_number(agents, "agents", lo=1, hi=MAX_AGENTS, integer=True)
        check_number(max_skew_s, "max_clock_skew", lo=0.001, hi=10.0, unit=" s")
        check_number(join_timeout_s, "agents_timeout_s", lo=1.0, hi=86400.0, unit=" s")
        self.store = store
        self.spec = spec
        self.agents = agents
        self.max_skew_s = max_skew_s
        self.join_timeout_s = join_timeout_s
        self.job_id = job_id or secrets.token_hex(6)
        self.obj = job_object(self.job_id)
        self.wall, self.mono = wall, mono
        self._watch: Any = None
        self._watch_broken = False
        #: wall - monotonic, read once at the start: the start and every stop are converted
        #: with the same base, so stop - start is exactly what the coordinator meant.
        self._base: int | None = None
        self.stop_published = 0
        self.started_mono = 0
        self.chunks: dict[int, int] = {}

    def publish(self) -> None:
        self.store.omap_set(self.obj, {"spec": json.dumps(spec_to_job(self.spec, self.agents, self.max_skew_s,
                                                                      self.join_timeout_s)),
                                       "beat": str(self.wall())})
        self._rewatch()

    def _rewatch(self) -> None:
        if self._watch is not None:
            with contextlib.suppress(Exception):
                self._watch.close()
        self._watch_broken = False
        self._watch = self.store.watch(self.obj, lambda _payload: str(self.wall()).encode(), self._on_watch_error)

    def _on_watch_error(self, _err: int) -> None:
        self._watch_broken = True  # librados dropped the watch (a timeout, an OSD change): watch again

    def read(self) -> list[AgentInfo]:
        values = self.store.omap_get_all(self.obj)
        if "spec" not in values:
            raise CephError("load run", f"the job object {self.obj} is gone (removed by hand?)")
        return [AgentInfo.from_omap(self.obj, k, values) for k in range(self.agents)]

    def beat(self) -> None:
        if self._watch_broken:
            self._rewatch()
        self.store.omap_set(self.obj, {"beat": str(self.wall())})

    def check(self, agents: list[AgentInfo]) -> None:
        """Refuse the job, in one line, for an agent whose clock is off, that failed, or that has
        been silent (killed, or cut off from the cluster) for SILENT_S."""
        for a in agents:  # a clock is this side's to judge, whatever the agent then reported
            if a.offset is not None:
                check_skew(a.offset, self.max_skew_s, a.who())
        now = self.wall()
        for a in agents:
            if a.done.startswith("failed"):
                raise CephError("load run", f"{a.who()} {a.done}")
            if not a.done and a.alive and now - a.alive["at"] > SILENT_S * 1e9:
                raise CephError("load run", f"{a.who()} has been silent for {(now - a.alive['at']) / 1e9:.0f} s "
                                "(killed, or cut off from the cluster); the run is not whole")

    def start(self, duration_s: float | None) -> int:
        """Publish the start (and the stop of a fixed-length run); return t0 on this host's
        monotonic clock."""
        wall, mono = self.wall(), self.mono()
        self._base = wall - mono
        start = wall + int(START_LEAD_S * 1e9)
        values = {"start": str(start)}
        if duration_s is not None:
            self.stop_published = start + int(duration_s * 1e9)
            values["stop"] = str(self.stop_published)
        self.store.omap_set(self.obj, values)
        self.started_mono = start - self._base
        return self.started_mono

    def stop_at_mono(self, mono_ns: int) -> int:
        """Publish a stop (never later than one already published); return the stop in force."""
        assert self._base is not None, "start() first"
        at = mono_ns + self._base
        if not self.stop_published or at < self.stop_published:
            self.stop_published = at
            self.store.omap_set(self.obj, {"stop": str(at)})
        return self.stop_published - self._base

    def abort(self, why: str) -> None:
        """Tell every agent to stop now (they clean up what they wrote and report)."""
        self.store.omap_set(self.obj, {"abort": why[:300], "stop": str(self.wall())})

    def read_part(self, agent: AgentInfo) -> dict[str, Any]:
        chunks = _int(self.obj, f"done.{agent.slot}", agent.done[3:], 1, MAX_CHUNKS)
        self.chunks[agent.slot] = chunks
        blob = b""
        for i in range(chunks):
            raw = self.store.read_all(part_object(self.job_id, agent.slot, i))
            if raw is None:
                raise CephError("load run", f"{agent.who()} set done but part {i} of {chunks} is missing")
            blob += raw
        try:
            data = _loads(zlib.decompress(blob).decode())
        except (zlib.error, UnicodeDecodeError):
            data = None
        if not data or data.get("format") != FORMAT or data.get("slot") != agent.slot:
            raise DamagedJob(part_object(self.job_id, agent.slot, 0), f"{agent.who()}'s part", blob[:20])
        return data

    def close(self) -> None:
        """Stop answering, and remove the job and its parts (agents still running see it gone
        and stop; their writes compare the spec, so none brings the object back)."""
        if self._watch is not None:
            with contextlib.suppress(Exception):
                self._watch.close()
            self._watch = None
        self.store.remove(self.obj)
        for slot, n in self.chunks.items():
            for i in range(n):
                self.store.remove(part_object(self.job_id, slot, i))
        for name in self.store.list_names(f"{self.obj}.part."):  # parts of agents whose part was not read
            self.store.remove(name)


def remove_stale_jobs(store: ObjectStore, now_ns: int, older_than_s: float = 3600.0) -> list[str]:
    """Remove load jobs whose coordinator has not beaten for ``older_than_s`` (it was killed:
    SIGKILL leaves no time to clean up), with their parts; return their ids. An hour, not
    SILENT_S: beats are stamped with each coordinator host's own clock."""
    removed = []
    names = store.list_names("loadgen.")
    jobs = {n for n in names if n.count(".") == 1}
    for name in names:  # parts whose job is gone (an agent died between its part and its done)
        if name.count(".") > 1 and name.rsplit(".part.", 1)[0] not in jobs:
            store.remove(name)
    for name in sorted(jobs):
        beat = store.omap_get_keys(name, ["beat"]).get("beat", "")
        if beat.isdigit() and now_ns - int(beat) > older_than_s * 1e9:
            store.remove(name)
            for part in (n for n in names if n.startswith(f"{name}.part.")):
                store.remove(part)
            removed.append(name.split(".", 1)[1])
    return removed


def live_of(agents: list[AgentInfo]) -> Live:
    """The agents' last complete seconds, added, for the progress line."""
    live = Live()
    seconds = [a.alive["second"] for a in agents if "second" in a.alive]
    if seconds:
        sec = min(seconds)
        same = [a.alive for a in agents if a.alive.get("second") == sec]
        live.last_second = {"second": sec, "ops": sum(x["ops"] for x in same),
                            "p99_ms": max((x["p99_ms"] for x in same if math.isfinite(x["p99_ms"])), default=math.nan)}
    live.errors = sum(a.alive.get("errors", 0) for a in agents)
    live.requests = sum(a.alive.get("requests", 0) for a in agents)
    return live


# -- the agent ----------------------------------------------------------------------------------

#: A part is written in objects of at most this size (an OSD refuses a write above
#: osd_max_write_size, 90 MB by default); a part is about 1 kB a second of run, compressed.
CHUNK_BYTES = 8 * 1024 * 1024
MAX_CHUNKS = 10_000


class Agent:
    """An agent's side of a job: join, check the clock, wait for the start, follow the stop,
    beat, and ship the part. Every call blocks (the runner calls the gate's methods on a
    thread). Every write compares the job's spec in the same op: once the coordinator has
    removed the job, nothing an agent writes brings it back."""

    def __init__(self, store: ObjectStore, job_id: str, *, wall: Callable[[], int] | None = None,
                 mono: Callable[[], int] = time.monotonic_ns, sleep: Callable[[float], None] = time.sleep) -> None:
        self.store = store
        self.job_id = valid_job_id(job_id)
        self.obj = job_object(job_id)
        self.wall, self.mono, self.sleep = wall or agent_wall_clock(), mono, sleep
        self.slot = -1
        self.job: dict[str, Any] = {}
        self._spec_text = ""
        self.offset: Offset | None = None
        self._base: int | None = None  # this host's wall - monotonic, read once (see Coordinator)
        self.gone = ""  # why the load stopped early, if it did
        self.notes: list[str] = []
        self._last_answer = 0  # monotonic ns of the job object's last answer (stop_ns)
        self.live: dict[str, Any] = {}  # the last complete second, from the progress callback
        self._beating = threading.Event()
        self._beater: threading.Thread | None = None

    def _write(self, values: dict[str, str]) -> None:
        if not self.store.omap_set_if(self.obj, "spec", self._spec_text, values):
            raise JobGone("load run", f"load job {self.job_id} has ended (the coordinator stopped or gave up)")

    def join(self) -> dict[str, Any]:
        values = self.store.omap_get_all(self.obj)
        job = _loads(values.get("spec", ""))
        if job is None:
            if values.get("spec"):
                raise DamagedJob(self.obj, "spec", values["spec"])
            raise UsageError(f"no load job {self.job_id} (it ended, or the id is wrong); start agents while "
                             f"`loadgen run --agents` waits for them")
        if "start" in values:
            raise UsageError(f"load job {self.job_id} has started already; an agent joins before the start")
        agents = _int(self.obj, "agents", job.get("agents"), 1, MAX_AGENTS)
        job["max_skew_s"] = _number(self.obj, "max_skew_s", job.get("max_skew_s"), 0.001, 10.0)
        job["join_timeout_s"] = _number(self.obj, "join_timeout_s", job.get("join_timeout_s"), 1.0, 86400.0)
        self.job, self._spec_text = job, values["spec"]
        me = json.dumps({"host": socket.gethostname(), "pid": os.getpid()})
        for k in range(agents):
            if self.store.omap_set_if(self.obj, f"agent.{k}", "", {f"agent.{k}": me}):
                self.slot = k
                return job
        raise UsageError(f"load job {self.job_id} has all its {agents} agents already")

    def ping(self) -> tuple[int, int, int]:
        sent = self.wall()
        answers, _ = self.store.notify(self.obj, b"clock", PING_TIMEOUT_S)
        received = self.wall()
        # Another client may watch the object too (`rados watch`): only a clock reading counts.
        clocks = [int(a) for a in answers if a.isdigit() and 0 < len(a) <= 19]
        if not clocks:
            raise CephError("clock check", f"no coordinator answers on load job {self.job_id} (it ended or died)")
        return sent, clocks[0], received

    def measure(self) -> Offset:
        """Measure and register this host's clock offset; refuse it beyond the job's bound."""
        self.offset = estimate_offset(self.ping)
        reg = {"host": socket.gethostname(), "pid": os.getpid(), "offset_ns": self.offset.offset_ns,
               "rtt_ns": self.offset.rtt_ns}
        self._write({f"agent.{self.slot}": json.dumps(reg)})
        check_skew(self.offset, self.job["max_skew_s"], f"agent {self.slot} on {socket.gethostname()}")
        self._base = self.wall() - self.mono()
        return self.offset

    def _to_mono(self, coordinator_wall_ns: int) -> int:
        assert self.offset is not None and self._base is not None, "measure() first"
        return coordinator_wall_ns - self.offset.offset_ns - self._base

    def _their_now(self) -> int:
        assert self.offset is not None
        return self.wall() + self.offset.offset_ns

    def _silent(self, values: dict[str, str]) -> bool:
        beat = values.get("beat", "")
        return beat.isdigit() and self._their_now() - int(beat) > SILENT_S * 1e9

    # The runner's StartGate.
    def check(self) -> None:
        """While this host's workers prepare: stop at once if the job is over."""
        values = self.store.omap_get_keys(self.obj, ["spec", "beat", "abort"])
        if "spec" not in values:
            raise JobGone("load run", f"load job {self.job_id} ended while this agent prepared")
        if "abort" in values:
            raise CephError("load run", f"the coordinator stopped load job {self.job_id}: {values['abort'][:300]}")
        if self._silent(values):
            raise CephError("load run", f"the coordinator of load job {self.job_id} has been silent for over "
                            f"{SILENT_S:.0f} s (killed?); nothing was started")

    def start_ns(self, timeout_s: float) -> int:
        self._write({f"ready.{self.slot}": "1"})
        deadline = self.mono() + int(timeout_s * 1e9)
        while True:
            values = self.store.omap_get_keys(self.obj, ["spec", "start", "beat", "abort"])
            if "spec" not in values:
                raise JobGone("load run", f"load job {self.job_id} ended before it started (the coordinator gave up)")
            if "abort" in values:
                raise CephError("load run", f"the coordinator stopped load job {self.job_id}: {values['abort'][:300]}")
            if "start" in values:
                t0 = self._to_mono(_int(self.obj, "start", values["start"], 0, _NS))
                self._last_answer = self.mono()  # the cluster's silence is counted from here on
                late = (self._last_answer - t0) / 1e9
                if late > 0.5:  # the start was read after it: the schedule's first requests queue up
                    self.notes.append(f"this agent learnt the start {late:.1f} s after it (a slow cluster "
                                      "answer); its first requests went out late, and count so")
                return t0
            if self._silent(values):
                raise CephError("load run", f"the coordinator of load job {self.job_id} has been silent for over "
                                f"{SILENT_S:.0f} s (killed?); nothing was started")
            if self.mono() > deadline:
                raise CephError("load run", f"load job {self.job_id} did not start within {timeout_s:.0f} s")
            self.sleep(POLL_S)

    def stop_ns(self) -> int | None:
        try:
            values = self.store.omap_get_keys(self.obj, ["spec", "stop", "beat", "abort"])
        except CephError as exc:
            # One slow answer is no reason to stop; SILENT_S without any is (as for the beat).
            if self._last_answer and self.mono() - self._last_answer > SILENT_S * 1e9:
                self.gone = f"the cluster has not answered for over {SILENT_S:.0f} s ({exc})"
                return self.mono()
            return None
        self._last_answer = self.mono()
        if "spec" not in values:
            self.gone = "the load job ended (the coordinator gave up or was stopped)"
            return self.mono()
        if "abort" in values:
            self.gone = f"the coordinator stopped the run: {values['abort'][:300]}"
            return self.mono()
        if self._silent(values):
            self.gone = f"the coordinator has been silent for over {SILENT_S:.0f} s"
            return self.mono()
        return self._to_mono(_int(self.obj, "stop", values["stop"], 0, _NS)) if "stop" in values else None

    # The heartbeat: a thread of its own from the clock check to the part, so neither the
    # event loop (which times the requests) nor a slow cluster delays the other.
    def beat_once(self) -> None:
        last = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in self.live.items()}
        self._write({f"alive.{self.slot}": json.dumps({**last, "at": self._their_now()})})

    def start_beating(self, every_s: float = 1.0) -> None:
        def run() -> None:
            while not self._beating.wait(every_s):
                try:
                    self.beat_once()
                except JobGone:
                    return
                except CephError as exc:
                    log.debug("loadgen_agent_beat_missed", error=str(exc)[:200])

        self._beating.clear()
        self._beater = threading.Thread(target=run, name="loadgen-agent-beat", daemon=True)
        self._beater.start()

    def stop_beating(self) -> None:
        self._beating.set()
        if self._beater is not None:
            self._beater.join(15)  # a beat under way ends within the store's call timeout

    def ship(self, data: RunData) -> dict[str, Any]:
        """Write this agent's part (compressed, in chunks) and set done; return the part."""
        part = part_of(data, self.slot, socket.gethostname(), self.offset, self.recheck())
        blob = zlib.compress(json.dumps(part).encode(), 6)
        chunks = [blob[i:i + CHUNK_BYTES] for i in range(0, len(blob), CHUNK_BYTES)] or [b""]
        if len(chunks) > MAX_CHUNKS:
            raise CephError("load run", f"this agent's part is {len(blob)} bytes: too large to ship")
        for i, chunk in enumerate(chunks):
            self.store.write_full(part_object(self.job_id, self.slot, i), chunk)
        try:
            self._write({f"done.{self.slot}": f"ok {len(chunks)}"})
        except JobGone:
            for i in range(len(chunks)):
                self.store.remove(part_object(self.job_id, self.slot, i))
            raise
        return part

    def recheck(self) -> Offset | None:
        """The offset again at the end (the drift over the run), if the coordinator still answers."""
        try:
            return estimate_offset(self.ping, 3)
        except CephError:
            return None

    def fail(self, why: str) -> None:
        """Tell the coordinator why this agent stopped (nothing, if the job is gone)."""
        if self.slot < 0:
            return
        with contextlib.suppress(CephError):
            self._write({f"done.{self.slot}": f"failed: {why[:300]}"})


def part_of(data: RunData, slot: int, host: str, offset: Offset | None, offset_end: Offset | None) -> dict[str, Any]:
    rec = analysis.records_from_columns(data.columns, data.t0_ns)
    # The coordinator's stop - start, in whole ns: the agent converted both with one base.
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
    try:
        return _merged(run, warmup_s, windows, max_skew_s)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, zlib.error) as exc:
        raise CephError("load run", f"an agent's part is not one this rgwkeeper reads ({type(exc).__name__}: "
                        f"{str(exc)[:80]}); run the same rgwkeeper version on every host") from None


def _merged(run: FleetRun, warmup_s: float, windows: list[analysis.Window] | None,
            max_skew_s: float | None) -> tuple[dict[str, Any], analysis.Series]:
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
        if math.floor(p["stop_s"]) < seconds:
            notes.append(f"agent {p['slot']} on {p['host']} stopped at {p['stop_s']:.1f} s, before the run's "
                         f"{run.stop_s:.1f} s: its later seconds hold none of its requests")
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
#: Seconds (plus two request timeouts) a coordinator that gave up waits for its live agents to
#: clean up and report, before it removes the job and the buckets.
GIVE_UP_S = 60.0


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


class _Polls:
    """The coordinator's reads and beats, tolerant of a slow answer: the run fails only when the
    cluster has not answered for SILENT_S (by then the agents have stopped too)."""

    def __init__(self, coord: Coordinator) -> None:
        self.coord = coord
        self.answered = time.monotonic()

    async def _call(self, fn: Callable[[], _T]) -> _T | None:
        try:
            out = await asyncio.to_thread(fn)
        except (CephTimeout, CephUnreachable) as exc:
            if time.monotonic() - self.answered > SILENT_S:
                raise CephError("load run", f"the cluster has not answered for over {SILENT_S:.0f} s ({exc}); "
                                "the agents stop on their own") from None
            return None
        self.answered = time.monotonic()
        return out

    async def read(self) -> list[AgentInfo] | None:
        agents = await self._call(self.coord.read)
        if agents is not None:
            self.coord.check(agents)
        return agents

    async def beat(self) -> None:
        await self._call(self.coord.beat)


async def run_fleet(coord: Coordinator, credentials: RgwCredentials, *, announce: Callable[[str], None],
                    controller: Controller | None = None, progress: Progress | None = None,
                    tick_s: float = 0.5) -> FleetRun:
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
        for old in await asyncio.to_thread(remove_stale_jobs, coord.store, coord.wall()):
            notes.append(f"removed load job {old}: its coordinator had been silent for over an hour")
        await asyncio.to_thread(coord.publish)
        announce(coord.job_id)
        polls = _Polls(coord)
        deadline = time.monotonic() + coord.join_timeout_s
        while True:
            agents = await polls.read()
            if agents is not None and all(a.ready for a in agents):
                break
            if time.monotonic() > deadline:
                waiting = [a.who() for a in agents or [] if not a.ready]
                raise CephError("load run", f"{len(waiting)} of {coord.agents} agents not ready within "
                                f"{coord.join_timeout_s:.0f} s ({', '.join(waiting)}); start each with: "
                                f"rgwkeeper loadgen agent --job {coord.job_id}")
            await polls.beat()
            await asyncio.sleep(tick_s)
        t0 = await asyncio.to_thread(coord.start, spec.duration_s)
        stop = types.SimpleNamespace(value=0 if spec.duration_s is None else t0 + int(spec.duration_s * 1e9))
        published = stop.value
        handle = RunHandle(t0, stop, events)
        if controller is not None:
            control_task = asyncio.ensure_future(controller(handle))
        while True:
            agents = await polls.read()
            if agents is not None and all(a.done.startswith("ok ") for a in agents):
                break
            if control_task is not None and control_task.done():
                control_task.result()  # re-raise a controller failure
            if stop.value != published:
                # Far enough ahead that every agent reads it in time: they all stop at the same
                # point of the open-loop schedule.
                stop.value = max(stop.value, time.monotonic_ns() + int(STOP_LEAD_S * 1e9))
                stop.value = await asyncio.to_thread(coord.stop_at_mono, stop.value)
                published = stop.value
            if progress is not None and agents is not None:
                progress(handle.now_s(), live_of(agents))
            if stop.value and time.monotonic_ns() > stop.value + int(after_stop_s(spec, stop.value - t0) * 1e9):
                late = [a.who() for a in agents or [] if not a.done]
                raise CephError("load run", f"no result from {', '.join(late) or 'the agents'} within "
                                f"{after_stop_s(spec, stop.value - t0):.0f} s of the stop")
            await polls.beat()
            await asyncio.sleep(tick_s)
        if control_task is not None:
            await control_task
        parts = [await asyncio.to_thread(coord.read_part, a) for a in agents]
        stop_s = (stop.value - t0) / 1e9
    except BaseException as exc:
        left = await _give_up(coord, control_task, spec, credentials, created, exc)
        if left and isinstance(exc, RgwkeeperError) and exc.args and isinstance(exc.args[0], str):
            exc.args = (f"{exc.args[0]}; buckets left in place (not empty): {', '.join(left)}", *exc.args[1:])
        raise
    await _wind_up(coord, control_task)
    notes.extend(left_note(b) for b in await remove_buckets(spec, credentials, created))
    return FleetRun(job_id=coord.job_id, spec={**spec.to_dict(), "agents": coord.agents}, stop_s=stop_s,
                    events=events, parts=parts, started_at=started_at, notes=notes)


async def _give_up(coord: Coordinator, control_task: asyncio.Task[None] | None, spec: RunSpec,
                   credentials: RgwCredentials, created: list[str], exc: BaseException) -> list[str]:
    """A failed run: tell the agents to stop, give those still alive a bounded time to clean up
    what they wrote and report, then remove the job and the buckets; return buckets left."""
    why = str(exc) if isinstance(exc, RgwkeeperError) else type(exc).__name__
    await _wind_up(coord, control_task, close=False)  # the maintenance stops first
    try:
        await asyncio.to_thread(coord.abort, why)
        deadline = time.monotonic() + GIVE_UP_S + 2 * spec.request_timeout_s
        while time.monotonic() < deadline:
            agents = await asyncio.to_thread(coord.read)
            now = coord.wall()
            if all(a.done or not a.alive or now - a.alive["at"] > SILENT_S * 1e9 for a in agents):
                break
            await asyncio.sleep(0.5)
    except (CephError, asyncio.CancelledError) as err:  # the cluster is away, or a second Ctrl-C
        log.warning("loadgen_agents_not_waited_for", job=coord.job_id, error=str(err)[:200])
    await _wind_up(coord, control_task)
    try:
        return await remove_buckets(spec, credentials, created)
    except CephError as err:
        log.warning("loadgen_buckets_not_removed", buckets=created, error=str(err)[:200])
        return created


def after_stop_s(spec: RunSpec, run_ns: int) -> float:
    """How long after the stop an agent's result may take: its last requests, its cleanup and
    its part (making a part takes about 15 ms a second of run)."""
    return AFTER_STOP_S + 2 * spec.request_timeout_s + 0.05 * run_ns / 1e9


async def _wind_up(coord: Coordinator, control_task: asyncio.Task[None] | None, *, close: bool = True) -> None:
    if control_task is not None and not control_task.done():
        control_task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await control_task
    if not close:
        return
    try:
        await asyncio.to_thread(coord.close)
    except CephError as exc:  # the cluster is away: the agents stop on the beat; name what is left
        log.warning("loadgen_job_left", job=coord.job_id, object=coord.obj, error=str(exc)[:200])


async def run_agent(agent: Agent, endpoints: tuple[str, ...], credentials: RgwCredentials,
                    progress: Progress | None = None) -> tuple[RunSpec, RunData, dict[str, Any]]:
    """Join ``agent``'s job, run this host's share, ship the part. Once it has a slot, whatever
    stops it is written into the job for the coordinator to report."""
    job = await asyncio.to_thread(agent.join)
    try:
        spec = agent_spec(job, agent.slot, endpoints)
        await asyncio.to_thread(agent.measure)
        agent.start_beating()

        def report(now_s: float, live: Live) -> None:
            agent.live = {**live.last_second, "errors": live.errors, "requests": live.requests}
            if progress is not None:
                progress(now_s, live)

        try:
            data = await run_load(spec, credentials, progress=report, gate=agent)
            data.notes.extend(agent.notes)
            if agent.gone:  # cleaned up (run_load did); the run this share was for is over
                raise CephError("load run", f"this agent stopped early: {agent.gone}")
            part = await asyncio.to_thread(agent.ship, data)
        finally:
            await asyncio.to_thread(agent.stop_beating)
    except (RgwkeeperError, OSError) as exc:
        await asyncio.to_thread(agent.fail, str(exc))
        raise
    except BaseException:
        await asyncio.to_thread(agent.fail, "interrupted")
        raise
    return spec, data, part
