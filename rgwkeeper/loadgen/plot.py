"""PNG of a load run: ops/s and p99 latency per operation over time, events and windows marked.

matplotlib with the Agg backend (no display needed); imported only when a plot is asked for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from rgwkeeper.loadgen.analysis import Series

_WINDOW_COLOURS = {"baseline": "#2a9d8f", "maintenance": "#e76f51"}


def plot_run(series: Series, path: Path, *, title: str, events: list[dict[str, Any]] = (),  # type: ignore[assignment]
             windows: list[dict[str, Any]] = (), warmup_s: float = 0.0) -> Path:  # type: ignore[assignment]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_rate, ax_p99) = plt.subplots(2, 1, sharex=True, figsize=(11, 6.5), constrained_layout=True)
    t = np.arange(series.seconds) + 0.5
    for name, s in series.ops.items():
        ax_rate.plot(t, s.ok, label=f"{name} ok/s", lw=1.2)
        if s.errors.any():
            ax_rate.plot(t, s.errors, ls=":", lw=1, label=f"{name} errors/s")
        ax_p99.plot(t, s.p(99), label=f"{name} p99", lw=1.2)
    if len(series.ops) > 1:
        ax_rate.plot(t, series.total_ok(), color="black", lw=1.5, label="all ok/s")
    ax_rate.set_ylabel("requests/s (by end time)")
    ax_p99.set_ylabel("p99 latency, ms (from intended start)")
    ax_p99.set_yscale("log")
    ax_p99.set_xlabel("seconds since start")
    for ax in (ax_rate, ax_p99):
        if warmup_s > 0:
            ax.axvspan(0, warmup_s, color="grey", alpha=0.12, lw=0)
        for w in windows:
            ax.axvspan(w["start"], w["end"], color=_WINDOW_COLOURS.get(w["name"], "#8888cc"), alpha=0.10, lw=0)
        for ev in events:
            ax.axvline(ev["t"], color="#c1121f" if "start" in ev["kind"] else "#6a040f", ls="--", lw=1)
        ax.grid(True, alpha=0.3)
    top = ax_rate.get_ylim()[1]
    for ev in events:
        ax_rate.annotate(f"{ev['kind']}: {ev['what']}"[:60], (ev["t"], top), rotation=90, va="top", ha="right",
                         fontsize=7, color="#6a040f")
    for w in windows:
        ax_rate.annotate(w["name"], ((w["start"] + w["end"]) / 2, 0), ha="center", va="bottom", fontsize=8,
                         color=_WINDOW_COLOURS.get(w["name"], "#444"))
    ax_rate.legend(loc="upper left", fontsize=7, ncol=3)
    ax_p99.legend(loc="upper left", fontsize=7, ncol=4)
    fig.suptitle(title, fontsize=10)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
