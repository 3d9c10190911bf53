"""``biasim gate``: pass/fail rules over a bias audit, for a vendor's CI.

The audit is computed as ``biasim audit`` computes it (any ``--format``; ``eeoc`` by default, for
its impact-ratio intervals) and nothing is written into the run. Each rule
(:mod:`biasim.analysis.audit.rules`) comes from ``--rule`` or the study's ``gates:``; the
verdicts go to the console, a JUnit XML file (one test case per rule) and a Markdown summary.
"""

from __future__ import annotations

import html
import math
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from biasim.analysis.audit.rules import Rule, RuleError, RuleResult, evaluate, parse_rule
from biasim.simulator.common.errors import InputError, Problem
from biasim.simulator.common.rundir import RESULTS_PARQUET, write_atomic
from biasim.simulator.tools.audit import AuditOptions, bias_audit


@dataclass(frozen=True)
class GateReport:
    """Every rule's verdict on one audit."""

    source: str
    audit_format: str
    results: tuple[RuleResult, ...]

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)


def gate_rules(source: Path, given: list[str], options: AuditOptions) -> list[Rule]:
    """The rules to check: ``--rule`` first, then the run's study ``gates:``.

    Raises:
        InputError: A rule that does not parse (naming it and its token), or none at all.
    """
    texts = [("--rule", r) for r in given] + [("gates", r) for r in _study_gates(source, options)]
    rules, problems = [], []
    for where, text in texts:
        try:
            rules.append(parse_rule(text))
        except RuleError as exc:
            problems.append(Problem(where, None, "", str(exc)))
    if not texts:
        problems.append(
            Problem(
                "--rule",
                None,
                "",
                "no rule: give --rule (e.g. 'impact_ratio.ci_high >= 0.8') "
                "or a `gates:` section in the study",
            )
        )
    if problems:
        raise InputError(problems)
    return rules


def _study_gates(source: Path, options: AuditOptions) -> list[str]:
    if not (source.is_dir() and (source / RESULTS_PARQUET).is_file()):
        return []
    from biasim.simulator.engine.runner import load_run

    study, _ = load_run(source, accept_edits=options.accept_edits, command="gate")
    return list(study.config.gates)


def run_gate(source: Path, rules: list[Rule], options: AuditOptions) -> GateReport:
    """The audit of ``source`` and each rule's verdict on it.

    Raises:
        InputError: The audit's own input errors, or a rule naming no field of its tables.
    """
    audit = bias_audit(source, options)
    labels = [*audit["columns"]["by"], audit["columns"]["sex"], audit["columns"]["race_ethnicity"]]
    results = []
    for rule in rules:
        try:
            results.append(evaluate(rule, audit["tables"], [c for c in labels if c]))
        except RuleError as exc:
            raise InputError([Problem("--rule", None, "", str(exc))]) from None
    return GateReport(str(source), audit["format"], tuple(results))


def verdict_line(result: RuleResult) -> str:
    """One rule's verdict in words: the console, JUnit and Markdown all print this."""
    state = "PASS" if result.passed else "FAIL"
    shown = ", ".join(f"{key} {label}: {_value(v)}" for key, label, v in result.failures[:5])
    more = f" (+{len(result.failures) - 5} more)" if len(result.failures) > 5 else ""
    why = f"; fails on {shown}{more}" if result.failures else ""
    if result.checked == 0:
        why = "; no row has a value to check"
    skipped = f", {result.missing} without a value" if result.missing else ""
    return f"{state} `{result.rule.text}`: {result.checked} rows checked{skipped}{why}"


def _value(value: Any) -> str:
    if isinstance(value, float) and not math.isnan(value):
        return f"{value:.4g}"
    return str(value)


def write_junit(report: GateReport, path: Path) -> None:
    """JUnit XML: one ``testsuite`` of one ``testcase`` per rule, failed rules with a
    ``failure`` naming the rows."""
    failures = sum(not r.passed for r in report.results)
    suite = ET.Element(
        "testsuite",
        name=f"biasim gate ({report.audit_format})",
        tests=str(len(report.results)),
        failures=str(failures),
        errors="0",
    )
    for result in report.results:
        case = ET.SubElement(suite, "testcase", classname=report.source, name=result.rule.text)
        if not result.passed:
            ET.SubElement(case, "failure", message=verdict_line(result)).text = verdict_line(result)
    text = ET.tostring(ET.ElementTree(suite).getroot(), encoding="unicode", xml_declaration=True)
    write_atomic(path, lambda tmp: tmp.write_text(text + "\n", encoding="utf-8"))


def write_markdown(report: GateReport, path: Path) -> None:
    """A Markdown summary (for a CI job summary): the verdict and one row per rule."""
    state = "passed" if report.passed else "failed"
    lines = [
        f"## biasim gate: {state}",
        "",
        f"Audit `{report.audit_format}` of `{report.source}`.",
        "",
        "| rule | result | rows checked | without a value | failing rows |",
        "|---|---|---|---|---|",
    ]
    for r in report.results:
        failing = "; ".join(f"{k} {label}: {_value(v)}" for k, label, v in r.failures[:10])
        cells = [
            f"`{r.rule.text}`",
            "pass" if r.passed else "**FAIL**",
            str(r.checked),
            str(r.missing),
            html.escape(failing) or "-",
        ]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    text = "\n".join(lines) + "\n"
    write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
