"""The checks an oracle runs on one answer, each giving a verdict a person can act on.

- `OracleResult`: the verdict of one oracle: passed or not, and a detail line.
- `KeywordOracle`: case-insensitive whole-word matching of expected words in model output.
- `check_chat_structure`, `check_prompt_tokens`, `check_same_text`: structural checks on an
  OpenAI chat-completion response body.
- `compare_logprobs`: an answer held to the model's own log-probabilities, token by token, as
  vLLM's own model tests hold an engine to transformers (`check_logprobs_close` in
  vllm/tests/models/utils.py), and stricter: both sides run float32 here, so besides "each
  side's token is in the other's top-k" the chosen token's log-probability must agree within a
  tolerance, and so must every top-k token that is clear of the k-th by more than the tolerance
  (the set may differ only where two candidates are that close).
- `relations`, `judge_relation`: metamorphic media checks: requests derived from a judged one,
  whose answers must relate to its answer in a known way whatever the model's weights are.
  `other media`: the same prompt with each image or video swapped for the other one (the red
  square, the moving circle); on CPU the answer must differ (a tiny random model still sees its
  input: an encoder that returns zeros, or a worker that ignores the media, answers the same);
  on GPU it must name what the other medium shows (`alt_any_of`, e.g. red). `other transport`
  (CPU): the same media by the other transport (URL <-> base64) on the same launch must answer
  identically: both reach the model as the same pixels."""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from harness.core.verdict import Cause
from harness.profiles import MediaKind, RequestSpec, Tier

EXCERPT_CHARS = 160


@dataclass(frozen=True)
class OracleResult:
    """``passed`` and a one-line ``detail`` saying what was found or missing. ``vouches``: False
    for a pass that compared nothing (no reference computable for this request), so it does not
    count as an oracle that read the content."""

    passed: bool
    detail: str
    vouches: bool = True
    # what it measured, for the results (e.g. {"logprob_gap": 2.9e-05}); the judge carries it
    figures: dict[str, float] = field(default_factory=dict)
    cause: Cause | None = None  # why it failed, where not the oracle's own cause
    role: str | None = None  # the role it found at fault, where it can name one


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """``repr`` of ``text`` cut to ``limit`` characters, e.g. ``'The square is gr…'``."""
    if len(text) <= limit:
        return repr(text)
    return repr(text[:limit] + "…")


# A match preceded, within NEGATION_WINDOW words of its sentence, by one of these does not count:
# "it is not green" names green only to deny it.
NEGATIONS = frozenset(
    {"not", "no", "never", "neither", "nor", "without", "isn't", "aren't", "wasn't", "isnt"}
)
NEGATION_WINDOW = 3
_WORD = re.compile(r"[\w']+")


def negated(text: str, start: int) -> bool:
    """True if the word at `start` is denied by a negation just before it in its sentence."""
    sentence = re.split(r"[.!?;\n]", text[:start])[-1]
    before = [w.lower() for w in _WORD.findall(sentence)][-NEGATION_WINDOW:]
    return any(w in NEGATIONS or w.endswith("n't") for w in before)


def _affirmed(pattern: re.Pattern[str], text: str) -> bool:
    return any(not negated(text, m.start()) for m in pattern.finditer(text))


def _whole_word_pattern(word: str) -> re.Pattern[str]:
    parts = [re.escape(part) for part in word.split()]
    return re.compile(r"(?<!\w)" + r"\s+".join(parts) + r"(?!\w)", re.IGNORECASE)


class KeywordOracle:
    """Passes when the text holds every ``all_of`` word and at least one ``any_of`` word.

    Matching is case-insensitive and whole-word: a word must not touch a letter, digit or
    underscore on either side. Punctuation and hyphens are boundaries. For the word "green":

    - matches: "Green.", "GREEN", "a green-ish square", "(green)", "green's"
    - does not match: "greenish", "evergreen", "greens", "green_square"

    Plurals are different words: list ``any_of=["triangle", "triangles"]`` to accept both.
    A denied word does not count: "It is not green." holds no "green" (see ``negated``).
    A multi-word entry such as "yellow triangle" matches across any run of whitespace.
    An oracle with no words, or with a blank word, raises ValueError: it could never fail.
    """

    def __init__(self, all_of: Sequence[str] = (), any_of: Sequence[str] = ()) -> None:
        if isinstance(all_of, str) or isinstance(any_of, str):
            raise TypeError("all_of and any_of are lists of words, not a single string")
        self.all_of = list(all_of)
        self.any_of = list(any_of)
        if not self.all_of and not self.any_of:
            raise ValueError("KeywordOracle needs at least one all_of or any_of word")
        blank = [word for word in [*self.all_of, *self.any_of] if not word.strip()]
        if blank:
            raise ValueError(f"KeywordOracle words must not be blank: {blank!r}")
        self._all_of_patterns = [_whole_word_pattern(word) for word in self.all_of]
        self._any_of_patterns = [_whole_word_pattern(word) for word in self.any_of]

    def __repr__(self) -> str:
        return f"KeywordOracle(all_of={self.all_of!r}, any_of={self.any_of!r})"

    def check(self, text: str) -> OracleResult:
        missing = [
            word
            for word, pattern in zip(self.all_of, self._all_of_patterns, strict=True)
            if not _affirmed(pattern, text)
        ]
        found_any = [
            word
            for word, pattern in zip(self.any_of, self._any_of_patterns, strict=True)
            if _affirmed(pattern, text)
        ]
        problems = [f"missing all-of word {word!r}" for word in missing]
        if self.any_of and not found_any:
            problems.append(f"none of the any-of words {self.any_of!r}")
        if problems:
            return OracleResult(False, f"{'; '.join(problems)}; text: {excerpt(text)}")
        found = [*self.all_of, *found_any]
        return OracleResult(True, f"found {', '.join(repr(word) for word in found)}")


DIFF_CONTEXT_CHARS = 40


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _first_choice(body: object) -> dict[str, Any] | None:
    if not isinstance(body, dict):
        return None
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    return choices[0]


def _first_content(body: object) -> str | None:
    choice = _first_choice(body)
    message = choice.get("message") if choice else None
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, str) else None


def check_chat_structure(status: int, body: object) -> OracleResult:
    """A well-formed successful chat completion: status 200, a first choice with non-empty
    string ``message.content`` and a ``finish_reason``, and ``usage.prompt_tokens`` /
    ``usage.completion_tokens`` integers > 0. The detail lists every problem found.
    """
    problems: list[str] = []
    if status != 200:
        problems.append(f"status {status}, expected 200")
    if not isinstance(body, dict):
        problems.append(f"body is {type(body).__name__}, expected a JSON object")
        return OracleResult(False, "; ".join(problems))
    choice = _first_choice(body)
    finish_reason = choice.get("finish_reason") if choice else None
    if choice is None:
        problems.append("choices missing or empty")
    else:
        content = _first_content(body)
        if content is None:
            problems.append("choices[0].message.content missing or not a string")
        elif not content.strip():
            problems.append("choices[0].message.content is empty")
        if not finish_reason:
            problems.append("choices[0].finish_reason missing")
    usage = body.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    for name in ("prompt_tokens", "completion_tokens"):
        if not _is_count(usage.get(name)):
            problems.append(f"usage.{name} is {usage.get(name)!r}, expected an int > 0")
    if problems:
        return OracleResult(False, "; ".join(problems))
    return OracleResult(
        True,
        f"200, finish_reason {finish_reason!r}, "
        f"prompt_tokens {usage['prompt_tokens']}, completion_tokens {usage['completion_tokens']}",
    )


def check_prompt_tokens(body: object, expected: int) -> OracleResult:
    """``usage.prompt_tokens`` equals ``expected`` exactly (media token accounting)."""
    usage = body.get("usage") if isinstance(body, dict) else None
    actual = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    if actual == expected and not isinstance(actual, bool):
        return OracleResult(True, f"prompt_tokens {actual} == expected {expected}")
    return OracleResult(False, f"prompt_tokens {actual!r} != expected {expected}")


def first_difference(a: str, b: str) -> int | None:
    """Index of the first differing character, or None when equal.

    ``first_difference("abc", "abd") == 2``; ``first_difference("ab", "abc") == 2``.
    """
    for index, (char_a, char_b) in enumerate(zip(a, b, strict=False)):
        if char_a != char_b:
            return index
    return None if len(a) == len(b) else min(len(a), len(b))


def check_same_text(body: object, baseline_body: object, label: str = "baseline") -> OracleResult:
    """The first choice's content equals the baseline's exactly (greedy decoding must match a
    single-instance baseline). On a mismatch the detail names the first differing character
    index and shows both texts from a little before it.
    """
    content = _first_content(body)
    baseline = _first_content(baseline_body)
    if content is None or baseline is None:
        which = "response" if content is None else label
        return OracleResult(False, f"{which} has no choices[0].message.content string")
    index = first_difference(content, baseline)
    if index is None:
        return OracleResult(True, f"identical content ({len(content)} chars)")
    start = max(index - DIFF_CONTEXT_CHARS, 0)
    return OracleResult(
        False,
        f"content differs from {label} at char {index} "
        f"(lengths {len(content)} vs {len(baseline)}); "
        f"from char {start}: got {excerpt(content[start:])}, {label} {excerpt(baseline[start:])}",
    )


@dataclass(frozen=True)
class Step:
    """One generated token: its text, its log-probability, the top-k {text: log-probability}."""

    token: str
    logprob: float
    top: dict[str, float]


@dataclass(frozen=True)
class LogprobVerdict:
    result: OracleResult
    gap: float | None  # the largest |engine - model| log-probability of a chosen token compared
    tie_at: int | None = None  # where a near-tie flipped the choice (compare_logprobs near_ties)


def engine_steps(data: object, special: Collection[str] = ()) -> list[Step] | None:
    """The steps of an OpenAI chat answer's `choices[0].logprobs.content`; None if absent.
    `special`: the tokenizer's special tokens, rendered '' as the engine renders a chosen one
    (its top-k lists them by name)."""
    try:
        content = cast(Any, data)["choices"][0]["logprobs"]["content"]
    except (KeyError, IndexError, TypeError):
        return None
    if not isinstance(content, list):
        return None

    def text(token: object) -> str:
        return "" if str(token) in special else str(token)

    return [
        Step(
            text(s["token"]),
            float(s["logprob"]),
            {text(t["token"]): float(t["logprob"]) for t in s.get("top_logprobs") or []},
        )
        for s in content
    ]


def compare_logprobs(
    engine: list[Step], model: list[Step], tolerance: float, near_ties: bool = False
) -> LogprobVerdict:
    """Position by position up to the shorter answer (a trailing end-of-sequence token may be
    on one side only). Fails at the first position where the chosen tokens differ, a chosen
    token's log-probability is more than `tolerance` off, or the top-k sets differ beyond it.
    `near_ties` (a precision whose rounding can flip a near-tie, core/precision.py): where the
    chosen tokens differ and the model's own log-probability of the answer's token is within
    `tolerance` of its choice, the answer holds and nothing after is compared."""
    gap = 0.0
    for i, (ours, theirs) in enumerate(zip(engine, model, strict=False)):
        at = f"token {i}"
        if ours.token != theirs.token and near_ties and ours.token in theirs.top:
            tie = theirs.logprob - theirs.top[ours.token]
            if tie <= tolerance:
                detail = (
                    f"{i} tokens agree, largest |gap| {gap:.2e} (tolerance {tolerance:g}); at "
                    f"token {i} the answer chose {ours.token!r}, the model {theirs.token!r}, "
                    f"{tie:.3f} apart in the model's own log-probabilities: a near-tie at this "
                    "precision, not compared after"
                )
                return LogprobVerdict(OracleResult(True, detail), gap, tie_at=i)
        if ours.token != theirs.token:
            detail = (
                f"{at}: the answer chose {ours.token!r} (logprob {ours.logprob:.6f}), the "
                f"model chose {theirs.token!r} (logprob {theirs.logprob:.6f}; the answer's "
                f"token has {_lp(theirs.top, ours.token)} there)"
            )
            return LogprobVerdict(OracleResult(False, detail), gap)
        delta = abs(ours.logprob - theirs.logprob)
        gap = max(gap, delta)
        if delta > tolerance:
            detail = (
                f"{at} {ours.token!r}: logprob {ours.logprob:.6f}, the model's "
                f"{theirs.logprob:.6f} (|gap| {delta:.2e} > {tolerance:g}); the texts agree so far"
            )
            return LogprobVerdict(
                OracleResult(False, detail),
                gap,
            )
        missing = _clear_of_kth(theirs.top, tolerance) - ours.top.keys()
        extra = _clear_of_kth(ours.top, tolerance) - theirs.top.keys()
        if missing or extra:
            return LogprobVerdict(
                OracleResult(
                    False,
                    (
                        f"{at} {ours.token!r}: top-{len(theirs.top)} differs beyond {tolerance:g}: "
                        f"the model's {sorted(missing)} missing from the answer's, the answer's "
                        f"{sorted(extra)} not in the model's"
                    ),
                ),
                gap,
            )
    n = min(len(engine), len(model))
    return LogprobVerdict(
        OracleResult(True, f"{n} tokens, largest |gap| {gap:.2e} (tolerance {tolerance:g})"), gap
    )


def rejudged_in_float64(
    engine: list[Step],
    model32: list[Step],
    model64: list[Step] | None,
    tolerance: float,
    first: LogprobVerdict,
) -> LogprobVerdict:
    """A float32 engine failed against the model's float32 answer (`first`): judged again
    against the model's float64 answer, the nearer truth. It passes only where the answer is
    within `tolerance` of that and the model's own float32 answer is further from it than the
    tolerance: the float32 reference's rounding, not the engine's, made the gap."""
    if first.result.passed or model64 is None:
        return first
    if [s.token for s in model64] != [s.token for s in model32]:
        return first
    exact = compare_logprobs(engine, model64, tolerance)
    own = [abs(a.logprob - b.logprob) for a, b in zip(model32, model64, strict=False)]
    if not exact.result.passed or not own or max(own) <= tolerance:
        return first
    at = max(range(len(own)), key=own.__getitem__)
    detail = (
        f"{exact.result.detail} against the model's float64 answer; its float32 answer is "
        f"{own[at]:.2e} from that at token {at}, beyond the tolerance (the float32 reference's "
        f"own rounding); against the float32 one: {first.result.detail}"
    )
    return LogprobVerdict(OracleResult(True, detail), exact.gap)


def _clear_of_kth(top: dict[str, float], tolerance: float) -> set[str]:
    """The top-k tokens more than `tolerance` above the k-th: the other side must list them."""
    if not top:
        return set()
    kth = min(top.values())
    return {token for token, lp in top.items() if lp - kth > tolerance}


def _lp(top: dict[str, float], token: str) -> str:
    return f"logprob {top[token]:.6f}" if token in top else "no place in its top-k"


OTHER_TRANSPORT: dict[MediaKind, MediaKind] = {
    "image_url": "image_b64",
    "image_b64": "image_url",
    "video_url": "video_b64",
    "video_b64": "video_url",
}


@dataclass(frozen=True)
class MediaRelation:
    """A request derived from a judged one: the same prompt with `media` (its media kinds, or
    the other transport's), served from the other image/video (`other_media`) or the same."""

    name: str
    media: tuple[MediaKind, ...]
    other_media: bool
    same: bool | None  # answer equal to (True) / different from (False) the judged one; None: GPU
    any_of: tuple[str, ...] = ()  # GPU: words the answer must name


def relations(request: RequestSpec, tier: Tier) -> list[MediaRelation]:
    """The derived requests of one judged 200 request (none for a request without media)."""
    if not request.media or any(kind not in OTHER_TRANSPORT for kind in request.media):
        return []
    media = tuple(request.media)
    if tier == "gpu":
        if not request.gpu.alt_any_of:
            return []
        return [MediaRelation("other media", media, True, None, tuple(request.gpu.alt_any_of))]
    transport = tuple(OTHER_TRANSPORT[k] for k in request.media)
    return [
        MediaRelation("other media", media, True, same=False),
        MediaRelation("other transport", transport, False, same=True),
    ]


def judge_relation(relation: MediaRelation, answer: str, status: int, derived: str) -> OracleResult:
    """The derived request's answer (`derived`, HTTP `status`) against the judged `answer`."""
    label = f"{relation.name}: "
    if status != 200:
        return OracleResult(False, f"{label}HTTP {status}, expected 200", cause=Cause.HTTP_ERROR)
    if relation.same is True:
        same = check_same_text(_body(derived), _body(answer))
        return OracleResult(same.passed, label + same.detail)
    if relation.same is False:
        if derived == answer:
            return OracleResult(
                False,
                f"{label}the same answer for the other image/video ({excerpt(answer)}): the "
                "media did not reach the model, or reached it as nothing",
            )
        return OracleResult(True, f"{label}a different answer ({excerpt(derived)})")
    found = KeywordOracle(any_of=relation.any_of).check(derived)
    return OracleResult(found.passed, label + found.detail)


def _body(content: str) -> dict[str, Any]:
    return {"choices": [{"message": {"content": content}}]}
