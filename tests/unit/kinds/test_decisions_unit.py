"""`unit:` of the demographic_parity kind is validated with the study: a name needs a name bank."""

from __future__ import annotations

from pathlib import Path

import pytest

from biasim.simulator.common.errors import InputError
from biasim.simulator.study.load import load_study
from tests.unit.study.test_design_features import base_study, write


def test_unit_name_is_refused_without_a_name_bank(tmp_path: Path) -> None:
    data = base_study()
    data["analyses"] = [
        {
            "kind": "demographic_parity",
            "stage": "decide",
            "field": "decision",
            "target": "A",
            "by": "gender",
            "unit": "name",
        }
    ]
    with pytest.raises(InputError, match=r"unit: name` needs names from a name bank") as error:
        load_study(str(write(tmp_path / "s.yaml", data)))
    assert "s.yaml" in str(error.value) and "analyses[0].unit" in str(error.value)
