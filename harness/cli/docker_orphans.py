"""Containers a killed `harness docker` left behind: each run labels its container with the owner
process (host, pid, start time); a later run removes those whose owner on this host is gone.

Only containers carrying the harness label are ever looked at, and never one whose owner still
runs; a pid reused by an unrelated process is told apart by its start time."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Mapping
from typing import Any

import psutil

LABEL = "serve-harness"
OWNER_LABEL = "serve-harness.owner-pid"
OWNER_STARTED_LABEL = "serve-harness.owner-started"
OWNER_HOST_LABEL = "serve-harness.owner-host"


def owner_labels(owner: psutil.Process | None = None) -> dict[str, str]:
    """Labels naming this process (or `owner`, whose start time psutil keeps after it exits)
    as a container's owner."""
    owner = owner or psutil.Process()
    return {
        LABEL: "1",
        OWNER_LABEL: str(owner.pid),
        OWNER_STARTED_LABEL: f"{owner.create_time():.2f}",
        OWNER_HOST_LABEL: socket.gethostname(),
    }


def owner_is_gone(labels: Mapping[str, str]) -> bool:
    """True when the labelled owner ran on this host and is no longer the same live process."""
    if labels.get(OWNER_HOST_LABEL) != socket.gethostname():
        return False  # another machine's run sharing this daemon: not ours to judge
    try:
        proc = psutil.Process(int(labels[OWNER_LABEL]))
        started = f"{proc.create_time():.2f}"
    except (KeyError, ValueError):
        return False  # not labelled by this harness version: leave it
    except psutil.NoSuchProcess:
        return True
    return started != labels.get(OWNER_STARTED_LABEL) or proc.status() == psutil.STATUS_ZOMBIE


def remove_orphans(client: Any) -> list[str]:
    """Remove harness containers whose owner is gone; returns their short ids."""
    from docker.errors import APIError, NotFound

    removed: list[str] = []
    for container in client.containers.list(all=True, filters={"label": f"{LABEL}=1"}):
        if owner_is_gone(container.labels):
            with contextlib.suppress(NotFound, APIError):
                container.remove(force=True)
                removed.append(container.short_id)
    return removed
