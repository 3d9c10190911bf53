"""Rationale terms (the `rationale_terms` kind, over the decisions `demographic_parity`
reads): a study names its term sets (none are inherited), `validate` says where they come from,
counts can be restricted to the units that chose an option, and agents' names are removed
before the distinctive-words scan."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from biasim.scenarios import builtin_path
from biasim.simulator.cli import app
from biasim.simulator.engine.runner import RunOptions, execute, prepare

# The synthetic responder writes one literal text per string field.
RATIONALE = "As Maria Lopez, I know Maria's children and our families come first."
STUDY = """\
extends: {base}
name: terms_check
roles:
  persona_writer:
    backend: synthetic
    synthetic: {{name: {{text: Maria Lopez}}}}
  agent:
    backend: synthetic
    synthetic:
      decision: {{by: gender, probabilities: {{Female: {{Evacuate: 1.0}}}},
                 default: {{Evacuate: 0.5, Stay: 0.5}}}}
      rationale: {{text: "{rationale}"}}
  formatter: {{backend: synthetic}}
personas: {{axes: {{race: null, ideology: null}}}}
design:
  agents_per_value: 12
  factors:
    scenario: {{authority_compliance: null, negative_information_sharing: null,
               career_path_selection: null}}
    persona_condition: {{no_persona: null, non_contextualized: null, explicit: null}}
analyses:
  - kind: {kind}
    name: decisions
    stage: decide
    field: decision
    target_from: target
    by: [gender]
    cases: [scenario]
{terms}
"""
TERMS = (
    "    terms: {field: rationale, term_sets: {family: [family, 'chil(d|dren)']},\n"
    "            chosen: target, names_from: [naming.name, persona.name]}"
)


def _study(tmp_path: Path, terms: str = TERMS, kind: str = "rationale_terms") -> Path:
    path = tmp_path / "study.yaml"
    path.write_text(
        STUDY.format(
            base=builtin_path("li2025_decisions"),
            rationale=RATIONALE,
            terms=terms,
            kind=kind,
        )
    )
    return path


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("terms")
    out = tmp / "run"
    execute(prepare(RunOptions(study=str(_study(tmp)), out=out)))
    return out


def test_counts_are_restricted_to_the_targeted_decision(run: Path) -> None:
    results = pd.read_parquet(run / "results.parquet")
    decide = results[(results["stage"] == "decide") & results["valid"].astype(bool)]
    counts = pd.read_csv(run / "tables" / "decisions_terms.csv").set_index("value")
    assert (counts["chosen"] == "target").all()
    for value, rows in decide.groupby("gender"):
        chose = int((rows["decision"] == "Evacuate").sum())
        assert counts.loc[value, "n_documents"] == chose
        assert counts.loc[value, "n_not_chosen"] == len(rows) - chose
        # Every rationale uses a family term: "children", and "families" (an inflection).
        assert counts.loc[value, "n_matching"] == chose
    assert counts.loc["Female", "n_not_chosen"] == 0


def test_names_are_removed_before_the_distinctive_words_scan(run: Path) -> None:
    results = pd.read_parquet(run / "results.parquet")
    decide = results[(results["stage"] == "decide") & results["valid"].astype(bool)]
    summary = json.loads((run / "summary.json").read_text())
    terms = summary["analyses"][0]["terms"]
    # "Maria", "Lopez" and "Maria's" in every rationale (the scan itself: test_analysis_terms).
    assert terms["name_words_removed"] == 3 * len(decide)
    assert terms["term_sets"] == "inline in the study file"
    assert terms["chosen"] == "target" and terms["inflections"] is True
    # The unit-level scan beside it: personas (replicates one unit), every rationale identical
    # here, so no word separates any group and nothing is significant.
    by_unit = pd.read_csv(run / "tables" / "decisions_distinctive_terms_by_unit.csv")
    assert set(by_unit["unit"]) == {"persona"} and not by_unit["significant"].any()
    assert (
        set(by_unit["value"]) == {"Female", "Male", "Non-binary"}
        and "unit persona" in terms["unit_test"]
    )


@pytest.mark.parametrize(
    ("terms", "expected"),
    [
        ("    terms: {field: rationale}", "analyses[0].terms.term_sets: required field is missing"),
        (
            "    terms: {field: rationale, term_sets: default}",
            "analyses[0].terms.term_sets: name the term sets instead of `default`: `li2025`",
        ),
        (
            "    terms: {field: rationale, term_sets: nowhere.yaml}",
            "analyses[0].terms.term_sets: term-set file `nowhere.yaml` not found",
        ),
        (
            "    terms: {field: rationale, term_sets: {bad: ['chil(d']}}",
            "analyses[0].terms.term_sets: term set `bad`: invalid regex `chil(d`",
        ),
        (
            "    terms: {field: rationale, term_sets: li2025, names_from: [persona]}",
            "analyses[0].terms.names_from[0]: `persona` is not `stage.field`",
        ),
    ],
)
def test_term_sets_must_be_named_and_usable(tmp_path: Path, cli, terms, expected) -> None:
    study = _study(tmp_path, terms)
    result = cli.invoke(app, ["validate", str(study)])
    assert result.exit_code == 2
    assert str(study) in result.stderr and expected in result.stderr


def test_validate_says_where_the_terms_come_from(tmp_path: Path, cli) -> None:
    sets = tmp_path / "my_terms.yaml"
    sets.write_text("care:\n  source: our pilot coding\n  terms: [care, family]\n")
    study = _study(tmp_path, "    terms: {field: rationale, term_sets: my_terms.yaml}")
    result = cli.invoke(app, ["validate", str(study)])
    assert result.exit_code == 0, result.output
    shown = " ".join(result.stdout.split())  # the console wraps long lines
    assert f"decisions: rationale term sets: file {sets}" in shown
    assert "care: our pilot coding" in shown
    builtin = " ".join(cli.invoke(app, ["validate", "li2025_decisions"]).stdout.split())
    assert "rationale term sets: bundled `li2025` (li2025_terms.yaml)" in builtin
    assert "family_members: Section 5.5" in builtin


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "analyses[0].predictions: predictions file `mine.yaml` not found"),
        ("predictions: 3\n", "expected a top-level `predictions` list"),
        ("predictions:\n  - {scenario: a}\n", "prediction 1 is missing"),
        ("predictions: [\n", "unusable predictions file"),
    ],
)
def test_a_predictions_file_is_loaded_at_validation_before_any_call(
    tmp_path: Path, cli, content, expected
) -> None:
    if content is not None:
        (tmp_path / "mine.yaml").write_text(content)
    study = _study(tmp_path, "    predictions: mine.yaml", kind="predictions_check")
    result = cli.invoke(app, ["validate", str(study)])
    assert result.exit_code == 2, result.output
    assert f"{study}:" in result.stderr and expected in result.stderr
    out = tmp_path / "run"
    ran = cli.invoke(app, ["run", str(study), "--backend", "synthetic", "--out", str(out)])
    assert ran.exit_code == 2 and not out.exists()
