"""A captured launch's roles and command lines: every role the profile declares is started, each
engine's flags are ones its own parser accepts (audit/engine_flags.py), and each worker loads the
plan's model under the name the profile serves."""

from __future__ import annotations

from pathlib import Path

from harness.audit.capture import Capture, Finding
from harness.audit.engine_flags import check_flags
from harness.audit.launch_check import LaunchCheck
from harness.audit.port_checks import ENGINES
from harness.launch.dynamo_src import CHECKOUT_LAUNCHER
from harness.profiles import Profile
from harness.profiles.launchers import launcher_port_vars, text_with_used_files

MODEL_FIX = 'pass --model "$MODEL" (--model-path for SGLang)'


def check_roles_started(profile: Profile, cap: Capture, launcher: str) -> list[Finding]:
    """Every declared worker was started by the dry run (the role adapter named it by the
    leased system port it received); where one was not, whether the launcher's text reads the
    role's health port variable at all is a hint, never the verdict."""
    if cap.returncode != 0:
        return []  # check_ports names the exit
    script = Path(cap.plan.args[0]) if cap.plan.launcher == CHECKOUT_LAUNCHER else cap.plan.launcher
    read = set(launcher_port_vars(text_with_used_files(script)))
    out = []
    for role in profile.worker_roles:
        if role.name in cap.roles:
            continue
        hint = (
            f"; its text never reads {role.health_port} either (it reads {sorted(read)})"
            if role.health_port and role.health_port not in read
            else ""
        )
        out.append(
            Finding(
                launcher,
                role.name,
                f"the dry run started no role the adapter could name {role.name}{hint}",
                f"give that worker DYN_SYSTEM_PORT from the harness's {role.health_port}",
            )
        )
    return out


def check_flags_and_registration(cap: Capture, launcher: str) -> list[Finding]:
    out: list[Finding] = []
    for name, call in cap.roles.items():
        result = check_flags(call)
        if result is not None and result.error:
            out.append(
                Finding(
                    launcher,
                    name,
                    f"{call.module} rejects its args ({result.method}): {result.error}",
                    f"use flags it accepts (python -m {call.module} --help)",
                )
            )
        if call.module not in ENGINES:
            continue
        model = call.flag("--model", "--model-path")
        served = call.flag("--served-model-name") or model
        if model != cap.plan.model:
            out.append(
                Finding(
                    launcher,
                    name,
                    f"loads model {model!r}, the plan has {cap.plan.model!r}",
                    MODEL_FIX,
                )
            )
        if served != cap.plan.served_model_name:
            out.append(
                Finding(
                    launcher,
                    name,
                    f"registers as {served!r}, the profile serves {cap.plan.served_model_name!r}",
                    'pass --served-model-name "$SERVED_MODEL_NAME"',
                )
            )
    return out


class RolesStarted(LaunchCheck):
    name = "declared roles started"
    order = 20

    def check(self, profile: Profile, cap: Capture, launcher: str) -> list[Finding]:
        return check_roles_started(profile, cap, launcher)


class FlagsAndModel(LaunchCheck):
    name = "engine flags, model and served name"
    order = 50

    def check(self, profile: Profile, cap: Capture, launcher: str) -> list[Finding]:
        return check_flags_and_registration(cap, launcher)
