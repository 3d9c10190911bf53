"""External decisions never lose or miscode rows: `analysis.external.check_decisions` and
`biasim analyze --decisions` (undeclared outcome values, missing keys, units in two groups,
small groups)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from biasim.analysis.audit.external import EXCLUSION_COLUMNS, DecisionsError, check_decisions
from biasim.simulator.cli import app


def decisions() -> pd.DataFrame:
    """40 names in groups A and B (10 decisions each; A accepted 8 in 10, B 4 in 10), three
    names of group C (one decision each), and rows with something missing or unusable."""
    rows = [
        {"name": f"{g}{i}", "grp": g, "job": ("x", "y")[j % 2], "decision": "no"}
        for g in ("A", "B")
        for i in range(20)
        for j in range(10)
    ]
    frame = pd.DataFrame(rows)
    accepted = frame.groupby("name").cumcount() < frame["grp"].map({"A": 8, "B": 4})
    frame.loc[accepted, "decision"] = "yes"
    extra = pd.DataFrame(
        [
            {"name": "C0", "grp": "C", "job": "x", "decision": "yes"},
            {"name": "C1", "grp": "C", "job": "y", "decision": "no"},
            {"name": "C2", "grp": "C", "job": "x", "decision": "invalid"},
            {"name": "Z0", "grp": None, "job": "x", "decision": "yes"},  # missing group
            {"name": "Z1", "grp": "  ", "job": "y", "decision": "no"},  # blank group
            {"name": "A0", "grp": "A", "job": None, "decision": "no"},  # missing stratum
            {"name": None, "grp": "B", "job": "x", "decision": "yes"},  # missing unit
            {"name": "A1", "grp": "A", "job": "x", "decision": None},  # missing outcome
            {"name": "B1", "grp": "B", "job": "y", "decision": "invalid"},
            {"name": "B2", "grp": "B", "job": "y", "decision": "invalid"},
        ]
    )
    return pd.concat([frame, extra], ignore_index=True)


KEYS = {"unit_col": "name", "stratum_col": "job"}


def counts(checked) -> dict[tuple[str, str, str], int]:
    return {(r.reason, r.column, r.value): r.n for r in checked.exclusions.itertuples()}


# --------------------------------------------------------------------------- check_decisions


def test_every_row_is_used_or_counted_under_one_reason() -> None:
    df = decisions()
    checked = check_decisions(df, "grp", "decision", positive="yes", **KEYS)
    assert list(checked.exclusions.columns) == list(EXCLUSION_COLUMNS)
    assert counts(checked) == {
        ("missing_group", "grp", ""): 2,
        ("missing_stratum", "job", ""): 1,
        ("missing_unit", "name", ""): 1,
        ("missing_outcome", "decision", ""): 1,
        ("invalid_outcome", "decision", "invalid"): 3,
    }
    assert checked.negative == ("no",)
    assert checked.n_total == len(df) == 410
    assert checked.n_used == 400 + 2  # A and B, and C's two decided rows
    # The data keep the excluded answers of known groups (the disparity functions count them
    # per group) and nothing without a group, stratum or unit.
    assert len(checked.data) == checked.n_used + 1 + 3
    assert checked.data[["grp", "job", "name"]].notna().all().all()
    assert checked.small_groups.empty


def test_a_row_missing_several_things_counts_once_under_the_first_reason() -> None:
    df = pd.DataFrame(
        {"grp": ["A", None, "B", "A"], "decision": [None, None, "no", "yes"], "job": [None] * 4}
    )
    checked = check_decisions(df, "grp", "decision", positive="yes", stratum_col="job")
    assert counts(checked) == {("missing_group", "grp", ""): 1, ("missing_stratum", "job", ""): 3}
    assert checked.n_used == 0 and checked.data.empty


def test_undeclared_outcome_values_are_an_error_listing_them_with_counts() -> None:
    df = decisions()
    df.loc[:4, "decision"] = "maybe"
    df.loc[5, "decision"] = "No"
    with pytest.raises(DecisionsError) as caught:
        check_decisions(df, "grp", "decision", positive="yes")
    assert caught.value.column == "decision"
    message = str(caught.value)
    assert "'maybe' (5)" in message and "'No' (1)" in message and "'no' (" in message
    # Declaring some negatives leaves only the rest undeclared.
    with pytest.raises(DecisionsError, match=r"undeclared values 'maybe' \(5\) \(") as caught:
        check_decisions(df, "grp", "decision", positive="yes", negative=["no", "No"])
    assert "'No' (1)" not in str(caught.value)
    checked = check_decisions(
        df, "grp", "decision", positive="yes", negative=["no", "No"], invalid=["maybe", "invalid"]
    )
    assert counts(checked)[("invalid_outcome", "decision", "maybe")] == 5
    assert checked.negative == ("no", "No")


def test_declared_negatives_are_checked_even_when_the_outcome_is_binary() -> None:
    df = decisions()
    with pytest.raises(DecisionsError, match="undeclared values 'no'"):
        check_decisions(df, "grp", "decision", positive="yes", negative=["rejected"])


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"negative": ["yes"]}, "negative"),
        ({"invalid": ["yes"]}, "invalid"),
        ({"negative": ["no"], "invalid": ["no"]}, "negative"),
    ],
)
def test_overlapping_declarations_are_an_error(kwargs, argument) -> None:
    with pytest.raises(DecisionsError) as caught:
        check_decisions(decisions(), "grp", "decision", positive="yes", **kwargs)
    assert caught.value.argument == argument and caught.value.column is None


def test_a_unit_in_two_groups_is_an_error_naming_it_and_its_groups() -> None:
    df = decisions()
    df.loc[df["name"] == "B7", "name"] = "A3"
    with pytest.raises(DecisionsError) as caught:
        check_decisions(df, "grp", "decision", positive="yes", unit_col="name")
    assert caught.value.column == "name"
    assert "unit 'A3' is in 2 groups of grp: A; B" in str(caught.value)


def test_groups_under_the_minimum_share_are_left_out_and_reported() -> None:
    df = decisions()
    checked = check_decisions(df, "grp", "decision", positive="yes", min_group_share=0.01, **KEYS)
    # C has 2 of the 402 decided rows (0.5%); its invalid answer leaves with it.
    small = checked.small_groups
    assert small[["grp", "n", "n_rows"]].to_dict("records") == [{"grp": "C", "n": 2, "n_rows": 3}]
    assert small.loc[0, "share"] == pytest.approx(2 / 402)
    assert counts(checked)[("small_group", "grp", "C")] == 3
    assert counts(checked)[("invalid_outcome", "decision", "invalid")] == 2
    assert set(checked.data["grp"]) == {"A", "B"}
    assert checked.n_used == 400
    # A share exactly at the minimum is kept.
    exact = check_decisions(df, "grp", "decision", positive="yes", min_group_share=2 / 402, **KEYS)
    assert exact.small_groups.empty and "C" in set(exact.data["grp"])


def test_a_group_with_only_excluded_answers_has_share_zero() -> None:
    df = pd.DataFrame({"grp": ["A", "A", "B", "C"], "decision": ["yes", "no", "no", "invalid"]})
    checked = check_decisions(df, "grp", "decision", positive="yes", min_group_share=0.1)
    assert checked.small_groups[["grp", "n", "share"]].to_dict("records") == [
        {"grp": "C", "n": 0, "share": 0.0}
    ]
    assert counts(checked) == {("small_group", "grp", "C"): 1}


def test_no_group_reaching_the_minimum_share_is_an_error() -> None:
    with pytest.raises(DecisionsError, match=r"no group has 60\.0%") as caught:
        check_decisions(decisions(), "grp", "decision", positive="yes", min_group_share=0.6)
    assert caught.value.argument == "min_group_share"


# --------------------------------------------------------------------------- the CLI


def analyze(cli, path: Path, *options: str):
    args = ["analyze", "--decisions", str(path), "--group-cols", "grp", "--outcome-col"]
    return cli.invoke(
        app, [*args, "decision", "--positive", "yes", "--permutations", "200", *options]
    )


def test_cli_undeclared_values_exit_2_naming_csv_column_and_values(tmp_path, cli) -> None:
    df = decisions()
    df.loc[:2, "decision"] = "maybe"
    path = tmp_path / "d.csv"
    df.to_csv(path, index=False)
    out = tmp_path / "tables"
    result = analyze(cli, path, "--out", str(out))
    assert result.exit_code == 2
    message = " ".join(result.stderr.split())
    assert f"{path}: decision: undeclared values" in message and "'maybe' (3)" in message
    assert not out.exists()
    # --negative maps them to "not selected": B's rate counts them as decided rows.
    mapped = analyze(cli, path, "--negative", "no,maybe", "--out", str(out))
    assert mapped.exit_code == 0, mapped.output
    rates = pd.read_csv(out / "rates.csv").set_index("grp")
    assert rates.loc["A", "n"] == 200 + 1  # A0 without a job counts: no --stratum-col here
    assert rates.loc["A", "k"] == 160 - 3
    assert "negative: no, maybe (--negative)" in " ".join(mapped.stdout.split())


def test_cli_counts_prints_and_writes_the_exclusions(tmp_path, cli) -> None:
    path = tmp_path / "d.csv"
    decisions().to_csv(path, index=False)
    out = tmp_path / "tables"
    result = analyze(cli, path, "--unit-col", "name", "--stratum-col", "job", "--out", str(out))
    assert result.exit_code == 0, result.output
    written = pd.read_csv(out / "exclusions.csv", keep_default_na=False)
    assert written.set_index(["reason", "column"])["n"].to_dict() == {
        ("missing_group", "grp"): 2,
        ("missing_stratum", "job"): 1,
        ("missing_unit", "name"): 1,
        ("missing_outcome", "decision"): 1,
        ("invalid_outcome", "decision"): 3,
    }
    printed = " ".join(result.stdout.split())
    assert "rows 410: used 402, excluded 8 (missing_group 2, missing_stratum 1," in printed
    assert "negative: no (the only other value)" in printed
    rates = pd.read_csv(out / "rates.csv")
    assert rates["n"].sum() + written["n"].sum() == 410
    assert not (out / "small_groups.csv").exists()


def test_cli_unit_in_two_groups_exits_2_naming_unit_groups_and_csv(tmp_path, cli) -> None:
    df = decisions()
    df.loc[df["name"] == "B7", "name"] = "A3"
    path = tmp_path / "d.csv"
    df.to_csv(path, index=False)
    result = analyze(cli, path, "--unit-col", "name")
    assert result.exit_code == 2
    assert f"{path}: name: unit 'A3' is in 2 groups of grp: A; B" in " ".join(result.stderr.split())


def test_cli_min_group_share_drops_and_reports_small_groups(tmp_path, cli) -> None:
    path = tmp_path / "d.csv"
    decisions().to_csv(path, index=False)
    out = tmp_path / "tables"
    result = analyze(cli, path, "--min-group-share", "0.02", "--out", str(out))
    assert result.exit_code == 0, result.output
    printed = " ".join(result.stdout.split())
    assert "left out, under 2.0% of the decided rows: C (2 decided, 0.5%; 3 rows)" in printed
    assert set(pd.read_csv(out / "rates.csv")["grp"]) == {"A", "B"}
    small = pd.read_csv(out / "small_groups.csv")
    assert small[["grp", "n", "n_rows"]].to_dict("records") == [{"grp": "C", "n": 2, "n_rows": 3}]
    exclusions = pd.read_csv(out / "exclusions.csv", keep_default_na=False)
    assert exclusions.set_index(["reason", "value"]).loc[("small_group", "C"), "n"] == 3

    too_big = analyze(cli, path, "--min-group-share", "0.6")
    assert too_big.exit_code == 2
    assert "--min-group-share: no group has 60.0% of the decided rows" in too_big.stderr
    conflict = analyze(cli, path, "--negative", "no", "--invalid", "no,invalid")
    assert (
        conflict.exit_code == 2 and "--negative: no: both negative and invalid" in conflict.stderr
    )


def test_cli_positive_only_in_excluded_rows_exits_2(tmp_path, cli) -> None:
    path = tmp_path / "d.csv"
    frame = pd.DataFrame({"grp": [*"AABB", "", "C"], "decision": [*["no"] * 4, "yes", "yes"]})
    frame.to_csv(path, index=False)
    result = analyze(cli, path, "--min-group-share", "0.3")
    assert result.exit_code == 2
    assert f"{path}: decision: every `yes` row is excluded (missing_group 1, small_group 1)" in (
        " ".join(result.stderr.split())
    )


def test_cli_without_a_unit_warns_naming_the_column_that_repeats(tmp_path, cli) -> None:
    """Issue 43: each name decides 10 times and no --unit-col is given: the output names the
    column, the tests that assumed independence and the option to give, and the four-fifths
    chance says it is conditional on independent answers. With --unit-col it is quiet."""
    path = tmp_path / "d.csv"
    decisions().to_csv(path, index=False)
    printed = " ".join(analyze(cli, path, "--stratum-col", "job").stdout.split())
    assert "column(s) `name` repeat within the groups and no --unit-col was given" in printed
    assert "four-fifths chance treat every row as independent" in printed
    assert "give --unit-col name" in printed
    assert "(answers as independent binomials: conditional on independent answers)" in printed
    given = " ".join(
        analyze(cli, path, "--unit-col", "name", "--stratum-col", "job").stdout.split()
    )
    assert "repeat within the groups" not in given
    assert "relabelling whole units: name" in given


def test_cli_json_lists_repeating_columns_and_none_when_rows_are_their_own_units(
    tmp_path, cli
) -> None:
    import json

    path = tmp_path / "d.csv"
    decisions().to_csv(path, index=False)
    result = analyze(cli, path, "--json")
    assert json.loads(result.stdout)["repeating_columns"] == ["name"]
    once = decisions().drop_duplicates("name").assign(name=lambda d: range(len(d)))
    once = pd.concat([once] * 2, ignore_index=True).assign(name=lambda d: range(len(d)))
    once.to_csv(path, index=False)
    result = analyze(cli, path, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["repeating_columns"] == []
