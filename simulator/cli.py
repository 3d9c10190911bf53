"""The ``biasim`` command line. Exit codes: 0 success, 2 bad input, 1 runtime failure."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .errors import InputError
from .progress import DEFAULT_LOG_EVERY_S, progress_display
from .tables import print_table

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Agent-based simulation for auditing social bias in language models.",
)
# Markup and emoji codes off: study text, file names and error messages are printed as
# written (a key like "[/foo]" would otherwise crash the printer, ":x:" become an emoji).
# Styled words are Text spans, never markup around user text.
out_console = Console(markup=False, emoji=False)
err_console = Console(stderr=True, markup=False, emoji=False)


def _styled(label: str, style: str, rest: str) -> Text:
    """``label`` in ``style`` followed by ``rest`` printed literally."""
    return Text.assemble((label, style), rest)


MASKED_LM_OPTION = typer.Option(
    "--masked-lm",
    help="PRISM: the masked LM (local folder or hub id) of every `prism` analysis.",
)
POSTINGS_OPTION = typer.Option(
    help="PRISM: CSV of job postings (columns posting, posting_text) replacing the study's.",
)

BIOGRAPHIES_OPTION = typer.Option(
    help="Letters from biographies: CSV of seed biographies (first_name, last_name, gender f/m, "
    "info, occupation) replacing the study's.",
)


def _fail_input(exc: InputError) -> None:
    for problem in exc.problems:
        err_console.print(
            _styled("error", "red", f" {str(problem).removeprefix(': ')}"),
            highlight=False,
            soft_wrap=True,
        )
    raise typer.Exit(2)


@app.command()
def run(
    study: Annotated[str | None, typer.Argument(help="Study file or built-in study name.")] = None,
    out: Annotated[
        Path | None, typer.Option(help="Run directory (default runs/NAME-TIME).")
    ] = None,
    backend: Annotated[str | None, typer.Option(help="Backend for every role.")] = None,
    model: Annotated[str | None, typer.Option(help="Model id for every role.")] = None,
    agents: Annotated[int | None, typer.Option(help="Agents per persona value.")] = None,
    max_concurrency: Annotated[
        int | None, typer.Option(help="Calls in flight per backend.")
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Study seed.")] = None,
    resume: Annotated[Path | None, typer.Option(help="Continue the run in this directory.")] = None,
    replay: Annotated[
        Path | None,
        typer.Option(help="Answer from this earlier run's calls.sqlite first (exact replay)."),
    ] = None,
    max_error_rate: Annotated[
        float,
        typer.Option(help="Stop (exit 1, resumable) when more than this share of units fail."),
    ] = 0.5,
    progress_every: Annotated[
        float,
        typer.Option(
            min=0.1,
            envvar="BIASIM_PROGRESS_EVERY",
            help="Seconds between progress lines when output is not a terminal (a log file).",
        ),
    ] = DEFAULT_LOG_EVERY_S,
    masked_lm: Annotated[str | None, MASKED_LM_OPTION] = None,
    postings: Annotated[Path | None, POSTINGS_OPTION] = None,
    biographies: Annotated[Path | None, BIOGRAPHIES_OPTION] = None,
    allow_endpoint: Annotated[
        list[str] | None,
        typer.Option(
            help="HOST or HOST:PORT the study may send requests and keys to, when it names a "
            "server or key variable other than the backend's default (repeatable)."
        ),
    ] = None,
) -> None:
    """Run a study and print its decision-rate report."""
    from .runner import RunOptions, execute, prepare

    options = RunOptions(
        study=study,
        out=out,
        backend=backend,
        model=model,
        agents=agents,
        max_concurrency=max_concurrency,
        seed=seed,
        resume=resume,
        replay=replay,
        max_error_rate=max_error_rate,
        masked_lm=masked_lm,
        postings=postings,
        biographies=biographies,
        allow_endpoints=tuple(allow_endpoint or ()),
    )
    try:
        prepared = prepare(options)
    except InputError as exc:
        _fail_input(exc)
    try:
        with progress_display(err_console, progress_every) as progress:
            # Rich prints above a live bar on the same console.
            outcome = execute(
                prepared,
                progress,
                notify=lambda message: err_console.print(message, markup=False, highlight=False),
            )
    except KeyboardInterrupt:
        # Only before the run's own handler is in place (the lock, the first manifest).
        err_console.print("interrupted before the run started")
        raise typer.Exit(130) from None
    except InputError as exc:
        _fail_input(exc)
    if outcome.status == "interrupted":
        _print_written(outcome.out, outcome.summary)
        answered = outcome.summary.get("units", 0)
        err_console.print(
            f"run interrupted: {answered} of {outcome.summary['units_expected']} units have "
            f"results; every answer is saved in {outcome.out}\n"
            f"continue with: biasim run --resume {outcome.out}",
            markup=False,
        )
        raise typer.Exit(outcome.exit_code)
    from .report import print_report

    if outcome.summary.get("units"):
        print_report(outcome.summary, out_console)
    if "analysis_error" in outcome.summary:
        err_console.print(
            _styled("analysis failed", "red", f": {outcome.summary['analysis_error']}\n")
            + f"every answer is saved in {outcome.out}; redo the analysis with: "
            f"biasim analyze {outcome.out}"
        )
    _print_accounting(outcome.summary)
    _print_errors(outcome.results)
    calls = outcome.summary["calls"]
    out_console.print(
        f"run directory: {outcome.out}  (new calls: {calls['new']}, "
        f"from cache: {calls['from_cache']})",
        soft_wrap=True,
        highlight=False,
    )
    _print_written(outcome.out, outcome.summary)
    if outcome.status == "complete" and "analysis_error" in outcome.summary:
        raise typer.Exit(1)
    if outcome.status != "complete":
        err_console.print(
            _styled(f"run {outcome.status}", "red", f": {outcome.message}\n")
            + "everything answered is saved; continue with: "
            f"biasim run --resume {outcome.out}"
        )
        raise typer.Exit(1)


def _print_written(directory: Path, summary: dict) -> None:
    """Where the tables, figures, report and summary were written, one path a line."""
    from .report import FIGURES_DIR, TABLES_DIR
    from .reportpage import REPORT_HTML
    from .rundir import SUMMARY

    outputs = summary.get("outputs", [])
    tables = sum(str(p).endswith(".csv") for p in outputs)
    figures = sum(str(p).endswith(".png") for p in outputs)
    lines = []
    if tables:
        lines.append(f"tables:  {directory / TABLES_DIR}  ({tables} CSV)")
    if figures:
        lines.append(f"figures: {directory / FIGURES_DIR}  ({figures} PNG)")
    if summary.get("report_error"):
        lines.append(f"report.html not written: {summary['report_error']}")
    elif (directory / REPORT_HTML).is_file():
        lines.append(f"report:  {directory / REPORT_HTML}")
    if (directory / SUMMARY).is_file():
        lines.append(f"summary: {directory / SUMMARY}")
    for line in lines:
        # Never hard-wrapped: paths stay copyable (and a `[` in one is not markup).
        out_console.print(line, soft_wrap=True, highlight=False, markup=False)


def _print_errors(results: Any) -> None:
    """The commonest reason units failed: a refused or silent server is named, not only
    counted."""
    if "status" not in results or "error" not in results:
        return
    reasons = results.loc[results["status"] == "error", "error"].value_counts()
    if len(reasons):
        err_console.print(
            _styled("failed units", "red", f": {int(reasons.sum())}; commonest reason ")
            + f"({int(reasons.iloc[0])}): {reasons.index[0]}",
            highlight=False,
            soft_wrap=True,
        )


def _print_accounting(summary: dict) -> None:
    rows = summary.get("accounting", {}).get("by_role", [])
    for row in rows:
        calls = row["calls"] or 0
        out_console.print(
            _styled(row["role"], "bold", "") + f" {row['backend']}:{row['model']}: {calls} calls "
            f"({row['answered'] or 0} answered, {row['invalid'] or 0} invalid, "
            f"{row['error'] or 0} error"
            + (f", {row['redone']} redone after an error" if row.get("redone") else "")
            + f"), tokens {row['prompt_tokens'] or 0} in / "
            f"{row['completion_tokens'] or 0} out, {(row['latency_s'] or 0) / max(calls, 1):.2f} "
            f"s/call, {row['attempts'] or 0} attempts, {row['reasks'] or 0} re-asks"
            + (
                _styled(f", {row['truncated']} cut at max_tokens", "yellow", "")
                if row.get("truncated")
                else ""
            ),
            highlight=False,
        )


@app.command()
def init(
    name: Annotated[str, typer.Argument(help="Study name (letters, digits and _).")],
    out: Annotated[Path | None, typer.Option(help="File to write (default NAME.yaml).")] = None,
) -> None:
    """Write a commented study skeleton to start from (it validates and runs as written)."""
    from .authoring import write_skeleton

    try:
        path = write_skeleton(name, out or Path(f"{name}.yaml"))
    except InputError as exc:
        _fail_input(exc)
    out_console.print(
        f"wrote {path}\nnext: biasim validate {path} --show-prompts\n"
        f"      biasim run {path} --backend synthetic   (the pipeline on a test double)\n"
        f"      biasim run {path}                       (on the model it names)",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )


@app.command()
def validate(
    study: Annotated[str, typer.Argument(help="Study file or built-in name.")],
    show_prompts: Annotated[
        bool, typer.Option(help="Print every distinct prompt the study sends, rendered.")
    ] = False,
    masked_lm: Annotated[str | None, MASKED_LM_OPTION] = None,
    postings: Annotated[Path | None, POSTINGS_OPTION] = None,
    biographies: Annotated[Path | None, BIOGRAPHIES_OPTION] = None,
) -> None:
    """Check a study file and render every template once."""
    from .design import design_size
    from .runner import RunOptions, load_options_study

    try:
        loaded = load_options_study(
            RunOptions(study=study, masked_lm=masked_lm, postings=postings, biographies=biographies)
        )
    except InputError as exc:
        _fail_input(exc)
    if show_prompts:
        _print_prompts(loaded)
    config = loaded.config
    if config.populations:
        from .design import population_sizes
        from .model import expected_units

        sizes = population_sizes(config)
        out_console.print(
            f"{loaded.path}: ok - {len(config.stages)} stage(s), "
            + ", ".join(f"{n} {name}" for name, n in sizes.items())
            + f", {expected_units(config)} unit(s) if every answer is valid (readings depend "
            "on who advances)" + _limit_note(),
            highlight=False,
        )
        _print_analysis_notes(config, Path(loaded.path).parent)
        _print_endpoint_notes(loaded)
        return
    agents = design_size(config)
    conditional = sum(stage.when is not None for stage in config.stages)
    # A `when` may read earlier answers, so only the bound is knowable before a run.
    bound = f"up to {agents * len(config.stages)}" if conditional else agents * len(config.stages)
    note = f" ({conditional} stage(s) run only `when` their condition holds)" if conditional else ""
    # Never hard-wrapped: the path must stay copyable, and scripts read the counts.
    out_console.print(
        f"{loaded.path}: ok - {len(config.stages)} stage(s), {agents} agent(s), {bound} unit(s)"
        + note
        + _limit_note(),
        soft_wrap=True,
        highlight=False,
    )
    _print_casting(config)
    _print_analysis_notes(config, Path(loaded.path).parent)
    _print_endpoint_notes(loaded)


def _print_endpoint_notes(loaded: Any) -> None:
    """What `biasim run` will ask the user to confirm (a valid study, but not yet runnable)."""
    from .llm.allowlist import endpoint_problems, user_allowed_hosts

    try:
        allowed = user_allowed_hosts()
    except InputError as exc:
        _fail_input(exc)
    for problem in endpoint_problems(loaded.config, loaded.source_map, allowed):
        out_console.print(f"note: {problem}", highlight=False, soft_wrap=True)


def _limit_note() -> str:
    from .design import MAX_AGENTS_ENV, max_agents

    return f"; design limit {max_agents():,} agents ({MAX_AGENTS_ENV} to change)"


def _print_prompts(study: Any) -> None:
    """Each distinct rendered text of each template, headed by where it is and who sends it."""
    from .authoring import distinct_prompts

    prompts = distinct_prompts(study)
    for prompt in prompts:
        others = len(prompt.agents) - 1
        who = prompt.agents[0] + (f"; {others} more agent(s) send it too" if others else "")
        # Plain lines, never cut: the header says exactly who sends the text below it.
        out_console.print(
            f"== {prompt.field} ({who})\n{prompt.text}\n",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    out_console.print(
        f"{len(prompts)} distinct prompt text(s), rendered for one persona of each axis value "
        "under each factor level (varied one at a time)",
        highlight=False,
    )


def _print_casting(config: Any) -> None:
    """Which model answers each stage (and formats it) for each model label, when the study
    compares models: the roles feeding the compared ones run per model unless shared."""
    from .casting import castings
    from .design import model_labels

    labels = model_labels(config)
    if len(labels) < 2:
        return
    out_console.print(f"models: {', '.join(labels)}", highlight=False, soft_wrap=True)
    lines: dict[tuple[str, str, bool], list[str]] = {}
    for c in castings(config):
        lines.setdefault((c.stage, c.role, c.formats), []).append(
            f"{c.label} -> {c.model}" if c.label else f"{c.model} for every model"
        )
    for (stage, role, formats), who in lines.items():
        acts = "formatted by" if formats else "by"
        out_console.print(
            f"  {stage} {acts} `{role}`: {', '.join(who)}", highlight=False, soft_wrap=True
        )


def _print_analysis_notes(config: Any, data_dir: Path) -> None:
    """What each analysis says about its inputs (e.g. where its term sets come from)."""
    from .config import analysis_name
    from .kinds import get_kind

    for i, spec in enumerate(config.analyses):
        for line in get_kind(spec.kind).notes(spec, data_dir):
            out_console.print(f"{analysis_name(spec, i)}: {line}", highlight=False)


@app.command()
def schema() -> None:
    """Print the JSON Schema of study files."""
    from .config import study_json_schema

    sys.stdout.write(json.dumps(study_json_schema(), indent=2) + "\n")


@app.command(name="list")
def list_studies() -> None:
    """List the built-in studies."""
    from biasim.scenarios import builtin_studies

    table = Table(show_header=True)
    table.add_column("study")
    table.add_column("description")
    for name, description in builtin_studies().items():
        table.add_row(name, description)
    print_table(out_console, table)


@app.command()
def kinds() -> None:
    """List the analysis kinds a study's `analyses:` may use (built-in and plug-ins)."""
    from .kinds import get_kind, kind_names

    table = Table(show_header=True)
    for col in ("kind", "what", "fields"):
        table.add_column(col)
    for name in kind_names():
        kind = get_kind(name)
        fields = ", ".join(f for f in kind.spec.model_fields if f not in ("kind", "name"))
        table.add_row(name, kind.title, fields)
    print_table(out_console, table)


@app.command()
def analyze(
    run_dir: Annotated[
        Path | None, typer.Argument(help="A run directory (tables and figures are rewritten).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
    decisions: Annotated[
        Path | None,
        typer.Option(help="A CSV of decisions made outside biasim (one row per decision)."),
    ] = None,
    group_cols: Annotated[
        str | None, typer.Option(help="With --decisions: comma-separated group columns.")
    ] = None,
    outcome_col: Annotated[
        str | None, typer.Option(help="With --decisions: the decision column.")
    ] = None,
    positive: Annotated[
        str | None,
        typer.Option(
            help="With --decisions: the favourable value (default: 1 or true for a 0/1 or "
            "true/false column, else accept)."
        ),
    ] = None,
    negative: Annotated[
        str | None,
        typer.Option(
            help="With --decisions: comma-separated values meaning not selected (default: the "
            "one value besides --positive and --invalid; any other value is an error)."
        ),
    ] = None,
    invalid: Annotated[
        str | None,
        typer.Option(
            help="With --decisions: comma-separated values of unusable answers, excluded and "
            "counted (default: invalid)."
        ),
    ] = None,
    min_group_share: Annotated[
        float,
        typer.Option(
            min=0.0,
            max=1.0,
            help="With --decisions: leave groups under this share of the decided rows (e.g. "
            "0.02) out of every test; they are reported as excluded.",
        ),
    ] = 0.0,
    stratum_col: Annotated[
        str | None, typer.Option(help="With --decisions: test within strata (e.g. job), combine.")
    ] = None,
    unit_col: Annotated[
        str | None,
        typer.Option(help="With --decisions: exchangeable unit for permutations (e.g. name)."),
    ] = None,
    texts: Annotated[
        Path | None,
        typer.Option(help="A CSV of texts written elsewhere (letters; with --masked-lm, PRISM)."),
    ] = None,
    text_col: Annotated[str | None, typer.Option(help="With --texts: the text column.")] = None,
    group_col: Annotated[str | None, typer.Option(help="With --texts: the group column.")] = None,
    compare: Annotated[
        str | None,
        typer.Option(help="With --texts: FIRST,SECOND groups (default: the column's two values)."),
    ] = None,
    pair_col: Annotated[
        str | None,
        typer.Option(help="With --texts: column of counterfactual pairs (adds paired tests)."),
    ] = None,
    lexicon: Annotated[
        Path | None,
        typer.Option(help="With --texts: YAML/JSON category -> stems (default: agency stems)."),
    ] = None,
    style: Annotated[
        Path | None,
        typer.Option(help="With --texts: YAML dimension -> {scorer, options} (default: offline)."),
    ] = None,
    success_filter: Annotated[
        bool, typer.Option(help="With --texts: drop failed generations (paper, Appendix B).")
    ] = False,
    authors_tokens: Annotated[
        bool,
        typer.Option(
            help="With --texts: count lexicon tokens as the authors' code (<return> kept)."
        ),
    ] = False,
    premise_col: Annotated[
        str | None,
        typer.Option(help="With --texts: column of the biographies (hallucination analysis)."),
    ] = None,
    nli: Annotated[
        str | None,
        typer.Option(help="With --premise-col: NLI cross-encoder, hub id or local folder."),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(help="With --decisions or --texts: directory for the tables (and figures)."),
    ] = None,
    permutations: Annotated[
        int, typer.Option(min=1, max=10_000_000, help="Monte Carlo permutations.")
    ] = 5000,
    seed: Annotated[int, typer.Option(min=0, max=2**63 - 1, help="Seed of every random draw.")] = 0,
    paired_column: Annotated[
        str | None,
        typer.Option(
            help="With --texts: the column of the text each one answers (e.g. the posting): "
            "adds the posting -> application tables and figures."
        ),
    ] = None,
    masked_lm: Annotated[
        str | None,
        typer.Option("--masked-lm", help="With --texts: the masked LM (local folder or hub id)."),
    ] = None,
    word_lists: Annotated[
        Path | None,
        typer.Option(help="With --texts: word lists JSON (default: the paper's example words)."),
    ] = None,
    alpha: Annotated[
        float, typer.Option(help="With --texts: top % of pooled probabilities kept.")
    ] = 23.0,
) -> None:
    """Recompute a run's analyses from its results (no model call), analyse external
    decisions with --decisions FILE.csv --group-cols a,b --outcome-col c, texts with
    --texts FILE.csv --text-col t --group-col g (letters' lexicon, words and style), or PRISM
    scores of texts with --texts FILE.csv --masked-lm PATH [--paired-column posting]."""
    if texts is not None and masked_lm is not None:
        from .prism_texts import TextsRequest

        _analyze_texts(
            TextsRequest(
                texts, text_col or "text", paired_column, masked_lm, word_lists, alpha, out
            ),
            as_json,
        )
        return
    if texts is not None:
        from .kinds.letters import LettersKind
        from .texts import TextsOptions, analyze_texts

        options = TextsOptions(
            text_col,
            group_col,
            compare,
            pair_col,
            lexicon,
            style,
            success_filter,
            authors_tokens,
            premise_col,
            nli,
            permutations,
            seed,
        )
        try:
            summary = analyze_texts(texts, options, out)
        except InputError as exc:
            _fail_input(exc)
        if as_json:
            sys.stdout.write(json.dumps(summary, indent=2, default=str) + "\n")
        else:
            LettersKind().print(summary, out_console)
            if out is not None:
                out_console.print(f"wrote tables and a figure under {out}")
        return
    if decisions is not None:
        _analyze_external(
            decisions,
            ExternalOptions(
                group_cols=group_cols,
                outcome_col=outcome_col,
                positive=positive,
                negative=negative,
                invalid=invalid,
                min_group_share=min_group_share,
                stratum_col=stratum_col,
                unit_col=unit_col,
            ),
            out,
            permutations,
            seed,
            as_json,
        )
        return
    if run_dir is None:
        _fail_input(InputError("give a RUN_DIR, --decisions FILE.csv or --texts FILE.csv"))
    from .report import print_report
    from .runner import reanalyze

    try:
        summary = reanalyze(run_dir)
    except InputError as exc:
        _fail_input(exc)
    except Exception as exc:
        # A statistic that fails on these answers: say which, without a traceback.
        err_console.print(_styled("analysis failed", "red", f": {type(exc).__name__}: {exc}"))
        raise typer.Exit(1) from None
    if as_json:
        sys.stdout.write(json.dumps(summary, indent=2, default=str) + "\n")
    else:
        print_report(summary, out_console)
        _print_written(run_dir, summary)


@app.command()
def power(
    study: Annotated[str, typer.Argument(help="Study file or built-in name.")],
    agents: Annotated[
        str, typer.Option(help="Agents per persona value to try, comma-separated.")
    ] = "2,5,10",
    studies: Annotated[int, typer.Option(help="Simulated studies per arm and size.")] = 20,
    effect: Annotated[
        float, typer.Option(help="Scale of the declared synthetic effect (1 = as declared).")
    ] = 1.0,
    alpha: Annotated[float, typer.Option(help="Significance level.")] = 0.05,
    seed: Annotated[
        int, typer.Option(min=0, max=2**63 - 1, help="First seed of the simulated studies.")
    ] = 0,
    out: Annotated[
        Path | None, typer.Option(help="Write power.csv here (a new or empty directory).")
    ] = None,
) -> None:
    """Power and false-positive rate of the study's tests on its synthetic truth."""
    from .errors import Problem
    from .power import power as simulate

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
        from .rundir import check_writable

        reason = check_writable(out, hint="; name a new directory with --out")
        if reason:
            problems.append(Problem("--out", None, "", reason))
    if problems:
        _fail_input(InputError(problems))
    err_console.print(
        f"simulating {len(sizes)} size(s) x 2 arms x {studies} studies on the synthetic "
        "backend (a test double with the study's declared truth, not a model)"
    )
    start = time.monotonic()
    try:
        rows = simulate(
            study,
            sizes,
            studies=studies,
            effect=effect,
            alpha=alpha,
            seed=seed,
            progress=lambda line: err_console.print(
                f"[{time.monotonic() - start:6.0f} s] {line}", highlight=False
            ),
        )
    except InputError as exc:
        _fail_input(exc)
    except ValueError as exc:
        _fail_input(InputError([Problem(study, None, "", str(exc))]))
    table = Table(
        title=f"Power (effect x{effect:g}) and false-positive rate (no effect) at alpha {alpha:g}, "
        f"{studies} studies each"
    )
    for col in ("analysis", "test", "agents", "power", "false positives"):
        table.add_column(
            col,
            justify="right" if col in ("agents", "power", "false positives") else "left",
            overflow="fold",
        )
    for row in rows:
        table.add_row(
            row.analysis,
            row.test,
            str(row.agents),
            f"{row.power:.0%}",
            f"{row.false_positive_rate:.0%}",
        )
    print_table(out_console, table)
    out_console.print(
        "A false-positive rate far above alpha means the test does not hold its level for this "
        "design; with few studies each share is rough (+/- about "
        f"{100 * 1.96 * (0.25 / studies) ** 0.5:.0f} points at 50%)."
    )
    if out is not None:
        import pandas as pd

        from .csvfiles import write_csv

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
) -> None:
    """Combine runs of the same study on different models into one report: the models side by
    side, cross-model figures, tests of model differences, report.html."""
    from .compare import compare_runs
    from .report import print_report

    target = out or Path("runs") / f"compare-{time.strftime('%Y%m%d-%H%M%S')}"
    try:
        evidence, _, differences = compare_runs(runs, target, labels=label, force=force)
    except InputError as exc:
        _fail_input(exc)
    if as_json:
        sys.stdout.write(json.dumps(evidence.summary, indent=2, default=str) + "\n")
        return
    print_report(evidence.summary, out_console)
    for difference in differences:
        err_console.print(_styled("forced", "yellow", f": {difference}"), highlight=False)
    out_console.print(
        f"models in order: {', '.join(evidence.summary['model_labels'])}", highlight=False
    )
    _print_written(target, evidence.summary)


@app.command()
def audit(
    source: Annotated[Path, typer.Argument(help="A run directory or a decisions CSV.")],
    audit_format: Annotated[str, typer.Option("--format", help="Audit format: ll144.")] = "ll144",
    out: Annotated[
        Path | None,
        typer.Option(help="Directory for the tables (default: RUN_DIR/audit; required for a CSV)."),
    ] = None,
    sex_col: Annotated[str | None, typer.Option(help="Sex category column.")] = None,
    race_col: Annotated[str | None, typer.Option(help="Race/ethnicity category column.")] = None,
    selected_col: Annotated[
        str | None, typer.Option(help="CSV: selected flag (1/0, true/false, yes/no).")
    ] = None,
    outcome_col: Annotated[
        str | None, typer.Option(help="CSV: decision column, with --positive.")
    ] = None,
    positive: Annotated[str | None, typer.Option(help="CSV: the selected decision.")] = None,
    score_col: Annotated[
        str | None, typer.Option(help="CSV: a score (scoring rate = share above the median).")
    ] = None,
    date_col: Annotated[str | None, typer.Option(help="CSV: date of each decision.")] = None,
    by: Annotated[
        str | None, typer.Option(help="Comma-separated columns audited separately (e.g. job).")
    ] = None,
    exclude_small: Annotated[
        bool, typer.Option(help="Leave categories under 2% of the data out of impact ratios.")
    ] = False,
    analysis: Annotated[
        str | None, typer.Option(help="Run: the analysis whose decisions are audited.")
    ] = None,
) -> None:
    """Bias-audit tables (NYC Local Law 144): selection rates and impact ratios per sex,
    race/ethnicity and intersectional category, as CSV, audit.json and HTML."""
    from .audit import FORMATS, AuditOptions, attach_to_run, ll144_audit, write_audit
    from .errors import Problem
    from .rundir import check_writable

    problems = []
    if audit_format not in FORMATS:
        problems.append(
            Problem("--format", None, "", f"`{audit_format}`; known: {', '.join(FORMATS)}")
        )
    if not source.exists():
        problems.append(Problem(str(source), None, "", "no such run directory or file"))
    if source.is_file() and out is None:
        problems.append(Problem("--out", None, "", "required when auditing a CSV"))
    target = out or source / "audit"
    if out is not None or source.is_dir():
        reason = check_writable(target, hint="; name a new directory with --out")
        if reason and not (out is None and target.is_dir()):
            problems.append(Problem("--out", None, "", reason))
    if problems:
        _fail_input(InputError(problems))
    options = AuditOptions(
        sex_col=sex_col,
        race_col=race_col,
        selected_col=selected_col,
        outcome_col=outcome_col,
        positive=positive,
        score_col=score_col,
        date_col=date_col,
        by=[c.strip() for c in (by or "").split(",") if c.strip()],
        exclude_small=exclude_small,
        analysis=analysis,
    )
    try:
        result = ll144_audit(source, options)
    except InputError as exc:
        _fail_input(exc)
    written = write_audit(result, target)
    if source.is_dir():
        written.append(attach_to_run(source, result))
    else:
        from .audit import public
        from .reportpage import write_report

        summary = {"study": f"LL144 audit of {source.name}", "audit": public(result)}
        written.append(write_report(target, summary, {"name": summary["study"]}, []))
    _print_audit(result)
    out_console.print(f"wrote {', '.join(str(p) for p in written)}", highlight=False)


def _print_audit(result: dict) -> None:
    rate = result["metric"]
    for key, frame in result["_frames"].items():
        if key == "counts":
            continue
        table = Table(title=f"LL144 {key.replace('_', '/')} ({rate.replace('_', ' ')})")
        for col in frame.columns:
            table.add_column(str(col), justify="right")
        for row in frame.itertuples(index=False):
            table.add_row(*[f"{v:.3f}" if isinstance(v, float) else str(v) for v in row])
        print_table(out_console, table)
    source = result["source"]
    dates = source.get("date_range")
    out_console.print(
        f"individuals assessed {result['n_assessed']}, without outcome "
        f"{result['n_missing_outcome']}, unknown category {result['unknown']}; data: "
        f"{source['kind']}; dates {dates[0] + ' to ' + dates[1] if dates else 'not given'}",
        highlight=False,
    )


@dataclass(frozen=True)
class ExternalOptions:
    """What ``analyze --decisions`` reads from the CSV, as given on the command line."""

    group_cols: str | None
    outcome_col: str | None
    positive: str | None
    negative: str | None
    invalid: str | None
    min_group_share: float
    stratum_col: str | None
    unit_col: str | None


def _analyze_external(
    path: Path,
    options: ExternalOptions,
    out: Path | None,
    permutations: int,
    seed: int,
    as_json: bool,
) -> None:
    import pandas as pd

    from biasim.analysis.disparity import INVALID, disparity_report, impact_ratios_by_stratum
    from biasim.analysis.external import DecisionsError, check_decisions

    from .errors import Problem

    outcome_col, stratum_col, unit_col = options.outcome_col, options.stratum_col, options.unit_col
    missing = [
        f
        for f, v in (("--group-cols", options.group_cols), ("--outcome-col", outcome_col))
        if not v
    ]
    if missing:
        _fail_input(
            InputError([Problem(m, None, "", "required with --decisions") for m in missing])
        )
    assert outcome_col is not None
    from .csvfiles import read_csv

    try:
        df = read_csv(path, "decisions CSV")
    except InputError as exc:
        _fail_input(exc)
    groups = _comma_list(options.group_cols)
    wanted = [*groups, outcome_col, *(c for c in (stratum_col, unit_col) if c)]
    absent = [c for c in wanted if c not in df.columns]
    if absent:
        _fail_input(
            InputError(
                [
                    Problem(str(path), 1, c, f"no such column; columns: {', '.join(df.columns)}")
                    for c in absent
                ]
            )
        )
    positive, how = _default_positive(df[outcome_col], options.positive)
    if positive not in set(df[outcome_col].dropna()):
        values = sorted(set(df[outcome_col].dropna()))[:10]
        _fail_input(
            InputError(
                [
                    Problem(
                        str(path),
                        None,
                        outcome_col,
                        f"no row has `{positive}`; values: {values}; use --positive",
                    )
                ]
            )
        )
    invalid = _comma_list(options.invalid) if options.invalid is not None else list(INVALID)
    try:
        checked = check_decisions(
            df,
            groups,
            outcome_col,
            positive=positive,
            negative=_comma_list(options.negative) if options.negative is not None else None,
            invalid=invalid,
            unit_col=unit_col,
            stratum_col=stratum_col,
            min_group_share=options.min_group_share,
        )
    except DecisionsError as exc:
        where = str(path) if exc.column else f"--{(exc.argument or '').replace('_', '-')}"
        _fail_input(InputError([Problem(where, None, exc.column or "", str(exc))]))
    if not checked.data[outcome_col].eq(positive).any():
        why = ", ".join(f"{r.reason} {r.n}" for r in checked.exclusions.itertuples())
        _fail_input(
            InputError(
                [
                    Problem(
                        str(path), None, outcome_col, f"every `{positive}` row is excluded ({why})"
                    )
                ]
            )
        )
    if out is not None:
        from .rundir import check_writable

        reason = check_writable(out, hint="; name a new directory with --out")
        if reason:
            _fail_input(InputError([Problem("--out", None, "", reason)]))
    data = checked.data
    report = disparity_report(
        data,
        groups,
        outcome_col,
        positive=positive,
        unit_col=unit_col,
        stratum_col=stratum_col,
        n_permutations=permutations,
        seed=seed,
        invalid=invalid,
    )
    tables = {k: v for k, v in report.items() if isinstance(v, pd.DataFrame)}
    scalars = {k: v for k, v in report.items() if not isinstance(v, pd.DataFrame)}
    scalars.update(
        positive=positive,
        positive_from=how,
        negative=list(checked.negative),
        negative_from="--negative" if options.negative is not None else "the only other value",
        invalid=invalid,
        n_rows=checked.n_total,
        # Every row in no test, whatever the reason (the disparity report counts only the
        # answers excluded inside the groups it sees).
        n_excluded=checked.n_total - checked.n_used,
    )
    if stratum_col:
        tables["rates_by_stratum"], tables["impact_ratios_by_stratum"] = impact_ratios_by_stratum(
            data, stratum_col, groups, outcome_col, positive, seed=seed, invalid=invalid
        )
    tables["exclusions"] = checked.exclusions
    if options.min_group_share > 0:
        tables["small_groups"] = checked.small_groups
    if out is not None:
        from .csvfiles import write_csv

        out.mkdir(parents=True, exist_ok=True)
        for name, table in tables.items():
            write_csv(out / f"{name}.csv", table)
    if as_json:
        payload = {**scalars, **{k: v.to_dict("records") for k, v in tables.items()}}
        sys.stdout.write(json.dumps(payload, indent=2, default=str) + "\n")
        return
    for name, table in tables.items():
        rich_table = Table(title=name)
        for col in table.columns:
            rich_table.add_column(str(col), justify="right")
        for row in table.itertuples(index=False):
            rich_table.add_row(*[f"{v:.4g}" if isinstance(v, float) else str(v) for v in row])
        print_table(out_console, rich_table)
    nan = float("nan")
    negatives = ", ".join(checked.negative) or "none"
    reasons = ", ".join(f"{r.reason} {r.n}" for r in checked.exclusions.itertuples())
    out_console.print(
        f"positive outcome: {positive} ({how}); negative: {negatives} "
        f"({scalars['negative_from']}); rows {checked.n_total}: used {checked.n_used}, "
        f"excluded {scalars['n_excluded']}"
        + (f" ({reasons})" if reasons else "")
        + f"; DPD {scalars.get('dpd', nan):.4f} (p = {scalars.get('dpd_p_value', nan):.4f}); "
        f"chance an unbiased decision-maker fails four-fifths for some group: "
        f"{scalars.get('p_any_flag_by_chance', float('nan')):.1%}",
        highlight=False,
    )
    for row in checked.small_groups.to_dict("records"):
        label = ", ".join(str(row[g]) for g in groups)
        out_console.print(
            f"left out, under {options.min_group_share:.1%} of the decided rows: {label} "
            f"({row['n']} decided, {row['share']:.1%}; {row['n_rows']} rows)",
            highlight=False,
        )


def _analyze_texts(request: Any, as_json: bool) -> None:
    """``analyze --texts``: check, score, print and (with --out) write tables and figures."""
    from biasim.analysis.figures import save_figure

    from .prism_texts import analyze_texts, read_texts
    from .rundir import write_atomic

    try:
        frame = read_texts(request)
    except InputError as exc:
        _fail_input(exc)
    result = analyze_texts(request, frame)
    written: list[Path] = []
    if request.out is not None:
        request.out.mkdir(parents=True, exist_ok=True)
        for name, table in result.tables.items():
            path = request.out / f"{name}.csv"
            write_atomic(path, lambda tmp, t=table: t.to_csv(tmp, index=False))
            written.append(path)
        for name, figure in result.figures.items():
            written.append(save_figure(figure, request.out / f"{name}.png"))
    if as_json:
        payload = {
            **result.summary,
            **{k: v.to_dict("records") for k, v in result.tables.items() if k.endswith("_summary")},
        }
        sys.stdout.write(json.dumps(payload, indent=2, default=str) + "\n")
        return
    if request.paired_column:
        from .kinds import get_kind

        get_kind("prism").print(result.summary, out_console)
    else:
        for name, table in result.tables.items():
            if name.endswith("_scores"):
                continue  # one row per text: in the CSV, not on the screen
            rich_table = Table(title=name)
            for col in table.columns:
                rich_table.add_column(str(col), justify="right")
            for row in table.itertuples(index=False):
                rich_table.add_row(*[f"{v:.4g}" if isinstance(v, float) else str(v) for v in row])
            out_console.print(rich_table)
        dropped = "; ".join(f"{k}: {', '.join(v)}" for k, v in result.summary["dropped"].items())
        out_console.print(
            f"{result.summary['rows']} texts, {result.summary['texts_scored_now']} scored now "
            "(the rest from the cache)"
            + (f"; words not in the model's vocabulary, dropped: {dropped}" if dropped else ""),
            highlight=False,
        )
    if written:
        out_console.print(f"wrote {len(written)} files under {request.out}", highlight=False)


def _comma_list(text: str | None) -> list[str]:
    return [v.strip() for v in (text or "").split(",") if v.strip()]


def _default_positive(values: Any, given: str | None) -> tuple[str, str]:
    """The favourable outcome and how it was chosen: as given, or 1 / true for a 0/1 or
    true/false column, else ``accept``."""
    if given is not None:
        return given, "--positive"
    seen = {str(v) for v in values.dropna()}
    if seen and seen <= {"0", "1"}:
        return "1", "default for a 0/1 column; --positive to change"
    lowered = {v.lower() for v in seen}
    if seen and lowered <= {"true", "false"}:
        true = next((v for v in seen if v.lower() == "true"), "true")
        return true, "default for a true/false column; --positive to change"
    return "accept", "default; --positive to change"


def main() -> None:
    """Console-script entry point."""
    app()
