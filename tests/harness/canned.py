"""Judges of canned answers: media URLs with nothing served behind them, and a judge that
scopes each request to one profile."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import requests

from harness.oracles.answer import Answer, Scope
from harness.oracles.judge import CaseJudge
from harness.payloads.chat import MediaURLs
from harness.profiles import Profile, RequestSpec

URLS = MediaURLs(
    "http://127.0.0.1:1/i.png",
    "data:image/png;base64,AA==",
    "http://127.0.0.1:1/v.mp4",
    "data:video/mp4;base64,AA==",
    "http://127.0.0.1:1/missing.png",
    files={},
)


@dataclass
class ProfileJudge(CaseJudge):
    """A judge that builds each answer as the case loop would, its scope from one profile: for
    answers judged without the loop (canned ones, or a fault's real answer judged by hand)."""

    profile: Profile | None = None
    model_dir: str = "/nowhere"  # no checkpoint behind canned answers
    urls: MediaURLs = URLS

    def seen(
        self,
        request: RequestSpec,
        resp: requests.Response,
        body: dict[str, Any] | None = None,
        **around: Any,
    ) -> Answer:
        """The answer as the oracles see it (`around`: what the loop measured, sent, …)."""
        assert self.profile is not None, "ProfileJudge needs the profile its requests belong to"
        scope = Scope(request, self.tier, self.profile, self.settings)
        body = {"messages": []} if body is None else body
        return Answer(
            scope, body, resp, self.model_dir, self.urls, self.baselines, self.signature, **around
        )
