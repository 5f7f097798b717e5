"""Harness start-to-ready time: warm (image cached) and, with --cold, with the image rebuilt.

    .venv/bin/python -m bench.cluster_start -n 3 [--cold]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from integration import engine as engine_mod
from integration import image as image_mod
from integration.cluster import CACHE_DIR, ContainerCluster


def one_start() -> dict[str, float]:
    cluster = ContainerCluster()
    t0 = time.monotonic()
    try:
        cluster.start()
        ready = time.monotonic() - t0
    finally:
        cluster.stop()
    return {"ready_s": round(ready, 2), **{k: round(v, 2) for k, v in cluster.timings.items()}}


def drop_image() -> None:
    eng = engine_mod.find_or_start(CACHE_DIR)
    try:
        client = eng.client()
        try:
            client.images.remove(image_mod.recipe_tag(), force=True)
        except Exception:  # noqa: BLE001 - absent is fine
            pass
        client.close()
    finally:
        eng.stop()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("-n", type=int, default=3)
    p.add_argument("--cold", action="store_true", help="remove the cached image first (one cold start)")
    args = p.parse_args()
    out: dict[str, object] = {}
    if args.cold:
        drop_image()
        out["cold"] = one_start()
    warm = [one_start() for _ in range(args.n)]
    out["warm"] = warm
    out["warm_ready_median_s"] = statistics.median(w["ready_s"] for w in warm)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
