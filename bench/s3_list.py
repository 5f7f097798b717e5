"""A listing and nothing else, as a command for `rgwkeeper verify --maintenance-cmd`: list a
bucket through S3 (ListObjectsV2, ``--page`` keys a request) at ``--rate`` keys/s, page after
page on a fixed schedule, and delete nothing. Is the listing a capped purge does what ingest
notices? (bench.purge_pacing's ``list-s3`` mode.)

    .venv/bin/python -m bench.s3_list --endpoint URL --credentials FILE --rate 450 BUCKET
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from typing import Any, Callable


def _positive(text: str) -> float:
    try:
        value = float(text) if text == text.strip() else math.nan
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a finite number above 0")
    return value


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--endpoint", required=True)
    p.add_argument("--credentials", type=Path, required=True, help="the harness's 0600 credentials file")
    p.add_argument("--rate", type=_positive, required=True, help="keys listed a second")
    p.add_argument("--page", type=int, choices=range(1, 1001), default=1000, metavar="1-1000",
                   help="keys a request (default 1000)")
    p.add_argument("bucket")
    args = p.parse_args(argv)
    from bench.s3_one_batch import client

    listed = list_at(client(args.endpoint, args.credentials), args.bucket, args.rate, args.page)
    print(f"listed {listed} keys")


def list_at(s3: Any, bucket: str, rate: float, page: int, *, clock: Callable[[], float] = time.monotonic,
            sleep: Callable[[float], None] = time.sleep) -> int:
    """List every key, a request of ``page`` keys when the schedule (``rate`` keys/s from the
    start) reaches it: no catching up in bursts after a slow request. Returns the keys listed."""
    token: dict[str, Any] = {}
    listed = 0
    due = clock()
    while True:
        wait = due - clock()
        if wait > 0:
            sleep(wait)
        due = max(due, clock()) + page / rate
        answer = s3.list_objects_v2(Bucket=bucket, MaxKeys=page, **token)
        listed += len(answer.get("Contents", []))
        if not answer.get("IsTruncated"):
            return listed
        token = {"ContinuationToken": answer["NextContinuationToken"]}


if __name__ == "__main__":
    main()
