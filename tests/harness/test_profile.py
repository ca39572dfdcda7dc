"""Profile schema and loader: good profiles load, bad ones name file and field."""

import re
from pathlib import Path

import pytest

from harness.core.paths import REPO_ROOT
from harness.profiles import ProfileError, load_profile, load_profiles

GOOD = """
name: t
topology: agg
stack: dynamo-vllm
launcher: launchers/vllm/agg_multimodal.sh
model: {short_name: m, gpu: org/m, cpu: qwen3_vl}
roles:
  - {name: frontend, kind: frontend}
  - {name: worker, kind: worker, health_port: DYN_SYSTEM_PORT1}
marks: [post_merge]
gpu: {gpus: 1, budget: {total_s: 100, register_s: 50}}
cpu: {budget: {total_s: 100, register_s: 50}}
cases:
  - {prompt: hi, media: [image_url]}
  - {suffix: b64, prompt: hi, media: [image_b64]}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    return path


def test_shipped_profiles_load_with_unique_ids() -> None:
    profiles = load_profiles(REPO_ROOT / "profiles", REPO_ROOT)
    ids = [p.test_id(c) for p in profiles for c in p.cases]
    assert len(ids) == len(set(ids))
    assert "mm_epd_qwen3-vl-2b_b64_frontend_decoding" in ids
    assert "mm_epd_video_qwen3-vl-2b_mixed_frontend_decoding" in ids


def test_every_upstream_topology_names_upstreams_launcher() -> None:
    """The default launcher of a checkout with no test matrix (launch_spec.choose_launcher): every
    profile names one, XPU's E/P/D included (upstream's XPU matrix lists no E/P/D)."""
    profiles = load_profiles(REPO_ROOT / "profiles", REPO_ROOT)
    missing = [p.name for p in profiles if p.upstream_launcher is None]
    assert missing == []


def test_good_profile_and_test_ids(tmp_path: Path) -> None:
    profile = load_profile(write(tmp_path, GOOD), REPO_ROOT)
    assert [profile.test_id(c) for c in profile.cases] == ["mm_agg_m", "mm_agg_m_b64"]
    assert [r.name for r in profile.worker_roles] == ["worker"]


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        (("media: [image_url]", "media: [image_png]"), "cases.0.media.0", "image_url"),
        (("kind: worker, health_port: DYN_SYSTEM_PORT1", "kind: worker"), "roles.1", "health_port"),
        (("marks: [post_merge]", "marks: [gpu_1]"), "marks", "cadence"),
        (("register_s: 50}}\ncases", "register_s: 500}}\ncases"), "cpu.budget", "exceeds"),
        (("suffix: b64, ", ""), "<top>", "repeat"),
        (("stack: dynamo-vllm", "stack: dynamo-trt"), "stack", "dynamo-vllm"),
        (("name: t\n", "name: t\ncolour: red\n"), "colour", "Extra inputs"),
        (("topology: agg", "topology: Agg-Router"), "topology", "pattern"),
        (("roles:\n", "replicas: [worker, frontend]\nroles:\n"), "<top>", "two or more worker"),
        (
            ("- {prompt: hi, media: [image_url]}", "- {prompt: hi, cpu: {status: 400}}"),
            "cases.0.cpu",
            "needs error_contains",
        ),
        (
            (
                "- {prompt: hi, media: [image_url]}",
                "- {prompt: hi, gpu: {status: 400, error_contains: x, any_of: [y]}}",
            ),
            "cases.0.gpu",
            "never run",
        ),
        (
            (
                "- {prompt: hi, media: [image_url]}",
                "- {prompt: hi, cpu: {status: 404, error_contains: x, prompt_tokens: false}}",
            ),
            "cases.0.cpu",
            "never run",
        ),
        (
            ("- {prompt: hi, media: [image_url]}", "- {prompt: hi, path: {encode: 0}}"),
            "cases.0",
            "path_reason",
        ),
        (
            (
                "health_port: DYN_SYSTEM_PORT1",
                "health_port: DYN_SYSTEM_PORT1, discovery_component: encoder",
            ),
            "roles.1.discovery_component",
            "'encode'",
        ),
        (
            ("health_port: DYN_SYSTEM_PORT1", "health_port: dyn-port"),
            "roles.1.health_port",
            "pattern",
        ),
    ],
)
def test_bad_profile_names_file_and_field(
    tmp_path: Path, change: tuple[str, str], field: str, words: str
) -> None:
    assert change[0] in GOOD
    path = write(tmp_path, GOOD.replace(*change, 1))
    with pytest.raises(ProfileError) as err:
        load_profile(path, REPO_ROOT)
    text = str(err.value)
    assert f"{path}: {field}" in text and words in text


def test_missing_launcher_and_bad_yaml(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace("agg_multimodal.sh", "nope.sh"))
    with pytest.raises(ProfileError, match=r"p\.yaml: launcher: no such file .*nope\.sh"):
        load_profile(path, REPO_ROOT)
    with pytest.raises(ProfileError, match="not valid YAML"):
        load_profile(write(tmp_path, "name: [unclosed"), REPO_ROOT)


def test_cpu_tier_absent_needs_a_reason(tmp_path: Path) -> None:
    text = GOOD.replace("cpu: {budget: {total_s: 100, register_s: 50}}\n", "")
    with pytest.raises(ProfileError, match="cpu_skip"):
        load_profile(write(tmp_path, text), REPO_ROOT)


def test_duplicate_profile_names_are_refused(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(GOOD)
    (tmp_path / "b.yaml").write_text(GOOD.replace("short_name: m", "short_name: n"))
    with pytest.raises(ProfileError, match=r"b\.yaml: name: t is also the name of .*a\.yaml"):
        load_profiles(tmp_path, REPO_ROOT)


def test_same_as_must_name_a_topology_of_the_same_model(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(
        GOOD.replace("- {prompt: hi, media: [image_url]}", "- {prompt: hi, cpu: {same_as: agg}}")
    )
    assert len(load_profiles(tmp_path, REPO_ROOT)) == 1  # its own topology is known
    (tmp_path / "a.yaml").write_text(
        GOOD.replace("- {prompt: hi, media: [image_url]}", "- {prompt: hi, cpu: {same_as: e_pd}}")
    )
    with pytest.raises(
        ProfileError,
        match=r"a\.yaml: cases\[0\]\.cpu\.same_as: 'e_pd' is no "
        r"topology of a m profile \(agg\)",
    ):
        load_profiles(tmp_path, REPO_ROOT)
    other_model = GOOD.replace("name: t", "name: u").replace("short_name: m", "short_name: n")
    (tmp_path / "b.yaml").write_text(other_model.replace("topology: agg", "topology: e_pd"))
    with pytest.raises(ProfileError, match="same_as: 'e_pd'"):  # e_pd of another model is no help
        load_profiles(tmp_path, REPO_ROOT)


def test_a_bad_profile_fails_collection_with_its_lines_alone(tmp_path: Path) -> None:
    """pytest shows `file: field: message`, not the harness's frames."""
    import subprocess
    import sys

    write(
        tmp_path,
        GOOD.replace(
            "total_s: 100, register_s: 50}}\ncases", "total_s: -1, register_s: 50}}\ncases"
        ),
    )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "tests/serve",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "--profiles",
            str(tmp_path),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode != 0
    assert (
        f"{tmp_path / 'p.yaml'}: cpu.budget.total_s: Input should be greater than 0" in out.stdout
    )
    assert "harness/profiles/load.py" not in out.stdout and "Traceback" not in out.stdout


def test_a_declared_defect_needs_its_root_cause_and_a_proof_naming_the_case(
    tmp_path: Path,
) -> None:
    """`known_defect` names file, function, what it computes and what the model computes, and its
    proof is a docs/ section naming the test id: a declaration without them does not load."""
    shipped = REPO_ROOT / "profiles" / "vllm" / "e_pd_llava-1.5-7b.yaml"
    (tmp_path / "docs" / "explanation").mkdir(parents=True)
    (tmp_path / "launchers").symlink_to(REPO_ROOT / "launchers")
    text = shipped.read_text()
    profile = tmp_path / "p.yaml"
    profile.write_text(text)
    with pytest.raises(
        ProfileError, match=r"known_defect.proof: docs/explanation/upstream-defects.md#llava"
    ):
        load_profile(profile, tmp_path)  # no such doc here
    doc = tmp_path / "docs" / "explanation" / "upstream-defects.md"
    doc.write_text("# Defects\n\n## LLaVA encoder: feature layer\n\nsome other id\n\n## Next\n")
    with pytest.raises(ProfileError, match=r"does not name mm_e_pd_llava-1\.5-7b"):
        load_profile(profile, tmp_path)
    doc.write_text(
        "## LLaVA encoder: feature layer\n\nmm_e_pd_llava-1.5-7b "
        "mm_e_pd_llava-1.5-7b_b64_frontend_decoding\n"
    )
    assert load_profile(profile, tmp_path).cases[0].cpu.defects
    profile.write_text(text.replace("    function: encode_image_embeddings\n", ""))
    with pytest.raises(ProfileError, match=r"known_defect.0.root_cause.function: Field required"):
        load_profile(profile, tmp_path)


def test_a_request_may_declare_defects_with_distinct_roots_one_per_oracle() -> None:
    """Two declared defects on one request, each with its own oracles; an oracle declared by
    two of them is refused (which root it shows would be ambiguous)."""
    from harness.profiles.schema import CpuExpect

    def defect(name: str, oracles: list[str]) -> dict[str, object]:
        return {
            "id": name,
            "oracles": oracles,
            "effect": "the effect as it was measured on the CPU tier",
            "proof": f"docs/explanation/upstream-defects.md#{name}",
            "root_cause": {
                "file": "dynamo/sglang/protocol.py",
                "function": "PreprocessedRequest",
                "computes": "something other than the model computes",
                "model_computes": "what the model computes there itself",
            },
        }

    two = CpuExpect.model_validate(
        {
            "known_defect": [
                defect("a", ["prompt_tokens"]),
                defect("b", ["logprobs", "engine_alone"]),
            ]
        }
    )
    assert [d.id for d in two.defects] == ["a", "b"]
    logprobs = two.defect_of("logprobs")
    assert logprobs is not None and logprobs.id == "b"
    assert two.defect_of("hf_reference") is None
    with pytest.raises(
        ValueError, match=r"oracle\(s\) \['prompt_tokens'\] declared by more than one"
    ):
        CpuExpect.model_validate(
            {"known_defect": [defect("a", ["prompt_tokens"]), defect("b", ["prompt_tokens"])]}
        )
    # one that fails the model's own answer says what it does against the engine alone
    with pytest.raises(ValueError, match="say what it does against the engine alone"):
        CpuExpect.model_validate({"known_defect": [defect("c", ["hf_reference"])]})
    agrees = {**defect("d", ["logprobs"]), "engine_alone": "the engine alone computes the same"}
    assert CpuExpect.model_validate({"known_defect": [agrees]}).defects[0].engine_alone


def test_a_launcher_the_launch_would_refuse_is_refused_at_load(tmp_path: Path) -> None:
    """Not executable: named at load, with the file and the field, not at launch."""
    script = tmp_path / "launchers" / "x.sh"
    script.parent.mkdir()
    script.write_text("#!/bin/bash\n")
    path = write(tmp_path, GOOD.replace("launchers/vllm/agg_multimodal.sh", "launchers/x.sh"))
    with pytest.raises(ProfileError, match=rf"{path}: launcher: .*x\.sh is not executable"):
        load_profile(path, tmp_path)
    script.chmod(0o755)
    assert load_profile(path, tmp_path).launcher == "launchers/x.sh"


@pytest.mark.parametrize(
    ("change", "field", "says"),
    [
        (
            ("launcher: launchers/vllm/agg_multimodal.sh", "launcher: ../../../etc/passwd"),
            "launcher",
            "'../../../etc/passwd' leaves its root",
        ),
        (
            ("stack: dynamo-vllm", "stack: dynamo-vllm\nupstream_launcher: /etc/passwd"),
            "upstream_launcher",
            "'/etc/passwd' leaves its root",
        ),
        (
            (
                "  - {name: worker, kind: worker, health_port: DYN_SYSTEM_PORT1}",
                "  - {name: worker, kind: worker, health_port: DYN_SYSTEM_PORT1}\n"
                "  - {name: encode, kind: worker, health_port: DYN_SYSTEM_PORT1}",
            ),
            "<top>",
            "roles share a health port: DYN_SYSTEM_PORT1 is worker and encode's",
        ),
    ],
    ids=["launcher_leaves_the_repo", "upstream_launcher_absolute", "two_roles_one_health_port"],
)
def test_what_would_break_a_launch_is_refused_at_load(
    tmp_path: Path, change: tuple[str, str], field: str, says: str
) -> None:
    path = write(tmp_path, GOOD.replace(*change))
    with pytest.raises(ProfileError, match=rf"{path}: {field}: .*{re.escape(says)}"):
        load_profile(path, REPO_ROOT)


def test_a_key_given_twice_is_refused_naming_its_line(tmp_path: Path) -> None:
    """PyYAML keeps the last of two in silence; the loader refuses, naming file and line (a
    merge key's override is still allowed: it is what a merge is for)."""
    path = write(tmp_path, GOOD.replace("stack: dynamo-vllm", "stack: dynamo-vllm\nstack: x"))
    with pytest.raises(ProfileError, match=rf"{path}:5: key 'stack' given twice"):
        load_profile(path, REPO_ROOT)
    nested = GOOD.replace(
        "budget: {total_s: 100, register_s: 50}}\ncases",
        "budget: {total_s: 100, total_s: 9, register_s: 50}}\ncases",
    )
    with pytest.raises(ProfileError, match="key 'total_s' given twice"):
        load_profile(write(tmp_path, nested), REPO_ROOT)
    merged = GOOD.replace(
        "cpu: {budget: {total_s: 100, register_s: 50}}",
        "x-b: &b {total_s: 100, register_s: 50}\ncpu: {budget: {<<: *b, total_s: 120}}",
    )
    assert load_profile(write(tmp_path, merged), REPO_ROOT).cpu.budget.total_s == 120
