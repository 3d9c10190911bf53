"""A market's openings go to a random draw of those advanced when more advance than there are
openings: the first pools read must not take every place (an independent review found 273 of
353 hires from the first pool of a committee market)."""

from __future__ import annotations

import random
from collections import Counter

from biasim.simulator.engine.market import fill_openings


def test_everyone_advanced_is_hired_when_they_fit_and_repeats_count_once() -> None:
    rng = random.Random(0)
    assert fill_openings(["a", "b", "a"], 2, rng) == ["a", "b"]
    assert fill_openings(["a", "b"], 5, rng) == ["a", "b"]


def test_each_advanced_position_is_equally_likely_to_be_hired() -> None:
    advanced = [f"pool{i}" for i in range(8)]
    rng = random.Random(1)
    counts = Counter(h for _ in range(4000) for h in fill_openings(advanced, 2, rng))
    # 8,000 places over 8 positions: 1,000 each expected, sd about 29 (binomial 4000, 1/4).
    assert all(abs(counts[p] - 1000) < 4 * 29 for p in advanced), counts
    # Kept in the order the evaluations were formed.
    assert fill_openings(advanced, 3, random.Random(2)) == sorted(
        fill_openings(advanced, 3, random.Random(2)), key=advanced.index
    )
