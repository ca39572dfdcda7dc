"""The serve suite: one test per (profile, case), parametrized from profiles/ by the plugin."""

from harness.suite.serve_case import ServeCase


def test_serve(serve_case: ServeCase, serve_run) -> None:
    checks = serve_run(serve_case)
    assert len(checks) >= len(serve_case.requests), f"a request went unjudged: {checks}"
