"""Outputs recorded per launch in this session, for cross-topology equality checks."""

from __future__ import annotations

from dataclasses import dataclass, field

Key = tuple[str, str, str, str]  # (stack, model, topology, request fingerprint)


@dataclass
class BaselineStore:
    """The first answer per key and the launch signature that gave it."""

    answers: dict[Key, tuple[str, str]] = field(default_factory=dict)

    def record(self, key: Key, signature: str, content: str) -> None:
        self.answers.setdefault(key, (signature, content))

    def get(self, key: Key, other_than: str) -> str | None:
        """The recorded answer, unless it came from `other_than` (a check against itself)."""
        found = self.answers.get(key)
        if found is None or found[0] == other_than:
            return None
        return found[1]
