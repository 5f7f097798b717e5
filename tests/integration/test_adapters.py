"""Each adapter against the real cluster: answers, typed errors, validation before I/O."""

from __future__ import annotations

import asyncio

import pytest

from rgwkeeper.adapters.adminapi import AdminApi
from rgwkeeper.adapters.rados import RadosAdapter
from rgwkeeper.adapters.radosgw_admin import RadosgwAdmin
from rgwkeeper.adapters.s3 import S3Adapter, make_client
from rgwkeeper.errors import CephError, InvalidName, NotFound


def test_rados_mon_and_osd_commands(cluster_access):
    with RadosAdapter(cluster_access) as rados:
        status = rados.command({"prefix": "status"})
        assert status["osdmap"]["num_up_osds"] >= 1
        perf = rados.command({"prefix": "perf dump", "logger": "bluefs"}, osd=0)
        assert perf["bluefs"]["db_total_bytes"] > 0
        with pytest.raises(CephError) as exc:
            rados.command({"prefix": "no such command"})
        assert exc.value.errno_name == "EINVAL"


def test_radosgw_admin_reads_and_not_found(cluster_access, s3, bucket_name):
    s3.create_bucket(Bucket=bucket_name)
    rgw = RadosgwAdmin(cluster_access)
    stats = asyncio.run(rgw.bucket_stats(bucket_name))
    assert stats["bucket"] == bucket_name
    with pytest.raises(NotFound):
        asyncio.run(rgw.bucket_stats(bucket_name + "-missing"))


def test_admin_api_lists_stats_and_refuses_injection(cluster_access, s3, bucket_name):
    s3.create_bucket(Bucket=bucket_name)
    s3.put_object(Bucket=bucket_name, Key="a", Body=b"12345")
    api = AdminApi(cluster_access.rgw_endpoint, cluster_access.rgw_credentials(), timeout_s=20)
    all_stats = {b["bucket"]: b for b in asyncio.run(api.buckets_with_stats())}
    assert all_stats[bucket_name]["usage"]["rgw.main"]["num_objects"] == 1
    with pytest.raises(NotFound):
        asyncio.run(api.bucket_stats(bucket_name + "-missing"))
    with pytest.raises(InvalidName):
        asyncio.run(api.bucket_stats(bucket_name + "&purge-objects=true"))
    # The injection attempt changed nothing.
    assert asyncio.run(api.bucket_stats(bucket_name))["usage"]["rgw.main"]["num_objects"] == 1


def test_s3_adapter_listing_and_lifecycle(cluster_access, bucket_name):
    s3 = S3Adapter(make_client(cluster_access.rgw_endpoint, cluster_access.rgw_credentials(), timeout_s=20))
    s3.create_bucket(bucket_name)
    for key in ("logs/1", "logs/2", "keep/1"):
        s3.client.put_object(Bucket=bucket_name, Key=key, Body=b"x")
    assert [o["Key"] for o in s3.iter_keys(bucket_name, "logs/", page_size=1)] == ["logs/1", "logs/2"]
    assert s3.get_lifecycle(bucket_name) == []
    rule = {"ID": "expire-logs", "Status": "Enabled", "Filter": {"Prefix": "logs/"}, "Expiration": {"Days": 1}}
    s3.put_lifecycle(bucket_name, [rule])
    got = s3.get_lifecycle(bucket_name)
    assert [r["ID"] for r in got] == ["expire-logs"] and got[0]["Expiration"]["Days"] == 1
    assert not s3.bucket_exists(bucket_name + "-missing")
