"""Help for writing a study: a commented skeleton to start from (``biasim init``); every
distinct prompt the study sends, rendered (``biasim validate --show-prompts``), is
:func:`biasim.simulator.study.prompts.distinct_prompts`."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from string import Template

from biasim.simulator.common.errors import InputError, Problem
from biasim.simulator.study.fields import IDENTIFIER_PATTERN
from biasim.simulator.study.hints import pattern_message

SKELETON = "study_skeleton.yaml"


def skeleton(name: str) -> str:
    """The commented study skeleton named ``name``.

    Raises:
        InputError: ``name`` is not a valid study name.
    """
    if not re.fullmatch(IDENTIFIER_PATTERN, name):
        raise InputError([Problem("NAME", None, "", pattern_message(name, IDENTIFIER_PATTERN))])
    text = (resources.files("biasim.scenarios") / "data" / SKELETON).read_text(encoding="utf-8")
    return Template(text).substitute(name=name)


def write_skeleton(name: str, path: Path) -> Path:
    """Write the skeleton to ``path``, never over an existing file.

    Raises:
        InputError: Bad name, or ``path`` exists.
    """
    text = skeleton(name)
    if path.exists():
        raise InputError(
            [
                Problem(
                    str(path), None, "", "already exists; not overwritten (another NAME or --out)"
                )
            ]
        )
    try:
        with path.open("x", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as exc:
        raise InputError([Problem(str(path), None, "", f"cannot write: {exc}")]) from None
    return path
