"""``verify`` as a library: load, maintenance started while it runs, and the verdict.

The CLI (``rgwkeeper verify``) parses, builds the run and renders; bench/ and the daemon's
callers use :func:`verify_run` directly. The maintenance is a controller the runner calls
(:class:`Maintenance`): a deep-scrub storm through librados, nothing (a quiet control run),
or a command run as argv (never through a shell), killed with the verify if it dies.
"""

from __future__ import annotations

import asyncio
import functools
import os
import re
import signal
from dataclasses import dataclass
from typing import Any, Callable

from rgwkeeper.access import ClusterAccess, RgwCredentials
from rgwkeeper.adapters.child import DEVNULL, run_child
from rgwkeeper.adapters.connect import NONE, open_adapters
from rgwkeeper.config import LoadgenSection
from rgwkeeper.errors import UsageError
from rgwkeeper.lifeline import die_with_parent
from rgwkeeper.loadgen import analysis
from rgwkeeper.loadgen.fleet import Coordinator, merged, run_fleet
from rgwkeeper.loadgen.runner import Live, RunData, RunHandle, RunSpec, run_load

MAINTENANCE_KINDS = ("deep-scrub", "none")


@dataclass
class Maintenance:
    """The controller ``verify`` gives the runner: wait, start maintenance, mark events, stop.

    ``kind`` is deep-scrub, none or cmd; times are seconds after the run's start.
    """

    start_at: float
    window_s: float
    kind: str
    argv: list[str]
    access: ClusterAccess  # librados is connected when the deep scrub starts (after the workers fork)
    scrub_every: float | None
    timeout_s: float
    started_t: float | None = None
    exit_code: int | None = None
    stderr_tail: str = ""

    def describe(self) -> str:
        if self.kind == "cmd":
            shown = redact_argv(self.argv)
            return " ".join(shown[:4]) + (" ..." if len(shown) > 4 else "")
        return {"deep-scrub": "ceph osd deep-scrub all", "none": "no maintenance"}[self.kind]

    async def control(self, run: RunHandle) -> None:
        await asyncio.sleep(max(0.0, self.start_at - run.now_s()))
        self.started_t = run.now_s()
        end_at = self.started_t + self.window_s
        run.mark("maintenance-start", self.describe())
        try:
            if self.kind == "deep-scrub":
                await self._deep_scrub(run, end_at)
            elif self.kind == "cmd":
                await self._command(run)
        finally:
            if self.kind == "none":
                run.mark("maintenance-end", "nothing was done")
            await asyncio.sleep(max(0.0, end_at - run.now_s()))
            run.stop()

    async def _deep_scrub(self, run: RunHandle, end_at: float) -> None:
        adapters = await asyncio.to_thread(open_adapters, self.access, rgw=NONE)
        rados = adapters.rados
        n = 0
        try:
            while True:
                await rados.acommand({"prefix": "osd deep-scrub", "who": "all"})
                n += 1
                if self.scrub_every is None or run.now_s() + self.scrub_every >= end_at:
                    break
                await asyncio.sleep(self.scrub_every)
                run.mark("deep-scrub", f"requested again (#{n + 1})")
        finally:
            adapters.close()
        run.mark("maintenance-end", f"deep scrub requested {n} time(s); scrubbing goes on in the background")

    async def _command(self, run: RunHandle) -> None:
        try:
            # Cancelled (the verify stopped), the command is killed at once (SIGKILL); a verify
            # killed outright sends it SIGTERM through die_with_parent.
            done = await run_child(self.argv, self.timeout_s, stdout=DEVNULL,
                                   # a killed verify leaves no purge running on its own
                                   preexec_fn=functools.partial(die_with_parent, signal.SIGTERM, os.getpid()))
        except OSError as exc:
            raise UsageError(f"cannot run maintenance command {self.argv[0]!r}: {exc.strerror}") from None
        self.exit_code = done.returncode
        if done.timed_out:
            # Judge the window anyway: the maintenance ran through all of it. The verdict notes
            # the non-zero exit, and a PASS becomes INCONCLUSIVE.
            self.stderr_tail = f"killed after {self.timeout_s:g} s (--maintenance-timeout)"
            run.mark("maintenance-end", f"killed after {self.timeout_s:g} s", exit_code=done.returncode)
            return
        lines = [ln for ln in done.stderr.decode(errors="replace").splitlines() if ln.strip()]
        self.stderr_tail = lines[-1][:300] if lines else ""
        run.mark("maintenance-end", f"command exited {done.returncode}", exit_code=done.returncode)


_SECRET_FLAG = re.compile(r"^--?[\w-]*(secret|password|passwd|token|access-key)[\w-]*$", re.I)


def redact_argv(argv: list[str]) -> list[str]:
    """argv as it may be shown or saved: the value of any secret-looking flag replaced."""
    out: list[str] = []
    for i, arg in enumerate(argv):
        flag, eq, _ = arg.partition("=")
        if eq and _SECRET_FLAG.match(flag):
            out.append(f"{flag}=[redacted]")
        elif i > 0 and _SECRET_FLAG.match(argv[i - 1]) and not arg.startswith("-"):
            out.append("[redacted]")
        else:
            out.append(arg)
    return out


def tolerances(c: LoadgenSection) -> analysis.Tolerances:
    """The verdict's tolerances from ``[loadgen]``."""
    return analysis.Tolerances(
        max_rate_drop=c.max_rate_drop, max_cv_increase=c.max_cv_increase, max_p99_increase=c.max_p99_increase,
        max_errors=c.max_errors, max_baseline_cv=c.max_baseline_cv, min_window_s=c.min_window_s,
        min_op_samples=c.min_op_samples, block_s=c.block, confidence=c.confidence, resamples=c.resamples,
        slow_seconds_alpha=c.slow_seconds_alpha, slow_second_increase=c.slow_second_increase)


def result_of(data: RunData, warmup_s: float, windows: list[analysis.Window] | None = None) -> tuple[dict[str, Any], analysis.Series, Any]:
    rec = analysis.records_from_columns(data.columns, data.t0_ns)
    cpu = analysis.client_cpu(sum(w["cpu_s"] for w in data.workers), data.parent_cpu_s,
                              sum(w["requests"] for w in data.workers))
    result = analysis.build_result(
        rec, stop_s=data.stop_s, warmup_s=warmup_s, spec=data.spec,
        events=[{"t": e.t, "kind": e.kind, "what": e.what, **({"detail": e.detail} if e.detail else {})}
                for e in data.events],
        client_cpu=cpu, started_at=data.started_at, notes=data.notes, windows=windows)
    result["rgw_endpoints"] = analysis.endpoint_rates(data.workers, data.stop_s)
    return result, analysis.series_from_json(result["series"]), rec


@dataclass
class Verified:
    """A verify run judged: ``result`` is the run's JSON document with ``verdict`` and
    ``maintenance`` filled in; ``series`` and ``records`` are for the plot and the raw CSV."""

    result: dict[str, Any]
    series: analysis.Series
    records: Any
    windows: list[analysis.Window]
    outcome: str


@dataclass
class FleetSetup:
    """``verify --agents``: the load comes from agents on other hosts (``loadgen.fleet``)."""

    coordinator: Coordinator
    announce: Callable[[str], None]


async def verify_run(spec: RunSpec, creds: RgwCredentials, maint: Maintenance, *, warmup_s: float,
                     tol: analysis.Tolerances, progress: Callable[[float, Live], None] | None = None,
                     fleet: FleetSetup | None = None) -> Verified:
    """Run the load with ``maint`` as its controller and judge the maintenance window against
    the baseline before it. A maintenance command that exited non-zero cannot PASS. With
    ``fleet``, agents make the load and the verdict judges their merged run (no raw records)."""
    if fleet is None:
        data = await run_load(spec, creds, controller=maint.control, progress=progress)
        stop_s = data.stop_s
    else:
        run = await run_fleet(fleet.coordinator, creds, announce=fleet.announce, controller=maint.control,
                              progress=progress)
        stop_s = run.stop_s
    m_start = maint.started_t if maint.started_t is not None else maint.start_at
    windows = [analysis.Window.between("baseline", warmup_s, m_start),
               analysis.Window.between("maintenance", m_start, stop_s)]
    if fleet is None:
        result, series, rec = result_of(data, warmup_s, windows)
    else:
        result, series = merged(run, warmup_s, windows, fleet.coordinator.max_skew_s)
        rec = None
    notes = list(result["notes"])
    if maint.exit_code not in (None, 0):
        notes.append(f"maintenance command exited {maint.exit_code}: the window judged may not have had "
                     f"the maintenance it was meant to")
    verdict = analysis.compare(series, windows[0], series, windows[1], tol, notes=notes)
    if maint.exit_code not in (None, 0) and verdict.outcome == analysis.PASS:
        verdict.outcome = analysis.INCONCLUSIVE
    result["verdict"] = verdict.to_dict()
    result["maintenance"] = {"kind": maint.kind, "argv": redact_argv(maint.argv), "exit_code": maint.exit_code,
                             "start_s": m_start, "stderr_tail": maint.stderr_tail}
    return Verified(result, series, rec, windows, verdict.outcome)
