"""The market's social graph and the draws over it (referrals, reapplications)."""

from __future__ import annotations

import random

import numpy as np

from biasim.simulator.engine.referrals import draw_reapplicants, draw_referrals, homophily_graph
from biasim.simulator.study.market import NetworkConfig

GROUPS = ["f"] * 60 + ["m"] * 40


def network(degree: int, homophily: float) -> NetworkConfig:
    return NetworkConfig(model="homophily", degree=degree, homophily=homophily, by="gender")


def own_links(graph, groups: list[str]) -> np.ndarray:
    return np.array([sum(groups[j] == groups[i] for j in graph.successors(i)) for i in graph])


def test_each_person_makes_degree_links_a_share_within_their_group() -> None:
    graph = homophily_graph(GROUPS, network(4, 0.75), random.Random(1))
    assert sorted(graph.nodes) == list(range(100))
    # Out-degree exactly `degree`: no repeated link (a DiGraph would merge it) and no self-link.
    assert all(graph.out_degree(i) == 4 for i in graph)
    assert not any(graph.has_edge(i, i) for i in graph)
    assert (own_links(graph, GROUPS) == 3).all()  # 0.75 x 4 exactly


def test_a_fractional_share_is_met_in_expectation() -> None:
    """0.8 x 6 = 4.8 own links: 4 or 5 each, 4.8 on average within the sampling error."""
    groups = ["a"] * 1000 + ["b"] * 1000 + ["c"] * 1000
    own = own_links(homophily_graph(groups, network(6, 0.8), random.Random(2)), groups)
    assert set(own) == {4, 5}
    se = np.sqrt(0.8 * 0.2 / len(own))  # one Bernoulli(0.8) per person
    assert abs(own.mean() - 4.8) < 4 * se


def test_homophily_one_and_zero_keep_links_inside_and_outside() -> None:
    inside = homophily_graph(GROUPS, network(5, 1.0), random.Random(3))
    outside = homophily_graph(GROUPS, network(5, 0.0), random.Random(3))
    assert (own_links(inside, GROUPS) == 5).all() and (own_links(outside, GROUPS) == 0).all()


def test_the_graph_is_a_function_of_its_generator() -> None:
    first = homophily_graph(GROUPS, network(4, 0.5), random.Random(7))
    again = homophily_graph(GROUPS, network(4, 0.5), random.Random(7))
    other = homophily_graph(GROUPS, network(4, 0.5), random.Random(8))
    assert list(first.edges) == list(again.edges) and list(first.edges) != list(other.edges)


def test_employees_refer_free_neighbours_until_none_is_left() -> None:
    graph = homophily_graph(GROUPS, network(3, 0.5), random.Random(4))
    employees, excluded = [0, 1, 2], {int(next(iter(graph.successors(0))))}
    referrals = draw_referrals(graph, employees, excluded, 5, random.Random(5))
    assert len(referrals) == 5
    people = [r.person for r in referrals]
    assert len(set(people)) == 5  # nobody is referred twice in a cycle
    for r in referrals:
        assert r.referrer in employees and graph.has_edge(r.referrer, r.person)
        assert r.person not in employees and r.person not in excluded
    # Three employees know at most 9 people: asked for 20, they refer every free one.
    free = {j for e in employees for j in graph.successors(e)} - set(employees) - excluded
    everyone = draw_referrals(graph, employees, excluded, 20, random.Random(6))
    assert {r.person for r in everyone} == free


def test_reapplicants_are_the_rejected_not_employed_at_the_declared_rate() -> None:
    rejected = list(range(4000))
    again = draw_reapplicants(rejected, {1, 2, 3}, 0.25, random.Random(9))
    assert not {1, 2, 3} & set(again) and again == sorted(again)
    assert abs(len(again) / 3997 - 0.25) < 4 * np.sqrt(0.25 * 0.75 / 3997)
    assert again == draw_reapplicants(rejected, {1, 2, 3}, 0.25, random.Random(9))
