"""What Dynamo's file discovery backend (DYN_FILE_KV) says is registered.

Layout (ai-dynamo 1.6.1): `v1/instances/<ns>%2F<component>%2F<endpoint>%2F<id>` holds one JSON
endpoint record per instance; `v1/mdc/...` holds the model cards of endpoints that serve a model.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
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


@dataclass(frozen=True)
class ModelCard:
    """One registered model card: who registered it, under which name, from which system port
    (a worker self-hosts its card's files at http://127.0.0.1:<system port>/v1/metadata/…)."""

    component: str
    name: str
    system_port: int | None


_METADATA_PORT = re.compile(r"^https?://[^/:]+:(\d+)/v1/metadata/")


def registered_cards(kv_dir: Path) -> list[ModelCard]:
    cards = []
    for r in _records(kv_dir / "v1" / "mdc"):
        card = r.get("card_json") if isinstance(r.get("card_json"), dict) else {}
        assert isinstance(card, dict)
        info = card.get("model_info") if isinstance(card.get("model_info"), dict) else {}
        config = info.get("hf_config_json") if isinstance(info, dict) else None
        path = config.get("path", "") if isinstance(config, dict) else ""
        match = _METADATA_PORT.match(str(path))
        cards.append(
            ModelCard(
                str(r.get("component")),
                str(card.get("display_name", "?")),
                int(match.group(1)) if match else None,
            )
        )
    return cards


def model_cards(kv_dir: Path) -> list[str]:
    """`namespace/component: model name` for every registered model card."""
    out = []
    for r in _records(kv_dir / "v1" / "mdc"):
        card = r.get("card_json") if isinstance(r.get("card_json"), dict) else {}
        name = card.get("display_name", "?") if isinstance(card, dict) else "?"
        out.append(f"{r.get('namespace')}/{r.get('component')}: {name}")
    return sorted(out)
