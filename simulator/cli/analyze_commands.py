"""``biasim analyze``: a run directory again, or decisions or texts collected elsewhere."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from biasim.simulator.cli.common import (
    app,
    comma_list,
    err_console,
    fail_input,
    out_console,
    print_written,
    styled,
)
from biasim.simulator.common.csvlimits import (
    CELL_CHARS_CEILING,
    DEFAULT_MAX_CELL_CHARS,
    DEFAULT_MAX_GROUPS,
    DEFAULT_MAX_ROWS,
    CsvLimits,
)
from biasim.simulator.common.errors import InputError, Problem
from biasim.simulator.common.tables import print_table

# The options of `biasim analyze`, one constant each so its signature reads as the option list.
_RUN_DIR_ARGUMENT = typer.Argument(help="A run directory (tables and figures are rewritten).")
_JSON_OPTION = typer.Option("--json", help="Print JSON instead of tables.")
_ACCEPT_EDITS_OPTION = typer.Option(
    "--accept-edits",
    help="RUN_DIR: analyse results edited after the run (the manifest and report say so).",
)
_DECISIONS_OPTION = typer.Option(
    help="A CSV of decisions made outside biasim (one row per decision)."
)
_GROUP_COLS_OPTION = typer.Option(help="With --decisions: comma-separated group columns.")
_OUTCOME_COL_OPTION = typer.Option(help="With --decisions: the decision column.")
_POSITIVE_OPTION = typer.Option(
    help="With --decisions: the favourable value (default: 1 or true for a 0/1 or "
    "true/false column, else accept)."
)
_NEGATIVE_OPTION = typer.Option(
    help="With --decisions: comma-separated values meaning not selected (default: the "
    "one value besides --positive and --invalid; any other value is an error)."
)
_INVALID_OPTION = typer.Option(
    help="With --decisions: comma-separated values of unusable answers, excluded and "
    "counted (default: invalid)."
)
_MIN_GROUP_SHARE_OPTION = typer.Option(
    min=0.0,
    max=1.0,
    help="With --decisions: leave groups under this share of the decided rows (e.g. "
    "0.02) out of every test; they are reported as excluded.",
)
_STRATUM_COL_OPTION = typer.Option(help="With --decisions: test within strata (e.g. job), combine.")
_UNIT_COL_OPTION = typer.Option(
    help="With --decisions or --texts: exchangeable unit for permutations (e.g. the "
    "name, or who wrote each letter)."
)
_TEXTS_OPTION = typer.Option(
    help="A CSV of texts written elsewhere (letters; with --masked-lm, PRISM)."
)
_TEXT_COL_OPTION = typer.Option(help="With --texts: the text column.")
_GROUP_COL_OPTION = typer.Option(help="With --texts: the group column.")
_COMPARE_OPTION = typer.Option(
    help="With --texts: FIRST,SECOND groups (default: the column's two values)."
)
_PAIR_COL_OPTION = typer.Option(
    help="With --texts: column of counterfactual pairs (adds paired tests)."
)
_LEXICON_OPTION = typer.Option(
    help="With --texts: YAML/JSON category -> stems (default: agency stems)."
)
_STYLE_OPTION = typer.Option(
    help="With --texts: YAML dimension -> {scorer, options} (default: offline)."
)
_SUCCESS_FILTER_OPTION = typer.Option(
    help="With --texts: drop failed generations (Appendix B): authors (their code: "
    "' recommend ' with spaces; CBG), recommend (any 'recommend') or none (CLG, "
    "the paper's 120 letters in full)."
)
_AUTHORS_TOKENS_OPTION = typer.Option(
    help="With --texts: count lexicon tokens as the authors' code (<return> kept)."
)
_PREMISE_COL_OPTION = typer.Option(
    help="With --texts: column of the biographies (hallucination analysis)."
)
_NLI_OPTION = typer.Option(help="With --premise-col: NLI cross-encoder, hub id or local folder.")
_WEAT_WORDS_OPTION = typer.Option(
    help="With --texts: YAML `test: {group: [words]}` for WEAT, keyed by the compared "
    "groups (default: Caliskan's sets keyed male/female)."
)
_OUT_OPTION = typer.Option(
    help="With --decisions or --texts: directory for the tables (and figures)."
)
_PERMUTATIONS_OPTION = typer.Option(min=1, max=10_000_000, help="Monte Carlo permutations.")
_SEED_OPTION = typer.Option(min=0, max=2**63 - 1, help="Seed of every random draw.")
_PAIRED_COLUMN_OPTION = typer.Option(
    help="With --texts: the column of the text each one answers (e.g. the posting): "
    "adds the posting -> application tables and figures."
)
_MASKED_LM_OPTION = typer.Option(
    "--masked-lm", help="With --texts: the masked LM (local folder or hub id)."
)
_WORD_LISTS_OPTION = typer.Option(
    help="With --texts: word lists JSON (default: the paper's example words)."
)
_ALPHA_OPTION = typer.Option(help="With --texts: top % of pooled probabilities kept.")
_HUMAN_RATINGS_OPTION = typer.Option(
    help="With --texts and --masked-lm: CSV of texts people rated (text, rating; higher "
    "= more masculine): Spearman rho of each dimension with the ratings (Figure 4a)."
)
_IAT_OPTION = typer.Option(
    help="LLM-IAT answers (CSV or folder of CSVs; repeatable) scored with --iat-stimuli; "
    "a CSV with iat_bias and decision_bias gives the chained logit (Bai et al.)."
)
_IAT_STIMULI_OPTION = typer.Option(help="With --iat: Bai's stimuli CSV (dataset, A, B, C[, D]).")
_MAX_CELL_CHARS_OPTION = typer.Option(
    min=1,
    max=CELL_CHARS_CEILING,
    help="With --decisions or --texts: longest cell read (characters).",
)
_MAX_GROUPS_OPTION = typer.Option(min=1, help="With --decisions or --texts: most distinct groups.")
_MAX_ROWS_OPTION = typer.Option(min=1, help="With --decisions or --texts: most rows read.")


@app.command()
def analyze(
    run_dir: Annotated[Path | None, _RUN_DIR_ARGUMENT] = None,
    as_json: Annotated[bool, _JSON_OPTION] = False,
    decisions: Annotated[Path | None, _DECISIONS_OPTION] = None,
    group_cols: Annotated[str | None, _GROUP_COLS_OPTION] = None,
    outcome_col: Annotated[str | None, _OUTCOME_COL_OPTION] = None,
    positive: Annotated[str | None, _POSITIVE_OPTION] = None,
    negative: Annotated[str | None, _NEGATIVE_OPTION] = None,
    invalid: Annotated[str | None, _INVALID_OPTION] = None,
    min_group_share: Annotated[float, _MIN_GROUP_SHARE_OPTION] = 0.0,
    stratum_col: Annotated[str | None, _STRATUM_COL_OPTION] = None,
    unit_col: Annotated[str | None, _UNIT_COL_OPTION] = None,
    texts: Annotated[Path | None, _TEXTS_OPTION] = None,
    text_col: Annotated[str | None, _TEXT_COL_OPTION] = None,
    group_col: Annotated[str | None, _GROUP_COL_OPTION] = None,
    compare: Annotated[str | None, _COMPARE_OPTION] = None,
    pair_col: Annotated[str | None, _PAIR_COL_OPTION] = None,
    lexicon: Annotated[Path | None, _LEXICON_OPTION] = None,
    style: Annotated[Path | None, _STYLE_OPTION] = None,
    success_filter: Annotated[str, _SUCCESS_FILTER_OPTION] = "none",
    authors_tokens: Annotated[bool, _AUTHORS_TOKENS_OPTION] = False,
    premise_col: Annotated[str | None, _PREMISE_COL_OPTION] = None,
    nli: Annotated[str | None, _NLI_OPTION] = None,
    weat_words: Annotated[Path | None, _WEAT_WORDS_OPTION] = None,
    out: Annotated[Path | None, _OUT_OPTION] = None,
    permutations: Annotated[int, _PERMUTATIONS_OPTION] = 5000,
    seed: Annotated[int, _SEED_OPTION] = 0,
    paired_column: Annotated[str | None, _PAIRED_COLUMN_OPTION] = None,
    masked_lm: Annotated[str | None, _MASKED_LM_OPTION] = None,
    word_lists: Annotated[Path | None, _WORD_LISTS_OPTION] = None,
    alpha: Annotated[float, _ALPHA_OPTION] = 23.0,
    human_ratings: Annotated[Path | None, _HUMAN_RATINGS_OPTION] = None,
    iat: Annotated[list[Path] | None, _IAT_OPTION] = None,
    iat_stimuli: Annotated[Path | None, _IAT_STIMULI_OPTION] = None,
    max_cell_chars: Annotated[int, _MAX_CELL_CHARS_OPTION] = DEFAULT_MAX_CELL_CHARS,
    max_groups: Annotated[int, _MAX_GROUPS_OPTION] = DEFAULT_MAX_GROUPS,
    max_rows: Annotated[int, _MAX_ROWS_OPTION] = DEFAULT_MAX_ROWS,
    accept_edits: Annotated[bool, _ACCEPT_EDITS_OPTION] = False,
) -> None:
    """Recompute a run's analyses from its results (no model call), analyse external
    decisions with --decisions FILE.csv --group-cols a,b --outcome-col c, texts with
    --texts FILE.csv --text-col t --group-col g (letters' lexicon, words and style), or PRISM
    scores of texts with --texts FILE.csv --masked-lm PATH [--paired-column posting], or
    LLM-IAT answers with --iat PATH --iat-stimuli STIMULI.csv."""
    # The first statement, so locals() is exactly the parameters (AnalyzeArgs names each).
    given = AnalyzeArgs(**locals())
    if given.iat:
        _analyze_iat(_iat_request(given), given.as_json)
    elif given.texts is not None and given.masked_lm is not None:
        _analyze_texts(_prism_texts_request(given), given.as_json)
    elif given.texts is not None:
        _analyze_letter_texts(given.texts, _letter_texts_options(given), given.out, given.as_json)
    elif given.decisions is not None:
        _analyze_external(
            given.decisions,
            _external_options(given),
            given.out,
            given.permutations,
            given.seed,
            given.as_json,
            given.limits,
        )
    elif given.run_dir is None:
        fail_input(InputError("give a RUN_DIR, --decisions FILE.csv or --texts FILE.csv"))
    else:
        _reanalyze_run(given.run_dir, given.as_json, given.accept_edits)


@dataclass(frozen=True)
class AnalyzeArgs:
    """Every parameter of :func:`analyze`, as given on the command line."""

    run_dir: Path | None
    as_json: bool
    decisions: Path | None
    group_cols: str | None
    outcome_col: str | None
    positive: str | None
    negative: str | None
    invalid: str | None
    min_group_share: float
    stratum_col: str | None
    unit_col: str | None
    texts: Path | None
    text_col: str | None
    group_col: str | None
    compare: str | None
    pair_col: str | None
    lexicon: Path | None
    style: Path | None
    success_filter: str
    authors_tokens: bool
    premise_col: str | None
    nli: str | None
    weat_words: Path | None
    out: Path | None
    permutations: int
    seed: int
    paired_column: str | None
    masked_lm: str | None
    word_lists: Path | None
    alpha: float
    human_ratings: Path | None
    iat: list[Path] | None
    iat_stimuli: Path | None
    max_cell_chars: int
    max_groups: int
    max_rows: int
    accept_edits: bool

    @property
    def limits(self) -> CsvLimits:
        """How much of a CSV is read: --max-cell-chars, --max-groups and --max-rows."""
        return CsvLimits(self.max_cell_chars, self.max_groups, self.max_rows)


def _iat_request(given: AnalyzeArgs) -> Any:
    """``--iat``: the answers, the stimuli and where the tables go."""
    from biasim.simulator.tools.iat import IATRequest

    return IATRequest(list(given.iat or ()), given.iat_stimuli, given.text_col, given.out)


def _prism_texts_request(given: AnalyzeArgs) -> Any:
    """``--texts`` with ``--masked-lm``: the PRISM scoring of the texts."""
    from biasim.simulator.tools.prism_texts import TextsRequest

    return TextsRequest(
        given.texts,
        given.text_col or "text",
        given.paired_column,
        given.masked_lm,
        given.word_lists,
        given.alpha,
        given.out,
        given.limits,
        human_ratings=given.human_ratings,
    )


def _letter_texts_options(given: AnalyzeArgs) -> Any:
    """``--texts`` without a masked LM: the letters' lexicon, word and style analyses."""
    from biasim.simulator.tools.texts import TextsOptions

    return TextsOptions(
        given.text_col,
        given.group_col,
        given.compare,
        given.pair_col,
        given.lexicon,
        given.style,
        given.success_filter,
        given.authors_tokens,
        given.premise_col,
        given.nli,
        given.permutations,
        given.seed,
        given.weat_words,
        given.limits,
        given.unit_col,
    )


def _external_options(given: AnalyzeArgs) -> ExternalOptions:
    """``--decisions``: what is read from the CSV."""
    return ExternalOptions(
        group_cols=given.group_cols,
        outcome_col=given.outcome_col,
        positive=given.positive,
        negative=given.negative,
        invalid=given.invalid,
        min_group_share=given.min_group_share,
        stratum_col=given.stratum_col,
        unit_col=given.unit_col,
    )


def _analyze_letter_texts(texts: Path, options: Any, out: Path | None, as_json: bool) -> None:
    """``analyze --texts`` without a masked LM: the letters' lexicon, word and style tables."""
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
        if out is not None:
            out_console.print(f"wrote tables and a figure under {out}")


def _reanalyze_run(run_dir: Path, as_json: bool, accept_edits: bool) -> None:
    """``analyze RUN_DIR``: the run's analyses recomputed from its results, printed."""
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
    limits: CsvLimits,
) -> None:
    from biasim.analysis.stats.disparity import INVALID

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
        checked, groups, options, (positive, how), invalid, permutations, seed
    )
    if out is not None:
        from biasim.simulator.common.csvfiles import write_csv

        out.mkdir(parents=True, exist_ok=True)
        for name, table in tables.items():
            write_csv(out / f"{name}.csv", table)
    if as_json:
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
    """The tables, then the headline, validity and claims lines of ``analyze --decisions``."""
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
        + f"; DPD {scalars.get('dpd', nan):.4f} (p = {scalars.get('dpd_p_value', nan):.4f}); "
        f"chance an unbiased decision-maker fails four-fifths for some group: "
        f"{scalars.get('p_any_flag_by_chance', float('nan')):.1%} "
        f"({flag_chance_basis(scalars.get('flag_chance_unit'))})",
        highlight=False,
    )
    out_console.print(
        f"valid answers by group differ by {scalars['validity_gap']:.4f} "
        f"(p = {scalars['validity_p_value']:.4f}; {scalars['validity_test']}); "
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
    """``analyze --texts``: check, score, print and (with --out) write tables and figures."""
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
        payload = {
            **result.summary,
            **{k: v.to_dict("records") for k, v in result.tables.items() if k.endswith("_summary")},
        }
        sys.stdout.write(json.dumps(payload, indent=2, default=str) + "\n")
        return
    if request.paired_column:
        from biasim.simulator.kinds import get_kind

        get_kind("prism").print(result.summary, out_console)
    else:
        for name, table in result.tables.items():
            if name.endswith(("_scores", "_baseline", "_validation")):
                continue  # per text in the CSV; baselines and validation printed below
            rich_table = Table(title=name)
            for col in table.columns:
                rich_table.add_column(str(col), justify="right")
            for row in table.itertuples(index=False):
                rich_table.add_row(*[f"{v:.4g}" if isinstance(v, float) else str(v) for v in row])
            out_console.print(rich_table)
        from biasim.simulator.kinds.sections.prism_baseline import print_baselines
        from biasim.simulator.kinds.sections.prism_validation import print_validation

        print_baselines(result.summary, out_console)
        print_validation(result.summary, out_console)
        dropped = "; ".join(f"{k}: {', '.join(v)}" for k, v in result.summary["dropped"].items())
        out_console.print(
            f"{result.summary['rows']} texts, {result.summary['texts_scored_now']} scored now "
            f"on {result.summary['device']} (the rest from the cache)"
            + (f"; words not in the model's vocabulary, dropped: {dropped}" if dropped else ""),
            highlight=False,
        )
    if written:
        out_console.print(f"wrote {len(written)} files under {request.out}", highlight=False)


def _analyze_iat(request: Any, as_json: bool) -> None:
    """``analyze --iat``: D scores by stereotype (strict and as the authors) and the logit."""
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
            f"p = {logit.slope_p:.3g}), N = {logit.n} of {result.chained_rows} rows",
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
