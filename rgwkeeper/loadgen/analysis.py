"""What a load run measured, and whether a window of it differs from another. Pure: no I/O.

Raw records -> per-second series (completions by end time; latency from the *intended*
start) -> windows (warm-up trimmed) -> summaries (HDR histogram percentiles) and a verdict.

The verdict compares a candidate window (maintenance running, or run B) with a baseline
(before maintenance, or run A) on four things: the shift of median ops/s, the change of the
coefficient of variation of per-second ops/s, the p99 shift of each operation, and the error
count. Per-second rates are autocorrelated (a slow second is followed by a slow second), so
confidence intervals come from a *moving-block bootstrap* (Kuensch 1989): each window is
resampled in blocks of ``block_s`` consecutive seconds, keeping that correlation, and the
statistic is recomputed ``resamples`` times with a fixed seed (the same data gives the same
verdict). Each metric is expressed so that larger is worse, and judged against its limit:

- FAIL: the worsening is significant (the whole interval is above 0) and the point estimate
  is past the limit;
- PASS: the whole interval is within the limit (a worsening past it is ruled out);
- INCONCLUSIVE otherwise: the interval straddles the limit, i.e. the baseline noise is too
  large to tell; the verdict says so rather than PASS.

A disturbance shorter than the window (a purge of a few seconds in a 20 s window) moves the
window's p99 but the bootstrap, which resamples the window's seconds, sees it in some resamples
and not in others: the interval straddles the limit. So each operation also gets a *slow
seconds* check, a rank test on per-second p99: count the window's seconds slower than the
baseline's slowest second by more than ``slow_second_increase`` (unset: ``max_p99_increase``). If the windows were alike (their
seconds exchangeable), the chance that the k slowest seconds of both all fall in the window is
C(M,k)/C(N+M,k) for N baseline and M window seconds; below ``slow_seconds_alpha`` it FAILs
(20 s windows: 5 such seconds, p = 0.024), otherwise it passes. Seconds are correlated, which
makes that p optimistic; requiring each counted second to be past the limit against the
baseline's *worst* second is the guard.

The run as a whole is INCONCLUSIVE, without judging, when a window is too short, has no
successful request, the baseline had errors, or the baseline's own per-second CV is above
``max_baseline_cv`` ("baseline too noisy").
"""

from __future__ import annotations

import math
import zlib
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable

import numpy as np
from hdrh.codec import HdrCookieException, HdrHistogramSettingsException, HdrLengthException
from hdrh.histogram import HdrHistogram

from rgwkeeper.loadgen.workload import FIELDS, OPS, TYPECODES

#: One raw record per request. Times are ns after the run's t0 (CLOCK_MONOTONIC).
RECORD_DTYPE = np.dtype([("op", "u1"), ("status", "u2"), ("size", "i8"), ("intended", "i8"),
                         ("start", "i8"), ("first_byte", "i8"), ("end", "i8")])

PERCENTILES = (50.0, 90.0, 99.0, 99.9)
#: HdrHistogram range: 1 us to 1 h, 3 significant digits.
HDR_LOWEST_US, HDR_HIGHEST_US, HDR_DIGITS = 1, 3_600_000_000, 3

#: Per-second latency histograms use log buckets: bucket i holds [10 us * G^i, 10 us * G^(i+1)).
#: G = 1.05 gives 5% resolution; 400 buckets reach past 40 minutes.
GRID_MIN_US = 10.0
GRID_GROWTH = 1.05
GRID_BUCKETS = 400

PASS, FAIL, INCONCLUSIVE = "PASS", "FAIL", "INCONCLUSIVE"

HDR_CODEC_ERRORS = (HdrCookieException, HdrHistogramSettingsException, HdrLengthException)


def records_from_columns(columns: dict[str, bytes], t0_ns: int) -> np.ndarray:
    """The runner's columns (machine ints, absolute monotonic ns) as one structured array."""
    n = len(columns["op"]) if columns else 0
    rec = np.zeros(n, dtype=RECORD_DTYPE)
    if n == 0:
        return rec
    for name, tc in zip(FIELDS, TYPECODES):
        col = np.frombuffer(columns[name], dtype=np.dtype(tc))
        rec[name] = col - t0_ns if name in ("intended", "start", "first_byte", "end") else col
    return rec


def ok_mask(rec: np.ndarray) -> np.ndarray:
    return (rec["status"] >= 200) & (rec["status"] < 300)


def grid_index(latency_us: np.ndarray) -> np.ndarray:
    x = np.maximum(latency_us.astype(float), GRID_MIN_US) / GRID_MIN_US
    return np.minimum((np.log(x) / math.log(GRID_GROWTH)).astype(np.int64), GRID_BUCKETS - 1)


def grid_value_us(index: np.ndarray | int) -> np.ndarray:
    """A bucket's representative latency: its geometric middle."""
    return GRID_MIN_US * GRID_GROWTH ** (np.asarray(index, dtype=float) + 0.5)


# -- per-second series -------------------------------------------------------------------------

@dataclass
class OpSeries:
    """One operation, second by second (second i = requests that *ended* in [i, i+1) s)."""

    ok: np.ndarray  # successful requests
    errors: np.ndarray
    bytes: np.ndarray  # bytes moved by successful requests
    hist: np.ndarray  # (seconds, GRID_BUCKETS) latency counts of successful requests

    def p(self, q: float) -> np.ndarray:
        """The q-th percentile (0-100) of each second's latency, ms (nan where no request)."""
        return percentile_from_hist(self.hist, q) / 1000.0


@dataclass
class Series:
    seconds: int
    ops: dict[str, OpSeries]

    def total_ok(self) -> np.ndarray:
        return sum((s.ok for s in self.ops.values()), np.zeros(self.seconds, dtype=np.int64))

    def total_errors(self) -> np.ndarray:
        return sum((s.errors for s in self.ops.values()), np.zeros(self.seconds, dtype=np.int64))


def per_second(rec: np.ndarray, seconds: int) -> Series:
    """Bin ``rec`` by end time into ``seconds`` whole seconds (later ones are dropped)."""
    seconds = max(0, int(seconds))
    sec = rec["end"] // 1_000_000_000
    inside = (sec >= 0) & (sec < seconds)
    ok = ok_mask(rec)
    lat_us = (rec["end"] - rec["intended"]) / 1000.0
    ops: dict[str, OpSeries] = {}
    for code, name in enumerate(OPS):
        mine = inside & (rec["op"] == code)
        if not mine.any():
            continue
        good = mine & ok
        s_ok = np.bincount(sec[good], minlength=seconds)[:seconds]
        s_err = np.bincount(sec[mine & ~ok], minlength=seconds)[:seconds]
        s_bytes = np.bincount(sec[good], weights=rec["size"][good], minlength=seconds)[:seconds]
        hist = np.zeros((seconds, GRID_BUCKETS), dtype=np.int64)
        np.add.at(hist, (sec[good], grid_index(lat_us[good])), 1)
        ops[name] = OpSeries(s_ok.astype(np.int64), s_err.astype(np.int64), s_bytes.astype(np.int64), hist)
    return Series(seconds, ops)


def percentile_from_hist(hist: np.ndarray, q: float) -> np.ndarray:
    """Percentile per row of a (rows, GRID_BUCKETS) count matrix, in us (nan for empty rows)."""
    hist = np.atleast_2d(hist)
    total = hist.sum(axis=1)
    cum = np.cumsum(hist, axis=1)
    target = np.ceil(q / 100.0 * total)
    idx = np.argmax(cum >= np.maximum(target, 1)[:, None], axis=1)
    out = grid_value_us(idx)
    return np.where(total > 0, out, np.nan)


# -- windows and summaries ---------------------------------------------------------------------

@dataclass(frozen=True)
class Window:
    """Seconds [start, end) of a run, by request end time."""

    name: str
    start: int
    end: int

    @property
    def seconds(self) -> int:
        return max(0, self.end - self.start)

    @classmethod
    def between(cls, name: str, start_s: float, end_s: float) -> "Window":
        """The whole seconds inside [start_s, end_s)."""
        return cls(name, int(math.ceil(start_s)), max(int(math.ceil(start_s)), int(math.floor(end_s))))


def run_window(stop_s: float, warmup_s: float, name: str = "run") -> Window:
    """The whole run less the warm-up (and the partial last second)."""
    return Window.between(name, warmup_s, stop_s)


#: The latencies a summary reports: (name, from, to) fields of a raw record.
LATENCIES = (("latency_ms", "intended", "end"), ("service_ms", "start", "end"),
             ("first_byte_ms", "intended", "first_byte"), ("start_lag_ms", "intended", "start"))


def new_hdr() -> HdrHistogram:
    return HdrHistogram(HDR_LOWEST_US, HDR_HIGHEST_US, HDR_DIGITS)


def _hdr(values_us: np.ndarray, h: HdrHistogram | None = None) -> HdrHistogram:
    h = h if h is not None else new_hdr()
    clipped = np.clip(np.rint(values_us), HDR_LOWEST_US, HDR_HIGHEST_US).astype(np.int64)
    vals, counts = np.unique(clipped, return_counts=True)
    for v, c in zip(vals.tolist(), counts.tolist()):
        h.record_value(v, c)
    return h


def latency_summary(values_us: np.ndarray) -> dict[str, float] | None:
    """p50/p90/p99/p99.9, mean and max in ms, from an HDR histogram (None if no values)."""
    if len(values_us) == 0:
        return None
    return hdr_summary(_hdr(values_us))


def hdr_summary(h: HdrHistogram) -> dict[str, float] | None:
    if h.get_total_count() == 0:
        return None
    out = {f"p{q:g}": h.get_value_at_percentile(q) / 1000.0 for q in PERCENTILES}
    out["mean"] = round(h.get_mean_value() / 1000.0, 3)
    out["max"] = h.get_max_value() / 1000.0
    return out


def summarize(rec: np.ndarray, window: Window) -> dict[str, Any]:
    """Counts, rates and latency percentiles of the requests that ended inside ``window``.

    ``latency_ms`` is measured from the intended start (what a client of an open-loop
    service sees, queueing included); ``service_ms`` from the actual start; ``start_lag_ms``
    is how late requests started (the generator's or the connections' backlog).
    """
    secs = max(window.seconds, 0)
    lo, hi = window.start * 1_000_000_000, window.end * 1_000_000_000
    inside = rec[(rec["end"] >= lo) & (rec["end"] < hi)] if secs else rec[:0]
    ok = ok_mask(inside)
    per_op: dict[str, Any] = {}
    for code, name in enumerate(OPS):
        mine = inside[inside["op"] == code]
        if len(mine) == 0:
            continue
        good = mine[ok_mask(mine)]
        per_op[name] = {
            "requests": int(len(mine)),
            "errors": int(len(mine) - len(good)),
            "ops_per_s": round(len(good) / secs, 3) if secs else 0.0,
            "bytes_per_s": round(float(good["size"].sum()) / secs, 1) if secs else 0.0,
            **{lat: latency_summary((good[b] - good[a]) / 1000.0) for lat, a, b in LATENCIES},
        }
    return _summary(window, secs, int(len(inside)), int((~ok).sum()), int(ok.sum()), per_op)


def _summary(window: Window, secs: int, requests: int, errors: int, ok: int, per_op: dict[str, Any]) -> dict[str, Any]:
    return {
        "window": asdict(window),
        "seconds": secs,
        "requests": requests,
        "errors": errors,
        "ops_per_s": round(ok / secs, 3) if secs else 0.0,
        "per_op": per_op,
    }


# -- runs from several agents: per-second HDR histograms, added ---------------------------------

#: Per operation, per latency (``LATENCIES``), per second (by end time): the HDR histograms of
#: that second's successful requests, in HdrHistogram's own base64 encoding, one per agent.
SecondHistograms = dict[str, dict[str, dict[int, list[bytes]]]]


def second_histograms(rec: np.ndarray, seconds: int) -> SecondHistograms:
    """What an agent ships instead of its raw records (windows are whole seconds, so the
    summaries made from these equal :func:`summarize` of all agents' records together)."""
    sec = rec["end"] // 1_000_000_000
    good = rec[ok_mask(rec) & (sec >= 0) & (sec < max(0, int(seconds)))]
    gsec = good["end"] // 1_000_000_000
    h = new_hdr()
    out: SecondHistograms = {}
    for code, name in enumerate(OPS):
        mine = good["op"] == code
        if not mine.any():
            continue
        per_lat = out.setdefault(name, {})
        for lat, a, b in LATENCIES:
            values = (good[b][mine] - good[a][mine]) / 1000.0
            secs = gsec[mine]
            per_sec: dict[int, list[bytes]] = {}
            for s in np.unique(secs).tolist():
                h.reset()
                per_sec[int(s)] = [_hdr(values[secs == s], h).encode()]
            per_lat[lat] = per_sec
    return out


def merge_histograms(parts: Iterable[SecondHistograms]) -> SecondHistograms:
    out: SecondHistograms = {}
    for part in parts:
        for op, lats in part.items():
            for lat, secs in lats.items():
                dest = out.setdefault(op, {}).setdefault(lat, {})
                for s, encoded in secs.items():
                    dest.setdefault(int(s), []).extend(encoded)
    return out


def merge_series(parts: Iterable[Series], seconds: int) -> Series:
    """Agents' per-second series added, second by second, over the first ``seconds``."""
    ops: dict[str, OpSeries] = {}
    for part in parts:
        n = min(seconds, part.seconds)
        for name, s in part.ops.items():
            o = ops.setdefault(name, OpSeries(np.zeros(seconds, np.int64), np.zeros(seconds, np.int64),
                                              np.zeros(seconds, np.int64), np.zeros((seconds, GRID_BUCKETS), np.int64)))
            o.ok[:n] += s.ok[:n]
            o.errors[:n] += s.errors[:n]
            o.bytes[:n] += s.bytes[:n]
            o.hist[:n] += s.hist[:n]
    return Series(seconds, ops)


def summarize_merged(series: Series, hists: SecondHistograms, window: Window) -> dict[str, Any]:
    """:func:`summarize` of a window, from per-second series and histograms (several agents')."""
    secs = max(window.seconds, 0)
    lo, hi = window.start, min(window.end, series.seconds)
    per_op: dict[str, Any] = {}
    requests = errors = ok = 0
    for name in OPS:
        s = series.ops.get(name)
        if s is None or not secs:
            continue
        n_ok, n_err = int(s.ok[lo:hi].sum()), int(s.errors[lo:hi].sum())
        if n_ok + n_err == 0:
            continue
        requests, errors, ok = requests + n_ok + n_err, errors + n_err, ok + n_ok
        lats = {}
        for lat, _, _ in LATENCIES:
            h = new_hdr()
            for sec, encoded in hists.get(name, {}).get(lat, {}).items():
                if lo <= sec < hi:
                    for e in encoded:
                        try:
                            h.decode_and_add(e)
                        except (ValueError, zlib.error, *HDR_CODEC_ERRORS) as exc:
                            raise ValueError(f"{name} {lat} second {sec}: not an HDR histogram "
                                             f"({type(exc).__name__})") from None
            lats[lat] = hdr_summary(h)
        per_op[name] = {
            "requests": n_ok + n_err,
            "errors": n_err,
            "ops_per_s": round(n_ok / secs, 3),
            "bytes_per_s": round(float(s.bytes[lo:hi].sum()) / secs, 1),
            **lats,
        }
    return _summary(window, secs, requests, errors, ok, per_op)


def histograms_to_json(hists: SecondHistograms) -> dict[str, Any]:
    return {op: {lat: {str(s): [e.decode() for e in enc] for s, enc in secs.items()} for lat, secs in lats.items()}
            for op, lats in hists.items()}


def histograms_from_json(data: dict[str, Any]) -> SecondHistograms:
    out: SecondHistograms = {}
    for op, lats in data.items():
        if op not in OPS:
            raise ValueError(f"unknown operation {op!r} in the histograms")
        for lat, secs in lats.items():
            if lat not in {name for name, _, _ in LATENCIES}:
                raise ValueError(f"unknown latency {lat!r} in the histograms")
            out.setdefault(op, {})[lat] = {int(s): [str(e).encode() for e in enc] for s, enc in secs.items()}
    return out


def rate_stats(rates: np.ndarray) -> dict[str, float | None]:
    """Median, mean and coefficient of variation of per-second rates."""
    if len(rates) == 0:
        return {"median": None, "mean": None, "cv": None}
    mean = float(np.mean(rates))
    return {"median": float(np.median(rates)), "mean": round(mean, 3), "cv": _cv(rates)}


def _cv(rates: np.ndarray) -> float | None:
    if len(rates) < 2 or float(np.mean(rates)) == 0:
        return None
    return round(float(np.std(rates, ddof=1) / np.mean(rates)), 4)


# -- the verdict --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Tolerances:
    """Limits of a verdict; fractions unless said otherwise (see config [loadgen])."""

    max_rate_drop: float = 0.10
    max_cv_increase: float = 0.10
    max_p99_increase: float = 0.50
    max_errors: int = 0
    max_baseline_cv: float = 0.25
    min_window_s: float = 10.0
    min_op_samples: int = 200
    block_s: int = 5
    slow_seconds_alpha: float = 0.01
    slow_second_increase: float | None = None  # None: max_p99_increase
    confidence: float = 0.95
    resamples: int = 2000
    seed: int = 0


@dataclass
class VerdictCheck:
    """One metric: larger ``estimate`` is worse; [low, high] is its confidence interval."""

    name: str
    outcome: str
    estimate: float | None
    low: float | None
    high: float | None
    limit: float
    baseline: float | None = None
    candidate: float | None = None
    unit: str = ""
    text: str = ""


@dataclass
class Verdict:
    outcome: str
    reasons: list[str]
    checks: list[VerdictCheck] = field(default_factory=list)
    baseline: dict[str, Any] = field(default_factory=dict)
    candidate: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"outcome": self.outcome, "reasons": self.reasons, "checks": [asdict(c) for c in self.checks],
                "baseline": self.baseline, "candidate": self.candidate}


def judge(estimate: float, low: float, high: float, limit: float) -> str:
    """The three-way rule of the module doc, for a metric where larger is worse."""
    if low > 0 and estimate > limit:
        return FAIL
    if high <= limit:
        return PASS
    return INCONCLUSIVE


def block_starts(n: int, block: int, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(resamples, n) indices of a moving-block bootstrap of a length-n series."""
    block = max(1, min(block, n))
    k = math.ceil(n / block)
    starts = rng.integers(0, n - block + 1, size=(resamples, k))
    idx = (starts[:, :, None] + np.arange(block)[None, None, :]).reshape(resamples, k * block)
    return idx[:, :n]


def _ci(samples: np.ndarray, confidence: float) -> tuple[float, float]:
    samples = samples[np.isfinite(samples)]
    if len(samples) == 0:
        return math.nan, math.nan
    a = (1 - confidence) / 2 * 100
    lo, hi = np.percentile(samples, [a, 100 - a])
    return float(lo), float(hi)


def _cv_rows(x: np.ndarray) -> np.ndarray:
    mean = x.mean(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(mean > 0, x.std(axis=1, ddof=1) / mean, np.nan)


def _pct(x: float | None) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x * 100:+.1f}%"


def compare(base: Series, base_w: Window, cand: Series, cand_w: Window, tol: Tolerances,
            *, notes: Iterable[str] = ()) -> Verdict:
    """Judge ``cand_w`` of ``cand`` against ``base_w`` of ``base`` (may be the same series)."""
    b_ok = base.total_ok()[base_w.start:base_w.end].astype(float)
    c_ok = cand.total_ok()[cand_w.start:cand_w.end].astype(float)
    b_err = int(base.total_errors()[base_w.start:base_w.end].sum())
    c_err = int(cand.total_errors()[cand_w.start:cand_w.end].sum())
    v = Verdict(INCONCLUSIVE, list(notes), baseline={"window": asdict(base_w), "errors": b_err, **rate_stats(b_ok)},
                candidate={"window": asdict(cand_w), "errors": c_err, **rate_stats(c_ok)})

    # Errors are counted, not estimated: no interval needed.
    err_outcome = FAIL if c_err > tol.max_errors else PASS
    v.checks.append(VerdictCheck("errors", err_outcome, float(c_err), float(c_err), float(c_err), float(tol.max_errors),
                          float(b_err), float(c_err), "requests",
                          f"{c_err} failed requests in {cand_w.name} (limit {tol.max_errors})"))

    blockers = []
    for w, rates in ((base_w, b_ok), (cand_w, c_ok)):
        if w.seconds < tol.min_window_s:
            blockers.append(f"{w.name} window is {w.seconds} s, shorter than {tol.min_window_s:g} s "
                            f"(after the warm-up is trimmed)")
        elif rates.sum() == 0:
            blockers.append(f"no successful request in the {w.name} window")
    if b_err > tol.max_errors:
        blockers.append(f"the {base_w.name} window itself had {b_err} failed requests")
    b_cv = _cv(b_ok)
    if not blockers and b_cv is not None and b_cv > tol.max_baseline_cv:
        blockers.append(f"baseline too noisy: per-second ops/s CV {b_cv:.2f} > {tol.max_baseline_cv:.2f}")
    if blockers:
        v.reasons = blockers + v.reasons
        v.outcome = FAIL if err_outcome == FAIL else INCONCLUSIVE
        if err_outcome == FAIL:
            v.reasons.insert(0, v.checks[0].text)
        return v

    rng = np.random.default_rng(tol.seed)
    bi = block_starts(len(b_ok), tol.block_s, tol.resamples, rng)
    ci = block_starts(len(c_ok), tol.block_s, tol.resamples, rng)

    # 1. Median ops/s: drop = 1 - cand/base.
    b_med, c_med = float(np.median(b_ok)), float(np.median(c_ok))
    boot_b, boot_c = np.median(b_ok[bi], axis=1), np.median(c_ok[ci], axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        drops = 1 - boot_c / boot_b
    est = 1 - c_med / b_med if b_med > 0 else math.nan
    lo, hi = _ci(drops, tol.confidence)
    outcome = judge(est, lo, hi, tol.max_rate_drop) if math.isfinite(lo) else INCONCLUSIVE
    v.checks.append(VerdictCheck("median_ops_drop", outcome, est, lo, hi, tol.max_rate_drop, b_med, c_med, "fraction",
                          f"median ops/s {b_med:.1f} -> {c_med:.1f}: drop {_pct(est)} "
                          f"({tol.confidence:.0%} CI {_pct(lo)} to {_pct(hi)}; limit {tol.max_rate_drop:.0%})"))

    # 2. Coefficient of variation of per-second ops/s: increase = cand - base.
    c_cv = _cv(c_ok)
    if b_cv is not None and c_cv is not None:
        diffs = _cv_rows(c_ok[ci]) - _cv_rows(b_ok[bi])
        est = c_cv - b_cv
        lo, hi = _ci(diffs, tol.confidence)
        outcome = judge(est, lo, hi, tol.max_cv_increase) if math.isfinite(lo) else INCONCLUSIVE
        v.checks.append(VerdictCheck("cv_increase", outcome, est, lo, hi, tol.max_cv_increase, b_cv, c_cv, "absolute",
                              f"ops/s CV {b_cv:.3f} -> {c_cv:.3f}: {est:+.3f} "
                              f"(CI {lo:+.3f} to {hi:+.3f}; limit +{tol.max_cv_increase:.2f})"))

    # 3. p99 latency of each operation: increase = cand/base - 1.
    for op in OPS:
        if op not in base.ops or op not in cand.ops:
            continue
        bh = base.ops[op].hist[base_w.start:base_w.end]
        ch = cand.ops[op].hist[cand_w.start:cand_w.end]
        nb, nc = int(bh.sum()), int(ch.sum())
        if min(nb, nc) < tol.min_op_samples:
            v.reasons.append(f"{op} p99 not judged: {min(nb, nc)} requests in a window "
                             f"(need {tol.min_op_samples})")
            continue
        b99 = float(percentile_from_hist(bh.sum(axis=0), 99)[0])
        c99 = float(percentile_from_hist(ch.sum(axis=0), 99)[0])
        boot_b99 = _boot_percentile(bh, bi, 99)
        boot_c99 = _boot_percentile(ch, ci, 99)
        incs = boot_c99 / boot_b99 - 1
        est = c99 / b99 - 1
        lo, hi = _ci(incs, tol.confidence)
        outcome = judge(est, lo, hi, tol.max_p99_increase) if math.isfinite(lo) else INCONCLUSIVE
        v.checks.append(VerdictCheck(f"p99_increase_{op}", outcome, est, lo, hi, tol.max_p99_increase,
                              b99 / 1000, c99 / 1000, "fraction",
                              f"{op} p99 {b99 / 1000:.1f} ms -> {c99 / 1000:.1f} ms: {_pct(est)} "
                              f"(CI {_pct(lo)} to {_pct(hi)}; limit +{tol.max_p99_increase:.0%})"))

        slow = slow_seconds_check(op, bh, ch, tol)
        if slow is not None:
            v.checks.append(slow)

    outcomes = {c.outcome for c in v.checks}
    v.outcome = FAIL if FAIL in outcomes else INCONCLUSIVE if INCONCLUSIVE in outcomes else PASS
    lead = [c.text for c in v.checks if c.outcome == v.outcome] if v.outcome != PASS else []
    if v.outcome == INCONCLUSIVE:
        lead = [f"cannot tell from baseline noise: {t}" for t in lead]
    v.reasons = lead + v.reasons
    return v


#: A second with fewer requests of an operation than this has no per-second p99 of its own.
SLOW_SECOND_MIN_REQUESTS = 5


def slow_seconds_check(op: str, bh: np.ndarray, ch: np.ndarray, tol: Tolerances) -> VerdictCheck | None:
    """The rank test of the module doc on per-second p99 of ``op`` (None: too few seconds)."""
    b = percentile_from_hist(bh[bh.sum(axis=1) >= SLOW_SECOND_MIN_REQUESTS], 99)
    c = percentile_from_hist(ch[ch.sum(axis=1) >= SLOW_SECOND_MIN_REQUESTS], 99)
    n, m = len(b), len(c)
    if n < 2 or m < 2:
        return None
    worst = float(b.max())
    inc = tol.max_p99_increase if tol.slow_second_increase is None else tol.slow_second_increase
    threshold = worst * (1 + inc)
    k = int((c > threshold).sum())
    p = math.comb(m, k) / math.comb(n + m, k)
    outcome = FAIL if p < tol.slow_seconds_alpha else PASS
    return VerdictCheck(f"slow_seconds_{op}", outcome, float(k), None, None, tol.slow_seconds_alpha,
                 worst / 1000, float(c.max()) / 1000, "seconds",
                 f"{op}: {k} of {m} seconds with p99 over {threshold / 1000:.1f} ms (the baseline's slowest "
                 f"second {worst / 1000:.1f} ms +{inc:.0%}); p = {p:.3f} if the windows were "
                 f"alike (limit {tol.slow_seconds_alpha:g})")


def _boot_percentile(hist: np.ndarray, idx: np.ndarray, q: float, chunk: int = 200) -> np.ndarray:
    """The q-th percentile (us) of each bootstrap resample of per-second histograms."""
    used = np.nonzero(hist.sum(axis=0))[0]
    last = int(used.max()) + 1 if len(used) else 1
    h = hist[:, :last]
    out = np.empty(idx.shape[0])
    for i in range(0, idx.shape[0], chunk):
        out[i:i + chunk] = percentile_from_hist(h[idx[i:i + chunk]].sum(axis=1), q)
    return out


# -- results as JSON and back -------------------------------------------------------------------

def series_to_json(series: Series) -> dict[str, Any]:
    """Per-second series with sparse latency histograms: enough for ``compare`` to redo it all."""
    ops = {}
    for name, s in series.ops.items():
        hist = []
        for row in s.hist:
            nz = np.nonzero(row)[0]
            hist.append([[int(i), int(row[i])] for i in nz])
        ops[name] = {"ok": s.ok.tolist(), "errors": s.errors.tolist(), "bytes": s.bytes.tolist(),
                     "p50_ms": _rounded(s.p(50)), "p99_ms": _rounded(s.p(99)), "hist": hist}
    return {"seconds": series.seconds, "grid": {"min_us": GRID_MIN_US, "growth": GRID_GROWTH,
                                                 "buckets": GRID_BUCKETS}, "ops": ops}


def _rounded(x: np.ndarray) -> list[float | None]:
    return [None if not math.isfinite(v) else round(float(v), 3) for v in x]


def series_from_json(data: dict[str, Any]) -> Series:
    grid = data.get("grid", {})
    if (grid.get("min_us"), grid.get("growth"), grid.get("buckets")) != (GRID_MIN_US, GRID_GROWTH, GRID_BUCKETS):
        raise ValueError(f"latency grid {grid} differs from this version's; cannot compare")
    n = int(data["seconds"])
    # Never more seconds than the file holds: the dense histograms are allocated up front.
    held = min((len(d["ok"]) for d in data["ops"].values()), default=n)
    if not 0 <= n <= held:
        raise ValueError(f"the series claims {n} seconds but holds {held}")
    ops = {}
    for name, d in data["ops"].items():
        hist = np.zeros((n, GRID_BUCKETS), dtype=np.int64)
        for sec, row in enumerate(d["hist"][:n]):
            for i, c in row:
                hist[sec, i] = c
        ops[name] = OpSeries(np.asarray(d["ok"][:n], dtype=np.int64), np.asarray(d["errors"][:n], dtype=np.int64),
                             np.asarray(d["bytes"][:n], dtype=np.int64), hist)
    return Series(n, ops)


#: Version of the result JSON layout; ``compare`` refuses other versions.
RESULT_FORMAT = 1


def build_result(rec: np.ndarray, *, stop_s: float, warmup_s: float, spec: dict[str, Any],
                 events: list[dict[str, Any]], client_cpu: dict[str, Any], started_at: str,
                 notes: list[str], windows: list[Window] | None = None) -> dict[str, Any]:
    """The JSON of one run: spec, events, client CPU, per-second series, window summaries."""
    series = per_second(rec, int(math.floor(stop_s)))
    return result_document(series, lambda w: summarize(rec, w), stop_s=stop_s, warmup_s=warmup_s, spec=spec,
                           events=events, client_cpu=client_cpu, started_at=started_at, notes=notes, windows=windows)


def result_document(series: Series, summarize_window: Callable[[Window], dict[str, Any]], *, stop_s: float,
                    warmup_s: float, spec: dict[str, Any], events: list[dict[str, Any]], client_cpu: dict[str, Any],
                    started_at: str, notes: list[str], windows: list[Window] | None = None) -> dict[str, Any]:
    """The result JSON from a run's series and a way to summarize a window of it (from raw
    records on one host, from added per-second histograms for agents on several)."""
    run_w = run_window(stop_s, warmup_s)
    summaries = {w.name: summarize_window(w) for w in [run_w, *(windows or [])]}
    total = series.total_ok()
    return {
        "rgwkeeper_loadgen": RESULT_FORMAT,
        "started_at": started_at,
        "spec": spec,
        "stop_s": round(stop_s, 3),
        "warmup_s": warmup_s,
        "events": events,
        "client": client_cpu,
        "notes": notes,
        "windows": {name: s for name, s in summaries.items()},
        "rates": {"run": rate_stats(total[run_w.start:run_w.end].astype(float))},
        "series": series_to_json(series),
    }


def endpoint_rates(workers: list[dict[str, Any]], duration_s: float) -> list[dict[str, Any]]:
    """Load-phase requests, connection failures and requests per second per RGW endpoint, all
    workers added, in the order the endpoints were given."""
    totals: dict[str, list[int]] = {}
    for w in workers:
        for url, (n, failed) in w.get("endpoints", {}).items():
            t = totals.setdefault(url, [0, 0])
            t[0] += n
            t[1] += failed
    return [{"endpoint": url, "requests": n, "failures": failed,
             "per_s": round(n / duration_s, 1) if duration_s > 0 else None} for url, (n, failed) in totals.items()]


def client_cpu(worker_cpu_s: float, parent_cpu_s: float, requests: int) -> dict[str, Any]:
    """The generator's own CPU while load ran (workers and the collecting parent)."""
    total = worker_cpu_s + parent_cpu_s
    return {"worker_cpu_s": round(worker_cpu_s, 3), "parent_cpu_s": round(parent_cpu_s, 3),
            "requests": requests,
            "cpu_ms_per_request": round(total / requests * 1000, 4) if requests else None}


def load_result(data: dict[str, Any], source: str = "result") -> tuple[Series, Window]:
    """A result JSON's series and its run window (warm-up trimmed), for ``compare``."""
    if data.get("rgwkeeper_loadgen") != RESULT_FORMAT:
        raise ValueError(f"{source} is not an rgwkeeper loadgen result (format {RESULT_FORMAT})")
    w = data["windows"]["run"]["window"]
    return series_from_json(data["series"]), Window(source, int(w["start"]), int(w["end"]))
