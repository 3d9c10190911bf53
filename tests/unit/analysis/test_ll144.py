"""NYC Local Law 144 audit tables, checked against numbers worked out by hand and against fairlearn.

The expected values below are written literally, derived in the comments from the cell counts of
the example; none is recomputed with the code under test.
"""

from __future__ import annotations

import ast
import math
import subprocess
import sys
from datetime import date

import numpy as np
import pandas as pd
import pytest
from fairlearn.metrics import MetricFrame, demographic_parity_ratio, selection_rate

from biasim.analysis.audit.ll144 import SCORING_COLUMNS, SELECTION_COLUMNS, date_range, ll144_tables
from tests.paths import ROOT

WHITE = "White"
BLACK = "Black or African American"
HISPANIC = "Hispanic or Latino"
ASIAN = "Asian"
NHPI = "Native Hawaiian or Other Pacific Islander"

# (sex, race/ethnicity, individuals, selected), in the order the rows appear.
CELLS = [
    ("Male", WHITE, 12, 7),
    ("Female", WHITE, 8, 3),
    ("Male", BLACK, 7, 2),
    ("Female", BLACK, 6, 3),
    ("Unknown", BLACK, 1, 1),  # sex unknown ("unknown" in another case)
    (None, BLACK, 1, 0),  # sex unknown (missing)
    ("Male", HISPANIC, 5, 2),
    ("Female", HISPANIC, 5, 1),
    ("Male", ASIAN, 3, 2),
    ("Female", ASIAN, 3, 2),
    ("Female", NHPI, 1, 1),
    ("Male", "unknown", 1, 0),  # race unknown
    ("Female", "", 1, 1),  # race unknown (empty)
]
# Plus one Male/White row whose outcome is missing: 55 rows, 54 assessed.
#
# Race/ethnicity table: 54 assessed - 2 unknown race = 52 of known race.
#   White    12+8     = 20, selected 7+3     = 10, rate 1/2, share 20/52
#   Black    7+6+1+1  = 15, selected 2+3+1+0 = 6,  rate 2/5, share 15/52
#   Hispanic 5+5      = 10, selected 2+1     = 3,  rate 3/10, share 10/52
#   Asian    3+3      = 6,  selected 2+2     = 4,  rate 2/3, share 6/52
#   NHPI              = 1,  selected           1,  rate 1,   share 1/52 = 0.0192 < 0.02
#   Impact ratios, all included (highest rate NHPI's 1): 1/2, 2/5, 3/10, 2/3, 1.
#   NHPI excluded (highest rate Asian's 2/3): 3/4, 3/5, 9/20, 1, and NaN for NHPI.
#
# Sex table: 54 assessed - 2 unknown sex = 52 of known sex.
#   Male   12+7+5+3+1   = 28, selected 7+2+2+2+0   = 13, rate 13/28, share 28/52
#   Female 8+6+5+3+1+1  = 24, selected 3+3+1+2+1+1 = 11, rate 11/24, share 24/52
#   Highest rate Male's: impact ratio Female (11/24)/(13/28) = 308/312 = 77/78.
#
# Intersectional table: 54 assessed - 2 unknown sex - 2 unknown race (disjoint) = 50.
#   Rows by sex (Male first seen), then race in order of first appearance:
#   Male   White 12/7, Black 7/2, Hispanic 5/2, Asian 3/2
#   Female White 8/3,  Black 6/3, Hispanic 5/1, Asian 3/2, NHPI 1/1
#   Highest rate NHPI's 1, so impact ratio = rate. NHPI's share is 1/50 = 0.02: not under 2%.
RACE_ORDER = [WHITE, BLACK, HISPANIC, ASIAN, NHPI]


def _rows(cells: list[tuple]) -> list[tuple]:
    rows = []
    for sex, race, n, selected in cells:
        rows += [(sex, race, True)] * selected + [(sex, race, False)] * (n - selected)
    return rows


@pytest.fixture
def applicants() -> pd.DataFrame:
    rows = [*_rows(CELLS), ("Male", WHITE, None)]
    return pd.DataFrame(rows, columns=["sex", "race", "selected"])


def _audit(df: pd.DataFrame, **kwargs):
    return ll144_tables(df, sex_col="sex", race_col="race", selected_col="selected", **kwargs)


def _floats(values) -> list[float]:
    return [float(v) for v in values]


def test_race_table_with_every_category_in_the_ratios(applicants: pd.DataFrame) -> None:
    table = _audit(applicants).tables["race_ethnicity"]
    assert list(table.columns) == ["race", *SELECTION_COLUMNS]
    assert list(table["race"]) == RACE_ORDER
    assert list(table["n"]) == [20, 15, 10, 6, 1]
    assert list(table["n_selected"]) == [10, 6, 3, 4, 1]
    assert _floats(table["selection_rate"]) == pytest.approx([0.5, 0.4, 0.3, 2 / 3, 1.0])
    assert _floats(table["impact_ratio"]) == pytest.approx([0.5, 0.4, 0.3, 2 / 3, 1.0])
    assert _floats(table["share"]) == pytest.approx([20 / 52, 15 / 52, 10 / 52, 6 / 52, 1 / 52])
    assert list(table["under_2pct"]) == [False, False, False, False, True]
    assert not table["excluded"].any()
    assert list(table["below_four_fifths"]) == [True, True, True, True, False]


def test_excluding_the_small_category_moves_the_others_ratios(applicants: pd.DataFrame) -> None:
    table = _audit(applicants, exclude_small=True).tables["race_ethnicity"]
    assert list(table["race"]) == RACE_ORDER
    # The excluded category keeps its count and rate: the rules require publishing both.
    assert list(table["n"]) == [20, 15, 10, 6, 1]
    assert _floats(table["selection_rate"]) == pytest.approx([0.5, 0.4, 0.3, 2 / 3, 1.0])
    assert list(table["excluded"]) == [False, False, False, False, True]
    ratios = _floats(table["impact_ratio"])
    assert ratios[:4] == pytest.approx([0.75, 0.6, 0.45, 1.0])
    assert math.isnan(ratios[4])
    flags = table["below_four_fifths"]
    assert list(flags[:4]) == [True, True, True, False]
    assert flags.isna().tolist() == [False, False, False, False, True]


def test_sex_table_unknowns_and_missing_outcomes(applicants: pd.DataFrame) -> None:
    audit = _audit(applicants)
    table = audit.tables["sex"]
    assert list(table["sex"]) == ["Male", "Female"]
    # 28, not 29: the Male row without an outcome is in no table.
    assert list(table["n"]) == [28, 24]
    assert list(table["n_selected"]) == [13, 11]
    assert _floats(table["selection_rate"]) == pytest.approx([13 / 28, 11 / 24])
    assert _floats(table["impact_ratio"]) == pytest.approx([1.0, 77 / 78])
    assert _floats(table["share"]) == pytest.approx([28 / 52, 24 / 52])
    assert list(table["below_four_fifths"]) == [False, False]
    assert audit.unknown == {"sex": 2, "race_ethnicity": 2, "intersectional": 4}
    assert (audit.n_total, audit.n_missing_outcome, audit.n_assessed) == (55, 1, 54)
    assert audit.metric == "selection_rate"
    assert audit.median_score is None
    assert audit.counts.to_dict("records") == [
        {
            "n_total": 55,
            "n_missing_outcome": 1,
            "n_assessed": 54,
            "unknown_sex": 2,
            "unknown_race_ethnicity": 2,
            "unknown_intersectional": 4,
        }
    ]


@pytest.mark.parametrize("exclude_small", [False, True])
def test_intersectional_table(applicants: pd.DataFrame, exclude_small: bool) -> None:
    table = _audit(applicants, exclude_small=exclude_small).tables["intersectional"]
    assert list(table.columns) == ["sex", "race", *SELECTION_COLUMNS]
    assert list(zip(table["sex"], table["race"], strict=True)) == [
        ("Male", WHITE),
        ("Male", BLACK),
        ("Male", HISPANIC),
        ("Male", ASIAN),
        ("Female", WHITE),
        ("Female", BLACK),
        ("Female", HISPANIC),
        ("Female", ASIAN),
        ("Female", NHPI),
    ]
    assert list(table["n"]) == [12, 7, 5, 3, 8, 6, 5, 3, 1]
    assert list(table["n_selected"]) == [7, 2, 2, 2, 3, 3, 1, 2, 1]
    rates = [7 / 12, 2 / 7, 2 / 5, 2 / 3, 3 / 8, 1 / 2, 1 / 5, 2 / 3, 1.0]
    assert _floats(table["selection_rate"]) == pytest.approx(rates)
    # 1/50 is exactly the threshold, so NHPI is not small here and stays the reference rate.
    assert _floats(table["share"]) == pytest.approx(
        [0.24, 0.14, 0.10, 0.06, 0.16, 0.12, 0.10, 0.06, 0.02]
    )
    assert not table["under_2pct"].any()
    assert not table["excluded"].any()
    assert _floats(table["impact_ratio"]) == pytest.approx(rates)
    assert list(table["below_four_fifths"]) == [True] * 8 + [False]


def _known(df: pd.DataFrame) -> pd.DataFrame:
    missing = {None, "", "unknown"}
    keep = df["selected"].notna()
    keep &= ~df["sex"].str.casefold().isin(missing) & df["sex"].notna()
    return df[keep & ~df["race"].isin(missing)].astype({"selected": int})


def test_rates_and_ratios_match_fairlearn(applicants: pd.DataFrame) -> None:
    audit = _audit(applicants)
    known_race = applicants[
        applicants["selected"].notna() & ~applicants["race"].isin({"", "unknown"})
    ]
    y = known_race["selected"].astype(int)
    frame = MetricFrame(
        metrics=selection_rate, y_true=y, y_pred=y, sensitive_features=known_race["race"]
    )
    race = audit.tables["race_ethnicity"].set_index("race")
    for category, rate in frame.by_group.items():
        assert race.loc[category, "selection_rate"] == pytest.approx(rate)
    oracle = demographic_parity_ratio(y, y, sensitive_features=known_race["race"])
    assert race["impact_ratio"].min() == pytest.approx(oracle)

    both = _known(applicants)
    features = both[["sex", "race"]]
    frame = MetricFrame(
        metrics=selection_rate,
        y_true=both["selected"],
        y_pred=both["selected"],
        sensitive_features=features,
    )
    inter = audit.tables["intersectional"].set_index(["sex", "race"])
    # fairlearn lists every sex × race product; Male NHPI has nobody, hence NaN.
    present = frame.by_group.dropna()
    assert len(present) == len(inter)
    for key, rate in present.items():
        assert inter.loc[key, "selection_rate"] == pytest.approx(rate)
    oracle = demographic_parity_ratio(
        both["selected"], both["selected"], sensitive_features=features
    )
    assert inter["impact_ratio"].min() == pytest.approx(oracle)


def test_ratios_with_exclusion_match_fairlearn_without_the_small_category(
    applicants: pd.DataFrame,
) -> None:
    race = _audit(applicants, exclude_small=True).tables["race_ethnicity"]
    rest = applicants[applicants["selected"].notna() & applicants["race"].isin(RACE_ORDER[:4])]
    y = rest["selected"].astype(int)
    oracle = demographic_parity_ratio(y, y, sensitive_features=rest["race"])
    assert race["impact_ratio"].min() == pytest.approx(oracle)


# Scoring example: (sex, race, score).
SCORES = [
    ("Male", WHITE, 90),
    ("Male", WHITE, 70),
    ("Male", BLACK, 50),
    ("Female", WHITE, 80),
    ("Female", BLACK, 60),
    ("Female", BLACK, 85),
    ("unknown", WHITE, 100),  # unknown sex, but in the whole sample the median is taken over
    ("Male", BLACK, 65),
    ("Female", BLACK, 72),  # exactly the median: not above it
    ("Female", WHITE, None),  # missing score
]
# Known scores sorted: 50 60 65 70 72 80 85 90 100 -> median 72 (the 5th of 9). Without the
# unknown-sex 100 it would be 71 and the 72 would count as above; with >= it would count too.
# Above 72: 90 (Male White), 80 (Female White), 85 (Female Black), 100 (unknown sex, White).
#   Sex (8 known): Male 90,70,50,65 -> 1/4; Female 80,60,85,72 -> 2/4; ratios 1/2, 1.
#   Race (9 known): White 90,70,80,100 -> 3/4; Black 50,60,85,65,72 -> 1/5; ratios 1, 4/15.
#   Intersectional (8): Male White 1/2, Male Black 0/2, Female White 1/1, Female Black 1/3;
#   highest 1, so ratios = rates; shares 2/8, 2/8, 1/8, 3/8.


@pytest.fixture
def scores() -> pd.DataFrame:
    return pd.DataFrame(SCORES, columns=["sex", "race", "score"])


def test_scoring_rate_uses_the_whole_sample_median_strictly(scores: pd.DataFrame) -> None:
    audit = ll144_tables(scores, sex_col="sex", race_col="race", score_col="score")
    assert audit.metric == "scoring_rate"
    assert audit.median_score == 72.0
    assert (audit.n_total, audit.n_missing_outcome) == (10, 1)
    assert audit.unknown == {"sex": 1, "race_ethnicity": 0, "intersectional": 1}
    assert audit.counts["median_score"].tolist() == [72.0]

    sex = audit.tables["sex"]
    assert list(sex.columns) == ["sex", *SCORING_COLUMNS]
    assert list(sex["n"]) == [4, 4]
    assert list(sex["n_above_median"]) == [1, 2]
    assert _floats(sex["scoring_rate"]) == pytest.approx([0.25, 0.5])
    assert _floats(sex["impact_ratio"]) == pytest.approx([0.5, 1.0])
    assert list(sex["below_four_fifths"]) == [True, False]

    race = audit.tables["race_ethnicity"]
    assert list(race["race"]) == [WHITE, BLACK]
    assert list(race["n"]) == [4, 5]
    assert list(race["n_above_median"]) == [3, 1]
    assert _floats(race["scoring_rate"]) == pytest.approx([0.75, 0.2])
    assert _floats(race["impact_ratio"]) == pytest.approx([1.0, 4 / 15])
    assert _floats(race["share"]) == pytest.approx([4 / 9, 5 / 9])

    inter = audit.tables["intersectional"]
    assert list(zip(inter["sex"], inter["race"], strict=True)) == [
        ("Male", WHITE),
        ("Male", BLACK),
        ("Female", WHITE),
        ("Female", BLACK),
    ]
    assert list(inter["n_above_median"]) == [1, 0, 1, 1]
    assert _floats(inter["scoring_rate"]) == pytest.approx([0.5, 0.0, 1.0, 1 / 3])
    assert _floats(inter["impact_ratio"]) == pytest.approx([0.5, 0.0, 1.0, 1 / 3])
    assert _floats(inter["share"]) == pytest.approx([0.25, 0.25, 0.125, 0.375])


def test_by_computes_each_stratum_on_its_own(applicants: pd.DataFrame) -> None:
    # Stratum "b", seen first: Male 4 with 1 selected, Female 2 with 2 selected, all White.
    # Sex: rates 1/4 and 1, ratios 1/4 and 1, shares 4/6 and 2/6. Stratum "a" is the example.
    small = pd.DataFrame(
        _rows([("Male", WHITE, 4, 1), ("Female", WHITE, 2, 2)]), columns=["sex", "race", "selected"]
    )
    df = pd.concat([small.assign(model="b"), applicants.assign(model="a")], ignore_index=True)
    audit = _audit(df, by="model")
    sex = audit.tables["sex"]
    assert list(sex.columns) == ["model", "sex", *SELECTION_COLUMNS]
    assert list(zip(sex["model"], sex["sex"], strict=True)) == [
        ("b", "Male"),
        ("b", "Female"),
        ("a", "Male"),
        ("a", "Female"),
    ]
    assert list(sex["n"]) == [4, 2, 28, 24]
    assert _floats(sex["selection_rate"]) == pytest.approx([0.25, 1.0, 13 / 28, 11 / 24])
    assert _floats(sex["impact_ratio"]) == pytest.approx([0.25, 1.0, 1.0, 77 / 78])
    assert _floats(sex["share"]) == pytest.approx([4 / 6, 2 / 6, 28 / 52, 24 / 52])

    race = audit.tables["race_ethnicity"]
    assert list(race["model"]) == ["b", "a", "a", "a", "a", "a"]
    assert _floats(race["impact_ratio"]) == pytest.approx([1.0, 0.5, 0.4, 0.3, 2 / 3, 1.0])

    counts = audit.counts
    assert list(counts["model"]) == ["b", "a"]
    assert list(counts["n_total"]) == [6, 55]
    assert list(counts["n_missing_outcome"]) == [0, 1]
    assert list(counts["unknown_intersectional"]) == [0, 4]
    assert audit.unknown == {"sex": 2, "race_ethnicity": 2, "intersectional": 4}
    assert (audit.n_total, audit.n_missing_outcome) == (61, 1)


def test_by_takes_each_strata_median_for_scores(scores: pd.DataFrame) -> None:
    # Stratum "y": scores 1, 2 (Male) and 3 (Female) -> median 2, only the 3 above it: Male 0/2,
    # Female 1/1. A median pooled with stratum "x" (62.5) would put nobody of "y" above it.
    other = pd.DataFrame(
        [("Male", WHITE, 1), ("Male", WHITE, 2), ("Female", WHITE, 3)],
        columns=["sex", "race", "score"],
    )
    df = pd.concat([scores.assign(model="x"), other.assign(model="y")], ignore_index=True)
    audit = ll144_tables(df, sex_col="sex", score_col="score", by=["model"])
    assert audit.median_score is None
    assert audit.counts["median_score"].tolist() == [72.0, 2.0]
    sex = audit.tables["sex"]
    assert list(sex["n_above_median"]) == [1, 2, 0, 1]
    assert _floats(sex["impact_ratio"]) == pytest.approx([0.5, 1.0, 0.0, 1.0])
    assert set(audit.tables) == {"sex"}


@pytest.mark.parametrize(
    "encode",
    [
        lambda v: v,
        lambda v: None if v is None else int(v),
        lambda v: "" if v is None else str(v).lower(),
        lambda v: "" if v is None else (" TRUE " if v else "False"),
        lambda v: None if v is None else ("1" if v else "0"),
        lambda v: None if v is None else (1 if v else "false"),
    ],
    ids=["bool", "int", "true-false", "case-and-space", "1-0-strings", "mixed"],
)
def test_selected_encodings_agree(applicants: pd.DataFrame, encode) -> None:
    expected = _audit(applicants)
    encoded = applicants.assign(selected=[encode(v) for v in applicants["selected"]])
    audit = _audit(encoded)
    assert audit.n_missing_outcome == 1
    for name, table in expected.tables.items():
        pd.testing.assert_frame_equal(audit.tables[name], table)


def test_caller_supplied_unknown_values(applicants: pd.DataFrame) -> None:
    df = applicants.copy()
    df.loc[df.index[:3], "race"] = "Declined to state"
    # By default "Declined to state" is a category of its own.
    assert "Declined to state" in set(_audit(df).tables["race_ethnicity"]["race"])
    audit = _audit(df, unknown_values=["unknown", "declined to state"])
    assert "Declined to state" not in set(audit.tables["race_ethnicity"]["race"])
    assert audit.unknown["race_ethnicity"] == 2 + 3
    # The default "unknown" is replaced, not kept, when the caller lists values.
    replaced = _audit(applicants, unknown_values=["n/a"])
    assert "unknown" in set(replaced.tables["race_ethnicity"]["race"])
    assert replaced.unknown["sex"] == 1  # only the missing one


def test_order_puts_listed_categories_first(applicants: pd.DataFrame) -> None:
    audit = _audit(applicants, order={"sex": ["Female"], "race": [ASIAN, WHITE]})
    assert list(audit.tables["sex"]["sex"]) == ["Female", "Male"]
    assert list(audit.tables["race_ethnicity"]["race"]) == [ASIAN, WHITE, BLACK, HISPANIC, NHPI]
    inter = audit.tables["intersectional"]
    assert list(zip(inter["sex"], inter["race"], strict=True))[:3] == [
        ("Female", ASIAN),
        ("Female", WHITE),
        ("Female", BLACK),
    ]


def test_no_one_selected_leaves_ratios_undefined() -> None:
    df = pd.DataFrame({"sex": ["Male", "Female", "Female"], "selected": [False, False, False]})
    table = ll144_tables(df, sex_col="sex", selected_col="selected").tables["sex"]
    assert list(table["selection_rate"]) == [0.0, 0.0]
    assert table["impact_ratio"].isna().all()
    assert table["below_four_fifths"].isna().all()


def test_empty_data_gives_empty_tables_and_zero_counts() -> None:
    df = pd.DataFrame({"sex": pd.Series([], dtype=object), "selected": pd.Series([], dtype=bool)})
    audit = ll144_tables(df, sex_col="sex", selected_col="selected")
    assert list(audit.tables["sex"].columns) == ["sex", *SELECTION_COLUMNS]
    assert audit.tables["sex"].empty
    assert audit.counts.to_dict("records") == [
        {"n_total": 0, "n_missing_outcome": 0, "n_assessed": 0, "unknown_sex": 0}
    ]


@pytest.mark.parametrize(
    ("change", "kwargs", "message"),
    [
        ({}, {"sex_col": "gender"}, "sex_col 'gender' is not a column"),
        ({}, {"by": ["model"]}, "by column #1 'model' is not a column"),
        ({"selected": "yes"}, {}, r"selected_col 'selected' .* e.g. 'yes'"),
        ({"selected": 2}, {}, r"selected_col 'selected' .* e.g. 2"),
        ({}, {"score_col": "race"}, "exactly one of selected_col"),
        ({}, {"selected_col": None}, "exactly one of selected_col"),
        ({}, {"sex_col": None, "race_col": None}, "give sex_col, race_col or both"),
        ({}, {"race_col": "sex"}, "column 'sex' is given both as sex_col and as race_col"),
        ({"model": None}, {"by": "model"}, "by column 'model' has 1 missing value"),
        ({}, {"order": {"selected": [True]}}, r"order names \['selected'\]"),
        ({}, {"threshold": 1.5}, "threshold"),
        ({"n": "x"}, {"race_col": "n"}, "race_col 'n' has the name of an output column"),
    ],
)
def test_input_errors_name_the_problem(
    applicants: pd.DataFrame, change: dict, kwargs: dict, message: str
) -> None:
    df = applicants.copy()
    for col, value in change.items():
        if col == "model":  # a by column that exists, so that only its one gap is wrong
            df[col] = "m"
        df.loc[df.index[0], col] = value
    arguments = {"sex_col": "sex", "race_col": "race", "selected_col": "selected", **kwargs}
    with pytest.raises(ValueError, match=message):
        ll144_tables(df, **arguments)


def test_non_numeric_score_is_named(scores: pd.DataFrame) -> None:
    df = scores.astype({"score": object})
    df.loc[2, "score"] = "high"
    with pytest.raises(ValueError, match=r"score_col 'score' .* e.g. 'high'"):
        ll144_tables(df, sex_col="sex", score_col="score")


def test_date_range_reads_iso_dates_and_datetimes() -> None:
    values = [
        "2024-03-02",
        "2024-01-05T23:30:00+05:00",  # counts on its date as written
        date(2024, 2, 1),
        pd.Timestamp("2024-02-10 08:00"),
        np.datetime64("2024-02-20"),
        None,
        "",
        np.nan,
    ]
    assert date_range(values) == ("2024-01-05", "2024-03-02")
    column = pd.Series(pd.to_datetime(["2023-12-31 12:00", "2023-06-01", None], format="ISO8601"))
    assert date_range(column) == ("2023-06-01", "2023-12-31")
    assert date_range([None, ""]) is None
    assert date_range([]) is None
    with pytest.raises(ValueError, match="03/02/2024"):
        date_range(["2024-01-01", "03/02/2024"])


def test_module_needs_only_pandas_and_numpy() -> None:
    source = ROOT / "analysis" / "audit" / "ll144.py"
    imported = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert imported <= {"__future__", "collections", "dataclasses", "datetime", "numpy", "pandas"}
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, analysis.audit.ll144; print(sorted(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
        cwd=source.parents[2],
    ).stdout
    assert "'simulator" not in loaded and "'scipy" not in loaded
