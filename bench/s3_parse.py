"""What one ListObjectsV2 page costs the client to parse: a plain boto3 client (the stock
parser, which hands every LastModified to dateutil) against rgwkeeper's S3 client (its fast
ISO 8601 path), the same page answered in-process, no cluster and no network.

    .venv/bin/python -m bench.s3_parse [--keys 1000] [--pages 50] [--repeat 5] [--json]

It prints the CPU milliseconds per page of each, the median of ``--repeat`` rounds of
``--pages`` pages, and the ratio stock / rgwkeeper; results in docs/purge.md ("Listing pages
and the GIL").
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from botocore.awsrequest import AWSResponse

ENDPOINT = "http://rgw.invalid:8080"


def listing(keys: int) -> bytes:
    """A ListObjectsV2 answer as RGW writes it: ``keys`` 4 KiB objects, one page."""
    rows = "".join(
        f"<Contents><Key>obj-{i:08d}</Key><LastModified>2026-11-28T04:{i // 60 % 60:02d}:{i % 60:02d}.{i % 1000:03d}Z"
        f"</LastModified><ETag>&quot;{i:032x}&quot;</ETag><Size>4096</Size><StorageClass>STANDARD</StorageClass>"
        "<Owner><ID>bench</ID><DisplayName>bench</DisplayName></Owner><Type>Normal</Type></Contents>"
        for i in range(keys))
    return ('<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            f"<Name>bkt</Name><Prefix></Prefix><MaxKeys>{keys}</MaxKeys><IsTruncated>false</IsTruncated>"
            f"<KeyCount>{keys}</KeyCount>{rows}</ListBucketResult>").encode()


class _Raw:
    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **_: Any) -> Any:
        yield self.body


def answering(client: Any, body: bytes) -> Any:
    """``client`` with every ListObjectsV2 answered in-process with ``body``."""
    client.meta.events.register(
        "before-send.s3.ListObjectsV2",
        lambda request, **_: AWSResponse(request.url, 200, {"Content-Type": "application/xml"}, _Raw(body)))
    return client


def clients(body: bytes) -> dict[str, Any]:
    import boto3
    from botocore.config import Config

    from rgwkeeper.access import RgwCredentials
    from rgwkeeper.adapters.s3 import make_client

    stock = boto3.session.Session().client("s3", endpoint_url=ENDPOINT, aws_access_key_id="AK",
                                           aws_secret_access_key="bench-secret", region_name="default",
                                           config=Config(s3={"addressing_style": "path"}))
    ours = make_client(ENDPOINT, RgwCredentials("AK", "bench-secret"), timeout_s=5)
    return {"stock boto3": answering(stock, body), "rgwkeeper": answering(ours, body)}


def cpu_ms_per_page(client: Any, pages: int) -> float:
    t0 = time.process_time()
    for _ in range(pages):
        page = client.list_objects_v2(Bucket="bkt", MaxKeys=1000)
    took = time.process_time() - t0
    if not page.get("Contents"):
        raise SystemExit("the answer parsed to no keys: the bench's listing is wrong")
    return took * 1000 / pages


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--keys", type=int, default=1000, help="keys per page (default 1000, S3's most)")
    p.add_argument("--pages", type=int, default=50)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    for name in ("keys", "pages", "repeat"):
        if not 1 <= getattr(args, name) <= 100_000:
            p.error(f"--{name} must be from 1 to 100000")
    body = listing(args.keys)
    made = clients(body)
    for c in made.values():
        cpu_ms_per_page(c, 2)  # warm: the first call loads the service model
    rounds: dict[str, list[float]] = {name: [] for name in made}
    for _ in range(args.repeat):
        for name, c in made.items():
            rounds[name].append(cpu_ms_per_page(c, args.pages))
    med = {name: statistics.median(r) for name, r in rounds.items()}
    result = {"keys": args.keys, "pages": args.pages, "repeat": args.repeat,
              "cpu_ms_per_page": {k: round(v, 2) for k, v in med.items()},
              "stock_over_rgwkeeper": round(med["stock boto3"] / med["rgwkeeper"], 2)}
    if args.json:
        print(json.dumps(result))
        return
    for name, ms in med.items():
        print(f"{name:12s} {ms:8.2f} CPU ms per page of {args.keys} keys (median of {args.repeat} x {args.pages})")
    print(f"ratio stock / rgwkeeper: {result['stock_over_rgwkeeper']:.2f}")


if __name__ == "__main__":
    main()
