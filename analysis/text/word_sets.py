"""WEAT's attribute word sets: read from YAML and keyed by the groups a study compares.

Kept apart from :mod:`analysis.text.weat` (numpy, pandas, an embedding model) because validating
a letters study reads them to check the groups have words, and validation stays light.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path

import yaml


def load_word_sets(path: str | Path | None = None) -> dict[str, dict[str, list[str]]]:
    """Attribute word sets, ``test -> group -> words``, from a YAML file; None reads biasim's
    (Caliskan et al. 2017's names and career / family words, analysis/data/weat_words.yaml).

    Raises:
        ValueError: A test is not a mapping of group to a list of words.
    """
    if path is None:
        text = resources.files("biasim.analysis").joinpath("data/weat_words.yaml").read_text()
    else:
        text = Path(path).read_text(encoding="utf-8")
    data = yaml.safe_load(text) or {}
    out = {}
    for test, sets in data.items():
        if str(test).startswith("_"):
            continue
        if not isinstance(sets, dict) or not all(isinstance(v, list) for v in sets.values()):
            raise ValueError(f"WEAT test `{test}`: expected `group: [words]` for each group")
        out[str(test)] = {str(g): [str(w) for w in words] for g, words in sets.items()}
    return out


def sets_for_groups(
    word_sets: Mapping[str, Mapping[str, Sequence[str]]], groups: tuple[str, str]
) -> tuple[dict[str, dict[str, list[str]]] | None, str]:
    """The word sets keyed by the compared groups, or None and why WEAT cannot run.

    A group names a set by its key or by a unique prefix of it, case aside (the released CBG
    files' ``m`` / ``f`` name ``male`` / ``female``), so existing sets are used, never guessed
    further.
    """
    out: dict[str, dict[str, list[str]]] = {}
    for test, sets in word_sets.items():
        keyed: dict[str, list[str]] = {}
        for group in groups:
            found = [k for k in sets if k.lower().startswith(group.lower())]
            exact = [k for k in found if k.lower() == group.lower()]
            match = exact or found
            if len(match) != 1:
                return None, f"test `{test}` has no words for group `{group}`"
            keyed[group] = list(sets[match[0]])
        out[test] = keyed
    return out, ""
