"""A Dynamo checkout in upstream's layout, built in a temp dir without network: the installed
`dynamo.vllm` and `dynamo.frontend` packages copied under `components/src/dynamo/` with one
deliberate change each (an import-time line the suite can see in every role's log), the
installed runtime pinned in pyproject.toml, and an E/P/D launcher in upstream's style in either of
its port contracts (`dyn_port` managed ports, or upstream main's per-role variables with fixed
fallbacks), with examples/common helpers sourced relative to the script (print_launch_banner,
build_vllm_gpu_mem_args), `python -m dynamo.*` by name, LLaVA as its default model (the profile's
is Qwen3-VL: `--model` must win), GPU flags, `tcp://*` KV-event publishers, `--frontend-decoding`
to every worker, `trap 'kill 0' EXIT`)."""

from __future__ import annotations

import shutil
import subprocess
import sysconfig
from importlib import metadata
from pathlib import Path

from harness.core.paths import sglang_python
from tests.harness.upstream_profile_files import write_matrix
from tests.harness.upstream_shapes import GPU_UTILS, LAUNCH_UTILS, LAUNCHERS, MATRIX_LAUNCHERS

SITE = Path(sysconfig.get_paths()["purelib"])
PROBE = "harness-probe: {package} runs from the checkout"
EPD = "examples/backends/vllm/launch/disagg_multimodal_epd.sh"

# The newer port contract: upstream's port-isolation change (dyn_port, DYN_MANAGED_PORTS).
DYN_PORT_EPD = r"""#!/bin/bash
# E/P/D multimodal: frontend, encode, prefill, decode (upstream's style, dyn_port contract).
set -e
trap 'echo Cleaning up...; kill 0' EXIT
SCRIPT_DIR="$(dirname "$(readlink -f "$0")")"
source "$SCRIPT_DIR/../../../common/launch_utils.sh"
MODEL_NAME="llava-hf/llava-1.5-7b-hf"
EXTRA_ARGS=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --model) MODEL_NAME=$2; shift 2 ;;
    --single-gpu) shift ;;
    --frontend-decoding) EXTRA_ARGS="$EXTRA_ARGS --frontend-decoding"; shift ;;
    *) echo "Unknown option: $1"; exit 1 ;;
  esac
done
KV_TRANSFER_CONFIG='{"kv_connector":"NixlConnector","kv_role":"kv_both"}'
kv_events() { echo "{\"publisher\":\"zmq\",\"topic\":\"kv-events\",\"endpoint\":\"tcp://*:$1\"}"; }

python -m dynamo.frontend &

ENCODE_ENV
DYN_SYSTEM_PORT=$(dyn_port DYN_SYSTEM_PORT 1 8081) \
VLLM_NIXL_SIDE_CHANNEL_PORT=$(dyn_port DYN_VLLM_NIXL_SIDE_CHANNEL_PORT 1 20097) \
CUDA_VISIBLE_DEVICES=0 \
python -m dynamo.vllm --enable-multimodal --disaggregation-mode encode --model ENCODE_MODEL \
  --gpu-memory-utilization 0.1 $EXTRA_ARGS ENCODE_EXTRA --kv-transfer-config "$KV_TRANSFER_CONFIG" \
  --kv-events-config "$(kv_events "$(dyn_port DYN_VLLM_KV_EVENT_PORT 1 20080)")" &

DYN_SYSTEM_PORT=$(dyn_port DYN_SYSTEM_PORT 2 8082) \
VLLM_NIXL_SIDE_CHANNEL_PORT=$(dyn_port DYN_VLLM_NIXL_SIDE_CHANNEL_PORT 2 20098) \
CUDA_VISIBLE_DEVICES=0 python -m dynamo.vllm --route-to-encoder --disaggregation-mode prefill \
  --enable-multimodal --enable-mm-embeds --model $MODEL_NAME --gpu-memory-utilization 0.4 \
  $EXTRA_ARGS --max-model-len 4096 --kv-transfer-config "$KV_TRANSFER_CONFIG" \
  --kv-events-config "$(kv_events "$(dyn_port DYN_VLLM_KV_EVENT_PORT 2 20081)")" &

DYN_SYSTEM_PORT=$(dyn_port DYN_SYSTEM_PORT 3 8083) \
VLLM_NIXL_SIDE_CHANNEL_PORT=$(dyn_port DYN_VLLM_NIXL_SIDE_CHANNEL_PORT 3 20099) \
CUDA_VISIBLE_DEVICES=0 python -m dynamo.vllm --disaggregation-mode decode --enable-multimodal \
  --enable-mm-embeds --model $MODEL_NAME --gpu-memory-utilization 0.4 $EXTRA_ARGS \
  --max-model-len 4096 --kv-transfer-config "$KV_TRANSFER_CONFIG" \
  --kv-events-config "$(kv_events "$(dyn_port DYN_VLLM_KV_EVENT_PORT 3 20082)")" &

echo "All components started. Waiting for initialization..."
wait_any_exit
"""

# The older contract, still upstream main's E/P/D launcher: ${VAR:-fallback} per role, fixed
# fallbacks, print_launch_banner, build_vllm_gpu_mem_args, --frontend-decoding to every worker.
ROLE_VARS_EPD = r"""#!/bin/bash
# E/P/D multimodal (upstream main's style: per-role port variables with fixed fallbacks).
set -e
trap 'echo Cleaning up...; kill 0' EXIT
SCRIPT_DIR="$(dirname "$(readlink -f "$0")")"
source "$SCRIPT_DIR/../../../common/gpu_utils.sh"
source "$SCRIPT_DIR/../../../common/launch_utils.sh"
export DYN_REQUEST_PLANE=tcp
MODEL_NAME="llava-hf/llava-1.5-7b-hf"
FRONTEND_DECODING=false
SINGLE_GPU=false
KV_TRANSFER_CONFIG="{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_both\",\"kv_connector_extra_config\":{\"kv_lease_duration\":${DYN_VLLM_KV_LEASE_DURATION:-100}}}"
while [[ $# -gt 0 ]]; do
  case $1 in
    --model) MODEL_NAME=$2; shift 2 ;;
    --single-gpu) SINGLE_GPU=true; shift ;;
    --frontend-decoding) FRONTEND_DECODING=true; shift ;;
    *) echo "Unknown option: $1"; exit 1 ;;
  esac
done
HTTP_PORT="${DYN_HTTP_PORT:-8000}"
print_launch_banner \
  --multimodal "Launching Disaggregated Multimodal E/P/D" "$MODEL_NAME" "$HTTP_PORT"
python -m dynamo.frontend &
unset DYN_SYSTEM_PORT
kv_ev() { echo "{\"publisher\":\"zmq\",\"topic\":\"kv-events\",\"endpoint\":\"tcp://*:$1\"}"; }
EXTRA_ARGS=""
if [[ "$SINGLE_GPU" == "true" ]]; then EXTRA_ARGS="--enforce-eager"; fi
if [[ "$FRONTEND_DECODING" == "true" ]]; then EXTRA_ARGS="$EXTRA_ARGS --frontend-decoding"; fi
PD_GPU_MEM_ARGS=$(build_vllm_gpu_mem_args)
[[ -n "$PD_GPU_MEM_ARGS" ]] || PD_GPU_MEM_ARGS="--gpu-memory-utilization 0.4"
VLLM_NIXL_SIDE_CHANNEL_PORT_ENCODE=${VLLM_NIXL_SIDE_CHANNEL_PORT_ENCODE:-20097}
VLLM_NIXL_SIDE_CHANNEL_PORT_PREFILL=${VLLM_NIXL_SIDE_CHANNEL_PORT_PREFILL:-20098}
VLLM_NIXL_SIDE_CHANNEL_PORT_DECODE=${VLLM_NIXL_SIDE_CHANNEL_PORT_DECODE:-20099}
VLLM_ZMQ_PORT_ENCODE=${VLLM_ZMQ_PORT_ENCODE:-20080}
VLLM_ZMQ_PORT_PREFILL=${VLLM_ZMQ_PORT_PREFILL:-20081}
VLLM_ZMQ_PORT_DECODE=${VLLM_ZMQ_PORT_DECODE:-20082}

ENCODE_ENV
DYN_SYSTEM_PORT=${DYN_SYSTEM_PORT1:-8081} \
VLLM_NIXL_SIDE_CHANNEL_PORT=$VLLM_NIXL_SIDE_CHANNEL_PORT_ENCODE \
CUDA_VISIBLE_DEVICES=0 \
python -m dynamo.vllm --enable-multimodal --disaggregation-mode encode --model ENCODE_MODEL \
  --gpu-memory-utilization 0.1 $EXTRA_ARGS ENCODE_EXTRA \
  --kv-transfer-config "$KV_TRANSFER_CONFIG" \
  --kv-events-config "$(kv_ev "${VLLM_ZMQ_PORT_ENCODE}")" &

DYN_SYSTEM_PORT=${DYN_SYSTEM_PORT2:-8082} \
VLLM_NIXL_SIDE_CHANNEL_PORT=$VLLM_NIXL_SIDE_CHANNEL_PORT_PREFILL \
CUDA_VISIBLE_DEVICES=0 python -m dynamo.vllm --route-to-encoder --disaggregation-mode prefill \
  --enable-multimodal --enable-mm-embeds --model $MODEL_NAME $PD_GPU_MEM_ARGS $EXTRA_ARGS \
  --kv-transfer-config "$KV_TRANSFER_CONFIG" \
  --kv-events-config "$(kv_ev "${VLLM_ZMQ_PORT_PREFILL}")" &

DYN_SYSTEM_PORT=${DYN_SYSTEM_PORT3:-8083} \
VLLM_NIXL_SIDE_CHANNEL_PORT=$VLLM_NIXL_SIDE_CHANNEL_PORT_DECODE \
CUDA_VISIBLE_DEVICES=0 python -m dynamo.vllm  --disaggregation-mode decode --enable-multimodal \
  --enable-mm-embeds --model $MODEL_NAME $PD_GPU_MEM_ARGS $EXTRA_ARGS \
  --kv-transfer-config "$KV_TRANSFER_CONFIG" \
  --kv-events-config "$(kv_ev "${VLLM_ZMQ_PORT_DECODE}")" &

echo "All components started. Waiting for initialization..."
wait_any_exit
"""
CONTRACTS = {"dyn_port": DYN_PORT_EPD, "role_vars": ROLE_VARS_EPD}
HEALTH_ENV = "export DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS='[\"generate\"]'  # encode: no payload"


def epd_launcher(
    health_source: bool = True,
    encode_extra: str = "",
    contract: str = "dyn_port",
    encode_model: str = "$MODEL_NAME",
) -> str:
    """An E/P/D launcher text in one of upstream's port contracts: its encode worker with or
    without a health source (the seed defect), `encode_extra` flags appended to its command,
    and the model it starts (`$MODEL_NAME`, the launcher's `--model`, unless a test says)."""
    env = HEALTH_ENV if health_source else "# (no health source for the encode worker)"
    text = CONTRACTS[contract].replace("ENCODE_ENV", env).replace("ENCODE_MODEL", encode_model)
    return text.replace(" ENCODE_EXTRA", f" {encode_extra}" if encode_extra else "")


def write_launcher(root: Path, text: str, rel: str = EPD) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


# Python faults of the second seed's class (workers that serve but never announce their model):
# (file under dynamo/vllm, the installed text, what the checkout carries instead).
SKIP_REGISTRATION = "async def _skip_registration(*args, **kwargs):  # the fault\n    return None\n"
ENCODE_NEVER_REGISTERS = (
    "worker_factory.py",
    "        await register_model(\n",
    "        await _skip_registration(\n",
)
DECODE_NEVER_REGISTERS = (
    "worker_factory.py",
    "        await self.register_vllm_model(\n            model_input,\n            model_type,\n"
    "            generate_endpoint,\n            config,\n            engine_client,\n"
    "            vllm_config,\n            worker_type=worker_type,\n            needs=needs,\n",
    "        await _skip_registration(\n            model_input,\n            model_type,\n"
    "            generate_endpoint,\n            config,\n            engine_client,\n"
    "            vllm_config,\n            worker_type=worker_type,\n            needs=needs,\n",
)


def perturbed_embeddings(relative: float, switch: Path | None = None) -> tuple[str, str, str]:
    """The encode worker's image rows plus `relative` x their RMS x Gaussian noise (seeded), added
    after its vision model returned them (the size of a wrong cast or a bad transfer: small
    enough that the greedy text may not move), while the file `switch` exists (None: always)."""
    when = f"os.path.exists({str(switch)!r})" if switch is not None else "True"
    return (
        "multimodal_handlers/encode_worker_handler.py",
        "                    encoded_embeddings = embeddings\n",
        f"                    if {when}:  # the fault\n"
        "                        rms = embeddings.float().pow(2).mean().sqrt()\n"
        "                        noise = torch.randn(embeddings.shape, "
        "generator=torch.Generator().manual_seed(0))\n"
        f"                        embeddings = (embeddings.float() + {relative!r} * rms * noise)"
        ".to(embeddings.dtype)\n"
        "                    encoded_embeddings = embeddings\n",
    )


def sglang_site() -> Path:
    """The CPU tier's SGLang venv's site-packages (its dynamo.sglang)."""
    return next((sglang_python().parent.parent / "lib").glob("python3*/site-packages"))


def build_checkout(
    root: Path,
    health_source: bool = True,
    encode_extra: str = "",
    contract: str = "dyn_port",
    encode_model: str = "$MODEL_NAME",
    python_fault: tuple[str, str, str] | None = None,
    patch: Path | None = None,
    shapes: bool = False,
    matrix: bool = False,
) -> Path:
    """The checkout at `root` (see the module doc); returns `root`. `patch`: applied to the
    copied packages first (a docs/patches/ file); `python_fault`: then one edit to the copied
    dynamo.vllm (file, the installed text, found exactly once, and its replacement); `shapes`:
    also dynamo.sglang (from the SGLang venv) and a launcher in each of upstream's other shapes
    at upstream's path (upstream_shapes.py); `matrix`: also the checkout's own test matrix
    (upstream_profile_files.py) and the launchers it names as upstream has them today (the
    renamed SGLang agg, SGLang P/D and E/P/D, the XPU E/P/D)."""
    src = root / "components" / "src" / "dynamo"
    packages = [(SITE, "vllm"), (SITE, "frontend")]
    if shapes:
        packages.append((sglang_site(), "sglang"))
    for site, package in packages:
        shutil.copytree(
            site / "dynamo" / package, src / package, ignore=shutil.ignore_patterns("__pycache__")
        )
        init = src / package / "__init__.py"
        probe = PROBE.format(package=f"dynamo.{package}")
        init.write_text(init.read_text() + f"\nprint({probe!r}, flush=True)  # the change\n")
    if patch is not None:
        subprocess.run(
            ["patch", "-p1", "--batch", "--forward", "-s", "-d", str(src.parent), "-i", str(patch)],
            check=True,
        )
    if python_fault is not None:
        name, old, new = python_fault
        target = src / "vllm" / name
        text = target.read_text()
        assert text.count(old) == 1, f"{name}: the fault's anchor is not there exactly once"
        target.write_text(text.replace(old, new) + "\n\n" + SKIP_REGISTRATION)
    runtime = metadata.version("ai-dynamo-runtime")
    (root / "pyproject.toml").write_text(
        f'[project]\nname = "ai-dynamo"\ndependencies = ["ai-dynamo-runtime=={runtime}"]\n'
    )
    common = root / "examples" / "common"
    common.mkdir(parents=True)
    (common / "launch_utils.sh").write_text(LAUNCH_UTILS)
    (common / "gpu_utils.sh").write_text(GPU_UTILS)
    write_launcher(root, epd_launcher(health_source, encode_extra, contract, encode_model))
    for rel, text in LAUNCHERS.items() if shapes else ():
        write_launcher(root, text, rel)
    if matrix:
        write_matrix(root)
        for rel, text in MATRIX_LAUNCHERS.items():
            write_launcher(root, text, rel)
    return root


def commit_all(root: Path, message: str) -> None:
    """Commit the checkout as it is (a git repo is made on first use)."""
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    if not (root / ".git").exists():
        subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", message], check=True)
