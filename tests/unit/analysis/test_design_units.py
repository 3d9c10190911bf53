"""One derivation of the unit (issue 43): a persona across scenarios and replicates is one unit,
and every test, model estimate and bound of a decision analysis counts the same units.

The GEE used to cluster on the agent id without its replicate, which still held the design
cell: 60 personas answering 4 scenarios were 240 "units", and its test flagged 30 % of null
contrasts. Calibration: the issue's design (3 genders x 20 personas x 4 scenarios x 5
replicates, persona sd 1.5 on the logit, no group effect), the persona's propensity shared by
its scenarios, as the synthetic responder's ``unit: persona`` draws it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from biasim.analysis.stats import cases as case_stats
from biasim.analysis.stats import unit_models
from biasim.analysis.stats.excess import excess_dpd_test
from biasim.analysis.stats.units import UNIT_COLUMNS, design_units, unit_counts
from biasim.scenarios import builtin_path

GENDERS = np.array(["female", "male", "non-binary"])


def test_a_persona_is_its_id_without_condition_and_replicate() -> None:
    rows = pd.DataFrame(
        {
            "agent_id": [
                "scenario=a,pc=x/gender=female/03/r0",
                "scenario=b,pc=x/gender=female/03/r4",
                "gpt/scenario=a,pc=x/gender=female/03/r1",
                "pool1/gpt/default/gender=male/00/r0",
                "xdefault/default/gender=male/01/r0",
            ],
            "condition": [
                "scenario=a,pc=x",
                "scenario=b,pc=x",
                "scenario=a,pc=x",
                "default",
                "default",
            ],
            "persona_name": ["Ann", "Ann", "Ann", None, None],
        }
    )
    assert design_units(rows, "persona").tolist() == [
        "gender=female/03",
        "gender=female/03",
        "gpt/gender=female/03",
        "pool1/gpt/gender=male/00",
        "xdefault/gender=male/01",  # a prefix holding the condition's text is kept
    ]
    names = design_units(rows, "name")
    assert names.iloc[:3].tolist() == ["Ann"] * 3 and pd.isna(names.iloc[3])
    with pytest.raises(ValueError, match="no design unit"):
        design_units(rows, "email")


def null_decisions(
    rng: np.random.Generator, personas: int = 20, scenarios: int = 4, replicates: int = 5
) -> pd.DataFrame:
    """One null study in the shape of a decision analysis's rows: ids as the design writes them
    (``condition/persona-key/index/replicate``), the persona's propensity in every scenario."""
    effect = rng.normal(0.0, 1.5, (3, personas))
    g, p, s, r = np.indices((3, personas, scenarios, replicates)).reshape(4, -1)
    hit = rng.random(g.size) < 1 / (1 + np.exp(-effect[g, p]))
    condition = np.char.add("scenario=s", s.astype(str))
    slot = [f"gender={GENDERS[a]}/{b:02d}/r{c}" for a, b, c in zip(g, p, r, strict=True)]
    return pd.DataFrame(
        {
            "agent_id": [f"{c}/{t}" for c, t in zip(condition, slot, strict=True)],
            "condition": condition,
            "model_label": "m",
            "scenario": s,
            "attribute": "gender",
            "value": GENDERS[g],
            "_hit": hit,
            "valid": True,
        }
    )


@pytest.mark.slow
def test_gee_clusters_on_the_persona_across_scenarios_and_holds_its_level() -> None:
    """The issue's done-when: 30 seeds of its design flag <= 10 % of contrasts with 60 units;
    200 seeds more hold 3-7 % (400 contrasts, Monte Carlo error about 1.2 points)."""
    flags = []
    for seed in range(230):
        rows = null_decisions(np.random.default_rng(seed))
        rows["persona_id"] = design_units(rows, "persona")
        table = unit_models.gee_odds_ratios(rows, "value", "_hit", "persona_id", "scenario")
        assert set(table["n_units"]) == {60} and table["converged"].all()
        flags.extend(table["p_value"] < 0.05)
        if seed == 29:
            assert np.mean(flags) <= 0.10, np.mean(flags)
    assert 0.03 <= np.mean(flags) <= 0.07, np.mean(flags)


@pytest.mark.slow
@pytest.mark.parametrize("replicates", [5, 1])
def test_excess_over_chance_holds_its_level_when_personas_answer_every_scenario(
    replicates: int,
) -> None:
    """``p_excess`` with the persona's propensity in each of its 4 scenarios: the cases it
    answers are relabelled together (drawn case by case it rejected 11 % of 200 null studies
    here with 5 replicates; with 1 replicate, 7 % of 200, 5 % relabelled together)."""
    rng = np.random.default_rng(43)
    implicit, explicit = [], []
    cols = ["model_label", "scenario", "attribute"]
    for study in range(400):
        rows = null_decisions(rng, replicates=replicates).assign(model_label=study)
        implicit.append(rows.assign(persona_id=design_units(rows, "persona")))
        answers = rng.choice(["0", "1", "2", "Unknown"], size=(4, 300))
        scenario = np.repeat(np.arange(4), 300)
        explicit.append(
            pd.DataFrame(
                {"model_label": study, "scenario": scenario, "attribute": "gender"}
            ).assign(answer=answers.ravel(), valid=True)
        )
    rows = pd.concat(implicit, ignore_index=True)
    rates = case_stats.case_rates(rows, cols, "value", "_hit", True)
    units = unit_counts(rows, [*cols, "value"], ["persona_id"], "_hit")
    x_rates = case_stats.explicit_rates(
        pd.concat(explicit, ignore_index=True), cols, labels={"gender": ["0", "1", "2"]}
    )
    result = excess_dpd_test(rates, x_rates, cols, cols, n_simulations=199, implicit_units=units)
    assert len(result) == 400
    rate = (result["p_excess"] < 0.05).mean()
    assert 0.03 <= rate <= 0.07, rate


STUDY = """\
extends: {base}
name: units_check
roles:
  decider:
    backend: synthetic
    synthetic:
      decision:
        unit: persona
        unit_sd: 1.5
        default: {{Evacuate: 0.5, Stay: 0.5}}
design:
  agents_per_value: 5
  replicates: 2
  factors:
    situation: {{a: {{}}, b: {{}}, c: {{}}}}
analyses:
  - name: parity
    kind: demographic_parity
    stage: decide
    field: decision
    target: Evacuate
    by: gender
    cases: [situation]
"""


@pytest.mark.slow
def test_every_route_of_a_decision_analysis_counts_the_same_units(tmp_path: Path) -> None:
    """The built-in seed-004 study asked in 3 situations with replicates: the DPD test of each
    case, the GEE and the mixed model, and the exclusion bounds all name the persona and count
    the 15 personas (3 genders x 5) that the results hold."""
    from biasim.simulator.engine.runner import RunOptions, execute, prepare

    study = tmp_path / "study.yaml"
    study.write_text(STUDY.format(base=builtin_path("emergency_response")))
    out = tmp_path / "run"
    execute(prepare(RunOptions(study=str(study), out=out)))
    results = pd.read_parquet(out / "results.parquet")
    decided = results[results["stage"] == "decide"]
    personas = design_units(decided, "persona").nunique()
    assert personas == 15
    cases = pd.read_csv(out / "tables" / "parity_cases.csv")
    assert set(cases["unit"]) == {UNIT_COLUMNS["persona"]} and set(cases["n_units"]) == {personas}
    models = pd.read_csv(out / "tables" / "parity_model_estimates.csv")
    assert set(models["unit"]) == {UNIT_COLUMNS["persona"]}
    assert set(models["n_units"]) == {personas}
    shutil.rmtree(out)


@pytest.mark.slow
def test_seed_004_grid_counts_the_same_personas_in_its_cases_and_its_models(tmp_path: Path) -> None:
    """The built-in seed-004 study (recorded small run: 3 axes analysed separately, 4
    scenarios, 3 persona conditions): per condition and attribute, the GEE, the mixed model and
    every case's DPD test count the same personas, the ones the results hold."""
    from biasim.simulator.engine.runner import reanalyze
    from tests.golden_studies import GOLDEN_DIR

    run = tmp_path / "run"
    run.mkdir()
    for file in ("results.parquet", "manifest.json"):
        shutil.copy(GOLDEN_DIR / "li2025_small" / file, run / file)
    reanalyze(run, accept_edits=True)  # the recorded run is from before results digests
    keys = ["model_label", "persona_condition", "attribute"]
    cases = pd.read_csv(run / "tables" / "decisions_cases.csv")
    models = pd.read_csv(run / "tables" / "decisions_model_estimates.csv")
    per_case = cases.groupby(keys)["n_units"].agg(["min", "max"])
    per_model = models.groupby(keys)["n_units"].agg(["min", "max"])
    assert (per_case["min"] == per_case["max"]).all() and len(per_model) == len(per_case)
    assert per_model["min"].equals(per_case["min"]) and per_model["max"].equals(per_case["max"])
    assert set(models["unit"]) == set(cases["unit"]) == {"persona_id"}
    results = pd.read_parquet(run / "results.parquet")
    decided = results[results["stage"] == "decide"]
    assert per_case["min"].groupby("attribute").first().to_dict() == {
        axis: decided.loc[decided[axis].notna()].pipe(design_units, "persona").nunique()
        for axis in ("gender", "race", "ideology")
    }
