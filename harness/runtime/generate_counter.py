"""Each Dynamo worker's own counters, scraped from its system port's /metrics.

Dynamo's work handler counts every request an endpoint takes in
`dynamo_component_requests_total{dynamo_component=…, dynamo_endpoint="generate"}` (ai-dynamo
1.6.1), and a vLLM worker's engine counts the prompt tokens it ran in `vllm:prompt_tokens_total`
(vLLM 0.31's own metric, served on the same port by dynamo.vllm). Read before and after a
request, they say which roles served it (the path oracle) and how long a prompt each role ran
(the role-prompts oracle: an E/P/D decode worker must run the prompt whose KV it imported).
"""

from __future__ import annotations

from dataclasses import dataclass

import requests

REQUESTS_TOTAL = "dynamo_component_requests_total"
PROMPT_TOKENS_TOTAL = "vllm:prompt_tokens_total"
# vLLM 0.31's prefix cache: prompt tokens looked up, and found (v1/metrics/loggers.py)
PREFIX_QUERIES_TOTAL = "vllm:prefix_cache_queries_total"
PREFIX_HITS_TOTAL = "vllm:prefix_cache_hits_total"
SERVING_ENDPOINT = "generate"
SCRAPE_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class WorkerCounters:
    requests: float  # `generate` requests taken
    prompt_tokens: float | None  # prompt tokens its engine ran; None: no vLLM engine there
    prefix_queries: float = 0.0  # prompt tokens its prefix cache was asked for
    prefix_hits: float = 0.0  # of those, found cached


def parse_counters(text: str) -> WorkerCounters:
    """The counters one worker's /metrics text holds (all label sets summed).

    >>> parse_counters('dynamo_component_requests_total{dynamo_component="encode",'
    ...                'dynamo_endpoint="generate"} 3')
    WorkerCounters(requests=3.0, prompt_tokens=None, prefix_queries=0.0, prefix_hits=0.0)
    """
    from prometheus_client.parser import text_string_to_metric_families

    served, prompt, queries, hits = 0.0, None, 0.0, 0.0
    for family in text_string_to_metric_families(text):
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
    return WorkerCounters(served, prompt, queries, hits)


def generate_requests(text: str) -> float:
    """The `generate` requests a worker's /metrics text counts."""
    return parse_counters(text).requests


def scrape(url: str, session: requests.Session | None = None) -> WorkerCounters | None:
    """`parse_counters` of one worker's /metrics URL, or None if it does not answer."""
    http = session or requests
    try:
        resp = http.get(url, timeout=SCRAPE_TIMEOUT_S)
    except requests.RequestException:
        return None
    return parse_counters(resp.text) if resp.ok else None


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
