"""The cluster's RGW must not die during a test (a pytest plugin; docs/testing.md).

integration/bootstrap.sh watches the containerized cluster's RGW: when it ends without being
asked to, the watch records how (exit status or signal), the log lines that say why and the
end of its log in ``state/rgw-died``, and starts RGW again. Here:

- ``_rgw_must_not_die`` (autouse, for tests that use ``ceph_cluster``) fails a test during which
  that happened, with the record; a copy of the record is kept under the run root, because the
  run directory goes at teardown. A test that kills RGW itself sets ``expects_rgw_death``.
- A test whose attempt failed while RGW died runs once more, on the restarted RGW. The first
  attempt is reported as RERUN with its failure, and the release matrix lists it with how RGW
  ended; a second death, or any other failure, fails the test.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest
from _pytest.runner import runtestprotocol

from integration.cluster import RUN_ROOT, control_dir
from integration.pytest_plugin import note_rerun


def rgw_deaths(state: Path) -> list[tuple[str, Path]]:
    """(pid, host path of the record) for each RGW end the cluster did not ask for."""
    died = state / "rgw-died"
    out = []
    for line in (died.read_text().splitlines() if died.exists() else []):
        _, pid, log = line.split(" ", 2)
        out.append((pid, state.parent / "log" / log.rsplit("/", 1)[-1]))
    return out


@pytest.fixture(autouse=True)
def _rgw_must_not_die(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fails a test during which the cluster's RGW ended unasked. Only the harness's own
    cluster can tell."""
    if "ceph_cluster" not in request.fixturenames:
        yield
        return
    state = control_dir(request.getfixturevalue("ceph_cluster"))
    before = len(rgw_deaths(state)) if state is not None else 0
    yield
    if state is None or getattr(request.node, "expects_rgw_death", False):
        return
    new = rgw_deaths(state)[before:]
    if new:
        pid, log = new[0]
        pytest.fail(f"RGW (pid {pid}) ended during this test without being asked to; the harness started it "
                    f"again.\n{death_report(log)}", pytrace=False)


def death_report(log: Path, keep_dir: Path | None = None) -> str:
    """What the harness recorded of an RGW death (how it ended, the lines that say why, the end
    of its log), with a copy kept under the run root: the run directory goes at teardown."""
    if not log.exists():
        return f"(no record at {log})"
    text = log.read_text(errors="replace")
    keep_dir = keep_dir or RUN_ROOT / "rgw-deaths"
    kept: Path | str = keep_dir / f"{log.parent.parent.parent.name}-{log.name}"
    try:
        keep_dir.mkdir(parents=True, exist_ok=True)
        Path(kept).write_text(text)
    except OSError as exc:
        kept = f"(not kept: {exc})"
    head, _, tail = text.partition("--- end of its log ---")
    return f"{head.strip()}\n--- end of its log (all of it in {kept}) ---\n{tail[-1500:].strip()}"


def _how_it_ended(log: Path) -> str:
    first = log.read_text(errors="replace").partition("\n")[0] if log.exists() else ""
    return first.rpartition(": ")[2] or "how unknown"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: Any, nextitem: Any) -> bool | None:
    """Runs a cluster test, and once more if its attempt failed while RGW died (module doc)."""
    if "ceph_cluster" not in getattr(item, "fixturenames", ()):
        return None
    hook = item.ihook
    hook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    reports = runtestprotocol(item, nextitem=nextitem, log=False)
    died = _deaths_since_last_look(item)
    if died and any(r.failed for r in reports) and not getattr(item, "expects_rgw_death", False):
        # The attempt counts once, as one RERUN (its call, or the setup that failed), and neither
        # passed nor failed; its other failures (the death, at teardown) are in the matrix's line.
        shown = next((r for r in reports if r.when == "call"), None) or next(r for r in reports if r.failed)
        for report in reports:
            if report is shown:
                report.outcome = "rerun"
            elif report.failed:
                continue
            hook.pytest_runtest_logreport(report=report)
        pid, log = died[0]
        note_rerun(item.config, item.nodeid,
                   f"RGW died during its first attempt (pid {pid}, {_how_it_ended(log)}; record: {log.name})")
        _forget_failed_setup(item)
        reports = runtestprotocol(item, nextitem=nextitem, log=False)
        _deaths_since_last_look(item)
    for report in reports:
        hook.pytest_runtest_logreport(report=report)
    hook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


#: state directory -> how many of its RGW deaths the protocol has looked at
_seen: dict[Path, int] = {}


def _deaths_since_last_look(item: Any) -> list[tuple[str, Path]]:
    """The deaths recorded since the last attempt ended: the cluster fixture (session-scoped,
    set up before any other) is still cached after the attempt, even when a fixture of a
    narrower scope failed before ``_rgw_must_not_die`` could start."""
    defs = item._fixtureinfo.name2fixturedefs.get("ceph_cluster") or ()
    cached = defs[-1].cached_result if defs else None
    state = control_dir(cached[0]) if cached is not None and cached[2] is None else None
    if state is None:
        return []
    deaths = rgw_deaths(state)
    new = deaths[_seen.get(state, 0):]
    _seen[state] = len(deaths)
    return new


def _forget_failed_setup(item: Any) -> None:
    """So that the second attempt sets up again what failed in the first (a fixture whose
    setup met the dead RGW keeps its error cached at its scope otherwise)."""
    for defs in item._fixtureinfo.name2fixturedefs.values():
        for fixturedef in defs:
            cached = getattr(fixturedef, "cached_result", None)
            if cached is not None and cached[2] is not None:
                fixturedef.cached_result = None
                fixturedef._finalizers.clear()
    item.session._setupstate.stack.pop(item, None)


def pytest_report_teststatus(report: Any, config: pytest.Config) -> tuple[str, str, Any] | None:
    if report.outcome == "rerun":
        return "rerun", "R", ("RERUN", {"yellow": True})
    return None
