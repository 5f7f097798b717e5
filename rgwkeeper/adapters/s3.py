"""S3 adapter (boto3): bucket create, listing, lifecycle configuration.

Path-style addressing (RGW test and on-prem endpoints rarely have wildcard DNS), SigV4,
bounded connect/read timeouts and a bounded retry count, so no call waits forever.
"""

from __future__ import annotations

import asyncio
import datetime
import email.utils
from typing import Any, Callable, Iterator, Sequence

import boto3
import botocore.session
import botocore.utils
from botocore.config import Config as BotoConfig
from botocore.exceptions import (BotoCoreError, ClientError, ConnectTimeoutError, EndpointConnectionError,
                                 HTTPClientError, ReadTimeoutError)

from rgwkeeper.access import RgwCredentials
from rgwkeeper.adapters.endpoints import Endpoints
from rgwkeeper.errors import CephError, CephTimeout, CephUnreachable, NotFound
from rgwkeeper.names import validate_bucket, validate_prefix


def make_s3(endpoints: Sequence[str], credentials: RgwCredentials, *, timeout_s: float, max_pool: int = 32) -> "S3Adapter":
    """An S3Adapter over one or several endpoints of one zone (requests spread, failures moved).
    With several, botocore does not retry: its three attempts at a refused or silent endpoint
    (backoff, or a connect timeout each) would come before the request moves to the next one."""
    retries = {"max_attempts": 3} if len(endpoints) == 1 else {"total_max_attempts": 1}
    return S3Adapter(Endpoints({url: make_client(url, credentials, timeout_s=timeout_s, max_pool=max_pool,
                                                 retries=retries) for url in endpoints}))


def parse_timestamp(value: Any) -> Any:
    """botocore's timestamp parser with a fast path for ISO 8601 with a zone, the form of every
    LastModified in a listing: botocore hands each to dateutil, most of what a listing page
    costs to parse (docs/purge.md, "Listing pages and the GIL"). Anything else (RFC 1123
    headers, epochs, no zone) goes to botocore's own parser."""
    if isinstance(value, str) and len(value) >= 20 and value[4] == "-" and value[10] == "T":
        try:
            parsed = datetime.datetime.fromisoformat(value)
        except ValueError:
            pass
        else:
            if parsed.tzinfo is not None:
                return parsed
    return botocore.utils.parse_timestamp(value)


def make_client(endpoint: str, credentials: RgwCredentials, *, timeout_s: float, max_pool: int = 32,
                retries: dict[str, int] | None = None, stock_parser: bool = False) -> Any:
    """One endpoint's boto3 client. ``stock_parser``: botocore's own timestamp parser, for
    bench.s3_parse to compare against; rgwkeeper never sets it."""
    core = botocore.session.get_session()
    if not stock_parser:
        core.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=parse_timestamp)
    return boto3.session.Session(botocore_session=core).client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=credentials.access_key,
        aws_secret_access_key=credentials.secret_key,
        region_name="default",
        config=BotoConfig(
            signature_version="s3v4",
            s3={"addressing_style": "path"},
            connect_timeout=timeout_s,
            read_timeout=timeout_s,
            retries={**(retries or {"max_attempts": 3}), "mode": "standard"},
            max_pool_connections=max_pool,
        ),
    )


#: Error codes of an RGW that sheds load (rgw_max_concurrent_requests, a rate limit) or is going away.
THROTTLED = ("SlowDown", "ServiceUnavailable", "503")


def _refused(exc: BaseException) -> bool:
    """The request never reached RGW: it may go to another endpoint."""
    return isinstance(exc, (EndpointConnectionError, ConnectTimeoutError))


class S3Adapter:
    """S3 calls, to one boto3 client or spread over several endpoints' (an ``Endpoints``)."""

    def __init__(self, client: Any) -> None:
        self.endpoints: Endpoints[Any] = client if isinstance(client, Endpoints) else Endpoints({"rgw": client})
        self.client = self.endpoints.first()

    def _call(self, what: str, fn: str | Callable[[Any], Any], **kwargs: Any) -> Any:
        """``client.<fn>(**kwargs)`` (or ``fn(client)``) on one endpoint's client, errors mapped."""
        def one(client: Any) -> Any:
            return getattr(client, fn)(**kwargs) if isinstance(fn, str) else fn(client)

        try:
            return self.endpoints.call(one, refused=_refused)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "?")
            if code in ("NoSuchBucket", "NoSuchKey", "NoSuchLifecycleConfiguration", "404"):
                raise NotFound(what, code) from None
            if code in THROTTLED:  # RGW shedding load or restarting: retried by the caller's policy
                raise CephUnreachable(what, f"{code}: RGW is busy or unavailable") from None
            raise CephError(what, code) from None
        except (ConnectTimeoutError, ReadTimeoutError):
            raise CephTimeout(what, "S3 request timed out") from None
        except HTTPClientError as exc:
            # The connection broke mid-request (an RGW stopping: ConnectionClosedError). The
            # request may have run; every S3 call here is safe to repeat, so the caller's retry
            # policy takes it like an unreachable RGW (botocore retried these itself before an
            # S3Adapter had several endpoints; docs/cluster-access.md).
            raise CephUnreachable(what, f"the connection to RGW broke ({type(exc).__name__})") from None
        except EndpointConnectionError:
            n = len(self.endpoints.urls)
            raise CephUnreachable(what, "cannot connect to the RGW endpoint" if n == 1 else
                                  f"cannot connect to any of the {n} RGW endpoints") from None
        except BotoCoreError as exc:
            raise CephError(what, type(exc).__name__) from None

    def create_bucket(self, bucket: str) -> None:
        validate_bucket(bucket)
        self._call(f"CreateBucket {bucket}", "create_bucket", Bucket=bucket)

    def bucket_exists(self, bucket: str) -> bool:
        validate_bucket(bucket)
        try:
            self._call(f"HeadBucket {bucket}", "head_bucket", Bucket=bucket)
            return True
        except NotFound:
            return False

    def iter_keys(self, bucket: str, prefix: str | None = None, page_size: int = 1000) -> Iterator[dict[str, Any]]:
        """Every object (Key, Size, LastModified) under ``prefix``, page by page."""
        for page in self.iter_pages(bucket, prefix, page_size=page_size):
            yield from page

    def get_lifecycle(self, bucket: str) -> list[dict[str, Any]]:
        validate_bucket(bucket)
        try:
            out = self._call(f"GetBucketLifecycleConfiguration {bucket}",
                             "get_bucket_lifecycle_configuration", Bucket=bucket)
        except NotFound as exc:
            if exc.detail == "NoSuchLifecycleConfiguration":
                return []
            raise
        return out.get("Rules", [])

    def put_lifecycle(self, bucket: str, rules: list[dict[str, Any]]) -> None:
        validate_bucket(bucket)
        self._call(f"PutBucketLifecycleConfiguration {bucket}",
                   "put_bucket_lifecycle_configuration",
                   Bucket=bucket, LifecycleConfiguration={"Rules": rules})

    async def acreate_bucket(self, bucket: str) -> None:
        await asyncio.to_thread(self.create_bucket, bucket)

    # -- bulk delete (purge) -----------------------------------------------------------------
    def iter_pages(self, bucket: str, prefix: str | None = None, *, start_after: str | None = None,
                   page_size: int = 1000) -> Iterator[list[dict[str, Any]]]:
        """ListObjectsV2 page by page (Key, Size, ETag, LastModified), after ``start_after``."""
        validate_bucket(bucket)
        kwargs: dict[str, Any] = {"Bucket": bucket, "MaxKeys": page_size}
        if prefix is not None:
            kwargs["Prefix"] = validate_prefix(prefix)
        if start_after:
            kwargs["StartAfter"] = start_after
        while True:
            page = self._call(f"ListObjectsV2 {bucket}", "list_objects_v2", **kwargs)
            yield page.get("Contents", [])
            if not page.get("IsTruncated"):
                return
            kwargs.pop("StartAfter", None)
            kwargs["ContinuationToken"] = page["NextContinuationToken"]

    def iter_version_pages(self, bucket: str, prefix: str | None = None, *, key_marker: str | None = None,
                           version_marker: str | None = None,
                           page_size: int = 1000) -> Iterator[tuple[list[dict[str, Any]], tuple[str, str] | None]]:
        """ListObjectVersions page by page: versions and delete markers (``DeleteMarker`` True),
        each with Key, VersionId, LastModified, IsLatest (and Size, ETag for versions), with the
        (KeyMarker, VersionIdMarker) that lists what follows the page (None after the last)."""
        validate_bucket(bucket)
        kwargs: dict[str, Any] = {"Bucket": bucket, "MaxKeys": page_size}
        if prefix is not None:
            kwargs["Prefix"] = validate_prefix(prefix)
        if key_marker:
            kwargs["KeyMarker"] = key_marker
            if version_marker:
                kwargs["VersionIdMarker"] = version_marker
        while True:
            page = self._call(f"ListObjectVersions {bucket}", "list_object_versions", **kwargs)
            entries = [{**v, "DeleteMarker": False} for v in page.get("Versions", [])]
            entries += [{**m, "DeleteMarker": True} for m in page.get("DeleteMarkers", [])]
            if not page.get("IsTruncated"):
                yield entries, None
                return
            after = (page["NextKeyMarker"], page.get("NextVersionIdMarker", ""))
            yield entries, after
            kwargs["KeyMarker"], kwargs["VersionIdMarker"] = after

    def delete_batch(self, bucket: str, objects: list[dict[str, str]]) -> list[dict[str, Any]]:
        """One DeleteObjects request (at most 1000 keys, optionally with VersionId); returns the
        per-key errors RGW reported (a key that does not exist is not an error)."""
        validate_bucket(bucket)
        if not 0 < len(objects) <= 1000:
            raise ValueError(f"DeleteObjects takes 1 to 1000 keys, got {len(objects)}")
        out = self._call(f"DeleteObjects {bucket} ({len(objects)} keys)", "delete_objects",
                         Bucket=bucket, Delete={"Objects": objects, "Quiet": True})
        return out.get("Errors", [])

    def iter_uploads(self, bucket: str, prefix: str | None = None) -> Iterator[dict[str, Any]]:
        """Incomplete multipart uploads (Key, UploadId, Initiated)."""
        validate_bucket(bucket)
        kwargs: dict[str, Any] = {"Bucket": bucket, "MaxUploads": 1000}
        if prefix is not None:
            kwargs["Prefix"] = validate_prefix(prefix)
        while True:
            page = self._call(f"ListMultipartUploads {bucket}", "list_multipart_uploads", **kwargs)
            yield from page.get("Uploads", [])
            if not page.get("IsTruncated"):
                return
            kwargs["KeyMarker"] = page["NextKeyMarker"]
            kwargs["UploadIdMarker"] = page["NextUploadIdMarker"]

    def abort_upload(self, bucket: str, key: str, upload_id: str) -> None:
        validate_bucket(bucket)
        try:
            self._call(f"AbortMultipartUpload {bucket}", "abort_multipart_upload",
                       Bucket=bucket, Key=key, UploadId=upload_id)
        except CephError as exc:
            if exc.detail != "NoSuchUpload":  # already aborted or completed: nothing to do
                raise

    def delete_bucket(self, bucket: str) -> None:
        validate_bucket(bucket)
        self._call(f"DeleteBucket {bucket}", "delete_bucket", Bucket=bucket)

    def delete_lifecycle(self, bucket: str) -> None:
        validate_bucket(bucket)
        self._call(f"DeleteBucketLifecycle {bucket}", "delete_bucket_lifecycle", Bucket=bucket)

    def versioning(self, bucket: str) -> str:
        """"Enabled", "Suspended", or "" if versioning was never turned on."""
        validate_bucket(bucket)
        out = self._call(f"GetBucketVersioning {bucket}", "get_bucket_versioning", Bucket=bucket)
        return out.get("Status", "")

    def get_object_tags(self, bucket: str, key: str) -> dict[str, str] | None:
        """The current version's tag set, or None if the key is gone."""
        validate_bucket(bucket)
        try:
            out = self._call(f"GetObjectTagging {bucket}", "get_object_tagging", Bucket=bucket, Key=key)
        except NotFound as exc:
            if exc.detail != "NoSuchKey":
                raise  # NoSuchBucket is not "this key has no tags"
            return None
        return {t["Key"]: t["Value"] for t in out.get("TagSet", [])}

    def rgw_date(self, bucket: str) -> float:
        """RGW's clock: the Date header of a HeadBucket answer (whole seconds), as epoch seconds.
        An error answer (404: no such bucket) carries RGW's clock too."""
        validate_bucket(bucket)

        def head(client: Any) -> Any:
            try:
                return client.head_bucket(Bucket=bucket)
            except ClientError as exc:
                return exc.response

        out = self._call(f"HeadBucket {bucket}", head)
        date = out.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
        try:
            return email.utils.parsedate_to_datetime(date).timestamp()
        except (TypeError, ValueError):
            raise CephError(f"HeadBucket {bucket}", f"no usable Date header in RGW's answer ({str(date)[:40]!r})") from None

    def check_list_access(self, bucket: str) -> None:
        """One ListObjectsV2 of one key: NotFound if S3 finds no such bucket, CephError with RGW's
        code if it refuses (AccessDenied: not this user's bucket; InvalidAccessKeyId,
        SignatureDoesNotMatch, RequestTimeTooSkewed: the credentials or the clock)."""
        validate_bucket(bucket)
        self._call(f"ListObjectsV2 {bucket}", "list_objects_v2", Bucket=bucket, MaxKeys=1)

    def list_delimited(self, bucket: str, prefix: str, delimiter: str = "/",
                       max_keys: int = 1000) -> tuple[list[str], list[str], bool]:
        """One ListObjectsV2 page with a delimiter: (keys, common prefixes, truncated)."""
        validate_bucket(bucket)
        page = self._call(f"ListObjectsV2 {bucket}", "list_objects_v2", Bucket=bucket,
                          Prefix=validate_prefix(prefix), Delimiter=delimiter, MaxKeys=max_keys)
        return ([o["Key"] for o in page.get("Contents", [])], [c["Prefix"] for c in page.get("CommonPrefixes", [])],
                bool(page.get("IsTruncated")))

    def head_object(self, bucket: str, key: str, version_id: str | None = None) -> dict[str, Any] | None:
        validate_bucket(bucket)
        extra = {"VersionId": version_id} if version_id else {}
        try:
            return self._call(f"HeadObject {bucket}", "head_object", Bucket=bucket, Key=key, **extra)
        except NotFound:
            return None
