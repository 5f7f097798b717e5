"""How every command finds the cluster, the way Ceph's own CLIs do.

- ``--conf`` (default: ``$CEPH_CONF``, then ``/etc/ceph/ceph.conf``);
- ``--keyring`` (default: what ceph.conf names, else Ceph's default search path);
- ``--name client.X`` or ``--id X`` for the cephx client (default ``client.admin``);
- the RGW endpoint and the admin user's credentials from the rgwkeeper config file,
  overridable with ``--rgw-endpoint`` and ``--rgw-credentials FILE``.

A credentials file is TOML with ``access_key`` and ``secret_key`` and must be mode 0600
(no group or other bits) and owned by the user reading it. The secret is kept in a
``repr=False`` field and never logged, put on argv or into exception text.
"""

from __future__ import annotations

import os
import stat
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from rgwkeeper.errors import CredentialsError, UsageError

DEFAULT_CONF = Path("/etc/ceph/ceph.conf")
DEFAULT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class RgwCredentials:
    access_key: str
    secret_key: str = field(repr=False)

    def __str__(self) -> str:  # never the secret
        return f"RgwCredentials(access_key={self.access_key[:4]}...)"


@dataclass(frozen=True)
class ClusterAccess:
    """Everything needed to reach one cluster. Paths only: no secret is held here."""

    conf: Path
    keyring: Path | None
    client_name: str
    rgw_endpoint: str | None
    rgw_credentials_file: Path | None
    timeout_s: float = DEFAULT_TIMEOUT_S

    def rgw_credentials(self) -> RgwCredentials:
        if self.rgw_credentials_file is None:
            raise UsageError(
                "no RGW credentials: set rgw.credentials_file in the config or pass --rgw-credentials FILE"
            )
        return load_credentials(self.rgw_credentials_file)

    def require_rgw_endpoint(self) -> str:
        if not self.rgw_endpoint:
            raise UsageError("no RGW endpoint: set rgw.endpoint in the config or pass --rgw-endpoint URL")
        return self.rgw_endpoint


def resolve(
    *,
    conf: str | None = None,
    keyring: str | None = None,
    name: str | None = None,
    client_id: str | None = None,
    rgw_endpoint: str | None = None,
    rgw_credentials: str | None = None,
    timeout_s: float | None = None,
    config_defaults: "ClusterDefaults | None" = None,
) -> ClusterAccess:
    """Combine command-line flags, the environment and the config file, in Ceph's order."""
    d = config_defaults or ClusterDefaults()
    if name and client_id:
        raise UsageError("give --name or --id, not both")
    client_name = name or (f"client.{client_id}" if client_id else None) or d.name or "client.admin"
    if not client_name.startswith("client."):
        raise UsageError(f"--name {client_name!r} is not a client name; use client.ID or --id ID")

    conf_path = Path(conf or os.environ.get("CEPH_CONF") or d.conf or DEFAULT_CONF)
    if not conf_path.is_file():
        raise UsageError(f"ceph.conf {conf_path} does not exist; pass --conf PATH or set CEPH_CONF")
    if not os.access(conf_path, os.R_OK):
        raise CredentialsError(f"cannot read ceph.conf {conf_path}: permission denied")

    keyring_path = Path(keyring) if keyring else (Path(d.keyring) if d.keyring else None)
    if keyring_path is not None:
        check_readable(keyring_path, "keyring")

    creds = rgw_credentials or d.rgw_credentials_file
    return ClusterAccess(
        conf=conf_path,
        keyring=keyring_path,
        client_name=client_name,
        rgw_endpoint=(rgw_endpoint or d.rgw_endpoint or None),
        rgw_credentials_file=Path(creds) if creds else None,
        timeout_s=timeout_s if timeout_s is not None else d.timeout_s,
    )


@dataclass(frozen=True)
class ClusterDefaults:
    """The ``[cluster]`` and ``[rgw]`` values of the config file that feed :func:`resolve`."""

    conf: str | None = None
    keyring: str | None = None
    name: str | None = None
    rgw_endpoint: str | None = None
    rgw_credentials_file: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S


def check_readable(path: Path, what: str) -> None:
    try:
        with open(path, "rb"):
            pass
    except FileNotFoundError:
        raise CredentialsError(f"{what} {path} does not exist; pass --{what} PATH") from None
    except PermissionError:
        raise CredentialsError(
            f"cannot read {what} {path}: permission denied; run as a user that can read it"
        ) from None
    except IsADirectoryError:
        raise CredentialsError(f"{what} {path} is a directory, not a file") from None


def check_private(path: Path, what: str) -> None:
    """Refuse a secrets file that group or others can read, or that another user owns."""
    check_readable(path, what)
    st = path.stat()
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise CredentialsError(
            f"{what} {path} is mode {stat.S_IMODE(st.st_mode):04o}; it holds a secret and must be "
            f"0600: run chmod 600 {path}"
        )
    if st.st_uid != os.geteuid():
        raise CredentialsError(f"{what} {path} is owned by uid {st.st_uid}, not by the user reading it (uid {os.geteuid()})")


def load_credentials(path: Path) -> RgwCredentials:
    check_private(path, "credentials file")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        # The decoder's message names a line and column, never the file's content.
        raise CredentialsError(f"credentials file {path} is not valid TOML ({exc})") from None
    access, secret = data.get("access_key"), data.get("secret_key")
    if not isinstance(access, str) or not access or not isinstance(secret, str) or not secret:
        raise CredentialsError(
            f"credentials file {path} must set access_key and secret_key as strings"
        )
    return RgwCredentials(access_key=access, secret_key=secret)
