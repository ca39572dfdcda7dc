"""Which environment variables are secrets, and how they are shown (never)."""

from __future__ import annotations

from collections.abc import Mapping

from harness.core.role_contract import is_secret  # the one rule, shared with the role adapter

__all__ = ["REDACTED", "is_secret", "redact_env", "scrub_text"]
REDACTED = "***"


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: (REDACTED if is_secret(k) else v) for k, v in env.items()}


def scrub_text(text: str, env: Mapping[str, str]) -> str:
    """Replace any secret value that appears in text (log tails, bodies) with ***."""
    for name, value in env.items():
        if is_secret(name) and len(value) >= 4:
            text = text.replace(value, REDACTED)
    return text
