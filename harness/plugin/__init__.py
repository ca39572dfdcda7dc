"""The harness's pytest plugin (`-p harness.plugin`, pytest.ini): one module per pytest
phase: options and the session they decide, collection, the fixtures a case runs with, and what
a finished case reports."""

from __future__ import annotations

pytest_plugins = [
    "harness.plugin.options",
    "harness.plugin.collection",
    "harness.plugin.fixtures",
    "harness.plugin.reporting",
]
