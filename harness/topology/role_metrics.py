"""Each Dynamo worker's own counters and the frontend's, scraped from their /metrics. Dynamo's work
handler counts every request an endpoint takes in
`dynamo_component_requests_total{dynamo_component=…, dynamo_endpoint="generate"}` (ai-dynamo 1.6.1),
and a vLLM worker's engine counts the prompt tokens it ran in `vllm:prompt_tokens_total` (vLLM
0.31's own metric, served on the same port by dynamo.vllm) and its prefix-cache lookups and hits in
`vllm:prefix_cache_*`. Read before and after a request, they say which roles served it (the path
check), how long a prompt each role ran (the role-prompts oracle: an E/P/D decode worker must run
the prompt whose KV it imported) and how much of it came from cache (the cache-hit check); the
frontend's say how many image tokens it counted and what the KV router saw cached."""

from __future__ import annotations

from dataclasses import dataclass

import requests

REQUESTS_TOTAL = "dynamo_component_requests_total"

PROMPT_TOKENS_TOTAL = "vllm:prompt_tokens_total"

# vLLM 0.31's prefix cache: prompt tokens looked up, and found (v1/metrics/loggers.py)
PREFIX_QUERIES_TOTAL = "vllm:prefix_cache_queries_total"

PREFIX_HITS_TOTAL = "vllm:prefix_cache_hits_total"

# Dynamo's multimodal embedding cache (dynamo/common/utils/prometheus.py EmbeddingCacheMetrics)
EMBEDDING_HITS_TOTAL = "dynamo_component_embedding_cache_hits_total"

SERVING_ENDPOINT = "generate"

SCRAPE_TIMEOUT_S = 2.0


def about(text: str, names: tuple[str, ...]) -> str:
    r"""The lines of a /metrics text about these metrics (their samples, their # HELP and # TYPE),
    so that only those are parsed: a vLLM worker's page holds some 1,500 lines, 20 ms a parse on
    the 2-core box against 0.9 ms for these lines (a real router case's pages, 2026-12-06).

    >>> about('# TYPE a counter\na_total 1\n# TYPE b gauge\nb 2\n# EOF', ("a",))
    '# TYPE a counter\na_total 1\n'
    """
    kept = []
    for line in text.splitlines():
        parts = line.split(" ", 3) if line.startswith("#") else [line]
        name = parts[2] if len(parts) > 2 else parts[0] if len(parts) == 1 else ""
        if name.startswith(names):
            kept.append(line)
    return "".join(f"{line}\n" for line in kept)


@dataclass(frozen=True)
class WorkerCounters:
    requests: float  # `generate` requests taken
    prompt_tokens: float | None  # prompt tokens its engine ran; None: no vLLM engine there
    prefix_queries: float = 0.0  # prompt tokens its prefix cache was asked for
    prefix_hits: float = 0.0  # of those, found cached
    embedding_hits: float = 0.0  # media its encoder's embedding cache served (Dynamo's own)


def parse_counters(text: str) -> WorkerCounters:
    """The counters one worker's /metrics text holds (all label sets summed).

    >>> parse_counters('dynamo_component_requests_total{dynamo_component="encode",'
    ...                'dynamo_endpoint="generate"} 3')
    ... # doctest: +NORMALIZE_WHITESPACE
    WorkerCounters(requests=3.0, prompt_tokens=None, prefix_queries=0.0, prefix_hits=0.0,
                   embedding_hits=0.0)
    """
    from prometheus_client.parser import text_string_to_metric_families

    served, prompt, queries, hits, embedded = 0.0, None, 0.0, 0.0, 0.0
    names = (
        REQUESTS_TOTAL,
        PROMPT_TOKENS_TOTAL,
        PREFIX_QUERIES_TOTAL,
        PREFIX_HITS_TOTAL,
        EMBEDDING_HITS_TOTAL,
    )
    for family in text_string_to_metric_families(about(text, names)):
        for sample in family.samples:
            if sample.labels.get("dynamo_endpoint", SERVING_ENDPOINT) != SERVING_ENDPOINT:
                continue
            if sample.name == REQUESTS_TOTAL:
                served += sample.value
            elif sample.name == PROMPT_TOKENS_TOTAL:
                prompt = (prompt or 0.0) + sample.value
            elif sample.name == PREFIX_QUERIES_TOTAL:
                queries += sample.value
            elif sample.name == PREFIX_HITS_TOTAL:
                hits += sample.value
            elif sample.name == EMBEDDING_HITS_TOTAL:
                embedded += sample.value
    return WorkerCounters(served, prompt, queries, hits, embedded)


def metrics_page(url: str, session: requests.Session | None = None) -> str | None:
    """The text of a /metrics URL, or None if it does not answer."""
    http = session or requests
    try:
        resp = http.get(url, timeout=SCRAPE_TIMEOUT_S)
    except requests.RequestException:
        return None
    return resp.text if resp.ok else None


def scrape(url: str, session: requests.Session | None = None) -> WorkerCounters | None:
    """`parse_counters` of one worker's /metrics URL, or None if it does not answer."""
    page = metrics_page(url, session)
    return None if page is None else parse_counters(page)


# dynamo.frontend's own histogram of the image placeholder tokens it computed per image-bearing
# request (ai-dynamo 1.6.1 dynamo/prometheus_names.py frontend_service), on its HTTP port.
IMAGE_TOKENS = "dynamo_frontend_image_tokens_per_request"

# The KV router's own hit rate per routed request (overlap blocks / the request's blocks), a
# histogram on the frontend's /metrics labelled by worker; upstream's cached-tokens payload judges
# its mean over the repeats (tests/utils/payloads.py, min_avg_kv_hit_rate).
ROUTER_KV_HIT_RATE = "dynamo_component_router_kv_hit_rate"


def histogram_totals(text: str, name: str) -> tuple[float, float]:
    r"""A Prometheus histogram's `_count` and `_sum`, all label sets summed.

    >>> histogram_totals('h_count{w="a"} 2\nh_sum{w="a"} 1.6\nh_count{w="b"} 1\n# HELP h x', "h")
    (3.0, 1.6)
    """
    from prometheus_client.parser import text_string_to_metric_families

    count = total = 0.0
    for family in text_string_to_metric_families(about(text, (name,))):
        for sample in family.samples:
            if sample.name == f"{name}_count":
                count += sample.value
            elif sample.name == f"{name}_sum":
                total += sample.value
    return count, total


@dataclass(frozen=True)
class ImageTokenTally:
    requests: float  # the histogram's _count: image-bearing requests it recorded
    tokens: float  # its _sum: their image placeholder tokens


@dataclass(frozen=True)
class RouterHitTally:
    decisions: float  # the router hit-rate histogram's _count: requests it routed
    rate_sum: float  # its _sum: their hit rates added up


@dataclass(frozen=True)
class FrontendTally:
    """The frontend's own histograms the oracles read."""

    image: ImageTokenTally
    router: RouterHitTally

    def since(self, before: FrontendTally) -> FrontendTally:
        """How far each figure moved from `before`."""
        return FrontendTally(
            ImageTokenTally(
                self.image.requests - before.image.requests, self.image.tokens - before.image.tokens
            ),
            RouterHitTally(
                self.router.decisions - before.router.decisions,
                self.router.rate_sum - before.router.rate_sum,
            ),
        )


def parse_frontend(text: str) -> FrontendTally:
    r"""The frontend's image-token and router hit-rate histograms.

    >>> parse_frontend('dynamo_frontend_image_tokens_per_request_count{model="m"} 2\n'
    ...                'dynamo_frontend_image_tokens_per_request_sum{model="m"} 32').image
    ImageTokenTally(requests=2.0, tokens=32.0)
    """
    return FrontendTally(
        ImageTokenTally(*histogram_totals(text, IMAGE_TOKENS)),
        RouterHitTally(*histogram_totals(text, ROUTER_KV_HIT_RATE)),
    )


def scrape_frontend(url: str, session: requests.Session | None = None) -> FrontendTally | None:
    """`parse_frontend` of the frontend's /metrics, or None if it does not answer."""
    page = metrics_page(url, session)
    return None if page is None else parse_frontend(page)


def requests_of(counters: dict[str, WorkerCounters | None]) -> dict[str, float | None]:
    """Each role's request counter of a snapshot (None where /metrics did not answer)."""
    return {role: (c.requests if c else None) for role, c in counters.items()}


def prompt_tokens_ran(
    before: dict[str, WorkerCounters | None], after: dict[str, WorkerCounters | None]
) -> dict[str, int]:
    """The prompt tokens each engine role ran between two snapshots, for roles that took a
    request in between (a replica that served nothing, or a role without an engine, is left out).
    Example (E/P/D LLaVA, one image request): {"prefill": 115, "decode": 114}."""
    ran = {}
    for role, end in after.items():
        start = before.get(role)
        if start is None or end is None or end.prompt_tokens is None:
            continue
        if end.requests > start.requests:
            ran[role] = int(end.prompt_tokens - (start.prompt_tokens or 0.0))
    return ran
