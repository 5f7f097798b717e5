"""How every command finds the cluster, the way Ceph's own CLIs do.

- ``--conf`` (default: ``$CEPH_CONF``, then ``/etc/ceph/ceph.conf``);
- ``--keyring`` (default: what ceph.conf names, else Ceph's default search path);
- ``--name client.X`` or ``--id X`` for the cephx client (default ``client.admin``);
- the RGW endpoint and the admin user's credentials from the rgwkeeper config file,
  overridable with ``--rgw-endpoint`` (once per endpoint: several RGWs of one zone share the
  requests) and ``--rgw-credentials FILE``.

A credentials file is TOML with ``access_key`` and ``secret_key`` and must be mode 0600
(no group or other bits) and owned by the user reading it. The secret is kept in a
``repr=False`` field and never logged, put on argv or into exception text.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Iterator, Sequence
from urllib.parse import urlsplit

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
    #: Further RGW endpoints of the same zone, after ``rgw_endpoint``: requests spread over all.
    rgw_more_endpoints: tuple[str, ...] = ()

    @property
    def rgw_endpoints(self) -> tuple[str, ...]:
        return (self.rgw_endpoint, *self.rgw_more_endpoints) if self.rgw_endpoint else ()

    def rgw_credentials(self) -> RgwCredentials:
        if self.rgw_credentials_file is None:
            raise UsageError(
                "no RGW credentials: set rgw.credentials_file in the config or pass --rgw-credentials FILE"
            )
        return load_credentials(self.rgw_credentials_file)

    def require_rgw_endpoint(self) -> str:
        return self.require_rgw_endpoints()[0]

    def require_rgw_endpoints(self) -> tuple[str, ...]:
        if not self.rgw_endpoint:
            raise UsageError("no RGW endpoint: set rgw.endpoint in the config or pass --rgw-endpoint URL")
        return self.rgw_endpoints


# A cephx entity is TYPE.ID; librados takes any ID without whitespace (client.rgw.host1 has dots).
_CLIENT_NAME_RE = re.compile(r"client\.[^\s\x00-\x1f\x7f]+")


def resolve(
    *,
    conf: str | None = None,
    keyring: str | None = None,
    name: str | None = None,
    client_id: str | None = None,
    rgw_endpoint: str | Sequence[str] | None = None,
    rgw_credentials: str | None = None,
    timeout_s: float | None = None,
    config_defaults: "ClusterDefaults | None" = None,
) -> ClusterAccess:
    """Combine command-line flags, the environment and the config file, in Ceph's order."""
    d = config_defaults or ClusterDefaults()
    if name and client_id:
        raise UsageError("give --name or --id, not both")
    client_name = name or (f"client.{client_id}" if client_id else None) or d.name or "client.admin"
    if not _CLIENT_NAME_RE.fullmatch(client_name):
        raise UsageError(f"cephx name {client_name!r} (from --name, --id or cluster.name) is not a client name: use "
                         "client.ID or --id ID, where ID has no whitespace or control characters")

    conf_path = Path(conf or os.environ.get("CEPH_CONF") or d.conf or DEFAULT_CONF)
    check_readable(conf_path, "ceph.conf", hint="pass --conf PATH or set CEPH_CONF")

    keyring_path = Path(keyring) if keyring else (Path(d.keyring) if d.keyring else None)
    if keyring_path is not None:
        check_readable(keyring_path, "keyring")

    creds = rgw_credentials or d.rgw_credentials_file
    endpoints = check_endpoints(rgw_endpoint or d.rgw_endpoint or ())
    return ClusterAccess(
        conf=conf_path,
        keyring=keyring_path,
        client_name=client_name,
        rgw_endpoint=endpoints[0] if endpoints else None,
        rgw_more_endpoints=endpoints[1:],
        rgw_credentials_file=Path(creds) if creds else None,
        timeout_s=timeout_s if timeout_s is not None else d.timeout_s,
    )


def endpoint_problem(url: str) -> str | None:
    """Why ``url`` is not an RGW endpoint like http://rgw1:8080, or None."""
    try:
        parts = urlsplit(url)
        port = parts.port  # raises ValueError for a port out of 0-65535 or not a number
    except ValueError as exc:
        return f"RGW endpoint {url!r} is not a URL like http://rgw1:8080 ({exc})"
    if parts.scheme not in ("http", "https") or not parts.hostname or url != url.strip():
        return f"RGW endpoint {url!r} is not an http(s) URL like http://rgw1:8080"
    if port == 0:
        return f"RGW endpoint {url!r} has port 0; give a port from 1 to 65535"
    if parts.username is not None or parts.password is not None:
        # A secret in the URL would be shown wherever the endpoint is (errors, logs).
        return "RGW endpoint has a user or password in it; put the keys in the credentials file"
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        return f"RGW endpoint {url!r} has a path, query or fragment; give only scheme, host and port"
    return None


def check_endpoint(url: str) -> str:
    problem = endpoint_problem(url)
    if problem:
        raise UsageError(problem)
    return url


def endpoints_problem(urls: str | Sequence[str]) -> str | None:
    """Why ``urls`` (one URL or several of one zone) are not RGW endpoints, or None."""
    listed = [urls] if isinstance(urls, str) else list(urls)
    for url in listed:
        if not isinstance(url, str):
            return f"RGW endpoint {url!r} is not a URL like http://rgw1:8080"
        problem = endpoint_problem(url)
        if problem:
            return problem
    seen: set[tuple[str, str, int]] = set()
    for url in listed:
        parts = urlsplit(url)
        same = (parts.scheme, (parts.hostname or "").lower(), parts.port or (443 if parts.scheme == "https" else 80))
        if same in seen:
            return f"RGW endpoint {url!r} is given twice; list each endpoint once"
        seen.add(same)
    return None


def check_endpoints(urls: str | Sequence[str]) -> tuple[str, ...]:
    problem = endpoints_problem(urls)
    if problem:
        raise UsageError(problem)
    return (urls,) if isinstance(urls, str) else tuple(urls)


@dataclass(frozen=True)
class ClusterDefaults:
    """The ``[cluster]`` and ``[rgw]`` values of the config file that feed :func:`resolve`."""

    conf: str | None = None
    keyring: str | None = None
    name: str | None = None
    rgw_endpoint: str | Sequence[str] | None = None
    rgw_credentials_file: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S


def check_readable(path: Path, what: str, *, hint: str | None = None,
                   error: type[UsageError] = CredentialsError) -> None:
    """Refuse, in one line, a file that is missing, a directory, or that this user cannot read
    (itself, or because a directory above it cannot be entered)."""
    with _opened(path, what, hint=hint, error=error):
        pass


def read_text(path: Path, what: str, *, hint: str | None = None,
              error: type[UsageError] = CredentialsError) -> str:
    """The file's text (UTF-8), or one line saying why it cannot be had."""
    with _opened(path, what, hint=hint, error=error) as f:
        data = f.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        # The offset only: the bytes around it may be part of a secret.
        raise error(f"{what} {path} is not valid UTF-8 (byte {exc.start}); write it as UTF-8 text") from None


@contextlib.contextmanager
def _opened(path: Path, what: str, *, hint: str | None, error: type[UsageError]) -> Iterator[BinaryIO]:
    try:
        f = open(path, "rb")
    except (FileNotFoundError, NotADirectoryError):
        raise error(f"{what} {path} does not exist; {hint or f'pass --{what} PATH'}") from None
    except PermissionError:
        raise error(f"cannot read {what} {path}: permission denied{_blocked_by(path)}; "
                    f"run as a user that can read it (docs/operations.md)") from None
    except IsADirectoryError:
        raise error(f"{what} {path} is a directory, not a file") from None
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror}") from None
    with f:
        yield f


def _blocked_by(path: Path) -> str:
    """Which directory above ``path`` this user cannot enter, if one is the reason."""
    for parent in reversed(path.absolute().parents):
        if not os.access(parent, os.X_OK):
            return f" (cannot enter directory {parent})"
    return ""


def check_private(path: Path, what: str, *, hint: str | None = None) -> None:
    """Refuse a secrets file that group or others can read, or that another user owns."""
    check_readable(path, what, hint=hint)
    st = path.stat()
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise CredentialsError(
            f"{what} {path} is mode {stat.S_IMODE(st.st_mode):04o}; it holds a secret and must be "
            f"0600: run chmod 600 {path}"
        )
    if st.st_uid != os.geteuid():
        raise CredentialsError(f"{what} {path} is owned by uid {st.st_uid}, not by the user reading it (uid {os.geteuid()})")


def load_credentials(path: Path) -> RgwCredentials:
    hint = "pass --rgw-credentials PATH or set rgw.credentials_file"
    check_private(path, "credentials file", hint=hint)
    try:
        data = tomllib.loads(read_text(path, "credentials file", hint=hint))
    except ValueError as exc:  # TOMLDecodeError, or an integer of over 4300 digits
        # The decoder's message names a line and column, never the file's content.
        raise CredentialsError(f"credentials file {path} is not valid TOML ({exc})") from None
    access, secret = data.get("access_key"), data.get("secret_key")
    if not isinstance(access, str) or not access or not isinstance(secret, str) or not secret:
        raise CredentialsError(
            f"credentials file {path} must set access_key and secret_key as strings"
        )
    return RgwCredentials(access_key=access, secret_key=secret)
