"""What the purge did in each second of a traced ``bench.purge_pacing`` run (``@trace``).

``python -m bench.timeline DIR`` reads, for every ``verify-*.json`` in DIR whose maintenance was
traced, the per-second PUT p99 and the purge's debug log, and prints one line per second from
a second before the purge to its end: the p99 (marked ``*`` where it is above twice the
baseline's median per-second p99), then the purge's events that fell in that second (its steps,
each Ceph CLI process with its duration, each listing page). The purge's log is placed on the
load's clock by the wall-clock time its shell wrote just before it started.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import statistics
from pathlib import Path
from typing import Any, Iterator

_START = re.compile(r"date \+%s\.%N > (\S+);")


def _label(e: dict[str, Any]) -> str | None:
    ev = e.get("event", "")
    if ev == "purge step":
        return f"[{e.get('step')}]"
    if ev == "ceph cli start":
        return f"{e.get('binary')} {' '.join(e.get('args', [])[:2])}>"
    if ev == "ceph cli done":
        return f"<{' '.join(e.get('args', [])[:2])} {e.get('ms', 0):.0f}ms"
    if ev in ("purge s3 page", "purge index page"):
        return f"page{e.get('entries', e.get('rows'))}"
    if ev == "purge checkpoint saved":
        return "ckpt"
    if ev.startswith("purge item"):
        return ev.replace("purge ", "") + f" {e.get('item', '')}"
    return None


def timeline(verify: dict[str, Any], start_wall: float, log_lines: list[str]) -> Iterator[str]:
    """The lines for one run: ``verify`` its JSON, ``start_wall`` the purge's start (epoch s)."""
    ev = {e["kind"]: e["t"] for e in verify["events"]}
    t_start, t_end = ev["maintenance-start"], ev.get("maintenance-end", verify["stop_s"])
    p99 = verify["series"]["ops"]["PUT"]["p99_ms"]
    base = verify["windows"]["baseline"]["window"]
    med = statistics.median(x for x in p99[base["start"]:base["end"]] if x is not None)
    per_second: dict[int, list[str]] = {}
    for line in log_lines:
        try:
            e = json.loads(line)
            wall = datetime.datetime.fromisoformat(e["timestamp"].replace("Z", "+00:00")).timestamp()
        except (ValueError, KeyError):
            continue
        label = _label(e)
        if label is not None:
            per_second.setdefault(int(t_start + wall - start_wall), []).append(label)
    yield f"baseline median p99 {med:.1f} ms; purge from t={t_start:.2f} to t={t_end:.2f}"
    for i in range(int(t_start) - 1, min(len(p99), int(t_end) + 2)):
        v = p99[i]
        mark = "*" if v is not None and v > 2 * med else " "
        text = f"{v:6.1f}" if v is not None else "     -"
        yield f"{i:4d} {text}{mark} {' '.join(per_second.get(i, []))}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path)
    args = parser.parse_args(argv)
    found = 0
    for path in sorted(args.dir.glob("verify-*.json")):
        verify = json.loads(path.read_text())
        m = _START.search(" ".join(verify.get("maintenance", {}).get("argv") or []))
        if m is None:
            continue
        start = Path(m.group(1))
        log = start.with_suffix(".log")
        found += 1
        print(f"== {path.name} {verify['verdict']['outcome']}")
        for line in timeline(verify, float(start.read_text()), log.read_text().splitlines()):
            print(line)
    if not found:
        raise SystemExit(f"{args.dir}: no traced run (a mode with @trace, run with --keep)")


if __name__ == "__main__":
    main()
