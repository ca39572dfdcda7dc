"""What the self-test runs by default and what only its full run does.

CI has 30 minutes on 2 cores (docs/measurements.md: the self-test's real-engine tests run one at
a time). Where several real launches prove the same thing on different topologies or roles, the
default run keeps one per class and `HARNESS_FULL_SELFTEST=1` runs them all; each such
parameter is marked, so a default run lists it as skipped with this reason."""

from __future__ import annotations

import os

import pytest

FULL = os.environ.get("HARNESS_FULL_SELFTEST") == "1"
EXHAUSTIVE = pytest.mark.skipif(
    not FULL,
    reason="another launch of a class the default self-test covers once: HARNESS_FULL_SELFTEST=1",
)
