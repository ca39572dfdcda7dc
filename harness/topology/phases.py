"""Readiness phases: is the topology up, and if not, why. Each phase is a small strategy
registered like the diagnoses (`Phase.for_topology`: the registered ones that apply to a plan, in
order), that owns its wait and its failure under one deadline for all of them (mirakuru's
executors: later phases get only what earlier ones left): `failure(topo, left_s)` returns the
failure it has reached, else None; `done(topo, left_s)` polls once, never raises, and spends at
most `left_s`. Every phase fails `phase_timeout` when nothing is left; the registration phases
also spend `register_s` (`never_registered`); `WorkersHealthy` names a worker with no health
source after its grace, `ModelListed` a model not listed a grace after every worker turned
healthy."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import requests

from harness.core.registered import Registered, import_submodules
from harness.core.role_contract import no_port_roles
from harness.core.verdict import Cause, TopologyFailure
from harness.launch.dynamo_src import CHECKOUT_LAUNCHER, import_records
from harness.launch.plan import LaunchPlan, RolePlan
from harness.topology.discovery import (
    ModelCard,
    registered_cards,
    registered_components,
    unmet_needs,
)
from harness.topology.observed import RunningTopology, role_of_pid, role_pid
from harness.topology.processes import exposed_listeners


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

    def done(self, topo: RunningTopology, left_s: float) -> bool:
        raise NotImplementedError

    def waiting_for(self, topo: RunningTopology) -> str:
        raise NotImplementedError

    def failure(self, topo: RunningTopology, left_s: float) -> TopologyFailure | None:
        if left_s <= 0:
            return topo.failure(
                Cause.PHASE_TIMEOUT,
                f"phase {self.name} over the {topo.plan.budget.total_s:.0f} s budget: waiting "
                f"for {self.waiting_for(topo)}; roles: {topo.health_summary()}",
            )
        return None


class OneLook(Phase):
    """A phase that waits for nothing: one check once the phases before it are done; its
    `failure` is the finding, `what` names it."""

    what: ClassVar[str]

    def done(self, topo: RunningTopology, left_s: float) -> bool:
        return True

    def waiting_for(self, topo: RunningTopology) -> str:
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


def registration(topo: RunningTopology) -> Registration:
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


def never_registered(topo: RunningTopology, waiting_for: str) -> TopologyFailure:
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

    def failure(self, topo: RunningTopology, left_s: float) -> TopologyFailure | None:
        if topo.elapsed() > topo.plan.budget.register_s:
            return never_registered(topo, self.waiting_for(topo))
        return super().failure(topo, left_s)


def polled_workers(topo: RunningTopology) -> list[RolePlan]:
    """The workers whose /health can be polled: all but those a launcher started with no system
    port (role_adapter NAME.noport), which the case fails on once its answers are judged."""
    if topo.plan.frontend is not None:
        return list(topo.plan.workers)
    unpolled = no_port_roles(topo.plan.log_dir)
    for role in unpolled:
        if not topo.timeline.entered("no_health_server", role):
            topo.timeline.record(role, "no_health_server")
    return [r for r in topo.plan.workers if r.name not in unpolled]


class WorkersHealthy(Registering):
    """Every worker role's system port answers /health 200."""

    name, order = "workers_healthy", 10

    def done(self, topo: RunningTopology, left_s: float) -> bool:
        return all(topo.health_state(r.name) == "ready" for r in polled_workers(topo))

    def waiting_for(self, topo: RunningTopology) -> str:
        pending = [r.name for r in polled_workers(topo) if topo.health_state(r.name) != "ready"]
        return f"/health 200 from {pending}"

    def failure(self, topo: RunningTopology, left_s: float) -> TopologyFailure | None:
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

    def done(self, topo: RunningTopology, left_s: float) -> bool:
        return topo.plan.served_model_name in topo.listed_models()

    def waiting_for(self, topo: RunningTopology) -> str:
        return f"{topo.plan.served_model_name} in /v1/models (listed: {topo.listed_models()})"

    def failure(self, topo: RunningTopology, left_s: float) -> TopologyFailure | None:
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


class RegisteredAsPlanned(OneLook):
    """Once the model is listed: every worker registered the discovery component its profile
    names, and every model card carries the served name (so a profile that misnames a role's
    component, or a worker serving another model beside the right ones, is named here)."""

    name, order = "registered_as_planned", 40
    what = "the registration check"

    def failure(self, topo: RunningTopology, left_s: float) -> TopologyFailure | None:
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

    def failure(self, topo: RunningTopology, left_s: float) -> TopologyFailure | None:
        if self.fault is not None:
            error, media = self.fault
            return topo.failure(
                Cause.HTTP_ERROR,
                f"warm-up request answered {error} {self.repeats} times (media: {media})",
            )
        return super().failure(topo, left_s)

    def done(self, topo: RunningTopology, left_s: float) -> bool:
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

    def waiting_for(self, topo: RunningTopology) -> str:
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

    def done(self, topo: RunningTopology, left_s: float) -> bool:
        counts = topo.request_counts()
        if counts != self.counts:
            self.counts, self.since = counts, topo.elapsed()
        return topo.elapsed() - self.since >= QUIET_S

    def waiting_for(self, topo: RunningTopology) -> str:
        return f"the launcher's own requests to stop (worker request counters: {self.counts})"


class LoopbackOnly(OneLook):
    """Every socket the topology listens on is bound to loopback (checked once, when ready)."""

    name, order = "loopback_only", 70
    what = "the loopback check"
    launched_only = True

    @classmethod
    def applies(cls, plan: LaunchPlan) -> bool:
        return plan.loopback_only

    def failure(self, topo: RunningTopology, left_s: float) -> TopologyFailure | None:
        procs = {p.pid: p for p in topo.processes()}
        found = exposed_listeners(procs, allowed_ports=topo.plan.wide_ports)
        allowed = set(topo.plan.wide_roles)  # one OS-assigned listener each
        exposed, roles = [], []
        for pid, where in found:
            role = role_of_pid(topo.plan, procs.get(pid) if pid else None)
            if role in allowed:
                allowed.discard(role)
            else:
                exposed.append(where)
                roles.append(role)
        if exposed:
            named = next((r for r in roles if r), None)
            return topo.failure(
                Cause.EXPOSED_LISTENER,
                f"listening beyond 127.0.0.1: {exposed}"
                + (f" (role '{named}')" if named else "")
                + "; bind it to 127.0.0.1 in the launcher",
                role=named,
            )
        return super().failure(topo, left_s)


class RanDynamoSource(OneLook):
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

    def failure(self, topo: RunningTopology, left_s: float) -> TopologyFailure | None:
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


def media_kinds(body: dict[str, Any]) -> list[str]:
    return [
        p["type"]
        for m in body.get("messages", [])
        for p in m.get("content", [])
        if isinstance(p, dict) and p.get("type") != "text"
    ]
