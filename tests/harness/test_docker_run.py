"""Pure parts of `harness docker`: overlays, env allow-list and redaction, mounts, commands."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli.docker import (
    CACHE_TARGET,
    HF_CACHE_TARGET,
    RESULTS_TARGET,
    BindMount,
    DockerRunError,
    DockerRunSpec,
    build_mounts,
    container_env,
    gpu_count,
    parse_overlay,
    pytest_command,
    stream_scrubbed,
)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "harness").mkdir()
    (tmp_path / "harness" / "plan.py").write_text("x")
    (tmp_path / "launchers").mkdir()
    return tmp_path


def test_overlay_default_target_is_repo_path_under_workdir(repo: Path) -> None:
    mount = parse_overlay("harness/plan.py", "/workspace", repo, cwd=repo)
    assert mount == BindMount(str(repo / "harness/plan.py"), "/workspace/harness/plan.py", True)


def test_overlay_relative_to_cwd(repo: Path) -> None:
    mount = parse_overlay("plan.py", "/opt/dynamo", repo, cwd=repo / "harness")
    assert mount.target == "/opt/dynamo/harness/plan.py"


def test_overlay_explicit_targets(repo: Path) -> None:
    assert parse_overlay("launchers:/opt/l", "/w", repo, repo).target == "/opt/l"
    assert parse_overlay("launchers:tests/l", "/w", repo, repo).target == "/w/tests/l"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nope.py", "no such file or directory"),
        (":/x", "SRC is empty"),
    ],
)
def test_overlay_errors(repo: Path, spec: str, message: str) -> None:
    with pytest.raises(DockerRunError, match=message):
        parse_overlay(spec, "/workspace", repo, repo)


def test_overlay_outside_repo_needs_a_target(repo: Path, tmp_path_factory) -> None:
    outside = tmp_path_factory.mktemp("elsewhere") / "f"
    outside.write_text("x")
    with pytest.raises(DockerRunError, match=r"outside the repo .* give SRC:DST"):
        parse_overlay(str(outside), "/workspace", repo, repo)
    assert parse_overlay(f"{outside}:/x/f", "/workspace", repo, repo).target == "/x/f"


def test_env_allow_list() -> None:
    host = {
        "HF_TOKEN": "hf_abcdef",
        "HF_HUB_OFFLINE": "1",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "HARNESS_TIER": "gpu",
        "HOME": "/root",
        "AWS_SECRET_ACCESS_KEY": "nope",
        "OPENAI_API_KEY": "nope",
        "PATH": "/usr/bin",
    }
    assert container_env(host) == {
        "HF_TOKEN": "hf_abcdef",
        "HF_HUB_OFFLINE": "1",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "HARNESS_TIER": "gpu",
        "HARNESS_CACHE": CACHE_TARGET,
        "HARNESS_RUNS": RESULTS_TARGET,
    }


def test_the_hosts_cache_and_runs_paths_are_replaced_by_their_mounts() -> None:
    env = container_env({"HARNESS_CACHE": "/home/me/.cache/h", "HARNESS_RUNS": "/home/me/runs"})
    assert env == {"HARNESS_CACHE": CACHE_TARGET, "HARNESS_RUNS": RESULTS_TARGET}


def test_describe_redacts_secrets_but_the_spec_keeps_them() -> None:
    spec = DockerRunSpec(
        image="img",
        command=["python3", "-m", "pytest", "-k", "a b"],
        workdir="/workspace",
        mounts=[BindMount("/h/r", RESULTS_TARGET, False), BindMount("/h/p.py", "/w/p.py", True)],
        env={"HF_TOKEN": "hf_abcdef", "HARNESS_X_TOKEN": "t0k3n", "HARNESS_TIER": "gpu"},
        gpus="all",
    )
    text = spec.describe()
    assert "hf_abcdef" not in text and "t0k3n" not in text
    assert "-e HF_TOKEN='***'" in text and "-e HARNESS_TIER=gpu" in text
    assert "-v /h/p.py:/w/p.py:ro" in text and "-v /h/r:/results \\" in text
    assert "--gpus all" in text and "pytest -k 'a b'" in text
    assert "--network host --ipc host --pid host" in text
    assert "hf_abcdef" not in repr(spec)
    assert spec.env["HF_TOKEN"] == "hf_abcdef"


def test_stream_scrubs_secrets_split_across_chunks() -> None:
    import io

    out = io.BytesIO()
    chunks = iter([b"token=hf_ab", b"cdef ok\nsecond ", b"line hf_abcdef"])
    stream_scrubbed(chunks, {"HF_TOKEN": "hf_abcdef"}, out)
    assert out.getvalue() == b"token=*** ok\nsecond line ***"


def test_mounts_results_caches_registries_then_overlays(tmp_path: Path) -> None:
    hf, cache, leases = tmp_path / "hf", tmp_path / "cache", tmp_path / "leases"
    for directory in (hf, cache, leases):
        directory.mkdir()
    overlay = BindMount("/h/a", "/w/a", True)
    mounts = build_mounts([overlay], tmp_path / "res", hf, cache, [leases, leases])
    assert mounts == [
        BindMount(str(tmp_path / "res"), RESULTS_TARGET, False),
        BindMount(str(cache), CACHE_TARGET, False),
        BindMount(str(hf), HF_CACHE_TARGET, False),
        BindMount(str(leases), str(leases), False),  # same path inside: the lease files agree
        overlay,
    ]
    missing = tmp_path / "missing-cache"
    assert build_mounts([], tmp_path / "res", missing, missing)[1:] == []


def test_two_overlays_on_one_target_are_refused(tmp_path: Path) -> None:
    same = [BindMount("/h/a", "/w/a", True), BindMount("/h/b", "/w/a", True)]
    with pytest.raises(DockerRunError, match="same path"):
        build_mounts(same, tmp_path, None)


def test_pytest_command_adds_results_unless_given() -> None:
    assert pytest_command("python3", ["-m", "pre_merge"]) == [
        "python3",
        "-m",
        "pytest",
        "-m",
        "pre_merge",
        "--results",
        "/results/results.jsonl",
        "--junitxml=/results/junit.xml",
    ]
    given = pytest_command("python", ["--results=/r.jsonl", "--junitxml", "/j.xml"])
    assert given == ["python", "-m", "pytest", "--results=/r.jsonl", "--junitxml", "/j.xml"]


@pytest.mark.parametrize(("gpus", "count"), [(None, None), ("all", -1), ("2", 2)])
def test_gpu_count(gpus: str | None, count: int | None) -> None:
    assert gpu_count(gpus) == count


@pytest.mark.parametrize("gpus", ["0", "two", "-1"])
def test_gpu_count_errors(gpus: str) -> None:
    with pytest.raises(DockerRunError, match="'all' or a positive count"):
        gpu_count(gpus)
