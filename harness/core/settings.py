"""What the process environment says to the harness, read once at an edge (the CLI's commands,
the pytest plugin's configure) and handed down as values: below the edges no module reads the
environment for a setting (tests/harness/test_layers.py holds the few that still do to a named
list, each with why).

- HARNESS_TIER: the tier where `--tier` is left at `auto` (cpu, gpu or auto).
- HARNESS_SHARD: the shard (K/N) where `--shard` is not given, as CI matrices set it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

TIER_ENV = "HARNESS_TIER"
SHARD_ENV = "HARNESS_SHARD"


@dataclass(frozen=True)
class EdgeSettings:
    tier: str = "auto"
    shard: str | None = None

    @classmethod
    def of(cls, environ: Mapping[str, str]) -> EdgeSettings:
        return cls(tier=environ.get(TIER_ENV) or "auto", shard=environ.get(SHARD_ENV) or None)

    def tier_asked(self, option: str) -> str:
        """The tier an option asks for: the option, or where it says `auto`, HARNESS_TIER's."""
        return self.tier if option == "auto" else option

    def shard_asked(self, option: str | None) -> tuple[str, str] | None:
        """(spec, where it was given): the option's, else HARNESS_SHARD's; None: no shard."""
        if option:
            return option, "--shard"
        return (self.shard, SHARD_ENV) if self.shard else None
