"""Admin API: every parameter encoded, names validated before any request, errors typed."""

from __future__ import annotations

import asyncio
import traceback

import pytest
import requests
import rgwadmin.exceptions as rgwexc

from rgwkeeper.access import RgwCredentials
from rgwkeeper.adapters.adminapi import AdminApi
from rgwkeeper.errors import CephError, CephTimeout, CephUnreachable, InvalidName, NotFound, UsageError
from tests.unit.fakes import FakeRGWAdmin, load_fixture

CREDS = RgwCredentials("AKEXAMPLE", "s3cr3t-value")


def _api(fake):
    def factory(**kwargs):
        fake.kwargs = kwargs
        return fake

    return AdminApi("https://rgw.example:8443", CREDS, timeout_s=5, factory=factory)


def test_client_gets_server_scheme_and_timeout():
    fake = FakeRGWAdmin()
    _api(fake)
    assert fake.kwargs["server"] == "rgw.example:8443" and fake.kwargs["secure"] is True
    assert fake.kwargs["timeout"] == 5


def test_all_buckets_with_stats_in_one_call():
    buckets = load_fixture("observation.json")["buckets"]
    fake = FakeRGWAdmin().expect("get", "/admin/bucket?format=json&stats=True", buckets)
    assert asyncio.run(_api(fake).buckets_with_stats()) == buckets
    assert len(fake.calls) == 1


def test_injection_attempt_never_reaches_rgw():
    fake = FakeRGWAdmin()
    with pytest.raises(InvalidName):
        asyncio.run(_api(fake).bucket_stats("x&purge-objects=true"))
    assert fake.calls == []


def test_parameters_are_url_encoded():
    api = _api(FakeRGWAdmin())
    assert api.path("user", {"uid": "tenant$user&x=1"}) == "/admin/user?format=json&uid=tenant%24user%26x%3D1"


# Each error the client library raises here carries the secret in its text (as an error about a
# request signed with it may): none of it may reach what rgwkeeper prints or logs.
_SECRET = CREDS.secret_key


@pytest.mark.parametrize("exc, cls", [
    (rgwexc.NoSuchBucket({"Code": "NoSuchBucket", "Message": f"key {_SECRET}"}, raw=_SECRET), NotFound),
    (rgwexc.AccessDenied({"Code": "AccessDenied", "Message": f"signed with {_SECRET}"}), CephError),
    (rgwexc.RGWAdminException("SignatureDoesNotMatch", raw=f"<StringToSign>{_SECRET}</StringToSign>"), CephError),
    (requests.Timeout(f"read timed out: GET /admin/bucket?secret_key={_SECRET}"), CephTimeout),
    (requests.ConnectionError(f"refused: https://AKEXAMPLE:{_SECRET}@rgw.example:8443/admin/bucket"),
     CephUnreachable),
])
def test_errors_are_typed_and_carry_no_secret(exc, cls):
    assert _SECRET in str(exc) + repr(exc) + str(getattr(exc, "raw", ""))  # the input has it
    fake = FakeRGWAdmin().expect("get", "/admin/bucket?format=json&bucket=abc&stats=True", exc)
    with pytest.raises(cls) as caught:
        asyncio.run(_api(fake).bucket_stats("abc"))
    shown = str(caught.value) + repr(caught.value) + "".join(traceback.format_exception(caught.value))
    assert _SECRET not in shown
    assert "/admin/bucket" in str(caught.value)


def test_endpoint_must_be_http():
    with pytest.raises(UsageError, match="not an http"):
        AdminApi("rgw.example:8080", CREDS, timeout_s=5, factory=FakeRGWAdmin)


@pytest.mark.parametrize("release", ["pacific", "reef", "tentacle"])
def test_the_read_back_reads_of_each_release_are_the_captured_answers(release):
    """What the purge's read-back asks the admin API, answered as each release answered it
    (tests/fixtures/<release>/purge.json, capture_purge --admin-api): a user's bucket names, and
    a missing bucket and bucket instance as NotFound, not as an error that would fail the purge."""
    import json
    from pathlib import Path

    fx = json.loads((Path(__file__).parents[1] / "fixtures" / release / "purge.json").read_text())
    missing = {name: getattr(rgwexc, fx[name]["raised"])(fx[name]["code"])
               for name in ("admin_bucket_stats_missing", "admin_metadata_get_missing")}
    fake = (FakeRGWAdmin()
            .expect("get", "/admin/bucket?format=json&uid=rgwkeeper-admin", fx["admin_user_buckets"])
            .expect("get", "/admin/bucket?format=json&bucket=gone&stats=True", missing["admin_bucket_stats_missing"])
            .expect("get", "/admin/metadata/bucket.instance?format=json&key=gone%3Aabc.1.1",
                    missing["admin_metadata_get_missing"]))
    api = _api(fake)
    assert asyncio.run(api.user_buckets("rgwkeeper-admin")) == ["capture-api-1", "capture-api-2"]
    with pytest.raises(NotFound):
        asyncio.run(api.bucket_stats("gone"))
    with pytest.raises(NotFound):
        asyncio.run(api.metadata_get("bucket.instance", "gone:abc.1.1"))
    with pytest.raises(InvalidName):
        asyncio.run(api.user_buckets("bad&uid=x"))
    assert len(fake.calls) == 3


@pytest.mark.parametrize("release", ["pacific", "reef", "tentacle"])
def test_the_owners_stats_sync_returns_the_stats_and_nothing_else_of_the_users_record(release):
    """``GET /admin/user?...&sync=True`` as each release answered it (capture_purge --stats-sync):
    RGW's answer is the user's whole record, keys included; only the stats come back."""
    import copy
    import json
    from pathlib import Path

    fx = json.loads((Path(__file__).parents[1] / "fixtures" / release / "purge.json").read_text())
    captured = fx["admin_user_stats_sync"]
    # The sync ran: radosgw-admin read a later sync time after the request than before it.
    assert captured["last_stats_sync_after"] > captured["last_stats_sync_before"]
    # A user with exactly the caps docs/cluster-access.md gives may send it.
    assert captured["with_documented_caps"] == "answered"
    # The answer's other fields (the capture keeps their names only), the user's keys among them.
    assert {"keys", "swift_keys", "stats"} <= set(captured["answer_fields"])
    answer = {field: f"<{field}>" for field in captured["answer_fields"]}
    answer.update(stats=copy.deepcopy(captured["stats"]), swift_keys=[],
                  keys=[{"user": "rgwkeeper-admin", "access_key": "AKSEEN", "secret_key": _SECRET}])
    fake = FakeRGWAdmin().expect("get", "/admin/user?format=json&uid=rgwkeeper-admin&stats=True&sync=True", answer)
    got = asyncio.run(_api(fake).sync_user_stats("rgwkeeper-admin"))
    assert got == {"stats": captured["stats"]} and isinstance(got["stats"]["num_objects"], int)
    assert _SECRET not in repr(got) and "AKSEEN" not in repr(got)
    with pytest.raises(InvalidName):
        asyncio.run(_api(FakeRGWAdmin()).sync_user_stats("bad&sync=x"))
    assert len(fake.calls) == 1


@pytest.mark.parametrize("answer", [{}, {"stats": None}, {"stats": []}, [], None, {"stats": {}},
                                    {"stats": {"num_objects": 1}}, {"stats": {"num_objects": "1", "size": 2}},
                                    {"stats": {"num_objects": True, "size": 2}}, {"stats": {"num_objects": 1, "size": 2.5}}])
def test_an_owners_stats_sync_answer_without_stats_is_an_error(answer):
    fake = FakeRGWAdmin().expect("get", "/admin/user?format=json&uid=o&stats=True&sync=True", answer)
    with pytest.raises(CephError, match="no stats"):
        asyncio.run(_api(fake).sync_user_stats("o"))
