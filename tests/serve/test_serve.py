"""The serve suite: one test per (profile, case), parametrized from profiles/ by the plugin."""

from harness.cases.case import ServeCase


def test_serve(serve_case: ServeCase, serve_run) -> None:
    verdicts = serve_run(serve_case)
    # run_case raised at the first oracle that failed; what is left to hold: every answer that
    # came back 200 met at least one oracle that reads its content, not only its shape.
    unread = [i for i, (status, content) in enumerate(verdicts) if status == 200 and not content]
    assert not unread, f"request(s) {unread} answered 200 and no oracle read the content"
