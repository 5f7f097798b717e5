"""The load client: SigV4 against botocore's signer, and HTTP/1.1 against a local stand-in server.

The stand-in is a few lines of asyncio on 127.0.0.1 that answers canned responses (keep-alive,
chunked, an idle connection closed by the server, no answer at all); the real RGW is in
tests/integration/test_loadgen.py.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from types import SimpleNamespace
from unittest import mock

import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from rgwkeeper.access import RgwCredentials
from rgwkeeper.errors import CephError, CephUnreachable
from rgwkeeper.loadgen.client import (STATUS_CONNECTION_ERROR, STATUS_TIMEOUT, S3Client, S3Clients, Signer,
                                      canonical_query, error_code)

CREDS = RgwCredentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
WHEN = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)


def _botocore_auth(method: str, url: str) -> str:
    req = AWSRequest(method=method, url=url, headers={})
    req.context["client_config"] = SimpleNamespace(s3={"payload_signing_enabled": False})
    with mock.patch("botocore.auth.get_current_datetime", return_value=WHEN.replace(tzinfo=None)):
        S3SigV4Auth(Credentials(CREDS.access_key, CREDS.secret_key), "s3", "default").add_auth(req)
    assert req.headers["X-Amz-Content-SHA256"] == "UNSIGNED-PAYLOAD"
    return req.headers["Authorization"]


@pytest.mark.parametrize("method,path,params", [
    ("PUT", "/bucket/p000/w000-0000000001", {}),
    ("GET", "/bucket", {"list-type": "2", "max-keys": "100", "prefix": "p001/"}),
    ("DELETE", "/bucket/key%20with%20space", {}),
    ("POST", "/bucket", {"delete": ""}),
])
def test_signature_matches_botocore(method, path, params):
    signer = Signer(CREDS, "127.0.0.1:8080", "default", clock=lambda: WHEN.timestamp())
    query = canonical_query(params)
    auth, amz_date = signer.sign(method, path, query)
    assert amz_date == "20260102T030405Z"
    url = f"http://127.0.0.1:8080{path}" + (f"?{query}" if query else "")
    assert auth == _botocore_auth(method, url)


def test_secret_never_in_repr_or_logs(caplog):
    caplog.set_level(logging.DEBUG)
    signer = Signer(CREDS, "h:1")
    client = S3Client("http://h:1", CREDS)
    for text in (repr(signer), repr(client), str(CREDS), repr(CREDS), caplog.text):
        assert CREDS.secret_key not in text


# -- HTTP against a local stand-in ---------------------------------------------------------------

class StandIn:
    """Answers each request with the next canned response; records what it received."""

    def __init__(self, answers: list[bytes | None]) -> None:
        self.answers = list(answers)
        self.heads: list[bytes] = []
        self.connections = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.heads.append(head)
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                await reader.readexactly(length)
                answer = self.answers.pop(0) if self.answers else b"HTTP/1.1 500 X\r\nContent-Length: 0\r\n\r\n"
                if answer is None:  # never answer
                    await asyncio.sleep(3600)
                if answer == b"CLOSE":  # drop the connection without a word
                    writer.close()
                    return
                writer.write(answer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def _serve(answers):
    stand_in = StandIn(answers)
    server = await asyncio.start_server(stand_in.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return stand_in, server, f"http://127.0.0.1:{port}"


OK_EMPTY = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"


def test_requests_reuse_one_keep_alive_connection_and_count_bytes():
    async def main():
        stand_in, server, url = await _serve([
            OK_EMPTY,
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n",
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
        ])
        async with server, S3Client(url, CREDS) as s3:
            put = await s3.put_object("b", "k 1", b"x" * 4096)
            get = await s3.get_object("b", "k")
            lst = await s3.list_objects("b", "p000/", 10)
            missing = await s3.delete_object("b", "k")
        return stand_in, put, get, lst, missing

    stand_in, put, get, lst, missing = asyncio.run(main())
    assert (put[0], put[2]) == (200, 4096)
    assert (get[0], get[2]) == (200, 5)
    assert (lst[0], lst[2]) == (200, 7)
    assert missing[0] == 404
    assert stand_in.connections == 1
    assert stand_in.heads[0].startswith(b"PUT /b/k%201 HTTP/1.1\r\n")
    assert b"x-amz-content-sha256: UNSIGNED-PAYLOAD" in stand_in.heads[0]
    assert stand_in.heads[2].startswith(b"GET /b?list-type=2&max-keys=10&prefix=p000%2F HTTP/1.1")


def test_a_reused_connection_closed_by_the_server_is_retried_once():
    async def main():
        stand_in, server, url = await _serve([OK_EMPTY, b"CLOSE", OK_EMPTY])
        async with server, S3Client(url, CREDS) as s3:
            first = await s3.get_object("b", "k")
            second = await s3.get_object("b", "k")
        return stand_in, first, second

    stand_in, first, second = asyncio.run(main())
    assert first[0] == 200 and second[0] == 200
    assert stand_in.connections == 2


def test_no_answer_is_a_timeout_and_no_server_a_connection_error():
    async def main():
        stand_in, server, url = await _serve([None])
        async with server, S3Client(url, CREDS, timeout_s=0.3) as s3:
            timed_out = await s3.get_object("b", "k")
        async with S3Client(url, CREDS) as s3:  # the server is closed now
            refused = await s3.get_object("b", "k")
        return timed_out, refused

    timed_out, refused = asyncio.run(main())
    assert timed_out[0] == STATUS_TIMEOUT
    assert refused[0] == STATUS_CONNECTION_ERROR


def test_setup_calls_raise_typed_errors_without_secrets():
    async def main():
        # An answer that echoes the secret (as a misbehaving proxy or RGW's debug output might).
        body = f"<Error><Code>AccessDenied</Code><Message>{CREDS.secret_key}</Message></Error>".encode()
        _, server, url = await _serve([b"HTTP/1.1 403 Forbidden\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)])
        async with server, S3Client(url, CREDS) as s3:
            with pytest.raises(CephError) as denied:
                await s3.create_bucket("b")
        async with S3Client(url, CREDS) as s3:
            with pytest.raises(CephUnreachable) as unreachable:
                await s3.bucket_exists("b")
        return denied.value, unreachable.value

    denied, unreachable = asyncio.run(main())
    assert str(denied) == "CreateBucket b: HTTP 403 AccessDenied"
    assert "cannot reach" in str(unreachable)
    for text in (str(denied), str(unreachable)):
        assert CREDS.secret_key not in text and "Signature" not in text


def test_error_code_of_garbage_is_a_question_mark():
    assert error_code(b"<Error><Code>NoSuchBucket</Code></Error>") == "NoSuchBucket"
    assert error_code(b"not xml") == "?"


def test_delete_objects_sends_no_unsigned_content_type():
    """Tentacle 20.2.4's RGW refuses a DeleteObjects that carries a Content-Type header it was not
    asked to sign (403 AccessDenied, measured; boto3 sends none), where Pacific accepted it: the
    load generator's cleanup then left every object behind."""
    deleted = b'<DeleteResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"></DeleteResult>'
    denied = b"<Error><Code>AccessDenied</Code></Error>"
    heads = []

    async def like_tentacle(reader, writer):
        head = await reader.readuntil(b"\r\n\r\n")
        heads.append(head)
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))
        await reader.readexactly(length)
        signed = next(line for line in head.split(b"\r\n") if line.startswith(b"Authorization:")).split(b"SignedHeaders=")[1]
        unsigned_type = b"content-type:" in head.lower() and b"content-type" not in signed
        body, status = (denied, b"403 Forbidden") if unsigned_type else (deleted, b"200 OK")
        writer.write(b"HTTP/1.1 %s\r\nContent-Length: %d\r\n\r\n%s" % (status, len(body), body))
        await writer.drain()
        writer.close()

    async def main():
        server = await asyncio.start_server(like_tentacle, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        async with server, S3Client(url, CREDS) as s3:
            return await s3.delete_objects("b", ["k1", "k2"])

    assert asyncio.run(main()) == 0
    assert heads[0].startswith(b"POST /b?delete= HTTP/1.1\r\n") and b"Content-MD5: " in heads[0]


# -- several endpoints ----------------------------------------------------------------------------

def _closed_url() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_load_over_several_endpoints_moves_requests_that_could_not_connect():
    async def main():
        stand_in, server, url = await _serve([OK_EMPTY] * 4)
        closed = _closed_url()
        async with server, S3Clients([closed, url], CREDS) as s3:
            got = [await s3.put_object("b", f"k{i}", b"x" * 10) for i in range(4)]
            return stand_in, got, s3.pool.report(), closed, url

    stand_in, got, report, closed, url = asyncio.run(main())
    assert [g[0] for g in got] == [200] * 4  # every request answered by the endpoint that listens
    assert len(stand_in.heads) == 4
    by = {e["endpoint"]: e for e in report}
    assert by[closed]["failures"] == by[closed]["requests"] >= 1  # tried, refused, left out
    assert by[url]["requests"] == 4 and by[url]["failures"] == 0


def test_a_load_request_that_reached_an_rgw_is_not_sent_again_elsewhere():
    async def main():
        one, server1, url1 = await _serve([b"HTTP/1.1 503 Slow Down\r\nContent-Length: 0\r\n\r\n"] * 2)
        two, server2, url2 = await _serve([b"HTTP/1.1 503 Slow Down\r\nContent-Length: 0\r\n\r\n"] * 2)
        async with server1, server2, S3Clients([url1, url2], CREDS) as s3:
            got = [await s3.get_object("b", "k") for _ in range(2)]
        return got, len(one.heads), len(two.heads)

    got, n1, n2 = asyncio.run(main())
    assert [g[0] for g in got] == [503, 503]  # recorded as the answer it was
    assert (n1, n2) == (1, 1)  # one request each (turns), none repeated


def test_every_endpoint_refusing_is_a_connection_error_for_load_and_one_error_for_setup():
    async def main():
        a, b = _closed_url(), _closed_url()
        async with S3Clients([a, b], CREDS) as s3:
            load = await s3.get_object("b", "k")
            with pytest.raises(CephUnreachable, match="cannot reach") as exc:
                await s3.bucket_exists("b")
        return load, s3.pool.report(), str(exc.value)

    load, report, err = asyncio.run(main())
    assert load[0] == STATUS_CONNECTION_ERROR
    assert [e["failures"] for e in report] == [2, 2]
    assert CREDS.secret_key not in err
