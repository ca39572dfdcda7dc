"""Log diagnoses: causes only a launched topology can read from its own files (a role's exit, a
role never started, a health server that could not bind, the frontend's own error line), checked
on every poll of a launched topology (`LogDiagnosis.every()`, in order)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import ClassVar

from harness.core.registered import Registered
from harness.core.role_contract import REFUSED_RECORD
from harness.core.verdict import Cause, TopologyFailure
from harness.launch.dynamo_src import CHECKOUT_LAUNCHER
from harness.launch.plan import RolePlan
from harness.topology.log_tail import tail
from harness.topology.observed import RunningTopology
from harness.topology.own_words import own_words_in
from harness.topology.processes import listeners
from harness.topology.roles import RoleTable

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

    def check(self, topo: RunningTopology, roles: RoleTable) -> TopologyFailure | None:
        raise NotImplementedError


def launcher_name(topo: RunningTopology) -> str:
    """The launcher the user wrote: a checkout's own, not the wrapper that runs it."""
    if topo.plan.launcher == CHECKOUT_LAUNCHER:
        return Path(topo.plan.args[0]).name
    return topo.plan.launcher.name


class AdapterRefused(LogDiagnosis):
    """A launcher started a role the tier cannot run (a flag with no mapping, another model than
    the profile's): the role adapter refused it (NAME.refused, harness/launch/role_adapter.py),
    never a silent drop or swap."""

    name = "adapter refused"
    order = 10

    def check(self, topo: RunningTopology, roles: RoleTable) -> TopologyFailure | None:
        refused = sorted(topo.plan.log_dir.glob(REFUSED_RECORD.format(role="*")))
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
        says = (
            "the launcher is at fault"
            if record.get("fault") == "launcher"
            else f"the {topo.plan.tier} tier cannot run it"
        )
        return topo.failure(
            Cause.LAUNCHER_INVALID,
            f"role '{record['role']}' of {launcher_name(topo)}: {says}: {record['refused']}{held} "
            "(the role adapter, harness/launch/role_adapter.py)",
            role=record["role"],
            port=port,
        )


class RoleExited(LogDiagnosis):
    """A role exited: the first one the launcher saw (its NAME.exit file; without one, the first
    gone whose log says why), with its code and its own words; a port it needed being taken is
    named from its log."""

    name = "role exited"
    order = 20

    def check(self, topo: RunningTopology, roles: RoleTable) -> TopologyFailure | None:
        exited = roles.exited()
        if not exited:
            return None
        roles.recorded_exit_code(exited[0])  # the launcher's record: who exited first, and how
        name = exited_first(roles)
        if launcher_gave_up(topo, roles, name):  # a helper of ours, stopped by its trap
            return LauncherExited().check(topo, roles)
        code = roles.exit_code(name)
        topo.timeline.record(name, "exited")
        log = tail(roles.log_path(name))
        taken = any(hint in log for hint in PORT_IN_USE_HINTS)
        where = "before ready" if topo.phase != "ready" else "mid-test"
        words = None if taken else own_words_in(roles.log_path(name))
        return topo.failure(
            Cause.PORT_IN_USE if taken else Cause.ROLE_EXITED,
            f"role '{name}' exited {where} (code {code if code is not None else 'unknown'})"
            + (": a port it needs is taken" if taken else "")
            + (f": {words}" if words else ""),
            role=name,
            exit_code=code,
            log_tail=log,
        )


def exited_first(roles: RoleTable) -> str:
    """The exited role to name: the one the launcher recorded exiting first (our launchers'
    NAME.exit), else, of the roles gone, the first whose log says why in its own words. A
    checkout's launcher records no exit order, and its exit trap stops the frontend with a worker
    whose engine died: the frontend, gone too, says nothing of why."""
    exited = roles.exited()
    if roles.first_exit() is not None:
        return exited[0]
    return next((name for name in exited if own_words_in(roles.log_path(name))), exited[0])


def launcher_gave_up(topo: RunningTopology, roles: RoleTable, first: str) -> bool:
    """The launcher itself has exited and the first role to go is none the profile declares (a
    helper the harness started for it: the event broker), which its exit trap stopped: the
    launcher is the one that failed, in its own words."""
    launcher = roles.launcher
    if launcher is None or launcher.poll() is None:
        return False
    declared = {"frontend", *(r.name for r in topo.plan.roles if r.kind != "aux")}
    return first not in declared


class RoleNotStarted(LogDiagnosis):
    """A role the profile declares but the launcher never started (no start_role for it, a typo
    in its name), named as soon as the launcher's roles.started file says it started the others."""

    name = "role not started"
    order = 30

    starting_only = True

    def check(self, topo: RunningTopology, roles: RoleTable) -> TopologyFailure | None:
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

    def checkout_role_missing(
        self, topo: RunningTopology, roles: RoleTable
    ) -> TopologyFailure | None:
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

    def check(self, topo: RunningTopology, roles: RoleTable) -> TopologyFailure | None:
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
            pid = listeners([port or 0]).get(port or 0)
            holder = roles.owner_of(pid)
            planned = "" if port == role.port else f", not its planned {role.port}"
            # Two workers on one system port: the launcher gave one of them another role's.
            # Whichever bound first, name the one whose port is not its planned one.
            misplaced = (
                role if port != role.planned_port else misplaced_worker(topo, roles, pid, port)
            )
            if misplaced is not None and port in {w.planned_port for w in topo.plan.workers}:
                own = misplaced.planned_port
                return topo.failure(
                    Cause.LAUNCHER_INVALID,
                    f"the launcher is at fault: worker '{misplaced.name}' is given system port "
                    f"{port} ({topo.plan.port_name(port)}), another role's, not its own "
                    f"{own} ({topo.plan.port_name(own)}); worker "
                    f"'{role.name}' runs without a health server, the port held by {holder}; "
                    f"its log: {HEALTH_SERVER_FAILED}",
                    role=misplaced.name,
                    port=port,
                )
            return topo.failure(
                Cause.PORT_IN_USE,
                f"worker '{role.name}' runs without a health server: it tried system port {port} "
                f"({topo.plan.port_name(port)}{planned}), which is held by {holder}; its log: "
                f"{HEALTH_SERVER_FAILED}",
                role=role.name,
                port=port,
            )
        return None


def misplaced_worker(
    topo: RunningTopology, roles: RoleTable, pid: int | None, port: int | None
) -> RolePlan | None:
    """The worker holding `port` (process `pid`), where its planned system port is another."""
    holder = roles.role_holding(pid)
    worker = next((r for r in topo.plan.workers if r.name == holder), None)
    return worker if worker is not None and worker.planned_port not in (None, port) else None


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

    def check(self, topo: RunningTopology, roles: RoleTable) -> TopologyFailure | None:
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


# Python's own line when a sitecustomize raises: it goes on without it, so the taps and the
# teardown's quick exit would be silently missing.
ROLE_SITE_FAILED = "Error in sitecustomize"


class RoleSiteFailed(LogDiagnosis):
    """The harness's role site (launch/role_site/sitecustomize.py) failed in a role: Python says
    so and goes on without it. Named at once, in Python's words, as the harness's own fault:
    every oracle that reads its taps would otherwise report a missing row, not its cause. Read
    after ready too: an engine's spawned process imports the site when it starts."""

    name = "role site failed"
    order = 45

    def check(self, topo: RunningTopology, roles: RoleTable) -> TopologyFailure | None:
        if not topo.due("role-site-scan", LOG_SCAN_S):
            return None
        for role in sorted(roles.known):
            text = tail(roles.log_path(role), 400)
            if ROLE_SITE_FAILED not in text:
                continue
            lines = text.splitlines()
            at = next(i for i, ln in enumerate(lines) if ROLE_SITE_FAILED in ln)
            error = next((ln.strip() for ln in lines[at + 1 : at + 4] if ln.strip()), "")
            return topo.failure(
                Cause.HARNESS_FAULT,
                f"the harness's role site failed in role '{role}' (it ran on without it): "
                f"{lines[at].strip()[:200]} {error[:300]}".rstrip(),
                role=role,
                log_tail=text,
            )
        return None


class LauncherExited(LogDiagnosis):
    """The launcher script itself exited (before or after ready)."""

    name = "launcher exited"
    order = 60

    def check(self, topo: RunningTopology, roles: RoleTable) -> TopologyFailure | None:
        assert roles.launcher is not None
        code = roles.launcher.poll()
        if code is None:
            return None
        words = own_words_in(roles.launcher_log)
        return topo.failure(
            Cause.LAUNCHER_EXITED,
            f"launcher {launcher_name(topo)} exited with code {code} before "
            f"{'ready' if topo.phase != 'ready' else 'the test ended'}"
            + (f": {words}" if words else ""),
            role="launcher",
            log_tail=tail(roles.launcher_log),
            exit_code=code,
        )
