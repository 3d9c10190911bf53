"""Name banks and the An et al. 2024 role list, checked against the papers' own text."""

from __future__ import annotations

import csv
import re
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from biasim.personas.namebank import NameBank, NameBankError, load_name_bank
from tests.paths import ROOT, SHARED

REPO = ROOT
ROLES_CSV = REPO / "scenarios" / "an2024_hiring" / "data" / "an2024_roles.csv"
#: The papers and reference data beside the repository (tests skip when absent).
SEED_AN2024 = SHARED / "seeds" / "001_f3dfa8e8505f4fe7.txt"
SEED_BIAS_TRANSMISSION = SHARED / "seeds" / "000_f0400aa19949a666.txt"
REFERENCE_NAMES = Path(
    SHARED / "reference" / "llm-prediction-bias" / "extracted" / "an2024_style_names_300.csv"
)

RACES = ("White", "Black", "Hispanic")
GENDERS = ("female", "male")

# WinoBias (Zhao et al. 2018) occupation lists, the oracle for the roles file.
WINOBIAS_MALE = [
    "driver",
    "supervisor",
    "janitor",
    "cook",
    "mover",
    "laborer",
    "construction_worker",
    "chief",
    "developer",
    "carpenter",
    "manager",
    "lawyer",
    "farmer",
    "salesperson",
    "physician",
    "guard",
    "analyst",
    "mechanic",
    "sheriff",
    "ceo",
]
WINOBIAS_FEMALE = [
    "attendant",
    "cashier",
    "teacher",
    "nurse",
    "assistant",
    "secretary",
    "auditor",
    "cleaner",
    "receptionist",
    "clerk",
    "counselor",
    "designer",
    "hairdresser",
    "writer",
    "housekeeper",
    "baker",
    "accountant",
    "editor",
    "librarian",
    "tailor",
]
BLS_CATEGORIES = {
    "No formal educational credential",
    "High school diploma or equivalent",
    "Postsecondary nondegree award",
    "Some college, no degree",
    "Associate's degree",
    "Bachelor's degree",
    "Master's degree",
    "Doctoral or professional degree",
}


@pytest.fixture(scope="module")
def an2024() -> NameBank:
    return load_name_bank("an2024")


@pytest.fixture(scope="module")
def bias_transmission() -> NameBank:
    return load_name_bank("bias_transmission")


def _paper_lists() -> dict[tuple[str, str], list[str]]:
    """Appendix A.2 of An et al. 2024: each '<Race> <gender> names' heading, then its line."""
    if not SEED_AN2024.exists():
        pytest.skip("An et al. 2024 seed text is absent")
    lines = SEED_AN2024.read_text(encoding="utf-8").splitlines()
    lists: dict[tuple[str, str], list[str]] = {}
    for i, line in enumerate(lines):
        m = re.fullmatch(r"(White|Black|Hispanic) (female|male) names", line.strip())
        if m:
            body = next(text for text in lines[i + 1 :] if text.strip())
            lists[m.group(1), m.group(2)] = [n.strip() for n in body.split(",")]
    return lists


# --- An et al. 2024 names -------------------------------------------------------------------


def test_an2024_has_300_unique_names_50_per_group(an2024: NameBank) -> None:
    assert an2024.columns == ("race", "gender")
    names = [row.name for row in an2024.rows]
    assert len(names) == 300
    assert len(set(names)) == 300
    counts = Counter((row.value("race"), row.value("gender")) for row in an2024.rows)
    assert counts == {(race, gender): 50 for race in RACES for gender in GENDERS}


def test_an2024_matches_the_paper_appendix_in_order(an2024: NameBank) -> None:
    lists = _paper_lists()
    assert set(lists) == {(race, gender) for race in RACES for gender in GENDERS}
    for (race, gender), names in lists.items():
        assert len(names) == 50
        assert an2024.names_for({"race": race, "gender": gender}) == names
    # The file lists the groups in the paper's order, as the appendix prints them.
    assert [row.name for row in an2024.rows] == [n for names in lists.values() for n in names]


def test_an2024_agrees_with_the_third_party_reimplementation_by_race(an2024: NameBank) -> None:
    if not REFERENCE_NAMES.exists():
        pytest.skip("reference name list is absent")
    ref = pd.read_csv(REFERENCE_NAMES)
    # Its gender column is inferred from list position, so only race is an independent claim.
    for race in RACES:
        ours = set(an2024.names_for({"race": race}))
        theirs = set(ref.loc[ref["race"] == race.lower(), "name"])
        assert ours == theirs, race


def test_names_for_an2024(an2024: NameBank) -> None:
    white_male = an2024.names_for({"race": "White", "gender": "male"})
    assert white_male[:3] == ["Bart", "Beau", "Braden"]
    assert white_male[-1] == "Wyatt"
    assert "Shanika" in an2024.names_for({"race": "Black", "gender": "female"})
    female = an2024.names_for({"gender": "female"})
    assert len(female) == 150
    assert female[0] == "Abbey" and female[-1] == "Zoraida"
    assert len(an2024.names_for({})) == 300
    assert an2024.values("race") == list(RACES)
    assert an2024.values("gender") == list(GENDERS)


def test_names_for_rejects_unknown_column_and_value(an2024: NameBank) -> None:
    with pytest.raises(NameBankError) as err:
        an2024.names_for({"race": "white"})  # exact match: the bank spells it "White"
    assert err.value.column == "race"
    assert "White" in str(err.value)
    with pytest.raises(NameBankError) as err:
        an2024.names_for({"age": "young"})
    assert err.value.column == "age"


# --- Bias-Transmission names ----------------------------------------------------------------


def test_bias_transmission_names_match_the_paper(bias_transmission: NameBank) -> None:
    female = bias_transmission.names_for({"gender": "female"})
    male = bias_transmission.names_for({"gender": "male"})
    assert female == [
        "Emily", "Jessica", "Ashley", "Hannah", "Samantha",
        "Amanda", "Brittany", "Sarah", "Jennifer",
    ]  # fmt: skip
    assert male == [
        "Andrew", "Matthew", "Michael", "David", "Daniel",
        "Tyler", "Joshua", "Christopher", "Jacob",
    ]  # fmt: skip
    assert bias_transmission.columns == ("gender",)
    if not SEED_BIAS_TRANSMISSION.exists():
        pytest.skip("Bias-Transmission seed text is absent")
    text = SEED_BIAS_TRANSMISSION.read_text(encoding="utf-8")
    for label, ours in (("Female", female), ("Male", male)):
        m = re.search(rf"^{label} Names:(.*)$", text, re.M)
        assert m is not None
        assert [n.strip() for n in m.group(1).split(",")] == ours


def test_load_by_path_equals_builtin(an2024: NameBank) -> None:
    again = load_name_bank(an2024.path)
    assert again == an2024
    assert load_name_bank(str(an2024.path)).rows == an2024.rows


# --- Roles ----------------------------------------------------------------------------------


def _roles() -> list[dict[str, str]]:
    with ROLES_CSV.open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def test_roles_file_has_41_roles_with_documented_counts() -> None:
    rows = _roles()
    assert list(rows[0]) == ["role", "label", "winobias_gender", "bls_education", "subset7"]
    assert len(rows) == 41
    assert len({r["role"] for r in rows}) == 41
    # 40 WinoBias occupations minus developer and CEO (see scenarios/an2024_hiring/README.md).
    assert Counter(r["winobias_gender"] for r in rows) == {"male": 18, "female": 20, "none": 3}
    by_role = {r["role"]: r for r in rows}
    for gender, occupations in (("male", WINOBIAS_MALE), ("female", WINOBIAS_FEMALE)):
        kept = {r["role"] for r in rows if r["winobias_gender"] == gender}
        assert kept == set(occupations) - {"developer", "ceo"}
    assert {r["role"] for r in rows if r["winobias_gender"] == "none"} == {
        "unspecified",
        "software_engineer",
        "cto",
    }
    assert by_role["unspecified"]["label"] == ""
    assert by_role["unspecified"]["bls_education"] == "none"
    assert by_role["mechanic"]["label"] == "mechanic"
    assert by_role["cto"]["label"] == "CTO"
    for r in rows:
        assert re.fullmatch(r"[a-z][a-z0-9_]*", r["role"])
        if r["role"] != "unspecified":
            assert r["label"] and r["label"].strip() == r["label"]
            assert r["bls_education"] in BLS_CATEGORIES, r["role"]


def test_roles_subset7_is_the_papers_seven() -> None:
    rows = _roles()
    assert {r["subset7"] for r in rows} == {"true", "false"}
    subset = {r["role"] for r in rows if r["subset7"] == "true"}
    # Footnote 2: under-specified, software engineer, CTO, secretary, hairdresser, carpenter,
    # mechanician (= mechanic).
    assert subset == {
        "unspecified",
        "software_engineer",
        "cto",
        "secretary",
        "hairdresser",
        "carpenter",
        "mechanic",
    }


# --- Errors ---------------------------------------------------------------------------------


def _write(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "bank.csv"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("text", "line", "column", "fragment"),
    [
        ("first,gender\nAnna,female\n", 1, "name", "missing column"),
        ("name,gender\nAnna,female\nBen,male\nAnna,female\n", 4, "name", "on line 2"),
        ("name,gender\nAnna,female\nBen,\n", 3, "gender", "blank value"),
        ("name,gender\nAnna,female\n  ,male\n", 3, "name", "empty name"),
        ("name,gender\n\nAnna,female\nBen,male,extra\n", 4, None, "3 fields"),
        ("name,gender,gender\nAnna,female,female\n", 1, "gender", "twice"),
        ("name\nAnna\n", 1, None, "no attribute column"),
        ("", 1, None, "empty"),
    ],
)
def test_broken_banks_report_line_and_column(
    tmp_path: Path, text: str, line: int, column: str | None, fragment: str
) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(NameBankError) as err:
        load_name_bank(path)
    assert err.value.path == path
    assert err.value.line == line
    assert err.value.column == column
    assert fragment in str(err.value)
    assert str(err.value).startswith(f"{path}:{line}")


def test_same_name_under_different_attributes_is_allowed(tmp_path: Path) -> None:
    bank = load_name_bank(_write(tmp_path, "name,gender\nJody,female\nJody,male\n"))
    assert bank.names_for({"gender": "female"}) == ["Jody"]
    assert [row.line for row in bank.rows] == [2, 3]


def test_bad_encoding_and_missing_file(tmp_path: Path) -> None:
    path = _write(tmp_path, b"name,gender\nAnna,female\nJos\xe9,male\n")
    with pytest.raises(NameBankError) as err:
        load_name_bank(path)
    assert err.value.line == 3
    assert "UTF-8" in str(err.value)
    with pytest.raises(NameBankError) as err:
        load_name_bank(tmp_path / "absent.csv")
    assert err.value.line is None
    assert isinstance(err.value, ValueError)


def test_bom_and_spaces_are_tolerated(tmp_path: Path) -> None:
    bank = load_name_bank(_write(tmp_path, "\ufeffname, gender\n Anna , female\n"))
    assert bank.columns == ("gender",)
    assert bank.names_for({"gender": "female"}) == ["Anna"]
