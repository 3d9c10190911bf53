"""``biasim analyze``: a run directory again (``run``), or decisions, letters, PRISM texts or
LLM-IAT answers collected elsewhere (``decisions``, ``texts``, ``prism``, ``iat``), one
subcommand each with only its own options. The old flag forms dispatch here through
:mod:`biasim.simulator.cli.analyze_legacy`."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from biasim.simulator.cli.analyze_legacy import AnalyzeGroup
from biasim.simulator.cli.common import (
    app,
    comma_list,
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
from biasim.simulator.common.errors import InputError, Problem
from biasim.simulator.common.html import format_p
from biasim.simulator.common.tables import print_table

analyze_app = typer.Typer(
    cls=AnalyzeGroup,
    no_args_is_help=True,
    help="Recompute a run's analyses from its results (no model call), or analyse decisions, "
    "letters, PRISM texts or LLM-IAT answers collected elsewhere.",
)
app.add_typer(analyze_app, name="analyze")

# The options of the `biasim analyze` subcommands, one constant each so every signature reads
# as its option list; an option two subcommands share is one constant.
_RUN_DIR_ARGUMENT = typer.Argument(
    metavar="RUN_DIR", help="A run directory (tables and figures are rewritten)."
)
_DECISIONS_ARGUMENT = typer.Argument(
    metavar="FILE.csv", help="A CSV of decisions made outside biasim (one row per decision)."
)
_TEXTS_ARGUMENT = typer.Argument(metavar="FILE.csv", help="A CSV of letters written elsewhere.")
_PRISM_TEXTS_ARGUMENT = typer.Argument(
    metavar="FILE.csv", help="A CSV of texts to score with PRISM."
)
_IAT_ARGUMENT = typer.Argument(
    metavar="PATH",
    help="LLM-IAT answers (CSVs or folders of CSVs) scored with --iat-stimuli; a CSV with "
    "iat_bias and decision_bias gives the chained logit (Bai et al.).",
)
_JSON_OPTION = typer.Option("--json", help="Print JSON instead of tables.")
_ACCEPT_EDITS_OPTION = typer.Option(
    "--accept-edits",
    help="Analyse results edited after the run (the manifest and report say so).",
)
_GROUP_COLS_OPTION = typer.Option(help="Comma-separated group columns (required).")
_OUTCOME_COL_OPTION = typer.Option(help="The decision column (required).")
_POSITIVE_OPTION = typer.Option(
    help="The favourable value (default: 1 or true for a 0/1 or true/false column, else accept)."
)
_NEGATIVE_OPTION = typer.Option(
    help="Comma-separated values meaning not selected (default: the one value besides "
    "--positive and --invalid; any other value is an error)."
)
_INVALID_OPTION = typer.Option(
    help="Comma-separated values of unusable answers, excluded and counted (default: invalid)."
)
_MIN_GROUP_SHARE_OPTION = typer.Option(
    min=0.0,
    max=1.0,
    help="Leave groups under this share of the decided rows (e.g. 0.02) out of every test; "
    "they are reported as excluded.",
)
_STRATUM_COL_OPTION = typer.Option(help="Test within strata (e.g. job), combine.")
_UNIT_COL_OPTION = typer.Option(
    help="Exchangeable unit for permutations (e.g. the name, or who wrote each letter)."
)
_TEXT_COL_OPTION = typer.Option(help="The text column.")
_GROUP_COL_OPTION = typer.Option(help="The group column.")
_COMPARE_OPTION = typer.Option(help="FIRST,SECOND groups (default: the column's two values).")
_PAIR_COL_OPTION = typer.Option(help="Column of counterfactual pairs (adds paired tests).")
_COUNTERFACTUAL_OPTION = typer.Option(
    help="With --pair-col: counterfactual text metrics (sentiment parity, similarity, score "
    "distributions; unit: the pair) and per-response scores."
)
_LEXICON_OPTION = typer.Option(help="YAML/JSON category -> stems (default: agency stems).")
_STYLE_OPTION = typer.Option(help="YAML dimension -> {scorer, options} (default: offline).")
_SUCCESS_FILTER_OPTION = typer.Option(
    help="Drop failed generations (Appendix B): authors (their code: ' recommend ' with "
    "spaces; CBG), recommend (any 'recommend') or none (CLG, the paper's 120 letters in full)."
)
_AUTHORS_TOKENS_OPTION = typer.Option(
    help="Count lexicon tokens as the authors' code (<return> kept)."
)
_PREMISE_COL_OPTION = typer.Option(help="Column of the biographies (hallucination analysis).")
_NLI_OPTION = typer.Option(help="With --premise-col: NLI cross-encoder, hub id or local folder.")
_WEAT_WORDS_OPTION = typer.Option(
    help="YAML `test: {group: [words]}` for WEAT, keyed by the compared groups (default: "
    "Caliskan's sets keyed male/female)."
)
_OUT_OPTION = typer.Option(help="Directory for the tables (and figures).")
_PERMUTATIONS_OPTION = typer.Option(min=1, max=10_000_000, help="Monte Carlo permutations.")
_SEED_OPTION = typer.Option(min=0, max=2**63 - 1, help="Seed of every random draw.")
_PAIRED_COLUMN_OPTION = typer.Option(
    help="The column of the text each one answers (e.g. the posting): adds the posting -> "
    "application tables and figures."
)
_MASKED_LM_OPTION = typer.Option(
    "--masked-lm", help="The masked LM (local folder or hub id; required)."
)
_WORD_LISTS_OPTION = typer.Option(help="Word lists JSON (default: the paper's example words).")
_ALPHA_OPTION = typer.Option(help="Top % of pooled probabilities kept.")
_HUMAN_RATINGS_OPTION = typer.Option(
    help="CSV of texts people rated (text, rating; higher = more masculine): Spearman rho of "
    "each dimension with the ratings (Figure 4a)."
)
_IAT_STIMULI_OPTION = typer.Option(help="Bai's stimuli CSV (dataset, A, B, C[, D]).")
_IAT_TEXT_COL_OPTION = typer.Option(help="The answer column.")
_MAX_CELL_CHARS_OPTION = typer.Option(
    min=1, max=CELL_CHARS_CEILING, help="Longest cell read (characters)."
)
_MAX_GROUPS_OPTION = typer.Option(min=1, help="Most distinct groups.")
_MAX_ROWS_OPTION = typer.Option(min=1, help="Most rows read.")


@dataclass(frozen=True)
class Output:
    """Where a subcommand writes its tables (``--out``) and whether it prints JSON."""

    out: Path | None
    as_json: bool


@dataclass(frozen=True)
class Draws:
    """The Monte Carlo permutations of a subcommand's tests and their seed."""

    permutations: int
    seed: int


# The options several subcommands share, declared once (`with_groups` adds them to each).
_OUTPUT = OptionGroup(
    "output",
    Output,
    (
        GroupOption("out", Path | None, _OUT_OPTION, None),
        GroupOption("as_json", bool, _JSON_OPTION, False),
    ),
)
_DRAWS = OptionGroup(
    "draws",
    Draws,
    (
        GroupOption("permutations", int, _PERMUTATIONS_OPTION, 5000),
        GroupOption("seed", int, _SEED_OPTION, 0),
    ),
)
_LIMITS = OptionGroup(
    "limits",
    CsvLimits,
    (
        GroupOption("max_cell_chars", int, _MAX_CELL_CHARS_OPTION, DEFAULT_MAX_CELL_CHARS),
        GroupOption("max_groups", int, _MAX_GROUPS_OPTION, DEFAULT_MAX_GROUPS),
        GroupOption("max_rows", int, _MAX_ROWS_OPTION, DEFAULT_MAX_ROWS),
    ),
)


@analyze_app.command("run")
def analyze_run(
    run_dir: Annotated[Path, _RUN_DIR_ARGUMENT],
    as_json: Annotated[bool, _JSON_OPTION] = False,
    accept_edits: Annotated[bool, _ACCEPT_EDITS_OPTION] = False,
) -> None:
    """Recompute a run's analyses from its results (no model call).

    Tables, figures, summary.json and report.html are written again."""
    _reanalyze_run(run_dir, as_json, accept_edits)


@analyze_app.command("decisions")
@with_groups(_DRAWS, _OUTPUT, _LIMITS)
def analyze_decisions(
    decisions: Annotated[Path, _DECISIONS_ARGUMENT],
    group_cols: Annotated[str | None, _GROUP_COLS_OPTION] = None,
    outcome_col: Annotated[str | None, _OUTCOME_COL_OPTION] = None,
    positive: Annotated[str | None, _POSITIVE_OPTION] = None,
    negative: Annotated[str | None, _NEGATIVE_OPTION] = None,
    invalid: Annotated[str | None, _INVALID_OPTION] = None,
    min_group_share: Annotated[float, _MIN_GROUP_SHARE_OPTION] = 0.0,
    stratum_col: Annotated[str | None, _STRATUM_COL_OPTION] = None,
    unit_col: Annotated[str | None, _UNIT_COL_OPTION] = None,
    *,
    draws: Draws,
    output: Output,
    limits: CsvLimits,
) -> None:
    """Decisions made elsewhere: disparities, impact ratios and refusals.

    FILE.csv --group-cols a,b --outcome-col c; one row per decision."""
    options = ExternalOptions(
        group_cols=group_cols,
        outcome_col=outcome_col,
        positive=positive,
        negative=negative,
        invalid=invalid,
        min_group_share=min_group_share,
        stratum_col=stratum_col,
        unit_col=unit_col,
    )
    _analyze_external(decisions, options, draws, output, limits)


@analyze_app.command("texts")
@with_groups(_DRAWS, _OUTPUT, _LIMITS)
def analyze_letter_texts(
    texts: Annotated[Path, _TEXTS_ARGUMENT],
    text_col: Annotated[str | None, _TEXT_COL_OPTION] = None,
    group_col: Annotated[str | None, _GROUP_COL_OPTION] = None,
    compare: Annotated[str | None, _COMPARE_OPTION] = None,
    pair_col: Annotated[str | None, _PAIR_COL_OPTION] = None,
    unit_col: Annotated[str | None, _UNIT_COL_OPTION] = None,
    lexicon: Annotated[Path | None, _LEXICON_OPTION] = None,
    style: Annotated[Path | None, _STYLE_OPTION] = None,
    success_filter: Annotated[str, _SUCCESS_FILTER_OPTION] = "none",
    authors_tokens: Annotated[bool, _AUTHORS_TOKENS_OPTION] = False,
    premise_col: Annotated[str | None, _PREMISE_COL_OPTION] = None,
    nli: Annotated[str | None, _NLI_OPTION] = None,
    weat_words: Annotated[Path | None, _WEAT_WORDS_OPTION] = None,
    counterfactual: Annotated[bool, _COUNTERFACTUAL_OPTION] = False,
    *,
    draws: Draws,
    output: Output,
    limits: CsvLimits,
) -> None:
    """Letters written elsewhere: lexicon, word, WEAT and style analyses.

    FILE.csv --text-col t --group-col g, as the letters study analyses its own letters."""
    from biasim.simulator.tools.texts import TextsOptions

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
        draws.permutations,
        draws.seed,
        weat_words,
        limits,
        unit_col,
        counterfactual,
    )
    _analyze_letter_texts(texts, options, output.out, output.as_json)


@analyze_app.command("prism")
@with_groups(_OUTPUT, _LIMITS)
def analyze_prism(
    texts: Annotated[Path, _PRISM_TEXTS_ARGUMENT],
    masked_lm: Annotated[str, _MASKED_LM_OPTION],
    text_col: Annotated[str, _TEXT_COL_OPTION] = "text",
    paired_column: Annotated[str | None, _PAIRED_COLUMN_OPTION] = None,
    word_lists: Annotated[Path | None, _WORD_LISTS_OPTION] = None,
    alpha: Annotated[float, _ALPHA_OPTION] = 23.0,
    human_ratings: Annotated[Path | None, _HUMAN_RATINGS_OPTION] = None,
    *,
    output: Output,
    limits: CsvLimits,
) -> None:
    """PRISM scores of texts written elsewhere, by a masked LM.

    FILE.csv --masked-lm PATH; with --paired-column, the posting -> application tables and
    figures."""
    from biasim.simulator.tools.prism_texts import TextsRequest

    request = TextsRequest(
        texts,
        text_col,
        paired_column,
        masked_lm,
        word_lists,
        alpha,
        output.out,
        limits,
        human_ratings=human_ratings,
    )
    _analyze_texts(request, output.as_json)


@analyze_app.command("iat")
@with_groups(_OUTPUT)
def analyze_iat(
    paths: Annotated[list[Path], _IAT_ARGUMENT],
    iat_stimuli: Annotated[Path | None, _IAT_STIMULI_OPTION] = None,
    text_col: Annotated[str | None, _IAT_TEXT_COL_OPTION] = None,
    *,
    output: Output,
) -> None:
    """LLM-IAT answers collected elsewhere: D scores and the chained logit.

    PATH... --iat-stimuli STIMULI.csv: D by stereotype (Bai et al.); a CSV with iat_bias and
    decision_bias gives the chained logit."""
    from biasim.simulator.tools.iat import IATRequest

    _analyze_iat(IATRequest(list(paths), iat_stimuli, text_col, output.out), output.as_json)


def _analyze_letter_texts(texts: Path, options: Any, out: Path | None, as_json: bool) -> None:
    """``analyze texts``: the letters' lexicon, word and style tables."""
    from biasim.analysis.text.letter_text import SUCCESS_RULES
    from biasim.simulator.kinds.letters import LettersKind

    success_filter = options.success_filter
    if success_filter not in SUCCESS_RULES:
        fail_input(
            InputError(
                f"--success-filter: `{success_filter}` is not one of {', '.join(SUCCESS_RULES)}"
            )
        )
    from biasim.simulator.tools.texts import analyze_texts

    try:
        summary = analyze_texts(texts, options, out)
    except InputError as exc:
        fail_input(exc)
    if as_json:
        sys.stdout.write(json.dumps(summary, indent=2, default=str) + "\n")
    else:
        LettersKind().print(summary, out_console)
        if summary.get("counterfactual"):
            from biasim.simulator.kinds.counterfactual_text import TABLES

            TABLES["metrics"].print(out_console, summary["counterfactual"], "texts")
        if out is not None:
            out_console.print(f"wrote tables and a figure under {out}")


def _reanalyze_run(run_dir: Path, as_json: bool, accept_edits: bool) -> None:
    """``analyze run``: the run's analyses recomputed from its results, printed; exit 1 when
    one failed (the others are written)."""
    from biasim.simulator.engine.runner import reanalyze
    from biasim.simulator.report.outputs import print_report

    try:
        summary = reanalyze(run_dir, accept_edits=accept_edits)
    except InputError as exc:
        fail_input(exc)
    except Exception as exc:
        # A statistic that fails on these answers: say which, without a traceback.
        err_console.print(styled("analysis failed", "red", f": {type(exc).__name__}: {exc}"))
        raise typer.Exit(1) from None
    for note in (summary.get("partial"), summary.get("edited")):
        if note:
            err_console.print(styled("warning", "yellow", f": {note}"))
    if as_json:
        sys.stdout.write(json.dumps(summary, indent=2, default=str) + "\n")
    else:
        print_report(summary, out_console)
        print_written(run_dir, summary)
    redo = f"the others are written; once fixed: biasim analyze run {run_dir}"
    if say_failed_analyses(summary, redo):
        raise typer.Exit(1)


@dataclass(frozen=True)
class ExternalOptions:
    """What ``analyze decisions`` reads from the CSV, as given on the command line."""

    group_cols: str | None
    outcome_col: str | None
    positive: str | None
    negative: str | None
    invalid: str | None
    min_group_share: float
    stratum_col: str | None
    unit_col: str | None


def _analyze_external(
    path: Path, options: ExternalOptions, draws: Draws, output: Output, limits: CsvLimits
) -> None:
    from biasim.analysis.stats.disparity import INVALID

    out = output.out

    df, groups = _read_external_decisions(path, options, limits)
    outcome_col = options.outcome_col
    assert outcome_col is not None
    positive, how = _default_positive(df[outcome_col], options.positive)
    _check_positive_seen(df, path, outcome_col, positive)
    invalid = comma_list(options.invalid) if options.invalid is not None else list(INVALID)
    checked = _check_external_decisions(df, path, groups, options, positive, invalid)
    if out is not None:
        from biasim.simulator.common.rundir import check_writable

        reason = check_writable(out, hint="; name a new directory with --out")
        if reason:
            fail_input(InputError([Problem("--out", None, "", reason)]))
    tables, scalars = _external_report(
        checked, groups, options, (positive, how), invalid, draws.permutations, draws.seed
    )
    if out is not None:
        from biasim.simulator.common.csvfiles import write_csv

        out.mkdir(parents=True, exist_ok=True)
        for name, table in tables.items():
            write_csv(out / f"{name}.csv", table)
    if output.as_json:
        payload = {**scalars, **{k: v.to_dict("records") for k, v in tables.items()}}
        sys.stdout.write(json.dumps(payload, indent=2, default=str) + "\n")
        return
    _print_external(tables, scalars, checked, groups, options, (positive, how))


def _read_external_decisions(
    path: Path, options: ExternalOptions, limits: CsvLimits
) -> tuple[Any, list[str]]:
    """The decisions CSV and its group columns, once every column named on the command line
    is there (else exit 2 naming them)."""
    outcome_col, stratum_col, unit_col = options.outcome_col, options.stratum_col, options.unit_col
    missing = [
        f
        for f, v in (("--group-cols", options.group_cols), ("--outcome-col", outcome_col))
        if not v
    ]
    if missing:
        fail_input(InputError([Problem(m, None, "", "required with --decisions") for m in missing]))
    assert outcome_col is not None
    from biasim.simulator.common.csvfiles import check_group_count, read_csv

    groups = comma_list(options.group_cols)
    try:
        df = read_csv(path, "decisions CSV", limits)
        check_group_count(df, groups, path, limits.max_groups)
    except InputError as exc:
        fail_input(exc)
    wanted = [*groups, outcome_col, *(c for c in (stratum_col, unit_col) if c)]
    absent = [c for c in wanted if c not in df.columns]
    if absent:
        fail_input(
            InputError(
                [
                    Problem(str(path), 1, c, f"no such column; columns: {', '.join(df.columns)}")
                    for c in absent
                ]
            )
        )
    return df, groups


def _check_positive_seen(df: Any, path: Path, outcome_col: str, positive: str) -> None:
    """Exit 2 when no row has the favourable value (a misspelt --positive)."""
    if positive not in set(df[outcome_col].dropna()):
        values = sorted(set(df[outcome_col].dropna()))[:10]
        fail_input(
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


def _check_external_decisions(
    df: Any,
    path: Path,
    groups: list[str],
    options: ExternalOptions,
    positive: str,
    invalid: list[str],
) -> Any:
    """The rows that enter the tests, with the exclusions counted (exit 2 on unusable values,
    or when every favourable row is excluded)."""
    from biasim.analysis.audit.external import DecisionsError, check_decisions

    outcome_col = options.outcome_col
    assert outcome_col is not None
    try:
        checked = check_decisions(
            df,
            groups,
            outcome_col,
            positive=positive,
            negative=comma_list(options.negative) if options.negative is not None else None,
            invalid=invalid,
            unit_col=options.unit_col,
            stratum_col=options.stratum_col,
            min_group_share=options.min_group_share,
        )
    except DecisionsError as exc:
        where = str(path) if exc.column else f"--{(exc.argument or '').replace('_', '-')}"
        fail_input(InputError([Problem(where, None, exc.column or "", str(exc))]))
    if not checked.data[outcome_col].eq(positive).any():
        why = ", ".join(f"{r.reason} {r.n}" for r in checked.exclusions.itertuples())
        fail_input(
            InputError(
                [
                    Problem(
                        str(path), None, outcome_col, f"every `{positive}` row is excluded ({why})"
                    )
                ]
            )
        )
    return checked


def _external_report(
    checked: Any,
    groups: list[str],
    options: ExternalOptions,
    positive_and_how: tuple[str, str],
    invalid: list[str],
    permutations: int,
    seed: int,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The disparity and refusal tables of the checked decisions, and their scalars."""
    import pandas as pd

    from biasim.analysis.stats.disparity import disparity_report, impact_ratios_by_stratum
    from biasim.analysis.stats.refusals import refusal_report

    positive, how = positive_and_how
    outcome_col, stratum_col, unit_col = options.outcome_col, options.stratum_col, options.unit_col
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
    # Who is excluded, and what the headline would be if they were not (refusals that replace
    # one group's rejections make that group look favoured).
    report.update(
        refusal_report(
            data,
            groups,
            outcome_col,
            positive,
            invalid=invalid,
            unit_col=unit_col,
            n_permutations=permutations,
            seed=seed,
        )
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
            data,
            stratum_col,
            groups,
            outcome_col,
            positive,
            seed=seed,
            invalid=invalid,
            unit_col=unit_col,
        )
    if not unit_col:
        from biasim.analysis.audit.external import undeclared_units

        scalars["repeating_columns"] = undeclared_units(data, groups, [outcome_col, stratum_col])
    tables["exclusions"] = checked.exclusions
    if options.min_group_share > 0:
        tables["small_groups"] = checked.small_groups
    return tables, scalars


def _print_external(
    tables: dict[str, Any],
    scalars: dict[str, Any],
    checked: Any,
    groups: list[str],
    options: ExternalOptions,
    positive_and_how: tuple[str, str],
) -> None:
    """The tables, then the headline, validity and claims lines of ``analyze decisions``."""
    positive, how = positive_and_how
    for name, table in tables.items():
        rich_table = Table(title=name)
        for col in table.columns:
            rich_table.add_column(str(col), justify="right")
        for row in table.itertuples(index=False):
            rich_table.add_row(*[f"{v:.4g}" if isinstance(v, float) else str(v) for v in row])
        print_table(out_console, rich_table)
    from biasim.analysis.stats.disparity import flag_chance_basis

    nan = float("nan")
    negatives = ", ".join(checked.negative) or "none"
    reasons = ", ".join(f"{r.reason} {r.n}" for r in checked.exclusions.itertuples())
    out_console.print(
        f"positive outcome: {positive} ({how}); negative: {negatives} "
        f"({scalars['negative_from']}); rows {checked.n_total}: used {checked.n_used}, "
        f"excluded {scalars['n_excluded']}"
        + (f" ({reasons})" if reasons else "")
        + f"; DPD {scalars.get('dpd', nan):.4f} (p {format_p(scalars.get('dpd_p_value'))}); "
        f"chance an unbiased decision-maker fails four-fifths for some group: "
        f"{scalars.get('p_any_flag_by_chance', float('nan')):.1%} "
        f"({flag_chance_basis(scalars.get('flag_chance_unit'))})",
        highlight=False,
    )
    out_console.print(
        f"valid answers by group differ by {scalars['validity_gap']:.4f} "
        f"(p {format_p(scalars['validity_p_value'])}; {scalars['validity_test']}); "
        f"{scalars['bounds_note']}",
        highlight=False,
    )
    for claim in scalars["claims"]:
        out_console.print(claim, highlight=False)
    if scalars.get("repeating_columns"):
        from biasim.analysis.audit.external import independence_warning

        out_console.print(independence_warning(scalars["repeating_columns"]), highlight=False)
    for row in checked.small_groups.to_dict("records"):
        label = ", ".join(str(row[g]) for g in groups)
        out_console.print(
            f"left out, under {options.min_group_share:.1%} of the decided rows: {label} "
            f"({row['n']} decided, {row['share']:.1%}; {row['n_rows']} rows)",
            highlight=False,
        )


def _analyze_texts(request: Any, as_json: bool) -> None:
    """``analyze prism``: check, score, print and (with --out) write tables and figures."""
    from biasim.analysis.figures import save_figure
    from biasim.simulator.common.csvfiles import write_csv
    from biasim.simulator.tools.prism_texts import analyze_texts, read_texts

    try:
        frame = read_texts(request)
    except InputError as exc:
        fail_input(exc)
    result = analyze_texts(request, frame)
    written: list[Path] = []
    if request.out is not None:
        request.out.mkdir(parents=True, exist_ok=True)
        for name, table in result.tables.items():
            path = request.out / f"{name}.csv"
            write_csv(path, table)
            written.append(path)
        for name, figure in result.figures.items():
            written.append(save_figure(figure, request.out / f"{name}.png"))
    if as_json:
        sys.stdout.write(json.dumps(result.summary, indent=2, default=str) + "\n")
        return
    if request.paired_column:
        from biasim.simulator.kinds import get_kind

        get_kind("prism").print(result.summary, out_console)
    else:
        from biasim.simulator.common.results import print_result
        from biasim.simulator.kinds.sections.prism_result import PrismTextsResult
        from biasim.simulator.tools.prism_texts import texts_headline, texts_lines

        head, lines = texts_headline(result.summary), texts_lines(result.summary)
        print_result(PrismTextsResult, result.summary, out_console, head, lines)
    if written:
        out_console.print(f"wrote {len(written)} files under {request.out}", highlight=False)


def _analyze_iat(request: Any, as_json: bool) -> None:
    """``analyze iat``: D scores by stereotype (strict and as the authors) and the logit."""
    import pandas as pd

    from biasim.simulator.common.csvfiles import write_csv
    from biasim.simulator.tools.iat import analyze_iat

    try:
        result = analyze_iat(request)
    except InputError as exc:
        fail_input(exc)
    logit = result.logit
    if request.out is not None:
        request.out.mkdir(parents=True, exist_ok=True)
        if result.summary is not None:
            write_csv(request.out / "iat_d_scores.csv", result.summary)
            write_csv(request.out / "iat_answer_scores.csv", result.scores)
        if logit is not None:
            write_csv(request.out / "chained_logit.csv", pd.DataFrame([vars(logit)]))
    if as_json:
        payload = {
            "d_scores": None if result.summary is None else result.summary.to_dict("records"),
            "chained_logit": None if logit is None else vars(logit),
        }
        sys.stdout.write(json.dumps(payload, indent=2, default=str) + "\n")
        return
    if result.summary is not None:
        _print_frame(result.summary, "LLM-IAT D by stereotype")
        out_console.print(
            "D = a/(a+b+.01) + d/(c+d+.01) - 1 per answer (Bai et al.); t against 0 with the "
            "answer as unit. mean_d: every name of a group's list counts, unreadable answers "
            "excluded and counted; mean_d_authors: their pooled lists, an answer with one "
            "unmappable line scored 0.",
            highlight=False,
        )
    if logit is not None:
        out_console.print(
            f"chained logit decision_bias ~ 1 + iat_bias: intercept {logit.intercept:.4f} "
            f"(se {logit.intercept_se:.3f}), slope {logit.slope:.4f} (se {logit.slope_se:.3f}, "
            f"p {format_p(logit.slope_p)}), N = {logit.n} of {result.chained_rows} rows",
            highlight=False,
        )


def _print_frame(table: Any, title: str) -> None:
    rich_table = Table(title=title)
    for col in table.columns:
        rich_table.add_column(str(col), justify="right")
    for row in table.itertuples(index=False):
        rich_table.add_row(*[f"{v:.4g}" if isinstance(v, float) else str(v) for v in row])
    print_table(out_console, rich_table)


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
