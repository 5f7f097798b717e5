"""The TOML config: the shipped example, validation, one line per bad field."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

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
            "cluster": {"timeout": 0.1, "name": 3},
            "rgw": {"shard_warning_ratio": "high", "endpointt": "x"},
            "bogus": {},
        })
    msg = str(exc.value)
    assert msg.startswith("5 problems:")
    for part in ("cluster.timeout must be at least 1.0", "cluster.name must be a string",
                 "rgw.shard_warning_ratio must be a number", "unknown key rgw.endpointt",
                 "unknown section [bogus]"):
        assert part in msg
    assert "\n" not in msg


def test_ints_are_accepted_for_floats_and_bools_are_not_ints():
    cfg = config.parse({"cluster": {"timeout": 30}})
    assert cfg.cluster.timeout == 30.0 and isinstance(cfg.cluster.timeout, float)
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


def test_missing_explicit_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        config.load(tmp_path / "nope.toml")


def test_invalid_toml(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text("[cluster\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        config.load(p)
