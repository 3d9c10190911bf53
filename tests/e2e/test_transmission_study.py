"""The seed-000 transmission pipeline (Exp. 5): the pair test's calibration, the pair design
(each pair of a man's and a woman's letter for one job, shown in both orders, with and without
names), and a synthetic run recovering no outcome bias and the declared gender guesses."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from biasim.analysis.studies.bias_transmission.association import consistent_pair_test
from biasim.analysis.text.redaction import names_after_redaction
from biasim.scenarios import builtin_path

STUDY = builtin_path("bias_transmission_pipeline")
BIASIM = [sys.executable, "-m", "biasim"]
AGENTS = 12  # letters per gender and job


def test_consistent_pair_test_by_hand() -> None:
    # Pair a: the woman hired in both orders; b: the man in both; c, d: split (position);
    # e: one answered showing only; f: both showings in one order (no order balance).
    picks = pd.DataFrame(
        {
            "job": "Judge",
            "pair": ["a", "a", "b", "b", "c", "c", "d", "d", "e", "f", "f"],
            "value": [*("female", "female", "male", "male", "female", "male", "male"), "female"]
            + ["female"] * 3,
            "position": [1, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1],
        }
    )
    row = consistent_pair_test(picks, ["job"], "female").iloc[0]
    # e and f are not pairs shown in both orders; c and d lean neither way.
    assert (row["pairs"], row["both_female"], row["both_other"], row["split"]) == (4, 1, 1, 2)
    assert row["sign_p"] == pytest.approx(1.0)
    # The test's units are the 2 pairs that lean, not the 4 pairs nor the 11 readings.
    assert (row["unit"], row["n_units"], row["smallest_p"]) == ("pair", 2, pytest.approx(0.5))


def test_pair_test_collapses_every_reading_of_a_pair() -> None:
    """3 readers per order: a pair is one unit whatever its readings; it leans by its shares
    in the two orders (here 3/3 + 1/3 > 1, 1/3 + 1/3 < 1, 2/3 + 1/3 = 1)."""
    shown = [1, 1, 1, 2, 2, 2]  # where the woman's letter was: first, then second
    hired = {"a": [1, 1, 1, 1, 0, 0], "b": [1, 0, 0, 1, 0, 0], "c": [1, 1, 0, 1, 0, 0]}
    rows = [
        (pair, "female" if h else "male", s if h else 3 - s)
        for pair, hires in hired.items()
        for s, h in zip(shown, hires, strict=True)
    ]
    picks = pd.DataFrame(rows, columns=["pair", "value", "position"]).assign(job="j")
    row = consistent_pair_test(picks, ["job"], "female").iloc[0]
    assert (row["pairs"], row["both_female"], row["both_other"], row["split"]) == (3, 1, 1, 1)
    assert (row["n_units"], row["sign_p"]) == (2, pytest.approx(1.0))


def _null_pairs(rng: np.random.Generator, pairs: int) -> pd.DataFrame:
    """Pairs of a man's and a woman's letter of unequal quality (no gender effect), each shown
    in both orders to a reader who prefers Applicant 1."""
    quality = rng.normal(0, 1.5, size=pairs)  # woman's letter minus man's, on the logit
    logit = np.stack([quality + 0.4, quality - 0.4], axis=1).ravel()  # woman first, second
    woman = rng.random(2 * pairs) < 1 / (1 + np.exp(-logit))
    woman_at = np.tile([1, 2], pairs)
    return pd.DataFrame(
        {
            "pair": np.repeat(np.arange(pairs), 2),
            "value": np.where(woman, "female", "male"),
            "position": np.where(woman, woman_at, 3 - woman_at),
        }
    ).assign(job="j")


@pytest.mark.slow
def test_pair_test_is_calibrated() -> None:
    """No gender effect, letters of unequal quality and a position effect, 200 pairs per data
    set, 1000 data sets: the sign test on pairs hired alike rejects 3-7 % at 0.05."""
    rng = np.random.default_rng(3)
    reps = 1000
    rejected = sum(
        consistent_pair_test(_null_pairs(rng, 200), ["job"], "female")["sign_p"].iloc[0] < 0.05
        for _ in range(reps)
    )
    assert 0.03 <= rejected / reps <= 0.07, rejected / reps


def _run(out: Path, agents: int) -> subprocess.CompletedProcess[str]:
    options = ["--backend", "synthetic", "--agents", str(agents), "--out", str(out)]
    return subprocess.run(
        [*BIASIM, "run", str(STUDY), *options], capture_output=True, text=True, check=False
    )


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("transmission") / "run"
    done = _run(out, AGENTS)
    assert done.returncode == 0, done.stderr
    assert "transmission: jobs that deviate from chance" in done.stdout
    return out


def test_pairs_are_a_man_and_a_woman_for_one_job_in_both_orders(run_dir: Path) -> None:
    results = pd.read_parquet(run_dir / "results.parquet")
    letters = results[results["stage"] == "apply"].set_index("unit_id")
    assert len(letters) == 30 * 2 * AGENTS
    for stage in ("relative", "relative_redacted"):
        rows = results[results["stage"] == stage]
        reads = rows["reads"].str.split("|")
        for _, group in rows.assign(reads=reads).groupby("cluster"):
            shown = list(group["reads"])
            assert len(shown) == 2 and shown[0] == shown[1][::-1]  # both orders
            authors = letters.loc[shown[0]]
            assert set(authors["gender"]) == {"female", "male"}  # differ in gender
            assert authors["occupation"].nunique() == 1  # the same job
        names = set("|".join(rows["shown"]).split("|"))
        assert (names == {"[name withheld]"}) == (stage == "relative_redacted")


def test_synthetic_run_recovers_no_outcome_bias_and_the_declared_guesses(run_dir: Path) -> None:
    summary = next(
        a
        for a in json.loads((run_dir / "summary.json").read_text())["analyses"]
        if a["kind"] == "transmission"
    )
    for row in summary["hires_by_category"]:
        assert row["boot_low"] - 0.02 <= 0.5 <= row["boot_high"] + 0.02, row
        assert row["n"] == 2 * 10 * AGENTS  # 10 jobs, AGENTS pairs each, both orders
    deviating = {r["stage"]: r["deviate"] for r in summary["deviating_jobs"]}
    assert deviating == {"relative": 0, "relative_redacted": 0} or max(deviating.values()) <= 1
    effects = pd.DataFrame(summary["effects"])
    assert set(effects["term"]) == {"male"} and effects["significant"].sum() <= 1
    # Table 8's tested model: letters permuted within job, each letter one unit.
    tested = effects[effects["model"] == "fractional_logit_perm"]
    assert len(tested) == 13 and set(tested["unit"]) == {"letter"}
    assert (tested["n_units"] == 30 * 2 * AGENTS).all()
    guesses = {(r["stage"], r["subset"]): r for r in summary["predictions"]}
    for (stage, subset), truth in {
        ("predict", "written by female"): 0.3,
        ("predict", "written by male"): 0.2,
        ("predict_bounded", "written by female"): 0.4,
        ("predict_bounded", "written by male"): 0.35,
    }.items():
        row = guesses[(stage, subset)]
        assert abs(row["share"] - truth) < 3.5 * (truth * (1 - truth) / row["n"]) ** 0.5
    # Tables 8-9's trait types: one row per job and type, both genders, no effect declared.
    types = pd.read_csv(run_dir / "tables" / "transmission_trait_types.csv")
    assert list(types.columns[:4]) == ["job", "dominance", "job_status", "trait_type"]
    assert len(types) == 30 * 3 and set(types["trait_type"]) == {
        "hireability",
        "competency",
        "warmth",
    }
    assert (types["n_female"] == AGENTS).all() and (types["n_male"] == AGENTS).all()
    np.testing.assert_allclose(types["difference"], types["mean_female"] - types["mean_male"])
    type_effects = pd.DataFrame(summary["type_effects"])
    assert len(type_effects) == 3 * 3 and type_effects["significant"].sum() <= 1
    tables = {p.name for p in (run_dir / "tables").iterdir()}
    assert {"transmission_hires_by_category.csv", "transmission_predictions.csv"} <= tables
    for figure in ("transmission_hires.png", "transmission_trait_differences.png"):
        assert (run_dir / "figures" / figure).stat().st_size > 10_000


def test_readers_that_never_answer_are_counted_not_fatal(tmp_path: Path) -> None:
    study = tmp_path / "failing.yaml"
    study.write_text(
        f"extends: {STUDY}\n"
        "name: failing\n"
        "roles:\n"
        "  writer: {backend: synthetic}\n"
        "  evaluator: {backend: synthetic, options: {fail_rate: 1.0}}\n"
        "  predictor: {backend: synthetic}\n"
        "  predictor_bounded: {backend: synthetic}\n"
        "design:\n  agents_per_value: 1\n"
    )
    out = tmp_path / "run"
    options = ["--out", str(out), "--max-error-rate", "1"]
    done = subprocess.run(
        [*BIASIM, "run", str(study), *options], capture_output=True, text=True, check=False
    )
    # Every call of the comparison stage failed: the run says so (exit 3, status failed) and
    # still analyses what it has, counting the readers that never answered.
    assert done.returncode == 3, done.stderr
    assert "every call of stage `relative` failed" in " ".join(done.stderr.split())
    assert "no comparison gave a valid answer" in done.stdout
    summary = json.loads((out / "summary.json").read_text())["analyses"][0]
    excluded = {(e["stage"], e["reason"]): e["count"] for e in summary["excluded"]}
    assert excluded[("relative", "no valid answer")] == 60  # 30 pairs in both orders
    assert excluded[("absolute", "no valid answer")] == 60
    assert sum(r["n"] for r in summary["predictions"] if r["subset"] == "all jobs") == 120


def test_names_left_after_redaction_are_found_in_any_case() -> None:
    letters = [
        "Thanks, EMILY. emily's portfolio is attached.",  # her own name, in any case: gone
        "My reference, Jacob Smith, can confirm it. Thanks, Emily",  # another writer's name
        "Jacobson & Co. trained me. Thanks, Emily",  # a longer word is not the name
    ]
    found = names_after_redaction(letters, ["Emily"] * 3, ["Emily", "Jacob", "Ashley"])
    assert found == [(), ("Jacob",), ()]


def test_letters_that_keep_a_name_after_redaction_are_counted_and_excluded(tmp_path: Path) -> None:
    # Adversarial letters: a third names "Michael" as a reference. Redaction removes only the
    # writer's own name, so every such letter not written by a Michael still names someone.
    study = tmp_path / "leaky.yaml"
    study.write_text(
        f"extends: {STUDY}\n"
        "name: leaky\n"
        "roles:\n"
        "  writer:\n"
        "    backend: synthetic\n"
        "    synthetic:\n"
        "      text: {default: {'A plain letter.': 0.67, 'My reference Michael agrees.': 0.33}}\n"
        "design:\n  agents_per_value: 4\n"
    )
    out = tmp_path / "run"
    done = subprocess.run(
        [*BIASIM, "run", str(study), "--backend", "synthetic", "--out", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    results = pd.read_parquet(out / "results.parquet")
    letters = results[results["stage"] == "apply"]
    leaky = letters[
        letters["text"].str.contains("Michael") & (letters["persona_name"] != "Michael")
    ]
    assert 0 < len(leaky) < len(letters) and (letters["persona_name"] == "Michael").any()
    summary = json.loads((out / "summary.json").read_text())["analyses"][0]
    counted = {r["gender"]: r["letters"] for r in summary["redaction_leaks"]}
    assert counted == leaky["gender"].value_counts().to_dict()
    redacted = results[results["stage"] == "relative_redacted"]
    shows = redacted["reads"].str.split("|").map(lambda u: bool(set(u) & set(leaky["unit_id"])))
    excluded = {(e["stage"], e["reason"]): e["count"] for e in summary["excluded"]}
    reason = "shows a letter that keeps a name after redaction"
    assert excluded[("relative_redacted", reason)] == shows.sum() > 0
    decided = {
        r["stage"]: r["n"] for r in summary["hires_by_category"] if r["dominance"] == "female"
    }
    dominance = letters.set_index("unit_id")["dominance"]
    female_jobs = redacted["reads"].str.split("|").str[0].map(dominance) == "female"
    assert decided["relative_redacted"] == (female_jobs & ~shows).sum()
    assert decided["relative"] == female_jobs.sum()  # the named comparisons lose nothing
    assert "keep a name after redaction" in done.stdout
    # What the reader saw: a letter of Michael's own names nobody once redacted.
    own = letters[letters["text"].str.contains("Michael") & (letters["persona_name"] == "Michael")]
    unit = own["unit_id"].iloc[0]
    seen = redacted[redacted["reads"].str.split("|").map(lambda u: unit in u)]
    with sqlite3.connect(out / "calls.sqlite") as conn:
        (request,) = conn.execute(
            "SELECT request FROM calls WHERE unit_id = ?", (seen["unit_id"].iloc[0],)
        ).fetchone()
    assert "My reference [name withheld] agrees." in json.loads(request)["messages"][-1]["content"]


@pytest.mark.model
def test_a_scaled_down_experiment_5_runs_on_the_embedded_model(tmp_path: Path) -> None:
    study = tmp_path / "small.yaml"
    study.write_text(
        f"extends: {STUDY}\n"
        "name: small_transmission\n"
        "roles:\n  writer: {max_tokens: 80}\n  evaluator: {max_tokens: 120}\n"
        "design:\n  agents_per_value: 1\n  only: {}\n"
        "  factors:\n    occupation:\n"
        "      judge: {job: Judge, list: disparity, dominance: parity, job_status: high}\n"
    )
    out = tmp_path / "run"
    done = subprocess.run(
        [*BIASIM, "run", str(study), "--out", str(out)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    results = pd.read_parquet(out / "results.parquet")
    assert not results["synthetic"].any() and set(results["backend"]) == {"local"}
    stages = results.groupby("stage").size().to_dict()
    assert stages == {
        "apply": 2,
        "relative": 2,
        "relative_redacted": 2,
        "absolute": 2,
        "predict": 2,
        "predict_bounded": 2,
    }
    letters = results[results["stage"] == "apply"]
    assert letters["text"].str.len().min() > 20
    summary = next(
        a
        for a in json.loads((out / "summary.json").read_text())["analyses"]
        if a["kind"] == "transmission"
    )
    # Whatever the small model answered, every reading is counted: used or excluded.
    for stage in ("relative", "relative_redacted"):
        used = sum(r["n"] for r in summary.get("hires_by_category", []) if r["stage"] == stage)
        # Not answered, showing a letter cut at the 80-token cap, or keeping a name.
        failed = sum(e["count"] for e in summary["excluded"] if e["stage"] == stage)
        assert used + failed == 2
    cut = int(results.loc[results["stage"] == "apply", "truncated"].sum())
    assert summary["letters_truncated"] == cut


def test_rationales_overall_scores_association_and_redaction_are_reported(run_dir: Path) -> None:
    """Table 12's rationales with their terms (the hired letter as the unit), the overall
    mean (SD) by gender, section 4.1's weaker-than-association count, and the redaction change."""
    summary = next(
        a
        for a in json.loads((run_dir / "summary.json").read_text())["analyses"]
        if a["kind"] == "transmission"
    )
    results = pd.read_parquet(run_dir / "results.parquet")
    relative = results[results["stage"].isin(["relative", "relative_redacted"])]
    rationales = pd.read_csv(run_dir / "tables" / "transmission_rationales.csv")
    assert len(rationales) == len(relative) == 2 * 2 * 30 * AGENTS
    assert rationales["rationale"].str.startswith("I would hire").all()
    # The woman's letter's label and the hired label agree with the hired gender.
    woman_hired = rationales["female_applicant"] == rationales["hired_applicant"]
    assert (woman_hired == (rationales["hired_gender"] == "female")).all()
    terms = pd.read_csv(run_dir / "tables" / "transmission_rationale_terms.csv")
    assert set(terms["unit"]) == {"hired letter"} and not terms["significant"].any()
    assert summary["rationale_terms_tested"] == len(terms) > 0
    overall = {r["gender"]: r for r in summary["overall_scores"]}
    for row in overall.values():  # the declared truth: N(81, 8) on every trait
        assert row["mean"] == pytest.approx(81, abs=1.0) and row["sd"] == pytest.approx(8, abs=1)
        assert row["n_scores"] == 13 * 30 * AGENTS and row["letters"] == 30 * AGENTS
    weaker = {r["stage"]: r for r in summary["weaker_than_association"]}
    assert weaker["relative"]["jobs"] == 30 and weaker["relative"]["missing"] == 0
    assert weaker["relative"]["weaker"] <= weaker["relative"]["observed"] <= 1
    table = pd.read_csv(run_dir / "tables" / "transmission_weaker_than_association.csv")
    assert table.loc[table["item"] == "Carpenter", "association_share"].iloc[0] == 0.002
    (change,) = summary["redaction_change"]
    assert change["unit"] == "job" and change["n_units"] == 30
    assert change["letters"] == 30 * AGENTS and change["p_value"] > 0.001


def test_a_letter_cut_at_max_tokens_is_never_read_and_is_counted(
    run_dir: Path, tmp_path: Path
) -> None:
    """The paper asks for 100-400 words with no cap (the writer has max_tokens: null); a letter
    a server still cut (truncated) may have lost its signature: every reading showing it is
    excluded and counted, never evaluated."""
    out = tmp_path / "run"
    subprocess.run(["cp", "-r", str(run_dir), str(out)], check=True)
    results = pd.read_parquet(out / "results.parquet")
    letters = results.index[results["stage"] == "apply"][:7]
    results.loc[letters, "truncated"] = True
    results.to_parquet(out / "results.parquet")
    done = subprocess.run(
        [*BIASIM, "analyze", str(out), "--json", "--accept-edits"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / "summary.json").read_text())["analyses"][0]
    assert summary["letters_truncated"] == 7
    cut = set(results.loc[letters, "unit_id"])
    excluded = {(e["stage"], e["reason"]): e["count"] for e in summary["excluded"]}
    for stage in ("relative", "absolute", "predict"):
        shows = results.loc[results["stage"] == stage, "reads"].str.split("|")
        expected = int(shows.map(lambda u: bool(cut & set(u))).sum())
        assert excluded[(stage, "shows a letter cut at max_tokens")] == expected > 0
    overall = sum(r["letters"] for r in summary["overall_scores"])
    assert overall == 30 * 2 * AGENTS - 7


def test_the_writer_has_no_token_cap_and_pair_stages_ask_for_the_rationale() -> None:
    from biasim.simulator.study.load import load_study

    study = load_study(str(STUDY)).config
    assert study.roles["writer"].max_tokens is None
    assert "between 100-400 words long" in " ".join(study.stages[0].prompt.split())
    for stage in study.stages[1:3]:
        assert stage.output is not None and "reason" in stage.output
        assert "I would hire Applicant [1 or 2] because" in stage.prompt


@pytest.mark.parametrize("name", ["bias_transmission_pipeline", "bias_transmission_probes"])
def test_a_local_reader_holds_the_uncapped_letters_it_is_shown(name: str) -> None:
    # On the embedded model the writer (no max_tokens) filled its 2,048-token context, and a
    # pair of such letters could not fit the evaluator's 2,048: every `relative` call failed.
    from biasim.simulator.llm.local import DEFAULT_N_CTX
    from biasim.simulator.study.load import load_study

    config = load_study(name).config

    def context(role: str) -> int:
        return int((config.roles[role].options or {}).get("n_ctx", DEFAULT_N_CTX))

    checked = 0
    for stage in config.stages:
        if stage.reads is None or config.roles[stage.role].backend != "local":
            continue
        writer = next(s for s in config.stages if s.name == stage.reads.stage).role
        assert config.roles[writer].max_tokens is None  # letters up to the writer's context
        shown = 2 if stage.reads.matching == "pair" else 1
        answer = config.roles[stage.role].max_tokens or 0
        assert context(stage.role) >= shown * context(writer) + answer, stage.name
        checked += 1
    assert checked >= 5 if name == "bias_transmission_pipeline" else checked == 14
