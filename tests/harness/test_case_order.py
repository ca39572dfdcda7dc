"""Case order: launch groups stay together; CPU baselines first; GPU longest groups first."""

import json
from pathlib import Path

from harness.cases.case import ServeCase
from harness.cases.selection import order_key, recorded_durations
from harness.core.paths import REPO_ROOT
from harness.profiles import Tier, load_profiles

PROFILES = load_profiles(REPO_ROOT / "profiles" / "vllm", REPO_ROOT)


def cases(tier: Tier) -> list[ServeCase]:
    return [ServeCase(p, c, tier) for p in PROFILES for c in p.cases]


def contiguous(ordered: list[ServeCase]) -> bool:
    seen: list[str] = []
    for sc in ordered:
        sig = sc.signature or ""
        if seen and seen[-1] == sig:
            continue
        if sig in seen:
            return False
        seen.append(sig)
    return True


def test_cpu_order_runs_baselines_first_and_keeps_groups_together() -> None:
    all_cases = cases("cpu")
    ordered = sorted(all_cases, key=order_key(all_cases, {}))
    assert contiguous(ordered)
    qwen = [sc.profile.topology for sc in ordered if sc.profile.model.cpu == "qwen3_vl"]
    assert qwen.index("agg") < qwen.index("e_pd") < qwen.index("epd")
    ids = [sc.test_id for sc in ordered]
    assert ids.index("mm_e_pd_qwen3-vl-2b") < ids.index("mm_e_pd_qwen3-vl-2b_b64_frontend_decoding")


def test_gpu_order_is_longest_group_first(tmp_path: Path) -> None:
    results = tmp_path / "r.jsonl"
    rows = [("mm_agg_qwen3-vl-2b", 50.0), ("mm_epd_llava-1.5-7b", 900.0), ("junk", "x")]
    results.write_text("\n".join(json.dumps({"test_id": t, "duration_s": d}) for t, d in rows))
    durations = recorded_durations(results)
    assert durations == {"mm_agg_qwen3-vl-2b": 50.0, "mm_epd_llava-1.5-7b": 900.0}
    all_cases = cases("gpu")
    ordered = sorted(all_cases, key=order_key(all_cases, durations))
    assert contiguous(ordered)
    assert ordered[0].test_id == "mm_epd_llava-1.5-7b"
    totals: dict[str, float] = {}
    for sc in ordered:  # unknown cases count 75 s each
        totals[sc.signature or ""] = totals.get(sc.signature or "", 0) + durations.get(
            sc.test_id, 75
        )
    in_order = list(totals.values())
    assert in_order == sorted(in_order, reverse=True)
