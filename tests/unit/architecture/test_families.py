"""What a study family costs: one package plus its study folder (issue 45).

A new family is built from the template ``biasim init --family`` writes, installed the way pip
leaves a package (a folder on the path with its ``*.dist-info/entry_points.txt``), and used from
the command line: its study runs on the synthetic backend with its own kind and statistic, and
its own command reads the run. No file of the checkout changes on the way.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import jsonschema
import pytest
import typer

from biasim.registry import (
    FAMILIES,
    KINDS,
    PROMPTS,
    Prompt,
    UnknownPlugin,
    builtin_families,
    load_family,
)
from biasim.simulator.common.errors import InputError, Problem
from biasim.simulator.study import templating
from biasim.simulator.tools.authoring import family_files, write_family
from tests.paths import ROOT

#: What `biasim init --family toyfam` writes: the package, its study folder, its installer.
SKELETON = {
    "pyproject.toml",
    "toyfam/__init__.py",
    "toyfam/stats.py",
    "toyfam/kinds.py",
    "toyfam/kinds.tables.yaml",
    "toyfam/cli.py",
    "study/study.yaml",
    "study/README.md",
}
#: The checkout's own files: none may change while a family is added.
CHECKOUT = ("biasim", "simulator", "analysis", "agents", "personas", "scenarios", "families")


def checkout_state() -> dict[str, tuple[int, int]]:
    """Every file of the checkout's code, docs and project files: path -> (size, mtime)."""
    paths = [ROOT / "pyproject.toml", ROOT / "setup.py"]
    for folder in (*CHECKOUT, "docs"):
        paths += [p for p in (ROOT / folder).rglob("*") if "__pycache__" not in p.parts]
    return {
        str(p.relative_to(ROOT)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in paths
        if p.is_file()
    }


def biasim(*args: str | Path, path: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    if path is not None:
        env["PYTHONPATH"] = str(path)
    return subprocess.run(
        [sys.executable, "-m", "biasim", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=path or ROOT,
        timeout=300,
    )


def install(folder: Path, name: str) -> None:
    """What pip leaves for a package: its metadata and entry points beside it on the path."""
    info = folder / f"{name}-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(f"[biasim.families]\n{name} = {name}:register\n")


def rates_by_hand(results: Path) -> dict[str, list[int]]:
    """The oracle: per gender, the valid answers of `decide` that are `Approve`, and all of them."""
    counts: dict[str, list[int]] = {}
    with results.open(newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            if row["stage"] == "decide" and row["valid"] in ("True", "true", "1"):
                hits = counts.setdefault(row["gender"], [0, 0])
                hits[0] += row["decision"] == "Approve"
                hits[1] += 1
    return counts


def kind_schema(family: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    """The JSON Schema the family's kind declares for its summary, drawn from its result."""
    monkeypatch.syspath_prepend(str(family))
    try:
        from toyfam.kinds import RateGapKind  # type: ignore[import-not-found]

        return RateGapKind.summary_schema()
    finally:
        for name in [n for n in sys.modules if n == "toyfam" or n.startswith("toyfam.")]:
            del sys.modules[name]


def test_a_new_family_from_the_template_touches_only_its_package_and_study(
    tmp_path, monkeypatch
) -> None:
    before = checkout_state()
    family = tmp_path / "toyfam"
    made = biasim("init", "toyfam", "--family", "--out", family)
    assert made.returncode == 0, made.stderr
    assert {str(p.relative_to(family)) for p in family.rglob("*") if p.is_file()} == SKELETON

    # Not installed: the study that names it is refused at its `family:` line, exit 2.
    refused = biasim("validate", family / "study")
    assert refused.returncode == 2
    assert "study.yaml:7: family: unknown study family `toyfam`" in refused.stderr

    install(family, "toyfam")
    run = biasim("run", "study", "--backend", "synthetic", "--out", "run", path=family)
    assert run.returncode == 0, run.stderr
    counts = rates_by_hand(family / "run" / "results.csv")
    rates = {gender: approved / n for gender, (approved, n) in counts.items()}
    gap, answers = max(rates.values()) - min(rates.values()), sum(n for _, n in counts.values())
    assert answers == 30 and gap > 0  # the synthetic truth approves women more often
    # Its kind ran with its statistic: the table, the summary, the console and the page agree
    # with the oracle, all drawn from the kind's codebook and declared result.
    with (family / "run" / "tables" / "gap_rates.csv").open(encoding="utf-8") as handle:
        table = list(csv.DictReader(handle))
    assert list(table[0]) == ["gender", "n", "rate"]
    assert {row["gender"]: float(row["rate"]) for row in table} == pytest.approx(rates)
    summary = json.loads((family / "run" / "summary.json").read_text(encoding="utf-8"))
    entry = summary["analyses"][1]
    assert (entry["kind"], entry["gap"]) == ("toyfam_rate_gap", pytest.approx(gap))
    schema = kind_schema(family, monkeypatch)
    assert schema["required"] == ["by", "target", "rates"]  # the gap is absent with no answers
    jsonschema.validate(entry, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**entry, "rates": [{"gender": "male", "n": "ten"}]}, schema)
    said = f"gap in the rate of Approve by gender: {gap:.3f}"
    assert said in run.stdout and f"<p>{said}</p>" in (family / "run" / "report.html").read_text()
    assert "gap: rate of Approve per gender" in run.stdout
    # The codebook ships with the package: the generated pyproject names it as package data.
    project = tomllib.loads((family / "pyproject.toml").read_text(encoding="utf-8"))
    assert project["tool"]["setuptools"]["package-data"] == {"toyfam": ["*.tables.yaml"]}

    # Its own command is a `biasim` subcommand, and reads the run.
    listed = biasim("--help", path=family)
    assert "toyfam" in listed.stdout
    command = biasim("toyfam", "gap", "run", path=family)
    assert command.returncode == 0, command.stderr
    assert command.stdout.strip() == f"gap: gap {gap:.3f} over {answers}"
    # On a folder that is no finished run: one located error line, exit 2, as built-ins do.
    not_run = biasim("toyfam", "gap", "study", path=family)
    assert not_run.returncode == 2
    assert not_run.stderr.startswith("error study: not a finished run directory")
    assert "Traceback" not in not_run.stderr

    # Nothing outside the family's folder changed.
    assert checkout_state() == before
    assert {p.name for p in tmp_path.iterdir()} == {"toyfam"}


def test_the_template_refuses_a_bad_name_or_an_existing_folder_and_writes_nothing(
    tmp_path,
) -> None:
    with pytest.raises(InputError, match="NAME"):
        family_files("toy-fam")
    taken = tmp_path / "taken"
    taken.mkdir()
    with pytest.raises(InputError, match="already exists"):
        write_family("toyfam", taken)
    assert list(taken.iterdir()) == []
    assert set(family_files("toyfam")) == SKELETON
    assert "family: toyfam" in family_files("toyfam")["study/study.yaml"]


FAKE_PROMPT = Prompt("Rate this: {{ text }}", parameters=("text",))


@pytest.fixture
def fake_family():
    """A family registered in code whose register() adds a prompt; removed afterwards."""
    calls: list[str] = []

    def register() -> None:
        calls.append("register")
        PROMPTS.register("fake_family_prompt", f"{__name__}:FAKE_PROMPT")

    FAMILIES.register("fake_family", register)
    yield calls
    FAMILIES.unregister("fake_family")
    PROMPTS.unregister("fake_family_prompt")


def test_a_family_registers_once_and_its_prompt_reaches_the_templates(fake_family) -> None:
    # The templates were compiled before the family registered its prompt.
    assert templating.render("{{ 1 }}", {}) == "1"
    load_family("fake_family")
    load_family("fake_family")
    assert fake_family == ["register"]
    assert templating.render("{{ fake_family_prompt('a memo') }}", {}) == "Rate this: a memo"
    with pytest.raises(UnknownPlugin, match="unknown study family `no_such_family`"):
        load_family("no_such_family")


def test_a_family_that_fails_to_register_is_a_problem_at_its_field(tmp_path) -> None:
    def register() -> None:
        raise RuntimeError("its kind module is missing")

    FAMILIES.register("broken_family", register)
    try:
        study = tmp_path / "s.yaml"
        template = (ROOT / "scenarios/data/templates/family/study/study.yaml").read_text()
        study.write_text(template.replace("${name}", "broken_family"))
        from biasim.simulator.study.load import load_study

        with pytest.raises(InputError) as caught:
            load_study(str(study))
        assert "s.yaml:7: family: `broken_family` failed to register: its kind module" in str(
            caught.value
        )
        assert "broken_family_rate_gap" not in KINDS
    finally:
        FAMILIES.unregister("broken_family")


def test_a_built_in_family_is_a_package_in_families_found_by_its_folder(tmp_path) -> None:
    (tmp_path / "toyfam").mkdir()
    (tmp_path / "toyfam" / "__init__.py").write_text("def register():\n    pass\n")
    (tmp_path / "data").mkdir()  # not a package: not a family
    assert builtin_families([str(tmp_path)]) == {"toyfam": "biasim.families.toyfam:register"}
    shipped = {p.name for p in (ROOT / "families").iterdir() if (p / "__init__.py").is_file()}
    assert set(FAMILIES.builtin) == shipped


def test_no_generic_layer_imports_a_family() -> None:
    """The contract names every layer but the families' own (import-linter checks it, with the
    others, in test_import_contract.py)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = {c.get("id"): c for c in config["tool"]["importlinter"]["contracts"]}
    rule = contracts["no-generic-layer-imports-a-family"]
    assert rule["forbidden_modules"] == ["biasim.families"]
    layers = [name.strip() for layer in contracts["layers"]["layers"] for name in layer.split(":")]
    assert layers[0] == "biasim.families"
    generic = {".".join(name.split(".")[:2]) for name in layers[1:]} - {"biasim.__main__"}
    assert generic <= set(rule["source_modules"])


def test_a_family_breaking_its_contracts_fails_the_lint(tmp_path) -> None:
    """The family contracts are checked on a checkout holding a family whose statistics import
    the engine and which a generic module imports: both break, by name."""
    root = tmp_path / "checkout"
    root.mkdir()
    for name in ("biasim", *CHECKOUT[1:-1], "setup.py"):
        (root / name).symlink_to(ROOT / name)
    (root / "scenarios").unlink()
    shutil.copytree(ROOT / "scenarios", root / "scenarios", ignore=shutil.ignore_patterns("data"))
    (root / "scenarios" / "uses_a_family.py").write_text("from biasim.families.toy import stats\n")
    family = root / "families" / "toy"
    family.mkdir(parents=True)
    (root / "families" / "__init__.py").write_text("")
    (family / "__init__.py").write_text("")
    (family / "stats.py").write_text("from biasim.simulator.engine import runner\n")
    done = subprocess.run(
        [sys.executable, "-m", "tests.lint_imports", "--root", str(root)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    out = " ".join(done.stdout.split())
    assert "(biasim.registry.FAMILIES) BROKEN" in out
    assert "never import the simulator or the agents BROKEN" in out
    assert "Contracts: 7 kept, 3 broken." in out  # the third: the layers
    assert "biasim.scenarios.uses_a_family -> biasim.families.toy.stats (l.1)" in out
    assert "biasim.families.toy.stats -> biasim.simulator.engine.runner (l.1)" in out


def test_a_family_command_never_replaces_a_built_in_one_and_a_broken_one_is_a_warning(
    capsys,
) -> None:
    from biasim.registry import COMMANDS
    from biasim.simulator.cli import add_family_commands, app

    before = list(app.registered_groups)
    COMMANDS.register("run", f"{__name__}:SKELETON")
    COMMANDS.register("toy_broken", "no_such_module_here:app")
    try:
        add_family_commands()
    finally:
        COMMANDS.unregister("run")
        COMMANDS.unregister("toy_broken")
    err = " ".join(capsys.readouterr().err.split())
    assert "warning command `run` not added: `biasim run` is a built-in command" in err
    assert "command `toy_broken` not loaded: ModuleNotFoundError" in err
    assert app.registered_groups == before


def refusing_app() -> typer.Typer:
    """A family's commands: `check` refuses its input as a family's command would."""
    family_app = typer.Typer()

    @family_app.command()
    def check(path: str) -> None:
        raise InputError([Problem(path, 3, "x", "not what this command reads")])

    @family_app.command()
    def other() -> None:
        """A second command, so that typer makes a group: each is reached by its name."""

    return family_app


REFUSING = refusing_app()


def test_a_family_command_raising_an_input_error_prints_it_located_and_exits_2(cli) -> None:
    from biasim.registry import COMMANDS
    from biasim.simulator.cli import add_family_commands, app

    before = list(app.registered_groups)
    COMMANDS.register("toy_refusing", f"{__name__}:REFUSING")
    try:
        add_family_commands()
        result = cli.invoke(app, ["toy_refusing", "check", "in.yaml"])
    finally:
        COMMANDS.unregister("toy_refusing")
        app.registered_groups[:] = before
    assert result.exit_code == 2
    assert result.stderr == "error in.yaml:3: x: not what this command reads\n"
    assert result.exception is None or isinstance(result.exception, SystemExit)


class NeedsAnExtra:
    """A family's kind whose extra is not installed (never imported: refused before)."""


def test_seed_001_is_a_family_whose_register_adds_its_kind_and_prompt() -> None:
    from biasim.simulator.study.load import load_study

    assert "acceptance" not in KINDS.builtin and "email_judge_prompt" not in PROMPTS.builtin
    assert "hiring_emails" in FAMILIES.builtin
    # Found by name without naming the family: a run recorded before stays readable.
    assert type(KINDS.instance("acceptance")).__module__ == (
        "biasim.families.hiring_emails.acceptance"
    )
    # The judge variant inherits `family:` and renders the family's prompt when validated.
    study = load_study("an2024_hiring_judge")
    assert study.config.family == "hiring_emails"
    assert any("Labels:" in text for _, text in study.rendered)


def test_a_family_kind_that_needs_a_missing_extra_is_refused_with_the_install_line() -> None:
    from biasim.registry import MissingExtra

    KINDS.register("toy_needs", f"{__name__}:NeedsAnExtra", extra=("toy", ("no_such_mod_45",)))
    try:
        with pytest.raises(MissingExtra, match=r"pip install 'biasim\[toy\]'"):
            KINDS.load("toy_needs")
    finally:
        KINDS.unregister("toy_needs")
    assert KINDS.missing_extra("toy_needs") is None
