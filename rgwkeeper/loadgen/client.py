"""A small S3 client for load generation: hand-written SigV4 and HTTP/1.1 on asyncio.

Why not boto3, aiobotocore or aiohttp: on the project's 2-core machine boto3 costs 2.4-3.7 ms
of client CPU per 4 KiB PUT, aiobotocore 2.0-2.7 ms and aiohttp with hand signing 0.55-0.75 ms
(about warp's cost), CPU taken from the cluster being measured. Signing is cheap (11 us by
hand, 142 us through botocore's signer); the HTTP stack and the event loop are not. So:

- one TCP connection per request in flight, kept alive and reused; a request is one
  ``write`` of the head and a small body; responses are parsed by httptools (llhttp, the
  C parser Node.js uses: chunked bodies, keep-alive), and on uvloop when it is installed;
- path-style addressing (``http://rgw:8080/bucket/key``), SigV4 with ``UNSIGNED-PAYLOAD``
  (the payload is not hashed; RGW accepts it as AWS does), signed headers
  ``host;x-amz-content-sha256;x-amz-date``, region ``default`` unless told otherwise;
- the load operations (PUT, GET, ListObjectsV2, DELETE) never raise: they return the HTTP
  status (or :data:`STATUS_CONNECTION_ERROR` / :data:`STATUS_TIMEOUT`), the time the
  response headers arrived and the bytes moved, so the runner records every outcome;
- setup calls (create/delete bucket, batch delete, list keys) raise
  :class:`rgwkeeper.errors.CephError` naming the operation and bucket, never a header.

No HEAD requests: a HEAD answer carries a Content-Length but no body, which a response
parser that does not know the method would wait for. Bucket existence is a ListObjectsV2
with max-keys=0.

The secret key lives only in :class:`Signer` (the derived signing key is cached per day) and
is never in a repr, a log line or an exception.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import ssl
import time
import xml.etree.ElementTree as ET
from typing import Any, Callable, Sequence
from urllib.parse import quote, urlsplit

import httptools

from rgwkeeper.access import RgwCredentials
from rgwkeeper.aio import bounded
from rgwkeeper.adapters.endpoints import Endpoints
from rgwkeeper.errors import CephError, CephTimeout, CephUnreachable, UsageError

#: Status recorded when the connection failed (refused, reset, closed mid-response).
STATUS_CONNECTION_ERROR = 1
#: Status recorded when the request did not finish within the client timeout.
STATUS_TIMEOUT = 2

UNSIGNED = "UNSIGNED-PAYLOAD"
SIGNED_HEADERS = "host;x-amz-content-sha256;x-amz-date"
_S3_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"
#: Bodies up to this size go out in the same write as the request head (one send).
_COALESCE_BYTES = 256 * 1024


def _enc(text: str, safe: str = "-_.~") -> str:
    return quote(text, safe=safe)


def canonical_query(params: dict[str, str]) -> str:
    """SigV4's canonical query string, which is also what we send (so they always match)."""
    return "&".join(f"{_enc(k)}={_enc(v)}" for k, v in sorted(params.items()))


class Signer:
    """AWS SigV4 for S3 with an unsigned payload."""

    def __init__(self, credentials: RgwCredentials, host: str, region: str = "default",
                 clock: Callable[[], float] = time.time) -> None:
        self._access_key = credentials.access_key
        self._secret = credentials.secret_key.encode()
        self.host = host
        self.region = region
        self._clock = clock
        self._second = -1
        self._amz_date = ""
        self._day = ""
        self._scope = ""
        self._key = b""

    def __repr__(self) -> str:
        return f"Signer(access_key={self._access_key[:4]}..., host={self.host}, region={self.region})"

    def _refresh(self) -> None:
        now = int(self._clock())
        if now == self._second:
            return
        self._second = now
        self._amz_date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
        day = self._amz_date[:8]
        if day != self._day:
            k = hmac.new(b"AWS4" + self._secret, day.encode(), hashlib.sha256).digest()
            for part in (self.region, "s3", "aws4_request"):
                k = hmac.new(k, part.encode(), hashlib.sha256).digest()
            self._key, self._day = k, day
            self._scope = f"{day}/{self.region}/s3/aws4_request"

    def headers(self, method: str, path: str, query: str = "") -> dict[str, str]:
        """Headers that authenticate ``method path?query``; ``path`` and ``query`` already encoded."""
        auth, amz = self.sign(method, path, query)
        return {"Authorization": auth, "x-amz-date": amz, "x-amz-content-sha256": UNSIGNED}

    def sign(self, method: str, path: str, query: str = "") -> tuple[str, str]:
        """(Authorization header, x-amz-date header) for ``method path?query``."""
        self._refresh()
        amz = self._amz_date
        canonical = (f"{method}\n{path}\n{query}\nhost:{self.host}\nx-amz-content-sha256:{UNSIGNED}\n"
                     f"x-amz-date:{amz}\n\n{SIGNED_HEADERS}\n{UNSIGNED}")
        to_sign = (f"AWS4-HMAC-SHA256\n{amz}\n{self._scope}\n"
                   f"{hashlib.sha256(canonical.encode()).hexdigest()}")
        signature = hmac.new(self._key, to_sign.encode(), hashlib.sha256).hexdigest()
        return (f"AWS4-HMAC-SHA256 Credential={self._access_key}/{self._scope}, "
                f"SignedHeaders={SIGNED_HEADERS}, Signature={signature}"), amz


class _Conn(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection; one request at a time."""

    def __init__(self, clock: Callable[[], int]) -> None:
        self.clock = clock
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.fut: asyncio.Future[int] | None = None
        self.t_headers = 0
        self.received = 0
        self.body: list[bytes] | None = None
        self.keep_alive = True
        self.closed = False
        self.used = False

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.abort(STATUS_CONNECTION_ERROR)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._finish(STATUS_CONNECTION_ERROR)

    # httptools callbacks
    def on_headers_complete(self) -> None:
        self.t_headers = self.clock()

    def on_body(self, body: bytes) -> None:
        self.received += len(body)
        if self.body is not None:
            self.body.append(body)

    def on_message_complete(self) -> None:
        self.keep_alive = self.parser.should_keep_alive()
        self._finish(self.parser.get_status_code())

    # ours
    def _finish(self, status: int) -> None:
        fut, self.fut = self.fut, None
        if fut is not None and not fut.done():
            fut.set_result(status)

    def abort(self, status: int) -> None:
        """Give up on this connection (timeout, bad response): it is never reused."""
        self.closed = True
        self._finish(status)
        if self.transport is not None:
            self.transport.abort()

    def start(self, fut: asyncio.Future[int], keep_body: bool) -> None:
        self.fut = fut
        self.t_headers = 0
        self.received = 0
        self.body = [] if keep_body else None
        self.used = True


class S3Ops:
    """The S3 operations, over ``_do`` (a load request: never raises) and ``_call`` (a setup
    request: raises CephError), which :class:`S3Client` (one endpoint) and :class:`S3Clients`
    (several) provide."""

    async def _do(self, method: str, path: str, query: str = "",
                  body: bytes | memoryview | None = None) -> tuple[int, int, int]:
        raise NotImplementedError

    async def _call(self, what: str, method: str, path: str, query: str = "", body: bytes | None = None,
                    extra: str = "") -> tuple[int, bytes]:
        raise NotImplementedError

    # -- the load operations: never raise, return (status, headers_ns, bytes) -------------------
    async def put_object(self, bucket: str, key: str, body: bytes | memoryview) -> tuple[int, int, int]:
        status, t_headers, _ = await self._do("PUT", f"/{bucket}/{_enc(key, '-_.~/')}", body=body)
        return status, t_headers, len(body)

    async def get_object(self, bucket: str, key: str) -> tuple[int, int, int]:
        return await self._do("GET", f"/{bucket}/{_enc(key, '-_.~/')}")

    async def list_objects(self, bucket: str, prefix: str, max_keys: int = 100) -> tuple[int, int, int]:
        query = canonical_query({"list-type": "2", "max-keys": str(max_keys), "prefix": prefix})
        return await self._do("GET", f"/{bucket}", query)

    async def delete_object(self, bucket: str, key: str) -> tuple[int, int, int]:
        return await self._do("DELETE", f"/{bucket}/{_enc(key, '-_.~/')}")

    # -- setup and cleanup: raise CephError ----------------------------------------------------
    async def bucket_exists(self, bucket: str) -> bool:
        status, body = await self._call(f"ListObjectsV2 {bucket}", "GET", f"/{bucket}",
                                        canonical_query({"list-type": "2", "max-keys": "0"}))
        if status == 200:
            return True
        if status == 404:
            return False
        raise CephError(f"ListObjectsV2 {bucket}", f"HTTP {status} {error_code(body)}")

    async def create_bucket(self, bucket: str) -> None:
        """Create ``bucket`` (RGW answers 200 when the caller already owns it)."""
        status, body = await self._call(f"CreateBucket {bucket}", "PUT", f"/{bucket}", body=b"")
        code = error_code(body)
        if status != 200 and not (status == 409 and code == "BucketAlreadyOwnedByYou"):
            raise CephError(f"CreateBucket {bucket}", f"HTTP {status} {code}")

    async def create_bucket_if_missing(self, bucket: str) -> bool:
        """Create ``bucket`` unless it exists; True if this call created it (so we may delete it)."""
        if await self.bucket_exists(bucket):
            return False
        await self.create_bucket(bucket)
        return True

    async def delete_bucket(self, bucket: str) -> bool:
        """Delete an empty bucket; False if it is not empty or already gone."""
        status, body = await self._call(f"DeleteBucket {bucket}", "DELETE", f"/{bucket}")
        if status in (200, 204):
            return True
        code = error_code(body)
        if status in (404, 409) and code in ("NoSuchBucket", "BucketNotEmpty"):
            return False
        raise CephError(f"DeleteBucket {bucket}", f"HTTP {status} {code}")

    async def delete_objects(self, bucket: str, keys: list[str]) -> int:
        """DeleteObjects in one request (at most 1000 keys); returns how many failed."""
        if not keys:
            return 0
        if len(keys) > 1000:
            raise ValueError("DeleteObjects takes at most 1000 keys")
        root = ET.Element("Delete")
        ET.SubElement(root, "Quiet").text = "true"
        for k in keys:
            ET.SubElement(ET.SubElement(root, "Object"), "Key").text = k
        body = ET.tostring(root)
        md5 = base64.b64encode(hashlib.md5(body).digest()).decode()  # noqa: S324 - S3 requires it
        # No Content-Type: Tentacle 20.2.4 answers 403 AccessDenied to one that is not signed
        # (measured; docs/testing.md, "Tentacle's image and keys"), and S3 does not need it.
        status, answer = await self._call(f"DeleteObjects {bucket}", "POST", f"/{bucket}", "delete=", body,
                                          f"Content-MD5: {md5}\r\n")
        if status != 200:
            raise CephError(f"DeleteObjects {bucket}", f"HTTP {status} {error_code(answer)}")
        return sum(1 for _ in ET.fromstring(answer).iter(f"{_S3_NS}Error")) if answer else 0

    async def list_keys(self, bucket: str, prefix: str = "") -> dict[str, tuple[int, str]]:
        """Every key under ``prefix`` with its (size, ETag), page by page."""
        out: dict[str, tuple[int, str]] = {}
        token = None
        while True:
            params = {"list-type": "2", "max-keys": "1000", "prefix": prefix}
            if token:
                params["continuation-token"] = token
            status, body = await self._call(f"ListObjectsV2 {bucket}", "GET", f"/{bucket}", canonical_query(params))
            if status != 200:
                raise CephError(f"ListObjectsV2 {bucket}", f"HTTP {status} {error_code(body)}")
            root = ET.fromstring(body)
            for c in root.iter(f"{_S3_NS}Contents"):
                out[c.findtext(f"{_S3_NS}Key", "")] = (int(c.findtext(f"{_S3_NS}Size", "0")),
                                                       c.findtext(f"{_S3_NS}ETag", "").strip('"'))
            if root.findtext(f"{_S3_NS}IsTruncated") != "true":
                return out
            token = root.findtext(f"{_S3_NS}NextContinuationToken")


class S3Client(S3Ops):
    """Keep-alive connections to one RGW endpoint. ``async with S3Client(...) as s3: ...``.

    ``connections`` is advisory: the client opens as many connections as requests are in
    flight at once (the runner bounds that), and keeps that many for reuse.
    """

    def __init__(self, endpoint: str, credentials: RgwCredentials, *, region: str = "default",
                 connections: int = 64, timeout_s: float = 30.0,
                 clock: Callable[[], int] = time.monotonic_ns) -> None:
        parts = urlsplit(endpoint)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
            raise UsageError(f"RGW endpoint {endpoint!r} must look like http://host:port")
        self.endpoint = f"{parts.scheme}://{parts.netloc}"
        self._host = parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._ssl = ssl.create_default_context() if parts.scheme == "https" else None
        self.signer = Signer(credentials, parts.netloc, region)
        self.connections = connections
        self.timeout_s = timeout_s
        self.clock = clock
        self._idle: list[_Conn] = []
        self._all: set[_Conn] = set()

    def __repr__(self) -> str:
        return f"S3Client({self.endpoint})"

    async def __aenter__(self) -> "S3Client":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        for c in list(self._all):
            if c.transport is not None:
                c.transport.close()
        self._all.clear()
        self._idle.clear()

    async def _connect(self) -> _Conn:
        loop = asyncio.get_running_loop()
        async with bounded(min(10.0, self.timeout_s)):
            _, conn = await loop.create_connection(lambda: _Conn(self.clock), self._host, self._port, ssl=self._ssl)
        self._all.add(conn)
        return conn

    async def _exchange(self, method: str, path: str, query: str = "", body: bytes | memoryview | None = None,
                        extra: str = "", keep_body: bool = False) -> tuple[int, _Conn | None]:
        """Send one request and wait for its response; (status, the connection it used)."""
        auth, amz_date = self.signer.sign(method, path, query)
        target = f"{path}?{query}" if query else path
        length = f"Content-Length: {len(body)}\r\n" if body is not None else ""
        head = (f"{method} {target} HTTP/1.1\r\nHost: {self.signer.host}\r\nAuthorization: {auth}\r\n"
                f"x-amz-date: {amz_date}\r\nx-amz-content-sha256: {UNSIGNED}\r\n{length}{extra}\r\n").encode()
        loop = asyncio.get_running_loop()
        for attempt in (0, 1):
            conn = None
            while self._idle:
                c = self._idle.pop()
                if not c.closed:
                    conn = c
                    break
                self._all.discard(c)
            try:
                if conn is None:
                    conn = await self._connect()
            except asyncio.TimeoutError:
                return STATUS_TIMEOUT, None
            except OSError:
                return STATUS_CONNECTION_ERROR, None
            reused = conn.used
            fut: asyncio.Future[int] = loop.create_future()
            conn.start(fut, keep_body)
            assert conn.transport is not None
            if body is None:
                conn.transport.write(head)
            elif len(body) <= _COALESCE_BYTES:
                conn.transport.write(head + bytes(body))
            else:
                conn.transport.write(head)
                conn.transport.write(body)
            timer = loop.call_later(self.timeout_s, conn.abort, STATUS_TIMEOUT)
            try:
                status = await fut
            except BaseException:
                conn.abort(STATUS_CONNECTION_ERROR)
                self._all.discard(conn)
                raise
            finally:
                timer.cancel()
            if status == STATUS_CONNECTION_ERROR and reused and conn.t_headers == 0 and attempt == 0:
                # The server closed an idle keep-alive connection as we wrote to it: nothing
                # was answered, so send the request again on a new connection (as Go's
                # net/http does). The caller's start time is kept, so the retry is not hidden.
                self._all.discard(conn)
                continue
            if conn.closed or not conn.keep_alive:
                if conn.transport is not None:
                    conn.transport.close()
                self._all.discard(conn)
            else:
                self._idle.append(conn)
            return status, conn
        raise AssertionError("unreachable")

    async def _send(self, method: str, path: str, query: str = "",
                    body: bytes | memoryview | None = None) -> tuple[int, int, int, bool]:
        """One load request: (status, headers_ns, bytes, whether a connection was made: False
        means the request never reached RGW)."""
        status, conn = await self._exchange(method, path, query, body)
        if conn is None:
            return status, self.clock(), 0, False
        return status, conn.t_headers or self.clock(), conn.received, True

    async def _do(self, method: str, path: str, query: str = "",
                  body: bytes | memoryview | None = None) -> tuple[int, int, int]:
        status, t_headers, received, _ = await self._send(method, path, query, body)
        return status, t_headers, received

    async def _call(self, what: str, method: str, path: str, query: str = "", body: bytes | None = None,
                    extra: str = "") -> tuple[int, bytes]:
        status, conn = await self._exchange(method, path, query, body, extra, keep_body=True)
        if status == STATUS_TIMEOUT:
            raise CephTimeout(what, f"no answer within {self.timeout_s:.0f} s")
        if status == STATUS_CONNECTION_ERROR:
            if conn is None:
                raise NotConnected(what, f"cannot reach {self.endpoint} (connection failed)")
            raise CephUnreachable(what, f"cannot reach {self.endpoint} (connection closed)")
        return status, b"".join(conn.body or []) if conn is not None else b""


class NotConnected(CephUnreachable):
    """A setup request could not connect: it never reached RGW (another endpoint may take it)."""


class S3Clients(S3Ops):
    """Load spread over several RGW endpoints of one zone, one :class:`S3Client` each: a request
    goes to the endpoint with the fewest in flight (ties take turns), and to the next one when it
    could not connect. ``pool.counts()`` gives requests and connection failures per endpoint."""

    def __init__(self, endpoints: Sequence[str], credentials: RgwCredentials, **kwargs: Any) -> None:
        self.pool: Endpoints[S3Client] = Endpoints({url: S3Client(url, credentials, **kwargs) for url in endpoints})
        self.endpoint = ", ".join(self.pool.urls)

    def __repr__(self) -> str:
        return f"S3Clients({self.endpoint})"

    async def __aenter__(self) -> "S3Clients":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        for c in self.pool.clients.values():
            await c.close()

    async def _do(self, method: str, path: str, query: str = "",
                  body: bytes | memoryview | None = None) -> tuple[int, int, int]:
        status, t_headers, received, _ = await self.pool.acall(
            lambda c: c._send(method, path, query, body), refused=_never, reached=lambda r: r[3])
        return status, t_headers, received

    async def _call(self, what: str, method: str, path: str, query: str = "", body: bytes | None = None,
                    extra: str = "") -> tuple[int, bytes]:
        return await self.pool.acall(lambda c: c._call(what, method, path, query, body, extra),
                                     refused=lambda exc: isinstance(exc, NotConnected))


def _never(exc: BaseException) -> bool:
    return False


def error_code(body: bytes) -> str:
    """The S3 error code of an error answer (``NoSuchBucket``), or ``?``."""
    try:
        return ET.fromstring(body).findtext("Code") or "?"
    except ET.ParseError:
        return "?"


def is_ok(status: int) -> bool:
    return 200 <= status < 300


def run(coro: Any) -> Any:
    """Run ``coro`` on uvloop when it is installed (a cheaper event loop), else on asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)
