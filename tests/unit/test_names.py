"""Bucket names and prefixes are validated before anything reaches RGW."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from hypothesis import example, given, strategies as st

from rgwkeeper.errors import InvalidName
from rgwkeeper.names import validate_bucket, validate_prefix


@pytest.mark.parametrize("name", ["abc", "my-bucket", "logs.2026-11", "a" * 63, "0bucket9"])
def test_valid_bucket_names(name):
    assert validate_bucket(name) == name


@pytest.mark.parametrize("name, words", [
    ("x&purge-objects=true", "not valid"),
    ("ab", "3 to 63"),
    ("a" * 64, "3 to 63"),
    ("-bucket", "starts with '-'"),
    ("Bucket", "not valid"),
    ("my bucket", "not valid"),
    ("b%2fc", "not valid"),
    ("a..b", "adjacent"),
    ("a.-b", "adjacent"),
    ("192.168.1.1", "IP address"),
    ("bucket-", "not valid"),
    ("", "empty"),
    ("abc\n", "not valid"),
    ("my-bucket\n", "not valid"),
])
def test_invalid_bucket_names_say_why(name, words):
    with pytest.raises(InvalidName) as exc:
        validate_bucket(name)
    msg = str(exc.value)
    assert words in msg
    assert "\n" not in msg


# Names built to sit right at the edge of the rule: valid cores with a tail a regex anchored
# with `$` lets through (a final newline), or one that encodes to something else.
_EDGE_NAMES = st.builds(
    lambda core, tail: core + tail,
    st.from_regex(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", fullmatch=True),
    st.sampled_from(["", "\n", "\r\n", " ", "\t", "\x00", "&x=1", "%2f", "/", "?", "\u00e9", "\n\n"]))


@given(st.one_of(st.text(min_size=0, max_size=80), _EDGE_NAMES))
@example("abc\n")
def test_an_accepted_name_needs_no_encoding(name):
    # Whatever passes validation is sent as-is: it must survive URL-encoding unchanged,
    # so it can never add or alter a query parameter.
    try:
        validate_bucket(name)
    except InvalidName:
        return
    assert quote(name, safe="") == name


@pytest.mark.parametrize("prefix", ["logs/", "2026/11/22/", "a-b_c.d/e"])
def test_valid_prefixes(prefix):
    assert validate_prefix(prefix) == prefix


@pytest.mark.parametrize("prefix", ["a&b", "50%", "has space", "tab\there", "-rf", "", "x" * 1025, "back\\slash",
                                    "logs/\n", "logs\r"])
def test_invalid_prefixes(prefix):
    with pytest.raises(InvalidName):
        validate_prefix(prefix)
