"""The TOML config: the shipped example, validation, one line per bad field."""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path

import pytest
import structlog
import structlog.testing

from rgwkeeper import config
from rgwkeeper.errors import ConfigError

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "rgwkeeper.toml"


def test_example_loads_to_the_defaults():
    assert config.load(EXAMPLE) == config.Config()


def test_example_documents_every_field():
    text = EXAMPLE.read_text()
    sections = {m.group(1): m.start() for m in re.finditer(r"^\[(\w+)\]", text, re.M)}
    for dotted, doc, _default in config.describe():
        section, key = dotted.split(".")
        assert section in sections, dotted
        assert re.search(rf"^#?\s*{key} =", text, re.M), f"{dotted} is not in {EXAMPLE.name}"
        assert doc, f"{dotted} has no doc"


def test_every_bad_field_is_reported_in_one_error():
    with pytest.raises(ConfigError) as exc:
        config.parse({
            "cluster": {"timeout_s": 0.1, "name": 3},
            "rgw": {"shard_warning_ratio": "high", "endpointt": "x"},
            "bogus": {},
        })
    msg = str(exc.value)
    assert msg.startswith("5 problems:")
    for part in ("cluster.timeout_s must be at least 1.0", "cluster.name must be a string",
                 "rgw.shard_warning_ratio must be a number", "unknown key rgw.endpointt",
                 "unknown section [bogus]"):
        assert part in msg
    assert "\n" not in msg


def test_ints_are_accepted_for_floats_and_bools_are_not_ints():
    cfg = config.parse({"cluster": {"timeout_s": 30}})
    assert cfg.cluster.timeout_s == 30.0 and isinstance(cfg.cluster.timeout_s, float)
    with pytest.raises(ConfigError, match="osd_parallelism must be an integer"):
        config.parse({"observe": {"osd_parallelism": True}})


@pytest.mark.parametrize("value,expected", [
    ("nan", "purge.max_objects_per_second must be a finite number"),
    ("inf", "purge.max_objects_per_second must be a finite number"),
    ("0.001", "purge.max_objects_per_second must be 0 (no cap) or at least 0.01"),
])
def test_a_rate_cap_must_be_finite_and_usable(tmp_path, value, expected):
    p = tmp_path / "c.toml"
    p.write_text(f"[purge]\nmax_objects_per_second = {value}\n")  # TOML itself accepts nan and inf
    with pytest.raises(ConfigError, match=re.escape(expected)):
        config.load(p)
    assert config.parse({"purge": {"max_objects_per_second": 0.01}}).purge.max_objects_per_second == 0.01


@pytest.mark.parametrize("value,expected", [
    ("99", "purge.range_entries must be 0 (shards are never cut) or at least 100 keys, got 99"),
    ("-1", "purge.range_entries must be at least 0"),
    ("1.5", "purge.range_entries must be an integer"),
    ("nan", "purge.range_entries must be an integer"),
    ("100000001", "purge.range_entries must be at most 100000000"),
])
def test_a_key_range_size_is_zero_or_a_sane_whole_number(tmp_path, value, expected):
    p = tmp_path / "c.toml"
    p.write_text(f"[purge]\nrange_entries = {value}\n")
    with pytest.raises(ConfigError, match=re.escape(expected)):
        config.load(p)
    assert config.parse({"purge": {"range_entries": 0}}).purge.range_entries == 0
    assert config.parse({"purge": {"range_entries": 100}}).purge.range_entries == 100


def test_missing_explicit_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        config.load(tmp_path / "nope.toml")


def test_invalid_toml(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text("[cluster\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        config.load(p)


def test_every_number_field_declares_both_bounds():
    # A number without a max let 10**400 through to float() (an OverflowError traceback): a new
    # field cannot forget its bounds.
    for name, cls in config.SECTIONS.items():
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if set(typing.get_args(hints[f.name]) or (hints[f.name],)) & {int, float}:
                assert f.metadata.get("min") is not None and f.metadata.get("max") is not None, \
                    f"{name}.{f.name} needs min= and max="


@pytest.mark.parametrize("text, expected", [
    ("[scrub_throttle]\nhigh_write_ops = 1" + "0" * 400, "scrub_throttle.high_write_ops must be at most"),
    ("[gates]\nmax_inactive_pgs = 9223372036854775807", "gates.max_inactive_pgs must be at most"),
    ("[gates]\nmax_inactive_pgs = " + "9" * 5000, "is not valid TOML: Exceeds the limit"),  # was a ValueError
    ("[daemon]\ntick_s = nan", "daemon.tick_s must be a finite number"),
    ("[daemon]\nshutdown_timeout_s = -inf", "daemon.shutdown_timeout_s must be a finite number"),
    ('[daemon]\nmetrics_address = "127.0.0.1:99999"', "daemon.metrics_address must be host:port with a port"),
    ('[daemon]\nmetrics_address = "127.0.0.1:0"', "daemon.metrics_address must be host:port with a port"),
    ('[daemon]\nmetrics_address = "127.0.0.1:9877\\n"', "daemon.metrics_address must"),
    ('[daemon]\nmetrics_address = "localhost"', "daemon.metrics_address must be host:port"),
    ('[daemon]\nmetrics_address = ":9877"', "daemon.metrics_address must be host:port"),
    ('[gates]\nmaintenance_window = "22:00-06:00\\n"', "gates.maintenance_window must"),
    ('[rgw]\nendpoint = "http://rgw:99999"', "rgw.endpoint: RGW endpoint 'http://rgw:99999' is not a URL"),
    ('[daemon]\npool = ""', "daemon.pool must not be empty"),
    ('[daemon]\ninstance_id = " node1"', "daemon.instance_id must not be empty or have surrounding whitespace"),
    # Taken before: a window that holds no minute, relative state directories (a resumed purge
    # run from elsewhere would not find its checkpoint), an id that reads as INSTANCE@HOST, a
    # ratio every cluster is past.
    ('[gates]\nmaintenance_window = "22:00-22:00"', "gates.maintenance_window '22:00-22:00' starts where it ends"),
    ('[daemon]\nstate_dir = "run/rgwkeeper"', "daemon.state_dir must be an absolute path, got 'run/rgwkeeper'"),
    ('[purge]\nstate_dir = "state"', "purge.state_dir must be an absolute path, got 'state'"),
    ('[daemon]\ninstance_id = "a@b"', "daemon.instance_id must be 1 to 64 letters, digits"),
    ('[daemon]\ninstance_id = "a b"', "daemon.instance_id must be 1 to 64 letters, digits"),
    ('[daemon]\ninstance_id = "' + "a" * 65 + '"', "daemon.instance_id must be 1 to 64 letters, digits"),
    ("[fill]\nexpire_at_ratio = 0", "fill.expire_at_ratio must be above 0"),
    ('[cluster]\nname = "client.admin\\n"', "cluster.name must not"),
    ('[purge]\nprotected_buckets = ["prod-*", ""]', "purge.protected_buckets must not be empty"),
    # fnmatch is case-sensitive and bucket names are lowercase: these protected nothing
    ('[purge]\nprotected_buckets = ["PROD*"]', "purge.protected_buckets: pattern 'PROD*' can match no bucket name"),
    ('[purge]\nprotected_buckets = ["prod_data"]', "pattern 'prod_data' can match no bucket name (found '_'"),
    ("[[purge.lifecycle_rules]]\nbucket = \"b12\"\ndays = 1\nlarger_than = 10\nsmaller_than = 11",
     "larger than 10 B and smaller than 11 B leave no object size between them"),
    ("[[preshard.plans]]\nbucket = \"b12\"\nexpected_objects = nan", "expected_objects must be a whole number"),
    ("[[preshard.plans]]\nbucket = \"b12\\n\"\nexpected_objects = 5", "bucket name 'b12\\n' is not valid"),
    ("[[purge.lifecycle_rules]]\nbucket = \"b12\"\ndays = 99999999999", "days must be a whole number from 1 to"),
    ("[[purge.lifecycle_rules]]\nbucket = \"b12\"\ndays = 1\nlarger_than = 9223372036854775807\n"
     "smaller_than = inf", "smaller_than must be a whole number"),
])
def test_no_non_finite_overflowing_or_padded_value_gets_through(tmp_path, text, expected):
    p = tmp_path / "c.toml"
    p.write_text(text + "\n")
    with pytest.raises(ConfigError) as exc:
        config.load(p)
    assert expected in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize("address, parsed", [
    ("127.0.0.1:9877", ("127.0.0.1", 9877)), ("[::1]:9877", ("::1", 9877)), ("metrics.example:1", ("metrics.example", 1)),
    ("host:65535", ("host", 65535)), ("host:65536", None), ("::1:9877", None), ("host:+80", None), ("host:\u0663", None),
])
def test_metrics_address(address, parsed):
    assert config.parse_host_port(address) == parsed
    if parsed:
        assert config.parse({"daemon": {"metrics_address": address}}).daemon.metrics_address == address
    assert config.parse({"daemon": {"metrics_address": ""}}).daemon.metrics_address == ""


def test_the_daemon_refuses_a_bad_metrics_port_in_one_line_too():
    # What crashed the daemon at start (an OverflowError from bind) when the check let 99999 through.
    from rgwkeeper.daemon.metrics import Metrics
    from rgwkeeper.errors import UsageError

    with pytest.raises(UsageError, match="port from 1 to 65535"):
        Metrics().serve("127.0.0.1:99999")


@pytest.mark.parametrize("section, old, new, value", [
    (section, old, new, dict((k, d) for k, _, d in config.describe())[f"{section}.{new}"])
    for section, names in config.RENAMED.items() for old, new in names.items()])
def test_a_key_renamed_for_its_unit_still_reads_under_its_old_name_with_a_warning(section, old, new, value):
    with structlog.testing.capture_logs() as logs:
        cfg = config.parse({section: {old: value}})
    assert getattr(getattr(cfg, section), new) == value
    assert [e["use"] for e in logs if e["log_level"] == "warning"] == [f"{section}.{new}"]
    with structlog.testing.capture_logs() as logs:
        config.parse({section: {new: value}})
    assert logs == []


def test_old_and_new_name_of_one_key_together_are_refused():
    with pytest.raises(ConfigError, match=r"purge.rgw_retry is the old name of purge.rgw_retry_s; keep only"):
        config.parse({"purge": {"rgw_retry": 5.0, "rgw_retry_s": 6.0}})


def test_every_duration_key_says_its_unit():
    # A new key in seconds without `_s` (or in ms without `_ms`) fails here: config keys carry units.
    unitless = [key for key, doc, default in config.describe()
                if isinstance(default, float) and doc.lower().startswith(("seconds", "milliseconds"))
                and not key.endswith(("_s", "_ms"))]
    assert unitless == []


@pytest.mark.parametrize("pattern", ["prod-*", "billing", "?-keep", "[!x]*", "*.archive.*"])
def test_protected_patterns_that_can_match_a_bucket_name_are_taken(tmp_path, pattern):
    p = tmp_path / "c.toml"
    p.write_text(f'[purge]\nprotected_buckets = ["{pattern}"]\n')
    assert config.load(p).purge.protected_buckets == [pattern]


@pytest.mark.parametrize("text, key, value", [
    ('[daemon]\ninstance_id = "node_1.a-B"', "daemon.instance_id", "node_1.a-B"),
    ('[daemon]\ninstance_id = "' + "a" * 64 + '"', "daemon.instance_id", "a" * 64),
    ('[gates]\nmaintenance_window = "22:00-22:01"', "gates.maintenance_window", "22:00-22:01"),
    ("[fill]\nexpire_at_ratio = 0.01", "fill.expire_at_ratio", 0.01),
    ('[daemon]\nstate_dir = "/run/rgwkeeper-2"', "daemon.state_dir", "/run/rgwkeeper-2"),
])
def test_values_beside_the_refused_ones_are_taken(tmp_path, text, key, value):
    p = tmp_path / "c.toml"
    p.write_text(text + "\n")
    section, name = key.split(".")
    assert getattr(getattr(config.load(p), section), name) == value
