"""Scaled-down seed-002 studies on the embedded SmolLM2 model (``-m model``): CLG and CBG write
real letters, and the letters kind writes its tables and figures with well-formed numbers,
whatever the small model wrote. The success filter is off: the 135M model seldom writes
"recommend" within 120 tokens, and with it on nothing would be left to analyse."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from biasim.scenarios import builtin_path

BIASIM = [sys.executable, "-m", "biasim"]
ANALYSIS = (
    "analyses:\n"
    "  - {kind: letters, name: letters, stage: write, group: gender, compare: [male, female],"
    " salient_threshold: 1, n_permutations: 999, n_bootstrap: 200, success_filter: false%s}\n"
)


def _run(study: Path, out: Path) -> dict:
    done = subprocess.run(
        [*BIASIM, "run", str(study), "--out", str(out)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr + done.stdout
    results = pd.read_parquet(out / "results.parquet")
    assert not results["synthetic"].any() and set(results["backend"]) == {"local"}
    assert results["text"].fillna("").str.len().min() > 20
    summary = json.loads((out / "summary.json").read_text())["analyses"][0]
    tables = out / "tables"
    exclusions = pd.read_csv(tables / "letters_exclusions.csv")
    assert exclusions["letters"].sum() == len(results)  # every letter kept or counted
    style = pd.read_csv(tables / "letters_style.csv")
    assert list(style["dimension"]) == ["positive", "formal", "agentic"]
    for g in ("male", "female"):
        shares = style[f"mean_{g}"].dropna()
        assert ((shares >= 0) & (shares <= 1)).all()
    assert style["p_student"].dropna().between(0, 1).all()
    lexicon = pd.read_csv(tables / "letters_lexicon.csv")
    # A category no letter hits is not estimable (NaN), every other has a ratio and a p.
    hit = lexicon["hits_male"] + lexicon["hits_female"] > 0
    assert lexicon.loc[~hit, ["odds_ratio", "p_permutation"]].isna().all().all()
    assert (lexicon.loc[hit, "odds_ratio"] > 0).all()
    assert lexicon.loc[hit, "p_permutation"].between(0, 1).all()
    weat = pd.read_csv(tables / "letters_weat.csv")
    assert list(weat["test"]) == ["MF", "CF"]
    ok = weat[weat["excluded"].isna()]
    assert ok["effect_size"].abs().le(2).all() and ok["p_value"].between(0, 1).all()
    assert (out / "figures" / "letters.png").stat().st_size > 10_000
    assert (out / "figures" / "letters_weat.png").stat().st_size > 10_000
    print(json.dumps({k: summary[k] for k in ("letters", "style", "lexicon", "weat")}, default=str))
    return summary


@pytest.mark.model
def test_scaled_down_clg_runs_on_the_embedded_model(tmp_path: Path) -> None:
    study = tmp_path / "clg.yaml"
    study.write_text(
        f"extends: {builtin_path('wan2023_letters')}\n"
        "name: small_clg\n"
        "roles:\n  writer: {max_tokens: 120}\n"
        # One age and one occupation (`only` picks from the base's levels), two letters a gender.
        "design:\n  agents_per_value: 2\n"
        "  only: {age: {age_years: '30'}, occupation: {occupation_word: chef}}\n" + ANALYSIS % ""
    )
    _run(study, tmp_path / "run")


@pytest.mark.model
def test_scaled_down_cbg_runs_on_the_embedded_model(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from tests.tiny_models import build_tiny_bert

    seeds = pd.read_csv(
        builtin_path("wan2023_letters_cbg").parent / "data" / "wan2023_biographies.csv"
    )
    seeds.iloc[:2].to_csv(tmp_path / "bios.csv", index=False)
    nli = build_tiny_bert(tmp_path / "nli", ["entailment", "neutral", "contradiction"], [0, 5, 0])
    study = tmp_path / "cbg.yaml"
    study.write_text(
        f"extends: {builtin_path('wan2023_letters_cbg')}\n"
        "name: small_cbg\n"
        "roles:\n  writer: {max_tokens: 120}\n"
        "biographies: {file: bios.csv}\n" + ANALYSIS % f", pair: biography, nli: {nli}"
    )
    out = tmp_path / "run"
    summary = _run(study, out)
    hal = pd.read_csv(out / "tables" / "letters_hallucination.csv")
    assert set(hal["dimension"]) == {"positive", "formal", "agentic"}
    for col in ("mean_hallucinated", "mean_full"):
        assert hal[col].dropna().between(0, 1).all()
    # The NLI stand-in finds nothing entailed: every sentence of every letter is hallucinated.
    shares = pd.read_csv(out / "tables" / "letters_shares.csv")
    assert (shares["n_hallucinated"] == shares["n_sentences"]).all()
    assert (shares["n_sentences"] > 0).all()
    assert (out / "figures" / "letters_hallucination.png").stat().st_size > 10_000
    assert set(summary["letters"].values()) <= {1, 2, 3, 4}
