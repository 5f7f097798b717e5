"""How many zones RGW's zonegroup has, read from the ``.rgw.root`` pool without radosgw-admin.

A direct purge is refused where the zonegroup has more than one zone: RADOS removals are not
replicated (docs/purge.md). ``radosgw-admin zonegroup get`` answers that with a process (0.1-0.5
s, more with ``docker exec``); RGW's admin API does not serve the zonegroup on every release.
Without a realm, RGW reads its zonegroup from ``.rgw.root`` (``zonegroup_info.<id>``, found
through ``default.zonegroup.`` or ``zonegroups_names.<name>``; RGWSI_Zone's
init_zg_from_local), and that object's encoding starts with its zones. Rather than redo RGW's
choice of zonegroup, :func:`the_single_zone` answers only when *every* zonegroup the pool holds
has exactly one zone, the same one: then RGW's has it too, whichever it chose (the caller
checks it is the zone RGW serves). Anything else (a
realm or period, a legacy region, an object this module does not know, an encoding it cannot
read, two zones anywhere) answers None, and the caller asks radosgw-admin. The caller reads
.rgw.root only where it is RGW's config store (ROOT_CONFIG_DEFAULTS).
"""
from __future__ import annotations

from typing import Mapping

from rgwkeeper.encoding import ANY_COMPAT, DecodeError, Decoder

__all__ = ["CONFIG_STORE_OPTION", "ROOT_CONFIG_DEFAULTS", "ROOT_POOL", "SiteConfigError", "the_single_zone",
           "zonegroup_zone_ids", "zones_if_single"]

ROOT_POOL = ".rgw.root"
CONFIG_STORE_OPTION = "rgw_config_store"
#: Where RGW keeps its configuration when .rgw.root is the place to read it: every root pool
#: option at its default and, from Reef, the RADOS config store (not dbstore or json).
ROOT_CONFIG_DEFAULTS = {"rgw_realm_root_pool": ROOT_POOL, "rgw_zonegroup_root_pool": ROOT_POOL,
                        "rgw_zone_root_pool": ROOT_POOL, "rgw_period_root_pool": ROOT_POOL,
                        "rgw_region_root_pool": ROOT_POOL, CONFIG_STORE_OPTION: "rados"}
ZONEGROUP_PREFIX = "zonegroup_info."
#: What ``.rgw.root`` holds without a realm (seen on 16.2.15, 18.2.7 and 20.2.4); any other object
#: (``realms.``, ``default.realm``, ``periods.``, ``region_info.``, ...) means it is not that case.
REALMLESS_PREFIXES = (ZONEGROUP_PREFIX, "zone_info.", "zone_names.", "zonegroups_names.", "default.zonegroup",
                      "default.zone")
#: RGWZoneGroup's encoding: v5 on Pacific, v6 on Reef and Tentacle.
_ZONEGROUP_KNOWN_V = 6
#: More objects than this in .rgw.root is not a realm-less single zone's pool: radosgw-admin decides.
MAX_ROOT_OBJECTS = 64


class SiteConfigError(DecodeError):
    """A zonegroup that cannot be decoded."""


def zonegroup_zone_ids(data: bytes) -> list[str]:
    """The zone ids of an encoded RGWZoneGroup: ENCODE_START(v, 1), name, api_name, is_master,
    endpoints (list of strings), master_zone, then the zones (map of zone id to RGWZone)."""
    r = Decoder(data, SiteConfigError)
    v, end = r.begin("RGWZoneGroup", _ZONEGROUP_KNOWN_V, 4)
    r.string()  # name
    r.string()  # api_name
    r.boolean()  # is_master
    for _ in range(r.count()):
        r.string()  # endpoints
    r.string()  # master_zone
    ids = []
    for _ in range(r.count()):
        ids.append(r.string())
        _, zend = r.begin("RGWZone", ANY_COMPAT, 1)  # only skipped: any version will do
        r.finish("RGWZone", zend)
    r.finish("RGWZoneGroup", end)
    r.done("zonegroup")
    return ids


def the_single_zone(objects: Mapping[str, bytes]) -> str | None:
    """The zone id every zonegroup of the realm-less ``.rgw.root`` (``objects``: name ->
    content) holds as its one zone; None if there is no such zone (radosgw-admin must answer).
    The caller checks it is the zone RGW serves."""
    if not objects or len(objects) > MAX_ROOT_OBJECTS:
        return None
    if not all(name.startswith(REALMLESS_PREFIXES) for name in objects):
        return None
    groups = [data for name, data in objects.items() if name.startswith(ZONEGROUP_PREFIX)]
    try:
        zones = {tuple(zonegroup_zone_ids(g)) for g in groups}
    except SiteConfigError:
        return None
    if len(zones) != 1:
        return None
    (only,) = zones
    return only[0] if len(only) == 1 and only[0] else None


def zones_if_single(objects: Mapping[str, bytes], zone_id: str) -> list[str] | None:
    """``[zone_id]`` if every zonegroup ``objects`` hold has ``zone_id`` as its one zone; else None."""
    return [zone_id] if zone_id and the_single_zone(objects) == zone_id else None
