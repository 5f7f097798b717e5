"""radosgw-admin adapter: argv lists only, a timeout on every call, JSON out of noisy stdout.

Every call goes through one runner (injected, so unit tests use a strict fake fed with
output captured from a real cluster). radosgw-admin exits 0 for some commands on a bucket
that does not exist (``bucket rm``; Ceph's own test expects it), so exit codes are not
evidence: callers that change anything read the state back.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Sequence

from rgwkeeper.access import ClusterAccess
from rgwkeeper.errors import CephError, CephTimeout, CommandFailed, NotFound
from rgwkeeper.names import validate_bucket


@dataclass(frozen=True)
class CompletedRun:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    duration_s: float


Runner = Callable[[Sequence[str], float], Awaitable[CompletedRun]]


async def subprocess_runner(argv: Sequence[str], timeout: float) -> CompletedRun:
    """Run argv (no shell), kill it at the timeout."""
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
