"""A launched topology: its plan, environment, processes, readiness phases, health, teardown."""
