"""``biasim estimate --pilot N``: N real calls per stage and model, so the estimate's output
tokens, prompt tokens and seconds per call are measured instead of assumed.

The pilot's requests are the study's own prompts as the dry render writes them, sent through
the role's runtime (its retries, limits and allow-list). They are not stored in any run: a
pilot measures, it does not answer the study.
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import time
from collections.abc import Iterable
from dataclasses import dataclass

from biasim.simulator.engine.model import sampling
from biasim.simulator.engine.runner import build_runtimes
from biasim.simulator.llm.netguard import egress_policy, guarding
from biasim.simulator.llm.runtime import BackendRuntime
from biasim.simulator.llm.structured import output_schema
from biasim.simulator.llm.types import LLMRequest, LLMResponse
from biasim.simulator.study.config import RoleConfig, Study
from biasim.simulator.study.views import study_views
from biasim.simulator.tools.estimate import Estimate, Line, rendered_messages


@dataclass(frozen=True)
class PilotResult:
    """What the pilot calls of one line measured."""

    calls: int
    failed: int
    prompt_tokens: float
    output_tokens: float
    seconds: float
    cost: float | None


def run_pilot(
    study: Study, figures: Estimate, n: int, allowed: Iterable[str] = ()
) -> dict[int, PilotResult]:
    """Send ``n`` calls for every line of ``figures`` with calls, and fold what they measured
    into the lines (prompt and output tokens and seconds per call). Returns the results by
    line index. ``allowed``: the hosts the user allowed (the calls reach nothing else)."""
    casting = study_views(study.config).casting
    loop = asyncio.new_event_loop()
    with guarding(egress_policy(study.config, allowed)):
        runtimes = build_runtimes(study, casting)
        try:
            results = loop.run_until_complete(_pilot(study, figures, runtimes, casting, n))
        finally:
            loop.run_until_complete(_close(runtimes))
            loop.close()
    for index, result in results.items():
        _apply(figures.lines[index], result)
    return results


async def _pilot(
    study: Study,
    figures: Estimate,
    runtimes: dict[tuple[str, str], BackendRuntime],
    casting: dict[str, dict[str, RoleConfig]],
    n: int,
) -> dict[int, PilotResult]:
    messages = rendered_messages(study)
    results: dict[int, PilotResult] = {}
    for index, line in enumerate(figures.lines):
        stage = next(s for s in study.config.stages if s.name == line.stage)
        if not line.calls or line.role != stage.role or not messages.get(stage.name):
            continue  # a formatter's input is another call's answer: not piloted
        key = (line.role, line.label) if (line.role, line.label) in runtimes else (line.role, "")
        runtime = runtimes[key]
        variant = casting[line.role].get(line.label) or casting[line.role][""]
        schema = (
            output_schema(stage.output, forced=stage.forced_choice).json_schema
            if stage.output
            and variant.structured_output
            and not any(f.choices_from for f in stage.output.values())
            else None
        )
        requests = [
            LLMRequest(messages=m, seed=i, json_schema=schema, **sampling(variant))
            for i, m in enumerate(itertools.islice(itertools.cycle(messages[stage.name]), n))
        ]
        start = time.perf_counter()
        answers = await asyncio.gather(*(runtime.complete(r) for r in requests))
        results[index] = _measure(runtime, answers, time.perf_counter() - start)
    return results


def _measure(runtime: BackendRuntime, answers: list[LLMResponse], wall: float) -> PilotResult:
    ok = [a for a in answers if a.status != "error"]
    costs = [runtime.cost(a) for a in answers]
    return PilotResult(
        calls=len(answers),
        failed=len(answers) - len(ok),
        prompt_tokens=statistics.fmean(a.prompt_tokens for a in ok) if ok else 0.0,
        output_tokens=statistics.fmean(a.completion_tokens for a in ok) if ok else 0.0,
        seconds=statistics.fmean(a.latency_s for a in ok) if ok else wall,
        cost=None if any(c is None for c in costs) else sum(c or 0.0 for c in costs),
    )


def _apply(line: Line, result: PilotResult) -> None:
    if result.calls == result.failed:
        return  # nothing measured: the assumptions stand (the pilot note says so)
    if result.prompt_tokens:
        line.prompt_tokens = result.prompt_tokens
    line.output_tokens = result.output_tokens
    line.seconds_per_call = result.seconds
    line.piloted = True


async def _close(runtimes: dict[tuple[str, str], BackendRuntime]) -> None:
    for runtime in {id(r): r for r in runtimes.values()}.values():
        await runtime.backend.aclose()
