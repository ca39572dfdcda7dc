"""What the oracles see. One answer: the request, what came back, and what the harness measured
around it (the path it took, the prompt each engine role ran); derived facts (the model
processor's counts, the model's own answer) are computed once, when an oracle first asks. One
case: its requests' cache hits, the counters at its start, and the launch that served it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import requests

from harness.core.precision import Precision, family_dtype, precision_of
from harness.oracles.baselines import BaselineStore, Key
from harness.oracles.boundary import first_encoded
from harness.oracles.checks import OracleResult
from harness.oracles.encoder_rows import reference_on_rows, tapped_rows
from harness.oracles.engine_alone import EngineAlone, EngineAnswer, EngineLaunch
from harness.oracles.model_reference import TOP_LOGPROBS, Reference, reference
from harness.oracles.processor import ProcessorCounts, processor_counts, processor_inputs
from harness.oracles.serving import IMAGE_KINDS, RequestHit
from harness.payloads.chat import MediaURLs
from harness.profiles import CaseSpec, Profile, RequestSpec, Tier
from harness.topology.role_metrics import ImageTokenTally

if TYPE_CHECKING:
    import torch

OTHER_MEDIA = "|other media"  # a baseline key's suffix: the answer with the other image/video


@dataclass(frozen=True)
class JudgeSettings:
    """Which optional oracles this session runs (all of them, unless it cannot)."""

    model_answer: bool = True  # CPU: HF transformers' own answer (off for canned answers)
    engine_alone: bool = True  # the serving engine run alone (off for canned answers, a target)
    # the engine alone answers before each launch only, never beside a running topology: the GPU
    # tier's way (the topology holds the card), on any tier where this is set
    engine_alone_first: bool = False
    cross_topology: bool = True  # CPU: a baseline topology's answer (off for a deployed target)
    relations: bool = True  # the media twins (off for canned answers: no launch to send them to)
    frontend_metrics: bool = True  # the frontend's /metrics read around each request (off: canned)
    excuse_defects: bool = True  # False: `--strict-defects`


def answers_before_launch(tier: Tier, asked: bool) -> bool:
    """The engine alone answers before the launch (cases/engine_first.py), never beside it: on
    the GPU tier, whose topology holds the card, or where asked (`engine_alone_first`)."""
    return tier == "gpu" or asked


@dataclass(frozen=True)
class Scope:
    """What decides which oracles apply to a request, before anything is sent."""

    request: RequestSpec
    tier: Tier
    profile: Profile
    settings: JudgeSettings = JudgeSettings()

    @property
    def precision(self) -> Precision:
        """The CPU tier's precision of the profile's tiny-model family (core/precision.py)."""
        return precision_of(family_dtype(self.profile.model.cpu))

    @property
    def engine_alone_first(self) -> bool:
        return answers_before_launch(self.tier, self.settings.engine_alone_first)

    @property
    def expect_status(self) -> int:
        return (self.request.gpu if self.tier == "gpu" else self.request.cpu).status

    @property
    def through_encoder(self) -> bool:
        """The request's image travels through an encode worker (encode workers take images)."""
        encoder = any(r.discovery_component == "encode" for r in self.profile.worker_roles)
        return encoder and any(kind in IMAGE_KINDS for kind in self.request.media)

    @property
    def encoder_role(self) -> str | None:
        """The encode worker's role name, where the topology has one."""
        return next(
            (r.name for r in self.profile.worker_roles if r.discovery_component == "encode"), None
        )

    @property
    def kv_handoff(self) -> bool:
        """A prefill worker computes the prompt and a decode worker imports its KV (P/D, E/P/D)."""
        return any(r.discovery_component == "prefill" for r in self.profile.worker_roles)

    def key(self, topology: str | None = None, twin: bool = False) -> Key:
        """The baseline key of this request's answer on `topology` (default: its own)."""
        return (
            self.profile.stack,
            self.profile.model.short_name,
            topology or self.profile.topology,
            self.request.fingerprint + (OTHER_MEDIA if twin else ""),
        )


@dataclass
class Answer:
    scope: Scope
    body: dict[str, Any]
    resp: requests.Response
    model_dir: str
    urls: MediaURLs
    baselines: BaselineStore
    signature: str
    ran: Mapping[str, int] = field(default_factory=dict)  # prompt tokens per engine role
    path: OracleResult | None = None  # the path check of this request, settled
    # the answers to the requests the oracles declared (Oracle.sends), sent on the same launch
    # by the case loop before judging, by the name each oracle gave
    sent: Mapping[str, requests.Response] = field(default_factory=dict)
    logprob_gap: float | None = None  # the largest |engine - model| logprob (the logprobs oracle)
    engine_gap: float | None = None  # the largest |served - engine alone| logprob
    # where the encode worker's vision model's rows were tapped (CPU tier; None: not seen)
    tap_dir: Path | None = None
    # the rows' files that had crossed a boundary before this request (oracles/boundary.py)
    crossed_before: frozenset[str] | None = None
    # of those that crossed after it, the ones written before its answer came (its own rows)
    crossed_own: frozenset[str] | None = None
    # how the frontend's image-token histogram moved over the request (None: not observed)
    image_tokens: ImageTokenTally | None = None
    # the request as the model sees it where that differs from `body` (media sent by uuid
    # alone: the image the uuid names), what its own answer is computed on
    model_body: dict[str, Any] | None = None
    # what each role's log gained while the request was served
    logged: Mapping[str, str] = field(default_factory=dict)
    # the serving engine's launch as its role recorded it, and the session's engines alone
    engine_launch: EngineLaunch | None = None
    engines: EngineAlone | None = None

    @property
    def seen(self) -> dict[str, Any]:
        """The request as the model sees it (`model_body`, else `body`)."""
        return self.body if self.model_body is None else self.model_body

    @property
    def request(self) -> RequestSpec:
        return self.scope.request

    @property
    def stack(self) -> str:
        """Whose media preprocessing the model's own inputs mirror (reference.VIDEO_LIKE)."""
        return self.scope.profile.stack

    @cached_property
    def data(self) -> Any:
        """The answer's JSON as parsed: a chat answer's object, or whatever else came back (the
        structure oracle names it)."""
        return self.resp.json()

    @cached_property
    def content(self) -> str:
        return content_of(self.data)

    @cached_property
    def counts(self) -> ProcessorCounts | None:
        """The model processor's own counts (None where it cannot mirror vLLM's)."""
        return processor_counts(self.model_dir, self.seen["messages"], self.urls.fetch, self.stack)

    @property
    def precision(self) -> Precision:
        """What the engines ran in, the reference runs in, and the tolerance the answer is held
        to: the family's (core/precision.py)."""
        return self.scope.precision

    @cached_property
    def reference(self) -> Reference | None:
        """The model's own greedy answer and its log-probabilities (model_reference.py), computed in
        the checkpoint's dtype."""
        dtype = self.precision.dtype
        return reference(self.model_dir, self.seen, self.urls.fetch, dtype, self.stack)

    @cached_property
    def exact_reference(self) -> Reference | None:
        """The model's own greedy answer computed in float64: what a float32 reference's own
        rounding is judged against (LogProbs, where the float32 one disagrees)."""
        return reference(self.model_dir, self.seen, self.urls.fetch, "float64", self.stack)

    @cached_property
    def engine_answer(self) -> EngineAnswer | None:
        """The serving engine's own answer to the request as the model sees it, run alone
        (engine_alone.py); None where no engine role recorded its launch. Raises
        EngineAloneError, in the engine's words, where it cannot answer; NotComputedBefore where
        it answers only before the launch and did not answer this then."""
        if self.engine_launch is None or self.engines is None:
            return None
        first = self.signature if self.scope.engine_alone_first else None
        return self.engines.answer(
            self.engine_launch, self.seen, self.urls.fetch, TOP_LOGPROBS, signature=first
        )

    @property
    def reference_ids(self) -> list[int] | None:
        return None if self.reference is None else self.reference.ids

    @cached_property
    def inputs(self) -> Any | None:
        """The model's own processor outputs for the request (None: not mirrored)."""
        return processor_inputs(self.model_dir, self.seen["messages"], self.urls.fetch, self.stack)

    @cached_property
    def encoder_rows(self) -> torch.Tensor | None:
        """What the encode worker's vision model returned for the request's images (the tap),
        None where it was not seen."""
        inputs = self.inputs
        if self.tap_dir is None or inputs is None or "pixel_values" not in inputs:
            return None
        rows = tapped_rows(self.tap_dir, inputs["pixel_values"])
        if rows is None and self.crossed_own is not None:  # SGLang's: by when, not by pixels
            rows = first_encoded(self.tap_dir, self.crossed_own)
        return rows

    @cached_property
    def rows_reference(self) -> Reference | None:
        """The model's language model on the encoder's rows, placed as the path places them."""
        rows = self.encoder_rows
        if rows is None:
            return None
        return reference_on_rows(
            self.model_dir, self.seen, self.urls.fetch, rows, self.scope.kv_handoff, self.stack
        )


def content_of(data: dict[str, Any]) -> str:
    try:
        return str(data["choices"][0]["message"]["content"] or "")
    except (KeyError, IndexError, TypeError):
        return ""


@dataclass(frozen=True)
class CaseScope:
    """What decides which case oracles apply to a case, before anything is sent."""

    case: CaseSpec
    tier: Tier
    profile: Profile

    def expects(self, status: int) -> bool:
        """The case's own request expects this HTTP status on this tier."""
        return (self.case.gpu if self.tier == "gpu" else self.case.cpu).status == status


@dataclass(frozen=True)
class BusySends:
    """Requests a case oracle needs answered while one worker is busy: `hold`, a long request
    streamed and held open, keeps the worker that took it busy; `rest` are sent one after
    another meanwhile, each answered before the next."""

    hold: dict[str, Any]
    rest: list[dict[str, Any]]


@dataclass
class CaseRun:
    """A case's requests, all answered, as the case oracles see them."""

    scope: CaseScope
    start_counts: dict[str, float | None]  # each worker's request counter before the case
    hits: list[RequestHit | None] = field(default_factory=list)  # the case request's repeats
    # the requests the case oracles declared (CaseOracle.sends_while_busy), sent by the case loop
    # once the case's own were answered: their statuses, the counters after them, and whether
    # every hold was still in flight when the requests sent beside it were answered
    statuses: list[int] = field(default_factory=list)
    end_counts: dict[str, float | None] = field(default_factory=dict)
    hold_in_flight: bool = True
    # how far each worker's embedding-cache hit counter moved over the case (None: no /metrics)
    embedding_hits: dict[str, float | None] = field(default_factory=dict)


def answer_text(resp: requests.Response) -> str:
    """A response's content where it answered, else its error body's start."""
    return content_of(resp.json()) if resp.status_code == 200 else resp.text[:300]
