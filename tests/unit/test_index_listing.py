"""Listing a bucket by its index shards: cls_rgw's entries decoded (checked against every
release's captured index), the IndexLister's pages and cursors over a strict fake, and a direct
purge that lists this way (purge.direct_listing = "index")."""

from __future__ import annotations

import asyncio
import base64
import datetime
import json

import pytest

from rgwkeeper.errors import UsageError
from rgwkeeper.purge.layout import CATEGORY_MULTIMETA, index_name, parse_dir_entry
from rgwkeeper.purge.lister import AFTER_SPECIAL, IndexLister, key_pages, past, undecodable_name
from rgwkeeper.purge.plan import DeleteObjects, Plan, Scope, Tuning
from rgwkeeper.purge.runtime import PurgeFailed, Retry, Threads
from tests.fixtures import ROOT
from tests.unit.purge_fakes import DATA, INDEX, FakeBulk, World, encode_dir_entry, rados_over
from tests.unit.test_purge_execute import crash_after_pages, make, run

RELEASES = ("pacific", "reef", "tentacle")


def _index_fixture(release: str) -> dict:
    return json.loads((ROOT / release / "bucket-index.json").read_text())


@pytest.mark.parametrize("release", RELEASES)
def test_every_release_index_decodes_to_what_s3_lists(release):
    fx = _index_fixture(release)
    plain = fx["capture-index"]
    listed = {}
    special = 0
    for rows in plain["omap"].values():
        for key_b64, value_b64 in rows:
            key = base64.b64decode(key_b64)
            if key[:1] == b"\x80":
                special += 1
                continue
            e = parse_dir_entry(base64.b64decode(value_b64))
            assert e.name.encode() == key  # the entry names its own key
            if e.exists and e.s3_key is not None and e.category != CATEGORY_MULTIMETA:
                listed[e.s3_key] = e
    s3 = {o["Key"]: o for o in plain["list_objects_v2"]}
    assert set(listed) == set(s3)
    for key, o in s3.items():
        e = listed[key]
        assert e.size == o["Size"] and e.etag.strip('"') == o["ETag"].strip('"'), key
        s3_time = datetime.datetime.fromisoformat(o["LastModified"]).timestamp()
        assert abs(e.mtime_s - s3_time) < 1.0, key  # S3 shows whole seconds
    # The capture's names that are escaped or namespaced in the index, and its non-ASCII keys.
    assert {"_underscore", "__two", "\u00e9clair", "\u65e5\u672c/x", "multi"} <= set(listed)
    names = [parse_dir_entry(base64.b64decode(v)).name for rows in plain["omap"].values() for k, v in rows
             if base64.b64decode(k)[:1] != b"\x80"]
    assert any(n.startswith("_multipart_pending.") for n in names)  # the incomplete upload's entry
    versioned_keys = [base64.b64decode(k) for rows in fx["capture-index-ver"]["omap"].values() for k, _ in rows]
    assert any(k[:1] == b"\x80" for k in versioned_keys)  # versions are special entries: skipped


def test_an_entry_written_here_decodes_as_cls_rgw_wrote_it():
    for release in RELEASES:
        rows = [r for rows in _index_fixture(release)["capture-index"]["omap"].values() for r in rows]
        k, v = next(r for r in rows if base64.b64decode(r[0]) == b"plain/b")
        captured = parse_dir_entry(base64.b64decode(v))
        ours = parse_dir_entry(encode_dir_entry("plain/b", captured.size, captured.mtime_s, captured.etag))
        assert ours == captured, release


@pytest.mark.parametrize("blob", [b"", b"\x08\x03\x10\x00\x00\x00", encode_dir_entry("k", 1, 0, "e")[:30]])
def test_a_short_entry_is_a_value_error_not_a_wrong_listing(blob):
    with pytest.raises(ValueError, match="bucket index entry"):
        parse_dir_entry(blob)


def test_index_names_escape_underscores_and_namespaces_are_not_keys():
    assert index_name("_x") == "__x" and index_name("x_") == "x_"
    assert parse_dir_entry(encode_dir_entry("__x", 1, 0, "e")).s3_key == "_x"
    assert parse_dir_entry(encode_dir_entry("_multipart_x.2~abc.meta", 0, 0, "", category=3)).s3_key is None


def _lister(world: World, page: int = 3) -> tuple[IndexLister, FakeBulk, list[str]]:
    bulk = FakeBulk(world, INDEX)
    shards = sorted(o for o in world.pools[INDEX] if o.startswith(f".dir.{world.bucket_id}"))
    threads = Threads(4, Retry(1.0))
    return IndexLister(bulk, shards, threads, page_size=lambda filtered: page), bulk, shards


async def _all(lister: IndexLister, scope: Scope, cursor: dict) -> list[tuple[list[dict], dict]]:
    return [page async for page in lister.pages(scope, cursor)]


def test_the_index_lister_lists_every_key_once_and_resumes_from_any_page():
    w = World(extra_plain=40)
    lister, bulk, shards = _lister(w)
    pages = asyncio.run(_all(lister, Scope(), {}))
    keys = [e["Key"] for entries, _ in pages for e in entries]
    assert sorted(keys) == sorted(w.index) and len(keys) == len(set(keys))
    assert pages[-1][1] == {"shards": [None] * len(shards)}  # every shard finished
    entry = next(e for entries, _ in pages for e in entries if e["Key"] == "plain/1")
    assert entry["Size"] == w.index["plain/1"]["Size"] and entry["ETag"] == w.index["plain/1"]["ETag"]
    for k in (1, len(pages) // 2, len(pages) - 2):
        done = {e["Key"] for entries, _ in pages[:k + 1] for e in entries}
        rest = asyncio.run(_all(lister, Scope(), pages[k][1]))
        again = [e["Key"] for entries, _ in rest for e in entries]
        assert set(again) | done == set(w.index), k
        assert not set(again) & done, k  # a resumed listing starts where the cursor stood


def test_the_index_lister_skips_uploads_and_special_entries_and_filters_a_prefix():
    w = World(extra_plain=10)
    lister, bulk, shards = _lister(w, page=1000)
    pages = asyncio.run(_all(lister, Scope(prefix="_"), {}))
    assert [e["Key"] for entries, _ in pages for e in entries] == ["_underscore"]
    pages = asyncio.run(_all(lister, Scope(), {}))
    keys = {e["Key"] for entries, _ in pages for e in entries}
    assert keys == set(w.index) and not any(k.startswith("_multipart") for k in keys)


def test_a_page_of_special_entries_only_still_moves_the_listing_on():
    w = World(extra_plain=1)
    # A key whose first character is not ASCII sorts after cls_rgw's special entries (byte 0x80).
    w.index["\u00fcber"] = {**w.index["extra/00000"], "Key": "\u00fcber"}
    lister, bulk, shards = _lister(w, page=1)
    pages = asyncio.run(_all(lister, Scope(), {}))
    assert sorted(e["Key"] for entries, _ in pages for e in entries) == sorted(w.index)
    # A one-entry page that held only the special entry ended at the key after every special one.
    assert any(AFTER_SPECIAL in (c["shards"]) for _, c in pages)


def test_a_missing_shard_fails_the_listing():
    w = World()
    lister, bulk, shards = _lister(w)
    lister.shards = [*shards, f".dir.{w.bucket_id}.99"]
    with pytest.raises(Exception, match="omap list"):
        asyncio.run(_all(lister, Scope(), {}))


def test_a_cursor_from_an_s3_listing_is_not_resumed_by_the_index_lister():
    assert IndexLister.fresh({}, 11) and IndexLister.fresh({"shards": [""] * 11}, 11)
    assert not IndexLister.fresh({"start_after": "k"}, 11) and not IndexLister.fresh({"shards": [""]}, 11)


INDEX_LISTING = Tuning(direct_listing="index")


def test_a_direct_purge_that_lists_the_index_ends_clean_without_listing_through_s3_first(tmp_path):
    w = World(extra_plain=20)
    p, io, cp, bulks = make(w, tmp_path, tuning=INDEX_LISTING)
    shared = list(w.tails["big"])
    assert "index shards with librados" in p.step(DeleteObjects).summary  # the dry run shows it
    assert p.step(DeleteObjects).calls[0].startswith(f"librados {INDEX}: omap list")
    report = run(p, io, cp)
    assert report.ok, report.checks
    assert w.rados_left(DATA) == sorted(shared) and not w.exists
    first_removal = next(i for i, line in enumerate(w.log) if line.startswith(f"rados rm {DATA}/"))
    assert not any(line.startswith("S3 ListObjectsV2") for line in w.log[:first_removal])  # from the index
    assert report.counters["objects_deleted"] == 26 and "sweeps" not in report.counters  # the counts agreed


def test_a_killed_index_listing_purge_resumes_from_its_shard_cursors(tmp_path):
    w = World(page_size=4, extra_plain=30)
    p, io, cp, _ = make(w, tmp_path, tuning=INDEX_LISTING)
    with pytest.raises(KeyboardInterrupt):
        run(p, io, cp, on_progress=crash_after_pages(3))
    saved = cp.load()
    assert saved.cursor["shards"] != [""] * len(saved.cursor["shards"])  # some shards moved on
    # The resumed plan is the one in the checkpoint: it lists the index as it started, whatever
    # the config says now (an index cursor given to the S3 listing would list everything again).
    resumed = Plan.from_dict(saved.plan)
    assert resumed.tuning.direct_listing == "index"
    report = run(resumed, io, cp, state=saved)
    assert report.ok, report.checks
    assert report.counters["objects_deleted"] == 36 and not w.exists
    assert Tuning().direct_listing == "s3"  # the default lists through RGW
    with pytest.raises(UsageError, match="direct_listing"):
        Tuning(direct_listing="INDEX")


def test_an_instance_key_that_python_rados_truncates_is_skipped_and_a_stuck_listing_stops():
    w = World()
    # Versioned instance entries (never in a bucket the direct method purges, which has versioning
    # off; here to see the lister hold): python-rados shows their keys cut at the first NUL.
    for n in range(3):
        name = f"plain/0\x00v91{n}\x00iabc{n}"
        w.extra_omap[name.encode()] = encode_dir_entry(name, 5, 0, "e")
    lister, bulk, shards = _lister(w, page=1000)
    pages = asyncio.run(_all(lister, Scope(), {}))
    keys = [e["Key"] for entries, _ in pages for e in entries]
    assert sorted(keys) == sorted(w.index)  # listed once, the instances not at all
    lister, bulk, shards = _lister(w, page=1)
    with pytest.raises(PurgeFailed, match="does not move on after 'plain/0'"):
        asyncio.run(_all(lister, Scope(), {}))


def test_an_osd_that_answers_fewer_entries_than_asked_does_not_end_a_shard_early():
    w = World(extra_plain=60)
    w.omap_read_cap = 2  # osd_max_omap_entries_per_request below the page size
    lister, bulk, shards = _lister(w, page=1000)
    pages = asyncio.run(_all(lister, Scope(), {}))
    assert sorted(e["Key"] for entries, _ in pages for e in entries) == sorted(w.index)


def test_a_compressed_object_lists_with_the_size_s3_shows():
    e = parse_dir_entry(encode_dir_entry("k", 4096, 0, "e", stored=100))
    assert e.size == 4096  # accounted_size, not the 100 bytes stored


def test_the_adapter_skips_keys_python_rados_cannot_decode_and_keeps_their_place():
    from rgwkeeper.adapters.rados import BulkObjects

    class Iterator:
        def __init__(self, rows):
            self.rows = iter(rows)

        def __next__(self):
            key, value = next(self.rows)
            if isinstance(key, bytes):  # what rados.pyx's decode_cstr does with a key that is not UTF-8
                key.decode("utf-8")
            return key, value

    class Ioctx:
        seen: list = []

        def get_omap_vals(self, op, after, prefix, max_return):
            self.seen.append((after, prefix, max_return))
            return Iterator([("a", b"1"), (b"\x800_log", b"2"), ("b", None), (b"\x801000_v", b"3")]), 0

        def get_omap_keys(self, op, after, max_return):
            # rados.pyx's keys-only iterator: no prefix filter, values None; the OSD starts after ``after``.
            self.seen.append((after, max_return))
            rows = [("o", None), ("p1", None), ("p2", None), ("q", None), (b"\x800_log", None)]
            return Iterator([r for r in rows if isinstance(r[0], bytes) or r[0] > after]), 0

        def operate_read_op(self, op, oid):
            assert oid == ".dir.x.0"

    class Cluster:
        def open_ioctx(self, pool):
            assert pool == INDEX
            return Ioctx()

        def shutdown(self):
            pass

    rados = rados_over(Cluster())
    try:
        rows = asyncio.run(BulkObjects(rados, INDEX).omap_page(".dir.x.0", "0", 10, prefix="p"))
    finally:
        rados.close()
    assert rows == [("a", b"1"), (None, b""), ("b", b""), (None, b"")]
    assert Ioctx.seen == [("0", "p", 10)]
    rados = rados_over(Cluster())
    try:
        bulk = BulkObjects(rados, INDEX)
        assert asyncio.run(bulk.omap_keys_page(".dir.x.0", "", 10, prefix="p")) == ["p1", "p2"]  # stops at "q"
        assert asyncio.run(bulk.omap_keys_page(".dir.x.0", "p1", 10, prefix="p")) == ["p2"]
        assert asyncio.run(bulk.omap_keys_page(".dir.x.0", "p2", 10)) == ["q", None]
    finally:
        rados.close()
    assert Ioctx.seen[1:] == [("p", 10), ("p1", 10), ("p2", 10)]


def test_a_key_comes_past_a_range_end_exactly_as_the_osd_orders_their_bytes():
    raw = [b"a", b"a/b", b"z", b"\x800_0001", b"\x801000_x", b"\xc3\xbcber", b"\xe2\x82\xac", b"~"]
    decoded = [None if k[:1] == b"\x80" else k.decode() for k in raw]
    for last in ("a", "a/b", "m", "~", "\u00fcber", "\u20ac"):
        for k, d in zip(raw, decoded):
            assert past(d, last) == (k > last.encode()), (k, last)


def test_key_ranges_of_one_shard_list_their_keys_and_nothing_past_them_and_add_up_to_the_shard():
    w = World(extra_plain=60)
    w.index["\u00fcber"] = {**w.index["extra/00000"], "Key": "\u00fcber"}  # after the special entries
    lister, bulk, shards = _lister(w, page=2)
    shard = next(s for s in shards if len([k for k in asyncio.run(_keys(bulk, s)) if k is not None]) > 7)
    keys = asyncio.run(_keys(bulk, shard))
    assert None in keys  # the special entry sits among them
    # Cut as a shard's owner does: at real keys, the last range open-ended.
    real = [k for k in keys if k is not None]
    edges = [real[2], real[5]]
    bounds = [("", edges[0]), (edges[0], edges[1]), (edges[1], "")]
    listed = []
    for after, last in bounds:
        one = IndexLister(bulk, [shard], lister.threads, page_size=lambda filtered: 2, last=last)
        pages = asyncio.run(_all(one, Scope(), {"shards": [after]} if after else {}))
        got = [e["Key"] for entries, _ in pages for e in entries]
        assert all(index_name(k) <= last for k in got) if last else got, (after, last)
        listed += got
    whole = asyncio.run(_all(IndexLister(bulk, [shard], lister.threads), Scope(), {}))
    assert sorted(listed) == sorted(e["Key"] for entries, _ in whole for e in entries)
    assert len(listed) == len(set(listed))


async def _keys(bulk, shard, after="", prefix=""):
    return [k async for page in key_pages(bulk, shard, after, Threads(2, Retry(1.0)), prefix=prefix, page_size=3)
            for k in page]


def test_keys_only_listing_follows_a_prefix_and_moves_past_special_entries():
    w = World(extra_plain=30)
    bulk = FakeBulk(w, INDEX)
    shards = sorted(o for o in w.pools[INDEX] if o.startswith(f".dir.{w.bucket_id}"))
    every = [k for s in shards for k in asyncio.run(_keys(bulk, s))]
    assert sorted(k for k in every if k is not None and k.startswith("extra/")) == sorted(
        index_name(k) for k in w.index if k.startswith("extra/"))
    assert every.count(None) == len(shards)  # each shard's bucket-log entry, passed, not looped on
    under = [k for s in shards for k in asyncio.run(_keys(bulk, s, prefix="extra/"))]
    assert sorted(under) == sorted(k for k in w.index if k.startswith("extra/"))


def test_a_name_python_rados_cannot_decode_among_ascii_keys_stops_key_ranges_rather_than_skip_keys():
    w = World(extra_plain=20)
    bulk = FakeBulk(w, INDEX)
    shards = sorted(o for o in w.pools[INDEX] if o.startswith(f".dir.{w.bucket_id}"))
    assert not undecodable_name(["a", "b", None, None, "\u00fcber"])  # cls_rgw's entries sit there
    assert undecodable_name(["a", None, "b"])
    # A name above U+10FFFF (older RGWs let it through): python-rados cannot decode it either.
    real_page, real_keys = bulk.omap_page, bulk.omap_keys_page

    async def keys_with_a_bad_name(oid, after, n, **kw):
        keys = await real_keys(oid, after, n, **kw)
        return [keys[0], None, *keys[1:]] if oid == shards[0] and not after else keys

    async def page_with_a_bad_name(oid, after, n, **kw):
        rows = await real_page(oid, after, n, **kw)
        return [rows[0], (None, b""), *rows[1:]] if oid == shards[0] and not after else rows

    bulk.omap_keys_page, bulk.omap_page = keys_with_a_bad_name, page_with_a_bad_name
    with pytest.raises(PurgeFailed, match="cannot decode.*range_entries = 0"):
        asyncio.run(_keys(bulk, shards[0]))
    one = IndexLister(bulk, [shards[0]], Threads(2, Retry(1.0)), page_size=lambda filtered: 1000, last="~")
    with pytest.raises(PurgeFailed, match="cannot decode.*range_entries = 0"):
        asyncio.run(_all(one, Scope(), {}))
    whole = IndexLister(bulk, [shards[0]], Threads(2, Retry(1.0)), page_size=lambda filtered: 1000)
    assert asyncio.run(_all(whole, Scope(), {}))  # without ranges the listing goes on as before
