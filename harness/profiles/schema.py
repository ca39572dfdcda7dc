"""Profile schema: one topology for one model family, with its cases (pydantic, frozen)."""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from harness.core.paths import REPO_ROOT

MediaKind = Literal[
    "image_url",
    "image_b64",
    "video_url",
    "video_b64",
    # Bad input a client sends by mistake: the server must refuse it and keep serving.
    "image_url_bare",  # `"image_url": "http://…"` (a string, not {"url": …})
    "image_url_missing",  # a URL the asset server answers 404
    # the request's `uuid` alone (`"image_url": null`): the image an earlier request sent under it
    "image_uuid",
]
Tier = Literal["cpu", "gpu"]
CADENCE_MARKS = ("pre_merge", "post_merge", "nightly")
# A topology kind is a name (upstream Dynamo's: agg, agg_video, agg_router, e_pd, epd, epd_video,
# p_d); what it does follows from the profile's data (its roles, replicas and baselines), not
# from the name, so a new kind needs only a profile and a launcher.
TOPOLOGY_NAME = r"^[a-z][a-z0-9_]*$"
# The roles every topology's launcher starts (launchers/lib/common.sh begin_topology), declared
# once here: a profile lists its workers (and any other aux roles).
STANDARD_ROLES = (
    {"name": "frontend", "kind": "frontend"},
    {"name": "event_broker", "kind": "aux"},
)
# The discovery components Dynamo's workers register (dynamo/vllm/args.py, dynamo/sglang/args.py
# in ai-dynamo 1.6.1): encode workers `encode`, prefill workers `prefill`, the rest `backend`.
DiscoveryComponent = Literal["encode", "prefill", "backend"]
# Launcher contract: ports come from env vars (launchers/lib/common.sh `port VAR DEFAULT`).
PORT_VAR = re.compile(r"^[A-Z][A-Z0-9_]*$")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RoleGpu(Strict):
    """Where a worker sits on the GPU tier and what it holds there (see
    harness/machine/memory_plan.py): `device` is its position in the GPUs the topology leases
    (the launcher's `gpu_for N` under the profile's layout flags)."""

    device: int = Field(default=0, ge=0)
    holds: Literal["model", "vision_tower", "hf_model"] = "model"


class RoleSpec(Strict):
    """A process the launcher starts. Workers name the env var that carries their health port."""

    name: str
    kind: Literal["frontend", "worker", "aux"]
    health_port: str | None = Field(default=None, pattern=PORT_VAR.pattern)
    discovery_component: DiscoveryComponent | None = None
    gpu: RoleGpu = RoleGpu()

    @model_validator(mode="after")
    def _worker_has_health_port(self) -> RoleSpec:
        if self.kind == "worker" and not self.health_port:
            raise ValueError(f"worker role '{self.name}' needs health_port (the env var name)")
        return self


class GpuExpect(Strict):
    status: int = 200
    error_contains: str | None = None
    all_of: list[str] = []
    any_of: list[str] = []
    # What the answer must name when the request's media is swapped for the other medium
    # (harness/oracles/checks.py): the red square instead of the green one.
    alt_any_of: list[str] = []

    @model_validator(mode="after")
    def _refusals_say_why(self) -> GpuExpect:
        return _check_refusal(self, content_fields=("all_of", "any_of", "alt_any_of"))


DefectOracle = Literal[
    "hf_reference", "logprobs", "engine_alone", "other_media", "prompt_tokens", "role_prompts"
]
# The oracles that hold an answer to the model's own: a defect that fails one must say what it
# does against the engine alone (oracles/engine_answer.py), which judges Dynamo's part alone.
MODEL_ORACLES = ("hf_reference", "logprobs")
# Where a declared defect's unpatched-versus-patched proof lives
# (docs/explanation/upstream-defects.md).
DEFECT_PROOF = re.compile(r"^docs/[\w./-]+\.md#[a-z0-9-]+$")


class RootCause(Strict):
    """Where the code under test computes something other than the model: the file (as in the
    installed package, e.g. `dynamo/vllm/multimodal_utils/encode_utils.py`), the function, what
    it computes and what the model itself computes there."""

    file: str = Field(pattern=r"^[\w./-]+\.py$")
    function: str = Field(pattern=r"^[A-Za-z_][\w.]*$")
    computes: str = Field(min_length=20)
    model_computes: str = Field(min_length=20)

    def describe(self) -> str:
        return (
            f"{self.file} {self.function}() computes {self.computes}; "
            f"the model computes {self.model_computes}"
        )


class EncoderRecipe(Strict):
    """What a defective encoder computes, precisely enough to compute it from the model's own
    weights on the raw media (harness/oracles/encoder_rows.py): the dtype its vision tower runs
    in, and which features it projects (`model`: the model's own feature layer and selection;
    `last_hidden_state`: the tower's last layer, every row kept, CLS included)."""

    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    features: Literal["model", "last_hidden_state"] = "model"

    def describe(self) -> str:
        rows = (
            "the model's own features"
            if self.features == "model"
            else ("the last hidden state, CLS row kept")
        )
        return f"{rows} in {self.dtype}"


class KnownDefect(Strict):
    """An upstream defect a request shows on the CPU tier, named at its root and proven by an
    unpatched-versus-patched run (`proof`: the table and the patch in docs/). Each oracle in
    `oracles` must FAIL on it (the case fails once it passes: the defect is gone, remove the
    declaration); every other oracle judges as usual."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    root_cause: RootCause
    effect: str = Field(min_length=20)  # the measured effect on the answer
    proof: str = Field(pattern=DEFECT_PROOF.pattern)
    oracles: list[DefectOracle] = Field(min_length=1)
    # where the defect is in the encoder: what it computes instead (the encoder oracle holds the
    # encoder's rows to it, and the numbers after the encoder are judged on those rows)
    encoder: EncoderRecipe | None = None
    # where it fails the model's own answer but not the engine alone's: why the engine alone
    # agrees (the defect leaves what the engine computes as it is, e.g. a field left out)
    engine_alone: str | None = Field(default=None, min_length=20)

    @model_validator(mode="after")
    def _says_what_the_engine_alone_does(self) -> KnownDefect:
        against_model = [o for o in self.oracles if o in MODEL_ORACLES]
        if against_model and "engine_alone" not in self.oracles and self.engine_alone is None:
            raise ValueError(
                f"defect {self.id} fails {', '.join(against_model)} (the model's own answer): "
                "say what it does against the engine alone: add engine_alone to its oracles "
                "(the served answer departs from its engine's own too), or `engine_alone: <why "
                "the engine alone agrees>`"
            )
        if "engine_alone" in self.oracles and self.engine_alone is not None:
            raise ValueError(
                f"defect {self.id}: engine_alone is among the oracles it fails, so "
                "`engine_alone: <why it agrees>` contradicts it"
            )
        return self

    def describe(self) -> str:
        return f"upstream defect {self.id}: {self.root_cause.describe()} ({self.proof})"


class CpuExpect(Strict):
    status: int = 200
    prompt_tokens: bool = True
    same_as: str | None = None
    error_contains: str | None = None
    # one declared upstream defect, or several with distinct roots, each failing its own oracles
    known_defect: list[KnownDefect] = Field(default_factory=list)

    @field_validator("known_defect", mode="before")
    @classmethod
    def _one_defect_is_a_list_of_one(cls, value: object) -> object:
        return [value] if isinstance(value, dict) else value

    @model_validator(mode="after")
    def _refusals_say_why(self) -> CpuExpect:
        return _check_refusal(
            self,
            content_fields=("prompt_tokens", "same_as", "known_defect"),
        )

    @model_validator(mode="after")
    def _one_defect_per_oracle(self) -> CpuExpect:
        claimed = [oracle for defect in self.defects for oracle in defect.oracles]
        twice = sorted({o for o in claimed if claimed.count(o) > 1})
        if twice:
            raise ValueError(f"known_defect: oracle(s) {twice} declared by more than one defect")
        return self

    @property
    def defects(self) -> list[KnownDefect]:
        """The declared upstream defects, as a list."""
        return self.known_defect

    def defect_of(self, oracle: str | None) -> KnownDefect | None:
        """The declared defect that says `oracle` (its DefectOracle name) must fail, if any."""
        return next((d for d in self.defects if oracle is not None and oracle in d.oracles), None)


class Expect(Protocol):
    """What a refusal's check reads of a tier's expectation (GpuExpect, CpuExpect)."""

    @property
    def status(self) -> int: ...

    @property
    def error_contains(self) -> str | None: ...

    @property
    def model_fields_set(self) -> set[str]: ...


E = TypeVar("E", bound=Expect)


def _check_refusal(expect: E, content_fields: tuple[str, ...]) -> E:
    """A non-200 expectation names the error it expects, and sets no check of a 200 answer's
    content (it would never run)."""
    status = expect.status
    if status == 200:
        return expect
    if not expect.error_contains:
        raise ValueError(f"status {status} needs error_contains: the error the refusal must name")
    inert = sorted(set(content_fields) & expect.model_fields_set)
    if inert:
        raise ValueError(f"{inert} check a 200 answer; with status {status} they never run")
    return expect


class RequestSpec(Strict):
    prompt: str
    media: list[MediaKind] = []
    max_tokens: int = 100
    # Sent this many times in a row, each judged (a cache's second hit, a router's repeat).
    repeat: int = Field(default=1, ge=1)
    # The message content as a bare string, not a list of parts (templating of string content).
    string_content: bool = False
    gpu: GpuExpect = GpuExpect()
    cpu: CpuExpect = CpuExpect()
    # Requests a role must take for this request where it differs from the topology's rule
    # (harness/oracles/serving.py), e.g. {encode: 0}; path_reason says why.
    path: dict[str, int] = {}
    path_reason: str | None = None
    # The frontend's image-token histogram records this request (upstream's image_token_metrics
    # check): one image-bearing request, and on the CPU tier the processor's image tokens.
    image_token_metrics: bool = False
    # Every media part carries this uuid (vLLM's and Dynamo's `"uuid"` of a content part: the
    # media's identity in every cache, upstream's uuid pass-through payload).
    uuid: str | None = None
    # Sent first: this many more requests of the same image, each under its own uuid, so the
    # engine's own encoder cache no longer holds this uuid's rows (what upstream's one eviction
    # fill means to do); each must answer 200.
    encoder_cache_fills: int = Field(default=0, ge=0)
    # A line some role's log gains while the request is served (upstream's `expected_log`).
    log_line: str | None = None
    # What a Dynamo checkout's payload asks of this request that the harness does not judge, each
    # with why (profiles/checkout_case.py sets it; said in the result, never passed in silence).
    unjudged: list[str] = Field(default_factory=list)

    @property
    def fingerprint(self) -> str:
        """Same prompt, media content and length: same answer expected at temperature 0.

        A URL and a base64 copy of the same file count as the same media: `image_b64` -> `image`.
        """
        media = ",".join(kind.split("_")[0] for kind in self.media)
        return f"{self.prompt}|{media}|{self.max_tokens}"

    @model_validator(mode="after")
    def _path_has_reason(self) -> RequestSpec:
        if self.path and not self.path_reason:
            raise ValueError("path overrides need path_reason (why this request takes that path)")
        if self.string_content and self.media:
            raise ValueError("string_content carries the prompt alone: no media")
        if ("image_uuid" in self.media or self.encoder_cache_fills) and not self.uuid:
            raise ValueError(
                "image_uuid and encoder_cache_fills name the media by its uuid: set uuid"
            )
        return self


class CacheHit(Strict):
    """The repeats of a case's request find its prompt in the prefix cache (upstream Dynamo's
    `make_image_payload_cached_tokens(..., min_avg_kv_hit_rate=0.9)` on the KV-router cases)."""

    min_avg_hit_rate: float = Field(default=0.9, gt=0, le=1)  # upstream's min_avg_kv_hit_rate
    # The CPU tier's vLLM KV block is 128 tokens (the role adapter's CPU_KV_BLOCK), the GPU's 16:
    # only whole blocks are cached, so on the CPU the prompt is lengthened by this many copies of
    # upstream's own filler sentence (its `prompt_filler_repeats`) to span whole blocks.
    cpu_prompt_filler_repeats: int = Field(default=0, ge=0)
    # Each repeat has at least this many prompt tokens cached (upstream's `min_cached_tokens`,
    # set from a checkout's payload); 0: the mean hit rate alone is judged.
    min_cached_tokens: int = Field(default=0, ge=0)


class DynamoPatch(Strict):
    file: str  # relative to the repository, e.g. docs/patches/dynamo-1.6.1-….patch
    why: str  # the defect it fixes (docs/explanation/upstream-defects.md)
    # the failing process's own words when the defect holds (a regex): under --dynamo-src a
    # checkout that still has it fails the case naming the defect and its patch
    shows: str | None = None

    @field_validator("shows")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            re.compile(value)  # re.error: the reader names the field
        return value

    @field_validator("file")
    @classmethod
    def _exists(cls, value: str) -> str:
        if not (REPO_ROOT / value).is_file():
            raise ValueError(f"no such patch: {value}")
        return value


class CaseSpec(RequestSpec):
    suffix: str = ""
    # The test id where upstream Dynamo names the case outside `mm_{topology}_{model}[_{suffix}]`
    # (its SGLang cases: `multimodal_e_pd_qwen`, …).
    id: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9_.-]*$")
    launcher_args: list[str] = []
    env: dict[str, str] = {}  # on top of the profile's and its tier's (its launch's own)
    marks: list[str] = []
    follow_ups: list[RequestSpec] = []
    cache_hit: CacheHit | None = None
    # The repeats' media are served by the encoder's embedding cache (upstream's embedding-cache
    # hit check): a worker's dynamo_component_embedding_cache_hits_total moves once per repeat.
    embedding_cache_hit: bool = False
    cpu_skip: str | None = None
    gpu_skip: str | None = None
    # On the CPU tier, with no Dynamo checkout under test: the installed ai-dynamo with this
    # patch applied (a proven upstream defect that ends the engine there), said in the result.
    cpu_dynamo_patch: DynamoPatch | None = None

    @model_validator(mode="after")
    def _cache_hit_needs_repeats(self) -> CaseSpec:
        if (self.cache_hit is not None or self.embedding_cache_hit) and self.repeat < 2:
            raise ValueError("cache hits are judged on the repeats: set repeat to 2 or more")
        return self


class ModelSpec(Strict):
    short_name: str
    gpu: str
    cpu: Literal["qwen3_vl", "llava", "qwen2_vl", "qwen2_5_vl", "qwen3_5", "gemma4"] | None = None


class Budget(Strict):
    total_s: float = Field(gt=0)
    register_s: float = Field(gt=0)
    no_health_source_grace_s: float = Field(default=8.0, gt=0)
    # Workers healthy but the model still not listed this long after: it never registered.
    listing_grace_s: float = Field(default=15.0, gt=0)
    request_s: float = Field(default=60.0, gt=0)

    @model_validator(mode="after")
    def _register_within_total(self) -> Budget:
        if self.register_s > self.total_s:
            raise ValueError(f"register_s {self.register_s} exceeds total_s {self.total_s}")
        return self


class TierSpec(Strict):
    launcher_args: list[str] = []
    marks: list[str] = []
    env: dict[str, str] = {}
    budget: Budget


class GpuTierSpec(TierSpec):
    """The GPU tier. Memory is planned in bytes per role (harness/machine/memory_plan.py), so
    no profile states VRAM by hand: `card_gib` is the smallest card it claims to fit."""

    gpus: int = Field(ge=1)  # the runner class (gpu_N mark); upstream Dynamo's count
    card_gib: float = Field(default=24.0, gt=0)
    max_model_len: int = Field(default=4096, gt=0)
    max_num_seqs: int = Field(default=2, gt=0)
    max_num_batched_tokens: int | None = Field(default=None, gt=0)  # default: max_model_len


class Profile(Strict):
    name: str
    topology: str = Field(pattern=TOPOLOGY_NAME)
    stack: Literal["dynamo-vllm", "dynamo-sglang"]
    # The GPU tier's device kind: NVIDIA (CUDA, leased through NVML) or Intel XPU (Level Zero;
    # the launcher selects devices with ZE_AFFINITY_MASK). XPU runs need an XPU runner.
    accelerator: Literal["cuda", "xpu"] = "cuda"
    launcher: str
    # Upstream's launcher of this topology, relative to a Dynamo checkout: with --dynamo-src it
    # runs in place of ours, unmodified, when the checkout holds it (harness/launch/plan.py).
    upstream_launcher: str | None = None
    id_prefix: str = "mm"
    model: ModelSpec
    roles: list[RoleSpec]
    # Workers behind a router: each request is served by exactly one of them (the path oracle
    # counts them as one group) and a case's requests reach all of them (the spread check).
    replicas: list[str] = []
    # Why a role of this launch listens on every interface, where the engine leaves no other
    # way; the loopback check is skipped for it (harness/topology/phases.py LoopbackOnly).
    not_loopback: str | None = Field(default=None, min_length=20)
    # What must listen beyond loopback, each with why (the engine gives it no bind address): a
    # leased port, by the launcher's port variable; or a role, for one OS-assigned port of it.
    # Every other listener is still checked.
    wide_ports: dict[str, Annotated[str, Field(min_length=20)]] = {}
    marks: list[str]
    env: dict[str, str] = {}
    gpu: GpuTierSpec
    cpu: TierSpec | None = None
    cpu_skip: str | None = None
    # why the GPU tier cannot run or plan this profile here (its cases skip, naming it)
    gpu_skip: str | None = None
    cases: list[CaseSpec] = Field(min_length=1)
    source: str = ""

    @model_validator(mode="before")
    @classmethod
    def _standard_roles(cls, data: Any) -> Any:
        """The frontend and event broker every launcher starts, unless the profile names its
        own frontend."""
        if isinstance(data, dict) and isinstance(data.get("roles"), list):
            roles = data["roles"]
            if not any(isinstance(r, dict) and r.get("kind") == "frontend" for r in roles):
                data = {**data, "roles": [*STANDARD_ROLES, *roles]}
        return data

    @field_validator("launcher")
    @classmethod
    def _launcher_inside_the_repo(cls, path: str) -> str:
        """A relative launcher path stays inside the repository (an absolute one names its file
        outright, as the harness's own test doubles do)."""
        if not PurePosixPath(path).is_absolute() and ".." in PurePosixPath(path).parts:
            raise ValueError(f"{path!r} leaves its root: give it relative to the repository")
        return path

    @field_validator("upstream_launcher")
    @classmethod
    def _upstream_launcher_inside_the_checkout(cls, path: str | None) -> str | None:
        """Upstream's launcher is a path inside whichever Dynamo checkout runs it."""
        if path is not None and (
            PurePosixPath(path).is_absolute() or ".." in PurePosixPath(path).parts
        ):
            raise ValueError(
                f"{path!r} leaves its root: give it relative to the Dynamo checkout, without '..'"
            )
        return path

    @field_validator("marks")
    @classmethod
    def _cadence(cls, marks: list[str]) -> list[str]:
        if not any(m in CADENCE_MARKS for m in marks):
            raise ValueError(f"needs one cadence mark of {CADENCE_MARKS}")
        return marks

    @model_validator(mode="after")
    def _consistent(self) -> Profile:
        names = [r.name for r in self.roles]
        if len(set(names)) != len(names):
            raise ValueError(f"role names repeat: {names}")
        if [r.kind for r in self.roles].count("frontend") != 1:
            raise ValueError("needs exactly one role of kind frontend")
        labels = [r.health_port for r in self.roles if r.health_port]
        shared = sorted({label for label in labels if labels.count(label) > 1})
        if shared:
            holders = {
                label: [r.name for r in self.roles if r.health_port == label] for label in shared
            }
            raise ValueError(
                "roles share a health port: "
                + "; ".join(
                    f"{label} is {' and '.join(names)}'s" for label, names in holders.items()
                )
                + " (each worker needs its own system port to be told apart)"
            )
        ids = [self.test_id(c) for c in self.cases]
        if len(set(ids)) != len(ids):
            raise ValueError(f"case ids repeat: {ids}")
        if self.cpu is None and self.cpu_skip is None:
            raise ValueError("a profile without a cpu tier must say why in cpu_skip")
        if self.cpu is not None and self.model.cpu is None:
            raise ValueError("cpu tier given but model.cpu (tiny model family) is not")
        workers = {r.name for r in self.worker_roles}
        if self.replicas and (len(self.replicas) < 2 or not set(self.replicas) <= workers):
            raise ValueError(f"replicas {self.replicas} must name two or more worker roles")
        beyond = [r.name for r in self.roles if r.gpu.device >= self.gpu.gpus]
        if beyond:
            raise ValueError(f"roles {beyond} sit on a GPU past gpu.gpus ({self.gpu.gpus})")
        return self

    def test_id(self, case: CaseSpec) -> str:
        if case.id:
            return case.id
        base = f"{self.id_prefix}_{self.topology}_{self.model.short_name}"
        return f"{base}_{case.suffix}" if case.suffix else base

    def tier(self, tier: Tier) -> TierSpec | None:
        return self.gpu if tier == "gpu" else self.cpu

    @property
    def worker_roles(self) -> list[RoleSpec]:
        return [r for r in self.roles if r.kind == "worker"]
