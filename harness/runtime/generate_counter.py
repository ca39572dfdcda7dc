"""Each Dynamo worker's own request counter, scraped from its system port's /metrics.

Dynamo's work handler counts every request an endpoint takes in
`dynamo_component_requests_total{dynamo_component=…, dynamo_endpoint="generate"}` (ai-dynamo
1.6.1). Read before and after a request, it says which roles served it: the path oracle's input.
"""

from __future__ import annotations

import requests

REQUESTS_TOTAL = "dynamo_component_requests_total"
SERVING_ENDPOINT = "generate"
SCRAPE_TIMEOUT_S = 2.0


def generate_requests(text: str) -> float:
    """The `generate` requests a worker's /metrics text counts (all label sets summed).

    >>> generate_requests('dynamo_component_requests_total{dynamo_component="encode",'
    ...                   'dynamo_endpoint="generate"} 3')
    3.0
    """
    from prometheus_client.parser import text_string_to_metric_families

    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if (
                sample.name == REQUESTS_TOTAL
                and sample.labels.get("dynamo_endpoint") == SERVING_ENDPOINT
            ):
                total += sample.value
    return total


def scrape(url: str, session: requests.Session | None = None) -> float | None:
    """`generate_requests` of one worker's /metrics URL, or None if it does not answer."""
    http = session or requests
    try:
        resp = http.get(url, timeout=SCRAPE_TIMEOUT_S)
    except requests.RequestException:
        return None
    return generate_requests(resp.text) if resp.ok else None
