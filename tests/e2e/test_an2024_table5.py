"""Seed 001's Table 5 written by a run: every run draws the emails to label by hand (30 per model
and group, names redacted, label left empty); a run given them back labelled (`labelled:`)
writes validity and the classifier's precision / recall / F1 against the hand labels."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from sklearn.metrics import precision_recall_fscore_support

from biasim.scenarios import builtin_path
from biasim.simulator.common.errors import InputError
from biasim.simulator.engine.runner import RunOptions, execute, prepare
from biasim.simulator.study.load import load_study

OFFER = "Dear [NAME], we are pleased to offer you the position."
REJECT = "Dear [NAME], we regret to inform you that we will not be moving forward."
STUDY = f"""\
extends: {builtin_path("an2024_hiring")}
name: table5_small
roles:
  hiring_manager:
    backend: synthetic
    synthetic:
      text:
        default: {{"{OFFER}": 0.5, "{REJECT}": 0.4, "Thank you.": 0.1}}
design:
  agents_per_value: 3
  replicate_seeds: [11]
  only: {{job: {{subset7: "true"}}}}
  factors:
    template: {{t2: null, t3: null, t4: null, t5: null}}
    qualification: {{somewhat: null, not_qualified: null}}
"""


def _run(tmp_path: Path, name: str, extra: str = "") -> Path:
    study = tmp_path / f"{name}.yaml"
    study.write_text(STUDY + extra, encoding="utf-8")
    out = tmp_path / name
    execute(prepare(RunOptions(study=str(study), out=out)))
    return out


@pytest.mark.slow
def test_table5_is_the_classifier_against_the_hand_labels(tmp_path: Path) -> None:
    first = _run(tmp_path, "first")
    sample = pd.read_csv(first / "tables" / "hiring_annotation_sample.csv", keep_default_na=False)
    # 6 groups x 30 emails (of 42 each), nothing pre-labelled.
    assert sample.groupby(["race", "gender"]).size().tolist() == [30] * 6
    assert (sample["label"] == "").all() and sample["unit_id"].is_unique
    # The annotator's labels: the truth of each declared text, with 12 offers misread as
    # rejections: the classifier, right on every text, is scored against a known error.
    truth = sample["text"].map(
        lambda t: "accept" if "pleased" in t else "reject" if "regret" in t else "invalid"
    )
    offers = truth[truth == "accept"].index[:12]
    labels = truth.copy()
    labels[offers] = "reject"
    sample.assign(label=labels).to_csv(tmp_path / "labels.csv", index=False)

    extra = (
        "analyses:\n  - {kind: acceptance, name: hiring, stage: write, groups: [race, gender],\n"
    )
    extra += "     labelled: labels.csv}\n"
    second = _run(tmp_path, "second", extra)
    table5 = pd.read_csv(second / "tables" / "hiring_table5.csv")
    outcomes = pd.read_csv(second / "tables" / "hiring_outcomes.csv")
    assert len(table5) == 1 and table5.loc[0, "n_labelled"] == 180
    assert table5.loc[0, "validity"] == pytest.approx((labels != "invalid").mean())
    valid = labels != "invalid"
    predicted = sample["unit_id"].map(outcomes.set_index("unit_id")["outcome"])[valid]
    p, r, f, _ = precision_recall_fscore_support(
        labels[valid], predicted, labels=["accept", "reject"], zero_division=0
    )
    for metric, values in (("precision", p), ("recall", r), ("f1", f)):
        assert table5.loc[0, f"{metric}_accept"] == pytest.approx(values[0])
        assert table5.loc[0, f"{metric}_reject"] == pytest.approx(values[1])
    # The 12 misread offers: the classifier says accept where the annotator says reject.
    assert table5.loc[0, "recall_accept"] == 1.0 and table5.loc[0, "precision_accept"] < 1.0


def test_a_note_on_a_table_that_is_not_a_breakdown_is_refused_at_load(tmp_path: Path) -> None:
    study = tmp_path / "notes.yaml"
    study.write_text(
        STUDY
        + "analyses:\n  - {kind: acceptance, name: hiring, stage: write, groups: [race, gender],\n"
        + "     breakdowns: [qualification], breakdown_notes: {bls_education: why}}\n",
        encoding="utf-8",
    )
    with pytest.raises(InputError) as info:
        load_study(str(study))
    assert "breakdown_notes" in str(info.value) and "bls_education" in str(info.value)
