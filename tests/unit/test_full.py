"""A full cluster (OSD_FULL / POOL_FULL), on output captured from the containerized Pacific cluster
made full on purpose: the full state, status, the purge's refusal and its bounded, journaled,
given-back raise of the full ratio, the restore of a raise a crashed purge left, fill-triggered
expiry, and the librados full-try flag on the daemon's journal and lock and on removals."""

from __future__ import annotations

import asyncio
import copy
import json
import math
import sys
import dataclasses
from types import SimpleNamespace

import pytest
from rich.console import Console

from rgwkeeper import fullratio, logs
from rgwkeeper import purge as purge_api
from rgwkeeper.access import ClusterAccess
from rgwkeeper.actions import RunExpire
from rgwkeeper.adapters.rados import BulkObjects, ObjectStore, RadosAdapter
from rgwkeeper.cli.common import run_cli
from rgwkeeper.cli.main import cli
from rgwkeeper.cli.render import render_status
from rgwkeeper.config import Config, ConfigError, FillSection, load
from rgwkeeper.daemon.metrics import Metrics
from rgwkeeper.errors import CephError, ClusterFull, UsageError
from rgwkeeper.executor import Executor
from rgwkeeper.journal import JOURNAL_OBJECT, Journal, MemoryStore, Override
from rgwkeeper.observe import collect_raw
from rgwkeeper.policy import fill
from rgwkeeper.purge.checkpoint import CheckpointStore
from rgwkeeper.purge.plan import PurgeRequest
from rgwkeeper.snapshot import parse, parse_full_state
from tests.unit.fakes import load_fixture, rados_from_observation
from tests.unit.purge_fakes import FakeRados, World, float32, purge_io
from tests.unit.test_purge_cli import env  # noqa: F401  (a fixture)


def full_obs():
    """The captured observation with the cluster-wide parts of the captured full cluster."""
    obs = copy.deepcopy(load_fixture("observation.json"))
    full = load_fixture("full.json")
    for k in ("health", "osd_dump", "osd_df"):
        obs[k] = full[k]
    return obs


# -- the full state --------------------------------------------------------------------------------

def test_a_pool_at_its_quota_is_not_a_full_cluster():
    # Ceph raises POOL_FULL for a pool that reached its quota, and sets full,full_quota in its
    # flags, while no OSD is full: purges and expiry must not refuse, nor raise the full ratio.
    fx = load_fixture("full.json")
    health = {"checks": {"POOL_FULL": fx["health"]["checks"]["POOL_FULL"]}}
    dump = copy.deepcopy(fx["osd_dump"])
    for o in dump["osds"]:
        o["state"] = [s for s in o["state"] if s != "full"]
    for p in dump["pools"]:
        p["flags_names"] = "hashpspool,full,full_quota" if p["pool_name"] == "fillpool" else "hashpspool"
    st = parse_full_state(health, dump, fx["osd_df"])
    assert not st.full and st.full_pools == () and st.codes == ("POOL_FULL",)
    assert st.to_dict()["full"] is False
    # A pool full because the cluster is: still full.
    dump["pools"][0]["flags_names"] = "hashpspool,full"
    assert parse_full_state(health, dump, fx["osd_df"]).full


def test_full_state_is_keyed_on_codes_and_the_osdmap_not_on_text():
    fx = load_fixture("full.json")
    st = parse_full_state(fx["health"], fx["osd_dump"], fx["osd_df"])
    assert st.full and st.codes == ("OSD_FULL", "POOL_FULL")
    assert st.full_osds == (0, 1, 2) and ".rgw.root" in st.full_pools and "fillpool" in st.full_pools
    assert st.ratios.full_ratio == pytest.approx(0.08) and st.fullest_osd == 1
    assert st.fullest_used_ratio > st.ratios.full_ratio
    line = st.describe()
    assert "OSD_FULL" in line and "osd.1" in line and "full 8.0%" in line and "\n" not in line
    # The same checks with other text: still full (the text is never matched).
    health = copy.deepcopy(fx["health"])
    for c in health["checks"].values():
        c["summary"]["message"] = "x"
    assert parse_full_state(health, fx["osd_dump"]).full
    normal = load_fixture("observation.json")
    assert not parse_full_state(normal["health"], normal["osd_dump"], normal["osd_df"]).full


def test_snapshot_and_its_json_carry_the_full_state():
    snap = parse(full_obs())
    assert snap.full is not None and snap.full.full
    doc = snap.to_dict()["full"]
    assert doc["full"] is True and doc["codes"] == ["OSD_FULL", "POOL_FULL"] and "raise-full-ratio" in doc["advice"]
    json.dumps(doc)
    assert parse(load_fixture("observation.json")).to_dict()["full"]["full"] is False


def test_status_says_the_cluster_is_full_and_what_to_do():
    console = Console(record=True, width=200)
    render_status(parse(full_obs()), console=console)
    text = console.export_text()
    assert "FULL: writes are blocked" in text and "OSD_FULL, POOL_FULL" in text
    assert "--raise-full-ratio" in text and "ceph osd set-full-ratio" in text


def test_collect_raw_skips_the_reshard_list_that_waits_on_a_full_cluster(tmp_path):
    # The strict runner does not expect `reshard list`: running it fails the test (on a full
    # cluster it waited for a write until killed, measured on 16.2.15).
    from tests.unit.test_observe import _adapters

    obs = full_obs()
    cfg = Config()
    adapters, _, runner = _adapters(tmp_path, rados_from_observation(obs, cfg.observe.scrub_options), obs)
    del runner.answers[("reshard", "list", "--format=json")]
    try:
        raw = asyncio.run(collect_raw(adapters, cfg))
    finally:
        adapters.rados.close()
    assert raw["reshard_queue"] is None
    assert {"source": "radosgw-admin reshard list",
            "error": "not run: the cluster is full and it would wait for a write"} in raw["errors"]
    assert not any("reshard" in argv for argv in runner.calls)


# -- the bounds of a raise ------------------------------------------------------------------------

@pytest.mark.parametrize("value, message", [
    (math.nan, "fraction between 0 and 1"), (math.inf, "fraction between 0 and 1"), (1.5, "fraction between"),
    (0.98, "above purge.max_full_ratio 0.97"), (0.08, "not above the live full ratio 0.08"),
    (0.05, "not above the live full ratio"),
])
def test_a_raise_is_finite_above_the_live_ratio_and_within_the_maximum(value, message):
    fx = load_fixture("full.json")
    st = parse_full_state(fx["health"], fx["osd_dump"], fx["osd_df"])
    with pytest.raises(UsageError, match=message):
        fullratio.check_raise(value, st, 0.97)
    fullratio.check_raise(0.97, st, 0.97)  # the maximum itself, although the OSDMap stores 0.9700000286


def test_ratios_compare_as_the_float32_the_osdmap_stores():
    assert fullratio.same_ratio(float32(0.97), "0.97") and not fullratio.same_ratio(0.97, 0.96)
    assert fullratio.ratio_text(float32(0.95)) == "0.95"


def test_the_journal_entry_restores_with_set_full_ratio():
    e = Override(key=fullratio.RATIO_KEY, kind="ratio", who="", name="full_ratio", original_present=True,
                 original_value="0.95", applied_value="0.97", holder="h", since=0.0, lease_until=1.0)
    assert e.restore_command() == "ceph osd set-full-ratio 0.95"
    assert Override.from_json(e.to_json()) == e


# -- purge on a full cluster --------------------------------------------------------------------------

class LoggedStore(MemoryStore):
    """The journal's omap, logging into the world's log so the order with other calls shows."""

    def __init__(self, log: list[str], *, fail_writes: bool = False) -> None:
        super().__init__()
        self.log = log
        self.fail_writes = fail_writes

    def omap_set(self, obj, values):
        if self.fail_writes:
            raise CephError(f"{obj} omap set", "[errno 28] RADOS no space")
        self.log.append(f"journal set {sorted(values)}")
        super().omap_set(obj, values)

    def omap_remove(self, obj, keys):
        self.log.append(f"journal forget {keys}")
        super().omap_remove(obj, keys)

    def omap_update_if(self, obj, key, expected, new):
        if self.fail_writes:
            raise CephError(f"{obj} omap cmp+set", "[errno 28] RADOS no space")
        done = super().omap_update_if(obj, key, expected, new)
        if done:
            self.log.append(f"journal {'forget' if new is None else 'set'} {[key]}")
        return done


def full_world(tmp_path, **kw):
    w = World()
    io, bulks = purge_io(w, tmp_path)
    io.rados = FakeRados(w, full=True, **kw)
    return w, io


def purge_cfg(**kw):
    from rgwkeeper.config import PurgeSection

    return dataclasses.replace(PurgeSection(), **{
        "protected_buckets": [], "s3_batches_in_flight": 8, "rados_ops_in_flight": 256,
        "long_command_timeout_s": 600.0, "list_page_size": 1000, "max_full_ratio": 0.97,
        "verify_scan_max_objects": 1000, "rgw_retry_s": 0.0, "lc_busy_wait_s": 1.0,
        "checkpoint_interval_s": 0.0, "full_wait_s": 0.0, **kw})


@pytest.mark.parametrize("request_", [PurgeRequest("capture-mixed", method="s3"),
                                      PurgeRequest("capture-mixed", method="admin-purge")])
def test_purge_that_needs_rgw_on_a_full_cluster_refuses_at_once(tmp_path, request_):
    w, io = full_world(tmp_path)
    with pytest.raises(ClusterFull) as exc:
        asyncio.run(purge_api.prepare(request_, io, purge_cfg=purge_cfg(), store=CheckpointStore(tmp_path / "state")))
    line = str(exc.value)
    assert "OSD_FULL" in line and "osd.1" in line and "--raise-full-ratio" in line and "\n" not in line
    assert w.log == []  # not even the bucket's profile was read


def test_a_job_of_buckets_on_a_full_cluster_is_refused_before_anything_naming_the_way_on(tmp_path):
    w, io = full_world(tmp_path)
    with pytest.raises(ClusterFull) as exc:
        asyncio.run(purge_api.job_full_gate(io, "the buckets matching logs-*"))
    line = str(exc.value)
    assert line.startswith("purge of the buckets matching logs-* refused: ") and "OSD_FULL" in line and "\n" not in line
    assert "a job of several buckets does not raise the full ratio: purge them one by one with --raise-full-ratio R" \
        in line and line.endswith("nothing was changed")
    assert w.log == []
    _, calm = full_world(tmp_path)
    calm.rados = FakeRados(World(), full=False)
    asyncio.run(purge_api.job_full_gate(calm, "3 buckets"))  # not full: nothing to say


def test_auto_that_cannot_choose_direct_refuses_after_reading_only(tmp_path):
    w, io = full_world(tmp_path)
    with pytest.raises(ClusterFull, match="method s3.*--raise-full-ratio"):
        asyncio.run(purge_api.prepare(PurgeRequest(w.bucket, prefix="plain/"), io, purge_cfg=purge_cfg(),
                                      store=CheckpointStore(tmp_path / "state")))
    assert not [x for x in w.log if "quota" in x or "DeleteObjects" in x or "rados rm" in x]


def prepare_and_run(tmp_path, w, io, **cfg):
    store = CheckpointStore(tmp_path / "state")
    prepared = asyncio.run(purge_api.prepare(PurgeRequest(w.bucket), io, purge_cfg=purge_cfg(**cfg), store=store))
    return prepared, asyncio.run(purge_api.run(prepared, io, purge_cfg=purge_cfg(**cfg)))


def test_direct_purge_on_a_full_cluster_frees_heads_first_and_stops_saying_what_is_left(tmp_path):
    w, io = full_world(tmp_path)
    heads = sum(1 for k in w.index if w.index[k]["Size"] <= 4 << 20 and "-" not in w.index[k]["ETag"])
    with pytest.raises(ClusterFull) as exc:
        prepare_and_run(tmp_path, w, io)
    line = str(exc.value)
    assert "stopped: removed" in line and "OSD_FULL" in line and "--raise-full-ratio" in line and "\n" not in line
    removed = [x for x in w.log if x.startswith("rados rm")]
    assert removed and len(removed) <= heads
    # Nothing that needs RGW to write was sent: no fence, no S3 delete, no metadata removal.
    assert not [x for x in w.log if "quota" in x or "DeleteObjects" in x or "metadata rm" in x]
    assert w.exists
    (cp,) = CheckpointStore(tmp_path / "state").unfinished(w.bucket)
    assert cp[1].step == 0 and cp[1].counters["freed_while_full"] == len(removed) and "stopped" in cp[1].error


def test_direct_purge_on_a_full_cluster_goes_on_once_usage_falls_below_full(tmp_path):
    w, io = full_world(tmp_path, clears_after=1)
    prepared, report = prepare_and_run(tmp_path, w, io, full_wait_s=60.0)
    assert prepared.plan.steps[0].kind == "free_while_full" and report.ok and not w.exists
    assert report.counters["freed_while_full"] > 0
    fence = w.log.index("admin API quota max_objects=0")
    freed = [x for x in w.log[:fence] if x.startswith("rados rm default.rgw.buckets.data/")]
    assert len(freed) == report.counters["freed_while_full"]  # the heads went before anything RGW writes


def run_raised(tmp_path, w, io, store, *, during=None, raise_to=0.5):
    prepared = asyncio.run(purge_api.prepare(PurgeRequest(w.bucket), io, purge_cfg=purge_cfg(),
                                             store=CheckpointStore(tmp_path / "state"), raise_full_ratio=raise_to))
    assert prepared.raise_full_ratio == raise_to and prepared.full.full
    if during is not None:
        inner = purge_api._run

        async def wrapped(*a, **kw):
            during()
            return await inner(*a, **kw)

        purge_api._run = wrapped
    try:
        return asyncio.run(purge_api.run(prepared, io, purge_cfg=purge_cfg(), journal=Journal(store),
                                         holder="purge@test", lease_s=60.0))
    finally:
        purge_api._run = inner if during is not None else purge_api._run


def test_a_raise_is_journaled_before_it_is_made_and_given_back_after(tmp_path):
    w, io = full_world(tmp_path)
    store = LoggedStore(w.log)
    report = run_raised(tmp_path, w, io, store)
    assert report.ok and not w.exists
    raise_at = w.log.index("ceph osd set-full-ratio 0.5")
    assert w.log.index("journal set ['ratio/full_ratio']") < raise_at < w.log.index("admin API quota max_objects=0")
    assert w.log[-2:] == ["ceph osd set-full-ratio 0.08", "journal forget ['ratio/full_ratio']"]
    assert io.rados.osd_dump["full_ratio"] == float32(0.08) and store.objects[JOURNAL_OBJECT] == {}


def test_a_failed_purge_gives_the_ratio_back_too(tmp_path, monkeypatch):
    w, io = full_world(tmp_path)
    w.manifests_readable = False  # objects with tails go through S3, whose deletes fail
    store = LoggedStore(w.log)

    def broken(*a, **kw):
        raise CephError("DeleteObjects", "InternalError")

    monkeypatch.setattr(io.s3, "delete_batch", broken)
    with pytest.raises(CephError):
        run_raised(tmp_path, w, io, store)
    assert io.rados.osd_dump["full_ratio"] == float32(0.08) and store.objects[JOURNAL_OBJECT] == {}


def test_an_operators_change_during_the_purge_is_never_overwritten(tmp_path):
    w, io = full_world(tmp_path)
    store = LoggedStore(w.log)
    report = run_raised(tmp_path, w, io, store, during=lambda: io.rados.set_full_ratio(0.9))
    assert report.ok
    assert io.rados.osd_dump["full_ratio"] == float32(0.9)  # the operator's value stays
    kept = Journal(store).overrides()[fullratio.RATIO_KEY]  # and the entry is kept for them
    assert kept.original_value == "0.08" and kept.applied_value == "0.5"


def test_no_raise_without_a_journal_entry_first(tmp_path):
    w, io = full_world(tmp_path)
    with pytest.raises(ClusterFull, match="could not journal the raise"):
        run_raised(tmp_path, w, io, LoggedStore(w.log, fail_writes=True))
    assert io.rados.sent == [] and w.exists and "admin API quota max_objects=0" not in w.log


def test_purge_cli_dry_run_shows_the_raise_and_the_give_back(env, tmp_path, monkeypatch, capsys):
    _, flags, _ = env
    w, io = full_world(tmp_path)
    monkeypatch.setattr(purge_api, "open_io", lambda access, pcfg: io)  # the same world, full
    assert run_cli(cli, ["purge", *flags, w.bucket, "--raise-full-ratio", "0.5", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "the cluster is full (OSD_FULL, POOL_FULL)" in out
    assert "before: $ ceph osd set-full-ratio 0.5" in out and "after:  $ ceph osd set-full-ratio 0.08" in out
    assert io.rados.sent == []
    rc = run_cli(cli, ["purge", *flags, w.bucket, "--method", "s3", "--yes"])
    err = capsys.readouterr().err
    assert rc == 1 and err.count("\n") == 1 and "--raise-full-ratio" in err and "OSD_FULL" in err
    rc = run_cli(cli, ["purge", *flags, w.bucket, "--raise-full-ratio", "nan"])
    assert rc == 2 and io.rados.sent == []


@pytest.fixture(autouse=True)
def _logging_back():
    yield
    logs.setup("warning", stream=sys.__stderr__)


# -- restore of a raise a crashed purge left -----------------------------------------------------------

class RatioRados:
    """The mon as restore sees it: osd dump and osd set-full-ratio (float32), nothing else."""

    def __init__(self, full_ratio: float) -> None:
        self.full_ratio = float32(full_ratio)
        self.sent: list[dict] = []

    async def acommand(self, cmd, **kw):
        if cmd == {"prefix": "osd dump"}:
            return {"full_ratio": self.full_ratio, "backfillfull_ratio": 0.07, "nearfull_ratio": 0.06}
        if cmd.get("prefix") == "osd set-full-ratio":
            self.sent.append(cmd)
            self.full_ratio = float32(cmd["ratio"])
            return None
        raise AssertionError(f"unexpected mon command {cmd}")


def ratio_entry(holder="purge@crashed", lease_until=0.0):
    return Override(key=fullratio.RATIO_KEY, kind="ratio", who="", name="full_ratio", original_present=True,
                    original_value="0.08", applied_value="0.5", holder=holder, since=0.0, lease_until=lease_until)


@pytest.mark.parametrize("live, sent, kept", [(0.5, True, False), (0.08, False, False), (0.9, False, True)])
def test_restore_gives_back_a_ratio_a_crashed_purge_left_only_while_it_is_ours(live, sent, kept):
    rados = RatioRados(live)
    journal = Journal(MemoryStore())
    journal.record(ratio_entry())
    ex = Executor(rados, journal, holder="daemon-a", lease_s=10, wall_clock=lambda: 100.0)  # type: ignore[arg-type]
    (result,) = asyncio.run(ex.restore())
    assert result.command == "ceph osd set-full-ratio 0.08" and result.ok is not kept
    assert bool(rados.sent) is sent and (fullratio.RATIO_KEY in journal.overrides()) is kept
    assert rados.full_ratio == float32(0.08 if live == 0.5 else live)


def test_restore_leaves_a_running_purges_raise_to_it():
    rados = RatioRados(0.5)
    journal = Journal(MemoryStore())
    journal.record(ratio_entry(lease_until=200.0))
    ex = Executor(rados, journal, holder="daemon-a", lease_s=10, wall_clock=lambda: 100.0)  # type: ignore[arg-type]
    (result,) = asyncio.run(ex.restore())
    assert result.ok and not result.changed and rados.sent == [] and fullratio.RATIO_KEY in journal.overrides()


# -- fill-triggered expiry -----------------------------------------------------------------------------

def full_snap(used):
    obs = full_obs()
    st = obs["df"]["stats"]
    st["total_used_raw_bytes"] = int(st["total_bytes"] * used)
    return parse(obs)


def test_fill_expiry_on_a_full_cluster_is_refused_in_one_line_and_tried_again_later():
    s = FillSection(expire_at_ratio=0.5)
    d = fill.decide(full_snap(0.6), s, {}, now=0.0)
    assert d.actions == () and not d.memory["expiry_started"]
    assert "the configured expiry refused" in d.reason and "OSD_FULL" in d.reason
    assert "fill.expire_raise_full_ratio" in d.reason and "\n" not in d.reason


def test_fill_expiry_on_a_full_cluster_raises_the_configured_ratio():
    s = FillSection(expire_at_ratio=0.5, expire_raise_full_ratio=0.96)
    d = fill.decide(full_snap(0.6), s, {}, now=0.0)
    assert d.actions == (RunExpire(d.actions[0].reason, raise_full_ratio=0.96),)
    assert d.actions[0].command() == "rgwkeeper expire --yes --json --raise-full-ratio 0.96"
    # Not full: no raise, whatever is configured.
    normal = fill.decide(parse(load_fixture("observation.json")), FillSection(expire_at_ratio=0.01,
                         expire_raise_full_ratio=0.96), {}, now=0.0)
    assert normal.actions[0].args() == ["expire", "--yes", "--json"]


def test_the_expiry_raise_may_not_exceed_the_purge_maximum(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[fill]\nexpire_raise_full_ratio = 0.98\n[purge]\nmax_full_ratio = 0.97\n")
    with pytest.raises(ConfigError, match="expire_raise_full_ratio"):
        load(cfg)


# -- librados full-try --------------------------------------------------------------------------------

class FullIoctx:
    """An ioctx on a full cluster: without full-try every write waits (here: fails the test at
    once); with it, writes to existing objects go through and creating one gets ENOSPC."""

    def __init__(self, existing: set[str]) -> None:
        self.full_try = False
        self.existing = existing
        self.done: list[str] = []

    def set_osdmap_full_try(self):
        self.full_try = True

    def _write(self, what, obj):
        if not self.full_try:
            raise AssertionError(f"{what} {obj} without full-try would wait until the cluster is below full")
        import rados

        if obj not in self.existing:
            raise rados.NoSpace(f"RADOS no space ({what} {obj})")
        self.done.append(f"{what} {obj}")

    def lock_exclusive(self, obj, name, cookie, desc, duration, flags):
        self._write("lock", obj)

    def set_omap(self, op, keys, values):
        self._keys = keys

    def operate_write_op(self, op, obj):
        self._write("omap", obj)

    def aio_remove(self, oid, oncomplete):
        self._write("remove", oid)
        oncomplete(SimpleNamespace(get_return_value=lambda: 0))

    def aio_stat(self, oid, cb):
        cb(SimpleNamespace(get_return_value=lambda: 0), 10, 0)

    def close(self):
        pass


class FullCluster:
    def __init__(self, existing):
        self.existing = existing
        self.ioctxs: list[FullIoctx] = []

    def connect(self, timeout=0):
        pass

    def shutdown(self):
        pass

    def open_ioctx(self, pool):
        io = FullIoctx(self.existing)
        self.ioctxs.append(io)
        return io


def _rados(tmp_path, cluster):
    access = ClusterAccess(conf=tmp_path / "ceph.conf", keyring=None, client_name="client.admin",
                           rgw_endpoint=None, rgw_credentials_file=None, timeout_s=5)
    r = RadosAdapter(access, factory=lambda a: cluster)
    r.connect()
    return r


def test_the_daemons_journal_and_lock_writes_go_through_on_a_full_cluster(tmp_path):
    pytest.importorskip("rados")
    cluster = FullCluster({JOURNAL_OBJECT, "rgwkeeper.leader"})
    r = _rados(tmp_path, cluster)
    try:
        store = ObjectStore(r, "rgwkeeper")
        store.lock_exclusive("rgwkeeper.leader", "leader", "c", "d", 10)
        store.omap_set(JOURNAL_OBJECT, {"k": "v"})
        assert cluster.ioctxs[0].done == ["lock rgwkeeper.leader", f"omap {JOURNAL_OBJECT}"]
        with pytest.raises(CephError, match="no space"):  # creating an object: ENOSPC, at once
            store.omap_set("rgwkeeper.other", {"k": "v"})
    finally:
        r.close()


def test_removals_and_only_removals_carry_full_try(tmp_path):
    cluster = FullCluster({"a", "b"})
    r = _rados(tmp_path, cluster)
    try:
        bulk = BulkObjects(r, "data")
        assert asyncio.run(bulk.remove_many([("a", ""), ("b", "")], window=4)) == [0, 0]
        asyncio.run(bulk.stat_many([("a", "")], window=4))
        removal, other = cluster.ioctxs
        assert removal.full_try and removal.done == ["remove a", "remove b"] and not other.full_try
    finally:
        r.close()


def test_the_daemons_expiry_runs_in_process_and_reports_a_refusal_in_one_line(tmp_path, monkeypatch):
    from rgwkeeper.daemon.service import expiry_runner

    w, io = full_world(tmp_path)
    opened, closed = [], []
    monkeypatch.setattr(purge_api, "open_io", lambda access, pcfg: opened.append(access) or io)
    monkeypatch.setattr(purge_api, "close_io", closed.append)
    cfg_file = tmp_path / "rgwkeeper.toml"
    cfg_file.write_text(f'[purge]\nlifecycle_rules = [{{ bucket = "{w.bucket}", days = 1 }}]\n')
    access = ClusterAccess(tmp_path / "ceph.conf", None, "client.admin", "http://rgw:8080", tmp_path / "creds")
    assert expiry_runner(load(cfg_file), ClusterAccess(tmp_path / "c", None, "client.admin", None, None),
                         Journal(MemoryStore())) is None
    metrics = Metrics()
    ex = Executor(None, Journal(MemoryStore()), holder="d", lease_s=10,  # type: ignore[arg-type]
                  expire=expiry_runner(load(cfg_file), access, Journal(MemoryStore()), metrics))
    (result,) = asyncio.run(ex.apply([RunExpire("fill")]))
    assert not result.ok and result.command == "rgwkeeper expire --yes --json"
    assert "OSD_FULL" in result.detail and "--raise-full-ratio" in result.detail and "\n" not in result.detail
    assert opened == [access] and closed == [io]  # the adapters are closed after a refusal too
    assert w.log == []  # refused before any bucket was read
    sample = metrics.registry.get_sample_value
    assert sample("rgwkeeper_expiry_running") == 0
    assert sample("rgwkeeper_expiry_runs_total", {"result": "failed"}) == 1
    assert sample("rgwkeeper_expiry_runs_total", {"result": "ok"}) is None


def test_the_daemons_expiry_shows_it_runs_and_counts_a_partial_run_bucket_by_bucket(tmp_path, monkeypatch):
    from rgwkeeper.daemon.service import expiry_runner

    w = World()
    w.all_buckets = [w.bucket, "gone-since-listing"]  # listed, then NoSuchBucket: that bucket fails
    io, _ = purge_io(w, tmp_path)
    monkeypatch.setattr(purge_api, "open_io", lambda access, pcfg: io)
    monkeypatch.setattr(purge_api, "close_io", lambda io: None)
    cfg_file = tmp_path / "rgwkeeper.toml"
    cfg_file.write_text('[purge]\nlifecycle_rules = [{ bucket = "*", days = 1 }]\n')
    access = ClusterAccess(tmp_path / "ceph.conf", None, "client.admin", "http://rgw:8080", tmp_path / "creds")
    metrics = Metrics()
    running_during = []
    real = purge_api.expire_configured

    async def watched(*a, **kw):
        running_during.append(metrics.registry.get_sample_value("rgwkeeper_expiry_running"))
        return await real(*a, **kw)

    monkeypatch.setattr(purge_api, "expire_configured", watched)
    ex = Executor(None, Journal(MemoryStore()), holder="d", lease_s=10,  # type: ignore[arg-type]
                  expire=expiry_runner(load(cfg_file), access, Journal(MemoryStore()), metrics))
    (result,) = asyncio.run(ex.apply([RunExpire("fill")]))
    assert result.detail.startswith("partial: 1 of 2 buckets failed (gone-since-listing)"), result.detail
    sample = metrics.registry.get_sample_value
    assert running_during == [1] and sample("rgwkeeper_expiry_running") == 0
    assert sample("rgwkeeper_expiry_runs_total", {"result": "partial"}) == 1
    assert sample("rgwkeeper_expiry_buckets_total", {"result": "expired"}) == 1
    assert sample("rgwkeeper_expiry_buckets_total", {"result": "failed"}) == 1


def test_expire_on_a_full_cluster_refuses_at_once_and_its_dry_run_shows_the_raise(env, tmp_path, monkeypatch, capsys):
    _, flags, _ = env
    w, io = full_world(tmp_path)
    monkeypatch.setattr(purge_api, "open_io", lambda access, pcfg: io)
    rc = run_cli(cli, ["expire", *flags, w.bucket, "--days", "1", "--yes"])
    err = capsys.readouterr().err
    assert rc == 1 and err.count("\n") == 1 and "expire refused" in err and "--raise-full-ratio" in err
    assert w.log == []
    assert run_cli(cli, ["expire", *flags, w.bucket, "--days", "1", "--dry-run", "--raise-full-ratio", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "before: $ ceph osd set-full-ratio 0.5" in out and io.rados.sent == []


def test_a_raise_that_would_leave_the_cluster_full_is_refused():
    fx = load_fixture("full.json")
    st = parse_full_state(fx["health"], fx["osd_dump"], fx["osd_df"])
    with pytest.raises(UsageError, match=r"would leave osd.1 \(17.7% used\) full"):
        fullratio.check_raise(0.15, st, 0.97)


def test_a_purge_whose_call_waits_on_a_cluster_turned_full_stops_at_once_saying_so(tmp_path, monkeypatch):
    from rgwkeeper.errors import CephTimeout

    w = World()
    io, _ = purge_io(w, tmp_path)
    prepared = asyncio.run(purge_api.prepare(PurgeRequest(w.bucket), io, purge_cfg=purge_cfg(rgw_retry_s=120.0),
                                             store=CheckpointStore(tmp_path / "state")))
    io.rados = FakeRados(w, full=True)  # full after planning: the fence's quota PUT gets no answer

    async def no_answer(*a, **kw):
        raise CephTimeout("PUT /admin/bucket?quota", "no answer within 10 s")

    monkeypatch.setattr(io.admin_api, "set_bucket_quota", no_answer)
    with pytest.raises(ClusterFull, match="stopped at set bucket quota: the cluster is full .*--raise-full-ratio"):
        asyncio.run(purge_api.run(prepared, io, purge_cfg=purge_cfg(rgw_retry_s=120.0)))


# -- the raise under races, cancellation and a failed give-back (review findings) -----------------

def _raise(io, journal, holder="purge@a:1", body=None):
    async def go():
        async with fullratio.raised(io.rados, journal, 0.5, holder=holder, lease_s=90, reason="test"):
            if body is not None:
                await body()
    asyncio.run(go())


def test_a_second_raise_journaled_meanwhile_is_refused_and_the_first_original_kept(tmp_path):
    # Two purges with --raise-full-ratio at once: both saw no entry, the other journaled first.
    # A plain write would record the other's raised ratio as our "original" and lose the true one.
    w, io = full_world(tmp_path)
    store = MemoryStore()
    journal = Journal(store)
    other = Override(key=fullratio.RATIO_KEY, kind="ratio", who="", name="full_ratio", original_present=True,
                     original_value="0.08", applied_value="0.4", holder="purge@b:2", since=0, lease_until=1e12)
    real = journal.overrides
    calls = []

    def overrides_after_the_other_journaled():
        calls.append(1)
        if len(calls) == 1:
            out = real()
            journal.record(other)  # the other purge, between our check and our write
            return out
        return real()

    journal.overrides = overrides_after_the_other_journaled
    with pytest.raises(ClusterFull, match="already journaled .*purge@b:2"):
        _raise(io, journal)
    assert Journal(store).overrides()[fullratio.RATIO_KEY].original_value == "0.08"
    assert not [c for c in io.rados.sent if c.get("prefix") == "osd set-full-ratio"]


def test_no_give_back_while_the_raise_may_still_be_running(tmp_path):
    # Cancelled mid `osd set-full-ratio`: its librados thread may still land the raise. The
    # give-back waits for it; if it cannot tell, the entry stays for `rgwkeeper restore`.
    w, io = full_world(tmp_path)
    io.rados.busy_at_drain = True
    journal = Journal(MemoryStore())
    with pytest.raises(CephError, match="still running.*rgwkeeper restore"):
        _raise(io, journal)
    assert fullratio.RATIO_KEY in journal.overrides()
    sent = [c["prefix"] for c in io.rados.sent]
    assert sent.index("(drain)") > sent.index("osd set-full-ratio")
    assert sent.count("osd set-full-ratio") == 1  # not set back blind


def test_a_give_back_that_fails_after_a_good_run_fails_the_command(tmp_path):
    w, io = full_world(tmp_path)
    journal = Journal(MemoryStore())
    real = io.rados.acommand
    sets = []

    async def refuse_second_set(cmd, **kw):
        if cmd.get("prefix") == "osd set-full-ratio":
            sets.append(cmd)
            if len(sets) == 2:
                raise CephError("osd set-full-ratio", "no answer within 10 s")
        return await real(cmd, **kw)

    io.rados.acommand = refuse_second_set
    with pytest.raises(CephError, match="give back the full ratio.*rgwkeeper restore.*0.08"):
        _raise(io, journal)
    assert fullratio.RATIO_KEY in journal.overrides()


def test_a_paced_direct_purge_on_a_full_cluster_sends_no_probe_write(tmp_path):
    # Probe writes carry no full-try: on a full cluster each would wait out its timeout before
    # the freeing even starts, and the last one could land after the cleanup.
    w, io = full_world(tmp_path, clears_after=1)
    prepared, report = prepare_and_run(tmp_path, w, io, full_wait_s=60.0, pace_latency_increase=0.3)
    assert prepared.plan.steps[0].kind == "free_while_full" and report.ok
    assert not [x for x in w.log if "probe" in x], [x for x in w.log if "probe" in x]


def test_a_bucket_of_a_job_that_meets_a_full_cluster_says_the_way_on_is_each_bucket_alone(tmp_path):
    from rgwkeeper.purge import many
    from rgwkeeper.purge.board import Board
    from tests.unit.purge_fakes import FakeBoardStore, FakeOsd

    w, io = full_world(tmp_path)
    filters = many.filters_of(PurgeRequest(bucket="any", method="s3"))  # s3 needs RGW to write: refused at once
    source = many.list_source([w.bucket])
    jid = many.job_id(filters, source)
    board = Board(FakeBoardStore(FakeOsd(lambda: 1000.0), "client.a"), jid, worker="a", lease_s=30,
                  clock=lambda: 1000.0, wall=lambda: 1000.0)
    board.publish(many.spec_for(filters, source, [w.bucket], job=jid, lease_s=30, created=1000.0), [w.bucket])
    lease = board.take()
    with pytest.raises(ClusterFull) as exc:
        asyncio.run(purge_api.purge_job_bucket(board, lease, io, filters=filters, source=source,
                                               purge_cfg=purge_cfg(), store=CheckpointStore(tmp_path / "state"),
                                               pool="rgwkeeper"))
    line = str(exc.value)
    assert "OSD_FULL" in line and "\n" not in line
    assert line.endswith("(in a job: a job of several buckets does not raise the full ratio: purge them one by one "
                         "with --raise-full-ratio R (at most purge.max_full_ratio))"), line
    assert not [x for x in w.log if "quota" in x or "DeleteObjects" in x or "rados rm" in x]


def test_a_raise_above_the_maximum_is_refused_before_the_cluster_is_read_full_or_not(tmp_path):
    # The daemon's expiry and the Python API go through full_gate: before, on a cluster that is
    # not full the bound was never checked and the raise silently not used.
    for full in (False, True):
        w = World()
        io, _ = purge_io(w, tmp_path / str(full))
        io.rados = FakeRados(w, full=full)
        reads: list[dict] = []
        answer = io.rados.acommand

        async def recorded(cmd, **kw):
            reads.append(cmd)
            return await answer(cmd, **kw)

        io.rados.acommand = recorded
        with pytest.raises(UsageError, match="0.98 is above purge.max_full_ratio 0.97"):
            asyncio.run(purge_api.full_gate(io, "expire", 0.98, 0.97))
        assert reads == [] and io.rados.sent == []
