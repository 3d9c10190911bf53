"""What extending biasim costs: a built-in study is a folder and nothing else."""

from __future__ import annotations

import shutil
from pathlib import Path

from biasim.scenarios import STUDY_FILE, builtin_path, builtin_studies
from biasim.simulator.study.load import load_study
from tests.paths import ROOT

SCENARIOS = ROOT / "scenarios"


def test_every_folder_with_a_study_file_is_a_built_in_study_and_nothing_else_is() -> None:
    folders = {p.parent.name for p in SCENARIOS.glob(f"*/{STUDY_FILE}")}
    assert set(builtin_studies()) == folders
    assert all(builtin_path(name) == SCENARIOS / name / STUDY_FILE for name in folders)
    assert builtin_path("data") is None and builtin_path("../emergency_response") is None


def test_every_built_in_study_folder_has_a_readme() -> None:
    missing = [
        p.parent.name
        for p in SCENARIOS.glob(f"*/{STUDY_FILE}")
        if not (p.parent / "README.md").is_file()
    ]
    assert missing == []


def test_a_study_folder_loads_by_its_path_with_its_own_data(tmp_path: Path) -> None:
    source = builtin_path("bias_transmission_letters").parent
    folder = tmp_path / "my_letters"
    shutil.copytree(source, folder)
    study = load_study(str(folder))
    assert study.config.name == "bias_transmission_letters"
    assert study.path == str(folder / STUDY_FILE)


def test_a_variant_is_a_folder_that_extends_a_study_by_name(tmp_path: Path) -> None:
    folder = tmp_path / "quick_emergency"
    folder.mkdir()
    (folder / STUDY_FILE).write_text(
        "extends: emergency_response\nname: quick_emergency\ndesign: {agents_per_value: 1}\n"
    )
    study = load_study(str(folder))
    assert study.config.name == "quick_emergency"
    assert study.config.design.agents_per_value == 1
