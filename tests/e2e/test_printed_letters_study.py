"""Seed 000's printed letters (Tables 2-3) as the built-in `bias_transmission_printed` sends them:
the data file holds the seed's four letters word for word, and every letter a synthetic run sends
is one of them, with no name in Experiment 3 and section 4's names in Experiment 4 and
supplemental 8, in place of the printed "Jessica Smith"."""

from __future__ import annotations

import csv
import json
import re
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from biasim.analysis.studies.bias_transmission import ceiling_effects
from biasim.scenarios import builtin_path
from biasim.simulator.engine.runner import RunOptions, execute, prepare
from biasim.simulator.kinds import get_kind
from biasim.simulator.study.load import load_study
from tests.paths import SHARED

STUDY = builtin_path("bias_transmission_printed")
LETTERS = STUDY.parent / "data" / "bias_transmission_printed_letters.csv"
SEED = SHARED / "seeds" / "000_f0400aa19949a666.txt"
PRINTED_NAME = "Jessica Smith"
#: Section 4: "a male (Christopher Smith) or female (Jennifer Smith) name in the signature".
NAMES = {"male": "Christopher Smith", "female": "Jennifer Smith"}
needs_seed = pytest.mark.skipif(
    not SEED.is_file(), reason="the seed text is not beside the checkout"
)


def _words(text: str) -> str:
    """Text as words and marks: the print's line breaks and the CSV's paragraphs are layout."""
    return " ".join(text.split())


def _printed() -> dict[tuple[str, str], str]:
    """(length, strong|weak) -> the letter as the seed prints it, read from its two-column
    tables (Table 2: unmatched, Table 3: matched), words hyphenated at a line end joined."""
    lines = SEED.read_text(encoding="utf-8").splitlines()
    starts = [
        i for i, line in enumerate(lines) if "Job\tLetter\tStrong Letter\tWeak Letter" in line
    ]
    assert len(starts) == 2, "the seed's Tables 2-3 were not found"
    letters = {}
    for start in starts:
        body = [line.split("\t") for line in lines[start + 2 :]]
        length = body[0][2].strip().lower()
        columns: dict[str, list[str]] = {"strong": [], "weak": []}
        for cells in body:
            if "for Experiments" in cells[3]:
                break  # the caption
            for column, cell in zip(("strong", "weak"), cells[3:5], strict=False):
                if cell.strip():
                    columns[column].append(cell.strip())
        for column, parts in columns.items():
            text = ""
            for part in parts:
                hyphenated = text.endswith("-") and part[:1].islower()
                text = text[:-1] + part if hyphenated else f"{text} {part}".strip()
            letters[(length, column)] = text
    return letters


def _expected(printed: str, name: str) -> str:
    """A printed letter as an experiment sends it: ``name`` in both places of the printed one,
    or, unsigned (Experiment 3), without the clause naming the writer and without signature."""
    if name:
        return printed.replace(PRINTED_NAME, name)
    unsigned = printed.replace(f"My name is {PRINTED_NAME} and ", "")
    assert unsigned.endswith(f"Sincerely, {PRINTED_NAME}")
    return unsigned.removesuffix(f" {PRINTED_NAME}")


def _name(experiment: str, group: str) -> str:
    return "" if experiment == "exp3" else NAMES[group]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A synthetic run of the study, two evaluations per letter pair and showing."""
    out = tmp_path_factory.mktemp("printed") / "run"
    execute(
        prepare(
            RunOptions(study="bias_transmission_printed", out=out, backend="synthetic", agents=2)
        )
    )
    return out


@pytest.fixture(scope="module")
def sent(run_dir: Path) -> list[dict[str, str]]:
    """Every letter the run sent, with what the design says it is."""
    out = run_dir
    results = pd.read_parquet(out / "results.parquet").set_index(["unit_id", "stage"])
    with sqlite3.connect(out / "calls.sqlite") as db:
        calls = db.execute("SELECT unit_id, stage, request FROM calls WHERE reask = 0").fetchall()
    letters = []
    for unit, stage, request in calls:
        (prompt,) = [m["content"] for m in json.loads(request)["messages"]]
        row = results.loc[(unit, stage)]
        if stage == "absolute":
            shown = [re.search(r"Here's the cover letter: (.*)\Z", prompt, re.S).group(1)]
        else:
            pair = r"\[Applicant 1\]\n(.*)\n\n\[Applicant 2\]\n(.*)\n\nAnswer in JSON"
            shown = list(re.search(pair, prompt, re.S).groups())
        for text, letter, group in zip(
            shown, (row["first"], row["second"]), (row["first_is"], row["second_is"]), strict=False
        ):
            design = {k: row[k] for k in ("length", "experiment")}
            name = _name(row["experiment"], group)
            letters.append({"text": text, "letter": letter, "name": name, "stage": stage, **design})
    return letters


@needs_seed
def test_the_data_file_holds_the_seeds_printed_letters_word_for_word() -> None:
    printed = _printed()
    rows = list(csv.DictReader(LETTERS.open(encoding="utf-8", newline="")))
    assert {(r["length"], r["seed_table"]) for r in rows} == {
        ("unmatched", "Table 2"),
        ("matched", "Table 3"),
    }
    for row in rows:
        for letter in ("strong", "weak"):
            data = _words(row[letter].replace("[SIGNATURE]", PRINTED_NAME))
            assert data == printed[(row["length"], letter)], (row["letters"], letter)


@needs_seed
def test_every_letter_sent_is_a_printed_letter_with_its_experiments_name(sent) -> None:
    printed = _printed()
    for letter in sent:
        expected = _expected(printed[(letter["length"], letter["letter"])], letter["name"])
        assert _words(letter["text"]) == expected, letter
    # All four printed letters reach every stage of every experiment that shows them.
    seen = {(x["experiment"], x["stage"], x["length"], x["letter"]) for x in sent}
    stages = {
        "exp3": ("relative", "absolute"),
        "exp4": ("relative", "absolute"),
        "s8": ("relative_equal",),
    }
    assert seen == {
        (e, s, length, letter)
        for e, names in stages.items()
        for s in names
        for length in ("matched", "unmatched")
        for letter in ("strong", "weak")
    }


def test_experiment_3_sends_no_name_and_experiment_4_names_the_writer_twice(sent) -> None:
    opening = (
        "Dear Hiring Manager, {}I am writing to express my interest in the open Nurse "
        "Practitioner position."
    )
    for letter in sent:
        text = _words(letter["text"])
        if letter["experiment"] == "exp3":
            assert "Smith" not in text and "My name is" not in text
            assert text.startswith(opening.format("")) and text.endswith("Sincerely,")
        else:
            name = letter["name"]
            assert text.startswith(opening.format(f"My name is {name} and "))
            assert text.endswith(f"Sincerely, {name}") and text.count("Smith") == 2


def _null_rejections(experiment: str, per: int, n_sets: int) -> float:
    """Share of true nulls the tested trait model rejects at 0.05 on the printed design: two
    pairs (the study's cluster), ``per`` scores per letter and condition, each score its own
    unit, clipped to 1-100. Experiment 3's null: strong and weak score alike (the pairs differ);
    Experiment 4's: names change nothing, the strong letter scores 20 points higher."""
    rng = np.random.default_rng(2024)
    pair = np.repeat([0, 1], 4 * per)
    if experiment == "exp3":  # strong, weak per pair (the two orders: 2 * per scores each)
        label = np.tile(np.repeat([1, 0], 2 * per), 2)
        mean = 62 + 10 * pair
    else:  # strong-male, strong-female, weak-male, weak-female per pair
        label = np.tile(np.repeat([1, 0, 1, 0], per), 2)
        mean = 62 + 20 * np.tile(np.repeat([1, 0], 2 * per), 2)
    rejected = 0
    for i in range(n_sets):
        score = np.clip(np.round(rng.normal(mean, 8)), 1, 100)
        p, _, _ = ceiling_effects.permutation_p(
            score, label, pair, np.arange(len(score)), n_permutations=200, seed=i
        )
        rejected += p < 0.05
    return rejected / n_sets


@pytest.mark.slow
def test_the_trait_test_within_pair_is_calibrated_in_exp3_and_not_liberal_in_exp4() -> None:
    per = load_study(STUDY).config.design.agents_per_value
    # Exactly exchangeable within pair: 3-7 %.
    assert 0.03 <= _null_rejections("exp3", per, 600) <= 0.07
    # The pair holds a strong and a weak letter, so relabelling names across them widens the
    # null: conservative (0 of 600 here; the study's README says so), never anti-conservative.
    assert _null_rejections("exp4", per, 600) <= 0.07


def test_power_reads_each_experiments_hire_test_and_any_trait_effect(run_dir: Path) -> None:
    # `biasim power` counts these; before, the kind named none and power printed an empty table.
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    letters = next(a for a in summary["analyses"] if a["name"] == "letters")
    tests = get_kind("letter_evaluation").power_tests(letters)
    relative = pd.read_csv(run_dir / "tables" / "letters_relative.csv").set_index("experiment")
    effects = pd.read_csv(run_dir / "tables" / "letters_effects.csv")
    tested = effects[effects["model"] == "fractional_logit_perm"].groupby("experiment")["p_value"]
    expected = {
        f"{e}: {r['share_of']} hired (vs 0.5)": r["p_value"] for e, r in relative.iterrows()
    }
    for experiment, p in tested:
        holm = min(1.0, p.min() * len(p))
        expected[f"{experiment}: any trait effect (holm over {len(p)} fits)"] = holm
    assert len(expected) == 4
    assert {name: t.p for name, t in tests.items()} == pytest.approx(expected)
    # Each states its unit: the letter pairs of the hire test (a pair's readings, both orders,
    # are one), the scores of the trait fits.
    for name, t in tests.items():
        assert t.unit == ("pair" if "hired" in name else "score") and t.n_units, name
    for experiment, row in relative.iterrows():
        hired = tests[f"{experiment}: {row['share_of']} hired (vs 0.5)"]
        assert hired.n_units == row["n_units"] <= row["pairs"] < row["n"]
