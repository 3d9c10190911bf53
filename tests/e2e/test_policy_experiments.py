"""Policy experiments on pipelines, end to end on the synthetic responder: a variant of a study
in a few lines (``extends`` merges stages by name), policies that read the same documents in
the same pools, the policy_effect analysis (summary, figure, report), refusals at validate
with the reason, ``compare`` and ``audit`` on pipeline runs, and the built-in
``hiring_policies`` recovering its declared redaction effect."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from biasim.simulator.cli import app
from biasim.simulator.study.load import load_study
from tests import pipeline_studies

POLICIES = {
    "redacted": {"description": "names withheld", "stages": {"screen": {"author": "redacted"}}},
    "shortlist4": {"description": "4 of 8", "stages": {"screen": {"select": 4}}},
}
EFFECT = {
    "kind": "policy_effect",
    "name": "policies",
    "stages": ["screen", "offer"],
    "groups": ["race", "gender"],
    "n_permutations": 200,
    "n_boot": 200,
}


def policy_study(**changes) -> dict:
    data = pipeline_studies.study(policies=POLICIES, **changes)
    data["analyses"] = [*data["analyses"], EFFECT]
    return data


def invoke(cli, *args: str):
    return cli.invoke(app, [str(a) for a in args])


def run(cli, tmp_path: Path, data: dict, name: str) -> tuple[Path, str]:
    path = pipeline_studies.write(tmp_path / f"{name}.yaml", data)
    out = tmp_path / name
    result = invoke(cli, "run", path, "--out", out)
    assert result.exit_code == 0, result.output
    return out, result.stdout


def test_extends_changes_one_stage_by_name_and_keeps_the_rest(tmp_path: Path) -> None:
    base = pipeline_studies.write(tmp_path / "base.yaml", pipeline_studies.study())
    variant = tmp_path / "variant.yaml"
    variant.write_text(
        "extends: base.yaml\nname: redacted_variant\nstages:\n"
        "  - name: screen\n    reads: {author: redacted}\n",
        encoding="utf-8",
    )
    study = load_study(variant)
    stages = {s.name: s for s in study.config.stages}
    assert list(stages) == ["apply", "screen", "offer"]
    assert stages["screen"].reads.author == "redacted"
    # Everything else of the stage is the base's.
    original = {s.name: s for s in load_study(base).config.stages}
    assert stages["screen"].prompt == original["screen"].prompt
    assert stages["screen"].reads.size == 8 and stages["screen"].select == 3
    assert stages["offer"] == original["offer"]


def test_a_stage_is_removed_explicitly_and_errors_keep_file_and_line(tmp_path: Path, cli) -> None:
    data = pipeline_studies.study()
    data["analyses"][0]["stages"] = ["screen"]
    pipeline_studies.write(tmp_path / "base.yaml", data)
    removed = tmp_path / "removed.yaml"
    removed.write_text(
        "extends: base.yaml\nname: no_offer\nstages:\n  - name: offer\n    remove: true\n",
        encoding="utf-8",
    )
    assert [s.name for s in load_study(removed).config.stages] == ["apply", "screen"]
    ghost = tmp_path / "ghost.yaml"
    ghost.write_text(
        "extends: base.yaml\nname: ghost\nstages:\n  - name: ghost\n    remove: true\n",
        encoding="utf-8",
    )
    result = invoke(cli, "validate", ghost)
    assert result.exit_code == 2
    assert f"{ghost}:5" in result.output and "has no stage `ghost`" in result.output
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "extends: base.yaml\nname: bad\nstages:\n  - name: screen\n    select: 9\n",
        encoding="utf-8",
    )
    result = invoke(cli, "validate", bad)
    assert result.exit_code == 2 and f"{bad}:5" in result.output and "select" in result.output


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"screen": {"size": 10}}, "a different pool size draws different pools"),
        ({"screen": {"role": "manager"}}, "a policy keeps the role"),
        ({"apply": {"prompt": "x"}}, "no reading stage named `apply`"),
        ({"screen": {"select": 8}}, "picking 8 of pools of 8 is no decision"),
        ({"screen": {"reader": "manager"}}, "a second reader (or a panel) is `readers:"),
        ({"screen": {"four_fifths": True}}, "rule is `selection: {rule: four_fifths, by:"),
        ({"screen": {"readers": {"count": 5, "aggregate": "any"}}}, "a committee of 5 needs"),
    ],
)
def test_a_policy_change_the_engine_cannot_apply_is_refused(
    tmp_path: Path, cli, change: dict, reason: str
) -> None:
    data = policy_study()
    data["policies"] = {"other": {"stages": change}}
    path = pipeline_studies.write(tmp_path / "study.yaml", data)
    result = invoke(cli, "validate", path)
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert reason in text and f"{path}:" in text and "policies" in text


def test_policy_effect_needs_policies(tmp_path: Path, cli) -> None:
    data = pipeline_studies.study()
    data["analyses"] = [EFFECT]
    result = invoke(cli, "validate", pipeline_studies.write(tmp_path / "s.yaml", data))
    assert result.exit_code == 2 and "declares no `policies:`" in result.output


def test_policies_read_the_same_documents_in_the_same_pools(tmp_path: Path, cli) -> None:
    out, stdout = run(cli, tmp_path, policy_study(), "run")
    results = pd.read_parquet(out / "results.parquet")
    # Documents are written once; every policy reads them in the same pools.
    assert (results["stage"] == "apply").sum() == 64
    pools = {
        stage: dict(
            zip(rows["cluster"], rows["reads"].map(lambda r: set(r.split("|"))), strict=True)
        )
        for stage, rows in results[results["stage"].str.startswith("screen")].groupby("stage")
    }
    assert set(pools) == {"screen", "screen__redacted", "screen__shortlist4"}
    assert pools["screen"] == pools["screen__redacted"] == pools["screen__shortlist4"]
    picked = results[results["stage"] == "screen__shortlist4"]["selected"].str.count(r"\|") + 1
    assert (picked == 4).all()
    summary = json.loads((out / "summary.json").read_text())
    section = next(a for a in summary["analyses"] if a["kind"] == "policy_effect")
    assert section["policies"] == ["base", "redacted", "shortlist4"]
    assert set(section["by_group"]) == {"race", "gender", "race_x_gender"}
    assert section["applicants"] == 64 and section["clusters"] == 8
    effects = pd.DataFrame(section["by_group"]["race_x_gender"]["effects"])
    assert set(effects["value"]) == {"Black|female", "Black|male", "White|female", "White|male"}
    assert set(effects["policy"]) == {"redacted", "shortlist4"}
    rates = pd.DataFrame(section["by_group"]["race"]["rates"])
    # The rates are direct counts of who was hired at the last stage of each policy.
    hired = results[results["stage"] == "offer__redacted"]["reads"].str.split("|").explode()
    assert rates.query("policy == 'redacted'")["selected"].sum() == len(
        results[results["stage"] == "offer__redacted"]
    )
    assert len(hired) == 3 * 8
    for name in ("race", "gender", "race-x-gender"):
        assert (out / "figures" / f"policies_impact_ratio_{name}.png").stat().st_size > 10_000
    html = (out / "report.html").read_text()
    assert "end-to-end impact ratio by race x gender, per policy" in html
    assert "policy effects by race, paired" in html
    text = " ".join(stdout.split())
    assert "policies: policy tests by race, paired, joint across groups" in text
    assert "policies: policy effects by race, paired: intervals" in text
    tests = pd.DataFrame(section["by_group"]["race_x_gender"]["tests"])
    # One joint test per policy; one hire per pool under each, so df <= 4 groups - 1.
    assert list(tests["policy"]) == ["redacted", "shortlist4"] and tests["df"].max() <= 3
    assert "policy tests by race, paired, joint across groups" in html
    small = "Small samples: the tables of `policies` rest on 8 first-stage pools (fewer than 30)"
    assert small in html and small in text  # the report's Limits and the console


def test_compare_and_audit_work_on_pipeline_runs(tmp_path: Path, cli) -> None:
    first, _ = run(cli, tmp_path, pipeline_studies.study(), "a")
    again, _ = run(cli, tmp_path, pipeline_studies.study(), "b")
    result = invoke(
        cli,
        "compare",
        first,
        again,
        "--label",
        f"a={first}",
        "--label",
        f"b={again}",
        "--out",
        tmp_path / "cmp",
    )
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "cmp" / "summary.json").read_text())
    assert set(summary["analyses"][0]["models"]) == {"a", "b"}
    redacted = pipeline_studies.study()
    redacted["stages"][1]["reads"]["author"] = "redacted"
    other, _ = run(cli, tmp_path, redacted, "c")
    args = ["compare", first, other, "--label", f"a={first}", "--label", f"c={other}"]
    result = invoke(cli, *args, "--out", tmp_path / "cmp2")
    assert result.exit_code == 2
    assert "stages.screen.reads.author: 'name' vs 'redacted'" in " ".join(result.output.split())
    result = invoke(cli, *args, "--force", "--out", tmp_path / "cmp3")
    assert result.exit_code == 0, result.output
    result = invoke(cli, "audit", first, "--format", "ll144")
    assert result.exit_code == 0, result.output
    [audit_json] = (first / "audit").glob("*/audit.json")
    audit = json.loads(audit_json.read_text())
    assert audit["source"]["kind"] == "test data" and "end to end" in audit["source"]["description"]
    assert {"sex", "race_ethnicity", "intersectional"} <= set(audit["tables"])
    hired = sum(r["n_selected"] for r in audit["tables"]["sex"])
    assert hired == 8  # one hire per pool of 8
    result = invoke(cli, "audit", first, "--stage", "screen", "--out", tmp_path / "aud")
    assert result.exit_code == 0, result.output
    screen = json.loads((tmp_path / "aud" / "audit.json").read_text())
    assert sum(r["n_selected"] for r in screen["tables"]["sex"]) == 8 * 3
    result = invoke(cli, "audit", first, "--stage", "apply", "--out", tmp_path / "aud2")
    assert result.exit_code == 2 and "no selecting stage" in result.output


def _hire_probabilities(pools: list[list[tuple[str, str]]], screen: dict, rng) -> list[np.ndarray]:
    """Each pool member's probability of being hired: 3 of 8 drawn by race weight, 1 of
    those by gender weight (men 1.5), by Monte Carlo successive sampling (an oracle
    independent of the responder's Gumbel top-k)."""
    cache: dict[tuple, np.ndarray] = {}
    out = []
    draws = 20_000
    for pool in pools:
        key = tuple(pool)
        if key not in cache:
            weights = np.tile([screen.get(r, 1.0) for r, _ in pool], (draws, 1))
            gender = np.tile([1.5 if g == "male" else 1.0 for _, g in pool], (draws, 1))
            rows = np.arange(draws)
            chosen = np.zeros((draws, len(pool)), dtype=bool)
            for _ in range(3):
                p = weights / weights.sum(axis=1, keepdims=True)
                pick = (p.cumsum(axis=1) < rng.random((draws, 1))).sum(axis=1)
                pick = pick.clip(max=len(pool) - 1)
                chosen[rows, pick] = True
                weights[rows, pick] = 0.0
            g = np.where(chosen, gender, 0.0)
            hire = g.cumsum(axis=1) / g.sum(axis=1, keepdims=True) < rng.random((draws, 1))
            winner = hire.sum(axis=1).clip(max=len(pool) - 1)
            cache[key] = np.bincount(winner, minlength=len(pool)) / draws
        out.append(cache[key])
    return out


@pytest.mark.slow
def test_hiring_policies_recovers_the_declared_redaction_effect(tmp_path: Path, cli) -> None:
    out = tmp_path / "run"
    result = invoke(cli, "run", "hiring_policies", "--backend", "synthetic", "--out", out)
    assert result.exit_code == 0, result.output
    results = pd.read_parquet(out / "results.parquet")
    authors = results[results["stage"] == "apply"].set_index("unit_id")
    screens = results[results["stage"] == "screen"]
    pools = [
        [(authors.loc[u, "race"], authors.loc[u, "gender"]) for u in r.split("|")]
        for r in screens["reads"]
    ]
    rng = np.random.default_rng(0)
    base = _hire_probabilities(pools, {"White": 1.5}, rng)
    redacted = _hire_probabilities(pools, {}, rng)
    members = pd.DataFrame(
        {
            "race": [r for pool in pools for r, _ in pool],
            "base": np.concatenate(base),
            "redacted": np.concatenate(redacted),
        }
    )
    truth = members.groupby("race")[["base", "redacted"]].mean()
    section = next(
        a
        for a in json.loads((out / "summary.json").read_text())["analyses"]
        if a["kind"] == "policy_effect"
    )
    effects = pd.DataFrame(section["by_group"]["race"]["effects"])
    found = effects[effects["policy"] == "redacted"].set_index("value")
    for race, row in found.iterrows():
        change = truth.loc[race, "redacted"] - truth.loc[race, "base"]
        # Within 3 standard errors (the 95% interval's half-width / 1.96): one run's three
        # 95% intervals all cover the truth only 86% of the time.
        se = (row["rate_change_high"] - row["rate_change_low"]) / (2 * 1.96)
        assert abs(row["rate_change"] - change) < 3 * se, (race, change, row["rate_change"])
    # The declared screening preference is what redaction removes: White rates fall.
    tests = pd.DataFrame(section["by_group"]["race"]["tests"]).set_index("policy")
    assert found.loc["White", "rate_change_high"] < 0 and tests.loc["redacted", "p_adjusted"] < 0.05
    text = " ".join(result.stdout.split())
    assert "end-to-end impact ratio by race x gender" in text
    assert "policies: policy effects by race, paired: intervals" in text


def test_show_prompts_renders_what_each_policy_sends(tmp_path: Path, cli) -> None:
    path = pipeline_studies.write(tmp_path / "s.yaml", policy_study())
    result = invoke(cli, "validate", path, "--show-prompts")
    assert result.exit_code == 0, result.output
    blocks = result.stdout.split("\n== ")
    screen = next(b for b in blocks if b.startswith("stages[1].prompt"))
    redacted = next(b for b in blocks if b.startswith("policies.redacted.stages.screen.prompt"))
    # Distinct placeholder documents under distinct placeholder names, labelled as run-time.
    names = [f"[name of applicant {i}]" for i in range(1, 9)]
    assert all(name in screen for name in names)
    assert "[document 3, written in stage `apply` at run time]" in screen
    # Redaction applied as the run applies it: no name, the marker instead.
    assert "[name withheld]" in redacted and "[name of applicant" not in redacted
    shortlist = next(b for b in blocks if b.startswith("policies.shortlist4.stages.screen"))
    assert "Pick 4 of 8" in shortlist


def test_power_says_when_a_policy_declares_no_effect_on_the_test_double(
    tmp_path: Path, cli
) -> None:
    # A rubric changes only the prompt: the synthetic responder does not read it, so its
    # effect on the test double is zero by construction; redaction hides the race the
    # screener's declared truth weighs.
    data = policy_study()
    data["policies"] = {
        "redacted": POLICIES["redacted"],
        "rubric": {"description": "a rubric", "stages": {"screen": {"system": "Use a rubric."}}},
    }
    data["analyses"] = [{**EFFECT, "groups": ["race"], "intersectional": False}]
    path = pipeline_studies.write(tmp_path / "s.yaml", data)
    out = tmp_path / "power"
    result = invoke(
        cli, "power", path, "--agents", "2", "--studies", "2", "--workers", "1", "--out", out
    )
    assert result.exit_code == 0, result.output
    # The rubric's row says so in the power column (folded by the table's width).
    rubric = result.stdout[result.stdout.index("rubric vs") :].splitlines()
    assert "0 %: no" in rubric[0] and "declared" in " ".join(rubric[1:3])
    # Beside each test, the unit its null swapped: the pools (2 per simulated study here).
    assert "cluster, 2" in rubric[0]
    rows = pd.read_csv(out / "power.csv").set_index("test")
    assert not rows.loc["rubric vs base: by race", "effect_declared"]
    assert np.isnan(rows.loc["rubric vs base: by race", "power"])
    assert rows.loc["redacted vs base: by race", "effect_declared"]
    assert not np.isnan(rows.loc["redacted vs base: by race", "power"])


def test_which_policies_declare_no_effect_on_the_test_double(tmp_path: Path) -> None:
    from biasim.simulator.kinds import get_kind

    data = policy_study()
    data["policies"] = {
        "rubric": {"stages": {"screen": {"prompt": "Rubric: pick {{ select }}."}}},
        "system": {"stages": {"offer": {"system": "Be fair."}}},
        "named": {"stages": {"screen": {"author": "name"}}},  # as base: no change
        "redacted": POLICIES["redacted"],
        "shortlist4": POLICIES["shortlist4"],
        # Another reader's draws, and a rule across pools: the double answers differently.
        "second": {"stages": {"screen": {"readers": {"count": 2, "aggregate": "any"}}}},
        "top": {"stages": {"offer": {"selection": {"rule": "global_top_k", "k": 4}}}},
    }
    data["analyses"] = [{**EFFECT, "groups": ["race"], "intersectional": False}]
    config = load_study(pipeline_studies.write(tmp_path / "s.yaml", data)).config
    spec = config.analyses[0]
    inert = get_kind("policy_effect").power_no_effect(spec, config)
    assert inert == {f"{p} vs base: by race" for p in ("rubric", "system", "named")}
    # Against a baseline the double answers differently under, nothing is inert.
    other = spec.model_copy(update={"baseline": "redacted"})
    assert get_kind("policy_effect").power_no_effect(other, config) == set()
