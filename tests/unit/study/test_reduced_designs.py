"""Seed 001's reduced designs for Llama2-70b and GPT-3.5 (An et al. 2024, appendix C.1) as
studies that extend an2024_hiring, and `design.only`, which keeps the levels a CSV marks."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import yaml

from biasim.scenarios import builtin_path
from biasim.simulator.cli import app
from biasim.simulator.common.errors import InputError
from biasim.simulator.study.design import design_size
from biasim.simulator.study.load import load_study
from tests.paths import ROOT

ROLES_CSV = ROOT / "scenarios" / "an2024_hiring" / "data" / "an2024_roles.csv"


def _subset7() -> list[str]:
    """Footnote 2's seven roles, as the roles file marks them."""
    with ROLES_CSV.open(newline="") as handle:
        return [row["role"] for row in csv.DictReader(handle) if row["subset7"] == "true"]


@pytest.mark.parametrize(
    ("study", "templates", "size"),
    [
        ("an2024_hiring_llama2_70b", ["t1", "t2", "t3", "t4", "t5"], 5 * 7 * 4 * 300),
        ("an2024_hiring_gpt35", ["t1", "t2"], 2 * 7 * 4 * 300),
    ],
)
def test_reduced_designs_keep_seven_roles_and_one_seed(
    study: str, templates: list[str], size: int, cli
) -> None:
    full = load_study("an2024_hiring").config
    config = load_study(study).config
    factors = config.design.factors
    assert sorted(factors["job"]) == sorted(_subset7())
    assert len(factors["job"]) == 7 and "unspecified" in factors["job"]
    assert factors["job"]["mechanic"] == full.design.factors["job"]["mechanic"]
    assert list(factors["template"]) == templates
    assert factors["qualification"] == full.design.factors["qualification"]
    assert config.design.replicate_seeds == [11] and config.design.replicates == 1
    assert design_size(config) == size
    assert design_size(full) == 5 * 41 * 4 * 300 * 3
    result = cli.invoke(app, ["validate", study])
    assert result.exit_code == 0, result.output
    assert f"{size} agent(s)" in result.stdout.replace("\n", " ")


def test_gpt35_samples_with_the_papers_defaults() -> None:
    role = load_study("an2024_hiring_gpt35").config.roles["hiring_manager"]
    assert (role.temperature, role.top_p, role.max_tokens) == (0.6, 1.0, 256)
    role = load_study("an2024_hiring_llama2_70b").config.roles["hiring_manager"]
    assert (role.temperature, role.top_p, role.max_tokens) == (0.6, 0.9, 256)


def _extending(tmp_path: Path, only: dict) -> Path:
    path = tmp_path / "s.yaml"
    data = {"extends": str(builtin_path("an2024_hiring")), "design": {"only": only}}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _problems(path: Path) -> list:
    with pytest.raises(InputError) as info:
        load_study(path)
    return info.value.problems


def test_only_keeps_inline_levels_too(tmp_path: Path) -> None:
    path = _extending(tmp_path, {"qualification": {"qualification_sentence": ""}})
    assert list(load_study(path).config.design.factors["qualification"]) == ["not_stated"]


@pytest.mark.parametrize(
    ("only", "field", "message"),
    [
        (
            {"employer": {"size": "big"}},
            "design.only.employer",
            "`employer` is not a design factor",
        ),
        ({"job": {"seniority": "true"}}, "design.only.job.seniority", "no level of `job` defines"),
        ({"job": {"subset7": "yes"}}, "design.only.job", "no level of `job` has these values"),
        ({"job": {"subset7": True}}, "design.only.job.subset7", 'must be text, e.g. "true"'),
    ],
)
def test_only_naming_what_is_not_there_is_an_input_error(
    tmp_path: Path, only: dict, field: str, message: str
) -> None:
    path = _extending(tmp_path, only)
    (problem,) = _problems(path)
    assert problem.file == str(path) and problem.line is not None
    assert problem.field == field and message in problem.message
