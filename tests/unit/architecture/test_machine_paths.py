"""Tests find the shared reference data through one helper (``tests/paths.py``): the folder
``BIASIM_SHARED`` names, else ``shared`` beside the checkout; no test names a folder of one
machine, so a checkout anywhere runs (or cleanly skips) the same tests."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.paths import ROOT

#: A literal absolute path of one machine: a developer's home, a work or mount folder.
MACHINE_PATH = re.compile(r"""["'](/work|/home|/Users|/mnt|/data|[A-Z]:\\\\)[/\\"']""")


def test_no_test_names_a_folder_of_one_machine() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{i}"
        for path in sorted((ROOT / "tests").rglob("*.py"))
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if MACHINE_PATH.search(line) and path.name != "test_machine_paths.py"
    ]
    assert found == []


def _shared(env: dict[str, str]) -> str:
    code = "from tests.paths import SHARED; print(SHARED)"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_the_shared_folder_is_the_environment_s_else_beside_the_checkout(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "BIASIM_SHARED"}
    assert _shared(env) == str(ROOT.parent / "shared")
    assert _shared({**env, "BIASIM_SHARED": str(tmp_path)}) == str(tmp_path)
    assert _shared({**env, "BIASIM_SHARED": ""}) == str(ROOT.parent / "shared")
