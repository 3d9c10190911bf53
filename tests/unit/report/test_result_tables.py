"""One table description renders the console, the page, the schema and the CSV order; a typed
result derives its summary and schema from its dataclass (issue 45, item 2)."""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field
from typing import Literal

import jsonschema
import pandas as pd
import pytest
from rich.console import Console

from biasim.simulator.common.html import Column, HtmlSection
from biasim.simulator.common.result_tables import Records, ResultTable, missing
from biasim.simulator.common.results import (
    about,
    html_result,
    print_result,
    result_schema,
    summary_of,
    tabled,
    tables_of,
)

SHARES = ResultTable(
    key="shares",
    title="share per item",
    columns=(
        Column("item", "item", description="The item."),
        Column("n", "n", "int", description="Pairings."),
        Column("share", "share", ".3f", description="Share paired with the target."),
        Column("ci_low", "95% CI", "ci", upper="ci_high"),
        Column("p_value", "p", "p", star="deviates"),
        Column("deviates", "deviates", "bool"),
    ),
    description="Share per item.",
    note="p: exact binomial test against 0.5.",
    says_nothing=lambda r: missing(r["p_value"]),
    why="no test ran",
)

RECORDS = [
    {"experiment": "e1", "item": "Nurse", "n": 12, "share": 0.75, "ci_low": 0.47,
     "ci_high": 0.91, "p_value": 0.0002, "deviates": True, "n_female": 9},
    {"experiment": "e1", "item": "Pilot", "n": 3, "share": 0.333333, "ci_low": 0.06,
     "ci_high": 0.79, "p_value": float("nan"), "deviates": False, "n_female": 1},
]  # fmt: skip


def _console(width: int) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=width, markup=False, emoji=False), out


def test_the_shown_columns_are_the_leading_labels_then_the_declared_ones() -> None:
    shown = [c.key for c in SHARES.shown(RECORDS)]
    # experiment leads (a group column the study chose); n_female is the CSV's alone.
    assert shown == ["experiment", "item", "n", "share", "ci_low", "p_value", "deviates"]


def test_console_and_page_show_the_same_rows_and_name_the_hidden_one() -> None:
    console, out = _console(200)
    SHARES.print(console, RECORDS, "assoc")
    text = out.getvalue()
    assert "assoc: share per item" in text
    assert re.search(r"Nurse\s*│\s*12\s*│\s*0\.750\s*│\s*\[0\.470,0\.910\]\s*│\s*< 0\.001\*", text)
    assert "Pilot" not in text.split("not shown")[0]
    assert "1 row not shown (kept in the CSV tables): no test ran (row: e1 Pilot)" in text
    assert "p: exact binomial test against 0.5." in text
    section = HtmlSection("x", path=("analyses", 0))
    SHARES.html(section, RECORDS, ("shares",))
    page = "".join(section.parts)
    assert '["analyses", 0, "shares", 0, "share"]' in page.replace("&quot;", '"')
    assert "Pilot" not in page.split("</table>")[0]
    assert "e1 Pilot" in page


def test_the_schema_types_each_declared_column_and_validates_the_records() -> None:
    schema = SHARES.schema()
    items = schema["items"]
    assert items["required"] == ["item", "n", "share", "ci_low", "p_value", "deviates"]
    assert items["properties"]["n"] == {"type": ["integer", "null"], "description": "Pairings."}
    assert "ci_high" in items["properties"]
    jsonschema.validate(RECORDS, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate([{**RECORDS[0], "n": "twelve"}], schema)


def test_the_csv_order_follows_the_declaration_and_keeps_the_rest_beside_it() -> None:
    frame = pd.DataFrame(RECORDS)[
        ["experiment", "item", "share", "n", "n_female", "ci_low", "ci_high", "p_value",
         "deviates"]
    ]  # fmt: skip
    ordered = SHARES.csv(frame)
    assert list(ordered.columns) == [
        "experiment", "item", "n", "n_female", "share", "ci_low", "ci_high", "p_value",
        "deviates",
    ]  # fmt: skip


@dataclass(kw_only=True)
class _Deviating:
    deviate: int = field(metadata=about("Items off chance."))
    items: int = field(metadata=about("Items tested."))


@dataclass(kw_only=True)
class _Result:
    positive: str = field(metadata=about("The target value counted."))
    adjust: Literal["none", "holm"] = field(metadata=about("Adjustment."))
    deviating: _Deviating = field(metadata=about("Items off chance, of all."))
    shares: Records = field(metadata=tabled(SHARES))
    note: str | None = field(default=None, metadata=about("Why nothing was tested."))
    by_group: dict[str, Records] = field(
        metadata=tabled(
            ResultTable("by_group", "by {key}", (Column("item"),), "Per group."), "Groups."
        )
    )


def test_a_typed_result_derives_its_summary_and_schema() -> None:
    result = _Result(
        positive="female",
        adjust="none",
        deviating=_Deviating(deviate=1, items=2),
        shares=RECORDS,
        by_group={"first": [{"item": "Nurse"}]},
    )
    summary = summary_of(result)
    assert "note" not in summary and summary["deviating"] == {"deviate": 1, "items": 2}
    schema = result_schema(_Result)
    assert schema["required"] == ["positive", "adjust", "deviating", "shares", "by_group"]
    assert schema["properties"]["adjust"]["enum"] == ["none", "holm"]
    assert schema["properties"]["note"]["type"] == "string"
    assert schema["properties"]["deviating"]["properties"]["items"]["type"] == "integer"
    jsonschema.validate(summary, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**summary, "adjust": "bh"}, schema)
    console, out = _console(80)
    print_result(_Result, {"name": "a", **summary}, console, "(assoc)", ["one sentence"])
    text = out.getvalue()
    # The one-column table's title wraps at its width: "a: by" then "first".
    assert text.index("one sentence") < text.index("a: share per item") < text.index("a: by")
    section = HtmlSection("x")
    html_result(_Result, summary, section, ["one sentence"])
    assert section.parts[0] == "<p>one sentence</p>" and "by first" in "".join(section.parts)


PER_GROUP = ResultTable(
    key="rates",
    title="rates by {key} ({adjust})",
    columns=(
        Column("value", "{key}", description="The group's value."),
        Column("rate", "rate", ".3f", description="Its rate."),
    ),
    description="Rates per group.",
    file="rates_{key}",
    hide=("group",),
)
PAIRS = ResultTable(
    key="pairs",
    title="at {outer} by {key}",
    columns=(Column("value", "{key}"), Column("n", "n", "int")),
    description="Counts.",
    file=None,
)


@dataclass(kw_only=True)
class _Group:
    axis: str = field(metadata=about("Its axis."))
    rates: Records = field(metadata=tabled(PER_GROUP))


@dataclass(kw_only=True)
class _Nested:
    adjust: str = field(metadata=about("The adjustment."))
    by_group: dict[str, _Group] = field(metadata=about("Group column -> its part."))
    pairs: dict[str, dict[str, Records]] = field(metadata=tabled(PAIRS, "Stage -> group.", depth=2))


def test_nested_parts_and_tables_two_keys_deep_name_their_keys_and_paths() -> None:
    result = _Nested(
        adjust="holm",
        by_group={
            "race": _Group(axis="race", rates=[{"group": "race", "value": "A", "rate": 0.5}])
        },
        pairs={"screen": {"gender": [{"value": "f", "n": 3}]}},
    )
    summary = summary_of(result)
    assert summary["by_group"] == {"race": {"axis": "race", "rates": result.by_group["race"].rates}}
    found = [(spec.title, spec.file_name("x"), key) for spec, _, key in tables_of(_Nested, summary)]
    assert found == [
        ("rates by race (holm)", "x_rates_race", ("by_group", "race", "rates")),
        ("at screen by gender", None, ("pairs", "screen", "gender")),
    ]
    spec = next(iter(tables_of(_Nested, summary)))[0]
    # The group column the title names is hidden; the value column is headed by the group.
    assert [(c.key, c.label) for c in spec.shown(summary["by_group"]["race"]["rates"])] == [
        ("value", "race"),
        ("rate", "rate"),
    ]
    schema = result_schema(_Nested)
    jsonschema.validate(summary, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**summary, "pairs": {"screen": [{"value": "f"}]}}, schema)
    # A part an older version wrote without a field it always holds now: a KeyError naming it,
    # which the page turns into its "written by an older version" line.
    del summary["by_group"]["race"]["rates"]
    with pytest.raises(KeyError, match="rates"):
        list(tables_of(_Nested, summary))
