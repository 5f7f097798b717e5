"""The manifest decoder against manifests captured from each release (tests/fixtures/*/manifest.json):
the RADOS objects it names are exactly those ``bucket radoslist`` (RGW's own walk) names, and its
fields are those ``radosgw-admin object stat`` prints. Malformed or unknown manifests raise
ManifestError, never anything else and never a shorter list."""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path
from typing import Any

import pytest

from rgwkeeper.adapters.manifest import (MAX_LOCATIONS, ManifestError, decode_manifest, head_object, locations,
                                         tail_objects)
from tests.unit.manifest_builder import bucket, manifest, rule

FIXTURES = Path(__file__).parent.parent / "fixtures"
RELEASES = sorted(p.parent.name for p in FIXTURES.glob("*/manifest.json"))


def test_every_release_of_the_matrix_has_a_capture() -> None:
    assert RELEASES == ["pacific", "reef", "tentacle"]


def capture(release: str) -> dict[str, Any]:
    return json.loads((FIXTURES / release / "manifest.json").read_text())


def raw(obj: dict[str, Any], name: str = "user.rgw.manifest") -> bytes:
    return base64.b64decode(obj["xattrs"][name])


@pytest.mark.parametrize("release", RELEASES)
def test_heads_and_tails_are_what_radoslist_names(release: str) -> None:
    for bucket, b in capture(release).items():
        named: list[str] = []
        for key, obj in b["objects"].items():
            m = decode_manifest(raw(obj))
            named.append(head_object(m).oid)
            named.extend(t.oid for t in tail_objects(m))
        # As sets: a copy within the bucket shares its source's tails, and Pacific's radoslist
        # prints the first object of a part uploaded twice once more (16.2.15).
        assert set(named) == set(b["radoslist"]), (release, bucket)


@pytest.mark.parametrize("release", RELEASES)
def test_an_objects_tails_are_named_once_each(release: str) -> None:
    for b in capture(release).values():
        for key, obj in b["objects"].items():
            tails = [(t.oid, t.locator) for t in tail_objects(decode_manifest(raw(obj)))]
            assert len(tails) == len(set(tails)), key


@pytest.mark.parametrize("release", RELEASES)
def test_fields_are_what_object_stat_prints(release: str) -> None:
    for b in capture(release).values():
        for key, obj in b["objects"].items():
            m = decode_manifest(raw(obj))
            want = obj["object_stat_manifest"]
            assert (m.obj_size, m.head_size, m.max_head_size, m.prefix) == \
                (want["obj_size"], want["head_size"], want["max_head_size"], want["prefix"]), key
            rules = [(r["key"], r["val"]["start_part_num"], r["val"]["start_ofs"], r["val"]["part_size"],
                      r["val"]["stripe_max_size"], r["val"]["override_prefix"]) for r in want["rules"]]
            assert [(k, r.start_part_num, r.start_ofs, r.part_size, r.stripe_max_size, r.override_prefix)
                    for k, r in m.rules] == rules, key
            assert m.tail_instance == want["tail_instance"], key
            assert m.tail_bucket.marker == want["tail_placement"]["bucket"]["marker"], key
            assert m.tail_placement == want["tail_placement"]["placement_rule"], key


@pytest.mark.parametrize("release", RELEASES)
def test_a_copy_names_its_sources_tails_and_its_own_head(release: str) -> None:
    cap = capture(release)
    source, copies = cap["capture-manifest"], cap["capture-manifest-copy"]
    for key in ("nine", "multi"):
        src = decode_manifest(raw(source["objects"][key]))
        dst = decode_manifest(raw(copies["objects"][key]))
        assert [t.oid for t in tail_objects(dst)] == [t.oid for t in tail_objects(src)] != []
        assert all(t.oid.startswith(source["marker"] + "__") for t in tail_objects(dst))
        assert head_object(dst).oid == f"{copies['marker']}_{key}"


@pytest.mark.parametrize("release", RELEASES)
def test_shapes(release: str) -> None:
    objs = capture(release)["capture-manifest"]["objects"]
    marker = capture(release)["capture-manifest"]["marker"]

    def tails(key: str) -> list[str]:
        return [t.oid[len(marker):] for t in tail_objects(decode_manifest(raw(objs[key])))]

    assert tails("small") == tails("zero") == tails("exact-chunk") == []
    nine = decode_manifest(raw(objs["nine"]))
    assert [t[len("__shadow_"):] for t in tails("nine")] == [nine.prefix + "1", nine.prefix + "2"]
    under = decode_manifest(raw(objs["_under"]))
    assert (head_object(under).oid, head_object(under).locator) == (f"{marker}___under", f"{marker}__under")
    assert all(t.locator == "" for t in tail_objects(under))
    multi = decode_manifest(raw(objs["multi"]))
    p = multi.prefix
    assert tails("multi") == [f"__multipart_{p}.1", f"__shadow_{p}.1_1", f"__multipart_{p}.2",
                              f"__shadow_{p}.2_1", f"__multipart_{p}.3"]
    assert len(tails("multi-striped")) == 6 and len(tails("multi-one")) == 1
    assert [loc.oid for loc in locations(nine)][0] == head_object(nine).oid  # the head holds data
    assert head_object(multi).oid not in [loc.oid for loc in locations(multi)]  # a multipart head holds none


def test_tags_are_the_bytes_rgw_gc_uses() -> None:
    """RGW's GC drops each tail's reference with the head's tail tag, as stored (with its NUL)."""
    for release in RELEASES:
        for obj in capture(release)["capture-manifest"]["objects"].values():
            tag = raw(obj, "user.rgw.tail_tag") if "user.rgw.tail_tag" in obj["xattrs"] else raw(obj, "user.rgw.idtag")
            assert tag.endswith(b"\0") and len(tag) > 1, release


def test_a_hand_built_manifest_decodes_as_rgw_names_it() -> None:
    m = decode_manifest(manifest())
    assert [t.oid for t in tail_objects(m)] == ["m.1__shadow_.p_1", "m.1__shadow_.p_2"]
    assert head_object(m).oid == "m.1_k"


def test_a_tail_in_another_bucket_is_named_after_that_bucket() -> None:
    m = decode_manifest(manifest(tail_bucket=bucket("src", "src.7")))
    assert [t.oid for t in tail_objects(m)] == ["src.7__shadow_.p_1", "src.7__shadow_.p_2"]


def test_a_newer_version_with_unknown_trailing_fields_decodes() -> None:
    m = decode_manifest(manifest(v=9, compat=6, tail=b"future"))
    assert len(tail_objects(m)) == 2


@pytest.mark.parametrize("data, why", [
    (manifest(compat=9), "needs a reader of version 9"),
    (manifest(v=6, compat=6), "too old"),
    (manifest(explicit=True), "explicit manifest"),
    (manifest(parts=1), "explicit part list"),
    (manifest(tier="cloud-s3"), "tiered"),
    (manifest(rules=[]), "without rules"),
    (manifest(rules=[(0, rule(0, 4 << 20, 0, 0))]), "stripe size 0"),
    (manifest(rules=[(0, rule(0, 4 << 20, 8 << 20, 4 << 20)), (8 << 20, rule(2, 8 << 20, 8 << 20, 4 << 20))]),
     "part rules"),
    (manifest(rules=[(0, rule(0, 4 << 20, 8 << 20, 4 << 20))]), "part rules"),
    (manifest(head_size=0, rules=[(0, rule(0, 4 << 20, 0, 4 << 20))]), "first rule starting at"),
    (manifest(rules=[(5, rule(0, 5, 0, 4 << 20))]), "first rule at offset 5"),
    (manifest(head_bucket=bucket(explicit=True)), "before placement rules"),
    (manifest() + b"x", "after the manifest"),
])
def test_what_it_does_not_handle_is_refused(data: bytes, why: str) -> None:
    with pytest.raises(ManifestError, match=why):
        tail_objects(decode_manifest(data))


def test_a_walk_longer_than_the_bound_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import rgwkeeper.adapters.manifest as mod

    monkeypatch.setattr(mod, "MAX_LOCATIONS", 10)
    data = manifest(obj_size=(4 << 20) + 10, rules=[(0, rule(0, 4 << 20, 0, 1))])
    with pytest.raises(ManifestError, match="more than 10 RADOS objects"):
        tail_objects(decode_manifest(data))
    assert len(tail_objects(decode_manifest(manifest(obj_size=(4 << 20) + 9, rules=[(0, rule(0, 4 << 20, 0, 1))])))) == 9
    # Refused before walking: a corrupt size is not walked stripe by stripe first.
    monkeypatch.setattr(mod, "_implicit", lambda *a: pytest.fail("walked"))
    with pytest.raises(ManifestError, match="more than 10 RADOS objects"):
        tail_objects(decode_manifest(manifest(obj_size=1 << 62, rules=[(0, rule(0, 4 << 20, 0, 1))])))
    assert MAX_LOCATIONS > (5 << 40) // (4 << 20)  # S3's largest object in 4 MiB stripes


def test_every_truncation_and_every_corrupted_byte_is_refused_or_decodes_whole() -> None:
    """Cut or flipped anywhere, a manifest raises ManifestError or decodes to a full walk: no other
    exception, no hang."""
    rng = random.Random(7)
    cap = capture(RELEASES[-1])["capture-manifest"]["objects"]
    for obj in cap.values():
        data = raw(obj)
        for n in range(len(data)):
            with pytest.raises(ManifestError):
                decode_manifest(data[:n])
        for _ in range(60):
            bad = bytearray(data)
            bad[rng.randrange(len(bad))] = rng.randrange(256)
            try:
                m = decode_manifest(bytes(bad))
                tail_objects(m)
            except ManifestError:
                pass
