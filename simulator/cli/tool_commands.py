"""Commands around studies: ``power`` (planning), ``compare`` (runs), ``audit`` (a rule's
bias-audit tables) and ``gate`` (rules over an audit, for CI)."""

from __future__ import annotations

import json
import os
import sys
import time
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from biasim.simulator.cli.common import (
    app,
    err_console,
    fail_input,
    out_console,
    print_written,
    say_failed_analyses,
    styled,
)
from biasim.simulator.cli.option_groups import GroupOption, OptionGroup, with_groups
from biasim.simulator.common.csvlimits import (
    CELL_CHARS_CEILING,
    DEFAULT_MAX_CELL_CHARS,
    DEFAULT_MAX_GROUPS,
    DEFAULT_MAX_ROWS,
    CsvLimits,
)
from biasim.simulator.common.errors import InputError
from biasim.simulator.common.tables import print_table

# The options of `biasim power`, one constant each so its signature reads as the option list.
_POWER_STUDY_ARGUMENT = typer.Argument(help="Study file or built-in name.")
_POWER_AGENTS_OPTION = typer.Option(help="Agents per persona value to try, comma-separated.")
_POWER_STUDIES_OPTION = typer.Option(help="Simulated studies per arm and size.")
_POWER_EFFECT_OPTION = typer.Option(
    help="Scale of the declared synthetic effect (1 = as declared)."
)
_POWER_ALPHA_OPTION = typer.Option(help="Significance level.")
_POWER_SEED_OPTION = typer.Option(min=0, max=2**63 - 1, help="First seed of the simulated studies.")
_POWER_OUT_OPTION = typer.Option(help="Write power.csv here (a new or empty directory).")
_POWER_WORKERS_OPTION = typer.Option(
    min=0, help="Processes to run simulated studies in (0: one per core, 1: this one)."
)
_POWER_RAY_OPTION = typer.Option("--ray", help="Run the simulated studies on a local Ray cluster.")
_POWER_RAY_ADDRESS_OPTION = typer.Option(
    help="Run the simulated studies on the Ray cluster at this address."
)
_POWER_PER_CALL_OPTION = typer.Option(
    "--per-call",
    help="Run every simulated study through the engine, each answer through the call store and "
    "retry layer, instead of drawing whole stages at once (slower; the same distribution).",
)


@app.command()
def power(
    study: Annotated[str, _POWER_STUDY_ARGUMENT],
    agents: Annotated[str, _POWER_AGENTS_OPTION] = "2,5,10",
    studies: Annotated[int, _POWER_STUDIES_OPTION] = 20,
    effect: Annotated[float, _POWER_EFFECT_OPTION] = 1.0,
    alpha: Annotated[float, _POWER_ALPHA_OPTION] = 0.05,
    seed: Annotated[int, _POWER_SEED_OPTION] = 0,
    out: Annotated[Path | None, _POWER_OUT_OPTION] = None,
    workers: Annotated[int, _POWER_WORKERS_OPTION] = 0,
    ray: Annotated[bool, _POWER_RAY_OPTION] = False,
    ray_address: Annotated[str | None, _POWER_RAY_ADDRESS_OPTION] = None,
    per_call: Annotated[bool, _POWER_PER_CALL_OPTION] = False,
) -> None:
    """Power and false-positive rate of the study's tests on its synthetic truth."""
    from biasim.simulator.common.errors import Problem
    from biasim.simulator.study.load import load_study
    from biasim.simulator.tools.power import fast_path_note, omitted_analyses
    from biasim.simulator.tools.power import power as simulate

    sizes = _checked_power_options(agents, studies, alpha, effect, out)
    _check_power_sizes(study, sizes)
    err_console.print(
        f"simulating {len(sizes)} size(s) x 2 arms x {studies} studies on the synthetic "
        "backend (a test double with the study's declared truth, not a model)"
    )
    start = time.monotonic()
    try:
        note = "" if per_call else fast_path_note(study)
        if note:
            err_console.print(note, highlight=False)
        rows = simulate(
            study,
            sizes,
            studies=studies,
            effect=effect,
            alpha=alpha,
            seed=seed,
            workers=workers or os.cpu_count() or 1,
            ray_address=ray_address or ("local" if ray else None),
            per_call=per_call,
            progress=lambda line: err_console.print(
                f"[{time.monotonic() - start:6.0f} s] {line}", highlight=False
            ),
        )
    except InputError as exc:
        fail_input(exc)
    except ValueError as exc:
        fail_input(InputError([Problem(study, None, "", str(exc))]))
    _print_power(rows, effect, alpha, studies)
    for line in omitted_analyses(load_study(study, check_backends=False).config, rows):
        out_console.print(line, highlight=False)
    if out is not None:
        _write_power_csv(rows, out)


def _checked_power_options(
    agents: str, studies: int, alpha: float, effect: float, out: Path | None
) -> list[int]:
    """The sample sizes of ``--agents``, once every option is usable (else exit 2 naming each
    that is not)."""
    from biasim.simulator.common.errors import Problem

    try:
        sizes = [int(a) for a in agents.split(",") if a.strip()]
    except ValueError:
        sizes = []
    problems = []
    if not sizes or min(sizes) < 1:
        problems.append(
            Problem("--agents", None, "", f"`{agents}`: give positive integers, e.g. 2,5,10")
        )
    if studies < 2:
        problems.append(Problem("--studies", None, "", "at least 2"))
    if not 0 < alpha < 1:
        problems.append(Problem("--alpha", None, "", "between 0 and 1"))
    if effect < 0:
        problems.append(Problem("--effect", None, "", "0 or more"))
    if out is not None:
        from biasim.simulator.common.rundir import check_writable

        reason = check_writable(out, hint="; name a new directory with --out")
        if reason:
            problems.append(Problem("--out", None, "", reason))
    if problems:
        fail_input(InputError(problems))
    return sizes


def _check_power_sizes(study: str, sizes: list[int]) -> None:
    """Each size of ``--agents`` validated as the study it simulates (exit 2 naming
    ``--agents`` and what the design needs, not the study file's line, for a size the design
    cannot take, e.g. a market's workforce larger than its population at 2 agents a value)."""
    from biasim.simulator.common.errors import Problem
    from biasim.simulator.study.load import Override, load_study

    try:
        load_study(study, check_backends=False)  # the study's own problems, as the file's
    except InputError as exc:
        fail_input(exc)
    problems = []
    for size in sizes:
        override = Override("--agents", ("design", "agents_per_value"), size)
        try:
            load_study(study, [override], check_backends=False)
        except InputError as exc:
            why = "; ".join(
                f"{p.field}: {p.message}" if p.field else p.message for p in exc.problems
            )
            problems.append(
                Problem(
                    "--agents",
                    None,
                    "",
                    f"{size} agents per value: the design cannot take it: {why}",
                )
            )
    if problems:
        fail_input(InputError(problems))


def _print_power(rows: list, effect: float, alpha: float, studies: int) -> None:
    """The power table, then how far its shares can be trusted."""
    table = Table(
        title=f"Power (effect x{effect:g}) and false-positive rate (no effect) at alpha {alpha:g}, "
        f"{studies} studies each"
    )
    for col in ("analysis", "test", "unit", "agents", "power", "false positives"):
        table.add_column(
            col,
            justify="right" if col in ("agents", "power", "false positives") else "left",
            overflow="fold",
        )
    for row in rows:
        table.add_row(
            row.analysis,
            row.test,
            row.unit,
            str(row.agents),
            _power_cell(row, alpha),
            f"{row.false_positive_rate:.0%}",
        )
    print_table(out_console, table)
    stuck = [row for row in rows if _unreachable(row, alpha)]
    if stuck:
        floor = min(row.smallest_p for row in stuck)
        out_console.print(
            f"Too few units: with the units of a test marked so, no p below {floor:.2g} is "
            f"reachable whatever the data, so its power is 0 at alpha {alpha:g} by "
            "construction; add units (replicate markets, pools) rather than studies."
        )
    out_console.print(
        "A false-positive rate far above alpha means the test does not hold its level for this "
        "design; with few studies each share is rough (+/- about "
        f"{100 * 1.96 * (0.25 / studies) ** 0.5:.0f} points at 50%)."
    )


def _power_cell(row: Any, alpha: float) -> str:
    """A test's power, or why it is 0 whatever the effect."""
    if not row.effect_declared:
        return "0 %: no effect declared"
    if _unreachable(row, alpha):
        return f"{row.power:.0%} (too few units)"
    return f"{row.power:.0%}"


def _unreachable(row: Any, alpha: float) -> bool:
    """Whether the test's units allow no p below ``alpha``, whatever the effect."""
    return row.smallest_p is not None and row.smallest_p >= alpha


def _write_power_csv(rows: list, out: Path) -> None:
    """``--out``: the power table as power.csv."""
    import pandas as pd

    from biasim.simulator.common.csvfiles import write_csv

    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "power.csv", pd.DataFrame([row.__dict__ for row in rows]))
    out_console.print(f"wrote {out / 'power.csv'}")


@app.command()
def compare(
    runs: Annotated[
        list[Path], typer.Argument(help="Run directories of one study, in the order to show.")
    ],
    out: Annotated[
        Path | None, typer.Option(help="Report directory (default runs/compare-TIME).")
    ] = None,
    label: Annotated[
        list[str] | None,
        typer.Option(help="NAME=RUN_DIR: the name a run's model gets (repeatable)."),
    ] = None,
    force: Annotated[
        bool, typer.Option(help="Compare runs whose studies differ (differences are listed).")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
    accept_edits: Annotated[bool, _ACCEPT_EDITS_OPTION] = False,
    designs: Annotated[
        bool,
        typer.Option(
            "--designs",
            help="Two runs of one process under two designs (pool size, stages, readers): "
            "each group's end-to-end rate side by side, tested unpaired (unit: first pool).",
        ),
    ] = False,
) -> None:
    """Combine runs of the same study on different models into one report: the models side by
    side, cross-model figures, tests of model differences, report.html. With --designs, two
    runs whose process differs, compared unpaired. Exit 1 when an analysis failed (the others
    are written; summary.json names it)."""
    from biasim.simulator.report.outputs import print_report
    from biasim.simulator.tools.compare import compare_runs

    target = out or Path("runs") / f"compare-{time.strftime('%Y%m%d-%H%M%S')}"
    if designs:
        _compare_designs(runs, target, label, accept_edits, as_json)
        return
    try:
        evidence, _, differences = compare_runs(
            runs, target, labels=label, force=force, accept_edits=accept_edits
        )
    except InputError as exc:
        fail_input(exc)
    except Exception as exc:
        # A statistic failing on the combined answers (as `analyze run` says it): which one,
        # without a traceback; the runs compared are only read.
        err_console.print(styled("analysis failed", "red", f": {type(exc).__name__}: {exc}"))
        raise typer.Exit(1) from None
    if as_json:
        sys.stdout.write(json.dumps(evidence.summary, indent=2, default=str) + "\n")
    else:
        print_report(evidence.summary, out_console)
        if evidence.summary.get("edited"):
            err_console.print(styled("warning", "yellow", f": {evidence.summary['edited']}"))
        for difference in differences:
            err_console.print(styled("forced", "yellow", f": {difference}"), highlight=False)
        out_console.print(
            f"models in order: {', '.join(evidence.summary['model_labels'])}", highlight=False
        )
        print_written(target, evidence.summary)
    if say_failed_analyses(evidence.summary, f"the others are written in {target}"):
        raise typer.Exit(1)


def _compare_designs(
    runs: list[Path], target: Path, label: list[str] | None, accept_edits: bool, as_json: bool
) -> None:
    from biasim.simulator.tools.compare_designs import (
        DESIGNS_CSV,
        compare_designs,
        design_lines,
    )

    try:
        comparison = compare_designs(runs, target, labels=label, accept_edits=accept_edits)
    except InputError as exc:
        fail_input(exc)
    if as_json:
        sys.stdout.write((target / "summary.json").read_text(encoding="utf-8"))
        return
    for line in design_lines(comparison):
        out_console.print(line, highlight=False)
    out_console.print(f"table: {target / DESIGNS_CSV}", highlight=False)


# The options of `biasim audit`, one constant each so its signature reads as the option list.
_AUDIT_SOURCE_ARGUMENT = typer.Argument(help="A run directory or a decisions CSV.")
_AUDIT_FORMAT_OPTION = typer.Option(
    "--format",
    help="Audit format (a preset): ll144 (NYC Local Law 144) or eeoc (29 CFR 1607.4(D)).",
)
_AUDIT_OUT_OPTION = typer.Option(
    help="Directory for the tables (default: RUN_DIR/audit/ANALYSIS[-STAGE]; required for a CSV)."
)
_AUDIT_FORCE_OPTION = typer.Option(help="Replace an audit already in the output directory.")
_AUDIT_SEX_COL_OPTION = typer.Option(help="Sex category column.")
_AUDIT_RACE_COL_OPTION = typer.Option(help="Race/ethnicity category column.")
_AUDIT_SELECTED_COL_OPTION = typer.Option(help="CSV: selected flag (1/0, true/false, yes/no).")
_AUDIT_OUTCOME_COL_OPTION = typer.Option(help="CSV: decision column, with --positive.")
_AUDIT_POSITIVE_OPTION = typer.Option(help="CSV: the selected decision.")
_AUDIT_SCORE_COL_OPTION = typer.Option(
    help="A score, from a CSV or a run (scoring rate = share above the median; rank tables)."
)
_AUDIT_DATE_COL_OPTION = typer.Option(help="CSV: date of each decision.")
_AUDIT_BY_OPTION = typer.Option(help="Comma-separated columns audited separately (e.g. job).")
_AUDIT_EXCLUDE_SMALL_OPTION = typer.Option(
    help="Leave categories under 2% of the data out of impact ratios."
)
_AUDIT_ANALYSIS_OPTION = typer.Option(help="Run: the analysis whose decisions are audited.")
_AUDIT_MAX_CELL_CHARS_OPTION = typer.Option(
    min=1, max=CELL_CHARS_CEILING, help="CSV: longest cell read."
)
_AUDIT_MAX_GROUPS_OPTION = typer.Option(
    min=1, help="CSV: most distinct categories (sex x race x --by)."
)
_AUDIT_MAX_ROWS_OPTION = typer.Option(min=1, help="CSV: most rows read.")
_ACCEPT_EDITS_OPTION = typer.Option(
    "--accept-edits",
    help="Read results edited after their run (the run's manifest and report say so).",
)
_AUDIT_STAGE_OPTION = typer.Option(
    help="Run of a pipeline: audit this stage's decisions among its entrants (default: "
    "the last stage, end to end over every applicant)."
)


def _audited(by: str | None, **columns: Any) -> Any:
    """The decisions audited and the columns read, as ``biasim audit`` and ``biasim gate`` take
    them: an ``AuditOptions`` (typed ``Any`` here: the tools, and pandas with them, are imported
    when a command runs), to which the command adds its own options."""
    from biasim.simulator.tools.audit import AuditOptions

    return AuditOptions(**columns, by=[c.strip() for c in (by or "").split(",") if c.strip()])


# The options audit and gate share, declared once (`with_groups` adds them to each).
_AUDITED = OptionGroup(
    "audited",
    _audited,
    (
        GroupOption("sex_col", str | None, _AUDIT_SEX_COL_OPTION, None),
        GroupOption("race_col", str | None, _AUDIT_RACE_COL_OPTION, None),
        GroupOption("selected_col", str | None, _AUDIT_SELECTED_COL_OPTION, None),
        GroupOption("outcome_col", str | None, _AUDIT_OUTCOME_COL_OPTION, None),
        GroupOption("positive", str | None, _AUDIT_POSITIVE_OPTION, None),
        GroupOption("by", str | None, _AUDIT_BY_OPTION, None),
        GroupOption("exclude_small", bool, _AUDIT_EXCLUDE_SMALL_OPTION, False),
        GroupOption("analysis", str | None, _AUDIT_ANALYSIS_OPTION, None),
        GroupOption("stage", str | None, _AUDIT_STAGE_OPTION, None),
        GroupOption("accept_edits", bool, _ACCEPT_EDITS_OPTION, False),
    ),
)


@app.command()
@with_groups(_AUDITED)
def audit(
    source: Annotated[Path, _AUDIT_SOURCE_ARGUMENT],
    audited: Any,
    audit_format: Annotated[str, _AUDIT_FORMAT_OPTION] = "ll144",
    out: Annotated[Path | None, _AUDIT_OUT_OPTION] = None,
    score_col: Annotated[str | None, _AUDIT_SCORE_COL_OPTION] = None,
    date_col: Annotated[str | None, _AUDIT_DATE_COL_OPTION] = None,
    max_cell_chars: Annotated[int, _AUDIT_MAX_CELL_CHARS_OPTION] = DEFAULT_MAX_CELL_CHARS,
    max_groups: Annotated[int, _AUDIT_MAX_GROUPS_OPTION] = DEFAULT_MAX_GROUPS,
    max_rows: Annotated[int, _AUDIT_MAX_ROWS_OPTION] = DEFAULT_MAX_ROWS,
    force: Annotated[bool, _AUDIT_FORCE_OPTION] = False,
) -> None:
    """Bias-audit tables under a rule (NYC Local Law 144, EEOC four-fifths): selection rates
    and impact ratios per sex, race/ethnicity and intersectional category, as CSV, audit.json
    and HTML."""
    target = _checked_audit_target(source, audit_format, out, force)
    options = replace(
        audited,
        score_col=score_col,
        date_col=date_col,
        limits=CsvLimits(max_cell_chars, max_groups, max_rows),
        audit_format=audit_format,
    )
    result, written = _write_audit(source, options, target, force)
    for note in (result["source"].get("partial"), result["source"].get("edited")):
        if note:
            err_console.print(styled("warning", "yellow", f": {note}"))
    _print_audit(result)
    out_console.print(f"wrote {', '.join(str(p) for p in written)}", highlight=False)


def _checked_audit_target(
    source: Path, audit_format: str, out: Path | None, force: bool
) -> Path | None:
    """The directory the audit is written to (None: a run's own, chosen once the analysis
    audited is known), once the format, the source and that directory are usable (else exit 2
    naming each that is not)."""
    from biasim.simulator.common.errors import Problem

    problems = _audit_source_problems(source, audit_format)
    if source.is_file() and out is None:
        problems.append(Problem("--out", None, "", "required when auditing a CSV"))
    if out is not None:
        problems += _audit_target_problems(out, force)
    if problems:
        fail_input(InputError(problems))
    return out


def _audit_source_problems(source: Path, audit_format: str) -> list:
    """Why ``source`` cannot be audited in ``audit_format``: an unknown format, no source."""
    from biasim.registry import AUDIT_FORMATS, UnknownPlugin
    from biasim.simulator.common.errors import Problem

    problems = []
    if audit_format not in AUDIT_FORMATS:
        problems.append(
            Problem("--format", None, "", str(UnknownPlugin(AUDIT_FORMATS, audit_format)))
        )
    if not source.exists():
        problems.append(Problem(str(source), None, "", "no such run directory or file"))
    return problems


def _write_audit(
    source: Path, options: Any, target: Path | None, force: bool
) -> tuple[dict, list[Path]]:
    """The audit of ``source`` and the files written: its tables under ``target`` (for a run by
    default its own directory under RUN_DIR/audit), attached to the run it audits, or with a
    report page of its own when it audits a CSV. An audit already there is replaced only with
    ``force``."""
    from biasim.simulator.common.rundir import MANIFEST, holding_lock
    from biasim.simulator.tools.audit import attach_to_run, audit_dir, bias_audit, write_audit

    is_run = (source / MANIFEST).is_file()
    try:
        # A run's audit is read and attached under its lock: a live run or `--resume` would
        # otherwise change the results under it and drop the section when it ends.
        with holding_lock(source, "RUN_DIR") if is_run else nullcontext():
            result = bias_audit(source, options)
            target = target or audit_dir(source, result, options.stage)
            problems = _audit_target_problems(target, force)
            if problems:
                raise InputError(problems)
            written = write_audit(result, target)
            if is_run:
                written.append(attach_to_run(source, result, target))
    except InputError as exc:
        fail_input(exc)
    if not source.is_dir():
        from biasim.simulator.report.page import write_report
        from biasim.simulator.tools.audit import public

        summary = {
            "study": f"{result['label']} audit of {source.name}",
            "audits": {".": public(result)},
        }
        written.append(write_report(target, summary, {"name": summary["study"]}, []))
    return result, written


def _audit_target_problems(target: Path, force: bool) -> list:
    """Why the audit cannot be written to ``target``: a directory that cannot be written, or
    one that already holds files (an earlier audit), unless ``force``."""
    from biasim.simulator.common.errors import Problem
    from biasim.simulator.common.rundir import check_writable

    reason = check_writable(target, hint="; pass --force to replace it, or name another --out")
    if reason and not (force and target.is_dir()):
        return [Problem("--out", None, "", reason)]
    return []


def _cell(value: Any, spec: str | None, column: str) -> str:
    """An audit table cell as the console prints it: a preset's column by its spec, any p as
    the one p format (``< 0.001``, never ``0.000``), other numbers to three decimals."""
    from biasim.simulator.common.html import fmt, number_spec

    if spec is not None:
        return fmt(value, spec)
    return fmt(value, number_spec(column)) if isinstance(value, float) else str(value)


def _print_audit(result: dict) -> None:
    from biasim.simulator.report.audit_section import (
        assessment_lines,
        headcount,
        merged_note,
        preset_lines,
    )

    rate = result["metric"]
    for key, frame in result["_frames"].items():
        if key == "counts":
            continue
        what = f" ({rate.replace('_', ' ')})" if key in result["tables"] else ""
        title = f"{result['label']} {key.replace('_', '/')}{what}"
        table = Table(title=title)
        for col in frame.columns:
            table.add_column(str(col), justify="right")
        specs = {c[0]: c[2] for c in result["shown_columns"] if c[2] != "ci"}
        for row in frame.itertuples(index=False):
            table.add_row(
                *[
                    _cell(v, specs.get(col), str(col))
                    for col, v in zip(frame.columns, row, strict=True)
                ]
            )
        print_table(out_console, table)
    used = result["columns"]
    out_console.print(
        "columns used: "
        + ", ".join(f"{what} = {col}" for what, col in used.items() if col and what != "by")
        + " (choose others with --selected-col, --sex-col, --race-col)",
        highlight=False,
        soft_wrap=True,
    )
    source = result["source"]
    dates = source.get("date_range")
    out_console.print(
        "".join(text for text, _ in headcount(result))
        + f"; unknown category {result['unknown']}; data: "
        f"{source['kind']}; dates {dates[0] + ' to ' + dates[1] if dates else 'not given'}",
        highlight=False,
    )
    note = merged_note(result)
    for line in [note, *result["notes"], *assessment_lines(result), *preset_lines(result)]:
        if line:
            out_console.print(line, highlight=False, markup=False, soft_wrap=True)


_GATE_SOURCE_ARGUMENT = typer.Argument(help="A finished run directory or a decisions CSV.")
_GATE_RULE_OPTION = typer.Option(
    "--rule",
    help="A rule every audit row must meet, e.g. 'impact_ratio.ci_high >= 0.8' (repeatable; "
    "the run's study `gates:` are added).",
)
_GATE_FORMAT_OPTION = typer.Option("--format", help="Audit format whose rows the rules read.")
_GATE_JUNIT_OPTION = typer.Option("--junit", help="Write the verdicts as JUnit XML here.")
_GATE_MARKDOWN_OPTION = typer.Option("--markdown", help="Write a Markdown summary here.")


@app.command()
@with_groups(_AUDITED)
def gate(
    source: Annotated[Path, _GATE_SOURCE_ARGUMENT],
    audited: Any,
    rule: Annotated[list[str] | None, _GATE_RULE_OPTION] = None,
    audit_format: Annotated[str, _GATE_FORMAT_OPTION] = "eeoc",
    junit: Annotated[Path | None, _GATE_JUNIT_OPTION] = None,
    markdown: Annotated[Path | None, _GATE_MARKDOWN_OPTION] = None,
) -> None:
    """Check rules on a bias audit, for CI: exit 1 when a rule fails, 2 on bad input; JUnit
    XML and a Markdown summary on request. Writes nothing into the run."""
    from biasim.simulator.common.errors import Problem
    from biasim.simulator.tools.gate import (
        gate_rules,
        run_gate,
        verdict_line,
        write_junit,
        write_markdown,
    )

    problems = _audit_source_problems(source, audit_format)
    for flag, path in (("--junit", junit), ("--markdown", markdown)):
        if path is not None and not path.parent.is_dir():
            problems.append(Problem(flag, None, "", f"no directory {path.parent} to write into"))
    if problems:
        fail_input(InputError(problems))
    options = replace(audited, audit_format=audit_format)
    try:
        report = run_gate(source, gate_rules(source, rule or [], options), options)
    except InputError as exc:
        fail_input(exc)
    for result in report.results:
        out_console.print(verdict_line(result), highlight=False, markup=False, soft_wrap=True)
    for path, write in ((junit, write_junit), (markdown, write_markdown)):
        if path is not None:
            write(report, path)
            out_console.print(f"wrote {path}", highlight=False)
    if not report.passed:
        raise typer.Exit(1)
