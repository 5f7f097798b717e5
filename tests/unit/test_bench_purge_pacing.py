"""bench/purge_pacing.py's modes: each parsed, each bad one refused before a cluster boots."""

import pytest

from bench.purge_pacing import parse_mode


def test_modes_parse_to_their_kind_and_numbers():
    assert parse_mode("cap:150:0.1") == ("cap", [150.0, 0.1])
    assert parse_mode("cap:20") == ("cap", [20.0])
    assert parse_mode("stock-rm") == ("stock-rm", []) and parse_mode("stock-rm:4") == ("stock-rm", [4.0])
    assert parse_mode("quiet") == ("quiet", []) and parse_mode("low") == ("low", [])
    assert parse_mode("unpaced:32") == ("unpaced", [32.0])


@pytest.mark.parametrize("bad", ["cap", "cap:nan", "cap:inf", "cap:-1", "cap:0", "cap:1:2:3", "cap:x", "bogus",
                                 "stock-s3:1", "quiet:1", "unpaced:1:2", ""])
def test_a_bad_mode_is_refused(bad):
    with pytest.raises(ValueError, match="mode"):
        parse_mode(bad)
