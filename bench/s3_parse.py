"""What one ListObjectsV2 call of a 1,000-key page costs the client (build, sign, parse the
reply): rgwkeeper's S3 client with botocore's timestamp parser (the stock one, which hands
every LastModified to dateutil) against the same client with its own ISO 8601 path, the page
answered in-process, no cluster and no network.

    .venv/bin/python -m bench.s3_parse [--keys 1000] [--pages 50] [--repeat 5] [--json]

It prints the CPU milliseconds per call of each, the median of ``--repeat`` rounds of
``--pages`` calls, and the ratio botocore's / rgwkeeper's; results in docs/purge.md ("Listing pages
and the GIL").
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any, Callable

from botocore.awsrequest import AWSResponse

ENDPOINT = "http://rgw.invalid:8080"


def listing(keys: int) -> bytes:
    """A ListObjectsV2 answer of ``keys`` 4 KiB objects, one page, with the fields a listing
    entry carries (LastModified to the millisecond with a Z, as RGW stamps it); not captured
    from RGW, so its size is close to, not equal to, a real page's."""
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
    """rgwkeeper's S3 client twice, alike but for the timestamp parser."""
    from rgwkeeper.access import RgwCredentials
    from rgwkeeper.adapters.s3 import make_client

    creds = RgwCredentials("AK", "bench-secret")
    return {"botocore's parser": answering(make_client(ENDPOINT, creds, timeout_s=5, stock_parser=True), body),
            "rgwkeeper's": answering(make_client(ENDPOINT, creds, timeout_s=5), body)}


def cpu_ms_per_page(client: Any, pages: int) -> float:
    t0 = time.process_time()
    for _ in range(pages):
        page = client.list_objects_v2(Bucket="bkt", MaxKeys=1000)
    took = time.process_time() - t0
    if not page.get("Contents"):
        raise SystemExit("the answer parsed to no keys: the bench's listing is wrong")
    return took * 1000 / pages


def _count(name: str) -> Callable[[str], int]:
    """A whole number from 1 to 100,000, typed as rgwkeeper's own options are (no padding,
    no ``nan``, no ``1_000``)."""
    from rgwkeeper.errors import UsageError
    from rgwkeeper.units import parse_number

    def parse(text: str) -> int:
        try:
            return int(parse_number(text, name, lo=1, hi=100_000, integer=True))
        except UsageError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--keys", type=_count("--keys"), default=1000, help="keys per page (default 1000, S3's most)")
    p.add_argument("--pages", type=_count("--pages"), default=50)
    p.add_argument("--repeat", type=_count("--repeat"), default=5)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
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
              "cpu_ms_per_call": {k: round(v, 2) for k, v in med.items()},
              "stock_over_rgwkeeper": round(med["botocore's parser"] / med["rgwkeeper's"], 2)}
    if args.json:
        print(json.dumps(result))
        return
    for name, ms in med.items():
        print(f"{name:18s} {ms:8.2f} CPU ms per call, a page of {args.keys} keys "
              f"(median of {args.repeat} x {args.pages})")
    print(f"ratio botocore's / rgwkeeper's: {result['stock_over_rgwkeeper']:.2f}")


if __name__ == "__main__":
    main()
