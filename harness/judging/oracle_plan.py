"""Which oracles judge each request of a case, by tier, before anything runs (for `harness list`
and for the rule that every 200 answer on the CPU tier meets an oracle that reads its content).

Content oracles depend on what the answer says: keywords (GPU), equality with a baseline
topology, the metamorphic media relations, the Hugging Face reference. Structure, prompt tokens
and the request path hold for any answer of the right shape, so they do not count as content.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.judging.media_relations import relation_names
from harness.profiles import CaseSpec, RequestSpec, Tier


@dataclass(frozen=True)
class RequestOracles:
    status: int
    form: tuple[str, ...]  # shape, token count, path
    content: tuple[str, ...]  # what reads the answer's content

    def describe(self) -> str:
        if self.status != 200:
            return f"HTTP {self.status} naming the error"
        return ", ".join([*self.form, *self.content])


def request_oracles(request: RequestSpec, tier: Tier) -> RequestOracles:
    if tier == "gpu":
        expect = request.gpu
        if expect.status != 200:
            return RequestOracles(expect.status, (), ())
        words = [*expect.all_of, *expect.any_of]
        content = [f"names {words}"] if words else []
        return RequestOracles(
            200, ("structure", "path"), (*content, *relation_names(request, tier))
        )
    cpu = request.cpu
    if cpu.status != 200:
        return RequestOracles(cpu.status, (), ())
    defect = cpu.known_defect.oracles if cpu.known_defect else []
    form = ["structure"]
    if cpu.prompt_tokens:
        form.append(_declared("prompt tokens", "prompt_tokens" in defect))
    form += [_declared("role prompts", "role_prompts" in defect), "path"]
    content = [f"same as {cpu.same_as}"] if cpu.same_as else []
    relations = relation_names(request, tier)
    if "hf_reference" in defect:  # an oracle that must show the defect does not vouch for it
        form.append(_declared("matches the model's own answer", True))
    else:
        content.append("matches the model's own answer")
    if "other_media" in defect:
        form += [_declared(r, True) for r in relations if r.startswith("other media")]
        relations = [r for r in relations if not r.startswith("other media")]
    return RequestOracles(200, tuple(form), (*content, *relations))


def _declared(oracle: str, declared: bool) -> str:
    return f"{oracle} (fails: declared upstream defect)" if declared else oracle


def case_oracles(case: CaseSpec, tier: Tier) -> list[RequestOracles]:
    return [request_oracles(r, tier) for r in (case, *case.follow_ups)]
