"""The oracles are declared values: what `harness list` prints for a request is what the judge
runs on its answer, for every shipped case on both tiers."""

from __future__ import annotations

import json

import pytest
import requests

from harness.core.paths import REPO_ROOT
from harness.oracles.answer import Answer, CaseRun, CaseScope, JudgeSettings
from harness.oracles.base import CaseOracle, Oracle
from harness.oracles.baselines import BaselineStore
from harness.oracles.checks import OracleResult
from harness.oracles.registry import DECLARED, case_checks, case_oracles
from harness.profiles import load_profiles
from tests.harness.canned import ProfileJudge

PROFILES = load_profiles(REPO_ROOT / "profiles", REPO_ROOT)


def canned(status: int) -> requests.Response:
    resp = requests.Response()
    resp.status_code = status
    body = {
        "choices": [{"message": {"content": "x"}, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1},
    }
    resp._content = json.dumps(body).encode()
    return resp


def test_what_list_prints_is_what_the_judge_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[str] = []
    for oracle in Oracle.every():

        def recorded(answer: Answer, oracle: Oracle = oracle) -> OracleResult:
            ran.append(oracle.label(answer.scope))
            return OracleResult(True, "held")

        monkeypatch.setattr(oracle, "check", recorded)
    for case_oracle in CaseOracle.every():

        def recorded_run(run: CaseRun, oracle: CaseOracle = case_oracle) -> OracleResult:
            ran.append(oracle.label(run.scope))
            return OracleResult(True, "held")

        monkeypatch.setattr(case_oracle, "check", recorded_run)
    strict = JudgeSettings(excuse_defects=False)  # a passing declared oracle judges as usual
    checked = 0
    together: set[str] = set()
    for profile in PROFILES:
        for tier in ("cpu", "gpu"):
            if profile.tier(tier) is None:
                continue
            for case in profile.cases:
                listed = case_oracles(case, tier, profile)
                for request, plan in zip((case, *case.follow_ups), listed, strict=True):
                    judge = ProfileJudge(tier, BaselineStore(), "s", strict, profile=profile)
                    ran.clear()
                    judge.judge(judge.seen(request, canned(plan.status)))
                    assert ran == [label.removesuffix(DECLARED) for label in plan.labels], (
                        profile.test_id(case),
                        tier,
                    )
                    checked += 1
                ran.clear()
                scope = CaseScope(case, tier, profile)
                judge.judge_case(CaseRun(scope, {}))
                assert ran == list(case_checks(case, tier, profile)), profile.test_id(case)
                together.update(ran)
    assert checked > 60  # every request of every shipped case, both tiers
    assert any(label.startswith("repeats hit the prefix cache") for label in together)
    assert any(label.startswith("spread over the replicas") for label in together)


def test_a_declared_oracle_is_listed_as_failing_and_vouches_for_nothing() -> None:
    e_pd = next(p for p in PROFILES if p.name == "e_pd_llava-1.5-7b")
    [plan] = case_oracles(e_pd.cases[0], "cpu", e_pd)
    assert f"prompt tokens{DECLARED}" in plan.labels
    assert f"matches the model's own answer{DECLARED}" in plan.labels
    # the numbers after the encoder still vouch: judged on the encoder's own rows
    assert plan.content == (
        "logprobs on the encoder's own rows within 0.0003",
        "other media answers differently",
        "other transport answers the same",
    )
    assert any(label.startswith("encoder rows are the last hidden state") for label in plan.labels)
