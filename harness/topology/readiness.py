"""Readiness: is the topology up, and if not, why. Everything here sees the running topology
through one view, `Observed`, so it does not import the topology it serves.

- Discovery: what Dynamo's file backend (DYN_FILE_KV) says is registered. Layout (ai-dynamo
  1.6.1): `v1/instances/<ns>%2F<component>%2F<endpoint>%2F<id>` holds one endpoint record per
  instance; `v1/mdc/...` the model cards of endpoints that serve a model.
- Phases, in order, each a small strategy that owns its wait and its failure under one deadline
  for all of them (mirakuru's executors: later phases get only what earlier ones left):
  `failure(topo, left_s)` returns the failure it has reached, else None; `done(topo, left_s)`
  polls once, never raises, and spends at most `left_s`. Every phase fails `phase_timeout` when
  nothing is left; the registration phases also spend `register_s` (`never_registered`);
  `WorkersHealthy` names a worker with no health source after its grace, `ModelListed` a model
  not listed a grace after every worker turned healthy.
- Diagnoses: causes only a launched topology can read from its own files (a role's exit, a role
  never started, a health server that could not bind, the frontend's own error line), checked on
  every poll of a launched topology (`LogDiagnosis.every()`, in order)."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

import psutil
import requests

from harness.core.registered import Registered, import_submodules
from harness.core.verdict import Cause, TopologyFailure
from harness.topology.dynamo_src import CHECKOUT_LAUNCHER, import_records
from harness.topology.plan import LaunchPlan
from harness.topology.processes import exposed_listeners, listeners
from harness.topology.roles import HealthSample, HealthTimeline, RoleTable, tail


def _records(directory: Path) -> list[dict[str, object]]:
    out = []
    if directory.is_dir():
        for path in directory.iterdir():
            try:
                out.append(json.loads(path.read_text()))
            except (OSError, ValueError):
                continue
    return out


def registered_components(kv_dir: Path) -> set[str]:
    """Components with at least one registered endpoint instance, e.g. {'backend', 'encoder'}."""
    return {str(r.get("component")) for r in _records(kv_dir / "v1" / "instances")}


@dataclass(frozen=True)
class ModelCard:
    """One registered model card: who registered it, under which name, from which system port
    (a worker self-hosts its card's files at http://127.0.0.1:<system port>/v1/metadata/…)."""

    component: str
    name: str
    system_port: int | None
    worker_type: str | None = None  # Dynamo's WorkerType: Aggregated, Prefill, Decode, Encode
    needs: tuple[tuple[str, ...], ...] = ()  # the peers it is served with: any one of these sets

    def describe(self) -> str:
        needs = " or ".join("+".join(s) for s in self.needs) if self.needs else "nothing"
        return f"{self.component}: {self.name} ({self.worker_type or '?'}, needs {needs})"


_METADATA_PORT = re.compile(r"^https?://[^/:]+:(\d+)/v1/metadata/")


def registered_cards(kv_dir: Path) -> list[ModelCard]:
    cards = []
    for r in _records(kv_dir / "v1" / "mdc"):
        card = r.get("card_json") if isinstance(r.get("card_json"), dict) else {}
        assert isinstance(card, dict)
        info = card.get("model_info") if isinstance(card.get("model_info"), dict) else {}
        config = info.get("hf_config_json") if isinstance(info, dict) else None
        path = config.get("path", "") if isinstance(config, dict) else ""
        match = _METADATA_PORT.match(str(path))
        needs = card.get("needs") if isinstance(card.get("needs"), list) else []
        cards.append(
            ModelCard(
                str(r.get("component")),
                str(card.get("display_name", "?")),
                int(match.group(1)) if match else None,
                _name(card.get("worker_type")),
                tuple(tuple(_name(t) or "?" for t in s) for s in needs if isinstance(s, list)),
            )
        )
    return cards


def _name(value: object) -> str | None:
    """A WorkerType as the card serializes it ("Encode", or {"Encode": …}), by name."""
    if isinstance(value, dict) and len(value) == 1:
        value = next(iter(value))
    return str(value) if value is not None else None


def unmet_needs(cards: list[ModelCard]) -> list[str]:
    """The cards whose `needs` no set of registered worker types satisfies: what the frontend's
    serving-readiness gate still waits for, e.g. "backend (Decode) needs Prefill"."""
    present = {c.worker_type for c in cards if c.worker_type}
    return [
        f"{c.component} ({c.worker_type}) needs {' or '.join('+'.join(s) for s in c.needs)}"
        for c in cards
        if c.needs and not any(set(s) <= present for s in c.needs)
    ]


class Observed(Protocol):
    """What a phase or a diagnosis may look at and do: the running topology as
    `topology.Topology` exposes it (so this module does not import the topology it serves)."""

    plan: LaunchPlan
    timeline: HealthTimeline
    samples: dict[str, HealthSample]
    phase_times: dict[str, float]
    phase: str
    healthy_once: set[str]

    def elapsed(self) -> float: ...

    def due(self, what: str, every_s: float) -> bool: ...

    def health_state(self, role: str) -> str: ...

    def health_summary(self) -> dict[str, str]: ...

    def listed_models(self) -> list[str]: ...

    def request_counts(self) -> dict[str, float | None]: ...

    def processes(self) -> list[psutil.Process]: ...

    def post_chat(
        self, body: dict[str, Any], check_roles: bool = True, timeout_s: float | None = None
    ) -> requests.Response: ...

    def failure(self, cause: Cause, message: str, **ev: Any) -> TopologyFailure: ...


class Phase(Registered, root=True):
    """One step of readiness, registered like the diagnoses: a subclass that sets `name` and
    `order` (its place among the others) runs on every topology it `applies` to, with no list
    to edit. Subclasses give `done` and `waiting_for`; a phase that fails for another reason than
    the budget running out extends `failure`. `launched_only`: it reads this machine's processes
    or files, so a deployed topology (target mode) skips it."""

    package = "harness.topology"
    launched_only: ClassVar[bool] = False

    @classmethod
    def applies(cls, plan: LaunchPlan) -> bool:
        return True

    @classmethod
    def made_for(cls, plan: LaunchPlan, warmups: Sequence[dict[str, Any]]) -> Phase:
        """A fresh instance for one topology (phases keep per-topology state)."""
        return cls()

    @classmethod
    def for_topology(
        cls, plan: LaunchPlan, launched: bool, warmups: Sequence[dict[str, Any]] = ()
    ) -> list[Phase]:
        """The phases of one topology, in order: every registered phase that applies to it."""
        import_submodules(cls.package)
        return [
            phase.made_for(plan, warmups)
            for phase in sorted(cls.registered, key=lambda c: c.order)
            if (launched or not phase.launched_only) and phase.applies(plan)
        ]

    def done(self, topo: Observed, left_s: float) -> bool:
        raise NotImplementedError

    def waiting_for(self, topo: Observed) -> str:
        raise NotImplementedError

    def failure(self, topo: Observed, left_s: float) -> TopologyFailure | None:
        if left_s <= 0:
            return topo.failure(
                Cause.PHASE_TIMEOUT,
                f"phase {self.name} over the {topo.plan.budget.total_s:.0f} s budget: waiting "
                f"for {self.waiting_for(topo)}; roles: {topo.health_summary()}",
            )
        return None


class Check(Phase):
    """A phase that waits for nothing: one check once the phases before it are done; its
    `failure` is the finding, `what` names it."""

    what: ClassVar[str]

    def done(self, topo: Observed, left_s: float) -> bool:
        return True

    def waiting_for(self, topo: Observed) -> str:
        return self.what


@dataclass
class Registration:
    """What discovery says of each worker role, against the plan."""

    missing: list[str] = field(default_factory=list)  # no endpoint of its component registered
    no_card: list[str] = field(default_factory=list)  # an endpoint, but no model card
    misnamed: dict[str, str] = field(default_factory=dict)  # role -> the model name it carries
    cards: list[ModelCard] = field(default_factory=list)

    @property
    def culprit(self) -> str | None:
        return next(iter([*self.missing, *self.no_card, *self.misnamed]), None)

    def problems(self, served: str) -> list[str]:
        out = [f"roles missing from discovery {self.missing}"] if self.missing else []
        out += [f"role '{role}' registered its endpoint but no model card" for role in self.no_card]
        out += [
            f"role '{role}' registered model {name!r}, the plan serves {served!r}"
            for role, name in self.misnamed.items()
        ]
        return out


def registration(topo: Observed) -> Registration:
    """Each worker's registration, from discovery. A card names its role by its system port
    (else by its component, when one role alone has it). A deployed target's discovery cannot
    be read: nothing to say (the path oracle still shows a role that serves nothing)."""
    kv_dir = topo.plan.discovery_dir
    if kv_dir is None:
        return Registration()
    registered = registered_components(kv_dir)
    cards = registered_cards(kv_dir)
    workers = topo.plan.workers
    by_port = {r.port: r.name for r in workers}
    by_component: dict[str | None, list[str]] = {}
    for r in workers:
        by_component.setdefault(r.discovery_component, []).append(r.name)

    def role_of(card: ModelCard) -> str | None:
        if card.system_port in by_port:
            return by_port[card.system_port]
        sharing = by_component.get(card.component, [])
        return sharing[0] if len(sharing) == 1 else None

    carded = [role_of(c) for c in cards]
    unnamed = carded.count(None)  # cards of a shared component, with no port to tell
    result = Registration(cards=cards)
    for r in workers:
        if not r.discovery_component:
            continue
        if r.discovery_component not in registered:
            result.missing.append(r.name)
        elif r.name not in carded and not unnamed:
            result.no_card.append(r.name)
    result.misnamed = {
        role_of(c) or f"component {c.component}": c.name
        for c in cards
        if c.name != topo.plan.served_model_name
    }
    return result


def never_registered(topo: Observed, waiting_for: str) -> TopologyFailure:
    """The model is not served: name the roles whose component never reached discovery, the
    roles that registered an endpoint but no model card, and the roles that registered under
    another model name than the plan serves; with the cards present and the peers the
    frontend still waits for (each card's `needs`)."""
    kv_dir = topo.plan.discovery_dir
    registered = registered_components(kv_dir) if kv_dir else set()
    found = registration(topo)
    served = topo.plan.served_model_name
    cards = [c.describe() for c in found.cards]
    unmet = unmet_needs(found.cards)
    problems = found.problems(served)
    if not problems and found.cards:
        problems = ["every worker registered an endpoint and a model card"]
    return topo.failure(
        Cause.NEVER_REGISTERED,
        f"model {served} not served after {topo.elapsed():.0f} s: "
        f"{'; '.join(problems) or 'no model card registered'}; registered components "
        f"{sorted(registered)}; model cards {cards}"
        + (f"; the frontend still needs: {', '.join(unmet)}" if unmet else "")
        + f"; waiting for {waiting_for}",
        detail={
            "registered": sorted(registered),
            "missing_roles": found.missing,
            "roles_without_card": found.no_card,
            "cards": cards,
            "unmet_needs": unmet,
            "misnamed_roles": found.misnamed,
        },
        role=found.culprit,
    )


class Registering(Phase):
    """A phase that waits for registration: past `register_s` the model never registered."""

    def failure(self, topo: Observed, left_s: float) -> TopologyFailure | None:
        if topo.elapsed() > topo.plan.budget.register_s:
            return never_registered(topo, self.waiting_for(topo))
        return super().failure(topo, left_s)


class WorkersHealthy(Registering):
    """Every worker role's system port answers /health 200."""

    name, order = "workers_healthy", 10

    def done(self, topo: Observed, left_s: float) -> bool:
        return all(topo.health_state(r.name) == "ready" for r in topo.plan.workers)

    def waiting_for(self, topo: Observed) -> str:
        pending = [r.name for r in topo.plan.workers if topo.health_state(r.name) != "ready"]
        return f"/health 200 from {pending}"

    def failure(self, topo: Observed, left_s: float) -> TopologyFailure | None:
        grace = topo.plan.budget.no_health_source_grace_s
        for role in topo.plan.workers:
            stuck = topo.timeline.since_state(role.name, "no_health_source")
            if stuck is not None and stuck > grace:
                sample = topo.samples[role.name]
                return topo.failure(
                    Cause.NO_HEALTH_SOURCE,
                    f"worker '{role.name}' (port {role.port}) reports every endpoint ready but "
                    f"status notready for {stuck:.1f} s: it has no health source. Register a "
                    "health-check payload for its endpoint, or set "
                    "DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS='[\"generate\"]' in its launcher env. "
                    f"Body: {sample.body}",
                    role=role.name,
                    port=role.port,
                )
        return super().failure(topo, left_s)


class ModelListed(Registering):
    """The frontend's /v1/models lists the served model (its /health is 200 with no workers).
    Every worker healthy for `listing_grace_s` and still not listed: it never registered."""

    name, order = "model_listed", 20

    def done(self, topo: Observed, left_s: float) -> bool:
        return topo.plan.served_model_name in topo.listed_models()

    def waiting_for(self, topo: Observed) -> str:
        return f"{topo.plan.served_model_name} in /v1/models (listed: {topo.listed_models()})"

    def failure(self, topo: Observed, left_s: float) -> TopologyFailure | None:
        healthy_at = topo.phase_times.get(WorkersHealthy.name)
        if healthy_at is not None:
            healthy_for = topo.elapsed() - healthy_at
            if healthy_for > topo.plan.budget.listing_grace_s:
                return never_registered(
                    topo,
                    f"{self.waiting_for(topo)}; every worker has been healthy for "
                    f"{healthy_for:.1f} s",
                )
        return super().failure(topo, left_s)


class RegisteredAsPlanned(Check):
    """Once the model is listed: every worker registered the discovery component its profile
    names, and every model card carries the served name (so a profile that misnames a role's
    component, or a worker serving another model beside the right ones, is named here)."""

    name, order = "registered_as_planned", 40
    what = "the registration check"

    def failure(self, topo: Observed, left_s: float) -> TopologyFailure | None:
        found = registration(topo)
        if found.missing or found.no_card or found.misnamed:
            return never_registered(topo, "every role registered as its profile says")
        return super().failure(topo, left_s)


class WarmedUp(Phase):
    """One real request per media kind goes through every stage and answers 200.

    404/503 mean "not routable yet" and are retried; any other error repeated
    `REPEATS_TO_FAIL` times in a row is a real fault (e.g. a 500 for an unsupported media path).
    A request waits at most what is left of the budget."""

    name, order = "warmed_up", 50
    RETRYABLE = (404, 503)
    REPEATS_TO_FAIL = 3

    @classmethod
    def made_for(cls, plan: LaunchPlan, warmups: Sequence[dict[str, Any]]) -> Phase:
        return cls(warmups)

    def __init__(self, bodies: Sequence[dict[str, Any]]) -> None:
        self.pending = list(bodies)
        self.last_error = ""
        self.repeats = 0
        self.fault: tuple[str, list[str]] | None = None  # (error, media) once it repeats

    def failure(self, topo: Observed, left_s: float) -> TopologyFailure | None:
        if self.fault is not None:
            error, media = self.fault
            return topo.failure(
                Cause.HTTP_ERROR,
                f"warm-up request answered {error} {self.repeats} times (media: {media})",
            )
        return super().failure(topo, left_s)

    def done(self, topo: Observed, left_s: float) -> bool:
        while self.pending and self.fault is None:
            timeout = min(topo.plan.budget.request_s, left_s)
            try:
                resp = topo.post_chat(self.pending[0], check_roles=False, timeout_s=timeout)
            except (requests.RequestException, TopologyFailure) as exc:
                self.last_error = str(exc)
                return False
            if resp.status_code != 200:
                self.note_error(resp)
                return False
            self.pending.pop(0)
        return not self.pending

    def note_error(self, resp: requests.Response) -> None:
        error = f"HTTP {resp.status_code}: {resp.text[:300]}"
        self.repeats = self.repeats + 1 if error == self.last_error else 1
        self.last_error = error
        if resp.status_code not in self.RETRYABLE and self.repeats >= self.REPEATS_TO_FAIL:
            self.fault = (error, media_kinds(self.pending[0]))

    def waiting_for(self, topo: Observed) -> str:
        return f"{len(self.pending)} warm-up request(s) to answer 200 (last: {self.last_error})"


# A checkout's launcher may send requests of its own once the frontend answers (upstream's router
# launchers POST a one-token chat every 2 s until one answers 200): the case's requests start once
# no worker's request counter has moved for this long, so none is judged against another's.
QUIET_S = 3.0


class LauncherQuiet(Phase):
    """A checkout's launcher has stopped sending requests of its own: every worker's request
    counter has held still for QUIET_S since the harness's warm-ups were answered."""

    name, order = "launcher_quiet", 60
    launched_only = True

    @classmethod
    def applies(cls, plan: LaunchPlan) -> bool:
        return plan.launcher == CHECKOUT_LAUNCHER

    def __init__(self) -> None:
        self.counts: dict[str, float | None] | None = None
        self.since = 0.0

    def done(self, topo: Observed, left_s: float) -> bool:
        counts = topo.request_counts()
        if counts != self.counts:
            self.counts, self.since = counts, topo.elapsed()
        return topo.elapsed() - self.since >= QUIET_S

    def waiting_for(self, topo: Observed) -> str:
        return f"the launcher's own requests to stop (worker request counters: {self.counts})"


class LoopbackOnly(Check):
    """Every socket the topology listens on is bound to loopback (checked once, when ready)."""

    name, order = "loopback_only", 70
    what = "the loopback check"
    launched_only = True

    @classmethod
    def applies(cls, plan: LaunchPlan) -> bool:
        return plan.loopback_only

    def failure(self, topo: Observed, left_s: float) -> TopologyFailure | None:
        procs = {p.pid: p for p in topo.processes()}
        found = exposed_listeners(procs, allowed_ports=topo.plan.wide_ports)
        allowed = set(topo.plan.wide_roles)  # one OS-assigned listener each
        exposed = []
        for pid, where in found:
            role = role_of_pid(topo.plan, procs.get(pid) if pid else None)
            if role in allowed:
                allowed.discard(role)
            else:
                exposed.append(where)
        if exposed:
            return topo.failure(
                Cause.EXPOSED_LISTENER,
                f"listening beyond 127.0.0.1: {exposed}; bind it to 127.0.0.1 in the launcher",
            )
        return super().failure(topo, left_s)


class RanDynamoSource(Check):
    """With `--dynamo-src`: every frontend and worker role loaded each `dynamo.<package>` the
    checkout carries from the checkout, as its own import recorder wrote down (dynamo_src.py);
    packages the checkout lacks come from the installed wheel. Checked once the model is listed,
    when every role has long imported its engine package."""

    name, order = "ran_dynamo_src", 30
    what = "the roles' import records"
    launched_only = True

    @classmethod
    def applies(cls, plan: LaunchPlan) -> bool:
        return plan.dynamo_src is not None

    def failure(self, topo: Observed, left_s: float) -> TopologyFailure | None:
        source = topo.plan.dynamo_src
        assert source is not None
        records = import_records(topo.plan.log_dir)
        for role in topo.plan.roles:
            if role.kind == "aux":
                continue
            pid = role_pid(topo.plan.log_dir, role.name)
            loaded = records.get(pid, {}) if pid is not None else {}
            elsewhere = {
                m: f for m, f in loaded.items() if source.in_checkout(m) and not source.owns(f)
            }
            if not loaded or elsewhere:
                what = (
                    f"loaded {', '.join(f'{m} from {f}' for m, f in elsewhere.items())}"
                    if elsewhere
                    else "recorded no dynamo import (the harness's recorder was not on its path)"
                )
                return topo.failure(
                    Cause.LAUNCHER_INVALID,
                    f"role '{role.name}' (pid {pid}) did not run the checkout's Python under "
                    f"{source.python_dir}: it {what}; the launcher must keep PYTHONPATH and "
                    "start roles with the harness's python",
                    role=role.name,
                )
        return super().failure(topo, left_s)


def role_of_pid(plan: LaunchPlan, proc: psutil.Process | None) -> str | None:
    """The role whose process (NAME.pid) is `proc` or one of its ancestors."""
    pids = {role_pid(plan.log_dir, r.name): r.name for r in plan.roles}
    with contextlib.suppress(psutil.Error):
        while proc is not None:
            if proc.pid in pids:
                return pids[proc.pid]
            proc = proc.parent()
    return None


def role_pid(log_dir: Path, role: str) -> int | None:
    """The pid the launcher wrote for a role (launchers/lib/common.sh start_role)."""
    try:
        return int((log_dir / f"{role}.pid").read_text().strip())
    except (OSError, ValueError):
        return None


def media_kinds(body: dict[str, Any]) -> list[str]:
    return [
        p["type"]
        for m in body.get("messages", [])
        for p in m.get("content", [])
        if isinstance(p, dict) and p.get("type") != "text"
    ]


PORT_IN_USE_HINTS = ("Address already in use", "address in use", "EADDRINUSE")
# What a Dynamo 1.6.1 worker logs when its system port is taken; it then runs on without /health.
HEALTH_SERVER_FAILED = "System status server startup failed"
HEALTH_BIND_FAILED = re.compile(r"Failed to bind to address [\d.]+:(\d+)")
LOG_SCAN_S = 1.0  # how often the logs of a starting topology are read for a bind failure
# A checkout's launcher that starts a role once others are healthy polls them about once a second
# (upstream's router launchers: `sleep 1` between /health polls); 15 s leaves a loaded 2-core box
# room before a declared role counts as never started.
ROLE_START_GRACE_S = 15.0


class LogDiagnosis(Registered, root=True):
    """A cause only a launched topology can read, from its own files (the launcher contract's
    files, each role's log; `roles`). Subclasses set `name` and `order` (registered.py) and
    implement `check`. `starting_only`: looked for until the topology is ready."""

    package = "harness.topology"
    starting_only: ClassVar[bool] = False

    def check(self, topo: Observed, roles: RoleTable) -> TopologyFailure | None:
        raise NotImplementedError


def launcher_name(topo: Observed) -> str:
    """The launcher the user wrote: a checkout's own, not the wrapper that runs it."""
    if topo.plan.launcher == CHECKOUT_LAUNCHER:
        return Path(topo.plan.args[0]).name
    return topo.plan.launcher.name


class AdapterRefused(LogDiagnosis):
    """A launcher started a role the tier cannot run (a flag with no mapping, another model than
    the profile's): the role adapter refused it (NAME.refused, harness/topology/role_adapter.py),
    never a silent drop or swap."""

    name = "adapter refused"
    order = 10

    def check(self, topo: Observed, roles: RoleTable) -> TopologyFailure | None:
        refused = sorted(topo.plan.log_dir.glob("*.refused"))
        if not refused:
            return None
        record = json.loads(refused[0].read_text())
        port = record.get("port")
        held = ""
        if port:
            holder = listeners([port]).get(port)
            held = f"; port {port} is " + (
                f"held by {roles.owner_of(holder)}" if holder else "free now"
            )
        return topo.failure(
            Cause.LAUNCHER_INVALID,
            f"role '{record['role']}' of {launcher_name(topo)}: the {topo.plan.tier} tier "
            f"cannot run it: {record['refused']}{held} (the role adapter, "
            "harness/topology/role_adapter.py)",
            role=record["role"],
            port=port,
        )


class RoleExited(LogDiagnosis):
    """A role exited: the first one the launcher saw (its NAME.exit file), with its code; a port
    it needed being taken is named from its log."""

    name = "role exited"
    order = 20

    def check(self, topo: Observed, roles: RoleTable) -> TopologyFailure | None:
        exited = roles.exited()
        if not exited:
            return None
        name = exited[0]
        topo.timeline.record(name, "exited")
        log = tail(roles.log_path(name))
        code = roles.exit_code(name)
        taken = any(hint in log for hint in PORT_IN_USE_HINTS)
        where = "before ready" if topo.phase != "ready" else "mid-test"
        return topo.failure(
            Cause.PORT_IN_USE if taken else Cause.ROLE_EXITED,
            f"role '{name}' exited {where} (code {code if code is not None else 'unknown'})"
            + (": a port it needs is taken" if taken else ""),
            role=name,
            exit_code=code,
            log_tail=log,
        )


class RoleNotStarted(LogDiagnosis):
    """A role the profile declares but the launcher never started (no start_role for it, a typo
    in its name), named as soon as the launcher's roles.started file says it started the others."""

    name = "role not started"
    order = 30

    starting_only = True

    def check(self, topo: Observed, roles: RoleTable) -> TopologyFailure | None:
        if topo.plan.launcher == CHECKOUT_LAUNCHER:
            return self.checkout_role_missing(topo, roles)
        report = roles.never_started()
        if report is None:
            return None
        missing, started = report
        if not missing:
            return None
        return topo.failure(
            Cause.ROLE_NOT_STARTED,
            f"the launcher started {started} and is waiting on them, but the profile declares "
            f"{missing} too: no `start_role {missing[0]} …` in {topo.plan.launcher.name} (or its "
            "name differs)",
            role=missing[0],
            log_tail=tail(roles.launcher_log),
        )

    def checkout_role_missing(self, topo: Observed, roles: RoleTable) -> TopologyFailure | None:
        """A checkout's launcher writes no roles.started: a declared role is missing once every
        worker it did start has been ready for ROLE_START_GRACE_S and it still has not come."""
        missing = roles.missing()
        started = [r.name for r in topo.plan.workers if r.name in roles.known]
        if not missing or not started:
            return None
        ready_for = [topo.timeline.since_state(name, "ready") for name in started]
        if any(t is None or t < ROLE_START_GRACE_S for t in ready_for):
            return None
        return topo.failure(
            Cause.ROLE_NOT_STARTED,
            f"{launcher_name(topo)} started {sorted(roles.known)}, and its workers have been "
            f"ready for {min(t for t in ready_for if t is not None):.0f} s, but the profile "
            f"declares {missing} too: the launcher never started it (no `python -m dynamo.…` "
            "the role adapter could name as it)",
            role=missing[0],
            log_tail=tail(roles.launcher_log),
        )


class HealthServerNotBound(LogDiagnosis):
    """A worker whose system port was taken keeps running without a health server (Dynamo logs
    the bind error and goes on): name it, the port and its holder at once, instead of waiting
    out register_s for a /health that can never answer."""

    name = "health server not bound"
    order = 40

    starting_only = True

    def check(self, topo: Observed, roles: RoleTable) -> TopologyFailure | None:
        if not topo.due("health-server-scan", LOG_SCAN_S):
            return None
        for role in topo.plan.workers:
            if role.name in topo.healthy_once or role.name not in roles.known:
                continue
            text = tail(roles.log_path(role.name), 200)
            if HEALTH_SERVER_FAILED not in text:
                continue
            bind = HEALTH_BIND_FAILED.search(text)
            port = int(bind.group(1)) if bind else role.port
            holder = roles.owner_of(listeners([port or 0]).get(port or 0))
            planned = "" if port == role.port else f", not its planned {role.port}"
            return topo.failure(
                Cause.PORT_IN_USE,
                f"worker '{role.name}' runs without a health server: it tried system port {port} "
                f"({topo.plan.port_name(port)}{planned}), which is held by {holder}; its log: "
                f"{HEALTH_SERVER_FAILED}",
                role=role.name,
                port=port,
            )
        return None


# What Dynamo 1.6.1's frontend logs when it cannot build its pipeline for a registered model
# (e.g. frontend decoding with NIXL's library not on its loader path): it keeps answering
# /health and never lists the model, so readiness would otherwise wait out register_s.
FRONTEND_MODEL_FAILED = re.compile(
    r"Model materialization (?:failed|task failed)|model materialization panicked"
    r"|NIXL is not supported in stub mode"
)


class FrontendCannotServe(LogDiagnosis):
    """The frontend read a worker's model card but could not build the model's pipeline: named
    at once, with the frontend's own line, instead of `never_registered` after register_s."""

    name = "frontend cannot serve"
    order = 50

    starting_only = True

    def check(self, topo: Observed, roles: RoleTable) -> TopologyFailure | None:
        if not topo.due("frontend-log-scan", LOG_SCAN_S) or "frontend" not in roles.known:
            return None
        text = tail(roles.log_path("frontend"), 400)
        line = next((ln for ln in text.splitlines() if FRONTEND_MODEL_FAILED.search(ln)), None)
        if line is None:
            return None
        return topo.failure(
            Cause.NEVER_REGISTERED,
            f"the frontend cannot serve the model its workers registered: {line.strip()[:400]}",
            role="frontend",
            log_tail=text,
        )


class LauncherExited(LogDiagnosis):
    """The launcher script itself exited (before or after ready)."""

    name = "launcher exited"
    order = 60

    def check(self, topo: Observed, roles: RoleTable) -> TopologyFailure | None:
        assert roles.launcher is not None
        code = roles.launcher.poll()
        if code is None:
            return None
        return topo.failure(
            Cause.LAUNCHER_EXITED,
            f"launcher {topo.plan.launcher.name} exited with code {code} before "
            f"{'ready' if topo.phase != 'ready' else 'the test ended'}",
            log_tail=tail(roles.launcher_log),
            exit_code=code,
        )
