"""Kind ``acceptance``: acceptance-rate disparities of written decisions (seed 001). Each text
is labelled accept / reject / invalid with the applicant's name redacted (rules, an SVM or an
LLM judge), then rates, impact ratios and permutation tests per group and model, the paper's
breakdown tables, and, with several models, the models side by side with tests of their
differences."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field
from rich.console import Console
from rich.table import Table
from rich.text import Text

from biasim.simulator.common.html import Column, HtmlSection, fmt, format_p
from biasim.simulator.common.lazy import lazy_module
from biasim.simulator.common.result_tables import ResultTable
from biasim.simulator.common.results import summary_of, tables_of
from biasim.simulator.common.tables import print_table
from biasim.simulator.kinds.base import (
    AnalysisContext,
    AnalysisKind,
    AnalysisSpec,
    Section,
    StudyFacts,
    slug,
    summary_table,
)
from biasim.simulator.kinds.sections.differences import MODEL_DIFFERENCES, model_differences
from biasim.simulator.kinds.sections.exclusions import EXCLUSIONS
from biasim.simulator.kinds.sections.expected import (
    ExpectedDecisions,
    add_expected_decisions,
    is_logprob_stage,
)
from biasim.simulator.kinds.sections.unit_models import (
    GRADES,
    MODEL_ESTIMATES,
    add_model_estimates,
)

if TYPE_CHECKING:
    from biasim.analysis.stats.units import Tested

columns = lazy_module("biasim.analysis.stats.columns")
unit_stats = lazy_module("biasim.analysis.stats.units")

pd = lazy_module("pandas")

figures = lazy_module("biasim.analysis.figures")
disparity = lazy_module("biasim.analysis.stats.disparity")
refusals = lazy_module("biasim.analysis.stats.refusals")


class AcceptanceSpec(AnalysisSpec):
    """Acceptance-rate disparities of written decisions (seed 001): classify, then test."""

    kind: Literal["acceptance"]
    stage: str = Field(description="Stage whose text is a decision (e.g. the hiring email).")
    field: str = Field("text", description="Field holding the text (free-text stages: `text`).")
    classifier: Literal["rules", "svm", "judge"] = "rules"
    judge_stage: str | None = Field(
        None, description="For classifier `judge`: the stage whose `outcome` field labels texts."
    )
    training_csv: str | None = Field(
        None,
        description="For classifier `svm`: labelled CSV (`text,label`); starter set if absent.",
    )
    labelled: str | None = Field(
        None,
        description="Hand labels of this run's emails for the paper's Table 5 (validity, and "
        "the classifier's precision / recall / F1 on accept and reject): the run's "
        "`<name>_annotation_sample.csv` with its `label` column filled (accept / reject / "
        "invalid).",
    )
    groups: list[str] = Field(min_length=1, description="Persona axes defining groups.")
    unit: Literal["email", "name"] = Field(
        "name", description="Exchangeable unit of the permutation test."
    )

    @property
    def unit_column(self) -> str | None:
        """The column whose values every test of the kind relabels whole (the name), or None
        when each email is its own unit: derived here once, read by every test and bound."""
        return "persona_name" if self.unit == "name" else None

    strata: str | None = Field(None, description="Factor tested separately, then combined.")
    breakdowns: list[str] = Field(
        default_factory=list, description="Columns giving one rate table each (Tables 1-4)."
    )
    breakdown_notes: dict[str, str] = Field(
        default_factory=dict,
        description="A note printed with a breakdown's table (key: a `breakdowns` column), e.g. "
        "how its rows differ from a paper's; with `strata` the note also counts the strata "
        "values in each row of this run.",
    )
    subset: str | None = Field(
        None,
        description="Column marking a subset of rows (true / yes / 1), e.g. `subset7`: adds "
        "Table 1 of seed 001, one row for the subset and one for all rows, with marks from the "
        "joint test within each and, beside them, from the paper's test (per-stratum "
        "email-level tests combined by Fisher's method).",
    )
    reference: list[str] | None = Field(
        None,
        description="Group values (one per `groups` axis), e.g. [White, male]: also test every "
        "other group against this one, not only against the population.",
    )
    n_permutations: int = Field(5000, ge=100)
    adjust: Literal["holm", "bh", "none"] = "holm"


_ACCEPTANCE_NOTE = (
    "acc/n = accepted / valid answers, excl = invalid (excluded); all = accepted / every email, "
    "invalid ones counted as not accepted (the paper's binary rate); IR = impact ratio (rate / "
    "highest rate, ! = below four-fifths); p = {test}, two-sided, {adjust}-adjusted over the "
    "groups."
)
_POPULATION_CAVEAT = (
    "Each group is compared with the population, which includes it: when one group is treated "
    "worse, every other group sits above the average and may test 'significantly above' "
    "without being favoured. Set `reference` to compare every group with one group instead."
)
_DIFFERENCES = replace(
    MODEL_DIFFERENCES,
    title="Differences between models",
    note="p = permutation test of |DPD A - DPD B| (max - min acceptance rate over the groups): "
    "model labels are swapped within each prompt (same template, name and seed) under the null "
    "that both models answer each prompt alike; p adj. over the model pairs (* = significant).",
)
#: The tables this kind shares with ``demographic_parity``, each declared once there.
_SHARED: tuple[ResultTable, ...] = (EXCLUSIONS, MODEL_ESTIMATES, GRADES, _DIFFERENCES)


def _expected_tables(summary: dict[str, Any]) -> Any:
    """The expected-acceptance tables of a judge answering with log-probabilities."""
    return tables_of(ExpectedDecisions, summary["expected"]) if summary.get("expected") else []


#: Table 1's column suffix of the paper's test's marks, after a group's label.
PAPERS_MARK = " sig (paper's test)"
_TABLE1_NOTE = (
    "Marks: † p < 0.01, * p < 0.05, then + / - above / below the row's average. Calibrated: "
    "the joint test, each name relabelled once across all roles ({adjust}-adjusted over the "
    "groups and both directions). The paper's test (appendix C.3): each role tested with "
    "single emails as the unit, the roles combined by Fisher's method, unadjusted. They differ "
    "because the same names write every email in every role: the paper's test counts a name's "
    "own leaning once per email and per role as independent evidence, so where names differ "
    "it marks groups far more often than its 5 % (the calibrated test holds its level)."
)


def _table1_labels(table1: list[dict[str, Any]]) -> list[str]:
    """The group labels of Table 1's records (each has a ``<label> sig`` column)."""
    return [c[: -len(" sig")] for c in table1[0] if c.endswith(" sig")]


def _print_table1(table1: list[dict[str, Any]], adjust: str, console: Console) -> None:
    """Seed 001's Table 1: each rate with the calibrated test's mark | the paper's test's."""
    labels = _table1_labels(table1)
    table = Table(title="Table 1: acceptance rate (%), marks: calibrated | the paper's test")
    for col in ("rows", *labels, "average", "n"):
        table.add_column(col, justify="right", overflow="fold")
    for row in table1:
        cells = [
            f"{fmt(row[label], '.2f')} {row[label + ' sig'] or '·'}"
            f" | {row.get(label + PAPERS_MARK) or '·'}"
            for label in labels
        ]
        table.add_row(str(row["rows"]), *cells, fmt(row["average"], ".2f"), str(row["n"]))
    print_table(console, table)
    console.print(_TABLE1_NOTE.format(adjust=adjust))


def _html_table1(
    at: tuple[str, str], table1: list[dict[str, Any]], adjust: str, section: HtmlSection
) -> None:
    labels = _table1_labels(table1)
    columns = [Column("rows")]
    for label in labels:
        columns += [
            Column(label, f"{label} (%)", ".2f"),
            Column(f"{label} sig", "calibrated", "text"),
            Column(label + PAPERS_MARK, "the paper's test", "text"),
        ]
    columns += [Column("average", "average (%)", ".2f"), Column("n", "valid n", "int")]
    section.table(
        table1,
        key=(*at, "table1"),
        title="Table 1: acceptance rate by group, marked by the calibrated and the paper's test",
        columns=columns,
        note=_TABLE1_NOTE.format(adjust=adjust),
    )


_TABLE5_COLUMNS = [
    Column("n_labelled", "labelled", "int"),
    Column("validity", "validity", ".2f"),
    *[
        Column(f"{metric}_{label}", f"{metric} {label}", ".2f")
        for metric in ("precision", "recall", "f1")
        for label in ("accept", "reject")
    ],
]
_TABLE5_NOTE = (
    "Validity: share of the hand-labelled emails the annotator found valid; precision, recall "
    "and F1 of the classifier's labels against the hand labels on those valid emails."
)


def _print_table5(table5: list[dict[str, Any]], classifier: str, console: Console) -> None:
    table = Table(title=f"Table 5: validity and the {classifier} classifier against hand labels")
    for column in ("model", *(c.label for c in _TABLE5_COLUMNS)):
        table.add_column(str(column), justify="right", overflow="fold")
    for row in table5:
        table.add_row(
            str(row["model_label"]),
            *[fmt(row.get(c.key), c.spec) for c in _TABLE5_COLUMNS],
        )
    print_table(console, table)
    console.print(_TABLE5_NOTE)


def _breakdown_note(part: pd.DataFrame, spec: AcceptanceSpec, column: str) -> str:
    """The study's note on the table by ``column``, with (``strata`` set) how many strata
    values each of its rows holds in this run: the counts a reader compares with a paper's."""
    note = f"Table by {column}: {spec.breakdown_notes[column]}"
    if spec.strata is None or spec.strata == column:
        return note
    counts = part.dropna(subset=[column]).groupby(column, sort=False)[spec.strata].nunique()
    listed = ", ".join(f"{level} {n}" for level, n in counts.items())
    return f"{note} {spec.strata} values per row in this run: {listed}."


def _test_name(part: dict[str, Any]) -> str:
    if part.get("test") == "joint":
        return (
            "joint permutation test across strata (each name relabelled once for every stratum; "
            "d = excess over the rate its strata give)"
        )
    return "permutation test of the group against the population"


class AcceptanceKind(AnalysisKind):
    """Acceptance rates of hiring-decision emails by group (seed 001)."""

    name = "acceptance"
    spec = AcceptanceSpec
    title = "Acceptance rates of written decisions"

    def check(self, spec: AcceptanceSpec, facts: StudyFacts) -> None:
        facts.need_field(spec.stage, spec.field, ("field",), ("stage",))
        facts.need_axes(spec.groups, ("groups",))
        if spec.classifier == "judge":
            if spec.judge_stage is None:
                facts.problem(("judge_stage",), "the judge classifier needs `judge_stage`")
            else:
                facts.need_field(spec.judge_stage, "outcome", ("judge_stage",), ("judge_stage",))
        facts.need_column(spec.strata, ("strata",))
        facts.need_column(spec.subset, ("subset",))
        if spec.reference is not None and len(spec.reference) != len(spec.groups):
            facts.problem(
                ("reference",),
                f"give one value per group axis ({', '.join(spec.groups)}), e.g. "
                f"{[values[0] for values in facts.axes.values()][: len(spec.groups)]}",
            )
        elif spec.reference is not None:
            for axis, value in zip(spec.groups, spec.reference, strict=True):
                known = facts.axes.get(axis)
                if known is not None and value not in known:
                    facts.problem(
                        ("reference",), f"`{value}` is not a value of `{axis}` ({', '.join(known)})"
                    )
        for j, name in enumerate(spec.breakdowns):
            facts.need_column(name, ("breakdowns", j))
        for name in spec.breakdown_notes:
            if name not in spec.breakdowns:
                facts.problem(
                    ("breakdown_notes", name),
                    f"`{name}` is not one of `breakdowns` ({', '.join(spec.breakdowns) or 'none'})",
                )

    def outcomes(self, results: pd.DataFrame, spec: AcceptanceSpec, ctx: AnalysisContext):
        """The decision stage's rows with ``outcome`` (accept / reject / invalid), the texts
        redacted, and the rules' labels of the same texts (for the judge's agreement)."""
        from biasim.families.hiring_emails.stats import (
            email_outcomes,  # scikit-learn: imported only by this kind
        )

        rows = results[(results["stage"] == spec.stage)].reset_index(drop=True)
        texts = rows[spec.field].fillna("").astype(str).tolist()
        names = rows["persona_name"].fillna("").astype(str).tolist()
        redacted = email_outcomes.redact_names(texts, names)
        if spec.classifier == "rules":
            labels = email_outcomes.RuleClassifier().predict(redacted)
        elif spec.classifier == "svm":
            training = (
                ctx.resolve(spec.training_csv)
                if spec.training_csv
                else email_outcomes.STARTER_LABELS
            )
            labels = email_outcomes.SvmClassifier.from_csv(training).predict(redacted)
        else:
            judged = results[results["stage"] == spec.judge_stage].set_index("agent_id")
            labels = rows["agent_id"].map(judged["outcome"]).fillna("invalid").tolist()
        rows = rows.assign(outcome=labels)
        rows.loc[~rows["valid"].astype(bool), "outcome"] = "invalid"
        return rows, redacted

    def compute(self, results: pd.DataFrame, spec: AcceptanceSpec, ctx: AnalysisContext) -> Section:
        from biasim.families.hiring_emails.stats import email_outcomes

        name = ctx.name
        rows, redacted = self.outcomes(results, spec, ctx)
        section = Section(summary={})
        agreement: dict[str, Any] = {}
        if spec.classifier == "judge" and len(rows):
            # A reviewer's first question about an LLM judge: does it agree with the transparent
            # rules on the same (redacted) emails, and where not.
            rules = email_outcomes.RuleClassifier().predict(redacted)
            table, share, kappa = email_outcomes.label_agreement(rows["outcome"].tolist(), rules)
            section.tables[f"{name}_judge_vs_rules"] = table.rename(columns={"first": "judge"})
            agreement = {"judge_rules_agreement": share, "judge_rules_kappa": kappa}
        section.tables[f"{name}_outcomes"] = rows[
            ["unit_id", "model_label", *spec.groups, "persona_name", "outcome"]
        ]
        if not ctx.power_only:
            self._validity_and_models(rows, spec, ctx, section)
            self._table5(rows, redacted, spec, ctx, section)
        section.summary.update(
            stage=spec.stage,
            classifier=spec.classifier,
            groups=list(spec.groups),
            adjust=spec.adjust,
            **agreement,
            models={},
        )
        if spec.classifier == "judge" and spec.judge_stage:
            self._expected(results, spec, ctx, section)
        models = ctx.models_in(rows)
        for model in models:
            part = rows[rows["model_label"] == model]
            section.summary["models"][model] = self._model(part, model, spec, ctx, section)
        if len(models) > 1:
            self._across_models(rows, spec, ctx, models, section)
        return section

    @staticmethod
    def _table5(
        rows: pd.DataFrame,
        redacted: list[str],
        spec: AcceptanceSpec,
        ctx: AnalysisContext,
        section: Section,
    ) -> None:
        """The emails to label by hand (30 per model and group) and, once labelled
        (``labelled``), the paper's Table 5: validity and the classifier's precision, recall
        and F1 against those labels."""
        from biasim.families.hiring_emails.stats import email_outcomes

        shown = rows.assign(text=redacted)[["unit_id", "model_label", *spec.groups, "text"]]
        section.tables[f"{ctx.name}_annotation_sample"] = email_outcomes.annotation_sample(
            shown, spec.groups, seed=ctx.study.seed
        )
        if spec.labelled is None:
            return
        labelled = email_outcomes.read_labelled_emails(ctx.resolve(spec.labelled))
        if "unit_id" not in labelled:
            raise ValueError(f"{spec.labelled}, line 1, column 'unit_id': missing from the header")
        table = email_outcomes.table5(rows[["unit_id", "model_label", "outcome"]], labelled)
        section.tables[f"{ctx.name}_table5"] = table
        section.summary["table5"] = table.to_dict("records")

    @staticmethod
    def _validity_and_models(
        rows: pd.DataFrame, spec: AcceptanceSpec, ctx: AnalysisContext, section: Section
    ) -> None:
        """Invalid answers by group, the unit-level models and the exclusion bounds: what a
        reader of the report weighs beside the tests (``biasim power`` reads none of it)."""
        from biasim.families.hiring_emails.stats import email_outcomes

        name = ctx.name
        validity, pairwise = email_outcomes.validity_by_group(
            rows,
            spec.groups,
            "outcome",
            unit_col=spec.unit_column,
            n_permutations=spec.n_permutations,
            seed=ctx.study.seed,
        )
        section.tables[f"{name}_validity"] = validity
        section.tables[f"{name}_validity_pairwise"] = pairwise
        unit_col = spec.unit_column
        labelled = rows.assign(
            _group=columns.join_columns(rows, spec.groups, ", "),
            _hit=rows["outcome"].map({"accept": True, "reject": False}).astype("boolean"),
        )
        # The name is the unit of the models whatever the tests' unit: its emails are not
        # independent (a model cannot take each email as its own cluster); the stratum (the
        # role) is the crossed item.
        estimates, grades = add_model_estimates(
            section,
            ctx,
            labelled,
            fit_cols=["model_label"],
            group_col="_group",
            hit_col="_hit",
            unit_col=unit_col or "persona_name",
            item_col=spec.strata,
        )
        summary = section.summary
        summary["model_estimates"] = MODEL_ESTIMATES.write(section.tables, ctx.name, estimates)
        summary["model_estimates_item"] = spec.strata
        if grades is not None:
            summary["model_grades"] = GRADES.write(section.tables, ctx.name, grades)
        exclusions = refusals.case_exclusions(
            labelled,
            ["model_label"],
            "_group",
            "_hit",
            unit_col=unit_col,
            alpha=0.05,
            n_permutations=spec.n_permutations,
            seed=ctx.study.seed,
        )
        summary["exclusions"] = EXCLUSIONS.write(section.tables, ctx.name, exclusions)

    def _expected(
        self, results: pd.DataFrame, spec: AcceptanceSpec, ctx: AnalysisContext, section: Section
    ) -> None:
        """A judge answering with log-probabilities: the expected acceptance of each group
        (mean probability the judge labels the email `accept`) and its DPD test."""
        if not is_logprob_stage(ctx, spec.judge_stage or "") or "probabilities" not in results:
            return
        judged = results[results["stage"] == spec.judge_stage]
        groups = list(spec.groups)
        long = judged.assign(
            attribute="+".join(groups),
            value=columns.join_columns(judged, groups, "|"),
        )
        expected = add_expected_decisions(
            section.tables,
            ctx,
            long,
            target="accept",
            case_cols=["model_label", "attribute"],
            n_permutations=spec.n_permutations,
            unit_col=spec.unit_column,
        )
        section.summary["expected"] = summary_of(expected)

    def _model(
        self,
        part: pd.DataFrame,
        model: str,
        spec: AcceptanceSpec,
        ctx: AnalysisContext,
        section: Section,
    ) -> dict[str, Any]:
        seed = ctx.study.seed
        report = self._disparity(part, spec, seed, bounds=not ctx.power_only)
        prefix = slug(ctx.name, model)
        scalars = {}
        for key, value in report.items():
            if isinstance(value, pd.DataFrame):
                section.tables[f"{prefix}_{key}"] = value
            else:
                scalars[key] = value
        # With strata the headline test is the joint one: it relabels each name once for every
        # stratum; the pooled test ignores the strata.
        tests = report.get("joint", report.get("permutation"))
        table1 = None
        if spec.subset and report["n_valid"] and not ctx.power_only:
            table1, table1_tests = self._table1(part, spec, seed, report.get("joint"))
            section.tables[f"{prefix}_table1"] = table1
            section.tables[f"{prefix}_table1_tests"] = table1_tests
        # Without a single valid answer there is nothing to break down (the report says so).
        if report["n_valid"] and not ctx.power_only:
            self._add_breakdowns(part, spec, seed, report, prefix, section)
        reference = report.get("reference")
        return {
            **scalars,
            "test": "joint" if "joint" in report else "pooled",
            "rates": report["rates"].to_dict("records"),
            "impact_ratios": report["impact_ratios"].to_dict("records"),
            "permutation": tests.to_dict("records") if isinstance(tests, pd.DataFrame) else None,
            "reference": reference.to_dict("records") if reference is not None else None,
            # Only where the study asks for Table 1 (`subset`), so other summaries keep their keys.
            **({"table1": table1.to_dict("records")} if table1 is not None else {}),
        }

    @staticmethod
    def _disparity(
        part: pd.DataFrame, spec: AcceptanceSpec, seed: int, bounds: bool = True
    ) -> dict[str, Any]:
        """The disparity report of one model's outcomes, with (``bounds``) the readings that
        survive counting the excluded answers either way, and each group's rate over all its
        answers."""
        unit_col = spec.unit_column
        report = disparity.disparity_report(
            part,
            spec.groups,
            "outcome",
            positive="accept",
            unit_col=unit_col,
            stratum_col=spec.strata,
            reference=spec.reference,
            n_permutations=spec.n_permutations,
            adjust=spec.adjust,
            seed=seed,
            require_positive=False,
        )
        if report["n_excluded"] and bounds:
            # Which group-level readings survive counting the excluded answers either way.
            claims = refusals.group_claims(
                refusals.group_bounds(
                    part,
                    list(spec.groups),
                    "outcome",
                    "accept",
                    invalid=disparity.INVALID,
                    unit_col=unit_col,
                    adjust=spec.adjust,
                    n_permutations=spec.n_permutations,
                    seed=seed,
                ),
                list(spec.groups),
                "accept",
            )
            report["notes"].extend(claims)
        rates = report["rates"]
        rates["rate_all"] = rates["k"] / (rates["n"] + rates["n_excluded"]).where(
            rates["n"] + rates["n_excluded"] > 0
        )
        return report

    @staticmethod
    def _add_breakdowns(
        part: pd.DataFrame,
        spec: AcceptanceSpec,
        seed: int,
        report: dict[str, Any],
        prefix: str,
        section: Section,
    ) -> None:
        """Rates by each ``breakdowns`` column, each cell tested against the population."""
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
                        unit=spec.unit,
                        unit_col="persona_name",
                        stratum_col=column,
                        n_permutations=spec.n_permutations,
                        seed=seed,
                    ),
                    "p_two_sided",
                    spec.adjust,
                )
            )
            section.tables[f"{prefix}_by_{column}_tests"] = row_tests
            section.tables[f"{prefix}_by_{column}"] = disparity.rate_breakdown(
                part, column, spec.groups, "outcome", "accept", tests=row_tests, p_col="p_adjusted"
            )
            if column in spec.breakdown_notes:
                report["notes"].append(_breakdown_note(part, spec, column))

    def _table1(
        self, part: pd.DataFrame, spec: AcceptanceSpec, seed: int, whole: pd.DataFrame | None
    ) -> tuple[pd.DataFrame, pd.DataFrame]:
        """Seed 001's Table 1: rates in the subset and in all rows, each cell marked twice: by
        the joint test within its row (one-sided each way, both directions adjusted together;
        ``whole`` is the report's joint test of all rows, reused when it was run) and, in the
        ``(paper's test)`` columns, by the paper's own (per-stratum email-level tests combined
        by Fisher's method, unadjusted). Returns the table and both tests side by side."""
        assert spec.subset is not None
        flag = part[spec.subset].astype(str).str.lower().isin(["true", "yes", "1"])
        rows, tests = [], []
        for label, rows_of in ((spec.subset, part[flag]), ("all", part)):
            if rows_of.empty:
                continue
            joint = (
                whole.copy()
                if label == "all" and whole is not None
                else disparity.adjust_joint(
                    disparity.joint_vs_population(
                        rows_of,
                        spec.groups,
                        "outcome",
                        "accept",
                        unit_col=spec.unit_column,
                        stratum_col=spec.strata,
                        n_permutations=spec.n_permutations,
                        seed=seed,
                    ),
                    spec.adjust,
                )
            )
            joint["p_marked"] = joint["p_greater_adjusted"].where(
                joint["d"] > 0, joint["p_less_adjusted"]
            )
            both = joint[[*spec.groups, "d", "p_marked"]]
            if spec.strata is not None:
                paper = disparity.papers_stratum_fisher_test(
                    rows_of, spec.groups, "outcome", "accept", stratum_col=spec.strata
                )
                paper = paper[[*spec.groups, "d", "n_strata", "p_marked"]].rename(
                    columns={"d": "d_pooled", "p_marked": "p_papers_test"}
                )
                both = both.merge(paper, on=list(spec.groups), how="left")
            rows.append(rows_of.assign(_rows=label))
            tests.append(both.assign(_rows=label))
        tested = pd.concat(tests, ignore_index=True)
        data = pd.concat(rows)
        order = list(dict.fromkeys(tested["_rows"]))  # the paper's: the subset, then all
        table = disparity.rate_breakdown(
            data,
            "_rows",
            spec.groups,
            "outcome",
            "accept",
            row_order=order,
            tests=tested,
            p_col="p_marked",
        )
        if "p_papers_test" in tested:
            papers = disparity.rate_breakdown(
                data,
                "_rows",
                spec.groups,
                "outcome",
                "accept",
                row_order=order,
                tests=tested,
                p_col="p_papers_test",
            )
            for column in [c for c in papers.columns if c.endswith(" sig")]:
                table[column[: -len(" sig")] + PAPERS_MARK] = papers[column].to_numpy()
        tested = tested.rename(columns={"_rows": "rows", "p_marked": "p_calibrated"})
        tested = tested[["rows", *[c for c in tested.columns if c != "rows"]]]
        return table.rename(columns={"_rows": "rows"}), tested

    def _across_models(
        self,
        rows: pd.DataFrame,
        spec: AcceptanceSpec,
        ctx: AnalysisContext,
        models: list[str],
        section: Section,
    ) -> None:
        """Rates and impact ratios side by side, a figure, and a test per model pair."""
        per_model = section.summary["models"]
        side = []
        for model in models:
            for rate, ratio in zip(
                per_model[model]["rates"], per_model[model]["impact_ratios"], strict=True
            ):
                side.append(
                    {
                        **{g: rate[g] for g in spec.groups},
                        "model_label": model,
                        "rate": rate["rate"],
                        "impact_ratio": ratio["impact_ratio"],
                    }
                )
        long = pd.DataFrame(side)
        wide = long.pivot_table(
            index=spec.groups, columns="model_label", values=["rate", "impact_ratio"]
        )
        wide.columns = [f"{stat}_{model}" for stat, model in wide.columns]
        ordered = [f"{s}_{m}" for m in models for s in ("rate", "impact_ratio")]
        section.tables[f"{ctx.name}_rates_by_model"] = wide.reindex(columns=ordered).reset_index()
        rates = pd.concat(
            [pd.DataFrame(per_model[m]["rates"]).assign(model_label=m) for m in models],
            ignore_index=True,
        )
        section.figures[slug(ctx.name, "rates_by_model")] = figures.plot_rates_by_model(
            rates, group_cols=spec.groups, order=models
        )
        answered = rows[rows["outcome"] != "invalid"]
        group = answered[spec.groups[0]].astype(str)
        for column in spec.groups[1:]:
            group = group + " " + answered[column].astype(str)
        section.summary["model_order"] = models
        tests = model_differences(
            ctx,
            answered.assign(_group=group, _accept=answered["outcome"] == "accept"),
            models=models,
            case_cols=[],
            group_col="_group",
            outcome_col="_accept",
            id_col="unit_id",
            n_permutations=spec.n_permutations,
            adjust=spec.adjust,
        )
        section.summary["model_differences"] = _DIFFERENCES.write(section.tables, ctx.name, tests)

    @classmethod
    def summary_schema(cls) -> dict[str, Any]:
        number = {"type": ["number", "null"]}
        model = {
            "type": "object",
            "required": ["test", "rates", "impact_ratios", "permutation", "reference"],
            "properties": {
                "n_valid": {"type": "integer", "minimum": 0},
                "dpd": number,
                "dpd_p_value": number,
                "test_unit": {"type": "string"},
                "test_units": {"type": "integer", "minimum": 0},
                "test": {"enum": ["joint", "pooled"]},
                "rates": summary_table("rows"),
                "impact_ratios": summary_table("rows"),
                "permutation": {"type": ["array", "null"], "items": {"type": "object"}},
                "reference": {"type": ["array", "null"], "items": {"type": "object"}},
                "table1": summary_table("rows"),
            },
        }
        return {
            "type": "object",
            "required": ["stage", "classifier", "groups", "adjust", "models"],
            "properties": {
                "stage": {"type": "string", "description": "The stage whose emails are read."},
                "classifier": {"type": "string", "description": "How outcomes are labelled."},
                "groups": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "Persona columns compared.",
                },
                "adjust": {"type": "string", "description": "Adjustment of the tests."},
                "models": {
                    "type": "object",
                    "additionalProperties": model,
                    "description": "Model label -> acceptance rates, impact ratios, the DPD and "
                    "its test with the unit it relabels.",
                },
                "judge_rules_agreement": {
                    **number,
                    "description": "Share of emails the judge and the rules label alike.",
                },
                "judge_rules_kappa": {**number, "description": "Cohen's kappa of the same."},
                "exclusions": summary_table("Invalid answers per model and group, tested."),
                "model_estimates": summary_table("The GEE's estimates, clustered on names."),
            },
        }

    def power_tests(self, summary: dict[str, Any]) -> dict[str, Tested]:
        tests = {
            f"{c['model_label']}: expected acceptance DPD (judge log-probabilities)": (
                unit_stats.Tested.of(c, "p_value")
            )
            for c in (summary.get("expected") or {}).get("cases", [])
            if "p_value" in c
        }
        for model, part in summary["models"].items():
            at = f"{model}: " if len(summary["models"]) > 1 else ""
            adjusted = [r["p_adjusted"] for r in part.get("permutation") or []]
            name = "joint test" if part.get("test") == "joint" else "group test"
            unit, n_units = part.get("test_unit"), part.get("test_units")
            tests[f"{at}any group ({name}, {summary['adjust']})"] = unit_stats.Tested(
                min(adjusted) if adjusted else None, unit, n_units
            )
            tests[f"{at}DPD ({part.get('dpd_test', 'none')})"] = unit_stats.Tested(
                part.get("dpd_p_value"), unit, n_units
            )
        return tests

    def selections(
        self, results: pd.DataFrame, spec: AcceptanceSpec, ctx: AnalysisContext
    ) -> pd.DataFrame:
        rows, _ = self.outcomes(results, spec, ctx)
        selected = (rows["outcome"] == "accept").astype("boolean")
        selected[rows["outcome"] == "invalid"] = pd.NA
        return rows.assign(selected=selected)

    def print(self, summary: dict[str, Any], console: Console) -> None:
        for spec, records, _ in _expected_tables(summary):
            spec.print(console, records, summary["name"])
        if "judge_rules_agreement" in summary:
            console.print(
                f"LLM judge vs rule classifier on the same emails: "
                f"{fmt(summary['judge_rules_agreement'], '.1%')} agree, Cohen's kappa "
                f"{fmt(summary['judge_rules_kappa'], '.2f')} (table "
                f"{summary['name']}_judge_vs_rules)"
            )
        groups = summary["groups"]
        for model, part in summary["models"].items():
            table = Table(
                title=f"Acceptance rate by group ({model}, classifier: {summary['classifier']})"
            )
            ratios = {tuple(r[g] for g in groups): r for r in part["impact_ratios"]}
            tests = {tuple(r[g] for g in groups): r for r in part["permutation"] or []}
            for col in (*groups, "acc/n", "excl", "rate", "95% CI", "all", "IR", "p"):
                # Fold rather than cut: a narrow terminal must never show "0.…" for a number.
                table.add_column(col, justify="right", overflow="fold")
            for row in part["rates"]:
                group = tuple(row[g] for g in groups)
                ratio, test = ratios.get(group, {}), tests.get(group, {})
                flag = "!" if ratio.get("four_fifths_flag") else ""
                table.add_row(
                    *[str(v) for v in group],
                    f"{row['k']}/{row['n']}",
                    str(row["n_excluded"]),
                    fmt(row["rate"]),
                    f"[{fmt(row['ci_low'])}, {fmt(row['ci_high'])}]",
                    fmt(row.get("rate_all")),
                    f"{fmt(ratio.get('impact_ratio'), '.2f')}{flag}",
                    fmt(test.get("p_adjusted"), "p"),
                )
            print_table(console, table)
            console.print(
                f"DPD {fmt(part.get('dpd'))} (parity p {format_p(part.get('dpd_p_value'))}), "
                f"population rate {fmt(part.get('population_rate'))}; chance that an unbiased "
                f"model fails four-fifths for some group: "
                f"{fmt(part.get('p_any_flag_by_chance'), '.1%')} "
                f"({disparity.flag_chance_basis(part.get('flag_chance_unit'))}). DPD test: "
                f"{part.get('dpd_test', 'none')}.\n"
                + _ACCEPTANCE_NOTE.format(adjust=summary["adjust"], test=_test_name(part))
                + "\n"
                + _POPULATION_CAVEAT
            )
            for note in part.get("notes", []):
                console.print(Text("note:", style="yellow") + f" {note}")
            if part.get("table1"):
                _print_table1(part["table1"], summary["adjust"], console)
            if part.get("reference"):
                versus = Table(title=f"Each group against {part['reference'][0]['compared_with']}")
                for col in (*groups, "rate", "d", "p", f"p ({summary['adjust']})"):
                    versus.add_column(col, justify="right", no_wrap=True)
                for row in part["reference"]:
                    versus.add_row(
                        *[str(row[g]) for g in groups],
                        fmt(row["rate"]),
                        fmt(row["d"], "+.3f"),
                        fmt(row["p_two_sided"], "p"),
                        fmt(row["p_adjusted"], "p"),
                    )
                print_table(console, versus)
        if summary.get("table5"):
            _print_table5(summary["table5"], summary["classifier"], console)
        for spec in _SHARED:
            if summary.get(spec.key):
                spec.print(console, summary[spec.key], summary["name"])

    def html(self, summary: dict[str, Any], section: HtmlSection) -> None:
        for spec, records, key in _expected_tables(summary):
            spec.html(section, records, ("expected", *key))
        section.paragraph(
            f"Each text of stage {summary['stage']} is labelled accept / reject / invalid by "
            f"the {summary['classifier']} classifier with the applicant's name redacted; rates "
            "are over valid answers, with Wilson 95% intervals."
        )
        if "judge_rules_agreement" in summary:
            section.raw(
                "<p>LLM judge vs the rule classifier on the same emails: "
                + section.number("judge_rules_agreement", summary["judge_rules_agreement"], ".1%")
                + " agree, Cohen's kappa "
                + section.number("judge_rules_kappa", summary["judge_rules_kappa"], ".2f")
                + ".</p>"
            )
        for model, part in summary["models"].items():
            section.heading(f"Model {model or '(default)'}")
            _html_model_headline(("models", model), part, section)
            _html_model_tables(summary, ("models", model), part, section)
            section.paragraph(f"DPD test: {part.get('dpd_test', 'none')}.", muted=True)
            if part.get("table1"):
                _html_table1(("models", model), part["table1"], summary["adjust"], section)
            for note in part.get("notes", []):
                section.paragraph(f"Note: {note}", muted=True)
        if summary.get("table5"):
            section.table(
                summary["table5"],
                key="table5",
                title=f"Table 5: validity and the {summary['classifier']} classifier against "
                "hand labels",
                columns=[Column("model_label", "model"), *_TABLE5_COLUMNS],
                note=_TABLE5_NOTE,
            )
        for spec in _SHARED:
            if summary.get(spec.key):
                spec.html(section, summary[spec.key], spec.key)
        for name in section.figures:
            if "_model_grades" in name:
                section.figure(name, "Models graded by their disparity")
        if summary.get("model_differences"):
            section.figure(slug(summary["name"], "rates_by_model"), "Acceptance rates per model")


def _html_model_headline(at: tuple[str, str], part: dict[str, Any], section: HtmlSection) -> None:
    """One model's DPD and its test, the population rate and the chance of a four-fifths flag."""
    section.raw(
        "<p>DPD "
        + section.number((*at, "dpd"), part.get("dpd"))
        + " (parity p = "
        + section.number((*at, "dpd_p_value"), part.get("dpd_p_value"))
        + "), population rate "
        + section.number((*at, "population_rate"), part.get("population_rate"))
        + "; chance that an unbiased model fails four-fifths for some group: "
        + section.number((*at, "p_any_flag_by_chance"), part["p_any_flag_by_chance"], ".1%")
        + f" ({disparity.flag_chance_basis(part.get('flag_chance_unit'))}).</p>"
    )


def _html_model_tables(
    summary: dict[str, Any], at: tuple[str, str], part: dict[str, Any], section: HtmlSection
) -> None:
    """One model's rates and impact ratios by group, and its tests of each group."""
    text = [Column(g) for g in summary["groups"]]
    section.table(
        part["rates"],
        key=(*at, "rates"),
        title="Acceptance rate by group",
        columns=[
            *text,
            Column("n", "valid n", "int"),
            Column("k", "accepted", "int"),
            Column("n_excluded", "excluded", "int"),
            Column("rate", "rate", ".3f"),
            Column("ci_low", "95% CI", "ci", upper="ci_high"),
            Column("rate_all", "accepted / all emails", ".3f"),
        ],
    )
    section.table(
        part["impact_ratios"],
        key=(*at, "impact_ratios"),
        title="Impact ratios (rate / highest rate)",
        columns=[
            *text,
            Column("impact_ratio", "impact ratio", ".3f"),
            Column("four_fifths_flag", "below 4/5", "text"),
        ],
    )
    test_columns = [
        *text,
        Column("rate", "rate", ".3f"),
        Column("d", "d", "+.3f"),
        Column("p_two_sided", "p", "p"),
        Column("p_adjusted", f"p ({summary['adjust']})", "p"),
    ]
    if part.get("permutation"):
        section.table(
            part["permutation"],
            key=(*at, "permutation"),
            title=_test_name(part).capitalize(),
            columns=test_columns,
            note=_POPULATION_CAVEAT,
        )
    if part.get("reference"):
        section.table(
            part["reference"],
            key=(*at, "reference"),
            title=f"Each group against {part['reference'][0]['compared_with']}",
            columns=test_columns,
        )
