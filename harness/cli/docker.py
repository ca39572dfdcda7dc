"""`python -m harness docker --image IMG [--overlay SRC[:DST]]… [--gpus all|N] -- PYTEST_ARGS`:
run the suite (or `--command`) in an image, with changed files overlaid read-only."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from pathlib import Path
from typing import IO, Any

from harness.cli.common import CliError, reports_user_errors
from harness.cli.docker_orphans import remove_orphans
from harness.cli.docker_run import (
    DockerRunError,
    DockerRunSpec,
    ImageUnavailable,
    build_mounts,
    container_env,
    gpu_count,
    parse_overlay,
    pytest_command,
    run_container,
)
from harness.core.paths import REPO_ROOT, cache_dir, runs_dir
from harness.resources import gpu_leases, ports


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "docker",
        help="run the suite in a container image",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_container_options(parser, image_help="image to run, e.g. dynamo:latest-vllm")
    parser.add_argument(
        "--overlay",
        action="append",
        default=[],
        metavar="SRC[:DST]",
        help="mount SRC read-only over DST (default: SRC's repo path under --workdir)",
    )
    parser.add_argument(
        "--command",
        dest="shell_command",
        help="run this (a shell-quoted line) instead of pytest, e.g. for smoke tests",
    )
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER, help="-- then pytest arguments")
    return parser


def add_container_options(
    parser: argparse.ArgumentParser, image_help: str, required: bool = True
) -> None:
    """Which image and how to run it (shared with `harness validate`)."""
    parser.add_argument("--image", required=required, help=image_help)
    parser.add_argument("--gpus", help="'all' or a count (default: none)")
    parser.add_argument("--workdir", default="/workspace", help="the image's repo checkout")
    parser.add_argument(
        "--results-dir", type=Path, help="host dir mounted at /results (default: under runs/)"
    )
    parser.add_argument(
        "--hf-cache", type=Path, default=Path.home() / ".cache" / "huggingface",
        help="host Hugging Face cache, mounted if it exists (%(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--cache", type=Path, default=cache_dir(),
        help="host harness cache, mounted at /cache if it exists (%(default)s)",
    )  # fmt: skip
    parser.add_argument("--python", default="python3", help="the image's python (for pytest)")
    parser.add_argument("--dry-run", action="store_true", help="print the docker run, start none")


def build_spec(args: argparse.Namespace, results_dir: Path) -> DockerRunSpec:
    pytest_args = [a for a in args.pytest_args if a != "--"] if args.pytest_args else []
    if args.shell_command and pytest_args:
        raise CliError("give either --command or pytest arguments after --, not both")
    command = (
        shlex.split(args.shell_command)
        if args.shell_command
        else pytest_command(args.python, pytest_args)
    )
    return container_spec(args, command, args.overlay, results_dir)


def container_spec(
    args: argparse.Namespace, command: list[str], overlays: list[str], results_dir: Path
) -> DockerRunSpec:
    """One container of `args.image` running `command`, with `overlays` (SRC[:DST]) and this
    machine's results dir, caches and lease registries mounted."""
    try:
        binds = [parse_overlay(o, args.workdir, REPO_ROOT, Path.cwd()) for o in overlays]
        registries = [ports.registry_file().parent, gpu_leases.registry_file().parent]
        for directory in registries:
            directory.mkdir(parents=True, exist_ok=True)
        mounts = build_mounts(binds, results_dir, args.hf_cache, args.cache, registries)
        gpu_count(args.gpus)
    except DockerRunError as exc:
        raise CliError(str(exc)) from None
    return DockerRunSpec(
        image=args.image,
        command=command,
        workdir=args.workdir,
        mounts=mounts,
        env=container_env(os.environ),
        gpus=args.gpus,
    )


def docker_client() -> Any:
    import docker
    from docker.errors import DockerException

    try:
        client = docker.from_env()
        client.ping()
    except DockerException as exc:
        raise CliError(
            f"no Docker daemon answers ({exc}); start one (.ci/docker_setup.sh)"
        ) from None
    return client


def run_in_image(
    spec: DockerRunSpec, results_dir: Path, client: Any, out: IO[bytes] | None = None
) -> int:
    """Remove what killed runs left, run the container to its end (its output to `out`, default
    stdout); 130 on Ctrl-C / SIGTERM."""
    orphans = remove_orphans(client)
    if orphans:
        print(
            f"harness docker: removed {len(orphans)} container(s) a killed run left: "
            + ", ".join(orphans),
            file=sys.stderr,
        )
    results_dir.mkdir(parents=True, exist_ok=True)
    try:
        return run_container(spec, client, out)
    except ImageUnavailable as exc:
        raise CliError(f"--image {spec.image}: {exc}") from None
    except KeyboardInterrupt:
        print("harness docker: interrupted; container removed", file=sys.stderr)
        return 130


@reports_user_errors
def run(args: argparse.Namespace) -> int:
    results_dir = args.results_dir or runs_dir() / f"docker-{time.strftime('%Y%m%d-%H%M%S')}"
    spec = build_spec(args, results_dir)
    print(spec.describe(), file=sys.stderr, flush=True)
    if args.dry_run:
        return 0
    code = run_in_image(spec, results_dir, docker_client())
    if code != 130:
        print(f"harness docker: exit {code}; results in {results_dir}", file=sys.stderr)
    return code
