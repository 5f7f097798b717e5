"""Cluster access resolution and credential files."""

from __future__ import annotations

import os

import pytest

from rgwkeeper.access import ClusterDefaults, load_credentials, resolve
from rgwkeeper.errors import CredentialsError, UsageError


@pytest.fixture
def conf(tmp_path):
    p = tmp_path / "ceph.conf"
    p.write_text("[global]\nmon_host = 127.0.0.1\n")
    return p


def test_flag_beats_env_beats_config(tmp_path, conf, monkeypatch):
    other = tmp_path / "other.conf"
    other.write_text("")
    monkeypatch.setenv("CEPH_CONF", str(other))
    assert resolve(conf=str(conf)).conf == conf
    assert resolve().conf == other
    monkeypatch.delenv("CEPH_CONF")
    assert resolve(config_defaults=ClusterDefaults(conf=str(conf))).conf == conf


def test_missing_conf_is_one_clear_line(tmp_path, monkeypatch):
    monkeypatch.delenv("CEPH_CONF", raising=False)
    with pytest.raises(UsageError, match=r"ceph.conf .*nope.conf does not exist; pass --conf"):
        resolve(conf=str(tmp_path / "nope.conf"))


def test_a_missing_credentials_file_names_the_flag_that_exists(tmp_path):
    with pytest.raises(CredentialsError) as caught:
        load_credentials(tmp_path / "nope.toml")
    assert str(caught.value).endswith("does not exist; pass --rgw-credentials PATH or set rgw.credentials_file")


def test_name_and_id(conf):
    assert resolve(conf=str(conf)).client_name == "client.admin"
    assert resolve(conf=str(conf), client_id="rgwkeeper").client_name == "client.rgwkeeper"
    assert resolve(conf=str(conf), name="client.x").client_name == "client.x"
    with pytest.raises(UsageError, match="not both"):
        resolve(conf=str(conf), name="client.x", client_id="y")
    with pytest.raises(UsageError, match="not a client name"):
        resolve(conf=str(conf), name="osd.0")


def test_missing_keyring(conf, tmp_path):
    with pytest.raises(CredentialsError, match="does not exist"):
        resolve(conf=str(conf), keyring=str(tmp_path / "missing.keyring"))


def test_config_supplies_rgw_and_flags_override(conf, tmp_path):
    d = ClusterDefaults(rgw_endpoint="http://a:1", rgw_credentials_file="/etc/x", timeout_s=7)
    a = resolve(conf=str(conf), config_defaults=d)
    assert (a.rgw_endpoint, str(a.rgw_credentials_file), a.timeout_s) == ("http://a:1", "/etc/x", 7)
    b = resolve(conf=str(conf), rgw_endpoint="http://b:2", rgw_credentials="/tmp/c", timeout_s=3, config_defaults=d)
    assert (b.rgw_endpoint, str(b.rgw_credentials_file), b.timeout_s) == ("http://b:2", "/tmp/c", 3)


def _creds(tmp_path, text, mode=0o600):
    p = tmp_path / "creds"
    p.write_text(text)
    os.chmod(p, mode)
    return p


def test_credentials_load_and_never_show_the_secret(tmp_path):
    p = _creds(tmp_path, 'access_key = "AKIAEXAMPLE"\nsecret_key = "s3cr3t-value"\n')
    c = load_credentials(p)
    assert (c.access_key, c.secret_key) == ("AKIAEXAMPLE", "s3cr3t-value")
    assert "s3cr3t" not in repr(c) and "s3cr3t" not in str(c)


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_credentials_must_be_0600(tmp_path, mode):
    p = _creds(tmp_path, 'access_key = "A"\nsecret_key = "s3cr3t-value"\n', mode)
    with pytest.raises(CredentialsError) as exc:
        load_credentials(p)
    assert f"{mode:04o}" in str(exc.value) and "chmod 600" in str(exc.value)
    assert "s3cr3t" not in str(exc.value)


@pytest.mark.parametrize("text", ['access_key = "A"\n', 'secret_key = "s3cr3t-value"\n', 'access_key = 1\nsecret_key = "s3cr3t-value"'])
def test_credentials_need_both_keys(tmp_path, text):
    with pytest.raises(CredentialsError, match="must set access_key and secret_key") as exc:
        load_credentials(_creds(tmp_path, text))
    assert "s3cr3t" not in str(exc.value)


def test_bad_toml_does_not_leak_content(tmp_path):
    with pytest.raises(CredentialsError, match="not valid TOML") as exc:
        load_credentials(_creds(tmp_path, 'secret_key = "s3cr3t-value\n'))
    assert "s3cr3t" not in str(exc.value)


@pytest.mark.parametrize("endpoint", ["http://rgw:99999", "http://rgw:0", "ftp://rgw:21", "http://", " http://rgw:8080",
                                      "http://k:secret@rgw:8080", "http://rgw:8080/bucket", "http://[::1"])
def test_a_bad_rgw_endpoint_is_refused_when_resolved(conf, endpoint):
    with pytest.raises(UsageError, match="RGW endpoint") as exc:
        resolve(conf=str(conf), rgw_endpoint=endpoint)
    assert "secret" not in str(exc.value)
    assert resolve(conf=str(conf), rgw_endpoint="https://[::1]:8443/").rgw_endpoint == "https://[::1]:8443/"


def test_a_number_python_cannot_convert_is_one_line(tmp_path):
    # An integer of over 4300 digits is a ValueError from the TOML decoder, not a TOMLDecodeError.
    with pytest.raises(CredentialsError, match="not valid TOML") as exc:
        load_credentials(_creds(tmp_path, 'access_key = "A"\nsecret_key = "s3cr3t-value"\nx = ' + "9" * 5000 + "\n"))
    assert "s3cr3t" not in str(exc.value)
