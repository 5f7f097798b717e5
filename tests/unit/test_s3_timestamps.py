"""The S3 client's timestamp parser: ISO 8601 with a zone (every listing's LastModified) without
dateutil, everything else as botocore parses it, and the same instant either way."""

from __future__ import annotations

import datetime

import botocore.utils
import pytest
from botocore.awsrequest import AWSResponse

from rgwkeeper.access import RgwCredentials
from rgwkeeper.adapters.s3 import S3Adapter, make_client, parse_timestamp

ISO_WITH_ZONE = [
    "2026-11-28T04:33:27.123Z",  # RGW's form in ListObjectsV2 and ListObjectVersions
    "2026-11-28T04:33:27Z",
    "2026-11-28T04:33:27.123456Z",
    "2026-11-28T04:33:27.123456789Z",  # more digits than a datetime holds: truncated, as dateutil does
    "2026-11-28T04:33:27.1+00:00",
    "2026-11-28T05:33:27.500+01:00",
    "1970-01-01T00:00:00.000Z",
]
OTHERS = [
    "Sat, 28 Nov 2026 04:33:27 GMT",  # a HEAD's Last-Modified header
    "1795919607",  # epoch seconds
    1795919607.25,
    "2026-11-28T04:33:27.123",  # no zone: botocore decides what it means
    "2026-11-28 04:33:27Z",
]


@pytest.mark.parametrize("value", ISO_WITH_ZONE)
def test_iso_with_a_zone_takes_the_fast_path_and_names_the_same_instant(value):
    ours, botocores = parse_timestamp(value), botocore.utils.parse_timestamp(value)
    assert ours.tzinfo is not None and ours.utcoffset() == botocores.utcoffset()
    assert ours == botocores and ours.timestamp() == botocores.timestamp()
    assert type(ours.tzinfo) is datetime.timezone  # not one of dateutil's: the fast path was taken


@pytest.mark.parametrize("value", OTHERS)
def test_anything_else_is_botocores_answer(value):
    assert parse_timestamp(value) == botocore.utils.parse_timestamp(value)


@pytest.mark.parametrize("value", ["2026-13-28T04:33:27Z", "2026-11-28Tnot-a-time", "garbage", ""])
def test_what_botocore_refuses_is_refused(value):
    with pytest.raises(ValueError):
        botocore.utils.parse_timestamp(value)
    with pytest.raises(ValueError):
        parse_timestamp(value)


LISTING = b"""<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>bkt</Name><Prefix></Prefix>
<MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated><KeyCount>2</KeyCount>
<Contents><Key>a</Key><LastModified>2026-11-28T04:33:27.123Z</LastModified><ETag>&quot;x&quot;</ETag>
<Size>4096</Size><StorageClass>STANDARD</StorageClass></Contents>
<Contents><Key>b</Key><LastModified>2026-11-28T04:33:28.000Z</LastModified><ETag>&quot;y&quot;</ETag>
<Size>1</Size><StorageClass>STANDARD</StorageClass></Contents></ListBucketResult>"""


def test_the_adapters_client_parses_a_listing_with_it():
    client = make_client("http://rgw.invalid:8080", RgwCredentials("AK", "s3cr3t-value"), timeout_s=5)
    sent = []

    def answer(request, **_):
        sent.append(request.url)
        return AWSResponse(request.url, 200, {"Content-Type": "application/xml"}, _Raw(LISTING))

    client.meta.events.register("before-send.s3.ListObjectsV2", answer)
    pages = list(S3Adapter(client).iter_pages("bkt"))
    assert len(sent) == 1
    got = [(e["Key"], e["LastModified"]) for e in pages[0]]
    utc = datetime.timezone.utc
    assert got == [("a", datetime.datetime(2026, 11, 28, 4, 33, 27, 123000, tzinfo=utc)),
                   ("b", datetime.datetime(2026, 11, 28, 4, 33, 28, tzinfo=utc))]
    assert all(type(e["LastModified"].tzinfo) is datetime.timezone for e in pages[0])


class _Raw:
    """The raw body botocore reads an answer from."""

    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **_):
        yield self.body
