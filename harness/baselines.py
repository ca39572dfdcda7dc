"""Outputs recorded per topology in this session, for cross-topology equality checks."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class BaselineStore:
    """Key: (stack, model, topology, request fingerprint) -> the answer's content."""

    answers: dict[tuple[str, str, str, str], str] = field(default_factory=dict)

    def record(self, stack: str, model: str, topology: str, request: str, content: str) -> None:
        self.answers.setdefault((stack, model, topology, request), content)

    def get(self, stack: str, model: str, topology: str, request: str) -> str | None:
        return self.answers.get((stack, model, topology, request))
