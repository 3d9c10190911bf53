"""The word lists of the stereotype scores (:mod:`analysis.text.stereotype`): a study's YAML
file, or biasim's copy of LangFair 0.8's defaults (analysis/data/stereotype_words.yaml).

Kept apart from the scores (numpy, pandas, NLTK) because validating a study reads the lists it
names, and validation stays light.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import yaml


@dataclass(frozen=True)
class StereotypeWords:
    """The word lists of both scores.

    Attributes:
        groups: Demographic group -> its words (the co-occurrence score takes exactly two).
        targets: The target (stereotype) words.
        stop_words: Words the co-occurrence score leaves out of its reference words.
        source: Where the lists came from, as the tables name it.
    """

    groups: dict[str, list[str]]
    targets: list[str]
    stop_words: frozenset[str]
    source: str


def load_stereotype_words(
    path: str | Path | None = None, target: str = "adjective"
) -> StereotypeWords:
    """The lists of a YAML file (``groups``, ``targets``: name -> words, ``stop_words``); None
    reads biasim's copy of LangFair's defaults.

    Raises:
        ValueError: A key is missing or not a list of words, or ``target`` is not a target list.
    """
    if path is None:
        text = resources.files("biasim.analysis").joinpath("data/stereotype_words.yaml").read_text()
        source = f"LangFair 0.8 defaults (gender words, {target}s)"
    else:
        text, source = Path(path).read_text(encoding="utf-8"), f"{path} ({target})"
    data = yaml.safe_load(text) or {}
    groups, targets = data.get("groups"), (data.get("targets") or {}).get(target)
    if not isinstance(groups, dict) or len(groups) < 2:
        raise ValueError(f"{source}: `groups` must map two or more groups to their words")
    for name, words in [
        *groups.items(),
        ("targets." + target, targets),
        ("stop_words", data.get("stop_words", [])),
    ]:
        if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
            raise ValueError(f"{source}: `{name}` must be a list of words")
    return StereotypeWords(
        {str(g): list(w) for g, w in groups.items()},
        list(targets),
        frozenset(data.get("stop_words", [])),
        source,
    )
