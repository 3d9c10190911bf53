"""Every built-in figure, drawn at its own size, keeps its titles, legends and banner inside the
canvas; labels read right on saturated rates; figures are written with the tables' mode; the
synthetic banner marks only the synthetic models' figures."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pandas as pd
import pytest
import yaml

from biasim.scenarios import builtin_path
from biasim.simulator.common.errors import InputError
from biasim.simulator.engine.runner import RunOptions, execute, prepare
from biasim.simulator.report.outputs import SYNTHETIC_NOTE, analyze, write_evidence
from biasim.simulator.study.load import load_study
from tests.builtin_runs import AGENTS, NEEDS_INPUT
from tests.figure_bounds import clipped
from tests.golden_studies import GOLDEN_DIR


#: Every built-in study but the variants that `extends` another and keep its analyses: those
#: draw the figures of the study they extend (same kinds, same layout), and running them too
#: would cost CI minutes for nothing.
def _draws_its_own_figures(study: Path) -> bool:
    data = yaml.safe_load(study.read_text(encoding="utf-8"))
    return "extends" not in data or "analyses" in data


BUILTIN = sorted(
    p.name
    for p in builtin_path("emergency_response").parent.parent.iterdir()
    if (p / "study.yaml").is_file() and _draws_its_own_figures(p / "study.yaml")
)


@pytest.fixture(scope="module")
def emergency(tmp_path_factory) -> tuple[pd.DataFrame, object]:
    out = tmp_path_factory.mktemp("er") / "run"
    execute(prepare(RunOptions(study="emergency_response", out=out, backend="synthetic")))
    return pd.read_parquet(out / "results.parquet"), load_study(
        builtin_path("emergency_response")
    ).config


def _saturated(results: pd.DataFrame, label: str) -> pd.DataFrame:
    """The run as the embedded model answered it: every agent chose the alternative."""
    return results.assign(
        decision="Stay",
        model_label=label,
        backend="local",
        model=label.split(":")[-1],
        synthetic=False,
    )


def test_one_panel_figures_keep_legend_and_long_titles_inside(emergency) -> None:
    results, study = emergency
    label = "local:SmolLM2-135M-Instruct.Q4_K_M-with-a-long-file-name.gguf"
    for frame in (results, _saturated(results, label)):
        for name, fig in analyze(frame, study).figures.items():
            assert clipped(fig) == [], name


def test_a_saturated_rate_reads_zero_percent_of_the_target(emergency) -> None:
    results, study = emergency
    evidence = analyze(_saturated(results, "local:m"), study)
    (fig,) = evidence.figures.values()
    texts = [t.get_text() for t in fig.axes[0].texts]
    # The target's 0 % is written (beside its empty bar), the alternative's 100 % too, and the
    # axis names the target: nothing reads as 100 % Evacuate.
    assert texts.count("0%") == 3 and texts.count("100%") == 3
    assert fig.axes[0].get_xlabel() == "rate of Evacuate"


def test_percent_labels_sit_clear_of_the_interval_line(emergency) -> None:
    results, study = emergency
    (fig,) = analyze(results, study).figures.values()
    ax = fig.axes[0]
    bars = sorted({round(p.get_y() + p.get_height() / 2, 6) for p in ax.patches})
    for text in ax.texts:
        if text.get_text().endswith("%"):
            y = text.get_position()[1]
            # The interval is drawn through each bar's middle; the label is above it.
            assert min(abs(y - b) for b in bars) >= 0.2


def test_golden_seed_004_figures_lie_inside_their_canvas() -> None:
    results = pd.read_parquet(GOLDEN_DIR / "li2025_small" / "results.parquet")
    study = load_study(builtin_path("li2025_decisions")).config
    for name, fig in analyze(results, study).figures.items():
        assert clipped(fig) == [], name


def test_figures_have_the_tables_mode_and_banners_only_on_synthetic_models(
    emergency, tmp_path: Path
) -> None:
    results, study = emergency
    both = pd.concat([results, _saturated(results, "local:m")], ignore_index=True)
    both["agent_id"] = both["model_label"] + "/" + both["agent_id"]
    both["unit_id"] = both["model_label"] + "/" + both["unit_id"]
    evidence = analyze(both, study)
    banners = {
        name: [t.get_text() for t in fig.texts if "SYNTHETIC" in t.get_text()]
        for name, fig in evidence.figures.items()
    }
    real = [n for n in banners if "local-m" in n]
    synthetic = [n for n in banners if "synthetic-responder" in n]
    assert real and synthetic
    assert all(banners[n] == [] for n in real)
    assert all(" ".join(banners[n][0].split()) == SYNTHETIC_NOTE for n in synthetic)
    written = write_evidence(tmp_path, evidence)
    mask = os.umask(0)
    os.umask(mask)
    for path in written:
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask, path


def test_captions_cite_the_paper_only_for_its_study() -> None:
    from biasim.simulator.common.html import HtmlSection

    assert (
        HtmlSection("t", source="Li, Shirado & Das 2025 (FAccT)").cite(
            "Li, Shirado & Das 2025", "Fig. 4"
        )
        == " (Li, Shirado & Das 2025, Fig. 4)"
    )
    assert (
        HtmlSection("t", source="my own loans study").cite("Li, Shirado & Das 2025", "Fig. 4") == ""
    )


@pytest.mark.slow
@pytest.mark.parametrize("study", BUILTIN)
def test_every_builtin_studys_figures_lie_inside_their_canvas(study: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    if study in NEEDS_INPUT:
        with pytest.raises(InputError, match="masked"):
            prepare(RunOptions(study=study, out=out, backend="synthetic"))
        return
    agents = AGENTS.get(study, 1)
    execute(prepare(RunOptions(study=study, out=out, backend="synthetic", agents=agents)))
    results = pd.read_parquet(out / "results.parquet")
    config = load_study(builtin_path(study)).config
    # The run folder: a market's analysis reads market.csv beside the results.
    drawn = analyze(results, config, out_dir=out).figures
    assert len(drawn) == len(list((out / "figures").glob("*.png")))
    for name, fig in drawn.items():
        assert clipped(fig) == [], name
