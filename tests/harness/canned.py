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
    """A judge that builds each request's scope from one profile: for answers judged without
    the case loop (canned ones, or a fault's real answer judged by hand)."""

    profile: Profile | None = None

    def seen(
        self, request: RequestSpec, resp: requests.Response, body: dict[str, Any] | None = None
    ) -> Answer:
        assert self.profile is not None, "ProfileJudge needs the profile its requests belong to"
        scope = Scope(request, self.tier, self.profile, self.settings)
        return self.answer(scope, {"messages": []} if body is None else body, resp)
