"""Discovery as Dynamo's file backend (DYN_FILE_KV) records it: which components registered and
the model cards of the endpoints that serve a model. Layout (ai-dynamo 1.6.1):
`v1/instances/<ns>%2F<component>%2F<endpoint>%2F<id>` holds one endpoint record per instance;
`v1/mdc/...` the model cards."""

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


def instance_components(kv_dir: Path) -> dict[int, str]:
    """{instance id: its component}, as the frontend's router logs a worker (`worker_id=`)."""
    found = {}
    for r in _records(kv_dir / "v1" / "instances"):
        instance = r.get("instance_id")
        if isinstance(instance, int):
            found[instance] = str(r.get("component"))
    return found


@dataclass(frozen=True)
class ModelCard:
    """One registered model card: who registered it, under which name, from which system port
    (a worker self-hosts its card's files at http://127.0.0.1:<system port>/v1/metadata/…)."""

    component: str
    name: str
    system_port: int | None
    worker_type: str | None = None  # Dynamo's WorkerType: Aggregated, Prefill, Decode, Encode
    needs: tuple[tuple[str, ...], ...] = ()  # the peers it is served with: any one of these sets

    def describe(self) -> str:
        needs = " or ".join("+".join(s) for s in self.needs) if self.needs else "nothing"
        return f"{self.component}: {self.name} ({self.worker_type or '?'}, needs {needs})"


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
        needs = found if isinstance(found := card.get("needs"), list) else []
        cards.append(
            ModelCard(
                str(r.get("component")),
                str(card.get("display_name", "?")),
                int(match.group(1)) if match else None,
                _name(card.get("worker_type")),
                tuple(tuple(_name(t) or "?" for t in s) for s in needs if isinstance(s, list)),
            )
        )
    return cards


def _name(value: object) -> str | None:
    """A WorkerType as the card serializes it ("Encode", or {"Encode": …}), by name."""
    if isinstance(value, dict) and len(value) == 1:
        value = next(iter(value))
    return str(value) if value is not None else None


def unmet_needs(cards: list[ModelCard]) -> list[str]:
    """The cards whose `needs` no set of registered worker types satisfies: what the frontend's
    serving-readiness gate still waits for, e.g. "backend (Decode) needs Prefill"."""
    present = {c.worker_type for c in cards if c.worker_type}
    return [
        f"{c.component} ({c.worker_type}) needs {' or '.join('+'.join(s) for s in c.needs)}"
        for c in cards
        if c.needs and not any(set(s) <= present for s in c.needs)
    ]
