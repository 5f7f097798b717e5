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


@pytest.mark.parametrize("bad, says", [
    (["--keys", "0"], "at least 1"), (["--pages", "100001"], "at most 100,000"), (["--repeat", "-1"], "at least 1"),
    (["--keys", " 5"], "not a whole number"), (["--pages", "5 "], "not a whole number"),
    (["--repeat", "nan"], "not a whole number"), (["--keys", "1_000"], "not a whole number"),
    (["--pages", "9" * 400], "--pages"), (["--keys", ""], "--keys")])
def test_bad_counts_are_refused_in_one_line(monkeypatch, capsys, bad, says):
    monkeypatch.setattr(sys, "argv", ["s3_parse", *bad])
    with pytest.raises(SystemExit) as exc:
        s3_parse.main()
    err = capsys.readouterr().err
    assert exc.value.code == 2 and says in err and "Traceback" not in err
