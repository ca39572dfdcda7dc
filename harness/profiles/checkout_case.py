"""A serve case as a Dynamo checkout's own test matrix defines it (`--dynamo-src`): its request
sequence (the payload and follow-up payloads), their options, and its environment, read from
the checkout's file (checkout_matrix.py); the profile supplies only what the tier needs (the
tiny checkpoint and its precision, the CPU engine flags, the oracles and their references).

- `matrix_match(profile, case, entries)`: the checkout's entry for one of our cases (its own
  upstream id, by the catalogue's `here` where ours differs, else one of its profile's).
- `as_the_checkout_defines(profile, case, entry)`: our case rebuilt from the entry's payloads,
  each by the request of its kind in the harness's vocabulary (`PAYLOAD_KINDS`): the first
  payload is the case's own request, every further one a follow-up on the same launch; a
  payload's `repeat_count` repeats it, `expected_log` is a line some role's log must gain,
  `expected_response` the GPU tier's keywords, a cached-tokens payload the repeats' cache-hit
  check (sent three times unless it says otherwise, as upstream's factory does;
  `min_avg_kv_hit_rate` the stricter of its threshold and ours; a case whose checkout sends no
  such payload checks none), `eviction_fill_count` the uuid case's encoder-cache fills. A kind or
  an option the harness does not know comes back as `NotDefinable`, naming it and its line:
  the case then skips with that reason, never run as ours in silence.

Example: a checkout whose `mm_agg_qwen3.5-0.8b` sends `make_image_payload(["green"])` then
`image_token_metrics_payload()` becomes our Qwen3.5 agg case with a follow-up image request
whose frontend image-token metrics are checked."""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import ValidationError

from harness.profiles.checkout_matrix import MatrixEntry, Payload
from harness.profiles.schema import CacheHit, CaseSpec, MediaKind, Profile, RequestSpec
from harness.profiles.upstream import upstream_tests

# Keywords every payload factory may take that change nothing the CPU tier judges, or that the
# harness reads below.
COMMON_OPTIONS = frozenset({"expected_response", "expected_log", "repeat_count", "max_tokens"})


@dataclass(frozen=True)
class PayloadKind:
    """What an upstream payload factory sends, in the harness's request vocabulary."""

    media: tuple[MediaKind, ...] | None  # None: the case's own request's media
    options: frozenset[str] = field(default_factory=frozenset)  # beyond COMMON_OPTIONS
    image_token_metrics: bool = False
    cached_tokens: bool = False
    # one payload that is a whole request sequence (upstream's harness sends several requests
    # for it): the case's own sequence, which models it
    sequence: bool = False
    repeat: int = 1  # how often it is sent where the call gives no repeat_count


# Upstream's payload factories (tests/utils/multimodal.py, tests/utils/payload_builder.py, as
# read 2026-12-03 to 2026-12-05: ../shared/notes/upstream-tests.md).
PAYLOAD_KINDS: dict[str, PayloadKind] = {
    "make_image_payload": PayloadKind(("image_url",)),
    "make_image_payload_b64": PayloadKind(("image_b64",)),
    "make_video_payload": PayloadKind(("video_url",), frozenset({"frontend_decoding"})),
    "make_image_payload_cached_tokens": PayloadKind(
        ("image_url",),
        frozenset(
            {
                "min_avg_kv_hit_rate",
                "prompt_filler_repeats",
                "min_cached_tokens",
                "require_rust_processor_init",
                "require_vllm_mm_processor_init",
                "min_routing_total_blocks",
            }
        ),
        cached_tokens=True,
        repeat=3,  # the factory's own default: make_image_payload_cached_tokens(repeat_count=3)
    ),
    "image_token_metrics_payload": PayloadKind(("image_url",), image_token_metrics=True),
    "make_image_token_metrics_payload": PayloadKind(("image_url",), image_token_metrics=True),
    # SGLang's configs: its own image (a COCO photo upstream, the generated square here)
    "chat_payload": PayloadKind(None),
    "UuidPassthroughChatPayload": PayloadKind(
        None, frozenset({"exercise_embedding_cache", "eviction_fill_count"}), sequence=True
    ),
}


# Options a checkout's payload may set that the harness runs but does not judge: each goes in the
# request's `unjudged`, said in its result. Upstream's checks read log lines whose words the
# upstream sources read here do not show (tests/utils/multimodal.py passes the flags on to
# tests/utils/payload_builder.py CachedTokensChatPayload); rather than guess them, the harness
# judges the router's own hit rate over the repeats (the router-hit oracle) instead.
UNJUDGED_OPTIONS = {
    "require_rust_processor_init": "upstream's check of the frontend's Rust MM-routing "
    "processor init log line; the router's own hit rate on the repeats is judged instead",
    "require_vllm_mm_processor_init": "upstream's check of vLLM's MM-routing processor init log "
    "line; the router's own hit rate on the repeats is judged instead",
    "min_routing_total_blocks": "upstream's check of the router's [ROUTING] log block count; "
    "the router's own hit rate on the repeats is judged instead",
}


@dataclass(frozen=True)
class NotDefinable:
    """Why a case cannot run as the checkout defines it (a kind or option named with its line)."""

    why: str


def catalogue_upstream_ids(stack: str, accelerator: str, test_id: str) -> list[str]:
    """Upstream's ids for one of ours, from the catalogue (`here`), else the same id."""
    ids = [
        t.id
        for t in upstream_tests()
        if t.stack == stack and t.accelerator == accelerator and t.here == test_id
    ]
    return ids or [test_id]


def matrix_match(
    profile: Profile, case: CaseSpec, entries: list[MatrixEntry]
) -> tuple[MatrixEntry, str, bool] | None:
    """The checkout's entry for this case: its own upstream id (True: the case's own), else one
    of its profile's (False)."""
    by_id = {e.id: e for e in entries}
    accelerator = profile.accelerator

    def found(c: CaseSpec) -> MatrixEntry | None:
        ids = catalogue_upstream_ids(profile.stack, accelerator, profile.test_id(c))
        return next((by_id[i] for i in ids if i in by_id), None)

    own = found(case)
    if own is not None:
        return own, f"names it for {own.id}", True
    for other in profile.cases:
        entry = found(other)
        if entry is not None:
            return entry, f"names it for {entry.id}, of the same profile", False
    return None


def as_the_checkout_defines(
    profile: Profile, case: CaseSpec, entry: MatrixEntry
) -> CaseSpec | NotDefinable:
    """The case as `entry` defines it (module doc); the case itself where the entry states no
    payload (a config whose requests the file computes)."""
    if not entry.payloads:
        return case
    requests: list[RequestSpec] = []
    hit = None  # the repeats' cache hits are judged where the checkout's payload asks for them
    for payload in entry.payloads:
        kind = PAYLOAD_KINDS.get(payload.kind)
        where = f"{entry.file}:{payload.line or entry.line}"
        if kind is None:
            return NotDefinable(
                f"the checkout's {entry.id} sends a {payload.kind}(...) payload ({where}), "
                f"a kind the harness does not know (it knows {', '.join(sorted(PAYLOAD_KINDS))})"
            )
        unknown = sorted(set(payload.options) - COMMON_OPTIONS - kind.options)
        if unknown:
            return NotDefinable(
                f"the checkout's {entry.id} gives its {payload.kind} payload the option(s) "
                f"{', '.join(unknown)} ({where}), which the harness does not know"
            )
        if kind.sequence:
            if len(entry.payloads) > 1:
                return NotDefinable(
                    f"the checkout's {entry.id} sends a {payload.kind} ({where}) beside other "
                    "payloads: the harness runs that sequence alone"
                )
            return as_sequence(case, payload)
        requests.append(request_of(case, payload, kind))
        if kind.cached_tokens:  # ours on the tier (its filler), at the stricter threshold
            hit = case.cache_hit or CacheHit()
            if payload.min_avg_kv_hit_rate is not None:
                rate = max(payload.min_avg_kv_hit_rate, hit.min_avg_hit_rate)
                hit = hit.model_copy(update={"min_avg_hit_rate": rate})
            if payload.min_cached_tokens:
                hit = hit.model_copy(update={"min_cached_tokens": payload.min_cached_tokens})
    first, *follow_ups = requests
    update = {
        **{name: getattr(first, name) for name in RequestSpec.model_fields},
        "follow_ups": follow_ups,
        "cache_hit": hit,
        # an embedding-cache hit is judged on a repeat the checkout's sequence sends
        "embedding_cache_hit": case.embedding_cache_hit and first.repeat > 1,
        "env": {**case.env, **entry.env},
    }
    try:  # validated as a profile's case is (model_copy would run no validator)
        return CaseSpec.model_validate({**dict(case), **update})
    except ValidationError as exc:
        reason = exc.errors()[0]["msg"]
        return NotDefinable(
            f"the checkout's {entry.id} ({entry.file}:{entry.line}) defines a case the harness "
            f"cannot judge: {reason}"
        )


def as_sequence(case: CaseSpec, payload: Payload) -> CaseSpec:
    """The case's own request sequence for a payload that is one (the uuid pass-through): its
    last request, the one the sequence leads to, takes the payload's fills and log line."""
    if not case.follow_ups:
        return case
    last = case.follow_ups[-1]
    update: dict[str, object] = {}
    if payload.eviction_fill_count is not None:  # at least as many fills as the checkout asks
        update["encoder_cache_fills"] = max(last.encoder_cache_fills, payload.eviction_fill_count)
    if payload.expected_log:
        update["log_line"] = payload.expected_log[-1]
    follow_ups = [*case.follow_ups[:-1], last.model_copy(update=update)]
    return case.model_copy(update={"follow_ups": follow_ups})


def request_of(case: CaseSpec, payload: Payload, kind: PayloadKind) -> RequestSpec:
    """One payload as a request: the case's own request (its prompt, its expectations on each
    tier) with the payload's media, repeats, log line, keywords and flags."""
    own = RequestSpec.model_validate(
        {name: getattr(case, name) for name in RequestSpec.model_fields}
    )
    repeat = kind.repeat if payload.repeat is None else payload.repeat
    update: dict[str, object] = {"repeat": repeat}
    if kind.media is not None:
        update["media"] = list(kind.media)
    if kind.image_token_metrics:
        update["image_token_metrics"] = True
    if payload.expected_log:
        update["log_line"] = payload.expected_log[-1]
    if payload.expected:
        update["gpu"] = own.gpu.model_copy(update={"any_of": list(payload.expected)})
    if payload.max_tokens is not None:
        update["max_tokens"] = payload.max_tokens
    update["unjudged"] = [
        f"the checkout's {option}: {why}"
        for option, why in UNJUDGED_OPTIONS.items()
        if option in payload.set_options
    ]
    return own.model_copy(update=update)


def as_the_checkout_defines_all(
    profiles: list[Profile], entries: list[MatrixEntry]
) -> tuple[list[Profile], dict[tuple[str, str], str]]:
    """Every profile with its cases as the checkout defines them, and, by (stack, id), why each
    case that cannot be is not (`list --upstream --dynamo-src` reports them)."""
    out: list[Profile] = []
    refused: dict[tuple[str, str], str] = {}
    for profile in profiles:
        own = [
            e for e in entries if (e.stack, e.accelerator) == (profile.stack, profile.accelerator)
        ]
        cases = []
        for case in profile.cases:
            found = matrix_match(profile, case, own)
            defined = (
                as_the_checkout_defines(profile, case, found[0]) if found and found[2] else case
            )
            if isinstance(defined, NotDefinable):
                refused[(profile.stack, profile.test_id(case))] = defined.why
                defined = case
            cases.append(defined)
        out.append(profile.model_copy(update={"cases": cases}))
    return out, refused
