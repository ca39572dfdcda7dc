"""Path oracle: which roles must serve a request, and the check against each role's own counter.

The expected path follows from the topology and the request's media: every worker that decodes
or prefills (discovery components `backend` and `prefill`) takes every request; an encode worker
takes a request exactly when it carries an image (encode workers take images only: video is
decoded on the prefill or PD worker). A profile may override a role's count for one request
(`path`, with its reason). A disaggregated topology that silently stops using its encoder, or a
request that runs twice, fails here whatever its answer says.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from harness.judging.oracles import OracleResult
from harness.runtime.plan import RolePlan

IMAGE_KINDS = ("image_url", "image_b64")


def expected_path(
    workers: Sequence[RolePlan], media: Sequence[str], overrides: Mapping[str, int] | None = None
) -> dict[str, int]:
    """Requests each worker must take for one request. Example (E/P/D, an image URL):
    {"encode": 1, "prefill": 1, "decode": 1}; the same prompt without media: encode 0."""
    has_image = any(kind in IMAGE_KINDS for kind in media)
    path = {
        role.name: (int(has_image) if role.discovery_component == "encode" else 1)
        for role in workers
    }
    return {**path, **(overrides or {})}


def check_path(
    expected: Mapping[str, int],
    before: Mapping[str, float | None],
    after: Mapping[str, float | None],
) -> OracleResult:
    """Each role's counter moved by exactly what the path expects."""
    problems, seen = [], []
    for role, want in expected.items():
        start, end = before.get(role), after.get(role)
        if start is None or end is None:
            problems.append(f"role '{role}': its /metrics did not answer ({start} -> {end})")
            continue
        moved = end - start
        seen.append(f"{role} +{moved:g}")
        if moved != want:
            verb = "served" if moved else "did not serve"
            problems.append(
                f"role '{role}' {verb} it: dynamo_component_requests_total"
                f'{{dynamo_endpoint="generate"}} {start:g} -> {end:g}, expected +{want}'
            )
    if problems:
        return OracleResult(False, "; ".join(problems))
    return OracleResult(True, f"path {', '.join(seen)}")
