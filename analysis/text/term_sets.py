"""Term sets: the files shipped with biasim, reading a term-set YAML and checking its terms.

A light module (yaml and re only): validating a study reads and checks the term sets it declares,
and validation does not import pandas or scipy (:mod:`analysis.text.terms` counts the terms).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml

BUNDLED_TERM_SETS: dict[str, Path] = {
    "li2025": Path(__file__).resolve().parents[1] / "data" / "li2025_terms.yaml",
}


def checked_set(name: str, terms: Sequence[str]) -> None:
    """Raise ValueError unless ``terms`` is a non-empty list (a bare string is not)."""
    if isinstance(terms, str) or not terms:
        raise ValueError(f"term set `{name}` needs a non-empty list of terms")


def checked_term(name: str, term: str) -> re.Pattern[str]:
    """``term`` compiled as written; ValueError naming the set and term when it is not a
    regex or matches the empty string (it would "match" every document)."""
    try:
        bare = re.compile(term)
    except re.error as err:
        raise ValueError(f"term set `{name}`: invalid regex `{term}`: {err}") from err
    if bare.fullmatch(""):
        raise ValueError(f"term set `{name}`: term `{term}` matches the empty string")
    return bare


def load_term_sets(path: str | Path) -> dict[str, list[str]]:
    """Read named term sets from YAML.

    The file maps each set name to ``{source: <quoted origin>, terms: [<term>, ...]}``; every
    set must say where its terms come from (``term_set_sources``). A term is plain words
    ("personal safety") or a regex ("so(n|ns)"); see ``analysis.text.terms.term_counts``.

    Args:
        path: YAML file, e.g. ``BUNDLED_TERM_SETS["li2025"]``.

    Returns:
        Set name -> list of terms, in file order.

    Raises:
        ValueError: The file is malformed, a set lacks ``source`` or ``terms``, or a term is not a
            valid regex (the message names the file, the set and the term).
    """
    return {name: terms for name, (_, terms) in _read_term_sets(Path(path)).items()}


def check_term_sets(term_sets: Mapping[str, Sequence[str]]) -> None:
    """Raise ValueError naming the set and term when a set is empty or a term is unusable."""
    for name, terms in term_sets.items():
        checked_set(name, terms)
        for term in terms:
            checked_term(name, term)


def term_set_sources(path: str | Path) -> dict[str, str]:
    """Set name -> the ``source`` the file gives for it (where its terms come from)."""
    return {name: source for name, (source, _) in _read_term_sets(Path(path)).items()}


def _read_term_sets(path: Path) -> dict[str, tuple[str, list[str]]]:
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(raw, dict) or not raw:
        raise ValueError(f"{path}: expected a mapping of term-set names to {{source, terms}}")
    entries: dict[str, tuple[str, list[str]]] = {}
    for name, entry in raw.items():
        if not isinstance(entry, dict) or set(entry) != {"source", "terms"}:
            raise ValueError(f"{path}: term set `{name}` needs exactly the keys source and terms")
        if not isinstance(entry["source"], str) or not entry["source"].strip():
            raise ValueError(f"{path}: term set `{name}` needs a non-empty source")
        terms = entry["terms"]
        if not isinstance(terms, list) or not all(isinstance(t, str) for t in terms):
            raise ValueError(f"{path}: term set `{name}`: terms must be a list of strings")
        entries[str(name)] = (" ".join(entry["source"].split()), list(terms))
    try:
        check_term_sets({name: terms for name, (_, terms) in entries.items()})
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from err
    return entries
