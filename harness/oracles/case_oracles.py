"""A case's answered requests judged together: the repeats' prefix-cache and KV-router hits, the
encoder's embedding-cache hits, the spread over a router's replicas."""

from __future__ import annotations

import dataclasses

from harness.core.verdict import Cause
from harness.oracles.answer import BusySends, CaseRun, CaseScope
from harness.oracles.base import CaseOracle
from harness.oracles.checks import (
    OracleResult,
)
from harness.oracles.serving import (
    blind_repeats,
    check_cache_hits,
    check_router_hits,
    check_spread,
)
from harness.topology.role_metrics import EMBEDDING_HITS_TOTAL


class CacheHit(CaseOracle):
    """The repeats of the case's own request find its prompt in the prefix cache (upstream's
    KV-router cases: `min_avg_kv_hit_rate`)."""

    name = "cache hit"
    order = 10
    cause = Cause.CACHE_MISS

    def applies(self, scope: CaseScope) -> bool:
        return scope.case.cache_hit is not None and scope.expects(200)

    def label(self, scope: CaseScope) -> str:
        assert scope.case.cache_hit is not None
        return f"repeats hit the prefix cache (mean >= {scope.case.cache_hit.min_avg_hit_rate})"

    def check(self, run: CaseRun) -> OracleResult:
        hit = run.scope.case.cache_hit
        assert hit is not None
        return check_cache_hits(run.hits, hit.min_avg_hit_rate, hit.min_cached_tokens)


class RouterHit(CaseOracle):
    """Behind a KV router, the router itself saw the repeats' blocks cached (upstream's
    `min_avg_kv_hit_rate`, the mean of the router's own hit-rate histogram over the repeats)."""

    name = "router hit"
    order = 8  # before the engine's cache hit: a blind router is the cause of the repeats' miss
    cause = Cause.ROUTER_MISS

    def applies(self, scope: CaseScope) -> bool:
        routed = bool(scope.profile.replicas) and scope.case.cache_hit is not None
        return routed and scope.expects(200)

    def label(self, scope: CaseScope) -> str:
        assert scope.case.cache_hit is not None
        threshold = scope.case.cache_hit.min_avg_hit_rate
        return f"the KV router saw the repeats cached (its own hit rate, mean >= {threshold})"

    def check(self, run: CaseRun) -> OracleResult:
        """router_miss where the engine hit a repeat the router saw uncached; else the engines
        cached nothing where the repeats ran, which is the prefix cache's fault (cache_miss)."""
        assert run.scope.case.cache_hit is not None
        rate = run.scope.case.cache_hit.min_avg_hit_rate
        result = check_router_hits(run.hits, rate)
        if result.passed or blind_repeats(run.hits, rate):
            return result
        return dataclasses.replace(result, cause=Cause.CACHE_MISS)


class EmbeddingCacheHit(CaseOracle):
    """The repeats of the case's media were served from the encoder's embedding cache, by
    Dynamo's own counter (upstream checks its log line: "Embedding cache hit for …")."""

    name = "embedding cache hit"
    order = 15
    cause = Cause.CACHE_MISS

    def applies(self, scope: CaseScope) -> bool:
        return scope.case.embedding_cache_hit and scope.expects(200)

    def label(self, scope: CaseScope) -> str:
        return "the repeats' media hit the encoder's embedding cache"

    def check(self, run: CaseRun) -> OracleResult:
        wanted = run.scope.case.repeat - 1
        moved = {role: n for role, n in run.embedding_hits.items() if n}
        seen = sum(moved.values())
        where = ", ".join(f"{role} +{n:g}" for role, n in moved.items()) or "no worker"
        return OracleResult(
            seen >= wanted,
            f"embedding cache hits over the case: {where} ({EMBEDDING_HITS_TOTAL}); "
            f"{wanted} repeat(s) {'served from it' if seen >= wanted else 'expected'}",
        )


# The spread's held request: ~320 prompt tokens (distinct from the case's, so the router's load
# on the worker holding it outweighs any prefix the others share with its cache) and up to 1600
# tokens, never cut short by EOS, inside the CPU tier's 2048-token context
# (launchers/lib/cpu_engine_args). SGLang on CPU decoded 1024 such tokens in 2.7-3.3 s; the
# three sent beside it were answered in about 1 s, and the hold is closed then.
SPREAD_HOLD_PROMPT = "Repeat after me: " + "apple banana cherry " * 25


SPREAD_HOLD_TOKENS = 1600


SPREAD_REQUESTS = 3  # sent while one worker holds the long request: the router sends them away


class Spread(CaseOracle):
    """Behind a router, the case's requests reached every replica: 'two workers' is not one.
    Requests sent one after another may all land on one replica (a KV router with nothing in
    flight breaks ties the same way, and a replica holding a prefix wins its repeats), so a few
    are sent while one replica is held busy by a long request: a router that sees both sends
    them to the other."""

    name = "spread"
    order = 20
    cause = Cause.WRONG_PATH

    def applies(self, scope: CaseScope) -> bool:
        return bool(scope.profile.replicas)

    def label(self, scope: CaseScope) -> str:
        return f"spread over the replicas {scope.profile.replicas}"

    def sends_while_busy(self, scope: CaseScope) -> BusySends:
        greedy = {"temperature": 0.0}  # like every request: sampling makes vLLM-CPU compile
        hold = {
            "messages": [{"role": "user", "content": SPREAD_HOLD_PROMPT}],
            "max_tokens": SPREAD_HOLD_TOKENS,
            "ignore_eos": True,
            **greedy,
        }
        rest = [
            {"messages": [{"role": "user", "content": f"Count to {n} in words."}], "max_tokens": 32}
            | greedy
            for n in range(3, 3 + SPREAD_REQUESTS)
        ]
        return BusySends(hold, rest)

    def check(self, run: CaseRun) -> OracleResult:
        failed = [status for status in run.statuses if status != 200]
        if failed:
            detail = f"the requests sent beside a held one answered {failed}"
            return OracleResult(False, detail, cause=Cause.HTTP_ERROR)
        result = check_spread(run.start_counts, run.end_counts, run.scope.profile.replicas)
        if not result.passed and not run.hold_in_flight:
            return OracleResult(
                False, f"{result.detail}; the held request ended before the others were answered"
            )
        return result
