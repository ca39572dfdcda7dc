"""Tiny randomly initialised multimodal checkpoints for the CPU tier, built locally and cached."""

from harness.tiny_models.build import BUILDERS, build_tiny_model, default_cache_dir

FAMILIES = tuple(BUILDERS)

__all__ = ["FAMILIES", "build_tiny_model", "default_cache_dir"]
