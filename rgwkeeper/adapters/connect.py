"""The one place that builds the adapters from a cluster access.

Every caller (the CLI's commands, the daemon, purge and expire, verify's deep-scrub storm) gets
its librados connection, radosgw-admin runner, RGW admin API client and S3 client from
:func:`open_adapters` (or the :func:`connected` block), so they are built one way: the same
timeouts, the same refusal when RGW is needed but not configured, one ``close``.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

from rgwkeeper.access import ClusterAccess
from rgwkeeper.adapters.adminapi import AdminApi
from rgwkeeper.adapters.rados import RadosAdapter
from rgwkeeper.adapters.radosgw_admin import RadosgwAdmin

if TYPE_CHECKING:  # boto3 is imported only when an S3 client is built
    from rgwkeeper.adapters.s3 import S3Adapter

#: ``rgw=``: RGW's S3 and admin API are needed (refused in one line if not configured), built
#: if configured, or not built at all.
REQUIRED, IF_CONFIGURED, NONE = "required", "if-configured", "none"


@dataclass
class ClusterAdapters:
    access: ClusterAccess
    rados: RadosAdapter
    radosgw_admin: RadosgwAdmin
    admin_api: AdminApi | None = None
    s3: "S3Adapter | None" = None

    @property
    def rgw_note(self) -> str | None:
        """Why the RGW parts are missing, for a report that goes on without them."""
        if self.admin_api is not None:
            return None
        return "RGW endpoint or credentials not configured (rgw.endpoint, rgw.credentials_file)"

    def close(self) -> None:
        self.rados.close()


def rgw_configured(access: ClusterAccess) -> bool:
    return bool(access.rgw_endpoint and access.rgw_credentials_file)


def open_adapters(access: ClusterAccess, *, rgw: str = IF_CONFIGURED, rados_workers: int = 16,
                  s3_pool: int = 32, connect: bool = True) -> ClusterAdapters:
    """Build the adapters (and connect librados unless ``connect`` is False: the caller connects,
    e.g. from a thread). Blocking; :meth:`ClusterAdapters.close` releases them."""
    if rgw not in (REQUIRED, IF_CONFIGURED, NONE):
        raise ValueError(rgw)
    admin_api = s3 = None
    if rgw == REQUIRED or (rgw == IF_CONFIGURED and rgw_configured(access)):
        # Checked first, so a missing endpoint or credentials file is refused before connecting.
        endpoints, creds = access.require_rgw_endpoints(), access.rgw_credentials()
        from rgwkeeper.adapters.s3 import make_s3

        admin_api = AdminApi(endpoints, creds, timeout_s=access.timeout_s)
        s3 = make_s3(endpoints, creds, timeout_s=access.timeout_s, max_pool=s3_pool)
    rados = RadosAdapter(access, max_workers=rados_workers)
    if connect:
        rados.connect()
    return ClusterAdapters(access=access, rados=rados, radosgw_admin=RadosgwAdmin(access), admin_api=admin_api,
                           s3=s3)


@contextlib.contextmanager
def connected(access: ClusterAccess, *, rgw: str = IF_CONFIGURED, rados_workers: int = 16,
              s3_pool: int = 32) -> Iterator[ClusterAdapters]:
    """The adapters for a block, closed after it."""
    adapters = open_adapters(access, rgw=rgw, rados_workers=rados_workers, s3_pool=s3_pool)
    try:
        yield adapters
    finally:
        adapters.close()
