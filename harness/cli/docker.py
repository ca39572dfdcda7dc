"""`serve-harness docker --image IMG [--overlay SRC[:DST]]… [--gpus all|N] -- PYTEST_ARGS`: run
the suite (or `--command`) in a container image, with changed files overlaid read-only.

One run with the Docker SDK: host network and PID namespace, optional GPUs, logs streamed with
secrets scrubbed, the container removed on exit and on Ctrl-C. The container shares the host's
harness state, so a run inside it and one outside cannot collide: the cache (tiny models, media,
compile caches) is mounted at /cache, the port and GPU lease registries at their own paths, and
the PID namespace is the host's, because a lease names its owner by pid and start time and each
side drops the leases whose owner it cannot see running.

Containers a killed run left behind are removed by the next: each run labels its container with
its owner process (host, pid, start time), and only containers carrying the harness label whose
owner on this host is gone are removed (a pid reused by another process is told apart by its
start time)."""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import signal
import socket
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any

import psutil

from harness.cli.main import CliError
from harness.core.paths import REPO_ROOT, cache_dir, runs_dir
from harness.core.secrets import redact_env, scrub_text
from harness.machine.gpu_leases import gpu_registry_file
from harness.machine.port_registry import port_registry_file
from harness.topology.processes import handling, raise_interrupt

ORDER = 70  # its place in `serve-harness --help` (harness/cli/main.py)

EXAMPLES = """examples:
  serve-harness docker --image serve-harness/cpu:local -- -m post_merge"""

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


RESULTS_TARGET = "/results"
CACHE_TARGET = "/cache"
HF_CACHE_TARGET = "/root/.cache/huggingface"
# `docker stop`'s own default: SIGTERM, then SIGKILL. The harness inside needs ~2-4 s of it to
# stop its topology (INTERRUPT_GRACE_S per group, then the marker sweep) and keep the logs.
STOP_TIMEOUT_S = 10
ENV_ALLOWED = ("HF_TOKEN", "HF_HUB_OFFLINE", "CUDA_VISIBLE_DEVICES")
ENV_ALLOWED_PREFIXES = ("HARNESS_",)


class DockerRunError(ValueError):
    """A bad --overlay / --gpus / path; the message names the argument and how to fix it."""


@dataclass(frozen=True)
class BindMount:
    source: str  # absolute host path
    target: str  # absolute container path
    read_only: bool


@dataclass(frozen=True)
class DockerRunSpec:
    image: str
    command: list[str]
    workdir: str
    mounts: list[BindMount]
    env: Mapping[str, str] = field(repr=False)
    gpus: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        """A `docker run` line a person could paste (secrets shown as ***)."""
        parts = ["docker run --rm --network host --ipc host --pid host", f"-w {self.workdir}"]
        if self.gpus:
            parts.append(f"--gpus {self.gpus}")
        parts += [f"--label {k}={v}" for k, v in self.labels.items()]
        for m in self.mounts:
            parts.append(f"-v {m.source}:{m.target}{':ro' if m.read_only else ''}")
        parts += [f"-e {k}={shlex.quote(v)}" for k, v in redact_env(self.env).items()]
        parts += [self.image, shlex.join(self.command)]
        return " \\\n  ".join(parts)


def parse_overlay(spec: str, workdir: str, repo_root: Path, cwd: Path) -> BindMount:
    """`SRC[:DST]` -> a read-only bind of SRC over DST in the image.

    SRC is relative to `cwd` (or absolute) and must exist. DST defaults to SRC's path relative to
    the repo root, under the image workdir:
    `harness/launch/plan.py` -> `/workspace/harness/launch/plan.py`.
    A relative DST is taken under the workdir too.
    """
    src_text, _, dst_text = spec.partition(":")
    if not src_text:
        raise DockerRunError(f"--overlay {spec!r}: SRC is empty; use SRC[:DST]")
    source = (cwd / src_text).resolve()
    if not source.exists():
        raise DockerRunError(f"--overlay {spec!r}: no such file or directory {source}")
    if dst_text:
        target = PurePosixPath(workdir) / dst_text  # an absolute DST replaces the workdir
    else:
        try:
            relative = source.relative_to(repo_root.resolve())
        except ValueError:
            raise DockerRunError(
                f"--overlay {spec!r}: {source} is outside the repo {repo_root}; give SRC:DST"
            ) from None
        target = PurePosixPath(workdir) / relative.as_posix()
    return BindMount(str(source), str(target), read_only=True)


def container_env(host_env: Mapping[str, str]) -> dict[str, str]:
    """Only allow-listed variables cross into the container: HF_TOKEN, HF_HUB_OFFLINE,
    CUDA_VISIBLE_DEVICES and HARNESS_*; the rest of the host environment stays out. The cache and
    the runs dir point at their mounts (the host's paths mean nothing inside)."""
    env = {
        k: v for k, v in host_env.items() if k in ENV_ALLOWED or k.startswith(ENV_ALLOWED_PREFIXES)
    }
    return {**env, "HARNESS_CACHE": CACHE_TARGET, "HARNESS_RUNS": RESULTS_TARGET}


def gpu_count(gpus: str | None) -> int | None:
    """`all` -> -1 (every GPU), `N` -> N, None -> None (no GPUs)."""
    if gpus is None:
        return None
    if gpus == "all":
        return -1
    if gpus.isdigit() and int(gpus) > 0:
        return int(gpus)
    raise DockerRunError(f"--gpus {gpus!r}: use 'all' or a positive count")


def pytest_command(python: str, pytest_args: Sequence[str]) -> list[str]:
    """`python -m pytest ARGS`, writing results and JUnit XML into the results mount unless the
    caller chose where."""
    args = list(pytest_args)
    if not any(a == "--results" or a.startswith("--results=") for a in args):
        args += ["--results", f"{RESULTS_TARGET}/results.jsonl"]
    if not any(a.startswith("--junitxml") or a.startswith("--junit-xml") for a in args):
        args += [f"--junitxml={RESULTS_TARGET}/junit.xml"]
    return [python, "-m", "pytest", *args]


def build_mounts(
    overlays: Sequence[BindMount],
    results_dir: Path,
    hf_cache: Path | None,
    harness_cache: Path | None = None,
    registry_dirs: Sequence[Path] = (),
) -> list[BindMount]:
    """Results dir (read-write, comes back to the host: results, JUnit, per-role logs), the
    harness cache and HF cache if present, the lease registries' dirs at their own paths, then
    overlays."""
    mounts = [BindMount(str(results_dir.resolve()), RESULTS_TARGET, read_only=False)]
    if harness_cache is not None and harness_cache.is_dir():
        mounts.append(BindMount(str(harness_cache.resolve()), CACHE_TARGET, read_only=False))
    if hf_cache is not None and hf_cache.is_dir():
        mounts.append(BindMount(str(hf_cache.resolve()), HF_CACHE_TARGET, read_only=False))
    for directory in dict.fromkeys(d.resolve() for d in registry_dirs):
        mounts.append(BindMount(str(directory), str(directory), read_only=False))
    targets = [m.target for m in overlays]
    repeated = {t for t in targets if targets.count(t) > 1}
    if repeated:
        raise DockerRunError(f"--overlay: two overlays onto the same path {sorted(repeated)}")
    return [*mounts, *overlays]


# -- the edge: one container run with the Docker SDK ------------------------------------------


def docker_mounts(mounts: Sequence[BindMount]) -> list[Any]:
    from docker.types import Mount

    return [Mount(m.target, m.source, type="bind", read_only=m.read_only) for m in mounts]


def device_requests(gpus: str | None) -> list[Any]:
    from docker.types import DeviceRequest

    count = gpu_count(gpus)
    return [] if count is None else [DeviceRequest(count=count, capabilities=[["gpu"]])]


def stream_scrubbed(chunks: Iterator[bytes], env: Mapping[str, str], out: IO[bytes]) -> None:
    """Copy container output line by line, with every secret value replaced by ***."""
    pending = b""
    for chunk in chunks:
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            out.write(scrub_text(line.decode(errors="replace"), env).encode() + b"\n")
        out.flush()
    if pending:
        out.write(scrub_text(pending.decode(errors="replace"), env).encode())
        out.flush()


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Ctrl-C / SIGTERM arriving inside the block are held and raised (as KeyboardInterrupt) when
    it ends.

    Around create + start: an interrupt landing while the daemon answers would otherwise leave a
    container whose handle the caller never received (seen in CI). Handlers, not a signal mask:
    a masked signal is still taken by any other thread, and Python then runs it in this one."""
    held: list[int] = []

    def hold(signum: int, frame: object) -> None:
        held.append(signum)

    with handling(hold):
        yield
    if held:
        raise KeyboardInterrupt(f"signal {held[0]}")


class ImageUnavailable(RuntimeError):
    """The image is neither local nor pullable; the message says why."""


def ensure_image(client: Any, image: str, say: IO[str]) -> None:
    """Like `docker run`: a missing image is pulled first (interruptible; nothing to clean up)."""
    from docker.errors import APIError, ImageNotFound

    try:
        client.images.get(image)
        return
    except ImageNotFound:
        pass
    print(f"serve-harness docker: {image} is not local; pulling it", file=say, flush=True)
    try:
        client.images.pull(image)  # the SDK splits tag / @digest / registry port itself
    except APIError as exc:
        reason = str(getattr(exc, "explanation", None) or exc).splitlines()[0][:300]
        raise ImageUnavailable(f"not found locally and the pull failed: {reason}") from None


def run_container(spec: DockerRunSpec, client: Any, out: IO[bytes] | None = None) -> int:
    """Start the container, stream its logs, return its exit code; it is removed whatever
    happens (normal exit, error, Ctrl-C, SIGTERM)."""
    out = out or sys.stdout.buffer
    ensure_image(client, spec.image, sys.stderr)
    container = None
    with handling(raise_interrupt, (signal.SIGTERM,)):
        try:
            with signals_deferred():
                container = client.containers.create(
                    spec.image,
                    spec.command,
                    network_mode="host",
                    ipc_mode="host",
                    pid_mode="host",
                    working_dir=spec.workdir,
                    environment=dict(spec.env),
                    mounts=docker_mounts(spec.mounts),
                    device_requests=device_requests(spec.gpus),
                    labels={**owner_labels(), **spec.labels},
                )
                container.start()
            stream_scrubbed(container.logs(stream=True, follow=True), spec.env, out)
            return int(container.wait()["StatusCode"])
        finally:
            if container is not None:
                remove_container(container)


def remove_container(container: Any) -> None:
    """Stop (if running: SIGTERM, SIGKILL after STOP_TIMEOUT_S) and remove; a second Ctrl-C
    cannot cut this short."""
    from docker.errors import APIError, NotFound

    with handling(signal.SIG_IGN):
        with contextlib.suppress(NotFound, APIError):
            container.reload()
            if container.status == "running":
                container.stop(timeout=STOP_TIMEOUT_S)
        with contextlib.suppress(NotFound):
            container.remove(force=True)


def add_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "docker",
        help="run the suite in a container image",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--image", required=True, help="image to run, e.g. dynamo:latest-vllm")
    add_container_options(parser)
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


def add_container_options(parser: argparse.ArgumentParser) -> None:
    """How to run an image (shared with `harness validate image`); the caller names the image."""
    parser.add_argument("--gpus", help="'all' or a count (default: none)")
    parser.add_argument("--workdir", default="/workspace", help="the image's repo checkout")
    parser.add_argument(
        "--results-dir", type=Path, help="host dir mounted at /results (default: under runs/)"
    )
    parser.add_argument(
        "--hf-cache",
        type=Path,
        default=Path.home() / ".cache" / "huggingface",
        help="host Hugging Face cache, mounted if it exists (%(default)s)",
    )
    parser.add_argument(
        "--cache",
        type=Path,
        default=cache_dir(),
        help="host harness cache, mounted at /cache if it exists (%(default)s)",
    )
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
        registries = [port_registry_file().parent, gpu_registry_file().parent]
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
            f"serve-harness docker: removed {len(orphans)} container(s) a killed run left: "
            + ", ".join(orphans),
            file=sys.stderr,
        )
    results_dir.mkdir(parents=True, exist_ok=True)
    try:
        return run_container(spec, client, out)
    except ImageUnavailable as exc:
        raise CliError(f"--image {spec.image}: {exc}") from None
    except KeyboardInterrupt:
        print("serve-harness docker: interrupted; container removed", file=sys.stderr)
        return 130


def run(args: argparse.Namespace) -> int:
    results_dir = args.results_dir or runs_dir() / f"docker-{time.strftime('%Y%m%d-%H%M%S')}"
    spec = build_spec(args, results_dir)
    print(spec.describe(), file=sys.stderr, flush=True)
    if args.dry_run:
        return 0
    code = run_in_image(spec, results_dir, docker_client())
    if code != 130:
        print(f"serve-harness docker: exit {code}; results in {results_dir}", file=sys.stderr)
    return code
