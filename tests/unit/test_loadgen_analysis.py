"""The analysis on recorded data: percentiles, per-second series, windows, CV, the verdict.

Records are synthesized with a fixed seed (rates and latencies chosen per second), plus one
result recorded from the containerized cluster (tests/fixtures/loadgen/quiet-put.json).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rgwkeeper.loadgen import analysis as A
from rgwkeeper.loadgen.workload import OP_CODES

S = 1_000_000_000
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "loadgen"
TOL = A.Tolerances(max_rate_drop=0.10, max_cv_increase=0.10, max_p99_increase=0.5, min_window_s=10,
                   min_op_samples=100, block_s=3, resamples=1000)


def synth(rates, *, start_s=0, op="PUT", median_ms=20.0, status=200, seed=0, sigma=0.3):
    """``rates[i]`` requests ending uniformly in second ``start_s + i``, lognormal latencies."""
    rng = np.random.default_rng(seed)
    n = int(sum(rates))
    rec = np.zeros(n, dtype=A.RECORD_DTYPE)
    secs = np.repeat(np.arange(len(rates)) + start_s, rates)
    rec["end"] = secs * S + rng.integers(0, S, n)
    lat = (rng.lognormal(np.log(median_ms), sigma, n) * 1e6).astype(np.int64)
    rec["intended"] = rec["end"] - lat
    rec["start"] = rec["intended"]
    rec["first_byte"] = rec["end"]
    rec["op"] = OP_CODES[op]
    rec["status"] = status
    rec["size"] = 4096
    return rec


def noisy_rates(mean, cv, seconds, seed):
    rng = np.random.default_rng(seed)
    return np.maximum(0, rng.normal(mean, mean * cv, seconds)).astype(int)


def verdict_of(base_rates, cand_rates, *, base_ms=20.0, cand_ms=20.0, tol=TOL, cand_status=200, seed=1):
    n = len(base_rates)
    rec = np.concatenate([synth(base_rates, median_ms=base_ms, seed=seed),
                          synth(cand_rates, start_s=n, median_ms=cand_ms, status=cand_status, seed=seed + 1)])
    series = A.per_second(rec, n + len(cand_rates))
    return A.compare(series, A.Window("baseline", 0, n), series, A.Window("maintenance", n, n + len(cand_rates)), tol)


# -- percentiles, series, windows ---------------------------------------------------------------

def test_hdr_percentiles_of_known_latencies():
    lat_us = np.arange(1, 100_001, dtype=float)  # 1 us .. 100 ms, uniform
    s = A.latency_summary(lat_us)
    for q, want_ms in (("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("p99.9", 99.9)):
        assert s[q] == pytest.approx(want_ms, rel=1e-3)
    assert s["max"] == pytest.approx(100.0, rel=1e-3)
    assert A.latency_summary(np.array([])) is None


def test_grid_percentiles_are_within_the_grid_resolution():
    lat_us = np.arange(1000, 101_000, dtype=float)
    hist = np.bincount(A.grid_index(lat_us), minlength=A.GRID_BUCKETS)
    for q in (50, 99):
        exact = np.percentile(lat_us, q)
        assert A.percentile_from_hist(hist, q)[0] == pytest.approx(exact, rel=A.GRID_GROWTH - 1)
    assert np.isnan(A.percentile_from_hist(np.zeros(A.GRID_BUCKETS, dtype=int), 99)[0])


def test_per_second_bins_by_end_time_and_separates_errors():
    rec = np.concatenate([synth([10, 20, 30]), synth([0, 5, 0], status=503, seed=2)])
    series = A.per_second(rec, 3)
    put = series.ops["PUT"]
    assert put.ok.tolist() == [10, 20, 30]
    assert put.errors.tolist() == [0, 5, 0]
    assert put.bytes.tolist() == [40960, 81920, 122880]
    assert put.hist.sum(axis=1).tolist() == [10, 20, 30]  # latencies of successes only
    assert A.per_second(rec, 2).seconds == 2  # later seconds are dropped, not folded in


def test_windows_trim_the_warm_up_and_the_partial_last_second():
    assert A.run_window(30.7, 5) == A.Window("run", 5, 30)
    assert A.Window.between("w", 4.2, 9.9) == A.Window("w", 5, 9)
    assert A.Window.between("w", 9.5, 3.0).seconds == 0


def test_summary_counts_rates_and_latency_kinds():
    rec = synth([100] * 10, median_ms=20)
    rec["start"] = rec["intended"] + 5_000_000  # every request started 5 ms late
    s = A.summarize(rec, A.Window("run", 2, 10))
    put = s["per_op"]["PUT"]
    assert s["requests"] == put["requests"] == 800 and s["errors"] == 0
    assert put["ops_per_s"] == 100.0
    assert put["start_lag_ms"]["p50"] == pytest.approx(5.0, rel=1e-3)
    assert put["latency_ms"]["p50"] == pytest.approx(put["service_ms"]["p50"] + 5, rel=0.02)


def test_rate_stats_cv():
    st = A.rate_stats(np.array([90.0, 110.0, 90.0, 110.0]))
    assert st["median"] == 100 and st["mean"] == 100
    assert st["cv"] == pytest.approx(np.std([90, 110, 90, 110], ddof=1) / 100, abs=1e-4)
    assert A.rate_stats(np.array([])) == {"median": None, "mean": None, "cv": None}


# -- edge cases ---------------------------------------------------------------------------------

def test_no_requests_at_all():
    rec = np.zeros(0, dtype=A.RECORD_DTYPE)
    s = A.summarize(rec, A.Window("run", 5, 30))
    assert s["requests"] == 0 and s["per_op"] == {} and s["ops_per_s"] == 0
    series = A.per_second(rec, 30)
    assert series.ops == {}
    v = A.compare(series, A.Window("baseline", 0, 15), series, A.Window("maintenance", 15, 30), TOL)
    assert v.outcome == A.INCONCLUSIVE
    assert any("no successful request in the baseline window" in r for r in v.reasons)
    result = A.build_result(rec, stop_s=30, warmup_s=5, spec={}, events=[], client_cpu=A.client_cpu(0, 0, 0),
                            started_at="t", notes=[])
    assert result["client"]["cpu_ms_per_request"] is None
    json.dumps(result)  # JSON-clean even when empty


def test_all_errors():
    base = synth([100] * 20, status=500)
    s = A.summarize(base, A.Window("run", 0, 20))
    assert s["errors"] == s["requests"] == 2000 and s["per_op"]["PUT"]["latency_ms"] is None
    # Errors in the window judged: FAIL, whatever else.
    v = verdict_of([100] * 20, [100] * 20, cand_status=503)
    assert v.outcome == A.FAIL and v.checks[0].name == "errors" and v.checks[0].estimate == 2000
    # Errors in the baseline: nothing to compare against.
    rec = np.concatenate([base, synth([100] * 20, start_s=20)])
    series = A.per_second(rec, 40)
    v = A.compare(series, A.Window("baseline", 0, 20), series, A.Window("maintenance", 20, 40), TOL)
    assert v.outcome == A.INCONCLUSIVE
    assert any("baseline window itself had 2000 failed requests" in r for r in v.reasons)


def test_a_window_shorter_than_the_warm_up():
    rec = synth([50, 50, 50])  # a 3 s run, warm-up 5 s
    w = A.run_window(3.0, 5.0)
    assert w.seconds == 0
    assert A.summarize(rec, w)["requests"] == 0
    result = A.build_result(rec, stop_s=3.0, warmup_s=5.0, spec={}, events=[],
                            client_cpu=A.client_cpu(0.1, 0.0, 150), started_at="t", notes=[])
    assert result["windows"]["run"]["seconds"] == 0 and result["rates"]["run"]["median"] is None
    series = A.per_second(rec, 3)
    v = A.compare(series, w, series, A.Window("candidate", 0, 3), TOL)
    assert v.outcome == A.INCONCLUSIVE
    assert any("run window is 0 s, shorter than 10 s" in r for r in v.reasons)


# -- the verdict --------------------------------------------------------------------------------

def test_judge_rule():
    assert A.judge(0.30, 0.20, 0.40, 0.10) == A.FAIL          # significant and past the limit
    assert A.judge(0.02, -0.05, 0.08, 0.10) == A.PASS         # worsening past the limit ruled out
    assert A.judge(0.15, -0.02, 0.30, 0.10) == A.INCONCLUSIVE  # past the limit but within noise
    assert A.judge(0.05, 0.01, 0.15, 0.10) == A.INCONCLUSIVE   # significant, maybe past the limit


def test_quiet_windows_pass():
    v = verdict_of(noisy_rates(200, 0.05, 30, 1), noisy_rates(200, 0.05, 30, 2))
    assert v.outcome == A.PASS, v.reasons
    assert {c.name for c in v.checks} == {"errors", "median_ops_drop", "cv_increase", "p99_increase_PUT",
                                          "slow_seconds_PUT"}
    drop = next(c for c in v.checks if c.name == "median_ops_drop")
    assert drop.low < 0.0 < drop.high < TOL.max_rate_drop


def test_a_real_drop_fails_with_its_numbers():
    v = verdict_of(noisy_rates(200, 0.05, 30, 1), noisy_rates(150, 0.05, 30, 2))
    assert v.outcome == A.FAIL
    drop = next(c for c in v.checks if c.name == "median_ops_drop")
    assert drop.outcome == A.FAIL and 0.2 < drop.estimate < 0.3 and drop.low > 0.1
    assert "median ops/s" in v.reasons[0] and "CI" in v.reasons[0]


def test_a_latency_shift_fails_the_p99_check():
    v = verdict_of(noisy_rates(200, 0.05, 30, 1), noisy_rates(200, 0.05, 30, 2), cand_ms=60)
    p99 = next(c for c in v.checks if c.name == "p99_increase_PUT")
    assert v.outcome == A.FAIL and p99.outcome == A.FAIL and p99.estimate > 1.5


def test_a_noisy_baseline_is_inconclusive_not_pass():
    base = np.tile([60, 340], 15)  # CV 0.71
    v = verdict_of(base, noisy_rates(200, 0.05, 30, 2))
    assert v.outcome == A.INCONCLUSIVE
    assert v.reasons[0].startswith("baseline too noisy: per-second ops/s CV 0.71 > 0.25")


def test_a_shift_within_the_noise_is_inconclusive():
    """An 18% drop for 10 s of noisy seconds: the interval reaches both sides of the limit."""
    tol = A.Tolerances(max_rate_drop=0.15, max_cv_increase=5, max_p99_increase=5, min_window_s=10,
                       min_op_samples=100, block_s=3, resamples=1000)
    v = verdict_of(noisy_rates(200, 0.20, 12, 5), noisy_rates(164, 0.20, 12, 6), tol=tol)
    drop = next(c for c in v.checks if c.name == "median_ops_drop")
    assert drop.outcome == A.INCONCLUSIVE and drop.low < tol.max_rate_drop < drop.high
    assert v.outcome == A.INCONCLUSIVE and v.reasons[0].startswith("cannot tell from baseline noise")


def test_the_verdict_is_deterministic_and_survives_json():
    base, cand = noisy_rates(200, 0.08, 25, 1), noisy_rates(180, 0.08, 25, 2)
    n = len(base)
    rec = np.concatenate([synth(base, seed=1), synth(cand, start_s=n, seed=2)])
    series = A.per_second(rec, 2 * n)
    wb, wc = A.Window("baseline", 0, n), A.Window("maintenance", n, 2 * n)
    v1 = A.compare(series, wb, series, wc, TOL).to_dict()
    v2 = A.compare(series, wb, series, wc, TOL).to_dict()
    again = A.series_from_json(json.loads(json.dumps(A.series_to_json(series))))
    v3 = A.compare(again, wb, again, wc, TOL).to_dict()
    assert v1 == v2 == v3


def test_block_bootstrap_indices_are_runs_of_consecutive_seconds():
    idx = A.block_starts(10, 3, 50, np.random.default_rng(0))
    assert idx.shape == (50, 10) and idx.min() >= 0 and idx.max() <= 9
    for row in idx:
        for b in range(0, 9, 3):
            assert (np.diff(row[b:b + 3]) == 1).all()


# -- a result recorded from the containerized cluster --------------------------------------------

def test_recorded_quiet_run_compared_with_itself_and_with_a_slowed_copy():
    """20 s of 4 KiB PUT on the 2-core box: per-second CV about 0.16. Against itself, the
    interval of the median drop is about +-15%: a 10% limit cannot be judged (INCONCLUSIVE,
    not PASS), a 20% one passes; 40% fewer requests per second fails either way."""
    data = json.loads((FIXTURES / "quiet-put.json").read_text())
    series, window = A.load_result(data, "quiet")
    assert window.seconds >= 10 and "PUT" in series.ops
    same = A.compare(series, window, series, window, TOL)
    drop = next(c for c in same.checks if c.name == "median_ops_drop")
    assert drop.estimate == 0 and drop.low < -TOL.max_rate_drop and drop.high > TOL.max_rate_drop
    assert same.outcome == A.INCONCLUSIVE
    wide = A.Tolerances(**{**TOL.__dict__, "max_rate_drop": 0.20})
    assert A.compare(series, window, series, window, wide).outcome == A.PASS
    slowed = A.series_from_json(data["series"])
    slowed.ops["PUT"].ok = (slowed.ops["PUT"].ok * 0.6).astype(np.int64)
    assert A.compare(series, window, slowed, window, TOL).outcome == A.FAIL
    assert A.compare(series, window, slowed, window, wide).outcome == A.FAIL
    with pytest.raises(ValueError):
        A.load_result({"rgwkeeper_loadgen": 99}, "x")


def test_a_spike_shorter_than_the_window_fails_the_slow_seconds_check():
    """5 of 20 seconds at 10x the latency: the window's p99 interval straddles the limit (the
    bootstrap sees the spike in some resamples only), the rank test does not."""
    base = synth([40] * 20, median_ms=15.0, seed=3)
    calm = [synth([40] * 7, start_s=20, median_ms=15.0, seed=4), synth([40] * 8, start_s=32, median_ms=15.0, seed=5)]
    spike = synth([40] * 5, start_s=27, median_ms=150.0, seed=6)
    series = A.per_second(np.concatenate([base, *calm, spike]), 40)
    windows = (series, A.Window("baseline", 0, 20), series, A.Window("maintenance", 20, 40))
    v = A.compare(*windows, A.Tolerances(**{**TOL.__dict__, "slow_seconds_alpha": 0.05}))
    slow = next(c for c in v.checks if c.name == "slow_seconds_PUT")
    assert slow.outcome == A.FAIL and slow.estimate == 5
    assert "p = 0.024" in slow.text  # C(20,5) / C(40,5)
    assert v.outcome == A.FAIL and any("5 of 20 seconds" in r for r in v.reasons)
    # The default alpha, 0.01, lets 5 slow seconds of 20 pass: the price of fewer false alarms
    # (a quiet CI window reached p = 0.047 with 4).
    assert A.Tolerances().slow_seconds_alpha == 0.01
    slow = next(c for c in A.compare(*windows, TOL).checks if c.name == "slow_seconds_PUT")
    assert slow.outcome == A.PASS and slow.estimate == 5


def test_slow_seconds_needs_seconds_with_enough_requests():
    tol = A.Tolerances(min_window_s=2, min_op_samples=1)
    sparse = A.per_second(synth([2] * 20, median_ms=15.0), 20)
    bh = sparse.ops["PUT"].hist
    assert A.slow_seconds_check("PUT", bh[:10], bh[10:], tol) is None  # 2 requests a second: no p99 of its own
    dense = A.per_second(synth([40] * 20, median_ms=15.0), 20).ops["PUT"].hist
    same = A.slow_seconds_check("PUT", dense[:10], dense[:10], tol)
    assert same.outcome == A.PASS and same.estimate == 0 and "p = 1.000" in same.text


def test_slow_second_increase_sets_the_slow_seconds_threshold_apart_from_the_p99_limit():
    base = synth([40] * 20, median_ms=15.0, seed=3)
    calm = synth([40] * 15, start_s=20, median_ms=15.0, seed=4)
    spike = synth([40] * 5, start_s=35, median_ms=150.0, seed=6)
    h = A.per_second(np.concatenate([base, calm, spike]), 40).ops["PUT"].hist
    wide = A.Tolerances(max_p99_increase=10.0, slow_seconds_alpha=0.05)
    # Tied to a p99 limit of +1000%, 150 ms seconds do not count against a ~30 ms baseline worst.
    assert A.slow_seconds_check("PUT", h[:20], h[20:], wide).estimate == 0
    apart = A.slow_seconds_check("PUT", h[:20], h[20:], A.Tolerances(**{**wide.__dict__, "slow_second_increase": 1.0}))
    assert apart.outcome == A.FAIL and apart.estimate == 5 and "+100%" in apart.text


# -- several agents: per-second HDR histograms added ------------------------------------------

def _agents_records():
    """Two agents' records over the same 12 s: PUT and GET, some errors, different latencies."""
    a = np.concatenate([synth([50] * 12, median_ms=20, seed=11), synth([20] * 12, op="GET", median_ms=5, seed=12),
                        synth([3] * 12, status=503, seed=13)])
    b = np.concatenate([synth([40] * 12, median_ms=35, seed=21, sigma=0.8), synth([2] * 12, op="GET", status=404, seed=22)])
    for rec, lag in ((a, 1_000_000), (b, 7_000_000)):
        rec["start"] = rec["intended"] + lag
        rec["first_byte"] = rec["end"] - 500_000
    return a, b


@pytest.mark.parametrize("window", [A.Window("run", 2, 12), A.Window("baseline", 0, 5), A.Window("w", 5, 6),
                                    A.Window("empty", 7, 7)])
def test_summaries_from_added_agent_histograms_equal_the_summary_of_all_records(window):
    a, b = _agents_records()
    # What each agent ships goes through JSON, as it does through RADOS.
    shipped = [A.histograms_from_json(json.loads(json.dumps(A.histograms_to_json(A.second_histograms(r, 12)))))
               for r in (a, b)]
    series = A.merge_series([A.per_second(a, 12), A.per_second(b, 12)], 12)
    merged = A.summarize_merged(series, A.merge_histograms(shipped), window)
    assert merged == A.summarize(np.concatenate([a, b]), window)
    if window.seconds > 1:
        assert merged["per_op"]["PUT"]["latency_ms"]["p99"] > 0 and merged["errors"] > 0


def test_added_series_equal_the_series_of_all_records():
    a, b = _agents_records()
    merged = A.merge_series([A.per_second(a, 12), A.per_second(b, 10)], 12)  # b stopped early
    whole = A.per_second(np.concatenate([a, b[b["end"] < 10 * S]]), 12)
    assert merged.ops.keys() == whole.ops.keys()
    for op in whole.ops:
        for field in ("ok", "errors", "bytes", "hist"):
            assert np.array_equal(getattr(merged.ops[op], field), getattr(whole.ops[op], field)), (op, field)


def test_histograms_from_json_refuse_what_no_agent_writes():
    with pytest.raises(ValueError, match="operation"):
        A.histograms_from_json({"POST": {}})
    with pytest.raises(ValueError, match="latency"):
        A.histograms_from_json({"PUT": {"p99": {}}})
