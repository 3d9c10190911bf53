"""Turns a results table into the evidence a reviewer asks for: JSON, CSV tables, PNG figures
and printed tables. ``biasim analyze`` calls the same code on a finished run, without any call.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from rich.console import Console
from rich.panel import Panel
from rich.table import Table

import scenarios
from analysis import cases as case_stats
from analysis import disparity, email_outcomes, figures, terms
from analysis.parity import status_rates

from .config import AcceptanceConfig, AnalysisConfig, StudyConfig
from .rundir import write_atomic

SYNTHETIC_NOTE = (
    "SYNTHETIC RESPONDER - not a language model. These answers were drawn from probabilities "
    "declared in the study file; they test the pipeline and power, not a model."
)
#: Hand-written labelled emails shipped with the hiring study: the SVM's default training set.
STARTER_LABELS = Path(scenarios.__file__).parent / "data" / "hiring_email_labels.csv"
TABLES_DIR = "tables"
FIGURES_DIR = "figures"


@dataclass
class Evidence:
    """Everything the analyses of a run produced."""

    summary: dict[str, Any]
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    figures: dict[str, Figure] = field(default_factory=dict)


def analyze(df: pd.DataFrame, study: StudyConfig, *, data_dir: Path | None = None) -> Evidence:
    """Every analysis the study declares, plus outcome rates per persona group.

    Args:
        df: The results table.
        study: The study that produced it.
        data_dir: Where relative data paths of analyses (training CSV, predictions) resolve.
    """
    synthetic = bool(df["synthetic"].fillna(False).astype(bool).any()) if len(df) else False
    evidence = Evidence(
        summary={
            "study": study.name,
            "synthetic": synthetic,
            "units": len(df),
            "status_counts": {k: int(v) for k, v in df["status"].value_counts().items()},
            "models": sorted({f"{b}:{m}" for b, m in zip(df["backend"], df["model"], strict=True)}),
            "outcomes_by_group": {},
            "analyses": [],
        }
    )
    for axis in study.personas.axes:
        if axis in df and df[axis].notna().any():
            evidence.summary["outcomes_by_group"][axis] = status_rates(df, axis).to_dict("records")
    for i, spec in enumerate(study.analyses):
        name = spec.name or f"analysis{i + 1}"
        if isinstance(spec, AcceptanceConfig):
            result = _acceptance(df, spec, name, study, evidence, data_dir)
        else:
            result = _decisions(df, spec, name, study, evidence, data_dir)
        evidence.summary["analyses"].append(result)
    return evidence


def write_evidence(run_dir: Path, evidence: Evidence) -> list[Path]:
    """Write the tables (CSV) and figures (PNG) into ``run_dir``; return the paths written."""
    written: list[Path] = []
    if evidence.tables:
        (run_dir / TABLES_DIR).mkdir(parents=True, exist_ok=True)
    for name, table in evidence.tables.items():
        path = run_dir / TABLES_DIR / f"{name}.csv"
        write_atomic(path, lambda tmp, t=table: t.to_csv(tmp, index=False))
        written.append(path)
    for name, figure in evidence.figures.items():
        written.append(figures.save_figure(figure, run_dir / FIGURES_DIR / f"{name}.png"))
    return written


def _slug(*parts: str) -> str:
    return "_".join(re.sub(r"[^A-Za-z0-9._-]+", "-", str(p)).strip("-") for p in parts if p)


def _long(df: pd.DataFrame, axes: list[str], separately: bool) -> pd.DataFrame:
    """One row per decision with ``attribute`` (the axis) and ``value`` columns."""
    if not separately:
        data = df.dropna(subset=axes)
        value = data[axes[0]].astype(str)
        for axis in axes[1:]:  # column-wise: a row-wise join costs seconds at 10^5 rows
            value = value + "/" + data[axis].astype(str)
        return data.assign(attribute="×".join(axes), value=value)
    parts = [
        df[df[axis].notna()].assign(attribute=axis, value=lambda d, a=axis: d[a]) for axis in axes
    ]
    return pd.concat(parts, ignore_index=True) if parts else df.iloc[0:0]


def _decisions(
    df: pd.DataFrame,
    spec: AnalysisConfig,
    name: str,
    study: StudyConfig,
    evidence: Evidence,
    data_dir: Path | None,
) -> dict[str, Any]:
    axes = [a for a in spec.groups if a in study.personas.axes]
    rows = _long(df[df["stage"] == spec.stage], axes, spec.separately)
    target = rows[spec.target_from] if spec.target_from else spec.target
    rows = rows.assign(_hit=(rows[spec.field] == target).where(rows[spec.field].notna()))
    condition = [spec.condition] if spec.condition else []
    case_cols = ["model_label", *condition, *spec.cases, "attribute"]
    rates = case_stats.case_rates(rows, case_cols, "value", "_hit", True)
    cases = case_stats.case_parity(
        rates,
        case_cols,
        "value",
        alpha=spec.alpha,
        n_simulations=spec.n_simulations,
        seed=study.seed,
    )
    if spec.target_from:
        targets = rows.groupby(spec.cases or ["model_label"])[spec.target_from].first()
        cases = cases.merge(targets.reset_index(), how="left") if spec.cases else cases
    evidence.tables[f"{name}_rates"] = rates
    evidence.tables[f"{name}_cases"] = cases
    result: dict[str, Any] = {
        "kind": spec.kind,
        "name": name,
        "stage": spec.stage,
        "field": spec.field,
        "target": spec.target or f"per case ({spec.target_from})",
        "case_columns": case_cols,
        "groups": rates.to_dict("records"),
        "cases": cases.to_dict("records"),
    }
    panel_cases = [c for c in spec.cases if c != "model_label"]
    for key, part in rates.groupby(["model_label", *condition], sort=False):
        key = key if isinstance(key, tuple) else (key,)
        mask = np.logical_and.reduce(
            [cases[c] == v for c, v in zip(["model_label", *condition], key, strict=True)]
        )
        evidence.figures[_slug(name, "shares", *key)] = figures.plot_decision_shares(
            part,
            cases[mask],
            col_col=panel_cases[0] if panel_cases else "attribute",
            title=f"{study.name}: {' / '.join(map(str, key))}",
        )
    if spec.condition:
        ablation = case_stats.ablation_table(
            cases, ["model_label", *spec.cases, "attribute"], spec.condition, conditions=None
        )
        evidence.tables[f"{name}_ablation"] = ablation
        for model, part in cases.groupby("model_label"):
            evidence.figures[_slug(name, "dpd_by_condition", model)] = (
                figures.plot_dpd_by_condition(
                    part, condition_col=spec.condition, case_cols=tuple([*panel_cases, "attribute"])
                )
            )
    if spec.explicit is not None:
        trials = _long(df[df["stage"].isin(spec.explicit.stages)], axes, spec.separately)
        explicit_cols = ["model_label", *spec.cases, "attribute"]
        labels = _explicit_labels(study, spec)
        x_rates = case_stats.explicit_rates(
            trials, explicit_cols, spec.explicit.field, unknown=spec.explicit.unknown, labels=labels
        )
        x_cases = case_stats.explicit_parity(
            x_rates,
            explicit_cols,
            unknown=spec.explicit.unknown,
            alpha=spec.alpha,
            n_simulations=spec.n_simulations,
            seed=study.seed,
        )
        evidence.tables[f"{name}_explicit_rates"] = x_rates
        evidence.tables[f"{name}_explicit_cases"] = x_cases
        implicit = cases
        if spec.condition:
            # The paper's technique is the last persona condition (contextualized personas).
            main = [
                c for c in study.design.factors[spec.condition] if c in set(cases[spec.condition])
            ]
            implicit = cases[cases[spec.condition] == main[-1]] if main else cases
            result["implicit_condition"] = main[-1] if main else None
        comparison = case_stats.implicit_vs_explicit(implicit, x_cases)
        evidence.tables[f"{name}_implicit_vs_explicit"] = comparison
        evidence.figures[_slug(name, "implicit_vs_explicit")] = figures.plot_implicit_explicit(
            comparison
        )
        result["explicit_cases"] = x_cases.to_dict("records")
        result["implicit_vs_explicit"] = comparison.to_dict("records")
    if spec.terms is not None:
        answered = rows[rows["valid"].astype(bool)]
        sets = spec.terms.term_sets
        term_sets = (
            terms.load_term_sets()
            if sets == "default"
            else (terms.load_term_sets(_resolve(sets, data_dir)) if isinstance(sets, str) else sets)
        )
        group_cols = ["model_label", *condition, *spec.cases, "attribute", "value"]
        counts = terms.term_counts(answered, spec.terms.field, group_cols, term_sets)
        evidence.tables[f"{name}_terms"] = counts
        scans = []
        for key, part in answered.groupby(["model_label", *condition, *spec.cases, "attribute"]):
            if part["value"].nunique() < 2:
                continue
            scan = terms.distinctive_terms(
                part, spec.terms.field, "value", top_n=spec.terms.top_n, min_count=2
            )
            for col, value in zip(
                ["model_label", *condition, *spec.cases, "attribute"], key, strict=True
            ):
                scan.insert(0, col, value)
            scans.append(scan)
        if scans:
            evidence.tables[f"{name}_distinctive_terms"] = pd.concat(scans, ignore_index=True)
    if spec.predictions is not None:
        path = (
            case_stats.DEFAULT_PREDICTIONS
            if spec.predictions == "default"
            else _resolve(spec.predictions, data_dir)
        )
        scenario_col = spec.cases[0] if spec.cases else "scenario"
        alignment = case_stats.directional_alignment(
            rates.rename(columns={scenario_col: "scenario"})
            if scenario_col != "scenario"
            else rates,
            case_stats.load_predictions(path),
            by=("model_label", *condition),
        )
        evidence.tables[f"{name}_alignment"] = alignment
        result["alignment"] = alignment.to_dict("records")
    return result


def _explicit_labels(study: StudyConfig, spec: AnalysisConfig) -> dict[str, list[str]] | None:
    assert spec.explicit is not None
    labels: dict[str, list[str]] = {}
    for stage in study.stages:
        if stage.name in spec.explicit.stages and stage.output:
            out = stage.output.get(spec.explicit.field)
            axis_match = [a for a in spec.groups if stage.when and f"'{a}'" in stage.when]
            if out is not None and out.choices and axis_match:
                labels[axis_match[0]] = list(out.choices)
    return labels or None


def _resolve(path: str, data_dir: Path | None) -> Path:
    candidate = Path(path)
    if not candidate.is_absolute() and data_dir is not None and (data_dir / candidate).exists():
        return data_dir / candidate
    return candidate


def _acceptance(
    df: pd.DataFrame,
    spec: AcceptanceConfig,
    name: str,
    study: StudyConfig,
    evidence: Evidence,
    data_dir: Path | None,
) -> dict[str, Any]:
    rows = df[(df["stage"] == spec.stage)].reset_index(drop=True)
    texts = rows[spec.field].fillna("").astype(str).tolist()
    names = rows["persona_name"].fillna("").astype(str).tolist()
    redacted = email_outcomes.redact_names(texts, names)
    if spec.classifier == "rules":
        labels = email_outcomes.RuleClassifier().predict(redacted)
    elif spec.classifier == "svm":
        training = (
            _resolve(spec.training_csv, data_dir)
            if spec.training_csv
            else email_outcomes.STARTER_LABELS
        )
        labels = email_outcomes.SvmClassifier.from_csv(training).predict(redacted)
    else:
        judged = df[df["stage"] == spec.judge_stage].set_index("agent_id")["outcome"]
        labels = rows["agent_id"].map(judged).fillna("invalid").tolist()
    rows = rows.assign(outcome=labels)
    rows.loc[~rows["valid"].astype(bool), "outcome"] = "invalid"
    agreement: dict[str, Any] = {}
    if spec.classifier == "judge" and len(rows):
        # A reviewer's first question about an LLM judge: does it agree with the transparent
        # rules on the same (redacted) emails, and where not.
        rules = email_outcomes.RuleClassifier().predict(redacted)
        table, share, kappa = email_outcomes.label_agreement(rows["outcome"].tolist(), rules)
        evidence.tables[f"{name}_judge_vs_rules"] = table.rename(columns={"first": "judge"})
        agreement = {"judge_rules_agreement": share, "judge_rules_kappa": kappa}
    evidence.tables[f"{name}_outcomes"] = rows[
        ["unit_id", "model_label", *spec.groups, "persona_name", "outcome"]
    ]
    validity, pairwise = email_outcomes.validity_by_group(rows, spec.groups, "outcome")
    evidence.tables[f"{name}_validity"] = validity
    evidence.tables[f"{name}_validity_pairwise"] = pairwise
    result: dict[str, Any] = {
        "kind": spec.kind,
        "name": name,
        "stage": spec.stage,
        "classifier": spec.classifier,
        "groups": list(spec.groups),
        "adjust": spec.adjust,
        **agreement,
        "models": {},
    }
    for model, part in rows.groupby("model_label"):
        report = disparity.disparity_report(
            part,
            spec.groups,
            "outcome",
            positive="accept",
            unit_col="persona_name" if spec.unit == "name" else None,
            stratum_col=spec.strata,
            n_permutations=spec.n_permutations,
            adjust=spec.adjust,
            seed=study.seed,
            require_positive=False,
        )
        prefix = _slug(name, model)
        scalars = {}
        for key, value in report.items():
            if isinstance(value, pd.DataFrame):
                evidence.tables[f"{prefix}_{key}"] = value
            else:
                scalars[key] = value
        tests = report.get("permutation")
        for column in spec.breakdowns:
            # The paper marks each cell of Tables 1-4 by a permutation test within its row; each
            # table is one declared family for `adjust`.
            row_tests = (
                report["permutation_by_stratum"]
                if column == spec.strata
                else disparity.adjust_family(
                    disparity.permutation_vs_population(
                        part,
                        spec.groups,
                        "outcome",
                        "accept",
                        unit="name" if spec.unit == "name" else "email",
                        unit_col="persona_name",
                        stratum_col=column,
                        n_permutations=spec.n_permutations,
                        seed=study.seed,
                    ),
                    "p_two_sided",
                    spec.adjust,
                )
            )
            evidence.tables[f"{prefix}_by_{column}_tests"] = row_tests
            evidence.tables[f"{prefix}_by_{column}"] = disparity.rate_breakdown(
                part, column, spec.groups, "outcome", "accept", tests=row_tests, p_col="p_adjusted"
            )
        result["models"][model] = {
            **scalars,
            "rates": report["rates"].to_dict("records"),
            "impact_ratios": report["impact_ratios"].to_dict("records"),
            "permutation": tests.to_dict("records") if isinstance(tests, pd.DataFrame) else None,
        }
    return result


# --- printing ---------------------------------------------------------------------------------


def print_report(report: dict[str, Any], console: Console | None = None) -> None:
    """Print decision rates, DPD with its parity test, and outcome rates per group."""
    console = console or Console()
    if report["synthetic"]:
        console.print(Panel(SYNTHETIC_NOTE, style="bold yellow"))
    console.print(
        f"[bold]{report['study']}[/bold]  models: {', '.join(report['models'])}  "
        f"units: {report['units']}  outcomes: {report['status_counts']}"
    )
    for result in report["analyses"]:
        if result["kind"] == "acceptance":
            _print_acceptance(result, console)
        else:
            _print_decisions(result, console)
    for axis, rows in report["outcomes_by_group"].items():
        table = Table(
            title=f"Answer outcomes by {axis} (a difference here is itself a bias signal)"
        )
        for col in (axis, "units", "answered", "invalid", "error", "skipped"):
            table.add_column(col, justify="left" if col == axis else "right")
        for row in rows:
            table.add_row(
                str(row[axis]),
                str(row["n"]),
                *[f"{row[f'{s}_rate']:.1%}" for s in ("answered", "invalid", "error", "skipped")],
            )
        console.print(table)


def _fmt(value: Any, spec: str = ".3f") -> str:
    return (
        "-"
        if value is None or (isinstance(value, float) and np.isnan(value))
        else format(value, spec)
    )


def _print_decisions(result: dict[str, Any], console: Console) -> None:
    case_cols = [c for c in result["case_columns"] if c != "model_label"]
    cases = result["cases"]
    if len(cases) == 1:
        table = Table(title=f"Rate of {result['field']} = {result['target']} ({result['stage']})")
        for col in ("group", "valid n", "excluded", "targeted", "rate", "95% CI (Wilson)"):
            table.add_column(col, justify="right")
        for row in result["groups"]:
            table.add_row(
                str(row["value"]),
                str(row["n_valid"]),
                str(row["n_excluded"]),
                str(row["k"]),
                _fmt(row["rate"]),
                f"[{_fmt(row['ci_low'])}, {_fmt(row['ci_high'])}]",
            )
        console.print(table)
    table = Table(title=f"Demographic parity difference per case ({result['name']})")
    for col in ("model", *case_cols, "DPD", "threshold", "by chance", "p", "excluded"):
        table.add_column(col, justify="right")
    for row in cases:
        mark = "*" if row["significant"] else ""
        table.add_row(
            str(row["model_label"]),
            *[str(row[c]) for c in case_cols],
            f"{_fmt(row['dpd'])}{mark}",
            _fmt(row["threshold"]),
            _fmt(row["chance_dpd"]),
            _fmt(row["p_value"]),
            str(row["n_excluded"]),
        )
    console.print(table)
    console.print(
        "DPD = max - min rate of the targeted decision; threshold = 95th percentile of DPD in "
        "binomial simulations at the pooled rate (* = significant); 'by chance' = mean DPD "
        "under parity."
    )
    for row in result.get("implicit_vs_explicit", []):
        console.print(
            f"[bold]implicit vs explicit[/bold] ({row['model_label']}): implicit mean DPD "
            f"{_fmt(row['mean_dpd_implicit'])} (sd {_fmt(row['sd_dpd_implicit'])}, "
            f"{row['n_significant_implicit']}/{row['n_cases_implicit']} significant) vs explicit "
            f"{_fmt(row['mean_dpd_explicit'])} (sd {_fmt(row['sd_dpd_explicit'])}, "
            f"{row['n_significant_explicit']}/{row['n_cases_explicit']} significant); "
            f"t = {_fmt(row['t_statistic'], '.2f')}, p = {_fmt(row['p_value'])}"
        )


def _print_acceptance(result: dict[str, Any], console: Console) -> None:
    if "judge_rules_agreement" in result:
        console.print(
            f"LLM judge vs rule classifier on the same emails: "
            f"{_fmt(result['judge_rules_agreement'], '.1%')} agree, Cohen's kappa "
            f"{_fmt(result['judge_rules_kappa'], '.2f')} (table {result['name']}_judge_vs_rules)"
        )
    groups = result["groups"]
    for model, part in result["models"].items():
        table = Table(
            title=f"Acceptance rate by group ({model}, classifier: {result['classifier']})"
        )
        ratios = {tuple(r[g] for g in groups): r for r in part["impact_ratios"]}
        tests = {tuple(r[g] for g in groups): r for r in part["permutation"] or []}
        for col in (*groups, "acc/n", "excl", "rate", "95% CI", "IR", "p"):
            table.add_column(col, justify="right", no_wrap=True)
        for row in part["rates"]:
            group = tuple(row[g] for g in groups)
            ratio, test = ratios.get(group, {}), tests.get(group, {})
            flag = "!" if ratio.get("four_fifths_flag") else ""
            table.add_row(
                *[str(v) for v in group],
                f"{row['k']}/{row['n']}",
                str(row["n_excluded"]),
                _fmt(row["rate"]),
                f"[{_fmt(row['ci_low'])}, {_fmt(row['ci_high'])}]",
                f"{_fmt(ratio.get('impact_ratio'), '.2f')}{flag}",
                _fmt(test.get("p_adjusted")),
            )
        console.print(table)
        console.print(
            f"DPD {_fmt(part.get('dpd'))} (parity p = {_fmt(part.get('dpd_p_value'))}), "
            f"population rate {_fmt(part.get('population_rate'))}; chance that an unbiased "
            f"model fails four-fifths for some group: "
            f"{_fmt(part.get('p_any_flag_by_chance'), '.1%')}.\n"
            f"acc/n = accepted / valid answers, excl = invalid (excluded); IR = impact ratio "
            f"(rate / highest rate, ! = below four-fifths); p = permutation test of the group "
            f"against the population, two-sided, {result['adjust']}-adjusted over the groups."
        )
