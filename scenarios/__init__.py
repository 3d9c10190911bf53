"""Built-in studies shipped with biasim (YAML files in this package)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import yaml


def builtin_path(name: str) -> Path | None:
    """Path of the built-in study ``name`` (with or without ``.yaml``), or ``None``."""
    stem = name.removesuffix(".yaml")
    if "/" in stem or "\\" in stem:
        return None
    candidate = resources.files(__name__) / f"{stem}.yaml"
    return Path(str(candidate)) if candidate.is_file() else None


def builtin_studies() -> dict[str, str]:
    """Built-in study name -> one-line description."""
    out: dict[str, str] = {}
    for entry in sorted(resources.files(__name__).iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".yaml"):
            doc = yaml.safe_load(entry.read_text(encoding="utf-8")) or {}
            out[entry.name.removesuffix(".yaml")] = str(doc.get("description", "")).strip()
    return out
