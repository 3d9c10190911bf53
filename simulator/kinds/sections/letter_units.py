"""The unit of the letters tests (issue 27): given (``unit:`` / ``--unit-col``) or inferred
from what repeats, and what the report says beside the tests.

Letters of one writer or for one name share its habits; the lexicon and style tests then relabel
units, not letters (``analysis.stats.clusters``). A study's letters repeat a unit when a name
from the name bank is used for several letters of a group and each group has two names or more
(one name per group, as Kelly and Joseph, is the contrast itself). Counterfactual pairs make the
pair the unit.
"""

from __future__ import annotations

from dataclasses import dataclass

from biasim.simulator.kinds.lazy import clusters, pd

#: ``unit:`` keywords besides a design factor or recorded variable.
LETTER = "letter"
NAME = "name"
#: Results column of the ``name`` unit.
NAME_COLUMN = "persona_name"


@dataclass(frozen=True)
class LetterUnit:
    """The unit the tests use: a column of the letters (None: each letter), its printed name,
    and a sentence for the report (how it was chosen, or the warning)."""

    column: str | None
    note: str = ""
    problem: str = ""
    #: The unit's name in tables and reports (``name`` for the persona_name column).
    label: str | None = None

    def frame_with_label(self, frame: pd.DataFrame) -> pd.DataFrame:
        """``frame`` with the unit under its printed name (the tables' ``unit`` column)."""
        if self.column is None or self.label in (None, self.column):
            return frame
        return frame.assign(**{str(self.label): frame[self.column]})

    @property
    def test_column(self) -> str | None:
        """The column the tests relabel by (None: each letter)."""
        return self.label or self.column


def study_unit(
    unit: str | None, pair: str | None, kept: pd.DataFrame, group: str, groups: tuple[str, str]
) -> LetterUnit:
    """The unit of a study's letters analysis, given or inferred (see the module docstring)."""
    if pair is not None:
        return LetterUnit(None, f"unit: {pair} (counterfactual pairs)")
    if unit == LETTER:
        return LetterUnit(None, "unit: letter (`unit: letter`: letters independent)")
    if unit is not None:
        column = NAME_COLUMN if unit == NAME else unit
        return _checked(kept, column, unit, group, groups, "given")
    compared = kept[kept[group].isin(groups)]
    if NAME_COLUMN in compared and clusters.repeats_within_groups(compared, NAME_COLUMN, group):
        return _checked(kept, NAME_COLUMN, NAME, group, groups, "inferred: names repeat")
    return LetterUnit(None, "unit: letter (no writer or name repeats)")


def texts_unit(
    frame: pd.DataFrame,
    unit_col: str | None,
    group: str,
    skip: set[str],
    pair_col: str | None = None,
    groups: tuple[str, str] = ("", ""),
) -> LetterUnit:
    """The unit of ``analyze --texts``: the pair (``--pair-col``), ``--unit-col``, or each
    letter with a warning naming columns that look like repeating units."""
    if pair_col is not None:
        return LetterUnit(
            None,
            f"unit: {pair_col} (counterfactual pairs, --pair-col): the paired tests are "
            f"one-sided, {groups[0]} > {groups[1]} (--compare); the counterfactual metrics are "
            "two-sided; Student's and Welch's p count letters as independent",
        )
    if unit_col is not None:
        return LetterUnit(unit_col, f"unit: {unit_col} (--unit-col)")
    found = clusters.repeating_columns(frame, group, skip)
    if not found:
        return LetterUnit(None, "unit: letter (letters treated as independent)")
    return LetterUnit(
        None,
        f"warning: column(s) {', '.join(f'`{c}`' for c in found)} repeat within the groups; "
        "if they name who wrote the letters (or for whom), the letters are not independent "
        "and the tests below reject too often: give --unit-col",
    )


def _checked(
    kept: pd.DataFrame, column: str, unit: str, group: str, groups: tuple[str, str], how: str
) -> LetterUnit:
    """The unit, or a problem when its units mix letters of one group with letters of both."""
    compared = kept[kept[group].isin(groups)]
    try:
        clusters.unit_layout((compared[group] == groups[1]).to_numpy(), compared[column])
    except ValueError as exc:
        return LetterUnit(column, problem=f"no test with unit `{unit}`: {exc}", label=unit)
    return LetterUnit(column, f"unit: {unit} ({how})", label=unit)
