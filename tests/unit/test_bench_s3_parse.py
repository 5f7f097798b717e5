"""bench.s3_parse runs both clients over the same in-process page and refuses bad counts."""

from __future__ import annotations

import json
import sys

import pytest

from bench import s3_parse


def test_it_parses_the_page_with_both_parsers_and_reports_json(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["s3_parse", "--keys", "20", "--pages", "2", "--repeat", "1", "--json"])
    s3_parse.main()
    out = json.loads(capsys.readouterr().out)
    assert set(out["cpu_ms_per_call"]) == {"botocore's parser", "rgwkeeper's"}
    assert out["keys"] == 20 and all(v >= 0 for v in out["cpu_ms_per_call"].values())


def test_both_clients_parse_the_same_keys_and_instants():
    body = s3_parse.listing(5)
    pages = [c.list_objects_v2(Bucket="bkt")["Contents"] for c in s3_parse.clients(body).values()]
    assert len(pages[0]) == 5 and [(e["Key"], e["LastModified"]) for e in pages[0]] == \
        [(e["Key"], e["LastModified"]) for e in pages[1]]


@pytest.mark.parametrize("bad", [["--keys", "0"], ["--pages", "100001"], ["--repeat", "-1"]])
def test_bad_counts_are_refused(monkeypatch, capsys, bad):
    monkeypatch.setattr(sys, "argv", ["s3_parse", *bad])
    with pytest.raises(SystemExit) as exc:
        s3_parse.main()
    assert exc.value.code == 2 and "must be from 1 to 100000" in capsys.readouterr().err
