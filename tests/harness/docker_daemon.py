"""The Docker client the docker tests run against, or why they cannot run here."""

from __future__ import annotations

from typing import Any

import psutil

from harness.cli.docker import owner_labels


def client_with_image(image: str, how_to_get_it: str) -> tuple[Any, str]:
    """(client, "") when a daemon answers and holds `image`; else (None, the skip reason)."""
    try:
        import docker

        client = docker.from_env()
        client.ping()
    except Exception as exc:  # no SDK, no socket, daemon down: all mean "cannot run here"
        return (
            None,
            f"no Docker daemon answers ({type(exc).__name__}: {exc}); "
            "run .ci/docker_setup.sh start",
        )
    try:
        client.images.get(image)
    except Exception:
        return None, f"image {image} missing; {how_to_get_it}"
    return client, ""


def containers_of(client: Any, owner: psutil.Popen) -> list[Any]:
    """The harness containers `owner` (a `harness docker` process) labelled as its own.

    Matched on its start time as well as its pid: a pid reused by a later run is another owner.
    `sparse`: the daemon's list answer only. A full list inspects each container in a second
    call, and one removed in between (a run's own teardown, another run's orphan sweep) raised
    NotFound out of a test that only asked what is there (seen in CI)."""
    return client.containers.list(
        all=True,
        sparse=True,
        filters={"label": [f"{key}={value}" for key, value in owner_labels(owner).items()]},
    )
