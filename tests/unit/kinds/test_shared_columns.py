"""Column groups several declared tables share are declared once
(``simulator/kinds/sections/columns.py``): wherever a kind's table shows one of these concepts
(a p-value, its adjustment, the test's unit and their count, the impact ratio, the four-fifths
rule, a 95% interval), it has the one header and format, so the console, page, CSV and schema
of every kind say it alike."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator

import biasim.simulator.kinds as kinds_package
from biasim.simulator.common.html import Column
from biasim.simulator.common.result_tables import ResultTable
from biasim.simulator.kinds.sections import columns
from biasim.simulator.kinds.sections.codebook import Codebook


def _declared() -> Iterator[tuple[str, Column]]:
    """Every column of every table a module under ``simulator/kinds`` declares: in its
    codebook (``module.TABLES[key]``) or derived from one in code (``module.NAME``)."""
    prefix = kinds_package.__name__ + "."
    for info in pkgutil.walk_packages(kinds_package.__path__, prefix):
        module = importlib.import_module(info.name)
        tables = {f"{info.name}.{name}": value for name, value in vars(module).items()}
        if isinstance(codebook := tables.pop(f"{info.name}.TABLES", None), Codebook):
            tables |= {f'{info.name}.TABLES["{key}"]': value for key, value in codebook.items()}
        for name, value in tables.items():
            if isinstance(value, ResultTable):
                for column in value.columns:
                    yield name, column


def test_the_declared_tables_were_read() -> None:
    where = {table for table, _ in _declared()}
    assert {
        'biasim.simulator.kinds.pipeline.TABLES["stages"]',
        'biasim.simulator.kinds.picks.TABLES["items"]',
    } <= where


def test_an_impact_ratio_and_the_four_fifths_rule_are_one_declaration() -> None:
    shared = {"impact_ratio": columns.impact_ratio(), "four_fifths": columns.below_four_fifths()}
    found = [(table, c) for table, c in _declared() if c.key in shared]
    assert len(found) >= 4, found  # pipeline's stages and policy_effect's rates, at least
    assert all(c == shared[c.key] for _, c in found), found


def test_the_group_a_model_compares_and_its_reference_are_one_declaration() -> None:
    """The model estimates, the models' grades and DiscrimEval's model (sections/) show the
    contrast a row estimates with one header, format and description (``columns.contrast``)."""
    pairs: dict[str, list[Column]] = {}
    for table, column in _declared():
        if table.startswith("biasim.simulator.kinds.sections.") and column.key in (
            "group",
            "reference",
        ):
            pairs.setdefault(table, []).append(column)
    sections = "biasim.simulator.kinds.sections."
    shown = {
        f"{sections}unit_models.MODEL_ESTIMATES",
        f'{sections}unit_models.TABLES["model_grades"]',
    }
    assert shown | {f"{sections}discrim_eval.DISCRIM_EVAL"} <= set(pairs), pairs
    wrong = {t: p for t, p in pairs.items() if tuple(p) != columns.contrast(p[-1].label or "")}
    assert not wrong, wrong
    assert {p[-1].label for t, p in pairs.items() if t in shown} == {"vs"}


def test_a_tests_p_its_adjustment_and_its_unit_are_formatted_alike() -> None:
    formats = {"p_value": "p", "p_adjusted": "p", "unit": "text", "n_units": "int"}
    found = [(table, c) for table, c in _declared() if c.key in formats]
    assert {c.key for _, c in found} == set(formats)
    wrong = [(table, c) for table, c in found if c.spec != formats[c.key]]
    assert not wrong, wrong
    units = [(table, c) for table, c in found if c.key == "unit" and c.label != "unit"]
    assert not units, units


def test_every_interval_names_its_upper_bound() -> None:
    intervals = [(table, c) for table, c in _declared() if c.spec == "ci"]
    assert len(intervals) >= 10, intervals
    assert all(c.upper for _, c in intervals), intervals


def test_a_rate_and_its_interval_share_their_bounds() -> None:
    value, ci = columns.rate("Hired / applicants.", "Pool bootstrap.", bounds="rate")
    assert (value.key, value.spec, value.description) == ("rate", ".3f", "Hired / applicants.")
    assert (ci.key, ci.upper, ci.label, ci.spec) == ("rate_low", "rate_high", "95% CI", "ci")
    assert ci.description == "Pool bootstrap."


def test_a_markets_cycle_group_and_replicates_are_one_declaration() -> None:
    """market and market_effects show a cycle, a group and the replicate markets (the unit of
    every interval and test of a market) with one header, format and description."""
    market_tables = [
        (table, c)
        for table, c in _declared()
        if table.startswith(("biasim.simulator.kinds.market.", "biasim.simulator.kinds.market_"))
    ]
    assert {t.rsplit(".", 2)[1] for t, _ in market_tables} == {"market", "market_effects"}
    cycles = [c for _, c in market_tables if c.key == "cycle"]
    assert len(cycles) >= 4 and all(c == columns.cycle() for c in cycles), cycles
    groups = [c for _, c in market_tables if c.key == "group"]
    assert all(c == columns.market_group(c.label or "") for c in groups), groups
    counted = [c for _, c in market_tables if c.label == "markets"]
    assert len(counted) >= 5 and all(c == columns.markets(c.key) for c in counted), counted
    intervals = [c for _, c in market_tables if c.spec == "ci"]
    assert len(intervals) >= 4, intervals
    assert all(c == columns.over_markets(c.key, c.upper or "", c.label or "") for c in intervals)
