"""The answers earlier launches of a session gave, for the comparisons later ones make: the same
request on a baseline topology (`same_as`), and the media-blind diagnosis (the same two requests on
a path without an encode worker)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass


Key = tuple[str, str, str, str]  # (stack, model, topology, request fingerprint)


@dataclass
class BaselineStore:
    """The first answer per key, the launch signature that gave it, and whether the request's
    image went through an encode worker there."""

    answers: dict[Key, tuple[str, str, bool]] = field(default_factory=dict)
    # the case that gives a key's answer failed: "<id> failed (<cause>)"
    failures: dict[Key, str] = field(default_factory=dict)

    def record(self, key: Key, signature: str, content: str, encoded: bool = False) -> None:
        self.answers.setdefault(key, (signature, content, encoded))

    def record_failure(self, key: Key, test_id: str, cause: str) -> None:
        self.failures.setdefault(key, f"{test_id} failed ({cause})")

    def failure(self, key: Key) -> str | None:
        """The case whose answer to `key` others compare with failed: what it was and why (an
        answer it recorded before failing is no baseline to hold another topology to)."""
        return self.failures.get(key)

    def ran(self, key: Key, other_than: str) -> bool:
        """A launch of `key`'s stack, model and topology other than `other_than` answered in
        this session (a launch's own answers are no baseline for it)."""
        answered = self.answers.items()
        return any(k[:3] == key[:3] and sig != other_than for k, (sig, _, _) in answered)

    def get(self, key: Key, other_than: str) -> str | None:
        """The recorded answer, unless it came from `other_than` (a check against itself)."""
        found = self.answers.get(key)
        if found is None or found[0] == other_than:
            return None
        return found[1]

    def unencoded(self, key: Key, other_than: str) -> str | None:
        """The answer to the same request (the same stack, model and fingerprint as `key`) on
        a topology whose path has no encode worker, other than `other_than`."""
        stack, model, _, fingerprint = key
        for (s, m, _, f), (signature, content, encoded) in self.answers.items():
            same_request = (s, m, f) == (stack, model, fingerprint)
            if same_request and not encoded and signature != other_than:
                return content
        return None
