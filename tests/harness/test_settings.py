"""The environment's settings, read once at the edges: an option given wins; left at its default,
the environment's value stands; neither, the default."""

from __future__ import annotations

from harness.core.settings import EdgeSettings


def test_the_option_wins_and_the_environment_fills_in() -> None:
    env = EdgeSettings.of({"HARNESS_TIER": "cpu", "HARNESS_SHARD": "2/3"})
    assert env.tier_asked("gpu") == "gpu"
    assert env.tier_asked("auto") == "cpu"
    assert env.shard_asked("1/2") == ("1/2", "--shard")
    assert env.shard_asked(None) == ("2/3", "HARNESS_SHARD")


def test_neither_given_is_the_default() -> None:
    bare = EdgeSettings.of({"HARNESS_TIER": "", "OTHER": "x"})
    assert bare.tier_asked("auto") == "auto"
    assert bare.shard_asked(None) is None
