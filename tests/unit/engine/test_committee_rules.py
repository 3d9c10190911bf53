"""The committee and selection rules (engine.committees) against oracles written here: each
aggregation counted by hand, the global top-k against sorting every document, and the
four-fifths correction against its definition (rates, additions only, best-supported first,
the fewest moved)."""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

import pytest

from biasim.simulator.engine.committees import (
    Decision,
    apply_selection,
    committee_decision,
    single_decision,
)
from biasim.simulator.study.committees import CommitteeConfig, SelectionConfig


def evaluation(size: int, k: int) -> SimpleNamespace:
    return SimpleNamespace(shown=tuple(range(size)), k=k)


PICKS = [[1, 2, 3], [2, 3, 4], [3, 5, 6]]


@pytest.mark.parametrize(
    ("rule", "expected"),
    [("any", (1, 2, 3, 4, 5, 6)), ("all", (3,)), ("majority", (2, 3))],
)
def test_pool_committees_combine_picks_as_declared(rule: str, expected: tuple) -> None:
    committee = CommitteeConfig(count=3, aggregate=rule)
    decision = committee_decision(
        committee, evaluation(8, 3), PICKS, [{}] * 3, None, random.Random(0)
    )
    assert decision.labels == expected
    # Support is the share of members who picked each document.
    assert decision.support == (1 / 3, 2 / 3, 1.0, 1 / 3, 1 / 3, 1 / 3, 0.0, 0.0)


def test_mean_score_in_a_pool_takes_the_most_picked_and_breaks_ties_by_the_draw() -> None:
    committee = CommitteeConfig(count=3, aggregate="mean_score")
    seen = set()
    for seed in range(40):
        decision = committee_decision(
            committee, evaluation(8, 3), PICKS, [{}] * 3, None, random.Random(seed)
        )
        labels = decision.labels or ()
        assert len(labels) == 3 and {2, 3} <= set(labels)  # 3 votes and 2 votes
        seen.add(labels)
    # The third place goes to one of the four documents with one vote, by the seeded draw.
    assert {tuple(sorted({2, 3, x})) for x in (1, 4, 5, 6)} == seen


def test_mean_score_of_single_readings_applies_advance_to_the_mean() -> None:
    committee = CommitteeConfig(count=2, aggregate="mean_score", score="score")
    answers = [{"score": 6, "note": "a"}, {"score": 9, "note": "b"}]
    decision = committee_decision(
        committee, evaluation(1, 0), [[], [1]], answers, "score >= 7.5", random.Random(0)
    )
    assert decision.labels == (1,) and decision.support == (7.5,)
    lower = committee_decision(
        committee, evaluation(1, 0), [[], [1]], answers, "score > 7.5", random.Random(0)
    )
    assert lower.labels == ()


def test_a_member_without_a_valid_answer_leaves_the_evaluation_undecided() -> None:
    committee = CommitteeConfig(count=2, aggregate="any")
    decision = committee_decision(
        committee, evaluation(8, 3), [[1, 2, 3], None], [{}, None], None, random.Random(0)
    )
    assert decision.labels is None


def _random_decisions(rng: random.Random, pools: int, size: int, k: int) -> list[Decision]:
    decisions = []
    for _ in range(pools):
        members = [rng.sample(range(1, size + 1), k) for _ in range(3)]
        decisions.append(
            committee_decision(
                CommitteeConfig(count=3, aggregate="majority"),
                evaluation(size, k),
                members,
                [{}] * 3,
                None,
                rng,
            )
        )
    return decisions


def test_global_top_k_advances_the_k_best_supported_documents_of_the_stage() -> None:
    rng = random.Random(3)
    for trial in range(30):
        decisions = _random_decisions(rng, 6, 8, 3)
        k = rng.randint(1, 20)
        apply_selection(SelectionConfig(rule="global_top_k", k=k), decisions, lambda e, i: "", rng)
        chosen = [d.support[i - 1] for d in decisions for i in d.labels or ()]
        left = [d.support[i] for d in decisions for i in range(8) if i + 1 not in (d.labels or ())]
        assert len(chosen) == k, trial
        assert min(chosen) >= max(left)


def test_four_fifths_adds_the_fewest_best_supported_documents_of_groups_below() -> None:
    rng = random.Random(5)
    corrected = 0
    for trial in range(60):
        decisions = _random_decisions(rng, 10, 8, 3)
        groups = {
            (id(d.evaluation), i): rng.choices("abc", weights=(5, 3, 2))[0]
            for d in decisions
            for i in range(1, 9)
        }
        before = {(id(d.evaluation), i) for d in decisions for i in d.labels or ()}
        apply_selection(
            SelectionConfig(rule="four_fifths", by="race"),
            decisions,
            lambda e, i, known=groups: known[(id(e), i)],
            random.Random(trial),
        )
        after = {(id(d.evaluation), i) for d in decisions for i in d.labels or ()}
        assert before <= after  # documents are only added
        support = {(id(d.evaluation), i + 1): s for d in decisions for i, s in enumerate(d.support)}
        read = {g: sum(v == g for v in groups.values()) for g in "abc"}
        rate = {g: sum(groups[x] == g for x in after) / read[g] for g in "abc" if read[g]}
        pooled = {g: sum(groups[x] == g for x in before) / read[g] for g in "abc" if read[g]}
        top = max(pooled.values())
        assert max(rate.values()) == pytest.approx(top)  # no group pushed past the highest
        for g in rate:
            assert rate[g] >= 0.8 * top - 1e-12
            added = [x for x in after - before if groups[x] == g]
            # The fewest: exactly enough to reach 0.8 of the highest rate (from below).
            needed = max(math.ceil(0.8 * top * read[g] - 1e-9) - round(pooled[g] * read[g]), 0)
            assert len(added) == needed, (trial, g)
            waiting = [support[x] for x in groups if groups[x] == g and x not in after]
            if added and waiting:
                assert min(support[x] for x in added) >= max(waiting)
            corrected += bool(added)
    assert corrected > 10  # the draws put groups below four-fifths often


def test_a_single_reader_supports_what_it_advanced() -> None:
    decision = single_decision(evaluation(4, 2), [3, 1])
    assert decision.labels == (1, 3) and decision.support == (1.0, 0.0, 1.0, 0.0)
    assert single_decision(evaluation(4, 2), None).labels is None
