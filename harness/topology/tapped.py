"""The files the role site writes as rows cross a role boundary (role_site/sitecustomize.py
`BoundaryTap`: <tap>/boundary/<kind>-<role>-<pid>-<n>.safetensors), as the harness reads them:
where a launch's tap is (`tap_dir`), each file (`Tapped`), and the names present at a moment
(`crossed_names`), so a request is judged on what crossed while it was served
(oracles/boundary.py holds them to each other)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from harness.core.role_contract import ENCODER_TAP_ENV
from harness.launch.plan import LaunchPlan

if TYPE_CHECKING:
    import torch

BOUNDARY_DIR = "boundary"
ENCODED, SENT, RECEIVED, CONSUMED = "encoded", "sent", "received", "consumed"


@dataclass(frozen=True)
class Tapped:
    """One tensor a role handed on or took in."""

    kind: str
    role: str
    path: Path

    @classmethod
    def of(cls, path: Path) -> Tapped | None:
        kind, _, rest = path.stem.partition("-")
        role = rest.rsplit("-", 2)[0]
        return cls(kind, role, path) if kind in (ENCODED, SENT, RECEIVED, CONSUMED) else None

    def rows(self) -> torch.Tensor:
        """The tensor as rows: (rows, width)."""
        from safetensors.torch import load_file

        tensor = load_file(self.path)["rows"]
        return tensor.reshape(-1, tensor.shape[-1])


def boundary_dir(tap_dir: Path) -> Path:
    return tap_dir / BOUNDARY_DIR


def tapped(tap_dir: Path) -> list[Tapped]:
    where = boundary_dir(tap_dir)
    found = [Tapped.of(p) for p in sorted(where.glob("*.safetensors"))] if where.is_dir() else []
    return [t for t in found if t is not None]


def crossed_names(tap_dir: Path | None) -> frozenset[str]:
    """The rows' files that have crossed a boundary so far (measured.py takes them before and
    after a request)."""
    return frozenset(t.path.name for t in tapped(tap_dir)) if tap_dir else frozenset()


def tap_dir(plan: LaunchPlan) -> Path | None:
    """Where a launched CPU-tier topology's encoder rows are tapped (plan.encoder_tap_env); None
    for a deployed one or where nothing is tapped."""
    tap = plan.env.get(ENCODER_TAP_ENV) if plan.frontend is None else None
    return Path(tap) if tap else None
