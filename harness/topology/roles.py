"""What each role of a running topology shows from outside: health, process, log, counters, load.

- `probe`, `HealthTimeline`, `HealthSample.no_health_source`: worker health: one probe per
  poll, the state timeline, and the 'no health source' signature.
- `RoleTable`: the processes behind a running plan: the launcher and the roles it started, read
  from the files the launcher contract writes beside each role's log (launchers/lib/common.sh):
  NAME.pid, NAME.exit (the first role to exit, with its code) and roles.started.
- `tail`: the end of a role's log worth reading (the harness's own health-poll 503 lines folded).
- `scrape`, `WorkerCounters`: each Dynamo worker's own counters, scraped from its system port's
  /metrics. Dynamo's work handler counts every request an endpoint takes in
  `dynamo_component_requests_total{dynamo_component=…, dynamo_endpoint="generate"}` (ai-dynamo
  1.6.1), and a vLLM worker's engine counts the prompt tokens it ran in
  `vllm:prompt_tokens_total` (vLLM 0.31's own metric, served on the same port by dynamo.vllm)
  and its prefix-cache lookups and hits in `vllm:prefix_cache_*`. Read before and after a
  request, they say which roles served it (the path check), how long a prompt each role ran
  (the role-prompts oracle: an E/P/D decode worker must run the prompt whose KV it imported)
  and how much of it came from cache (the cache-hit check).
- `tree_rss_mib`, `tree_cpu_s`: memory and CPU of a launched process tree (for results and
  benches)."""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import requests

from harness.core.process_start import is_running_as, process_started
from harness.core.role_contract import SYSTEM_PORT_ENV, adapter_record
from harness.launch.plan import LaunchPlan
from harness.topology.own_words import own_words

PROBE_TIMEOUT_S = 1.0


@dataclass(frozen=True)
class HealthSample:
    state: str  # down | notready | ready | error
    status: int | None
    body: str

    @property
    def no_health_source(self) -> bool:
        """Every registered endpoint is ready, yet the worker says notready: nothing feeds it."""
        try:
            data = json.loads(self.body)
        except ValueError:
            return False
        endpoints = data.get("endpoints") if isinstance(data, dict) else None
        return (
            self.status == 503
            and data.get("status") == "notready"
            and isinstance(endpoints, dict)
            and bool(endpoints)
            and all(v == "ready" for v in endpoints.values())
        )


def probe(url: str, session: requests.Session | None = None) -> HealthSample:
    http = session or requests
    try:
        resp = http.get(url, timeout=PROBE_TIMEOUT_S)
    except requests.ConnectionError:
        return HealthSample("down", None, "")
    except requests.RequestException as exc:
        return HealthSample("error", None, str(exc))
    state = "ready" if resp.status_code == 200 else "notready"
    return HealthSample(state, resp.status_code, resp.text[:500])


@dataclass
class HealthTimeline:
    """State changes per role, seconds since the topology started."""

    start: float = field(default_factory=time.monotonic)
    events: list[dict[str, object]] = field(default_factory=list)
    current: dict[str, str] = field(default_factory=dict)
    # called with each new event as it is recorded (the run's progress lines)
    listeners: list[Callable[[dict[str, object]], None]] = field(default_factory=list)

    def record(self, role: str, state: str) -> None:
        if self.current.get(role) != state:
            self.current[role] = state
            event = {"role": role, "t": round(time.monotonic() - self.start, 3), "state": state}
            self.events.append(event)
            for listener in self.listeners:
                listener(event)

    def entered(self, state: str, role: str | None = None) -> list[float]:
        """When `role` (any role if None) entered `state`, in seconds since the start, in order."""
        return [
            float(str(ev["t"]))
            for ev in self.events
            if ev["state"] == state and (role is None or ev["role"] == role)
        ]

    def since_state(self, role: str, state: str) -> float | None:
        """Seconds the role has been in `state` continuously, or None if it is not in it."""
        if self.current.get(role) != state:
            return None
        for ev in reversed(self.events):
            if ev["role"] == role:
                return time.monotonic() - self.start - float(str(ev["t"]))
        return None


LOG_TAIL_LINES = 30
LOG_SCAN_BYTES = 256_000  # of each role's log read for its last traceback
STARTED_FILE = "roles.started"
EXIT_SUFFIX = ".exit"


ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# A worker's system port logs an ERROR for every 503 it answers, i.e. for each of the harness's
# own /health polls while it starts: dozens of lines that would push the real cause out of a tail.
HEALTH_POLL_503 = re.compile(r"tower_http::trace::on_failure.*Status code: 503")


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last `lines` lines worth reading: colour codes stripped, the health-poll 503 lines
    folded into one note."""
    try:
        data = path.read_bytes()[-64_000:]
    except FileNotFoundError:
        return f"(no log at {path})"
    text = ANSI_ESCAPE.sub("", data.decode(errors="replace"))
    return "\n".join(fold_health_polls(text.splitlines())[-lines:])


def fold_health_polls(lines: list[str]) -> list[str]:
    """Drop the health-poll 503 lines; one note, where the last of them was, says how many."""
    kept: list[str] = []
    dropped, note_at = 0, 0
    for line in lines:
        if HEALTH_POLL_503.search(line):
            dropped, note_at = dropped + 1, len(kept)
        else:
            kept.append(line)
    if not dropped:
        return lines
    note = f"[{dropped} x '503 Service Unavailable' lines from the harness's /health polls, elided]"
    return [*kept[:note_at], note, *kept[note_at:]]


# The launcher writes NAME.exit as its `wait -n` returns, milliseconds after the role dies on a
# quiet box; CI saw the diagnosis read before it on a loaded 2-core one (2026-12-04): 1 s of
# polling only runs when the file is missing, and only once a role has died.
EXIT_RECORD_GRACE_S = 1.0


@dataclass
class RoleProcess:
    name: str
    pid: int
    started: float  # harness/core/process_start.py: survives a wall-clock step

    def alive(self) -> bool:
        return is_running_as(self.pid, self.started)


class RoleTable:
    """The launcher and the roles it started: finds each role's pid from the launcher's pid
    files and says which ones have exited."""

    def __init__(self, plan: LaunchPlan) -> None:
        self.plan = plan
        self.launcher: psutil.Popen | None = None  # the launcher script, once spawned
        self.known: dict[str, RoleProcess] = {}
        self._started: list[str] | None = None  # what roles.started said, once it said all
        self._system_ports: dict[str, int] = {}  # each worker's, once its adapter recorded it

    def log_path(self, role: str) -> Path:
        return self.plan.log_dir / f"{role}.log"

    @property
    def launcher_log(self) -> Path:
        return self.plan.log_dir / "launcher.log"

    def refresh(self) -> None:
        for role in self.plan.roles:
            if role.name in self.known:
                continue
            pid_file = self.plan.log_dir / f"{role.name}.pid"
            try:
                pid = int(pid_file.read_text().strip())
                self.known[role.name] = RoleProcess(role.name, pid, process_started(pid))
            except (FileNotFoundError, ValueError):
                continue
            except psutil.NoSuchProcess:
                self.known[role.name] = RoleProcess(role.name, pid, 0.0)

    def exited(self) -> list[str]:
        """Roles no longer running; the one the launcher saw exit first comes first."""
        gone = [name for name, proc in self.known.items() if not proc.alive()]
        first = self.first_exit()
        return sorted(gone, key=lambda name: name != first)

    def first_exit(self) -> str | None:
        """The role whose exit ended the launcher (its NAME.exit file), if one has."""
        found = sorted(self.plan.log_dir.glob(f"*{EXIT_SUFFIX}"), key=lambda p: p.stat().st_mtime)
        return found[0].name.removesuffix(EXIT_SUFFIX) if found else None

    def exit_code(self, role: str) -> int | None:
        """The code the launcher saw the role exit with, if it wrote one."""
        try:
            return int((self.plan.log_dir / f"{role}{EXIT_SUFFIX}").read_text().strip())
        except (OSError, ValueError):
            return None

    def recorded_exit_code(self, role: str, grace_s: float = EXIT_RECORD_GRACE_S) -> int | None:
        """`exit_code`, waiting up to `grace_s` for the launcher to write it: a role's pid is
        gone before the launcher's `wait -n` returns and writes NAME.exit, so a poll that sees
        the death first would otherwise read no code."""
        deadline = time.monotonic() + grace_s
        while (code := self.exit_code(role)) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        return code

    def owner_of(self, pid: int | None) -> str:
        """'role prefill (pid 123)' if `pid` is one of ours (or a child of one), else the pid."""
        if pid is None:
            return "an unknown process"
        name = self.role_holding(pid)
        if name is not None:
            return f"role '{name}' (pid {pid})"
        return f"pid {pid}, not a role of this topology"

    def role_holding(self, pid: int | None) -> str | None:
        """The role whose process (or a child of it) is `pid`, if one of ours."""
        for name, proc in self.known.items():
            with contextlib.suppress(psutil.Error):
                tree = {proc.pid, *(c.pid for c in psutil.Process(proc.pid).children(True))}
                if pid in tree:
                    return name
        return None

    def received_system_ports(self) -> dict[str, int]:
        """{worker: the system port it was started with}, as the role adapter recorded it at
        exec (NAME.adapter.json): where its /health and /metrics really are."""
        for role in self.plan.workers:
            if role.name in self._system_ports:
                continue
            record = adapter_record(self.plan.log_dir, role.name)
            with contextlib.suppress(ValueError, KeyError, TypeError):
                ports = record["ports"] if record else None
                if isinstance(ports, dict):
                    self._system_ports[role.name] = int(ports[SYSTEM_PORT_ENV])
        return dict(self._system_ports)

    def logged_exception(self) -> tuple[str, str] | None:
        """(role, its own words: own_words.py) of the role whose log was written last among
        those that logged a failure, if any did: what a worker logs while the requests it
        serves fail 5xx."""
        found = []
        for role in self.plan.roles:
            path = self.log_path(role.name)
            with contextlib.suppress(OSError):
                words = own_words(path.read_bytes()[-LOG_SCAN_BYTES:].decode(errors="replace"))
                if words is not None:
                    found.append((path.stat().st_mtime, role.name, str(words)))
        if not found:
            return None
        _, name, line = max(found)
        return name, line

    def missing(self) -> list[str]:
        return [r.name for r in self.plan.roles if r.name not in self.known]

    def never_started(self) -> tuple[list[str], list[str]] | None:
        """Once the launcher says it started all its roles (its roles.started file): the
        declared roles it did not start, and the ones it did. None while it is still starting
        them."""
        if self._started is not None:
            return [], self._started
        try:
            started = (self.plan.log_dir / STARTED_FILE).read_text().split()
        except FileNotFoundError:
            return None
        missing = [r.name for r in self.plan.roles if r.name not in started]
        if not missing:
            self._started = started
        return missing, started


REQUESTS_TOTAL = "dynamo_component_requests_total"
PROMPT_TOKENS_TOTAL = "vllm:prompt_tokens_total"
# vLLM 0.31's prefix cache: prompt tokens looked up, and found (v1/metrics/loggers.py)
PREFIX_QUERIES_TOTAL = "vllm:prefix_cache_queries_total"
PREFIX_HITS_TOTAL = "vllm:prefix_cache_hits_total"
# Dynamo's multimodal embedding cache (dynamo/common/utils/prometheus.py EmbeddingCacheMetrics)
EMBEDDING_HITS_TOTAL = "dynamo_component_embedding_cache_hits_total"
SERVING_ENDPOINT = "generate"
SCRAPE_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class WorkerCounters:
    requests: float  # `generate` requests taken
    prompt_tokens: float | None  # prompt tokens its engine ran; None: no vLLM engine there
    prefix_queries: float = 0.0  # prompt tokens its prefix cache was asked for
    prefix_hits: float = 0.0  # of those, found cached
    embedding_hits: float = 0.0  # media its encoder's embedding cache served (Dynamo's own)


def parse_counters(text: str) -> WorkerCounters:
    """The counters one worker's /metrics text holds (all label sets summed).

    >>> parse_counters('dynamo_component_requests_total{dynamo_component="encode",'
    ...                'dynamo_endpoint="generate"} 3')
    ... # doctest: +NORMALIZE_WHITESPACE
    WorkerCounters(requests=3.0, prompt_tokens=None, prefix_queries=0.0, prefix_hits=0.0,
                   embedding_hits=0.0)
    """
    from prometheus_client.parser import text_string_to_metric_families

    served, prompt, queries, hits, embedded = 0.0, None, 0.0, 0.0, 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("dynamo_endpoint", SERVING_ENDPOINT) != SERVING_ENDPOINT:
                continue
            if sample.name == REQUESTS_TOTAL:
                served += sample.value
            elif sample.name == PROMPT_TOKENS_TOTAL:
                prompt = (prompt or 0.0) + sample.value
            elif sample.name == PREFIX_QUERIES_TOTAL:
                queries += sample.value
            elif sample.name == PREFIX_HITS_TOTAL:
                hits += sample.value
            elif sample.name == EMBEDDING_HITS_TOTAL:
                embedded += sample.value
    return WorkerCounters(served, prompt, queries, hits, embedded)


def scrape(url: str, session: requests.Session | None = None) -> WorkerCounters | None:
    """`parse_counters` of one worker's /metrics URL, or None if it does not answer."""
    http = session or requests
    try:
        resp = http.get(url, timeout=SCRAPE_TIMEOUT_S)
    except requests.RequestException:
        return None
    return parse_counters(resp.text) if resp.ok else None


# dynamo.frontend's own histogram of the image placeholder tokens it computed per image-bearing
# request (ai-dynamo 1.6.1 dynamo/prometheus_names.py frontend_service), on its HTTP port.
IMAGE_TOKENS = "dynamo_frontend_image_tokens_per_request"
# The KV router's own hit rate per routed request (overlap blocks / the request's blocks), a
# histogram on the frontend's /metrics labelled by worker; upstream's cached-tokens payload judges
# its mean over the repeats (tests/utils/payloads.py, min_avg_kv_hit_rate).
ROUTER_KV_HIT_RATE = "dynamo_component_router_kv_hit_rate"


def histogram_totals(text: str, name: str) -> tuple[float, float]:
    r"""A Prometheus histogram's `_count` and `_sum`, all label sets summed.

    >>> histogram_totals('h_count{w="a"} 2\nh_sum{w="a"} 1.6\nh_count{w="b"} 1\n# HELP h x', "h")
    (3.0, 1.6)
    """
    from prometheus_client.parser import text_string_to_metric_families

    count = total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == f"{name}_count":
                count += sample.value
            elif sample.name == f"{name}_sum":
                total += sample.value
    return count, total


@dataclass(frozen=True)
class ImageTokenTally:
    requests: float  # the histogram's _count: image-bearing requests it recorded
    tokens: float  # its _sum: their image placeholder tokens


@dataclass(frozen=True)
class RouterHitTally:
    decisions: float  # the router hit-rate histogram's _count: requests it routed
    rate_sum: float  # its _sum: their hit rates added up


@dataclass(frozen=True)
class FrontendTally:
    """The frontend's own histograms the oracles read."""

    image: ImageTokenTally
    router: RouterHitTally

    def since(self, before: FrontendTally) -> FrontendTally:
        """How far each figure moved from `before`."""
        return FrontendTally(
            ImageTokenTally(
                self.image.requests - before.image.requests, self.image.tokens - before.image.tokens
            ),
            RouterHitTally(
                self.router.decisions - before.router.decisions,
                self.router.rate_sum - before.router.rate_sum,
            ),
        )


def parse_frontend(text: str) -> FrontendTally:
    r"""The frontend's image-token and router hit-rate histograms.

    >>> parse_frontend('dynamo_frontend_image_tokens_per_request_count{model="m"} 2\n'
    ...                'dynamo_frontend_image_tokens_per_request_sum{model="m"} 32').image
    ImageTokenTally(requests=2.0, tokens=32.0)
    """
    return FrontendTally(
        ImageTokenTally(*histogram_totals(text, IMAGE_TOKENS)),
        RouterHitTally(*histogram_totals(text, ROUTER_KV_HIT_RATE)),
    )


def scrape_frontend(url: str, session: requests.Session | None = None) -> FrontendTally | None:
    """`parse_frontend` of the frontend's /metrics, or None if it does not answer."""
    http = session or requests
    try:
        resp = http.get(url, timeout=SCRAPE_TIMEOUT_S)
    except requests.RequestException:
        return None
    return parse_frontend(resp.text) if resp.ok else None


def requests_of(counters: dict[str, WorkerCounters | None]) -> dict[str, float | None]:
    """Each role's request counter of a snapshot (None where /metrics did not answer)."""
    return {role: (c.requests if c else None) for role, c in counters.items()}


def prompt_tokens_ran(
    before: dict[str, WorkerCounters | None], after: dict[str, WorkerCounters | None]
) -> dict[str, int]:
    """The prompt tokens each engine role ran between two snapshots, for roles that took a
    request in between (a replica that served nothing, or a role without an engine, is left out).
    Example (E/P/D LLaVA, one image request): {"prefill": 115, "decode": 114}."""
    ran = {}
    for role, end in after.items():
        start = before.get(role)
        if start is None or end is None or end.prompt_tokens is None:
            continue
        if end.requests > start.requests:
            ran[role] = int(end.prompt_tokens - (start.prompt_tokens or 0.0))
    return ran


def tree(root: psutil.Process) -> list[psutil.Process]:
    with contextlib.suppress(psutil.Error):
        return [root, *root.children(recursive=True)]
    return []


def tree_rss_mib(root: psutil.Process) -> float:
    total = 0
    for proc in tree(root):
        with contextlib.suppress(psutil.Error):
            total += proc.memory_info().rss
    return total / 2**20


def tree_cpu_s(root: psutil.Process) -> float:
    """CPU seconds (user + system) the live processes of the tree have used so far."""
    total = 0.0
    for proc in tree(root):
        with contextlib.suppress(psutil.Error):
            times = proc.cpu_times()
            total += times.user + times.system
    return total
