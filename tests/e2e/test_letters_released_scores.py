"""Per-letter style values already in the letters' table (scorer ``column``): the paper's
Table 4 test on the authors' own released classifier outputs, through ``analyze --texts``
(the released file is skipped when ../shared/reference is absent), and what the scorer refuses:
a column that is not there or not numbers, and anything that needs sentence labels."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from biasim.analysis.text.style_scorers import NO_VALUE, ColumnScores
from biasim.scenarios import builtin_path
from biasim.simulator.cli import app
from tests.paths import SHARED

REF = SHARED / "reference" / "biases-llm-reference-letters"
CLG_EVAL = REF / "evaluated_letters" / "chatgpt" / "clg" / "clg_letters-eval.csv"
needs_reference = pytest.mark.skipif(not CLG_EVAL.exists(), reason="Wan et al. data absent")

RELEASED = {"positive": "per_pos", "formal": "per_for", "agentic": "per_ac"}


def _style_file(path: Path, columns: dict[str, str], extra: str = "") -> Path:
    path.write_text(
        "".join(
            f"{dim}: {{scorer: column, options: {{column: {col}}}{extra}}}\n"
            for dim, col in columns.items()
        )
    )
    return path


def _texts_args(csv: Path, style: Path, *more: str) -> list[str]:
    return [
        "analyze", "--texts", str(csv), "--text-col", "chatgpt_gen", "--group-col", "gender",
        "--compare", "male,female", "--style", str(style), "--permutations", "99", *more,
    ]  # fmt: skip


@needs_reference
def test_table_4_on_the_authors_released_scores(tmp_path: Path, cli) -> None:
    style = _style_file(tmp_path / "released.yaml", RELEASED)
    out = tmp_path / "out"
    result = cli.invoke(app, [*_texts_args(CLG_EVAL, style), "--out", str(out)])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(out / "tables" / "texts_style.csv").set_index("dimension")
    # The oracle: the authors' ttest.py, scipy on the file's columns read here.
    released = pd.read_csv(CLG_EVAL)
    for dim, col in RELEASED.items():
        male = released.loc[released["gender"] == "male", col]
        female = released.loc[released["gender"] == "female", col]
        oracle = stats.ttest_ind(male, female, equal_var=True, alternative="greater").pvalue
        assert table.loc[dim, "p_student"] == pytest.approx(oracle, abs=1e-12)
        assert table.loc[dim, "n_male"] == 60 and table.loc[dim, "n_female"] == 60
        assert table.loc[dim, "scorer"] == "column"
    # No difference on the released CLG letters, by the authors' own classifiers.
    assert table["p_student"].round(3).tolist() == [0.187, 0.466, 0.467]
    printed = " ".join(result.output.split())
    assert "0.187" in printed and "0.466" in printed and "0.467" in printed


def test_blank_and_unreadable_values_are_counted_not_dropped() -> None:
    frame = pd.DataFrame({"s": ["0.5", "", None, "x", "inf", "1"]})
    shares = ColumnScores("s").shares(frame)
    assert shares["share"].iloc[[0, 5]].tolist() == [0.5, 1.0]
    assert shares["share"].iloc[1:5].isna().all()
    assert [None if pd.isna(r) else r for r in shares["excluded"]] == [
        None, NO_VALUE, NO_VALUE, "`s` is not a finite number", "`s` is not a finite number", None
    ]  # fmt: skip
    with pytest.raises(TypeError, match="labels no sentence"):
        ColumnScores("s").score(["A sentence."])


def _letters(path: Path, agentic: list[str]) -> Path:
    n = len(agentic)
    pd.DataFrame(
        {
            "chatgpt_gen": [f"I recommend letter {i} warmly." for i in range(n)],
            "gender": ["male", "female"] * (n // 2),
            "score": agentic,
            "bio": ["A bio."] * n,
        }
    ).to_csv(path, index=False)
    return path


def test_texts_column_scores_match_scipy_and_blank_cells_are_counted(tmp_path: Path, cli) -> None:
    values = ["0.9", "0.1", "0.7", "0.3", "0.8", "", "0.6", "0.2"]
    csv = _letters(tmp_path / "l.csv", values)
    style = _style_file(tmp_path / "s.yaml", {"agentic": "score"})
    out = tmp_path / "out"
    result = cli.invoke(app, [*_texts_args(csv, style), "--out", str(out)])
    assert result.exit_code == 0, result.output
    row = pd.read_csv(out / "tables" / "texts_style.csv").iloc[0]
    male = np.array([0.9, 0.7, 0.8, 0.6])
    female = np.array([0.1, 0.3, 0.2])
    oracle = stats.ttest_ind(male, female, equal_var=True, alternative="greater")
    assert row["p_student"] == pytest.approx(oracle.pvalue, rel=1e-12)
    assert row["n_missing"] == 1 and row["n_female"] == 3
    shares = pd.read_csv(out / "tables" / "texts_shares.csv")
    assert shares["agentic_excluded"].tolist().count(NO_VALUE) == 1


def test_texts_refuse_bad_columns_and_sentence_uses(tmp_path: Path, cli) -> None:
    csv = _letters(tmp_path / "l.csv", ["0.9", "0.1", "high", "0.3"])
    style = _style_file(tmp_path / "s.yaml", {"agentic": "score"})
    result = cli.invoke(app, _texts_args(csv, style))
    text = " ".join(result.output.split())
    assert result.exit_code == 2 and "l.csv:4: score: `high` is not a number" in text
    good = _letters(tmp_path / "g.csv", ["0.9", "0.1", "0.5", "0.3"])
    for given, more, expected in (
        (_style_file(tmp_path / "m.yaml", {"agentic": "nope"}), (), "naming a column"),
        (style, ("--premise-col", "bio", "--nli", "some-model"), "--premise-col cannot"),
        (
            _style_file(tmp_path / "lab.yaml", {"agentic": "score"}, f", labelled: {good}"),
            (),
            "labelled: cannot",
        ),
    ):
        result = cli.invoke(app, _texts_args(good, given, *more))
        text = " ".join(result.output.split())
        assert result.exit_code == 2 and expected in text, text
        assert "Traceback" not in result.output


def test_a_study_reads_a_design_column_and_refuses_what_needs_sentences(
    tmp_path: Path, cli
) -> None:
    study = tmp_path / "letters.yaml"
    head = (
        f"extends: {builtin_path('wan2023_letters')}\n"
        "analyses:\n  - kind: letters\n    name: letters\n    stage: write\n    group: gender\n"
        "    compare: [male, female]\n    weat: false\n"
    )
    study.write_text(head + "    style:\n      agentic: {scorer: column, options: {column: age}}\n")
    result = cli.invoke(app, ["validate", str(study)])
    assert result.exit_code == 0, result.output
    out = tmp_path / "run"
    result = cli.invoke(app, ["run", str(study), "--backend", "synthetic", "--out", str(out)])
    assert result.exit_code == 0, result.output
    row = pd.read_csv(out / "tables" / "letters_style.csv").iloc[0]
    shares = pd.read_csv(out / "tables" / "letters_shares.csv")
    results = pd.read_parquet(out / "results.parquet")
    ages = results[results["stage"] == "write"].set_index("agent_id")["age"].astype(float)
    # Each kept letter's value is its own row's age, and the test is scipy's on them.
    assert shares["agentic"].tolist() == ages.loc[shares["agent_id"]].tolist()
    male, female = (shares.loc[shares["gender"] == g, "agentic"] for g in ("male", "female"))
    oracle = stats.ttest_ind(male, female, equal_var=True, alternative="greater").pvalue
    assert row["scorer"] == "column" and row["p_student"] == pytest.approx(oracle, rel=1e-12)
    assert row["n_male"] + row["n_female"] == len(shares) > 100
    study.write_text(head + "    style:\n      agentic: {scorer: column, options: {column: x}}\n")
    result = cli.invoke(app, ["validate", str(study)])
    assert result.exit_code == 2 and "`x` is not a design factor" in result.output
    study.write_text(
        head + "    nli: some-nli-model\n    style:\n      agentic: {scorer: column, options: "
        "{column: age}, labelled: l.csv}\n"
    )
    result = cli.invoke(app, ["validate", str(study)])
    text = " ".join(result.output.split())
    assert result.exit_code == 2
    assert "hallucinated part of a letter cannot be scored" in text
    assert "it has no precision or recall" in text
