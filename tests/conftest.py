pytest_plugins = ["integration.pytest_plugin"]
