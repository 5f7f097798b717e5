"""The daemon against the real cluster: throttle under PUT load, crash safety, leadership."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from integration.waits import wait_for

TICK_S = 2.0
LEASE_S = 8.0
#: The must-show tests' lease: on a loaded 2-core machine one pass (a snapshot reads every
#: OSD) can outlast 8 s, and a leader whose lease ran out gives its throttle back mid-test.
#: Leadership itself is tested with LEASE_S.
SOLO_LEASE_S = 30.0
#: Pacific's (wpq) levers; `levers(ceph_cluster)` gives the ones of the cluster's own release.
THROTTLE = {"osd_scrub_sleep": "0.5", "osd_scrub_load_threshold": "0.05", "osd_max_scrubs": "1"}
POOL = "rgwkeeper-test"


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(port):
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


def _toml(v):
    """A TOML value (inline tables and arrays included) from plain Python data."""
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_toml(x)}" for k, x in v.items()) + " }"
    if isinstance(v, list):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    return json.dumps(v)  # strings, numbers and true/false are written the same in TOML


class Daemon:
    """`rgwkeeper daemon` as a subprocess with its own config; JSON log lines on stdout."""

    def __init__(self, ceph_cluster, tmp_path: Path, name: str, **overrides):
        self.dir = tmp_path / name
        self.dir.mkdir(exist_ok=True)
        self.name = name
        self.log_path = self.dir / f"daemon-{uuid.uuid4().hex[:6]}.log"
        throttle = {"high_write_ops": 60.0, "low_write_ops": 30.0, "smoothing_s": 2.0, "hold_s": 4.0,
                    **overrides.pop("scrub_throttle", {})}
        daemon = {"tick_s": TICK_S, "lease_s": LEASE_S, "pool": POOL, "instance_id": name,
                  "state_dir": str(self.dir / "state"), "metrics_address": "", **overrides.pop("daemon", {})}
        # Policies other than the one under test stay off unless a test turns them on.
        sections = {"spillover": {"enabled": False}, "preshard": {"daemon_reshards": False},
                    **overrides.pop("sections", {})}
        lines = [f'[cluster]\nconf = "{ceph_cluster.conf}"\nkeyring = "{ceph_cluster.keyring}"\ntimeout_s = 10.0\n',
                 f'[rgw]\nendpoint = "{ceph_cluster.rgw_endpoint}"\n'
                 f'credentials_file = "{ceph_cluster.credentials_file}"\n']
        for section, values in (("daemon", daemon), ("scrub_throttle", throttle), *sections.items()):
            lines.append(f"[{section}]")
            lines.extend(f"{k} = {_toml(v)}" for k, v in values.items())
        self.config = self.dir / "rgwkeeper.toml"
        self.config.write_text("\n".join(lines) + "\n")
        self.proc: subprocess.Popen | None = None

    def start(self):
        self._out = open(self.log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "rgwkeeper", "daemon", "--config", str(self.config)],
                                     stdout=self._out, stderr=subprocess.STDOUT)
        return self

    def events(self):
        out = []
        for line in self.log_path.read_text().splitlines():
            with contextlib.suppress(json.JSONDecodeError):
                out.append(json.loads(line))
        return out

    def passes(self):
        return [e for e in self.events() if e.get("event") == "reconciled"]

    def signal(self, sig):
        assert self.proc is not None
        self.proc.send_signal(sig)

    def stop(self, timeout=60):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._out.close()


@pytest.fixture
def daemons(ceph_cluster, tmp_path):
    started = []

    def make(name, **kw):
        d = Daemon(ceph_cluster, tmp_path, name, **kw)
        started.append(d)
        return d

    yield make
    for d in started:
        if d.proc is not None and d.proc.poll() is None:
            d.signal(signal.SIGCONT)
        d.stop()


@pytest.fixture(scope="module")
def journal_pool(ceph_cluster):
    """The daemon's pool, made once so new PGs do not close the gates in every test."""
    if POOL not in (ceph_cluster.ceph("osd", "pool", "ls") or []):
        ceph_cluster.ceph("osd", "pool", "create", POOL, "8")
        ceph_cluster.ceph("osd", "pool", "application", "enable", POOL, "rgwkeeper")
    wait_for("PGs active+clean", lambda: _all_clean(ceph_cluster), timeout=120)
    originals(ceph_cluster)  # read before any test throttles
    yield POOL


def _all_clean(ceph_cluster):
    s = ceph_cluster.ceph("pg", "stat")["pg_summary"]
    return {x["name"]: x["num"] for x in s["num_pg_by_state"]}.get("active+clean") == s["num_pgs"]


def mon_db(ceph_cluster):
    return {(e["section"], e["name"]): e["value"] for e in ceph_cluster.ceph("config", "dump")}


def effective(ceph_cluster, name):
    osds = [o["osd"] for o in ceph_cluster.ceph("osd", "dump")["osds"] if o["up"]]
    return {o: ceph_cluster.ceph("tell", f"osd.{o}", "config", "get", name)[name] for o in osds}


_LEVERS: dict[str, tuple[dict[str, str], dict[str, dict[int, str]]]] = {}


def _lever_state(ceph_cluster):
    """The options the daemon's throttle sets on this cluster's release and op queue, with
    their throttled values, and the values the OSDs had before (read once per cluster)."""
    key = str(ceph_cluster.conf)
    if key not in _LEVERS:
        from rgwkeeper import releases
        from rgwkeeper.config import ScrubThrottleSection
        from rgwkeeper.policy.scrub import lever_values
        from rgwkeeper.snapshot import parse_release

        release = parse_release(ceph_cluster.ceph("versions"))[0]
        queues = set(effective(ceph_cluster, "osd_op_queue").values())
        values = lever_values(ScrubThrottleSection())
        wanted = {n: str(values[n]) for q in sorted(queues) for n in releases.scrub_levers(release, q).levers
                  if n.startswith("osd_") and values.get(n) is not None}
        _LEVERS[key] = wanted, {n: effective(ceph_cluster, n) for n in wanted}
    return _LEVERS[key]


def levers(ceph_cluster):
    return _lever_state(ceph_cluster)[0]


def originals(ceph_cluster):
    return _lever_state(ceph_cluster)[1]


def throttled_everywhere(ceph_cluster):
    name, value = next(iter(levers(ceph_cluster).items()))
    return all(_same(v, value) for v in effective(ceph_cluster, name).values())


def _same(a, b):
    try:
        return float(a) == float(b)
    except ValueError:
        return str(a) == str(b)


def clean(ceph_cluster):
    db = mon_db(ceph_cluster)
    return not any(("osd", n) in db for n in levers(ceph_cluster)) and \
        all(effective(ceph_cluster, n) == before for n, before in originals(ceph_cluster).items())


@contextlib.contextmanager
def put_load(s3, bucket, threads=16):
    """A plain boto3 PUT storm until the block ends (4 KiB objects)."""
    s3.create_bucket(Bucket=bucket)
    stop = threading.Event()
    counts = [0] * threads

    def writer(i):
        n = 0
        while not stop.is_set():
            s3.put_object(Bucket=bucket, Key=f"w{i}/{n:07d}", Body=b"x" * 4096)
            n += 1
        counts[i] = n

    pool = [threading.Thread(target=writer, args=(i,), daemon=True) for i in range(threads)]
    for t in pool:
        t.start()
    try:
        yield counts
    finally:
        stop.set()
        for t in pool:
            t.join(30)


def deep_scrub_data_pool(ceph_cluster):
    pgs = ceph_cluster.ceph("pg", "ls-by-pool", "default.rgw.buckets.data")
    pgs = pgs["pg_stats"] if isinstance(pgs, dict) else pgs
    for pg in pgs:
        ceph_cluster.ceph("pg", "deep-scrub", pg["pgid"])
    return len(pgs)


@pytest.mark.releases("tentacle", "reef", "pacific")
def test_throttle_engages_under_put_load_and_gives_back(ceph_cluster, s3, bucket_name, daemons, journal_pool):
    before = mon_db(ceph_cluster)
    port = _free_port()
    # A longer hold than the other tests: a loaded test machine can stall PUTs for a few
    # seconds, which must not release the throttle while the test reads the OSDs.
    d = daemons("solo", daemon={"metrics_address": f"127.0.0.1:{port}", "lease_s": SOLO_LEASE_S},
                scrub_throttle={"hold_s": 20.0}).start()
    wait_for("first pass", d.passes)
    if not levers(ceph_cluster):
        return _says_nothing_to_throttle(ceph_cluster, s3, bucket_name, d, before)
    with put_load(s3, bucket_name) as counts:
        wait_for("write load seen", lambda: any(p["write_ops"] > 60 for p in d.passes()), timeout=60)
        assert deep_scrub_data_pool(ceph_cluster) > 0
        first_high = next(i for i, p in enumerate(d.passes()) if p["write_ops"] > 60)
        wait_for("throttle", lambda: any(p["scrub_state"] == "engage" for p in d.passes()), timeout=30)
        engaged = next(i for i, p in enumerate(d.passes()) if p["scrub_state"] == "engage")
        # Within two ticks of the first pass that saw the load.
        assert engaged - first_high <= 2, [(p["write_ops"], p["scrub_state"]) for p in d.passes()]
        # The OSDs themselves report the throttled values.
        wait_for("every lever effective on every OSD", lambda: every_lever_effective(ceph_cluster), timeout=30)
        metrics = wait_for("metrics show the throttle", lambda: (lambda t: t if "rgwkeeper_scrub_throttled 1.0" in t
                                                                 else None)(_scrape(port)), timeout=20)
        assert "rgwkeeper_leader 1.0" in metrics
        assert f"rgwkeeper_overrides {float(len(levers(ceph_cluster)))}" in metrics
    assert sum(counts) > 0
    # Load stopped: after the hold time everything is given back exactly.
    wait_for("give-back", lambda: any(p["scrub_state"] == "release" for p in d.passes()), timeout=90)
    wait_for("clean mon db and OSDs", lambda: clean(ceph_cluster), timeout=30)
    assert mon_db(ceph_cluster) == before
    d.stop()
    assert d.proc.returncode == 0


def _says_nothing_to_throttle(ceph_cluster, s3, bucket, d, before):
    """A release where no lever measurably helps: under PUT load and a deep scrub of every
    data-pool PG the daemon says so, pass after pass, and changes nothing."""
    with put_load(s3, bucket):
        wait_for("write load seen", lambda: any(p["write_ops"] > 60 for p in d.passes()), timeout=60)
        assert deep_scrub_data_pool(ceph_cluster) > 0
        first_high = next(i for i, p in enumerate(d.passes()) if p["write_ops"] > 60)
        wait_for("two more passes", lambda: len(d.passes()) >= first_high + 3, timeout=60)
    high = d.passes()[first_high:]
    assert all(p["scrub_state"] == "nothing-to-throttle" for p in high), [p["scrub_state"] for p in high]
    assert not any(e.get("event") == "override applied" for e in d.events())
    assert mon_db(ceph_cluster) == before
    d.stop()
    assert d.proc.returncode == 0


def data_pool_write_ops(ceph_cluster):
    stats = ceph_cluster.ceph("osd", "pool", "stats", "default.rgw.buckets.data")
    return float(stats[0].get("client_io_rate", {}).get("write_op_per_sec", 0))


def throttle_held(daemons, name, s3, bucket, throttled, **daemon):
    """A daemon that throttled scrub under PUT load; its long hold keeps the throttle on after
    the load ends (so it is still on when the test kills it)."""
    d = daemons(name, scrub_throttle={"hold_s": 600.0}, daemon=daemon).start()
    with put_load(s3, bucket):
        wait_for("throttled", throttled, timeout=90)
    return d


def every_lever_effective(ceph_cluster):
    return all(all(_same(v, value) for v in effective(ceph_cluster, name).values())
               for name, value in levers(ceph_cluster).items())


# Reef and Tentacle set no lever (releases.SCRUB_LEVERS): nothing is set there, so nothing can be
# left behind; test_throttle_engages_under_put_load_and_gives_back shows that on each release.
@pytest.mark.releases("pacific")
def test_kill9_while_throttled_then_restart_restores_within_one_tick(ceph_cluster, s3, bucket_name, daemons,
                                                                     journal_pool):
    assert levers(ceph_cluster), "this test needs a release where the throttle sets levers"
    before = mon_db(ceph_cluster)
    d = throttle_held(daemons, "crashy", s3, bucket_name, lambda: every_lever_effective(ceph_cluster),
                      lease_s=SOLO_LEASE_S)
    # The mgr's pool rates lag by a report interval; wait until the load has left them.
    wait_for("load gone from pool stats", lambda: data_pool_write_ops(ceph_cluster) < 30, timeout=60)
    d.signal(signal.SIGKILL)
    d.proc.wait(10)
    # Nobody restored: the overrides are still there after the crash.
    assert all(("osd", n) in mon_db(ceph_cluster) for n in levers(ceph_cluster))
    # Same instance id, like a systemd restart: it takes over at once, not after the lease.
    again = daemons("crashy", scrub_throttle={"hold_s": 600.0}, daemon={"lease_s": SOLO_LEASE_S}).start()
    wait_for("first pass after restart", again.passes, timeout=60)
    became = next(e for e in again.events() if e.get("event") == "became leader")
    assert all(f"ceph config rm osd {n}" in became["restored"] for n in levers(ceph_cluster))
    # The first pass ran after the restore: the originals are back within one tick.
    assert mon_db(ceph_cluster) == before
    wait_for("OSDs back to the original", lambda: clean(ceph_cluster), timeout=20)
    assert again.passes()[0]["scrub_state"] == "idle"


@pytest.mark.releases("pacific")  # THROTTLE: wpq's levers; mClock gets others
def test_sigterm_restores_before_exit(ceph_cluster, s3, bucket_name, daemons, journal_pool):
    before = mon_db(ceph_cluster)
    d = daemons("term").start()
    with put_load(s3, bucket_name):
        wait_for("throttled", lambda: throttled_everywhere(ceph_cluster), timeout=90)
        t0 = time.monotonic()
        d.signal(signal.SIGTERM)
        rc = d.proc.wait(60)
        stopped_in = time.monotonic() - t0
        # Still under load, and yet restored: SIGTERM gives back before exit.
        assert mon_db(ceph_cluster) == before
    assert rc == 0
    assert stopped_in < 45  # bounded (shutdown_timeout_s is 30), not a benchmark
    assert any(e.get("event") == "restored before exit" and e["restored"] for e in d.events())


@pytest.mark.releases("pacific")  # THROTTLE: wpq's levers; mClock gets others
def test_two_daemons_exactly_one_acts(ceph_cluster, s3, bucket_name, daemons, journal_pool):
    a = daemons("node-a").start()
    wait_for("a leads", lambda: any(e.get("event") == "became leader" for e in a.events()), timeout=60)
    b = daemons("node-b").start()
    with put_load(s3, bucket_name):
        wait_for("throttled", lambda: throttled_everywhere(ceph_cluster), timeout=90)
        wait_for("b has run several passes", lambda: len([e for e in b.events() if e.get("event") == "standby"]) >= 3)
    acted = {d.name for d in (a, b) if any(e.get("event") == "override applied" for e in d.events())}
    assert acted == {"node-a"}
    assert not any(e.get("event") in ("became leader", "reconciled") for e in b.events())
    a.stop()
    b.stop()
    wait_for("clean", lambda: clean(ceph_cluster), timeout=30)


def test_a_second_daemon_with_the_same_instance_id_and_another_state_dir_stays_standby(ceph_cluster, daemons,
                                                                                      journal_pool):
    # The flock in state_dir cannot see it, and its lock's description is ours: before, each
    # broke the other's lock as "left by a previous instance" and both led in turn.
    a = daemons("twin-a", daemon={"instance_id": "twin"}).start()
    wait_for("a leads", lambda: any(e.get("event") == "became leader" for e in a.events()), timeout=60)
    b = daemons("twin-b", daemon={"instance_id": "twin"}).start()
    wait_for("b has run several passes", lambda: len([e for e in b.events() if e.get("event") == "standby"]) >= 3,
             timeout=60)
    assert not any(e.get("event") == "became leader" for e in b.events())
    assert [e for e in b.events() if "another rgwkeeper daemon with this instance id" in e.get("event", "")]
    assert not any(e.get("event") in ("lost leadership; not acting", "standby") for e in a.events())
    a.stop()  # released at exit: the twin takes over at its next tick
    wait_for("b leads", lambda: any(e.get("event") == "became leader" for e in b.events()), timeout=30)


@pytest.mark.releases("pacific")  # THROTTLE: wpq's levers; mClock gets others
def test_sigstopped_leader_is_replaced_and_stays_out(ceph_cluster, s3, bucket_name, daemons, journal_pool):
    a = daemons("stop-a").start()
    wait_for("a leads", lambda: any(e.get("event") == "became leader" for e in a.events()), timeout=60)
    b = daemons("stop-b").start()
    wait_for("b stands by", lambda: any(e.get("event") == "standby" for e in b.events()), timeout=30)
    with put_load(s3, bucket_name):
        a.signal(signal.SIGSTOP)
        wait_for("b takes over", lambda: any(e.get("event") == "became leader" for e in b.events()),
                 timeout=LEASE_S * 4)
        wait_for("b throttles", lambda: throttled_everywhere(ceph_cluster), timeout=90)
        lines_before_resume = len(a.events())
        a.signal(signal.SIGCONT)
        wait_for("a runs passes again", lambda: len([e for e in a.events()[lines_before_resume:]
                                                     if e.get("event") in ("standby", "stopped acting")]) >= 2,
                 timeout=30)
    after = a.events()[lines_before_resume:]
    assert not [e for e in after if e.get("event") in ("override applied", "override restored", "reconciled",
                                                      "became leader")], after
    assert any(e.get("event") == "became leader" for e in b.events())
    b.stop()
    a.stop()
    wait_for("clean", lambda: clean(ceph_cluster), timeout=30)


def _run_daemon(config: Path, timeout=60):
    return subprocess.run([sys.executable, "-m", "rgwkeeper", "daemon", "--config", str(config)],
                          capture_output=True, text=True, timeout=timeout)


def test_bad_input_is_one_line_and_changes_nothing(ceph_cluster, tmp_path):
    pool = f"rgwk-never-{uuid.uuid4().hex[:6]}"
    before = mon_db(ceph_cluster)
    base = f'[cluster]\nconf = "{ceph_cluster.conf}"\nkeyring = "{ceph_cluster.keyring}"\ntimeout_s = 3.0\n' \
           f'[daemon]\npool = "{pool}"\nstate_dir = "{tmp_path}/state"\nmetrics_address = ""\n'
    cases = {
        "bad config": (base + "tick_s = 0.1\n[scrub_throttle]\nsmoothing_s = -1.0\n", 2,
                       "2 problems:"),
        "keyring readable by others": (base.replace(str(ceph_cluster.keyring), str(tmp_path / "open.keyring")), 2,
                                       "must be 0600"),
        "cluster down": (base.replace(str(ceph_cluster.conf), str(tmp_path / "down.conf")), 1,
                         "no monitor answered within 3 s"),
    }
    (tmp_path / "open.keyring").write_text(ceph_cluster.keyring.read_text())
    os.chmod(tmp_path / "open.keyring", 0o644)
    (tmp_path / "down.conf").write_text(
        "\n".join("mon_host = v2:127.0.0.1:9" if line.startswith("mon_host") else line
                  for line in ceph_cluster.conf.read_text().splitlines()) + "\n")
    for name, (text, code, message) in cases.items():
        cfg = tmp_path / f"{name.replace(' ', '-')}.toml"
        cfg.write_text(text)
        proc = _run_daemon(cfg)
        assert proc.returncode == code, (name, proc.stderr)
        assert message in proc.stderr, (name, proc.stderr)
        assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr, (name, proc.stderr)
    assert pool not in (ceph_cluster.ceph("osd", "pool", "ls") or [])
    assert mon_db(ceph_cluster) == before


def _rgwkeeper(*args, config: Path, timeout=120):
    return subprocess.run([sys.executable, "-m", "rgwkeeper", *args, "--config", str(config)],
                          capture_output=True, text=True, timeout=timeout)


def _journal_keys(ceph_cluster):
    out = subprocess.run(["rados", "--conf", str(ceph_cluster.conf), "--keyring", str(ceph_cluster.keyring),
                          "-p", POOL, "listomapkeys", "rgwkeeper.journal"], capture_output=True, text=True, timeout=60)
    return set(out.stdout.split())


@pytest.mark.releases("pacific")  # THROTTLE: wpq's levers; mClock gets others
def test_restore_leaves_what_an_operator_changed_and_force_puts_it_back(ceph_cluster, s3, bucket_name, daemons,
                                                                        journal_pool):
    before = mon_db(ceph_cluster)
    d = throttle_held(daemons, "owner", s3, bucket_name, lambda: every_lever_effective(ceph_cluster))
    d.signal(signal.SIGKILL)  # the daemon still holds its overrides: nobody gave them back
    d.proc.wait(10)
    assert mon_db(ceph_cluster)[("osd", "osd_max_scrubs")] == "1"
    ceph_cluster.ceph("config", "set", "osd", "osd_max_scrubs", "4")  # an operator's own decision
    try:
        proc = _rgwkeeper("restore", config=d.config)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        (left,) = [line for line in proc.stdout.splitlines() if line.startswith("left")]
        assert "osd/osd_max_scrubs is 4 now, not the 1 rgwkeeper set: left as it is and kept in the journal; " \
               "rgwkeeper restore --force removes it" in left
        db = mon_db(ceph_cluster)
        assert db[("osd", "osd_max_scrubs")] == "4"  # the operator's value stays
        assert ("osd", "osd_scrub_sleep") not in db  # the others were ours: given back
        assert _journal_keys(ceph_cluster) == {"config/osd/osd_max_scrubs"}
        forced = _rgwkeeper("restore", "--force", "--json", config=d.config)
        assert forced.returncode == 0, forced.stdout + forced.stderr
        assert [r["status"] for r in json.loads(forced.stdout)] == ["restored"]
        assert mon_db(ceph_cluster) == before and _journal_keys(ceph_cluster) == set()
    finally:
        with contextlib.suppress(RuntimeError):
            ceph_cluster.ceph("config", "rm", "osd", "osd_max_scrubs")


def _break_leftover_leader_locks(ceph_cluster):
    """An earlier test SIGKILLs a leader on purpose; its lock stays until its lease ends."""
    rados = ["rados", "--conf", str(ceph_cluster.conf), "--keyring", str(ceph_cluster.keyring), "-p", POOL]
    info = subprocess.run([*rados, "lock", "info", "rgwkeeper.leader", "leader", "--format", "json"],
                          capture_output=True, text=True, timeout=60)
    for locker in (json.loads(info.stdout) if info.returncode == 0 and info.stdout.strip() else {}).get("lockers", []):
        subprocess.run([*rados, "lock", "break", "rgwkeeper.leader", "leader", locker["name"], "--lock-cookie",
                        locker["cookie"]], check=True, capture_output=True, timeout=60)


def test_the_real_lock_renews_after_a_failed_renewal_and_refuses_another_locker(ceph_cluster, cluster_access,
                                                                                journal_pool):
    import asyncio
    import errno

    from rgwkeeper.adapters.rados import ObjectStore, RadosAdapter
    from rgwkeeper.adapters.cephcli import CephCli
    from rgwkeeper.daemon.service import RadosLockBackend
    from rgwkeeper.errors import CephError, CephTimeout
    from rgwkeeper.journal import LEADER_OBJECT
    from rgwkeeper.leader import LOCK_NAME, LeaderLease

    _break_leftover_leader_locks(ceph_cluster)
    lease_s = 30
    instance = f"lock-{uuid.uuid4().hex[:6]}"
    connections = []

    def contender(host):
        rados = RadosAdapter(cluster_access)
        rados.connect()
        store = ObjectStore(rados, POOL)
        connections.append((store, rados))
        backend = RadosLockBackend(store, CephCli(cluster_access, "rados"), instance_id=instance,
                                   host=host, lease_s=lease_s)
        return LeaderLease(backend, lease_s=lease_s), store, backend

    async def scenario():
        a, store, backend = contender("host-a")
        try:
            assert await a.tick(), a.last_error  # first take
            # What cls_lock does without the may-renew flag, for the same locker: EEXIST.
            with pytest.raises(CephError) as refused:
                store._run("probe", lambda io: io.lock_exclusive(LEADER_OBJECT, LOCK_NAME, backend.cookie,
                                                                 backend.description, lease_s, 0))
            assert refused.value.ret == -errno.EEXIST
            # A renewal whose reply is lost: it reached the OSD, the caller saw a timeout.
            real = store.lock_exclusive

            def lost_reply(*args):
                real(*args)
                raise CephTimeout(f"{POOL}/{LEADER_OBJECT} lock {LOCK_NAME}", "no answer within 20 s")

            store.lock_exclusive = lost_reply
            assert await a.tick() and a.last_error is not None
            store.lock_exclusive = real
            assert await a.tick() and a.last_error is None  # the retry renewed the real lock
            assert a.transitions == ["acquired"]
            # Another host with the same instance id: refused, and it does not break our lock.
            twin, _, twin_backend = contender("host-b")
            assert not await twin.tick()
            assert not await twin_backend.break_stale_own()
            # A restarted daemon on our own host (new client, new cookie): breaks the stale lock.
            again, _, _ = contender("host-a")
            assert await again.tick()
            assert not await a.tick() and not a.is_leader()
            await again.release()
        finally:
            for store, rados in connections:
                store.close()
                rados.close()

    asyncio.run(scenario())


def test_the_real_journal_forgets_only_the_entry_it_read(cluster_access, journal_pool):
    from dataclasses import replace

    from rgwkeeper.adapters.rados import ObjectStore, RadosAdapter
    from rgwkeeper.journal import Journal, JournalConflict, Override

    rados = RadosAdapter(cluster_access)
    rados.connect()
    store = ObjectStore(rados, POOL)
    try:
        journal = Journal(store)
        key = f"config/test/{uuid.uuid4().hex[:6]}"
        read = Override(key=key, kind="config", who="test", name="x", original_present=False, original_value=None,
                        applied_value="1", holder="old@h", since=1.0, lease_until=2.0)
        journal.record(read)
        newer = replace(read, holder="new@h", lease_until=3.0)
        journal.record(newer, read)  # a new leader's entry replaces the one a restore read
        with pytest.raises(JournalConflict):
            journal.record(replace(read, applied_value="2"), read)
        assert journal.forget(read) is False  # omap_cmp failed (ECANCELED): nothing removed
        assert journal.overrides()[key].holder == "new@h"
        assert journal.renew({"new@h"}, 99.0) == 1
        assert journal.forget(journal.overrides()[key]) is True and key not in journal.overrides()
        assert journal.forget(newer) is False  # already gone
    finally:
        store.close()
        rados.close()

