"""Validation of bucket names and prefixes before anything reaches RGW.

rgwadmin builds query strings without URL-encoding, so a "bucket" such as
``x&purge-objects=true`` would add a parameter to an admin request (docs/architecture.md). We
refuse anything outside S3's bucket naming rules, and we URL-encode every parameter anyway.
"""

from __future__ import annotations

import ipaddress
import re

from rgwkeeper.errors import InvalidName

# Used with fullmatch: `$` would also match before a final newline ("abc\n").
_BUCKET_RE = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", re.ASCII)
_PREFIX_FORBIDDEN = re.compile(r"[%&\s\x00-\x1f\x7f\\]")
MAX_PREFIX_LEN = 1024  # S3 object key limit, in bytes


def validate_bucket(name: str) -> str:
    """Return ``name`` if it is a valid S3 bucket name, else raise InvalidName (one line)."""
    if not isinstance(name, str) or not name:
        raise InvalidName("bucket name is empty; give the bucket's name")
    shown = name if len(name) <= 80 else name[:77] + "..."
    if name.startswith("-"):
        raise InvalidName(f"bucket name {shown!r} starts with '-'; bucket names start with a letter or digit")
    if not 3 <= len(name) <= 63:
        raise InvalidName(f"bucket name {shown!r} has {len(name)} characters; it must have 3 to 63")
    if not _BUCKET_RE.fullmatch(name):
        bad = sorted({c for c in name if not (c.islower() or c.isdigit() or c in ".-")} or {"first/last"})
        raise InvalidName(
            f"bucket name {shown!r} is not valid: only lowercase letters, digits, '.' and '-' are "
            f"allowed, starting and ending with a letter or digit (found {' '.join(repr(c) for c in bad)})"
        )
    if ".." in name or ".-" in name or "-." in name:
        raise InvalidName(f"bucket name {shown!r} has adjacent '.'/'-' characters, which S3 refuses")
    try:
        ipaddress.IPv4Address(name)
    except ValueError:
        pass
    else:
        raise InvalidName(f"bucket name {shown!r} looks like an IP address, which S3 refuses")
    return name


_BUCKET_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789.-")
_GLOB_CLASS_RE = re.compile(r"\[[^\]]*\]")


def bucket_pattern_problem(pattern: str) -> str | None:
    """Why a glob of bucket names (purge.protected_buckets) can match no bucket name, or None: a
    character outside ``[...]``, ``*`` and ``?`` that no name has (an upper-case letter, '_', a
    space). fnmatch is case-sensitive, so ``PROD*`` would protect nothing, silently."""
    bad = sorted({c for c in _GLOB_CLASS_RE.sub("", pattern) if c not in _BUCKET_CHARS and c not in "*?"})
    if not bad:
        return None
    return (f"pattern {pattern!r} can match no bucket name (found {' '.join(repr(c) for c in bad)}; names have "
            "only lowercase letters, digits, '.' and '-'): write it as the names are written")


def validate_prefix(prefix: str) -> str:
    """Return ``prefix`` if it is safe to send as an object-key prefix."""
    if not prefix:
        raise InvalidName("prefix is empty; omit --prefix to mean the whole bucket")
    if prefix.startswith("-"):
        raise InvalidName(f"prefix {prefix[:80]!r} starts with '-', which a CLI would read as an option")
    m = _PREFIX_FORBIDDEN.search(prefix)
    if m:
        raise InvalidName(
            f"prefix {prefix[:80]!r} contains {m.group()!r}; '%', '&', '\\', whitespace and control "
            "characters are refused because RGW or a query string would reinterpret them"
        )
    if len(prefix.encode()) > MAX_PREFIX_LEN:
        raise InvalidName(f"prefix is {len(prefix.encode())} bytes; S3 keys are at most {MAX_PREFIX_LEN}")
    return prefix


def is_job_id(text: str) -> bool:
    """A job id as rgwkeeper makes them (a purge's plan id, a load job's): 12 lowercase hex digits."""
    return len(text) == 12 and all(c in "0123456789abcdef" for c in text)
