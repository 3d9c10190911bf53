"""The social graph of a market and who it brings to apply: referrals and reapplications.

People are the applicants' population (the initial workforce and every hire come from it), so
the graph is built once over all of them and a hire keeps the links they had. Each function
takes its generator from the caller (a market draw keyed by seed, what and cycle), so the same
seed gives the same graph, referrals and reapplications.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from math import floor

import networkx as nx

from biasim.simulator.study.market import NetworkConfig


def homophily_graph(
    groups: Sequence[str], network: NetworkConfig, rng: random.Random
) -> nx.DiGraph:
    """Person ``i`` (``groups[i]`` their group) links to ``degree`` others without repeats:
    ``floor(h * degree)`` of their own group, one more with probability of the fraction left
    (so the expected share is exactly ``homophily``), the rest from the other groups, each drawn
    uniformly. Links are directed: ``i -> j`` means ``i`` knows ``j`` (and may refer them).
    Validation makes sure every group can supply its links."""
    members: dict[str, list[int]] = {}
    for i, group in enumerate(groups):
        members.setdefault(group, []).append(i)
    others = {g: [i for i, h in enumerate(groups) if h != g] for g in members}
    exact = network.homophily * network.degree
    edges: list[tuple[int, int]] = []
    for i, group in enumerate(groups):
        own_count = floor(exact) + (rng.random() < exact - floor(exact))
        own_count = min(own_count, len(members[group]) - 1)
        # One more than needed, in case the draw holds the person themself.
        drawn = rng.sample(members[group], min(own_count + 1, len(members[group])))
        own = [j for j in drawn if j != i][:own_count]
        other = rng.sample(others[group], network.degree - own_count)
        edges += [(i, j) for j in (*own, *other)]
    graph = nx.DiGraph()
    graph.add_nodes_from(range(len(groups)))
    graph.add_edges_from(edges)  # at once: a call per person costs more than the draws
    return graph


@dataclass(frozen=True)
class Referral:
    """A referred person and the employee who referred them (indices of people)."""

    person: int
    referrer: int


def draw_referrals(
    graph: nx.DiGraph,
    employees: Sequence[int],
    excluded: set[int],
    count: int,
    rng: random.Random,
) -> list[Referral]:
    """Up to ``count`` referrals: each time an employee drawn uniformly (with replacement)
    refers a neighbour drawn uniformly among those not employed and not ``excluded`` (already
    applying this cycle); an employee with no such neighbour is passed over. Fewer than
    ``count`` when no employee has anyone left to refer."""
    employed = set(employees)
    taken = set(excluded)
    pending = list(employees)
    out: list[Referral] = []
    while len(out) < count and pending:
        k = rng.randrange(len(pending))
        referrer = pending[k]
        free = [j for j in graph.successors(referrer) if j not in employed and j not in taken]
        if not free:
            pending[k] = pending[-1]
            pending.pop()
            continue
        person = free[rng.randrange(len(free))]
        taken.add(person)
        out.append(Referral(person, referrer))
    return out


def draw_reapplicants(
    rejected: Sequence[int], excluded: set[int], probability: float, rng: random.Random
) -> list[int]:
    """Earlier rejected applicants (in the order they were first rejected) who apply again:
    each one not ``excluded`` (employed) with ``probability``. Every candidate draws one
    number, so who reapplies does not change how the others draw."""
    draws = [(person, rng.random()) for person in rejected]
    return [person for person, u in draws if u < probability and person not in excluded]
