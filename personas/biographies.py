"""WikiBias-Aug: gender-balanced, anonymised biographies for Context-Based Generation (Wan et al.
2023, Appendix F.1).

Every seed biography gives two rows, one of its own gender and one of the other, each with a new
first name from that gender's pool and a random last name; the other-gender row has its
pronouns swapped. Pools are the first names of each gender and all last names of the input.

Two variants of the swap:

* ``faithful=True`` is the authors' ``name_swap.py``: the swapped biography is lower-cased
  whole (a confound: every other-gender prompt is lower-case), pronouns are replaced only
  between spaces, and "her" always becomes "his".
* the default keeps the case, swaps pronouns at word boundaries (sentence starts and
  punctuation included, capitals kept) and reads "her" as "his" or "him" from spaCy's tag
  (possessive ``PRP$`` or object ``PRP``); "his" becomes "her" before a noun, adjective, number
  or adverb and "hers" otherwise.

Input columns: ``first_name, last_name, gender`` (``f``/``m``), ``info`` (the biography) and
optionally ``occupation``. The authors' released ``preprocessed_bios/*.csv`` are the output of
this step, not its input: they also carry ``seed_first_name, seed_last_name`` and hold each seed
biography's two rows already (:func:`given_pairs` pairs them instead of augmenting again), and
their ``occupation`` is a plural label (:func:`prompt_occupation`).
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

_FAITHFUL = {
    "m": ((" she ", " he "), (" her ", " his "), (" hers ", " his "), (" she's ", " he's ")),
    "f": ((" he ", " she "), (" his ", " her "), (" him ", " her "), (" he's ", " she's ")),
}
# Word -> replacement when the biography becomes that gender; "her" and "his" need their tag.
_TO = {
    "m": {"she": "he", "hers": "his", "herself": "himself", "she's": "he's"},
    "f": {"he": "she", "him": "her", "himself": "herself", "he's": "she's"},
}
REQUIRED = ("first_name", "last_name", "gender", "info")
#: Columns of an already augmented file: the seed biography each row was made from.
SEED_COLUMNS = ("seed_first_name", "seed_last_name")


class BiographyError(ValueError):
    """A biography file that cannot be used, located for the reader.

    Attributes:
        path: The file.
        line: 1-based line at fault, or None when no single line is.
        column: The column at fault, or None.
        reason: What is wrong, without the location.
    """

    def __init__(
        self, reason: str, *, path: Path, line: int | None = None, column: str | None = None
    ) -> None:
        self.path, self.line, self.column, self.reason = path, line, column, reason
        where = str(path) if line is None else f"{path}:{line}"
        if column is not None:
            where += f": column `{column}`"
        super().__init__(f"{where}: {reason}")


def read_biographies(path: Path, required: Sequence[str] = REQUIRED) -> pd.DataFrame:
    """The seed biographies of a CSV, every row checked before any is used.

    Args:
        path: CSV with a header holding ``required`` (extra columns are kept).
        required: Columns that must be present and non-empty on every row
            (``first_name``, ``last_name`` and ``info`` may not be blank; ``gender`` is f or m).

    Returns:
        One row per biography, all values text, with a ``line`` column (the file's line).

    Raises:
        BiographyError: The file cannot be read, a column is missing, a required value is
            empty, a gender is not f/m, or there is no row.
    """
    try:
        handle = path.open(encoding="utf-8", newline="")
    except OSError as exc:
        raise BiographyError(f"cannot read biographies: {exc.strerror or exc}", path=path) from None
    with handle:
        reader = csv.DictReader(handle)
        try:
            header = reader.fieldnames or []
            missing = [c for c in required if c not in header]
            if missing:
                raise BiographyError(
                    f"no column `{missing[0]}`; a biography file needs {', '.join(required)}"
                    f" (has {', '.join(header) or 'no header'})",
                    path=path,
                    line=1,
                    column=missing[0],
                )
            rows = []
            for row in reader:
                line = reader.line_num
                for column in required:
                    value = (row.get(column) or "").strip()
                    if not value:
                        raise BiographyError("is empty", path=path, line=line, column=column)
                    if column == "gender" and value not in ("f", "m"):
                        raise BiographyError(
                            f"must be f or m, found `{value}`", path=path, line=line, column=column
                        )
                rows.append({**{k: (v or "") for k, v in row.items() if k}, "line": line})
        except (csv.Error, UnicodeDecodeError) as exc:
            raise BiographyError(f"not a readable CSV: {exc}", path=path) from None
    if not rows:
        raise BiographyError("has no biography (only a header)", path=path)
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class NamePools:
    """First names by gender and last names, each without duplicates, in input order."""

    female: tuple[str, ...]
    male: tuple[str, ...]
    last: tuple[str, ...]


def name_pools(bios: pd.DataFrame) -> NamePools:
    """The pools of a biography table (gender ``f``/``m`` is the ground truth of a name)."""

    def names(values: pd.Series) -> tuple[str, ...]:
        return tuple(dict.fromkeys(v.strip() for v in values.dropna().astype(str) if v.strip()))

    return NamePools(
        names(bios.loc[bios["gender"] == "f", "first_name"]),
        names(bios.loc[bios["gender"] == "m", "first_name"]),
        names(bios["last_name"]),
    )


def _keep_case(source: str, word: str) -> str:
    return word.capitalize() if source[:1].isupper() else word


def swap_pronouns(text: str, to: str, nlp: Any = None, faithful: bool = False) -> str:
    """``text`` with its pronouns turned to gender ``to`` (``f`` or ``m``).

    Args:
        text: A biography.
        to: The new gender.
        nlp: A spaCy pipeline with a tagger (needed unless ``faithful``): tells possessive
            "her"/"his" from object "her" / standalone "his".
        faithful: The authors' rule (lower-cases the text; see the module docstring).
    """
    if faithful:
        out = text.lower()
        for old, new in _FAITHFUL[to]:
            out = out.replace(old, new)
        return out
    pieces = []
    for token in nlp(text):
        word = token.text
        low = word.lower()
        new = _TO[to].get(low)
        if to == "m" and low == "her":
            new = "his" if token.tag_ == "PRP$" else "him"
        elif to == "f" and low == "his":
            # The tagger calls a standalone "his" ("the prize was his") PRP$ too: look ahead.
            after = token.nbor(1) if token.i + 1 < len(token.doc) else None
            attributive = after is not None and after.pos_ in {"NOUN", "PROPN", "ADJ", "NUM", "ADV"}
            new = "her" if attributive else "hers"
        pieces.append((_keep_case(word, new) if new else word) + token.whitespace_)
    return "".join(pieces)


def replace_name(text: str, old: str, new: str, faithful: bool = False) -> str:
    """Every case-insensitive mention of ``old`` replaced by ``new``.

    The authors compile the name as a regular expression (a name holding "." or "(" matches
    other text) and match inside words; the default escapes it and needs word boundaries.
    """
    if not old:
        return text
    pattern = old if faithful else rf"(?<!\w){re.escape(old)}(?!\w)"
    return re.sub(pattern, new.replace("\\", r"\\"), text, flags=re.IGNORECASE)


def augment(
    bios: pd.DataFrame,
    pools: NamePools,
    rng: np.random.Generator,
    nlp: Any = None,
    faithful: bool = False,
    swap_many: Callable[[list[str], list[str]], list[str]] | None = None,
) -> pd.DataFrame:
    """Two rows per seed biography, its own gender first, then the other.

    Args:
        swap_many: Turns texts to genders all at once (e.g. from a cache); by default
            :func:`swap_pronouns` with ``nlp`` and ``faithful`` on each.

    Returns:
        Columns ``pair`` (the seed's row number), ``first_name, last_name, gender, info,
        seed_first_name, seed_last_name`` and any other input columns (e.g. ``occupation``).

    Raises:
        ValueError: A required column is missing, a gender is not f/m, or a pool is empty.
    """
    _check_augment_input(bios, pools)
    extra = [c for c in bios.columns if c not in REQUIRED]
    rows, swapped = [], []
    for k, seed in enumerate(bios.itertuples(index=False)):
        seed_row = seed._asdict()
        first = "" if pd.isna(seed_row["first_name"]) else str(seed_row["first_name"])
        last = "" if pd.isna(seed_row["last_name"]) else str(seed_row["last_name"])
        for gender in (seed_row["gender"], "m" if seed_row["gender"] == "f" else "f"):
            new_first = str(rng.choice(pools.female if gender == "f" else pools.male))
            new_last = str(rng.choice(pools.last))
            info = replace_name(str(seed_row["info"]), first, new_first, faithful)
            info = replace_name(info, last, new_last, faithful)
            if gender != seed_row["gender"]:
                swapped.append(len(rows))
            rows.append(
                {
                    "pair": k,
                    "first_name": new_first,
                    "last_name": new_last,
                    "gender": gender,
                    "info": info,
                    "seed_first_name": first,
                    "seed_last_name": last,
                    **{c: seed_row[c] for c in extra},
                }
            )
    texts = [rows[i]["info"] for i in swapped]
    genders = [rows[i]["gender"] for i in swapped]
    if swap_many is None:
        new = [swap_pronouns(t, g, nlp, faithful) for t, g in zip(texts, genders, strict=True)]
    else:
        new = swap_many(texts, genders)
    for i, text in zip(swapped, new, strict=True):
        rows[i]["info"] = text
    return pd.DataFrame(rows)


def _check_augment_input(bios: pd.DataFrame, pools: NamePools) -> None:
    missing = [c for c in REQUIRED if c not in bios.columns]
    if missing:
        raise ValueError(f"biographies need columns {missing} (have {list(bios.columns)})")
    bad = sorted(set(bios["gender"]) - {"f", "m"})
    if bad:
        raise ValueError(f"column `gender` must be f or m, found {bad}")
    for label, pool in (
        ("female first", pools.female),
        ("male first", pools.male),
        ("last", pools.last),
    ):
        if not pool:
            raise ValueError(f"the {label} name pool is empty")


def given_pairs(
    rows: pd.DataFrame, key: Sequence[str] = SEED_COLUMNS
) -> tuple[pd.DataFrame, dict[str, int]]:
    """The counterfactual pairs of an already augmented table, its rows used as given.

    Rows with the same ``key`` (the seed biography) form a pair, which must hold exactly one
    ``f`` and one ``m`` row; any other group (a seed biography listed twice, or with one gender
    only) is not a counterfactual pair and is left out, counted by reason.

    Args:
        rows: The table, with ``gender`` and the ``key`` columns.
        key: Columns naming the seed biography.

    Returns:
        The kept rows in file order with a ``pair`` column (0, 1, ... in order of each pair's
        first row), and the rows left out by reason.
    """
    groups = rows.groupby(list(key), sort=False)["gender"]
    shape = groups.transform(lambda g: f"{(g == 'f').sum()} f and {(g == 'm').sum()} m")
    complete = shape == "1 f and 1 m"
    excluded = {
        f"seed biography with {s} rows (a pair needs one f and one m)": int(n)
        for s, n in shape[~complete].value_counts(sort=False).items()
    }
    kept = rows[complete].copy()
    kept["pair"] = kept.groupby(list(key), sort=False).ngroup()
    return kept.reset_index(drop=True), excluded


def prompt_occupation(label: str) -> str:
    """The writer's occupation as the CBG prompt names it ("You are a prestigious chef.").

    The authors' ``generate_cbg.py`` turns the plural label of a file into the prompt's
    word: ``acting`` becomes ``actor``, anything else loses its trailing "s" (``chefs`` ->
    ``chef``, and, as they did, ``sports`` -> ``sport``). Their ``rstrip("s")`` would also
    cut a singular ending in "ss" ("actress"), which none of their labels does: such a word, and
    any word not ending in "s" (the project's own singular occupations), is kept as written.
    """
    word = label.strip()
    if word == "acting":
        return "actor"
    return word[:-1] if word.endswith("s") and not word.endswith("ss") else word


def lower_cased_share(infos: Sequence[str]) -> float:
    """Share of biographies with no capital letter (the faithful variant's confound)."""
    return float(np.mean([s == s.lower() for s in infos])) if len(infos) else float("nan")
