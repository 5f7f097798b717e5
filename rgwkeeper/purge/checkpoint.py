"""Purge checkpoints: a local JSON file per purge, written atomically, that survives a crash.

One file per (bucket, bucket id, request): ``<state_dir>/<bucket>.<bucket id>.<request key>.json``.
The bucket id is part of the name, so a new bucket created under the same name never resumes
an old plan. The file holds the plan as it was made (with its absolute age cutoff), the
index of the step under way, that step's cursor (the last key whose page is fully done) and
the counters. An flock on a sibling ``.lock`` file keeps two purges of one bucket from
running at once on this host.
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import structlog

from rgwkeeper.errors import UsageError
from rgwkeeper.locks import try_flock

log = structlog.get_logger("rgwkeeper.purge")

FORMAT = 1


@dataclass
class State:
    plan: dict[str, Any]
    step: int = 0  # index of the first step not yet finished
    cursor: dict[str, Any] = field(default_factory=dict)  # where the current step resumes
    counters: dict[str, int] = field(default_factory=dict)
    memo: dict[str, Any] = field(default_factory=dict)  # what later steps need (e.g. rules read before)
    status: str = "running"  # running, done, failed
    error: str = ""
    started_at: float = field(default_factory=time.time)
    updated_at: float = 0.0
    resumed: int = 0


# Fault injection for the crash-and-resume tests (like Ceph's own *_inject_* options): the
# process kills itself (SIGKILL, no cleanup) right after its N-th checkpoint with a cursor
# reaches the disk. A test that polls the file instead loses the race to a fast purge.
CRASH_ENV = "RGWKEEPER_INJECT_CRASH_AFTER_CURSORS"
#: The same at a named point: "before-step:<kind>" right after the checkpoint that begins that
#: step reaches the disk (e.g. "before-step:verify": between the last change and the read-back),
#: "owner-sync" as the owner's stats sync begins (the bucket gone, the drop's step unfinished),
#: or "tails-released" once a round's tails lost their references, before its heads are removed.
CRASH_AT_ENV = "RGWKEEPER_INJECT_CRASH_AT"


def crash_point(name: str) -> None:
    """SIGKILL this process if ``RGWKEEPER_INJECT_CRASH_AT`` names this point (tests only)."""
    if os.environ.get(CRASH_AT_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)


class Checkpoint:
    def __init__(self, path: Path, lock_path: Path | None = None) -> None:
        self.path = path
        self._cursor_saves = 0
        self._crash_after = int(os.environ.get(CRASH_ENV) or 0)
        # One lock per bucket name, whatever the options: two purges of a bucket never overlap.
        self.lock_path = lock_path or path.with_name(path.name + ".lock")
        self._lock_fd: int | None = None

    # -- the file ---------------------------------------------------------------------------
    def load(self) -> State | None:
        try:
            raw = json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, json.JSONDecodeError) as exc:
            raise UsageError(f"checkpoint {self.path} cannot be read ({exc}); move it away to start over") from None
        if raw.get("format") != FORMAT:
            raise UsageError(f"checkpoint {self.path} has format {raw.get('format')!r}, not {FORMAT}; "
                             "move it away to start over")
        raw.pop("format")
        return State(**raw)

    def save(self, state: State) -> None:
        state.updated_at = time.time()
        data = json.dumps({"format": FORMAT, **state.__dict__}, sort_keys=True, default=str)
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, data.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        dfd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)  # the rename itself must survive a crash
        finally:
            os.close(dfd)
        log.debug("purge checkpoint saved", bytes=len(data))  # bench.timeline places it in its second
        if self._crash_after and state.cursor:
            self._cursor_saves += 1
            if self._cursor_saves >= self._crash_after:
                os.kill(os.getpid(), signal.SIGKILL)
        steps = state.plan.get("steps", [])
        if not state.cursor and state.status == "running" and state.step < len(steps):
            crash_point(f"before-step:{steps[state.step].get('kind')}")

    def discard(self) -> None:
        self.path.unlink(missing_ok=True)

    # -- one purge at a time ----------------------------------------------------------------
    def lock(self) -> None:
        self._lock_fd = try_flock(self.lock_path, "another rgwkeeper purge of this bucket is running on this host")

    def unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None


class CheckpointStore:
    """The checkpoints in one state directory (``purge.state_dir``)."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir

    def ensure(self) -> None:
        try:
            self.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        except PermissionError:
            raise UsageError(f"cannot create the purge state directory {self.state_dir}: permission denied; "
                             "set purge.state_dir in the config or run as a user that can") from None
        if not os.access(self.state_dir, os.W_OK):
            raise UsageError(f"the purge state directory {self.state_dir} is not writable")

    def for_purge(self, bucket: str, bucket_id: str, request_key: str) -> Checkpoint:
        return Checkpoint(self.state_dir / f"{bucket}.{bucket_id}.{request_key}.json", self.state_dir / f"{bucket}.lock")

    def unfinished(self, bucket: str) -> list[tuple[Checkpoint, State]]:
        """Checkpoints of this bucket (any instance) that did not finish."""
        out = []
        if not self.state_dir.is_dir():
            return out
        for path in sorted(self.state_dir.glob(f"{bucket}.*.json")):
            if path.name.count(".") < 3 or path.name[len(bucket)] != ".":
                continue
            cp = Checkpoint(path, self.state_dir / f"{bucket}.lock")
            state = cp.load()
            if state is not None and state.plan.get("profile", {}).get("bucket") == bucket and state.status != "done":
                out.append((cp, state))
        return out


@dataclass
class Progress:
    step: str
    objects_done: int
    bytes_done: int
    objects_total: int
    bytes_total: int


class Ledger:
    """A run's state as it goes: counters and the cursor, saved to its checkpoint at most every
    ``interval_s`` (or when forced, at a step's end) and reported as progress. Without a
    checkpoint (an expiry) it only counts."""

    def __init__(self, state: State, checkpoint: Checkpoint | None, *, interval_s: float,
                 clock: Callable[[], float], totals: tuple[int, int] = (0, 0),
                 on_progress: Callable[[Progress], None] | None = None) -> None:
        self.state = state
        self.checkpoint = checkpoint
        self.interval_s = interval_s
        self.step_name = ""
        self._clock = clock
        self._totals = totals
        self._on_progress = on_progress or (lambda p: None)
        self._last_save = 0.0

    @property
    def counters(self) -> dict[str, int]:
        return self.state.counters

    def count(self, **inc: int) -> None:
        for k, v in inc.items():
            self.counters[k] = self.counters.get(k, 0) + v

    def save(self, force: bool = False) -> None:
        now = self._clock()
        if self.checkpoint is not None and (force or now - self._last_save >= self.interval_s):
            self.checkpoint.save(self.state)
            self._last_save = now

    def done_through(self, cursor: dict[str, Any]) -> None:
        """Every page up to ``cursor`` is done: a resumed run starts after it."""
        self.state.cursor = cursor
        self.save()

    def progress(self) -> None:
        self._on_progress(Progress(self.step_name, self.counters.get("objects_deleted", 0),
                                   self.counters.get("bytes_deleted", 0), *self._totals))
