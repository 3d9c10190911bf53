"""The extending guide's scorer plug-in (docs/extending/scorers.md, issue 47): its two files,
taken from the page as written, built in a temporary folder as an installed distribution, are
all biasim needs to find the scorer and run it in a counterfactual_text analysis."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

import numpy as np
import pandas as pd

from biasim.analysis.text.scorers import scorer_factory, scorer_names
from biasim.simulator.kinds import AnalysisContext
from biasim.simulator.kinds.counterfactual_text import CounterfactualTextKind
from biasim.simulator.kinds.letters import ScorerChoice
from biasim.simulator.study.load import load_study
from tests.optional import requires

GUIDE = Path(__file__).parents[3] / "docs" / "extending" / "scorers.md"


def _block(language: str, first_line: str) -> str:
    """The guide's code block in ``language`` whose first line is ``first_line``."""
    for body in re.findall(rf"^```{language}\n(.*?)^```", GUIDE.read_text(), re.S | re.M):
        if body.splitlines()[0] == first_line:
            return body
    raise AssertionError(f"{GUIDE}: no {language} block starting {first_line!r}")


def _install(site: Path) -> None:
    """The two files as a package and its distribution's entry points, on ``site``."""
    package = site / "myscorers"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "exclaim.py").write_text(_block("python", "# myscorers/exclaim.py"))
    toml = tomllib.loads(_block("toml", "# pyproject.toml of the package holding myscorers"))
    points = toml["project"]["entry-points"]["biasim.scorers"]
    dist = site / "myscorers-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: myscorers\nVersion: 0.1\n")
    lines = "".join(f"{name} = {target}\n" for name, target in points.items())
    (dist / "entry_points.txt").write_text(f"[biasim.scorers]\n{lines}")


@requires("rouge_score", "nltk")
def test_the_guides_two_files_make_a_scorer_a_counterfactual_analysis_runs(
    tmp_path: Path, monkeypatch
) -> None:
    assert "exclaim" not in scorer_names()
    _install(tmp_path / "site")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    try:
        assert "exclaim" in scorer_names()
        scorer = scorer_factory("exclaim")(threshold=2)
        table = scorer.score(["Great!!", "Fine."])
        assert table.values.tolist() == [[2.0, 1.0], [0.0, 0.0]]
        study = load_study("wan2023_letters_counterfactual").config
        (spec,) = [a for a in study.analyses if a.kind == "counterfactual_text"]
        spec = spec.model_copy(
            update={
                "n_permutations": 99,
                "scorers": {"excl": ScorerChoice(scorer="exclaim", options={"threshold": 2})},
            }
        )
        # Ten sets: the male letter of each shouts, the female one does not.
        rows = pd.DataFrame(
            {
                "stage": "write",
                "valid": True,
                "model_label": "m",
                "cf_set": np.repeat([f"s{i}" for i in range(10)], 2),
                "cf_swap": ["female", "male"] * 10,
                "cf_writer": "w",
                "persona_name": ["Kelly", "Joseph"] * 10,
                "text": ["Kelly is good.", "Joseph is great!!"] * 10,
            }
        )
        section = CounterfactualTextKind().compute(rows, spec, AnalysisContext(study, "cf"))
        metrics = section.tables["cf_metrics"].set_index(["metric", "statistic"])
        assert metrics.loc[("excl_value", "mean"), "estimate"] == -2.0
        assert metrics.loc[("excl_label", "weak_parity"), "estimate"] == -1.0
        # The smallest p 99 relabellings can give: (1 + 0) / (1 + 99).
        assert metrics.loc[("excl_value", "mean"), "p_value"] == 0.01
    finally:
        sys.modules.pop("myscorers.exclaim", None)
        sys.modules.pop("myscorers", None)
