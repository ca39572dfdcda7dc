"""The harness's pytest plugin (`-p harness.suite.plugin`, pytest.ini): one module per pytest
phase: options and the session they decide, collection, the fixtures a case runs with, and what
a finished case reports."""

pytest_plugins = [
    "harness.suite.options",
    "harness.suite.collection",
    "harness.suite.fixtures",
    "harness.suite.reporting",
]
