"""Profiles: the YAML schema, loading with file:field errors, and the pytest marks of a case."""

from harness.profiles.load import ProfileError, load_profile, load_profiles
from harness.profiles.schema import (
    CADENCE_MARKS,
    Budget,
    CaseSpec,
    CpuExpect,
    EncoderRecipe,
    GpuExpect,
    GpuTierSpec,
    KnownDefect,
    MediaKind,
    ModelSpec,
    Profile,
    RequestSpec,
    RoleGpu,
    RoleSpec,
    Tier,
    TierSpec,
)

__all__ = [
    "CADENCE_MARKS",
    "Budget",
    "CaseSpec",
    "CpuExpect",
    "EncoderRecipe",
    "GpuExpect",
    "GpuTierSpec",
    "KnownDefect",
    "MediaKind",
    "ModelSpec",
    "Profile",
    "ProfileError",
    "RequestSpec",
    "RoleGpu",
    "RoleSpec",
    "Tier",
    "TierSpec",
    "load_profile",
    "load_profiles",
]
