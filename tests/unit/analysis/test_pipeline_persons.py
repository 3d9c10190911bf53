"""The pipeline's stage test where one person applies many times (a labour market whose rejected
applicants apply again): its unit is the person, calibrated under a null that keeps the
reapplication."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from biasim.analysis.stats.pipeline import PERSON, stage_table


def reapplying_market(rng: np.random.Generator, cycles: int = 20) -> pd.DataFrame:
    """The candidates of one market's hiring stage under "group has no effect": 60 people,
    half of each group (labels a random permutation), each with an appeal to readers drawn
    independently of the group (log-normal, sd 1.5: a name or a letter a reader likes). Each
    cycle a pool of 4 applies: earlier rejected applicants not hired come back with
    probability 0.8 (in order of their first application), the rest are drawn from those who
    never applied; the reader hires one, with probability proportional to appeal, who then
    never applies again."""
    people = 60
    group = rng.permutation(np.repeat(["female", "male"], people // 2))
    appeal = rng.lognormal(0.0, 1.5, people)
    fresh, rejected, rows = list(rng.permutation(people)), [], []
    for cycle in range(1, cycles + 1):
        pool = [p for p in rejected if rng.random() < 0.8][:4]
        while len(pool) < 4:
            pool.append(int(fresh.pop()))
        hired = pool[rng.choice(4, p=appeal[pool] / appeal[pool].sum())]
        for person in pool:
            rows.append((f"c{cycle}/{person}", person, group[person], person == hired, cycle))
            if person != hired and person not in rejected:
                rejected.append(person)
        if hired in rejected:
            rejected.remove(hired)
    columns = ["candidate", PERSON, "gender", "advanced", "cluster"]
    return pd.DataFrame(rows, columns=columns).assign(stage="offer")


def p_value(candidates: pd.DataFrame, seed: int) -> float:
    table = stage_table(candidates, ["offer"], "gender", n_permutations=999, seed=seed)
    return float(table["p_value"].iloc[0])


def test_the_unit_is_the_person_and_a_persons_rows_keep_one_label() -> None:
    candidates = reapplying_market(np.random.default_rng(1))
    assert candidates[PERSON].duplicated().any()  # people did apply again
    table = stage_table(candidates, ["offer"], "gender", n_permutations=99)
    assert table["test"].iloc[0] == "permutation_of_persons"
    assert table["unit"].iloc[0] == "person"
    assert table["n_units"].iloc[0] == candidates[PERSON].nunique()
    bad = candidates.copy()
    first = bad.index[bad[PERSON] == bad[PERSON].iloc[0]]
    bad.loc[first[0], "gender"] = "male" if bad.loc[first[1], "gender"] == "female" else "female"
    with pytest.raises(ValueError, match="person's applications carry different groups"):
        stage_table(bad, ["offer"], "gender", n_permutations=99)


def test_a_person_moving_as_a_whole_is_what_the_null_relabels() -> None:
    """Oracle: with three persons (two applications each, one group differing) the exact
    relabelling distribution has 3 equally likely placements of the odd person: DPDs 1 (the
    picked person alone), 0.5 and 0.5; p = P(DPD >= observed 1) = 1/3."""
    candidates = pd.DataFrame(
        {
            "candidate": ["a1", "a2", "b1", "b2", "c1", "c2"],
            PERSON: ["a", "a", "b", "b", "c", "c"],
            "gender": ["female", "female", "male", "male", "male", "male"],
            "advanced": [True, True, False, False, False, False],
            "cluster": ["p1", "p2", "p1", "p2", "p1", "p2"],
            "stage": "offer",
        }
    )
    table = stage_table(candidates, ["offer"], "gender", n_permutations=20_000, seed=3)
    assert abs(table["p_value"].iloc[0] - 1 / 3) < 0.015
    # Within pools, labels of one pool move apart from the other's: p = 1/9 there.
    within = stage_table(
        candidates.drop(columns=PERSON), ["offer"], "gender", n_permutations=20_000, seed=3
    )
    assert abs(within["p_value"].iloc[0] - 1 / 9) < 0.015


@pytest.mark.slow
def test_the_person_test_is_calibrated_where_the_pool_test_is_not() -> None:
    """300 markets of 20 cycles under the null above: the person test flags 3-7 % at 0.05;
    the within-pool test of the same candidates (each application its own draw of the group)
    flags more than 7 %, the anti-conservative p the person unit replaces."""
    rng = np.random.default_rng(46)
    markets = [reapplying_market(rng) for _ in range(300)]
    person = np.mean([p_value(m, i) < 0.05 for i, m in enumerate(markets)])
    pooled = np.mean([p_value(m.drop(columns=PERSON), i) < 0.05 for i, m in enumerate(markets)])
    print(f"flagged at 0.05: person {person:.1%}, within pool {pooled:.1%}")
    assert 0.03 <= person <= 0.07, person
    assert pooled > 0.07, pooled
