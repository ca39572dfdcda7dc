"""Upstream's multimodal ids read from a checkout's own matrix (checkout_matrix.py), not from
the catalogue, for the parity page: each id with the facts its file states literally (cadence,
GPU count, model, hit-rate threshold, follow-ups, an unconditional skip), joined with the
catalogue entry of the same stack, accelerator and id for what a file cannot say (why this repo
does not carry it, our own id for it). An id the catalogue lacks is listed with no reason, which
`list --upstream` reports as a finding."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from harness.profiles.checkout_case import PAYLOAD_KINDS
from harness.profiles.checkout_matrix import MatrixEntry, UnreadableCheckout, read_matrix
from harness.profiles.upstream import UpstreamTest

__all__ = ["UnreadableCheckout", "read_checkout", "upstream_test"]


def upstream_test(entry: MatrixEntry, source: str = "checkout") -> UpstreamTest:
    first = entry.payloads[0] if entry.payloads else None
    return UpstreamTest(
        id=entry.id,
        cadence=entry.cadence,
        gpus=entry.gpus,
        absent=f"skipped upstream ({entry.skip})" if entry.skip else None,
        source=source,
        stack=entry.stack,
        accelerator=entry.accelerator,
        model=entry.model,
        min_avg_kv_hit_rate=first.min_avg_kv_hit_rate if first else None,
        followups=max(len(entry.payloads) - 1, 0),
        where=entry.where,
        sequence=any(
            (kind := PAYLOAD_KINDS.get(p.kind)) is not None and kind.sequence
            for p in entry.payloads
        ),
    )


def read_checkout(src: Path, catalogue: list[UpstreamTest]) -> tuple[list[UpstreamTest], str]:
    """The ids the checkout's matrix files generate, each joined with the catalogue entry of the
    same id, stack and accelerator for what the file cannot say (`absent`, `here`,
    `model_differs`), and the source line naming the checkout. Raises UnreadableCheckout naming
    the file."""
    matrix = read_matrix(src)
    known = {(t.stack, t.accelerator, t.id): t for t in catalogue}
    read = []
    for entry in matrix.entries:
        test = upstream_test(entry)
        found = known.get((entry.stack, entry.accelerator, entry.id))
        if found is not None:
            carried = found.here is not None and found.absent is None  # by our own id
            test = dataclasses.replace(
                test,
                absent=None if carried else test.absent or found.absent,
                skipped_upstream=entry.skip if carried else None,
                here=found.here,
                model_differs=found.model_differs,
            )
        read.append(test)
    return read, matrix.where
