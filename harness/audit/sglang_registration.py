"""Whether Dynamo's SGLang multimodal workers announce their model: each `init_multimodal_*`
function that main.py selects by the role's flags calls the registration
(`register_model_with_readiness_gate`; older Dynamo names it `register_llm_with_readiness_gate`). A
worker without these calls never registers (frontend 503). The source the roles would import is read
(the checkout's under --dynamo-src, else the installed package's): no SGLang worker needs to run."""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

from harness.audit.capture import Finding
from harness.launch.dynamo_src import DynamoSource

MULTIMODAL_INITS = {  # dynamo/sglang/main.py: which role runs which init
    "init_multimodal_encode_worker": "the encode worker (--disaggregation-mode encode)",
    "init_multimodal_worker": "the PD / decode worker (--dedicated-mm-encoder)",
    "init_multimodal_prefill_worker": "the prefill worker (--dedicated-mm-encoder, prefill)",
}

REGISTRATION = re.compile(r"^register_(?:model|llm)_with_readiness_gate$")

SOURCE = Path("dynamo") / "sglang" / "init_multimodal.py"


def sglang_multimodal_source(source: DynamoSource | None = None) -> Path | None:
    """init_multimodal.py as the roles would import it, from `source` (the checkout under test)
    where it carries one, else the installed one (None: no dynamo.sglang here)."""
    if source is not None and (source.python_dir / SOURCE).is_file():
        return source.python_dir / SOURCE
    spec = importlib.util.find_spec("dynamo.sglang")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / SOURCE.name
    return path if path.is_file() else None


def unregistered(source: Path) -> list[str]:
    """The multimodal init functions in `source` with no registration call anywhere in them
    (nested helpers included), or missing altogether."""
    tree = ast.parse(source.read_text(), filename=str(source))
    found: dict[str, bool] = {}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.AsyncFunctionDef | ast.FunctionDef)
            and node.name in MULTIMODAL_INITS
        ):
            found[node.name] = any(_calls_registration(n) for n in ast.walk(node))
    return [name for name in MULTIMODAL_INITS if not found.get(name, False)]


def _calls_registration(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    name = (
        func.id
        if isinstance(func, ast.Name)
        else func.attr
        if isinstance(func, ast.Attribute)
        else ""
    )
    return bool(REGISTRATION.match(name))


def check_sglang_registration(source: Path | None) -> list[Finding]:
    if source is None:
        return []
    return [
        Finding(
            str(source),
            MULTIMODAL_INITS[name],
            f"{name} never calls "
            "register_model_with_readiness_gate: the worker serves but never registers its "
            "model, so the frontend answers 503",
            "register the model (register_model_with_readiness_gate) once the engine is up",
        )
        for name in unregistered(source)
    ]
