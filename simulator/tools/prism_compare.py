"""``biasim compare`` of PRISM runs scored with different masked LMs (the paper's Figures 6-7:
the same analysis under DistilBERT, BERT-base and BERT-large).

The masked LM is how a run is measured, not what it studies, so runs that differ only in a
``prism`` analysis's ``masked_lm`` are runs of the same study: the comparison scores each
run's texts with that run's masked LM (``masked_lm_by_model``) and shows the models side by
side with their own baselines (``<name>_models`` table and figure).
"""

from __future__ import annotations

import copy
import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from biasim.simulator.study.config import StudyConfig
from biasim.simulator.study.options import PRISM_KIND

_LM_FIELDS = ("masked_lm", "masked_lm_by_model")


def without_masked_lms(study: dict[str, Any]) -> dict[str, Any]:
    """A resolved study (a manifest's ``study``) with its PRISM analyses' masked LMs blanked,
    for telling whether two runs are of the same study."""
    out = copy.deepcopy(study)
    for analysis in out.get("analyses") or []:
        if isinstance(analysis, dict) and analysis.get("kind") == PRISM_KIND:
            for field in _LM_FIELDS:
                analysis.pop(field, None)
    return out


def _run_masked_lm(study: dict[str, Any], index: int, own_label: str) -> str | None:
    """The masked LM run ``study``'s analysis ``index`` scored ``own_label``'s texts with."""
    analysis = study["analyses"][index]
    by_model = analysis.get("masked_lm_by_model") or {}
    return by_model.get(own_label, analysis.get("masked_lm"))


def with_masked_lms_by_model(config: StudyConfig, runs: Sequence[Any]) -> StudyConfig:
    """``config`` whose PRISM analyses score each compared model's texts with the masked LM
    its run used, when the runs used different ones (``config`` itself otherwise).

    Args:
        config: The first run's study.
        runs: The compared runs (``manifest`` and ``labels``: own label -> comparison label).
    """
    analyses = list(config.analyses)
    changed = False
    for i, spec in enumerate(analyses):
        if spec.kind != PRISM_KIND:
            continue
        lm_of = {
            label: _run_masked_lm(run.manifest["study"], i, own)
            for run in runs
            for own, label in run.labels.items()
        }
        if len(set(lm_of.values())) > 1:
            known = {k: v for k, v in lm_of.items() if v is not None}
            analyses[i] = spec.model_copy(update={"masked_lm_by_model": known})
            changed = True
    return config.model_copy(update={"analyses": analyses}) if changed else config


def seed_caches(runs: Sequence[Any], out: Path) -> None:
    """Start the comparison's PRISM caches from the compared runs' own (score cache and
    baselines), so texts a run already scored with its masked LM are not scored again."""
    from biasim.simulator.kinds.prism import BASELINE_CACHE, SCORE_CACHE

    sources = [run.path / SCORE_CACHE for run in runs if (run.path / SCORE_CACHE).is_file()]
    baselines = [run.path / BASELINE_CACHE for run in runs]
    if not sources and not any(b.is_file() for b in baselines):
        return
    out.mkdir(parents=True, exist_ok=True)
    if sources:
        from biasim.analysis.text.scorers import ScoreCache

        ScoreCache(out / SCORE_CACHE).close()  # creates the table
        with sqlite3.connect(out / SCORE_CACHE) as db:
            for source in sources:
                db.execute("ATTACH DATABASE ? AS run", (str(source),))
                db.execute("INSERT OR IGNORE INTO scores SELECT * FROM run.scores")
                db.commit()
                db.execute("DETACH DATABASE run")
    merged: dict[str, Any] = {}
    for path in baselines:
        if path.is_file():
            merged |= json.loads(path.read_text(encoding="utf-8"))
    if merged:
        (out / BASELINE_CACHE).write_text(json.dumps(merged), encoding="utf-8")
