"""Path oracle: which roles must serve a request, and the check against each role's own counter.

The expected path follows from the topology and the request's media: every worker that decodes
or prefills (discovery components `backend` and `prefill`) takes every request; an encode worker
takes a request exactly when it carries an image (encode workers take images only: video is
decoded on the prefill or PD worker). Behind a router, the profile's `replicas` are one group:
exactly one of them takes each request (key "worker1|worker2"). A profile
may override a role's count for one request (`path`, with its reason). A disaggregated topology
that silently stops using its encoder, or a request that runs twice, fails here whatever its
answer says.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from harness.judging.oracles import OracleResult
from harness.runtime.plan import RolePlan

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
    problems, seen = [], []
    for key, want in expected.items():
        roles = key.split(GROUP)
        starts, ends = [before.get(r) for r in roles], [after.get(r) for r in roles]
        if None in starts or None in ends:
            problems.append(f"role '{key}': its /metrics did not answer ({starts} -> {ends})")
            continue
        start, end = sum(starts), sum(ends)  # type: ignore[arg-type]
        moved = end - start
        seen.append(f"{key} +{moved:g}")
        if moved != want:
            verb = "served" if moved else "did not serve"
            who = f"role '{key}'" if len(roles) == 1 else f"roles '{key}' together"
            problems.append(
                f"{who} {verb} it: dynamo_component_requests_total"
                f'{{dynamo_endpoint="generate"}} {start:g} -> {end:g}, expected +{want}'
            )
    if problems:
        return OracleResult(False, "; ".join(problems))
    return OracleResult(True, f"path {', '.join(seen)}")
