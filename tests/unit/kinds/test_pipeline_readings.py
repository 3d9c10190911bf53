"""Which shown documents a reading advanced: read from the results' ``advanced`` labels in
Arrow, and label by label (the reference) where Arrow cannot read a label as an integer."""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest

from biasim.simulator.kinds.pipeline import _chosen, _chosen_one_by_one

ODD_LABELS = [" 2", "3_0", "+1", "x", "1.0", "\u0663"]


def _labels(rng: random.Random, odd: bool) -> str | None:
    r = rng.random()
    if r < 0.1:
        return None
    if r < 0.15:
        return ""
    if odd and r < 0.25:
        return rng.choice(ODD_LABELS)
    parts = [str(rng.randint(-1, 9)) for _ in range(rng.randint(1, 3))]
    return "|".join(parts) + ("|" if rng.random() < 0.1 else "")


@pytest.mark.parametrize("dtype", ["str", object])
@pytest.mark.parametrize("odd", [False, True])
def test_arrow_reads_the_labels_as_one_by_one_does(dtype: object, odd: bool) -> None:
    rng = random.Random(7)
    for trial in range(300):
        sizes = np.array([rng.randint(1, 8) for _ in range(rng.randint(0, 30))], dtype=np.int64)
        starts = np.cumsum(sizes) - sizes
        advanced = pd.Series([_labels(rng, odd) for _ in sizes], dtype=dtype)
        try:
            expected = _chosen_one_by_one(advanced.tolist(), starts, sizes)
        except ValueError:
            with pytest.raises(ValueError):
                _chosen(advanced, starts, sizes)
            continue
        assert np.array_equal(_chosen(advanced, starts, sizes), expected), trial


def test_labels_out_of_range_or_repeated_mark_nothing_twice() -> None:
    sizes = np.array([3, 2], dtype=np.int64)
    starts = np.array([0, 3])
    advanced = pd.Series(["1|1|4", "0|2"], dtype="str")
    assert _chosen(advanced, starts, sizes).tolist() == [True, False, False, False, True]
