"""Rows that cross a process boundary unchanged by design, held equal bit for bit (CPU tier).

An encode worker's rows travel: its vision model computes them (the encoder tap on vLLM, `mm_encode`
on SGLang), its
handler hands them to Dynamo's embedding transfer (`sent`), the PD or prefill worker takes them
out of it (`received`) and hands them to its engine (`consumed`). Nothing on that way is meant
to change a number: the transfer copies, the handlers place. So every row received must be a
row sent, and every row consumed one received or sent (in the engine's dtype, where the handler
casts), byte for byte; and where the vision model's rows were tapped, every row sent one of
them. A corruption of any size between two of these is caught, and the role it happened in is
named: where a tolerance on the answer can only say "wrong", and SGLang's workers return no
log-probabilities to hold numbers to. A role that received no rows is not held to what it hands
its engine: vLLM E/P/D's decode worker, whose KV comes from prefill, is given placeholder rows
(float16, each row's values 0, 1, 2, …; measured).

The role site (harness/launch/role_site/sitecustomize.py, `BoundaryTap`) writes one file per
tensor to <tap>/boundary/<kind>-<role>-<pid>-<n>.safetensors (topology/tapped.py reads them);
topology/measured.py gives each answer the names present before its request, so a request is
judged on what crossed during it (rows sent earlier count as sent: an embedding cache may hand a
worker rows encoded before)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from harness.oracles.checks import OracleResult
from harness.topology.tapped import CONSUMED, ENCODED, RECEIVED, SENT, tapped

if TYPE_CHECKING:
    import torch


def row_bytes(rows: torch.Tensor) -> list[bytes]:
    """Each row's bytes (any dtype, bfloat16 included)."""
    import torch

    return [row.contiguous().view(torch.uint8).numpy().tobytes() for row in rows]


def missing_rows(rows: torch.Tensor, among: list[torch.Tensor]) -> int:
    """How many of `rows` are none of the rows in `among` (cast to their dtype), byte for byte."""
    keys = {
        key
        for other in among
        if other.shape[-1] == rows.shape[-1]
        for key in row_bytes(other.to(rows.dtype))
    }
    return sum(key not in keys for key in row_bytes(rows))


def largest_gap(rows: torch.Tensor, among: list[torch.Tensor]) -> str:
    """|difference| against the first tensor of the same shape, as evidence of the size."""
    same = next((o for o in among if o.shape == rows.shape), None)
    if same is None:
        return "no tensor of its shape to set it against"
    gap = (rows.double() - same.to(rows.dtype).double()).abs().max().item()
    return f"largest |difference| {gap:.3g} against the one of its shape"


def vision_rows(tap_dir: Path) -> list[torch.Tensor]:
    """Every batch of rows vLLM's encode worker's vision model computed (the encoder tap);
    SGLang's are tapped as kind `encoded`."""
    from safetensors.torch import load_file

    batches = [load_file(p)["rows"] for p in sorted(tap_dir.glob("*.safetensors"))]
    return [rows.reshape(-1, rows.shape[-1]) for rows in batches]


def check_boundaries(tap_dir: Path, before: frozenset[str]) -> OracleResult:
    """Every row that crossed during the request (and the requests sent with it) is one handed
    to it, byte for byte."""
    every = tapped(tap_dir)
    new = [t for t in every if t.path.name not in before]
    if not new:
        return OracleResult(True, "rows across roles: none crossed in this request", False)
    rows = {t.path: t.rows() for t in every}
    sent = [rows[t.path] for t in every if t.kind == SENT]
    received = [rows[t.path] for t in every if t.kind == RECEIVED]
    vision = vision_rows(tap_dir) + [rows[t.path] for t in every if t.kind == ENCODED]
    stages = [
        (SENT, vision or None, "its vision model computed"),
        (RECEIVED, sent, "the encode worker sent"),
        (CONSUMED, received + sent, "it received or the encode worker sent"),
    ]
    receivers = {t.role for t in every if t.kind == RECEIVED}
    said = []
    for kind, among, source in stages:
        # A role that received no rows hands its engine placeholders, not them (vLLM E/P/D's
        # decode worker, whose KV comes from prefill: float16 rows of 0, 1, 2, … measured).
        crossed = [t for t in new if t.kind == kind and (kind != CONSUMED or t.role in receivers)]
        if not crossed or among is None:
            continue
        total = sum(rows[t.path].shape[0] for t in crossed)
        for t in crossed:
            off = missing_rows(rows[t.path], among)
            if off:
                verb = {SENT: "sent", RECEIVED: "received", CONSUMED: "handed its engine"}[kind]
                return OracleResult(
                    False,
                    f"rows across roles: {t.role} {verb} {rows[t.path].shape[0]} rows of which "
                    f"{off} are none {source}, byte for byte "
                    f"({largest_gap(rows[t.path], among)})",
                    role=t.role,
                )
        said.append(f"{'/'.join(sorted({t.role for t in crossed}))} {kind} {total} rows")
    if not said:
        return OracleResult(True, "rows across roles: nothing to set them against", False)
    return OracleResult(
        True, f"rows across roles: {', '.join(said)}, each as handed on, byte for byte"
    )


def first_encoded(tap_dir: Path, own: frozenset[str]) -> torch.Tensor | None:
    """The rows SGLang's encode worker's vision model computed for the request itself: among
    `own` (what was written while it was served, before the requests sent with it), the first;
    None where it encoded nothing (an embedding-cache hit), shape (1, rows, width)."""
    new = [t for t in tapped(tap_dir) if t.kind == ENCODED and t.path.name in own]
    if not new:
        return None
    first = min(new, key=lambda t: int(t.path.stem.rsplit("-", 1)[1]))
    rows = first.rows()
    return rows.reshape(1, -1, rows.shape[-1])
