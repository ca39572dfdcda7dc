"""What Dynamo's file discovery backend (DYN_FILE_KV) says is registered.

Layout (ai-dynamo 1.6.1): `v1/instances/<ns>%2F<component>%2F<endpoint>%2F<id>` holds one JSON
endpoint record per instance; `v1/mdc/...` holds the model cards of endpoints that serve a model.
"""

from __future__ import annotations

import json
from pathlib import Path


def _records(directory: Path) -> list[dict[str, object]]:
    out = []
    if directory.is_dir():
        for path in directory.iterdir():
            try:
                out.append(json.loads(path.read_text()))
            except (OSError, ValueError):
                continue
    return out


def registered_components(kv_dir: Path) -> set[str]:
    """Components with at least one registered endpoint instance, e.g. {'backend', 'encoder'}."""
    return {str(r.get("component")) for r in _records(kv_dir / "v1" / "instances")}


def model_cards(kv_dir: Path) -> list[str]:
    """`namespace/component: model name` for every registered model card."""
    out = []
    for r in _records(kv_dir / "v1" / "mdc"):
        card = r.get("card_json") if isinstance(r.get("card_json"), dict) else {}
        name = card.get("display_name", "?") if isinstance(card, dict) else "?"
        out.append(f"{r.get('namespace')}/{r.get('component')}: {name}")
    return sorted(out)
