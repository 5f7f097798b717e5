"""A purge's progress as Prometheus metrics in a text file, for node exporter's textfile
collector (``--collector.textfile.directory``): a one-shot purge has no endpoint to scrape.

The file is rewritten atomically (prometheus_client writes a temporary file and renames it)
at most once a second while the purge runs, and once more when it ends, so a scrape never
reads half a file. A purge killed with SIGKILL leaves ``rgwkeeper_purge_running`` at 1 and its
last progress time behind: the stalled-purge alert is how that shows
(config/prometheus/rgwkeeper-alerts.yml).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import structlog
from prometheus_client import CollectorRegistry, Gauge, write_to_textfile

from rgwkeeper.config import textfile_problem
from rgwkeeper.errors import UsageError
from rgwkeeper.purge.checkpoint import Progress

log = structlog.get_logger("rgwkeeper.purge")
WRITE_EVERY_S = 1.0
LABELS = ("bucket", "plan", "method")


class ProgressTextfile:
    """One purge's metrics, written to ``path``."""

    def __init__(self, path: Path, *, bucket: str, plan: str, method: str,
                 wall_clock: Callable[[], float] = time.time, clock: Callable[[], float] = time.monotonic) -> None:
        problem = textfile_problem(str(path))
        if problem:
            raise UsageError(f"purge metrics textfile {problem}")
        self.path = path
        self._wall = wall_clock
        self._clock = clock
        self._last_write: float | None = None
        r = self.registry = CollectorRegistry()
        labels = {"bucket": bucket, "plan": plan, "method": method}

        def gauge(name: str, doc: str, extra: tuple[str, ...] = ()) -> Gauge:
            return Gauge(name, doc, [*LABELS, *extra], registry=r)

        self._running = gauge("rgwkeeper_purge_running", "1 while the purge runs (in its step), 0 once it ended",
                              ("step",))
        self._failed = gauge("rgwkeeper_purge_failed", "1 if the purge stopped on an error or a failed end-state "
                             "check; it resumes from its checkpoint")
        self._deleted = gauge("rgwkeeper_purge_objects_deleted", "Objects deleted so far").labels(**labels)
        self._bytes = gauge("rgwkeeper_purge_bytes_deleted", "Bytes deleted so far").labels(**labels)
        self._planned = gauge("rgwkeeper_purge_objects_planned", "Objects the bucket held when planned").labels(**labels)
        self._progress_at = gauge("rgwkeeper_purge_last_progress_timestamp_seconds",
                                  "When the purge last reported progress (Unix time)").labels(**labels)
        self._labels = labels
        self._step = ""

    def start(self, step: str = "") -> None:
        """The first write, before anything changes: a path that cannot be written stops the
        purge here, with nothing done."""
        self._set_running(step)
        self._failed.labels(**self._labels).set(0)
        self._progress_at.set(self._wall())
        try:
            self._write()
        except OSError as exc:
            raise UsageError(f"cannot write the purge metrics textfile {self.path}: {exc.strerror or exc}; "
                             "nothing was changed") from None

    def update(self, p: Progress) -> None:
        new_step = p.step != self._step
        if new_step:
            self._set_running(p.step)
        self._deleted.set(p.objects_done)
        self._bytes.set(p.bytes_done)
        self._planned.set(p.objects_total)
        self._progress_at.set(self._wall())
        if new_step or self._last_write is None or self._clock() - self._last_write >= WRITE_EVERY_S:
            self._write_or_warn()

    def finish(self, *, failed: bool) -> None:
        self._running.clear()
        self._running.labels(**self._labels, step="").set(0)
        self._failed.labels(**self._labels).set(1 if failed else 0)
        self._write_or_warn()

    def _set_running(self, step: str) -> None:
        self._step = step
        self._running.clear()
        self._running.labels(**self._labels, step=step).set(1)

    def _write(self) -> None:
        self._last_write = self._clock()
        write_to_textfile(str(self.path), self.registry)

    def _write_or_warn(self) -> None:
        # Once the purge runs, a metrics file that cannot be written (a full /var) must not
        # stop it: it is said, and the next write tries again.
        try:
            self._write()
        except OSError as exc:
            log.warning("purge metrics textfile not written", path=str(self.path), error=exc.strerror or str(exc))
