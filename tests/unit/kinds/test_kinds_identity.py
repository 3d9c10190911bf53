"""The analysis kinds, moved into plug-in modules, write exactly what the code before them wrote
from the same answers: every table of three small studies and the summaries of their analyses
(answers and outputs recorded by ``tests/data/golden/record.py`` before the move)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest

from biasim.simulator.engine.runner import reanalyze
from tests.golden_studies import GOLDEN_DIR, STUDIES


def _same(a: object, b: object, path: str = "") -> list[str]:
    """Where two JSON values differ (floats to 1e-12)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}.{k}: only on one side" for k in set(a) ^ set(b)]
        for key in set(a) & set(b):
            out += _same(a[key], b[key], f"{path}.{key}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} vs {len(b)} items"]
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in _same(x, y, f"{path}[{i}]")
        ]
    if (
        isinstance(a, float)
        and isinstance(b, float)
        and ((math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12))
    ):
        return []
    return [] if a == b else [f"{path}: {a!r} vs {b!r}"]


def _rows_sorted(table: pd.DataFrame) -> pd.DataFrame:
    return table.sort_values(list(table.columns), kind="stable").reset_index(drop=True)


def _records_sorted(value: object) -> object:
    """Every list of records in a canonical order (their JSON text), recursively."""
    if isinstance(value, dict):
        return {k: _records_sorted(v) for k, v in value.items()}
    if isinstance(value, list):
        items = [_records_sorted(v) for v in value]
        if items and all(isinstance(v, dict) for v in items):
            return sorted(items, key=lambda v: json.dumps(v, sort_keys=True, default=str))
        return items
    return value


#: What the kinds have written since the recording, on top of it (checked by their own tests):
#: the test of a difference in DPD between a condition factor's levels
#: (``tests/unit/analysis/test_analysis_conditions.py``, ``tests/e2e/test_persona_ablation.py``).
#: The validity test and exclusion bounds per case (``tests/e2e/test_refusals_in_kinds.py``),
#: the model-based estimates (``tests/unit/analysis/test_unit_models.py``), the rationale terms
#: tested with the persona as the unit (``tests/unit/analysis/test_unit_terms.py``). The emails
#: to label by hand for seed 001's Table 5 (``tests/e2e/test_an2024_table5.py``). What the
#: declared results of the kinds over a stage's decisions name (``model_labels`` of the
#: DPD-by-condition figures, where the ``predictions`` come from;
#: ``tests/e2e/test_result_tables_agree.py``).
ADDED_TABLES = (
    "_annotation_sample.csv",
    "_condition_differences.csv",
    "_exclusions.csv",
    "_model_estimates.csv",
    "_distinctive_terms_by_unit.csv",
)
ADDED_SUMMARY_KEYS = (
    "condition_factor",
    "condition_levels",
    "condition_differences",
    "model_labels",
    "predictions",
    "exclusions",
    "model_estimates",
    "model_estimates_item",
    # The declared result of demographic_parity (issue 45): the case table's note, figures.
    "cases_note",
    "share_figures",
    "grade_figures",
)
#: Columns of the DPD case tables naming each test, its unit and whether it can reject
#: (``tests/unit/analysis/test_unit_inference.py``), and of every test table naming its unit
#: (``tests/e2e/test_units_agree.py``); recorded columns keep their recorded values.
ADDED_COLUMNS = ("test", "unit", "n_units", "can_reject")
#: What an acceptance model's part adds: the unit every test of it relabels, and how many; since
#: its declared result (issue 45), the headline test and the flag chances' basis in words, the
#: CSV table of that test and the group a reference table compares with.
ADDED_PART_KEYS = (
    "test_unit",
    "test_units",
    "test_name",
    "test_table",
    "flag_chance_basis",
    "reference_group",
)
#: Where names recur, each pair's validity test relabels whole names
#: (``tests/unit/analysis/test_unit_inference.py``): the recorded email-level test is kept, renamed.
RENAMED_VALIDITY = {"test_emails": "test", "statistic_emails": "statistic", "p_emails": "p_value"}


#: With ``unit: name`` the four-fifths chances relabel whole names instead of drawing answers
#: as independent binomials (``tests/unit/analysis/test_flag_chance.py``): the recorded chances
#: are replaced by design, and the unit they resampled is named beside them.
FLAG_CHANCE = ("p_flag_by_chance", "p_any_flag_by_chance", "min_ratio_p05")
FLAG_UNIT = ("flag_chance_unit", "flag_chance_units")


def _without_unit_flag_chance(table: pd.DataFrame, recorded: pd.DataFrame) -> tuple:
    """An impact-ratio table and its recording without the chances that now relabel units."""
    if "flag_chance_unit" not in table:
        return table, recorded
    replaced = [*FLAG_CHANCE] if (table["flag_chance_unit"] != "answer").any() else []
    return table.drop(columns=[*FLAG_UNIT, *replaced]), recorded.drop(columns=replaced)


def _without_model_flag_chance(analyses: list, recorded: list) -> None:
    """The same in the acceptance summaries' per-model parts, in place on both sides."""
    for analysis, before in zip(analyses, recorded, strict=True):
        for model, part in (analysis.get("models") or {}).items():
            unit = part.pop("flag_chance_unit", "answer")
            if unit == "answer":
                continue
            for side in (part, before["models"][model]):
                for key in FLAG_CHANCE:
                    side.pop(key, None)
                side["impact_ratios"] = [
                    {k: v for k, v in r.items() if k not in (*FLAG_CHANCE, *FLAG_UNIT)}
                    for r in side["impact_ratios"]
                ]


def _without_nones(recorded: list) -> None:
    """The recorded acceptance summaries' model parts without the tables they held as None (a
    test not run): a declared result leaves them out (issue 45), in place."""
    for analysis in recorded:
        for part in (analysis.get("models") or {}).values():
            for key in [k for k, v in part.items() if v is None]:
                del part[key]


def _no_extremes_at_zero(records: list[dict], empty: object) -> list[dict]:
    """Recorded cases with ``empty`` as the highest and lowest group where the DPD is 0: every
    group has one rate, and no group is named as both (issue 45, item 5)."""
    return [
        {**r, "max_group": empty, "min_group": empty} if r.get("dpd") == 0 else r for r in records
    ]


def _without_added(records: object) -> object:
    """Summary case records without the added columns."""
    if isinstance(records, list):
        return [
            {k: v for k, v in r.items() if k not in ADDED_COLUMNS} if isinstance(r, dict) else r
            for r in records
        ]
    return records


def _each_output_listed_once(run: Path) -> None:
    """The report lists every table once, though the kinds over one stage's decisions share a
    name (each section would otherwise list every output named after it)."""
    page = (run / "report.html").read_text(encoding="utf-8")
    for table in (run / "tables").glob("*.csv"):
        assert page.count(f"<summary>tables/{table.name} (") == 1, table.name


def _one_per_name(analyses: list[dict]) -> list[dict]:
    """The summaries as recorded, one per name: the seed-004 analysis recorded as one
    ``demographic_parity`` entry is now that kind and the kinds over the same decisions
    (``condition_differences``, ``explicit_bias``, ...) sharing its name; their parts, put
    together, must be the recorded entry (a key two parts both write must agree)."""
    merged: dict[str, dict] = {}
    for analysis in analyses:
        first = merged.setdefault(analysis["name"], dict(analysis))
        for key, value in analysis.items():
            if key != "kind":
                assert _same(first.setdefault(key, value), value) == [], (analysis["kind"], key)
    return list(merged.values())


@pytest.mark.parametrize("name", list(STUDIES))
def test_kind_outputs_equal_the_recorded_ones(name: str, tmp_path: Path) -> None:
    golden = GOLDEN_DIR / name
    run = tmp_path / "run"
    run.mkdir()
    for file in ("results.parquet", "manifest.json"):
        shutil.copy(golden / file, run / file)
    # The recorded inputs keep no results.csv nor digests: read as they are (and said so).
    summary = reanalyze(run, accept_edits=True)
    recorded = sorted(p.name for p in golden.glob("*.csv"))
    written = sorted(
        p.name for p in (run / "tables").glob("*.csv") if not p.name.endswith(ADDED_TABLES)
    )
    assert written == recorded
    for file in recorded:
        expected = pd.read_csv(golden / file, keep_default_na=False)
        actual = pd.read_csv(run / "tables" / file, keep_default_na=False)
        if file.endswith("cases.csv"):
            actual = actual.drop(columns=[c for c in ADDED_COLUMNS if c in actual])
            expected = pd.DataFrame(
                _no_extremes_at_zero(expected.to_dict("records"), ""), columns=expected.columns
            )
        else:
            actual = actual.drop(
                columns=[c for c in ("unit", "n_units") if c in actual and c not in expected]
            )
        if file.endswith("impact_ratios.csv"):
            actual, expected = _without_unit_flag_chance(actual, expected)
        if file.endswith("validity_pairwise.csv") and "p_emails" in actual:
            unit_test = ["test", "p_value", "p_holm", "statistic", "unit", "n_units_a", "n_units_b"]
            actual = actual.drop(columns=unit_test, errors="ignore").rename(
                columns=RENAMED_VALIDITY
            )
            actual = actual[[c for c in expected if c in actual]]
            expected = expected.drop(columns=["p_holm"])
        # Rows now follow the declared group order (issue 29), not the recording's sort: the
        # same rows, compared in one canonical order.
        pd.testing.assert_frame_equal(
            _rows_sorted(actual), _rows_sorted(expected), check_exact=False, rtol=1e-12, obj=file
        )
    analyses = _one_per_name(json.loads(json.dumps(summary["analyses"], default=str)))
    for analysis in analyses:
        for key in ADDED_SUMMARY_KEYS:
            analysis.pop(key, None)
        for key in ("cases", "explicit_cases", "implicit_vs_explicit"):
            if key in analysis:
                analysis[key] = _without_added(analysis[key])
        for part in (analysis.get("models") or {}).values():
            for key in ADDED_PART_KEYS:
                part.pop(key, None)
        if isinstance(analysis.get("terms"), dict):
            # The unit-level rationale-term test, added beside the recorded token-level terms.
            analysis["terms"].pop("unit_test", None)
    expected = json.loads((golden / "analyses.json").read_text())
    for analysis in expected:
        for key in ("cases", "explicit_cases"):
            if key in analysis:
                analysis[key] = _no_extremes_at_zero(analysis[key], None)
    for analysis in analyses:
        for key in ("cases", "explicit_cases"):
            # No group named: None or NaN as the frame held it (summary.json writes null).
            for record in analysis.get(key) or []:
                for end in ("max_group", "min_group"):
                    if isinstance(record.get(end), float) and math.isnan(record[end]):
                        record[end] = None
    _without_model_flag_chance(analyses, expected)
    _without_nones(expected)
    assert _same(_records_sorted(analyses), _records_sorted(expected)) == []
    _each_output_listed_once(run)
    assert STUDIES[name][0]  # the study that produced them is kept beside the test
