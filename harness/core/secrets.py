"""Which environment variables are secrets, and how they are shown (never)."""

from __future__ import annotations

import re
from collections.abc import Mapping

SECRET_NAME = re.compile(r"(^HF_TOKEN$|_TOKEN$|_API_KEY$|^API_KEY$|_SECRET$|PASSWORD)", re.I)
REDACTED = "***"


def is_secret(name: str) -> bool:
    return bool(SECRET_NAME.search(name))


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: (REDACTED if is_secret(k) else v) for k, v in env.items()}


def scrub_text(text: str, env: Mapping[str, str]) -> str:
    """Replace any secret value that appears in text (log tails, bodies) with ***."""
    for name, value in env.items():
        if is_secret(name) and len(value) >= 4:
            text = text.replace(value, REDACTED)
    return text
