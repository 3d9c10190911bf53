"""Help for writing a study: a commented skeleton to start from (``biasim init``), a study
family's package with a study that uses it (``biasim init --family``); every
distinct prompt the study sends, rendered (``biasim validate --show-prompts``), is
:func:`biasim.simulator.study.prompts.distinct_prompts`."""

from __future__ import annotations

import re
import shutil
import tempfile
from importlib import resources
from pathlib import Path
from string import Template

from biasim.simulator.common.errors import InputError, Problem
from biasim.simulator.study.fields import IDENTIFIER_PATTERN
from biasim.simulator.study.hints import nearest, pattern_message

#: ``biasim init --template`` -> what the study it writes does (files in scenarios/data/templates).
TEMPLATES = {
    "decisions": "persona agents make one decision; parity of its rate across groups",
    "explicit": "the same decision made by agents (implicit) and asked of the model (explicit)",
    "ablation": "one decision under several persona sources (attribute, name, written persona)",
    "pipeline": "applicants write, a screener shortlists, a manager picks; who is still in",
    "letters": "reference letters per name; their words and style compared between groups",
    "market": "hiring over cycles: managers drawn from the workforce hire; composition per cycle",
}


def skeleton(name: str, template: str = "decisions") -> str:
    """The commented study ``template`` (a key of :data:`TEMPLATES`) named ``name``.

    Raises:
        InputError: ``name`` is not a valid study name, or ``template`` is unknown.
    """
    if not re.fullmatch(IDENTIFIER_PATTERN, name):
        raise InputError([Problem("NAME", None, "", pattern_message(name, IDENTIFIER_PATTERN))])
    if template not in TEMPLATES:
        hint = nearest(template, TEMPLATES)
        known = ", ".join(TEMPLATES)
        raise InputError([Problem("--template", None, "", f"`{template}`{hint}; known: {known}")])
    folder = resources.files("biasim.scenarios") / "data" / "templates"
    text = (folder / f"{template}.yaml").read_text(encoding="utf-8")
    return Template(text).substitute(name=name)


def write_skeleton(name: str, path: Path, template: str = "decisions") -> Path:
    """Write the study ``template`` to ``path``, never over an existing file.

    Raises:
        InputError: Bad name or template, or ``path`` exists.
    """
    text = skeleton(name, template)
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


def family_files(name: str) -> dict[str, str]:
    """The skeleton of the study family ``name``: relative path -> text. The package ``name/``
    holds its statistic, analysis kind, command and ``register()``; ``study/`` a study using
    them; ``pyproject.toml`` the entry point that installs the family
    (``scenarios/data/templates/family``, docs/extending/families.md).

    Raises:
        InputError: ``name`` is not a valid package name.
    """
    if not re.fullmatch(IDENTIFIER_PATTERN, name):
        raise InputError([Problem("NAME", None, "", pattern_message(name, IDENTIFIER_PATTERN))])
    root = resources.files("biasim.scenarios") / "data" / "templates" / "family"
    out = {"pyproject.toml": root / "pyproject.toml.tmpl"}
    for entry in (root / "package").iterdir():
        out[f"{name}/{entry.name.removesuffix('.tmpl')}"] = entry
    for entry in (root / "study").iterdir():
        out[f"study/{entry.name}"] = entry
    return {
        path: Template(source.read_text(encoding="utf-8")).substitute(name=name)
        for path, source in sorted(out.items())
    }


def write_family(name: str, folder: Path) -> Path:
    """Write the family ``name``'s skeleton into the new folder ``folder``, whole or not at all.

    Raises:
        InputError: Bad name, or ``folder`` exists or cannot be written.
    """
    files = family_files(name)
    if folder.exists():
        raise InputError(
            [Problem(str(folder), None, "", "already exists; not overwritten (another --out)")]
        )
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=folder.parent))
        for path, text in files.items():
            (staging / path).parent.mkdir(parents=True, exist_ok=True)
            (staging / path).write_text(text, encoding="utf-8")
        staging.rename(folder)
    except OSError as exc:
        if "staging" in locals():
            shutil.rmtree(staging, ignore_errors=True)
        raise InputError([Problem(str(folder), None, "", f"cannot write: {exc}")]) from None
    return folder
