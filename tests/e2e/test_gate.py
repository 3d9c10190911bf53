"""`biasim gate`: exit 0 when every rule holds, 1 when one fails (with JUnit XML and a Markdown
summary naming the rows), 2 on a bad rule or field (naming it and its token, nothing written);
the rules of a study's `gates:` section are checked on its run and validated with the study."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pandas as pd

from biasim.simulator.cli import app
from tests.golden_studies import STUDIES


def _csv(tmp_path, female_selected: int) -> str:
    rows = [("F", int(i < female_selected)) for i in range(200)]
    rows += [("M", int(i < 100)) for i in range(200)]
    path = tmp_path / "decisions.csv"
    pd.DataFrame(rows, columns=["sex", "selected"]).to_csv(path, index=False)
    return str(path)


RULES = ["--rule", "impact_ratio.ci_high >= 0.8", "--rule", "shortfall == 0"]


def test_a_fair_tool_passes_and_a_biased_one_fails_with_junit(tmp_path, cli) -> None:
    fair = cli.invoke(app, ["gate", _csv(tmp_path, 98), *RULES])
    assert fair.exit_code == 0, fair.output
    assert fair.stdout.count("PASS") == 2
    junit, summary = tmp_path / "gate.xml", tmp_path / "gate.md"
    biased = cli.invoke(
        app,
        ["gate", _csv(tmp_path, 50), *RULES, "--junit", str(junit), "--markdown", str(summary)],
    )
    assert biased.exit_code == 1, biased.output
    suite = ET.parse(junit).getroot()
    assert suite.tag == "testsuite" and suite.get("tests") == "2" and suite.get("failures") == "2"
    failure = suite.find("testcase[@name='impact_ratio.ci_high >= 0.8']/failure")
    assert failure is not None and "sex F" in failure.get("message")
    # 50/200 against 100/200: 80 needed for 4/5, 30 short.
    shortfall = suite.find("testcase[@name='shortfall == 0']/failure").get("message")
    assert "sex F: 30" in shortfall
    text = summary.read_text()
    assert "## biasim gate: failed" in text and "| `shortfall == 0` | **FAIL** |" in text


def test_bad_rules_and_fields_exit_2_naming_them(tmp_path, cli) -> None:
    path = _csv(tmp_path, 98)
    junit = tmp_path / "gate.xml"
    bad = cli.invoke(
        app, ["gate", path, "--rule", "impact_ratio >= 0.8 or 1", "--junit", str(junit)]
    )
    assert bad.exit_code == 2
    assert "--rule: rule `impact_ratio >= 0.8 or 1`: one comparison per rule" in bad.stderr
    assert "at `or`" in bad.stderr
    unknown = cli.invoke(app, ["gate", path, "--rule", "ir.ci_high >= 0.8", "--junit", str(junit)])
    assert unknown.exit_code == 2 and "no such field; fields:" in unknown.stderr
    assert "at `ir.ci_high`" in unknown.stderr
    none = cli.invoke(app, ["gate", path])
    assert none.exit_code == 2 and "no rule" in none.stderr
    nowhere = cli.invoke(app, ["gate", path, *RULES, "--junit", str(tmp_path / "no" / "j.xml")])
    assert nowhere.exit_code == 2 and "--junit" in nowhere.stderr
    fmt = cli.invoke(app, ["gate", path, *RULES, "--format", "eu"])
    assert (
        fmt.exit_code == 2 and "known: california, colorado, eeoc, eu-ai-act, ll144" in fmt.stderr
    )
    assert not junit.exists()


def test_a_studys_gates_are_validated_and_checked_on_its_run(tmp_path, cli) -> None:
    text, _ = STUDIES["hiring_small"]  # declares a bias: offers 0.7 to White, 0.5 to others
    study = tmp_path / "hiring.yaml"
    study.write_text(text + "gates:\n  - impact_ratio >= 0.8\n  - fisher_p >== 0.05\n")
    bad = cli.invoke(app, ["validate", str(study)])
    assert bad.exit_code == 2 and "gates" in bad.stderr and "at `>==`" in bad.stderr
    study.write_text(text + "gates:\n  - impact_ratio >= 0.8\n")
    run = tmp_path / "run"
    assert cli.invoke(app, ["run", str(study), "--out", str(run)]).exit_code == 0
    junit = tmp_path / "gate.xml"
    result = cli.invoke(app, ["gate", str(run), "--junit", str(junit)])
    assert result.exit_code == 1, result.output
    assert "FAIL `impact_ratio >= 0.8`" in result.stdout and "race_ethnicity Black" in result.stdout
    assert ET.parse(junit).getroot().get("failures") == "1"
    assert not (run / "audit").exists()  # the gate writes nothing into the run


def test_gate_reads_the_audit_options_audit_reads(monkeypatch, tmp_path, cli) -> None:
    """The options naming the decisions and their columns are declared once for audit and gate
    (an option group): both show them alike and both build the same AuditOptions from them."""
    import typer
    import typer.main

    from biasim.simulator.cli import tool_commands
    from biasim.simulator.tools.audit import AuditOptions

    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    shared = {o.name for o in tool_commands._AUDITED.options}
    shown = {
        name: {(p.name, tuple(p.opts), p.help, p.default) for p in commands[name].params}
        for name in ("audit", "gate")
    }
    assert len(shared) == 10 and {s[0] for s in shown["gate"] & shown["audit"]} == shared

    built = []

    def stop(options: AuditOptions, **_: object) -> None:
        built.append(options)
        raise typer.Exit(0)

    monkeypatch.setattr(tool_commands, "replace", stop)
    given = ["--sex-col", "sex", "--by", "a, b", "--stage", "s", "--accept-edits"]
    for name in ("audit", "gate"):
        out = ["--out", str(tmp_path / name)] if name == "audit" else []
        result = cli.invoke(app, [name, _csv(tmp_path, 98), *given, *out])
        assert result.exit_code == 0, result.output
    expected = AuditOptions(sex_col="sex", by=["a", "b"], stage="s", accept_edits=True)
    assert built == [expected, expected]
