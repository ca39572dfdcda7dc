"""Apply the CPU-tier compatibility shims to a venv's site-packages.

Each shim is an exact text replacement. Re-running is a no-op; if the original text is gone
(upstream changed the file) the script fails loudly instead of guessing.
Usage: python scripts/apply_shims.py SITE_PACKAGES
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Shim:
    why: str
    relpath: str
    old: str
    new: str


SHIMS = [
    Shim(
        why="PyPI torchvision is a CUDA build; its fake-op registration fails beside CPU torch",
        relpath="torchvision/_meta_registrations.py",
        old='@torch.library.register_fake("torchvision::nms")',
        new='@(torch.library.register_fake("torchvision::nms") '
        "if torchvision.extension._has_ops() else (lambda fn: fn))",
    ),
    Shim(
        why="same, for qnms",
        relpath="torchvision/_meta_registrations.py",
        old='@torch.library.register_fake("torchvision::qnms")',
        new='@(torch.library.register_fake("torchvision::qnms") '
        "if torchvision.extension._has_ops() else (lambda fn: fn))",
    ),
    Shim(
        why="ai-dynamo 1.6.1 imports a helper vLLM 0.32 removed (used only by the embedding pool)",
        relpath="dynamo/vllm/embedding_worker_processes.py",
        old="from vllm.v1.engine.utils import get_engine_zmq_addresses, launch_core_engines\n",
        new="from vllm.v1.engine.utils import launch_core_engines\n"
        "try:  # harness shim: removed in vLLM 0.32\n"
        "    from vllm.v1.engine.utils import get_engine_zmq_addresses\n"
        "except ImportError:  # harness shim\n"
        "    get_engine_zmq_addresses = None  # type: ignore[assignment]\n",
    ),
    *(
        Shim(
            why="NIXL's progress thread busy-spins (delay hard-coded to 0): a core per idle agent",
            relpath=f"{pkg}/_api.py",
            old="agent_config.pthrDelay = 0\n",
            new='agent_config.pthrDelay = int(__import__("os").environ.get('
            '"HARNESS_NIXL_PTHR_DELAY_US", "0"))\n',
        )
        for pkg in ("nixl_cu12", "nixl_cu13")
    ),
]


def apply(site: Path, shim: Shim) -> str:
    path = site / shim.relpath
    if not path.is_file():
        raise SystemExit(f"shim target missing: {path} ({shim.why})")
    text = path.read_text()
    if shim.new in text:
        return "already applied"
    if text.count(shim.old) != 1:
        raise SystemExit(
            f"shim no longer applies: {path} does not contain the expected text exactly once "
            f"({shim.why}); upstream changed this file, re-check the workaround"
        )
    path.write_text(text.replace(shim.old, shim.new))
    return "applied"


def main() -> None:
    site = Path(sys.argv[1])
    for shim in SHIMS:
        print(f"shim {shim.relpath}: {apply(site, shim)}")


if __name__ == "__main__":
    main()
