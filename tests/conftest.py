import pytest
import structlog

pytest_plugins = ["integration.pytest_plugin"]


@pytest.fixture(autouse=True)
def _logging_per_test():
    """A CLI test configures structlog to print to the stderr pytest captured for it, a file
    closed once that test ends; later tests that log must not write there."""
    yield
    structlog.reset_defaults()
