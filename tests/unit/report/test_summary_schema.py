"""``summary.json``'s JSON Schema: the copy in the docs is what the code prints, it refuses a
summary with a wrong type, a missing or undeclared field, and a kind's own part (built in or
plugged in) is checked on that kind's entries only."""

from __future__ import annotations

import copy
import io
import json
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any, ClassVar

import jsonschema
import pytest

from biasim.simulator.common.rundir import SUMMARY_SCHEMA_VERSION, write_summary
from biasim.simulator.kinds import AnalysisKind, register_kind, unregister_kind
from biasim.simulator.report import schema as summary_schema
from tests.paths import ROOT

DOCS = ROOT / "docs" / "reference"
#: A decision analysis's fields that are always there (a study whose decisions are all empty).
DECISIONS: dict[str, Any] = {
    "stage": "decide",
    "target": "yes",
    "field": "decision",
    "case_columns": ["model_label", "attribute"],
    "seed_paper": False,
    "cases_note": "DPD = max - min rate",
    "groups": [],
    "cases": [],
    "exclusions": [],
    "model_estimates": [],
    "share_figures": [],
    "grade_figures": [],
}

#: A small summary as a run writes it (the e2e test validates every built-in study's).
VALID: dict[str, Any] = {
    "schema_version": SUMMARY_SCHEMA_VERSION,
    "study": "toy",
    "synthetic": True,
    "units": 3,
    "status_counts": {"answered": 3},
    "models": ["synthetic:synthetic-responder"],
    "samples": [
        {
            "stage": "s",
            "model_label": "m",
            "axis": None,
            "group": None,
            "unit_id": "u",
            "answer": "a",
        }
    ],
    "analyses": [
        {"kind": "demographic_parity", "name": "decisions", **DECISIONS},
        {
            "kind": "association",
            "name": "pairs",
            "positive": "female",
            "alpha": 0.05,
            "adjust": "none",
            "items": [
                {
                    "item": "Nurse",
                    "n": 2,
                    "share": 1.0,
                    "ci_low": 0.34,
                    "ci_high": 1.0,
                    "p_value": 0.5,
                    "p_adjusted": 0.5,
                    "deviates": False,
                    "unit": "call",
                    "n_units": 2,
                }
            ],
            "item_status": [],
            "unused_lines": [],
            "validity": {
                "first_named": [
                    {
                        "value": "female",
                        "n_rows": 2,
                        "n_valid": 2,
                        "validity_rate": 1.0,
                        "ci_low": 0.34,
                        "ci_high": 1.0,
                        "validity_gap": None,
                        "validity_p_value": None,
                        "validity_test": "not tested: fewer than two groups",
                    }
                ]
            },
        },
    ],
    "status": "complete",
    "cost": {"total_usd": 0.0, "by_role": [], "limit_usd": None},
}


def _errors(summary: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft202012Validator(summary_schema.summary_schema())
    return [error.message for error in validator.iter_errors(summary)]


def _changed(change: Any) -> dict[str, Any]:
    summary = copy.deepcopy(VALID)
    change(summary)
    return summary


def test_the_docs_copy_is_what_the_module_prints() -> None:
    printed = io.StringIO()
    with redirect_stdout(printed):
        assert summary_schema.main() == 0
    assert (DOCS / "summary.schema.json").read_text(encoding="utf-8") == printed.getvalue()
    schema = json.loads(printed.getvalue())
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$id"].endswith(f":{SUMMARY_SCHEMA_VERSION}")
    page = (DOCS / "summary.md").read_text(encoding="utf-8")
    for field in schema["properties"]:
        assert f"| `{field}` |" in page, field


def test_a_valid_summary_passes() -> None:
    assert _errors(VALID) == []


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: s.update(units="3"), "'3' is not of type 'integer'"),
        (lambda s: s.pop("schema_version"), "'schema_version' is a required property"),
        (lambda s: s.update(schema_version=SUMMARY_SCHEMA_VERSION + 1), "was expected"),
        (lambda s: s.update(stray=1), "('stray' was unexpected)"),
        (lambda s: s["analyses"][0].pop("kind"), "'kind' is a required property"),
        (lambda s: s["analyses"][1].pop("items"), "'items' is a required property"),
        (lambda s: s["analyses"][1].update(adjust="sidak"), "'sidak' is not one of"),
        (
            lambda s: s["analyses"][1]["validity"]["first_named"][0].pop("n_valid"),
            "'n_valid' is a required property",
        ),
        (lambda s: s["cost"].update(total_usd="free"), "'free' is not of type"),
        (lambda s: s.update(status="done"), "'done' is not one of"),
    ],
)
def test_a_wrong_type_a_missing_or_an_undeclared_field_fails(change: Any, message: str) -> None:
    errors = _errors(_changed(change))
    assert any(message in e for e in errors), errors


def test_a_kinds_part_applies_to_its_own_entries_only() -> None:
    """An entry of another kind without ``items`` (and with an ``adjust`` association's part
    would refuse) passes; the association entry needs it."""
    entry = {"kind": "demographic_parity", "name": "x", **DECISIONS, "adjust": 3}
    assert _errors(_changed(lambda s: s["analyses"].append(entry))) == []


class _ScoredKind(AnalysisKind):
    name: ClassVar[str] = "toy_scored"

    @classmethod
    def summary_schema(cls) -> dict[str, Any]:
        return {
            "type": "object",
            "required": ["score"],
            "properties": {"score": {"type": "number"}},
        }


def test_a_plugged_in_kind_brings_its_part() -> None:
    register_kind(_ScoredKind)
    try:
        with_entry = _changed(lambda s: s["analyses"].append({"kind": "toy_scored", "name": "t"}))
        assert any("'score' is a required property" in e for e in _errors(with_entry))
        with_entry["analyses"][-1]["score"] = 0.5
        assert _errors(with_entry) == []
        assert "### `toy_scored`" in summary_schema.summary_page()
    finally:
        unregister_kind("toy_scored")
    assert "kind_toy_scored" not in summary_schema.summary_schema()["$defs"]


def test_every_writer_stamps_the_version(tmp_path: Path) -> None:
    summary: dict[str, Any] = {"study": "toy"}
    write_summary(tmp_path, summary)
    written = json.loads((tmp_path / "summary.json").read_text(encoding="utf-8"))
    assert written["schema_version"] == summary["schema_version"] == SUMMARY_SCHEMA_VERSION


def _policy_run(**extra: Any) -> dict[str, Any]:
    """A ``policy_effect`` entry of one run (its groups left empty)."""
    return {
        "policies": ["base", "blind"],
        "descriptions": {"base": "as declared", "blind": "names withheld"},
        "baseline": "base",
        "stages": ["screen"],
        "groups": [],
        "adjust": "holm",
        "applicants": 8,
        "clusters": 2,
        "excluded": [],
        "coupled": [],
        "by_group": {},
        **extra,
    }


def test_a_kind_computed_per_run_validates_each_run_under_models() -> None:
    one = {"kind": "policy_effect", "name": "policies", **_policy_run()}
    several = {
        "kind": "policy_effect",
        "name": "policies",
        "models": {m: _policy_run(name=f"policies_{m}", model=m) for m in ("a", "b")},
    }
    for entry in (one, several):
        assert _errors(_changed(lambda s, e=entry: s["analyses"].append(e))) == []
    del several["models"]["b"]["clusters"]
    assert _errors(_changed(lambda s: s["analyses"].append(several)))
    del one["clusters"]
    assert _errors(_changed(lambda s: s["analyses"].append(one)))
