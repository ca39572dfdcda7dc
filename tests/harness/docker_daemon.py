"""The Docker client the docker tests run against, or why they cannot run here."""

from __future__ import annotations

from typing import Any


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
