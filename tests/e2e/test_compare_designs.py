"""`biasim compare --designs`: two runs of one pipeline whose designs differ (pool size),
compared unpaired per group, called designs."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from biasim.simulator.cli import app
from tests import pipeline_studies


def run(cli, tmp_path: Path, data: dict, name: str) -> Path:
    path = pipeline_studies.write(tmp_path / f"{name}.yaml", data)
    out = tmp_path / name
    result = cli.invoke(app, ["run", str(path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def test_two_pool_sizes_compare_as_designs_unpaired(cli, tmp_path: Path) -> None:
    small = pipeline_studies.study(analyses=[])
    small["design"]["agents_per_value"] = 20  # 160 applicants: 20 pools of 8, 40 of 4
    big = pipeline_studies.study(analyses=[])
    big["design"]["agents_per_value"] = 20
    big["stages"][1]["reads"]["size"] = 4
    a, b = run(cli, tmp_path, small, "a"), run(cli, tmp_path, big, "b")
    refused = cli.invoke(app, ["compare", str(a), str(b), "--out", str(tmp_path / "c0")])
    assert refused.exit_code == 2
    out = tmp_path / "c"
    labels = ["--label", f"pool8={a}", "--label", f"pool4={b}"]
    result = cli.invoke(app, ["compare", str(a), str(b), "--designs", *labels, "--out", str(out)])
    assert result.exit_code == 0, result.output
    text = result.output
    assert "two designs (not models), unpaired: pool8 vs pool4" in text, text
    assert "unit: the first-stage pool" in text and "size" in text
    table = pd.read_csv(out / "designs.csv")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["compared"] == "designs" and summary["designs"] == ["pool8", "pool4"]
    # The rates are each run's own end-to-end rates: selected at the offer among applicants.
    for run_dir, suffix in ((a, "a"), (b, "b")):
        results = pd.read_parquet(run_dir / "results.parquet")
        offers = results[results["stage"] == "offer"]
        hired = {
            unit.split("|")[int(label) - 1]
            for unit, label in zip(offers["reads"], offers["advanced"], strict=True)
            if isinstance(label, str) and label
            for label in label.split("|")
        }
        assert table[f"selected_{suffix}"].groupby(table["group"]).sum().eq(len(hired)).all()
    assert set(table["unit"]) == {"first-stage pool"} and table["p_value"].notna().all()
    assert (table["pools_a"] == 20).all() and (table["pools_b"] == 40).all()
    assert "(Holm)" in text
    assert all(len(line) <= 80 for line in text.splitlines()), text


def test_designs_are_two_pipeline_runs(cli, tmp_path: Path) -> None:
    a = run(cli, tmp_path, pipeline_studies.study(analyses=[]), "a")
    result = cli.invoke(app, ["compare", str(a), "--designs", "--out", str(tmp_path / "c")])
    assert result.exit_code == 2 and "exactly two runs" in result.output, result.output


def test_a_policy_that_changes_what_is_read_names_the_design_route(cli, tmp_path: Path) -> None:
    for change in ({"size": 4}, {"reads": {"stage": "apply"}}, {"reader": 2}):
        data = pipeline_studies.study(policies={"other": {"stages": {"screen": change}}})
        path = pipeline_studies.write(tmp_path / "p.yaml", data)
        result = cli.invoke(app, ["validate", str(path)])
        assert result.exit_code == 2, result.output
        assert "biasim compare --designs" in " ".join(result.output.split()), result.output
