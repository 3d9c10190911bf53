"""Edited copies of built-in studies that read their data files as the originals do.

A built-in study is a folder: its own data under ``data/`` beside ``study.yaml``, data shared by
a family of studies under ``scenarios/data/`` (named ``../data/...``). A copy is written into a
folder of the same name beside copies of both, so every relative path still resolves and a test
may edit the data without touching the shipped files.
"""

from __future__ import annotations

import shutil
from pathlib import Path


def edited_copy(study: Path, tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    """Write ``text`` as ``name`` beside copies of ``study``'s own and shared data."""
    folder = tmp_path / study.parent.name
    folder.mkdir(exist_ok=True)
    own = study.parent / "data"
    if own.is_dir() and not (folder / "data").exists():
        shutil.copytree(own, folder / "data")
    if not (tmp_path / "data").exists():
        shutil.copytree(study.parent.parent / "data", tmp_path / "data")
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path
