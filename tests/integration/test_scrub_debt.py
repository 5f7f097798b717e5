"""Deep-scrub debt paid back by the daemon, on a cluster with a short deep-scrub interval.

The interval is shortened for the mgr only (`ceph config set mgr osd_deep_scrub_interval`):
PG_NOT_DEEP_SCRUBBED is computed in the mgr with the mgr's settings (PGMap::get_health_checks)
and rgwkeeper reads them for who=mgr, while the OSDs' own scheduler keeps its one-week
interval and so does not deep-scrub the PGs itself. That holds on every release, whatever the
scheduler does (queued reservations and no randomization from Squid on), so the test runs the
same on each.
"""

from __future__ import annotations

import time

import pytest

from rgwkeeper.snapshot import parse_stamp
from tests.integration.test_daemon import daemons, journal_pool, wait_for  # noqa: F401 - fixtures

pytestmark = pytest.mark.integration

INTERVAL_S = 600  # PG_NOT_DEEP_SCRUBBED at 1.75 x: 1050 s after a PG's last deep scrub
HORIZON_S = 1000  # so a PG is due 50 s after its last deep scrub
MAX_IN_FLIGHT = 2
# Every pass reads `pg dump pgs` afresh (ticks are 2 s); reusing a read between passes is
# unit-tested (tests/unit/test_observe.py). With 6 s here a round of two PGs took 6-8 s.
READ_EVERY_S = 2
#: The oldest PAID PGs of the cluster's ~90 are paid back, on every release: the same request
#: path and order as the whole set (four rounds of MAX_IN_FLIGHT; 16 PGs took 66-72 s a release).
PAID = 8


def _pgs(ceph_cluster):
    dump = ceph_cluster.ceph("pg", "dump", "pgs")
    return {p["pgid"]: p for p in (dump["pg_stats"] if isinstance(dump, dict) else dump)}


def _settled_pgs(ceph_cluster):
    """The PGs once no scrub runs or waits and two reads in a row agree: an earlier test (or this
    test's first attempt, run again after an RGW death) may have left requested deep scrubs behind,
    and the daemon rightly skips a PG that is deep-scrubbing, so its first pass would not be the
    oldest of a snapshot taken meanwhile."""
    last: dict = {}

    def settled():
        nonlocal last
        now = _pgs(ceph_cluster)
        busy = [pg for pg, p in now.items() if "scrubbing" in str(p.get("state", "")).split("+")
                or str(p.get("scrub_schedule", "")).startswith("queued")]
        stamps = {pg: p["last_deep_scrub_stamp"] for pg, p in now.items()}
        same, last = stamps == {pg: p["last_deep_scrub_stamp"] for pg, p in last.items()}, now
        return not busy and same

    wait_for("no PG scrubbing or queued for a scrub", settled, timeout=300, interval=3.0)
    return last


def _let_requests_land(ceph_cluster, d, before, timeout_s=120.0):
    """Wait (bounded, never failing) until every PG the daemon asked for has deep-scrubbed.
    A request sent in the daemon's last passes can start seconds later, after the PGs look
    settled (on 20.2.4 a requested PG showed neither "scrubbing" nor "queued" in between); a
    run of this test again (the harness reruns a test whose RGW died) would then snapshot its
    old stamp while the daemon reads the new one, and its oldest-first check would compare
    two different views."""
    asked = {c.split()[-1] for e in d.passes() for c in e.get("changed", []) if c.startswith("ceph pg deep-scrub ")}
    deadline = time.monotonic() + timeout_s
    while asked and time.monotonic() < deadline:
        now = _pgs(ceph_cluster)
        asked = {pg for pg in asked if pg in now and pg in before
                 and parse_stamp(now[pg]["last_deep_scrub_stamp"]) <= before[pg]}
        if asked:
            time.sleep(2.0)


def _checks(ceph_cluster):
    return set((ceph_cluster.ceph("health", "detail") or {}).get("checks") or {})


# The deadline test comes first: it waits until every PG's last deep scrub is 35 s old, which
# the debt test's fresh deep scrubs would make it wait for (pytest keeps the file's order).
@pytest.mark.releases("tentacle", "reef", "pacific")
def test_deadlines_match_the_pgs_the_health_check_counts(ceph_cluster, journal_pool):
    """rgwkeeper's deadline formula against the release's own PG_NOT_DEEP_SCRUBBED: with the
    mgr's interval at 20 s every PG is counted 35 s after its last deep scrub, except those of
    a pool whose own deep_scrub_interval is long."""
    import asyncio

    from rgwkeeper.access import ClusterAccess
    from rgwkeeper.adapters.rados import RadosAdapter
    from rgwkeeper.observe import deep_scrub_deadlines
    from rgwkeeper.snapshot import parse_deep_scrub

    access = ClusterAccess(conf=ceph_cluster.conf, keyring=ceph_cluster.keyring, client_name="client.admin",
                           rgw_endpoint=None, rgw_credentials_file=None, timeout_s=20)
    ceph_cluster.ceph("config", "set", "mgr", "osd_deep_scrub_interval", "20")
    ceph_cluster.ceph("osd", "pool", "set", journal_pool, "deep_scrub_interval", "100000")
    rados = RadosAdapter(access)
    try:
        rados.connect()
        own_pool = next(p["pool"] for p in rados.command({"prefix": "osd dump"})["pools"]
                        if p["pool_name"] == journal_pool)

        def agree():
            checks = (ceph_cluster.ceph("health", "detail") or {}).get("checks") or {}
            check = checks.get("PG_NOT_DEEP_SCRUBBED")
            d = parse_deep_scrub(asyncio.run(deep_scrub_deadlines(rados)), rados.command({"prefix": "osd dump"}))
            past = {p.pgid for p in d.pgs if p.warn_at <= time.time()}
            counted = int(check["summary"]["count"]) if check else 0
            listed = {m["message"].split()[1] for m in (check or {}).get("detail", []) if m["message"].startswith("pg ")}
            others = {p.pgid for p in d.pgs if not p.pgid.startswith(f"{own_pool}.")}
            return past == others and counted == len(past) and listed <= past and (past, d)

        past, d = wait_for("PG_NOT_DEEP_SCRUBBED to count exactly the PGs past their deadline", agree,
                           timeout=180, interval=3.0)
        # The journal pool's own long interval keeps its PGs out, in Ceph's count and in ours.
        assert {p.pgid for p in d.pgs} - past == {p.pgid for p in d.pgs if p.pgid.startswith(f"{own_pool}.")}
    finally:
        rados.close()
        ceph_cluster.ceph("osd", "pool", "set", journal_pool, "deep_scrub_interval", "0")
        ceph_cluster.ceph("config", "rm", "mgr", "osd_deep_scrub_interval")


@pytest.mark.releases("tentacle", "reef", "pacific")
def test_daemon_pays_deep_scrub_debt_oldest_first_within_the_bound(ceph_cluster, journal_pool, daemons):
    ceph_cluster.ceph("config", "set", "mgr", "osd_deep_scrub_interval", str(INTERVAL_S))
    d = None
    before: dict[str, float] = {}
    try:
        start = _settled_pgs(ceph_cluster)
        before = {pg: parse_stamp(p["last_deep_scrub_stamp"]) for pg, p in start.items()}
        d = daemons("debt", sections={"scrub_debt": {"horizon_s": HORIZON_S, "max_in_flight": MAX_IN_FLIGHT,
                                                     "request_timeout_s": 120, "max_write_ops": 1e6,
                                                     "read_every_s": READ_EVERY_S}}).start()
        seen_checks: set[str] = set()
        most_deep = 0

        wanted = min(PAID, len(before))
        moved: set[str] = set()

        def enough_moved():
            nonlocal most_deep
            seen_checks.update(_checks(ceph_cluster))
            now = _pgs(ceph_cluster)
            most_deep = max(most_deep, sum(1 for p in now.values() if "deep" in p["state"].split("+")))
            moved.update(pg for pg, p in now.items() if pg in before
                          and parse_stamp(p["last_deep_scrub_stamp"]) > before[pg])
            return len(moved) >= wanted

        wait_for(f"{wanted} PGs deep-scrubbed at the daemon's request", enough_moved, timeout=900, interval=2.0)
        d.stop()
        requests = [[c.split()[-1] for c in e.get("changed", []) if c.startswith("ceph pg deep-scrub ")]
                    for e in d.passes()]
        requests = [r for r in requests if r]
        # Oldest first: the first pass's PGs are at least as old as every PG it left for later.
        first = requests[0]
        assert max(before[pg] for pg in first) <= min(s for pg, s in before.items() if pg not in first)
        # Bounded: no pass asked for more than max_in_flight, and no more were ever seen at once.
        assert max(len(r) for r in requests) <= MAX_IN_FLIGHT
        assert most_deep <= MAX_IN_FLIGHT
        # Every PG got there through the daemon (the OSDs' own scheduler kept its one-week interval).
        assert moved <= {pg for r in requests for pg in r}
        # The oldest went first: no PG the daemon has not asked for yet is older than one paid.
        asked = {pg for r in requests for pg in r}
        assert max(before[pg] for pg in moved) <= min((s for pg, s in before.items() if pg not in asked),
                                                      default=float("inf"))
        assert "PG_NOT_DEEP_SCRUBBED" not in seen_checks
    finally:
        try:
            if d is not None:
                d.stop()
                _let_requests_land(ceph_cluster, d, before)
        finally:
            ceph_cluster.ceph("config", "rm", "mgr", "osd_deep_scrub_interval")
    assert "osd_deep_scrub_interval" not in {e["name"] for e in ceph_cluster.ceph("config", "dump")
                                             if e.get("section") == "mgr"}
