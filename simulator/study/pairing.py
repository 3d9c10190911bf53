"""Word-pairing stages: each call shows targets and a list of items in a fresh random order.

The LLM implicit-association prompt of Bai et al. (2024), used by the Bias-Transmission study
(seed 000, Experiments 1-2): "Here is a list of words. For each word pick a word - Emily or
Jacob - and write it after the word. The words are ...". Every call draws one target name per
value of an axis (one female, one male name), shows them in random order, and shuffles the
items (jobs), all from the call's own seed, so a rerun or a resume shows the same prompt. The
"pick 3 of 8" variant (seed 000, supplemental experiment 3) draws four names per value and asks
for three per item (``per_value``, ``picks``).
"""

from __future__ import annotations

import csv
import random
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field, model_validator

from biasim.simulator.common.errors import InputError, Problem
from biasim.simulator.study.fields import Identifier, Strict

if TYPE_CHECKING:
    pass


class PairingTargets(Strict):
    """The two targets every call pairs the items with: one name per value of an axis."""

    axis: Identifier = Field(description="The attribute the targets stand for, e.g. `gender`.")
    values: list[str] = Field(
        min_length=2,
        max_length=2,
        description="The two values; each call draws one target of each (e.g. [female, male]).",
    )
    name_bank: str | None = Field(
        None,
        description="A built-in name bank (`bias_transmission`) or a CSV path with a `name` "
        "column and a column named like `axis`; read into `names` when loading.",
    )
    names: dict[str, list[str]] = Field(
        default_factory=dict, description="Value -> the names a target of that value is drawn from."
    )
    per_value: int = Field(
        1,
        ge=1,
        description="Distinct names drawn per value in every call (4: four female and four "
        "male names, the eight shuffled together).",
    )

    @model_validator(mode="after")
    def _names_for_every_value(self) -> PairingTargets:
        for value in self.values:
            if not self.names.get(value):
                raise ValueError(f"no names for `{value}` (give `name_bank` or `names`)")
            if len(set(self.names[value])) < self.per_value:
                raise ValueError(
                    f"`per_value` is {self.per_value} but `{value}` has only "
                    f"{len(set(self.names[value]))} distinct names"
                )
        shared = set(self.names[self.values[0]]) & set(self.names[self.values[1]])
        if shared:
            raise ValueError(f"names {sorted(shared)} stand for both values")
        return self


class PairingConfig(Strict):
    """A stage whose prompt pairs a shuffled item list with two targets in random order.

    Templates see ``targets`` (the two target names in the order shown) and ``items`` (the items
    in the order shown); results get the columns ``targets``, ``target_values`` and ``items``
    (each ``|``-joined, in the order shown).
    """

    items: str = Field(
        description="CSV of the items (path relative to the study file), read into `rows`."
    )
    item_column: Identifier = Field("job", description="The column holding the item text.")
    subset_column: Identifier | None = Field(
        None, description="A column whose value selects the items one call shows (e.g. `list`)."
    )
    subset_from: Identifier | None = Field(
        None,
        description="The template variable (a factor's) whose value picks rows by "
        "`subset_column` (e.g. `job_list`: `disparity` or `control`).",
    )
    per_call: int | None = Field(
        None, ge=1, description="Items shown per call (all when absent): 1 is one job per prompt."
    )
    picks: int = Field(
        1,
        ge=1,
        description="Targets the answer names per item (3: pick 3 of the people shown); more "
        "than 1 needs `per_call: 1`, and the answer is read by the `picks` analysis.",
    )
    targets: PairingTargets
    rows: list[dict[str, str]] = Field(
        default_factory=list, description="The items' rows, read from `items` when loading."
    )

    @model_validator(mode="after")
    def _subset_both_or_neither(self) -> PairingConfig:
        if (self.subset_column is None) != (self.subset_from is None):
            raise ValueError("`subset_column` and `subset_from` go together")
        if self.picks > 1 and self.per_call != 1:
            # Several names per item are read from the whole answer: one item per call.
            raise ValueError("`picks` above 1 needs `per_call: 1`")
        shown = self.targets.per_value * len(self.targets.values)
        if self.picks >= shown:
            raise ValueError(f"`picks` must be below the {shown} targets shown")
        return self


@dataclass(frozen=True, slots=True)
class Trial:
    """What one call shows: the targets ``(name, value)`` and the items, in the order shown."""

    targets: tuple[tuple[str, str], ...]
    items: tuple[str, ...]

    def context(self) -> dict[str, Any]:
        """The template variables of this trial."""
        return {"targets": [name for name, _ in self.targets], "items": list(self.items)}

    def columns(self) -> dict[str, str]:
        """The results columns of this trial."""
        return {
            "targets": "|".join(name for name, _ in self.targets),
            "target_values": "|".join(value for _, value in self.targets),
            "items": "|".join(self.items),
        }


def pool(pairing: PairingConfig, variables: dict[str, Any]) -> list[str]:
    """The items a call with template ``variables`` draws from, in file order."""
    rows = pairing.rows
    if pairing.subset_column is not None:
        wanted = str(variables.get(pairing.subset_from or "", ""))
        rows = [r for r in rows if r.get(pairing.subset_column) == wanted]
    return [r[pairing.item_column] for r in rows]


def draw_trial(pairing: PairingConfig, variables: dict[str, Any], seed: int) -> Trial:
    """The targets and items of the call seeded ``seed``: ``per_value`` distinct names per value
    drawn uniformly, all in random order, and the items in random order (``per_call`` of
    them)."""
    rng = random.Random(seed)
    spec = pairing.targets
    if spec.per_value == 1:
        # One draw per value, as before `per_value` existed: earlier runs' prompts stay the same.
        targets = [(rng.choice(spec.names[v]), v) for v in spec.values]
    else:
        targets = [
            (name, v)
            for v in spec.values
            for name in rng.sample(sorted(set(spec.names[v])), spec.per_value)
        ]
    rng.shuffle(targets)
    items = pool(pairing, variables)
    rng.shuffle(items)
    if pairing.per_call is not None:
        items = items[: pairing.per_call]
    return Trial(tuple(targets), tuple(items))


def read_items(path: Path, pairing: dict[str, Any]) -> list[dict[str, str]]:
    """The rows of an items CSV, each checked: the item column present and non-empty, no item
    twice, no ``|`` (the results join items with it).

    Raises:
        InputError: Naming the file, line and column of every problem.
    """
    try:
        handle = path.open(encoding="utf-8", newline="")
    except OSError as exc:
        raise InputError(f"{path}: cannot read pairing items: {exc.strerror or exc}") from None
    column = pairing.get("item_column", "job")
    needed = [column] + ([pairing["subset_column"]] if pairing.get("subset_column") else [])
    problems: list[Problem] = []
    rows: list[dict[str, str]] = []
    with handle:
        reader = csv.DictReader(handle)
        missing = [c for c in needed if c not in (reader.fieldnames or [])]
        if missing:
            raise InputError([Problem(str(path), 1, c, "no such column") for c in missing])
        seen: set[str] = set()
        for row in reader:
            line = reader.line_num
            item = (row.get(column) or "").strip()
            if not item:
                problems.append(Problem(str(path), line, column, "empty item"))
            elif "|" in item:
                problems.append(Problem(str(path), line, column, "an item may not contain `|`"))
            elif item.lower() in seen:
                problems.append(Problem(str(path), line, column, f"`{item}` repeats"))
            seen.add(item.lower())
            rows.append({k: (v or "").strip() for k, v in row.items() if k is not None})
    if problems:
        raise InputError(problems)
    return rows
