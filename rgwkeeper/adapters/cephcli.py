"""Ceph's command-line tools (``ceph``, ``rados``, ``radosgw-admin``): one runner for all.

argv lists only (no shell), the cluster access's conf, name and keyring on every call, a
timeout on every call, and JSON taken out of noisy stdout. The process runner is injected, so
unit tests use a strict fake fed with output captured from a real cluster.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Sequence

import structlog

from rgwkeeper.access import ClusterAccess
from rgwkeeper.adapters.child import run_child
from rgwkeeper.errors import CephError, CephTimeout, CommandFailed

log = structlog.get_logger(__name__)


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
    ``cancel_grace_s``: a cancelled run raises CancelledError once its child is gone, even if
    cancelled again meanwhile (a second Ctrl-C, asyncio.run's teardown). Not through asyncio's
    own subprocesses, which can hang when cancelled (adapters.child)."""
    t0 = time.monotonic()
    done = await run_child(argv, timeout, cancel_grace_s=cancel_grace_s)
    if done.timed_out:
        raise CephTimeout(" ".join(argv[:6]), f"no answer within {timeout:.0f} s (killed)")
    return CompletedRun(tuple(argv), done.returncode, done.stdout.decode(errors="replace"),
                        done.stderr.decode(errors="replace"), time.monotonic() - t0)


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


class CephCli:
    """One of Ceph's command-line tools, run with this cluster access."""

    def __init__(self, access: ClusterAccess, binary: str, *, runner: Runner = subprocess_runner) -> None:
        self.access = access
        self.binary = binary
        self._runner = runner

    def argv(self, *args: str) -> list[str]:
        """The exact argv a call runs (also what a dry run prints)."""
        base = [self.binary, "--conf", str(self.access.conf), "--name", self.access.client_name]
        if self.access.keyring is not None:
            base += ["--keyring", str(self.access.keyring)]
        return base + list(args)

    async def run(self, *args: str, timeout: float | None = None) -> CompletedRun:
        argv = self.argv(*args)
        t0 = time.monotonic()
        log.debug("ceph cli start", binary=self.binary, args=list(args[:4]))
        result = await self._runner(argv, timeout or self.access.timeout_s)
        log.debug("ceph cli done", binary=self.binary, args=list(args[:4]), exit=result.returncode,
                  ms=round((time.monotonic() - t0) * 1000, 1))
        if result.returncode != 0:
            raise CommandFailed(argv, result.returncode, result.stderr)
        return result

    async def json(self, *args: str, timeout: float | None = None) -> Any:
        result = await self.run(*args, "--format=json", timeout=timeout)
        try:
            return extract_json(result.stdout)
        except ValueError as exc:
            raise CephError(" ".join(args[:4]), str(exc)) from None
