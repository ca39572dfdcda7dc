"""What the serving roles did with a request: which roles served it, cache hits, a router's spread.

Each check reads the workers' own counters (harness/topology/role_metrics.py), never the answer; the
oracle classes that use them live in harness/oracles/roles_served.py and case_oracles.py.

- The path (`expected_path`, `check_path`): which roles must serve a request, checked against
  each role's own request counter. The expected path follows from the topology and the
  request's media: every worker that decodes or prefills (discovery components `backend` and
  `prefill`) takes every request; an encode worker takes a request exactly when it carries an
  image (encode workers take images only: video is decoded on the prefill or PD worker). Behind
  a router, the profile's `replicas` are one group: exactly one of them takes each request (key
  "worker1|worker2"). A profile may override a role's count for one request (`path`, with its
  reason). A disaggregated topology that silently stops using its encoder, or a request that
  runs twice, fails here whatever its answer says.
- Cache hits (`request_hit`, `check_cache_hits`): the repeats of one identical request find its
  prompt in the prefix cache. Upstream Dynamo's KV-router cases send the same image three times
  and want the repeats to land where the prompt is cached (`make_image_payload_cached_tokens`,
  `min_avg_kv_hit_rate` 0.9). Here a repeat's hit rate is the share of its prompt tokens served
  from cache: the answer's `usage.prompt_tokens_details.cached_tokens` / `usage.prompt_tokens`,
  or, where the answer lacks them, the serving worker's own prefix-cache counters over that
  request (hits / queries). The first request is left out (nothing can be cached yet); the mean
  over the repeats must reach the threshold. A router that sends a repeat to the replica
  without the cache, or workers whose prefix cache is off, fail it with the request and its
  rate named. `with_filler` lengthens a prompt past whole KV blocks with upstream's own filler.
- Router hits (`check_router_hits`): behind a KV router, the router's own hit rate for those
  repeats (the frontend's `dynamo_component_router_kv_hit_rate` histogram over each request,
  upstream's figure) reaches the same threshold: a repeat can land on the cached worker by a
  tie-break while the router sees nothing cached.
- The spread (`check_spread`): behind a router, every replica serves at least one of the case's
  requests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.launch.plan import RolePlan
from harness.oracles.checks import OracleResult
from harness.topology.role_metrics import ROUTER_KV_HIT_RATE, RouterHitTally, WorkerCounters

IMAGE_KINDS = ("image_url", "image_b64")


GROUP = "|"


def expected_path(
    workers: Sequence[RolePlan],
    media: Sequence[str],
    overrides: Mapping[str, int] | None = None,
    replicas: Sequence[str] = (),
) -> dict[str, int]:
    """Requests each worker (or group of replicas, "a|b") must take for one request. Example
    (E/P/D, an image URL): {"encode": 1, "prefill": 1, "decode": 1}; without media: encode 0;
    a router over two workers: {"worker1|worker2": 1}."""
    has_image = any(kind in IMAGE_KINDS for kind in media)
    path = {
        role.name: (int(has_image) if role.discovery_component == "encode" else 1)
        for role in workers
    }
    if replicas:
        path = {k: v for k, v in path.items() if k not in replicas}
        path[GROUP.join(replicas)] = 1
    return {**path, **(overrides or {})}


def check_path(
    expected: Mapping[str, int],
    before: Mapping[str, float | None],
    after: Mapping[str, float | None],
) -> OracleResult:
    """Each role's counter moved by exactly what the path expects."""
    problems, seen, at_fault = [], [], []
    for key, want in expected.items():
        roles = key.split(GROUP)
        starts, ends = [before.get(r) for r in roles], [after.get(r) for r in roles]
        if None in starts or None in ends:
            problems.append(f"role '{key}': its /metrics did not answer ({starts} -> {ends})")
            continue
        start = sum(s for s in starts if s is not None)
        end = sum(e for e in ends if e is not None)
        moved = end - start
        seen.append(f"{key} +{moved:g}")
        if moved != want:
            verb = "served" if moved else "did not serve"
            who = f"role '{key}'" if len(roles) == 1 else f"roles '{key}' together"
            at_fault += roles if len(roles) == 1 else []
            problems.append(
                f"{who} {verb} it: dynamo_component_requests_total"
                f'{{dynamo_endpoint="generate"}} {start:g} -> {end:g}, expected +{want}'
            )
    if problems:
        return OracleResult(False, "; ".join(problems), role=next(iter(at_fault), None))
    return OracleResult(True, f"path {', '.join(seen)}")


# Upstream's own filler (tests/utils/multimodal.py `_COLOR_PROMPT_FILLER`), repeated to lengthen a
# prompt past whole KV blocks.
PROMPT_FILLER = (
    " Analyze the image in detail; identify dominant tones, secondary hues, and surface textures"
    " across the foreground and background regions."
)


def with_filler(prompt: str, repeats: int) -> str:
    return f"{(PROMPT_FILLER * repeats).strip()} {prompt}" if repeats else prompt


@dataclass(frozen=True)
class RequestHit:
    """One request's prompt tokens and how many of them came from cache, and from where."""

    prompt_tokens: int
    cached_tokens: int
    source: str  # "usage" or "worker counters"
    # the KV router's own hit rate for it (its histogram's move; None: no routing recorded)
    router_rate: float | None = None

    @property
    def rate(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def request_hit(
    usage: dict[str, Any] | None,
    before: dict[str, WorkerCounters | None],
    after: dict[str, WorkerCounters | None],
    routed: RouterHitTally | None = None,
) -> RequestHit | None:
    """The hit of one answered request: from its usage, else from the workers' counters; with
    the router's own rate where its histogram moved over the request (`routed`)."""
    router_rate = routed.rate_sum / routed.decisions if routed and routed.decisions else None
    details = (usage or {}).get("prompt_tokens_details") or {}
    if usage and usage.get("prompt_tokens") and "cached_tokens" in details:
        prompt, cached = int(usage["prompt_tokens"]), int(details["cached_tokens"] or 0)
        return RequestHit(prompt, cached, "usage", router_rate)
    queries = hits = 0.0
    for role, end in after.items():
        start = before.get(role)
        if start is not None and end is not None:
            queries += end.prefix_queries - start.prefix_queries
            hits += end.prefix_hits - start.prefix_hits
    if queries <= 0:
        return None
    return RequestHit(int(queries), int(hits), "worker counters", router_rate)


def check_cache_hits(
    hits: Sequence[RequestHit | None], min_avg: float, min_tokens: int = 0
) -> OracleResult:
    """The repeats of a case's request (every hit but the first) reach `min_avg` on average, and
    each has at least `min_tokens` prompt tokens cached."""
    repeats = hits[1:]
    unknown = [n for n, hit in enumerate(repeats, start=2) if hit is None]
    if unknown:
        return OracleResult(
            False,
            f"request {unknown[0]} (a repeat) reported no cached-token count: neither "
            "usage.prompt_tokens_details.cached_tokens nor the workers' vllm:prefix_cache_* "
            "counters",
        )
    known = [hit for hit in repeats if hit is not None]
    if not known:
        return OracleResult(False, "no repeat of the request was answered")
    avg = sum(hit.rate for hit in known) / len(known)
    detail = ", ".join(
        f"request {n}: {hit.cached_tokens}/{hit.prompt_tokens} cached "
        f"({hit.rate:.2f}, {hit.source}"
        + (f"; router {hit.router_rate:.2f}" if hit.router_rate is not None else "")
        + ")"
        for n, hit in enumerate(known, start=2)
    )
    few = [n for n, hit in enumerate(known, start=2) if hit.cached_tokens < min_tokens]
    if few:
        return OracleResult(
            False,
            f"request {few[0]} (a repeat) had fewer than {min_tokens} prompt tokens cached "
            f"({detail})",
        )
    if avg < min_avg:
        worst = min(range(len(known)), key=lambda i: known[i].rate)
        return OracleResult(
            False,
            f"the same request sent again missed the prefix cache: request {worst + 2} hit rate "
            f"{known[worst].rate:.2f}; mean over the repeats {avg:.2f} < {min_avg} ({detail})",
        )
    return OracleResult(
        True, f"repeats hit the prefix cache: mean {avg:.2f} >= {min_avg} ({detail})"
    )


def check_router_hits(hits: Sequence[RequestHit | None], min_avg: float) -> OracleResult:
    """The KV router itself saw the repeats' blocks cached: the mean of its own hit rate over the
    repeats reaches `min_avg` (upstream's `min_avg_kv_hit_rate`, read from the same histogram).
    The engine's cache hit says the repeat landed where its prompt was cached; this says the
    router knew it, rather than landing there by a tie-break: a router whose block hashes
    differ from the worker's events routes blind."""
    repeats = hits[1:]
    unrouted = [
        n for n, hit in enumerate(repeats, start=2) if hit is None or hit.router_rate is None
    ]
    if unrouted:
        return OracleResult(
            False,
            f"request {unrouted[0]} (a repeat): the router recorded no routing decision "
            f"({ROUTER_KV_HIT_RATE}_count on the frontend's /metrics did not move)",
        )
    rates = [hit.router_rate for hit in repeats if hit is not None and hit.router_rate is not None]
    if not rates:
        return OracleResult(False, "no repeat of the request was answered")
    avg = sum(rates) / len(rates)
    detail = ", ".join(
        f"request {n}: router {hit.router_rate:.2f}, engine {hit.rate:.2f}"
        for n, hit in enumerate(repeats, start=2)
        if hit is not None and hit.router_rate is not None
    )
    if avg >= min_avg:
        return OracleResult(
            True, f"the router saw the repeats cached: mean {avg:.2f} >= {min_avg} ({detail})"
        )
    blind = blind_repeats(hits, min_avg)
    why = (
        f": request {blind[0]} was served from the engine's prefix cache while the router saw "
        "its blocks uncached, so the router's block hashes differ from the worker's KV events "
        "(the frontend's token sequence for the request is not the engine's: an image counted "
        "to a different number of tokens, a different block size)"
        if blind
        else ": the engines served none of the repeats from cache either (nothing was cached "
        "where they ran: the workers' prefix cache, or their KV events)"
    )
    return OracleResult(
        False,
        f"the KV router's own hit rate over the repeats: mean {avg:.2f} < {min_avg}{why} "
        f"({detail}; {ROUTER_KV_HIT_RATE})",
    )


def blind_repeats(hits: Sequence[RequestHit | None], min_avg: float) -> list[int]:
    """The repeats (by request number) the engine served from cache while the router saw them
    uncached: what only a blind router produces."""
    return [
        n
        for n, hit in enumerate(hits[1:], start=2)
        if hit is not None and hit.router_rate is not None and hit.rate >= min_avg > hit.router_rate
    ]


def check_spread(
    start: Mapping[str, float | None], now: Mapping[str, float | None], replicas: Sequence[str]
) -> OracleResult:
    """Every replica served at least one of the case's requests (its own request counter)."""
    served = {r: (now.get(r) or 0) - (start.get(r) or 0) for r in replicas}
    idle = [role for role, count in served.items() if count < 1]
    detail = ", ".join(f"{role} +{count:g}" for role, count in served.items())
    if idle:
        return OracleResult(
            False,
            f"the router sent every request of the case to one worker: {detail}; {idle} "
            "served none (dynamo_component_requests_total)",
        )
    return OracleResult(True, f"spread over the replicas: {detail}")
