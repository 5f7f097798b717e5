"""radosgw-admin adapter: argv lists only, a timeout on every call, JSON out of noisy stdout.

Every call goes through one runner (injected, so unit tests use a strict fake fed with
output captured from a real cluster). radosgw-admin exits 0 for some commands on a bucket
that does not exist (``bucket rm``; Ceph's own test expects it), so exit codes are not
evidence: callers that change anything read the state back.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Sequence

from rgwkeeper.access import ClusterAccess
from rgwkeeper.errors import CephError, CephTimeout, CommandFailed, InvalidName, NotFound
from rgwkeeper.names import validate_bucket


@dataclass(frozen=True)
class CompletedRun:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    duration_s: float


Runner = Callable[[Sequence[str], float], Awaitable[CompletedRun]]


CANCEL_GRACE_S = 5.0  # a cancelled run's child gets this long after SIGTERM before SIGKILL


async def subprocess_runner(argv: Sequence[str], timeout: float, *, cancel_grace_s: float = CANCEL_GRACE_S
                            ) -> CompletedRun:
    """Run argv (no shell), kill it at the timeout; if cancelled, SIGTERM, then SIGKILL after
    ``cancel_grace_s``."""
    t0 = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        raise CephTimeout(" ".join(argv[:6]), f"no answer within {timeout:.0f} s (killed)") from None
    except asyncio.CancelledError:
        # The caller stopped (SIGTERM, Ctrl-C): a child left running would go on changing the
        # cluster (an lc process expiring under a rule being taken off) after we are gone. SIGTERM
        # first, so a child rgwkeeper (the daemon's expire) cleans up too; then SIGKILL.
        proc.terminate()
        try:
            await asyncio.wait_for(asyncio.shield(proc.wait()), cancel_grace_s)
        except asyncio.TimeoutError:
            proc.kill()
            await asyncio.shield(proc.wait())
        raise
    return CompletedRun(tuple(argv), proc.returncode or 0, out.decode(errors="replace"),
                        err.decode(errors="replace"), time.monotonic() - t0)


def extract_json(text: str) -> Any:
    """Parse the JSON document in ``text``, skipping log lines printed before or after it."""
    stripped = text.strip()
    if not stripped:
        return None
    try:
        return json.loads(stripped)
    except json.JSONDecodeError:
        pass
    decoder = json.JSONDecoder()
    pos = 0
    for line in text.splitlines(keepends=True):
        first = line.lstrip()[:1]
        if first in ("{", "["):
            start = pos + (len(line) - len(line.lstrip()))
            try:
                value, _ = decoder.raw_decode(text, start)
                return value
            except json.JSONDecodeError:
                pass
        pos += len(line)
    raise ValueError(f"no JSON document in output ({stripped[:80]!r}...)")


# radosgw-admin exits with the error code modulo 256: ENOENT is 2, and RGW's own
# ERR_NO_SUCH_BUCKET (2002) shows as exit 210 with "failure: (2002) Unknown error 2002"
# (captured from 16.2.15 in tests/fixtures/pacific/radosgw-admin.json).
_NOT_FOUND_CODES = ("(2)", "(2002)")


def _is_not_found(result: CompletedRun) -> bool:
    return result.returncode in (2, 2002 % 256) and any(c in result.stderr for c in _NOT_FOUND_CODES)


class RadosgwAdmin:
    def __init__(self, access: ClusterAccess, *, runner: Runner = subprocess_runner,
                 binary: str = "radosgw-admin") -> None:
        self.access = access
        self._runner = runner
        self._binary = binary

    def argv(self, *args: str) -> list[str]:
        """The exact argv a call runs (also what a dry run prints)."""
        base = [self._binary, "--conf", str(self.access.conf), "--name", self.access.client_name]
        if self.access.keyring is not None:
            base += ["--keyring", str(self.access.keyring)]
        return base + list(args)

    async def run(self, *args: str, timeout: float | None = None) -> CompletedRun:
        argv = self.argv(*args)
        result = await self._runner(argv, timeout or self.access.timeout_s)
        if result.returncode != 0:
            if _is_not_found(result):
                raise NotFound(" ".join(args[:4]), "does not exist", ret=-2)
            raise CommandFailed(argv, result.returncode, result.stderr)
        return result

    async def json(self, *args: str, timeout: float | None = None) -> Any:
        result = await self.run(*args, "--format=json", timeout=timeout)
        try:
            return extract_json(result.stdout)
        except ValueError as exc:
            raise CephError(" ".join(args[:4]), str(exc)) from None

    # -- read-only queries used by the snapshot ---------------------------------------------
    async def reshard_list(self) -> list[dict[str, Any]]:
        out = await self.json("reshard", "list")
        return out or []

    async def bucket_stats(self, bucket: str) -> dict[str, Any]:
        return await self.json("bucket", "stats", "--bucket", validate_bucket(bucket))

    async def bucket_limit_check(self) -> list[dict[str, Any]]:
        return await self.json("bucket", "limit", "check") or []

    # -- reads used by purge ----------------------------------------------------------------
    async def metadata_get(self, key: str) -> dict[str, Any]:
        """``metadata get bucket:B`` or ``bucket.instance:B:ID``; NotFound if absent (exit 2)."""
        return await self.json("metadata", "get", validate_metadata_key(key))

    async def gc_list(self, *, include_all: bool = True) -> list[dict[str, Any]]:
        """GC entries: ``[{"tag", "time", "objs": [{"pool", "oid", "key", "instance"}]}]``."""
        args = ("gc", "list") + (("--include-all",) if include_all else ())
        return await self.json(*args) or []

    async def zone_placement(self) -> dict[str, dict[str, Any]]:
        """Placement id -> {index_pool, data_extra_pool, data_pool (STANDARD)} of this zone.

        ``zone get`` also prints the zone's ``system_key`` (a secret in multisite setups):
        only the placement pools are kept, and nothing of the raw output is logged.
        """
        zone = await self.json("zone", "get")
        out: dict[str, dict[str, Any]] = {}
        for p in (zone or {}).get("placement_pools", []):
            val = p.get("val", {})
            classes = val.get("storage_classes", {})
            out[p["key"]] = {
                "index_pool": val.get("index_pool", ""),
                "data_extra_pool": val.get("data_extra_pool", ""),
                "data_pool": classes.get("STANDARD", {}).get("data_pool", ""),
                "storage_classes": sorted(classes),
                "class_data_pools": sorted({c.get("data_pool", "") for c in classes.values()} - {""}),
            }
        return out

    async def zonegroup_zones(self) -> list[str]:
        """Names of the zones in this zonegroup (more than one means multisite replication)."""
        zg = await self.json("zonegroup", "get")
        return [z.get("name", "") for z in (zg or {}).get("zones", [])]

    async def user_stats(self, uid: str, *, sync: bool = False) -> dict[str, Any]:
        args = ("user", "stats", "--uid", validate_uid(uid)) + (("--sync-stats",) if sync else ())
        return await self.json(*args)

    async def user_buckets(self, uid: str) -> list[str]:
        """Names of the buckets linked to a user (``bucket list --uid``)."""
        return await self.json("bucket", "list", "--uid", validate_uid(uid)) or []


# -- argv builders for changes -------------------------------------------------------------
# Pure functions, so a plan can show the exact command before anything runs (dry run) and
# the executor runs the same tuple with RadosgwAdmin.run(*args).

_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._~-]{0,254}$")
_UID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,254}$")


def validate_bucket_id(bucket_id: str) -> str:
    if not isinstance(bucket_id, str) or not _ID_RE.match(bucket_id):
        raise InvalidName(f"bucket id {bucket_id[:80]!r} is not a bucket instance id like <zone id>.<n>.<n>")
    return bucket_id


def validate_uid(uid: str) -> str:
    if not isinstance(uid, str) or not _UID_RE.match(uid):
        raise InvalidName(f"user id {uid[:80]!r} is not a plain RGW uid (tenants are not supported)")
    return uid


def validate_metadata_key(key: str) -> str:
    section, _, rest = key.partition(":")
    if section == "bucket":
        validate_bucket(rest)
    elif section == "bucket.instance":
        name, _, bucket_id = rest.partition(":")
        validate_bucket(name)
        validate_bucket_id(bucket_id)
    else:
        raise InvalidName(f"metadata key {key[:80]!r} is not bucket:NAME or bucket.instance:NAME:ID")
    return key


def bucket_rm_args(bucket: str, *, purge_objects: bool = True, bypass_gc: bool = False,
                   max_concurrent_ios: int | None = None) -> tuple[str, ...]:
    args: tuple[str, ...] = ("bucket", "rm", "--bucket", validate_bucket(bucket))
    if purge_objects:
        args += ("--purge-objects",)
    if bypass_gc:
        args += ("--bypass-gc",)
    if max_concurrent_ios is not None:
        args += (f"--max-concurrent-ios={int(max_concurrent_ios)}",)
    return args


def gc_process_args(*, include_all: bool = True) -> tuple[str, ...]:
    return ("gc", "process") + (("--include-all",) if include_all else ())


def lc_process_args(bucket: str) -> tuple[str, ...]:
    return ("lc", "process", "--bucket", validate_bucket(bucket))


def lc_list_args() -> tuple[str, ...]:
    """Every bucket's lifecycle entry: ``[{"bucket": "tenant:name:marker", "started", "status"}]``."""
    return ("lc", "list")


def metadata_rm_args(key: str) -> tuple[str, ...]:
    return ("metadata", "rm", validate_metadata_key(key))


def user_stats_sync_args(uid: str) -> tuple[str, ...]:
    return ("user", "stats", "--uid", validate_uid(uid), "--sync-stats")
