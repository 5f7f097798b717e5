import logging

import pytest
import structlog

from rgwkeeper import logs

pytest_plugins = ["integration.pytest_plugin", "integration.rgw_watch"]


@pytest.fixture(autouse=True)
def _logging_per_test():
    """A CLI test configures logging to print to the stderr pytest captured for it, a file
    closed once that test ends; later tests that log must not write there, nor inherit its
    --log-level."""
    root = logging.getLogger()
    handlers, level, remembered = root.handlers[:], root.level, logs._level
    yield
    structlog.reset_defaults()
    root.handlers[:] = handlers
    root.setLevel(level)
    logs._level = remembered
