"""structlog setup: events with fields, JSON for journald, console output on a terminal.

Logs go to stderr for one-shot commands (stdout carries the report or ``--json``) and to
stdout for the daemon (journald keeps it). botocore, urllib3 and rgwadmin log through the
same renderer. A processor drops any field whose name looks like a secret, as a last line
of defence: secrets are never passed to a logger in the first place.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog

_SECRET_KEYS = ("secret", "password", "key_secret", "authorization", "signature")


def _drop_secrets(_logger: Any, _name: str, event: dict[str, Any]) -> dict[str, Any]:
    for k in list(event):
        if any(s in k.lower() for s in _SECRET_KEYS):
            event[k] = "[redacted]"
    return event


_level: str | None = None


def explicit_level() -> str | None:
    """The level given with --log-level, if any."""
    return _level


def setup(level: str = "info", stream: TextIO | None = None, json_output: bool | None = None,
          *, remember: bool = False) -> None:
    global _level
    if remember:
        _level = level
    stream = stream or sys.stderr
    if json_output is None:
        json_output = not stream.isatty()
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _drop_secrets,
    ]
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if json_output
        else structlog.dev.ConsoleRenderer(colors=stream.isatty())
    )
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=stream),
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        processor=renderer, foreign_pre_chain=[structlog.stdlib.add_logger_name, *shared]))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    # rgwadmin logs the access key at debug level; keep third parties at WARNING.
    for noisy in ("botocore", "boto3", "urllib3", "rgwadmin", "apscheduler", "docker"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
