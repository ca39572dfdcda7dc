"""The audit's checks of one captured launch, as a registry: each `LaunchCheck` subclass (in any
module of harness/audit/) registers itself and the runner runs every one that applies, in
`order`, as the judge runs the oracles (harness/core/registered.py). A new check is one class."""

from __future__ import annotations

from typing import ClassVar

from harness.audit.capture import Capture, Finding
from harness.core.registered import Registered
from harness.profiles import Profile, Tier


class LaunchCheck(Registered, root=True):
    """One check of one captured launch: its findings, none starting an engine. Subclasses set
    `name` and `order` and implement `check`; `tiers` says where it applies."""

    package = "harness.audit"
    tiers: ClassVar[tuple[Tier, ...]] = ("gpu", "cpu")

    def check(self, profile: Profile, cap: Capture, launcher: str) -> list[Finding]:
        raise NotImplementedError
