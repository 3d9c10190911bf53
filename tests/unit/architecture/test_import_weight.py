"""What a module costs to import: the engine and validation stay clear of the heavy libraries
(a run that only calls models does not pay for scikit-learn or torch, and ``biasim validate``
does not pay for scipy.stats or matplotlib just to read a study's analyses)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from biasim.scenarios import builtin_studies
from tests.paths import ROOT

HEAVY = ("sklearn", "torch", "transformers")
PLOTTING_AND_TESTS = ("matplotlib", "scipy.stats", "statsmodels", "networkx")
#: Loaded when an analysis computes, not when a study is read: together with numpy they were half
#: a second of the one second ``biasim validate`` may cost (issue 30). pandas is watched by a
#: module its import executes (a kind names it lazily, which puts a placeholder in sys.modules).
FRAMES_AND_SPECIAL = ("pandas.core.frame", "scipy.special")


def _imported(code: str) -> set[str]:
    """Top modules (and ``scipy.stats``) in ``sys.modules`` after running ``code`` afresh."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True
    )
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_the_engine_imports_no_learning_library() -> None:
    modules = _imported("import biasim.simulator.engine, biasim.simulator.engine.runner")
    assert "biasim.simulator.engine.runner" in modules  # the probe saw the engine
    assert not [m for m in HEAVY if m in modules]


#: Built-in studies that need a watched library to be read: seed 002's CBG study augments its
#: seed biographies (a pandas table, tagged by spaCy, which no longer brings torch, or read from
#: the cache of its swaps) when read.
READ_NEEDS = {"wan2023_letters_cbg": ("pandas.core.frame",)}
#: A built-in study's masked LM, which it needs given before it validates (a hub id: only
#: loading the model would check it).
_MASKED_LM = {"ding2024_prism": "bert-base-uncased"}
# One process reads the built-in studies (a library one imports is in sys.modules for those read
# after it, so each reports what it added: the first to import one fails).
_LOAD_EVERY_STUDY = """
import json, sys
from biasim.scenarios import builtin_studies
from biasim.simulator.study.load import Override, load_study
watched, skipped, masked_lm = json.loads(sys.argv[1])
report = {}
for name in sorted(set(builtin_studies()) - set(skipped)):
    before = {m for m in watched if m in sys.modules}
    lm = [masked_lm[name]] if name in masked_lm else []
    prism = (("kind", "prism"),)
    given = [Override("--masked-lm", ("analyses", "*", "masked_lm"), m, match=prism) for m in lm]
    study = load_study(name, given)
    report[name] = {
        "added": [m for m in watched if m in sys.modules and m not in before],
        "specs": [type(a).__module__ for a in study.config.analyses],
    }
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def study_imports() -> dict[str, dict[str, list[str]]]:
    """Per built-in study: the watched libraries reading it imported, and its analyses' kinds."""
    watched = [*HEAVY, *PLOTTING_AND_TESTS, *FRAMES_AND_SPECIAL]
    arguments = json.dumps([watched, [], _MASKED_LM])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", _LOAD_EVERY_STUDY, arguments],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", builtin_studies())
def test_reading_a_built_in_study_imports_no_plotting_or_test_library(
    name: str, study_imports: dict[str, dict[str, list[str]]]
) -> None:
    """``biasim validate`` reads the study and its analyses, nothing more: the libraries that
    fit, test and plot cost seconds to import and are loaded when an analysis runs."""
    read = study_imports[name]
    kinds = ("biasim.simulator.kinds.", "biasim.families.")  # built-in kinds, families' kinds
    assert read["specs"] and all(m.startswith(kinds) for m in read["specs"])
    assert [m for m in read["added"] if m not in READ_NEEDS.get(name, ())] == []


def test_the_validate_command_computes_nothing_it_does_not_print() -> None:
    """The whole command, estimate line included, for a study with rationale terms (read and
    checked at validation) loads neither pandas nor scipy."""
    modules = _imported(
        "import sys\n"
        "from biasim.simulator.cli import main\n"
        "sys.argv = ['biasim', 'validate', 'li2025_decisions']\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    assert exc.code in (0, None), exc.code"
    )
    assert "biasim.simulator.study.checks" in modules  # the probe validated the study
    assert not [m for m in (*PLOTTING_AND_TESTS, *FRAMES_AND_SPECIAL) if m in modules]
