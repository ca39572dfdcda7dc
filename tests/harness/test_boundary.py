"""Rows across roles (harness/oracles/boundary.py): tensors as the role site writes them, held
byte for byte; a change of one unit in the last place is caught and names its role."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from harness.oracles.boundary import check_boundaries, first_encoded
from harness.topology.tapped import boundary_dir, crossed_names


def write(tap: Path, name: str, rows: torch.Tensor) -> None:
    where = boundary_dir(tap)
    where.mkdir(parents=True, exist_ok=True)
    save_file({"rows": rows.contiguous()}, where / f"{name}.safetensors")


@pytest.fixture
def rows() -> torch.Tensor:
    return torch.randn(1, 16, 32, generator=torch.Generator().manual_seed(0))


def test_rows_handed_on_unchanged_pass(tmp_path: Path, rows: torch.Tensor) -> None:
    before = crossed_names(tmp_path)
    write(tmp_path, "encoded-encode-1-1", rows[0])
    write(tmp_path, "sent-encode-1-2", rows)
    write(tmp_path, "received-pd-2-1", rows.clone())
    write(tmp_path, "consumed-pd-2-2", rows[0].to(torch.bfloat16))  # the handler's cast
    result = check_boundaries(tmp_path, before)
    assert result.passed and result.vouches, result.detail
    assert "encode sent 16 rows, pd received 16 rows, pd consumed 16 rows" in result.detail


@pytest.mark.parametrize("kind, role", [("sent", "encode"), ("received", "pd"), ("consumed", "pd")])
def test_one_unit_in_the_last_place_names_the_role(
    tmp_path: Path, rows: torch.Tensor, kind: str, role: str
) -> None:
    changed = rows.clone()
    changed[0, 3, 7] = torch.nextafter(changed[0, 3, 7], torch.tensor(float("inf")))
    write(tmp_path, "encoded-encode-1-1", rows)
    for k, r, n in (("sent", "encode", 2), ("received", "pd", 3), ("consumed", "pd", 4)):
        write(tmp_path, f"{k}-{r}-1-{n}", changed if k == kind else rows)
    result = check_boundaries(tmp_path, frozenset())
    assert not result.passed and result.role == role
    assert "1 are none" in result.detail


def test_a_role_that_received_nothing_is_not_held(tmp_path: Path, rows: torch.Tensor) -> None:
    """vLLM E/P/D's decode worker is handed placeholder rows (its KV comes from prefill)."""
    write(tmp_path, "sent-encode-1-1", rows)
    write(tmp_path, "received-prefill-2-1", rows)
    write(tmp_path, "consumed-prefill-2-2", rows)
    write(tmp_path, "consumed-decode-3-1", torch.zeros(16, 32, dtype=torch.float16))
    assert check_boundaries(tmp_path, frozenset()).passed


def test_only_what_crossed_during_the_request_is_judged(tmp_path: Path, rows: torch.Tensor) -> None:
    write(tmp_path, "sent-encode-1-1", rows)
    write(tmp_path, "received-pd-2-1", rows * 2)  # an earlier request's fault
    before = crossed_names(tmp_path)
    write(tmp_path, "received-pd-2-2", rows)
    assert check_boundaries(tmp_path, before).passed
    assert not check_boundaries(tmp_path, frozenset()).passed


def test_the_request_s_own_encoder_rows_are_the_ones_written_while_it_was_served(
    tmp_path: Path, rows: torch.Tensor
) -> None:
    before = crossed_names(tmp_path)
    write(tmp_path, "encoded-encode-1-9", rows[0])
    own = crossed_names(tmp_path) - before
    write(tmp_path, "encoded-encode-1-10", rows[0] + 1)  # a twin, sent after the request
    found = first_encoded(tmp_path, own)
    assert found is not None and torch.equal(found, rows)


def test_an_embedding_cache_hit_has_no_rows_of_its_own(tmp_path: Path, rows: torch.Tensor) -> None:
    """The request's image came from the encoder's cache; only its twin was encoded: no rows,
    never the twin's taken for the request's (measured: 0.899 from the model's own)."""
    own = crossed_names(tmp_path)  # nothing written while it was served
    write(tmp_path, "encoded-encode-1-1", rows[0] + 1)
    assert first_encoded(tmp_path, own) is None
