"""From (profile, tier, case) to a LaunchedTopology that owns its port lease and run directory."""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.core.markers import SESSION_ID_ENV, marker_env
from harness.core.paths import runs_dir
from harness.profiles import CaseSpec, Profile, Tier
from harness.resources.gpu_slot import take_gpus
from harness.resources.models import model_for
from harness.resources.ports import PortRegistry
from harness.runtime.dynamo_src import DynamoSource
from harness.runtime.launched import LaunchedTopology
from harness.runtime.plan import port_names, resolve

SESSION_ID = os.environ.get(SESSION_ID_ENV) or uuid.uuid4().hex[:12]


def new_run_dir(profile: Profile, tier: Tier) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = runs_dir() / SESSION_ID / f"{profile.name}-{tier}-{stamp}-{uuid.uuid4().hex[:4]}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def launch(
    profile: Profile,
    tier: Tier,
    case: CaseSpec,
    warmups: Sequence[dict[str, Any]] = (),
    registry: PortRegistry | None = None,
    base_env: dict[str, str] | None = None,
) -> LaunchedTopology:
    """A topology not yet entered: `with launch(...) as topo:` starts it and waits until ready."""
    registry = registry or PortRegistry()
    topology_id = uuid.uuid4().hex
    tag = f"{profile.name}:{topology_id[:8]}"
    gpus = take_gpus(profile, tag) if tier == "gpu" else None
    if gpus is not None:
        base_env = {**(os.environ if base_env is None else base_env), **gpus.env()}
    lease = registry.lease(port_names(profile, DynamoSource.from_env(base_env)), tag=tag)

    def release() -> None:
        lease.release()
        if gpus is not None:
            gpus.release()

    try:
        plan = resolve(
            profile,
            tier,
            case,
            ports=lease.ports,
            run_dir=new_run_dir(profile, tier),
            scratch_dir=Path(tempfile.gettempdir()) / f"harness-{topology_id[:12]}",
            model=model_for(profile, tier),
            topology_id=topology_id,
            marker_env=marker_env(topology_id, SESSION_ID, os.getpid()),
            base_env=base_env,
        )
    except BaseException:
        release()
        raise
    return LaunchedTopology(plan, warmups=warmups, on_release=release)
