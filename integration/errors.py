"""Errors raised by the test harness: one line naming the step and the log to read."""

from __future__ import annotations

from pathlib import Path


class HarnessError(Exception):
    """A harness step failed. ``str()`` is the one line an operator needs."""

    def __init__(self, step: str, detail: str, log: Path | None = None) -> None:
        self.step = step
        self.detail = detail
        self.log = log
        where = f"; see {log}" if log else ""
        super().__init__(f"{step} failed: {detail}{where}")
