"""Who advances from a reading stage with a committee or a selection rule (see
:mod:`biasim.simulator.study.committees`): the committee's decision of one evaluation from its
members' answers, and a selection rule across all the stage's evaluations. Pure functions of
the answers; every tie is broken by a generator the engine seeds with the study seed and the
stage, so a resumed run decides alike.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from biasim.agents import SELECTED, StagePlan
from biasim.agents.documents import Evaluation
from biasim.simulator.llm.types import LLMResponse
from biasim.simulator.study.committees import CommitteeConfig, SelectionConfig
from biasim.simulator.study.config import StageConfig
from biasim.simulator.study.templating import compile_expression

#: Stage selection rate of a group below this fraction of the highest group's is corrected.
FOUR_FIFTHS = 0.8


@dataclass
class Decision:
    """A stage's decision of one evaluation.

    Attributes:
        evaluation: What was read.
        labels: The shown documents (1-based) that advance; None when undecided (a reader
            gave no valid answer).
        support: Per shown document, what ranks it for a selection rule: the share of the
            readers who advanced it, or a committee's mean ``score``.
    """

    evaluation: Evaluation
    labels: tuple[int, ...] | None
    support: tuple[float, ...]
    #: The evaluation's own decision, kept when a selection rule changes ``labels``.
    pooled: tuple[int, ...] | None = field(init=False)

    def __post_init__(self) -> None:
        self.pooled = self.labels


def single_decision(evaluation: Evaluation, labels: Sequence[int] | None) -> Decision:
    """The decision of an evaluation one reader decided (``labels``: what it advanced)."""
    picked = set(labels or ())
    support = tuple(float(i + 1 in picked) for i in range(len(evaluation.shown)))
    return Decision(evaluation, None if labels is None else tuple(sorted(picked)), support)


def committee_decision(
    committee: CommitteeConfig,
    evaluation: Evaluation,
    picks: Sequence[Sequence[int] | None],
    answers: Sequence[dict[str, Any] | None],
    advance: str | None,
    rng: random.Random,
) -> Decision:
    """The committee's decision of ``evaluation`` from each member's advanced labels
    (``picks``, None for a member without a valid answer) and parsed answers."""
    size = len(evaluation.shown)
    if any(p is None for p in picks):
        return Decision(evaluation, None, (0.0,) * size)
    n = len(picks)
    votes = [sum(i + 1 in set(p or ()) for p in picks) for i in range(size)]
    share = tuple(v / n for v in votes)
    rule = committee.aggregate
    if rule == "mean_score" and evaluation.k == 0:
        return _mean_score(committee, evaluation, answers, advance)
    if rule == "mean_score":
        ties = [rng.random() for _ in range(size)]
        ranked = sorted(range(size), key=lambda i: (-votes[i], ties[i]))
        return Decision(evaluation, tuple(sorted(i + 1 for i in ranked[: evaluation.k])), share)
    needed = {"any": 1, "all": n, "majority": n // 2 + 1}[rule]
    return Decision(evaluation, tuple(i + 1 for i in range(size) if votes[i] >= needed), share)


def _mean_score(
    committee: CommitteeConfig,
    evaluation: Evaluation,
    answers: Sequence[dict[str, Any] | None],
    advance: str | None,
) -> Decision:
    name = committee.score
    assert name is not None and advance is not None  # validation requires both
    scores = [(a or {}).get(name) for a in answers]
    if any(not isinstance(s, int | float) or isinstance(s, bool) for s in scores):
        return Decision(evaluation, None, (0.0,))
    mean = sum(scores) / len(scores)
    passed = compile_expression(advance)({**(answers[0] or {}), name: mean})
    return Decision(evaluation, (1,) if passed else (), (float(mean),))


def apply_selection(
    selection: SelectionConfig,
    decisions: Sequence[Decision],
    group_of: Callable[[Evaluation, int], str],
    rng: random.Random,
) -> None:
    """Set every decided evaluation's ``labels`` by the stage's selection rule (in place);
    ``group_of(evaluation, label)``: the group of ``by`` of the document shown there."""
    shown = [(d, label) for d in decisions if d.labels is not None for label in _labels(d)]
    ties = [rng.random() for _ in shown]
    order = sorted(range(len(shown)), key=lambda j: (-_support(shown[j]), ties[j]))
    if selection.rule == "global_top_k":
        chosen = set(order[: selection.k])
    else:
        chosen = _four_fifths(shown, order, group_of)
    picked: dict[int, list[int]] = {id(d): [] for d, _ in shown}
    for j in sorted(chosen):
        decision, label = shown[j]
        picked[id(decision)].append(label)
    for decision in decisions:
        if decision.labels is not None:
            decision.labels = tuple(sorted(picked[id(decision)]))


def _four_fifths(
    shown: list[tuple[Decision, int]],
    order: list[int],
    group_of: Callable[[Evaluation, int], str],
) -> set[int]:
    """The pools' own picks, then, while some group's rate is below 0.8 of the highest, the
    lowest-rate group's best-supported document not yet advanced is added."""
    groups = [group_of(d.evaluation, label) for d, label in shown]
    chosen = {j for j, (d, label) in enumerate(shown) if label in (d.labels or ())}
    read: dict[str, int] = {}
    for g in groups:
        read[g] = read.get(g, 0) + 1
    waiting = {g: [j for j in order if groups[j] == g and j not in chosen] for g in read}
    while True:
        rate = {g: sum(groups[j] == g for j in chosen) / read[g] for g in read}
        top = max(rate.values())
        below = [g for g in read if rate[g] < FOUR_FIFTHS * top - 1e-12 and waiting[g]]
        if not below:
            return chosen
        chosen.add(waiting[min(below, key=lambda g: (rate[g], g))].pop(0))


def _labels(decision: Decision) -> range:
    return range(1, len(decision.evaluation.shown) + 1)


def _support(item: tuple[Decision, int]) -> float:
    decision, label = item
    return decision.support[label - 1]


#: The answer columns a decided row has no single value of (the members' rows hold them).
_CALL_ONLY = ("raw_text", "persona_name", "probabilities")


def decide(
    plan: StagePlan,
    config: StageConfig,
    readings: Sequence[Any],
    responses: Sequence[LLMResponse | None],
    rows: Sequence[dict[str, Any]],
    rng: random.Random,
) -> tuple[list[tuple[Decision, dict[str, Any]]], list[dict[str, Any]]]:
    """Per evaluation, in order: its decision and the stage's row of it; and the committee
    members' own rows (none without a committee: each reading's row is the stage's)."""
    answered = [r is not None and r.status == "answered" for r in responses]
    labels = [
        advanced_labels(plan, r) if ok else None for r, ok in zip(responses, answered, strict=True)
    ]
    if config.readers is None:
        return [
            (single_decision(reading.evaluation, picked), row)
            for reading, picked, row in zip(readings, labels, rows, strict=True)
        ], []
    n = config.readers.count
    decisions, members = [], []
    for start in range(0, len(readings), n):
        group = range(start, start + n)
        for i in group:
            rows[i].update(stage=f"{plan.name}.reader{readings[i].member}", committee=plan.name)
            if not answered[i]:
                rows[i]["advanced"] = None
            members.append(rows[i])
        answers = [responses[i].parsed if answered[i] else None for i in group]  # type: ignore[union-attr]
        decision = committee_decision(
            config.readers,
            readings[start].evaluation,
            [labels[i] for i in group],
            answers,
            plan.advance,
            rng,
        )
        decisions.append((decision, decided_row(plan, config, [rows[i] for i in group], decision)))
    return decisions, members


def decided_row(
    plan: StagePlan,
    config: StageConfig,
    members: Sequence[dict[str, Any]],
    decision: Decision,
) -> dict[str, Any]:
    """The stage's row of a committee's decision: the evaluation's columns as its members'
    rows give them, the answer fields none (each member's row has its own) but ``selected``
    and a mean ``score``, no tokens or time (no call of its own), ``members`` naming the calls.
    Status ``answered`` when decided, ``skipped`` when a member gave no valid answer."""
    first = members[0]
    row = {
        key: value if all(m.get(key) == value for m in members[1:]) else None
        for key, value in first.items()
    }
    for key in (*(plan.output or {}), SELECTED, *_CALL_ONLY):
        if key in row:
            row[key] = None
    failed = [j + 1 for j, m in enumerate(members) if not m.get("valid")]
    decided = decision.labels is not None
    committee = config.readers
    assert committee is not None
    if decided and decision.evaluation.k:
        row[SELECTED] = "|".join(str(label) for label in decision.labels or ())
    elif decided and committee.score is not None:
        row[committee.score] = decision.support[0]
    row.update(
        unit_id=str(first["unit_id"]).rsplit("/", 1)[0],
        agent_id="|".join(str(m["agent_id"]) for m in members),
        stage=plan.name,
        committee=None,
        members="|".join(str(m["unit_id"]) for m in members),
        status="answered" if decided else "skipped",
        valid=decided,
        error=None
        if decided
        else f"skipped: committee reader(s) {', '.join(map(str, failed)) or '?'} gave no "
        "valid answer",
        prompt_tokens=0,
        completion_tokens=0,
        latency_s=0.0,
        attempts=0,
        reasks=0,
        truncated=False,
        cached=all(bool(m.get("cached")) for m in members),
    )
    return row


def advanced_labels(plan: StagePlan, response: LLMResponse | None) -> list[int]:
    """Labels (1-based) of the shown documents an answered reading advances."""
    parsed = (response.parsed if response is not None else None) or {}
    if plan.select:
        return sorted(int(label) for label in parsed.get(SELECTED, []))
    if plan.advance is not None:
        return [1] if compile_expression(plan.advance)(parsed) else []
    return []
