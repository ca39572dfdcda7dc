"""A selection that leaves out a baseline still judges: the cases a selected case is compared
with (`cpu.same_as`) are pulled back in when `-k`/`-m` deselected them.

Example: `-k epd` selects the E/P/D cases, whose image answers must equal E/PD's and whose video
answers must equal agg's; the E/PD and agg cases that give those answers are pulled back in and
reported as such, instead of four cases failing with "no e_pd baseline recorded"; E/PD's own
answers must equal agg's, so its agg case comes too.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.judging.chat_request import fingerprint
from harness.suite.serve_case import ServeCase

Key = tuple[str, str, str, str]  # (stack, model, topology, request fingerprint)


def needed(sc: ServeCase) -> set[Key]:
    """Baseline answers this case is judged against."""
    if sc.tier != "cpu" or sc.profile.cpu is None:
        return set()
    p = sc.profile
    return {
        (p.stack, p.model.short_name, r.cpu.same_as, fingerprint(r))
        for r in sc.requests
        if r.cpu.same_as and r.cpu.status == 200
    }


def given(sc: ServeCase) -> set[Key]:
    """Baseline answers this case records when it runs."""
    p = sc.profile
    return {
        (p.stack, p.model.short_name, p.topology, fingerprint(r))
        for r in sc.requests
        if r.cpu.status == 200
    }


def pull_in(selected: Sequence[ServeCase], deselected: Sequence[ServeCase]) -> list[ServeCase]:
    """The deselected cases that give a baseline some selected case needs and no selected case
    of another launch gives (a baseline from the same launch does not count), transitively: a
    pulled-in case brings its own baselines (E/P/D pulls in E/PD, which pulls in agg)."""
    pulled: list[ServeCase] = []
    consumers = list(selected)
    for consumer in consumers:  # grows as cases are pulled in
        for key in sorted(needed(consumer)):
            providers = [*selected, *pulled]
            if any(key in given(p) and p.signature != consumer.signature for p in providers):
                continue
            match = next(
                (d for d in deselected
                 if key in given(d) and d.signature != consumer.signature
                 and not d.skip_reason(None)),
                None,
            )  # fmt: skip
            if match is not None and match not in pulled:
                pulled.append(match)
                consumers.append(match)
    return pulled
