"""A third analysis kind added from a test module, touching no file of biasim: registered in
code, and found through a real ``biasim.analyses`` entry point of an installed distribution."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any, Literal

import pandas as pd
import pytest
from pydantic import Field

from biasim.simulator.cli import app
from biasim.simulator.kinds import (
    AnalysisContext,
    AnalysisKind,
    AnalysisSpec,
    Section,
    StudyFacts,
    get_kind,
    kind_names,
    register_kind,
    unregister_kind,
)
from tests.conftest import write_study


class AnswerLengthSpec(AnalysisSpec):
    """Mean length of a text field per persona group."""

    kind: Literal["answer_length"] = "answer_length"
    stage: str
    field: str = "rationale"
    by: str
    min_chars: int = Field(0, ge=0)


class AnswerLengthKind(AnalysisKind, spec=AnswerLengthSpec):
    title = "Answer length"

    def check(self, spec: AnswerLengthSpec, facts: StudyFacts) -> None:
        facts.need_field(spec.stage, spec.field, ("field",), ("stage",))
        facts.need_axes([spec.by], ("by",))

    def compute(
        self, results: pd.DataFrame, spec: AnswerLengthSpec, ctx: AnalysisContext
    ) -> Section:
        rows = results[(results["stage"] == spec.stage) & results["valid"].astype(bool)]
        lengths = rows[spec.field].fillna("").str.len()
        table = (
            rows.assign(chars=lengths)
            .groupby(spec.by)["chars"]
            .agg(["size", "mean"])
            .reset_index()
            .rename(columns={"size": "n", "mean": "mean_chars"})
        )
        return Section(
            summary={"by": spec.by, "lengths": table.to_dict("records")},
            tables={f"{ctx.name}_lengths": table},
        )

    def print(self, summary: dict[str, Any], console: Any) -> None:
        for row in summary["lengths"]:
            console.print(f"mean length of {row[summary['by']]}: {row['mean_chars']:.1f} chars")


STUDY_TAIL = """\
  - kind: answer_length
    name: lengths
    stage: decide
    by: gender
"""


@pytest.fixture
def toy_kind():
    register_kind(AnswerLengthKind)
    yield
    unregister_kind("answer_length")


def test_a_kind_registered_in_code_runs_prints_and_validates(toy_kind, tmp_path, cli) -> None:
    study = write_study(tmp_path / "s.yaml", agents=6)
    study.write_text(study.read_text() + STUDY_TAIL)
    out = tmp_path / "run"
    result = cli.invoke(app, ["run", str(study), "--out", str(out)])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(out / "tables" / "lengths_lengths.csv")
    assert table["n"].sum() == 18 and set(table["gender"]) == {"male", "female", "non-binary"}
    assert "mean length of female:" in result.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert [a["kind"] for a in summary["analyses"]] == ["demographic_parity", "answer_length"]
    # Its default HTML rendering puts the summary's records on the page.
    assert "lengths" in (out / "report.html").read_text()
    # Its checks run at validation, located in the file, before any call.
    base = study.read_text().removesuffix(STUDY_TAIL)
    study.write_text(base + STUDY_TAIL.replace("by: gender", "by: colour"))
    bad = cli.invoke(app, ["validate", str(study)])
    assert bad.exit_code == 2
    assert "s.yaml:44: analyses[1].by: `colour` is not a persona axis" in bad.stderr
    study.write_text(base + STUDY_TAIL + "    x: 1\n")
    bad = cli.invoke(app, ["validate", str(study)])
    assert bad.exit_code == 2 and "analyses[1].x: unknown field" in bad.stderr


def test_a_kind_registered_under_another_name_than_its_spec_is_refused(tmp_path, cli) -> None:
    # An entry point named apart from the spec's Literal: the run would look the kind up by the
    # spec's name and not find it, so validate says so at the line, naming both names.
    register_kind(AnswerLengthKind, name="lengths")
    try:
        study = write_study(tmp_path / "s.yaml")
        study.write_text(study.read_text() + STUDY_TAIL.replace("answer_length", "lengths"))
        bad = cli.invoke(app, ["validate", str(study)])
    finally:
        unregister_kind("lengths")
    assert bad.exit_code == 2
    said = " ".join(bad.stderr.split())
    assert f"{study}:41: analyses[1].kind: the analysis kind registered as `lengths`" in said
    assert "is named `answer_length` by its spec's `kind` Literal: register it" in said


def test_an_unknown_kind_names_the_known_ones(tmp_path, cli) -> None:
    study = write_study(tmp_path / "s.yaml")
    study.write_text(study.read_text() + STUDY_TAIL)
    bad = cli.invoke(app, ["validate", str(study)])
    assert bad.exit_code == 2
    said = " ".join(bad.stderr.split())
    assert "analyses[1].kind: unknown analysis kind `answer_length`; known: acceptance," in said
    assert "demographic_parity" in said and "did you mean" not in said  # nothing close
    # How a plug-in kind becomes known: installed with its entry point, or by its family.
    assert said.endswith(
        "; a plug-in analysis kind is known once its package is installed with a "
        "`biasim.analyses` entry point (or registered by its study family's register())"
    )


def test_a_misspelt_kind_is_refused_at_its_line_with_the_closest_name(
    toy_kind, tmp_path, cli
) -> None:
    study = write_study(tmp_path / "s.yaml")
    study.write_text(study.read_text() + STUDY_TAIL.replace("answer_length", "answer_lenght"))
    bad = cli.invoke(app, ["validate", str(study)])
    assert bad.exit_code == 2
    said = " ".join(bad.stderr.split())
    assert (
        f"{study}:41: analyses[1].kind: unknown analysis kind `answer_lenght`; "
        "did you mean `answer_length`?; known: " in said
    )
    assert "installed with a `biasim.analyses` entry point" in said


def install(site: Path, dist: str, entry: str, package: dict[str, str] | None = None) -> None:
    """What pip leaves for a distribution ``dist`` declaring the ``biasim.analyses`` entry point
    ``entry``: its metadata on the path and the files of ``package`` (module path -> source)."""
    for name, source in (package or {}).items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text(textwrap.dedent(source))
    info = site / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[biasim.analyses]\n{entry}\n")


def test_a_kind_from_an_installed_entry_point(tmp_path, monkeypatch) -> None:
    """A distribution on sys.path declaring ``[biasim.analyses]`` is all a package needs."""
    source = """
        from tests.unit.kinds.test_kinds_plugin import AnswerLengthKind

        class EntryPointKind(AnswerLengthKind):
            name = "answer_length_ep"
        """
    install(
        tmp_path,
        "toy-lengths",
        "answer_length_ep = toy_lengths:EntryPointKind",
        {"toy_lengths/__init__.py": source},
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "answer_length_ep" in kind_names()
    kind = get_kind("answer_length_ep")
    assert kind.name == "answer_length_ep" and kind.spec is AnswerLengthSpec
    monkeypatch.delitem(sys.modules, "toy_lengths", raising=False)


def test_power_names_an_analysis_it_cannot_count(toy_kind, tmp_path, cli) -> None:
    # A study mixing a kind without tests (like prism) with a tested one: power counts the
    # tested one and says, by name, which analysis it left out and why.
    study = write_study(tmp_path / "s.yaml", agents=4)
    study.write_text(study.read_text() + STUDY_TAIL)
    args = ["power", str(study), "--agents", "2", "--studies", "2", "--workers", "1"]
    result = cli.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "analysis1" in result.stdout  # the tested analysis's rows
    line = "not counted: analysis lengths (kind answer_length names no test power reads)"
    assert line in " ".join(result.stdout.split())
    assert "not counted: analysis analysis1" not in result.stdout


def test_a_family_counts_the_units_of_the_tests_that_ran() -> None:
    from biasim.analysis.stats.units import Tested

    rows = [
        {"p_value": 0.2, "unit": "letter", "n_units": 40},
        {"p_value": 0.03, "unit": "letter", "n_units": 38},
        {"p_value": float("nan"), "unit": "letter", "n_units": 2},  # refused: never ran
        {"p_value": None, "unit": "letter", "n_units": 0},
    ]
    family = Tested.family(0.12, rows)
    assert (family.n_units, family.n_units_high) == (38, 40)
    assert family.label == "letter, 38-40 units per test"


def broken_plugin_said(cli, warning: str) -> None:
    """``biasim kinds`` and ``biasim schema`` with a broken plug-in kind installed: each lists
    the built-in kinds (exit 0) and warns of the broken one in one line, never a traceback."""
    for command, listed in (
        ("kinds", "demographic_parity"),
        ("schema", "ConditionDifferencesSpec"),
    ):
        result = cli.invoke(app, [command])
        assert result.exit_code == 0, result.output
        assert listed in result.stdout
        said = " ".join(result.stderr.split())
        assert said.startswith("warning ") and said.count("warning ") == 1, said
        assert warning in said
        assert "Traceback" not in result.output + result.stderr


def test_a_plugin_whose_codebook_is_written_wrong_is_named_not_a_traceback(
    tmp_path, monkeypatch, cli
) -> None:
    """`biasim kinds` and `biasim schema` load every plug-in kind: one whose codebook YAML
    reads a header as a boolean is a warning naming it, its entry point, the file and line."""
    install(
        tmp_path,
        "toy-badbook",
        "badbook = toy_badbook:Kind",
        {
            "toy_badbook/__init__.py": """
                from biasim.simulator.kinds.sections.codebook import tables_of
                TABLES = tables_of(__name__)
                """,
            "toy_badbook/__init__.tables.yaml": (
                "tables:\n  t:\n    title: T\n    description: D\n    columns:\n"
                "      - [a, no, int]\n"
            ),
        },
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "toy_badbook", raising=False)
    broken_plugin_said(
        cli,
        "analysis kind `badbook` not loaded (entry point `badbook = toy_badbook:Kind` of the "
        "package `toy-badbook`): InputError: ",
    )
    said = " ".join(cli.invoke(app, ["kinds"]).stderr.split())
    assert "__init__.tables.yaml:6: tables.t.columns[0]: its header False" in said


def test_a_plugin_kind_whose_import_raises_is_refused_only_where_a_study_names_it(
    tmp_path, monkeypatch, cli
) -> None:
    # A class setting a `name` its spec's Literal does not admit raises at import.
    source = """
        from tests.unit.kinds.test_kinds_plugin import AnswerLengthKind, AnswerLengthSpec

        class MisnamedKind(AnswerLengthKind, spec=AnswerLengthSpec):
            name = "lengths"
        """
    entry = "answer_length = toy_misnamed:MisnamedKind"
    install(tmp_path / "site", "toy-misnamed", entry, {"toy_misnamed/__init__.py": source})
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, "toy_misnamed", raising=False)
    why = (
        f"analysis kind `answer_length` not loaded (entry point `{entry}` of the package "
        "`toy-misnamed`): TypeError: MisnamedKind: name 'lengths' but its spec admits kind "
        "'answer_length'; drop `name`: the spec's Literal names the kind"
    )
    broken_plugin_said(cli, why)
    study = write_study(tmp_path / "s.yaml")
    assert cli.invoke(app, ["validate", str(study)]).exit_code == 0  # it does not name it
    study.write_text(study.read_text() + STUDY_TAIL)
    bad = cli.invoke(app, ["validate", str(study)])
    assert bad.exit_code == 2
    assert f"error {study}:41: analyses[1].kind: {why}" in " ".join(bad.stderr.split())


def test_a_plugin_kind_registered_apart_from_its_spec_names_both_in_kinds_and_validate(
    tmp_path, monkeypatch, cli
) -> None:
    # Its entry point `lengths`, its spec's Literal `answer_length`: a study can name neither.
    entry = "lengths = tests.unit.kinds.test_kinds_plugin:AnswerLengthKind"
    install(tmp_path / "site", "toy-apart", entry)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    why = (
        f"the analysis kind registered as `lengths` (entry point `{entry}` of the package "
        "`toy-apart`) is named `answer_length` by its spec's `kind` Literal: register it as "
        "`answer_length`"
    )
    broken_plugin_said(cli, why)
    study = write_study(tmp_path / "s.yaml")
    study.write_text(study.read_text() + STUDY_TAIL)  # `kind: answer_length`, its own name
    bad = cli.invoke(app, ["validate", str(study)])
    assert bad.exit_code == 2
    said = " ".join(bad.stderr.split())
    assert f"analyses[1].kind: no analysis kind is registered as `answer_length`: {why}" in said


def test_every_kind_is_named_once_by_its_specs_kind() -> None:
    # The study file's `kind:`, the registry's key and the kind's `name` are one value: the
    # kind takes its name from its spec's Literal, and the registry finds it under that name.
    from biasim.simulator.kinds.base import spec_kind

    for name in kind_names():
        kind = get_kind(name)
        assert kind.name == name == spec_kind(kind.spec), (name, kind.name)


def test_a_name_its_spec_does_not_admit_is_refused_where_the_class_is_written() -> None:
    with pytest.raises(TypeError, match="name 'lengths' but its spec admits kind 'answer_length'"):

        class _Misnamed(AnalysisKind, spec=AnswerLengthSpec):
            name = "lengths"

    class _Loose(AnalysisSpec):
        kind: str = "anything"

    with pytest.raises(TypeError, match="not one Literal value"):

        class _Unnamed(AnalysisKind, spec=_Loose):
            pass

    class _Named(AnalysisKind, spec=_Loose):  # a spec that admits any kind: the class names it
        name = "loose"

    assert _Named.name == "loose" and _Named.spec is _Loose and _Named.result is None
