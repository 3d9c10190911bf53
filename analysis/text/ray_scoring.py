"""Scale a text scorer out with Ray Data: the same scorer, with its model loaded once per worker.

One executor for every registered scorer: PRISM's masked LM (33,000 posting/application pairs
are some 20 million masked predictions), the letters' classifiers, NLI and style scorers. The texts
go into a Ray dataset; ``map_batches`` hands batches of texts to a pool of worker actors, each
of which builds the scorer (and loads the masked LM) once and scores its batches with the
in-process code. On one machine ``ray.init()`` starts a local cluster; pointed at a cluster
address it spreads over its nodes. The scorer must be given by its registered name and options
(for PRISM: model path or hub id, word lists, alpha), not as an object, because each worker
builds its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from biasim.analysis.text.scorers import ScoreTable, create_scorer


class _ScorerWorker:
    """One Ray actor: builds the scorer once, then scores batches of texts."""

    def __init__(self, name: str, options: dict[str, Any], threads: int | None) -> None:
        if threads:
            import torch

            torch.set_num_threads(threads)
        self.scorer = create_scorer(name, **options)

    def __call__(self, batch: Any) -> Any:
        table = self.scorer.score(batch["text"].tolist())
        out = table.frame()
        out.insert(0, "row", batch["row"].to_numpy())
        return out


def score_with_ray(
    name: str,
    texts: Sequence[str],
    options: dict[str, Any],
    workers: int = 1,
    cpus_per_worker: float = 1,
    texts_per_batch: int = 64,
    threads: int | None = 1,
) -> ScoreTable:
    """Score ``texts`` on the Ray cluster ``ray.init`` connected to (a local one if none).

    Args:
        name: The registered scorer (``prism``, ``classifier``, ``nli``, ``vader`` ...).
        texts: The texts.
        options: The scorer's options (for PRISM: ``lm`` as a path or hub id, ``word_lists``,
            ``alpha``, ``batch_size``).
        workers: Worker actors, each holding one copy of the model.
        cpus_per_worker: CPUs Ray reserves per worker.
        texts_per_batch: Texts per ``map_batches`` batch.
        threads: torch threads per worker.

    Returns:
        The scores in the order of ``texts``, equal to the in-process scorer's.
    """
    import ray

    if not ray.is_initialized():
        ray.init()
    dataset = ray.data.from_items([{"row": i, "text": t} for i, t in enumerate(texts)])
    scored = dataset.map_batches(
        _ScorerWorker,
        fn_constructor_kwargs={"name": name, "options": options, "threads": threads},
        batch_size=texts_per_batch,
        batch_format="pandas",
        concurrency=workers,
        num_cpus=cpus_per_worker,
    ).to_pandas()
    scored = scored.sort_values("row")
    columns = tuple(c for c in scored.columns if c not in ("row", "excluded"))
    excluded = [None if pd.isna(e) else str(e) for e in scored["excluded"]]
    return ScoreTable(columns, scored[list(columns)].to_numpy(dtype=np.float64), excluded)
