"""results.jsonl: one JSON line per case (schema in docs/contracts.md)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from harness.secrets import is_secret


class ResultsFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, sort_keys=True, default=str)
        if any(is_secret(k) for k in record):
            raise ValueError("a results record must not carry secrets")
        with self._lock, self.path.open("a") as out:
            out.write(line + "\n")
