"""The scrub throttle's levers per release and op queue, on observations captured from each
release: only levers the release table keeps there are set, never an option the release has
removed, and where nothing helps the throttle says so and changes nothing."""

from __future__ import annotations

import copy
import json

import pytest

from rgwkeeper import releases
from rgwkeeper.actions import RestoreAll, SetConfig, SetFlag
from rgwkeeper.config import ScrubThrottleSection
from rgwkeeper.policy import scrub
from rgwkeeper.policy.scrub import ThrottleMemory, decide
from rgwkeeper.snapshot import parse
from tests.unit.fakes import FIXTURES

S = ScrubThrottleSection(high_write_ops=500, low_write_ops=200, smoothing_s=0, hold_s=60, max_defer_s=3600,
                         cooldown_s=600, set_nodeep_scrub_flag=True)


def observation(release: str, write_ops: float = 900.0, answered: bool = True) -> dict:
    obs = copy.deepcopy(json.loads((FIXTURES.parent / release / "observation.json").read_text()))
    for p in obs["pool_stats"]:
        if p["pool_name"] == "default.rgw.buckets.data":
            p["client_io_rate"] = {"write_op_per_sec": write_ops}
    if not answered:  # no OSD answered `config get osd_op_queue`
        for opts in obs["osd_config"].values():
            opts.pop("osd_op_queue")
    return obs


def engage(release: str, **kw) -> scrub.Decision:
    return decide(parse(observation(release, **kw)), S, ThrottleMemory(), (), 1000.0)


def names(d: scrub.Decision) -> list[str]:
    return [a.name if isinstance(a, SetConfig) else a.flag for a in d.actions]


def config_ls(release: str) -> set[str]:
    return set(json.loads((FIXTURES.parent / release / "config-ls.json").read_text()))


@pytest.mark.parametrize("release", ["reef", "tentacle"])
def test_every_lever_a_release_row_sets_is_an_option_that_release_knows(release):
    row = releases.scrub_levers(release, "mclock_scheduler")
    assert row.measured
    options = [lever for lever in row.levers if lever != "nodeep-scrub"]
    assert set(options) <= config_ls(release)


@pytest.mark.parametrize("release", ["reef", "tentacle"])
def test_a_captured_cluster_gets_its_release_rows_levers_in_order(release):
    d = engage(release)
    row = releases.scrub_levers(release, "mclock_scheduler")
    if not row.levers:
        assert (d.state, d.actions) == ("nothing-to-throttle", ())
        assert row.why in d.reason and "\n" not in d.reason
        assert "docs/architecture.md" in d.reason and " ms" not in d.reason  # the figures live in the docs
        return
    assert d.state == "engage"
    assert names(d) == list(row.levers)


@pytest.mark.parametrize("release", ["reef", "tentacle"])
def test_without_an_op_queue_answer_the_release_default_queue_is_assumed_not_wpq(release):
    # Before: no answer meant wpq, and osd_scrub_sleep was set on a release that runs mClock.
    d = engage(release, answered=False)
    assert names(d) == names(engage(release))
    assert "osd_scrub_load_threshold" not in names(d)


def test_an_unmeasured_mclock_release_gets_only_what_every_measured_one_keeps():
    row = releases.scrub_levers("squid", "mclock_scheduler")
    assert not row.measured
    measured = [releases.SCRUB_LEVERS[(r, "mclock_scheduler")].levers for r in ("reef", "tentacle")]
    assert all(lever in m for m in measured for lever in row.levers)
    assert releases.scrub_levers("squid", "wpq").levers == releases.WPQ_LEVERS


def test_wpq_on_pacific_keeps_its_four_levers():
    d = engage("pacific")
    assert names(d) == ["osd_scrub_sleep", "osd_scrub_load_threshold", "osd_max_scrubs", "nodeep-scrub"]
    assert isinstance(d.actions[-1], SetFlag)


def test_every_lever_is_owned_so_a_throttle_from_before_an_upgrade_is_given_back():
    for row in releases.SCRUB_LEVERS.values():
        for lever in row.levers:
            if lever != "nodeep-scrub":
                assert f"config/osd/{lever}" in scrub.owned_keys(S)


def test_where_nothing_helps_a_throttle_left_from_before_is_given_back(monkeypatch):
    monkeypatch.setitem(releases.SCRUB_LEVERS, ("tentacle", "mclock_scheduler"),
                        releases.ScrubLevers((), "mClock protects client I/O here"))
    snap = parse(observation("tentacle"))
    d = decide(snap, S, ThrottleMemory(), {"config/osd/osd_scrub_sleep"}, 1000.0)
    assert d.state == "release" and isinstance(d.actions[0], RestoreAll)
    d = decide(snap, S, ThrottleMemory(), (), 1000.0)
    assert (d.state, d.actions) == ("nothing-to-throttle", ())
    assert "mClock protects client I/O here" in d.reason
    assert "none (mclock_scheduler on tentacle: mClock protects client I/O here)" == scrub.levers_line(snap)


def test_status_names_the_levers_of_the_release_it_shows():
    import io

    from rich.console import Console

    from rgwkeeper.cli.render import render_status

    buf = io.StringIO()
    render_status(parse(observation("tentacle")), console=Console(file=buf, width=400, color_system=None))
    row = releases.scrub_levers("tentacle", "mclock_scheduler")
    shown = f"throttle levers: {', '.join(row.levers) or 'none'} (mclock_scheduler on tentacle: {row.why})"
    assert shown in buf.getvalue()


def test_a_throttle_of_the_mclock_profile_alone_counts_as_throttled():
    # The daemon's rgwkeeper_scrub_throttled gauge read only scrub-named keys and said 0 on
    # Reef and Tentacle, where the profile is the only lever.
    assert scrub.is_throttled({"config/osd/osd_mclock_profile"}, S)
    assert not scrub.is_throttled({"config/osd/osd_memory_target", "ratio/full"}, S)
