"""Built-in studies shipped with biasim: each is a folder ``<name>/`` holding ``study.yaml``, the
data files only it reads (``data/``) and a short ``README.md``, as an lm-eval-harness task is.
Data shared by a family of studies (the Bias-Transmission jobs, the hiring-email labels) lives in
``data/`` beside the folders.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import yaml

STUDY_FILE = "study.yaml"


def builtin_path(name: str) -> Path | None:
    """Path of the built-in study ``name``'s ``study.yaml``, or ``None``."""
    stem = name.removesuffix(".yaml")
    if not stem or "/" in stem or "\\" in stem or stem.startswith("."):
        return None
    candidate = resources.files(__name__) / stem / STUDY_FILE
    return Path(str(candidate)) if candidate.is_file() else None


def builtin_studies() -> dict[str, str]:
    """Built-in study name -> one-line description."""
    out: dict[str, str] = {}
    for entry in sorted(resources.files(__name__).iterdir(), key=lambda e: e.name):
        study = entry / STUDY_FILE
        if entry.is_dir() and study.is_file():
            doc = yaml.safe_load(study.read_text(encoding="utf-8")) or {}
            out[entry.name] = str(doc.get("description", "")).strip()
    return out
