"""The counterfactual text figure (issue 45 item 4 of the cfconv brief): what a reader of the
built-ins' figures tripped on. A score every text shares drew a flat box on a ±0.04 axis that
read as a broken plot; the axes named no scorer; a score with few distinct values hid behind one
box; and the key ran past the canvas once it named the dots."""

from __future__ import annotations

import numpy as np
import pandas as pd

from biasim.analysis.text.counterfactual_figures import DOTS, plot_swap_scores
from tests.figure_bounds import clipped


def _scores(n: int) -> pd.DataFrame:
    rng = np.random.default_rng(1)
    return pd.DataFrame(
        {
            "cf_swap": np.repeat(["female", "male"], n),
            "sentiment_value": rng.choice([0.0, 0.94, 0.97], 2 * n),
            "agentic_value": np.zeros(2 * n),
        }
    )


def test_a_score_every_text_shares_is_said_and_each_axis_names_its_scorer() -> None:
    fig = plot_swap_scores(
        _scores(1200),
        "cf_swap",
        ["sentiment_value", "agentic_value"],
        "cf (model): scores by swapped value",
        {"sentiment_value": "vader score", "agentic_value": "agency_lexicon score"},
    )
    sentiment, agentic = fig.axes
    assert [t.get_text() for t in agentic.texts] == ["every text scores 0:\nnothing differs"]
    assert not sentiment.texts and not agentic.collections
    assert (sentiment.get_ylabel(), agentic.get_ylabel()) == ("vader score", "agency_lexicon score")
    ticks = [t.get_text() for t in sentiment.get_xticklabels()]
    assert ticks == ["female\n(n=1,200)", "male\n(n=1,200)"]
    # Every text a dot, one scatter per value.
    assert [len(c.get_offsets()) for c in sentiment.collections] == [1200, 1200]
    assert clipped(fig) == []


def test_dots_are_capped_per_value() -> None:
    fig = plot_swap_scores(_scores(DOTS + 500), "cf_swap", ["sentiment_value"], "cf")
    (ax,) = fig.axes
    assert [len(c.get_offsets()) for c in ax.collections] == [DOTS, DOTS]
    assert ax.get_ylabel() == "score"
